"""``slash bench elastic``: what a live leadership move pauses.

Two executors over shm, as threads of this process (as in the tests), a
window aggregation with ``P`` key partitions whose keys spread evenly, so
each partition holds about 1/P of the state (``--moved-mb`` each, default
~100 MB). The state is built in one long window (``tumbling:1h``) that
stays open for the whole measurement. Then a probe loop runs: each step
both executors push a small batch and end an epoch (an epoch per step).
At step ``--move-at`` rank 0 moves partition 0 (which it leads) to rank 1.

Reported:

* ``move_pause_ms``: the moved partition's pause, the new leader's
  ``move_pause_ns`` (from holding the partition to merging its hand-over);
  target < 100 ms for ~100 MB over shm;
* ``moved_bytes`` against the total state (P partitions of the same size:
  ``moved_fraction`` ~ 1/P; only the moved partition's bytes travel);
* ``unmoved_pause_ms``: what everything else sees: the longest probe step
  (push + epoch end on both executors) while the hand-over is in flight,
  less the median step before the move; against ``epoch_ms`` (the median
  step, i.e. one epoch of this probe) and ``default_epoch_ms`` (a group's
  default epoch, 200 ms). Target: under one epoch.

And a stream whose input rate doubles mid-run (``--low`` then twice it),
replayed at its own pace (event times are wall-clock times, as in ``slash
bench autotune``) through :func:`slash.runner` with checkpoints, measured
live each 0.5 s (records/s, p99 window latency = emit time - window end):
once with the executor count fixed at 1, once with a scale-out to 2 when
the rate doubles. The scale-out is ``CheckpointedRun.rescale(2)``: a
**checkpoint-restart** of the whole group (a cut, a stop, a new group of 2
restored from the checkpoint; records read after the cut are read again),
not a live move; its request-to-resume time is reported.

    slash bench elastic --json bench/results/elastic.json --plot bench/results/elastic.png
"""
from __future__ import annotations

import argparse
import logging
import os
import secrets
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import slash
from slash.control.autotune import AutoTuner
from slash.bench._progress import Progress
from slash.bench.autotune import write_steps
from slash.control import request, wait_for_socket
from slash.executor import GroupConfig
from slash.metrics import LiveMetrics
from slash.query import Query
from slash.run.recovery.checkpointed import CheckpointedRun
from slash.run.run_plan import RunPlan
from slash.runner import run as run_query, run_checkpointed_group
from slash.sources import as_source

log = logging.getLogger(__name__)

NAME = "elastic"
HELP = ("the pause of a live leadership move: a ~100 MB partition handed over over shm, "
        "and what the partitions that do not move see meanwhile")

#: a guess of the store's bytes per key of the bulk (count + sum over int64
#: keys), used only to size it; the bytes moved are measured (~56 B a key on
#: this build, so ``--moved-mb 100`` moves ~117 MB)
BYTES_PER_KEY_GUESS = 48


def _group(partitions: int, lateness_ms: int) -> List[Any]:
    token = secrets.token_hex(8)
    listeners = [slash.Executor.listen("shm", token=token) for _ in range(2)]
    addrs = [lst.address for lst in listeners]
    state = slash.StateConfig(window="tumbling:1h", aggregates=["count", "sum:v"],
                              value_types={"v": "int64"})
    gc = slash.GroupConfig(transport="shm", partitions=partitions, lateness=lateness_ms,
                           epoch_bytes=1 << 40, epoch_ms=1 << 30, timeout=300)
    out: List[Any] = [None, None]
    errs: List[BaseException] = []

    def join(r: int) -> None:
        try:
            out[r] = slash.Executor(listeners[r], r, addrs, state, gc, token=token)
        except BaseException as e:  # re-raised below
            errs.append(e)

    ts = [threading.Thread(target=join, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for lst in listeners:
        lst.close()
    if errs:
        raise errs[0]
    return out


def _batch(keys: np.ndarray, t: int) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.int64()),
                     "time": pa.array(np.full(len(keys), t, np.int64)),
                     "v": pa.array(keys, pa.int64())})


def measure(partitions: int, moved_mb: float, steps: int, move_at: int,
            probe_keys: int = 2000) -> Dict[str, Any]:
    """One run: build the state, probe, move partition 0 at step move_at."""
    exs = _group(partitions, lateness_ms=3_600_000)
    keys_total = int(moved_mb * 1e6 / BYTES_PER_KEY_GUESS) * partitions
    try:
        built = time.perf_counter()
        chunk = 1 << 20
        for lo in range(0, keys_total, chunk):  # half the keys each, so both fold state
            ks = np.arange(lo, min(lo + chunk, keys_total), dtype=np.int64)
            exs[(lo // chunk) % 2].push_batch(_batch(ks, 1000))
        for ex in exs:
            ex.end_epoch()
        build_s = time.perf_counter() - built
        rng = np.random.default_rng(3)
        step_s: List[float] = []
        moved_step: Optional[int] = None
        for i in range(steps):
            if i == move_at:
                exs[0].move_partitions({0: 1})
            t0 = time.perf_counter()
            for r, ex in enumerate(exs):
                ex.push_batch(_batch(rng.integers(0, keys_total, probe_keys), 2000 + i))
                ex.end_epoch()
            for ex in exs:
                ex.poll(0)
            step_s.append(time.perf_counter() - t0)
            if i >= move_at and moved_step is None and exs[1].metrics["moves"] == 1:
                moved_step = i
        deadline = time.monotonic() + 300
        while exs[1].metrics["moves"] < 1 and time.monotonic() < deadline:
            for ex in exs:
                ex.poll(0.01)
        m0, m1 = exs[0].metrics, exs[1].metrics
    finally:
        for ex in exs:
            ex.close()
    if m1["moves"] != 1:
        raise RuntimeError("the hand-over did not complete within 300 s")
    base = statistics.median(step_s[:move_at])
    during = step_s[move_at:(moved_step if moved_step is not None else steps) + 1]
    moved = int(m1["moved_bytes"])
    return {"partitions": partitions, "keys": keys_total, "build_seconds": round(build_s, 2),
            "moved_bytes": moved, "moved_bytes_out": int(m0["moved_bytes_out"]),
            "total_state_bytes_estimate": moved * partitions,
            "moved_fraction": round(1 / partitions, 4),
            "move_pause_ms": round(m1["move_pause_ns"] / 1e6, 2),
            "epoch_ms": round(base * 1e3, 2),
            "default_epoch_ms": GroupConfig().epoch_ms,
            "unmoved_pause_ms": round(max(0.0, max(during) - base) * 1e3, 2),
            "unmoved_pause_epochs": round(max(0.0, max(during) - base) / base, 2) if base else None,
            "steps_until_handed_over": (moved_step - move_at + 1) if moved_step is not None else None,
            "step_ms": [round(s * 1e3, 3) for s in step_s], "move_at": move_at}


def rate_doubling(low: int, seconds: Tuple[float, float], scale_out: bool, keys: int,
                  lead_s: float) -> Dict[str, Any]:
    """One replay of `low` then `2 * low` rec/s (checkpointed group of 1,
    rescaled to 2 when the rate doubles if `scale_out`); the timeline."""
    work = tempfile.mkdtemp(prefix="slash-bench-elastic-")
    phases = [(low, seconds[0]), (2 * low, seconds[1])]
    try:
        path = os.path.join(work, "steps.arrow")
        t0, starts = write_steps(path, phases, keys, lead_s)
        q = Query(time="t", window="tumbling:1s", key="k", aggregates=["count", "sum:v"])
        live = LiveMetrics(1, kind="run")
        ctl = CheckpointedRun()

        def on_metrics(rank: int, snap: Dict[str, Any]) -> None:
            for end, emit, rows in snap.pop("windows", None) or ():
                live.observe_window(0, end, emit - end, rows)
            live.update_executor(rank, snap)

        ctl.on_metrics = on_metrics
        done: Dict[str, Any] = {}

        def scaler() -> None:
            while time.time() < starts[1]:
                time.sleep(0.02)
            try:
                done["rescale"] = ctl.rescale(2, timeout=60)
                done["at"] = round(time.time() - t0, 2)
            except Exception as e:  # reported in the result, the run goes on
                done["error"] = repr(e)

        th = threading.Thread(target=scaler, daemon=True)
        if scale_out:
            th.start()
        sampler = AutoTuner(None, None, live, tick=live.report_interval, executors=1).start()
        m: Dict[str, Any] = {}
        try:
            plan = RunPlan(q, _source(path), executors=1, group=GroupConfig(epoch_ms=100),
                           timeout=300.0, metrics=m, checkpoint=os.path.join(work, "ck"),
                           checkpoint_every="2s")
            res = run_checkpointed_group(plan, control=ctl, live_every=live.report_interval,
                                         realtime=True)
        finally:
            sampler.stop()
        if scale_out:
            th.join(5)
        # a restarted group counts its records from 0 again: the sample that
        # spans the restart has no rate (None), not a negative one
        tl = [{"t": round(p["t"] - t0, 2),
               "records_per_s": p["records_per_s"] if (p["records_per_s"] or 0) >= 0 else None,
               "latency_p99_ms": p["latency_p99_ms"]} for p in sampler.timeline]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    high = [p["records_per_s"] or 0 for p in tl if p["records_per_s"] is not None and starts[1] - t0 + 1 <= p["t"] <= starts[1] - t0 + seconds[1]]
    lat_high = [p["latency_p99_ms"] for p in tl if p["latency_p99_ms"] is not None and
                p["t"] >= starts[1] - t0]
    return {"scale_out": scale_out, "low": low, "high": 2 * low, "seconds": list(seconds),
            "result_rows": res.num_rows, "doubles_at": round(starts[1] - t0, 2),
            "rescale": done.get("rescale"), "rescaled_at": done.get("at"),
            "rescale_error": done.get("error"), "rescales": m.get("rescales", []),
            "high_phase_records_per_s": round(float(np.mean(high)), 1) if high else None,
            "high_phase_p99_ms_max": max(lat_high) if lat_high else None,
            "high_phase_p99_ms_median": statistics.median(lat_high) if lat_high else None,
            "timeline": tl}


class _OutputProbe:
    """A ``live=`` stand-in for :func:`slash.runner.run`: executors report
    every ``report_interval`` s; it keeps (time, rank, rows_emitted)."""

    def __init__(self, every: float) -> None:
        self.report_interval = every
        self.events: List[Tuple[float, int, int]] = []

    def update_executor(self, rank: int, snap: Dict[str, Any]) -> None:
        self.events.append((time.monotonic(), rank, int(snap.get("rows_emitted") or 0)))

    def executor_windows(self, *args: Any) -> None:  # a stream's windows: not a file replay's
        pass

    def outputs(self) -> List[float]:
        """When some executor's emitted rows grew (as reported)."""
        last: Dict[int, int] = {}
        out = []
        for t, r, rows in self.events:
            if rows > last.get(r, 0):
                out.append(t)
            last[r] = rows
        return out


def live_scale_pause(rows: int, rate: float, files: int = 4, every: float = 0.02,
                     ops: Tuple[str, ...] = ("scale-out", "scale-in")) -> Dict[str, Any]:
    """Live scale-out then scale-in (1 -> 2 -> 1 of a group provisioned with
    2) of a file replay at ``rate`` rec/s: per operation the input pause
    (prepare to commit, driver-side), request -> the operation's answer,
    request -> the next output (an executor's emitted rows grew; reports
    every ``every`` s), and the longest gap between outputs from 1 s
    before to 2 s after the request against the median gap."""
    work = tempfile.mkdtemp(prefix="slash-bench-live-")
    try:
        rng = np.random.default_rng(3)
        span = int(rows / rate * 1000) * 20  # ~20 windows of 1 s of event time per s of replay
        for f in range(files):
            n = rows // files
            t = np.sort(rng.integers(0, span, n)).astype(np.int64)
            pq.write_table(pa.table({"t": t, "k": rng.integers(0, 1000, n),
                                     "v": rng.random(n)}),
                           os.path.join(work, f"part-{f}.parquet"), row_group_size=5_000)
        sock = os.path.join(work, "c.sock")
        probe = _OutputProbe(every)
        asked: List[Tuple[str, float, float, Dict[str, Any]]] = []

        def driver() -> None:
            wait_for_socket(sock, 60)
            for i, op in enumerate(ops):
                while not probe.events or time.monotonic() - probe.events[0][0] < 1.0 + i:
                    time.sleep(0.01)
                t0 = time.monotonic()
                got = request(sock, op, {"k": 1})
                asked.append((op, t0, time.monotonic(), got))

        th = threading.Thread(target=driver, daemon=True)
        th.start()
        q = Query(time="t", window="tumbling:1s", key="k", aggregates=["count", "sum:v"])
        m: Dict[str, Any] = {}
        t_run = time.monotonic()
        run_query(q, work, executors=1, max_executors=2, control=sock, rate=rate, live=probe,
                  metrics=m, timeout=300)
        seconds = time.monotonic() - t_run
        th.join(5)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    outs = probe.outputs()
    gaps = [b - a for a, b in zip(outs, outs[1:])]
    per = []
    for op, t0, t1, got in asked:
        nxt = next((t for t in outs if t >= t0), None)
        near = [b - a for a, b in zip(outs, outs[1:]) if t0 - 1.0 <= a <= t0 + 2.0]
        per.append({"op": op, "input_paused_ms": got.get("paused_ms"),
                    "answered_ms": round((t1 - t0) * 1e3, 1),
                    "request_to_next_output_ms": round((nxt - t0) * 1e3, 1) if nxt else None,
                    "max_output_gap_ms": round(max(near) * 1e3, 1) if near else None})
    return {"rows": rows, "rate": rate, "report_every_ms": every * 1e3,
            "seconds": round(seconds, 2), "late_records": m.get("late_records"),
            "median_output_gap_ms": round(statistics.median(gaps) * 1e3, 1) if gaps else None,
            "operations": per}


def _source(path: str) -> Any:
    """The recording as a runner source."""
    return as_source(path)


def plot(r: Dict[str, Any], path: str) -> Optional[str]:
    """Rate doubling: records/s and p99 window latency over time, fixed vs
    scale-out; moves: probe step times (one epoch each) around the move."""
    try:
        import matplotlib  # optional dependency
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # optional dependency
    except ImportError:
        log.warning("matplotlib is not installed: no plot")
        return None
    fig, axs = plt.subplots(3, 1, figsize=(8, 10))
    for d in r.get("rate_doubling", []):
        lab = "scale-out 1 -> 2 (checkpoint-restart)" if d["scale_out"] else "fixed 1 executor"
        tl = d["timeline"]
        axs[0].plot([p["t"] for p in tl if p["records_per_s"] is not None],
                    [p["records_per_s"] / 1e3 for p in tl if p["records_per_s"] is not None], label=lab)
        axs[1].plot([p["t"] for p in tl if p["latency_p99_ms"] is not None],
                    [p["latency_p99_ms"] for p in tl if p["latency_p99_ms"] is not None], label=lab)
        for ax in axs[:2]:
            ax.axvline(d["doubles_at"], color="grey", linestyle=":")
            if d.get("rescaled_at"):
                ax.axvline(d["rescaled_at"], color="red", linestyle="--", linewidth=0.8)
    axs[0].set_ylabel("k records/s")
    axs[0].set_title("input rate doubles (dotted); rescale done (dashed)")
    axs[1].set_ylabel("p99 window latency, ms")
    axs[1].set_xlabel("s since the stream's start")
    axs[1].set_yscale("log")
    for run in r["runs"]:
        axs[2].plot(range(len(run["step_ms"])), run["step_ms"], marker=".",
                    label=f"{run['moved_bytes'] / 1e6:.0f} MB moved (pause {run['move_pause_ms']:.0f} ms)")
        axs[2].axvline(run["move_at"], color="grey", linestyle=":")
    axs[2].set_yscale("log")
    axs[2].set_xlabel("probe step (one epoch on each executor)")
    axs[2].set_ylabel("step time, ms")
    axs[2].set_title("a live move: step times of everything else (dotted: the move)")
    for ax in axs:
        ax.legend(fontsize=8)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--moved-mb", default="10,100",
                   help="state per partition, MB, comma-separated (default 10,100)")
    p.add_argument("--partitions", type=int, default=4, help="key partitions (default 4)")
    p.add_argument("--steps", type=int, default=40, help="probe steps (default 40)")
    p.add_argument("--move-at", type=int, default=20, help="the step of the move (default 20)")
    p.add_argument("--low", type=int, default=1_000_000,
                   help="rate doubling: the first rate, records/s (default 1 M)")
    p.add_argument("--seconds", default="6,10", help="rate doubling: seconds at low, at 2x (default 6,10)")
    p.add_argument("--keys", type=int, default=100_000, help="rate doubling: distinct keys (default 100 k)")
    p.add_argument("--lead", type=float, default=8.0,
                   help="rate doubling: seconds to write the recording before it starts (default 8)")
    p.add_argument("--no-rate-doubling", action="store_true", help="only the move pauses")
    p.add_argument("--no-live-scale", action="store_true",
                   help="skip the live scale-out/in of a provisioned group (--max-executors)")
    p.add_argument("--plot", default="bench/results/elastic.png", help="PNG ('' for none)")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    sizes = [float(x) for x in args.moved_mb.split(",")]
    out: Dict[str, Any] = {"benchmark": NAME, "transport": "shm", "cores": os.cpu_count(),
                           "executors": 2, "runs": []}
    secs = tuple(float(x) for x in args.seconds.split(","))
    with Progress(NAME, len(sizes) + (0 if args.no_rate_doubling else 2)
                  + (0 if args.no_live_scale else 1)) as prog:
        if not args.no_live_scale:
            with prog.stage("live scale-out/in of a provisioned group"):
                out["live_scale"] = live_scale_pause(400_000, 100_000)
        if not args.no_rate_doubling:
            out["rate_doubling"] = []
            for so in (False, True):
                with prog.stage("rate doubles, " + ("scale-out to 2" if so else "fixed 1 executor")):
                    out["rate_doubling"].append(rate_doubling(args.low, secs, so, args.keys, args.lead))
        for mb in sizes:
            with prog.stage(f"move a ~{mb:.0f} MB partition"):
                out["runs"].append(measure(args.partitions, mb, args.steps, args.move_at))
    if args.plot:
        out["plot"] = plot(out, args.plot)
    return out


def summary(x: Dict[str, Any]) -> str:
    """One run (one moved size)."""
    return (f"elastic: moved {x['moved_bytes'] / 1e6:.1f} MB of ~{x['total_state_bytes_estimate'] / 1e6:.0f} MB "
            f"({x['partitions']} partitions, 2 executors, shm): moved partition paused "
            f"{x['move_pause_ms']:.1f} ms; the others {x['unmoved_pause_ms']:.1f} ms extra "
            f"(epoch {x['epoch_ms']:.1f} ms)")
