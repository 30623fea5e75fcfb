"""first:COL / last:COL: the value at the earliest / latest event time of a
window (Spark's min_by(COL, time) / max_by(COL, time)). Among records of one
time the order is by value, a null below every value, NaN above every
number, so the answer is independent of arrival order and of the split.

Checked against DuckDB's ``first/last(COL ORDER BY time, COL NULLS FIRST)``
through the Python API and the CLI in both modes and every window kind, and
the merge law (commutative, associative, idempotent) by hypothesis over the
real delta path. The shared state-backend tests (_state_reference.AGGS) run
first:x and last:y through executors, transports, checkpoints and moves."""
from __future__ import annotations

import subprocess
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slash import StateBackend, StateConfig
from slash.query import Query
from slash.runner import run
from slash.spark.batch import make_query
from slash.window import Session, Sliding, Tumbling

from _state_reference import ship

AGGS = ["count", "first:qty", "last:qty", "first:price", "last:price"]


def make_file(tmp_path, rows=8000, seed=5):
    """Times with many ties per key, nullable int and float values."""
    rng = np.random.default_rng(seed)
    qty = rng.integers(-5, 20, rows)
    price = rng.integers(1, 400, rows).astype(np.float64) / 4
    table = pa.table({
        "ts": pa.array(np.sort(rng.integers(0, 4000, rows)), pa.int64()),
        "user": pa.array(rng.integers(0, 30, rows), pa.int64()),
        "qty": pa.array(qty, pa.int32(), mask=rng.random(rows) < 0.2),
        "price": pa.array(price, pa.float64(), mask=rng.random(rows) < 0.2),
    })
    path = tmp_path / "events.parquet"
    pq.write_table(table, path, row_group_size=1000)
    return str(path)


def duck(q: Query, path: str) -> list:
    aggs = ", ".join("count(*) AS count" if a.column is None else
                     f"{a.kind}({a.column} ORDER BY {q.time}, {a.column} NULLS FIRST) AS {a.name}"
                     for a in q.aggregates)
    w, t, k = q.window, q.time, q.key[0]

    def start(n):
        return f"({t} - ((({t} % {n}) + {n}) % {n}))"

    if isinstance(w, Tumbling):
        sql = (f"SELECT {start(w.size_ms)} AS window_start, {start(w.size_ms)} + {w.size_ms} "
               f"AS window_end, {k}, {aggs} FROM read_parquet('{path}') GROUP BY ALL")
    elif isinstance(w, Sliding):
        sql = (f"WITH f AS (SELECT {start(w.slide_ms)} - j * {w.slide_ms} AS window_start, * FROM "
               f"read_parquet('{path}'), range(0, {-(-w.size_ms // w.slide_ms)}) r(j)) "
               f"SELECT window_start, window_start + {w.size_ms} AS window_end, {k}, {aggs} "
               f"FROM f WHERE {t} < window_start + {w.size_ms} GROUP BY ALL")
    else:
        assert isinstance(w, Session)
        sql = (f"WITH f AS (SELECT *, CASE WHEN {t} - lag({t}) OVER (PARTITION BY {k} ORDER BY {t}) "
               f"<= {w.gap_ms} THEN 0 ELSE 1 END AS new FROM read_parquet('{path}')), "
               f"s AS (SELECT *, sum(new) OVER (PARTITION BY {k} ORDER BY {t} ROWS UNBOUNDED "
               f"PRECEDING) AS sid FROM f) SELECT min({t}) AS window_start, max({t}) + {w.gap_ms} "
               f"AS window_end, {k}, {aggs} FROM s GROUP BY {k}, sid")
    return sorted(duckdb.sql(sql).to_arrow_table().to_pylist(),
                  key=lambda r: (r["window_start"], r[k]))


def rows(t: pa.Table) -> list:
    return sorted(t.to_pylist(), key=lambda r: (r["window_start"], r["user"]))


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("window", ["tumbling:300ms", "sliding:400ms/100ms", "session:20ms"])
def test_first_last_equal_duckdb_ordered_first_last_with_ties_and_nulls(tmp_path, window, mode):
    path = make_file(tmp_path)
    q = Query(time="ts", window=window, key="user", aggregates=AGGS)
    got = rows(run(q, [path], executors=2, mode=mode))
    want = duck(q, path)
    assert got == want
    assert any(r["first_qty"] is None for r in got)  # a null at the earliest time is the answer


def test_first_last_keep_the_int32_column_type(tmp_path):
    path = make_file(tmp_path, rows=500)
    q = Query(time="ts", window="tumbling:1s", key="user", aggregates=AGGS)
    out = run(q, [path], executors=1)
    assert out.schema.field("first_qty").type == pa.int32()
    assert out.schema.field("last_price").type == pa.float64()


def test_slash_run_cli_first_last_equal_duckdb(tmp_path):
    path = make_file(tmp_path)
    out = tmp_path / "out.parquet"
    cmd = [sys.executable, "-m", "slash", "run", "--input", path, "--time", "ts",
           "--window", "tumbling:250ms", "--key", "user", "--agg", "count", "--agg", "first:qty",
           "--agg", "last:qty", "--agg", "first:price", "--agg", "last:price", "--executors", "2",
           "--output", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    q = Query(time="ts", window="tumbling:250ms", key="user", aggregates=AGGS)
    assert rows(pq.read_table(out)) == duck(q, path)


def test_spark_names_min_by_max_by_are_first_and_last():
    q = make_query("ts", "tumbling:1s", "user", ["min_by:qty", "max_by:price", "count"], None, None)
    assert [a.name for a in q.aggregates] == ["first_qty", "last_price", "count"]


def test_first_of_a_string_column_is_refused_naming_it(tmp_path):
    from slash.errors import SchemaError
    t = pa.table({"ts": pa.array([1, 2], pa.int64()), "user": [1, 1], "s": ["a", "b"]})
    with pytest.raises(SchemaError, match="first:s.*'s' is string"):
        run(Query(time="ts", window="tumbling:1s", key="user", aggregates=["first:s"]), t)


# ---- the merge law over the delta path -------------------------------------------

VALUE = st.one_of(st.none(), st.integers(-3, 3))
FVALUE = st.one_of(st.none(), st.sampled_from([float("nan"), float("inf"), -float("inf"), 1.5,
                                               -2.0, 0.0]))
record = st.tuples(st.integers(0, 2), st.integers(0, 5), VALUE, FVALUE)  # ties of time are frequent
CFG = StateConfig(window="tumbling:4ms", aggregates=["first:x", "last:x", "first:y", "last:y"],
                  value_types={"x": "int64", "y": "float64"}, partitions=2)


def _store(recs) -> StateBackend:
    sb = StateBackend(CFG)
    if recs:
        k, t, x, y = zip(*recs)
        sb.update(np.array(k, np.int64), np.array(t, np.int64),
                  {"x": pa.array(x, pa.int64()), "y": pa.array(y, pa.float64())})
    return sb


def _canon(v):
    return "NaN" if isinstance(v, float) and v != v else v


def _result(sb: StateBackend) -> list:
    return sorted(tuple(_canon(v) for v in r.values()) for r in sb.emit(2**62).to_pylist())


def _expected(recs) -> list:
    """The definition, by brute force: order (time, value) with None lowest
    and NaN highest; first is the smallest, last the largest."""
    def key(r, col):
        v = r[col]
        return (r[1], 0 if v is None else 1, 1 if isinstance(v, float) and v != v else 0,
                0 if v is None or v != v else v)
    out = []
    for k in sorted({r[0] for r in recs}):
        for w in sorted({r[1] // 4 * 4 for r in recs if r[0] == k}):
            rs = [r for r in recs if r[0] == k and r[1] // 4 * 4 == w]
            out.append((w, w + 4, k, min(rs, key=lambda r: key(r, 2))[2],
                        max(rs, key=lambda r: key(r, 2))[2], _canon(min(rs, key=lambda r: key(r, 3))[3]),
                        _canon(max(rs, key=lambda r: key(r, 3))[3])))
    return sorted(out)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, max_size=40), st.integers(1, 4), st.randoms())
def test_merge_in_any_order_and_grouping_equals_the_definition(recs, nparts, rnd):
    parts = [[] for _ in range(nparts)]
    for r in recs:
        parts[rnd.randrange(nparts)].append(r)
    stores = [_store(p) for p in parts]
    rnd.shuffle(stores)  # commutative
    if len(stores) > 2 and rnd.random() < 0.5:  # associative: (a + b) + c vs a + (b + c)
        ship(stores.pop(), stores[-1])
    leader = StateBackend(CFG)
    for s in stores:
        ship(s, leader, times=rnd.choice([1, 2]))  # idempotent: a delta merged twice
    got = _result(leader)
    for s in stores + [leader]:
        s.close()
    assert got == _expected(recs)
