"""``slash bench latency``: the latency floor of a stream.

A paced stream through :func:`slash.runner.run` (what ``slash run`` does)
on 2 executor processes: :class:`PacedSource` generates ``rate`` records/s
in total, ``tick_ms`` apart, each stamped with the wall clock of its
generation (event time = now), keys cycling over ``keys``; a count per key
per tumbling window. While a rank has nothing due, the source calls the
runner's ``wait`` (the executor keeps ending epochs and handing out windows)
instead of sleeping.

The per-window latency is the driver's: a window is emitted when the driver
learns that every executor has fired it, and its latency is that wall clock
minus the window's end (:meth:`slash.metrics.LiveMetrics.executor_windows`,
the same figure ``slash_window_latency_seconds`` reports). Two loads: one
record per key per window (1 k keys, 1 s windows: 1 k records/s) and
100 k records/s; over ``shm`` and ``ofi:tcp``. Each configuration reports
p50/p95/p99/max of the windows' latency, the epoch length (``epoch_ms``),
the source's tick, and the executors' CPU load.

``--idle`` also measures a stream with no input (the source only waits) for
``--idle-seconds``: the executors' CPU time over it (getrusage of each
executor process, as ``time.process_time`` reports it), which the idle path
must keep far below a core.

    slash bench latency --json bench/results/latency_floor.json
    slash bench latency --transports shm --loads high --seconds 10
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

import numpy as np
import pyarrow as pa

from slash import runner
from slash.errors import InvalidArgument
from slash.executor import GroupConfig
from slash.metrics import LiveMetrics
from slash.query import Query
from slash.sources import GeneratorSource, Watermark

log = logging.getLogger(__name__)

NAME = "latency"
HELP = ("the latency floor: per-window latency (emit - window end) of a paced stream at 1 record "
        "per key per window and at 100 k records/s, over shm and ofi:tcp; idle CPU")

SCHEMA = pa.schema([("k", pa.int64()), ("t", pa.int64()), ("v", pa.int64())])
#: how far ahead of the call a stream starts (executor processes start and connect meanwhile)
STARTUP_MS = 3000
#: the loads: (keys, records/s in total). low and sparse: one record per key
#: per (1 s) window; in sparse one executor leads no key at all
LOADS = {"low": (1000, 1000), "high": (1000, 100_000), "sparse": (1, 1)}


@dataclass(frozen=True)
class _Pace:
    """The parameters of a :class:`PacedSource` and its batches."""

    rate: int
    keys: int
    seconds: float
    tick_ms: int
    start: Optional[float] = None

    def __call__(self, rank: int, n: int) -> Iterator[Union[pa.RecordBatch, Watermark]]:
        return self.batches(rank, n, None)

    def batches(self, rank: int, n: int, wait: Optional[Callable[[float], bool]]
                ) -> Iterator[Union[pa.RecordBatch, Watermark]]:
        sleep = wait if wait is not None else (lambda s: bool(time.sleep(s)))
        tick = self.tick_ms / 1000.0
        start = self.start if self.start is not None else \
            (int(time.time() * 1000) // self.tick_ms + 1) * self.tick_ms / 1000.0
        end = start + self.seconds
        if time.time() < start:
            sleep(start - time.time())
        if self.rate == 0:
            sleep(max(0.0, end - time.time()))
            return
        sent = 0  # global records generated so far
        k = 0
        while True:
            due_at = start + k * tick
            if due_at > end:
                return
            left = due_at - time.time()
            if left > 0 and sleep(left):
                return
            now_ms = int(time.time() * 1000)
            due = int(round((due_at - start) * self.rate))
            i = np.arange(sent, due, dtype=np.int64)
            sent = due
            k += 1
            i = i[i % n == rank]
            if not len(i):  # nothing due for this rank: its time still passes
                yield Watermark(pa.scalar(now_ms, pa.int64()))
            else:
                yield pa.record_batch([pa.array(i % self.keys), pa.array(np.full(len(i), now_ms)),
                                       pa.array(np.ones(len(i), np.int64))], schema=SCHEMA)


class PacedSource(GeneratorSource):
    """An unbounded stream of ``rate`` records/s in total for ``seconds``:
    every ``tick_ms`` each rank generates the records due since its last
    tick (record i is due at start + i / rate; rank r takes i mod n == r),
    key ``i mod keys``, value 1, event time the wall clock (ms) at which the
    batch is made. Every rank starts at ``start`` (wall clock seconds;
    default: the next multiple of ``tick_ms`` when it starts reading), so
    the ranks tick together on one grid: with ``start`` on a window
    boundary the first records past a window's end are made at its end.
    ``rate=0``: no records at all (an idle stream), the ranks only wait.
    ``serve=False``: the source sleeps instead of calling the runner's
    ``wait`` (as a plain generator does; windows are then handed out only
    when the next batch comes).
    Its event times are the wall clock, so it cannot be replayed (no
    ``checkpoint=``)."""

    bounded = False

    def __init__(self, rate: int = 1000, keys: int = 1000, seconds: float = 10.0,
                 tick_ms: int = 10, start: Optional[float] = None, serve: bool = True) -> None:
        self.pace = _Pace(rate, keys, seconds, tick_ms, start)
        self.serve = serve
        super().__init__(self.pace, SCHEMA)

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,  # type: ignore[override]
             batch_rows: int = 65536, wait: Optional[Callable[[float], bool]] = None
             ) -> Iterator[Union[pa.RecordBatch, Watermark]]:
        """This rank's batches as they fall due, and a Watermark (the wall
        clock) at each tick that has no record for it; ``wait(seconds)``
        serves the executor in between (a plain sleep without it)."""
        for b in self.pace.batches(rank, n, wait if self.serve else None):
            yield b.select(columns) if columns and isinstance(b, pa.RecordBatch) else b


def measure(transport: str, load: str, seconds: float, epoch_ms: int, tick_ms: int,
            window_ms: int = 1000, executors: int = 2, serve: bool = True,
            rate: Optional[int] = None) -> Dict[str, Any]:
    """One configuration: its windows' latency percentiles, records in and
    out (checked: every record counted once), epoch length, CPU load.
    ``rate`` (records/s in total) replaces the load's own."""
    keys, load_rate = LOADS[load]
    rate = load_rate if rate is None else rate
    # every rank starts on the same window boundary, far enough ahead for the
    # executor processes to start and connect: no window is cut by a late start
    start = (int(time.time() * 1000 + STARTUP_MS) // window_ms + 1) * window_ms / 1000.0
    src = PacedSource(rate=rate, keys=keys, seconds=seconds, tick_ms=tick_ms, start=start, serve=serve)
    live = LiveMetrics(executors, kind="run")
    q = Query(time="t", window=f"tumbling:{window_ms}ms", key="k", aggregates=["count"])
    m: Dict[str, Any] = {}
    t0 = time.time()
    out = runner.run(q, src, executors=executors, group=GroupConfig(transport=transport, epoch_ms=epoch_ms),
              live=live, metrics=m)
    wall = time.time() - t0
    counted = int(np.asarray(out.column("count")).sum()) if out.num_rows else 0
    if counted != m["records_in"]:
        raise AssertionError(f"{transport}/{load}: {counted} records counted, {m['records_in']} pushed")
    lat = np.array([w[3] for w in live.windows], dtype=np.float64)
    snap = live.snapshot()
    cpu = {r: p.get("cpu_seconds") for r, p in snap["per_executor"].items()}
    res: Dict[str, Any] = {
        "transport": transport, "load": load, "keys": keys, "records_per_s": rate,
        "window_ms": window_ms, "epoch_ms": epoch_ms, "tick_ms": tick_ms, "seconds": seconds,
        "source_serves": serve,
        "executors": executors, "records_in": m["records_in"], "windows": int(len(lat)),
        "windows_flushed": live.windows_flushed,
        "cpu_load_per_executor": {r: round(c / wall, 3) for r, c in cpu.items() if c is not None}}
    if len(lat):
        p50, p95, p99 = np.percentile(lat, [50, 95, 99])
        res.update(p50_ms=round(float(p50), 2), p95_ms=round(float(p95), 2),
                   p99_ms=round(float(p99), 2), max_ms=round(float(lat.max()), 2))
    return res


def measure_idle(transport: str, seconds: float, epoch_ms: int, executors: int = 2) -> Dict[str, Any]:
    """A stream with no input for ``seconds``: each executor's CPU time over
    it, as a fraction of one core."""
    live = _FirstAndLast(executors, kind="run")
    live.report_interval = 0.25
    q = Query(time="t", window="tumbling:1s", key="k", aggregates=["count"])
    runner.run(q, PacedSource(rate=0, seconds=seconds), executors=executors,
        group=GroupConfig(transport=transport, epoch_ms=epoch_ms), live=live)
    cpu, span = [], []
    for r in sorted(live.first):
        (t0, c0), (t1, c1) = live.first[r], live.last[r]
        cpu.append(c1 - c0)
        span.append(t1 - t0)
    return {"transport": transport, "idle_seconds": seconds,
            "measured_seconds": [round(s, 2) for s in span],
            "cpu_seconds_per_executor": [round(c, 4) for c in cpu],
            "cpu_load_per_executor": [round(c / s, 4) if s > 0 else None for c, s in zip(cpu, span)]}


class _FirstAndLast(LiveMetrics):
    """Live metrics that also keep each executor's first and last (time,
    CPU seconds): the CPU an idle stream used between them, without the
    process's start and end."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.first: Dict[int, Any] = {}
        self.last: Dict[int, Any] = {}

    def update_executor(self, rank: int, snap: Dict[str, Any]) -> None:
        super().update_executor(rank, snap)
        if snap.get("finished"):
            return
        self.first.setdefault(rank, (snap["time"], snap["cpu_seconds"]))
        self.last[rank] = (snap["time"], snap["cpu_seconds"])


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transports", default="shm,ofi:tcp", help="comma-separated (default shm,ofi:tcp)")
    p.add_argument("--loads", default="low,high,sparse",
                   help="low: 1 record per key per window (1 k keys, 1 k records/s); high: 100 k "
                        "records/s; sparse: 1 key, 1 record/s (one executor leads nothing)")
    p.add_argument("--seconds", type=float, default=20.0, help="length of each stream (default 20)")
    p.add_argument("--epoch-ms", type=int, default=200, help="the group's epoch_ms (default 200)")
    p.add_argument("--tick-ms", type=int, default=10, help="the source's batch interval (default 10)")
    p.add_argument("--window-ms", type=int, default=1000, help="tumbling window size (default 1000)")
    p.add_argument("--idle-seconds", type=float, default=5.0,
                   help="length of the no-input stream whose CPU time is measured (0: skip)")
    p.add_argument("--label", default="", help="a label stored with the runs (e.g. before/after)")
    p.add_argument("--no-serve", action="store_true",
                   help="the source sleeps between ticks instead of serving the executor")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    runs: List[Dict[str, Any]] = []
    for tr in [t for t in args.transports.split(",") if t]:
        for load in [x for x in args.loads.split(",") if x]:
            if load not in LOADS:
                raise InvalidArgument(f"--loads: unknown load {load!r} ({', '.join(LOADS)})")
            r = measure(tr, load, args.seconds, args.epoch_ms, args.tick_ms, args.window_ms,
                        serve=not args.no_serve)
            r["label"] = args.label
            log.info("%s", summary(r))
            runs.append(r)
    idle: List[Dict[str, Any]] = []
    if args.idle_seconds > 0:
        for tr in [t for t in args.transports.split(",") if t]:
            idle.append(measure_idle(tr, args.idle_seconds, args.epoch_ms))
    return {"runs": runs, "idle": idle, "label": args.label}


def summary(r: Dict[str, Any]) -> str:
    if "p99_ms" not in r:
        return f"latency {r['transport']} {r['load']}: no window emitted"
    return (f"latency {r['transport']} {r['load']} ({r['records_per_s']:,} rec/s, {r['keys']} keys, "
            f"{r['window_ms']} ms windows, epoch {r['epoch_ms']} ms, tick {r['tick_ms']} ms): "
            f"{r['windows']} windows, p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms, "
            f"p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms")
