"""``slash bench count``: ``slash run`` against DuckDB on a plain windowed
count over big Parquet files, and what each stage of a rank costs.

The input (written once under ``--dir``, reused): ``--files`` Parquet files
written by pyarrow with its defaults (snappy, 1 Mi-row row groups), together
``--rows`` rows of int64 ``ts`` (ms, sorted; file i holds the i-th part of
``--span``) and int64 ``k`` (``--keys`` values, uniform). The query: count per
(10 s tumbling window, k).

Timed, as a user runs them, each a fresh process, the sides taking turns
after one warm-up run of each (``--repeat`` rounds; best and median kept):

* ``slash run --executors N`` (``--executors``, default 2), wall time;
* DuckDB with ``threads = N`` in a Python process: the same GROUP BY over
  the same files, written to Parquet, wall time.

Both results are compared row for row (``verified``). ``ratio`` is DuckDB's
best wall time over slash's (above 1: slash is faster).

Stages, in this process, CPU seconds over the whole input (best of
``--repeat``): ``decode_core`` (a rank's reader: :class:`FileSource` of ts
and k, its integer chunks decoded by the core, :mod:`slash.sources.parquet_chunks`),
``decode`` (pyarrow's ``ParquetFile.read_row_group`` of the same, one
thread, for comparison) and ``fold`` (the executor's push of the
decoded batches, one executor: :func:`slash.runner.execute_split` over them).
``decode_share`` / ``fold_share``: decode_core's and fold's parts of their
sum, the CPU a rank spends per record.

    slash bench count --rows 60000000 --repeat 5
"""
from __future__ import annotations

import argparse
import logging
import os
import secrets
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.executor import Executor, GroupConfig
from slash.sources import FileSource
from slash.query import Query
from slash.runner import execute_split

log = logging.getLogger(__name__)

NAME = "count"
HELP = "slash run vs DuckDB (same threads) on a windowed count over big Parquet files, and stages"

_DUCKDB = """
import sys, duckdb
files, threads, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
con = duckdb.connect(config={"threads": threads})
con.execute(f"COPY (SELECT ts // 10000 * 10000 AS window_start, k, count(*) AS count "
            f"FROM read_parquet({files}) GROUP BY ALL) TO '{out}' (FORMAT parquet)")
"""


def write_input(root: str, rows: int, files: int, keys: int, span_ms: int,
                seed: int = 7) -> List[str]:
    """The input files under ``root`` (written once per shape, then reused)."""
    d = os.path.join(root, f"count-{rows}-{files}-{keys}-{span_ms}")
    paths = [os.path.join(d, f"part-{i}.parquet") for i in range(files)]
    if all(os.path.exists(p) for p in paths):
        return paths
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, p in enumerate(paths):
        n = rows // files + (1 if i < rows % files else 0)
        lo, hi = i * span_ms // files, (i + 1) * span_ms // files
        t = pa.table({"ts": np.sort(rng.integers(lo, hi, n)).astype(np.int64),
                      "k": rng.integers(0, keys, n).astype(np.int64)})
        pq.write_table(t, p + ".tmp")
        os.replace(p + ".tmp", p)
        log.info("count: wrote %s (%d rows)", p, n)
    return paths


def _timed(cmd: List[str]) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return wall


def _same(a: str, b: str) -> bool:
    def rows(path: str) -> List[Any]:
        t = pq.read_table(path, columns=["window_start", "k", "count"])
        return sorted(zip(*(t.column(c).to_pylist() for c in ("window_start", "k", "count"))))

    return rows(a) == rows(b)


def _stages(paths: List[str], repeat: int) -> Dict[str, float]:
    """CPU seconds of decode and fold over the whole input, best of ``repeat``."""
    def decode(keep: bool) -> List[pa.Table]:
        out = []
        for p in paths:
            f = pq.ParquetFile(p, pre_buffer=True)
            for g in range(f.metadata.num_row_groups):
                t = f.read_row_group(g, columns=["ts", "k"], use_threads=False)
                if keep:
                    out.append(t)
        return out

    class Decoded:
        """The decoded row groups as a bounded source."""
        bounded = True

        def __init__(self, tables: List[pa.Table]) -> None:
            self.tables, self.schema = tables, tables[0].schema

        def may_have_nulls(self, column: str) -> bool:
            return False

        def read(self, rank: int, n: int, columns: Optional[List[str]] = None) -> Iterator[Any]:
            for t in self.tables:
                yield from t.to_batches()

    def source_read() -> None:
        """What a rank's reader does: FileSource with the core's integer chunk reader."""
        for _ in FileSource(paths, time="ts").read(0, 1, columns=["ts", "k"]):
            pass

    q = Query(time="ts", window="tumbling:10s", key="k", aggregates=["count"])
    src = Decoded(decode(True))
    best = {"decode": float("inf"), "decode_core": float("inf"), "fold": float("inf")}
    for _ in range(repeat):
        c = time.process_time()
        decode(False)
        best["decode"] = min(best["decode"], time.process_time() - c)
        c = time.process_time()
        source_read()
        best["decode_core"] = min(best["decode_core"], time.process_time() - c)
        token = secrets.token_hex(8)
        lst = Executor.listen("shm", token=token)
        try:
            c = time.process_time()
            execute_split(q, src, 0, [lst.address], lst, GroupConfig(), token)
            best["fold"] = min(best["fold"], time.process_time() - c)
        finally:
            lst.close()
    return best


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default="/tmp/slash_bench_count", help="where the input is kept")
    parser.add_argument("--rows", type=int, default=60_000_000, help="rows in all (default 60 M)")
    parser.add_argument("--files", type=int, default=2, help="Parquet files (default 2)")
    parser.add_argument("--keys", type=int, default=100, help="distinct k values (default 100)")
    parser.add_argument("--span", type=int, default=7_200_000, metavar="MS",
                        help="event-time span in ms (default 2 h)")
    parser.add_argument("--executors", type=int, default=2,
                        help="slash executors and DuckDB threads (default 2)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--slash", default=None, metavar="CMD",
                        help="the slash command to time (default: this Python's -m slash); "
                             "e.g. another build's .venv/bin/slash, to compare builds")
    parser.add_argument("--no-stages", action="store_true", help="skip the stage timings")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    paths = write_input(args.dir, args.rows, args.files, args.keys, args.span)
    out_s = os.path.join(args.dir, "slash-out.parquet")
    out_d = os.path.join(args.dir, "duckdb-out.parquet")
    slash_cmd = (args.slash.split() if args.slash else [sys.executable, "-m", "slash"]) + [
        "run", "--input", *paths, "--time", "ts", "--window", "tumbling:10s", "--key", "k",
        "--agg", "count", "--executors", str(args.executors), "--output", out_s]
    duck_cmd = [sys.executable, "-c", _DUCKDB, repr(paths), str(args.executors), out_d]
    load = os.getloadavg()[0]
    _timed(slash_cmd), _timed(duck_cmd)  # warm: page cache, imports
    times: Dict[str, List[float]] = {"slash": [], "duckdb": []}
    for _ in range(args.repeat):
        times["slash"].append(_timed(slash_cmd))
        times["duckdb"].append(_timed(duck_cmd))
    result: Dict[str, Any] = {
        "rows": args.rows, "files": args.files, "keys": args.keys, "executors": args.executors,
        "slash_best_s": round(min(times["slash"]), 3),
        "slash_median_s": round(statistics.median(times["slash"]), 3),
        "duckdb_best_s": round(min(times["duckdb"]), 3),
        "duckdb_median_s": round(statistics.median(times["duckdb"]), 3),
        "verified": _same(out_s, out_d), "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2)}
    result["ratio"] = round(result["duckdb_best_s"] / result["slash_best_s"], 2)
    result["ratio_median"] = round(result["duckdb_median_s"] / result["slash_median_s"], 2)
    if not args.no_stages:
        st = _stages(paths, args.repeat)
        total = st["decode_core"] + st["fold"]
        result.update(decode_cpu_s=round(st["decode"], 3),
                      decode_core_cpu_s=round(st["decode_core"], 3), fold_cpu_s=round(st["fold"], 3),
                      decode_share=round(st["decode_core"] / total, 2),
                      fold_share=round(st["fold"] / total, 2),
                      rows_per_cpu_s=round(args.rows / total))
    return result


def summary(r: Dict[str, Any]) -> str:
    text = (f"count over {r['rows']:,} rows, {r['executors']} executors/threads: slash run "
            f"{r['slash_best_s']:.2f} s (median {r['slash_median_s']:.2f}), DuckDB "
            f"{r['duckdb_best_s']:.2f} s (median {r['duckdb_median_s']:.2f}): ratio "
            f"{r['ratio']:.2f} (median {r['ratio_median']:.2f}), verified={r['verified']}, "
            f"load {r['load_before']} -> {r['load_after']}")
    if "decode_cpu_s" in r:
        text += (f"\n  per core: decode {r['decode_core_cpu_s']:.3f} s ({r['decode_share']:.0%}; "
                 f"pyarrow's read_row_group alone {r['decode_cpu_s']:.3f} s), fold "
                 f"{r['fold_cpu_s']:.3f} s ({r['fold_share']:.0%}): "
                 f"{r['rows_per_cpu_s'] / 1e6:.0f} M rows per CPU second")
    return text
