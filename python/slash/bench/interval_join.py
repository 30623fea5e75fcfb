"""``slash bench interval-join``: the NEXMark Q3/Q4 shape on time ranges:
each new person joined with the auctions they opened within 10 s after
registering, an interval join of persons and auctions on person id = seller
(``person.date_time BETWEEN auction.date_time - 10 s AND auction.date_time``).

Output: one row per (person, auction) pair: ``id``, ``left_date_time`` (the
person's), ``right_date_time`` and ``right_auction`` (the auction's).

Slash runs it as :class:`slash.query.JoinQuery` with ``interval=("-10s",
"0s")`` (``--interval LOWER,UPPER`` sets another, as ``slash run
--join-interval`` takes it: ``l.ts BETWEEN r.ts + LOWER AND r.ts + UPPER``;
the issue's hot-key case is ``--hot-key 0.05 --interval=-5s,+10s``)
(:mod:`slash.interval`: rows buffered per (bucket, key) in the join
state, merged at each partition's leader, no shuffle); every executor pushes
a block's persons, then its auctions, so the allowed lateness is one block's
span of event time. DuckDB runs its range join (``JOIN ... ON p.id =
a.seller AND p.date_time BETWEEN ...``) and Spark its own batch range join
over the same records. See :mod:`slash.bench._nexmark` for ``--records`` and
the rate. ``--hot-key SHARE`` gives one person id (HOT_ID) to that share of
the persons and of the auctions (as seller): a hot key whose pairs grow with
the square of its rows.
"""
from __future__ import annotations

import argparse
import functools
from typing import Any, Dict, Tuple

from slash.bench import _nexmark, _suite
from slash.interval import parse_interval
from slash.query import JoinQuery

NAME = "interval-join"
HELP = "NEXMark Q3/Q4 shape: persons x the auctions they open within 10 s (an interval join)"

WITHIN_MS = 10_000
INTERVAL = (-WITHIN_MS, 0)  # ms: l.ts - r.ts in [LOWER, UPPER], the person within 10 s before
HOT_ID = 1000  # the first person's id (Beam's generator)


def plan(events: int, rate: int = _nexmark.DEFAULT_RATE, seed: int = 1,
         block: int = 1 << 16, hot_key: float = 0.0,
         interval: Tuple[int, int] = INTERVAL) -> _suite.Plan:
    persons = _suite.Stream("person", events, block=block, seed=seed, rate=rate,
                            columns=("id", "date_time"),
                            hot=(("id", hot_key, HOT_ID),) if hot_key else ())
    auctions = _suite.Stream("auction", events, block=block, seed=seed, rate=rate,
                             columns=("id", "seller", "date_time"),
                             hot=(("seller", hot_key, HOT_ID),) if hot_key else ())
    lo, hi = interval
    query = JoinQuery(time="date_time", on="id", interval=(lo, hi),
                      left_columns=["date_time"], right_columns=["date_time", "auction"])
    return _suite.Plan(
        name=NAME, inputs=(("persons", persons), ("auctions", auctions)),
        time_join=_suite.TimeJoin(query, rename=(("auctions", "id", "auction"),
                                                 ("auctions", "seller", "id"))),
        lateness_ms=-(-block * 1000 // rate) + 1,
        sql=("SELECT p.id AS id, p.date_time AS left_date_time, a.date_time AS right_date_time, "
             "a.id AS right_auction FROM persons p JOIN auctions a ON p.id = a.seller "
             f"AND p.date_time BETWEEN a.date_time + ({lo}) AND a.date_time + ({hi})"))


def spark_plan(spark: Any, paths: Dict[str, str], interval: Tuple[int, int] = INTERVAL) -> Any:
    lo, hi = interval
    p = spark.read.parquet(paths["persons"]).select("id", "date_time")
    a = spark.read.parquet(paths["auctions"]).select("id", "seller", "date_time")
    cond = (p.id == a.seller) & (p.date_time >= a.date_time + lo) & \
        (p.date_time <= a.date_time + hi)
    return p.join(a, cond).select(p.id.alias("id"), p.date_time.alias("left_date_time"),
                                  a.date_time.alias("right_date_time"),
                                  a.id.alias("right_auction"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    _nexmark.add_arguments(p)
    p.add_argument("--hot-key", type=float, default=0.0, metavar="SHARE",
                   help=f"give person id {HOT_ID} to this share of the persons and of the "
                        "auctions' sellers (e.g. 0.05; default 0: NEXMark's own keys)")
    p.add_argument("--interval", default="-10s,0s", metavar="LOWER,UPPER",
                   help="pairs with person time BETWEEN auction time + LOWER AND + UPPER "
                        "(default -10s,0s; give it as --interval=-5s,+10s)")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    interval = parse_interval(args.interval)
    return _nexmark.run(args, functools.partial(plan, hot_key=args.hot_key, interval=interval),
                        functools.partial(spark_plan, interval=interval))


summary = _suite.summary
