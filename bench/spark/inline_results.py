"""What consuming a slash.spark result costs: small results inline (an
in-memory DataFrame) vs as Parquet files vs Spark's own groupBy(window) query.

A plain count per key (100 keys) per 10 s over ROWS rows in two
pyarrow-written Parquet files, local[2], warmed; each round runs every side
once per consumer, the sides taking turns. Prints medians (seconds) and rec/s
for window_aggregate + the consumer, and the ratios to Spark's.

    PYTHONPATH=python python3 bench/spark/inline_results.py [ROWS] [ROUNDS]
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_input(d: str, rows: int) -> list:
    rng = np.random.default_rng(1)
    paths = []
    span = 600_000  # 60 windows of 10 s x 100 keys: 6,000 result rows
    for f in range(2):
        n = rows // 2
        t = np.sort(rng.integers(f * span // 2, (f + 1) * span // 2, n))
        p = os.path.join(d, f"part-{f}.parquet")
        pq.write_table(pa.table({"t": t, "k": rng.integers(0, 100, n)}), p)
        paths.append(p)
    return paths


def main() -> None:
    rows = int(float(sys.argv[1])) if len(sys.argv) > 1 else 20_000_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    from pyspark.sql import functions as F

    from slash.spark import run_aggregate, session, spark_window_aggregate

    spark = session("local[2]", "slash-inline-bench")
    d = tempfile.mkdtemp(prefix="slash-inline-bench-")
    paths = write_input(d, rows)
    small = spark.createDataFrame([(k, f"name-{k}") for k in range(100)], "k long, name string")
    small.cache().count()

    def slash(inline: bool):
        return run_aggregate(spark, paths, time="t", window="tumbling:10s", key="k", aggs=["count"],
                             result_inline_bytes=(4 << 20) if inline else 0).df

    def spark_own():
        return spark_window_aggregate(spark, paths, time="t", window="tumbling:10s", key="k",
                                      aggs=["count"])

    sides = {"spark": spark_own, "inline": lambda: slash(True), "files": lambda: slash(False)}
    consumers = {
        "agg(sum).collect": lambda df: df.agg(F.sum("count")).collect()[0][0],
        "count": lambda df: df.count(),
        "toPandas": lambda df: len(df.toPandas()),
        "join small": lambda df: df.join(small, "k").agg(F.sum("count")).collect()[0][0],
    }
    expect = {"agg(sum).collect": rows, "count": 6000, "toPandas": 6000, "join small": rows}
    total = {(s, c): [] for s in sides for c in consumers}
    use = {(s, c): [] for s in sides for c in consumers}
    for r in range(rounds + 1):  # round 0 warms up
        for c, consume in consumers.items():
            order = list(sides) if r % 2 else list(reversed(sides))
            for s in order:
                t0 = time.perf_counter()
                df = sides[s]()
                t1 = time.perf_counter()
                got = consume(df)
                t2 = time.perf_counter()
                assert got == expect[c], (s, c, got)
                if r:
                    total[(s, c)].append(t2 - t0)
                    use[(s, c)].append(t2 - t1)
    print(f"{rows:,} rows, {rounds} rounds, medians")
    print(f"{'consumer':18} {'side':7} {'total s':>8} {'consume s':>10} {'M rec/s':>8} {'vs spark':>8}")
    for c in consumers:
        base = statistics.median(total[("spark", c)])
        for s in sides:
            m = statistics.median(total[(s, c)])
            print(f"{c:18} {s:7} {m:8.3f} {statistics.median(use[(s, c)]):10.3f} "
                  f"{rows / m / 1e6:8.1f} {base / m:7.2f}x")
    # the consumers alone, on one result of each kind, alternating
    frames = {"inline": slash(True), "files": slash(False)}
    alone = {(s, c): [] for s in frames for c in consumers}
    for r in range(3 * rounds + 1):
        for c, consume in consumers.items():
            for s in (frames if r % 2 else reversed(list(frames))):
                t0 = time.perf_counter()
                consume(frames[s])
                if r:
                    alone[(s, c)].append(time.perf_counter() - t0)
    print("consumer alone, same result DataFrame, medians (ms): inline / files")
    for c in consumers:
        a, b = (statistics.median(alone[(s, c)]) * 1e3 for s in frames)
        print(f"{c:18} {a:7.1f} / {b:7.1f}  ({b / a:.2f}x)")
    # what Spark's optimizer makes of agg(sum(count)) over its own groupBy
    print(spark_own().agg(F.sum("count"))._jdf.queryExecution().optimizedPlan().toString()
          .splitlines()[0])
    spark.stop()
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
