"""slash.spark against Spark's own groupBy(window(...)) on the same data, in
local[2]: every window kind and aggregate, both source paths (Parquet files
read by the tasks; any Spark DataFrame through mapInArrow), the plan has no
hash shuffle, the result is an ordinary DataFrame, and the errors name what
is wrong."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

from slash.errors import SchemaError, UnknownName  # noqa: E402
from _rdma import needs_verbs  # noqa: E402
from slash.spark import (NotEnoughSlots, TaskFailed, run_aggregate,  # noqa: E402
                         spark_window_aggregate, window_aggregate)

pytestmark = pytest.mark.slow

AGGS = ["count", "sum:i", "min:i", "max:i", "avg:v", "sum:v", "min:v", "max:v", "min_by:i", "max_by:v"]


def make_table(n=6000, seed=3):
    """Time-ordered events over ~100 s with bursts (so sessions split), 13 int
    keys, a string key, an int and a float value, and an event type."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(12.0, n).astype(np.int64)
    gaps[rng.random(n) < 0.01] += 4000  # quiet spells longer than the session gap
    t = np.cumsum(gaps) + 1_000
    return pa.table({
        "t": t,
        "k": rng.integers(0, 13, n),
        "s": pa.array([f"user-{x}" for x in rng.integers(0, 5, n)]),
        "i": rng.integers(-50, 1000, n),
        "v": rng.normal(10, 3, n),
        "event": pa.array(rng.choice(["view", "click", "buy"], n)),
    })


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    table = make_table()
    d = tmp_path_factory.mktemp("spark-data")
    path = str(d / "events.parquet")
    pq.write_table(table, path, row_group_size=700)  # 9 row groups: uneven splits
    return table, path


def rows(df, key):
    """A DataFrame's rows, sorted, as column -> NumPy array."""
    t = df.toArrow() if hasattr(df, "toArrow") else pa.Table.from_pandas(df.toPandas())
    t = t.sort_by([("window_start", "ascending"), ("window_end", "ascending")] +
                  [(k, "ascending") for k in key])
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}


def assert_same(ours, theirs, key):
    a, b = rows(ours, key), rows(theirs, key)
    assert list(a) == list(b)
    assert len(a["window_start"]) == len(b["window_start"]) > 0
    for c in a:
        if a[c].dtype.kind == "f":
            np.testing.assert_allclose(a[c], b[c], rtol=1e-9, err_msg=c)
        else:
            np.testing.assert_array_equal(a[c], b[c], err_msg=c)


@pytest.mark.parametrize("window", ["tumbling:10s", "sliding:30s/10s", "session:3s"])
@pytest.mark.parametrize("key", ["k", "s"])
def test_fast_path_equals_spark(spark, data, window, key):
    _, path = data
    res = run_aggregate(spark, path, time="t", window=window, key=key, aggs=AGGS, executors=2)
    assert res.executors == 2 and res.fast_path
    assert res.records_in == 6000 and res.late_records == 0
    ref = spark_window_aggregate(spark, path, time="t", window=window, key=key, aggs=AGGS)
    assert_same(res.df, ref, [key])


@needs_verbs
def test_window_aggregate_over_verbs_equals_spark(spark, data):
    """The executors in Spark's tasks exchange their deltas over an RDMA
    device (scripts/verbs-tests.sh: soft-RoCE in a guest)."""
    _, path = data
    kw = dict(time="t", window="tumbling:10s", key="k", aggs=AGGS)
    ours = window_aggregate(spark, path, executors=2, transport="ofi:verbs", **kw)
    assert_same(ours, spark_window_aggregate(spark, path, **kw), ["k"])


def test_fast_path_many_string_keys_with_nulls_under_a_filter_equals_spark(spark, tmp_path):
    """30 k string keys (some null) over 4 windows, the filter a selection in
    the fold: the windows equal Spark's own query's, null keys a group."""
    rng = np.random.default_rng(17)
    n = 120_000
    codes = rng.integers(0, 30_000, n)
    user = pa.array([None if c % 89 == 0 else f"user-{c}" for c in codes])
    table = pa.table({"t": np.sort(rng.integers(0, 40_000, n)), "user": user,
                      "event": pa.array(rng.choice(["view", "click", "buy"], n)),
                      "price": rng.integers(1, 400, n) / 4})
    path = str(tmp_path / "users.parquet")
    pq.write_table(table, path, row_group_size=20_000)
    kw = dict(time="t", window="tumbling:10s", key="user", aggs=["count", "sum:price"],
              filter="event == 'view'")
    res = run_aggregate(spark, path, executors=2, **kw)
    views = int(np.count_nonzero(table.column("event").to_numpy(zero_copy_only=False) == "view"))
    assert res.fast_path and res.records_in == views  # the rows the filter keeps
    ours = rows(res.df, ["user"])
    assert (ours["user"] == None).any()  # noqa: E711 (element-wise)
    assert_same(res.df, spark_window_aggregate(spark, path, **kw), ["user"])


@pytest.mark.parametrize("window", ["tumbling:10s", "sliding:30s/10s", "session:3s"])
def test_general_path_equals_spark(spark, data, window):
    table, _ = data
    df = spark.createDataFrame(table.to_pandas())  # contiguous slices, one per slot
    assert df.rdd.getNumPartitions() == 2
    spark.conf.set("spark.slash.jvmExport", "false")  # mapInArrow, as without the exporter
    try:
        res = run_aggregate(spark, df, time="t", window=window, key="k", aggs=AGGS,
                            filter="event in ('view', 'buy')")
    finally:
        spark.conf.unset("spark.slash.jvmExport")
    assert not res.fast_path and res.route == "arrow" and res.executors == 2
    assert res.late_records == 0
    assert "MapInArrow" in res.plan and "Exchange" not in res.plan
    ref = spark_window_aggregate(spark, df, time="t", window=window, key="k", aggs=AGGS,
                                 filter="event in ('view', 'buy')")
    assert_same(res.df, ref, ["k"])


def test_general_path_timestamp_column_and_composite_key(spark, data):
    from pyspark.sql import functions as F

    table, _ = data
    df = spark.createDataFrame(table.to_pandas()).withColumn("ts", F.timestamp_millis("t"))
    ours = window_aggregate(spark, df, time="ts", window="tumbling:5s", key=["k", "s"],
                            aggs=["count", "max:i"], filter="i >= 0")
    ref = spark_window_aggregate(spark, df, time="ts", window="tumbling:5s", key=["k", "s"],
                                 aggs=["count", "max:i"], filter="i >= 0")
    assert_same(ours, ref, ["k", "s"])


def test_filter_and_allgather_rendezvous(spark, data):
    _, path = data
    res = run_aggregate(spark, path, time="t", window="tumbling:10s", key="k", aggs=["count", "sum:i"],
                        filter=["event == 'view'", "i > 100"], rendezvous="allgather")
    ref = spark_window_aggregate(spark, path, time="t", window="tumbling:10s", key="k",
                                 aggs=["count", "sum:i"], filter=["event == 'view'", "i > 100"])
    assert_same(res.df, ref, ["k"])


def test_plan_has_no_hash_shuffle_and_result_is_ordinary(spark, data):
    _, path = data
    res = run_aggregate(spark, path, time="t", window="tumbling:10s", key="k", aggs=["count"])
    assert "ParallelCollectionRDD" in res.plan  # the barrier tasks read nothing through Spark
    assert "Shuffled" not in res.plan and "Exchange" not in res.plan
    assert "hashpartitioning" not in res.df._jdf.queryExecution().executedPlan().toString()
    # the things a barrier RDD refuses (take/limit/first) work, and repeat
    df = res.df
    first = df.orderBy("window_start", "k").first()
    assert first["window_start"] == 0 and first["count"] > 0
    assert len(df.limit(3).collect()) == 3
    assert df.count() == df.count() == len(df.collect())
    joined = df.join(df.groupBy("k").count().withColumnRenamed("count", "n"), "k")
    assert joined.count() == df.count()
    # Spark's own plan for the same query does shuffle: the check can fail
    ref = spark_window_aggregate(spark, path, time="t", window="tumbling:10s", key="k", aggs=["count"])
    ref.collect()
    assert "hashpartitioning" in ref._jdf.queryExecution().executedPlan().toString()


def test_too_few_slots(spark, data):
    _, path = data
    with pytest.raises(NotEnoughSlots, match="3 Slash executors need 3 .* has 2"):
        window_aggregate(spark, path, time="t", window="tumbling:10s", key="k", aggs=["count"],
                         executors=3)


def test_missing_path(spark, tmp_path):
    with pytest.raises(UnknownName, match="does not exist"):
        window_aggregate(spark, str(tmp_path / "nope.parquet"), time="t", window="tumbling:10s",
                         key="k", aggs=["count"])


def test_schema_error_before_launch(spark, data):
    _, path = data
    with pytest.raises(SchemaError, match="'nope'"):
        window_aggregate(spark, path, time="t", window="tumbling:10s", key="nope", aggs=["count"])


def test_failed_task_names_rank(spark, data, tmp_path):
    table, _ = data
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    pq.write_table(table.slice(0, 3000), a)
    pq.write_table(table.slice(3000), b)
    from slash.sources import FileSource

    src = FileSource([a, b])
    os.unlink(b)  # the ranks that read b's row groups fail; either may be the first named
    with pytest.raises(TaskFailed, match=r"rank \d failed: .*b.parquet") as e:
        window_aggregate(spark, src, time="t", window="tumbling:10s", key="k", aggs=["count"],
                         executors=2)
    assert e.value.rank in (0, 1)
