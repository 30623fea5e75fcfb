"""The fast path of ``slash.spark.window_aggregate`` at a 100 k-value string
key against Spark's own ``groupBy(window(ts, '10 seconds'), key).agg(count,
sum(price))`` on the same Parquet files (issue 40's fast-path row).

The data, as users have it: ``--rows`` events (default 20 M) with columns
``ts`` (TimestampType, rising at ``--rate`` events/s with a little jitter),
``user_id`` (int, 100 values), ``user`` (string ``'user-N'``, ``--keys``
values, default 100 k, uniform), ``event_type`` (view/click/purchase),
``ad_id`` (int) and ``price`` (double). Written twice: by pandas
(``DataFrame.to_parquet``, pyarrow's defaults) and by Spark
(``spark.read.parquet(pandas copy).write.parquet``, Spark's defaults).

The query: ``event_type == 'view'``, 10 s tumbling windows, per ``--key``
(``user`` by default), ``count`` and ``sum(price)``. Both sides run on one
``local[2]`` session, both consumed the same way: written to Spark's
``noop`` sink. They take turns: ``--warmup`` untimed rounds each, then
``--repeat`` timed ones; best and median kept. Answers are compared
(counts exactly, sums to 1e-9 relative) before timing.

    python3 bench/string_keys.py --data /tmp/sk-data --writer pandas --repeat 5
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import time
from typing import Any, Callable, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger("string_keys")

EVENT_TYPES = ("view", "click", "purchase")
START_US = 1_700_000_000_000_000


def write_pandas(path: str, rows: int, keys: int, rate: int, seed: int = 1,
                 chunk: int = 1 << 22) -> None:
    """``rows`` events written by pandas (pyarrow engine, its defaults) in one file."""
    import pandas as pd
    rng = np.random.default_rng(seed)
    names = pa.array([f"user-{i}" for i in range(keys)])
    writer = None
    tmp = path + ".tmp"
    for lo in range(0, rows, chunk):
        n = min(chunk, rows - lo)
        i = np.arange(lo, lo + n, dtype=np.int64)
        ts_us = START_US + i * 1_000_000 // rate + rng.integers(0, 1000, n)
        codes = rng.integers(0, keys, n)
        df = pd.DataFrame({
            "ts": pd.to_datetime(ts_us, unit="us"),
            "user_id": rng.integers(0, 100, n).astype(np.int32),
            "user": names.take(pa.array(codes)).to_pandas(),
            "event_type": pd.Categorical.from_codes(rng.integers(0, 3, n), EVENT_TYPES).astype(object),
            "ad_id": rng.integers(0, 1000, n).astype(np.int64),
            "price": np.round(rng.random(n) * 100, 2),
        })
        t = pa.Table.from_pandas(df, preserve_index=False)
        if writer is None:
            writer = pq.ParquetWriter(tmp, t.schema)
        writer.write_table(t)
    writer.close()
    os.rename(tmp, path)


def write_spark(spark: Any, src: str, dst: str) -> None:
    spark.read.parquet(src).write.mode("overwrite").parquet(dst)


def make_data(root: str, rows: int, keys: int, rate: int, spark: Any) -> Dict[str, str]:
    os.makedirs(root, exist_ok=True)
    pdir = os.path.join(root, f"pandas-{rows}-{keys}-{rate}")
    sdir = os.path.join(root, f"spark-{rows}-{keys}-{rate}")
    if not os.path.exists(os.path.join(pdir, "part-0.parquet")):
        os.makedirs(pdir, exist_ok=True)
        log.info("writing %s", pdir)
        write_pandas(os.path.join(pdir, "part-0.parquet"), rows, keys, rate)
    if not os.path.exists(os.path.join(sdir, "_SUCCESS")):
        log.info("writing %s", sdir)
        write_spark(spark, pdir, sdir)
    return {"pandas": pdir, "spark": sdir}


def spark_query(spark: Any, path: str, key: str) -> Any:
    from pyspark.sql import functions as F
    df = spark.read.parquet(path).filter(F.col("event_type") == "view")
    return (df.groupBy(F.window("ts", "10 seconds"), key)
            .agg(F.count(F.lit(1)).alias("count"), F.sum("price").alias("sum_price")))


def slash_query(spark: Any, path: str, key: str) -> Any:
    from slash.spark import window_aggregate
    return window_aggregate(spark, path, time="ts", window="tumbling:10s", key=key,
                            aggs=["count", "sum:price"], filter="event_type == 'view'")


def check(spark: Any, path: str, key: str) -> None:
    """Both answers equal: counts exactly, sums to 1e-9 relative."""
    from pyspark.sql import functions as F
    ours = slash_query(spark, path, key)
    theirs = spark_query(spark, path, key).select(
        F.col("window.start").alias("window_start"), key, "count", "sum_price")
    a = ours.select("window_start", key, "count", "sum_price").toPandas()
    b = theirs.toPandas()
    cols = ["window_start", key]
    a = a.sort_values(cols).reset_index(drop=True)
    b = b.sort_values(cols).reset_index(drop=True)
    if len(a) != len(b) or not (a[cols].astype(str).values == b[cols].astype(str).values).all():
        raise AssertionError(f"groups differ: slash {len(a)} rows, spark {len(b)}")
    if not (a["count"].values == b["count"].values).all():
        raise AssertionError("counts differ")
    if not np.allclose(a["sum_price"].values, b["sum_price"].values, rtol=1e-9):
        raise AssertionError("sums differ")
    log.info("answers equal: %d groups", len(a))


def timed(sides: Dict[str, Callable[[], None]], warmup: int, repeat: int) -> Dict[str, List[float]]:
    for _ in range(warmup):
        for f in sides.values():
            f()
    out: Dict[str, List[float]] = {k: [] for k in sides}
    for _ in range(repeat):
        for k, f in sides.items():
            t0 = time.perf_counter()
            f()
            out[k].append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/slash-string-keys")
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=1_000_000, help="events per second of event time")
    ap.add_argument("--key", default="user")
    ap.add_argument("--writer", choices=("pandas", "spark"), nargs="+", default=["pandas", "spark"])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--out", default=None, help="JSON file for the results")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from slash.spark import session
    spark = session(master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    paths = make_data(args.data, args.rows, args.keys, args.rate, spark)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    results = []
    for w in args.writer:
        path = paths[w]
        if not args.no_check:
            check(spark, path, args.key)
        sides = {
            "slash": lambda p=path: slash_query(spark, p, args.key).write.format("noop").mode(
                "overwrite").save(),
            "spark": lambda p=path: spark_query(spark, p, args.key).write.format("noop").mode(
                "overwrite").save(),
        }
        t = timed(sides, args.warmup, args.repeat)
        best = {k: min(v) for k, v in t.items()}
        med = {k: statistics.median(v) for k, v in t.items()}
        r = {"writer": w, "key": args.key, "rows": args.rows, "keys": args.keys, "rate": args.rate,
             "slash_best_s": best["slash"], "spark_best_s": best["spark"],
             "ratio_best": best["spark"] / best["slash"], "ratio_median": med["spark"] / med["slash"],
             "slash_s": t["slash"], "spark_s": t["spark"],
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "load": os.getloadavg(), "commit": commit}
        log.info("%s key=%s: slash %.2fs spark %.2fs best ratio %.2fx (median %.2fx) load %s",
                 w, args.key, best["slash"], best["spark"], r["ratio_best"], r["ratio_median"],
                 "%.2f %.2f %.2f" % os.getloadavg())
        results.append(r)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    spark.stop()


if __name__ == "__main__":
    main()
