"""``slash bench ro``: the read-only count of the Slash paper (section
8.1.2): 16-byte records (key, event_time), keys uniform over 100 million by
default (``--keys``, ``--skew``), count per key.

"Count per key" over the whole stream is run as a tumbling window longer
than the stream (``--window``, default 1 h; at the default rate of 1 M
records/s of event time, up to 3.6 billion records fall into one window), so
every key's count covers the whole run. Engines, timing and checks: see
:mod:`slash.bench._suite`.

    slash bench ro --records 20000000 --executors 2
"""
from __future__ import annotations

import argparse
from typing import Any, Dict

from slash.bench import _suite
from slash.errors import InvalidArgument
from slash.query import Query
from slash.spark.reference import spark_window_aggregate
from slash.window import Tumbling, parse_window

NAME = "ro"
HELP = "read-only count per key (keys uniform over 100M); slash vs repartition, DuckDB, Spark"


def plan(records: int, keys: int = 100_000_000, skew: str = "uniform", rate: int = 1_000_000,
         seed: int = 1, block: int = 1 << 16, window: str = "tumbling:1h") -> _suite.Plan:
    w = parse_window(window)
    if not isinstance(w, Tumbling):
        raise InvalidArgument(f"ro: --window must be tumbling, got {window!r}")
    size = w.size_ms
    stream = _suite.Stream("ro", records, block=block, keys=keys, skew=skew, seed=seed, rate=rate)
    return _suite.Plan(
        name=NAME, inputs=(("events", stream),),
        query=Query(time="event_time", window=w, key="key", aggregates=["count"]),
        sql=(f"SELECT event_time - event_time % {size} AS window_start, "
             f"event_time - event_time % {size} + {size} AS window_end, key, count(*) AS count "
             f"FROM events GROUP BY ALL"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    _suite.add_common(p, records=20_000_000, keys=100_000_000, rate=1_000_000)
    p.add_argument("--window", default="tumbling:1h",
                   help="tumbling window covering the run (default tumbling:1h)")


def spark_plan(window_ms: int) -> _suite.SparkBuilder:
    """Spark's own count per key per tumbling window of window_ms."""
    def build(spark: Any, paths: Dict[str, str]) -> Any:
        return spark_window_aggregate(spark, paths["events"], time="event_time",
                                      window=f"tumbling:{window_ms}ms", key="key", aggs=["count"])
    return build


def run(args: argparse.Namespace) -> Dict[str, Any]:
    pl = plan(args.records, args.keys, args.skew, args.rate, args.seed, args.block, args.window)
    size = parse_window(args.window).size_ms  # type: ignore[union-attr]
    res = _suite.run_suite(pl, _suite.suite_config(args), spark_plan(size), _suite.parameters(args))
    return _suite.finish(res, args)


summary = _suite.summary
