"""The sources a Spark stream reads besides a :class:`slash.kafka.KafkaStream`:
generated YSB events at a rate (:class:`RateSource`) and Parquet files
appearing in a directory (:class:`DirectorySource`), each a
:class:`slash.sources.StreamSource`.

Each task reads its own share straight from the source; nothing passes
through the JVM. A source yields ``(batch, None, left)`` per batch and
``(None, watermark, left)`` per promise, ``left`` being the rank's work left
after the item in global terms (JSON-able). Invariant: the union of every
rank's work left at a cut is exactly the input nobody has read, so
``resplit`` can deal it to any other executor count and a restart reads
each record once.
"""
from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.errors import InvalidArgument, InvalidState, UnknownName
from slash.sources.contract import StreamRead, StreamSource, register
from slash.sources.files import FileSource
from slash.workloads import ysb_batches


@register("rate")
@dataclass(frozen=True)
class RateSource(StreamSource):
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

    def records_behind(self, rank: int, n: int, base_ms: int, now_ms: int, pushed_before: int,
                       read: int) -> Optional[int]:
        """The backlog: rank's records due at ``now_ms`` but not read yet."""
        return max(0, self.due_records(rank, n, base_ms, now_ms) - self.batch * pushed_before
                   - read)

    def stream_items(self, rank: int, n: int, read: StreamRead
                     ) -> Iterator[Tuple[pa.RecordBatch, Optional[int], Dict[str, Any]]]:
        return self.batches(rank, n, read.base_ms, read.wait, skip=read.skip, work=read.work)

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


@register("directory")
@dataclass(frozen=True)
class DirectorySource(StreamSource):
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

    def stream_items(self, rank: int, n: int, read: StreamRead
                     ) -> Iterator[Tuple[Optional[pa.RecordBatch], Optional[int], Dict[str, Any]]]:
        return self.batches(rank, n, read.query.time, read.query.lateness, read.wait,
                            skip=read.skip, work=read.work)

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
