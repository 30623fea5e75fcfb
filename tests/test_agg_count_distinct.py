"""count_distinct:COL: the exact number of distinct non-null values, for
modest cardinalities (at most 1023 a window and key, 8 KiB of state): equal
to DuckDB's count(DISTINCT ...) in every window kind and both modes, over
integers, floats and strings; past the bound a clear error names the
column. Merge laws, executors, checkpoints and moves: test_agg_sketches.py."""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.errors import OutOfRange, SlashError
from slash.query import Query
from slash.runner import run
from slash.spark.batch import make_query
from slash.state import COUNT_DISTINCT_MAX

from _state_reference import window_sql

AGGS = ["count_distinct:user", "count_distinct:page", "count_distinct:score", "count"]


def make_file(tmp_path, rows=30000, seed=6) -> str:
    rng = np.random.default_rng(seed)
    table = pa.table({
        "ts": pa.array(np.sort(rng.integers(0, 12000, rows)), pa.int64()),
        "k": pa.array(rng.integers(0, 8, rows), pa.int64()),
        "user": pa.array(rng.integers(0, 800, rows), pa.int64(), mask=rng.random(rows) < 0.1),
        "page": pa.array([f"/p/{v}" for v in rng.integers(0, 300, rows)]),
        "score": pa.array(rng.integers(0, 400, rows) / 4.0),
    })
    path = tmp_path / "events.parquet"
    pq.write_table(table, path, row_group_size=4000)
    return str(path)


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("window", ["tumbling:3s", "sliding:4s/2s", "session:5ms"])
def test_count_distinct_equals_duckdb(tmp_path, window, mode):
    path = make_file(tmp_path)
    cols = ("count(DISTINCT user) AS count_distinct_user, count(DISTINCT page) AS "
            "count_distinct_page, count(DISTINCT score) AS count_distinct_score, count(*) AS count")
    want = sorted(duckdb.sql(window_sql(f"read_parquet('{path}')", window, cols)).fetchall())
    got = run(Query(time="ts", window=window, key="k", aggregates=AGGS), [path], executors=2, mode=mode)
    assert sorted(tuple(r[c] for c in ["window_start", "k", *[c for c in got.column_names
                                                             if "count" in c]])
                  for r in got.to_pylist()) == want


def test_past_the_bound_an_error_names_the_column_and_the_way_out():
    n = COUNT_DISTINCT_MAX + 1
    t = pa.table({"ts": pa.array(np.zeros(n, np.int64)), "k": np.ones(n, np.int64),
                  "user": pa.array(np.arange(n))})
    q = Query(time="ts", window="tumbling:1s", key="k", aggregates=["count_distinct:user"])
    with pytest.raises(SlashError, match=r"count_distinct:user: 1 window\(s\) hold more than 1023 "
                                         r"distinct values.*approx_count_distinct:user"):
        run(q, t)
    assert issubclass(OutOfRange, SlashError)
    ok = run(q, t.slice(0, n - 1)).to_pylist()  # at the bound: exact
    assert ok[0]["count_distinct_user"] == COUNT_DISTINCT_MAX


def test_spark_name_count_distinct():
    q = make_query("ts", "tumbling:1s", "k", ["countDistinct:user"], None, None)
    assert [a.name for a in q.aggregates] == ["count_distinct_user"]
