"""Running a query on N executors of this machine.

:func:`run` checks the query against the source's schema, starts N executors
(threads of this process, or processes started by the "spawn" method when a
feature needs a process per rank: :func:`runs_in_process`), lets them exchange their
listener addresses, and gathers the results. Each process runs
:func:`slash.run.worker.worker`: its rank loop reads its own split of the
source, pushes it through the query's filter and projection into its
executor, and returns the windows it leads. The Spark integration runs the
same loop from each barrier task (:func:`execute_split`).

>>> import pyarrow as pa
>>> from slash.query import Query
>>> t = pa.table({"t": [0, 1500, 12000], "k": [1, 1, 2], "v": [1.0, 2.0, 3.0]})
>>> run(Query(time="t", window="tumbling:10s", key="k", aggregates=["count", "sum:v"]), t,
...     executors=1).to_pylist()[0]
{'window_start': 0, 'window_end': 10000, 'k': 1, 'count': 2, 'sum_v': 3.0}
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.errors import InvalidArgument, SinkFailed
from slash.executor import GroupConfig
from slash.run.launcher import ProcessGroup
from slash.query import JoinQuery, Query
from slash.run.recovery.join import execute_join_split  # noqa: F401 (Spark's join task runs it)
from slash.run.driver import Driver, serve_rounds, show_live
from slash.run.failure import Reported
from slash.run.inputs import bound_ticks, source_nullable  # noqa: F401 (the benchmarks')
from slash.run.output import write_late, write_parquet_atomically
from slash.run.run_plan import (IN_PROCESS_ROWS, RunPlan, executor_count,  # noqa: F401 (the CLI's)
                                runs_in_process)
from slash.sources import Source, watermarks_from_source
from slash.run.worker import RankSpec, run_rank, worker

log = logging.getLogger(__name__)

_NEVER = -(1 << 63)
_PLAN: Any = object()  # an override not given: the plan's own value


def execute_split(query: Query, source: Source, rank: int, addresses: List[str], listener: Any,
                  group: GroupConfig, token: str,
                  metrics: Optional[Dict[str, Any]] = None) -> pa.Table:
    """One executor's whole run without a driver link (a Spark batch task,
    the benchmarks): read split ``rank``, push, finish; returns the results
    this executor leads (key column still named ``key``, window bounds in the
    state's time unit: :meth:`Query.finalize` converts them). ``metrics``,
    if given, receives the executor's final metrics.

    A bounded source (files, tables, a Spark partition: ``bounded`` true or
    absent) loses nothing whatever its layout: the executor's watermark moves
    only by what the source promises it has left to read (its Watermark
    markers, from Parquet row-group statistics), and finish() fires the rest.
    An unbounded source keeps the group's lateness, unless it declares
    ``source_watermarks`` (a Kafka stream's per-partition watermarks). The loop is
    :class:`slash.run.rank.RankLoop`, built by :func:`slash.run.worker.run_rank`."""
    result, m = run_rank(RankSpec(query, source, group, token), rank, addresses, listener, None)
    if metrics is not None:
        metrics.update(m)
    return result


def run(query: Query, source: Any, *, executors: Optional[int] = None, transport: str = "shm",
        mode: str = "slash", group: Optional[GroupConfig] = None, output: Optional[str] = None,
        timeout: float = 3600.0, metrics: Optional[Dict[str, Any]] = None,
        late_output: Optional[str] = None, live: Optional[Any] = None,
        checkpoint: Optional[str] = None, checkpoint_every: Any = "10s", max_restarts: int = 3,
        checkpoint_keep: int = 2, control: Any = None, rate: Optional[float] = None,
        latency_target: Any = None, min_executors: Optional[int] = None,
        max_executors: Optional[int] = None, realtime: bool = False,
        sink: Any = None) -> pa.Table:
    """Runs `query` over `source` on `executors` executors (default: one
    per core; one for an input of at most :data:`IN_PROCESS_ROWS` rows). They
    run on threads of this process unless a setting below needs processes
    (:func:`runs_in_process` says which and why).

    ``mode="repartition"`` runs the same query by hash-repartitioning records
    across the executors instead (the baseline Slash is compared with).

    Files and tables are bounded: every record is applied whatever the
    layout (see :func:`execute_split`). Records whose time is null are in no
    window: they are counted and a warning says how many.

    Returns the result table (rows sorted by window, then key); with
    ``output`` also writes it as Parquet, atomically (nothing partial is left
    on failure). ``metrics``, if given, receives the totals (records_in,
    late_records, null_time_records, rows, executors) and ``per_executor``.
    ``late_output``: a Parquet file for rows that were not applied as late
    (a stream's; a bounded input has none unless its statistics are wrong).
    ``live``: a :class:`slash.metrics.LiveMetrics` the executors report to
    while they run (every ``live.report_interval`` s, default 0.5), and the
    per-window latency of a stream (a source with ``bounded = False``, whose
    event time follows the wall clock): a window is emitted when the driver
    learns that every executor has fired it, and its latency is that wall
    clock (ms) minus its end (:meth:`LiveMetrics.executor_windows`). Over
    files it would only measure the data's age and is not reported.
    Raises the first executor's error, naming its rank.

    ``checkpoint``: a directory (shared by every executor) for exactly-once
    recovery (see :mod:`slash.run.recovery.checkpointed` and docs/recovery.md): a checkpoint
    is cut every ``checkpoint_every`` (``"10s"``, seconds as a number,
    ``"N epochs"`` or ``"N batches"``), the newest ``checkpoint_keep`` are
    kept, and a failed executor restarts the whole group from the newest
    one, at most ``max_restarts`` times; the result is the failure-free
    run's. ``metrics`` then also holds ``checkpoints`` (id, bytes, seconds),
    ``recoveries`` (cause, rank, seconds_to_resume, records_replayed) and
    ``records_replayed``. Window aggregations and window joins (a join's
    source is ``(left, right)``); ``late_output`` and ``rate`` work as
    without it (docs/recovery.md). A run resumed
    from ``checkpoint`` takes the checkpoint's key partition count and may
    have another executor count than the one that cut it (file inputs are
    re-split; a generator or table source refuses with NotSupported).

    ``control``: without ``checkpoint``, serve the control socket while the
    query runs (see :mod:`slash.control` and docs/control.md): ``True`` at
    the default path, a path string, or a :class:`slash.control.RunControl`
    already made (its caller serves the socket). ``slash ctl status`` and
    ``slash ctl update`` then reach the run. A join over file inputs
    without ``checkpoint`` then runs as a live join group of ``executors``
    (as ``max_executors=executors``, :mod:`slash.run.live.join`): ``status``,
    ``rebalance`` and ``scale-in`` reach it. With ``checkpoint``: a
    :class:`slash.run.recovery.checkpointed.CheckpointedRun` through which another thread can
    rescale the running group (``control.rescale(n)``);
    ``metrics["rescales"]`` lists each one; or ``True`` / a path: the
    control socket, whose ``update`` every checkpoint records (a restart
    re-applies the versions agreed before it).
    ``rate``: read the input at most this fast, in records/s over all
    executors (a replay of files as a stream; default: as fast as possible).

    What combines with what is :mod:`slash.run.compat`'s table
    (docs/compatibility.md); a refused combination raises NotSupported
    with its reason before any process starts.

    ``max_executors`` without ``latency_target``: a group that scales live
    (:mod:`slash.run.live.scale`, docs/elastic.md): ``max_executors`` processes
    start, ``executors`` of them active and the rest standby; the control
    socket (``control``, default the default path) then takes ``scale-out
    K`` / ``scale-in K`` within 1..max_executors without a restart, and
    ``metrics["live_scales"]`` lists them. Window aggregations over a
    :class:`~slash.sources.FileSource` or :class:`~slash.sources.BatchSource`,
    and window joins whose two inputs are such sources
    (:mod:`slash.run.live.join`); anything else raises NotSupported. Beyond
    ``max_executors`` a scale-out is refused (InvalidArgument: provision more,
    or use ``checkpoint``).
    With ``checkpoint`` too (:mod:`slash.run.recovery.live`, aggregations and joins) the live group takes
    checkpoints (standby ranks included; positions in global terms) and
    recovers from a failed rank exactly once; a scale-out beyond
    ``max_executors`` then restarts the group from a checkpoint with the new
    count (``metrics["live_scales"]`` entries say ``"path": "live"`` or
    ``"restart"``).

    ``latency_target`` (``"500ms"``, ``"2s"``, seconds, or a
    :class:`slash.control.controller.ControllerConfig` for every knob): the run tunes
    itself so that windows come out within it (see :mod:`slash.control.autotune`):
    shorter or longer epochs, and ``min_executors``..``max_executors``
    executors (default 1..max(executors, cores)). Over a FileSource or
    BatchSource without ``checkpoint`` it scales LIVE: ``max_executors``
    processes start, ``executors`` active (``metrics["autotune"]["path"] ==
    "live"``, each scale in ``metrics["live_scales"]``). With ``checkpoint``
    (or another source) it rescales by restarting from a checkpoint (in
    ``checkpoint`` if given, else in a temporary directory; ``"restart"``,
    ``metrics["rescales"]``). Needs ``realtime=True``. ``metrics["autotune"]`` then holds the
    decisions and a timeline. ``realtime``: the input's event times are
    wall-clock times (Unix epoch): each batch is read no earlier than its
    latest time and window latency is emit time minus window end; alone
    (no target) the run is measured the same way with its configuration
    fixed (a checkpointed group; ``metrics["autotune"]["timeline"]``).

    ``sink``: where the windows go besides the result, e.g. a
    :class:`slash.kafka.KafkaSink`. With ``checkpoint``, exactly once: a
    sink with a ``transactional_id`` gets each checkpoint's windows in one
    transaction once its manifest commits, a run started from the directory
    first recovers it, and the windows after the last cut go when the run
    finishes (:mod:`slash.run.delivery`). Without ``checkpoint``, at least
    once: ``sink.write(result)`` when the run finishes.
    """
    plan = RunPlan(**locals())  # every parameter is a field of the plan, checked there
    result = _DRIVERS[plan.path](plan)
    if plan.sink is not None and plan.checkpoint is None:
        _write_at_least_once(plan.sink, result)
    return result


def _write_at_least_once(sink: Any, result: pa.Table) -> None:
    """A run without checkpoints, whatever its driver: the windows to
    ``sink`` once it finished (a failure after this and a retry write them again)."""
    try:
        sink.write(result)
    except Exception as e:
        raise SinkFailed(f"sink: the run's {result.num_rows} window rows were not "
                         f"written ({e})") from e


def _run_tuned(p: RunPlan) -> pa.Table:
    from slash.control.autotune import GroupDrivers, run_autotuned  # ~7 ms of imports a plain run skips

    return run_autotuned(p, GroupDrivers(_run_group, run_checkpointed_group, _control_for))


def _run_live_checkpointed(p: RunPlan) -> pa.Table:
    """Live within ``max_executors``, beyond it by restart (:mod:`slash.run.recovery.live`)."""
    from slash.run.recovery.live import run_live_checkpointed

    late: Optional[List[pa.Table]] = [] if p.want_late else None
    result = run_live_checkpointed(p.query, p.src, p.n, p.max_executors, p.group, p.token,
                                   directory=p.checkpoint, every=p.checkpoint_every,
                                   keep=p.checkpoint_keep, max_restarts=p.max_restarts,
                                   timeout=p.timeout, rate=p.rate, control=p.control,
                                   metrics=p.metrics, output=p.output, live=p.live, late=late,
                                   sink=p.sink)
    if late:
        write_late(late, p.late_output)
    return result


def _run_live(p: RunPlan) -> pa.Table:
    """A pre-provisioned group that scales live (:mod:`slash.run.live.scale`)."""
    ctl, server = _control_for(True if p.control in (None, False) else p.control, p.query, p.src,
                               p.max_executors, elastic=True)
    try:
        return _run_group(p, p.max_executors, ctl, report_every(p.live, 0.5), rate=p.rate,
                          elastic=p.n)
    finally:
        ctl.close()
        if server is not None:
            server.close()


def _run_checkpointed(p: RunPlan) -> pa.Table:
    """The recovery driver (:mod:`slash.run.recovery.checkpointed`), with the control socket
    of a checkpointed run if ``control`` asks for one."""
    from slash.run.recovery.checkpointed import CheckpointedRun as Rescaler

    live_every = report_every(p.live, None)
    control = p.control
    if control in (None, False) or isinstance(control, Rescaler):
        if p.live is not None:  # ranks report over their links; recoveries are marks on the page
            control = control or Rescaler()
            control.on_metrics, control.on_event = p.live.feed, p.live.event
        return run_checkpointed_group(p, control=control or None, live_every=live_every)
    # the control socket (status, rebalance, scale-out/in, epoch) of a checkpointed run
    from slash.control.autotune import serve_checkpointed

    rescaler = Rescaler()
    ctl, server = serve_checkpointed(control, p.query, p.src, p.n, rescaler, p.live)
    try:
        return run_checkpointed_group(p, control=rescaler,
                                      live_every=min(live_every or 1e9, ctl.tick * 10),
                                      rounds=ctl)
    finally:
        server.close()
        ctl.close()


def _run_plain(p: RunPlan) -> pa.Table:
    ctl, server = _control_for(p.control, p.query, p.src, p.n)
    every = report_every(p.live, 0.5 if ctl is not None else None)  # status: latest reports
    try:
        return _run_group(p, p.n, ctl, every, rate=None if p.rate is None else p.rate / p.n)
    finally:
        if ctl is not None:
            ctl.close()
        if server is not None:
            server.close()


#: the driver of each plan's path (:attr:`RunPlan.path`)
_DRIVERS: Dict[str, Callable[[RunPlan], pa.Table]] = {
    "tuned": _run_tuned, "live_checkpointed": _run_live_checkpointed, "live": _run_live,
    "checkpointed": _run_checkpointed, "plain": _run_plain}


def report_every(live: Any, default: Optional[float]) -> Optional[float]:
    """How often ranks report: ``live``'s interval, else ``default``."""
    return live.report_interval if live is not None else default


def _control_for(control: Any, query: Any, src: Any, n: int,
                 elastic: bool = False) -> Tuple[Any, Any]:
    """(RunControl, ControlServer or None) for :func:`run`'s ``control=``;
    ``elastic``: a live-scalable group (its scaler registers the scale
    operations, :func:`_run_group`)."""
    if control is None or control is False:
        return None, None
    from slash.control import ControlServer, RunControl

    features = ("live_scale",) if elastic else ()
    if isinstance(query, JoinQuery) and elastic and not isinstance(control, RunControl):
        if control is not True and not isinstance(control, (str, os.PathLike)):
            raise InvalidArgument(f"control must be True or a socket path, got "
                                  f"{type(control).__name__}")
        jctl = RunControl(query, src[0].schema, n, features=features)  # update: refused
        return jctl, ControlServer(jctl, None if control is True else os.fspath(control))
    if isinstance(query, JoinQuery):
        raise InvalidArgument("control=: a join serves a control socket over file inputs "
                              "(FileSource or BatchSource) without checkpoint= (it runs as a "
                              "live join group, slash.run.live.join)")
    if isinstance(control, RunControl):
        control.declare(*features)
        return control, None
    if control is not True and not isinstance(control, (str, os.PathLike)):
        raise InvalidArgument(f"control must be True, a socket path or a RunControl, got "
                              f"{type(control).__name__}")
    ctl = RunControl(query, src.schema, n, bounded=watermarks_from_source(src), features=features)
    return ctl, ControlServer(ctl, None if control is True else os.fspath(control))


def _run_group(p: RunPlan, size: int, ctl: Any, report_every: Optional[float], *,
               rate: Optional[float], live: Any = _PLAN, metrics: Any = _PLAN,
               elastic: Optional[int] = None, realtime: bool = False,
               on_scaler: Optional[Callable[[Any], None]] = None) -> pa.Table:
    """A run without checkpoints: a group of ``size`` ranks and its results
    (``live``, ``metrics``: the plan's unless given). ``elastic``: the group
    is pre-provisioned, its first ``elastic`` ranks active
    (:mod:`slash.run.live.scale`; ``rate`` is then the total); ``realtime`` (with
    ``elastic``): each rank paces its input by event time and reports the
    windows it fires; ``on_scaler`` is called with the
    :class:`slash.run.live.scale.LiveScaler` before the group starts (the latency
    controller's actuator, :mod:`slash.control.autotune`)."""
    live = p.live if live is _PLAN else live
    metrics = p.metrics if metrics is _PLAN else metrics
    scaler = None
    if elastic is not None:
        from slash.run.live.scale import LiveScaler

        if p.is_join:
            from slash.run.live.join import JoinLiveScaler
            scaler = JoinLiveScaler(p.src, p.query, size, elastic)
        else:
            scaler = LiveScaler(p.src, p.query, size, elastic,
                                lambda b: bound_ticks(p.query, p.src.schema, b))
        ctl.provide("scale-out", scaler.scale_out)
        ctl.provide("scale-in", scaler.scale_in)
        ctl.provide("elastic-status", scaler.status)
        if on_scaler is not None:
            on_scaler(scaler)
    try:
        return _run_group_body(p, size, ctl, report_every, rate, live, metrics, elastic, scaler,
                               realtime)
    finally:
        if scaler is not None:
            scaler.close()


def _run_group_body(p: RunPlan, n: int, ctl: Any, report_every: Optional[float],
                    rate: Optional[float], live: Any, metrics: Optional[Dict[str, Any]],
                    elastic: Optional[int], scaler: Any, realtime: bool) -> pa.Table:
    query, t0, in_process, late_output = p.query, p.t0, p.in_process, p.late_output
    spec = RankSpec(query, p.src, p.group, p.token, want_late=p.want_late,
                    report_every=report_every,
                    control=ctl is not None, rate=rate,
                    active=None if elastic is None else list(range(elastic)), realtime=realtime)
    with ProcessGroup(n, worker, lambda r: (spec, r), in_process=in_process,
                      transport=p.group.transport) as pg:
        d = Driver(pg, n, t0 + p.timeout, p.timeout, wait_for_cause=True)
        if live is not None:
            show_live(d, live)
        if ctl is not None:
            serve_rounds(d, ctl, scaler)
        try:
            d.start(max(0.0, t0 + p.group.timeout - d.got.t0))
            if ctl is not None:
                ctl.attach(pg.send)
            if scaler is not None:
                scaler.attach(pg.send)
            got = d.run()
        except Reported as e:
            raise e.error from e.error.__cause__
    parts, per_exec, late_parts = got.parts, got.per_exec, got.late
    result = p.finalize(pa.concat_tables(parts))
    log.info("query ran on %d executor%s%s in %.2f s: %d result rows", n,
             "s" if n > 1 else "", " in this process" if in_process else "",
             time.monotonic() - t0, result.num_rows)
    totals = {k: sum(int(m.get(k, 0) or 0) for m in per_exec)
              for k in ("records_in", "late_records", "null_time_records", "malformed_records")}
    if totals["malformed_records"]:
        log.warning("%d malformed value(s) were skipped (each logged with its topic, partition "
                    "and offset by the executor that read it)", totals["malformed_records"])
    if totals["null_time_records"]:
        log.warning("%d record(s) have a null time %r: they are in no window and were not "
                    "aggregated", totals["null_time_records"], query.time)
    if totals["late_records"]:
        log.warning("%d late record(s) were not applied%s", totals["late_records"],
                    f" (written to {late_output})" if late_output else
                    " (late_output= keeps them)")
    if metrics is not None:
        metrics.update(totals, rows=result.num_rows, executors=n, per_executor=per_exec,
                       in_process=in_process)
        if ctl is not None:
            metrics["logic"] = ctl.status()["logic"]
        if scaler is not None:
            metrics["live_scales"] = list(scaler.history)
    if p.output:
        write_parquet_atomically(result, p.output)
    if late_output is not None:
        late = pa.concat_tables(late_parts) if late_parts else None
        if late is not None and late.num_rows:
            write_parquet_atomically(late, late_output)
    return result


def run_checkpointed_group(p: RunPlan, *, control: Optional[Any] = None,
                           live_every: Optional[float] = None, realtime: bool = False,
                           rounds: Any = None, checkpoint: Optional[str] = None,
                           metrics: Any = _PLAN) -> pa.Table:
    """A run with checkpoints: the recovery driver runs the group
    (:func:`slash.run.recovery.checkpointed.run_checkpointed`; ``control``: its
    CheckpointedRun; ``rounds``: the control socket's RunControl, whose
    updates the group serves; ``realtime``: ranks pace by event time;
    ``checkpoint``, ``metrics``: the plan's unless given)."""
    from slash.run.recovery.checkpointed import run_checkpointed

    metrics = p.metrics if metrics is _PLAN else metrics
    m: Dict[str, Any] = {}
    late: Optional[List[pa.Table]] = [] if p.want_late else None
    result = run_checkpointed(p.query, p.src, p.n, p.group, p.token,
                              directory=os.fspath(checkpoint or p.checkpoint),
                              every=p.checkpoint_every, keep=p.checkpoint_keep,
                              max_restarts=p.max_restarts, timeout=p.timeout, finalize=p.finalize,
                              metrics=m, control=control, live_every=live_every,
                              realtime=realtime, rate=p.rate, late=late,
                              sink=p.sink if checkpoint is None else None,
                              rounds=rounds)
    per_exec = m.get("per_executor", [])
    log.info("query ran on %d executors in %.2f s: %d result rows, %d checkpoints, %d recoveries",
             p.n, time.monotonic() - p.t0, result.num_rows, len(m.get("checkpoints", [])),
             len(m.get("recoveries", [])))
    if metrics is not None:
        totals = {k: sum(int(x.get(k, 0) or 0) for x in per_exec)
                  for k in ("late_records", "null_time_records", "malformed_records")}
        totals["records_in"] = sum(int(x.get("records_read", 0) or 0) for x in per_exec)
        metrics.update(totals, rows=result.num_rows, executors=m.get("executors_final", p.n), **m)
    if p.output:
        write_parquet_atomically(result, p.output)
    if late:
        write_late(late, p.late_output)
    return result
