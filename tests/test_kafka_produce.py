"""The benchmark's paced producer (``slash.bench._kafka_topic.produce_paced``)
on the session's real broker, in both its forms (the core's producer in C,
the confluent-kafka loop in Python), each record read back by a plain
consumer:

* every record it counts is in the topic, record k in partition k mod P,
  each partition's records in production order (template k mod T);
* each record is its template's head, the wall clock (ms) and its tail, the
  stamps within the run's span and non-decreasing in each partition;
* at the full rate it feeds ``rate`` events a second over the span it
  reports (judged from the records' own counts and stamps), and the trickle
  before it switched;
* the form is chosen by the core's build, or forced by SLASH_KAFKA_PRODUCER.
"""
from __future__ import annotations

import re
import time

import pytest

ck = pytest.importorskip("confluent_kafka")

from slash._core import kafka_fetch_available  # noqa: E402
from slash.bench import _kafka_topic as kt  # noqa: E402
from slash.errors import InvalidArgument, NotSupported  # noqa: E402

FORMS = ["core", "confluent"]
PARTITIONS = 4
TEMPLATES = [(f'{{"i":{k},"event_time":', f',"pad":"{"x" * (k % 7)}"}}') for k in range(97)]
STAMPED = re.compile(rb'^\{"i":(\d+),"event_time":(\d+),"pad":"(x*)"\}$')


@pytest.fixture(params=FORMS)
def form(request, monkeypatch):
    if request.param == "core" and kafka_fetch_available() is None:
        pytest.skip("the core was built without librdkafka (apt-get install librdkafka-dev)")
    monkeypatch.setenv(kt.PRODUCER_ENV, request.param)
    return request.param


def read_back(bootstrap, topic, partitions):
    """{partition: [value, ...]} in offset order, every record of the topic."""
    ends = kt.end_offsets(bootstrap, topic)
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "produce-test",
                     "enable.auto.commit": False})
    out = {}
    try:
        for p in range(partitions):
            c.assign([ck.TopicPartition(topic, p, 0)])
            got = []
            deadline = time.monotonic() + 60
            while len(got) < ends[p] and time.monotonic() < deadline:
                for m in c.consume(num_messages=10_000, timeout=1.0):
                    assert m.error() is None, m.error()
                    got.append(m.value())
            out[p] = got
            c.unassign()
    finally:
        c.close()
    return out


def paced(broker, name, rate, seconds, trickle_s=0.0):
    broker.create_topic(name, PARTITIONS)
    t0 = time.time()
    fed = kt.produce_paced(broker.bootstrap, name, PARTITIONS, rate, lambda: t0 + seconds,
                           TEMPLATES, starting=lambda: time.time() < t0 + trickle_s)
    return fed, read_back(broker.bootstrap, name, PARTITIONS)


def test_every_record_is_in_the_topic_in_its_partition_in_production_order(kafka_broker, form):
    fed, got = paced(kafka_broker, f"paced-order-{form}", 5000, 1.5)
    assert sum(len(v) for v in got.values()) == fed["events"] > 0
    for p, values in got.items():
        # record k (template k mod T) went to partition k mod P
        want = [k % len(TEMPLATES) for k in range(p, fed["events"], PARTITIONS)]
        assert [int(STAMPED.match(v).group(1)) for v in values] == want


def test_each_record_is_its_template_stamped_with_the_wall_clock_never_decreasing(
        kafka_broker, form):
    fed, got = paced(kafka_broker, f"paced-stamp-{form}", 5000, 1.5)
    for values in got.values():
        stamps = []
        for v in values:
            m = STAMPED.match(v)
            assert m, v
            head, tail = TEMPLATES[int(m.group(1))]
            assert v == (head + m.group(2).decode() + tail).encode()
            stamps.append(int(m.group(2)))
        assert stamps == sorted(stamps)
        assert fed["first_ms"] <= stamps[0] and stamps[-1] <= fed["last_ms"]


def test_the_full_rate_is_fed_over_the_span_it_reports_after_the_trickle(kafka_broker, form):
    rate = 20_000
    fed, got = paced(kafka_broker, f"paced-rate-{form}", rate, 3.0, trickle_s=1.0)
    stamps = sorted(int(STAMPED.match(v).group(2)) for vs in got.values() for v in vs)
    span_s = (fed["last_ms"] - fed["full_from_ms"]) / 1000
    assert span_s > 1.5
    # every record produced at the full rate is stamped at or after its start
    at_full = sum(1 for s in stamps if s >= fed["full_from_ms"])
    assert at_full >= fed["full_events"]
    # due = rate x elapsed, sent each tick (10 ms): at most a few ticks short over the span
    assert abs(fed["full_events"] - rate * span_s) <= 0.03 * rate * span_s + rate * 0.03
    # before it: the trickle, TRICKLE_RATE a second
    trickle_s = (fed["full_from_ms"] - fed["first_ms"]) / 1000
    assert 0.8 < trickle_s < 2.0
    trickled = fed["events"] - fed["full_events"]
    assert abs(trickled - kt.TRICKLE_RATE * trickle_s) <= 0.1 * kt.TRICKLE_RATE * trickle_s + 3


def test_the_form_follows_the_cores_build_or_the_environment(monkeypatch):
    monkeypatch.delenv(kt.PRODUCER_ENV, raising=False)
    assert kt.producer_kind() == ("core" if kafka_fetch_available() else "confluent")
    monkeypatch.setenv(kt.PRODUCER_ENV, "confluent")
    assert kt.producer_kind() == "confluent"
    monkeypatch.setenv(kt.PRODUCER_ENV, "python")
    with pytest.raises(InvalidArgument, match="auto, core or confluent"):
        kt.producer_kind()
    monkeypatch.setenv(kt.PRODUCER_ENV, "core")
    if kafka_fetch_available() is None:
        with pytest.raises(NotSupported, match="without librdkafka"):
            kt.producer_kind()
    else:
        assert kt.producer_kind() == "core"

