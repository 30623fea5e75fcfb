"""Interval joins (l.ts BETWEEN r.ts + lo AND r.ts + hi on equal keys) and
sliding-window joins, end to end through JoinQuery, `slash run` and a
restarted run, against DuckDB's range join on the same data: exactly the same
multiset of pairs."""
from __future__ import annotations

import functools
import subprocess
import sys
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import slash
from slash import errors
from slash.executor import GroupConfig
from slash.join import JoinBackend, JoinConfig
from slash.query import JoinQuery
from slash.runner import run
from slash.sources import GeneratorSource

from test_join import rows_of


def side_table(seed, n, nkeys, span, col, step=1, null_keys=0):
    """Rows with keys in 0..nkeys (some null), times in [0, span) on a grid
    of ``step`` ms (so many pairs sit exactly on an interval's bounds) and
    one payload column; duplicate rows included."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, nkeys, n)
    ts = rng.integers(0, span // step, n) * step
    keys = pa.array(k, pa.int64(), mask=np.arange(n) < null_keys)
    t = pa.table({"id": keys, "ts": pa.array(ts, pa.int64()),
                  col: pa.array(rng.integers(0, 1000, n), pa.int64())})
    return pa.concat_tables([t, t.slice(0, 20)])  # exact duplicate rows


def write_parts(dirpath, table, parts):
    """Part files whose time ranges overlap (rows dealt round-robin, each
    file spanning the whole time range)."""
    dirpath.mkdir()
    for i in range(parts):
        idx = np.arange(i, table.num_rows, parts)
        pq.write_table(table.take(pa.array(idx)).sort_by("ts"), dirpath / f"part-{i}.parquet",
                       row_group_size=200)
    return str(dirpath)


def duck_interval(left, right, lo, hi):
    con = duckdb.connect()
    con.register("l", left)
    con.register("r", right)
    return con.sql(f"""SELECT l.id AS id, l.ts AS left_ts, l.a AS left_a, r.ts AS right_ts,
                              r.b AS right_b
                       FROM l JOIN r ON l.id = r.id
                        AND l.ts BETWEEN r.ts + ({lo}) AND r.ts + ({hi})""").to_arrow_table()


def duck_sliding(left, right, size, slide):
    """Each row expanded into its sliding windows, then an equi-join on
    (window, key): Flink's window join over HOP windows."""
    con = duckdb.connect()
    con.register("l", left)
    con.register("r", right)
    expand = (lambda t: f"""SELECT *, w AS window_start, w + {size} AS window_end FROM {t},
              range((floor((ts - {size}) / {slide}::DOUBLE)::BIGINT + 1) * {slide}, ts + 1, {slide})
              AS g(w)""")
    return con.sql(f"""SELECT l.window_start, l.window_end, l.id AS id, l.ts AS left_ts,
                              l.a AS left_a, r.ts AS right_ts, r.b AS right_b
                       FROM ({expand('l')}) l JOIN ({expand('r')}) r
                         ON l.id = r.id AND l.window_start = r.window_start""").to_arrow_table()


@pytest.fixture(scope="module")
def tables():
    left = side_table(1, 1500, 40, 30000, "a", step=100, null_keys=30)
    right = side_table(2, 1200, 40, 30000, "b", step=100, null_keys=25)
    return left, right


@pytest.fixture
def files(tmp_path, tables):
    left, right = tables
    return (write_parts(tmp_path / "l", left, 3), write_parts(tmp_path / "r", right, 2))


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("interval,lo,hi", [(("-500ms", "+1s"), -500, 1000),
                                            (("+200ms", "+700ms"), 200, 700),
                                            (("-2s", "-1s"), -2000, -1000),
                                            (("0s", "0s"), 0, 0)])
def test_interval_join_equals_duckdb_range_join(files, tables, n, interval, lo, hi):
    got = run(JoinQuery(time="ts", on="id", interval=interval), files, executors=n)
    want = duck_interval(*tables, lo, hi)
    assert got.column_names == ["id", "left_ts", "left_a", "right_ts", "right_b"]
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got) == rows_of(want)


@pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)")
def test_interval_join_over_ofi_tcp_equals_duckdb(files, tables):
    got = run(JoinQuery(time="ts", on="id", interval=("-500ms", "+1s")), files, executors=2,
              group=GroupConfig(transport="ofi:tcp"))
    want = duck_interval(*tables, -500, 1000)
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got) == rows_of(want)


def test_interval_join_bounds_are_inclusive_and_null_keys_never_match(tmp_path):
    left = pa.table({"id": pa.array([1, 1, 1, None, 2], pa.int64()),
                     "ts": pa.array([1000, 1500, 2001, 1000, 1000], pa.int64()),
                     "a": pa.array([10, 11, 12, 13, 14], pa.int64())})
    right = pa.table({"id": pa.array([1, None, 2], pa.int64()),
                      "ts": pa.array([1500, 1000, 3001], pa.int64()),
                      "b": pa.array([20, 21, 22], pa.int64())})
    pq.write_table(left, tmp_path / "l.parquet")
    pq.write_table(right, tmp_path / "r.parquet")
    got = run(JoinQuery(time="ts", on="id", interval="-500ms,+500ms"),
              (str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")))
    # 1000 and 2001 are the bounds 1500 - 500 and ... 2001 is 1 ms past 1500 + 500
    assert rows_of(got) == [(1, 1000, 10, 1500, 20), (1, 1500, 11, 1500, 20)]


def test_interval_join_on_microsecond_timestamps_equals_duckdb(tmp_path, tables):
    left, right = (t.set_column(1, "ts", t.column("ts").cast(pa.int64()).cast(pa.timestamp("us")))
                   for t in tables)
    pq.write_table(left, tmp_path / "l.parquet")
    pq.write_table(right, tmp_path / "r.parquet")
    got = run(JoinQuery(time="ts", on="id", interval=("-1s", "+300ms")),
              (str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")), executors=2)
    con = duckdb.connect()
    con.register("l", left)
    con.register("r", right)
    want = con.sql("""SELECT l.id, l.ts AS lt, l.a, r.ts AS rt, r.b FROM l JOIN r ON l.id = r.id
                      AND l.ts BETWEEN r.ts - INTERVAL 1 SECOND
                                   AND r.ts + INTERVAL 300 MILLISECOND""").to_arrow_table()
    assert got.schema.field("left_ts").type == pa.timestamp("us")
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got) == rows_of(want)


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("window,size,slide", [("sliding:2s/500ms", 2000, 500),
                                               ("sliding:1s/1s", 1000, 1000),
                                               ("sliding:700ms/300ms", 700, 300)])
def test_sliding_window_join_equals_duckdb_over_expanded_windows(files, tables, n, window, size,
                                                                  slide):
    got = run(JoinQuery(time="ts", on="id", window=window), files, executors=n)
    want = duck_sliding(*tables, size, slide)
    assert got.column_names[:3] == ["window_start", "window_end", "id"]
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got) == rows_of(want.select(got.column_names))


def test_slash_run_join_interval_cli(files, tables, tmp_path):
    out = tmp_path / "pairs.parquet"
    subprocess.run([sys.executable, "-m", "slash", "run", "--join", "--left", files[0],
                    "--right", files[1], "--on", "id", "--time", "ts",
                    "--join-interval=-5s,+10s", "--output", str(out)],
                   check=True, capture_output=True, timeout=120)
    assert rows_of(pq.read_table(out)) == rows_of(duck_interval(*tables, -5000, 10000))


def test_bad_intervals_are_refused_with_the_reason():
    with pytest.raises(errors.InvalidArgument, match="lower bound"):
        JoinQuery(time="ts", on="id", interval=("+5s", "-5s"))
    with pytest.raises(errors.InvalidArgument, match="give one"):
        JoinQuery(time="ts", on="id", window="tumbling:1s", interval=("-1s", "+1s"))
    with pytest.raises(errors.InvalidArgument, match="LOWER,UPPER"):
        JoinQuery(time="ts", on="id", interval="5s")
    with pytest.raises(errors.InvalidArgument, match="window="):
        JoinQuery(time="ts", on="id")


# -- streams: late rows and a killed run ------------------------------------

SCHEMA = {"left": pa.schema([("t", pa.int64()), ("k", pa.int64()), ("a", pa.int64())]),
          "right": pa.schema([("t", pa.int64()), ("k", pa.int64()), ("b", pa.int64())])}
BATCHES, ROWS = 24, 300


def _batch(side, rank, i):
    rng = np.random.default_rng([0 if side == "left" else 1, rank, i])
    t = i * 500 + (0 if side == "left" else 250) + np.sort(rng.integers(0, 250, ROWS))
    return pa.record_batch([pa.array(t), pa.array(rng.integers(0, 500, ROWS)),
                            pa.array(rng.integers(0, 10**6, ROWS))], schema=SCHEMA[side])


def make(side, rank, n, pace=0.02, late=False):
    for i in range(BATCHES):
        time.sleep(pace)
        yield _batch(side, rank, i)
    if late and side == "right" and rank == 0:  # 10 s behind the stream, lateness 1 s
        yield pa.record_batch([pa.array([1000] * 3), pa.array([1, 2, 3]), pa.array([7] * 3)],
                              schema=SCHEMA[side])


def _sources(**kw):
    return (GeneratorSource(functools.partial(make, "left", **kw), SCHEMA["left"]),
            GeneratorSource(functools.partial(make, "right", **kw), SCHEMA["right"]))


def _stream_query():
    return JoinQuery(time="t", on="k", interval=("-300ms", "+600ms"), lateness="1s")


def _stream_reference(ranks=2):
    con = duckdb.connect()
    con.register("lhs", pa.Table.from_batches([b for r in range(ranks)
                                               for b in make("left", r, ranks, 0)]))
    con.register("rhs", pa.Table.from_batches([b for r in range(ranks)
                                               for b in make("right", r, ranks, 0)]))
    return con.sql("select l.k, l.t as lt, l.a, r.t as rt, r.b from lhs l join rhs r on l.k = r.k "
                   "and l.t between r.t - 300 and r.t + 600").to_arrow_table()


def _backend_run(q, steps):
    """Runs ``steps`` (("left"|"right", rows) pushes and ("emit", ms)) on
    one join store as an executor would; returns (finalized pairs, late)."""
    schemas = {"left": pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("a", pa.int64())]),
               "right": pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("b", pa.int64())])}
    out = []
    with JoinBackend(q.join_config(schemas["left"], schemas["right"])) as jb:
        for what, arg in steps:
            if what == "emit":
                out.append(jb.emit(arg))
            else:
                b = pa.RecordBatch.from_pylist([dict(zip(("id", "ts", "a" if what == "left" else "b"),
                                                         r)) for r in arg], schema=schemas[what])
                jb.update_batch(what, q.prepare(what, b, schemas[what]))
        pairs = q.finalize(pa.Table.from_batches(out), schemas["left"], schemas["right"])
        return pairs, jb.late_records


def test_a_row_behind_the_emitted_watermark_is_counted_late_and_one_at_it_is_not():
    q = JoinQuery(time="ts", on="id", interval=("-2s", "+1s"))  # buckets of 3 s, shift 2 s
    pairs, late = _backend_run(q, [
        ("left", [(1, 0, 10), (1, 3000, 11), (1, 4000, 12)]),
        ("emit", 6000),                    # the buckets of stored times below 6000 are gone
        ("right", [(1, 1500, 20)]),        # stored at 1500 and 4500: both in emitted buckets
        ("right", [(1, 6000, 21)]),        # at the watermark: stored at 6000 and 9000
        ("left", [(1, 7000, 13)]),
        ("emit", 100_000)])
    assert late == 2                       # both copies of the right row at 1500
    # the row at 6000 meets every left row in [4000, 7000], bounds included
    assert rows_of(pairs) == [(1, 4000, 12, 6000, 21), (1, 7000, 13, 6000, 21)]


def test_killed_interval_join_worker_gives_the_same_pairs(tmp_path, monkeypatch):
    monkeypatch.setenv("SLASH_TEST_KILL", "1:20:0:1")
    m = {}
    got = run(_stream_query(), _sources(), executors=2, checkpoint=str(tmp_path / "ck"),
              checkpoint_every="4 batches", metrics=m,
              group=GroupConfig(epoch_ms=10, lateness="1s"))
    want = _stream_reference()
    assert len(m["recoveries"]) == 1
    assert m["recoveries"][0]["from_checkpoint"] is not None
    assert got.num_rows == want.num_rows > 1000
    assert rows_of(got) == rows_of(want)


def hot_key_table(seed, n, span, col, hot=0.05):
    """Rows whose times interleave with the other side's, one key (7) on a
    ``hot`` share of them and the rest spread over 500 keys."""
    rng = np.random.default_rng(seed)
    k = rng.integers(100, 600, n)
    k[rng.random(n) < hot] = 7
    return pa.table({"id": pa.array(k, pa.int64()),
                     "ts": pa.array(np.sort(rng.integers(0, span, n)), pa.int64()),
                     col: pa.array(rng.integers(0, 1000, n), pa.int64())})


def test_hot_key_interval_join_equals_duckdb(tmp_path):
    left, right = hot_key_table(5, 6000, 120_000, "a"), hot_key_table(6, 6000, 120_000, "b")
    files = (write_parts(tmp_path / "l", left, 2), write_parts(tmp_path / "r", right, 2))
    got = run(JoinQuery(time="ts", on="id", interval=("-5s", "+10s")), files, executors=2)
    want = duck_interval(left, right, -5000, 10000)
    hot = int(np.count_nonzero(want.column("id").to_numpy() == 7))
    assert hot > want.num_rows // 2  # the hot key's pairs are most of the answer
    assert got.num_rows == want.num_rows
    assert rows_of(got) == rows_of(want)


def test_join_state_band_emits_only_the_pairs_inside_it():
    cfg = JoinConfig(window="tumbling:100ms", left_columns={"t": "int64"},
                     right_columns={"t": "int64"}, band=("t", -5, 10))
    lt, rt = np.arange(0, 100, 3), np.arange(0, 100, 7)
    with JoinBackend(cfg) as jb:
        jb.update_left(np.ones(len(lt), np.int64), lt, {"t": lt})
        jb.update_right(np.ones(len(rt), np.int64), rt, {"t": rt})
        out = jb.emit(100)
    got = sorted(zip(out.column("left_t").to_pylist(), out.column("right_t").to_pylist()))
    assert got == sorted((a, b) for a in lt.tolist() for b in rt.tolist() if -5 <= a - b <= 10)


@pytest.mark.parametrize("band,what", [(("x", 0, 1), "int64 column"), (("f", 0, 1), "int64 column"),
                                       (("t", 2, 1), "above the upper")])
def test_join_state_band_the_store_cannot_honour_is_refused(band, what):
    with pytest.raises(errors.InvalidArgument, match=what):
        JoinConfig(window="tumbling:100ms", left_columns={"t": "int64", "f": "float64"},
                   right_columns={"t": "int64", "f": "float64"}, band=band)
