"""Top-N per window (``top:N:COL``): per window the N keys with the largest
aggregate, ranked, from the leaders' fired windows; equal to DuckDB's
``row_number() OVER (PARTITION BY window ORDER BY agg DESC, key)`` over the
same Parquet file, from Python (1 and 2 executors, tumbling and sliding
windows, ties, null keys and null sums), the CLI and
slash.spark.window_aggregate; bad specs and streams refused naming why."""
from __future__ import annotations

import subprocess
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash import errors
from slash.query import Query
from slash.runner import run


@pytest.fixture(scope="module")
def bids(tmp_path_factory):
    """Bids on items (string ids, some null), with prices (some null), over 60 s."""
    rng = np.random.default_rng(3)
    n = 20_000
    items = np.array([f"item-{i}" for i in range(40)] + [None], dtype=object)
    # skewed: a few hot items, many ties among the rest
    pick = np.minimum(rng.zipf(1.3, n) - 1, len(items) - 1)
    price = rng.integers(1, 100, n).astype(object)
    price[rng.random(n) < 0.05] = None
    path = str(tmp_path_factory.mktemp("top") / "bids.parquet")
    pq.write_table(pa.table({"t": np.sort(rng.integers(0, 60_000, n)),
                             "item": pa.array(items[pick], pa.string()),
                             "price": pa.array(price, pa.int64())}), path, row_group_size=4000)
    return path


def duck_top(path: str, n: int, agg_sql: str, size: int, slide: int) -> list:
    """DuckDB's top n per window: sliding windows as the starts each row falls in."""
    return duckdb.sql(f"""
        WITH w AS (
            SELECT t // {slide} * {slide} - k * {slide} AS ws, item, price
            FROM read_parquet('{path}'), range(0, {size // slide}) r(k)
            WHERE t // {slide} * {slide} - k * {slide} > t - {size}),
        a AS (SELECT ws, item, {agg_sql} AS v FROM w GROUP BY ws, item)
        SELECT ws, ws + {size}, item, v, rank FROM (
            SELECT *, row_number() OVER (PARTITION BY ws ORDER BY v DESC NULLS LAST,
                                         item ASC NULLS LAST) AS rank FROM a)
        WHERE rank <= {n} ORDER BY ws, rank""").fetchall()


def slash_top(out: pa.Table, col: str) -> list:
    return [(r["window_start"], r["window_end"], r["item"], r[col], r["rank"]) for r in out.to_pylist()]


@pytest.mark.parametrize("n", [1, 2])
def test_top_3_items_by_count_per_tumbling_window_equal_duckdbs_row_number(bids, n):
    out = run(Query(time="t", window="tumbling:10s", key="item", aggregates=["count", "top:3:count"]),
              bids, executors=n)
    assert out.column_names == ["window_start", "window_end", "item", "count", "rank"]
    want = duck_top(bids, 3, "count(*)", 10_000, 10_000)
    assert len(want) == 18
    assert slash_top(out, "count") == want


def test_top_5_by_sum_per_sliding_window_ranks_ties_by_key_and_null_sums_last(bids):
    out = run(Query(time="t", window="sliding:20s/5s", key="item",
                    aggregates=["sum:price", "count", "top:5:sum_price"]), bids, executors=2)
    want = duck_top(bids, 5, "sum(price)", 20_000, 5_000)
    assert slash_top(out, "sum_price") == want
    assert len({r[0] for r in want}) == 15  # every sliding window ranked on its own


def test_a_top_n_larger_than_the_keys_keeps_every_key_ranked(bids):
    out = run(Query(time="t", window="tumbling:60s", key="item", aggregates=["count", "top:1000:count"]),
              bids, executors=1)
    want = duck_top(bids, 1000, "count(*)", 60_000, 60_000)
    assert len(want) == 41  # 40 items and the null one
    assert slash_top(out, "count") == want


def test_slash_run_cli_takes_top_as_an_aggregate(bids, tmp_path):
    out = tmp_path / "top.parquet"
    r = subprocess.run([sys.executable, "-m", "slash", "run", "--input", bids, "--time", "t",
                        "--window", "tumbling:10s", "--key", "item", "--agg", "count",
                        "--agg", "top:2:count", "--executors", "2", "--output", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert slash_top(pq.read_table(out), "count") == duck_top(bids, 2, "count(*)", 10_000, 10_000)


@pytest.mark.parametrize("aggs,message", [
    (["count", "top:3:sum_price"], r"'sum_price' is not an aggregate of this query.*\['count'\]"),
    (["count", "top:0:count"], "N >= 1"),
    (["count", "top:x:count"], "integer N"),
    (["count", "top:1:count", "top:2:count"], "one top:N:COL"),
])
def test_bad_top_specs_are_refused_naming_why(aggs, message):
    with pytest.raises(errors.InvalidArgument, match=message):
        Query(time="t", window="tumbling:10s", key="item", aggregates=aggs)


def test_spark_window_aggregate_top_n_equals_duckdb_and_a_stream_refuses_it(spark, bids, tmp_path):
    from slash.spark import stream, window_aggregate
    df = window_aggregate(spark, bids, time="t", window="tumbling:10s", key="item",
                          aggs=["count", "top:3:count"], executors=2)
    got = sorted((tuple(r[c] for c in ("window_start", "window_end", "item", "count", "rank"))
                  for r in df.collect()), key=lambda r: (r[0], r[4]))
    with pytest.raises(errors.InvalidArgument, match="a stream appends"):
        stream(spark, str(tmp_path), time="t", window="tumbling:10s", key="item",
               aggs=["count", "top:3:count"], sink=str(tmp_path / "out"))
    want = duck_top(bids, 3, "count(*)", 10_000, 10_000)
    ws = [r[0] for r in got]
    if ws and not isinstance(ws[0], int):  # Spark gives int64 ms as int; timestamps otherwise
        pytest.fail(f"window_start came back as {type(ws[0])}")
    assert got == want
