"""``slash bench kafka``'s latency runs and sweep: one live side over a
fresh topic fed at a rate (:func:`latency_run`: each window's latency from
its end to its rows at the side's driver), and the highest rate a side
sustains (:func:`sweep_rates`: doubling, then bisecting).

Invariants: only windows that ended after the warm-up and before the feed
stopped are measured; a rate counts as sustained only when every such
window was visible, their p99 is under :data:`SUSTAINED_P99_MS` and the
producer really fed it (:func:`fed_short`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from slash.bench._kafka_flink import flink_kafka_jars
from slash.bench._kafka_measure import READY
from slash.bench._kafka_spark import spark_kafka_jars
from slash.bench._kafka_topic import Topic, produce_paced, producer_kind
from slash.errors import SystemFailure
def _percentiles(xs: List[float]) -> Dict[str, float]:

    if not xs:
        return {}
    a = np.asarray(xs, dtype=np.float64)
    return {f"p{q}": round(float(np.percentile(a, q)), 1) for q in (50, 95, 99)} | \
        {"max": round(float(a.max()), 1)}


def latency_run(side: str, bootstrap: str, create: Callable[[str, int], None], rate: int,
                seconds: float, warmup: float, window_ms: int, args: argparse.Namespace,
                workdir: str, values: List[Tuple[str, str]]) -> Dict[str, Any]:
    """One live side over a fresh topic fed at ``rate`` events/s: the
    latency (ms the result reached the side's driver - window end) of each
    window that ended after the warm-up and before the producer stopped."""
    name = f"lat-{side}-{os.getpid()}-{int(time.time())}"
    create(name, args.partitions)
    topic = Topic(bootstrap, name, args.partitions, 0)
    spec: Dict[str, Any] = {"side": side, "topic": asdict(topic), "cores": args.cores,
                            "workdir": workdir, "live": True, "window_ms": window_ms}
    if side == "spark":
        spec["jars"] = spark_kafka_jars(args.spark_kafka_version)[1]
    elif side == "flink":
        from slash.bench.flink import pyflink_python  # start-up: only the Flink side

        spec["python"] = pyflink_python(install=False)
        spec["jars"] = flink_kafka_jars(getattr(args, "flink_kafka_version", None))[1]
    os.makedirs(workdir, exist_ok=True)
    errors = os.path.join(workdir, "stderr.log")
    with open(errors, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "slash.bench.kafka", json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True, start_new_session=True)
    lines: List[str] = []
    ready: List[float] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == READY:
                ready.append(time.time())
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proc.stdin is not None
        load = os.getloadavg()[0]
        # the feed starts with the side; measured: from warm-up after the side is up
        fed = produce_paced(
            bootstrap, name, args.partitions, rate,
            lambda: ready[0] + warmup + seconds if ready else
            (time.time() - 1 if proc.poll() is not None else None), values,
            starting=lambda: not ready)
        n, last_ms = fed["events"], fed["last_ms"]
        if not ready:
            raise SystemFailure(f"latency run of {side}: the side was not up within the feed "
                                f"(exit {proc.poll()})")
        drain = max(15.0, 3 * window_ms / 1000)
        time.sleep(drain)  # the last windows' results
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        proc.wait(180)
        reader.join(30)
        out = "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    report = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
    if report is None:
        with open(errors, errors="replace") as f:
            tail = f.read()[-3000:]
        raise SystemFailure(f"latency run of {side}: no report (exit {proc.returncode}):\n{tail}")
    lo, hi = ready[0] * 1000 + warmup * 1000, last_ms
    first = -(-int(lo) // window_ms) * window_ms  # the first window starting after the warm-up
    expected = list(range(first + window_ms, hi + 1, window_ms))  # window ends
    got = {e: v - e for e, v in report["visible"]}
    lats = [got[e] for e in expected if e in got]
    # Flink's: also when each window's last row left its window operator (inside the job)
    emitted = {e: v - e for e, v in report.get("emitted") or ()}
    in_job = {"in_job": _percentiles([emitted[e] for e in expected if e in emitted])} \
        if emitted else {}
    feed_s = max(1e-3, (last_ms - fed["full_from_ms"]) / 1000)
    return {"kind": "latency", "side": side, "rate": rate, "seconds": seconds,
            "window_ms": window_ms, "events": n, "feed_rate": round(fed["full_events"] / feed_s),
            "producer": producer_kind(),
            "windows": len(lats),
            # windows of the measured span not visible by the stop (drain_s after the feed)
            "windows_missing": len(expected) - len(lats), "drain_s": drain,
            "windows_visible_in_all": len(got), **_percentiles(lats), **in_job,
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


# ---- the highest sustained rate -----------------------------------------------------------------
#: a side sustains a rate when the p99 of its window latency is under this (ms)
SUSTAINED_P99_MS = 1000.0
#: and the producer fed at least this share of the rate (else the rate was not given)
FEED_SHARE = 0.95


def sustains(r: Dict[str, Any], p99_ms: float = SUSTAINED_P99_MS) -> bool:
    """A latency run at a sustained rate: every window of the measured span
    visible, their p99 under ``p99_ms``, and the producer kept the rate.
    Flink's p99 is its windows' leaving the window operator (``in_job``),
    the figure most favourable to it: PyFlink's collect path to the client
    adds 300-650 ms at any rate (measured at 4,400 events/s: p50 221 ms in
    the job, 542 ms at the client)."""
    p99 = judged_p99(r)
    return r["windows"] > 0 and r["windows_missing"] == 0 and p99 is not None \
        and p99 < p99_ms and not fed_short(r)


def judged_p99(r: Dict[str, Any]) -> Optional[float]:
    """The p99 a latency run is judged by (:func:`sustains`): Flink's in the job."""
    return (r.get("in_job") or r).get("p99")


def fed_short(r: Dict[str, Any]) -> bool:
    """The producer (on the same cores as the side) fed less than FEED_SHARE of the rate."""
    return r["feed_rate"] < FEED_SHARE * r["rate"]


def sweep_rates(trial: Callable[[int], Dict[str, Any]], start: int, top: int,
                steps: int) -> Dict[str, Any]:
    """The highest rate ``trial`` sustains (:func:`sustains`): from ``start``
    doubling until a rate fails (or ``top``, or the producer falls short),
    halving instead while ``start`` fails (down to start/8), then ``steps``
    bisections between the highest good and the lowest failed rate (to the
    nearest 100 events/s). Returns the rate (None: not even start/8), the
    lowest failed one, and every trial."""
    trials: List[Dict[str, Any]] = []

    def run_one(rate: int) -> bool:
        r = trial(rate)
        r["sustained"] = sustains(r)
        trials.append(r)
        return r["sustained"]

    good: Optional[int] = None
    bad: Optional[int] = None
    rate = start
    if run_one(rate):
        good = rate
        while rate * 2 <= top and not fed_short(trials[-1]):
            rate *= 2
            if not run_one(rate):
                bad = rate
                break
            good = rate
    else:
        bad = rate
        while rate > max(1, start // 8):
            rate //= 2
            if run_one(rate):
                good = rate
                break
            bad = rate
    for _ in range(steps):
        if good is None or bad is None or fed_short(trials[-1]):
            break
        mid = int(round((good + bad) / 2, -2))
        if mid <= good or mid >= bad:
            break
        if run_one(mid):
            good = mid
        else:
            bad = mid
    return {"kind": "sweep", "side": trials[0]["side"], "sustained_rate": good,
            "lowest_failed_rate": bad, "p99_bound_ms": SUSTAINED_P99_MS,
            "window_ms": trials[0].get("window_ms"),
            "producer_bound": any(fed_short(t) for t in trials),
            "producer": trials[0].get("producer"),
            "trials": [{**{k: t.get(k) for k in ("rate", "feed_rate", "windows", "windows_missing",
                                                 "p50", "p99", "max", "in_job", "sustained",
                                                 "load_before", "load_after")},
                        "judged_p99": judged_p99(t)} for t in trials]}
