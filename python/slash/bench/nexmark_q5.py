"""``slash bench nexmark-q5``: NEXMark Q5, hot items: per sliding window of
10 s every 2 s, the auctions with the most bids.

The windows are those of the nexmark suite's Flink SQL (``HOP(bid,
dateTime, INTERVAL '2' SECOND, INTERVAL '10' SECOND)``); the ranking is
Flink's window Top-N form of the query: the ``TOP_N`` auctions with most
bids per window, ranked 1..N, ties broken by the smaller auction id (a
``row_number()``, so exactly N rows where a window has N auctions). The
original Q5 keeps every auction tied at the maximum instead; with ranks
the answer is deterministic and checkable row for row.

Slash runs it as a sliding-window count keyed by auction with
``top:N:count``: each executor folds its own bids (no shuffle), each
window's leader merges the partial counts, and the N best are taken from
the leaders' fired windows (``--agg top:N:AGG`` in the README). DuckDB and
Spark rank with ``row_number() OVER (PARTITION BY window ORDER BY count
DESC, auction)``; Spark's windows are ``window(ts, '10 seconds', '2
seconds')``. Through PySpark, ``slash.spark.window_aggregate`` with the
same ``top:N:count`` runs on the same session and files as Spark's own
query (engine ``slash.spark``). See :mod:`slash.bench._nexmark` for
``--records`` and the rate.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict

from slash.bench import _nexmark, _suite
from slash.query import Query
from slash.spark.reference import spark_window_aggregate

NAME = "nexmark-q5"
HELP = "NEXMark Q5: the auctions with most bids per 10 s window sliding by 2 s (window Top-N)"

SIZE_MS, SLIDE_MS = 10_000, 2_000
TOP_N = 3
WINDOW = f"sliding:{SIZE_MS}ms/{SLIDE_MS}ms"
AGGS = ["count", f"top:{TOP_N}:count"]


def plan(events: int, rate: int = _nexmark.DEFAULT_RATE, seed: int = 1,
         block: int = 1 << 16) -> _suite.Plan:
    bids = _suite.Stream("bid", events, block=block, seed=seed, rate=rate,
                         columns=("auction", "date_time"))
    size, slide = SIZE_MS, SLIDE_MS
    return _suite.Plan(
        name=NAME, inputs=(("bids", bids),),
        query=Query(time="date_time", window=WINDOW, key="auction", aggregates=AGGS),
        # each bid in the size / slide windows whose start is in (t - size, t]
        sql=(f"WITH w AS (SELECT date_time // {slide} * {slide} - k * {slide} AS ws, auction "
             f"FROM bids, range(0, {size // slide}) r(k)), "
             f"a AS (SELECT ws, auction, count(*) AS count FROM w GROUP BY ws, auction) "
             f"SELECT ws AS window_start, ws + {size} AS window_end, auction, count, rank FROM ("
             f"SELECT *, row_number() OVER (PARTITION BY ws ORDER BY count DESC, auction) "
             f"AS rank FROM a) WHERE rank <= {TOP_N}"))


def spark_plan(spark: Any, paths: Dict[str, str]) -> Any:
    """Spark's own query: its sliding-window count, ranked with row_number."""
    from pyspark.sql import Window, functions as F  # optional dependency

    counts = spark_window_aggregate(spark, paths["bids"], time="date_time", window=WINDOW,
                                    key="auction", aggs=["count"])
    order = Window.partitionBy("window_start").orderBy(F.col("count").desc(),
                                                       F.col("auction").asc())
    return counts.withColumn("rank", F.row_number().over(order).cast("long")) \
        .where(F.col("rank") <= TOP_N)


def slash_spark_plan(spark: Any, paths: Dict[str, str]) -> Any:
    """The query through slash.spark (every task slot an executor)."""
    from slash.spark import window_aggregate  # optional dependency

    return window_aggregate(spark, paths["bids"], time="date_time", window=WINDOW,
                            key="auction", aggs=AGGS)


add_arguments = _nexmark.add_arguments


def run(args: argparse.Namespace) -> Dict[str, Any]:
    return _nexmark.run(args, plan, spark_plan, slash_spark_plan)


summary = _suite.summary
