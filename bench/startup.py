"""Start-up cost of small jobs: ``slash run`` end to end on a ~1 MB Parquet file.

Writes one Parquet file (``--rows`` rows: int64 ``ts`` over 10 minutes, int64
``k`` and string ``s`` with 100 values each, float64 ``x``; ~1 MB at the
default 60,000 rows) and runs, as a user would,

    python3 -m slash run --input FILE --time ts --window tumbling:10s --key k \\
        --agg count --agg sum:x --executors N --transport T --output OUT

for each N in ``--executors`` and each T in ``--transports``, ``--repeat``
times, alternating; reports the best and the median wall time of each (the
machine is shared) and the checks that explain them:

* ``core_import_ms``: importing ``slash._core`` in a fresh interpreter;
* ``libfabric_loaded_by_import``: whether that import maps libfabric (it
  should not: the ofi transport loads it at first use);
* ``pandas_loaded_by_runner_import``: whether importing ``slash.runner``
  imports pandas (it should not).

    PYTHONPATH=python python3 bench/startup.py --repeat 5
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

log = logging.getLogger("startup")


def write_input(path: str, rows: int, seed: int = 1) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    t = pa.table({"ts": np.sort(rng.integers(0, 600_000, rows)).astype(np.int64),
                  "k": rng.integers(0, 100, rows),
                  "s": pa.array([f"key-{i:03d}" for i in rng.integers(0, 100, rows)]),
                  "x": rng.random(rows)})
    pq.write_table(t, path)


def probe() -> Dict[str, object]:
    """Import-time facts, each in a fresh interpreter."""
    code = ("import time, sys; t = time.perf_counter(); import slash._core; "
            "ms = (time.perf_counter() - t) * 1e3; "
            "maps = open('/proc/self/maps').read(); "
            "print(round(ms, 1), 'libfabric' in maps)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ms, fab = out.stdout.split()
    code2 = "import sys, slash.runner; print('pandas' in sys.modules)"
    out2 = subprocess.run([sys.executable, "-c", code2], capture_output=True, text=True, check=True)
    return {"core_import_ms": float(ms), "libfabric_loaded_by_import": fab == "True",
            "pandas_loaded_by_runner_import": out2.stdout.strip() == "True"}


def one_run(path: str, out: str, executors: int, transport: str) -> float:
    cmd = [sys.executable, "-m", "slash", "run", "--input", path, "--time", "ts",
           "--window", "tumbling:10s", "--key", "k", "--agg", "count", "--agg", "sum:x",
           "--executors", str(executors), "--transport", transport, "--output", out]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/slash_startup")
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--executors", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--transports", nargs="+", default=["shm"])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, f"in-{args.rows}.parquet")
    if not os.path.exists(path):
        write_input(path, args.rows)
    out = os.path.join(args.dir, "out.parquet")
    walls: Dict[str, List[float]] = {}
    cells = [(t, n) for t in args.transports for n in args.executors]
    one_run(path, out, 1, "shm")  # warm the page cache and the .pyc files
    for _ in range(args.repeat):
        for t, n in cells:
            walls.setdefault(f"{t} x{n}", []).append(one_run(path, out, n, t))
    res: Dict[str, object] = {"input_bytes": os.path.getsize(path), "rows": args.rows,
                              "load_average_1m": round(os.getloadavg()[0], 2), **probe()}
    for key, ws in walls.items():
        res[key] = {"best_s": round(min(ws), 3), "median_s": round(statistics.median(ws), 3)}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
