"""A checkpointed window join resumed with another executor count (issues 16 and 17).

Both inputs are FileSources whose times overlap batch by batch, so the
join's merge by event time pushes most batches in parts and a cut finds rows
held back on both sides. A checkpoint cut by 2 executors resumes with 1 and
3: the pairs equal the failure-free run's (itself checked against DuckDB),
row for row, each pair once, and every input row is read exactly once in
all. A join over a generator refuses another count, naming why."""
import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.errors import NotSupported, SystemFailure
from slash.executor import GroupConfig
from slash.query import JoinQuery
from slash.runner import run
from slash.sources import FileSource

from test_recovery_join import _sorted_rows
from test_recovery_join import _sources as _generators

BATCHES, ROWS, FILES = 20, 200, 4
SCHEMA = {"left": pa.schema([("t", pa.int64()), ("k", pa.int64()), ("a", pa.int64())]),
          "right": pa.schema([("t", pa.int64()), ("k", pa.int64()), ("b", pa.int64())])}


def _batch(side: str, part: int, i: int) -> pa.RecordBatch:
    """Row group i of one side's file part: times in [i/2 s, i/2 s + 500 ms)
    on the left, 250 ms later on the right, so the two sides' batches
    overlap by half and the merge by time pushes each batch in parts."""
    rng = np.random.default_rng([0 if side == "left" else 1, part, i])
    t = i * 500 + (0 if side == "left" else 250) + np.sort(rng.integers(0, 500, ROWS))
    return pa.record_batch([pa.array(t), pa.array(rng.integers(0, 1000, ROWS)),
                            pa.array(rng.integers(0, 10**6, ROWS))], schema=SCHEMA[side])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Per side, FILES Parquet files of one row group per half second (a gap
    now and then, so sessions close in between)."""
    d = tmp_path_factory.mktemp("join-input")
    out = {}
    for side in ("left", "right"):
        (d / side).mkdir()
        for f in range(FILES):
            batches = [_batch(side, f, i) for i in range(BATCHES) if i % 7 != 6]
            pq.write_table(pa.Table.from_batches(batches), str(d / side / f"part-{f}.parquet"),
                           row_group_size=ROWS)
        out[side] = str(d / side)
    return out


def _files(inputs):
    return FileSource(inputs["left"], time="t"), FileSource(inputs["right"], time="t")


def _query(window: str) -> JoinQuery:
    return JoinQuery(time="t", window=window, on="k", lateness="1s")


_ref = {}


def reference(window, inputs):
    if window not in _ref:
        _ref[window] = run(_query(window), _files(inputs), executors=2)
    return _ref[window]


def _checkpointed(window, sources, d, n, every="4 batches", **kw):
    m = {}
    got = run(_query(window), sources, executors=n, checkpoint=str(d), metrics=m,
              checkpoint_every=every, group=GroupConfig(epoch_ms=10, lateness="1s"), **kw)
    return got, m


def _cut_with_two(window, sources, d, monkeypatch):
    """Two executors take checkpoints, then rank 1 dies and the run gives
    up: the directory holds checkpoints of 2 executors."""
    monkeypatch.setenv("SLASH_TEST_KILL", "1:12:0:2")  # rank 1, push 12, after 2 cuts
    with pytest.raises(SystemFailure):
        _checkpointed(window, sources, d, 2, max_restarts=0)
    monkeypatch.delenv("SLASH_TEST_KILL")


def test_failure_free_file_join_equals_duckdb(inputs):
    got = reference("tumbling:2s", inputs)
    want = duckdb.sql(
        f"select l.t - l.t % 2000, l.k, l.a, r.b "
        f"from read_parquet('{inputs['left']}/*.parquet') l "
        f"join read_parquet('{inputs['right']}/*.parquet') r "
        f"on l.k = r.k and l.t // 2000 = r.t // 2000").fetchall()
    ws = got.column("window_start").cast(pa.int64()).to_pylist()
    rows = list(zip(ws, got.column("k").to_pylist(), got.column("left_a").to_pylist(),
                    got.column("right_b").to_pylist()))
    assert len(rows) == len(want) > 1000
    assert sorted(rows) == sorted(want)


@pytest.mark.parametrize("window,n", [("tumbling:2s", 1), ("tumbling:2s", 3),
                                      ("session:1s", 1), ("session:1s", 3)])
def test_join_checkpoint_of_two_executors_resumes_with_another_count(window, n, inputs,
                                                                      tmp_path, monkeypatch):
    _cut_with_two(window, _files(inputs), tmp_path, monkeypatch)
    newest = sorted(tmp_path.glob("chk-*"))[-1]
    sides = [json.loads((newest / f"rank-{r}.json").read_text())["sides"] for r in range(2)]
    assert any(s[side]["held"] for s in sides for side in s)  # a batch was cut in parts
    got, m = _checkpointed(window, _files(inputs), tmp_path, n, every="200 batches")
    assert m["resumed_from"] is not None  # restored join stores, not a fresh start
    assert m["executors"] == n
    want = reference(window, inputs)
    assert got.num_rows == want.num_rows > 0
    assert _sorted_rows(got) == _sorted_rows(want)  # each pair once: a multiset equality
    assert m["late_records"] == 0
    # every input row read exactly once over both runs (held-back rows included)
    assert m["records_in"] == sum(s.rows for s in _files(inputs))


def test_join_checkpoint_of_files_resumes_with_the_same_count(inputs, tmp_path, monkeypatch):
    _cut_with_two("tumbling:2s", _files(inputs), tmp_path, monkeypatch)
    got, m = _checkpointed("tumbling:2s", _files(inputs), tmp_path, 2, every="200 batches")
    assert m["resumed_from"] is not None
    assert _sorted_rows(got) == _sorted_rows(reference("tumbling:2s", inputs))
    assert m["records_in"] == sum(s.rows for s in _files(inputs))


def test_join_over_a_generator_refuses_another_executor_count_naming_why(tmp_path,
                                                                         monkeypatch):
    _cut_with_two("tumbling:2s", _generators(), tmp_path, monkeypatch)
    with pytest.raises(NotSupported, match=r"cut with 2 executors.*left input is not a "
                                           r"FileSource.*make\(rank, n\).*executors=2"):
        _checkpointed("tumbling:2s", _generators(), tmp_path, 3)
