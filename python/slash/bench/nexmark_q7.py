"""``slash bench nexmark-q7``: NEXMark Q7, the highest bid: per 60 s
tumbling window, the bids whose price equals the window's highest price.

Plan with Slash (two steps, no shuffle of bids):

1. every executor folds its own bids into ``max(price)`` per window under a
   single constant key (a CRDT max; the window's leader merges the partials
   at epoch ends and fires the window when every executor's watermark has
   passed it), exactly the aggregation path of every other query;
2. the fired maxima (one row per window) are broadcast to all executors,
   and each keeps the bids of its own split whose price equals its window's
   maximum: a semi-join against a tiny table, so the bids never move.

Both steps are inside the timed span. Output: window_start, window_end,
auction, bidder, price, date_time (ties: every bid at the maximum). DuckDB
and Spark run the same query as max-per-window joined back on (window,
price). See :mod:`slash.bench._nexmark` for ``--records`` and the rate.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict

from slash.bench import _nexmark, _suite
from slash.query import Query

NAME = "nexmark-q7"
HELP = "NEXMark Q7: bids at their 60 s window's highest price; slash vs repartition, DuckDB, Spark"

WINDOW_MS = 60_000
COLUMNS = ("auction", "bidder", "price", "date_time")


def plan(events: int, rate: int = _nexmark.DEFAULT_RATE, seed: int = 1,
         block: int = 1 << 16) -> _suite.Plan:
    bids = _suite.Stream("bid", events, block=block, seed=seed, rate=rate, columns=COLUMNS,
                         constants=(("all", 0),))
    w = WINDOW_MS
    return _suite.Plan(
        name=NAME, inputs=(("bids", bids),),
        query=Query(time="date_time", window=f"tumbling:{w}ms", key="all", aggregates=["max:price"]),
        semijoin=_suite.MaxSemiJoin(window_ms=w, value="price", columns=COLUMNS),
        sql=(f"WITH b AS (SELECT *, date_time - date_time % {w} AS ws FROM bids), "
             f"m AS (SELECT ws, max(price) AS top FROM b GROUP BY ws) "
             f"SELECT b.ws AS window_start, b.ws + {w} AS window_end, auction, bidder, price, "
             f"date_time FROM b JOIN m ON b.ws = m.ws AND b.price = m.top"))


def spark_plan(spark: Any, paths: Dict[str, str]) -> Any:
    from pyspark.sql import functions as F  # optional dependency

    b = spark.read.parquet(paths["bids"]).withColumn(
        "window_start", F.col("date_time") - F.col("date_time") % WINDOW_MS)
    m = b.groupBy("window_start").agg(F.max("price").alias("price"))
    return b.join(m, ["window_start", "price"]).select(
        "window_start", (F.col("window_start") + WINDOW_MS).alias("window_end"), *COLUMNS)


add_arguments = _nexmark.add_arguments


def run(args: argparse.Namespace) -> Dict[str, Any]:
    return _nexmark.run(args, plan, spark_plan)


summary = _suite.summary
