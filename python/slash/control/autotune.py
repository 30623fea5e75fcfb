"""A ``slash run`` that tunes itself to a latency target: the driver side of
:mod:`slash.control.controller` (:func:`run_autotuned` is :func:`slash.runner.run`
with ``latency_target=``; what it does, its two paths and what it measured
are docs/metrics.md's "A latency target: the stream tunes itself").

Two paths, chosen at the start: **live** (:func:`_run_live_tuned`: a
provisioned group, scales through :class:`slash.run.live.scale.LiveScaler`) and
**restart** (``checkpoint=`` given, or a source that cannot be re-dealt
live: :func:`slash.run.recovery.checkpointed.run_checkpointed`, scales by
:meth:`slash.run.recovery.checkpointed.CheckpointedRun.rescale`). A driver thread
(:class:`AutoTuner`) feeds a :class:`slash.metrics.LiveMetrics` snapshot to
the :class:`slash.control.controller.Controller` every tick and applies its
decisions (epoch, scale out/in, rebalance) through an
:class:`slash.control.controller.Actuator`; the autotuner uses only the scaler and
epoch interfaces. Each decision is logged with its reason (logger
``slash.control.controller``), kept in ``metrics["autotune"]["decisions"]``, shown
in ``slash ctl status`` and marked on the live page.

Both paths are exactly-once: the output equals the untuned run's.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import pyarrow as pa

from slash.control import ControlServer, RunControl
from slash.control.controller import Actuator, Controller, ControllerConfig, Decision
from slash.errors import InvalidArgument, SlashError
from slash.metrics import LiveMetrics
from slash.query import Query
from slash.run.recovery.checkpointed import CheckpointedRun as Rescaler
from slash.run import compat
from slash.run.protocol import Epoch
from slash.run.run_plan import RunPlan
from slash.sources import global_units, watermarks_from_source

log = logging.getLogger(__name__)


class GroupDrivers(NamedTuple):
    """The group drivers a tuned run goes through, handed in by
    :func:`slash.runner.run` (the runner dispatches to the autotuner, so the
    autotuner does not import the runner): ``run_group`` runs a (live)
    process group, ``run_checkpointed`` a checkpointed one, ``control_for``
    makes the control socket of a group."""

    run_group: Callable[..., pa.Table]
    run_checkpointed: Callable[..., pa.Table]
    control_for: Callable[..., Tuple[Any, Any]]


class AutoTuner:
    """The driver thread: every ``tick`` s one snapshot of ``live`` to the
    controller; a decision is applied at once through ``actuator`` (a
    rescale blocks this thread until the new group runs; the controller's
    cool-down starts at the decision). ``timeline`` keeps one point per tick
    (time, executors, epoch_ms, records/s, latest window p99) for plots."""

    def __init__(self, controller: Optional[Controller], actuator: Optional[Actuator], live: Any,
                 tick: float = 0.5, executors: int = 0) -> None:
        self.controller = controller
        self.actuator = actuator
        self.live = live
        self.tick = tick
        self.executors = executors  # without a controller: the fixed count, for the timeline
        self.decisions: List[Dict[str, Any]] = []
        self.timeline: List[Dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="slash-autotune", daemon=True)

    def start(self) -> "AutoTuner":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(150.0)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick):
            try:
                self.step()
            except Exception:  # the run goes on untuned rather than failing
                log.exception("autotune: a controller tick failed")

    def step(self) -> Optional[Decision]:
        """One tick (the thread's body; tests call it directly)."""
        snap = self.live.snapshot()
        c = self.controller
        d = c.observe(snap) if c is not None else None
        hist = snap.get("history") or []
        with self._lock:
            self.timeline.append({
                "t": snap["time"], "executors": c.executors if c is not None else self.executors,
                "epoch_ms": c.epoch_ms if c is not None else None,
                "late_streak": c.late_streak if c is not None else None,
                "overload": c.overload if c is not None else None,
                "release_streak": c.release_streak if c is not None else None,
                "lag_ms": c.lag_ms if c is not None else None,
                "backlog_growing": c.backlog_growing if c is not None else None,
                "records_per_s": (snap.get("totals") or {}).get("records_per_s"),
                "latency_p99_ms": hist[-1].get("latency_p99_ms") if hist else None,
                "cpu_load": [p.get("cpu_load") for p in (snap.get("per_executor") or {}).values()]})
        if d is None or c is None or self.actuator is None:
            return None
        entry = d.as_dict()
        self.live.event(f"controller: {d.action} {d.args} ({d.bottleneck}: {d.reason})")
        t0 = time.monotonic()
        try:
            ok = self.actuator.apply(d)
            entry["outcome"] = "applied" if ok else "not offered by this run"
        except SlashError as e:
            ok = False
            entry["outcome"] = f"failed: {type(e).__name__}: {e}"
            log.warning("controller: %s %s could not be applied: %s", d.action, d.args, e)
        entry["apply_seconds"] = round(time.monotonic() - t0, 3)
        self.controller.applied(d, ok)
        if ok:
            log.info("controller: %s %s applied in %.2f s", d.action, d.args, entry["apply_seconds"])
        with self._lock:
            self.decisions.append(entry)
        return d

    def status(self) -> Dict[str, Any]:
        c = self.controller
        if c is None:
            return {"latency_target_ms": None, "executors": self.executors, "decisions": []}
        with self._lock:
            return {"latency_target_ms": c.config.target_ms, "executors": c.executors,
                    "min_executors": c.config.min_executors,
                    "max_executors": c.config.max_executors, "epoch_ms": c.epoch_ms,
                    "capacity_records_per_s": c.capacity,
                    "capacity_samples": c.capacity_samples,
                    "decisions": [dict(d) for d in self.decisions]}


def provide_by_hand(ctl: Any, tuner: AutoTuner, size: Callable[[], int],
                    scale: Callable[[int], None], epoch: Callable[[float], None],
                    **answer: Any) -> None:
    """Registers with ``ctl`` (:class:`slash.control.RunControl`) what
    ``slash ctl`` may ask of a run the latency controller steers: its
    decisions (``status``), and scale-out/scale-in/epoch by hand: applied
    with ``scale(to)`` / ``epoch(ms)``, then told to the controller, whose
    next decisions start from them. ``answer``: more of a scale's answer."""
    controller = tuner.controller
    ctl.provide("controller-status", tuner.status)

    def resize(to: int) -> Dict[str, Any]:
        scale(to)
        controller.executors = to
        return {"executors": to, **answer}

    def set_epoch(ms: int) -> Dict[str, Any]:
        epoch(ms)
        controller.epoch_ms = float(ms)
        return {"epoch_ms": ms}

    ctl.provide_resize(size, resize)
    ctl.provide("epoch", set_epoch)


def rebalance_op(rescaler: Any, live: Any) -> Any:
    """The Actuator's ``rebalance(from_rank, to_rank)``: half the partitions
    the hot leader leads move to the idle one, live, through rank 0
    (:meth:`slash.run.recovery.checkpointed.CheckpointedRun.rebalance`); marked on the live page."""
    def rebalance(from_rank: int, to_rank: int) -> None:
        got = rescaler.rebalance(from_rank=from_rank, to_rank=to_rank)
        live.event(f"rebalance: {len(got['moves'])} partition(s) of rank {from_rank} to rank "
                   f"{to_rank} (leader map version {got['map_version']})")
    return rebalance


def serve_checkpointed(control: Any, query: Any, src: Any, n: int, rescaler: Any,
                       live: Any = None) -> Any:
    """(control, server): the control socket of a checkpointed ``slash run``
    without a latency target (``control=True`` or a socket path): status
    from the executors' live reports, ``rebalance`` (live moves of partition
    leadership through rank 0), ``scale-out``/``scale-in`` (a rescale from a
    checkpoint cut) and ``epoch``, all through ``rescaler``
    (:class:`slash.run.recovery.checkpointed.CheckpointedRun`). With ``live`` (LiveMetrics) the
    reports feed its page too, and recoveries are marks on it."""
    if not (control is True or isinstance(control, (str, os.PathLike))):
        raise InvalidArgument("with checkpoint=, control must be True, a socket path or a "
                              "slash.run.recovery.checkpointed.CheckpointedRun")
    sides = src if isinstance(src, tuple) else (src,)  # a join's: (left, right)
    ctl = RunControl(query, sides[0].schema, n,
                     bounded=all(watermarks_from_source(s) for s in sides),
                     features=("checkpoint",))

    def scale(to: int) -> Dict[str, Any]:
        got = rescaler.rescale(to)
        ctl.regroup(got["to"], "the group restarted with another executor count")
        return {"executors": got["to"]}

    def epoch(ms: int) -> Dict[str, Any]:
        rescaler.set_epoch(epoch_ms=ms)
        return {"epoch_ms": ms}

    if live is not None:  # the group's driver hands ctl the same reports (serve_rounds)
        rescaler.on_metrics, rescaler.on_event = live.feed, live.event
    ctl.provide_resize(lambda: rescaler.executors or n, scale)
    ctl.provide("epoch", epoch)
    ctl.provide("rebalance", lambda a: rescaler.rebalance(**a))
    server = ControlServer(ctl, None if control is True else os.fspath(control))
    return ctl, server


def run_autotuned(p: RunPlan, drivers: GroupDrivers) -> pa.Table:
    """:func:`slash.runner.run` with ``latency_target`` or ``realtime``: see
    the module doc. ``drivers``: the runner's group drivers the tuned run
    goes through."""
    if p.is_join:  # runner.run refuses it first (slash.run.compat)
        compat.check("run", "join", ["latency_target"])
    if not p.realtime:
        raise InvalidArgument(
            "latency_target= measures window latency as emit time minus window end, which needs "
            "event times that are wall-clock times: pass realtime=True (--realtime) for a live "
            "stream or a recording replayed at its own pace")
    if p.latency_target is None:  # realtime=True alone: measured the same way, never tuned
        return _run_measured(p, drivers)
    n = p.n
    config = _controller_config(p)
    controller = Controller(config, executors=n, epoch_ms=p.group.epoch_ms)
    if p.checkpoint is None and _scales_live(p):
        return _run_live_tuned(p, config, controller, drivers)
    live = p.live if p.live is not None else LiveMetrics(n, kind="run")
    rescaler = Rescaler()
    ctl = server = None
    if p.control not in (None, False):
        if not (p.control is True or isinstance(p.control, (str, os.PathLike))):
            raise InvalidArgument("with latency_target=, control must be True or a socket path")
        ctl = RunControl(p.query, p.src.schema, n, bounded=watermarks_from_source(p.src),
                         features=("checkpoint", "latency_target"))
        server = ControlServer(ctl, None if p.control is True else os.fspath(p.control))

    def scale(to: int) -> None:
        got = rescaler.rescale(to)
        live.set_executors(got["to"])
        if ctl is not None:
            ctl.regroup(got["to"], "the group restarted with another executor count")
        live.event(f"rescale {got['from']} -> {got['to']} executors from checkpoint "
                   f"{got['checkpoint']} ({got['seconds_to_resume']:.2f} s to resume)")

    def epoch(epoch_ms: float) -> None:
        rescaler.set_epoch(epoch_ms=max(1, int(round(epoch_ms))))
        live.event(f"epochs of {int(round(epoch_ms))} ms")

    actuator = Actuator({"scale_out": lambda k: scale(controller.executors + int(k)),
                         "scale_in": lambda k: scale(controller.executors - int(k)),
                         "rebalance": rebalance_op(rescaler, live), "epoch": epoch})
    tuner = AutoTuner(controller, actuator, live, tick=live.report_interval)
    if ctl is not None:
        provide_by_hand(ctl, tuner, lambda: controller.executors, scale, epoch)
        ctl.provide("rebalance", lambda a: rescaler.rebalance(**a))
    rescaler.on_metrics = live.feed  # ctl gets the reports from the group's driver (serve_rounds)
    rescaler.on_event = live.event
    live.event(f"autotune: latency target {config.target_ms:.0f} ms, executors "
               f"{config.min_executors}..{config.max_executors}, starting with {n}")
    result = _run_restart_group(p, drivers, live, rescaler, ctl, server, tuner)
    live.event("run ended")
    return result


def _run_measured(p: RunPlan, drivers: GroupDrivers) -> pa.Table:
    """``realtime=True`` without a latency target: the window latency
    measured as a tuned run measures it, nothing tuned."""
    n = p.n
    if p.min_executors is not None:
        raise InvalidArgument("min_executors bounds the controller: give latency_target= too")
    if p.checkpoint is None and _scales_live(p):
        return _run_measured_live(p, drivers)
    if p.max_executors is not None:
        raise InvalidArgument(
            "max_executors= with realtime=True provisions a group that scales live over file "
            "inputs without checkpoint=; with checkpoint= (or another input) a realtime run "
            "rescales by restart: give latency_target= for a controller, or scale by hand "
            "with slash ctl scale-out/scale-in")
    live = p.live if p.live is not None else LiveMetrics(n, kind="run")
    rescaler = Rescaler()
    rescaler.on_metrics, rescaler.on_event = live.feed, live.event
    ctl = server = None
    if p.control not in (None, False):
        ctl, server = serve_checkpointed(p.control, p.query, p.src, n, rescaler, live)
    sampler = AutoTuner(None, None, live, tick=live.report_interval, executors=n)
    return _run_restart_group(p, drivers, live, rescaler, ctl, server, sampler)


def _controller_config(p: RunPlan) -> ControllerConfig:
    """The controller's settings: ``latency_target`` itself when it is a
    ControllerConfig, else one made of it and the executor bounds."""
    if isinstance(p.latency_target, ControllerConfig):  # every knob of the policy
        if p.min_executors is not None or p.max_executors is not None:
            raise InvalidArgument("latency_target is a ControllerConfig: give min_executors and "
                                  "max_executors in it")
        return p.latency_target
    return ControllerConfig(
        latency_target=p.latency_target,
        min_executors=p.min_executors if p.min_executors is not None else 1,
        max_executors=p.max_executors if p.max_executors is not None
        else max(p.n, os.cpu_count() or 1))


def _run_restart_group(p: RunPlan, drivers: GroupDrivers, live: Any, rescaler: Any, ctl: Any,
                       server: Any, ticker: "AutoTuner") -> pa.Table:
    """Runs a realtime checkpointed group (rescaled by restart from its
    checkpoints, through ``rescaler``) with ``ticker`` (the controller's, or
    a sampler without one) ticking beside it; checkpoints in the plan's
    directory, else in a temporary one removed at the end; closes the
    control socket at the end and puts the ticker's view in
    ``metrics["autotune"]``."""
    tmp = None
    if p.checkpoint is None:
        tmp = tempfile.mkdtemp(prefix="slash-realtime-")
        log.info("realtime: checkpoints (for rescales) in the temporary directory %s, removed "
                 "at the end (checkpoint= chooses one)", tmp)
    ticker.start()
    m: Dict[str, Any] = {}
    try:
        result = drivers.run_checkpointed(p, control=rescaler, live_every=live.report_interval,
                                          realtime=True, rounds=ctl, checkpoint=tmp, metrics=m)
    finally:
        ticker.stop()
        if server is not None:
            server.close()
        if ctl is not None:
            ctl.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if p.metrics is not None:
        p.metrics.update(m)
        p.metrics["autotune"] = {**ticker.status(), "timeline": list(ticker.timeline),
                                 "window_latency": live.snapshot()["window_latency"]}
    return result


def _run_measured_live(p: RunPlan, drivers: GroupDrivers) -> pa.Table:
    """``realtime=True`` without a target over file inputs and without
    ``checkpoint=``: a group of ``max_executors`` processes (or ``n``), ``n``
    active, paced by event time and measured, a fixed configuration unless
    scaled or updated by hand over its control socket (``slash ctl
    scale-out/scale-in/update``), as any live group."""
    n, size = p.n, p.max_executors or p.n
    if not 1 <= n <= size:
        raise InvalidArgument(f"executors={n} must be within 1..max_executors ({size})")
    live, ctl, server = _provision(p, size, drivers)
    view = _ActiveView(live, None)

    def on_scaler(scaler: Any) -> None:
        view.scaler = scaler

    sampler = AutoTuner(None, None, view, tick=live.report_interval, executors=n)
    return _run_live_group(p, size, live, ctl, server, sampler, on_scaler, drivers)


def _provision(p: RunPlan, size: int, drivers: GroupDrivers) -> Tuple[Any, Any, Any]:
    """(live metrics, RunControl, ControlServer or None) of a realtime live
    group of ``size`` processes: its partitions sized for all of them, every
    provisioned rank reporting (standbys too), a control socket always
    (``control`` names it; scaling goes through it)."""
    p.group.partitions_for(size)
    live = p.live if p.live is not None else LiveMetrics(size, kind="run")
    live.set_executors(size)
    ctl, server = drivers.control_for(True if p.control in (None, False) else p.control, p.query,
                                      p.src, size, elastic=True)
    return live, ctl, server


def _run_live_group(p: RunPlan, size: int, live: Any, ctl: Any, server: Any, ticker: "AutoTuner",
                    on_scaler: Callable[[Any], None], drivers: GroupDrivers) -> pa.Table:
    """Runs a realtime live group of ``size`` processes, ``p.n`` active, with
    ``ticker`` (the controller's, or a sampler without one) ticking beside it;
    closes the control socket at the end and puts the ticker's view in
    ``metrics["autotune"]``."""
    ticker.start()
    m: Dict[str, Any] = {}
    try:
        result = drivers.run_group(p, size, ctl, live.report_interval, rate=None, live=live,
                                   metrics=m, elastic=p.n, realtime=True, on_scaler=on_scaler)
    finally:
        ticker.stop()
        ctl.close()
        if server is not None:
            server.close()
    if p.metrics is not None:
        p.metrics.update(m)
        p.metrics["autotune"] = {**ticker.status(), "path": "live",
                                 "timeline": list(ticker.timeline),
                                 "window_latency": live.snapshot()["window_latency"]}
    return result


def _scales_live(p: RunPlan) -> bool:
    """Whether ``latency_target=`` takes the live path: a window aggregation
    over a FileSource (or a BatchSource), whose units a pre-provisioned group
    re-deals without a restart (:mod:`slash.run.live.scale`)."""
    return isinstance(p.query, Query) and global_units(p.src)


class _ActiveView:
    """The live metrics as the controller should see them in a live group:
    the standby ranks (provisioned, idle) left out of ``per_executor``."""

    def __init__(self, live: Any, scaler: Any) -> None:
        self.live, self.scaler = live, scaler

    def snapshot(self) -> Dict[str, Any]:
        snap = self.live.snapshot()
        active = set(self.scaler.active) if self.scaler is not None else None
        per = snap.get("per_executor") or {}
        if active is not None:
            snap["per_executor"] = {r: p for r, p in per.items() if int(r) in active}
        return snap

    def event(self, text: str) -> None:
        self.live.event(text)


def _run_live_tuned(p: RunPlan, config: ControllerConfig, controller: Controller,
                    drivers: GroupDrivers) -> pa.Table:
    """``latency_target=`` without ``checkpoint=`` over a FileSource: the
    controller drives a group of ``max_executors`` processes, ``n`` active at
    the start, that scales LIVE (:class:`slash.run.live.scale.LiveScaler`: no
    restart, the input paused for milliseconds). Scale-out/in go through the
    live scaler, epoch lengths to every rank (``Executor.set_epoch``), a
    rebalance to rank 0 as live partition moves (``RunControl.rebalance``)."""
    n, size = p.n, config.max_executors
    if not config.min_executors <= n <= size:
        raise InvalidArgument(f"executors={n} must be within min_executors..max_executors "
                              f"({config.min_executors}..{size})")
    live, ctl, server = _provision(p, size, drivers)
    holder: Dict[str, Any] = {}
    view = _ActiveView(live, None)

    def scale(count: int) -> None:
        sc = holder["scaler"]
        have = len(sc.active)
        got = sc.scale_out(count - have) if count > have else sc.scale_in(have - count)
        live.event(f"live scale {got['from']} -> {got['to']} executors (input paused "
                   f"{got['paused_ms']:.1f} ms, no restart)")

    def epoch(epoch_ms: float) -> None:
        ms = max(1, int(round(epoch_ms)))
        holder["scaler"].broadcast(Epoch(ms, 0))
        live.event(f"epochs of {ms} ms")

    def rebalance(from_rank: int, to_rank: int) -> None:
        got = ctl.rebalance({"from_rank": from_rank, "to_rank": to_rank})
        live.event(f"rebalance: rank {from_rank} to rank {to_rank} live ({got})")

    actuator = Actuator({"scale_out": lambda k: scale(controller.executors + int(k)),
                         "scale_in": lambda k: scale(controller.executors - int(k)),
                         "rebalance": rebalance, "epoch": epoch})
    tuner = AutoTuner(controller, actuator, view, tick=live.report_interval)

    def on_scaler(scaler: Any) -> None:
        holder["scaler"] = view.scaler = scaler
        provide_by_hand(ctl, tuner, lambda: len(scaler.active), scale, epoch, live=True)

    live.event(f"autotune (live): latency target {config.target_ms:.0f} ms, executors "
               f"{config.min_executors}..{size} provisioned, starting with {n} active")
    log.info("latency_target: %d executor processes provisioned, %d active; the controller "
             "scales them live (checkpoint= takes the restart path instead)", size, n)
    result = _run_live_group(p, size, live, ctl, server, tuner, on_scaler, drivers)
    live.event("run ended")
    if p.metrics is not None:
        p.metrics["executors_final"] = controller.executors
    return result
