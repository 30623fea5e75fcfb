"""Executors run on threads of the calling process unless a setting needs a
process per rank (a checkpoint, live scaling, a latency target, realtime
pacing, a fault injected by the test hook). Small jobs run on one executor
(``slash.runner.IN_PROCESS_ROWS``) when the executor count is left to
``run``. Answers are checked against DuckDB either way."""
import os
import subprocess
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.errors import SystemFailure
from slash.executor import GroupConfig
from slash.run.launcher import ProcessGroup
from slash.query import Query
from slash.runner import IN_PROCESS_ROWS, executor_count, run, runs_in_process
from slash.sources import FileSource

from _rdma import needs_verbs

QUERY = Query(time="ts", window="tumbling:10s", key="k", aggregates=["count", "sum:x"])


@pytest.fixture
def table():
    rng = np.random.default_rng(11)
    n = 40_000
    return pa.table({"ts": np.sort(rng.integers(0, 600_000, n)), "k": rng.integers(0, 100, n),
                     "x": pa.array(rng.random(n), mask=rng.random(n) < 0.1)})


def _duckdb(tbl):
    got = duckdb.sql("SELECT ts // 10000 * 10000 AS ws, k, count(*), sum(x) FROM tbl "
                     "GROUP BY ALL ORDER BY ws, k").fetchall()
    return [g[:3] for g in got], [g[3] for g in got]


def _same(result, table):
    keys, sums = _duckdb(table)
    assert list(zip(result["window_start"].to_pylist(), result["k"].to_pylist(),
                    result["count"].to_pylist())) == keys
    got = result["sum_x"].to_pylist()
    assert len(got) == len(sums)
    assert all(a == b if a is None or b is None else abs(a - b) <= 1e-9 * max(1.0, abs(b))
               for a, b in zip(got, sums))  # a group whose x are all null sums to null


def test_a_small_input_runs_on_one_executor_in_this_process(table):
    m = {}
    result = run(QUERY, table, metrics=m)
    assert m["in_process"] and m["executors"] == 1
    _same(result, table)


def test_an_explicit_executor_count_runs_that_many_executors_in_this_process(table):
    m = {}
    result = run(QUERY, table, executors=2, metrics=m)
    assert m["in_process"] and m["executors"] == 2
    _same(result, table)


@needs_verbs
def test_four_executors_over_verbs_in_this_process_equal_duckdb(table):
    """Four ranks on threads exchange their deltas over an RDMA device
    (scripts/verbs-tests.sh: soft-RoCE in a guest): no process start, which
    costs most under the guest's software CPU."""
    m = {}
    result = run(QUERY, table, executors=4, group=GroupConfig(transport="ofi:verbs"), metrics=m)
    assert m["in_process"] and m["executors"] == 4
    _same(result, table)


def test_a_checkpointed_run_runs_its_executors_in_processes(tmp_path, table):
    m = {}
    result = run(QUERY, table, executors=2, metrics=m, checkpoint=str(tmp_path / "ck"))
    assert not m.get("in_process") and m["executors"] == 2
    _same(result, table)


def test_a_group_that_asks_for_isolation_runs_its_executors_in_processes(table):
    m = {}
    result = run(QUERY, table, executors=2, metrics=m, group=GroupConfig(isolation="process"))
    assert not m["in_process"] and m["executors"] == 2
    _same(result, table)


def test_settings_that_need_a_process_per_rank_are_not_run_in_process(tmp_path, table,
                                                                      monkeypatch):
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    src = FileSource(str(path))
    assert runs_in_process(src, None)
    assert runs_in_process(src, 1)
    assert not runs_in_process(src, None, checkpoint=str(tmp_path))
    assert not runs_in_process(src, None, max_executors=2)
    assert not runs_in_process(src, None, latency_target="1s")
    assert not runs_in_process(src, None, realtime=True)
    assert not runs_in_process(src, None, isolation=True)
    monkeypatch.setenv("SLASH_TEST_KILL", "1:5")
    assert not runs_in_process(src, None)  # the hook kills a process


def test_a_large_input_left_to_run_gets_one_executor_per_core(tmp_path, table):
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    src = FileSource(str(path))
    assert executor_count(src, None, True) == 1
    assert executor_count(src, 3, True) == 3
    src.units = src.units * (IN_PROCESS_ROWS // table.num_rows + 1)  # as if it held more rows
    assert runs_in_process(src, None)
    assert executor_count(src, None, True) == (os.cpu_count() or 1)


def _no_report(rank, link):
    raise RuntimeError("gone without a word")


def test_an_in_process_rank_that_ends_without_its_result_is_reported_dead():
    with pytest.raises(SystemFailure, match=r"executor rank 0 died \(exit code 1\)"):
        with ProcessGroup(1, _no_report, lambda r: (r,), in_process=True) as g:
            g.recv(timeout=10)


def test_slash_run_of_a_small_file_runs_in_its_own_process(tmp_path, table):
    path, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(table, path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-m", "slash", "run", "--input", str(path), "--time", "ts",
                        "--window", "tumbling:10s", "--key", "k", "--agg", "count", "--agg",
                        "sum:x", "--output", str(out)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "1 executor in this process" in r.stdout
    result = pq.read_table(out)
    _same(result, table)


def test_the_collector_stays_off_until_the_last_rank_on_a_thread_leaves_its_loop():
    import gc
    import threading

    from slash.run.gc import no_cyclic_gc

    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with no_cyclic_gc():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        with no_cyclic_gc():
            second_in.set()
            first_out.wait(10)
            seen["after the first left"] = gc.isenabled()

    ts = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert seen == {"after the first left": False}
    assert gc.isenabled()
