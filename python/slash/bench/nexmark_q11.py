"""``slash bench nexmark-q11``: NEXMark Q11, user sessions: the number of
bids per bidder per session window with a 10 s gap.

The definition is Beam's (``Query11``, and the nexmark SQL suite's
``SESSION(dateTime, INTERVAL '10' SECOND)``): per bidder, a session is a run
of bids in which consecutive bids are at most 10 s apart (Spark's
``session_window`` and Flink merge sessions that touch); it spans
``[first bid, last bid + 10 s)`` and the output is (window_start,
window_end, bidder, count). Some write-ups instead count bids per bidder
in fixed windows, or cap a session at a maximum number of events (Beam's
``maxLogEvents`` trigger); neither is done here.

Slash runs it as a session-window count keyed by bidder (sessions fragment
across executors and fuse when merged at the leader); DuckDB with window
functions (a new session where the gap to the bidder's previous bid is >
10 s); Spark with ``session_window``. See :mod:`slash.bench._nexmark` for
``--records`` and the rate.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict

from slash.bench import _nexmark, _suite
from slash.query import Query
from slash.spark.reference import spark_window_aggregate

NAME = "nexmark-q11"
HELP = "NEXMark Q11: bids per bidder per 10 s-gap session; slash vs repartition, DuckDB, Spark"

GAP_MS = 10_000


def plan(events: int, rate: int = _nexmark.DEFAULT_RATE, seed: int = 1,
         block: int = 1 << 16) -> _suite.Plan:
    bids = _suite.Stream("bid", events, block=block, seed=seed, rate=rate,
                         columns=("bidder", "date_time"))
    g = GAP_MS
    return _suite.Plan(
        name=NAME, inputs=(("bids", bids),),
        query=Query(time="date_time", window=f"session:{g}ms", key="bidder", aggregates=["count"]),
        sql=(f"WITH s AS (SELECT bidder, date_time, CASE WHEN date_time - lag(date_time) OVER "
             f"(PARTITION BY bidder ORDER BY date_time) <= {g} THEN 0 ELSE 1 END AS fresh "
             f"FROM bids), "
             f"n AS (SELECT bidder, date_time, sum(fresh) OVER (PARTITION BY bidder ORDER BY "
             f"date_time ROWS UNBOUNDED PRECEDING) AS session FROM s) "
             f"SELECT min(date_time) AS window_start, max(date_time) + {g} AS window_end, bidder, "
             f"count(*) AS count FROM n GROUP BY bidder, session"))


def spark_plan(spark: Any, paths: Dict[str, str]) -> Any:
    return spark_window_aggregate(spark, paths["bids"], time="date_time",
                                  window=f"session:{GAP_MS}ms", key="bidder", aggs=["count"])


add_arguments = _nexmark.add_arguments


def run(args: argparse.Namespace) -> Dict[str, Any]:
    return _nexmark.run(args, plan, spark_plan)


summary = _suite.summary
