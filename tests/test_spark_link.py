"""The driver's rendezvous link (slash.spark._tasks): HMAC-authenticated,
answers as soon as every rank arrived, refuses a wrong token, and a peer that
connects and never speaks does not hold the others up."""
import socket
import time

import pytest

pytest.importorskip("pyspark")

from slash.spark._tasks import LinkListener, Rendezvous, link_connect  # noqa: E402

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
    early.on_message(0, ("error", "Timeout", "x"))  # other messages are not "written"
    assert early.frame({0: (3, "/results/q/part-00000.parquet")}) == ("frame", 1)
