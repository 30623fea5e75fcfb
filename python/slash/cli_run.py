"""``slash run``: a windowed aggregation over Parquet / Arrow files.

    slash run --input data/*.parquet --time ts --window tumbling:10s --key campaign \\
              --agg count --agg sum:price --filter "event_type == view" \\
              --executors 2 --transport shm --output out.parquet
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any, Dict

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", nargs="+", required=True, metavar="PATH",
                   help="Parquet or Arrow IPC files, directories or glob patterns")
    p.add_argument("--time", required=True, metavar="COL", help="event-time column (int64 ms)")
    p.add_argument("--window", required=True, metavar="SPEC",
                   help="tumbling:10s | sliding:60s/10s | session:10s (units ms, s, m, h)")
    p.add_argument("--key", required=True, metavar="COL[,COL]", help="key column(s)")
    p.add_argument("--agg", action="append", required=True, metavar="AGG",
                   help="count | sum:COL | min:COL | max:COL | avg:COL (repeatable)")
    p.add_argument("--filter", action="append", default=[], metavar="'COL OP VALUE'",
                   help="keep records where it holds; OP: == != < <= > >= in (repeatable)")
    p.add_argument("--lateness", default="0ms", metavar="DUR", help="allowed out-of-orderness")
    p.add_argument("--executors", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="executor processes (default: the number of cores)")
    p.add_argument("--transport", default="shm", help="shm | ofi:tcp | ofi:verbs (default shm)")
    p.add_argument("--mode", default="slash", choices=["slash", "repartition"],
                   help="slash: eager local state merged at leaders (default); repartition: the "
                        "hash-repartitioning baseline over the same channels")
    p.add_argument("--output", required=True, metavar="OUT.parquet", help="result file")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    from slash.query import Query
    from slash.runner import run as run_query
    from slash.sources import FileSource

    query = Query(time=args.time, window=args.window, key=[k for k in args.key.split(",") if k],
                  aggregates=args.agg, filters=args.filter, lateness=args.lateness)
    source = FileSource(args.input)
    t0 = time.perf_counter()
    result = run_query(query, source, executors=args.executors, transport=args.transport,
                       mode=args.mode, output=args.output)
    secs = time.perf_counter() - t0
    return {"output": args.output, "rows_in": source.rows, "rows_out": result.num_rows,
            "seconds": round(secs, 3), "records_per_s": source.rows / secs if secs else None,
            "executors": args.executors, "transport": args.transport, "mode": args.mode}


def summary(r: Dict[str, Any]) -> str:
    return (f"slash run: {r['rows_in']:,} records -> {r['rows_out']:,} rows in {r['seconds']:.2f} s "
            f"({r['records_per_s'] / 1e6:.2f} M records/s, {r['executors']} executors, "
            f"{r['transport']}, {r['mode']} mode) -> {r['output']}")
