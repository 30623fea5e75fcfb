"""``slash bench modes``: slash against the repartitioning baseline.

The same count window aggregation with 2 executors in ``slash`` mode (eager
local state, merged at leaders) and ``repartition`` mode (every record hashed
to its key's owner over the same channels), over key skews from uniform to
zipf 2.0 (the paper's sweep): records/s of each and the ratio, as JSON and a
PNG plot.
"""
from __future__ import annotations

import argparse
import logging
import os
from dataclasses import replace
from typing import Any, Dict, List

from slash.bench._groups import GroupBenchConfig, run_group

log = logging.getLogger(__name__)

NAME = "modes"
HELP = "slash mode vs the hash-repartitioning baseline on 2 executors across key skews"

DEFAULT_SKEWS = "uniform,zipf:0.2,zipf:0.5,zipf:1.0,zipf:1.5,zipf:2.0"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executors", type=int, default=2)
    p.add_argument("--records", type=int, default=2_000_000, help="records per executor")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--skews", default=DEFAULT_SKEWS, help=f"comma-separated (default {DEFAULT_SKEWS})")
    p.add_argument("--transport", default="shm")
    p.add_argument("--plot", default="bench/results/modes.png", help="PNG path ('' for none)")
    p.add_argument("--no-verify", action="store_true")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    base = GroupBenchConfig(executors=args.executors, records=args.records, keys=args.keys,
                            transport=args.transport, verify=not args.no_verify)
    runs: List[Dict[str, Any]] = []
    for skew in [s for s in args.skews.split(",") if s]:
        pair = {}
        for mode in ("slash", "repartition"):
            log.info("modes: %s, %s", skew, mode)
            pair[mode] = run_group(replace(base, skew=skew, mode=mode))
        runs.append({"skew": skew, "executors": base.executors, "keys": base.keys,
                     "slash_records_per_s": pair["slash"]["records_per_s"],
                     "repartition_records_per_s": pair["repartition"]["records_per_s"],
                     "ratio": pair["slash"]["records_per_s"] / pair["repartition"]["records_per_s"],
                     "slash_bytes_shipped": pair["slash"]["bytes_shipped"],
                     "repartition_bytes_shipped": pair["repartition"]["bytes_shipped"],
                     "verified": pair["slash"].get("verified") and pair["repartition"].get("verified")})
    out: Dict[str, Any] = {"benchmark": NAME, "runs": runs}
    if args.plot:
        out["plot"] = plot(runs, args.plot)
    return out


def plot(runs: List[Dict[str, Any]], path: str) -> str:
    import matplotlib  # optional dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional dependency

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    xs = [r["skew"] for r in runs]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, [r["slash_records_per_s"] / 1e6 for r in runs], "o-", label="slash")
    ax.plot(xs, [r["repartition_records_per_s"] / 1e6 for r in runs], "s--", label="repartition")
    ax.set_xlabel("key distribution")
    ax.set_ylabel("M records/s (all executors)")
    ax.set_title(f"count per key per 10 s window, {runs[0]['executors']} executors")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary(r: Dict[str, Any]) -> str:
    return (f"modes: {r['skew']:>9}: slash {r['slash_records_per_s'] / 1e6:6.1f} M rec/s, "
            f"repartition {r['repartition_records_per_s'] / 1e6:6.1f} M rec/s, "
            f"ratio {r['ratio']:.2f}, verified={r['verified']}")
