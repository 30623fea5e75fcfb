"""What a DataFrame Spark computed costs to hand to Slash, and the JVM-side
export (:mod:`slash.spark.jvm_export`) against Spark's own query.

The data (``--rows``, default 20 M, written once by Spark into
``--data-dir``, snappy Parquet, Spark's default partitioning when read):
``ts`` TimestampType rising at 1 M rows/s, ``key`` int (100 values),
``skey`` string (100,000 values), ``event_type`` string (view, click,
purchase), ``ad_id`` int (1,000 values), ``price`` double; ``campaigns``:
``ad_id`` -> ``campaign`` (int). Two DataFrames over it: ``scan``
(``spark.read.parquet``) and ``join`` (``events.join(broadcast(campaigns),
"ad_id")``, the YSB shape). The query: ``event_type == 'view'``, 10 s
tumbling ``count`` and ``sum(price)`` by ``key`` or by ``skey``.

``floor`` times, on the query's columns (ts, key, skey, event_type, price),
taking turns, warmed:

* ``mapInArrow``: a ``df.mapInArrow`` whose Python task only counts rows
  (the general path's transfer, with nothing done to the rows);
* ``jvm_count``: ``df.queryExecution().toRdd().count()``, a JVM task that
  only counts the rows (computing them: the floor under any export);
* ``parquet``: ``df.write.parquet`` uncompressed to /dev/shm (Spark's own
  columnar writer);
* ``export``: :func:`slash.spark.jvm_export.export_columns` (Arrow IPC
  files in /dev/shm), when the jar is on the session's classpath;
* ``spark``: Spark's ``groupBy(window(ts, '10 seconds'), key).agg(count,
  sum(price))`` to the ``noop`` sink.

Each with its wall time and the CPU seconds of the JVM and every process
under it (Spark's Python workers), from /proc.

``versus`` times export + the fast path (the filter applied by Spark,
then ``ts``, the key and ``price`` exported, ``run_aggregate`` over the
files, the files removed after) against Spark's own query on the
same DataFrame to the ``noop`` sink, for each DataFrame and key, taking
turns, warmed; the answers compared once.

    python3 bench/jvm_export.py floor  --json bench/results/jvm_export_floor.json
    python3 bench/jvm_export.py versus --json bench/results/jvm_export_versus.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import time
from typing import Any, Callable, Dict, List, Tuple

from slash.bench._kafka_measure import tree_cpu  # CPU seconds of a process tree, from /proc

log = logging.getLogger("jvm_export_bench")

QUERY_COLUMNS = ["ts", "key", "skey", "event_type", "price"]


def make_data(spark: Any, root: str, rows: int) -> Tuple[str, str]:
    """The events and campaigns Parquet directories under ``root``, written once."""
    from pyspark.sql import functions as F

    events, campaigns = os.path.join(root, f"events-{rows}"), os.path.join(root, "campaigns")
    if not os.path.exists(os.path.join(events, "_SUCCESS")):
        h = F.xxhash64(F.col("id"))
        (spark.range(rows, numPartitions=4)
         .select(F.timestamp_micros(F.lit(1_767_225_600_000_000) + F.col("id")).alias("ts"),
                 (F.abs(h) % 100).cast("int").alias("key"),
                 F.concat(F.lit("k"), (F.abs(h) % 100_000).cast("string")).alias("skey"),
                 F.element_at(F.array(F.lit("view"), F.lit("click"), F.lit("purchase")),
                              (F.col("id") % 3 + 1).cast("int")).alias("event_type"),
                 (F.col("id") % 1000).cast("int").alias("ad_id"),
                 ((F.abs(h) % 10_000) / 100.0).alias("price"))
         .write.mode("overwrite").parquet(events))
    if not os.path.exists(os.path.join(campaigns, "_SUCCESS")):
        (spark.range(1000).select(F.col("id").cast("int").alias("ad_id"),
                                  (F.col("id") % 100).cast("int").alias("campaign"))
         .write.mode("overwrite").parquet(campaigns))
    return events, campaigns


def frames(spark: Any, events: str, campaigns: str) -> Dict[str, Callable[[], Any]]:
    """The DataFrames each round builds anew (an action run again on one
    DataFrame may reuse its work)."""
    from pyspark.sql import functions as F

    return {"scan": lambda: spark.read.parquet(events),
            "join": lambda: spark.read.parquet(events).join(
                F.broadcast(spark.read.parquet(campaigns)), "ad_id")}


def interleaved(sides: Dict[str, Callable[[], Any]], warmup: int, repeat: int,
                jvm_pid: int) -> Dict[str, Dict[str, List[float]]]:
    """Runs the sides in turn: ``warmup`` untimed rounds, then ``repeat``
    timed ones; each side's wall and CPU seconds per round."""
    for i in range(warmup):
        for name, fn in sides.items():
            log.info("warm-up %d: %s", i + 1, name)
            fn()
    out: Dict[str, Dict[str, List[float]]] = {n: {"wall": [], "cpu": []} for n in sides}
    for i in range(repeat):
        for name, fn in sides.items():
            c0, t0 = tree_cpu(jvm_pid), time.perf_counter()
            fn()
            wall, cpu = time.perf_counter() - t0, tree_cpu(jvm_pid) - c0
            out[name]["wall"].append(wall)
            out[name]["cpu"].append(cpu)
            log.info("%s: %.2f s wall, %.1f CPU s", name, wall, cpu)
    return out


def floor_sides(spark: Any, make: Callable[[], Any], key: str) -> Dict[str, Callable[[], Any]]:
    import pyarrow as pa
    from pyspark.sql import functions as F

    def count_task(batches):
        n = 0
        for b in batches:
            n += b.num_rows
        yield pa.record_batch({"n": pa.array([n], pa.int64())})

    def map_in_arrow() -> Any:
        return make().select(*QUERY_COLUMNS).mapInArrow(count_task, "n long").agg(F.sum("n")).collect()

    def jvm_count() -> Any:
        return make().select(*QUERY_COLUMNS)._jdf.queryExecution().toRdd().count()

    def parquet() -> Any:
        make().select(*QUERY_COLUMNS).write.mode("overwrite").option("compression", "none") \
            .parquet("/dev/shm/slash-jvm-export-bench-parquet")

    def spark_query() -> Any:
        df = make().where(F.col("event_type") == "view")
        df.groupBy(F.window("ts", "10 seconds"), key).agg(F.count(F.lit(1)), F.sum("price")) \
            .write.format("noop").mode("overwrite").save()

    sides = {"mapInArrow": map_in_arrow, "jvm_count": jvm_count, "parquet": parquet}
    from slash.spark import jvm_export

    if jvm_export.available(spark):
        def export() -> Any:
            with jvm_export.export_columns(spark, make(), QUERY_COLUMNS) as got:
                return got.rows
        sides["export"] = export
    sides["spark"] = spark_query
    return sides


def exported(spark: Any, df: Any, key: str) -> Any:
    """The query's rows exported: the filter applied by Spark first (no row
    crosses that need not), then only the columns the query names."""
    from pyspark.sql import functions as F
    from slash.spark import jvm_export

    return jvm_export.export_columns(spark, df.where(F.col("event_type") == "view"), ["ts", key, "price"])


def versus_sides(spark: Any, make: Callable[[], Any], key: str) -> Dict[str, Callable[[], Any]]:
    from pyspark.sql import functions as F
    from slash.spark import run_aggregate

    q = dict(time="ts", window="tumbling:10s", key=key, aggs=["count", "sum:price"])

    def ours() -> Any:
        with exported(spark, make(), key) as got:
            return run_aggregate(spark, got.files, **q)

    def theirs() -> Any:
        df = make().where(F.col("event_type") == "view")
        df.groupBy(F.window("ts", "10 seconds"), key).agg(F.count(F.lit(1)), F.sum("price")) \
            .write.format("noop").mode("overwrite").save()

    return {"export+slash": ours, "spark": theirs}


def check_versus(spark: Any, make: Callable[[], Any], key: str) -> bool:
    """Export + fast path equals Spark's own query (counts exactly, sums to 1e-9)."""
    import math

    from slash.spark import spark_window_aggregate, window_aggregate

    q = dict(time="ts", window="tumbling:10s", key=key, aggs=["count", "sum:price"])
    with exported(spark, make(), key) as got:
        ours = window_aggregate(spark, got.files, **q).toArrow()
    theirs = spark_window_aggregate(spark, make(), filter="event_type == 'view'", **q).toArrow()
    order = [("window_start", "ascending"), (key, "ascending")]
    a, b = ours.sort_by(order).to_pylist(), theirs.sort_by(order).to_pylist()
    return len(a) == len(b) and all(
        x["window_start"] == y["window_start"] and x[key] == y[key] and x["count"] == y["count"]
        and math.isclose(x["sum_price"], y["sum_price"], rel_tol=1e-9) for x, y in zip(a, b))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["floor", "versus"])
    p.add_argument("--rows", type=int, default=20_000_000)
    p.add_argument("--data-dir", default="/dev/shm/slash-jvm-export-data")
    p.add_argument("--frames", default="scan,join")
    p.add_argument("--keys", default="key,skey")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from slash.spark import session

    spark = session("local[2]", conf={"spark.driver.memory": "6g"})
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    events, campaigns = make_data(spark, args.data_dir, args.rows)
    fr = frames(spark, events, campaigns)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    result: Dict[str, Any] = {"what": args.what, "rows": args.rows, "commit": commit,
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "load_before": os.getloadavg(), "runs": []}
    for name in args.frames.split(","):
        for key in args.keys.split(","):
            if args.what == "floor" and key != args.keys.split(",")[0]:
                continue  # the transfer does not depend on the key
            sides = (floor_sides if args.what == "floor" else versus_sides)(spark, fr[name], key)
            verified = check_versus(spark, fr[name], key) if args.what == "versus" else None
            times = interleaved(sides, args.warmup, args.repeat, jvm_pid)
            run = {"frame": name, "key": key, "verified": verified,
                   "sides": {s: {"best_wall": min(t["wall"]), "median_wall": statistics.median(t["wall"]),
                                 "median_cpu": statistics.median(t["cpu"]), **t}
                             for s, t in times.items()}}
            if args.what == "versus":
                run["ratio_best"] = run["sides"]["spark"]["best_wall"] / run["sides"]["export+slash"]["best_wall"]
                run["ratio_median"] = (run["sides"]["spark"]["median_wall"] /
                                       run["sides"]["export+slash"]["median_wall"])
            result["runs"].append(run)
            log.info("%s", json.dumps({k: v for k, v in run.items() if k != "sides"}))
            for s, t in run["sides"].items():
                log.info("  %-14s best %.2f s, median %.2f s wall, median %.1f CPU s", s,
                         t["best_wall"], t["median_wall"], t["median_cpu"])
    result["load_after"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    spark.stop()


if __name__ == "__main__":
    main()
