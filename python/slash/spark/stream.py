"""Streams: Slash executors kept running in one Spark barrier stage over an
unbounded source, emitting each window as soon as it fires.

Sources (each task reads its own share; nothing passes through the JVM):

* :class:`RateSource`: YSB events at ``rate`` events/s in total, event time =
  wall clock; batch b of the global stream goes to rank ``b mod N``, and a
  batch is generated once the clock reaches its last event time;
* :class:`DirectorySource`: Parquet files appearing in a directory, taken in
  name order (write each file elsewhere and rename it in; names starting with
  ``_`` or ``.`` are skipped); every rank reads its row groups of each file,
  then moves its watermark to the file's latest event time minus the
  lateness, so ranks without rows still let windows fire. Files must follow
  each other in event time (up to the lateness).

Sinks: a directory (each rank writes what it fires as Parquet parts, straight
from the task) or a callable on the driver, called once per window, in event
time order, with all of that window's rows (a pyarrow Table). The driver
learns each rank's group watermark with its results and hands a window over
only when every rank has passed its end, so a window is never split or
repeated. Latency per window = emit time (wall clock, ms) - window end.

>>> # h = stream(spark, RateSource(rate=50_000), time="event_time", window="tumbling:1s",
>>> #            key="key", aggs=["count"], sink=lambda t: print(t.num_rows))
>>> # ...; print(h.stop()["latency_ms"])
"""
from __future__ import annotations

import glob
import io
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.errors import InvalidArgument, InvalidState, UnknownName
from slash.executor import Executor, GroupConfig
from slash.query import Query
from slash.spark import _env
from slash.spark._tasks import (Rendezvous, barrier_stage, driver_host, join_group, rank_errors, raise_task_failure,
                                report_error, write_table)
from slash.spark.batch import group_for, make_query

log = logging.getLogger(__name__)

_NEVER = -(1 << 63)
_DONE = (1 << 63) - 1
Sink = Union[str, Callable[[pa.Table], None]]


# ---- sources ------------------------------------------------------------------
@dataclass(frozen=True)
class RateSource:
    """YSB events (columns key, event_time, event_type) at ``rate`` events/s in
    total, event time = wall clock ms from the stream's start; ``records``
    events in all (None: until stopped)."""

    rate: int = 100_000
    records: Optional[int] = None
    keys: int = 100
    seed: int = 0
    batch: int = 10_000
    columns: Tuple[str, ...] = ("key", "event_time", "event_type")

    def __post_init__(self) -> None:
        for name in ("rate", "keys", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"RateSource.{name} must be an int >= 1, got {v!r}")
        if self.records is not None and (not isinstance(self.records, int) or self.records < 0):
            raise InvalidArgument(f"RateSource.records must be None or an int >= 0, got {self.records!r}")

    @property
    def schema(self) -> pa.Schema:
        from slash.workloads import ysb_batches

        return next(ysb_batches(1, keys=self.keys, columns=list(self.columns))).schema

    def batches(self, rank: int, n: int, base_ms: int, wait: Callable[[float], bool]
                ) -> Iterator[Tuple[pa.RecordBatch, Optional[int]]]:
        """This rank's batches as they become due; ``wait(seconds)`` sleeps
        (serving the executor) and returns True when the stream must stop."""
        from slash.workloads import ysb_batches

        b = rank
        while self.records is None or b * self.batch < self.records:
            first = b * self.batch
            count = self.batch if self.records is None else min(self.batch, self.records - first)
            due_ms = base_ms + (first + count - 1) * 1000 // self.rate
            while True:
                ahead = due_ms / 1000.0 - time.time()
                if ahead <= 0:
                    break
                if wait(min(ahead, 0.05)):
                    return
            yield next(ysb_batches(count, keys=self.keys, seed=self.seed, rate=self.rate,
                                   base_ms=base_ms, start=first, batch_size=count,
                                   columns=list(self.columns))), None
            b += n


@dataclass(frozen=True)
class DirectorySource:
    """Parquet files appearing in ``path`` (see the module docstring);
    ``schema`` is needed only when the directory is empty at the start."""

    path: str
    poll_interval: float = 0.1
    schema: Optional[pa.Schema] = None

    def files(self) -> List[str]:
        return sorted(f for f in glob.glob(os.path.join(self.path, "*.parquet"))
                      if not os.path.basename(f).startswith(("_", ".")))

    def resolve_schema(self) -> pa.Schema:
        if not os.path.isdir(self.path):
            raise UnknownName(f"stream directory {self.path!r} does not exist")
        if self.schema is not None:
            return self.schema
        files = self.files()
        if not files:
            raise InvalidArgument(f"stream directory {self.path!r} is empty: pass "
                                  "DirectorySource(path, schema=...)")
        return pq.read_schema(files[0]).remove_metadata()

    def batches(self, rank: int, n: int, time_col: str, lateness_ms: int,
                wait: Callable[[float], bool]) -> Iterator[Tuple[Optional[pa.RecordBatch], Optional[int]]]:
        """(batch, None) for this rank's rows of each new file, then (None,
        watermark) once the file is read."""
        from slash.sources import FileSource

        seen: Set[str] = set()
        while True:
            new = [f for f in self.files() if f not in seen]
            if not new:
                if wait(self.poll_interval):
                    return
                continue
            for f in new:
                seen.add(f)
                src = FileSource(f)
                for b in src.read(rank, n):
                    yield b, None
                hi = _max_time(f, time_col)
                if hi is not None:
                    yield None, hi - lateness_ms


def _max_time(path: str, col: str) -> Optional[int]:
    """The file's latest event time, from row-group statistics when present."""
    md = pq.ParquetFile(path).metadata
    idx = md.schema.to_arrow_schema().get_field_index(col)
    best = None
    for g in range(md.num_row_groups):
        st = md.row_group(g).column(idx).statistics
        if st is None or not st.has_min_max:
            t = pq.read_table(path, columns=[col]).column(col)
            t = t.cast(pa.int64()) if not pa.types.is_timestamp(t.type) else t.cast(pa.timestamp("ms")).cast(pa.int64())
            return int(np.max(t.to_numpy())) if len(t) else None
        v = st.max
        v = int(v.timestamp() * 1000) if hasattr(v, "timestamp") else int(v)
        best = v if best is None else max(best, v)
    return best


# ---- the task -------------------------------------------------------------------
@dataclass(frozen=True)
class _StreamPlan:
    query: Query
    schema: pa.Schema
    source: Any
    group: GroupConfig
    token: str
    rendezvous: Tuple[str, int]
    sink_dir: Optional[str]


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def _window_latencies(table: pa.Table, now_ms: int) -> List[Tuple[int, int, int, int]]:
    """(window_start, window_end, latency ms, rows) per window in the table."""
    if not table.num_rows:
        return []
    g = table.group_by(["window_start", "window_end"]).aggregate([("window_start", "count")])
    return [(s, e, now_ms - e, c) for s, e, c in zip(g.column("window_start").to_pylist(),
                                                      g.column("window_end").to_pylist(),
                                                      g.column("window_start_count").to_pylist())]


def _stream_task(plan: _StreamPlan):
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
                report_error(conn, e)
                raise
            finally:
                lst.close()
                conn.close()
            yield {"rank": rank, "records_in": int(m["records_in"]),
                   "late_records": int(m["late_records"])}
    return task


def _run_stream(plan: _StreamPlan, rank: int, addresses: List[str], lst: Any, conn: Any,
                start_ms: int) -> Dict[str, Any]:
    n = len(addresses)
    q = plan.query
    state = q.state_config(plan.schema, plan.group.partitions_for(n))
    seq = [0]
    stop = [False]
    ex = Executor(lst, rank, addresses, state, plan.group, token=plan.token)
    try:
        def drain() -> None:
            gw = ex.metrics["group_watermark"]  # before taking: everything up to it has fired
            parts = ex.results()
            table = q.finalize(pa.Table.from_batches(parts, schema=ex.result_schema()), plan.schema,
                               sort=False) if parts else None
            if plan.sink_dir is not None:
                if table is not None and table.num_rows:
                    write_table(table, plan.sink_dir, f"part-r{rank:04d}-{seq[0]:08d}.parquet")
                    seq[0] += 1
                    conn.send(("latency", rank, _window_latencies(table, int(time.time() * 1000))))
                conn.send(("watermark", rank, gw))
            else:
                conn.send(("rows", rank, gw, _ipc(table) if table is not None and table.num_rows else None))

        last = [_NEVER]

        def wait(seconds: float) -> bool:
            """Serves the executor for up to `seconds`; True when asked to stop."""
            deadline = time.monotonic() + seconds
            while True:
                if conn.poll(0):
                    msg = conn.recv()
                    if msg[0] == "stop":
                        stop[0] = True
                if stop[0]:
                    return True
                ex.poll(min(0.02, max(0.0, deadline - time.monotonic())))
                gw = ex.metrics["group_watermark"]
                if gw != last[0]:
                    last[0] = gw
                    drain()
                if time.monotonic() >= deadline:
                    return False

        src = plan.source
        if isinstance(src, RateSource):
            it = src.batches(rank, n, start_ms, wait)
        else:
            it = src.batches(rank, n, q.time, q.lateness, wait)
        for batch, advance in it:
            if batch is not None and batch.num_rows:
                b, skip = q.prepare_selected(batch)
                ex.push_batch(b, skip=skip)
            if advance is not None:
                ex.advance_watermark(advance)
                ex.end_epoch()
            if wait(0):
                break
        ex.finish()
        drain()
        conn.send(("done", rank))
        return ex.metrics
    finally:
        ex.close()


# ---- the driver's side ----------------------------------------------------------------
class StreamHandle:
    """A running stream: :meth:`stop` (or leaving a ``with`` block) ends it
    cleanly (every executor finishes its input, the remaining windows fire);
    :meth:`wait` waits for a bounded source to end; :attr:`metrics` counts
    windows, rows and per-window latency."""

    def __init__(self, n: int, sink: Sink) -> None:
        self.executors = n
        self._sink = sink
        self._lock = threading.Lock()
        self._gw = [_NEVER] * n
        self._pending: List[pa.Table] = []
        self._latencies: List[Tuple[int, int, int, int]] = []
        self._emitted: List[Tuple[int, int]] = []
        self._rows = 0
        self._records_in = 0
        self._late = 0
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._rdv: Optional[Rendezvous] = None
        self._started = time.time()

    # messages from the tasks (the rendezvous thread)
    def _on_message(self, rank: int, msg: Tuple[Any, ...]) -> None:
        kind = msg[0]
        with self._lock:
            if kind == "rows":
                _, _, gw, data = msg
                if data is not None:
                    self._pending.append(_from_ipc(data))
                self._gw[rank] = max(self._gw[rank], gw)
                self._deliver()
            elif kind == "watermark":
                self._gw[rank] = max(self._gw[rank], msg[2])
            elif kind == "latency":
                for s, e, lat, rows in msg[2]:
                    self._latencies.append((s, e, lat, rows))
                    self._rows += rows
            elif kind == "done":
                self._gw[rank] = _DONE
                if callable(self._sink):
                    self._deliver()

    def _deliver(self) -> None:
        """Hands every complete window to the callback, oldest first."""
        if not self._pending:
            return
        upto = min(self._gw)
        table = pa.concat_tables(self._pending)
        we = table.column("window_end").to_numpy()
        ready = we < upto if upto != _DONE else np.ones(len(we), bool)
        if not ready.any():
            return
        out = table.filter(pa.array(ready))
        rest = table.filter(pa.array(~ready))
        self._pending = [rest] if rest.num_rows else []
        out = out.sort_by([("window_end", "ascending"), ("window_start", "ascending")])
        ws, wend = out.column("window_start").to_numpy(), out.column("window_end").to_numpy()
        cut = np.flatnonzero((np.diff(ws) != 0) | (np.diff(wend) != 0)) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(ws)]):
            w = out.slice(int(lo), int(hi - lo))
            self._sink(w)  # type: ignore[operator]
            now = int(time.time() * 1000)
            s, e = int(ws[lo]), int(wend[lo])
            self._latencies.append((s, e, now - e, w.num_rows))
            self._emitted.append((s, e))
            self._rows += w.num_rows

    @property
    def base_ms(self) -> Optional[int]:
        """Wall clock (ms) when the executors formed their group: a RateSource's
        first event time."""
        return self._rdv.started_ms if self._rdv is not None else None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def metrics(self) -> Dict[str, Any]:
        """windows and rows emitted, per-window latency (ms: emit wall clock -
        window end) with its percentiles, records in and late, seconds."""
        with self._lock:
            lats = [x[2] for x in self._latencies]
            windows = len({(s, e) for s, e, _, _ in self._latencies})
            out: Dict[str, Any] = {
                "windows": windows, "rows": self._rows, "records_in": self._records_in,
                "late_records": self._late, "seconds": time.time() - self._started,
                "window_latencies": list(self._latencies), "running": self.running}
        if lats:
            a = np.asarray(lats, dtype=np.float64)
            out["latency_ms"] = {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)),
                                 "max": float(a.max())}
        return out

    @property
    def emitted_windows(self) -> List[Tuple[int, int]]:
        """(window_start, window_end) in the order the callback got them."""
        with self._lock:
            return list(self._emitted)

    def wait(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Waits for the stream to end by itself (a bounded source); raises
        the failure, naming the rank, if it failed."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise InvalidState(f"the stream is still running after {timeout} s")
        if self._rdv is not None:
            self._rdv.close()
        if self._error is not None:
            raise self._error
        return self.metrics

    def stop(self, timeout: float = 120.0) -> Dict[str, Any]:
        """Asks every executor to stop, waits until all finished; final metrics."""
        if self._rdv is not None and self.running:
            self._rdv.send_all(("stop",))
        return self.wait(timeout)

    def __enter__(self) -> "StreamHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.running:
            self.stop()


def stream(spark: Any, source: Union[RateSource, DirectorySource, str], *, time: str, window: str,
           key: Union[str, Sequence[str]], aggs: Sequence[str] = ("count",),
           filter: Union[None, str, Sequence[str]] = None, lateness: Union[None, int, str] = None,
           sink: Sink, executors: Optional[int] = None, transport: str = "shm",
           group: Optional[GroupConfig] = None, slots_wait: float = 30.0) -> StreamHandle:
    """Starts a streaming aggregation; returns at once with its handle.

    The query spellings are those of :func:`slash.spark.window_aggregate`.
    ``source``: a RateSource, a DirectorySource or a directory path. ``sink``:
    a directory for Parquet parts (written by the tasks) or a callable taking
    one window's rows (called on the driver, in event-time order). The stage
    holds ``executors`` task slots until stopped.
    """
    _env.require_pyspark()
    import pyspark.sql.functions  # noqa: F401

    query = make_query(time, window, key, aggs, filter, lateness)
    if isinstance(source, (str, os.PathLike)):
        source = DirectorySource(os.fspath(source))
    if isinstance(source, RateSource):
        schema = source.schema
    elif isinstance(source, DirectorySource):
        schema = source.resolve_schema()
    else:
        raise InvalidArgument(f"stream source must be a RateSource, a DirectorySource or a directory, "
                              f"got {type(source).__name__}")
    query.check(schema)
    if not (callable(sink) or isinstance(sink, (str, os.PathLike))):
        raise InvalidArgument(f"sink must be a directory or a callable, got {type(sink).__name__}")
    sink_dir = None if callable(sink) else os.fspath(sink)
    if sink_dir is not None and "://" not in sink_dir:
        os.makedirs(sink_dir, exist_ok=True)
    n, group = group_for(spark, query, executors, transport, group, slots_wait)

    token = secrets.token_hex(16)
    handle = StreamHandle(n, sink)
    rdv = Rendezvous(driver_host(spark), n, token, on_message=handle._on_message)
    handle._rdv = rdv
    plan = _StreamPlan(query, schema, source, group, token, rdv.address, sink_dir)
    stage = barrier_stage(spark, n, _stream_task(plan))

    def run() -> None:
        try:
            spark.sparkContext.setJobDescription(f"slash stream {query.window} by {list(query.key)}")
            rows = stage.collect()
            with handle._lock:
                handle._records_in = sum(r["records_in"] for r in rows)
                handle._late = sum(r["late_records"] for r in rows)
                if callable(sink):
                    handle._gw = [_DONE] * n
                    handle._deliver()
        except Exception as e:
            try:
                raise_task_failure(e, "slash.spark.stream", rdv.root_cause())
            except Exception as err:
                handle._error = err
    handle._thread = threading.Thread(target=run, name="slash-stream", daemon=True)
    handle._thread.start()
    return handle

