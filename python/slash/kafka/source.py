"""A topic as a bounded input (:class:`KafkaSource`): the records between
the start offsets and the end offsets seen at open, cut into units.

Each unit is at most ``unit_records`` offsets of one partition. Units are
the positions of the engine's other sources (:class:`slash.sources.BatchSource`),
so everything the engine does with positions works on a topic: each rank
reads its own units (partitions dealt by record count), a checkpoint
records ``[unit, batches read]`` = a partition and an offset, a restart
seeks there (``assign`` at that offset), and a rescale re-deals the units
left, with their offsets, to the new executor count.

Invariant: reading a unit is deterministic (the same records in the same
batches, cut by count), which exactly-once replay after a failure rests
on. One consumer per source per process reads one unit at a time.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import pyarrow as pa

from slash.errors import InvalidArgument, Timeout
from slash.kafka.client import open_topic
from slash.kafka.reader import Polled, TopicReader, end_of_log, open_reader
from slash.kafka.decode import BATCH_RECORDS, Decoder
from slash.sources import BatchSource, Unit, register

#: the Kafka modules log as one (``slash.kafka``), as before the split
log = logging.getLogger("slash.kafka")

_KAFKA = "<kafka>"
#: records a unit holds at most (offsets of one partition): the grain of a split and a rescale
UNIT_RECORDS = 200_000


class _Reader:
    """A process's consumer for reading units (made on first use, one per source
    per process; units are read one at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.consumer: Optional[TopicReader] = None


@register("kafka")
class KafkaSource(BatchSource):
    """A topic from the start offsets to the end offsets seen at open (see this
    module's doc and :mod:`slash.kafka`'s)::

        src = KafkaSource("127.0.0.1:9092", "events", time="ts")
        run(Query(time="ts", window="tumbling:10s", key=["campaign"], aggs=["count"]), src)
    """

    bounded = True

    def __init__(self, bootstrap: str, topic: str, *, schema: Optional[pa.Schema] = None,
                 time: Optional[str] = None, format: str = "json",
                 timestamp_column: Optional[str] = "kafka_timestamp",
                 start: Union[str, Mapping[int, int]] = "earliest", bounded: bool = True,
                 unit_records: int = UNIT_RECORDS, bad_records: Optional[str] = None,
                 config: Optional[Mapping[str, Any]] = None, connect_timeout: float = 10.0,
                 read_timeout: float = 60.0) -> None:
        if isinstance(unit_records, bool) or not isinstance(unit_records, int) or unit_records < 1:
            raise InvalidArgument(f"unit_records must be an int >= 1, got {unit_records!r}")
        self.bootstrap, self.topic, self.config = bootstrap, topic, dict(config or {})
        self.read_timeout = float(read_timeout)
        at = open_topic(bootstrap, topic, fmt=format, schema=schema, start=start, config=config,
                        connect_timeout=connect_timeout)
        parts, self.starts, self.ends = at.partitions, at.starts, at.ends
        self._decoder = Decoder(topic, format, at.value_schema, timestamp_column, bad_records)
        self._decoder.check_column(time)
        self.schema, self.time = self._decoder.schema, time
        self.make, self.bound = None, None
        self.units = []
        #: (partition, first offset, end offset) of each unit
        self.ranges: List[Tuple[int, int, int]] = []
        for p in parts:
            for lo in range(self.starts[p], self.ends[p], unit_records):
                hi = min(lo + unit_records, self.ends[p])
                self.units.append(Unit(_KAFKA, len(self.units), hi - lo))
                self.ranges.append((p, lo, hi))
        # what names this input (a checkpoint's fingerprint): the topic and its offsets
        self.paths = [f"<kafka {topic} " + ",".join(f"{p}:{self.starts[p]}-{self.ends[p]}"
                                                     for p in parts) + ">"]
        self._start_caches()
        self._reader = _Reader()
        log.debug("topic %r: %d partitions, %d records, %d units", topic, len(parts), self.rows,
                  len(self.units))

    @property
    def malformed(self) -> int:
        """Malformed values this process skipped."""
        return self._decoder.malformed

    def __getstate__(self) -> Dict[str, Any]:
        state = super().__getstate__()
        state["_reader"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        self._reader = _Reader()

    def may_have_nulls(self, column: str) -> bool:
        """Any JSON field may be missing (null); the Kafka timestamp never is."""
        return self._decoder.may_have_nulls(column)

    def _consumer(self) -> TopicReader:
        r = self._reader
        if r.consumer is None:
            r.consumer = open_reader(self.bootstrap, self.topic, self.config)
        return r.consumer

    def _read_unit(self, readers: Any, u: Unit, names: List[str], file_cols: List[str],
                   batch_rows: int) -> Iterator[pa.RecordBatch]:
        p, lo, hi = self.ranges[u.index]
        with self._reader.lock:
            batches, bad = self._fetch(p, lo, hi, min(batch_rows, BATCH_RECORDS),
                                       self._decoder.reads_timestamps(names))
        self._decoder.report(bad, p, lo)
        for b in batches:
            yield b if names == b.schema.names else b.select(names)

    def _fetch(self, p: int, lo: int, hi: int, batch_rows: int, stamps: bool = True
               ) -> Tuple[List[pa.RecordBatch], List[Dict[str, Any]]]:
        """Records lo..hi-1 of partition p, decoded in batches of ``batch_rows``
        records (cut by count, so the same unit gives the same batches); with
        the Kafka timestamps if ``stamps``."""
        c = self._consumer()
        raw = self._decoder.format == "raw"
        c.assign([(p, lo)])
        out: List[pa.RecordBatch] = []
        bad: List[Dict[str, Any]] = []
        held: List[Polled] = []  # polls' records not decoded yet (fewer than batch_rows)
        have = 0
        last = time.monotonic()
        done = lo >= hi
        try:
            while not done:
                got = c.fetch(batch_rows - have, 0.1, raw)
                eof = end_of_log(got.events, self.topic, f"partition {p} at offset {lo}")
                done = eof.get(p, -1) >= hi
                recs = got.before(hi)  # offsets ascend: past the unit at the end
                if len(recs) < len(got):
                    done = True
                if len(recs):
                    held.append(recs)
                    have += len(recs)
                    done = done or int(recs.offset[-1]) >= hi - 1
                    if have >= batch_rows:
                        self._flush(p, Polled.join(held), out, bad, stamps)
                        held, have = [], 0
                    last = time.monotonic()
                elif not done:
                    pos = c.position(p)
                    if pos >= hi:  # transaction markers end the range
                        done = True
                    elif time.monotonic() - last > self.read_timeout:
                        raise Timeout(f"Kafka topic {self.topic!r} partition {p}: no record "
                                      f"for {self.read_timeout:g} s at offset {max(lo, pos)} "
                                      f"(reading up to {hi})")
            if held:
                self._flush(p, Polled.join(held), out, bad, stamps)
        finally:
            c.unassign()
        return out, bad

    def _flush(self, p: int, recs: Polled, out: List[pa.RecordBatch],
               bad: List[Dict[str, Any]], stamps: bool) -> None:
        b, wrong = self._decoder.decode(p, recs, stamps)
        bad.extend(wrong)
        if b is not None:
            out.append(b)

    def close(self) -> None:
        """Closes this process's consumer (also done at exit)."""
        r = self._reader
        if r.consumer is not None:
            r.consumer.close()
            r.consumer = None

