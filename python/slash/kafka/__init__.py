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

Where it is built (one concern a module): :mod:`slash.kafka.client` (the
wire client: consumer settings, a topic's partitions, offsets and inferred
schema at open), :mod:`slash.kafka.reader` (a poll's records into one
buffer: the core's reader or confluent-kafka's), :mod:`slash.kafka.decode`
(records to batches, malformed values), :mod:`slash.kafka.source` (the
bounded source: units, positions), :mod:`slash.kafka.stream` (the unbounded
stream: per-partition watermarks, offsets as positions, re-dealing them) and
:mod:`slash.kafka.sink` (the sink, at least once or transactional). Every
name users import from here stays here.
"""
from __future__ import annotations

from slash.kafka.decode import BATCH_RECORDS, TS_TYPE
from slash.kafka.sink import KafkaSink
from slash.kafka.source import UNIT_RECORDS, KafkaSource
from slash.kafka.stream import KafkaStream

__all__ = ["BATCH_RECORDS", "KafkaSink", "KafkaSource", "KafkaStream", "TS_TYPE", "UNIT_RECORDS"]
