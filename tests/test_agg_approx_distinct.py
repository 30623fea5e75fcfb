"""approx_count_distinct:COL[:RSD]: a HyperLogLog sketch a window and key.

The estimate is within the sketch's stated error (1.04 / sqrt(2^p), p from
the relative standard deviation as Spark derives it) of DuckDB's exact
count(distinct) on the same data, in every window kind and both modes; the
registers merge by max, so any split over any number of executor
processes, epochs, deltas merged twice, checkpoints with a killed worker
and leadership moves give exactly the estimate of one sequential store (the
hashes are the same in every process: test_agg_sketches.py)."""
from __future__ import annotations

import math
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.errors import InvalidArgument, SchemaError
from slash.query import Query
from slash.runner import run
from slash.state import Aggregate

from _state_reference import slash_and_spark, slash_run_cli, window_sql

STATED = {9: 1.04 / math.sqrt(2 ** 9), 12: 1.04 / math.sqrt(2 ** 12)}


def make_file(tmp_path, rows=60000, seed=3) -> str:
    rng = np.random.default_rng(seed)
    table = pa.table({
        "ts": pa.array(np.sort(rng.integers(0, 12000, rows)), pa.int64()),
        "k": pa.array(rng.integers(0, 4, rows), pa.int64()),
        "user": pa.array(rng.integers(0, 20000, rows), pa.int64(), mask=rng.random(rows) < 0.1),
        "page": pa.array([f"/page/{v}" for v in rng.integers(0, 5000, rows)]),
        "score": pa.array(rng.integers(0, 3000, rows) / 8.0),
    })
    path = tmp_path / "events.parquet"
    pq.write_table(table, path, row_group_size=8000)
    return str(path)


def exact(path: str, window: str) -> dict:
    """DuckDB's exact count(distinct) per (window_start, k) for the windows used here."""
    cols = "count(DISTINCT user) AS user, count(DISTINCT page) AS page, count(DISTINCT score) AS score"
    sql = window_sql(f"read_parquet('{path}')", window, cols)
    con = duckdb.connect()
    return {(r[0], r[1]): r[2:] for r in con.sql(sql).fetchall()}


AGGS = ["approx_count_distinct:user", "approx_count_distinct:page:0.02", "approx_count_distinct:score"]


def small_count_sd(n: int, prec: int) -> float:
    """The standard error of a count n far below 2^p registers, where the
    sketch is a linear counter (Whang et al. 1990): sqrt(m (e^t - t - 1)), t = n / m."""
    m = 2 ** prec
    t = n / m
    return math.sqrt(m * (math.exp(t) - t - 1))


def check_within_stated_error(got: pa.Table, want: dict) -> None:
    """Counts of at least 100: each estimate within 4 stated standard errors
    (relative) of the exact count, and their root mean square relative error
    within 1.5 of them. Smaller counts, where collisions of a few values in
    one register are what errs: the root mean square of est - exact within
    1.5 times the linear counting error expected over the same counts."""
    rel = {9: [], 12: []}
    small, expected = [], []
    assert got.num_rows == len(want)
    for r in got.to_pylist():
        u, p, s = want[(r["window_start"], r["k"])]
        for est, true, prec in ((r["approx_count_distinct_user"], u, 9),
                                (r["approx_count_distinct_page"], p, 12),
                                (r["approx_count_distinct_score"], s, 9)):
            if true >= 100:
                assert abs(est / true - 1) <= 4 * STATED[prec], (r, true)
                rel[prec].append(est / true - 1)
            else:
                small.append(est - true)
                expected.append(small_count_sd(true, prec) ** 2)
    for prec, es in rel.items():
        if es:
            rms = math.sqrt(sum(e * e for e in es) / len(es))
            assert rms <= 1.5 * STATED[prec], (prec, rms)
    if small:
        rms, want_rms = (math.sqrt(sum(d * d for d in small) / len(small)),
                         math.sqrt(sum(expected) / len(expected)))
        assert rms <= 1.5 * want_rms + 0.05, (rms, want_rms)


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("window", ["tumbling:3s", "sliding:4s/2s", "session:5ms"])
def test_estimate_within_the_stated_error_of_duckdb_exact_count(tmp_path, window, mode):
    path = make_file(tmp_path, rows=20000 if window.startswith("session") else 60000)
    q = Query(time="ts", window=window, key="k", aggregates=AGGS)
    got = run(q, [path], executors=2, mode=mode)
    check_within_stated_error(got, exact(path, window))


def test_slash_run_cli_takes_approx_count_distinct_with_a_relative_error(tmp_path):
    path = make_file(tmp_path, rows=30000)
    got = slash_run_cli(path, tmp_path / "out.parquet", "tumbling:3s", "k", AGGS)
    check_within_stated_error(got, exact(path, "tumbling:3s"))


def test_nulls_are_not_counted_and_an_all_null_window_counts_zero():
    t = pa.table({"ts": pa.array([0, 1, 2, 5000, 5001], pa.int64()), "k": [1, 1, 1, 1, 1],
                  "v": pa.array([7, None, 7, None, None], pa.int64())})
    got = run(Query(time="ts", window="tumbling:5s", key="k",
                    aggregates=["approx_count_distinct:v"]), t).to_pylist()
    assert [r["approx_count_distinct_v"] for r in got] == [1, 0]


def test_equal_floats_count_once_whatever_their_sign_or_nan_payload():
    t = pa.table({"ts": pa.array([0] * 5, pa.int64()), "k": [1] * 5,
                  "v": pa.array([0.0, -0.0, float("nan"), -float("nan"), 2.5])})
    got = run(Query(time="ts", window="tumbling:5s", key="k",
                    aggregates=["approx_count_distinct:v"]), t).to_pylist()
    assert got[0]["approx_count_distinct_v"] == 3


def test_precision_follows_sparks_rule_and_a_bad_error_names_the_column():
    assert Aggregate.parse("approx_count_distinct:u").precision == 9
    assert Aggregate.parse("approx_count_distinct:u:0.02").precision == 12
    assert Aggregate.parse("approx_count_distinct:u:0.01").precision == 14
    with pytest.raises(InvalidArgument, match="approx_count_distinct:u: the relative standard deviation"):
        Aggregate.parse("approx_count_distinct:u:0.001")
    with pytest.raises(InvalidArgument, match="must be a number"):
        Aggregate.parse("approx_count_distinct:u:tiny")
    with pytest.raises(InvalidArgument, match="takes no parameter"):
        Aggregate("sum", "u", 0.1)


def test_a_column_of_a_type_without_a_hash_is_refused_naming_it():
    t = pa.table({"ts": pa.array([0], pa.int64()), "k": [1], "v": pa.array([[1, 2]])})
    with pytest.raises(SchemaError, match="approx_count_distinct:v"):
        run(Query(time="ts", window="tumbling:5s", key="k", aggregates=["approx_count_distinct:v"]), t)


@pytest.mark.slow
def test_slash_spark_and_sparks_own_hll_both_within_the_stated_error(spark, tmp_path):
    """Through slash.spark.window_aggregate and Spark's own
    approx_count_distinct at the same relative error, on the same file:
    each within the stated error of the exact count, and Slash's root mean
    square error not above 1.5 times Spark's (the hashes differ, so the
    estimates are not equal)."""
    path = make_file(tmp_path)
    want = exact(path, "tumbling:3s")
    ours, theirs = slash_and_spark(spark, path, "tumbling:3s", "k", AGGS)
    check_within_stated_error(ours, want)
    check_within_stated_error(theirs, want)

    def rms(t: pa.Table) -> float:
        es = [r[f"approx_count_distinct_{c}"] / want[(r["window_start"], r["k"])][i] - 1
              for r in t.to_pylist() for i, c in enumerate(["user", "page", "score"])]
        return math.sqrt(sum(e * e for e in es) / len(es))

    assert rms(ours) <= 1.5 * rms(theirs) + 0.005, (rms(ours), rms(theirs))
