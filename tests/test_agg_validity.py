"""A nullable value column's aggregates stay right whichever batches hold
its nulls. A batch without nulls hands the fold a validity of ones, which it
counts with the count's pending delta (sum, min, max, avg, count:COL,
percentile_approx) or a constant (first, last) instead of reading the
column, and a sketch's column as its values, hashed in the fold; a batch
with nulls takes the general path (a validity column, hashes made apart).
Batches of both kinds, interleaved on the same windows and keys, must give
DuckDB's answer, and the sketches the same state either way."""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from slash import StateBackend, StateConfig

AGGS = ["count", "count:x", "sum:x", "min:x", "max:x", "avg:x", "first:x", "last:x",
        "percentile_approx:x:0.5"]

SQL = """
SELECT t - t % 1000 AS ws, k, count(*) AS c, count(x) AS cx, sum(x) AS s, min(x) AS mn,
       max(x) AS mx, avg(x) AS a,
       first(x ORDER BY t, x NULLS FIRST) AS f, last(x ORDER BY t, x NULLS FIRST) AS l,
       quantile_disc(x, 0.5) AS p
FROM tbl GROUP BY ALL ORDER BY ws, k
"""


def batches(kinds: str, rows: int = 3000, seed: int = 3) -> list:
    """One batch a letter of `kinds`: 'v' no null, 'n' some nulls, 'a' all
    null; every batch over the same 4 windows and 7 keys, times shuffled."""
    rng = np.random.default_rng(seed)
    out = []
    for kind in kinds:
        t = rng.integers(0, 4000, rows, dtype=np.int64)
        k = rng.integers(0, 7, rows, dtype=np.int64)
        x = rng.integers(-50, 50, rows, dtype=np.int64)
        valid = {"v": np.ones(rows, bool), "n": rng.random(rows) < 0.7,
                 "a": np.zeros(rows, bool)}[kind]
        out.append(pa.table({"t": t, "k": k, "x": pa.array(x, mask=~valid)}))
    return out


def slash_rows(tables: list) -> list:
    cfg = StateConfig(window="tumbling:1s", aggregates=AGGS, value_types={"x": "int64"})
    with StateBackend(cfg) as sb:
        for tb in tables:
            sb.update(tb.column("k"), tb.column("t"), {"x": tb.column("x")})
        out = sb.emit(2**62)
    cols = [out.column(n).to_pylist() for n in out.schema.names if n != "window_end"]
    return sorted(zip(*cols))


def duckdb_rows(tables: list) -> list:
    tbl = pa.concat_tables(tables)  # noqa: F841 (DuckDB reads it by name)
    return sorted(duckdb.sql(SQL).fetchall())


@pytest.mark.parametrize("kinds", ["vvv", "vnv", "nvn", "vav", "avv", "vva", "nnn"])
def test_batches_with_and_without_nulls_interleaved_equal_duckdb(kinds):
    tables = batches(kinds)
    ours, theirs = slash_rows(tables), duckdb_rows(tables)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a[:6] == b[:6], (a, b)  # window, key, count, count:x, sum, min
        assert a[6] == b[6]  # max
        assert (a[7] is None and b[7] is None) or a[7] == pytest.approx(b[7], rel=1e-12)  # avg
        assert a[8:10] == b[8:10], (a, b)  # first, last
        assert (a[10] is None and b[10] is None) or abs(a[10] - b[10]) <= abs(b[10]) / 128, (a, b)


def test_a_null_at_the_earliest_time_after_batches_without_nulls_is_first():
    """The validity first keeps in a batch without nulls is a constant 1;
    a null later at an earlier time (a tie on time too) must still win."""
    k = pa.array([1, 1, 1], pa.int64())
    with StateBackend(StateConfig(window="tumbling:1s", aggregates=["first:x", "last:x"],
                                  value_types={"x": "int64"})) as sb:
        sb.update(k, pa.array([500, 600, 700], pa.int64()), {"x": pa.array([5, 6, 7], pa.int64())})
        sb.update(k, pa.array([500, 900, 700], pa.int64()),
                  {"x": pa.array([None, 1, None], pa.int64())})
        out = sb.emit(2**62)
    assert out.column("first_x").to_pylist() == [None]  # (500, null) orders below (500, 5)
    assert out.column("last_x").to_pylist() == [1]


@pytest.mark.parametrize("dtype", ["int64", "int32", "float64", "timestamp"])
def test_sketches_hashed_in_the_fold_equal_sketches_of_hashes(dtype):
    """The same rows, once in batches without nulls (values hashed in the
    fold) and once with a null row added to each batch (hashes made in a
    pass of their own): equal estimates and distinct counts, per window and
    key, and the distinct counts equal DuckDB's count(DISTINCT)."""
    rng = np.random.default_rng(11)
    aggs = ["approx_count_distinct:x", "count_distinct:x"]
    cfg = StateConfig(window="tumbling:1s", aggregates=aggs)
    raw, hashed, parts = StateBackend(cfg), StateBackend(cfg), []
    for _ in range(3):
        n = 4000
        t = rng.integers(0, 3000, n, dtype=np.int64)
        k = rng.integers(0, 5, n, dtype=np.int64)
        v = rng.integers(-300, 300, n)
        x = {"int64": pa.array(v, pa.int64()), "int32": pa.array(v, pa.int32()),
             "float64": pa.array(np.where(v == 0, -0.0, v / 4.0)),
             "timestamp": pa.array(v, pa.int64()).cast(pa.timestamp("ms"))}[dtype]
        raw.update(pa.array(k), pa.array(t), {"x": x})
        hashed.update(pa.array(np.append(k, 0)), pa.array(np.append(t, 0)),
                      {"x": pa.concat_arrays([x, pa.nulls(1, x.type)])})
        parts.append(pa.table({"t": t, "k": k, "x": x}))
    a, b = raw.emit(2**62), hashed.emit(2**62)
    raw.close(), hashed.close()
    assert a.to_pylist() == b.to_pylist()
    tbl = pa.concat_tables(parts)  # noqa: F841 (DuckDB reads it by name)
    want = duckdb.sql("SELECT t - t % 1000, k, count(DISTINCT x) FROM tbl GROUP BY ALL").fetchall()
    got = zip(a.column("window_start").to_pylist(), a.column("key").to_pylist(),
              a.column("count_distinct_x").to_pylist())
    assert sorted(got) == sorted(want)
