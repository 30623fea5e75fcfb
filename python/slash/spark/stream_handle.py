"""The driver's side of a running Spark stream (:class:`StreamHandle`).

It takes the tasks' messages (the rendezvous thread feeds them to the
handlers registered on its :class:`slash.run.driver.Dispatch`), holds each
window's rows until every rank's group watermark has passed its end, and
hands whole windows to the sink in event-time order (a callable sink on a
delivery thread of its own, never under the handle's lock; that way of the
windows, the late records and the latencies are
:mod:`slash.spark.stream_output`'s). It offers the stream's controls:
``stop``/``wait``, ``rescale``/``scale_out``/``scale_in`` (a new barrier job
from a checkpoint), ``update`` (logic versions), ``rebalance`` (leadership
moves) and ``status`` (the last three in :mod:`slash.spark.stream_controls`).
:func:`slash.spark.stream.stream` checks the arguments into a
:class:`StreamSetup`; the handle built with it wires the driver's parts
and :meth:`StreamHandle.start` runs the barrier jobs under the one
supervisor (a failed job restarts from the newest checkpoint, a rescale
starts the next job at its new size).

Invariant: a window reaches the sink once, whole: never split across two
calls, never repeated, also across restarts and rescales (with
``checkpoint=`` a window goes out only with the checkpoint that covers it).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple, Union

import numpy as np
import pyarrow as pa

from slash.control import RunControl
from slash.errors import InvalidArgument, InvalidState, SinkFailed, TaskFailed, Timeout
from slash.executor import GroupConfig
from slash.metrics import LiveMetrics, MetricsServer
from slash.query import Query
from slash.run.delivery import Delivery
from slash.run.failure import Failed, RestartPolicy, curable, reported
from slash.run.driver import Dispatch, feed_control, show_live
from slash.run.plan import CheckpointPlan
from slash.run.protocol import (LateRecords, Metrics, ResumeAsk, Stop, StreamDone, StreamRows,
                                StreamWatermark, WindowLatencies)
from slash.run.supervisor import Rescale, Supervisor
from slash.spark import _env
from slash.spark._stream_ckpt import DriverCheckpoints
from slash.spark._stream_task import DONE, NEVER, StreamPlan, stream_task
from slash.spark._tasks import (Rendezvous, barrier_stage, driver_host, raise_task_failure,
                                write_table)
from slash.spark.stream_controls import StreamControls
from slash.spark.stream_output import StreamOutput

#: the stream's warnings (late records, rescales) keep the logger users configure
log = logging.getLogger("slash.spark.stream")

#: where a stream's windows go: a directory for Parquet parts, or a callable per window
Sink = Union[str, Callable[[pa.Table], None]]


@dataclass(frozen=True)
class StreamSetup:
    """What :func:`slash.spark.stream.stream` settled before a stream starts
    (its arguments checked): the handle built with it wires the driver's
    parts (checkpoints, the metrics server, the task rendezvous, the control)
    and :meth:`StreamHandle.start` runs the barrier jobs."""

    spark: Any
    query: Query
    schema: pa.Schema
    source: Any
    #: the group's partitions are fixed for the life of the checkpoints (a rescale keeps them)
    group: GroupConfig
    token: str  # the tasks' rendezvous secret
    sink_dir: Optional[str] = None  # a directory sink (the tasks write it), else None
    #: a transactional sink fed by the checkpoints (the tasks write result segments), else None
    delivery: Optional[Delivery] = None
    checkpoint: Optional[CheckpointPlan] = None
    slots_wait: float = 30.0
    max_restarts: int = 3
    metrics_port: Optional[int] = None  # None (and ui False): no metrics server
    ui: bool = False
    ui_bind: str = "127.0.0.1"
    ui_token: Optional[str] = None


class StreamHandle(StreamOutput, StreamControls):
    """A running stream: :meth:`stop` (or leaving a ``with`` block) ends it
    cleanly (every executor finishes its input, the remaining windows fire);
    :meth:`wait` waits for a bounded source to end; :attr:`metrics` counts
    windows, rows, late records and per-window latency.

    A callable sink runs in a delivery thread of its own, never under the
    handle's lock (so it may read :attr:`metrics`), once per window in event
    time order. If it raises, the stream stops; :meth:`stop` and :meth:`wait`
    raise :class:`slash.errors.SinkFailed` (its ``__cause__`` is the sink's
    exception) and :meth:`undelivered` holds every window the sink did not
    accept: the one it raised on, then all that fired after.
    """

    #: seconds between two warnings about late records while running
    late_warning_interval: float = 5.0
    #: seconds the driver waits, once the stage ended, for the ranks' last messages
    last_messages_timeout: float = 30.0

    def __init__(self, n: int, sink: Sink, lateness_ms: int = 0, late_output: Optional[str] = None,
                 setup: Optional[StreamSetup] = None) -> None:
        self.executors = n
        self._sink = sink
        self._lateness_ms = lateness_ms
        self._late_output = late_output
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # queue, stage end, ranks done
        self._gw = [NEVER] * n
        self._pending: List[pa.Table] = []  # rows of windows not yet complete
        self._queue: Deque[pa.Table] = deque()  # whole windows for the sink, oldest first
        self._undelivered: List[pa.Table] = []
        self._latencies: List[Tuple[int, int, int, int]] = []
        self._emitted: List[Tuple[int, int]] = []
        self._rows = 0
        self._records_in = 0
        self._malformed = 0  # values the source could not parse, skipped (the final summary's)
        self._late_live = 0  # from the tasks' "late" messages, as they come
        self._late_final: Optional[int] = None  # the executors' own count, at the end
        self._late_by_window: Dict[Tuple[int, int], int] = {}
        self._late_warned_at = -float("inf")
        self._late_warned = 0  # the live count the last warning gave
        self._done: Set[int] = set()
        self._stage_over = False
        self._error: Optional[BaseException] = None
        self._sink_error: Optional[SinkFailed] = None
        self._stop_lock = threading.Lock()
        self._stop_sent = False  # "stop" sent to the current group (for a rescale, or to end)
        self._stopping = False  # the stream is to end: stop() was called or the sink failed
        self._thread: Optional[threading.Thread] = None
        self._delivery: Optional[threading.Thread] = None
        self._rdv: Optional[Rendezvous] = None
        self._started = time.time()
        self.live = LiveMetrics(n, kind="stream")
        self._server: Optional[MetricsServer] = None
        self._ck: Optional[DriverCheckpoints] = None  # with checkpoint=
        self._resumed_from: Optional[int] = None
        self._ctl: Optional[RunControl] = None  # update(), rebalance(): set by stream()
        self._partitions = 0  # the stream's key partitions (rebalance checks moves against them)
        # rebalance with a callable sink: windows ending after _freeze are not handed over until
        # every executor reported map version >= _freeze_version with no partition held
        self._freeze: Optional[int] = None
        self._freeze_version = 0
        self._follow: Dict[int, Tuple[int, int]] = {}  # rank -> (map version, held partitions)
        self._groups = 0  # barrier jobs started after the first (restarts and rescales)
        self._rescale_to: Optional[int] = None  # a rescale asked for, not yet started
        self._rescales: List[Dict[str, Any]] = []
        self._records_before = 0  # records read by the barrier jobs before a rescale
        self._new_group: Dict[Any, Set[int]] = {}  # group -> ranks that asked where to resume
        #: the Prometheus endpoint (``metrics_port=``), else None
        self.metrics_url: Optional[str] = None
        #: the live page (``metrics_port=`` or ``ui=True``), else None
        self.ui_url: Optional[str] = None
        #: the handler table the rendezvous thread feeds (slash.run.driver.Dispatch)
        self._d = Dispatch()
        self._register()
        self._setup = setup
        self._supervisor: Optional[Supervisor] = None
        if setup is not None:
            self._wire(setup)

    def _wire(self, setup: StreamSetup) -> None:
        """The driver's parts of a stream (see :class:`StreamSetup`)."""
        n = self.executors
        if setup.checkpoint is not None:
            self._ck = DriverCheckpoints(setup.checkpoint, setup.sink_dir,
                                         lambda r, m: self._rdv.send_to(r, m),  # type: ignore[union-attr]
                                         lambda m: self._rdv.send_all(m),  # type: ignore[union-attr]
                                         self._committed, self._observe, self._logic,
                                         delivery=setup.delivery)
            self._ck.check_start()
            self._ck.register(self._d, lambda: self.executors)
            self._resumed_from = self._ck.committed
        self._partitions = setup.group.partitions_for(n)
        if setup.metrics_port is not None or setup.ui:
            self._server = MetricsServer(self.live, setup.metrics_port or 0, setup.ui_bind,
                                         setup.ui_token)
            self.metrics_url, self.ui_url = self._server.url, self._server.ui_url
            log.info("slash.spark.stream: live page %s, Prometheus endpoint %s", self.ui_url,
                     self.metrics_url)
        try:
            rdv = Rendezvous(driver_host(setup.spark), n, setup.token, on_message=self._on_message)
        except BaseException:
            self._close_server()
            raise
        self._rdv = rdv
        self._ctl = RunControl(setup.query, setup.schema, n, bounded=False, kind="stream",
                               entry="spark.stream",
                               features=("checkpoint",) if self._ck is not None else ())
        self._ctl.provide("scale-out", self.scale_out)  # a restart of the barrier stage
        self._ctl.provide("scale-in", self.scale_in)
        if self._ck is not None:
            self._restore_logic(self._ck.start_logic)
        self._ctl.attach(lambda r, m: rdv.send_to(r, m))
        show_live(self._d, self.live)
        feed_control(self._d, self._ctl)

    # the barrier jobs, under the one supervisor (the stage thread)
    def start(self) -> None:
        """Runs the stream's barrier jobs on a thread of their own (a failed
        job restarts from the newest checkpoint, a rescale starts the next
        job at its new size), and a callable sink's delivery thread."""
        setup, rdv = self._setup, self._rdv
        if setup is None or rdv is None or self._thread is not None:
            raise InvalidState("StreamHandle.start: a handle built by slash.spark.stream starts once")
        plan = StreamPlan(setup.query, setup.schema, setup.source, setup.group, setup.token,
                          rdv.address, setup.sink_dir, write_table, self._late_output,
                          checkpoint=setup.checkpoint,
                          sink_segments=setup.delivery is not None)
        sup = self._supervisor = Supervisor(RestartPolicy(setup.max_restarts, self._curable,
                                                          self._gave_up))

        def run() -> None:
            rows = None
            try:
                setup.spark.sparkContext.setJobDescription(
                    f"slash stream {setup.query.window} by {list(setup.query.key)}")
                rows = sup.run(lambda _: self._attempt(plan),
                               rescaled=lambda r: self._switch(r.count), failed=self._failed)
            except Exception as err:  # what the policy does not restart from
                self._error = err
            finally:
                self._stage_ended(rows)
        self.live.event(f"stream started: {self.executors} executors, {setup.query.window}")
        self._thread = threading.Thread(target=run, name="slash-stream", daemon=True)
        if callable(self._sink):
            self._delivery = threading.Thread(target=self._deliver, name="slash-stream-sink",
                                              daemon=True)
            self._delivery.start()
        self._thread.start()

    def _curable(self, err: BaseException) -> bool:
        """A failed barrier job restarts from a checkpoint when a restart can
        cure its error (:func:`slash.run.failure.curable`, as for a local
        run: not a usage error, a corrupt checkpoint or a full disk), unless
        the stream has no checkpoint, was stopping (not for a rescale) or its
        sink failed."""
        return curable(err) and not (self._ck is None or self._stopping or
                                     (self._stop_sent and self._rescale_to is None)
                                     or self._sink_error is not None)

    def _gave_up(self, f: Failed, restarts: int, most: int) -> BaseException:
        assert self._ck is not None
        return TaskFailed(f"{f.error} (after {restarts} restart(s), max_restarts={most}; the "
                          f"checkpoints in {self._ck.store.dir!r} stay: start the stream again "
                          "to resume)", f.rank, getattr(f.error, "reason", None) or str(f.error))

    def _attempt(self, plan: StreamPlan) -> List[Dict[str, Any]]:
        """One barrier job; a rescale asked for stops it after a checkpoint
        and the next starts with the new count, unless the stream was to end
        meanwhile (stopped, its sink failed, its source exhausted)."""
        assert self._setup is not None and self._rdv is not None
        try:
            rows = barrier_stage(self._setup.spark, self.executors, stream_task(plan)).collect()
        except Exception as e:
            rep = self._rdv.root_cause()
            ck = self._ck
            if ck is not None and ck.fatal is not None:
                raise ck.fatal from None
            if rep is not None:  # the task's own error, as a local driver reads a rank's report
                err = reported(rep).error
                raise Failed(rep.rank, str(err), err) from None
            try:  # no report (a task killed): the rank Spark's text names
                raise_task_failure(e, "slash.spark.stream")
            except Exception as err:
                raise Failed(getattr(err, "rank", None), str(err), err) from None
        nxt, ck = self._rescale_to, self._ck
        if nxt is not None and ck is not None and ck.fatal is None and \
                not self._stopping and not ck.finished:
            self._records_before += sum(int(r["records_in"]) for r in rows)
            raise Rescale(nxt, ck.committed)
        return rows

    def _failed(self, f: Failed, _rec: Dict[str, Any], _last: Any) -> None:
        """A failed barrier job, before the next one starts from the checkpoint."""
        ck, rdv, sup = self._ck, self._rdv, self._supervisor
        assert ck is not None and rdv is not None and sup is not None and self._ctl is not None
        ck.failed(f.cause, f.rank, rdv.silent_loss())
        # a rebalance rank 0 had not answered died with the group
        self._next_group()
        self._ctl.moves.waiters.fail_pending(
            "the barrier job restarted from a checkpoint before every executor "
            "followed the moves; the restored map is the checkpoint's")
        if self._rescale_to is not None:  # it failed while stopping for a rescale
            self._switch(self._rescale_to)
        self.live.event(f"recovery {sup.restarts}: {f.error}")
        log.warning("slash.spark.stream: %s; restarting the barrier job from checkpoint %s "
                    "(restart %d of at most %d)", f.error, ck.committed, sup.restarts,
                    sup.policy.max_restarts)

    # messages from the tasks: the rendezvous thread feeds them to the handler table
    def _register(self) -> None:
        """The handle's own handlers on ``self._d``, each taking the lock for
        what ``wait()``/``stop()`` read; ``_wire`` adds the checkpoints', the
        live view's and the control's."""
        d = self._d
        d.on(ResumeAsk, self._resume_asked)  # before the checkpoints' answer
        d.on(StreamRows, self._rows_fired)
        d.on(StreamWatermark, lambda m, _: self._passed(m.rank, m.watermark))
        d.on(WindowLatencies, self._latencies_seen)
        d.on(Metrics, self._followed)
        d.on(LateRecords, self._late_seen)
        d.on(StreamDone, self._rank_done)

    def _on_message(self, rank: int, msg: Tuple[Any, ...]) -> None:
        self._d.handle(msg)
        # late records not yet warned about: now, or with a later message
        # (watermarks keep coming) once the interval has passed
        with self._cond:
            warn = self._late_live > self._late_warned and \
                time.monotonic() - self._late_warned_at >= self.late_warning_interval
            if warn:
                self._late_warned_at, self._late_warned = time.monotonic(), self._late_live
        if warn:
            self._warn_late(self._late_warned)

    def _resume_asked(self, msg: ResumeAsk, _: Any) -> None:
        """A rank of the next group asks where to resume: every rank of a
        rescale's new group asking ends the rescale's wait."""
        if not self._rescales or "seconds_to_resume" in self._rescales[-1]:
            return
        got = self._new_group.setdefault(msg.group, set())
        got.add(msg.rank)
        r = self._rescales[-1]
        if len(got) == self.executors == r["to"]:
            with self._cond:
                r["seconds_to_resume"] = round(time.monotonic() - r["_asked_at"], 3)
                self._cond.notify_all()

    def _rank_done(self, msg: StreamDone, _: Any) -> None:
        with self._cond:
            self._gw[msg.rank] = DONE
            self._done.add(msg.rank)
            if callable(self._sink):
                self._take()
            self._cond.notify_all()

    def _send_stop(self) -> None:
        """Asks the current group to stop (after a last checkpoint, with
        ``checkpoint=``), once; also its ranks that have not joined yet: a
        stop asked before the barrier job's tasks formed their group reaches
        them as they join."""
        with self._stop_lock:  # two senders on one connection would interleave bytes
            self._stop_group()

    def _stop_group(self) -> None:
        """With ``_stop_lock`` held: :meth:`_send_stop`'s message, once per group."""
        if self._stop_sent or self._rdv is None:
            return
        self._stop_sent = True
        self._rdv.send_all(Stop(), joining=True)

    def _stage_ended(self, rows: Optional[List[Dict[str, Any]]]) -> None:
        """The stage thread, once the stage returned (``rows``: the tasks'
        summaries, None if it failed): waits for every rank's last messages,
        takes the remaining windows and logs the late records' summary."""
        with self._cond:
            if rows is not None and not self._cond.wait_for(
                    lambda: len(self._done) == self.executors, timeout=self.last_messages_timeout):
                log.warning("slash.spark.stream: ranks %s ended without their last message within %s s; "
                            "windows they still send are kept in undelivered()",
                            sorted(set(range(self.executors)) - self._done), self.last_messages_timeout)
            if rows is not None:
                self._freeze = None  # every executor finished: every hand-over was merged
                self._records_in = self._records_before + sum(r["records_in"] for r in rows)
                self._late_final = sum(r["late_records"] for r in rows)
                self._malformed = sum(int(r.get("malformed_records", 0)) for r in rows)
                if self._malformed:
                    log.warning("slash.spark.stream: %d malformed value(s) skipped (each logged "
                                "with its topic, partition and offset by its executor)",
                                self._malformed)
                if callable(self._sink):
                    self._gw = [DONE] * self.executors
                    self._take()
            self._stage_over = True
            self._cond.notify_all()
            late = self._late_records()
        self.live.event("stream ended" if rows is not None else "stream failed")
        if late:
            self._warn_late(late, final=True)

    @property
    def base_ms(self) -> Optional[int]:
        """Wall clock (ms) when the executors formed their group: a RateSource's
        first event time. With ``checkpoint=`` the base of the stream's first
        start, kept across restarts and resumes (replayed batches are identical)."""
        if self._ck is not None and self._ck.base_ms is not None:
            return self._ck.base_ms
        return self._rdv.started_ms if self._rdv is not None else None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def metrics(self) -> Dict[str, Any]:
        """windows and rows emitted, per-window latency (ms: emit wall clock -
        window end) with its percentiles, records in, seconds;
        ``malformed_records`` (values the source could not parse, skipped; known
        once the stream ended); late records: ``late_records`` (in all) and
        ``late_records_by_window``
        ({(window_start, window_end): records} for the windows they would
        have fallen in); ``undelivered_windows`` after a sink failure.
        With ``checkpoint=``: ``checkpoints`` (id, bytes, seconds, one per
        committed checkpoint), ``recoveries`` (cause, rank, from_checkpoint,
        seconds_to_resume: from the failure reaching the driver to every rank
        of the new group asking where to resume) and ``resumed_from`` (the
        checkpoint this stream started from, None for a fresh start)."""
        ck = self._ck
        with self._lock:
            lats = [x[2] for x in self._latencies]
            windows = len({(s, e) for s, e, _, _ in self._latencies})
            out: Dict[str, Any] = {
                "windows": windows, "rows": self._rows, "records_in": self._records_in,
                "malformed_records": self._malformed,
                "late_records": self._late_records(), "late_records_by_window": dict(self._late_by_window),
                "undelivered_windows": len(self._undelivered), "seconds": time.time() - self._started,
                "window_latencies": list(self._latencies), "running": self.running}
        if ck is not None:
            with self._lock:
                rescales = [{k: v for k, v in r.items() if not k.startswith("_")}
                            for r in self._rescales]
            out.update(checkpoints=list(ck.checkpoints), recoveries=[dict(r) for r in ck.recoveries],
                       resumed_from=self._resumed_from, rescales=rescales,
                       executors=self.executors)
        if lats:
            a = np.asarray(lats, dtype=np.float64)
            out["latency_ms"] = {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)),
                                 "max": float(a.max())}
        return out

    def _output_after_rescale(self) -> None:
        """With the lock held: output published; the first after a rescale's
        new group resumed ends that rescale's pause."""
        r = self._rescales[-1] if self._rescales else None
        if r is not None and "seconds_to_resume" in r and "seconds_to_first_output" not in r:
            r["seconds_to_first_output"] = round(time.monotonic() - r["_asked_at"], 3)

    def rescale(self, n: int, timeout: float = 300.0) -> Dict[str, Any]:
        """Restarts the stream with ``n`` executors (a barrier stage cannot
        grow or shrink): the current barrier job stops right after a
        checkpoint at the next epoch boundary, and the next one starts with
        ``n`` executors from it; output stays exactly-once, the source's
        work left is re-dealt (docs/recovery.md, "Rescaling a stream").

        Returns when every rank of the new group asked where to resume:
        ``{"from", "to", "checkpoint", "seconds_to_resume"}``;
        ``metrics["rescales"]`` later adds ``seconds_to_first_output`` (the
        pause a rescale costs). Raises InvalidState without ``checkpoint=``,
        while another rescale runs or once the stream has ended,
        InvalidArgument for an ``n`` outside 1..partitions,
        NotEnoughSlots when Spark has fewer task slots, and Timeout."""
        if self._ck is None:
            raise InvalidState("rescale() needs a stream started with checkpoint=: it restarts the "
                               "barrier job from a checkpoint")
        parts = self._ck.plan.partitions
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= parts:
            raise InvalidArgument(f"rescale needs an executor count in 1..{parts} (the stream's key "
                                  f"partitions), got {n!r}")
        if not self.running:
            raise InvalidState("rescale(): the stream is not running")
        if n == self.executors:
            return {"from": n, "to": n, "checkpoint": None, "seconds_to_resume": 0.0}
        assert self._setup is not None
        _env.check_slots(self._setup.spark, n, self._setup.slots_wait)
        # the ask and its "stop" under one lock: a group switched to meanwhile (_switch,
        # after a failure) takes both or neither
        with self._stop_lock:
            with self._cond:
                if self._rescale_to is not None or (self._rescales and
                                                    "seconds_to_resume" not in self._rescales[-1]):
                    raise InvalidState("rescale(): another rescale is in progress")
                if self._stopping:
                    raise InvalidState("rescale(): the stream is stopping")
                if self._stage_over:
                    raise InvalidState("rescale(): the stream is not running")
                self._rescale_to = n
                entry: Dict[str, Any] = {"from": self.executors, "to": n,
                                         "_asked_at": time.monotonic()}
                self._rescales.append(entry)
            self._stop_group()
        self.live.event(f"rescale {self.executors} -> {n} asked")
        with self._cond:
            if not self._cond.wait_for(lambda: "seconds_to_resume" in entry or self._stage_over or
                                       self._error is not None, timeout):
                raise Timeout(f"rescale to {n} executors: the new group did not resume within "
                              f"{timeout} s (the rescale goes on: metrics['rescales'])")
            if "seconds_to_resume" not in entry:  # refused: the stream ended before it applied
                self._rescales.remove(entry)
                why = self._error if self._error is not None else self._sink_error
                raise InvalidState(f"rescale to {n} executors: the stream ended before the new "
                                   "group started" + ("" if why is None else f" ({why})") +
                                   (": stop() was called" if why is None and self._stopping
                                    else ""))
        return {k: v for k, v in entry.items() if not k.startswith("_")}

    def scale_out(self, k: int = 1, timeout: float = 300.0) -> Dict[str, Any]:
        """:meth:`rescale` to ``k`` more executors."""
        return self.rescale(self.executors + k, timeout)

    def scale_in(self, k: int = 1, timeout: float = 300.0) -> Dict[str, Any]:
        """:meth:`rescale` to ``k`` fewer executors."""
        return self.rescale(self.executors - k, timeout)

    def _switch(self, n: int) -> None:
        """The stage thread, between barrier jobs: the next group has n ranks."""
        ck = self._ck
        assert ck is not None and self._rdv is not None
        with self._stop_lock:  # the rescale's "stop" was the old group's
            with self._cond:
                self._rescales[-1]["checkpoint"] = ck.committed
                self.executors = n
                self._gw = [NEVER] * n
                self._rescale_to = None
            self._stop_sent = False
            self._rdv.forget_joining()
        if self._stopping:  # stop() came during the rescale: the new group stops at once
            self._send_stop()
        if self._ctl is not None:
            self._ctl.executors = n
        self._next_group()
        self._rdv.n = n
        ck.store.executors = n
        ck.rescaling = True
        self.live.set_executors(n, keep=True)
        self.live.event(f"rescale: next barrier job with {n} executors from checkpoint "
                        f"{ck.committed}")
        log.info("slash.spark.stream: rescaling to %d executors from checkpoint %s", n, ck.committed)

    def task_pids(self) -> Dict[int, int]:
        """With ``checkpoint=``: rank -> process id of the Python worker running
        its task (the newest group's; for diagnostics and fault tests)."""
        return {r: pid for r, (_, pid) in self._ck.pids.items()} if self._ck is not None else {}

    def metrics_snapshot(self) -> Dict[str, Any]:
        """The live metrics, while the stream runs: per executor (records,
        bytes and their rates, watermark and its lag, epochs and mean epoch
        duration, merge time, delta bytes, credit stalls, late records, CPU
        time and load; reported every 0.5 s), totals, and the window latency
        (emit wall clock - window end) percentiles; see :mod:`slash.metrics`."""
        return self.live.snapshot()

    def _close_server(self) -> None:
        if self._server is not None:
            self._server.close()

    def wait(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Waits for the stream to end by itself (a bounded source) and for
        the sink to take every window; raises :class:`SinkFailed` if the sink
        raised, the failure (naming the rank) if a task failed."""
        if self._delivery is not None and threading.current_thread() is self._delivery:
            raise InvalidState("stop()/wait() called from inside the stream's sink: the sink would wait "
                               "for itself; raise from the sink to stop the stream instead")
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise InvalidState(f"the stream is still running after {timeout} s")
        if self._delivery is not None:
            self._delivery.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if self._delivery.is_alive():
                raise InvalidState(f"the sink is still taking the stream's windows after {timeout} s")
        if self._rdv is not None:
            self._rdv.close()
        self._close_server()
        if self._sink_error is not None:
            raise self._sink_error
        if self._error is not None:
            raise self._error
        return self.metrics

    def stop(self, timeout: float = 120.0) -> Dict[str, Any]:
        """Asks every executor to stop, waits until all finished and the sink
        took every window; final metrics (raises as :meth:`wait`)."""
        if self.running:
            self._stopping = True
            self._send_stop()
        return self.wait(timeout)

    def __enter__(self) -> "StreamHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.running:
            self.stop()
