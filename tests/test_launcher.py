"""The one launcher of local executor groups (slash.run.launcher) and slash.runner.run
on top of it: a dead worker fails the run at once naming its rank, an executor that
fails while setting up fails the run with its own error, output paths are checked
up front and named as given, and more executors than cores is warned about."""
from __future__ import annotations

import logging
import os
import signal
import time

import pyarrow as pa
import pytest

from slash.errors import InvalidArgument, SlashError, SystemFailure
from slash.executor import GroupConfig
from slash.run.launcher import ProcessGroup, describe_exit
from slash.query import Query
from slash.runner import run
from slash.sources import TableSource

QUERY = Query(time="t", window="tumbling:10s", key="k", aggregates=["count"])


def _table(rows: int = 3000) -> pa.Table:
    return pa.table({"t": [i * 10 for i in range(rows)], "k": [i % 7 for i in range(rows)]})


def _echo(rank: int, link) -> None:
    link.put(("ok", rank, link.get(timeout=30) * 10))


def _die_by_signal(rank: int, link) -> None:
    link.put(("hello", rank))
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    link.get(timeout=60)  # the others wait for the parent, as executors wait for peers


def _exit_silently(rank: int, link) -> None:
    pass


def _exit_leaving_a_message_unread(rank: int, link) -> None:
    link.put(("hello", rank))
    time.sleep(1.0)  # the parent's message arrives and is never read


class KillerSource(TableSource):
    """Rank 1 kills its own process with SIGKILL after its first item (an
    injected fault mid-run: rank 0 is then waiting on it in the executor)."""

    def read(self, rank, n, columns=None, *args, **kwargs):
        for item in super().read(rank, n, columns, *args, **kwargs):
            yield item
            if rank == 1:  # resumed: the first item has been pushed
                os.kill(os.getpid(), signal.SIGKILL)


def test_group_exchanges_messages_both_ways():
    with ProcessGroup(3, _echo, lambda r: (r,)) as g:
        for r in range(3):
            g.send(r, r + 1)
        got = sorted(g.recv(timeout=60)[2] for _ in range(3))
    assert got == [10, 20, 30]


def test_group_names_a_rank_killed_by_a_signal():
    with pytest.raises(SystemFailure, match=r"executor rank 1 died \(killed by signal SIGKILL\)"):
        with ProcessGroup(2, _die_by_signal, lambda r: (r,)) as g:
            while True:
                g.recv(timeout=60)


def test_group_treats_an_exit_without_a_result_as_a_failure():
    with pytest.raises(SystemFailure, match=r"executor rank 0 died \(exit code 0\) before reporting"):
        with ProcessGroup(1, _exit_silently, lambda r: (r,)) as g:
            g.recv(timeout=60)


def test_a_rank_that_exits_leaving_a_message_unread_is_a_failure_not_a_reset_pipe():
    # its end of the pipe resets (ECONNRESET) instead of ending: still a rank that died
    with pytest.raises(SystemFailure, match=r"executor rank 0 died \(exit code 0\) before reporting"):
        with ProcessGroup(1, _exit_leaving_a_message_unread, lambda r: (r,)) as g:
            assert g.recv(timeout=60)[0] == "hello"
            g.send(0, "never read")
            time.sleep(2.0)
            g.recv(timeout=60)


def test_describe_exit_names_signals_and_codes():
    assert describe_exit(-9) == "killed by signal SIGKILL"
    assert describe_exit(3) == "exit code 3"


def test_run_fails_at_once_naming_an_executor_killed_mid_run():
    src = KillerSource(_table())
    t0 = time.monotonic()
    with pytest.raises(SystemFailure, match=r"rank 1 died \(killed by signal SIGKILL\)"):
        run(QUERY, src, executors=2, timeout=120, group=GroupConfig(isolation="process"))
    assert time.monotonic() - t0 < 60  # not the run's timeout (120 s): noticed at the death


def test_run_fails_with_the_transports_own_error_when_setup_fails():
    from slash.executor import Executor

    try:
        Executor.listen("ofi:verbs", token="x" * 32).close()
        pytest.skip("this machine has a verbs provider")
    except SlashError as e:
        own = str(e)
    t0 = time.monotonic()
    with pytest.raises(SlashError) as got:
        run(QUERY, _table(100), executors=1, transport="ofi:verbs")
    assert time.monotonic() - t0 < 10
    assert "executor rank 0" in str(got.value) and own in str(got.value)


def test_unwritable_output_is_named_as_given(tmp_path):
    path = str(tmp_path / "missing-dir" / "out.parquet")
    with pytest.raises(InvalidArgument) as got:
        run(QUERY, _table(100), executors=1, output=path)
    assert repr(path) in str(got.value) and ".slash-" not in str(got.value)


def test_more_executors_than_cores_is_warned_about(caplog, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    with caplog.at_level(logging.WARNING, logger="slash.runner"):
        result = run(QUERY, _table(100), executors=2)
    assert result.num_rows > 0
    assert any("2 executors on 1 cores" in r.getMessage() for r in caplog.records)
