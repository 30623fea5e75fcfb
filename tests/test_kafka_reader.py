"""The topic inputs' record reader (slash.kafka.reader): the core's reader
(librdkafka's C API, one buffer per poll) and confluent-kafka's consumer lay
a poll out alike, record for record as produced, and a poll's events are
sorted out by one helper. Against a real broker (the session's
``kafka_broker``) where records are read."""
from __future__ import annotations

import itertools
import json
import logging
import os

import numpy as np
import pyarrow as pa
import pytest

from slash._core import kafka_fetch_available
from slash.errors import InvalidArgument, NotSupported, Timeout
from slash.kafka.reader import (EVENT_EOF, EVENT_ERROR, Polled, end_of_log, open_reader,
                                reader_kind)

ck = pytest.importorskip("confluent_kafka")
from slash.kafka.decode import Decoder  # noqa: E402

_names = itertools.count()
needs_core = pytest.mark.skipif(kafka_fetch_available() is None,
                                reason="the core was built without librdkafka")


def _topic() -> str:
    return f"reader-{next(_names)}-{os.getpid()}"


def _produce(broker, topic, rows, partitions):
    """rows: (partition, key, value, timestamp ms)."""
    broker.create_topic(topic, partitions, **{"retention.ms": "-1"})
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for part, key, value, ts in rows:
        p.produce(topic, value=value, key=key, partition=part, timestamp=ts)
    assert p.flush(30) == 0


def _read_all(kind, broker, topic, partitions, raw, monkeypatch, per_poll=7):
    """Every record of the topic through a reader of ``kind``: (partition,
    offset, timestamp, key, value) in poll order, and the polls' EOF offsets."""
    monkeypatch.setenv("SLASH_KAFKA_READER", kind)
    r = open_reader(broker.bootstrap, topic, None)
    assert r.kind == kind
    out, eof = [], {}
    try:
        r.assign([(p, 0) for p in range(partitions)])
        for _ in range(500):
            got = r.fetch(per_poll, 0.2, raw)
            for p, off in end_of_log(got.events, topic).items():
                eof[p] = max(eof.get(p, -1), off)
            for p, recs in got.runs():
                assert np.all(recs.partition == p) and np.all(np.diff(recs.offset) == 1)
                keys = recs.binary(keys=True).to_pylist() if raw else [None] * len(recs)
                for i in range(len(recs)):
                    out.append((p, int(recs.offset[i]), int(recs.timestamp[i]), keys[i],
                                recs.value(i)))
            if len(eof) == partitions and all(
                    eof[p] >= 1 + max([o for q, o, *_ in out if q == p], default=-1)
                    for p in eof):
                break
    finally:
        r.close()
    return out, eof


ROWS = [(0, b"a", b'{"x": 1}', 1000), (1, None, b'{"x":\n2}', 1001), (0, b"", None, 1002),
        (2, b"c", b"", 1003), (1, b"d", b'{"x": 3}\r', 1004), (0, b"e", b'{"x": 4}', 1005)] + \
    [(i % 3, str(i).encode(), json.dumps({"x": i}).encode(), 2000 + i) for i in range(40)]


def _expected(raw):
    """What a reader must give for ROWS: offsets counted per partition, a value
    as one line (JSON: a newline inside made a space), a null value None."""
    next_off, out = {}, []
    for part, key, value, ts in ROWS:
        off = next_off.get(part, 0)
        next_off[part] = off + 1
        if value is not None and not raw:
            value = value.replace(b"\n", b" ").replace(b"\r", b" ")
        out.append((part, off, ts, key if raw else None, value))
    return sorted(out)


@pytest.mark.parametrize("raw", [False, True], ids=["lines", "raw"])
@pytest.mark.parametrize("kind", ["confluent", pytest.param("core", marks=needs_core)])
def test_a_reader_gives_every_record_as_produced_with_its_end_of_log(
        kafka_broker, monkeypatch, kind, raw):
    topic = _topic()
    _produce(kafka_broker, topic, ROWS, 3)
    got, eof = _read_all(kind, kafka_broker, topic, 3, raw, monkeypatch)
    assert sorted(got) == _expected(raw)
    assert eof == {p: sum(1 for r in ROWS if r[0] == p) for p in range(3)}


def test_polls_joined_decode_to_the_batch_of_one_poll():
    """KafkaSource cuts batches by count across polls: the join of pieces
    decodes to what the whole gives (values, nulls and timestamps)."""
    dec = Decoder("t", "json", pa.schema([("x", pa.int64())]), "ts", None)
    vals = [b'{"x": %d}' % i for i in range(10)]
    whole = _lines(vals, list(range(100, 110)))
    pieces = [whole.take(0, 3), whole.take(3, 4), whole.take(4, 10)]
    joined = Polled.join(pieces)
    assert joined.values == whole.values and np.array_equal(joined.starts, whole.starts)
    a, _ = dec.decode(0, whole)
    b, _ = dec.decode(0, joined)
    assert a.equals(b) and a.column("x").to_pylist() == list(range(10))


def test_a_malformed_value_in_a_poll_is_reported_at_its_offset_and_the_rest_kept():
    dec = Decoder("t", "json", pa.schema([("x", pa.int64())]), "ts", None)
    polled = _lines([b'{"x": 1}', b'{"x": oops', b'{"x": 3}'], [50, 51, 52])
    b, bad = dec.decode(4, polled)
    assert b.column("x").to_pylist() == [1, 3]
    assert b.column("ts").cast(pa.int64()).to_pylist() == [1050, 1052]
    assert [(x["partition"], x["offset"]) for x in bad] == [(4, 51)] and dec.malformed == 1


def _lines(values, offsets):
    n = len(values)
    starts = np.zeros(n + 1, np.int64)
    np.cumsum([len(v) + 1 for v in values], out=starts[1:])
    off = np.array(offsets, np.int64)
    return Polled(b"\n".join(values), starts, 1, np.zeros(n, np.int32), off, off + 1000, None)


def test_end_of_log_keeps_the_largest_offset_per_partition_and_logs_a_passing_error(caplog):
    events = [(EVENT_EOF, 0, 5, False, ""), (EVENT_EOF, 0, 9, False, ""),
              (EVENT_EOF, 2, 3, False, ""),
              (EVENT_ERROR, -1, -1, False, "broker transport failure")]
    with caplog.at_level(logging.INFO, logger="slash.kafka"):
        assert end_of_log(events, "t") == {0: 9, 2: 3}
    assert "broker transport failure" in caplog.text


def test_a_fatal_event_is_raised_naming_what_was_being_read():
    with pytest.raises(Timeout, match=r"topic 't' partition 3 at offset 70: fenced"):
        end_of_log([(EVENT_ERROR, 3, -1, True, "fenced")], "t", "partition 3 at offset 70")


def test_the_reader_is_the_cores_when_built_with_librdkafka(monkeypatch):
    monkeypatch.delenv("SLASH_KAFKA_READER", raising=False)
    assert reader_kind() == ("core" if kafka_fetch_available() else "confluent")
    # a setting the C API cannot take (a callback) is read by confluent-kafka's consumer
    assert reader_kind({"error_cb": print}) == "confluent"
    monkeypatch.setenv("SLASH_KAFKA_READER", "confluent")
    assert reader_kind() == "confluent"
    monkeypatch.setenv("SLASH_KAFKA_READER", "fast")
    with pytest.raises(InvalidArgument, match="SLASH_KAFKA_READER"):
        reader_kind()


def test_a_core_built_without_librdkafka_reads_through_confluent_kafka(monkeypatch):
    import slash._core

    monkeypatch.setattr(slash._core, "kafka_fetch_available", lambda: None)
    monkeypatch.delenv("SLASH_KAFKA_READER", raising=False)
    assert reader_kind() == "confluent"
    monkeypatch.setenv("SLASH_KAFKA_READER", "core")
    with pytest.raises(NotSupported, match="librdkafka-dev"):
        reader_kind()


@needs_core
def test_a_setting_the_caller_got_wrong_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("SLASH_KAFKA_READER", "core")
    with pytest.raises(InvalidArgument, match="no.such.setting"):
        open_reader("127.0.0.1:1", "t", {"no.such.setting": 1})
