"""``slash bench mesh``: what a group's full mesh costs as it grows on one host.

Groups of 8, 16, 32, 64 and 128 executor processes (the count window
aggregation of ``slash bench scaling``, a small input each, DuckDB's answer
checked; a batch of 1,000 records at a time, 10 one-second windows: some 10
epochs) measured for what grows with the mesh's N(N-1) channels: the start
(launch to every executor's mesh formed), the memory of the group at its end
(resident set summed over the processes, which counts a shared ring page
once per process mapping it, and the proportional set, which counts it
once; of it, the shared memory, which is the rings), the time an executor
spends per epoch in its sync, and the open files
each executor needs (:mod:`slash.open_files`). Beside them: how long a group
past the open-file limit takes to be refused (a child interpreter with a
lowered limit). Ratios are against the smallest group of the same run.
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from typing import Any, Dict, List

from slash.bench._groups import GroupBenchConfig, run_group
from slash.run.launcher import use_forkserver
from slash.open_files import executor_fds

log = logging.getLogger(__name__)

NAME = "mesh"
HELP = "start, memory and epoch cost of groups of 8-128 executors on one host (the full mesh)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executors", default="8,16,32,64,128", help="comma-separated group sizes")
    p.add_argument("--records", type=int, default=20_000, help="records per executor")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--transport", default="shm")
    p.add_argument("--plot", default="bench/results/mesh.png", help="PNG path ('' for none)")
    p.add_argument("--no-verify", action="store_true", help="skip the DuckDB check")


#: the group refused under RLIMIT_NOFILE (256, 256): past it over any transport
REFUSED = 128

#: a child interpreter that lowers its open-file limits and times a run's refusal
_REFUSAL = textwrap.dedent("""
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    import numpy as np, pyarrow as pa
    from slash.errors import ResourceLimit
    from slash.query import Query
    from slash.runner import run
    t = pa.table({"ts": np.arange(1000), "k": np.arange(1000) % 7})
    q = Query(time="ts", window="tumbling:10s", key="k", aggregates=["count"])
    t0 = time.perf_counter()
    try:
        run(q, t, executors=int(sys.argv[1]), transport=sys.argv[2])
    except ResourceLimit:
        print(time.perf_counter() - t0)
""")


def refusal_seconds(n: int, transport: str) -> float:
    """Seconds from ``slash.runner.run`` to its refusal of a group of ``n``
    under RLIMIT_NOFILE (256, 256), in a child interpreter (imports excluded)."""
    r = subprocess.run([sys.executable, "-c", _REFUSAL, str(n), transport], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"the refusal of {n} executors was not measured: {r.stderr[-500:]}")
    return float(r.stdout.strip())


def run(args: argparse.Namespace) -> Dict[str, Any]:
    # as `slash run` starts a group of processes: forked from a server that
    # imported their modules once, not 128 interpreters importing pyarrow
    use_forkserver(["slash._warm"])
    base = GroupBenchConfig(records=args.records, keys=args.keys, transport=args.transport,
                            rate=2_000, window_ms=1_000, batch=1_000,
                            verify=not args.no_verify)
    runs: List[Dict[str, Any]] = []
    for n in [int(x) for x in args.executors.split(",") if x]:
        load = os.getloadavg()[0]
        log.info("mesh: %d executors (load %.1f)", n, load)
        r = run_group(replace(base, executors=n))
        r["load_before"] = load
        r["load_after"] = os.getloadavg()[0]
        r["fds_per_executor"] = executor_fds(n, args.transport)
        r["channels"] = n * (n - 1)
        runs.append(r)
    first = runs[0]
    for r in runs:
        r["start_ratio"] = r["start_seconds"] / first["start_seconds"]
        r["pss_ratio"] = r["pss_bytes"] / first["pss_bytes"]
        r["epoch_ratio"] = r["epoch_sync_ms"] / first["epoch_sync_ms"]
    out: Dict[str, Any] = {"benchmark": NAME, "runs": runs,
                           "refusal": {"executors": REFUSED, "rlimit_nofile": 256,
                                       "seconds": refusal_seconds(REFUSED, args.transport)}}
    if args.plot:
        from slash.bench.plot import plot_mesh  # optional dependency (matplotlib)

        out["plot"] = plot_mesh(runs, args.plot)
    return out


def summary(r: Dict[str, Any]) -> str:
    mib = 2**20
    return (f"mesh: {r['executors']} executors ({r['channels']} channels): start "
            f"{r['start_seconds']:.2f} s, memory RSS sum {r['rss_bytes'] / mib:.0f} MiB, "
            f"PSS sum {r['pss_bytes'] / mib:.0f} MiB (rings {r['shmem_pss_bytes'] / mib:.0f} MiB), "
            f"epoch sync {r['epoch_sync_ms']:.1f} ms over {r['epochs']:.0f} epochs, "
            f"{r['fds_per_executor']} fds per executor, load {r['load_before']:.1f}, "
            f"verified={r.get('verified')}")
