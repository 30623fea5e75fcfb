"""Capabilities of slash.runner.run that compose (issue 25, "everything
composes"): each combination that used to be refused is run and compared
with the same query run without the feature, and with DuckDB.

Workers are killed through the documented test hook SLASH_TEST_KILL
(slash.run.recovery.checkpointed) so that each combination is also shown to survive a
restart from a checkpoint exactly once."""
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.executor import GroupConfig
from slash.query import JoinQuery, Query
from slash.runner import run
from slash.sources import FileSource
from test_recovery_more import _as_rows  # (window start ms, key, count, sum_v) rows

FILES, GROUPS, ROWS = 4, 5, 2000  # 4 files of 5 row groups of 2000 rows
SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])


def _file_table(f: int) -> pa.Table:
    """File f's rows: row group g holds times in [(f * GROUPS + g) s, + 1 s)."""
    rng = np.random.default_rng(f)
    parts = []
    for g in range(GROUPS):
        t = (f * GROUPS + g) * 1000 + np.sort(rng.integers(0, 1000, ROWS))
        parts.append(pa.table([pa.array(t), pa.array(rng.integers(0, 30, ROWS)),
                               pa.array(rng.integers(0, 100, ROWS))], schema=SCHEMA))
    return pa.concat_tables(parts)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("compose-input")
    for f in range(FILES):
        pq.write_table(_file_table(f), str(d / f"part-{f}.parquet"), row_group_size=ROWS)
    return str(d)


def _all_rows() -> pa.Table:
    return pa.concat_tables([_file_table(f) for f in range(FILES)])


def _agg_query() -> Query:
    return Query(time="t", window="tumbling:2s", key="k", aggregates=["count", "sum:v"])


def _rows(t: pa.Table):
    return sorted(tuple(r.values()) for r in t.to_pylist())


def _duckdb_agg(table: pa.Table):
    con = duckdb.connect()
    con.register("ev", table)
    return con.sql("select (t // 2000) * 2000, k, count(*), sum(v) from ev "
                   "group by all order by 1, 2").fetchall()


# ---- rate= with checkpoint= --------------------------------------------------------------
RATE = 10_000  # records/s over the group: the 40,000 rows take at least 4 s (unpaced: ~2 s)


def test_rate_with_checkpoint_paces_the_input_and_survives_a_restart(files, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("SLASH_TEST_KILL", "1:6:0:1")  # rank 1 at push 6, after one cut
    m = {}
    t0 = time.monotonic()
    got = run(_agg_query(), FileSource(files), executors=2, rate=RATE,
              checkpoint=str(tmp_path / "ck"), checkpoint_every="2 batches",
              group=GroupConfig(epoch_ms=10), metrics=m)
    took = time.monotonic() - t0
    assert _as_rows(got) == _duckdb_agg(_all_rows())
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["from_checkpoint"] is not None
    # paced: every row read at most RATE/s, the rows after the cut again after the restart
    assert took >= FILES * GROUPS * ROWS / RATE


def test_rate_with_checkpoint_gives_the_unpaced_uncheckpointed_result(files, tmp_path):
    got = run(_agg_query(), FileSource(files), executors=2, rate=4 * RATE,
              checkpoint=str(tmp_path / "ck"), checkpoint_every="3 batches")
    assert _rows(got) == _rows(run(_agg_query(), FileSource(files), executors=2))


JOIN_GROUPS = 2  # row groups per file of each side: 2 files a side, 16,000 rows in all
JOIN_ROWS = 2 * 2 * JOIN_GROUPS * ROWS
JOIN_RATE = 4_000  # records/s: the join's input takes at least 4 s


def _join_sides(d):
    """Two FileSources over the same times: the left with ``a``, the right with ``b``."""
    for side, col in (("left", "a"), ("right", "b")):
        (d / side).mkdir()
        for f in range(2):
            t = _file_table(f + (0 if side == "left" else 2)).slice(0, JOIN_GROUPS * ROWS)
            t = pa.table({"t": t.column("t").to_numpy() % (JOIN_GROUPS * 1000)
                          + f * JOIN_GROUPS * 1000,
                          "k": pa.array(t.column("k").to_numpy() * 100 + t.column("v").to_numpy()
                                        + f * 10_000),
                          col: t.column("v")})
            pq.write_table(t, str(d / side / f"part-{f}.parquet"), row_group_size=ROWS)
    return FileSource(str(d / "left")), FileSource(str(d / "right"))


def test_join_with_rate_and_checkpoint_gives_the_pairs_of_duckdb(tmp_path, monkeypatch):
    left, right = _join_sides(tmp_path)
    monkeypatch.setenv("SLASH_TEST_KILL", "0:5:0:1")
    q = JoinQuery(time="t", window="tumbling:2s", on="k")
    m = {}
    t0 = time.monotonic()
    got = run(q, (left, right), executors=2, rate=JOIN_RATE, checkpoint=str(tmp_path / "ck"),
              checkpoint_every="2 batches", group=GroupConfig(epoch_ms=10), metrics=m)
    took = time.monotonic() - t0
    assert _pairs(got) == _duckdb_pairs(tmp_path)
    assert len(m["recoveries"]) == 1
    assert took >= JOIN_ROWS / JOIN_RATE


def _pairs(got: pa.Table):
    ws = got.column("window_start").cast(pa.int64()).to_pylist()
    return sorted(zip(ws, got.column("k").to_pylist(), got.column("left_a").to_pylist(),
                      got.column("right_b").to_pylist()))


def _duckdb_pairs(d):
    con = duckdb.connect()
    con.register("lhs", pq.read_table(str(d / "left")))
    con.register("rhs", pq.read_table(str(d / "right")))
    want = con.sql("select l.t - l.t % 2000, l.k, l.a, r.b from lhs l join rhs r "
                   "on l.k = r.k and l.t // 2000 = r.t // 2000").fetchall()
    assert len(want) > 1000
    return sorted(want)


def test_join_with_rate_without_checkpoint_is_paced(tmp_path):
    left, right = _join_sides(tmp_path)
    q = JoinQuery(time="t", window="tumbling:2s", on="k")
    t0 = time.monotonic()
    got = run(q, (left, right), executors=2, rate=JOIN_RATE)
    assert time.monotonic() - t0 >= JOIN_ROWS / JOIN_RATE
    assert _pairs(got) == _duckdb_pairs(tmp_path)


# ---- late_output= with checkpoint= -------------------------------------------------------
LATE_BATCHES, LATE_ROWS = 24, 500


def _late_batch(rank: int, i: int, late: bool) -> pa.RecordBatch:
    """Batch i of a rank: times in [i s, i s + 1 s); a late one: 3 s before."""
    rng = np.random.default_rng([rank, i, int(late)])
    t = (i - 3 if late else i) * 1000 + np.sort(rng.integers(0, 1000, LATE_ROWS))
    return pa.record_batch([pa.array(t), pa.array(rng.integers(0, 20, LATE_ROWS)),
                            pa.array(rng.integers(0, 100, LATE_ROWS))], schema=SCHEMA)


def _filler(second: int) -> pa.RecordBatch:
    """One on-time row at the start of ``second`` (key 0, value 0)."""
    return pa.record_batch([pa.array([second * 1000]), pa.array([0]), pa.array([0])],
                           schema=SCHEMA)


def make_with_late(rank: int, n: int):
    """Deterministic for (rank, n): after every 4th batch a promise that no
    time before its end follows, then (once the executor published it) a
    batch that breaks it: late rows, the same ones in every run."""
    from slash.sources import Watermark

    for i in range(LATE_BATCHES):
        time.sleep(0.01)
        yield _late_batch(rank, i, False)
        if i % 4 == 3:
            yield Watermark(pa.scalar((i + 1) * 1000, pa.int64()))
            time.sleep(0.05)  # epochs of 10 ms: the push of the next row ends one, which
            yield _filler(i + 1)  # publishes the promise before the late batch is pushed
            yield _late_batch(rank, i, True)


def _late_source():
    from slash.sources import GeneratorSource

    return GeneratorSource(make_with_late, SCHEMA)


def _expected_late():
    return pa.Table.from_batches([_late_batch(r, i, True) for r in range(2)
                                  for i in range(LATE_BATCHES) if i % 4 == 3])


def _on_time():
    return pa.Table.from_batches([b for r in range(2) for i in range(LATE_BATCHES)
                                  for b in ([_late_batch(r, i, False)] +
                                            ([_filler(i + 1)] if i % 4 == 3 else []))])


def _tkv(t: pa.Table):
    """(time, key, value) rows of a late output, whatever it names its columns."""
    cols = [c for c in t.column_names]
    return sorted(zip(*(t.column(c).cast(pa.int64()).to_pylist() for c in cols)))


def _late_run(tmp_path, name: str, **kw):
    m = {}
    got = run(_agg_query(), _late_source(), executors=2, late_output=str(tmp_path / name),
              group=GroupConfig(epoch_ms=10), metrics=m, **kw)
    return got, pq.read_table(str(tmp_path / name)), m


@pytest.fixture(scope="module")
def late_reference(tmp_path_factory):
    """The run without checkpoint=: its result and late rows."""
    got, late, _ = _late_run(tmp_path_factory.mktemp("late-ref"), "late.parquet")
    return got, late


def test_late_reference_is_duckdb_over_the_on_time_rows_and_the_broken_promises(late_reference):
    got, late = late_reference
    assert _as_rows(got) == _duckdb_agg(_on_time())
    assert late.num_rows == _expected_late().num_rows
    assert sorted(late.column("time").cast(pa.int64()).to_pylist()) == \
        sorted(_expected_late().column("t").to_pylist())


def test_checkpoint_with_late_output_writes_each_late_row_once_across_a_restart(
        late_reference, tmp_path, monkeypatch):
    monkeypatch.setenv("SLASH_TEST_KILL", "1:14:0:2")  # rank 1 at push 14, after two cuts
    got, late, m = _late_run(tmp_path, "late.parquet", checkpoint=str(tmp_path / "ck"),
                             checkpoint_every="3 batches")
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["from_checkpoint"] is not None
    assert list((tmp_path / "ck" / "results").glob("*.late.arrow"))  # cuts carried late rows
    ref_got, ref_late = late_reference
    assert _rows(got) == _rows(ref_got)
    assert _tkv(late) == _tkv(ref_late)  # none lost, none twice


def test_a_finished_checkpointed_run_writes_the_same_late_rows_again(late_reference, tmp_path):
    ck = str(tmp_path / "ck")
    _late_run(tmp_path, "first.parquet", checkpoint=ck, checkpoint_every="3 batches")
    got, late, m = _late_run(tmp_path, "again.parquet", checkpoint=ck)
    assert m["finished_before"]
    assert _tkv(late) == _tkv(late_reference[1])


# ---- late_output= with checkpoint= and max_executors= (a live group) -------------------------
LIARS = {9, 17, 25}  # batches whose promised lower bound is 5 s above their rows


def _unit(i: int) -> pa.RecordBatch:
    time.sleep(0.02)  # an epoch (10 ms) ends at each push: each promise is published in time
    rng = np.random.default_rng([7, i])
    t = (i - 5 if i in LIARS else i) * 1000 + np.sort(rng.integers(0, 1000, LATE_ROWS))
    return pa.record_batch([pa.array(t), pa.array(rng.integers(0, 20, LATE_ROWS)),
                            pa.array(rng.integers(0, 100, LATE_ROWS))], schema=SCHEMA)


def _promise(i: int) -> int:
    return i * 1000


def _units():
    from slash.sources import BatchSource

    return BatchSource(_unit, 32, SCHEMA, LATE_ROWS, bound=_promise)


def test_live_group_with_checkpoint_writes_each_late_row_once_across_a_restart(tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("SLASH_TEST_KILL", "0:10:0:1")  # rank 0 at push 10, after one cut
    m = {}
    got = run(_agg_query(), _units(), executors=2, max_executors=3,
              checkpoint=str(tmp_path / "ck"), checkpoint_every="3 batches",
              late_output=str(tmp_path / "late.parquet"), group=GroupConfig(epoch_ms=10),
              metrics=m)
    assert len(m["recoveries"]) == 1
    every = [_unit(i) for i in range(32)]
    on_time = pa.Table.from_batches([b for i, b in enumerate(every) if i not in LIARS])
    late = pa.Table.from_batches([b for i, b in enumerate(every) if i in LIARS])
    assert _as_rows(got) == _duckdb_agg(on_time)
    assert _tkv(pq.read_table(str(tmp_path / "late.parquet")).select(["key", "time", "v"])) == \
        _tkv(late.select(["k", "t", "v"]))


# ---- rescale of a running checkpointed join --------------------------------------------------
def test_running_checkpointed_join_rescales_two_to_three_and_gives_the_pairs_of_duckdb(tmp_path):
    import threading

    from slash.run.recovery.checkpointed import CheckpointedRun

    left, right = _join_sides(tmp_path)
    control = CheckpointedRun()
    out = {}

    def go():
        m = {}
        try:  # rate=: the run lasts ~4 s, so the rescale lands mid-run
            out["got"] = run(JoinQuery(time="t", window="tumbling:2s", on="k"), (left, right),
                             executors=2, rate=JOIN_RATE, checkpoint=str(tmp_path / "ck"),
                             checkpoint_every="2 batches", group=GroupConfig(epoch_ms=10),
                             control=control, metrics=m)
            out["m"] = m
        except BaseException as e:  # noqa: BLE001 -- re-raised below
            out["error"] = e

    t = threading.Thread(target=go)
    t.start()
    deadline = time.monotonic() + 30
    while control.executors is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    got = control.scale_out(1, timeout=60)
    t.join(120)
    if "error" in out:
        raise out["error"]
    assert (got["from"], got["to"]) == (2, 3)
    assert [(r["from"], r["to"]) for r in out["m"]["rescales"]] == [(2, 3)]
    assert out["m"]["executors"] == 3 and not out["m"]["recoveries"]
    assert _pairs(out["got"]) == _duckdb_pairs(tmp_path)


# ---- late_output= with realtime= / latency_target= -------------------------------------------
RT_UNITS, RT_MS = 24, 100  # units of 100 ms of wall-clock event time
RT_LIARS = {9, 15, 21}


class _WallClockUnits:
    """Unit i holds times in [base + i * 100 ms, + 100 ms) and promises its start;
    a liar's rows are 500 ms older than its promise (picklable: base is data)."""

    def __init__(self, base_ms: int) -> None:
        self.base = base_ms

    def rows(self, i: int) -> pa.RecordBatch:
        rng = np.random.default_rng([11, i])
        start = self.base + (i - 5 if i in RT_LIARS else i) * RT_MS
        t = start + np.sort(rng.integers(0, RT_MS, 200))
        return pa.record_batch([pa.array(t), pa.array(rng.integers(0, 10, 200)),
                                pa.array(rng.integers(0, 100, 200))], schema=SCHEMA)

    def promise(self, i: int) -> int:
        return self.base + i * RT_MS


@pytest.mark.parametrize("how", [{"realtime": True},
                                 {"realtime": True, "latency_target": "2s", "max_executors": 2}],
                         ids=["realtime-measured", "latency-target-live"])
def test_paced_by_event_time_runs_apply_or_write_each_late_row_once(how, tmp_path):
    """Which of the liars' rows are late depends on when each rank's promise
    was published (epochs end by time): every late row is one of theirs, is
    written once, and every other row is in the result (DuckDB over the rest)."""
    from collections import Counter

    from slash.sources import BatchSource

    units = _WallClockUnits(int(time.time() * 1000) + 1500)
    src = BatchSource(units.rows, RT_UNITS, SCHEMA, 200, bound=units.promise)
    m = {}
    got = run(_agg_query(), src, executors=2, late_output=str(tmp_path / "late.parquet"),
              group=GroupConfig(epoch_ms=10), metrics=m, **how)
    every = pa.Table.from_batches([units.rows(i) for i in range(RT_UNITS)])
    liars = Counter(_tkv(pa.Table.from_batches([units.rows(i) for i in RT_LIARS])
                         .select(["k", "t", "v"])))
    # none late is possible: on a busy machine a rank's promise may be published only after
    # the liars' rows were applied (late.parquet is written when a row was late)
    path = tmp_path / "late.parquet"
    late = Counter(_tkv(pq.read_table(str(path)).select(["key", "time", "v"]))) \
        if path.exists() else Counter()
    assert not late - liars and sum(late.values()) == m["late_records"]
    applied = Counter(_tkv(every.select(["k", "t", "v"]))) - late
    rest = pa.table({"t": [t for k, t, v in applied.elements()],
                     "k": [k for k, t, v in applied.elements()],
                     "v": [v for k, t, v in applied.elements()]}, schema=SCHEMA)
    assert _as_rows(got) == _duckdb_agg(rest)
