"""slash.spark on DataFrames as PySpark users hold them: the plan decides the
path (a Parquet scan under filters and projections runs the fast path on the
files Spark would read; anything else the general path, with the query's
filters and columns applied in Spark first), and either way the answer is
that of Spark's own groupBy(window(...)) on the same DataFrame: INT96 and
pandas-written files, a Hive layout, nulls, NaN, string keys, a string time
column in a non-UTC session zone, a join's, a union's and a UDF's output."""
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

from slash.errors import SchemaError  # noqa: E402
from slash.spark import run_aggregate, spark_window_aggregate  # noqa: E402

pytestmark = pytest.mark.slow

Q = dict(time="ts", window="tumbling:10s", aggs=["count", "sum:price", "max:qty"])
N = 4000


def events_table(n=N, seed=7):
    """~200 s of events: an int and a string key with nulls, a price with
    NaN and nulls, an event type, and a partition column ``day``."""
    rng = np.random.default_rng(seed)
    ts = 1_700_000_000_000_000 + np.sort(rng.integers(0, 200_000_000, n))  # us
    user = np.array([f"user-{x}" for x in rng.integers(0, 300, n)], dtype=object)
    user[rng.random(n) < 0.02] = None
    price = rng.normal(50, 20, n)
    price[rng.random(n) < 0.01] = np.nan
    price_nulls = rng.random(n) < 0.01
    k = rng.integers(0, 17, n)
    return pa.table({
        "ts": pa.array(ts, pa.timestamp("us", "UTC")),
        "k": pa.array(k, mask=rng.random(n) < 0.02),
        "user": pa.array(list(user), pa.string()),
        "price": pa.array(price, mask=price_nulls),
        "qty": pa.array(rng.integers(1, 9, n).astype(np.int32)),
        "event_type": pa.array(rng.choice(["view", "click", "purchase"], n)),
        "day": pa.array(rng.integers(1, 4, n).astype(np.int32)),
    })


@pytest.fixture(scope="module")
def files(spark, tmp_path_factory):
    """The same rows written by Spark (INT96 timestamps, Hive layout by
    ``day``, default file count) and by pandas (one file)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    table = events_table()
    d = tmp_path_factory.mktemp("df-input")
    pandas_path = str(d / "pandas.parquet")
    table.to_pandas().to_parquet(pandas_path, row_group_size=500)
    sdf = spark.createDataFrame(table.to_pandas(), schema=from_arrow_schema(table.schema))
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    try:
        sdf.repartition(3).write.parquet(str(d / "int96"))
        sdf.repartition(3).write.partitionBy("day").parquet(str(d / "hive"))
    finally:
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
    return {"int96": str(d / "int96"), "hive": str(d / "hive"), "pandas": pandas_path}


def rows(df):
    return sorted((tuple(_norm(v) for v in r) for r in df.collect()), key=repr)


def _norm(v):
    if isinstance(v, float):
        return "NaN" if v != v else round(v, 6)
    return v


def aggregate(spark, df, key, **kw):
    """(Slash's result, Spark's own answer on the same DataFrame)."""
    res = run_aggregate(spark, df, key=key, **Q, **kw)
    ref = spark_window_aggregate(spark, df, key=key, **Q, **kw)
    return res, ref


def assert_same(res, ref):
    a, b = rows(res.df), rows(ref)
    assert len(a) == len(b) > 0
    assert a == b


@pytest.mark.parametrize("key", ["k", "user"])
def test_a_spark_written_int96_scan_takes_the_fast_path_with_spark_answer(spark, files, key):
    res, ref = aggregate(spark, spark.read.parquet(files["int96"]), key)
    assert res.fast_path and res.records_in == N
    assert_same(res, ref)


def test_a_pandas_written_file_scan_takes_the_fast_path(spark, files):
    res, ref = aggregate(spark, spark.read.parquet(files["pandas"]), "user")
    assert res.fast_path
    assert_same(res, ref)


def test_the_plans_filters_run_in_slash_on_the_fast_path(spark, files):
    df = spark.read.parquet(files["int96"]).where(
        "event_type = 'view' and k in (1, 2, 3, 5, 8) and price < 60 and qty >= 2")
    res, ref = aggregate(spark, df, "user")
    assert res.fast_path
    assert_same(res, ref)


def test_a_timestamp_literal_filter_runs_in_slash_on_the_fast_path(spark, files):
    df = spark.read.parquet(files["int96"]).where("ts >= '2023-11-14 22:14:40'")
    res, ref = aggregate(spark, df, "k")
    assert res.fast_path
    assert_same(res, ref)


def test_a_hive_layouts_partition_filter_prunes_files_before_slash_reads(spark, files):
    df = spark.read.parquet(files["hive"]).where("day = 2 and event_type != 'click'")
    res, ref = aggregate(spark, df, "k")
    assert res.fast_path
    assert res.records_in < N / 2  # only the day=2 files were read
    assert_same(res, ref)


def test_a_partition_column_as_key_reads_its_hive_values(spark, files):
    res, ref = aggregate(spark, spark.read.parquet(files["hive"]), "day")
    assert res.fast_path
    assert_same(res, ref)


def test_a_float_greater_than_filter_is_left_to_spark_as_nan_passes_it(spark, files):
    df = spark.read.parquet(files["int96"]).where("price > 40")
    res, ref = aggregate(spark, df, "k")
    assert res.route == "export"  # Spark keeps NaN > 40; an Arrow compare would not
    assert_same(res, ref)


def test_renamed_columns_are_read_from_the_files_and_named_as_the_dataframe_names_them(spark, files):
    from pyspark.sql import functions as F

    df = spark.read.parquet(files["int96"]).select(
        F.col("user").alias("customer"), F.col("ts"), F.col("price").alias("qty"),
        F.col("qty").alias("price"), "event_type")  # a swap of two names too
    res, ref = aggregate(spark, df, "customer", filter="event_type == 'view'")
    assert res.route == "scan"
    assert res.df.columns == ref.columns
    assert_same(res, ref)


def test_top_n_over_a_renamed_scan_ranks_by_the_dataframes_column(spark, files):
    df = spark.read.parquet(files["int96"]).withColumnRenamed("price", "amount")
    res = run_aggregate(spark, df, key="k", time="ts", window="tumbling:10s",
                        aggs=["count", "sum:amount", "top:3:sum_amount"])
    assert res.fast_path and "sum_amount" in res.df.columns
    got = [(r["window_start"], r["k"], r["rank"]) for r in res.df.collect()]
    ref = spark_window_aggregate(spark, df, key="k", time="ts", window="tumbling:10s",
                                 aggs=["count", "sum:amount"])
    from pyspark.sql import Window, functions as F
    w = Window.partitionBy("window_start").orderBy(F.col("sum_amount").desc_nulls_last(),
                                                   F.col("k").asc_nulls_last())
    want = [(r["window_start"], r["k"], r["rank"]) for r in
            ref.withColumn("rank", F.row_number().over(w)).where("rank <= 3").collect()]
    assert sorted(got, key=repr) == sorted(want, key=repr) and got


@pytest.fixture(params=["export", "arrow"])
def route(request, spark):
    """The general path's two ways: the JVM export (the default) and
    mapInArrow (spark.slash.jvmExport=false, as in a session without the jar)."""
    if request.param == "arrow":
        spark.conf.set("spark.slash.jvmExport", "false")
    yield request.param
    spark.conf.unset("spark.slash.jvmExport")


def test_a_joins_output_takes_the_general_path_with_spark_answer(spark, files, route):
    from pyspark.sql import functions as F

    # k = 3 twice on the broadcast side: each such event is two joined rows
    campaigns = spark.createDataFrame([(i, f"c{i % 4}") for i in [*range(17), 3]],
                                      "k long, campaign string")
    df = spark.read.parquet(files["int96"]).join(F.broadcast(campaigns), "k")
    res, ref = aggregate(spark, df, "campaign")
    assert res.route == route
    assert_same(res, ref)


def test_a_scan_joined_to_a_broadcast_table_is_read_and_joined_by_the_executors(spark, files):
    from pyspark.sql import functions as F

    # k 13..16 and null k match nothing: an inner join drops those events
    campaigns = spark.createDataFrame([(i, f"c{i % 4}", i * 1.5) for i in range(13)],
                                      "k long, campaign string, bid double")
    df = spark.read.parquet(files["int96"]).join(F.broadcast(campaigns), "k")
    res, ref = aggregate(spark, df, "campaign")
    assert res.route == "scan-join"
    assert res.df.columns == ref.columns
    assert_same(res, ref)


def test_a_broadcast_joins_filters_and_values_come_from_either_side(spark, files):
    from pyspark.sql import functions as F

    campaigns = spark.createDataFrame([(i, f"c{i % 4}", float(i % 5)) for i in range(17)],
                                      "k long, campaign string, bid double")
    df = (spark.read.parquet(files["int96"]).where("event_type = 'view'")
          .join(F.broadcast(campaigns.where("bid > 0")), "k")
          .select("ts", F.col("user").alias("customer"), "campaign", F.col("bid").alias("price"),
                  "qty"))
    res, ref = aggregate(spark, df, "customer", filter="campaign != 'c2'")
    assert res.route == "scan-join"
    assert_same(res, ref)


def test_a_broadcast_join_on_a_string_column_with_nulls_keeps_sparks_rows(spark, files):
    from pyspark.sql import functions as F

    users = spark.createDataFrame([(f"user-{i}", i % 7) for i in range(0, 300, 2)] + [(None, 99)],
                                  "user string, tier int")
    df = spark.read.parquet(files["pandas"]).join(F.broadcast(users), "user")
    res, ref = aggregate(spark, df, "tier")
    assert res.route == "scan-join"
    assert_same(res, ref)


def test_a_join_spark_does_not_broadcast_takes_the_general_path_saying_why(spark, files, caplog):
    a = spark.read.parquet(files["int96"]).select("ts", "k", "price", "qty")
    b = spark.read.parquet(files["hive"]).select("k", "user").where("user = 'user-7'")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        df = a.join(b, "k")
        with caplog.at_level(logging.WARNING, logger="slash.spark"):
            res, ref = aggregate(spark, df, "user")
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert res.route == "export"
    assert "broadcasting neither side" in caplog.text
    assert_same(res, ref)


def test_a_union_of_scans_is_read_as_their_files_by_the_executors(spark, files):
    a = spark.read.parquet(files["int96"])
    df = a.union(spark.read.parquet(files["hive"]).select(*a.columns))
    res, ref = aggregate(spark, df, "k")
    assert res.route == "scan" and res.records_in == 2 * N
    assert_same(res, ref)


@pytest.mark.parametrize("key", ["qty", "user"])
def test_a_union_of_a_spark_and_a_pandas_written_file_in_a_non_utc_zone_keeps_sparks_answer(
        spark, files, key):
    # INT96 instants and pandas' int64 ones, columns in other orders, nulls in user and price
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        a = spark.read.parquet(files["int96"]).select("ts", "user", "price", "qty")
        b = spark.read.parquet(files["pandas"]).select("qty", "price", "ts", "user")
        res, ref = aggregate(spark, a.unionByName(b), key)
    finally:
        spark.conf.unset("spark.sql.session.timeZone")
    assert res.route == "scan" and res.records_in == 2 * N
    assert_same(res, ref)


def test_a_filter_on_a_union_runs_in_slash_on_every_inputs_files(spark, files, caplog):
    a = spark.read.parquet(files["int96"]).select("ts", "user", "price", "qty", "event_type")
    b = spark.read.parquet(files["pandas"]).select(*a.columns)
    df = a.union(b).union(a).where("event_type = 'view' and qty >= 3")
    with caplog.at_level(logging.WARNING, logger="slash.spark"):
        res, ref = aggregate(spark, df, "user")
    assert res.route == "scan"
    assert "union of 3 Parquet scans" in caplog.text and "2 filter(s) from its plan" in caplog.text
    assert_same(res, ref)


def test_a_union_under_a_filter_slash_cannot_express_takes_the_export_saying_why(
        spark, files, caplog):
    a = spark.read.parquet(files["int96"]).select("ts", "user", "price", "qty")
    df = a.union(spark.read.parquet(files["pandas"]).select(*a.columns)).where("price > 1")
    with caplog.at_level(logging.WARNING, logger="slash.spark"):
        res, ref = aggregate(spark, df, "user")
    assert res.route == "export"
    assert "input 1 of its union" in caplog.text and "price > 1" in caplog.text
    assert_same(res, ref)


@pytest.mark.parametrize("second, why", [
    ("qty + 1 AS qty", "column 'qty' is computed by Spark"),
    ("k AS qty", "column 'qty' is computed by Spark"),  # a double: the union casts a's int qty
    ("day", "column 'qty' from file columns named differently"),  # an int column of another name
], ids=["computed", "cast", "other-column"])
def test_a_union_whose_inputs_differ_takes_the_export_saying_why(spark, files, caplog, second, why):
    a = spark.read.parquet(files["int96"]).select("ts", "user", "price", "qty")
    b = spark.read.parquet(files["pandas"]).selectExpr("ts", "user", "price", second)
    with caplog.at_level(logging.WARNING, logger="slash.spark"):
        res, ref = aggregate(spark, a.union(b), "user")
    assert res.route == "export"
    assert why in caplog.text
    assert_same(res, ref)


def test_a_union_whose_inputs_filter_differently_reads_each_files_rows_under_its_inputs_filters(
        spark, files, caplog):
    a = spark.read.parquet(files["int96"]).select("ts", "user", "price", "qty", "event_type")
    b = spark.read.parquet(files["pandas"]).select(*a.columns)
    df = a.where("event_type = 'view'").union(b.where("event_type = 'click'"))
    with caplog.at_level(logging.WARNING, logger="slash.spark"):
        res, ref = aggregate(spark, df, "user")
    assert res.route == "scan"
    assert "2 filter(s) of its inputs' own applied to their files" in caplog.text
    assert_same(res, ref)


def test_a_union_of_one_scan_split_by_its_filters_counts_each_row_where_spark_does(spark, files):
    # the same files under each input's filter, nulls of user in neither; qty < 6 in both
    a = spark.read.parquet(files["int96"])
    df = a.where("user < 'user-150' and qty < 6").unionByName(
        a.where("user >= 'user-150' and qty < 6")).unionByName(a.where("k = 3"))
    res, ref = aggregate(spark, df, "k")
    assert res.route == "scan"
    assert_same(res, ref)


def test_a_udfs_output_takes_the_general_path_with_spark_answer(spark, files, route):
    from pyspark.sql import functions as F

    bucket = F.udf(lambda u: None if u is None else u[:6], "string")
    df = spark.read.parquet(files["int96"]).withColumn("bucket", bucket("user"))
    res, ref = aggregate(spark, df, "bucket")
    assert res.route == route
    assert_same(res, ref)


def test_filter_argument_runs_in_spark_before_the_transfer_on_the_general_path(spark, files, route):
    df = spark.read.parquet(files["int96"]).repartition(2)
    res, ref = aggregate(spark, df, "k", filter="event_type == 'view'")
    assert res.route == route
    assert res.records_in < N / 2  # only the views left Spark
    assert_same(res, ref)


def test_a_string_time_column_is_cast_in_the_session_time_zone(spark, files):
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        df = spark.read.parquet(files["int96"]).withColumn(
            "ts", F.date_format("ts", "yyyy-MM-dd HH:mm:ss.SSSSSS"))
        res = run_aggregate(spark, df, key="k", time="ts", window="tumbling:1 day",
                            aggs=["count", "sum:qty"])
        ref = spark_window_aggregate(spark, df, key="k", time="ts", window="tumbling:1 day",
                                     aggs=["count", "sum:qty"])
        assert rows(res.df) == rows(ref)
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def test_columns_the_query_does_not_name_are_never_looked_at(spark, files):
    from pyspark.sql import functions as F

    df = (spark.read.parquet(files["int96"]).repartition(2)
          .withColumn("span", F.expr("INTERVAL 1 DAY"))  # a type Arrow has no conversion for
          .withColumn("tags", F.array(F.col("user"))))
    res, ref = aggregate(spark, df, "k")
    assert_same(res, ref)


def test_the_call_says_at_warning_level_which_path_it_took_and_why(spark, files, caplog):
    with caplog.at_level(logging.WARNING, logger="slash.spark"):
        run_aggregate(spark, spark.read.parquet(files["int96"]), key="k", **Q)
        run_aggregate(spark, spark.read.parquet(files["int96"]).where("price > 1"), key="k", **Q)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("fast path" in m and "Parquet scan" in m for m in said)
    assert any("general path" in m and "price > 1" in m for m in said)


def test_a_missing_column_is_named(spark, files):
    with pytest.raises(SchemaError, match="'nope'"):
        run_aggregate(spark, spark.read.parquet(files["int96"]), key="nope", **Q)


def test_a_struct_key_groups_as_spark_groups_it_null_struct_apart(spark, files):
    from pyspark.sql import functions as F

    df = spark.read.parquet(files["int96"]).withColumn(
        "who", F.when(F.col("k") == 3, F.lit(None)).otherwise(F.struct("user", (F.col("k") % 2).alias("odd"))))
    res, ref = aggregate(spark, df, ["who", "event_type"])
    assert res.route == "export"
    assert res.df.columns == ref.columns
    assert_same(res, ref)


def test_an_array_key_is_refused_naming_the_column_and_why(spark, files):
    from pyspark.sql import functions as F

    df = spark.read.parquet(files["int96"]).withColumn("tags", F.array("user", "event_type"))
    with pytest.raises(SchemaError, match="'tags'.*fixed width"):
        run_aggregate(spark, df, key="tags", **Q)
