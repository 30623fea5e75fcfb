"""``slash bench ysb``: the Yahoo Streaming Benchmark as the Slash paper ran
it (section 8.1.2): keep ``event_type == 'view'``, project (key, event_time),
count per campaign (``key``) per 10 s tumbling window.

The stream is the 78-byte YSB event of :mod:`slash.workloads.gen_ysb`; the
executors generate only the columns the query reads (key, event_time,
event_type), so the projection costs nothing. Keys default to the paper's
10 million campaigns (``--keys 100`` is the original benchmark's 100).
Engines, timing and checks: see :mod:`slash.bench._suite`.

    slash bench ysb --records 20000000 --executors 2 --json ysb.json
"""
from __future__ import annotations

import argparse
from typing import Any, Dict

from slash.bench import _suite
from slash.query import Query
from slash.spark.reference import spark_window_aggregate

NAME = "ysb"
HELP = "YSB: filter views, 10 s tumbling count per campaign; slash vs repartition, DuckDB, Spark"

WINDOW_MS = 10_000


def plan(records: int, keys: int = 10_000_000, skew: str = "uniform", rate: int = 1_000_000,
         seed: int = 1, block: int = 1 << 16) -> _suite.Plan:
    stream = _suite.Stream("ysb", records, block=block, keys=keys, skew=skew, seed=seed, rate=rate,
                           columns=("key", "event_time", "event_type"))
    return _suite.Plan(
        name=NAME, inputs=(("events", stream),),
        query=Query(time="event_time", window=f"tumbling:{WINDOW_MS}ms", key="key",
                    aggregates=["count"], filters=["event_type == view"]),
        sql=(f"SELECT event_time - event_time % {WINDOW_MS} AS window_start, "
             f"event_time - event_time % {WINDOW_MS} + {WINDOW_MS} AS window_end, key, "
             f"count(*) AS count FROM events WHERE event_type = 'view' GROUP BY ALL"))


def spark_plan(spark: Any, paths: Dict[str, str]) -> Any:
    return spark_window_aggregate(spark, paths["events"], time="event_time",
                                  window=f"tumbling:{WINDOW_MS}ms", key="key", aggs=["count"],
                                  filter="event_type == view")


def add_arguments(p: argparse.ArgumentParser) -> None:
    _suite.add_common(p, records=20_000_000, keys=10_000_000, rate=1_000_000)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    pl = plan(args.records, args.keys, args.skew, args.rate, args.seed, args.block)
    res = _suite.run_suite(pl, _suite.suite_config(args), spark_plan, _suite.parameters(args))
    return _suite.finish(res, args)


summary = _suite.summary
