"""Instructions a record of one aggregate's fold, by callgrind (stable on a
shared machine, where wall times vary 2x between runs).

The workload is ``slash bench ssb``'s (int64 key over 100 keys, rising int64
ms times over 60 s, int64 price 0..999, 10 s tumbling windows) fed to a
:class:`slash.StateBackend` in batches of 1 Mi rows. For each aggregate set
given (``count`` alone is always measured first), the script runs itself
under ``valgrind --tool=callgrind`` twice: once counting only
``slash_ssb_update`` (the fold: the core's update loop, what the state
backend does a record) and once whole, from which a run that makes the same
table and state but updates nothing is subtracted (the fold plus the Python
side's preparation of the columns: validity, hashing). Prints instructions
a record of each, and the difference to a count alone.

    PYTHONPATH=python python3 bench/agg_instr.py sum:price min:price \
        approx_count_distinct:price

``--value-type float64`` casts the price column to float64 (the same values
0..999), for the aggregates' float kinds.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List

log = logging.getLogger("agg_instr")

RECORDS = 2_000_000
BATCH = 1 << 20


def workload(aggregates: List[str], records: int, update: bool = True,
             value_type: str = "int64") -> None:
    """One run of the fold: the state, the table, the updates (no emit);
    without `update`, all but the updates."""
    from slash.bench.ssb import SsbBenchConfig, make_table
    from slash.state import StateBackend, StateConfig

    cfg = SsbBenchConfig(records=records, batch=BATCH, repeat=1)
    table = make_table(cfg)
    key, tm, price = (table.column(c).combine_chunks() for c in ("key", "time", "price"))
    price = price.cast(value_type)
    sc = StateConfig(window=cfg.window, aggregates=aggregates, value_types={"price": value_type})
    # a log reservation valgrind's address space holds (the default is 64 GiB)
    with StateBackend(sc, log_reserve_bytes=1 << 30) as sb:
        for lo in range(0, records if update else 0, BATCH):
            n = min(BATCH, records - lo)
            sb.update(key.slice(lo, n), tm.slice(lo, n),
                      {"price": price.slice(lo, n)} if sc.value_columns else None)


def instructions(aggregates: List[str], records: int, toggle: str = "",
                 update: bool = True, value_type: str = "int64") -> int:
    """Instructions callgrind counts (inside `toggle`, else in all) for one
    workload run."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        cmd += [f"--toggle-collect={toggle}"] if toggle else []
        cmd += [sys.executable, __file__, "--child", "--records", str(records)]
        cmd += [] if update else ["--no-update"]
        cmd += ["--value-type", value_type]
        cmd += aggregates
        subprocess.run(cmd, check=True, capture_output=True)
        with open(out) as f:
            m = re.search(r"^summary:\s+(\d+)", f.read(), re.M)
        if not m:
            raise RuntimeError(f"no summary in callgrind's output of {aggregates}")
        return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("aggregates", nargs="*", help="aggregates measured beside count, e.g. sum:price")
    ap.add_argument("--records", type=int, default=RECORDS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-update", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--value-type", choices=("int64", "float64"), default="int64",
                    help="the price column's type (default int64)")
    ap.add_argument("--fold-only", action="store_true",
                    help="count only the fold (one callgrind run a set instead of three)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if args.child:
        workload(args.aggregates, args.records, not args.no_update, args.value_type)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sets = [["count"]] + [["count", a] for a in args.aggregates]
    res: Dict[str, Dict[str, float]] = {}
    for aggs in sets:
        name = "+".join(aggs)
        vt = args.value_type
        fold = instructions(aggs, args.records, "slash_ssb_update", value_type=vt) / args.records
        res[name] = {"fold": fold}
        if not args.fold_only:
            res[name]["update"] = (instructions(aggs, args.records, value_type=vt) -
                                   instructions(aggs, args.records, update=False,
                                                value_type=vt)) / args.records
    base = res["count"]
    for name, r in res.items():
        line = f"{name:<45} fold {r['fold']:7.1f} instr/record ({r['fold'] - base['fold']:+6.1f})"
        if "update" in r:
            line += f"   update {r['update']:7.1f} ({r['update'] - base['update']:+6.1f})"
        log.info("%s", line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"records": args.records, "value_type": args.value_type,
                       "instructions_per_record": res}, f, indent=1)


if __name__ == "__main__":
    main()
