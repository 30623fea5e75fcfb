"""What a retry costs under Spark (docs/spark.md, "Surviving failures"):

* a checkpointed ``slash.spark.stream``: a task's Python worker SIGKILLed
  once the first checkpoint committed; time from the kill to the first new
  output (a part file renamed into the directory sink after the kill), and
  the driver's ``seconds_to_resume``;
* a checkpointed ``window_aggregate``: wall time of the job with a worker
  killed (Spark retries the barrier stage, which resumes from the newest
  checkpoint) against the same job without the kill, and without checkpoints.

    PYTHONPATH=python python3 spark_integration/retry_cost.py [--master local[2]] [--runs 2]

Prints one JSON object. Absolute figures depend on the machine's load.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import tempfile
import time
from typing import Any, Dict, List


def _parts(sink: str) -> List[str]:
    return glob.glob(os.path.join(sink, "part-*.parquet"))


def stream_kill(spark: Any, every: str, d: str) -> Dict[str, Any]:
    from slash.spark import RateSource, stream

    src = RateSource(rate=50_000, records=400_000, keys=100, batch=5_000, seed=1)
    sink, ck = os.path.join(d, "out"), os.path.join(d, "ck")
    h = stream(spark, src, time="event_time", window="tumbling:500ms", key="key", aggs=["count"],
               sink=sink, executors=2, checkpoint=ck, checkpoint_every=every)
    while not h.metrics["checkpoints"]:
        time.sleep(0.01)
    before = set(_parts(sink))
    pid = h.task_pids()[1]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    first = None
    while h.running and first is None:
        if set(_parts(sink)) - before:
            first = time.monotonic() - killed
        time.sleep(0.005)
    m = h.wait(300)
    return {"checkpoint_every": every, "kill_to_first_output_s": round(first, 3) if first else None,
            "seconds_to_resume": m["recoveries"][0].get("seconds_to_resume"),
            "checkpoints": len(m["checkpoints"])}


def aggregate_kill(spark: Any, d: str) -> Dict[str, Any]:
    import pyarrow.parquet as pq

    from slash.spark import run_aggregate
    from slash.workloads import ysb_batches
    import pyarrow as pa

    path = os.path.join(d, "ysb.parquet")
    pq.write_table(pa.Table.from_batches(list(ysb_batches(2_000_000, keys=1000, seed=2))), path,
                   row_group_size=50_000)
    q = dict(time="event_time", window="tumbling:10s", key="key", aggs=["count"], executors=2)
    out: Dict[str, Any] = {"records": 2_000_000}
    t = time.perf_counter()
    run_aggregate(spark, path, **q)
    out["plain_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    r = run_aggregate(spark, path, checkpoint=os.path.join(d, "ck0"), checkpoint_every="4 batches", **q)
    out["checkpointed_s"] = round(time.perf_counter() - t, 2)
    out["checkpoints"] = len(r.recovery["checkpoints"])
    env = spark.sparkContext.environment
    env["SLASH_TEST_KILL"] = "1:15:0:1"  # rank 1, after 15 of its ~20 batches, once a cut committed
    try:
        t = time.perf_counter()
        r = run_aggregate(spark, path, checkpoint=os.path.join(d, "ck1"), checkpoint_every="4 batches", **q)
        out["killed_s"] = round(time.perf_counter() - t, 2)
    finally:
        env.pop("SLASH_TEST_KILL", None)
    rec = r.recovery["recoveries"][0]
    out.update(seconds_to_resume=rec.get("seconds_to_resume"), from_checkpoint=rec["from_checkpoint"],
               records_read_by_retry=sum(m["records_in_attempt"] for m in r.metrics))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    from slash.spark import session

    spark = session(a.master, "slash-retry-cost")
    res: Dict[str, Any] = {"master": a.master, "load_avg": os.getloadavg()[0], "stream": [], "aggregate": []}
    for _ in range(a.runs):
        for every in ("2 batches", "1s"):
            with tempfile.TemporaryDirectory() as d:
                res["stream"].append(stream_kill(spark, every, d))
        with tempfile.TemporaryDirectory() as d:
            res["aggregate"].append(aggregate_kill(spark, d))
    spark.stop()
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
