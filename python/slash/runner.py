"""Running a query on N executors of this machine.

:func:`run` checks the query against the source's schema, starts N executors
(threads of this process, or processes started by the "spawn" method when a
feature needs a process per rank: :func:`runs_in_process`), lets them exchange their
listener addresses, and gathers the results. Each process runs
:func:`slash.worker.worker`: its rank loop reads its own split of the
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
import secrets
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.errors import InvalidArgument, SinkFailed
from slash.executor import GroupConfig
from slash.launcher import ProcessGroup
from slash.limits import MAX_EXECUTORS
from slash.query import JoinQuery, Query
from slash.recovery_join import execute_join_split  # noqa: F401 (Spark's join task runs it)
from slash.run import compat
from slash.run.driver import Driver, serve_rounds, show_live
from slash.run.failure import Reported
from slash.run.inputs import bound_ticks, source_nullable  # noqa: F401 (the benchmarks')
from slash.run.output import write_late, write_parquet_atomically
from slash.sources import FileSource, Source, as_source, output_overlaps_input, watermarks_from_source
from slash.worker import RankSpec, run_rank, worker

log = logging.getLogger(__name__)

_NEVER = -(1 << 63)


#: an input of at most this many rows, run with the default executor count,
#: runs on one executor (its reader decoding on a second thread): a second
#: executor's start and merge cost more than it saves below it (16 M rows of
#: a 2-column count: 1.43 s on one against 3.10 s with 2 processes, best of
#: 4, machine at load 15)
IN_PROCESS_ROWS = 16_000_000


def runs_in_process(src: Any, executors: Optional[int], **settings: Any) -> bool:
    """Whether :func:`run` runs its executors on threads of the calling
    process rather than in processes of their own: an input of known size
    (files, tables), and none of ``settings`` (run's ``checkpoint``,
    ``max_executors``, ``latency_target``, ``realtime``; ``isolation``: the
    group asked for processes, :class:`GroupConfig`) given. Those need what only a process
    gives: a rank that can die and be restarted from a checkpoint alone, a
    standby that joins a running group, a pace of its own. Nothing else
    does: the executors' channels are the same rings (or endpoints), and the
    decode and the fold run without the GIL, so threads give the same answer
    without a process start, the executors' imports and a copy of each
    result through a pipe (60 M rows on 2 executors: 0.88 s against 1.22 s
    wall, quiet machine). A fault injected by the test hook SLASH_TEST_KILL
    kills a process, so it asks for processes too."""
    if any(v not in (None, False) for v in settings.values()):
        return False
    if os.environ.get("SLASH_TEST_KILL"):
        return False
    parts = src if isinstance(src, tuple) else (src,)
    rows = [getattr(p, "rows", None) for p in parts]
    return all(isinstance(r, int) for r in rows)


def executor_count(src: Any, executors: Optional[int], in_process: bool) -> int:
    """The executors :func:`run` starts: ``executors`` if given; else one
    for an input of at most :data:`IN_PROCESS_ROWS` rows run in this process,
    one per core otherwise."""
    if executors is not None:
        return executors
    if in_process:
        parts = src if isinstance(src, tuple) else (src,)
        if sum(getattr(p, "rows", 0) for p in parts) <= IN_PROCESS_ROWS:
            return 1
    return os.cpu_count() or 1


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
    :class:`slash.run.rank.RankLoop`, built by :func:`slash.worker.run_rank`."""
    result, m = run_rank(RankSpec(query, source, group, token), rank, addresses, listener, None)
    if metrics is not None:
        metrics.update(m)
    return result


def _check_output_path(path: str, what: str, src: Any = None) -> None:
    """Fails before any process starts if `path` cannot be written, naming it,
    or if writing it would overwrite or join an input of `src`, naming both."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    given = output_overlaps_input(path, src) if src is not None else None
    if given is not None:
        raise InvalidArgument(f"{what} {path!r} would overwrite or join the input {given!r} "
                              "(the same file, inside an input directory, or matched by an "
                              "input pattern): give an output outside the inputs")
    if os.path.isdir(path):
        raise InvalidArgument(f"{what} {path!r} is a directory; give a file name")
    if not os.path.isdir(d):
        raise InvalidArgument(f"{what} {path!r}: directory {d!r} does not exist")
    if not os.access(d, os.W_OK | os.X_OK):
        raise InvalidArgument(f"{what} {path!r}: directory {d!r} is not writable")


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
    recovery (see :mod:`slash.recovery` and docs/recovery.md): a checkpoint
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
    (as ``max_executors=executors``, :mod:`slash.live_join`): ``status``,
    ``rebalance`` and ``scale-in`` reach it. With ``checkpoint``: a
    :class:`slash.recovery.CheckpointedRun` through which another thread can
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
    (:mod:`slash.live_scale`, docs/elastic.md): ``max_executors`` processes
    start, ``executors`` of them active and the rest standby; the control
    socket (``control``, default the default path) then takes ``scale-out
    K`` / ``scale-in K`` within 1..max_executors without a restart, and
    ``metrics["live_scales"]`` lists them. Window aggregations over a
    :class:`~slash.sources.FileSource` or :class:`~slash.sources.BatchSource`,
    and window joins whose two inputs are such sources
    (:mod:`slash.live_join`); anything else raises NotSupported. Beyond
    ``max_executors`` a scale-out is refused (InvalidArgument: provision more,
    or use ``checkpoint``).
    With ``checkpoint`` too (:mod:`slash.live_ckpt`, aggregations and joins) the live group takes
    checkpoints (standby ranks included; positions in global terms) and
    recovers from a failed rank exactly once; a scale-out beyond
    ``max_executors`` then restarts the group from a checkpoint with the new
    count (``metrics["live_scales"]`` entries say ``"path": "live"`` or
    ``"restart"``).

    ``latency_target`` (``"500ms"``, ``"2s"``, seconds, or a
    :class:`slash.controller.ControllerConfig` for every knob): the run tunes
    itself so that windows come out within it (see :mod:`slash.autotune`):
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
    if isinstance(query, JoinQuery):
        if not (isinstance(source, (tuple, list)) and len(source) == 2):
            raise InvalidArgument("a join runs over two sources: source=(left, right)")
        src = (as_source(source[0]), as_source(source[1]))
        query.check(src[0].schema, src[1].schema)  # every schema error before any process starts
    elif isinstance(query, Query):
        src = as_source(source)
        query.check(src.schema)  # every schema error before any process starts
    else:
        raise InvalidArgument(f"query must be a slash.query.Query or JoinQuery, got "
                              f"{type(query).__name__}")
    in_process = runs_in_process(src, executors, checkpoint=checkpoint,
                                 max_executors=max_executors, latency_target=latency_target,
                                 realtime=realtime,
                                 isolation=group is not None and group.isolation == "process")
    n = executor_count(src, executors, in_process)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_EXECUTORS:
        raise InvalidArgument(f"executors must be an int in 1..{MAX_EXECUTORS}, got {executors!r}")
    group = GroupConfig.for_call(group, transport=transport, mode=mode, lateness=query.lateness)
    group.partitions_for(n)
    cores = os.cpu_count() or 1
    if n > cores:
        log.warning("%d executors on %d cores: executors share cores and wait on each other; "
                    "a run is fastest with at most one executor per core", n, cores)
    if output:
        _check_output_path(output, "output", src)
    if late_output is not None:
        _check_output_path(late_output, "late_output", src)
        if output and os.path.realpath(output) == os.path.realpath(late_output):
            raise InvalidArgument(f"late_output {late_output!r} is the output: give two files")
    if rate is not None and (latency_target is not None or realtime):
        raise InvalidArgument("rate= and realtime=True (which latency_target= needs) both pace "
                              "the input, at a fixed rate or at its event times: give one")
    compat.check("run", "join" if isinstance(query, JoinQuery) else "aggregation",
                 [f for f, on in (("checkpoint", checkpoint is not None),
                                  ("live_scale", max_executors is not None and
                                   latency_target is None),
                                  ("late_output", late_output is not None),
                                  ("rate", rate is not None or realtime),
                                  ("latency_target", latency_target is not None)) if on])
    token = secrets.token_hex(16)
    t0 = time.monotonic()
    want_late = late_output is not None
    if sink is not None:
        _check_sink(sink, checkpoint, max_executors is not None or latency_target is not None
                    or realtime)
    if latency_target is not None or realtime:
        from slash.autotune import GroupDrivers, run_autotuned

        return run_autotuned(query, src, n, group, token, latency_target=latency_target,
                             min_executors=min_executors, max_executors=max_executors,
                             realtime=realtime, live=live, control=control, checkpoint=checkpoint,
                             checkpoint_every=checkpoint_every, max_restarts=max_restarts,
                             checkpoint_keep=checkpoint_keep, output=output, timeout=timeout,
                             metrics=metrics, t0=t0, late_output=late_output,
                             drivers=GroupDrivers(_run_group, run_checkpointed_group, _control_for))
    if min_executors is not None:
        raise InvalidArgument("min_executors bounds the controller: give latency_target= too")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                             or not rate > 0):
        raise InvalidArgument(f"rate must be > 0 records/s, got {rate!r}")
    if (isinstance(query, JoinQuery) and control not in (None, False) and max_executors is None
            and checkpoint is None and all(isinstance(s, FileSource) for s in src)):
        # a join's control socket (status, rebalance, scale-in) is the live join's
        # (slash.live_join): its group of n, every rank active
        max_executors = n
    if max_executors is not None:  # a pre-provisioned group that scales live (slash.live_scale)
        _check_elastic(query, src, n, max_executors, checkpoint)
        group.partitions_for(max_executors)
        if checkpoint is not None:  # live within max_executors, beyond it by restart
            from slash.live_ckpt import run_live_checkpointed

            late: Optional[List[pa.Table]] = [] if late_output is not None else None
            result = run_live_checkpointed(query, src, n, max_executors, group, token,
                                           directory=checkpoint, every=checkpoint_every,
                                           keep=checkpoint_keep, max_restarts=max_restarts,
                                           timeout=timeout, rate=rate, control=control,
                                           metrics=metrics, output=output, live=live, late=late)
            if late:
                write_late(late, late_output)
            return result
        ctl, server = _control_for(True if control in (None, False) else control, query, src,
                                   max_executors, elastic=True)
        report_every = getattr(live, "report_interval", 0.5) if live is not None else 0.5
        try:
            return _run_group(query, src, max_executors, group, token, want_late, report_every,
                              ctl, rate, t0, timeout, live, metrics, output, late_output,
                              elastic=n)
        finally:
            ctl.close()
            if server is not None:
                server.close()
    if checkpoint is not None:
        from slash.recovery import CheckpointedRun as Rescaler

        live_every = live.report_interval if live is not None else None
        if control in (None, False) or isinstance(control, Rescaler):
            if live is not None:  # ranks report over their links; recoveries are marks on the page
                control = control or Rescaler()
                control.on_metrics, control.on_event = live.feed, live.event
            return run_checkpointed_group(query, src, n, group, token, output, timeout, metrics,
                                     late_output, checkpoint, checkpoint_every, max_restarts,
                                     checkpoint_keep, t0, control or None, live_every=live_every,
                                     rate=rate, sink=sink)
        # the control socket (status, rebalance, scale-out/in, epoch) of a checkpointed run
        from slash.autotune import serve_checkpointed

        rescaler = Rescaler()
        ctl, server = serve_checkpointed(control, query, src, n, rescaler, live)
        try:
            return run_checkpointed_group(query, src, n, group, token, output, timeout, metrics,
                                     late_output, checkpoint, checkpoint_every, max_restarts,
                                     checkpoint_keep, t0, rescaler,
                                     live_every=min(live_every or 1e9, ctl.tick * 10),
                                     rate=rate, sink=sink, rounds=ctl)
        finally:
            server.close()
            ctl.close()
    report_every = getattr(live, "report_interval", 0.5) if live is not None else None
    ctl, server = _control_for(control, query, src, n)
    if ctl is not None and report_every is None:
        report_every = 0.5  # status shows each executor's latest report
    try:
        result = _run_group(query, src, n, group, token, want_late, report_every, ctl,
                            None if rate is None else rate / n, t0, timeout, live, metrics, output,
                            late_output, in_process=in_process)
        if sink is not None:  # at least once: a failure after this and a retry write it again
            try:
                sink.write(result)
            except Exception as e:
                raise SinkFailed(f"sink: the run's {result.num_rows} window rows were not "
                                 f"written ({e})") from e
        return result
    finally:
        if ctl is not None:
            ctl.close()
        if server is not None:
            server.close()


def _check_sink(sink: Any, checkpoint: Any, driven: bool) -> None:
    """What ``sink=`` needs (see :func:`run`), before any process starts.
    ``driven``: a live-scaled or self-tuning run (its own drivers)."""
    if driven:
        raise InvalidArgument(
            "sink= is written by the run's driver: the checkpoint driver's commits "
            "(checkpoint=) or a plain run's end; a live-scaled or self-tuning group "
            "(max_executors=, latency_target=, realtime=) has drivers of its own, which hand "
            "windows to no sink")
    transactional = getattr(sink, "transactional_id", None) is not None
    if checkpoint is None:
        if transactional or not callable(getattr(sink, "write", None)):
            raise InvalidArgument(
                "sink= without checkpoint= is written once at the end (at least once) with "
                "sink.write(result): give a KafkaSink without transactional_id, or checkpoint= "
                "for exactly once (a transaction per checkpoint)")
    elif not transactional or not callable(getattr(sink, "deliver", None)):
        raise InvalidArgument(
            "sink= with checkpoint= delivers each checkpoint's windows in one transaction when "
            "its manifest commits (exactly once): give a KafkaSink with a transactional_id")


def _check_elastic(query: Any, src: Any, n: int, m: Any, checkpoint: Any) -> None:
    """What ``max_executors=`` without ``latency_target=`` needs: a window
    aggregation over files (or a join over two), ``executors <=
    max_executors`` (with ``checkpoint=``: :mod:`slash.live_ckpt`)."""
    from slash.errors import NotSupported
    from slash.sources import FileSource

    if isinstance(m, bool) or not isinstance(m, int) or not n <= m <= MAX_EXECUTORS:
        raise InvalidArgument(f"max_executors must be an int in {n}..{MAX_EXECUTORS} (at least "
                              f"executors={n}), got {m!r}")
    if isinstance(query, JoinQuery):
        from slash.live_join import check_join_sources
        check_join_sources(src)  # both sides re-dealt in global terms (slash.live_join)
        return
    if not isinstance(src, FileSource):
        raise NotSupported(f"max_executors=: live scaling re-deals the input's units in global "
                           f"terms, which a FileSource or a BatchSource (batch i = make(i)) "
                           f"offers; a {type(src).__name__} does not")


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
                              "live join group, slash.live_join)")
    if isinstance(control, RunControl):
        control.declare(*features)
        return control, None
    if control is not True and not isinstance(control, (str, os.PathLike)):
        raise InvalidArgument(f"control must be True, a socket path or a RunControl, got "
                              f"{type(control).__name__}")
    ctl = RunControl(query, src.schema, n, bounded=watermarks_from_source(src), features=features)
    return ctl, ControlServer(ctl, None if control is True else os.fspath(control))


def _run_group(query: Any, src: Any, n: int, group: GroupConfig, token: str, want_late: bool,
               report_every: Optional[float], ctl: Any, rate: Optional[float], t0: float,
               timeout: float, live: Any, metrics: Optional[Dict[str, Any]],
               output: Optional[str], late_output: Optional[str],
               elastic: Optional[int] = None, realtime: bool = False,
               on_scaler: Optional[Callable[[Any], None]] = None,
               in_process: bool = False) -> pa.Table:
    """:func:`run` without checkpoints: the process group and its results.
    ``elastic``: the group of ``n`` is pre-provisioned, its first ``elastic``
    ranks active (:mod:`slash.live_scale`; ``rate`` is then the total);
    ``realtime`` (with ``elastic``): each rank paces its input by event time
    and reports the windows it fires; ``on_scaler`` is called with the
    :class:`slash.live_scale.LiveScaler` before the group starts (the
    latency controller's actuator, :mod:`slash.autotune`); ``in_process``:
    the ranks run on threads of this process (:class:`ProcessGroup`)."""
    scaler = None
    if elastic is not None:
        from slash.live_scale import LiveScaler

        if isinstance(query, JoinQuery):
            from slash.live_join import JoinLiveScaler
            scaler = JoinLiveScaler(src, query, n, elastic)
        else:
            scaler = LiveScaler(src, query, n, elastic, lambda b: bound_ticks(query, src.schema, b))
        ctl.provide("scale-out", scaler.scale_out)
        ctl.provide("scale-in", scaler.scale_in)
        ctl.provide("elastic-status", scaler.status)
        if on_scaler is not None:
            on_scaler(scaler)
    try:
        return _run_group_body(query, src, n, group, token, want_late, report_every, ctl, rate,
                               t0, timeout, live, metrics, output, late_output, elastic, scaler,
                               realtime, in_process)
    finally:
        if scaler is not None:
            scaler.close()


def _run_group_body(query: Any, src: Any, n: int, group: GroupConfig, token: str,
                    want_late: bool, report_every: Optional[float], ctl: Any,
                    rate: Optional[float], t0: float, timeout: float, live: Any,
                    metrics: Optional[Dict[str, Any]], output: Optional[str],
                    late_output: Optional[str], elastic: Optional[int],
                    scaler: Any, realtime: bool = False, in_process: bool = False) -> pa.Table:
    spec = RankSpec(query, src, group, token, want_late=want_late, report_every=report_every,
                    control=ctl is not None, rate=rate,
                    active=None if elastic is None else list(range(elastic)), realtime=realtime)
    with ProcessGroup(n, worker, lambda r: (spec, r), in_process=in_process) as pg:
        d = Driver(pg, n, t0 + timeout, timeout, wait_for_cause=True)
        if live is not None:
            show_live(d, live)
        if ctl is not None:
            serve_rounds(d, ctl, scaler)
        try:
            d.start(max(0.0, t0 + group.timeout - d.got.t0))
            if ctl is not None:
                ctl.attach(pg.send)
            if scaler is not None:
                scaler.attach(pg.send)
            got = d.run()
        except Reported as e:
            raise e.error from e.error.__cause__
    parts, per_exec, late_parts = got.parts, got.per_exec, got.late
    if isinstance(query, JoinQuery):
        result = query.finalize(pa.concat_tables(parts), src[0].schema, src[1].schema)
    else:
        result = query.finalize(pa.concat_tables(parts), src.schema)
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
    if output:
        write_parquet_atomically(result, output)
    if late_output is not None:
        late = pa.concat_tables(late_parts) if late_parts else None
        if late is not None and late.num_rows:
            write_parquet_atomically(late, late_output)
    return result


def run_checkpointed_group(query: Any, src: Any, n: int, group: GroupConfig, token: str,
                      output: Optional[str], timeout: float, metrics: Optional[Dict[str, Any]],
                      late_output: Optional[str], checkpoint: str, every: Any, max_restarts: int,
                      keep: int, t0: float, control: Optional[Any] = None,
                      live_every: Optional[float] = None, realtime: bool = False,
                      rate: Optional[float] = None, sink: Any = None,
                      rounds: Any = None) -> pa.Table:
    """:func:`run` with ``checkpoint=``: the recovery driver runs the group
    (``rate``: records/s over the group; ``sink``: see :func:`run`;
    ``rounds``: the control socket's RunControl, whose updates the group
    serves: :func:`slash.recovery.run_checkpointed`)."""
    from slash.recovery import run_checkpointed

    m: Dict[str, Any] = {}
    late: Optional[List[pa.Table]] = [] if late_output is not None else None
    result = run_checkpointed(query, src, n, group, token, directory=os.fspath(checkpoint),
                              every=every, keep=keep, max_restarts=max_restarts, timeout=timeout,
                              finalize=(lambda t: query.finalize(t, src[0].schema, src[1].schema))
                              if isinstance(query, JoinQuery)
                              else (lambda t: query.finalize(t, src.schema)), metrics=m,
                              control=control, live_every=live_every, realtime=realtime,
                              rate=rate, late=late, sink=sink, rounds=rounds)
    per_exec = m.get("per_executor", [])
    log.info("query ran on %d executors in %.2f s: %d result rows, %d checkpoints, %d recoveries",
             n, time.monotonic() - t0, result.num_rows, len(m.get("checkpoints", [])),
             len(m.get("recoveries", [])))
    if metrics is not None:
        totals = {k: sum(int(x.get(k, 0) or 0) for x in per_exec)
                  for k in ("late_records", "null_time_records", "malformed_records")}
        totals["records_in"] = sum(int(x.get("records_read", 0) or 0) for x in per_exec)
        metrics.update(totals, rows=result.num_rows, executors=m.get("executors_final", n), **m)
    if output:
        write_parquet_atomically(result, output)
    if late:
        write_late(late, late_output)
    return result
