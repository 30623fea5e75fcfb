"""Kafka records read one poll at a time into a :class:`Polled` (the values
in ONE buffer, numpy arrays of partition, offset and timestamp), by a
:class:`TopicReader`: the core's reader (``slash._core.KafkaFetcher``, on
librdkafka's C API, no Python object per record) when the core was built
with librdkafka, else confluent-kafka's consumer laid out the same way
(``SLASH_KAFKA_READER=confluent`` asks for it; a debug log says which is in
use). A poll's end-of-log and error events are sorted out by one helper,
:func:`end_of_log`, for both topic inputs.

Invariants: a reader is assigned partitions directly (the settings of
:func:`slash.kafka.client.consumer_config`: no consumer group, no offset
commits, ``read_committed``); a poll's records are ordered by partition,
each partition's in offset order.
"""
from __future__ import annotations

import abc
import operator
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from slash.errors import InvalidArgument, NotSupported, SlashError, Timeout
from slash.gc_guard import no_cyclic_gc
from slash.kafka.client import confluent, consumer_config, gained_partitions, log

#: an event of a poll that is not a record: (kind, partition, offset, fatal, message)
Event = Tuple[int, int, int, bool, str]
EVENT_EOF, EVENT_ERROR = 1, 2  # (the core's SLASH_KEVENT_EOF / _ERROR)


class Polled:
    """Records of one poll, ordered by partition (each partition's in offset
    order): the values in ONE buffer, joined by a separator (``b"\\n"`` for
    JSON lines, a newline inside a value made a space; none for raw bytes),
    and numpy arrays; a slice (:meth:`take`) shares the buffer.

    ``starts`` holds n + 1 positions in ``values``: value i is
    ``values[starts[i]:starts[i + 1] - sep]``; ``nulls`` (uint8, or None if
    there is no null value) marks null values; keys likewise if read."""

    __slots__ = ("values", "starts", "sep", "partition", "offset", "timestamp", "nulls", "keys",
                 "key_starts", "key_nulls", "events")

    def __init__(self, values: bytes, starts: np.ndarray, sep: int, partition: np.ndarray,
                 offset: np.ndarray, timestamp: np.ndarray, nulls: Optional[np.ndarray],
                 keys: Optional[bytes] = None, key_starts: Optional[np.ndarray] = None,
                 key_nulls: Optional[np.ndarray] = None, events: Sequence[Event] = ()) -> None:
        self.values, self.starts, self.sep = values, starts, sep
        self.partition, self.offset, self.timestamp = partition, offset, timestamp
        self.nulls, self.keys, self.key_starts, self.key_nulls = nulls, keys, key_starts, key_nulls
        self.events = list(events)

    def __len__(self) -> int:
        return len(self.offset)

    def runs(self) -> List[Tuple[int, "Polled"]]:
        """(partition, its records) for each partition polled, ascending."""
        n = len(self)
        if n == 0:
            return []
        cuts = [0] + (np.flatnonzero(np.diff(self.partition)) + 1).tolist() + [n]
        return [(int(self.partition[a]), self.take(a, b)) for a, b in zip(cuts, cuts[1:])]

    def take(self, lo: int, hi: int) -> "Polled":
        """Records lo..hi-1 (the buffers shared)."""
        return Polled(self.values, self.starts[lo:hi + 1], self.sep, self.partition[lo:hi],
                      self.offset[lo:hi], self.timestamp[lo:hi],
                      None if self.nulls is None else self.nulls[lo:hi], self.keys,
                      None if self.key_starts is None else self.key_starts[lo:hi + 1],
                      None if self.key_nulls is None else self.key_nulls[lo:hi])

    def before(self, end: int) -> "Polled":
        """The records before offset ``end`` (of one partition: offsets ascend)."""
        return self.take(0, int(np.searchsorted(self.offset, end)))

    def has_null(self) -> bool:
        return self.nulls is not None and bool(self.nulls.any())

    def lines(self) -> memoryview:
        """The values as one buffer, joined by the separator (no copy)."""
        if len(self) == 0:
            return memoryview(b"")
        return memoryview(self.values)[int(self.starts[0]):int(self.starts[-1]) - self.sep]

    def value(self, i: int) -> Optional[bytes]:
        """Value i (None if null)."""
        if self.nulls is not None and self.nulls[i]:
            return None
        return self.values[int(self.starts[i]):int(self.starts[i + 1]) - self.sep]

    def binary(self, keys: bool = False) -> pa.Array:
        """The values (keys) as a binary array, sharing the buffer (raw records)."""
        data, starts, nulls = ((self.keys, self.key_starts, self.key_nulls) if keys else
                               (self.values, self.starts, self.nulls))
        n = len(self)
        if data is None or starts is None:
            raise InvalidArgument("the keys of a poll were not read (fetch(keys=True))")
        offs = (starts - starts[0]).astype(np.int32)
        if self.sep and not keys:
            raise InvalidArgument("values joined as lines are not raw bytes (fetch(sep=b''))")
        body = pa.py_buffer(memoryview(data)[int(starts[0]):int(starts[-1])] if n else b"")
        valid = None
        if nulls is not None and nulls.any():
            valid = pa.py_buffer(np.packbits(nulls == 0, bitorder="little"))
        return pa.Array.from_buffers(pa.binary(), n, [valid, pa.py_buffer(offs), body])

    @staticmethod
    def join(parts: List["Polled"]) -> "Polled":
        """One run of several polls' records (of one partition, in order)."""
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return _empty(1)
        sep = parts[0].sep
        values = (b"\n" if sep else b"").join(bytes(p.lines()) if sep else
                                              bytes(memoryview(p.values)[int(p.starts[0]):
                                                                          int(p.starts[-1])])
                                              for p in parts)
        starts, base = [], 0
        for p in parts:
            starts.append(p.starts[:-1] - p.starts[0] + base)
            base += int(p.starts[-1] - p.starts[0])
        starts.append(np.array([base], np.int64))
        nulls = None
        if any(p.nulls is not None for p in parts):
            nulls = np.concatenate([p.nulls if p.nulls is not None else np.zeros(len(p), np.uint8)
                                    for p in parts])
        keys = key_starts = key_nulls = None
        if parts[0].keys is not None:
            kp = [(p.keys, p.key_starts, p.key_nulls) for p in parts]
            keys = b"".join(bytes(memoryview(k)[int(s[0]):int(s[-1])]) for k, s, _ in kp)
            ks, base = [], 0
            for _, s, _ in kp:
                ks.append(s[:-1] - s[0] + base)
                base += int(s[-1] - s[0])
            ks.append(np.array([base], np.int64))
            key_starts = np.concatenate(ks)
            key_nulls = np.concatenate([kn for _, _, kn in kp])
        return Polled(values, np.concatenate(starts), sep,
                      np.concatenate([p.partition for p in parts]),
                      np.concatenate([p.offset for p in parts]),
                      np.concatenate([p.timestamp for p in parts]), nulls, keys, key_starts,
                      key_nulls)


def _empty(sep: int) -> Polled:
    z = np.zeros(0, np.int64)
    return Polled(b"", np.zeros(1, np.int64), sep, np.zeros(0, np.int32), z, z, None, b"",
                  np.zeros(1, np.int64), np.zeros(0, np.uint8))


def end_of_log(events: Sequence[Event], topic: str, where: str = "") -> Dict[int, int]:
    """A poll's events sorted out: each partition's end-of-log offset (the
    largest), a fatal error raised as Timeout (``where`` names what was being
    read, e.g. the partition and offset), any other logged (the client
    retries by itself, a broker restarting: the reader's timeout bounds it)."""
    eof: Dict[int, int] = {}
    for kind, p, off, fatal, message in events:
        if kind == EVENT_EOF:
            eof[p] = max(eof.get(p, off), off)
        elif fatal:
            raise Timeout(f"Kafka topic {topic!r}{' ' + where if where else ''}: {message}")
        else:
            log.info("Kafka topic %r%s: %s", topic, " " + where if where else "", message)
    return eof


class TopicReader(abc.ABC):
    """A consumer of one topic assigned partitions directly, read a poll at a
    time into :class:`Polled` (see :func:`open_reader`)."""

    kind = ""

    @abc.abstractmethod
    def assign(self, positions: Sequence[Tuple[int, int]], incremental: bool = False) -> None:
        """Reads ``[(partition, offset)]`` from now on (incremental: besides those assigned)."""

    @abc.abstractmethod
    def unassign(self) -> None:
        """Reads no partition any more (a poll's records not laid out are dropped)."""

    @abc.abstractmethod
    def fetch(self, max_records: int, timeout: float, raw: bool = False) -> Polled:
        """One poll: up to ``max_records`` records, waiting up to ``timeout`` s
        for the first; JSON lines (raw: the value bytes and the keys)."""

    @abc.abstractmethod
    def watermarks(self, partition: int, timeout: float) -> Tuple[int, int]:
        """The low and high watermark offsets of ``partition`` (asks the broker)."""

    @abc.abstractmethod
    def position(self, partition: int) -> int:
        """The next offset to read in ``partition`` (negative: none yet)."""

    @abc.abstractmethod
    def partitions(self) -> List[int]:
        """The topic's partitions now (none while the broker is away: asked again later)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Closes the consumer."""


class _CoreReader(TopicReader):
    kind = "core"

    def __init__(self, bootstrap: str, topic: str, config: Optional[Mapping[str, Any]]) -> None:
        from slash._core import KafkaFetcher, kafka_fetch_available

        self.topic = topic
        conf = consumer_config(bootstrap, config)
        while True:
            try:
                self.f = KafkaFetcher(topic, conf)
                return
            except InvalidArgument as e:
                # a default of ours the linked librdkafka predates (fetch.queue.backoff.ms
                # came in 2.1): left out; one the caller set is their error
                old = [k for k in conf if k not in (config or {}) and
                       f"setting {k}=" in str(e) and "No such configuration property" in str(e)]
                if not old:
                    raise
                log.debug("Kafka setting %s left out: the core's librdkafka %s predates it",
                          old[0], kafka_fetch_available())
                del conf[old[0]]

    def assign(self, positions: Sequence[Tuple[int, int]], incremental: bool = False) -> None:
        self.f.assign(list(positions), incremental)

    def unassign(self) -> None:
        self.f.unassign()

    def fetch(self, max_records: int, timeout: float, raw: bool = False) -> Polled:
        (values, starts, part, off, ts, nulls, keys, kst, knulls,
         events) = self.f.fetch(max_records, timeout, b"" if raw else b"\n", raw)
        return Polled(values, starts, 0 if raw else 1, part, off, ts, nulls, keys, kst, knulls,
                      [(k, p, o, fatal, msg) for k, p, o, _, fatal, msg in events])

    def watermarks(self, partition: int, timeout: float) -> Tuple[int, int]:
        return self.f.watermarks(partition, timeout)

    def position(self, partition: int) -> int:
        return self.f.position(partition)

    def partitions(self) -> List[int]:
        try:
            return self.f.partitions(2.0)
        except SlashError as e:  # the broker away for now: next time
            log.info("topic %r: partitions not listed (%s)", self.topic, e)
            return []

    def close(self) -> None:
        self.f.close()


class _ConfluentReader(TopicReader):
    kind = "confluent"

    def __init__(self, bootstrap: str, topic: str, config: Optional[Mapping[str, Any]]) -> None:
        self.ck = confluent()
        self.topic = topic
        self.c = self.ck.Consumer(consumer_config(bootstrap, config))

    def _tps(self, positions: Sequence[Tuple[int, int]]) -> List[Any]:
        return [self.ck.TopicPartition(self.topic, p, o) for p, o in positions]

    def assign(self, positions: Sequence[Tuple[int, int]], incremental: bool = False) -> None:
        if incremental:
            self.c.incremental_assign(self._tps(positions))
        else:
            self.c.assign(self._tps(positions))

    def unassign(self) -> None:
        self.c.unassign()

    def fetch(self, max_records: int, timeout: float, raw: bool = False) -> Polled:
        with no_cyclic_gc():  # the poll's Message objects live in this call only
            return self._lay_out(self.c.consume(num_messages=max_records, timeout=timeout), raw)

    def _lay_out(self, got: List[Any], raw: bool) -> Polled:
        events: List[Event] = []
        by: Dict[int, List[Any]] = {}
        cur, run = None, None
        for m in got:
            err = m.error()
            if err is None:
                p = m.partition()
                if p != cur:  # a poll gives each partition's records in runs
                    cur, run = p, by.setdefault(p, [])
                run.append(m)  # type: ignore[union-attr]
            elif err.code() == self.ck.KafkaError._PARTITION_EOF:
                events.append((EVENT_EOF, m.partition(), m.offset(), False, err.str()))
            else:
                events.append((EVENT_ERROR, -1 if m.partition() is None else m.partition(),
                               -1, bool(err.fatal()), err.str()))
        parts = sorted(by)
        counts = [len(by[p]) for p in parts]
        msgs = [m for p in parts for m in by[p]]
        del got, by, run
        n = len(msgs)
        if n == 0:
            out = _empty(0 if raw else 1)
            out.events = events
            return out
        kind = type(msgs[0])
        values = list(map(kind.value, msgs))
        nulls = None
        sep = 0 if raw else 1
        try:
            data = (b"" if raw else b"\n").join(values)
        except TypeError:  # a null value: no bytes, marked
            nulls = np.fromiter((v is None for v in values), np.uint8, n)
            values = [b"" if v is None else v for v in values]
            data = (b"" if raw else b"\n").join(values)
        if not raw and data.count(b"\n") != n - 1:  # a newline inside a value: one line each
            values = [v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values]
            data = b"\n".join(values)
        elif not raw and b"\r" in data:
            values = [v.replace(b"\r", b" ") for v in values]
            data = b"\n".join(values)
        starts = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, values), np.int64, n) + sep, out=starts[1:])
        if raw:
            keys = list(map(kind.key, msgs))
            key_nulls = np.fromiter((k is None for k in keys), np.uint8, n)
            keys = [b"" if k is None else k for k in keys]
            key_starts = np.zeros(n + 1, np.int64)
            np.cumsum(np.fromiter(map(len, keys), np.int64, n), out=key_starts[1:])
            kbuf: Optional[bytes] = b"".join(keys)
        else:
            kbuf, key_starts, key_nulls = None, None, None
        return Polled(data, starts, sep, np.repeat(np.array(parts, np.int32), counts),
                      _offsets_of(msgs, counts, kind),
                      np.fromiter(map(_SECOND, map(kind.timestamp, msgs)), np.int64, n),
                      nulls, kbuf, key_starts, key_nulls, events)

    def watermarks(self, partition: int, timeout: float) -> Tuple[int, int]:
        return self.c.get_watermark_offsets(self.ck.TopicPartition(self.topic, partition),
                                            timeout=timeout)

    def position(self, partition: int) -> int:
        return self.c.position([self.ck.TopicPartition(self.topic, partition)])[0].offset

    def partitions(self) -> List[int]:
        return gained_partitions(self.c, self.topic)

    def close(self) -> None:
        self.c.close()


def _offsets_of(msgs: List[Any], counts: List[int], kind: Any) -> np.ndarray:
    """The offsets of runs of ``counts`` messages (a partition's each, ascending):
    a run as long as its first to last offsets span is those offsets in a row."""
    out, at = [], 0
    for k in counts:
        lo, hi = msgs[at].offset(), msgs[at + k - 1].offset()
        out.append(np.arange(lo, hi + 1, dtype=np.int64) if hi - lo + 1 == k else
                   np.fromiter(map(kind.offset, msgs[at:at + k]), np.int64, k))
        at += k
    return np.concatenate(out)


_SECOND = operator.itemgetter(1)  # of a Message's (timestamp type, timestamp)
_READERS = ("auto", "core", "confluent")
_said: set = set()


def reader_kind(config: Optional[Mapping[str, Any]] = None) -> str:
    """Which reader :func:`open_reader` makes: ``core`` when the core was built
    with librdkafka (and every setting is a string, number or bool, which its
    C API takes), else ``confluent``; ``SLASH_KAFKA_READER`` (auto, core or
    confluent) overrides the choice (core without librdkafka: NotSupported)."""
    want = os.environ.get("SLASH_KAFKA_READER", "auto") or "auto"
    if want not in _READERS:
        raise InvalidArgument(f"SLASH_KAFKA_READER must be one of {', '.join(_READERS)}, "
                              f"got {want!r}")
    from slash._core import kafka_fetch_available

    have = kafka_fetch_available()
    if want == "core" and have is None:
        raise NotSupported("SLASH_KAFKA_READER=core: the core was built without librdkafka "
                           "(apt-get install librdkafka-dev, then rebuild)")
    scalar = all(isinstance(v, (str, int, float, bool)) for v in (config or {}).values())
    kind = "core" if want != "confluent" and have is not None and scalar else "confluent"
    if kind not in _said:
        _said.add(kind)
        log.debug("Kafka records read by %s", f"the core's reader (librdkafka {have})"
                  if kind == "core" else "confluent-kafka's consumer" +
                  ("" if have is not None else " (the core was built without librdkafka)"))
    return kind


def open_reader(bootstrap: str, topic: str, config: Optional[Mapping[str, Any]]
                ) -> TopicReader:
    """A :class:`TopicReader` of ``topic`` (which one: :func:`reader_kind`)."""
    if reader_kind(config) == "core":
        return _CoreReader(bootstrap, topic, config)
    return _ConfluentReader(bootstrap, topic, config)
