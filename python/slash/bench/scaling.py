"""``slash bench scaling``: weak scaling of a count window aggregation.

1, 2 and 4 executor processes on this machine, each with the same number of
records of its own; reports records/s per executor and the share of time spent
in epoch sync. On a 2-core machine, more than 2 executors share cores, so the
per-executor rate must fall past 2: the interesting numbers are the sync share
and whether total throughput holds.
"""
from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from typing import Any, Dict

from slash.bench._groups import GroupBenchConfig, run_group

log = logging.getLogger(__name__)

NAME = "scaling"
HELP = "weak scaling of a count window aggregation on 1, 2, 4 executors: rate per executor, sync share"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executors", default="1,2,4", help="comma-separated group sizes (default 1,2,4)")
    p.add_argument("--records", type=int, default=2_000_000, help="records per executor")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--dist", default="uniform", help="uniform | zipf:S")
    p.add_argument("--transport", default="shm")
    p.add_argument("--no-verify", action="store_true", help="skip the DuckDB check")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    base = GroupBenchConfig(records=args.records, keys=args.keys, skew=args.dist,
                            transport=args.transport, verify=not args.no_verify)
    runs = []
    for n in [int(x) for x in args.executors.split(",") if x]:
        log.info("scaling: %d executor(s)", n)
        runs.append(run_group(replace(base, executors=n)))
    return {"benchmark": NAME, "runs": runs}


def summary(r: Dict[str, Any]) -> str:
    return (f"scaling: {r['executors']} executor(s): {r['records_per_s'] / 1e6:.1f} M rec/s total, "
            f"{r['records_per_s_per_executor'] / 1e6:.1f} M rec/s per executor, "
            f"sync {100 * r['sync_share']:.1f}% of time, verified={r.get('verified')}")
