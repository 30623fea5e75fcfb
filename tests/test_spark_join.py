"""slash.spark.window_join against Spark's own join on window and key, in
local[2]: one barrier stage, each task reading its split of both inputs."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from slash import errors  # noqa: E402
from slash.spark import window_join  # noqa: E402

from test_query_join import write_side  # noqa: E402


def spark_tumbling_join(l, r, size):
    """Spark's own join of DataFrames ``l`` and ``r`` on id and the
    ``size``-ms tumbling window of ts, with window_join's columns."""
    l, r = l.alias("l"), r.alias("r")
    ws = F.floor(F.col("l.ts") / size) * size
    return (l.join(r, (F.col("l.id") == F.col("r.id")) &
                   (F.floor(F.col("l.ts") / size) == F.floor(F.col("r.ts") / size)))
            .select(ws.cast("long").alias("window_start"), (ws + size).cast("long").alias("window_end"),
                    F.col("l.id").alias("id"), F.col("l.ts").alias("left_ts"),
                    F.col("l.reserve").alias("left_reserve"), F.col("r.ts").alias("right_ts"),
                    F.col("r.price").alias("right_price")))


def assert_pairs_equal(got, want):
    cols = ["window_start", "window_end", "id", "left_ts", "left_reserve", "right_ts", "right_price"]
    g = sorted(tuple(x[c] for c in cols) for x in got.collect())
    w = sorted(tuple(x[c] for c in cols) for x in want.collect())
    assert len(g) == len(w) > 0
    assert g == w


def test_tumbling_join_equals_spark_join(spark, tmp_path):
    lp, rp = str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")
    write_side(lp, 5, 3000, 50, {"reserve": "int"})
    write_side(rp, 6, 4000, 50, {"price": "float"})
    got = window_join(spark, lp, rp, on="id", time="ts", window="tumbling:2s", lateness="1s",
                      executors=2)
    assert_pairs_equal(got, spark_tumbling_join(spark.read.parquet(lp), spark.read.parquet(rp), 2000))
    assert "Exchange hashpartitioning" not in got._jdf.queryExecution().executedPlan().toString()


def test_dataframe_sides_a_scan_and_a_computed_one_equal_spark_join(spark, tmp_path):
    lp, rp = str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")
    write_side(lp, 5, 3000, 50, {"reserve": "int"})
    write_side(rp, 6, 4000, 50, {"price": "float"})
    left = spark.read.parquet(lp)  # a scan: its files are read by the executors
    right = spark.read.parquet(rp).where("price > 0.3").withColumn("price", F.col("price") * 2)
    got = window_join(spark, left, right, on="id", time="ts", window="tumbling:2s", executors=2)
    assert_pairs_equal(got, spark_tumbling_join(left, right, 2000))


def test_a_missing_input_path_is_named(spark, tmp_path):
    lp = str(tmp_path / "l.parquet")
    write_side(lp, 7, 10, 5, {"v": "int"})
    with pytest.raises(errors.UnknownName, match="does not exist"):
        window_join(spark, lp, str(tmp_path / "nowhere"), on="id", time="ts", window="tumbling:1s")


def test_interval_join_equals_spark_range_join(spark, tmp_path):
    lp, rp = str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")
    write_side(lp, 7, 2000, 50, {"reserve": "int"})
    write_side(rp, 8, 2500, 50, {"price": "float"})
    got = window_join(spark, lp, rp, on="id", time="ts", interval=("-300ms", "+500ms"),
                      executors=2)
    l, r = spark.read.parquet(lp).alias("l"), spark.read.parquet(rp).alias("r")
    want = (l.join(r, (F.col("l.id") == F.col("r.id")) &
                   F.col("l.ts").between(F.col("r.ts") - 300, F.col("r.ts") + 500))
            .select(F.col("l.id").alias("id"), F.col("l.ts").alias("left_ts"),
                    F.col("l.reserve").alias("left_reserve"), F.col("r.ts").alias("right_ts"),
                    F.col("r.price").alias("right_price")))
    cols = ["id", "left_ts", "left_reserve", "right_ts", "right_price"]
    assert got.columns == cols
    g = sorted(tuple(x[c] for c in cols) for x in got.collect())
    w = sorted(tuple(x[c] for c in cols) for x in want.collect())
    assert len(g) == len(w) > 0
    assert g == w
