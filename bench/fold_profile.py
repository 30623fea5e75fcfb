"""Fold rate of one executor on a general query, excluding the Parquet decode.

Reproduces the measurement of the "faster fold" issue: 2 Parquet files of
15 M rows each, written by pyarrow with default settings (nullable columns,
no nulls present, snappy, 1 Mi-row row groups), columns

* ``ts``  int64 ms: either time-ordered across the files (``--layout ordered``:
  file 0 holds the first half of the hour, file 1 the second) or both files
  spanning the whole hour (``--layout spanning``), sorted within each file;
* ``k``   int64 with 100 values, ``s`` string with 100 values, ``x`` float64.

Queries: count per (tumbling 10 s window, k) (``--key k``) or per s
(``--key s``). One executor (a 1-executor group over shm) runs
:func:`slash.runner.execute_split`, exactly as ``slash run`` does per process.

Measured, each ``--repeat`` times alternating, best kept (the machine is shared):

* ``decode``: ``FileSource.read`` over the same files and columns, alone;
* ``fold``: ``execute_split`` over the batches already decoded in memory
  (the source yields the same batches and Watermarks FileSource yields), so
  this is the push path and the update loop only.

Reports records/s of the fold (wall and CPU time of this one process).

    PYTHONPATH=python python3 bench/fold_profile.py --key k --repeat 3
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import time
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.executor import Executor, GroupConfig
from slash.query import Query
from slash.runner import execute_split
from slash.sources import FileSource

log = logging.getLogger("fold_profile")

ROWS_PER_FILE = 15_000_000
SPAN_MS = 3_600_000
KEYS = 100


def write_files(root: str, layout: str, rows: int = ROWS_PER_FILE, seed: int = 7) -> List[str]:
    """The two part files of `layout` under `root` (written once, then reused)."""
    d = os.path.join(root, f"{layout}-{rows}")
    paths = [os.path.join(d, f"part-{i}.parquet") for i in range(2)]
    if all(os.path.exists(p) for p in paths):
        return paths
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = np.array([f"key-{i:03d}" for i in range(KEYS)], dtype=object)
    for i, p in enumerate(paths):
        if layout == "ordered":
            lo, hi = i * SPAN_MS // 2, (i + 1) * SPAN_MS // 2
        else:
            lo, hi = 0, SPAN_MS
        ts = lo + (np.arange(rows, dtype=np.int64) * (hi - lo)) // rows
        k = rng.integers(0, KEYS, rows, dtype=np.int64)
        t = pa.table({"ts": ts, "k": k, "s": pa.array(names[k], pa.string()),
                      "x": rng.random(rows)})
        pq.write_table(t, p + ".tmp")
        os.replace(p + ".tmp", p)
        log.info("wrote %s", p)
    return paths


class _Decoded:
    """A bounded source over items FileSource.read already produced."""

    bounded = True

    def __init__(self, fs: FileSource, items: List[Any]) -> None:
        self.schema = fs.schema
        self._fs = fs
        self._items = items

    def may_have_nulls(self, column: str) -> bool:
        return self._fs.may_have_nulls(column)

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             time: Optional[str] = None) -> Iterator[Any]:
        return iter(self._items)


def decode(fs: FileSource, q: Query) -> List[Any]:
    return list(fs.read(0, 1, q.input_columns, time=q.time))


def fold(q: Query, src: Any, group: GroupConfig) -> Dict[str, Any]:
    token = secrets.token_hex(8)
    lst = Executor.listen("shm", token=token)
    m: Dict[str, Any] = {}
    try:
        res = execute_split(q, src, 0, [lst.address], lst, group, token, metrics=m)
    finally:
        lst.close()
    m["rows_out"] = res.num_rows
    m["count_total"] = int(pa.compute.sum(res.column("count")).as_py())
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="/tmp/slash_fold_data")
    ap.add_argument("--layout", choices=["ordered", "spanning"], default="ordered")
    ap.add_argument("--key", choices=["k", "s"], default="k")
    ap.add_argument("--rows", type=int, default=ROWS_PER_FILE, help="rows per file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-decode", action="store_true", help="skip timing the decode")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    paths = write_files(args.root, args.layout, args.rows)
    q = Query(time="ts", window="tumbling:10s", key=args.key, aggregates=["count"])
    fs = FileSource(paths, time="ts")
    group = GroupConfig(transport="shm")
    items = decode(fs, q)
    n = sum(b.num_rows for b in items if isinstance(b, (pa.RecordBatch, pa.Table)))
    src = _Decoded(fs, items)
    best: Dict[str, float] = {}
    cpu: Dict[str, float] = {}
    for _ in range(args.repeat):
        if not args.no_decode:
            w0, c0 = time.perf_counter(), time.process_time()
            decode(fs, q)
            w, c = time.perf_counter() - w0, time.process_time() - c0
            best["decode"] = min(best.get("decode", w), w)
            cpu["decode"] = min(cpu.get("decode", c), c)
        w0, c0 = time.perf_counter(), time.process_time()
        m = fold(q, src, group)
        w, c = time.perf_counter() - w0, time.process_time() - c0
        if m["count_total"] != n:
            raise SystemExit(f"fold counted {m['count_total']} records of {n}")
        best["fold"] = min(best.get("fold", w), w)
        cpu["fold"] = min(cpu.get("fold", c), c)
    out = {"layout": args.layout, "key": args.key, "records": n, "epochs": m["epochs"],
           "rows_out": m["rows_out"]}
    for k in best:
        out[f"{k}_s"] = round(best[k], 4)
        out[f"{k}_cpu_s"] = round(cpu[k], 4)
    out["fold_Mrec_per_s"] = round(n / best["fold"] / 1e6, 1)
    out["fold_Mrec_per_cpu_s"] = round(n / cpu["fold"] / 1e6, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
