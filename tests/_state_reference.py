"""Shared helpers of the state-backend tests: random batches and the DuckDB
reference query for tumbling, sliding and session windows."""
from __future__ import annotations

import math
import struct

import duckdb
import numpy as np
import pyarrow as pa

from slash.window import Session, Sliding, Tumbling

AGGS = ["count", "sum:x", "min:x", "max:x", "avg:x", "sum:y", "min:y", "max:y", "avg:y", "first:x",
        "last:y"]
VALUE_TYPES = {"x": "int64", "y": "float64"}


def random_table(rng: np.random.Generator, n: int, nkeys: int, tspan: int, string_keys: bool) -> pa.Table:
    keys = rng.integers(-nkeys // 3, nkeys - nkeys // 3, n)
    times = rng.integers(-tspan, tspan, n)
    x = rng.integers(-1000, 1000, n)
    y = rng.integers(-1000, 1000, n).astype(np.float64) / 4  # exact in binary
    k = pa.array([f"k{v}" for v in keys]) if string_keys else pa.array(keys, pa.int64())
    return pa.table({"key": k, "time": pa.array(times, pa.int64()), "x": x, "y": y})


def _start(col: str, n: int) -> str:
    """floor-aligned start of `col` for length n (DuckDB's % truncates)."""
    return f"({col} - ((({col} % {n}) + {n}) % {n}))"


SELECT_AGGS = ("count(*) AS count, sum(x)::BIGINT AS sum_x, min(x) AS min_x, max(x) AS max_x, "
               "avg(x) AS avg_x, sum(y) AS sum_y, min(y) AS min_y, max(y) AS max_y, avg(y) AS avg_y, "
               # the value at the earliest / latest time; among records of one time, by value
               # (nulls below every value): first takes the smallest, last the largest
               "first(x ORDER BY time, x NULLS FIRST) AS first_x, "
               "last(y ORDER BY time, y NULLS FIRST) AS last_y")


def duckdb_reference(table: pa.Table, window) -> pa.Table:
    con = duckdb.connect()
    con.register("t", table)
    if isinstance(window, Tumbling):
        s = window.size_ms
        q = f"""SELECT {_start('time', s)} AS window_start, {_start('time', s)} + {s} AS window_end,
                key, {SELECT_AGGS} FROM t GROUP BY ALL"""
    elif isinstance(window, Sliding):
        size, slide = window.size_ms, window.slide_ms
        q = f"""WITH w AS (
                  SELECT {_start('time', slide)} - j * {slide} AS window_start, *
                  FROM t, range(0, {(size + slide - 1) // slide}) AS r(j))
                SELECT window_start, window_start + {size} AS window_end, key, {SELECT_AGGS}
                FROM w WHERE time < window_start + {size} GROUP BY ALL"""
    else:
        assert isinstance(window, Session)
        g = window.gap_ms
        q = f"""WITH f AS (
                  SELECT *, CASE WHEN time - lag(time) OVER (PARTITION BY key ORDER BY time)
                                  <= {g} THEN 0 ELSE 1 END AS new FROM t),
                s AS (SELECT *, sum(new) OVER (PARTITION BY key ORDER BY time
                                ROWS UNBOUNDED PRECEDING) AS sid FROM f)
                SELECT min(time) AS window_start, max(time) + {g} AS window_end, key, {SELECT_AGGS}
                FROM s GROUP BY key, sid"""
    return con.sql(q).to_arrow_table()


def sort_rows(t) -> list:
    rows = t.to_pylist() if hasattr(t, "to_pylist") else t
    return sorted(rows, key=lambda r: (r["window_start"], str(r["key"])))


def assert_same(got, want) -> None:
    """The rows of got equal want's, each float within 1e-9 (relative or
    absolute), every other value exactly. A column is compared whole first;
    only the cells that differ go through pytest.approx (its cost, per cell,
    was most of a test's time at tens of thousands of rows)."""
    from pytest import approx
    g, w = sort_rows(got), sort_rows(want)
    assert len(g) == len(w)
    for col in w[0] if w else ():  # (the rows of a table share their columns)
        gc, wc = [a[col] for a in g], [b[col] for b in w]
        if gc == wc:
            continue
        for a, b, x, v in zip(g, w, gc, wc):
            if isinstance(v, float):
                assert x == approx(v, rel=1e-9, abs=1e-9), (col, a, b)
            else:
                assert x == v, (col, a, b)


def ship(src, dst, times: int = 1) -> None:
    """One epoch exchange between state backends: seal src, merge each
    partition delta into dst `times` times (merging twice tests idempotence),
    reset src."""
    src.begin_epoch()
    for d in src.deltas():
        for _ in range(times):
            dst.merge_delta(bytes(d))
        d.release()
    src.reset_delta()


def split_and_merge(make_store, recs, nparts: int, rnd, repeat: bool = False):
    """(merged, single): the emitted rows of `recs` split at random over
    nparts stores (make_store(part) builds one) merged into a leader in a
    random order, sometimes two of them first (grouping), each delta merged
    twice at random when `repeat` (idempotence); and of one store fed
    everything. Both sorted by (window_start, key)."""
    def rows(sb):
        return sorted(sb.emit(2**62).to_pylist(), key=lambda r: (r["window_start"], r["key"]))

    single = make_store(recs)
    want = rows(single)
    single.close()
    parts = [[] for _ in range(nparts)]
    for r in recs:
        parts[rnd.randrange(nparts)].append(r)
    stores = [make_store(p) for p in parts]
    rnd.shuffle(stores)  # commutative
    if len(stores) > 2 and rnd.random() < 0.5:
        ship(stores.pop(), stores[-1])  # associative: (a + b) + c vs a + (b + c)
    leader = make_store([])
    for s in stores:
        ship(s, leader, rnd.choice([1, 2]) if repeat else 1)
    got = rows(leader)
    for s in stores + [leader]:
        s.close()
    return got, want


def slash_and_spark(spark, path: str, window: str, key: str, aggs):
    """(slash.spark.window_aggregate's answer, Spark's own query's answer) as
    Arrow tables, over the Parquet file at path, in the session spark."""
    from slash.spark import spark_window_aggregate, window_aggregate
    ours = window_aggregate(spark, path, time="ts", window=window, key=key, aggs=aggs).toArrow()
    theirs = spark_window_aggregate(spark, path, time="ts", window=window, key=key, aggs=aggs).toArrow()
    return ours, theirs


def window_sql(src: str, window: str, cols: str, time: str = "ts", key: str = "k") -> str:
    """DuckDB SQL of `cols` (aggregate expressions) per (window start AS ws,
    key) over the table expression src, for a tumbling, sliding or session
    window spec (times >= 0, as integers in ms)."""
    from slash.window import parse_window
    w = parse_window(window)
    if isinstance(w, Tumbling):
        return f"SELECT {time} // {w.size_ms} * {w.size_ms} AS ws, {key}, {cols} FROM {src} GROUP BY ALL"
    if isinstance(w, Sliding):
        n = -(-w.size_ms // w.slide_ms)
        return (f"WITH f AS (SELECT {time} // {w.slide_ms} * {w.slide_ms} - j * {w.slide_ms} AS ws, * "
                f"FROM {src}, range(0, {n}) r(j)) "
                f"SELECT ws, {key}, {cols} FROM f WHERE {time} < ws + {w.size_ms} GROUP BY ALL")
    return (f"WITH f AS (SELECT *, CASE WHEN {time} - lag({time}) OVER (PARTITION BY {key} ORDER BY "
            f"{time}) <= {w.gap_ms} THEN 0 ELSE 1 END AS new FROM {src}), s AS (SELECT *, sum(new) "
            f"OVER (PARTITION BY {key} ORDER BY {time} ROWS UNBOUNDED PRECEDING) AS sid FROM f) "
            f"SELECT min({time}) AS ws, {key}, {cols} FROM s GROUP BY {key}, sid")


def vw_store(cfg, dtype):
    """A maker of state backends of cfg from records (key, time, value):
    the value (pyarrow type dtype, None = null) feeds columns v and w alike."""
    import functools
    return functools.partial(_vw_store, cfg, dtype)


def _vw_store(cfg, dtype, recs):
    from slash import StateBackend
    sb = StateBackend(cfg)
    if recs:
        k, t, v = zip(*recs)
        v = pa.array(v, dtype)
        sb.update(np.array(k, np.int64), np.array(t, np.int64), {"v": v, "w": v})
    return sb


def slash_run_cli(path: str, out, window: str, key: str, aggs, executors: int = 2) -> pa.Table:
    """`slash run` over the Parquet file at path (time column ts), writing
    to out; asserts it succeeded and returns what it wrote."""
    import subprocess
    import sys

    import pyarrow.parquet as pq
    cmd = [sys.executable, "-m", "slash", "run", "--input", path, "--time", "ts", "--window", window,
           "--key", key, *sum((["--agg", a] for a in aggs), []), "--executors", str(executors),
           "--output", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return pq.read_table(out)


def spark_order_key(v: float):
    """Spark's order of doubles, made total as the partials keep it: NaN
    above every number, -0.0 below 0.0."""
    return (1, 0.0, 0) if math.isnan(v) else (0, v, 0 if math.copysign(1.0, v) < 0 else 1)


def f64_bits(v):
    """A double result as comparable bits: every NaN alike (one NaN whatever
    the payload); None stays None."""
    if v is None:
        return None
    return "NaN" if math.isnan(v) else struct.pack("<d", v)
