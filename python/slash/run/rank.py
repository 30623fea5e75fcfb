"""One rank's loop for a window aggregation, with its features as handlers.

:class:`RankLoop` owns one executor and runs one life cycle: (restore, by
the :class:`Checkpointing` feature's caller, :func:`restore`), read the next
(position, batch or Watermark) from its input, push it or advance the
watermark, let each feature act, serve the driver's messages, finish. A
feature is a small object whose ``install(loop)`` registers what it does
with the loop's hook lists, as Redis' ``ae.c`` handlers register with its
event loop; the loop never tests which features are on:

* ``before_push(item)`` / ``on_push()`` / ``on_advance(ticks)``: around a
  push or a watermark advance (realtime pacing; positions; the live agent);
* ``before_take()`` / ``on_fired(batches)`` / ``after_take()``: each time
  the executor was called (a push, an advance, a wait's poll): checkpoint
  cuts, the fired windows' reports, checkpoint asks, metrics reports;
* ``after_item()``: once per item (the test kill hook, progress);
* ``handlers[kind](msg)``: the driver's messages, one dispatch
  (:meth:`RankLoop.dispatch`) for the loop's polls and for the messages a
  paused control or scale request meets;
* ``before_finish()`` / ``after_finish()`` / ``closers``; ``on_stop()``
  instead of the finish when the driver stopped a stream (``stopped``) and a
  feature ends it its own way (a stream's last checkpoint, no finish).

:meth:`RankLoop.wait` serves the executor (and every per-call handler) for
a while: a paced input's sleep, a standby's idle time.

Invariant: the loop's result is every window this executor fired, once
(features that hold results back, the checkpoint's pending segment, hand
them to ``out`` themselves: ``collect``).
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import os
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np
import pyarrow as pa

from slash.checkpoint import Checkpoint
from slash.run.rank_ckpt import AskSchedule, LateRows, write_image
from slash.compute import pc
from slash.errors import InvalidState, SystemFailure
from slash.executor import Executor, GroupConfig
from slash.query import Query
from slash.run.ckpt import Writer, checkpoint_leaders, part_name, read_partitions
from slash.run.faults import kill_after_cuts, kill_in_write, kill_point
from slash.run.gc import no_cyclic_gc
from slash.run.inputs import source_nullable
from slash.run.pacing import RatePacer
from slash.run.plan import PROGRESS_S, AttemptPlan
from slash.run.protocol import Metrics, Progress, Windows
from slash.sources import (FileSource, Position, Work, malformed_records, read_from,
                           watermarks_from_source)

log = logging.getLogger(__name__)

_NEVER = -(1 << 63)

#: ex.poll's longest single wait inside :meth:`RankLoop.wait`: a bound on how
#: late a window is handed out after it fired when the core has nothing else
#: to say (poll itself returns as soon as a result is ready)
WAIT_POLL_S = 0.05

Item = Tuple[Optional[Position], Any]


class Advance(NamedTuple):
    """A stream source's watermark advance, in the state's ticks (a
    :class:`slash.sources.StreamSource`'s item): the epoch ends with it."""
    ticks: int


class SideBatch(NamedTuple):
    """A window join's input item: rows of one side (``"left"``/``"right"``)."""
    side: str
    batch: pa.RecordBatch

    @property
    def num_rows(self) -> int:
        return self.batch.num_rows


def open_executor(query: Query, source: Any, rank: int, addresses: List[str], listener: Any,
                  group: GroupConfig, token: str, partitions: int) -> Executor:
    """The executor of rank ``rank`` for ``query`` over ``source`` (a join's: ``(left, right)``)."""
    if isinstance(source, tuple):  # a join's (left, right)
        state = query.join_config(source[0].schema, source[1].schema, partitions)
    else:
        nullable = source_nullable(source, [*query.key, *query.value_columns])
        state = query.state_config(source.schema, partitions, nullable)
    sides = source if isinstance(source, tuple) else (source,)
    return Executor(listener, rank, addresses, state, group, token=token,
                    bounded=all(watermarks_from_source(s) for s in sides))


_KEEP: Any = object()  # RankLoop.push without a position: the last one stays


class RankLoop:
    """One rank's loop (see the module doc). Use as a context manager: its
    exit closes the features (``closers``) and then the executor."""

    def __init__(self, query: Query, source: Any, ex: Executor, link: Any = None) -> None:
        self.query, self.source, self.ex, self.link = query, source, ex, link
        self.rank = ex.rank
        sides = source if isinstance(source, tuple) else (source,)  # a join's: (left, right)
        self.schema = sides[0].schema if len(sides) == 1 else None
        self.bounded = all(bool(getattr(s, "bounded", True)) for s in sides)
        #: the executor's watermark moves by the sources' markers alone (bounded or declared)
        self.source_watermarks = all(watermarks_from_source(s) for s in sides)
        #: pushes one batch: the aggregation's (below), or a join backend's (:class:`JoinPush`)
        self.push_item: Callable[[Any], None] = self._push_batch
        #: each updates the final metrics (:meth:`metrics`)
        self.final: List[Callable[[Dict[str, Any]], None]] = []
        #: an aggregation's batch prepared for its push (a control feature's logic versions)
        self.prepare: Callable[[Any], Tuple[Any, Any]] = getattr(query, "prepare_selected", None)
        #: the input columns to read (a control feature's newest logic version reads more)
        self.columns: Callable[[], Any] = lambda: query.input_columns
        self.late: Optional[LateRows] = None  #: the late rows, when ``late_output=`` wants them
        self.out: List[pa.RecordBatch] = []
        self.collect: Callable[[List[pa.RecordBatch]], None] = self.out.extend
        self.result_schema = ex.result_schema()
        self.pushes = 0   # push calls, as the core counts them
        self.records = 0  # records read
        self.pos: Optional[Position] = None  # the input's position after the latest push
        self.call_t = time.monotonic()  # when the executor call that may cut began
        self.before_push: List[Callable[[Any], None]] = []
        self.on_push: List[Callable[[], None]] = []
        self.on_advance: List[Callable[[int], None]] = []
        self.before_take: List[Callable[[], None]] = []
        self.on_fired: List[Callable[[List[pa.RecordBatch]], None]] = []
        self.after_take: List[Callable[[], None]] = []
        self.after_item: List[Callable[[], None]] = []
        self.after_serve: List[Callable[[], None]] = []
        self.before_finish: List[Callable[[], None]] = []
        self.after_finish: List[Callable[[], None]] = []
        self.closers: List[Callable[[], None]] = []
        self.on_stop: List[Callable[[], None]] = []
        #: the driver stopped the input (a stream's Stop): the loop ends after the current item
        self.stopped = False
        #: the cyclic collector off while the loop runs (not for a stream that runs for days)
        self.guard_gc = True
        #: parts of a metrics snapshot, each feature's (called only when a report is sent)
        self.status: List[Callable[[], Dict[str, Any]]] = []
        self.handlers: Dict[Any, Callable[[Any], None]] = {"epoch": self._epoch}

    def use(self, *features: Any) -> "RankLoop":
        """Installs each feature given (None: left out)."""
        for f in features:
            if f is not None:
                f.install(self)
        return self

    def __enter__(self) -> "RankLoop":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            for close in self.closers:
                close()
        finally:
            self.ex.close()

    # -- the loop --------------------------------------------------------------------------------
    def run(self, items: Iterator[Item]) -> pa.Table:
        """Pushes ``items`` and finishes; returns the windows this executor
        fired (key column still named ``key``, bounds in the state's unit)."""
        ex, query = self.ex, self.query
        with no_cyclic_gc() if self.guard_gc else contextlib.nullcontext():
            for pos, item in items:
                self.call_t = time.monotonic()
                if isinstance(item, (pa.RecordBatch, pa.Table, SideBatch)):
                    self.push(item, pos)
                elif isinstance(item, Advance):
                    ex.advance_watermark(item.ticks)
                    for a in self.on_advance:
                        a(item.ticks)
                    ex.end_epoch()
                else:  # a Watermark: no later row is older than its value
                    wm = query.watermark_ticks(getattr(item, "value", None), self.schema)
                    if wm is not None:
                        ex.advance_watermark(wm)
                        for a in self.on_advance:
                            a(wm)
                        if not self.bounded:  # a stream's promise may close a window: end the
                            ex.poll(0)        # epoch now, not at the next record
                self.service()
                for h in self.after_item:
                    h()
                self.serve()
                if self.stopped:
                    break
            for h in self.before_finish:
                h()
            if self.stopped and self.on_stop:
                for h in self.on_stop:
                    h()
                return pa.Table.from_batches(self.out, schema=self.result_schema)
            ex.finish()
            self.service()
            for h in self.after_finish:
                h()
        self._log_end()
        return pa.Table.from_batches(self.out, schema=self.result_schema)

    def push(self, item: Any, pos: Any = _KEEP) -> None:
        """Pushes one batch and counts it (``pos``: the input's position
        after it; left out, the last one stays): the loop's push, and a feature's
        that must push rows between items (a live join rank's rows in hand
        at a scale's prepare), so the core's push count and the loop's agree."""
        for h in self.before_push:
            h(item)
        self.push_item(item)
        self.pushes += 1
        self.records += item.num_rows
        if pos is not _KEEP:
            self.pos = pos
        for h in self.on_push:
            h()

    def _push_batch(self, item: Any) -> None:
        b, skip = self.prepare(item)
        if self.late is not None:
            self.late.add(self.pushes + 1, self.ex.push_batch(b, skip=skip, return_late=True))
        else:
            self.ex.push_batch(b, skip=skip)

    def take(self) -> List[pa.RecordBatch]:
        """The windows fired since the last take: to every ``on_fired`` handler, then collected."""
        got = self.ex.results()
        for h in self.on_fired:
            h(got)
        self.collect(got)
        return got

    def service(self) -> None:
        """After every executor call: cuts, the fired windows, reports."""
        for h in self.before_take:
            h()
        self.take()
        for h in self.after_take:
            h()

    def wait(self, seconds: float) -> bool:
        """Serves the executor (and :meth:`service`) for ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.call_t = time.monotonic()
            self.ex.poll(min(WAIT_POLL_S, left))
            self.service()

    def idle(self, seconds: float) -> bool:
        """A quiet input's wait: the executor served (:meth:`wait`: epochs,
        cuts, windows fired by the watermark) and the driver's messages
        (:meth:`serve`) for ``seconds``. False: the input goes on."""
        self.wait(seconds)
        self.serve()
        return False

    def source_kw(self, method: Callable[..., Any]) -> Dict[str, Any]:
        """``{"wait": self.idle}`` when ``method`` (a source's ``read``,
        ``read_from`` or ``read_work``) takes ``wait``, else ``{}``: the one
        place where every read path gives a source that can be quiet the
        loop's wait, so a silent topic does not stop epochs, cuts or windows."""
        try:
            params = inspect.signature(method).parameters
        except (TypeError, ValueError):
            return {}
        return {"wait": self.idle} if "wait" in params else {}

    def serve(self) -> None:
        """The driver's messages waiting on the link, each to its handler."""
        if self.link is not None:
            while self.link.poll():
                self.dispatch(self.link.get())
        for h in self.after_serve:
            h()

    def dispatch(self, msg: Any) -> None:
        """One driver message to the feature registered for its kind."""
        h = self.handlers.get(msg[0] if isinstance(msg, tuple) and msg else None)
        if h is None:
            raise SystemFailure(f"executor rank {self.rank}: unexpected message from the driver "
                                f"{msg!r:.80}")
        h(msg)

    def _epoch(self, msg: Any) -> None:
        # the latency controller's epoch length: in force by the next epoch end
        self.ex.set_epoch(msg.epoch_ms or None, msg.epoch_bytes or None)
        log.info("executor %d: epochs of %s ms / %s bytes from now on", self.rank,
                 msg.epoch_ms, msg.epoch_bytes)

    def metrics(self) -> Dict[str, Any]:
        """The executor's final metrics, ``records_read`` and (with late rows wanted) ``late_rows``."""
        m = dict(self.ex.metrics)
        m["records_read"] = self.records
        m["malformed_records"] = malformed_records(self.source)
        if self.late is not None:  # every late row of this attempt (the worker sends them)
            m["late_rows"] = self.late.found()
        for f in self.final:
            f(m)
        return m

    def _log_end(self) -> None:
        m, n = self.ex.metrics, self.ex.size
        log.info("executor %d/%d: %d records in, %d epochs, %d late, %d null times, %d rows out",
                 self.rank, n, m["records_in"], m["epochs"], m["late_records"],
                 m["null_time_records"], m["rows_emitted"])
        if self.bounded and m["late_records"]:
            log.warning("executor %d/%d: %d record(s) of a bounded input came after the watermark "
                        "their source had promised (row-group statistics that do not match the "
                        "data?) and were not applied", self.rank, n, m["late_records"])
        elif self.source_watermarks and m["late_records"]:
            log.warning("executor %d/%d: %d record(s) of the stream came after the watermark "
                        "their source had promised (later than its lateness allows, or from a "
                        "partition that woke up after it was idle) and were not applied",
                        self.rank, n, m["late_records"])


# ---- inputs --------------------------------------------------------------------------------------
def source_time(source: Any, query: Query) -> Optional[str]:
    """The time column to pass to the ``read`` of a source whose Watermark
    promises move the executor's watermark (:func:`watermarks_from_source`), if it takes one."""
    if not watermarks_from_source(source):
        return None
    try:
        params = inspect.signature(source.read).parameters
    except (TypeError, ValueError):
        return None
    return query.time if "time" in params else None


def split_items(loop: RankLoop, n: int, start: Optional[Position] = None,
                work: Optional[Work] = None, rate: Optional[float] = None,
                fixed: bool = True, positions: bool = False) -> Iterator[Item]:
    """A fixed split's items (split ``loop.rank`` of ``n``; or ``work`` in
    global terms) with the position after each, from ``start``. Unless
    ``fixed``, the input is read again from the position reached when
    ``loop.columns()`` changes (a new logic version reads more columns);
    ``rate``: this rank's records/s (the loop served while it waits). Without
    any of these and without ``positions`` (a checkpoint's), a source whose
    ``read`` takes ``wait`` (a paced stream) is given the loop's wait
    instead of sleeping (:meth:`RankLoop.source_kw`, on every path), and
    positions are None."""
    source, query, rank = loop.source, loop.query, loop.rank
    time_col = source_time(source, query)
    if fixed and not rate and work is None and start is None and not positions:
        kw = loop.source_kw(source.read)
        if time_col is not None:
            kw["time"] = time_col
        for item in source.read(rank, n, query.input_columns, **kw):
            yield None, item
        return
    yield from paced(_reads(loop, n, time_col, start, work, fixed), loop, rate)


def _reads(loop: RankLoop, n: int, time_col: Optional[str], start: Optional[Position],
           work: Optional[Work], fixed: bool) -> Iterator[Item]:
    source, rank = loop.source, loop.rank
    cols, pos = loop.columns(), start
    while True:
        reopened = False
        items = (source.read_work(work, cols, time=time_col, start=pos,
                                  **loop.source_kw(source.read_work)) if work is not None
                 else read_from(source, rank, n, cols, time_col, pos,
                                **loop.source_kw(getattr(source, "read_from", source.read))))
        for pos, item in items:
            yield pos, item
            if not fixed and loop.columns() != cols:
                cols, reopened = loop.columns(), True
                break
        if not reopened:
            return


def paced(items: Iterator[Item], loop: RankLoop, rate: Optional[float]) -> Iterator[Item]:
    """``items`` no faster than ``rate`` records/s (this rank's; None: as
    they come), the loop served while it waits."""
    if not rate:
        yield from items
        return
    throttle = RatePacer(rate)
    for pos, item in items:
        yield pos, item
        throttle.after(getattr(item, "num_rows", 0), lambda s: (loop.wait(s), loop.serve()))


class JoinPush:
    """A window join's push (the join backend): each :class:`SideBatch`'s
    rows prepared for its side - a null key never matches (SQL) and is left
    out, a null time is in no window and is counted (``null_time_records``) -
    and pushed to that side."""

    def __init__(self) -> None:
        self.dropped = 0
        self.rows = 0  # rows pushed (the rows a live rank's agent pushes at a prepare too)

    def install(self, loop: RankLoop) -> None:
        query, ex = loop.query, loop.ex
        schemas = {"left": loop.source[0].schema, "right": loop.source[1].schema}

        def push(item: SideBatch) -> None:
            b, gone = query.prepare_counted(item.side, item.batch, schemas[item.side])
            self.dropped += gone
            self.rows += item.num_rows
            ex.push_side_batch(item.side, b)
        loop.push_item = push
        loop.final.append(lambda m: m.__setitem__("null_time_records", self.dropped))


# ---- features ------------------------------------------------------------------------------------
class Control:
    """The control protocol's rank side (:class:`slash.control.logic.ExecutorControl`):
    its logic versions filter each batch, its requests are served between
    pushes, rank 0's rebalance moves are applied when their turn comes."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl

    def install(self, loop: RankLoop) -> None:
        ctl = self.ctl
        loop.prepare = ctl.prepare
        loop.columns = lambda: ctl.plan.input_columns
        loop.handlers["ctl"] = lambda msg: ctl.handle(msg, loop.ex)
        loop.handlers["move"] = ctl.moves.add
        ctl.other = loop.dispatch  # what a paused request meets goes to the one dispatch
        loop.after_serve.append(lambda: ctl.moves.pending and ctl.moves.apply(loop.ex))
        loop.before_finish.append(ctl.input_done)

        def status() -> Dict[str, Any]:
            s = dict(ctl.status())
            if ctl.max_seen is not None:
                s["max_event_time_ms"] = ctl.max_seen // loop.ex.state.ticks_per_ms
            return s
        loop.status.append(status)


class Moves:
    """Rank 0's rebalance requests without the control protocol (a
    checkpointed group's, :class:`slash.control.moves.MoveRequests`)."""

    def __init__(self, moves: Any) -> None:
        self.moves = moves

    def install(self, loop: RankLoop) -> None:
        moves = self.moves
        loop.handlers["move"] = moves.add
        loop.after_serve.append(lambda: moves.pending and moves.apply(loop.ex))
        loop.before_finish.append(lambda: moves.fail_all(InvalidState(
            "rebalance: rank 0 has read all of its input; leadership no longer moves")))


class Scaling:
    """A live-scalable rank (:class:`slash.run.live.scale.ScaleAgent`): it takes
    the driver's scale requests and tells the agent its watermark."""

    def __init__(self, agent: Any, ctl: Any, restored: bool = False) -> None:
        self.agent, self.ctl, self.restored = agent, ctl, restored

    def install(self, loop: RankLoop) -> None:
        agent = self.agent
        agent.start(loop.ex, self.ctl, loop.source, loop.query.time, restored=self.restored)
        loop.handlers["scale"] = agent.handle
        loop.on_advance.append(agent.advanced)
        loop.status.append(lambda: {"standby": not agent.is_active})


class Report:
    """Live metrics (:class:`slash.metrics.Reporter`) every so often and
    once at the end, each feature's ``status`` part in them."""

    def __init__(self, reporter: Any, send: Callable[[Any], None], at_finish: bool = True) -> None:
        self.reporter, self.send, self.at_finish = reporter, send, at_finish

    def install(self, loop: RankLoop) -> None:
        """``at_finish`` False: no report at the finish (its owner sends the last one, :meth:`now`)."""
        self.loop = loop
        loop.after_take.append(lambda: (self.reporter.due() or loop.ex.finished and self.at_finish)
                               and self.now())

    def now(self) -> None:
        """A report now (a stream stopped without finishing sends its last one)."""
        loop = self.loop
        snap = self.reporter.snapshot(loop.ex)
        snap["records_read"] = loop.records
        snap["malformed_records"] = malformed_records(loop.source)
        snap["pid"] = os.getpid()  # which process is which rank (status per_executor)
        for part in loop.status:
            snap.update(part())
        self.send(Metrics(loop.rank, snap))


def fired_windows(batches: List[pa.RecordBatch], ticks_per_ms: int) -> List[Tuple[int, int, int]]:
    """(window_start ms, window_end ms, rows) of each window in fired
    executor results (bounds in ticks), in order of window end.

    >>> b = pa.record_batch({"window_start": [0, 0, 1000], "window_end": [1000, 1000, 2000]})
    >>> fired_windows([b], 1)
    [(0, 1000, 2), (1000, 2000, 1)]
    """
    if not batches:
        return []
    s = np.concatenate([b.column("window_start").to_numpy() for b in batches]) // ticks_per_ms
    e = np.concatenate([b.column("window_end").to_numpy() for b in batches]) // ticks_per_ms
    if not len(s):
        return []
    u, c = np.unique(np.stack([e, s], axis=1), axis=0, return_counts=True)
    return [(int(a), int(b), int(k)) for (b, a), k in zip(u, c)]


class FiredWindows:
    """A stream's fired windows as they fire (:class:`Windows`: the group
    watermark in ms up to which this rank fired everything, None once it
    finished, and the windows), whenever either changed: the driver's
    per-window latency."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        self.send = send
        self.told: Optional[int] = _NEVER
        self.gw: Optional[int] = None

    def install(self, loop: RankLoop) -> None:
        ex = loop.ex
        tpm = max(1, int(getattr(ex.state, "ticks_per_ms", 1) or 1))

        def before() -> None:  # the group watermark before taking: every window ending before it fired
            self.gw = ex.metrics["group_watermark"]

        def fired(got: List[pa.RecordBatch]) -> None:
            gw = self.gw
            mark = None if ex.finished else (_NEVER if gw is None or gw <= _NEVER else gw // tpm)
            if got or mark != self.told:
                self.told = mark
                self.send(Windows(loop.rank, mark, fired_windows(got, tpm)))
        loop.before_take.insert(0, before)
        loop.on_fired.append(fired)


class Realtime:
    """The input replayed at its event times (``realtime``): each batch is
    pushed no earlier than its latest time (:class:`slash.run.elastic.Pacer`),
    and with ``windows`` the windows fired are listed in the metrics
    (``windows``: ``[[window_end_ms, emit_ms, rows], ...]``, wall clock)."""

    def __init__(self, pacer: Any, windows: bool = True) -> None:
        self.pacer, self.windows = pacer, windows
        self.fired: List[List[int]] = []

    def install(self, loop: RankLoop) -> None:
        loop.before_push.append(
            lambda item: self.pacer.pace(loop.query, item, loop.wait, lambda: False))
        loop.status.append(self.pacer.snapshot)
        if not self.windows:
            return
        tpm = loop.ex.state.ticks_per_ms

        def fired(got: List[pa.RecordBatch]) -> None:
            now = int(time.time() * 1000)
            for b in got:
                if b.num_rows:
                    vc = pc.value_counts(b.column("window_end"))
                    for end, rows in zip(vc.field("values").to_pylist(),
                                         vc.field("counts").to_pylist()):
                        self.fired.append([end // tpm, now, rows])

        def status() -> Dict[str, Any]:
            got, self.fired = self.fired, []
            return {"windows": got}
        loop.on_fired.append(fired)
        loop.status.append(status)


class ProgressReport:
    """The records read, every PROGRESS_S (what a recovery replays)."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        self.send, self.last = send, time.monotonic()

    def install(self, loop: RankLoop) -> None:
        def progress() -> None:
            if time.monotonic() - self.last >= PROGRESS_S:
                self.last = time.monotonic()
                self.send(Progress(loop.rank, loop.records))
        loop.after_item.append(progress)


class SplitPositions:
    """A fixed split's positions at each push (and, given ``work`` in global
    terms, the work it has left: ``remaining(work, position)``, the source's,
    e.g. :meth:`FileSource.remaining`), for :class:`Checkpointing`."""

    def __init__(self, start: Optional[Position], work: Any,
                 remaining: Optional[Callable[[Any, Any], Any]] = None) -> None:
        self.start, self.work = start, work
        self.remaining = remaining or FileSource.remaining
        self.after: Dict[int, Optional[Position]] = {}

    def begin(self, loop: RankLoop) -> None:
        self.after = {loop.pushes: self.start}

    def note(self, loop: RankLoop) -> None:
        self.after[loop.pushes] = loop.pos

    def sync(self, loop: RankLoop) -> None:
        pass

    def at(self, pushes: int) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, bytes]]:
        info: Dict[str, Any] = {"position": self.after[pushes]}
        if self.work is not None:  # what is left of this rank's input, in global terms
            info["work"] = self.remaining(self.work, self.after[pushes])
        return info, {}, {}

    def forget_before(self, pushes: int) -> None:
        for k in [k for k in self.after if k < pushes]:
            del self.after[k]


class LivePositions:
    """A live-scalable rank's positions (:mod:`slash.run.recovery.live`): at each
    push count, the scale generations it can be described in, each with its
    work in global terms, the position in it and its active ranks."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.cands: Dict[int, List[Tuple[int, Work, Any, List[int]]]] = {}

    def begin(self, loop: RankLoop) -> None:
        a = self.agent
        self.cands = {loop.pushes: [(a.sid, a.work, None, list(a.active))]}

    def note(self, loop: RankLoop) -> None:
        a = self.agent
        self.cands[loop.pushes] = [(a.sid, a.work, a.pos, list(a.active))]

    def sync(self, loop: RankLoop) -> None:
        # a scale commit since the last push: the same push count is also described by
        # the new generation (its new work, nothing of it read)
        a, now = self.agent, self.cands[loop.pushes]
        if now[-1][0] != a.sid:
            now.append((a.sid, a.work, None, list(a.active)))

    def at(self, pushes: int) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, bytes]]:
        gens = {str(g): {"work": FileSource.remaining(w, pos), "active": act}
                for g, w, pos, act in self.cands[pushes]}
        return {"position": None, "live": gens}, {"gens": sorted(int(g) for g in gens)}, {}

    def forget_before(self, pushes: int) -> None:
        for k in [k for k in self.cands if k < pushes]:
            del self.cands[k]


def restore(ex: Executor, plan: AttemptPlan, n: int,
            spread: Optional[List[int]] = None) -> Optional[Checkpoint]:
    """The restore step: ``ex`` restored from ``plan.resume_id`` (None: a
    fresh start) by :func:`restore_from`. Returns the checkpoint."""
    if plan.resume_id is None:
        return None
    ck = plan.store().load(plan.resume_id)
    restore_from(ex, ck, n, plan.partitions, spread)
    return ck


def restore_from(ex: Executor, ck: Checkpoint, n: int, partitions: int,
                 spread: Optional[List[int]] = None) -> None:
    """``ex`` (rank ``ex.rank`` of a group of ``n``) restored from checkpoint
    ``ck``: every rank's meta, and every image of the partitions it leads
    under the leader map the ranks followed at the cut when the group has
    the checkpoint's size, else ``spread`` (default: partition mod n); every
    image of a partition is merged."""
    metas = [ck.read(f"rank-{r}.meta") for r in range(ck.executors)]
    leaders = checkpoint_leaders(ck, n, partitions)
    if leaders is None:
        leaders = spread
    lead = leaders if leaders is not None else [p % n for p in range(partitions)]
    ex.restore(metas, read_partitions(ck, lambda p: lead[p] == ex.rank), leaders)


class Checkpointing:
    """Checkpoint cuts (see :mod:`slash.run.recovery.checkpointed`): rank 0 asks for them
    (:class:`AskSchedule`), every rank writes its image on a background
    thread (:class:`Writer`) with its position at the cut (``positions``:
    :class:`SplitPositions`, :class:`LivePositions` or a join's: ``at(pushes)``
    gives (rank-<r>.json entries, report stats, files to write with the
    image)), the windows fired before the cut as its segment and the late
    rows found before it. A ``CheckpointNow`` from the driver asks at the
    next chance. The windows fired after the newest cut are held until the
    next one (``pending``). A partition's file is :func:`slash.run.ckpt.part_name`'s."""

    def __init__(self, plan: AttemptPlan, link: Any, positions: Any, pushes: int = 0,
                 records: int = 0) -> None:
        self.plan, self.link, self.positions = plan, link, positions
        self.base_pushes, self.base_records = pushes, records
        self.store = plan.store()
        self.pending: List[pa.RecordBatch] = []
        self.records_at: Dict[int, int] = {}

    def install(self, loop: RankLoop) -> None:
        plan, ex = self.plan, loop.ex
        self.loop = loop
        loop.pushes, loop.records = self.base_pushes, self.base_records
        self.records_at = {loop.pushes: loop.records}
        self.positions.begin(loop)
        self.writer = Writer(loop.rank)
        self.asks = AskSchedule(ex, plan.every, plan.next_id, loop.pushes)  # rank 0's
        self.kill_at = kill_point(loop.rank, plan.attempt)
        loop.late = LateRows() if plan.want_late else None
        loop.collect = self.pending.extend
        loop.handlers["checkpoint_now"] = lambda msg: self.asks.force()
        loop.on_push.append(self.pushed)
        loop.before_take.append(self.cuts)
        loop.after_take.append(self.ask)
        loop.after_item.append(self.kill)
        loop.after_finish.append(self.finished)
        loop.closers.append(self.writer.close)

    def pushed(self) -> None:
        self.records_at[self.loop.pushes] = self.loop.records
        self.positions.note(self.loop)

    def cuts(self) -> None:
        loop, ex, rank = self.loop, self.loop.ex, self.loop.rank
        self.positions.sync(loop)
        while True:
            img = ex.take_checkpoint()
            if img is None:
                break
            # the windows fired before the cut go with it; those the service thread
            # fired since (peers' later epochs) go with the next cut (split_at_cut)
            loop.take()
            self.pending, after = ex.results_at_cut(img, self.pending, take=False)
            version, leaders_now = ex.leader_map()  # the map this rank followed at the cut
            info = {"rank": rank, "pushes": img.pushes, "records": self.records_at[img.pushes],
                    "windows": sum(b.num_rows for b in self.pending),
                    "leader_map": {"version": version, "leaders": leaders_now}}
            more, stats, extra = self.positions.at(img.pushes)
            info.update(more)
            # the executor call holding the cut (alignment + the core's image), in the loop
            stats = {"cut_seconds": time.monotonic() - loop.call_t, **stats}
            self.writer.submit(write_image, self.store, self.link, rank, img, self.pending,
                               loop.result_schema, info, lambda p: part_name(p, rank),
                               kill_in_write(self.store, self.plan, self.kill_at, rank,
                                             loop.pushes), stats, extra,
                               loop.late.at_cut(img.pushes) if loop.late is not None else None)
            loop.out.extend(self.pending)
            self.pending = after
            loop.collect = self.pending.extend
            for k in [k for k in self.records_at if k < img.pushes]:  # older cuts are not needed
                del self.records_at[k]
            self.positions.forget_before(img.pushes)
            self.asks.cut(img.id)

    def ask(self) -> None:
        if self.loop.rank == 0 and not self.loop.ex.finished:  # a finished executor takes no asks
            self.asks.step(self.loop.pushes)

    def kill(self) -> None:
        k, loop = self.kill_at, self.loop
        if k is not None and not k[2] and loop.pushes >= k[0]:
            kill_after_cuts(loop.ex, self.store, self.plan, k, loop.rank, loop.pushes,
                            loop.service)

    def finished(self) -> None:
        self.writer.drain()  # every checkpoint this rank took is durable and reported
        self.loop.out.extend(self.pending)
        self.pending = []
        self.loop.collect = self.loop.out.extend
