"""``slash bench autotune``: a stream tuned to a latency target against the
best fixed configuration, across rate steps.

The input is a recording whose event times are wall-clock times (an Arrow
IPC file, one record batch per 100 ms of event time), replayed at its own
pace (``realtime=True``): the rate steps ``low -> high -> low -> high ->
low``. Each run is :func:`slash.runner.run` over shm with executor
processes (what ``slash run --realtime`` does), measured live: window
latency (emit time - window end) per second, records/s, executors in use.

* **fixed**: a small sweep of executors x epoch_ms, each run once with its
  configuration fixed;
* **autotune** (live): ``latency_target=`` from the smallest executor count
  with ``max_executors`` the sweep's largest, the controller's decisions
  marked: a group of ``max_executors`` processes that scales live
  (:mod:`slash.run.live.scale`, no restart);
* **autotune_restart**: the same with ``checkpoint=``, which rescales by
  checkpoint-and-restart (``CheckpointedRun.rescale``); ``--no-restart``
  leaves it out.

The best fixed configuration *at the latency target* is the one whose p99
window latency over the whole run meets the target with the fewest
executors (then the lowest p99); if none meets it, the one with the lowest
p99. Reported per run: p99/p50 window latency, the share of seconds whose
p99 is over the target, the records/s of the high phases, executor-seconds
per second (executors in use on average) and the most executors used.
The figures are of this machine (``cores`` in the JSON); the rates default
to what 2 shared cores can do (the issue's 200 k -> 2 M rec/s asks for a
dedicated machine).

    slash bench autotune --json bench/results/autotune.json --plot bench/results/autotune.png
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from slash import runner
from slash.bench._progress import Progress
from slash.control.controller import ControllerConfig, parse_duration_ms
from slash.errors import InvalidArgument
from slash.executor import GroupConfig
from slash.query import Query

log = logging.getLogger(__name__)

NAME = "autotune"
HELP = ("a stream tuned to a latency target (latency_target=) against the best fixed "
        "executors x epoch_ms configuration, across rate steps up and down")

UNIT_MS = 100


def write_steps(path: str, phases: List[Tuple[int, float]], keys: int, lead_s: float,
                seed: int = 11) -> Tuple[float, List[float]]:
    """The stepped recording at `path`: event times from `lead_s` s ahead of
    now; returns (wall clock of its start, wall clock of each phase start)."""
    rng = np.random.default_rng(seed)
    schema = pa.schema([("t", pa.timestamp("ms")), ("k", pa.int32()), ("v", pa.float32())])
    chunks = []
    offset = 0
    starts = []
    for rate, secs in phases:
        starts.append(offset)
        for _ in range(int(secs * 1000) // UNIT_MS):
            m = int(rate) * UNIT_MS // 1000
            chunks.append((offset + np.sort(rng.integers(0, UNIT_MS, m)),
                           rng.integers(0, keys, m, dtype=np.int32), rng.random(m, dtype=np.float32)))
            offset += UNIT_MS
    base = int(time.time() * 1000 + lead_s * 1000)
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, schema) as w:
        for ts, k, v in chunks:
            w.write_batch(pa.record_batch([pa.array(ts + base, pa.timestamp("ms")), pa.array(k),
                                           pa.array(v)], schema=schema))
    return base / 1000.0, [(base + s) / 1000.0 for s in starts]


def _one(args: argparse.Namespace, work: str, phases: List[Tuple[int, float]], executors: int,
         epoch_ms: int, target: Optional[str], restart: bool = False) -> Dict[str, Any]:
    path = os.path.join(work, "steps.arrow")
    t0, starts = write_steps(path, phases, args.keys, args.lead)
    q = Query(time="t", window=args.window, key="k", aggregates=["count", "sum:v", "max:v"])
    m: Dict[str, Any] = {}
    kw: Dict[str, Any] = {}
    if target is not None:
        kw["latency_target"] = ControllerConfig(latency_target=target, min_executors=executors,
                                                max_executors=args.max_executors,
                                                cooldown=5.0, release_sustain=6)
        if restart:  # the checkpoint path: a rescale restarts the group from a cut
            kw["checkpoint"] = os.path.join(work, "ck")
    began = time.time()
    res = runner.run(q, path, executors=executors, realtime=True, metrics=m,
              group=GroupConfig(epoch_ms=epoch_ms), checkpoint_every=args.checkpoint_every, **kw)
    wall = time.time() - began
    auto = m["autotune"]
    tl = auto["timeline"]
    target_ms = _ms(args.target)
    lat = [p["latency_p99_ms"] for p in tl if p["latency_p99_ms"] is not None]
    high = [p["records_per_s"] or 0 for p in tl
            if any(a + 1 <= p["t"] <= a + d for a, (r, d) in zip(starts, phases)
                   if r == max(x for x, _ in phases))]
    ex_t = [(p["t"], p["executors"]) for p in tl]
    span = (ex_t[-1][0] - ex_t[0][0]) if len(ex_t) > 1 else 1.0
    ex_sec = sum((b[0] - a[0]) * a[1] for a, b in zip(ex_t, ex_t[1:])) / span if span else executors
    os.unlink(path)
    shutil.rmtree(os.path.join(work, "ck"), ignore_errors=True)
    path_taken = auto.get("path", "restart") if target is not None else None
    # the timeline and the phase starts in seconds from the recording's start, as reported
    timeline = [{"t": round(p["t"] - t0, 2), "executors": p["executors"],
                 "records_per_s": p["records_per_s"], "latency_p99_ms": p["latency_p99_ms"],
                 "epoch_ms": p["epoch_ms"]} for p in tl]
    phase_starts = [round(s - t0, 2) for s in starts]
    return {"executors": executors, "epoch_ms": epoch_ms, "autotune": target is not None,
            "path": path_taken, "live_scales": m.get("live_scales", []),
            "wall_seconds": round(wall, 2), "result_rows": res.num_rows,
            "p99_ms": auto["window_latency"]["p99_ms"], "p50_ms": auto["window_latency"]["p50_ms"],
            "seconds_over_target": round(sum(1 for v in lat if v > target_ms) / max(1, len(lat)), 3),
            "back_under_target_s": back_under(timeline, phases, phase_starts, target_ms),
            "high_phase_records_per_s": float(np.mean(high)) if high else None,
            "executors_in_use_mean": round(ex_sec, 3),
            "executors_max": max(e for _, e in ex_t) if ex_t else executors,
            "decisions": auto.get("decisions", []), "rescales": m.get("rescales", []),
            "timeline": timeline, "phase_starts": phase_starts, "t0_wall": t0}


def back_under(timeline: List[Dict[str, Any]], phases: List[Tuple[int, float]],
               starts: List[float], target_ms: float) -> List[Optional[float]]:
    """Per rate step (each phase start after the first, times as in
    ``timeline``): seconds from the step until the p99 window latency is
    back under ``target_ms`` for good, that is until the tick after the last
    one over it before the next step up (the end of the run after the last
    one), 0.0 if no tick after the step is over it, None if it never comes
    back before then. A step up's backlog drains into the low phase after it,
    so its horizon reaches to the next step up."""
    top = max(r for r, _ in phases)
    ends = [s for s, (r, _) in zip(starts, phases) if r == top] + [float("inf")]
    out: List[Optional[float]] = []
    for s in starts[1:]:
        horizon = min(e for e in ends if e > s)
        ticks = [p for p in timeline if s <= p["t"] < horizon and p["latency_p99_ms"] is not None]
        over = [i for i, p in enumerate(ticks) if p["latency_p99_ms"] > target_ms]
        if not over:
            out.append(0.0)
        elif over[-1] + 1 < len(ticks):
            out.append(round(ticks[over[-1] + 1]["t"] - s, 2))
        else:
            out.append(None)
    return out


def median_run(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Of one side's runs (one a round), the one of median p99 (the lower
    middle of an even count), with every round's p99 beside it
    (``p99_ms_rounds``): one run stands for its side, so its timeline, its
    decisions and its other figures are of one run, not mixed."""
    ranked = sorted(runs, key=lambda f: f["p99_ms"] if f["p99_ms"] is not None else float("inf"))
    return dict(ranked[(len(ranked) - 1) // 2], p99_ms_rounds=[f["p99_ms"] for f in runs])


def _ms(target: str) -> float:
    return parse_duration_ms(target)


def best_fixed(fixed: List[Dict[str, Any]], target_ms: float) -> Dict[str, Any]:
    ok = [f for f in fixed if f["p99_ms"] is not None and f["p99_ms"] <= target_ms]
    if ok:
        return min(ok, key=lambda f: (f["executors"], f["p99_ms"]))
    return min(fixed, key=lambda f: f["p99_ms"] if f["p99_ms"] is not None else float("inf"))


def plot(result: Dict[str, Any], path: str) -> Optional[str]:
    """Records/s, p99 window latency and executors over time: the tuned run
    and the best fixed one; the controller's decisions as vertical marks."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency
        from matplotlib.figure import Figure  # optional dependency
    except ImportError:
        log.warning("matplotlib is not installed: no plot")
        return None
    runs = [("autotune (live scaling)", result["autotune"], "C0")]
    if result.get("autotune_restart"):
        runs.append(("autotune (checkpoint=, rescale by restart)", result["autotune_restart"],
                     "C2"))
    runs += [(
        f"best fixed ({result['best_fixed']['executors']} executors, "
        f"{result['best_fixed']['epoch_ms']} ms epochs)", result["best_fixed"], "C1")]
    fig = Figure(figsize=(10, 7.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax1, ax2, ax3 = fig.subplots(3, 1, sharex=True)
    for label, r, c in runs:
        tl = r["timeline"]
        t = [p["t"] for p in tl]
        ax1.plot(t, [(p["records_per_s"] or 0) / 1e6 for p in tl], color=c, label=label)
        ax2.plot(t, [p["latency_p99_ms"] if p["latency_p99_ms"] is not None else np.nan
                     for p in tl], color=c, label=label)
        ax3.step(t, [p["executors"] for p in tl], where="post", color=c, label=label)
    base = result["autotune"]
    for d in base["decisions"]:
        x = d["time"] - base["t0_wall"]
        for ax in (ax1, ax2, ax3):
            ax.axvline(x, color="C3", linestyle=":", alpha=0.7)
        ax3.annotate(f"{d['action']} {list(d['args'].values())[0]:g}", (x, 0.6), fontsize=7,
                     rotation=90, color="C3")
    top = max(max((p["executors"] for p in r["timeline"]), default=1) for _, r, _ in runs)
    ax3.set_ylim(0.5, top + 0.5)
    ax3.set_yticks(range(1, top + 1))
    ax2.axhline(result["target_ms"], color="k", linestyle="--", alpha=0.6, label="target")
    ax2.set_yscale("log")
    ax1.set_ylabel("M records/s")
    ax2.set_ylabel("window p99 (ms)")
    ax3.set_ylabel("executors")
    ax3.set_xlabel(f"seconds (rate steps at {', '.join(str(s) for s in base['phase_starts'][1:])}; "
                   f"dotted: the controller's decisions)")
    ax1.set_title(f"slash run --realtime --latency-target {result['target']}: rate steps "
                  f"{result['low'] / 1e3:.0f} k <-> {result['high'] / 1e6:.1f} M rec/s")
    for ax in (ax1, ax2, ax3):
        ax.grid(True, alpha=0.3)
    ax2.legend(fontsize="small")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="250ms", help="latency target (default 250ms)")
    p.add_argument("--low", type=int, default=100_000, help="low rate, records/s (default 100 k)")
    p.add_argument("--high", type=int, default=4_000_000,
                   help="high rate, records/s (default 4 M: more than one executor follows on "
                        "2 shared cores)")
    p.add_argument("--seconds", default="5,6,15,6,15",
                   help="phase lengths low,high,low,high,low in seconds (default 5,6,15,6,15)")
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys (default 100 k)")
    p.add_argument("--window", default="tumbling:1s", help="window (default tumbling:1s)")
    p.add_argument("--sweep-executors", default="1,2", help="fixed executor counts (default 1,2)")
    p.add_argument("--sweep-epoch-ms", default="50,200", help="fixed epoch lengths (default 50,200)")
    p.add_argument("--max-executors", type=int, default=2,
                   help="the tuned run's max_executors (default 2)")
    p.add_argument("--checkpoint-every", default="5s",
                   help="checkpoint interval of the checkpointed runs (default 5s)")
    p.add_argument("--no-restart", action="store_true",
                   help="skip the tuned run with checkpoint= (rescale by restart)")
    p.add_argument("--lead", type=float, default=8.0,
                   help="seconds between writing the input and its first event time (default 8)")
    p.add_argument("--hog", action="store_true",
                   help="run every side beside a process spinning on one core (a shared machine)")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds of every side in turn; each side reported by its run of median "
                        "p99, every round's p99 beside it (default 1)")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--plot", default="bench/results/autotune.png", help="PNG ('' for none)")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    if isinstance(args.rounds, bool) or not isinstance(args.rounds, int) or args.rounds < 1:
        raise InvalidArgument(f"--rounds must be an int >= 1, got {args.rounds!r}")
    secs = [float(x) for x in args.seconds.split(",")]
    rates = [args.low, args.high] * len(secs)
    phases = list(zip(rates, secs))
    sweep = [(int(e), int(ms)) for e in args.sweep_executors.split(",")
             for ms in args.sweep_epoch_ms.split(",")]
    work = tempfile.mkdtemp(prefix="slash-bench-autotune-", dir=args.dir)
    out: Dict[str, Any] = {"benchmark": NAME, "transport": "shm", "cores": os.cpu_count(),
                           "target": args.target, "target_ms": _ms(args.target), "low": args.low,
                           "high": args.high, "phases": phases, "keys": args.keys,
                           "window": args.window, "hog": bool(args.hog),
                           "load_average_before": [round(x, 2) for x in os.getloadavg()]}
    # a one-core CPU hog for the whole sweep: every side runs beside it alike
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    rounds = args.rounds
    runs: Dict[str, List[Dict[str, Any]]] = {}  # each side's runs, one a round
    sides: List[Tuple[str, str, Dict[str, Any]]] = [
        (f"fixed {e} x {ms}", f"fixed {e} executors, {ms} ms epochs",
         dict(executors=e, epoch_ms=ms, target=None)) for e, ms in sweep]
    tuned_from = dict(executors=min(e for e, _ in sweep), epoch_ms=max(ms for _, ms in sweep),
                      target=args.target)
    sides.append(("autotune", f"autotune to {args.target} (live)", tuned_from))
    if not args.no_restart:
        sides.append(("autotune_restart", f"autotune to {args.target} (checkpoint=, restart)",
                      dict(tuned_from, restart=True)))
    try:
        with Progress(NAME, rounds * len(sides)) as prog:
            for r in range(rounds):  # the sides take turns, round after round
                for key, what, kw in sides:
                    with prog.stage(what + (f", round {r + 1}" if rounds > 1 else "")):
                        runs.setdefault(key, []).append(_one(args, work, phases, **kw))
    finally:
        out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        if hog is not None:
            hog.kill()
            hog.wait()
        shutil.rmtree(work, ignore_errors=True)
    out["rounds"] = rounds
    fixed = [median_run(runs[key]) for key, _, kw in sides if kw["target"] is None]
    tuned = median_run(runs["autotune"])
    restart = median_run(runs["autotune_restart"]) if not args.no_restart else None
    out["fixed"] = fixed
    out["autotune"] = tuned
    out["autotune_restart"] = restart
    best = best_fixed(fixed, out["target_ms"])
    out["best_fixed"] = best
    thr_b, thr_a = best["high_phase_records_per_s"], tuned["high_phase_records_per_s"]
    out["autotune_vs_best_fixed"] = {
        "high_phase_throughput_ratio": round(thr_a / thr_b, 3) if thr_a and thr_b else None,
        "p99_ms": [tuned["p99_ms"], best["p99_ms"]],
        "p99_ms_rounds": [tuned["p99_ms_rounds"], best["p99_ms_rounds"]],
        "executors_in_use_mean": [tuned["executors_in_use_mean"], best["executors_in_use_mean"]],
        "executors_max": [tuned["executors_max"], best["executors_max"]]}
    if restart is not None:
        thr_r = restart["high_phase_records_per_s"]
        out["autotune_restart_vs_best_fixed"] = {
            "high_phase_throughput_ratio": round(thr_r / thr_b, 3) if thr_r and thr_b else None,
            "p99_ms": [restart["p99_ms"], best["p99_ms"]],
            "p99_ms_rounds": [restart["p99_ms_rounds"], best["p99_ms_rounds"]]}
    if args.plot:
        out["plot"] = plot(out, args.plot)
    return out


def summary(r: Dict[str, Any]) -> str:
    a, b = r["autotune"], r["best_fixed"]
    cmp_ = r["autotune_vs_best_fixed"]
    lines = [f"autotune: target {r['target']}, rate {r['low'] / 1e3:.0f} k <-> {r['high'] / 1e6:.1f} M "
             f"rec/s on {r['cores']} cores" + (" beside a one-core hog" if r.get("hog") else "")
             + (f"; load average {r['load_average_before'][0]} before, "
                f"{r['load_average_after'][0]} after" if "load_average_after" in r else "")]
    for f in r["fixed"] + [a] + ([r["autotune_restart"]] if r.get("autotune_restart") else []):
        name = (f"autotune ({f.get('path') or 'restart'})" if f["autotune"]
                else f"fixed {f['executors']} x {f['epoch_ms']} ms")
        rounds = f.get("p99_ms_rounds", [])
        lines.append(f"  {name:<18} p99 {f['p99_ms'] or float('nan'):8.0f} ms"
                     + (" (rounds: " + ", ".join(f"{x:.0f}" for x in rounds if x is not None) + ")"
                        if len(rounds) > 1 else "") + ", p50 "
                     f"{f['p50_ms'] or float('nan'):6.0f} ms, {100 * f['seconds_over_target']:5.1f}% "
                     f"of seconds over target, high phases "
                     f"{(f['high_phase_records_per_s'] or 0) / 1e6:.2f} M rec/s, executors mean "
                     f"{f['executors_in_use_mean']:.2f} max {f['executors_max']}, back under "
                     "the target after each step (s): "
                     + ", ".join("never" if x is None else f"{x:g}"
                                 for x in f.get("back_under_target_s", [])))
    lines.append(f"  best fixed: {b['executors']} x {b['epoch_ms']} ms; autotune/best throughput "
                 f"{cmp_['high_phase_throughput_ratio']}; decisions: "
                 + "; ".join(f"{d['action']} {d['args']} ({d['outcome']})" for d in a["decisions"]))
    return "\n".join(lines)
