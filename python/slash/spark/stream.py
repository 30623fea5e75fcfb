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
  each other in event time (up to the lateness). A file named before one a
  rank already started raises InvalidState naming both (the ranks past it
  would skip it). With checkpoints, positions
  are in global terms (the row groups of each file not yet read, the last
  file started), so a restart may deal them to another executor count.
* :class:`slash.kafka.KafkaStream`: a Kafka topic; each task reads the
  partitions the source deals its rank, straight from the broker, with the
  source's watermarks (per partition, the minimum over the rank's partitions
  that are not idle) and positions (the next offset of each partition, in
  global terms: a checkpoint's are re-dealt with their partitions).

Sinks: a directory (each rank writes what it fires as Parquet parts, straight
from the task) or a callable on the driver, called once per window, in event
time order, with all of that window's rows (a pyarrow Table). The driver
learns each rank's group watermark with its results and hands a window over
only when every rank has passed its end, so a window is never split or
repeated. Latency per window = emit time (wall clock, ms) - window end.

A callable sink runs in a delivery thread of the handle's, never under its
lock (it may read ``handle.metrics``). If it raises, the stream stops, and
``stop()``/``wait()`` raise :class:`slash.errors.SinkFailed` with the sink's
exception as ``__cause__`` and the window it failed on as ``window``; the
windows the sink did not accept (that one first, then every window that fired
after it, in event-time order) stay in ``handle.undelivered()``.

Checkpoints (``checkpoint=DIR``): the tasks take aligned checkpoints, the
driver commits them and restarts the barrier job from the newest one when a
task fails; a directory sink publishes a checkpoint's windows only when it
commits (two-phase: ``_pending/`` parts renamed into place), a callable sink
gets them then, labelled with the checkpoint id. See
:mod:`slash.spark._stream_ckpt` and docs/recovery.md.

Lateness: unlike files and tables (whose watermark comes from what is left to
read, so nothing is ever late), an unbounded stream cannot know what is still
to come. Each executor's watermark is the latest event time it has seen (or,
for a DirectorySource, the end of the last file read) minus ``lateness``; a
record older than that is late: counted, never applied. The driver then logs a
WARNING with the count so far (at most once per
``StreamHandle.late_warning_interval`` = 5 s while running, and once more in
the final summary); ``metrics["late_records"]`` counts them and
``metrics["late_records_by_window"]`` maps each (window_start, window_end) to
the late records that would have fallen in it (every tumbling or sliding
window holding the record's time; for sessions the record's own
``[t, t + gap)``). With ``late_output=PATH`` each task writes the late records
themselves (the source's columns as read) as Parquet parts
``PATH/late-rank{r}-{seq}.parquet``, each written atomically.

>>> # h = stream(spark, RateSource(rate=50_000), time="event_time", window="tumbling:1s",
>>> #            key="key", aggs=["count"], sink=lambda t: print(t.num_rows),
>>> #            lateness="2s", late_output="late/")
>>> # ...; m = h.stop(); print(m["latency_ms"], m["late_records"])
"""
from __future__ import annotations

import glob
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from slash._ipc import from_ipc, to_ipc
from slash.control import RunControl
from slash.control_logic import ExecutorControl, LogicPlan, updated_query
from slash.control_moves import parse_moves
from slash.errors import (InvalidArgument, InvalidState, NotSupported, SinkFailed, TaskFailed,
                          Timeout, UnknownName)
from slash.executor import Executor, GroupConfig
from slash.metrics import LiveMetrics, MetricsServer, Reporter
from slash.kafka import KafkaStream
from slash.query import Query
from slash.sources import FileSource, Watermark, malformed_records
from slash.run.failure import Failed, RestartPolicy
from slash.run.plan import CheckpointEvery, CheckpointPlan
from slash.run.supervisor import Rescale, Supervisor, newest_shape
from slash.spark import _env
from slash.spark._stream_ckpt import DriverCheckpoints, TaskCheckpoints, add_metadata
from slash.spark._tasks import (Rendezvous, barrier_stage, driver_host, join_group, rank_errors, raise_task_failure,
                                report_error, write_table)
from slash.spark.batch import group_for, make_query, one_start_time, session_time_zone
from slash.window import Session, Sliding, Tumbling, Window

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

    def due_records(self, rank: int, n: int, base_ms: int, now_ms: int) -> int:
        """How many of rank ``rank``'s records have an event time at or before
        ``now_ms`` (the source's backlog is this minus what the rank read):
        the first ``D`` records of the stream are due, batch b of them goes
        to rank ``b mod n``.

        >>> RateSource(rate=1000, batch=10).due_records(1, 2, 0, 34)  # records 0..34: batch 1, half of 3
        15
        """
        if now_ms < base_ms:
            return 0
        # record i's event time is base_ms + i * 1000 // rate: i is due iff i < (now - base + 1) * rate / 1000
        due = -(-(now_ms - base_ms + 1) * self.rate // 1000)
        if self.records is not None:
            due = min(due, self.records)
        full, part = divmod(due, self.batch)
        mine = (full // n + (1 if rank < full % n else 0)) * self.batch
        return mine + (part if full % n == rank else 0)

    # -- positions in global terms (for a restart with another executor count) ----
    # A rank's work: {"batches": [global batch indices, in order], "from": f, "step": s}:
    # the listed batches first, then f, f + s, f + 2s, ... Every group's tails
    # share one step and cover every residue of it, so the union of all ranks'
    # work is exactly the batches nobody has taken.
    @staticmethod
    def work(rank: int, n: int) -> Dict[str, Any]:
        """Rank's share of a fresh group: global batches rank, rank + n, ..."""
        return {"batches": [], "from": rank, "step": n}

    @staticmethod
    def advance(work: Dict[str, Any], taken: int) -> Dict[str, Any]:
        """What is left of ``work`` after its first ``taken`` batches.

        >>> RateSource.advance({"batches": [3, 5], "from": 8, "step": 2}, 3)
        {'batches': [], 'from': 10, 'step': 2}
        """
        listed = list(work["batches"])
        if taken <= len(listed):
            return {"batches": listed[taken:], "from": work["from"], "step": work["step"]}
        return {"batches": [], "from": work["from"] + (taken - len(listed)) * work["step"],
                "step": work["step"]}

    @staticmethod
    def resplit(left: Sequence[Dict[str, Any]], n: int) -> List[Dict[str, Any]]:
        """Deals every rank's work left at a cut to ``n`` ranks: the batches
        below the furthest tail start (holes some rank had not reached) in
        global order, round robin, then tails from there with step ``n``.
        Deterministic; each untaken batch goes to exactly one rank.

        >>> RateSource.resplit([{"batches": [], "from": 4, "step": 2},   # 4, 6, 8 not taken
        ...                     {"batches": [], "from": 9, "step": 2}], 3)
        ... # doctest: +NORMALIZE_WHITESPACE
        [{'batches': [4], 'from': 9, 'step': 3}, {'batches': [6], 'from': 10, 'step': 3},
         {'batches': [8], 'from': 11, 'step': 3}]
        """
        top = max(int(w["from"]) for w in left)
        holes = sorted({int(b) for w in left for b in w["batches"]} |
                       {b for w in left for b in range(int(w["from"]), top, int(w["step"]))})
        return [{"batches": holes[r::n], "from": top + r, "step": n} for r in range(n)]

    def batches(self, rank: int, n: int, base_ms: int, wait: Callable[[float], bool],
                skip: int = 0, work: Optional[Dict[str, Any]] = None
                ) -> Iterator[Tuple[pa.RecordBatch, Optional[int], Dict[str, Any]]]:
        """This rank's batches as they become due, each as (batch, None, the
        work left after it); ``wait(seconds)`` sleeps (serving the executor)
        and returns True when the stream must stop.
        ``skip``: this rank's batches already taken (a checkpoint's position:
        the stream resumes at global batch ``rank + skip * n``, identical to
        what a run without the failure would have generated). ``work``
        (instead of skip): the global batches to take (see :meth:`work`)."""
        from slash.workloads import ysb_batches

        if work is None:
            work = self.advance(self.work(rank, n), skip)

        def order() -> Iterator[int]:
            yield from work["batches"]
            b = work["from"]
            while True:
                yield b
                b += work["step"]

        for i, b in enumerate(order()):
            if self.records is not None and b * self.batch >= self.records:
                if b >= work["from"]:
                    return
                continue
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
                                   columns=list(self.columns))), None, self.advance(work, i + 1)


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
        # as FileSource reads the files (Spark's INT96 as instants in microseconds)
        return FileSource(files[0]).schema.remove_metadata()

    # -- positions in global terms (for a restart with another executor count) ----
    # A rank's work: {"files": [[name, FileSource work], ...], "after": name or None,
    # "rank": r, "n": n}: the listed files' units first (in name order; each list is
    # a FileSource work, its units indexing FileSource(name).units), then every file
    # named after "after" that is not listed, each dealt as FileSource(file).work(r, n)
    # deals it. A file stays listed (perhaps with no unit left) until its watermark
    # was given; "after" is the last file whose watermark the rank gave.
    @staticmethod
    def work(rank: int, n: int) -> Dict[str, Any]:
        """Rank's share of a fresh group: its split of every file."""
        return {"files": [], "after": None, "rank": rank, "n": n}

    def resplit(self, left: Sequence[Dict[str, Any]], n: int) -> List[Dict[str, Any]]:
        """Deals every rank's work left at a cut to ``n`` ranks: up to the
        furthest file any rank started (``top``), each file's units nobody has
        read are dealt by :meth:`slash.sources.FileSource.resplit` (a rank's
        units of a file it had not reached are its share by its own deal);
        every file after ``top`` is dealt afresh to the ``n`` ranks.
        Deterministic; each unread unit goes to exactly one rank. Files up to
        ``top`` must still be in the directory, unchanged."""
        names = [w["after"] for w in left if w["after"] is not None] + \
            [f for w in left for f, _ in w["files"]]
        top = max(names, default=None)
        per_file: Dict[str, List[Any]] = {}
        if top is not None:
            present = [os.path.basename(f) for f in self.files()]
            for name in sorted(set(names) - set(present)):
                raise InvalidState(f"stream directory {self.path!r}: file {name!r}, read in part "
                                   "before the checkpoint, is gone; the files a checkpoint's "
                                   "positions name must stay in place, unchanged")
        else:
            present = []
        for w in left:
            listed = {f for f, _ in w["files"]}
            for f, units in w["files"]:
                per_file.setdefault(f, []).append(units)
            for f in present:  # this rank's share of the files it had not reached
                if (w["after"] is None or f > w["after"]) and f <= top and f not in listed:
                    per_file.setdefault(f, []).append(
                        FileSource(os.path.join(self.path, f)).work(int(w["rank"]), int(w["n"])))
        out: List[Dict[str, Any]] = [{"files": [], "after": top, "rank": r, "n": n}
                                     for r in range(n)]
        for f in sorted(per_file):
            dealt = FileSource(os.path.join(self.path, f)).resplit(per_file[f], n)
            for r in range(n):
                if dealt[r]:
                    out[r]["files"].append([f, dealt[r]])
        return out

    def batches(self, rank: int, n: int, time_col: str, lateness_ms: int,
                wait: Callable[[float], bool], skip: int = 0,
                work: Optional[Dict[str, Any]] = None
                ) -> Iterator[Tuple[Optional[pa.RecordBatch], Optional[int], Dict[str, Any]]]:
        """(batch, None, left) for this rank's rows of each new file, then
        (None, watermark, left) once the file is read; ``left`` is the work
        left after the item (see :meth:`work`). ``work``: where to start (a
        checkpoint's position, or its :meth:`resplit`; None: a fresh group's
        share of rank of n). A work resumed with files already read first
        gives the watermark of the last of them (given before the cut:
        giving it again changes nothing). ``skip``: non-empty batches of
        ``work`` to pass over first (a checkpoint that recorded only a count).
        A file that appears after a file later in name order was started by
        this rank raises :class:`InvalidState` (it could be read only in part)."""
        if work is None:
            work = self.work(rank, n)
        files: List[List[Any]] = [[f, [list(u) for u in units]] for f, units in work["files"]]
        after: Optional[str] = work["after"]
        deal = (int(work["rank"]), int(work["n"]))
        listed = {f for f, _ in files}
        left_skip = skip

        def left() -> Dict[str, Any]:
            return {"files": [[f, [list(u) for u in units]] for f, units in files],
                    "after": after, "rank": deal[0], "n": deal[1]}

        def read_first(src: Optional[FileSource] = None
                       ) -> Iterator[Tuple[Optional[pa.RecordBatch], Optional[int], Dict[str, Any]]]:
            nonlocal after, left_skip
            name, units = files[0]
            path = os.path.join(self.path, name)
            src = src if src is not None else FileSource(path)
            for pos, b in src.read_work(units):
                if not b.num_rows:
                    continue
                files[0][1] = FileSource.remaining(units, pos)
                if left_skip:
                    left_skip -= 1
                    continue
                yield b, None, left()
            files.pop(0)
            after = name if after is None or name > after else after
            hi = _max_time(path, time_col)
            yield None, (None if hi is None else hi - lateness_ms), left()

        read_any = bool(files)
        while files:
            yield from read_first()
        if after is not None and not (read_any and after != work["after"]):
            # the last file read before the cut (or of the resplit) whose watermark
            # no file read here gave: it lets the windows it closed fire
            hi = _max_time(os.path.join(self.path, after), time_col)
            if hi is not None:
                yield None, hi - lateness_ms, left()
        known: Optional[Set[str]] = None
        while True:
            present = [os.path.basename(f) for f in self.files()]
            if known is not None:
                early = [f for f in present if f not in known and after is not None and f <= after]
                if early:
                    raise InvalidState(f"stream directory {self.path!r}: file {early[0]!r} appeared "
                                       f"after {after!r}, later in name order, was read; files "
                                       "are taken in name order (name each new file after the "
                                       "last one)")
            known = set(present)
            new = [f for f in present if (after is None or f > after) and f not in listed]
            if not new:
                if wait(self.poll_interval):
                    return
                continue
            for f in new:
                src = FileSource(os.path.join(self.path, f))
                files.append([f, src.work(*deal)])
                yield from read_first(src)


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


def _kafka_items(src: KafkaStream, rank: int, n: int, query: Query, schema: pa.Schema,
                 wait: Callable[[float], bool], work: Optional[Dict[str, int]]
                 ) -> Iterator[Tuple[Optional[pa.RecordBatch], Optional[int], Dict[str, int]]]:
    """A KafkaStream read by one task, as the stream task takes its sources'
    items: (batch, None, position) per batch and (None, watermark in ticks,
    position) per promise of the source. ``work``: the position to resume
    from (``{"<partition>": next offset}``, a checkpoint's or its resplit's;
    None: rank's share of the topic at the source's start offsets)."""
    if work is None:
        work = src.work(rank, n)
    for pos, item in src.read_work(work, time=query.time, wait=wait, deal=(rank, n)):
        if isinstance(item, Watermark):
            wm = query.watermark_ticks(item.value, schema)
            if wm is not None:
                yield None, wm, pos
        else:
            yield item, None, pos


def _kafka_lateness(source: KafkaStream, lateness: Union[None, int, str]) -> int:
    """The stream's lateness over a KafkaStream: the source's own, which its
    per-partition watermarks already subtract; another one is refused."""
    from slash.window import parse_duration

    if lateness is None:
        return source.lateness_ms
    ms = parse_duration(lateness, "lateness") if isinstance(lateness, str) else lateness
    if ms != source.lateness_ms:
        raise InvalidArgument(f"lateness={lateness!r} differs from the KafkaStream's lateness "
                              f"({source.lateness_ms} ms): a Kafka stream's watermark is the "
                              "source's, per partition (its largest time minus its lateness), "
                              "so the lateness is set once, on KafkaStream(lateness=...)")
    return ms


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
    late_dir: Optional[str] = None
    report_every: float = 0.5
    checkpoint: Optional[CheckpointPlan] = None


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
        conn.send(("late", self.rank, self.count, late_windows(np.concatenate(self.times), self.window)))
        self.count, self.times, self.rows = 0, [], []


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
                   "late_records": int(m["late_records"]),
                   "malformed_records": malformed_records(plan.source)}
    return task


def _run_stream(plan: _StreamPlan, rank: int, addresses: List[str], lst: Any, conn: Any,
                start_ms: int) -> Dict[str, Any]:
    n = len(addresses)
    q = plan.query
    state = q.state_config(plan.schema, plan.group.partitions_for(n))
    seq = [0]
    stop = [False]
    late = _LateBuffer(rank, q.window, plan.late_dir)
    # a KafkaStream's watermark is its own (per partition, idle rule): the executor's moves by
    # the source's markers alone, never by the largest time a partition of it has seen
    ex = Executor(lst, rank, addresses, state, plan.group, token=plan.token,
                  bounded=isinstance(plan.source, KafkaStream))
    reporter = Reporter(plan.report_every)
    read = [0]  # source rows this rank took (before filters)

    ck: Optional[TaskCheckpoints] = None
    base_ms = start_ms
    skip_batches = 0

    def finalize(parts: List[pa.RecordBatch]) -> Optional[pa.Table]:
        return q.finalize(pa.Table.from_batches(parts, schema=ex.result_schema()), plan.schema,
                          sort=False) if parts else None

    def on_driver(msg: Tuple[Any, ...]) -> None:
        if msg[0] == "stop":
            stop[0] = True
        elif ck is not None:
            ck.on_driver(msg)

    # StreamHandle.update: logic versions switched at an event time the driver agrees
    ctl = ExecutorControl(conn.send, conn, rank, LogicPlan(q), plan.group.timeout, other=on_driver)

    try:
        if plan.checkpoint is not None:
            ck = TaskCheckpoints(plan.checkpoint, rank, n, conn, ex, finalize, plan.sink_dir,
                                 isinstance(q.window, Session), plan.source)
            skip_batches, base_ms = ck.handshake(start_ms, plan.group.timeout, on_driver)
            for v, (start, version_query) in enumerate(ck.versions, 1):  # agreed before
                ctl.install(ex, start, v, version_query)

        def report() -> None:
            snap = reporter.snapshot(ex)
            snap["malformed_records"] = malformed_records(plan.source)
            if isinstance(plan.source, RateSource):  # the backlog: records due but not yet read
                snap["records_behind"] = max(0, plan.source.due_records(rank, n, base_ms,
                                                                        int(time.time() * 1000))
                                             - plan.source.batch * skip_batches - read[0])
            conn.send(("metrics", rank, snap))

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
                    conn.send(("latency", rank, _window_latencies(table, int(time.time() * 1000))))
                conn.send(("watermark", rank, gw))
            else:
                conn.send(("rows", rank, gw, to_ipc(table) if table is not None and table.num_rows else None))

        last: List[Tuple[int, int]] = [(_NEVER, 0)]
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

        src = plan.source
        work = ck.work if ck is not None else None
        if isinstance(src, RateSource):
            it = src.batches(rank, n, base_ms, wait, skip=skip_batches, work=work)
        elif isinstance(src, KafkaStream):
            it = _kafka_items(src, rank, n, q, plan.schema, wait, work)
        else:
            it = src.batches(rank, n, q.time, q.lateness, wait,
                             skip=ck.source_skip if ck is not None else 0, work=work)
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
        conn.send(("done", rank))
        return ex.metrics
    finally:
        ex.close()


# ---- the driver's side ----------------------------------------------------------------
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
        self._gw = [_NEVER] * n
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
        # each update's query and arguments, as submitted (agreed or not): the manifest's record
        self._update_args: List[Tuple[Any, Dict[str, Any]]] = []
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
                self._gw[rank] = _DONE
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
            self._take(_DONE, label)
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
        ready = we < upto if upto != _DONE else np.ones(len(we), bool)
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
                    self._gw = [_DONE] * self.executors
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
        window end) with its percentiles, records in, seconds; late records:
        ``malformed_records`` (values the source could not parse, skipped; known
        once the stream ended), ``late_records`` (in all) and ``late_records_by_window``
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
        from slash.errors import Timeout
        from slash.spark import _env as env

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
        env.check_slots(self._spark, n, self._slots_wait)
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
            self._gw = [_NEVER] * n
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
        with self._lock:
            self._update_args.append((r.query, args))
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
        checkpoint's manifest (see :mod:`slash.spark._stream_ckpt`)."""
        if self._ctl is None:
            return [], []
        plan = self._ctl.plan
        versions = list(zip(plan.starts[1:], plan.versions[1:]))
        with self._lock:
            submitted = list(self._update_args)
        record = []
        for start, query in versions:
            args = next((a for q, a in submitted if q is query), None)
            if args is None:  # not recorded yet (just agreed): nor are the later ones
                break
            record.append({"from_ticks": int(start), "args": args})
        return versions, record

    def _restore_logic(self, record: Sequence[Dict[str, Any]]) -> None:
        """A stream started again on a checkpoint directory: the versions
        its newest manifest records, agreed again on the driver (the tasks
        get them with where to resume)."""
        ctl = self._ctl
        assert ctl is not None
        for u in record:
            q = updated_query(ctl.plan.current, ctl.schema, dict(u["args"]), bounded=False)
            ctl.plan.add(int(u["from_ticks"]), q)
            ctl.query = q
            self._update_args.append((q, dict(u["args"])))
        if record:
            log.info("slash.spark.stream: %d logic version(s) agreed before restored from "
                     "the checkpoint", len(record))

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


def stream(spark: Any, source: Union[RateSource, DirectorySource, KafkaStream, str], *,
           time: str, window: str,
           key: Union[str, Sequence[str]], aggs: Sequence[str] = ("count",),
           filter: Union[None, str, Sequence[str]] = None, lateness: Union[None, int, str] = None,
           sink: Sink, late_output: Optional[str] = None, executors: Optional[int] = None,
           transport: str = "shm", group: Optional[GroupConfig] = None,
           slots_wait: float = 30.0, metrics_port: Optional[int] = None, ui: bool = False,
           ui_bind: str = "127.0.0.1", ui_token: Optional[str] = None,
           checkpoint: Optional[str] = None, checkpoint_every: Union[str, int, float] = "10s",
           max_restarts: int = 3, checkpoint_keep: int = 2, start_time: Optional[str] = None,
           startTime: Optional[str] = None) -> StreamHandle:
    """Starts a streaming aggregation; returns at once with its handle.
    ``start_time`` (or Spark's ``startTime``): moves tumbling and sliding
    windows as for :func:`slash.spark.window_aggregate`.

    The query spellings are those of :func:`slash.spark.window_aggregate`.
    ``source``: a RateSource, a DirectorySource, a
    :class:`slash.kafka.KafkaStream` or a directory path. A KafkaStream is
    read by each task directly (its share of the partitions, no record
    through the JVM or the driver); its watermarks are the source's (per
    partition, with its idle rule; ``lateness`` is the source's), its
    positions are offsets per partition, and a checkpoint's are re-dealt with
    their offsets to another executor count (docs/kafka.md). ``sink``:
    a directory for Parquet parts (written by the tasks) or a callable taking
    one window's rows (called on the driver, in event-time order, in a thread
    of its own; see :class:`StreamHandle` for a sink that raises).
    ``late_output``: a directory where each task writes the records it could
    not apply (older than its watermark minus ``lateness``), as read from the
    source, as ``late-rank{r}-{seq}.parquet``. The stage holds ``executors``
    task slots until stopped.

    ``metrics_port``: serve the live metrics over HTTP on the driver (0: a
    free port; ``handle.metrics_url`` is the Prometheus endpoint,
    ``handle.ui_url`` the live page); ``ui=True`` serves them on a free port
    without naming one. ``ui_bind``: the address (loopback by default; any
    other needs ``ui_token``, made if not given, which the URLs carry). The
    server stops when :meth:`StreamHandle.wait`/``stop`` returns.

    ``checkpoint``: a directory every Spark worker and the driver see; the
    stream takes aligned checkpoints there every ``checkpoint_every``
    (``"10s"``, ``"N epochs"``, ``"N batches"``), restarts its barrier job
    from the newest one when a task fails (at most ``max_restarts`` times),
    and resumes from it when started again with the same directory. Output
    becomes exactly-once and waits for the checkpoint covering it: see
    docs/recovery.md. A DirectorySource resumes after the files (and row
    groups) read before the cut, with any executor count (its positions are
    in global terms: :meth:`DirectorySource.work`): keep them in place,
    unchanged. A KafkaStream seeks to the offsets the checkpoint recorded,
    with any executor count (the topic must keep those records).
    """
    _env.require_pyspark()
    import pyspark.sql.functions  # noqa: F401

    if isinstance(source, KafkaStream):
        lateness = _kafka_lateness(source, lateness)
    query = make_query(time, window, key, aggs, filter, lateness, session_time_zone(spark),
                       one_start_time(start_time, startTime))
    if query.top:
        raise InvalidArgument(f"top:{query.top[0]}:{query.top[1]} ranks every key of a window, and "
                              "a stream appends a window's rows as each leader fires its keys: no "
                              "appended part could say which keys rank first (run it over bounded "
                              "inputs: slash.spark.window_aggregate)")
    if isinstance(source, (str, os.PathLike)):
        source = DirectorySource(os.fspath(source))
    if isinstance(source, RateSource):
        schema = source.schema
    elif isinstance(source, DirectorySource):
        schema = source.resolve_schema()
    elif isinstance(source, KafkaStream):
        schema = source.schema
    else:
        raise InvalidArgument(f"stream source must be a RateSource, a DirectorySource, a "
                              f"KafkaStream or a directory, got {type(source).__name__}")
    query.check(schema)
    if isinstance(source, KafkaStream):
        t = schema.field(time).type
        if not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
            raise InvalidArgument(f"time column {time!r} of topic {source.topic!r} is {t}: a "
                                  "Kafka stream's per-partition watermarks need an integer (ms) "
                                  "or a timestamp column")
    if not (callable(sink) or isinstance(sink, (str, os.PathLike))):
        raise InvalidArgument(f"sink must be a directory or a callable, got {type(sink).__name__}")
    sink_dir = None if callable(sink) else os.fspath(sink)
    if late_output is not None and not isinstance(late_output, (str, os.PathLike)):
        raise InvalidArgument(f"late_output must be a directory, got {type(late_output).__name__}")
    late_dir = None if late_output is None else os.fspath(late_output)
    for d in (sink_dir, late_dir):
        if d is not None and "://" not in d:
            os.makedirs(d, exist_ok=True)
    RestartPolicy(max_restarts)  # checked before anything starts
    every = CheckpointEvery.parse(checkpoint_every) if checkpoint is not None else None
    n, group = group_for(spark, query, executors, transport, group, slots_wait)

    token = secrets.token_hex(16)
    handle = StreamHandle(n, sink, group.lateness_ms, late_dir)
    ck_plan = None
    if checkpoint is not None:
        if "://" in os.fspath(checkpoint):
            raise NotSupported(f"checkpoint={checkpoint!r}: a mounted directory every worker sees, "
                               "not a URI")
        import dataclasses

        from slash.checkpoint import CheckpointStore

        ck_dir, fp = os.path.abspath(os.fspath(checkpoint)), f"stream {query!r} over {source!r}"
        parts = group.partitions_for(n)
        shape = newest_shape(CheckpointStore(ck_dir, fingerprint=fp, executors=n, partitions=parts,
                                             keep=checkpoint_keep), group.partitions, "stream")
        if shape is not None:  # resuming: the checkpoint's partition count, any executor count
            parts = shape[1]
        # fixed for the life of the checkpoints: a rescaled group keeps it
        group = dataclasses.replace(group, partitions=parts)
        group.partitions_for(n)
        ck_plan = CheckpointPlan(ck_dir, fp, n, parts, checkpoint_keep, every)  # type: ignore[arg-type]
        handle._ck = DriverCheckpoints(ck_plan, sink_dir, lambda r, m: handle._rdv.send_to(r, m),
                                       lambda m: handle._rdv.send_all(m), handle._committed,
                                       handle._observe, handle._logic)
        handle._ck.check_start()
        handle._resumed_from = handle._ck.committed
    handle._source, handle._spark, handle._slots_wait = source, spark, slots_wait
    handle._partitions = group.partitions_for(n)
    if metrics_port is not None or ui:
        handle._server = MetricsServer(handle.live, 0 if metrics_port is None else metrics_port,
                                       ui_bind, ui_token)
        handle.metrics_url, handle.ui_url = handle._server.url, handle._server.ui_url
        log.info("slash.spark.stream: live page %s, Prometheus endpoint %s", handle.ui_url,
                 handle.metrics_url)
    try:
        rdv = Rendezvous(driver_host(spark), n, token, on_message=handle._on_message)
    except BaseException:
        handle._close_server()
        raise
    handle._rdv = rdv
    handle._ctl = RunControl(query, schema, n, bounded=False, kind="stream", entry="spark.stream",
                             features=("checkpoint",) if handle._ck is not None else ())
    handle._ctl.provide("scale-out", handle.scale_out)  # a restart of the barrier stage
    handle._ctl.provide("scale-in", handle.scale_in)
    if handle._ck is not None:
        handle._restore_logic(handle._ck.start_logic)
    handle._ctl.attach(lambda r, m: rdv.send_to(r, m))
    plan = _StreamPlan(query, schema, source, group, token, rdv.address, sink_dir, late_dir,
                       checkpoint=ck_plan)

    def curable(err: BaseException) -> bool:
        """A failed barrier job restarts from a checkpoint, unless the stream
        has none, was stopping (not for a rescale), its sink failed or a
        checkpoint is corrupt."""
        return not (handle._ck is None or (handle._stop_sent and handle._rescale_to is None)
                    or handle._sink_error is not None or "CheckpointCorrupt" in str(err))

    def gave_up(f: Failed, restarts: int, most: int) -> BaseException:
        assert handle._ck is not None
        return TaskFailed(f"{f.error} (after {restarts} restart(s), max_restarts={most}; the "
                          f"checkpoints in {handle._ck.store.dir!r} stay: start the stream again "
                          "to resume)", getattr(f.error, "rank", None), getattr(f.error, "reason", ""))

    def attempt(_: Any) -> List[Dict[str, Any]]:
        """One barrier job; a rescale asked for stops it after a checkpoint."""
        try:
            rows = barrier_stage(spark, handle.executors, _stream_task(plan)).collect()
        except Exception as e:
            try:
                raise_task_failure(e, "slash.spark.stream", rdv.root_cause())
            except Exception as err:
                ck = handle._ck
                if ck is not None and ck.fatal is not None:
                    raise ck.fatal from None
                raise Failed(getattr(err, "rank", None), str(err), err) from None
        nxt, ck = handle._rescale_to, handle._ck
        if nxt is not None and ck is not None and ck.fatal is None and \
                handle._sink_error is None and not ck.finished:
            handle._records_before += sum(int(r["records_in"]) for r in rows)
            raise Rescale(nxt, ck.committed)
        return rows

    def failed(f: Failed, _rec: Dict[str, Any], _last: Any) -> None:
        ck = handle._ck
        assert ck is not None
        ck.failed(f.cause, f.rank, rdv.silent_loss())
        # a rebalance rank 0 had not answered died with the group
        handle._next_group()
        handle._ctl._moves.fail_pending(  # type: ignore[union-attr]
            "the barrier job restarted from a checkpoint before every executor "
            "followed the moves; the restored map is the checkpoint's")
        rdv.errors.clear()
        rdv.lost.clear()
        with handle._cond:
            handle._done.clear()
        if handle._rescale_to is not None:  # it failed while stopping for a rescale
            handle._switch(handle._rescale_to)
        handle.live.event(f"recovery {sup.restarts}: {f.error}")
        log.warning("slash.spark.stream: %s; restarting the barrier job from checkpoint %s "
                    "(restart %d of at most %d)", f.error, ck.committed, sup.restarts,
                    max_restarts)

    sup = Supervisor(RestartPolicy(max_restarts, curable, gave_up))

    def run() -> None:
        rows = None
        try:
            spark.sparkContext.setJobDescription(f"slash stream {query.window} by {list(query.key)}")
            rows = sup.run(attempt, rescaled=lambda r: handle._switch(r.count), failed=failed)
        except Exception as err:  # what the policy does not restart from
            handle._error = err
        finally:
            handle._stage_ended(rows)
    handle.live.event(f"stream started: {n} executors, {query.window}")
    handle._thread = threading.Thread(target=run, name="slash-stream", daemon=True)
    if callable(sink):
        handle._delivery = threading.Thread(target=handle._deliver, name="slash-stream-sink", daemon=True)
        handle._delivery.start()
    handle._thread.start()
    return handle
