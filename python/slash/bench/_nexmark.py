"""The NEXMark plans shared by ``nexmark-q7``, ``nexmark-q8`` and
``nexmark-q11`` (private: not a benchmark). ``--records`` counts NEXMark
*events* (persons : auctions : bids = 1 : 3 : 46, Beam's generator); each
query reads the records of the kinds it needs, and throughput counts those
input records. Event time follows Beam's default of 10,000 events/s
(``--rate``)."""
from __future__ import annotations

import argparse
from typing import Any, Callable, Dict

from slash.bench import _suite
from slash.errors import InvalidArgument

DEFAULT_EVENTS = 20_000_000
DEFAULT_RATE = 10_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    _suite.add_common(p, records=DEFAULT_EVENTS, keys=None, rate=DEFAULT_RATE)


def check_skew(args: argparse.Namespace) -> None:
    if args.skew != "uniform":
        raise InvalidArgument("NEXMark keys follow Beam's hot auction/bidder/seller ratios; "
                              f"--skew {args.skew!r} does not apply")


def run(args: argparse.Namespace, make_plan: Callable[..., _suite.Plan],
        spark_plan: Any, slash_spark_plan: Any = None) -> Dict[str, Any]:
    """Checks the arguments, builds the plan with make_plan(events, rate, seed, block), runs it."""
    check_skew(args)
    plan = make_plan(args.records, args.rate, args.seed, args.block)
    res = _suite.run_suite(plan, _suite.suite_config(args), spark_plan, _suite.parameters(args),
                           slash_spark_build=slash_spark_plan)
    return _suite.finish(res, args)
