"""slash.spark.window_join against Spark's own join on window and key, in
local[2]: one barrier stage, each task reading its split of both inputs."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from slash import errors  # noqa: E402
from slash.spark import session, window_join  # noqa: E402

from test_query_join import write_side  # noqa: E402


@pytest.fixture(scope="module")
def spark():
    s = session("local[2]", "slash-join-test")
    yield s
    s.stop()


def test_tumbling_join_equals_spark_join(spark, tmp_path):
    lp, rp = str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")
    write_side(lp, 5, 3000, 50, {"reserve": "int"})
    write_side(rp, 6, 4000, 50, {"price": "float"})
    got = window_join(spark, lp, rp, on="id", time="ts", window="tumbling:2s", lateness="1s",
                      executors=2)
    size = 2000
    l, r = spark.read.parquet(lp).alias("l"), spark.read.parquet(rp).alias("r")
    ws = F.floor(F.col("l.ts") / size) * size
    want = (l.join(r, (F.col("l.id") == F.col("r.id")) &
                   (F.floor(F.col("l.ts") / size) == F.floor(F.col("r.ts") / size)))
            .select(ws.cast("long").alias("window_start"), (ws + size).cast("long").alias("window_end"),
                    F.col("l.id").alias("id"), F.col("l.ts").alias("left_ts"),
                    F.col("l.reserve").alias("left_reserve"), F.col("r.ts").alias("right_ts"),
                    F.col("r.price").alias("right_price")))
    cols = ["window_start", "window_end", "id", "left_ts", "left_reserve", "right_ts", "right_price"]
    g = sorted(tuple(x[c] for c in cols) for x in got.collect())
    w = sorted(tuple(x[c] for c in cols) for x in want.collect())
    assert len(g) == len(w) > 0
    assert g == w
    assert "Exchange hashpartitioning" not in got._jdf.queryExecution().executedPlan().toString()


def test_dataframe_inputs_are_refused_clearly(spark, tmp_path):
    lp = str(tmp_path / "l.parquet")
    write_side(lp, 7, 10, 5, {"v": "int"})
    with pytest.raises(errors.InvalidArgument, match="write the left DataFrame to Parquet"):
        window_join(spark, spark.read.parquet(lp), lp, on="id", time="ts", window="tumbling:1s")
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
