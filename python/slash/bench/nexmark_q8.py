"""``slash bench nexmark-q8``: NEXMark Q8, monitor new users: the persons
who opened an auction in the same 12 h tumbling window, i.e. a windowed
join of persons and auctions on person id = seller.

Output, as the nexmark SQL suite's Q8 (without the name string, since the
join store carries numeric columns): one row (window_start, window_end, id)
per person and window with at least one auction of theirs in it.

Slash runs it as an executor-level windowed join (:class:`slash.JoinConfig`:
persons on the left keyed by id, auctions on the right keyed by seller; each
(window, key)'s rows meet at its partition's leader and are emitted there, so
the DISTINCT is local to each leader). Every executor pushes a block's
persons, then its auctions, so the allowed lateness is one block's span of
event time. DuckDB and Spark run the equi-join on (id = seller, window) with
DISTINCT. See :mod:`slash.bench._nexmark` for ``--records`` and the rate.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict

from slash.bench import _nexmark, _suite

NAME = "nexmark-q8"
HELP = "NEXMark Q8: persons who opened an auction in the same 12 h window (a windowed join)"

WINDOW_MS = 12 * 3_600_000


def plan(events: int, rate: int = _nexmark.DEFAULT_RATE, seed: int = 1,
         block: int = 1 << 16) -> _suite.Plan:
    persons = _suite.Stream("person", events, block=block, seed=seed, rate=rate,
                            columns=("id", "date_time"))
    auctions = _suite.Stream("auction", events, block=block, seed=seed, rate=rate,
                             columns=("seller", "date_time"))
    w = WINDOW_MS
    return _suite.Plan(
        name=NAME, inputs=(("persons", persons), ("auctions", auctions)),
        join=_suite.WindowJoin(window=f"tumbling:{w}ms", left_key="id", left_time="date_time",
                               right_key="seller", right_time="date_time", out_key="id"),
        lateness_ms=-(-block * 1000 // rate) + 1,
        sql=(f"SELECT DISTINCT p.ws AS window_start, p.ws + {w} AS window_end, p.id AS id "
             f"FROM (SELECT id, date_time - date_time % {w} AS ws FROM persons) p "
             f"JOIN (SELECT seller, date_time - date_time % {w} AS ws FROM auctions) a "
             f"ON p.id = a.seller AND p.ws = a.ws"))


def spark_plan(spark: Any, paths: Dict[str, str]) -> Any:
    from pyspark.sql import functions as F  # optional dependency

    p = spark.read.parquet(paths["persons"]).select(
        "id", (F.col("date_time") - F.col("date_time") % WINDOW_MS).alias("window_start"))
    a = spark.read.parquet(paths["auctions"]).select(
        F.col("seller").alias("id"),
        (F.col("date_time") - F.col("date_time") % WINDOW_MS).alias("window_start"))
    return p.join(a, ["id", "window_start"]).select(
        "window_start", (F.col("window_start") + WINDOW_MS).alias("window_end"), "id").distinct()


add_arguments = _nexmark.add_arguments


def run(args: argparse.Namespace) -> Dict[str, Any]:
    return _nexmark.run(args, plan, spark_plan)


summary = _suite.summary
