"""spark-submit job: the YSB query (views counted per campaign per 10 s) with
slash.spark and with Spark's own groupBy(window) on the same Parquet files;
prints both times and whether the answers are equal.

    spark-submit --master spark://127.0.0.1:PORT spark_integration/ysb_job.py DATA.parquet \
        [--executors 2] [--transport ofi:tcp]
"""
import argparse
import time

from pyspark.sql import SparkSession

from slash.bench.spark import QUERY, verify
from slash.spark import run_aggregate, spark_window_aggregate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="+")
    ap.add_argument("--executors", type=int, default=None)
    ap.add_argument("--transport", default="shm")
    a = ap.parse_args()
    spark = SparkSession.builder.appName("slash-ysb").getOrCreate()
    t0 = time.perf_counter()
    res = run_aggregate(spark, a.data, executors=a.executors, transport=a.transport, **QUERY)
    t1 = time.perf_counter()
    ref = spark_window_aggregate(spark, a.data, **QUERY)
    theirs = ref.toArrow()
    t2 = time.perf_counter()
    print(f"slash.spark: {t1 - t0:.2f} s on {res.executors} executors, {res.rows} rows; "
          f"Spark groupBy(window): {t2 - t1:.2f} s; answers "
          f"{'equal' if verify(res.df.toArrow(), theirs) else 'DIFFER'}")
    spark.stop()


if __name__ == "__main__":
    main()
