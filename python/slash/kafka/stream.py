"""A topic as an unbounded stream (:class:`KafkaStream`): each rank reads
its share of the partitions as records arrive, with event-time watermarks
per partition and an idle rule (the class doc says it whole).

Positions are ``{"<partition>": next offset}`` for each partition of a
rank, in global terms: a checkpoint records them, a restart seeks to them,
and :meth:`KafkaStream.resplit` deals them, with their offsets, to another
rank count.

Invariants: a rank's watermark never goes back; a partition with a backlog
is never idle; a record from an offset a position has passed is never read
again by that reader, and none before the position is skipped.
"""
from __future__ import annotations

import logging
import time as _time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import pyarrow as pa

from slash.errors import InvalidArgument, SchemaError
from slash.kafka.client import open_topic
from slash.kafka.reader import TopicReader, end_of_log, open_reader
from slash.kafka.decode import BATCH_RECORDS, Decoder
from slash.sources import StreamRead, StreamSource, Watermark, register
from slash.window import parse_duration

#: the Kafka modules log as one (``slash.kafka``), as before the split
log = logging.getLogger("slash.kafka")

_TICKS_PER_MS = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}


def _ms_to_ticks(ms: int, t: pa.DataType) -> int:
    """A duration of ``ms`` milliseconds in the units of time type ``t``, rounded up."""
    if pa.types.is_timestamp(t):
        per = _TICKS_PER_MS[t.unit]
        return -(-ms // 1000) if per is None else ms * per
    return ms  # an integer time column holds ms


def _as_seconds(v: Any, what: str) -> float:
    from slash.window import parse_duration

    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise InvalidArgument(f"{what} must be seconds or a duration like '5s', got {v!r}")
    s = parse_duration(v, what) / 1000.0 if isinstance(v, str) else float(v)
    if s < 0:
        raise InvalidArgument(f"{what} must be >= 0, got {v!r}")
    return s


@register("kafka-stream")
class KafkaStream(StreamSource):
    """A topic read as an unbounded stream, from ``start`` on (see
    :mod:`slash.kafka`'s doc for decoding, malformed values and errors).

    Rank r of n reads the topic's partitions p_r, p_{r+n}, ... (sorted),
    assigned directly (no consumer group).

    **Watermarks, per partition.** ``read(..., time=COL)`` keeps, for each of
    its partitions, the largest COL value read so far, and that partition's
    watermark is that value minus ``lateness``: records of one partition may
    come at most ``lateness`` out of order. The rank's watermark (the
    :class:`~slash.sources.Watermark` it yields after each batch when it
    advanced) is the **minimum over its partitions that are not idle**: a
    partition that was read to its end and then gave no record for
    ``idle_timeout`` (wall clock) is idle and does not hold the others back
    until it gives a record again; a partition that never gave one holds the
    rank back until it is idle. (A partition with a backlog is never idle,
    however slowly the consumer reaches it.) When
    every partition of a rank is idle, the rank's watermark is the largest of
    its partitions' (it never goes back). A rank without partitions promises
    the end of time. The group's watermark is the minimum over ranks, so a
    window fires once every partition that is not idle passed its end; a
    record older than it (an idle partition that woke up behind) is late.
    The executor takes its watermark from these markers alone
    (``source_watermarks = True`` tells the rank loop so), not from the largest time
    any partition of it has seen.

    The stream ends when the rank loop's ``wait`` says so (stop), or, given
    ``end_after_idle``, once every partition of the rank was read to its end
    and silent that long, or, given ``end_offsets`` ({partition: offset}),
    once each of its partitions reached its offset there (records from that
    offset on are not read; a partition not named has no end).
    A batch holds what one poll of the consumer gave, at most
    ``batch_records`` records, decoded per partition.

    Every ``partition_check`` (5 s) a rank looks for partitions the topic
    gained since the open and reads those :meth:`owner` deals it, from their
    start; until it gives a record, a gained partition holds its rank's
    watermark like any other.

    Positions are the next offset of each partition: :meth:`read_from` yields
    them and resumes from them (the rank loop must call it to record them at a
    cut and seek to them on a restart; see the report in docs/kafka.md).
    """

    #: a stream: it does not end by itself (window latencies are reported)
    bounded = False
    #: to the rank loop: the executor's watermark moves by this source's markers only
    source_watermarks = True

    def __init__(self, bootstrap: str, topic: str, *, schema: Optional[pa.Schema] = None,
                 time: Optional[str] = None, format: str = "json",
                 timestamp_column: Optional[str] = "kafka_timestamp",
                 start: Union[str, Mapping[int, int]] = "earliest",
                 lateness: Union[int, str] = 0, idle_timeout: Any = "5s",
                 end_after_idle: Any = None, end_offsets: Optional[Mapping[int, int]] = None,
                 bad_records: Optional[str] = None,
                 config: Optional[Mapping[str, Any]] = None, connect_timeout: float = 10.0,
                 poll_interval: float = 0.05, batch_records: int = BATCH_RECORDS,
                 partition_check: Any = "5s") -> None:
        from slash.window import parse_duration

        if isinstance(batch_records, bool) or not isinstance(batch_records, int) or \
                batch_records < 1:
            raise InvalidArgument(f"batch_records must be an int >= 1, got {batch_records!r}")
        self.batch_records = batch_records
        self.partition_check = _as_seconds(partition_check, "partition_check")
        self.bootstrap, self.topic, self.config = bootstrap, topic, dict(config or {})
        self.lateness_ms = parse_duration(lateness, "lateness") if isinstance(lateness, str) \
            else int(lateness)
        if self.lateness_ms < 0:
            raise InvalidArgument(f"lateness must be >= 0, got {lateness!r}")
        self.idle_timeout = _as_seconds(idle_timeout, "idle_timeout")
        self.end_after_idle = None if end_after_idle is None else \
            _as_seconds(end_after_idle, "end_after_idle")
        self.end_offsets = {int(p): int(o) for p, o in (end_offsets or {}).items()}
        self.poll_interval = float(poll_interval)
        at = open_topic(bootstrap, topic, fmt=format, schema=schema, start=start, config=config,
                        connect_timeout=connect_timeout)
        self.partitions, self.starts = at.partitions, at.starts
        self._decoder = Decoder(topic, format, at.value_schema, timestamp_column, bad_records)
        self._decoder.check_column(time)
        self.schema, self.time = self._decoder.schema, time

    @property
    def malformed(self) -> int:
        """Malformed values this process skipped."""
        return self._decoder.malformed

    def __repr__(self) -> str:
        # what names the stream (a checkpoint's fingerprint): the same topic read the same
        # way, whatever the broker's address or the partitions it has gained since
        return (f"KafkaStream(topic={self.topic!r}, format={self._decoder.format!r}, "
                f"columns={self.schema.names!r}, time={self.time!r}, "
                f"lateness_ms={self.lateness_ms})")

    def may_have_nulls(self, column: str) -> bool:
        """Any JSON field may be missing (null); the Kafka timestamp never is."""
        return self._decoder.may_have_nulls(column)

    def _gained(self, c: TopicReader, deal: Tuple[int, int], have: Mapping[int, Any]
                ) -> List[int]:
        """Partitions the topic gained since the open that rank deal[0] of
        deal[1] owns and does not read yet."""
        return [p for p in c.partitions()
                if p not in self.partitions and p not in have and
                self.owner(p, deal[1]) == deal[0]]

    def assignment(self, rank: int, n: int) -> List[int]:
        """The partitions rank reads of n: every n-th, from the rank-th."""
        if not 0 <= rank < n:
            raise InvalidArgument(f"rank {rank} is outside 0..{n - 1}")
        return self.partitions[rank::n]

    def owner(self, partition: int, n: int) -> int:
        """The rank of n that reads ``partition``: by :meth:`assignment` for
        the partitions the topic had at open; a partition it gained since goes
        to rank ``partition mod k`` of the k ranks that have partitions (a
        rank without any promised the end of time)."""
        if partition in self.partitions:
            return self.partitions.index(partition) % n
        return partition % max(1, min(n, len(self.partitions)))

    # -- positions: {"<partition>": next offset}, in global terms --------------------------
    def work(self, rank: int, n: int, time: Optional[str] = None) -> Dict[str, int]:
        """Rank's share of a fresh read: its partitions at the start offsets."""
        return {str(p): self.starts[p] for p in self.assignment(rank, n)}

    @staticmethod
    def remaining(work: Mapping[str, int], pos: Optional[Mapping[str, int]]) -> Dict[str, int]:
        """What is left of ``work`` at position ``pos`` (None: nothing read).

        >>> KafkaStream.remaining({"0": 5, "2": 0}, {"0": 9, "2": 3})
        {'0': 9, '2': 3}
        """
        out = {p: int((pos or {}).get(p, off)) for p, off in work.items()}
        out.update({p: int(off) for p, off in (pos or {}).items() if p not in out})  # gained
        return out

    def resplit(self, left: Sequence[Mapping[str, int]], n: int,
                time: Optional[str] = None) -> List[Dict[str, int]]:
        """Every rank's position at a cut dealt to ``n`` ranks: each partition
        with its offset, partitions[r::n] to rank r (as :meth:`assignment`).
        A partition in no position starts at the source's start (the topic
        gained it); one in two is refused (positions of another run)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"resplit needs n >= 1 ranks, got {n!r}")
        offsets: Dict[str, int] = {}
        for w in left:
            for p, off in w.items():
                if p in offsets:
                    raise InvalidArgument(f"partition {p} of topic {self.topic!r} is in two "
                                          "ranks' positions (a checkpoint of another run?)")
                offsets[p] = int(off)
        out: List[Dict[str, int]] = [{str(p): offsets.get(str(p), self.starts[p])
                                      for p in self.partitions[r::n]} for r in range(n)]
        for p, off in offsets.items():
            if int(p) not in self.partitions:  # gained since the open
                out[self.owner(int(p), n)][p] = off
        return out

    # -- as a Spark stream's source (slash.sources.contract.StreamSource) -------------------
    def stream_items(self, rank: int, n: int, read: StreamRead
                     ) -> Iterator[Tuple[Optional[pa.RecordBatch], Optional[int], Dict[str, int]]]:
        """Read by one task of a Spark stream: (batch, None, position) per
        batch and (None, watermark in ticks, position) per promise.
        ``read.work``: the position to resume from (a checkpoint's or its
        resplit's; None: rank's share of the topic at the start offsets)."""
        work = read.work if read.work is not None else self.work(rank, n)
        for pos, item in self.read_work(work, time=read.query.time, wait=read.wait,
                                        deal=(rank, n)):
            if isinstance(item, Watermark):
                wm = read.query.watermark_ticks(item.value, read.schema)
                if wm is not None:
                    yield None, wm, pos
            else:
                yield item, None, pos

    def stream_lateness(self, lateness: Union[None, int, str]) -> int:
        """The source's own lateness, which its per-partition watermarks
        already subtract; another one is refused."""
        if lateness is None:
            return self.lateness_ms
        ms = parse_duration(lateness, "lateness") if isinstance(lateness, str) else lateness
        if ms != self.lateness_ms:
            raise InvalidArgument(f"lateness={lateness!r} differs from the KafkaStream's lateness "
                                  f"({self.lateness_ms} ms): a Kafka stream's watermark is the "
                                  "source's, per partition (its largest time minus its "
                                  "lateness), so the lateness is set once, on "
                                  "KafkaStream(lateness=...)")
        return ms

    def check_stream(self, query: Any, schema: pa.Schema) -> None:
        """Per-partition watermarks need an integer (ms) or timestamp time column."""
        t = schema.field(query.time).type
        if not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
            raise InvalidArgument(f"time column {query.time!r} of topic {self.topic!r} is {t}: a "
                                  "Kafka stream's per-partition watermarks need an integer (ms) "
                                  "or a timestamp column")

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = BATCH_RECORDS, time: Optional[str] = None,
             wait: Optional[Any] = None) -> Iterator[Union[pa.RecordBatch, Watermark]]:
        """Rank's batches as they arrive; with ``time`` (or the source's
        ``time``), Watermarks as the class doc says. ``wait(seconds)``: what
        to do while nothing arrives (the rank loop serves its executor; True:
        stop)."""
        for _, item in self.read_from(rank, n, columns, batch_rows, time, None, wait):
            yield item

    def read_from(self, rank: int, n: int, columns: Optional[List[str]] = None,
                  batch_rows: int = BATCH_RECORDS, time: Optional[str] = None,
                  start: Optional[Mapping[str, int]] = None, wait: Optional[Any] = None
                  ) -> Iterator[Tuple[Dict[str, int], Union[pa.RecordBatch, Watermark]]]:
        """What :meth:`read` yields, each item with the position after it:
        ``{"<partition>": next offset}`` for each partition of the rank.
        ``start`` (such a position) resumes there."""
        return self.read_work(self.remaining(self.work(rank, n), start), columns, batch_rows,
                              time, wait, deal=(rank, n))

    def read_work(self, work: Mapping[str, int], columns: Optional[List[str]] = None,
                  batch_rows: int = BATCH_RECORDS, time: Optional[str] = None,
                  wait: Optional[Any] = None, deal: Optional[Tuple[int, int]] = None,
                  start: Optional[Mapping[str, int]] = None
                  ) -> Iterator[Tuple[Dict[str, int], Union[pa.RecordBatch, Watermark]]]:
        """Reads the partitions of ``work`` (``{"<partition>": offset}``,
        from :meth:`work`, :meth:`remaining` or :meth:`resplit`) from
        those offsets on, as :meth:`read_from` does (``start``, such a
        position, resumes there). ``deal``: (rank, n) of
        this reader: every ``partition_check`` it looks for partitions the
        topic gained and reads those :meth:`owner` gives it, from their start."""
        if start is not None:
            work = self.remaining(work, start)
        time_col = time if time is not None else self.time
        names = list(columns) if columns else self.schema.names
        for c in names:
            self._decoder.check_column(c)
        # the Kafka timestamps made only if read (a column, or the time of the watermarks)
        stamps = self._decoder.reads_timestamps(names + [time_col] if time_col else names)
        t = self.schema.field(time_col).type if time_col is not None else None
        if t is not None and not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
            raise SchemaError(f"a Kafka stream's time column {time_col!r} must be an integer "
                              f"(ms) or a timestamp, not {t}")
        parts = _Partitions(self, work, t, _ms_to_ticks(self.lateness_ms, t) if t is not None else 0)
        if not parts.mine:
            yield from self._read_none(parts, wait)
            return
        c = open_reader(self.bootstrap, self.topic, self.config)
        try:
            c.assign([(p, parts.pos[str(p)]) for p in parts.mine])
            checked = _now()
            while True:
                if deal is not None and parts.mine and _now() - checked >= self.partition_check:
                    checked = _now()
                    self._take_gained(c, deal, parts)
                got = c.fetch(min(batch_rows, self.batch_records),
                              0 if wait is not None else self.poll_interval,
                              self._decoder.format == "raw")
                polled = len(got) + len(got.events)
                out = self._decoded(got, parts, bool(polled), stamps, names, time_col)
                del got
                yield from out
                del out
                w = parts.advanced()  # an idle partition stops holding the rank back, data or not
                if w is not None:
                    yield dict(parts.pos), w
                if parts.ended(deal):
                    return
                if polled:
                    continue
                if self.end_after_idle is not None and parts.silent(self.end_after_idle):
                    return
                if wait is not None and wait(self.poll_interval):
                    return
        finally:
            c.close()

    def _read_none(self, parts: "_Partitions", wait: Optional[Any]
                   ) -> Iterator[Tuple[Dict[str, int], Watermark]]:
        """A reader dealt no partition: its watermark (the end of time) once,
        then nothing until the stream ends (a bounded or idle-ending one at
        once) or ``wait`` says stop."""
        w = parts.advanced()
        if w is not None:
            yield dict(parts.pos), w
        while not (wait(self.poll_interval) if wait is not None else _sleep(self.poll_interval)):
            if self.end_after_idle is not None or self.end_offsets:
                return

    def _take_gained(self, c: TopicReader, deal: Tuple[int, int], parts: "_Partitions") -> None:
        """The partitions the topic gained that ``deal`` gives this reader,
        read from their start."""
        for p in self._gained(c, deal, parts.top):
            lo, _ = c.watermarks(p, 5)
            parts.gain(p, lo)
            c.assign([(p, lo)], incremental=True)
            log.info("topic %r gained partition %d: rank %d of %d reads it from "
                     "offset %d", self.topic, p, deal[0], deal[1], lo)

    def _decoded(self, got: Any, parts: "_Partitions", polled: bool, stamps: Any,
                 names: List[str], time_col: Optional[str]
                 ) -> List[Tuple[Dict[str, int], pa.RecordBatch]]:
        """A fetch's records as batches of ``names``, each with the position
        after it; the partitions' ends, times and last records noted."""
        # every partition quiet until now: the topic wakes up, and each partition
        # gets idle_timeout again to show its records before the first to speak
        # moves the watermark past them (records fetched a moment later are no
        # reason to be late)
        quiet = polled and parts.silent(self.idle_timeout)
        for p, off in end_of_log(got.events, self.topic).items():
            if p in parts.eof_at:  # (it may come before the records it ends)
                parts.eof_at[p] = max(parts.eof_at[p], off)
        runs = got.runs()
        if quiet and runs:
            parts.heard_all()
        out: List[Tuple[Dict[str, int], pa.RecordBatch]] = []
        for p, recs in runs:
            parts.heard[p] = _now()
            if p in self.end_offsets:  # offsets ascend: the records past the end
                recs = recs.before(self.end_offsets[p])
                if not len(recs):
                    continue
            b, bad = self._decoder.decode(p, recs, stamps)
            self._decoder.report(bad, p, int(recs.offset[0]))
            parts.pos[str(p)] = int(recs.offset[-1]) + 1
            if b is None:
                continue
            if parts.t is not None:
                parts.saw(p, _max_ticks(b.column(time_col)))
            out.append((dict(parts.pos), b if names == b.schema.names else b.select(names)))
        return out


class _Partitions:
    """One reader's partitions as it reads them (:meth:`KafkaStream.read_work`):
    per partition its next offset (``pos``, the reader's position), the
    largest time read, when it last gave a record and the offset of its
    latest end-of-log event; and the reader's watermark over them, which
    never goes back."""

    def __init__(self, stream: KafkaStream, work: Mapping[str, int], t: Optional[pa.DataType],
                 late: int) -> None:
        self.stream, self.t, self.late = stream, t, late
        self.mine = sorted(int(p) for p in work)
        self.pos = {str(p): int(work[str(p)]) for p in self.mine}
        self.top: Dict[int, Optional[int]] = {p: None for p in self.mine}  # largest time per partition
        self.heard = {p: _now() for p in self.mine}  # when each partition last gave a record
        self.eof_at = {p: -1 for p in self.mine}  # the offset of each one's latest end-of-log event
        self.mark: Optional[int] = None  # the last watermark given

    def gain(self, p: int, lo: int) -> None:
        """Partition ``p``, which the topic gained, read from offset ``lo``."""
        self.mine.append(p)
        self.mine.sort()
        self.pos[str(p)], self.top[p], self.heard[p], self.eof_at[p] = lo, None, _now(), -1

    def saw(self, p: int, hi: Optional[int]) -> None:
        """Partition ``p`` gave records up to time ``hi`` (None: all null)."""
        if hi is not None and (self.top[p] is None or hi > self.top[p]):  # type: ignore[operator]
            self.top[p] = hi

    def heard_all(self) -> None:
        for p in self.mine:
            self.heard[p] = _now()

    def ended(self, deal: Optional[Tuple[int, int]]) -> bool:
        """Every partition of the rank at its end offset (given end_offsets)."""
        s = self.stream
        if not s.end_offsets or (deal is not None and any(
                s.owner(p, deal[1]) == deal[0] and p not in self.top for p in s.end_offsets)):
            return False  # (a partition it will own is not there yet)
        return all(p in s.end_offsets and self.pos[str(p)] >= s.end_offsets[p] for p in self.mine)

    def at_end(self, p: int) -> bool:
        """Read to its end: an end-of-log event at or past its next offset."""
        return self.eof_at[p] >= self.pos[str(p)]

    def silent(self, seconds: float) -> bool:
        """Every partition read to its end and silent for ``seconds``."""
        return all(self.at_end(p) and _now() - self.heard[p] >= seconds for p in self.mine)

    def watermark(self) -> Optional[int]:
        now, ends = _now(), self.stream.end_offsets
        live = [p for p in self.mine
                if not (self.at_end(p) and now - self.heard[p] >= self.stream.idle_timeout)
                and not (p in ends and self.pos[str(p)] >= ends[p])]
        if not self.mine:
            return (1 << 63) - 1
        if live:
            if any(self.top[p] is None for p in live):
                return None
            return min(self.top[p] for p in live) - self.late  # type: ignore[type-var]
        seen = [v for v in self.top.values() if v is not None]
        return max(seen) - self.late if seen else None

    def advanced(self) -> Optional[Watermark]:
        """The watermark, when the time column allows one and it moved on."""
        if self.t is None:
            return None
        w = self.watermark()
        if w is None or (self.mark is not None and w <= self.mark):
            return None
        self.mark = w
        return Watermark(_scalar(w, self.t))

def _now() -> float:
    return _time.monotonic()


def _sleep(seconds: float) -> bool:
    _time.sleep(seconds)
    return False


def _max_ticks(col: pa.Array) -> Optional[int]:
    import pyarrow.compute as pc

    if col.null_count == len(col):
        return None
    v = pc.max(col)
    return v.cast(pa.int64()).as_py() if pa.types.is_timestamp(col.type) else v.as_py()


def _scalar(v: int, t: pa.DataType) -> pa.Scalar:
    from slash.arrow_np import scalar

    return scalar(v, t)

