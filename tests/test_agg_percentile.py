"""percentile_approx:COL:Q: a fixed-size log-bucket quantile sketch a window
and key. Its answer is within the stated relative error (2^(L-7), 0.78 % at
level 0, which holds positive values spanning a factor 6e4) of DuckDB's exact
quantile_disc (the value at rank ceil(Q n)) in every window kind and both
modes; the merge is commutative and associative exactly (hypothesis over the
delta path; executors, checkpoints and moves: test_agg_sketches.py)."""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.errors import InvalidArgument
from slash.query import Query
from slash.runner import run
from slash.state import Aggregate

from _state_reference import slash_and_spark, slash_run_cli, window_sql

LEVEL0 = 2.0 ** -7  # the relative error at level 0
AGGS = ["percentile_approx:lat:0.5", "percentile_approx:lat:0.99", "percentile_approx:lat:0.999",
        "percentile_approx:n:0.9", "percentile_approx:lat:0", "percentile_approx:lat:1"]
QS = {"percentile_approx_lat_p50": ("lat", 0.5), "percentile_approx_lat_p99": ("lat", 0.99),
      "percentile_approx_lat_p99_9": ("lat", 0.999), "percentile_approx_n_p90": ("n", 0.9),
      "percentile_approx_lat_p0": ("lat", 0.0), "percentile_approx_lat_p100": ("lat", 1.0)}


def make_file(tmp_path, rows=40000, seed=4) -> str:
    """Latencies (log-normal, a factor of about 1e4 between the smallest and
    the largest), integer counts, nulls among both."""
    rng = np.random.default_rng(seed)
    table = pa.table({
        "ts": pa.array(np.sort(rng.integers(0, 12000, rows)), pa.int64()),
        "k": pa.array(rng.integers(0, 4, rows), pa.int64()),
        "lat": pa.array(np.clip(rng.lognormal(3.0, 1.0, rows), 0.5, 5000.0),
                        mask=rng.random(rows) < 0.1),
        "n": pa.array(rng.integers(1, 50000, rows), pa.int32(), mask=rng.random(rows) < 0.05),
    })
    path = tmp_path / "lat.parquet"
    pq.write_table(table, path, row_group_size=5000)
    return str(path)


def exact(path: str, window: str) -> dict:
    """DuckDB's quantile_disc per (window_start, k)."""
    cols = ", ".join(f"quantile_disc({c}, {q}) AS {name}" for name, (c, q) in QS.items())
    sql = window_sql(f"read_parquet('{path}')", window, cols)
    rel = duckdb.sql(sql)
    return {(r[0], r[1]): dict(zip(rel.columns[2:], r[2:])) for r in rel.fetchall()}


def check_within_stated_error(got: pa.Table, want: dict) -> None:
    assert got.num_rows == len(want)
    for r in got.to_pylist():
        w = want[(r["window_start"], r["k"])]
        for name, (_, q) in QS.items():
            if w[name] is None:
                assert r[name] is None, (name, r)
            elif q in (0.0, 1.0):
                assert r[name] == w[name], (name, r, w)  # the extremes are exact
            else:
                assert abs(r[name] - w[name]) <= LEVEL0 * abs(w[name]), (name, r[name], w[name])


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("window", ["tumbling:3s", "sliding:4s/2s", "session:5ms"])
def test_quantiles_within_the_stated_error_of_duckdb_quantile_disc(tmp_path, window, mode):
    path = make_file(tmp_path, rows=15000 if window.startswith("session") else 40000)
    q = Query(time="ts", window=window, key="k", aggregates=AGGS)
    check_within_stated_error(run(q, [path], executors=2, mode=mode), exact(path, window))


def test_slash_run_cli_takes_percentile_approx(tmp_path):
    path = make_file(tmp_path)
    got = slash_run_cli(path, tmp_path / "out.parquet", "tumbling:3s", "k", AGGS)
    assert got.schema.field("percentile_approx_n_p90").type == pa.float64()
    check_within_stated_error(got, exact(path, "tumbling:3s"))


def test_nulls_are_skipped_and_an_all_null_window_gives_null():
    t = pa.table({"ts": pa.array([0, 1, 2, 5000], pa.int64()), "k": [1, 1, 1, 1],
                  "v": pa.array([4.0, None, 8.0, None])})
    got = run(Query(time="ts", window="tumbling:5s", key="k",
                    aggregates=["percentile_approx:v:1", "percentile_approx:v:0"]), t).to_pylist()
    assert [(r["percentile_approx_v_p100"], r["percentile_approx_v_p0"]) for r in got] == \
        [(8.0, 4.0), (None, None)]


def test_nan_orders_above_every_number_as_spark():
    t = pa.table({"ts": pa.array([0, 1, 2], pa.int64()), "k": [1, 1, 1],
                  "v": pa.array([1.0, float("nan"), 2.0])})
    got = run(Query(time="ts", window="tumbling:5s", key="k",
                    aggregates=["percentile_approx:v:1", "percentile_approx:v:0.3"]), t).to_pylist()
    assert np.isnan(got[0]["percentile_approx_v_p100"]) and got[0]["percentile_approx_v_p30"] == 1.0


def test_quantile_is_checked_and_named():
    assert Aggregate.parse("percentile_approx:lat:0.999").name == "percentile_approx_lat_p99_9"
    for bad in ("percentile_approx:lat", "percentile_approx:lat:1.5", "percentile_approx:lat:0.12345"):
        with pytest.raises(InvalidArgument, match="percentile_approx:lat needs a quantile"):
            Aggregate.parse(bad)


@pytest.mark.slow
def test_slash_spark_and_sparks_own_percentile_approx_agree_within_the_stated_error(spark, tmp_path):
    """Through slash.spark.window_aggregate and Spark's own percentile_approx
    (default accuracy 10000: rank error 1e-4) on the same file: both within
    the stated error of DuckDB's quantile_disc (Spark's at the extremes too)."""
    path = make_file(tmp_path)
    want = exact(path, "tumbling:3s")
    ours, theirs = slash_and_spark(spark, path, "tumbling:3s", "k", AGGS)
    check_within_stated_error(ours, want)
    check_within_stated_error(theirs, want)
