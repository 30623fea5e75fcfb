"""One rank's loop for a window aggregation, with its features as handlers.

:class:`RankLoop` owns one executor and runs one life cycle: (restore, by
the :class:`slash.run.checkpointing.Checkpointing` feature's caller,
:func:`slash.run.checkpointing.restore`), read the next
(position, batch or Watermark) from its input, push it or advance the
watermark, let each feature act, serve the driver's messages, finish. A
feature is a small object whose ``install(loop)`` registers what it does
with the loop's hook lists, as Redis' ``ae.c`` handlers register with its
event loop; the loop never tests which features are on (they are
:mod:`slash.run.features`' and :mod:`slash.run.checkpointing`'s; a join's
push, :class:`JoinPush`, is here):

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
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import pyarrow as pa

from slash.errors import SystemFailure
from slash.executor import Executor, GroupConfig
from slash.query import Query
from slash.run.gc import no_cyclic_gc
from slash.run.inputs import source_nullable
from slash.run.pacing import RatePacer
from slash.run.rank_ckpt import LateRows
from slash.sources import Position, Work, malformed_records, read_from, watermarks_from_source

log = logging.getLogger(__name__)

#: a watermark before every event time (the core's NEVER)
NEVER = -(1 << 63)

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
