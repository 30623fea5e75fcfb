"""Exactly-once recovery of window joins: slash.runner.run(JoinQuery, (left,
right), checkpoint=DIR).

The reference is the failure-free run of the same join, itself checked
against DuckDB: a run whose worker is SIGKILLed (test hook SLASH_TEST_KILL,
see slash.run.recovery.checkpointed) after a checkpoint committed, restarted from it with the
join stores (both sides' buffered rows) restored, gives the same pairs row
for row, none twice, over shm and ofi:tcp."""
import functools
import time

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import slash
from slash.executor import GroupConfig
from slash.query import JoinQuery
from slash.runner import run
from slash.sources import GeneratorSource

BATCHES, ROWS = 24, 300
SCHEMA = {"left": pa.schema([("t", pa.int64()), ("k", pa.int64()), ("a", pa.int64())]),
          "right": pa.schema([("t", pa.int64()), ("k", pa.int64()), ("b", pa.int64())])}


def _batch(side: str, rank: int, i: int) -> pa.RecordBatch:
    rng = np.random.default_rng([0 if side == "left" else 1, rank, i])
    # batch i: the left side's times in [i/2 s, i/2 s + 250 ms), the right side's in the next
    # 250 ms, so the merge by time pushes whole batches, one side after the other
    t = i * 500 + (0 if side == "left" else 250) + np.sort(rng.integers(0, 250, ROWS))
    return pa.record_batch([pa.array(t), pa.array(rng.integers(0, 2000, ROWS)),
                            pa.array(rng.integers(0, 10**6, ROWS))], schema=SCHEMA[side])


def make(side: str, rank: int, n: int, pace: float = 0.02):
    """Deterministic batches of one side for (rank, n); paced so both ranks
    are still pushing when rank 0 asks for cuts."""
    for i in range(BATCHES):
        if i % 9 != 8:  # a gap now and then: sessions close in between
            time.sleep(pace)
            yield _batch(side, rank, i)


def _sources():
    return (GeneratorSource(functools.partial(make, "left"), SCHEMA["left"]),
            GeneratorSource(functools.partial(make, "right"), SCHEMA["right"]))


def _query(window: str) -> JoinQuery:
    return JoinQuery(time="t", window=window, on="k", lateness="1s")


_reference = {}


def reference(window: str) -> pa.Table:
    if window not in _reference:
        _reference[window] = run(_query(window), _sources(), executors=2)
    return _reference[window]


def _sorted_rows(t: pa.Table):
    return sorted(tuple(r.values()) for r in t.to_pylist())


def _run_killed(window: str, tmp_path, monkeypatch, kill: str, transport: str = "shm"):
    monkeypatch.setenv("SLASH_TEST_KILL", kill)
    m = {}
    got = run(_query(window), _sources(), executors=2, checkpoint=str(tmp_path / "ck"),
              checkpoint_every="4 batches", metrics=m,
              group=GroupConfig(epoch_ms=10, lateness="1s", transport=transport))
    return got, m


def test_failure_free_tumbling_join_equals_duckdb():
    con = duckdb.connect()
    con.register("lhs", pa.Table.from_batches([b for r in range(2) for b in make("left", r, 2, 0)]))
    con.register("rhs", pa.Table.from_batches([b for r in range(2) for b in make("right", r, 2, 0)]))
    want = con.sql("select l.t - l.t % 2000, l.k, l.a, r.b from lhs l join rhs r "
                   "on l.k = r.k and l.t // 2000 = r.t // 2000").fetchall()
    got = reference("tumbling:2s")
    ws = got.column("window_start").cast(pa.int64()).to_pylist() \
        if not pa.types.is_timestamp(got.schema.field("window_start").type) else \
        got.column("window_start").cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
    rows = list(zip(ws, got.column("k").to_pylist(), got.column("left_a").to_pylist(),
                    got.column("right_b").to_pylist()))
    assert len(rows) == len(want) > 1000
    assert sorted(rows) == sorted(want)


NEEDS_OFI = pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)")


@pytest.mark.parametrize("window,kill,transport", [
    ("tumbling:2s", "1:20:0:1", "shm"), ("tumbling:2s", "0:30:0:2", "shm"),
    ("session:1s", "1:25:0:1", "shm"),
    pytest.param("tumbling:2s", "1:20:0:1", "ofi:tcp", marks=NEEDS_OFI)])
def test_killed_join_worker_gives_the_failure_free_pairs(window, kill, transport, tmp_path,
                                                         monkeypatch):
    got, m = _run_killed(window, tmp_path, monkeypatch, kill, transport)
    want = reference(window)
    assert got.num_rows == want.num_rows > 0
    assert _sorted_rows(got) == _sorted_rows(want)  # each pair once: a multiset equality
    assert len(m["recoveries"]) == 1
    assert m["recoveries"][0]["from_checkpoint"] is not None  # restored join stores, not a rerun


def test_join_worker_killed_inside_a_checkpoint_write_resumes_from_the_one_before(tmp_path,
                                                                                  monkeypatch):
    got, m = _run_killed("tumbling:2s", tmp_path, monkeypatch, "1:15:0:1:w")
    assert _sorted_rows(got) == _sorted_rows(reference("tumbling:2s"))
    assert len(m["recoveries"]) == 1

