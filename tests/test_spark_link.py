"""The driver's rendezvous link (slash.spark._tasks): HMAC-authenticated,
answers as soon as every rank arrived, refuses a wrong token, and a peer that
connects and never speaks does not hold the others up; a task's error comes
over it as the run layer's Error record, read as a local rank's is."""
import socket
import threading
import time

import pytest

pytest.importorskip("pyspark")

from slash.errors import (PeerDisconnected, SchemaError, SlashError, SystemFailure,  # noqa: E402
                          TaskFailed)
from slash.run.failure import reported  # noqa: E402
from slash.run.protocol import Error  # noqa: E402
from slash.spark._tasks import (LinkListener, Rendezvous, link_connect,  # noqa: E402
                                raise_task_failure, report_error)

TOKEN = "ab" * 16


def join(address, rank, token=TOKEN):
    c = link_connect(address, token, 5.0)
    c.send((7, rank, f"addr-{rank}"))
    return c


def test_every_rank_gets_the_address_list_once_all_arrived():
    r = Rendezvous("127.0.0.1", 2, TOKEN)
    try:
        a = join(r.address, 1)
        assert not a.poll(0.2)  # rank 0 is missing
        b = join(r.address, 0)
        for c in (a, b):
            assert c.poll(5)
            addresses, started_ms = c.recv()
            assert addresses == ["addr-0", "addr-1"] and started_ms > 0
    finally:
        r.close()


def test_a_wrong_token_is_refused():
    from multiprocessing import AuthenticationError

    r = Rendezvous("127.0.0.1", 1, TOKEN)
    try:
        with pytest.raises(AuthenticationError):
            link_connect(r.address, "cd" * 16, 5.0)
    finally:
        r.close()


def test_a_mute_peer_does_not_block_the_others(monkeypatch):
    monkeypatch.setattr(LinkListener, "handshake_timeout", 0.3)
    r = Rendezvous("127.0.0.1", 1, TOKEN)
    mute = socket.create_connection(r.address)
    try:
        time.sleep(0.05)
        t0 = time.monotonic()
        c = join(r.address, 0)
        assert c.poll(5), "the rendezvous stayed stuck on the mute peer"
        assert c.recv()[0] == ["addr-0"]
        assert time.monotonic() - t0 < 3
        time.sleep(0.5)  # the handshake timeout does not apply to the open link
        r.send_all(("stop",))
        assert c.poll(5) and c.recv() == ("stop",)
    finally:
        mute.close()
        r.close()


class _Reader:
    """Stands in for ``spark.read``: counts listings and returns a marker."""

    def __init__(self):
        self.listed = []

    def schema(self, _):
        return self

    def parquet(self, d):
        self.listed.append(d)
        return ("frame", len(self.listed))


class _Spark:
    def __init__(self):
        self.read = _Reader()


def _early(monkeypatch, n):
    from slash.spark import batch

    monkeypatch.setattr(batch, "_spark_schema", lambda path: None)
    spark = _Spark()
    return batch.EarlyFrame(spark, "/results/q", n), spark.read


def test_results_are_listed_once_every_task_has_written(monkeypatch):
    early, reader = _early(monkeypatch, 2)
    early.on_message(1, ("written", 11, "/results/q/part-00001.parquet"))
    assert reader.listed == []  # rank 0 has not written yet
    early.on_message(0, ("written", 10, "/results/q/part-00000.parquet"))
    final = {0: (10, "/results/q/part-00000.parquet"), 1: (11, "/results/q/part-00001.parquet")}
    assert early.frame(final) == ("frame", 1)
    assert reader.listed == ["/results/q"]  # not listed a second time


def test_results_of_another_attempt_are_listed_again(monkeypatch):
    early, reader = _early(monkeypatch, 2)
    early.on_message(0, ("written", 10, "/results/q/part-00000.parquet"))
    early.on_message(1, ("written", 11, "/results/q/part-00001.parquet"))
    # the stage was retried: rank 1's file that counts is another attempt's
    final = {0: (10, "/results/q/part-00000.parquet"), 1: (12, "/results/q/part-00001.parquet")}
    assert early.frame(final) == ("frame", 2)
    assert reader.listed == ["/results/q", "/results/q"]


def test_results_are_listed_after_the_job_without_written_messages(monkeypatch):
    early, reader = _early(monkeypatch, 1)
    early.on_message(0, Error(0, None, "Timeout: x", ""))  # other messages are not "written"
    assert early.frame({0: (3, "/results/q/part-00000.parquet")}) == ("frame", 1)


def _report(conn, rank, make):
    """What a task's except block sends for the error ``make()`` returns."""
    try:
        raise make()
    except BaseException as e:
        report_error(conn, rank, e)


def _reports_on(r, n):
    deadline = time.monotonic() + 5
    while len(r.errors) < n:
        assert time.monotonic() < deadline, "the reports did not arrive"
        time.sleep(0.01)


def test_a_tasks_error_reaches_the_driver_as_the_error_it_raised_like_a_local_ranks():
    """A task reports its error as the run layer's Error record: on the
    driver, the first report that is not a consequence of another (a peer
    gone) is the root cause, and reported() makes of it the task's own error
    (type and attributes kept, the rank named), as for a local rank."""
    r = Rendezvous("127.0.0.1", 2, TOKEN)
    try:
        a, b = join(r.address, 0), join(r.address, 1)
        for c in (a, b):
            assert c.poll(5) and c.recv()
        _report(b, 1, lambda: PeerDisconnected("rank 0 closed its channel"))

        def schema_error():
            e = SchemaError("column 'colour' is not in the input")
            e.column = "colour"
            return e
        _report(a, 0, schema_error)
        _reports_on(r, 2)
        rep = r.root_cause(wait=0)
        assert isinstance(rep, Error) and rep.rank == 0
        err = reported(rep).error
        assert type(err) is SchemaError and err.column == "colour"
        assert str(err) == "executor rank 0: column 'colour' is not in the input"
        assert r.silent_loss() is None
    finally:
        a.close()
        b.close()
        r.close()


def test_a_batch_jobs_failure_names_the_reporting_rank_and_its_error():
    rep = Error(1, SchemaError("no column 'colour'"), "SchemaError: no column 'colour'", "")
    with pytest.raises(TaskFailed) as e:
        raise_task_failure(RuntimeError("Job aborted"), "slash.spark.window_aggregate", rep)
    assert str(e.value) == ("slash.spark.window_aggregate: Slash executor rank 1 failed: "
                            "SchemaError: no column 'colour'")
    assert (e.value.rank, e.value.reason) == (1, "SchemaError: no column 'colour'")


def test_an_error_that_does_not_pickle_is_reported_as_its_type_and_text():
    class Holding(SlashError):
        def __init__(self, text):
            super().__init__(text)
            self.lock = threading.Lock()

    r = Rendezvous("127.0.0.1", 1, TOKEN)
    try:
        a = join(r.address, 0)
        assert a.poll(5) and a.recv()
        _report(a, 0, lambda: Holding("holds a lock"))
        _reports_on(r, 1)
        rep = r.root_cause(wait=0)
        assert rep.error is None and rep.text == "Holding: holds a lock"
        err = reported(rep).error
        assert type(err) is SystemFailure and "executor rank 0 failed: Holding: holds a lock" in str(err)
    finally:
        a.close()
        r.close()
