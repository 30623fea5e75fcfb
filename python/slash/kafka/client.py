"""The Kafka wire client the topic inputs and the sink share: the
``confluent-kafka`` import, the consumer settings, and what a topic is at
open (its partitions, their start and end offsets, the JSON schema of its
values when none is given).

Records are read by :mod:`slash.kafka.reader`.

Invariants: every consumer here is assigned partitions directly, never
joins a consumer group and never commits offsets (positions are the
engine's: a checkpoint records them); it reads with
``isolation.level=read_committed``, so an aborted transaction's records are
never input. An unreachable broker raises :class:`slash.errors.Timeout`
within ``connect_timeout`` seconds, a missing topic UnknownName.
"""
from __future__ import annotations

import io
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import pyarrow as pa
import pyarrow.json as pj

from slash.errors import InvalidArgument, NotSupported, Timeout, UnknownName

#: the Kafka modules log as one (``slash.kafka``), as before the split
log = logging.getLogger("slash.kafka")

_SAMPLE = 1000  # records read at open to infer a JSON schema


def confluent() -> Any:
    """The ``confluent_kafka`` module, or NotSupported naming the package to install."""
    try:
        import confluent_kafka  # optional dependency (confluent-kafka)
    except ImportError:
        raise NotSupported("reading Kafka needs the confluent-kafka package "
                           "(pip install 'slash[kafka]')") from None
    return confluent_kafka


def consumer_config(bootstrap: str, extra: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The settings of every consumer of a topic input (``extra`` overrides them)."""
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
        # a reader caught up with a live topic: each fetch waits for 256 KB (or the 50 ms
        # above) instead of answering each few records, so a rank polls in batches (bench/
        # kafka_consume.py --paced 30000: 20% less CPU per record in the rank and in the
        # broker, for 20 ms more read lag at the median)
        "fetch.min.bytes": 256 << 10,
        # one partition is read at a time (a unit): large fetches, few round trips
        "max.partition.fetch.bytes": 16 << 20,
        "queued.min.messages": 500_000,
        # a full local queue (queued.max.messages.kbytes, 64 MB: about a second of a rank's
        # reading) postpones the next fetch by this much, librdkafka's 1 s by default: time
        # enough for a consumer behind to empty the queue and wait for the broker
        "fetch.queue.backoff.ms": 20,
    }
    conf.update(extra or {})
    return conf


def connect(bootstrap: str, topic: str, config: Optional[Mapping[str, Any]],
            connect_timeout: float) -> Tuple[Any, List[int]]:
    """A consumer and the topic's partitions, or a clear error within ``connect_timeout``."""
    ck = confluent()
    if not isinstance(topic, str) or not topic:
        raise InvalidArgument(f"topic must be a non-empty string, got {topic!r}")
    errors: List[str] = []
    conf = consumer_config(bootstrap, config)
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
        lo[p], hi[p] = c.get_watermark_offsets(confluent().TopicPartition(topic, p), timeout=timeout)
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



def _infer_schema(consumer: Any, topic: str, starts: Dict[int, int], ends: Dict[int, int],
                  timeout: float) -> pa.Schema:
    """The schema pyarrow.json infers from the first records of the topic."""
    ck = confluent()
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

@dataclass(frozen=True)
class TopicAtOpen:
    """What a topic input learns at open: the partitions, each one's start
    offset (as ``start`` asked) and end offset (its high watermark then), and
    the schema of the values (given, inferred from the first records for
    ``json``, None for ``raw``)."""

    partitions: List[int]
    starts: Dict[int, int]
    ends: Dict[int, int]
    value_schema: Optional[pa.Schema]


def open_topic(bootstrap: str, topic: str, *, fmt: str, schema: Optional[pa.Schema],
               start: Union[str, Mapping[int, int]], config: Optional[Mapping[str, Any]],
               connect_timeout: float) -> TopicAtOpen:
    """Reads what :class:`TopicAtOpen` holds (the format and the schema are
    checked before the broker is asked)."""
    if fmt not in ("json", "raw"):
        raise InvalidArgument(f"format must be 'json' or 'raw', got {fmt!r}")
    c, parts = connect(bootstrap, topic, config, connect_timeout)
    try:
        starts, ends = _offsets(c, topic, parts, start, connect_timeout)
        if fmt == "json" and schema is None:
            schema = _infer_schema(c, topic, starts, ends, connect_timeout)
    finally:
        c.close()
    if schema is not None and not isinstance(schema, pa.Schema):
        raise InvalidArgument(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    return TopicAtOpen(parts, starts, ends, schema)


def gained_partitions(c: Any, topic: str) -> List[int]:
    """The topic's partitions now (none while the broker is away: asked again later)."""
    try:
        md = c.list_topics(topic, timeout=2)
    except confluent().KafkaException as e:  # the broker away for now: next time
        log.info("topic %r: partitions not listed (%s)", topic, e)
        return []
    t = md.topics.get(topic)
    return sorted(t.partitions) if t is not None and t.error is None else []
