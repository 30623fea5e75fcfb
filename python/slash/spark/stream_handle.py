"""The driver's side of a running Spark stream (:class:`StreamHandle`).

It takes the tasks' messages (on the rendezvous thread), holds each
window's rows until every rank's group watermark has passed its end, and
hands whole windows to the sink in event-time order (a callable sink on a
delivery thread of its own, never under the handle's lock). It counts late
records and latency, and offers the stream's controls: ``stop``/``wait``,
``rescale``/``scale_out``/``scale_in`` (a new barrier job from a
checkpoint), ``update`` (logic versions), ``rebalance`` (leadership moves)
and ``status``. :func:`slash.spark.stream.stream` builds and starts it.

Invariant: a window reaches the sink once, whole: never split across two
calls, never repeated, also across restarts and rescales (with
``checkpoint=`` a window goes out only with the checkpoint that covers it).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
import pyarrow as pa

from slash._ipc import from_ipc
from slash.control import RunControl
from slash.control_moves import parse_moves
from slash.errors import InvalidArgument, InvalidState, SinkFailed, Timeout
from slash.metrics import LiveMetrics, MetricsServer
from slash.spark import _env
from slash.spark._stream_ckpt import DriverCheckpoints, add_metadata
from slash.spark._stream_task import DONE, NEVER
from slash.spark._tasks import Rendezvous

#: the stream's warnings (late records, rescales) keep the logger users configure
log = logging.getLogger("slash.spark.stream")

#: where a stream's windows go: a directory for Parquet parts, or a callable per window
Sink = Union[str, Callable[[pa.Table], None]]


class StreamHandle:
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

    def __init__(self, n: int, sink: Sink, lateness_ms: int = 0, late_output: Optional[str] = None) -> None:
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
        self._stop_sent = False
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
        self._source: Any = None
        self._spark: Any = None
        self._slots_wait = 30.0
        self._rescale_to: Optional[int] = None  # a rescale asked for, not yet started
        self._rescales: List[Dict[str, Any]] = []
        self._records_before = 0  # records read by the barrier jobs before a rescale
        self._new_group: Dict[Any, Set[int]] = {}  # group -> ranks that asked where to resume
        #: the Prometheus endpoint (``metrics_port=``), else None
        self.metrics_url: Optional[str] = None
        #: the live page (``metrics_port=`` or ``ui=True``), else None
        self.ui_url: Optional[str] = None

    # messages from the tasks (the rendezvous thread)
    def _on_message(self, rank: int, msg: Tuple[Any, ...]) -> None:
        if msg[0] == "resume?" and self._rescales and "seconds_to_resume" not in self._rescales[-1]:
            got = self._new_group.setdefault(msg[3], set())
            got.add(rank)
            r = self._rescales[-1]
            if len(got) == self.executors == r["to"]:
                with self._cond:
                    r["seconds_to_resume"] = round(time.monotonic() - r["_asked_at"], 3)
                    self._cond.notify_all()
        if self._ck is not None and self._ck.on_message(rank, msg, self.executors):
            return
        kind = msg[0]
        if kind.startswith("ctl-"):
            if self._ctl is not None:
                self._ctl.on_message(msg)
            return
        warn = None
        with self._cond:
            if kind == "rows":
                _, _, gw, data = msg
                if data is not None:
                    self._pending.append(from_ipc(data))
                self._gw[rank] = max(self._gw[rank], gw)
                self._take()
            elif kind == "watermark":
                self._gw[rank] = max(self._gw[rank], msg[2])
            elif kind == "latency":
                for s, e, lat, rows in msg[2]:
                    self._latencies.append((s, e, lat, rows))
                    self._rows += rows
                    self.live.observe_window(s, e, lat, rows)
            elif kind == "metrics":
                self.live.update_executor(rank, msg[2])
                if self._ctl is not None:  # rebalance's choice and status(): per-rank load, leadership
                    self._ctl.on_message(msg)
                self._follow[rank] = (int(msg[2].get("map_version") or 0),
                                      int(msg[2].get("held_partitions") or 0))
                if self._freeze is not None and self._moved_everywhere(self._freeze_version):
                    self._freeze = None  # every hand-over merged and its windows sent: go on
                    self._take()
            elif kind == "late":
                self._late_live += msg[2]
                for s, e, c in msg[3]:
                    self._late_by_window[(s, e)] = self._late_by_window.get((s, e), 0) + c
            elif kind == "done":
                self._gw[rank] = DONE
                self._done.add(rank)
                if callable(self._sink):
                    self._take()
                self._cond.notify_all()
            # late records not yet warned about: now, or with a later message
            # (watermarks keep coming) once the interval has passed
            if self._late_live > self._late_warned and \
                    time.monotonic() - self._late_warned_at >= self.late_warning_interval:
                self._late_warned_at, self._late_warned = time.monotonic(), self._late_live
                warn = self._late_live
        if warn:
            self._warn_late(warn)

    def _late_records(self) -> int:
        return self._late_final if self._late_final is not None else self._late_live

    def _warn_late(self, count: int, final: bool = False) -> None:
        where = (f"the late rows are in {self._late_output}" if self._late_output is not None
                 else "or see late_output=")
        log.warning("slash.spark.stream: %s%s late record(s) not applied (older than the watermark "
                    "minus lateness=%d ms); raise lateness= %s", "in all, " if final else "",
                    f"{count:,}", self._lateness_ms, where)

    def _committed(self, tables: List[pa.Table], label: str) -> None:
        """With checkpoint=: the windows a committed checkpoint (or the final
        flush) covers, whole, go to the sink labelled with its id."""
        with self._cond:
            self._pending.extend(tables)
            self._take(DONE, label)
            self._output_after_rescale()

    def _observe(self, wins: List[Tuple[int, int, int]], now_ms: int) -> None:
        """With checkpoint= and a directory sink: windows made visible at ``now_ms``."""
        with self._cond:
            if wins:
                self._output_after_rescale()
            for s, e, rows in wins:
                self._latencies.append((s, e, now_ms - e, rows))
                self._rows += rows
                self.live.observe_window(s, e, now_ms - e, rows)

    def _take(self, upto: Optional[int] = None, label: Optional[str] = None) -> None:
        """With the lock held: moves every complete window (all ranks passed
        its end) from the pending rows to the sink's queue, oldest first, one
        table per window; after a sink failure, to the undelivered list.
        ``label``: the checkpoint id the windows carry in their metadata."""
        if not self._pending:
            return
        if upto is None:
            upto = min(self._gw)
            if self._freeze is not None:  # a rebalance in progress (see rebalance())
                upto = min(upto, self._freeze)
        table = pa.concat_tables(self._pending)
        we = table.column("window_end").to_numpy()
        ready = we < upto if upto != DONE else np.ones(len(we), bool)
        if not ready.any():
            return
        out = table.filter(pa.array(ready))
        rest = table.filter(pa.array(~ready))
        self._pending = [rest] if rest.num_rows else []
        out = out.sort_by([("window_end", "ascending"), ("window_start", "ascending")])
        ws, wend = out.column("window_start").to_numpy(), out.column("window_end").to_numpy()
        cut = np.flatnonzero((np.diff(ws) != 0) | (np.diff(wend) != 0)) + 1
        # after a sink failure, or once the delivery thread ended, nothing takes the queue
        dest = self._undelivered if self._sink_error is not None or self._stage_over else self._queue
        if label is not None:
            out = add_metadata(out, label)
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(ws)]):
            dest.append(out.slice(int(lo), int(hi - lo)))
        self._cond.notify_all()

    def _deliver(self) -> None:
        """The delivery thread: hands each queued window to the sink, outside
        the lock, until the stage is over and the queue empty, or the sink
        raised (then the stream is asked to stop)."""
        while True:
            with self._cond:
                while not self._queue and not self._stage_over:
                    self._cond.wait()
                if not self._queue:
                    return
                w = self._queue.popleft()
            s, e = int(w.column("window_start")[0].as_py()), int(w.column("window_end")[0].as_py())
            now = int(time.time() * 1000)  # the emit time: when the sink gets the window
            try:
                self._sink(w)  # type: ignore[operator]
            except BaseException as exc:  # noqa: BLE001 -- any failure of the user's sink stops the stream
                err = SinkFailed(f"slash.spark.stream: the sink raised on window [{s}, {e}): "
                                 f"{type(exc).__name__}: {exc}; the stream stopped, and the windows the "
                                 "sink did not accept are in StreamHandle.undelivered()")
                err.window = (s, e)
                err.__cause__ = exc
                with self._cond:
                    self._sink_error = err
                    self._undelivered = [w, *self._queue, *self._undelivered]
                    self._queue.clear()
                log.error("%s", err)
                self._send_stop()
                return
            self.live.observe_window(s, e, now - e, w.num_rows)
            with self._cond:
                self._latencies.append((s, e, now - e, w.num_rows))
                self._emitted.append((s, e))
                self._rows += w.num_rows

    def _send_stop(self) -> None:
        with self._stop_lock:  # two senders on one connection would interleave bytes
            if self._stop_sent or self._rdv is None:
                return
            self._stop_sent = True
            self._rdv.send_all(("stop",))

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
        grow or shrink): a checkpoint at the next epoch boundary, the
        current barrier job stops right after it, and the next barrier job
        starts with ``n`` executors from it. Output stays exactly-once (the
        directory sink holds each window once; a callable sink gets each
        window once): windows fired before the cut are published with that
        checkpoint, the others fire in the new group. A RateSource's batches
        not yet taken are dealt to the new ranks (:meth:`RateSource.resplit`),
        as are a DirectorySource's row groups not yet read and the files
        still to come (:meth:`DirectorySource.resplit`).

        Returns when every rank of the new group asked where to resume:
        ``{"from", "to", "checkpoint", "seconds_to_resume"}`` (from this call);
        ``metrics["rescales"]`` later adds ``seconds_to_first_output`` (this
        call to the first window published after the new group resumed: the
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
        _env.check_slots(self._spark, n, self._slots_wait)
        with self._cond:
            if self._rescale_to is not None or (self._rescales and
                                                "seconds_to_resume" not in self._rescales[-1]):
                raise InvalidState("rescale(): another rescale is in progress")
            if self._stop_sent:
                raise InvalidState("rescale(): the stream is stopping")
            self._rescale_to = n
            entry: Dict[str, Any] = {"from": self.executors, "to": n, "_asked_at": time.monotonic()}
            self._rescales.append(entry)
        self.live.event(f"rescale {self.executors} -> {n} asked")
        self._send_stop()
        with self._cond:
            if not self._cond.wait_for(lambda: "seconds_to_resume" in entry or self._stage_over or
                                       self._error is not None, timeout):
                raise Timeout(f"rescale to {n} executors: the new group did not resume within "
                              f"{timeout} s")
        if "seconds_to_resume" not in entry:
            raise InvalidState(f"rescale to {n} executors: the stream ended first"
                               + (f" ({self._error})" if self._error is not None else ""))
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
        with self._cond:
            self._rescales[-1]["checkpoint"] = ck.committed
            self.executors = n
            self._gw = [NEVER] * n
            self._done.clear()
            self._rescale_to = None
            self._stop_sent = False
        if self._ctl is not None:
            self._ctl.executors = n
        self._next_group()
        self._rdv.errors.clear()
        self._rdv.lost.clear()
        self._rdv.n = n
        ck.store.executors = n
        ck.rescaling = True
        with self.live._lock:
            self.live.executors = n
            for r in [r for r in self.live._exec if r >= n]:
                self.live._exec.pop(r, None)
                self.live._rates.pop(r, None)
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

    def update(self, filter: Union[None, str, Sequence[str]] = None, *,
               drop_filter: Union[None, str, Sequence[str]] = None, clear_filters: bool = False,
               aggregate: Union[None, str, Sequence[str]] = None,
               lateness: Union[None, int, str] = None, timeout: float = 60.0) -> Dict[str, Any]:
        """Changes the running query's logic from the next window boundary on
        (the rule for T, and what cannot change: docs/control.md).

        ``filter``: each replaces the filters on its column or adds one;
        ``drop_filter``: columns whose filters are removed; ``clear_filters``:
        remove all first. Every task pauses its pushes (serving its channels)
        for one round trip through the driver while T is agreed. Returns
        ``version``, ``effective_from_ms`` (T), ``max_event_time_seen_ms``,
        ``agreed_ms`` and the new ``filters``. A filter on a missing column
        raises :class:`SchemaError` naming it; ``aggregate`` and ``lateness``
        raise :class:`NotSupported` saying why. With ``checkpoint=`` every
        checkpoint records the versions agreed so far: a restart (a failed
        task, a rescale, the stream started again on the directory)
        re-applies them, so the replay after the cut follows the same logic
        as the run without the failure."""
        if self._ctl is None or not self.running:
            raise InvalidState("StreamHandle.update: the stream is not running")
        args = {k: v for k, v in {"filter": filter, "drop_filter": drop_filter,
                                  "clear_filters": clear_filters, "aggregate": aggregate,
                                  "lateness": lateness}.items() if v not in (None, False, [], ())}
        r = self._ctl.submit(args)
        deadline = time.monotonic() + timeout
        while not r.done.is_set():
            rdv = self._rdv
            with self._cond:  # every task of the group reported: past where to resume
                resumed = len(self._follow) == self.executors
            if rdv is not None and rdv.started_ms is not None and resumed and \
                    len(rdv._members) == self.executors:  # every task can be reached
                self._ctl.service()
            if not self.running:
                self._ctl.close()
            elif time.monotonic() > deadline:
                raise Timeout(f"StreamHandle.update: not agreed within {timeout} s")
            r.done.wait(0.005)
        return self._ctl.outcome(r)

    def _logic(self) -> Tuple[List[Tuple[int, Any]], List[Dict[str, Any]]]:
        """The logic versions agreed so far (1, 2, ...): [(start, query)] for
        the tasks of a restarted group, [{"from_ticks", "args"}] for a
        checkpoint's manifest (see :mod:`slash.spark._stream_ckpt`), as
        :class:`slash.control_logic.LogicUpdates` keeps them."""
        updates = self._ctl.updates if self._ctl is not None else None
        if updates is None:
            return [], []
        versions, record = updates.versions_and_record()
        return list(versions), record

    def _restore_logic(self, record: Sequence[Dict[str, Any]]) -> None:
        """A stream started again on a checkpoint directory: the versions
        its newest manifest records, agreed again on the driver (the tasks
        get them with where to resume)."""
        assert self._ctl is not None and self._ctl.updates is not None
        self._ctl.updates.restore(list(record))

    def rebalance(self, moves: Union[None, str, Dict[int, int]] = None, *,
                  from_rank: Optional[int] = None, to_rank: Optional[int] = None,
                  timeout: float = 60.0) -> Dict[str, Any]:
        """Moves leadership of key partitions in the running barrier group,
        live (no checkpoint, no restart: unlike :meth:`rescale`, the group
        keeps its executors and only the moved partitions pause for their
        hand-over; see docs/elastic.md).

        ``moves`` ({partition: rank} or ``"P:R,P:R"``) explicitly; else half
        the partitions ``from_rank`` leads go to ``to_rank``, each chosen
        from the executors' latest metrics when not given (the leader with
        the most merge time, then delta bytes received, to the least loaded
        one), as ``slash ctl rebalance`` does (:func:`slash.control_moves.rebalance_spec`).
        Rank 0's task applies the moves (``Executor.move_partitions``); this
        returns once every executor reported the new leader map version:
        ``{"moves": {"p": rank}, "map_version": v}``. With ``checkpoint=``
        the next checkpoint keeps the moved map (a restart with the same
        executor count resumes with it; a rescale starts from partition mod
        N, each partition's state merged into its new leader).

        Raises :class:`InvalidArgument` naming a partition outside
        0..partitions-1 or a rank outside 0..executors-1,
        :class:`InvalidState` when the stream is not running (or is
        rescaling, or rank 0 has read all of its input), and
        :class:`Timeout` after ``timeout`` s."""
        ctl = self._ctl
        if ctl is None or not self.running or self._stop_sent:
            raise InvalidState("StreamHandle.rebalance: the stream is not running")
        if self._rescale_to is not None or (self._rescales and
                                            "seconds_to_resume" not in self._rescales[-1]):
            raise InvalidState("StreamHandle.rebalance: the stream is rescaling; retry once "
                               "rescale() returned")
        groups = self._groups
        if moves not in (None, "", {}):
            parsed = parse_moves(moves)
            bad = sorted(p for p in parsed if p >= self._partitions)
            if bad:
                raise InvalidArgument(f"rebalance: partition {bad[0]} is not in "
                                      f"0..{self._partitions - 1} (the stream has "
                                      f"{self._partitions} key partitions)")
            moves = parsed  # type: ignore[assignment]
        deadline = time.monotonic() + timeout
        with self._cond:
            # a moved partition fires nothing from its old leader's switch to its new leader's
            # merge of the hand-over, while the group watermark goes on: a callable sink gets no
            # window ending after what every rank had passed now until the move is over
            if self._ck is None:
                f = min(self._gw)
                self._freeze = f if self._freeze is None else min(self._freeze, f)
                self._freeze_version = 1 << 62  # the version is not known yet
        try:
            got = ctl.rebalance({"moves": moves, "from_rank": from_rank, "to_rank": to_rank},
                                timeout=timeout)
        except BaseException:
            with self._cond:  # nothing moves (or the run ended): release once nothing is held
                self._freeze_version = max((v for v, _ in self._follow.values()), default=0)
                if self._freeze is not None and self._moved_everywhere(self._freeze_version):
                    self._freeze = None
                    self._take()
            raise
        version = int(got["map_version"])
        with self._cond:
            self._freeze_version = version
        # every executor switches at its own next epoch end and reports its map in its metrics;
        # done when every one follows the version and no hand-over is left
        while True:
            with self._cond:
                if self._groups != groups:
                    raise InvalidState("StreamHandle.rebalance: the barrier job restarted from a "
                                       "checkpoint before every executor followed the moves; "
                                       "the new group leads by the checkpoint's map (see "
                                       "status()['led_partitions'])")
                if self._moved_everywhere(version):
                    break
                late = {r: self._follow.get(r) for r in range(self.executors)}
            if not self.running:
                raise InvalidState(f"StreamHandle.rebalance: the stream ended before every "
                                   f"executor followed leader map version {version} "
                                   f"((version, held partitions) per rank: {late})")
            if time.monotonic() > deadline:
                raise Timeout(f"StreamHandle.rebalance: not every executor followed leader map "
                              f"version {version} within {timeout} s ((version, held "
                              f"partitions) per rank: {late})")
            time.sleep(0.02)
        self.live.event(f"rebalance: leader map version {version}, moves {got['moves']}")
        log.info("slash.spark.stream: every executor follows leader map version %d (moves %s)",
                 version, got["moves"])
        return got

    def _next_group(self) -> None:
        """The stage thread, before the next barrier job (a restart or a
        rescale): rebalance and status() address the new group, whose ranks
        have reported nothing and read all of nothing yet."""
        with self._cond:
            self._follow.clear()
            self._groups += 1
        if self._ctl is not None:
            self._ctl.new_group("StreamHandle.update: the barrier job restarted from a checkpoint "
                                "while the update was being agreed; nothing changed, send it again")

    def _moved_everywhere(self, version: int) -> bool:
        """With the lock held: every rank's latest report follows map ``version``
        (or a later one) and holds no partition for a hand-over."""
        return all(self._follow.get(r, (-1, 1))[0] >= version and not self._follow[r][1]
                   for r in range(self.executors))

    def status(self) -> Dict[str, Any]:
        """What ``slash ctl status`` shows of a run, for this stream: executors,
        epoch, watermark, records, the leader map version and the partitions
        each rank leads (``led_partitions``, from the latest metrics), the
        query's logic versions and each executor's latest metrics."""
        if self._ctl is None:
            raise InvalidState("StreamHandle.status: the stream has not started")
        return self._ctl.status()

    def _close_server(self) -> None:
        if self._server is not None:
            self._server.close()

    @property
    def emitted_windows(self) -> List[Tuple[int, int]]:
        """(window_start, window_end) in the order the callback got them."""
        with self._lock:
            return list(self._emitted)

    def undelivered(self) -> List[pa.Table]:
        """After the sink raised: the windows it did not accept, one table per
        window in event-time order (the one it raised on first); complete
        once :meth:`stop` or :meth:`wait` returned or raised. Otherwise empty,
        unless a rank's last rows reached the driver only after the stage's end
        (then logged as a warning)."""
        with self._lock:
            return list(self._undelivered)

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
            self._send_stop()
        return self.wait(timeout)

    def __enter__(self) -> "StreamHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.running:
            self.stop()
