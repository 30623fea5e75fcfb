"""One Spark stream task's rank: a Slash executor kept running over its
share of an unbounded source (``slash.spark.stream``), built by the one
worker entry (:func:`slash.run.worker.run_rank`, from a :class:`StreamPlan`).

It runs the one rank loop (:class:`slash.run.rank.RankLoop`) over what its
source yields (batches and :class:`slash.run.rank.Advance` of its
watermark), the loop serving its executor while the source is quiet. Its
features are the loop's handlers: the stream's output
(:class:`StreamOutput`: fired windows as ``rows``, or ``latency`` and
``watermark`` for a directory sink it writes itself, ``late`` records, the
driver's stop), the control protocol (:class:`slash.run.features.Control`),
live ``metrics`` (:class:`slash.run.features.Report`) and checkpoints
(:class:`slash.run.stream_ckpt.TaskCheckpoints`); then ``done``.
Invariant: every ``rows``/``watermark`` message carries the group watermark
read before the windows were taken, so every window ending before it has
been sent: the driver may hand such a window over whole.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import pyarrow as pa

from slash._ipc import to_ipc
from slash.compute import pc
from slash.control.logic import ExecutorControl, LogicPlan
from slash.errors import InvalidArgument
from slash.executor import Executor, GroupConfig
from slash.run.launcher import Link
from slash.metrics import Reporter
from slash.query import Query
from slash.run.ckpt import SharedLink
from slash.run.plan import CheckpointPlan
from slash.run.protocol import (LateRecords, StreamDone, StreamRows, StreamWatermark,
                                 WindowLatencies)
from slash.run.features import Control, Report
from slash.run.rank import Advance, RankLoop
from slash.run.stream_ckpt import TaskCheckpoints, table_windows
from slash.sources import StreamRead, watermarks_from_source
from slash.window import Session, Sliding, Tumbling, Window

#: a rank's group watermark before it reported one, and once it is done
NEVER = -(1 << 63)
DONE = (1 << 63) - 1


@dataclass(frozen=True)
class StreamPlan:
    """What every task of a stream's barrier job runs (pickled into each)."""
    query: Query
    schema: pa.Schema
    source: Any
    group: GroupConfig
    token: str
    rendezvous: Tuple[str, int]
    sink_dir: Optional[str]
    #: writes a table as ``directory/name`` (a directory sink's parts, the late rows' files)
    write_part: Callable[[pa.Table, str, str], Any]
    late_dir: Optional[str] = None
    report_every: float = 0.5
    checkpoint: Optional[CheckpointPlan] = None
    #: a transactional sink's windows: written as the checkpoints' result segments
    sink_segments: bool = False
    #: wall clock (ms) when the group formed (the base time of a stream without a checkpoint)
    start_ms: int = 0


def _window_latencies(table: pa.Table, now_ms: int) -> List[Tuple[int, int, int, int]]:
    """(window_start, window_end, latency ms, rows) per window in the table."""
    return [(s, e, now_ms - e, c) for s, e, c in table_windows(table)]


def late_windows(times: np.ndarray, window: Window) -> List[Tuple[int, int, int]]:
    """(window_start, window_end, records) for the windows late records at
    ``times`` (int64 ms) would have fallen in: every tumbling or sliding
    window containing the time, or for sessions the record's own
    ``[t, t + gap)``. Sorted by (start, end).

    >>> late_windows(np.array([1500, 1700, 2100]), Tumbling(1000))
    [(1000, 2000, 2), (2000, 3000, 1)]
    """
    t = np.asarray(times, dtype=np.int64)
    if not len(t):
        return []
    lo, hi = -2**63, 2**63 - 1  # a window reaching past an end of int64 is clipped there,
    if isinstance(window, Session):  # as the state clips it
        u, c = np.unique(t, return_counts=True)
        return [(int(a), min(int(a) + window.gap_ms, hi), int(b)) for a, b in zip(u, c)]
    if isinstance(window, Tumbling):
        size = slide = window.size_ms
        ks = t // size  # window indices: no product that could wrap in int64
    elif isinstance(window, Sliding):
        size, slide = window.size_ms, window.slide_ms
        last = t // slide  # the latest window start (in slides) at or before t
        per = -(-size // slide)  # at most this many windows hold one time
        cand = last[None, :] - np.arange(per, dtype=np.int64)[:, None]
        # the windows whose end is after t: k * slide + size > t
        ks = cand[cand.astype(object) * slide + size > t[None, :].astype(object)] \
            if len(t) and (t.min() < lo + size or t.max() > hi - size) else \
            cand[cand > ((t - size) // slide)[None, :]]
    else:
        raise InvalidArgument(f"unknown window {window!r}")
    u, c = np.unique(ks, return_counts=True)
    return [(max(int(k) * slide, lo), min(int(k) * slide + size, hi), int(b)) for k, b in zip(u, c)]


def _selected_rows(query: Query, batch: pa.RecordBatch, skip: Optional[np.ndarray]) -> pa.RecordBatch:
    """The source rows the prepared batch holds, in its order: all of them
    when the filters became a ``skip`` selection (or there are none), else
    the rows the filters keep (as :meth:`Query.prepare` keeps them)."""
    if isinstance(query, LogicPlan):  # a query updated while running
        return query.selected_rows(batch, skip)
    if skip is not None or not query.filters or not batch.num_rows:
        return batch
    m = query.filters[0].mask(batch)
    for f in query.filters[1:]:
        m = pc.and_(m, f.mask(batch))
    return batch.filter(m)


class _LateBuffer:
    """A task's late records since it last told the driver: their number,
    per-window counts and, with a side output, the source rows themselves
    (written as ``late-rank{r}-{seq}.parquet`` part files at each flush)."""

    def __init__(self, rank: int, window: Window, late_dir: Optional[str],
                 write_part: Callable[[pa.Table, str, str], Any]) -> None:
        self.rank, self.write_part = rank, write_part
        self.window = window
        self.late_dir = late_dir
        self.count = 0
        self.times: List[np.ndarray] = []
        self.rows: List[pa.Table] = []
        self.seq = 0
        self.flushed_at = time.monotonic()

    def add(self, query: Union[Query, LogicPlan], batch: pa.RecordBatch, prepared: pa.RecordBatch,
            skip: Optional[np.ndarray], idx: np.ndarray) -> None:
        """Records the late rows ``idx`` (positions in ``prepared``)."""
        take = pa.array(idx, pa.int64())
        self.count += len(idx)
        self.times.append(prepared.column("time").take(take).to_numpy(zero_copy_only=False))
        if self.late_dir is not None:
            self.rows.append(pa.Table.from_batches([_selected_rows(query, batch, skip).take(take)]))

    def flush(self, send: Callable[[Any], None]) -> None:
        """Writes the late rows' part files, then sends ("late", rank, count,
        per-window counts) to the driver; nothing when no record was late."""
        self.flushed_at = time.monotonic()
        if not self.count:
            return
        groups: List[List[pa.Table]] = []
        for t in self.rows:  # one part per run of rows with one schema (files may differ)
            if groups and groups[-1][0].schema.equals(t.schema):
                groups[-1].append(t)
            else:
                groups.append([t])
        for g in groups:
            self.write_part(pa.concat_tables(g), self.late_dir,  # type: ignore[arg-type]
                        f"late-rank{self.rank}-{self.seq:08d}.parquet")
            self.seq += 1
        send(LateRecords(self.rank, self.count,
                              late_windows(np.concatenate(self.times), self.window)))
        self.count, self.times, self.rows = 0, [], []


class StreamOutput:
    """A stream task's output to the driver (see the module doc): the stop,
    the late records, and without checkpoints (``windows``) the fired
    windows, sent whenever the group watermark or the partitions held in a
    hand-over changed (a hand-over merged fires the held windows: they go
    before the next metrics report says so, StreamHandle.rebalance waits
    for it)."""

    def __init__(self, plan: StreamPlan, late: _LateBuffer, windows: bool) -> None:
        self.plan, self.late, self.windows = plan, late, windows
        self.fired: List[pa.RecordBatch] = []
        self.gw = NEVER  # the group watermark read before the latest take
        self.last: Tuple[int, int] = (NEVER, 0)
        self.seq = 0

    def install(self, loop: RankLoop) -> None:
        self.loop = loop
        loop.handlers["stop"] = lambda msg: setattr(loop, "stopped", True)
        if self.windows:
            loop.collect = self.fired.extend
            loop.after_finish.append(self.drain)
        loop.before_take.insert(0, self.read_watermark)
        loop.after_take.append(self.after_take)
        loop.before_finish.append(lambda: self.late.flush(loop.link.put))

    def read_watermark(self) -> None:  # before taking: everything up to it has fired
        self.gw = self.loop.ex.metrics["group_watermark"]

    def after_take(self) -> None:
        ex, link = self.loop.ex, self.loop.link
        if ex.finished:  # the last windows go at the finish (drain)
            return
        m = ex.metrics
        gw_held = (m["group_watermark"], m["held_partitions"])
        if gw_held != self.last:
            self.last = gw_held
            self.late.flush(link.put)
            if self.windows:
                self.drain()
        elif self.late.count and time.monotonic() - self.late.flushed_at >= 0.5:
            self.late.flush(link.put)

    def drain(self) -> None:
        """The windows taken so far, with the group watermark read before."""
        loop, plan, link = self.loop, self.plan, self.loop.link
        parts, self.fired[:] = list(self.fired), []
        table = _finalize(plan, loop.ex, parts)
        if plan.sink_dir is not None:
            if table is not None and table.num_rows:
                plan.write_part(table, plan.sink_dir, f"part-r{loop.rank:04d}-{self.seq:08d}.parquet")
                self.seq += 1
                link.put(WindowLatencies(loop.rank, _window_latencies(table,
                                                                       int(time.time() * 1000))))
            link.put(StreamWatermark(loop.rank, self.gw))
        else:
            link.put(StreamRows(loop.rank, self.gw, to_ipc(table) if table is not None and
                                 table.num_rows else None))


def _finalize(plan: StreamPlan, ex: Executor, parts: List[pa.RecordBatch]) -> Optional[pa.Table]:
    return plan.query.finalize(pa.Table.from_batches(parts, schema=ex.result_schema()),
                               plan.schema, sort=False) if parts else None


def _stream_push(loop: RankLoop, late: _LateBuffer, ctl: ExecutorControl) -> Callable[[Any], None]:
    """A stream task's push: the late rows' positions kept for the side
    output (``push_batch(return_late=True)`` would give the prepared rows;
    the side output wants the source's)."""
    ex, q = loop.ex, loop.query
    values = ex.state.value_columns

    def push(batch: pa.RecordBatch) -> None:
        b, skip = loop.prepare(batch)
        n_late, idx = ex.push(b.column("key"), b.column("time"), {c: b.column(c) for c in values},
                              return_late=True, skip=skip)
        if n_late:
            late.add(ctl.plan if ctl.plan.version else q, batch, b, skip, idx)
    return push


def _items(loop: RankLoop, plan: StreamPlan, n: int, base_ms: int,
           ck: Optional[TaskCheckpoints]) -> Iterator[Tuple[Any, Any]]:
    """The source's items as the rank loop's: (work left after it, a batch
    or an :class:`Advance`); a quiet source waits in the loop's
    :meth:`RankLoop.idle` and stops once the driver stopped the stream."""
    def wait(seconds: float) -> bool:
        loop.idle(seconds)
        return loop.stopped

    read = StreamRead(plan.query, plan.schema, base_ms, wait,
                      skip=ck.source_skip if ck is not None else 0,
                      work=ck.work if ck is not None else None)
    for batch, advance, left in plan.source.stream_items(loop.rank, n, read):
        if batch is not None and batch.num_rows:
            yield left, batch
        if advance is not None:
            yield left, Advance(advance)


def run_stream(plan: StreamPlan, rank: int, addresses: List[str], lst: Any,
               conn: Any) -> Tuple[pa.Table, Dict[str, Any]]:
    """One stream task's run (see the module doc) over ``conn``, its
    connection to the driver; returns (nothing: its windows went to the
    driver as they fired, its metrics)."""
    start_ms = plan.start_ms
    n, q = len(addresses), plan.query
    state = q.state_config(plan.schema, plan.group.partitions_for(n))
    # a source whose watermark is its own (a KafkaStream's: per partition, idle rule): the
    # executor's moves by the source's markers alone, never by the largest time it has seen
    ex = Executor(lst, rank, addresses, state, plan.group, token=plan.token,
                  bounded=watermarks_from_source(plan.source))
    late = _LateBuffer(rank, q.window, plan.late_dir, plan.write_part)
    ck: Optional[TaskCheckpoints] = None
    base_ms, skip_batches = start_ms, 0
    link = SharedLink(Link(conn))  # read by the loop, written by it and the checkpoint writer
    with RankLoop(q, plan.source, ex, link) as loop:
        loop.schema, loop.guard_gc = plan.schema, False
        # StreamHandle.update: logic versions switched at an event time the driver agrees
        ctl = ExecutorControl(link.put, conn, rank, LogicPlan(q), plan.group.timeout)
        report = Report(Reporter(plan.report_every), link.put, at_finish=False)
        loop.use(StreamOutput(plan, late, windows=plan.checkpoint is None), Control(ctl), report)
        loop.push_item = _stream_push(loop, late, ctl)
        if plan.checkpoint is not None:
            ck = TaskCheckpoints(plan.checkpoint, rank, n, link, ex,
                                 lambda parts: _finalize(plan, ex, parts), plan.sink_dir,
                                 isinstance(q.window, Session), plan.source,
                                 segments=plan.sink_segments, timeout=plan.group.timeout,
                                 write_part=plan.write_part)
            skip_batches, base_ms = ck.handshake(start_ms, plan.group.timeout, loop.dispatch)
            for v, (start, version_query) in enumerate(ck.versions, 1):  # agreed before
                ctl.install(ex, start, v, version_query)
            loop.use(ck)

        def behind() -> Dict[str, Any]:  # the backlog: records due but not yet read
            got = plan.source.records_behind(rank, n, base_ms, int(time.time() * 1000),
                                             skip_batches, loop.records)
            return {} if got is None else {"records_behind": got}
        loop.status.append(behind)
        result = loop.run(_items(loop, plan, n, base_ms, ck))
        report.now()  # the last one, after the last windows
        link.put(StreamDone(rank))
        return result, dict(ex.metrics)
