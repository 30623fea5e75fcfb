"""Overhead of live metrics on `slash run` (runner.run) over YSB records: alternating runs
with and without executors reporting (LiveMetrics), wall clock and the executors' CPU time
(RUSAGE_CHILDREN). Usage: PYTHONPATH=python python3 bench/metrics_overhead.py [RECORDS] [REPS]"""
import json, os, resource, sys, time
import pyarrow as pa, pyarrow.parquet as pq
from slash.workloads import ysb_batches
from slash.query import Query
from slash.runner import run
from slash.metrics import LiveMetrics

def main():
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"slash-ysb{N}.parquet")
    if not os.path.exists(path):
        t = pa.Table.from_batches(list(ysb_batches(N, keys=1000, seed=1, rate=1_000_000,
                                                   columns=["key", "event_time", "event_type"])))
        pq.write_table(t, path, row_group_size=1 << 18)
    from slash.sources import FileSource
    q = Query(time="event_time", window="tumbling:1s", key="key", aggregates=["count"])
    res = {"on": [], "off": []}
    cpu = {"on": [], "off": []}
    for rep in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
        for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
            live = LiveMetrics(2, kind="run") if mode == "on" else None
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            out = run(q, FileSource(path), executors=2, live=live)
            res[mode].append(time.perf_counter() - t0)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[mode].append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
            if live is not None:
                assert live.snapshot()["totals"]["records_in"] == N
    print(json.dumps({"records": N, "seconds": res, "cpu": cpu,
                      "median_cpu_off": sorted(cpu["off"])[len(cpu["off"]) // 2],
                      "median_cpu_on": sorted(cpu["on"])[len(cpu["on"]) // 2],
                      "median_off": sorted(res["off"])[len(res["off"]) // 2],
                      "median_on": sorted(res["on"])[len(res["on"]) // 2]}))


if __name__ == "__main__":
    main()
