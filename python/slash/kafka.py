"""Kafka topics as inputs, read by each executor directly (librdkafka through
``confluent-kafka``; no record passes through the driver).

:class:`KafkaSource` (``bounded=True``, the default) is a batch query over a
topic: at open the driver reads each partition's start offset (``start``:
``"earliest"``, ``"latest"`` or ``{partition: offset}``) and end offset (the
high watermark then), and the records in between are the input, cut into
*units* of at most ``unit_records`` offsets of one partition. Units are the
positions of the engine's other sources (:class:`slash.sources.BatchSource`),
so everything the engine does with positions works on a topic: each rank
reads its own units (partitions dealt by record count), a checkpoint records
``[unit, batches read]`` = a partition and an offset, a restart seeks there
(``assign`` at that offset), and a rescale re-deals the units left, with
their offsets, to the new executor count. Reading a unit is deterministic
(the same records in the same batches), which is what exactly-once replay
after a failure rests on.

:class:`KafkaStream` reads a topic as an unbounded stream, with event-time
watermarks per partition and an idle timeout (see its doc for the rule).

Values are decoded in bulk: JSON objects (``format="json"``, the default) by
``pyarrow.json`` over the unit's values joined by newlines (one parse per
batch, with the schema given or inferred at open from the first records),
or kept as bytes (``format="raw"``: columns ``key`` and ``value``). Every
row also gets the record's Kafka timestamp as ``timestamp_column``
(``timestamp[ms, UTC]``, default ``kafka_timestamp``; None leaves it out),
which ``time=`` may name instead of a JSON field.

A value that is not a JSON object of the schema (bad syntax, a wrong type, a
null value) is skipped, never a crash: counted in :attr:`KafkaSource.malformed`
of the process that read it, logged with topic/partition/offset, and, given
``bad_records=DIR``, written to ``DIR/bad-<topic>-<partition>-<offset>.jsonl``
(one file per unit, so a unit read again after a restart rewrites its file).
An unreachable broker raises :class:`slash.errors.Timeout` within
``connect_timeout`` seconds; a missing topic raises UnknownName.
"""
from __future__ import annotations

import io
import json
import logging
import os
import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import pyarrow as pa
import pyarrow.json as pj

from slash.errors import (InvalidArgument, InvalidState, NotSupported, SchemaError, SystemFailure,
                          Timeout, UnknownName)
from slash.sources import BatchSource, Unit, Watermark

log = logging.getLogger(__name__)

_KAFKA = "<kafka>"
#: records a unit holds at most (offsets of one partition): the grain of a split and a rescale
UNIT_RECORDS = 200_000
#: records decoded into one batch at most
BATCH_RECORDS = 65_536
_SAMPLE = 1000  # records read at open to infer a JSON schema
TS_TYPE = pa.timestamp("ms", tz="UTC")


def _kafka() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise NotSupported("reading Kafka needs the confluent-kafka package "
                           "(pip install 'slash[kafka]')") from None
    return confluent_kafka


def _consumer_config(bootstrap: str, extra: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    conf: Dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        # no group membership: partitions are assigned, offsets are the engine's
        "group.id": "slash",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "socket.connection.setup.timeout.ms": 5000,
        # a restarted broker is found again within a second, not librdkafka's 10 s backoff
        "reconnect.backoff.max.ms": 1000,
        "fetch.wait.max.ms": 50,
        # one partition is read at a time (a unit): large fetches, few round trips
        "max.partition.fetch.bytes": 16 << 20,
        "queued.min.messages": 500_000,
    }
    conf.update(extra or {})
    return conf


class _Decoder:
    """Kafka records -> Arrow batches (see the module doc)."""

    def __init__(self, topic: str, fmt: str, value_schema: Optional[pa.Schema],
                 timestamp_column: Optional[str], bad_records: Optional[str]) -> None:
        self.topic, self.format, self.value_schema = topic, fmt, value_schema
        self.timestamp_column, self.bad_records = timestamp_column, bad_records
        fields = list(value_schema) if fmt == "json" else [pa.field("key", pa.binary()),
                                                            pa.field("value", pa.binary())]
        if timestamp_column is not None:
            if timestamp_column in [f.name for f in fields]:
                raise SchemaError(f"timestamp_column {timestamp_column!r} is also a field of the "
                                  f"values of topic {topic!r}: name it otherwise or pass None")
            fields.append(pa.field(timestamp_column, TS_TYPE))
        self.schema = pa.schema(fields)
        self.malformed = 0

    def decode(self, partition: int, msgs: List[Any]) -> Tuple[Optional[pa.RecordBatch],
                                                                List[Dict[str, Any]]]:
        """One batch of ``msgs`` (records of one partition), and the malformed ones."""
        bad: List[Dict[str, Any]] = []
        if self.format == "raw":
            cols = [pa.array([m.key() for m in msgs], pa.binary()),
                    pa.array([m.value() for m in msgs], pa.binary())]
            keep = msgs
        else:
            values = [m.value() for m in msgs]
            table = self._parse(values)
            keep = msgs
            if table is None:  # some value is malformed: find which, one by one
                good, keep = [], []
                for m, v in zip(msgs, values):
                    why = self._check(v)
                    if why is None:
                        good.append(v)
                        keep.append(m)
                    else:
                        bad.append({"topic": self.topic, "partition": partition,
                                    "offset": m.offset(), "error": why,
                                    "value": None if v is None else v.decode("utf-8", "replace")})
                table = self._parse(good) if good else None
                if table is None and good:  # cannot happen: each value parsed alone
                    raise SchemaError(f"topic {self.topic!r} partition {partition}: values "
                                      "that parse alone fail together")
            cols = ([table.column(i).combine_chunks() for i in range(table.num_columns)]
                    if table is not None else
                    [pa.array([], f.type) for f in self.value_schema])
        if self.timestamp_column is not None:
            cols.append(pa.array([m.timestamp()[1] for m in keep], pa.int64()).cast(TS_TYPE))
        if bad:
            self.malformed += len(bad)
        if not keep:
            return None, bad
        return pa.RecordBatch.from_arrays(cols, schema=self.schema), bad

    def _parse(self, values: List[Optional[bytes]]) -> Optional[pa.Table]:
        """The values parsed in one call, or None if one is malformed."""
        if not values:
            return pa.table({f.name: pa.array([], f.type) for f in self.value_schema})
        try:
            data = b"\n".join(values)
        except TypeError:  # a null value
            return None
        if data.count(b"\n") != len(values) - 1:  # a newline inside a value: JSON whitespace
            data = b"\n".join(v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values)
        try:
            t = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(
                use_threads=False, block_size=max(1 << 20, len(data) + 1)),
                parse_options=pj.ParseOptions(explicit_schema=self.value_schema,
                                              unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if t.num_rows != len(values):  # an empty value: no row
            return None
        return t.select(self.value_schema.names)

    def _check(self, v: Optional[bytes]) -> Optional[str]:
        """Why one value is malformed, or None."""
        if v is None:
            return "null value"
        try:
            obj = json.loads(v)
        except ValueError as e:
            return f"not JSON: {e}"
        if not isinstance(obj, dict):
            return f"not a JSON object: {type(obj).__name__}"
        try:
            pj.read_json(io.BytesIO(json.dumps(obj).encode()), parse_options=pj.ParseOptions(
                explicit_schema=self.value_schema, unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            return f"does not fit the schema: {e}"
        return None

    def report(self, bad: List[Dict[str, Any]], partition: int, first_offset: int) -> None:
        """Logs the malformed records of a unit (and writes them, given ``bad_records``)."""
        if not bad:
            return
        log.warning("topic %r partition %d: %d malformed value(s) skipped, the first at offset "
                    "%d (%s)", self.topic, partition, len(bad), bad[0]["offset"], bad[0]["error"])
        if self.bad_records is not None:
            os.makedirs(self.bad_records, exist_ok=True)
            path = os.path.join(self.bad_records,
                                f"bad-{self.topic}-{partition}-{first_offset}.jsonl")
            tmp = f"{path}.tmp-{os.getpid()}"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(b) + "\n" for b in bad)
            os.replace(tmp, path)


def _infer_schema(consumer: Any, topic: str, starts: Dict[int, int], ends: Dict[int, int],
                  timeout: float) -> pa.Schema:
    """The schema pyarrow.json infers from the first records of the topic."""
    ck = _kafka()
    want = {p: min(ends[p], starts[p] + _SAMPLE) for p in starts if ends[p] > starts[p]}
    if not want:
        raise InvalidArgument(f"topic {topic!r} holds no records to infer a schema from: pass "
                              "schema= (a pyarrow.Schema of the JSON values)")
    consumer.assign([ck.TopicPartition(topic, p, starts[p]) for p in want])
    values: List[bytes] = []
    left = set(want)
    deadline = time.monotonic() + timeout
    while left and len(values) < _SAMPLE and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=_SAMPLE, timeout=0.2):
            if m.error() is not None:
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    left.discard(m.partition())
                continue
            if m.offset() >= want[m.partition()] - 1:
                left.discard(m.partition())
            if m.offset() < want[m.partition()] and m.value() is not None:
                try:
                    if isinstance(json.loads(m.value()), dict):
                        values.append(m.value().replace(b"\n", b" "))
                except ValueError:
                    pass
    consumer.unassign()
    if not values:
        raise InvalidArgument(f"topic {topic!r}: none of its first records is a JSON object to "
                              "infer a schema from: pass schema=")
    t = pj.read_json(io.BytesIO(b"\n".join(values)))
    return t.schema


def _meta(bootstrap: str, topic: str, config: Optional[Mapping[str, Any]],
          connect_timeout: float) -> Tuple[Any, List[int]]:
    """A consumer and the topic's partitions, or a clear error within ``connect_timeout``."""
    ck = _kafka()
    if not isinstance(topic, str) or not topic:
        raise InvalidArgument(f"topic must be a non-empty string, got {topic!r}")
    errors: List[str] = []
    conf = _consumer_config(bootstrap, config)
    conf["error_cb"] = lambda e: errors.append(str(e))
    try:
        c = ck.Consumer(conf)
    except ck.KafkaException as e:
        raise InvalidArgument(f"Kafka consumer for {bootstrap!r}: {e}") from None
    try:
        md = c.list_topics(topic, timeout=connect_timeout)
    except ck.KafkaException as e:
        c.close()
        raise Timeout(f"Kafka broker {bootstrap!r} unreachable within {connect_timeout:g} s "
                      f"({e.args[0] if e.args else e}{'; ' + errors[-1] if errors else ''})") from None
    t = md.topics.get(topic)
    if t is None or (t.error is not None and t.error.code() in (
            ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ck.KafkaError._UNKNOWN_TOPIC)):
        c.close()
        raise UnknownName(f"Kafka broker {bootstrap!r} has no topic {topic!r}")
    if t.error is not None:
        c.close()
        raise InvalidArgument(f"Kafka topic {topic!r} on {bootstrap!r}: {t.error}")
    return c, sorted(t.partitions)


def _offsets(c: Any, topic: str, parts: List[int], start: Any, timeout: float
             ) -> Tuple[Dict[int, int], Dict[int, int]]:
    """Each partition's start (as ``start`` asks) and end offset (its high watermark now)."""
    lo, hi = {}, {}
    for p in parts:
        lo[p], hi[p] = c.get_watermark_offsets(_kafka().TopicPartition(topic, p), timeout=timeout)
    if start == "earliest":
        starts = dict(lo)
    elif start == "latest":
        starts = dict(hi)
    elif isinstance(start, Mapping):
        starts = dict(lo)
        for p, off in start.items():
            if int(p) not in lo:
                raise InvalidArgument(f"start names partition {p} of topic {topic!r}, which has "
                                      f"partitions {parts}")
            starts[int(p)] = max(lo[int(p)], int(off))
    else:
        raise InvalidArgument(f"start must be 'earliest', 'latest' or {{partition: offset}}, "
                              f"got {start!r}")
    return starts, hi


class _Reader:
    """A process's consumer for reading units (made on first use, one per source
    per process; units are read one at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.consumer: Any = None


class KafkaSource(BatchSource):
    """A topic from the start offsets to the end offsets seen at open (see the
    module doc)::

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
        if format not in ("json", "raw"):
            raise InvalidArgument(f"format must be 'json' or 'raw', got {format!r}")
        if isinstance(unit_records, bool) or not isinstance(unit_records, int) or unit_records < 1:
            raise InvalidArgument(f"unit_records must be an int >= 1, got {unit_records!r}")
        self.bootstrap, self.topic, self.config = bootstrap, topic, dict(config or {})
        self.read_timeout = float(read_timeout)
        c, parts = _meta(bootstrap, topic, config, connect_timeout)
        try:
            self.starts, self.ends = _offsets(c, topic, parts, start, connect_timeout)
            if format == "json" and schema is None:
                schema = _infer_schema(c, topic, self.starts, self.ends, connect_timeout)
        finally:
            c.close()
        if schema is not None and not isinstance(schema, pa.Schema):
            raise InvalidArgument(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
        self._decoder = _Decoder(topic, format, schema, timestamp_column, bad_records)
        self.schema, self.time = self._decoder.schema, time
        if time is not None and time not in self.schema.names:
            raise UnknownName(f"topic {topic!r} has no column {time!r} (columns: "
                              f"{', '.join(self.schema.names)})")
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
        self._parts, self._part_names, self._bounds = {}, set(), {}
        self._footers, self._nulls = {}, {}
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
        if column not in self.schema.names:
            raise UnknownName(f"topic {self.topic!r} has no column {column!r}")
        return column != self._decoder.timestamp_column

    def _consumer(self) -> Any:
        r = self._reader
        if r.consumer is None:
            r.consumer = _kafka().Consumer(_consumer_config(self.bootstrap, self.config))
        return r.consumer

    def _read_unit(self, readers: Any, u: Unit, names: List[str], file_cols: List[str],
                   batch_rows: int) -> Iterator[pa.RecordBatch]:
        p, lo, hi = self.ranges[u.index]
        with self._reader.lock:
            batches, bad = self._fetch(p, lo, hi, min(batch_rows, BATCH_RECORDS))
        self._decoder.report(bad, p, lo)
        for b in batches:
            yield b if names == self.schema.names else b.select(names)

    def _fetch(self, p: int, lo: int, hi: int, batch_rows: int
               ) -> Tuple[List[pa.RecordBatch], List[Dict[str, Any]]]:
        """Records lo..hi-1 of partition p, decoded in batches of ``batch_rows``
        records (cut by count, so the same unit gives the same batches)."""
        ck = _kafka()
        c = self._consumer()
        c.assign([ck.TopicPartition(self.topic, p, lo)])
        out: List[pa.RecordBatch] = []
        bad: List[Dict[str, Any]] = []
        msgs: List[Any] = []
        last = time.monotonic()
        done = lo >= hi
        try:
            while not done:
                got = c.consume(num_messages=batch_rows - len(msgs), timeout=0.1)
                errs = [m for m in got if m.error() is not None]
                if errs:  # rare: EOF events, broker errors
                    for m in errs:
                        err = m.error()
                        if err.code() == ck.KafkaError._PARTITION_EOF:
                            done = done or m.offset() >= hi
                        elif err.fatal():
                            raise Timeout(f"Kafka topic {self.topic!r} partition {p} at offset "
                                          f"{lo}: {err.str()}")
                        else:  # the client retries (a broker restarting): read_timeout bounds it
                            log.info("Kafka topic %r partition %d: %s", self.topic, p, err.str())
                    got = [m for m in got if m.error() is None]
                while got and got[-1].offset() >= hi:  # offsets ascend: past the unit at the end
                    got.pop()
                    done = True
                if got:
                    msgs.extend(got)
                    done = done or got[-1].offset() >= hi - 1
                    if len(msgs) >= batch_rows:
                        self._flush(p, msgs[:batch_rows], out, bad)
                        msgs = msgs[batch_rows:]
                if got:
                    last = time.monotonic()
                elif not done:
                    pos = c.position([ck.TopicPartition(self.topic, p)])[0].offset
                    if pos >= hi:  # transaction markers end the range
                        done = True
                    elif time.monotonic() - last > self.read_timeout:
                        raise Timeout(f"Kafka topic {self.topic!r} partition {p}: no record "
                                      f"for {self.read_timeout:g} s at offset {max(lo, pos)} "
                                      f"(reading up to {hi})")
            if msgs:
                self._flush(p, msgs, out, bad)
        finally:
            c.unassign()
        return out, bad

    def _flush(self, p: int, msgs: List[Any], out: List[pa.RecordBatch],
               bad: List[Dict[str, Any]]) -> None:
        b, wrong = self._decoder.decode(p, msgs)
        bad.extend(wrong)
        if b is not None:
            out.append(b)

    def close(self) -> None:
        """Closes this process's consumer (also done at exit)."""
        r = self._reader
        if r.consumer is not None:
            r.consumer.close()
            r.consumer = None


# ---- an unbounded stream ----------------------------------------------------------------
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


class KafkaStream:
    """A topic read as an unbounded stream, from ``start`` on (see the module
    doc for decoding, malformed values and errors).

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

        if format not in ("json", "raw"):
            raise InvalidArgument(f"format must be 'json' or 'raw', got {format!r}")
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
        c, self.partitions = _meta(bootstrap, topic, config, connect_timeout)
        try:
            self.starts, ends = _offsets(c, topic, self.partitions, start, connect_timeout)
            if format == "json" and schema is None:
                schema = _infer_schema(c, topic, self.starts, ends, connect_timeout)
        finally:
            c.close()
        self._decoder = _Decoder(topic, format, schema, timestamp_column, bad_records)
        self.schema, self.time = self._decoder.schema, time
        if time is not None and time not in self.schema.names:
            raise UnknownName(f"topic {topic!r} has no column {time!r} (columns: "
                              f"{', '.join(self.schema.names)})")

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
        if column not in self.schema.names:
            raise UnknownName(f"topic {self.topic!r} has no column {column!r}")
        return column != self._decoder.timestamp_column

    def _gained(self, c: Any, deal: Tuple[int, int], have: Mapping[int, Any]) -> List[int]:
        """Partitions the topic gained since the open that rank deal[0] of
        deal[1] owns and does not read yet."""
        return [p for p in _gained_partitions(c, self.topic)
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
        ck = _kafka()
        if start is not None:
            work = self.remaining(work, start)
        time_col = time if time is not None else self.time
        names = list(columns) if columns else self.schema.names
        for c in names:
            if c not in self.schema.names:
                raise UnknownName(f"topic {self.topic!r} has no column {c!r}")
        mine = sorted(int(p) for p in work)
        pos = {str(p): int(work[str(p)]) for p in mine}
        t = self.schema.field(time_col).type if time_col is not None else None
        if t is not None and not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
            raise SchemaError(f"a Kafka stream's time column {time_col!r} must be an integer "
                              f"(ms) or a timestamp, not {t}")
        late = _ms_to_ticks(self.lateness_ms, t) if t is not None else 0
        top: Dict[int, Optional[int]] = {p: None for p in mine}  # largest time per partition
        heard = {p: _now() for p in mine}  # when each partition last gave a record
        eof_at = {p: -1 for p in mine}  # the offset of each partition's latest end-of-log event

        def ended() -> bool:
            """Every partition of the rank at its end offset (given end_offsets)."""
            if not self.end_offsets or (deal is not None and any(
                    self.owner(p, deal[1]) == deal[0] and p not in top for p in self.end_offsets)):
                return False  # (a partition it will own is not there yet)
            return all(p in self.end_offsets and pos[str(p)] >= self.end_offsets[p] for p in mine)

        def at_end(p: int) -> bool:
            """Read to its end: an end-of-log event at or past its next offset."""
            return eof_at[p] >= pos[str(p)]
        mark: Optional[int] = None

        def watermark() -> Optional[int]:
            now = _now()
            live = [p for p in mine if not (at_end(p) and now - heard[p] >= self.idle_timeout)
                    and not (p in self.end_offsets and pos[str(p)] >= self.end_offsets[p])]
            if not mine:
                return (1 << 63) - 1
            if live:
                if any(top[p] is None for p in live):
                    return None
                return min(top[p] for p in live) - late
            seen = [v for v in top.values() if v is not None]
            return max(seen) - late if seen else None

        def advanced() -> Optional[Watermark]:
            nonlocal mark
            if t is None:
                return None
            w = watermark()
            if w is None or (mark is not None and w <= mark):
                return None
            mark = w
            return Watermark(_scalar(w, t))

        if not mine:
            w = advanced()
            if w is not None:
                yield dict(pos), w
            while not (wait(self.poll_interval) if wait is not None else _sleep(self.poll_interval)):
                if self.end_after_idle is not None or self.end_offsets:
                    return
            return
        c = ck.Consumer(_consumer_config(self.bootstrap, self.config))
        try:
            c.assign([ck.TopicPartition(self.topic, p, pos[str(p)]) for p in mine])
            checked = _now()
            while True:
                if deal is not None and mine and _now() - checked >= self.partition_check:
                    checked = _now()
                    for p in self._gained(c, deal, top):
                        lo, _ = c.get_watermark_offsets(ck.TopicPartition(self.topic, p),
                                                        timeout=5)
                        mine.append(p)
                        mine.sort()
                        pos[str(p)], top[p], heard[p], eof_at[p] = lo, None, _now(), -1
                        c.incremental_assign([ck.TopicPartition(self.topic, p, lo)])
                        log.info("topic %r gained partition %d: rank %d of %d reads it from "
                                 "offset %d", self.topic, p, deal[0], deal[1], lo)
                got = c.consume(num_messages=min(batch_rows, self.batch_records),
                                timeout=0 if wait is not None
                                else self.poll_interval)
                by: Dict[int, List[Any]] = {}
                for m in got:
                    err = m.error()
                    if err is None:
                        by.setdefault(m.partition(), []).append(m)
                    elif err.code() == ck.KafkaError._PARTITION_EOF:
                        if m.partition() in eof_at:  # (it may come before the records it ends)
                            eof_at[m.partition()] = max(eof_at[m.partition()], m.offset())
                    elif err.fatal():
                        raise Timeout(f"Kafka topic {self.topic!r}: {err.str()}")
                    else:  # the client reconnects by itself (a broker restarting)
                        log.info("Kafka topic %r: %s", self.topic, err.str())
                for p, msgs in sorted(by.items()):
                    heard[p] = _now()
                    if p in self.end_offsets:  # offsets ascend: the records past the end
                        while msgs and msgs[-1].offset() >= self.end_offsets[p]:
                            msgs.pop()
                        if not msgs:
                            continue
                    b, bad = self._decoder.decode(p, msgs)
                    self._decoder.report(bad, p, msgs[0].offset())
                    pos[str(p)] = msgs[-1].offset() + 1
                    if b is None:
                        continue
                    if t is not None:
                        hi = _max_ticks(b.column(time_col))
                        if hi is not None and (top[p] is None or hi > top[p]):
                            top[p] = hi
                    yield dict(pos), (b if names == self.schema.names else b.select(names))
                w = advanced()  # an idle partition stops holding the rank back, data or not
                if w is not None:
                    yield dict(pos), w
                if ended():
                    return
                if got:
                    continue
                if self.end_after_idle is not None and \
                        all(at_end(p) and _now() - heard[p] >= self.end_after_idle for p in mine):
                    return
                if wait is not None and wait(self.poll_interval):
                    return
        finally:
            c.close()


def _gained_partitions(c: Any, topic: str) -> List[int]:
    try:
        md = c.list_topics(topic, timeout=2)
    except _kafka().KafkaException as e:  # the broker away for now: next time
        log.info("topic %r: partitions not listed (%s)", topic, e)
        return []
    t = md.topics.get(topic)
    return sorted(t.partitions) if t is not None and t.error is None else []


def _now() -> float:
    return time.monotonic()


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
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


# ---- a sink ---------------------------------------------------------------------------------
_CUT_HEADER = "slash-cut"


def _json_ready(table: pa.Table) -> pa.Table:
    """Timestamps as int64 ms since the epoch, dates and other non-JSON types as strings."""
    cols = []
    for f, col in zip(table.schema, table.columns):
        t = f.type
        if pa.types.is_timestamp(t):
            col = col.cast(pa.timestamp("ms", tz=t.tz)).cast(pa.int64())
        elif pa.types.is_date(t) or pa.types.is_decimal(t) or pa.types.is_binary(t):
            col = col.cast(pa.string())
        cols.append(col)
    return pa.Table.from_arrays(cols, names=table.column_names)


class KafkaSink:
    """Fired windows written to a topic: one record per result row, its value
    a JSON object of the row (window bounds as ms since the epoch when they
    are timestamps), its key the group key (``key``: the key column(s); one
    column's value as text, several as a JSON array).

    **At least once** (no ``transactional_id``): :meth:`write` (or calling
    the sink, e.g. as ``slash.spark.stream``'s callable ``sink``) produces
    the rows and waits until the broker acknowledged every one (idempotent
    producer: no duplicate from retries); an error raises SystemFailure.
    A failure and a retry may write a window again.

    **Exactly once** (``transactional_id``): the two-phase scheme of a
    write-ahead sink tied to checkpoints. The windows a checkpoint covers are
    durable in it before it commits (the pre-commit); when the checkpoint's
    manifest commits, :meth:`deliver` writes them in one Kafka transaction
    whose records carry the checkpoint id (header ``slash-cut``) and commits
    it. On recovery, :meth:`recover` fences the dead attempt's producer
    (``init_transactions`` on the same transactional id aborts what it left
    open), reads which checkpoint the topic last committed (read_committed),
    and delivers the committed checkpoints after it, in order. A reader with
    ``isolation.level=read_committed`` sees every window once.
    """

    def __init__(self, bootstrap: str, topic: str, *, key: Union[str, Sequence[str]],
                 transactional_id: Optional[str] = None,
                 config: Optional[Mapping[str, Any]] = None, connect_timeout: float = 10.0,
                 timeout: float = 60.0) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.key = [key] if isinstance(key, str) else list(key)
        if not self.key:
            raise InvalidArgument("KafkaSink needs the key column(s) of the windows it writes")
        self.transactional_id, self.timeout = transactional_id, float(timeout)
        c, self.partitions = _meta(bootstrap, topic, None, connect_timeout)
        c.close()
        conf: Dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                "acks": "all", "linger.ms": 5,
                                "socket.connection.setup.timeout.ms": 5000}
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf["transaction.timeout.ms"] = 60_000
        conf.update(config or {})
        self._conf = conf
        self._producer: Any = None
        self._errors: List[str] = []

    def _p(self) -> Any:
        if self._producer is None:
            ck = _kafka()
            self._producer = ck.Producer(dict(self._conf, error_cb=lambda e: self._errors.append(str(e))))
            if self.transactional_id is not None:
                self._producer.init_transactions(self.timeout)  # fences and aborts a leftover
        return self._producer

    def _produce(self, table: pa.Table, headers: Optional[List[Tuple[str, bytes]]]) -> int:
        for c in self.key:
            if c not in table.column_names:
                raise UnknownName(f"KafkaSink key column {c!r} is not in the windows "
                                  f"(columns: {', '.join(table.column_names)})")
        p = self._p()
        failed: List[str] = []

        def done(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        rows = _json_ready(table).to_pylist()
        for r in rows:
            k = [r[c] for c in self.key]
            key = (k[0] if isinstance(k[0], str) else json.dumps(k[0])) if len(k) == 1 \
                else json.dumps(k)
            while True:
                try:
                    p.produce(self.topic, json.dumps(r).encode(), key.encode(),
                              headers=headers, on_delivery=done)
                    break
                except BufferError:  # the local queue is full: let it drain
                    p.poll(0.05)
        left = p.flush(self.timeout)
        if left or failed:
            raise SystemFailure(f"KafkaSink {self.topic!r}: {left} record(s) not acknowledged "
                                f"within {self.timeout:g} s"
                                + (f"; {failed[0]}" if failed else "")
                                + (f"; {self._errors[-1]}" if self._errors else ""))
        return len(rows)

    def write(self, table: pa.Table) -> int:
        """At least once: the rows of ``table``, acknowledged; returns how many."""
        if self.transactional_id is not None:
            raise InvalidState("a transactional KafkaSink writes by deliver(checkpoint_id, ...)")
        return self._produce(table, None)

    __call__ = write

    def deliver(self, checkpoint_id: int, table: pa.Table) -> int:
        """The windows checkpoint ``checkpoint_id`` covers, in one committed
        transaction (after its manifest committed)."""
        if self.transactional_id is None:
            raise InvalidState("deliver() needs a KafkaSink with a transactional_id")
        p = self._p()
        p.begin_transaction()
        try:
            n = self._produce(table, [(_CUT_HEADER, str(int(checkpoint_id)).encode())])
        except BaseException:
            p.abort_transaction(self.timeout)
            raise
        p.commit_transaction(self.timeout)
        return n

    def delivered(self) -> Optional[int]:
        """The highest checkpoint id whose windows the topic holds committed, or None."""
        ck = _kafka()
        c = ck.Consumer(_consumer_config(self.bootstrap, {"isolation.level": "read_committed"}))
        best: Optional[int] = None
        try:
            for part in self.partitions:
                lo, hi = c.get_watermark_offsets(ck.TopicPartition(self.topic, part),
                                                 timeout=self.timeout)
                if hi <= lo:
                    continue
                c.assign([ck.TopicPartition(self.topic, part, lo)])
                done, last = False, time.monotonic()
                while not done:
                    got = c.consume(num_messages=10_000, timeout=0.2)
                    for m in got:
                        if m.error() is not None:
                            if m.error().code() == ck.KafkaError._PARTITION_EOF:
                                done = True
                            continue
                        for h, v in m.headers() or []:
                            if h == _CUT_HEADER:
                                best = max(best or 0, int(v))
                        if m.offset() >= hi - 1:
                            done = True
                    if got:
                        last = time.monotonic()
                    elif c.position([ck.TopicPartition(self.topic, part)])[0].offset >= hi:
                        done = True
                    elif time.monotonic() - last > self.timeout:
                        raise Timeout(f"KafkaSink {self.topic!r}: partition {part} gave no record "
                                      f"for {self.timeout:g} s")
                c.unassign()
        finally:
            c.close()
        return best

    def recover(self, committed: Mapping[int, pa.Table]) -> List[int]:
        """After a failure: fences the dead producer (its open transaction is
        aborted), then delivers each committed checkpoint's windows
        (``committed``: checkpoint id -> windows) that the topic lacks, in
        id order. Returns the ids delivered."""
        if self.transactional_id is None:
            raise InvalidState("recover() needs a KafkaSink with a transactional_id")
        self._p()
        have = self.delivered()
        out = []
        for cid in sorted(committed):
            if have is None or cid > have:
                self.deliver(cid, committed[cid])
                out.append(cid)
        return out

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)
            self._producer = None
