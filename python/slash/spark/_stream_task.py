"""One Spark stream task: a Slash executor kept running inside a barrier
task over its share of an unbounded source (:func:`stream_task`).

The task joins its group through the driver's rendezvous, pushes what its
source yields, serves its executor while the source is quiet, and reports
to the driver over its connection: fired windows (``rows``, or ``latency``
and ``watermark`` for a directory sink it writes itself), live ``metrics``,
``late`` records, control rounds, checkpoints (through
:class:`slash.spark._stream_ckpt.TaskCheckpoints`) and ``done``.
Invariant: every ``rows``/``watermark`` message carries the group watermark
read before the windows were taken, so every window ending before it has
been sent: the driver may hand such a window over whole.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import pyarrow as pa

from slash._ipc import to_ipc
from slash.compute import pc
from slash.control.logic import ExecutorControl, LogicPlan
from slash.errors import InvalidArgument
from slash.executor import Executor, GroupConfig
from slash.metrics import Reporter
from slash.query import Query
from slash.run.plan import CheckpointPlan
from slash.run.protocol import (LateRecords, Metrics, Stop, StreamDone, StreamRows, StreamWatermark,
                                 WindowLatencies)
from slash.sources import StreamRead, malformed_records, watermarks_from_source
from slash.spark._stream_ckpt import TaskCheckpoints
from slash.spark._tasks import join_group, rank_errors, report_error, write_table
from slash.window import Session, Sliding, Tumbling, Window

#: a rank's group watermark before it reported one, and once it is done
NEVER = -(1 << 63)
DONE = (1 << 63) - 1


@dataclass(frozen=True)
class StreamPlan:
    query: Query
    schema: pa.Schema
    source: Any
    group: GroupConfig
    token: str
    rendezvous: Tuple[str, int]
    sink_dir: Optional[str]
    late_dir: Optional[str] = None
    report_every: float = 0.5
    checkpoint: Optional[CheckpointPlan] = None
    #: a transactional sink's windows: written as the checkpoints' result segments
    sink_segments: bool = False


def _window_latencies(table: pa.Table, now_ms: int) -> List[Tuple[int, int, int, int]]:
    """(window_start, window_end, latency ms, rows) per window in the table."""
    if not table.num_rows:
        return []
    g = table.group_by(["window_start", "window_end"]).aggregate([("window_start", "count")])
    return [(s, e, now_ms - e, c) for s, e, c in zip(g.column("window_start").to_pylist(),
                                                      g.column("window_end").to_pylist(),
                                                      g.column("window_start_count").to_pylist())]


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

    def __init__(self, rank: int, window: Window, late_dir: Optional[str]) -> None:
        self.rank = rank
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

    def flush(self, conn: Any) -> None:
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
            write_table(pa.concat_tables(g), self.late_dir,  # type: ignore[arg-type]
                        f"late-rank{self.rank}-{self.seq:08d}.parquet")
            self.seq += 1
        conn.send(LateRecords(self.rank, self.count,
                              late_windows(np.concatenate(self.times), self.window)))
        self.count, self.times, self.rows = 0, [], []


def stream_task(plan: StreamPlan):
    def task(batches):
        for _ in batches:
            pass
        from pyspark import BarrierTaskContext
        rank = BarrierTaskContext.get().partitionId()
        with rank_errors(rank):
            rank, addresses, lst, conn, start_ms = join_group(
                plan.group.transport, plan.token, plan.rendezvous, plan.group.timeout)
            try:
                m = _run_stream(plan, rank, addresses, lst, conn, start_ms)
            except BaseException as e:
                report_error(conn, rank, e)
                raise
            finally:
                lst.close()
                conn.close()
            yield {"rank": rank, "records_in": int(m["records_in"]),
                   "late_records": int(m["late_records"]),
                   "malformed_records": malformed_records(plan.source)}
    return task


def _run_stream(plan: StreamPlan, rank: int, addresses: List[str], lst: Any, conn: Any,
                start_ms: int) -> Dict[str, Any]:
    n = len(addresses)
    q = plan.query
    state = q.state_config(plan.schema, plan.group.partitions_for(n))
    seq = [0]
    stop = [False]
    late = _LateBuffer(rank, q.window, plan.late_dir)
    # a source whose watermark is its own (a KafkaStream's: per partition, idle rule): the
    # executor's moves by the source's markers alone, never by the largest time it has seen
    ex = Executor(lst, rank, addresses, state, plan.group, token=plan.token,
                  bounded=watermarks_from_source(plan.source))
    reporter = Reporter(plan.report_every)
    read = [0]  # source rows this rank took (before filters)

    ck: Optional[TaskCheckpoints] = None
    base_ms = start_ms
    skip_batches = 0

    def finalize(parts: List[pa.RecordBatch]) -> Optional[pa.Table]:
        return q.finalize(pa.Table.from_batches(parts, schema=ex.result_schema()), plan.schema,
                          sort=False) if parts else None

    def on_driver(msg: Tuple[Any, ...]) -> None:
        if isinstance(msg, Stop):
            stop[0] = True
        elif ck is not None:
            ck.on_driver(msg)

    # StreamHandle.update: logic versions switched at an event time the driver agrees
    ctl = ExecutorControl(conn.send, conn, rank, LogicPlan(q), plan.group.timeout, other=on_driver)

    try:
        if plan.checkpoint is not None:
            ck = TaskCheckpoints(plan.checkpoint, rank, n, conn, ex, finalize, plan.sink_dir,
                                 isinstance(q.window, Session), plan.source,
                                 segments=plan.sink_segments)
            skip_batches, base_ms = ck.handshake(start_ms, plan.group.timeout, on_driver)
            for v, (start, version_query) in enumerate(ck.versions, 1):  # agreed before
                ctl.install(ex, start, v, version_query)

        def report() -> None:
            snap = reporter.snapshot(ex)
            snap["malformed_records"] = malformed_records(plan.source)
            behind = plan.source.records_behind(rank, n, base_ms, int(time.time() * 1000),
                                                skip_batches, read[0])
            if behind is not None:  # the backlog: records due but not yet read
                snap["records_behind"] = behind
            conn.send(Metrics(rank, snap))

        def drain() -> None:
            late.flush(conn)
            gw = ex.metrics["group_watermark"]  # before taking: everything up to it has fired
            if ck is not None:  # windows go out with the checkpoint that covers them
                ck.after_call()
                return
            table = finalize(ex.results())
            if plan.sink_dir is not None:
                if table is not None and table.num_rows:
                    write_table(table, plan.sink_dir, f"part-r{rank:04d}-{seq[0]:08d}.parquet")
                    seq[0] += 1
                    conn.send(WindowLatencies(rank, _window_latencies(table,
                                                                      int(time.time() * 1000))))
                conn.send(StreamWatermark(rank, gw))
            else:
                conn.send(StreamRows(rank, gw, to_ipc(table) if table is not None and table.num_rows
                                     else None))

        last: List[Tuple[int, int]] = [(NEVER, 0)]
        pushes = [skip_batches]

        def wait(seconds: float) -> bool:
            """Serves the executor for up to `seconds`; True when asked to stop."""
            deadline = time.monotonic() + seconds
            while True:
                while conn.poll(0):
                    ctl.handle(conn.recv(), ex)
                if ctl.moves.pending:  # rank 0: StreamHandle.rebalance's moves, when agreeable
                    ctl.moves.apply(ex)
                if stop[0]:
                    return True
                ex.poll(min(0.02, max(0.0, deadline - time.monotonic())))
                if ck is not None:
                    ck.after_call()
                    ck.maybe_request(pushes[0])
                m = ex.metrics
                # a hand-over merged (held_partitions fell) fires the held windows: send them
                # before the next metrics report says so (StreamHandle.rebalance waits for it)
                gw_held = (m["group_watermark"], m["held_partitions"])
                if gw_held != last[0]:
                    last[0] = gw_held
                    drain()
                elif late.count and time.monotonic() - late.flushed_at >= 0.5:
                    late.flush(conn)
                if reporter.due():
                    report()
                if time.monotonic() >= deadline:
                    return False

        it = plan.source.stream_items(rank, n, StreamRead(
            q, plan.schema, base_ms, wait, skip=ck.source_skip if ck is not None else 0,
            work=ck.work if ck is not None else None))
        for batch, advance, left in it:
            if batch is not None and batch.num_rows:
                read[0] += batch.num_rows
                b, skip = ctl.prepare(batch)
                # the late rows' positions (push_batch(return_late=True) would
                # give the prepared rows; the side output wants the source's)
                n_late, idx = ex.push(b.column("key"), b.column("time"),
                                      {c: b.column(c) for c in state.value_columns},
                                      return_late=True, skip=skip)
                pushes[0] += 1
                if ck is not None:
                    ck.read_to(pushes[0], left)
                    ck.after_call()
                if n_late:
                    late.add(ctl.plan if ctl.plan.version else q, batch, b, skip, idx)
            if advance is not None:
                ex.advance_watermark(advance)
                if ck is not None:
                    ck.after_call()
                ex.end_epoch()
                if ck is not None:
                    ck.after_call()
            if wait(0):
                break
        ctl.input_done()
        if ck is not None and stop[0]:
            # a clean stop with checkpoints: a last cut, no finish (open windows
            # stay open; a stream started again from the directory fires them)
            late.flush(conn)
            def serve(seconds: float) -> None:
                while conn.poll(0):
                    on_driver(conn.recv())
                ex.poll(seconds)
            ck.stop_phase(serve, pushes[0], plan.group.timeout)
        else:
            ex.finish()
            if ck is not None:
                late.flush(conn)
                ck.final()
            else:
                drain()
        report()
        conn.send(StreamDone(rank))
        return ex.metrics
    finally:
        ex.close()
