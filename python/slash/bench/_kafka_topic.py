"""``slash bench kafka``'s topic: the YSB events as JSON values, produced
round-robin over the partitions (filled up front, or paced at a rate with
event time = the wall clock), and the reference answer (DuckDB over the
values read back from the broker).

Invariants: event i goes to partition i mod P, so each partition is in
event-time order; after a filled topic's events, one closing view per
partition (campaign :data:`CLOSER`, a minute of event time later) moves
every partition's watermark past the last window; the closers' window is
left out of every answer compared (:func:`comparable`) and of the reference.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa

from slash._core import KafkaPacer, kafka_fetch_available
from slash.errors import InvalidArgument, NotSupported, SlashError, SystemFailure

WINDOW_MS = 10_000
#: the fields the query reads, as every side is given them
SCHEMA = pa.schema([("campaign", pa.int64()), ("event_type", pa.string()),
                    ("event_time", pa.int64())])
#: the reference: DuckDB over the topic's values
SQL = (f"SELECT event_time - event_time % {WINDOW_MS} AS window_start, campaign, "
       f"count(*) AS count FROM events WHERE event_type = 'view' GROUP BY ALL")
ANSWER_COLUMNS = ["window_start", "campaign", "count"]
#: the campaign of the closing records (see the module doc)
CLOSER = -1


# ---- the topic ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Topic:
    """A filled topic: where it is and what it holds."""

    bootstrap: str
    name: str
    partitions: int
    records: int  # the YSB events (the closers not counted)
    end_offsets: Dict[int, int] = field(default_factory=dict)


def ysb_json(records: int, keys: int, rate: int, seed: int, first: int = 0) -> pa.Array:
    """Events first .. first + records - 1 of the YSB stream as JSON objects
    (strings; see the module doc), formatted by DuckDB."""
    import duckdb  # optional dependency (the reference)

    import slash.workloads as w  # start-up: only the writer of the topic needs the generators

    t = w.ysb(records, keys=keys, rate=rate, seed=seed, start=first)
    t = t.set_column(t.schema.get_field_index("ad_type"), "ad_type",
                     t.column("ad_type").cast(pa.string()))
    t = t.set_column(t.schema.get_field_index("event_type"), "event_type",
                     t.column("event_type").cast(pa.string()))
    con = duckdb.connect()
    try:
        con.register("e", t)
        return con.sql(
            "SELECT json_object('user_id', lower(hex(user_id)), 'page_id', lower(hex(page_id)), "
            "'ad_id', lower(hex(ad_id)), 'ad_type', ad_type, 'event_type', event_type, "
            "'event_time', event_time, 'ip_address', concat_ws('.', ip_address >> 24, "
            "(ip_address >> 16) & 255, (ip_address >> 8) & 255, ip_address & 255), "
            "'campaign', key)::VARCHAR AS v FROM e").to_arrow_table().column("v").combine_chunks()
    finally:
        con.close()


def producer_config(bootstrap: str) -> Dict[str, Any]:
    """The settings of every producer of the benchmark (librdkafka's names)."""
    return {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
            "compression.type": "none", "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000}


def producer(bootstrap: str) -> Any:
    import confluent_kafka as ck  # optional dependency (confluent-kafka)

    return ck.Producer(producer_config(bootstrap))


def produce_spread(p: Any, topic: str, values: Sequence[str], partitions: int, first: int) -> None:
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, v, partition=(first + i) % partitions)
                break
            except BufferError:  # the local queue is full: let it drain
                p.poll(0.05)


def fill_topic(broker_bootstrap: str, create: Callable[[str, int], None], name: str,
               records: int, partitions: int, keys: int, rate: int, seed: int,
               chunk: int = 500_000) -> Topic:
    """Creates topic ``name`` and fills it (see the module doc); returns it
    with its end offsets."""
    create(name, partitions)
    p = producer(broker_bootstrap)
    last_ms = 0
    for first in range(0, records, chunk):
        n = min(chunk, records - first)
        values = ysb_json(n, keys, rate, seed, first).to_pylist()
        last_ms = json.loads(values[-1])["event_time"]
        produce_spread(p, name, values, partitions, first)
        p.poll(0)
    close_ms = last_ms + 6 * WINDOW_MS
    for part in range(partitions):
        p.produce(name, json.dumps({"campaign": CLOSER, "event_type": "view",
                                    "event_time": close_ms}), partition=part)
    if p.flush(120):
        raise SystemFailure(f"topic {name!r}: records not acknowledged within 120 s")
    return Topic(broker_bootstrap, name, partitions, records, end_offsets(broker_bootstrap, name))


def end_offsets(bootstrap: str, topic: str) -> Dict[int, int]:
    import confluent_kafka as ck  # optional dependency (confluent-kafka)

    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "slash-bench"})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        return {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in sorted(md.partitions)}
    finally:
        c.close()


def topic_values(topic: Topic) -> List[bytes]:
    """Every value of the topic, read back by a plain consumer (the reference's input)."""
    import confluent_kafka as ck  # optional dependency (confluent-kafka)

    c = ck.Consumer({"bootstrap.servers": topic.bootstrap, "group.id": "slash-bench-reference",
                     "enable.auto.commit": False, "enable.partition.eof": True})
    out: List[bytes] = []
    try:
        for p, end in topic.end_offsets.items():
            if end <= 0:
                continue
            c.assign([ck.TopicPartition(topic.name, p, 0)])
            last, nxt = time.monotonic(), 0
            while nxt < end:
                # as many as are left: consume() returns once it has them, not at its timeout
                got = c.consume(num_messages=min(100_000, end - nxt), timeout=1.0)
                for m in got:
                    if m.error() is None and nxt <= m.offset() < end:
                        out.append(m.value())
                        nxt = m.offset() + 1
                if got:
                    last = time.monotonic()
                elif time.monotonic() - last > 60:
                    raise SystemFailure(f"topic {topic.name!r} partition {p}: no record for 60 s")
            c.unassign()
    finally:
        c.close()
    return out


def reference(values: List[bytes], workdir: str) -> pa.Table:
    """DuckDB's answer over the topic's values (its own JSON reader over them)."""
    import duckdb  # optional dependency (the reference)

    path = os.path.join(workdir, "topic.jsonl")
    with open(path, "wb") as f:
        f.write(b"\n".join(values))
        f.write(b"\n")
    con = duckdb.connect()
    try:
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_json('{path}', format = "
                    "'newline_delimited', columns = {campaign: 'BIGINT', event_type: 'VARCHAR', "
                    "event_time: 'BIGINT'})")
        return comparable(con.sql(SQL).to_arrow_table())
    finally:
        con.close()


def comparable(t: pa.Table) -> pa.Table:
    """An answer as compared: its YSB windows (the closers' left out), int64 columns."""
    import pyarrow.compute as pc  # start-up: pyarrow.compute costs 35-48 ms to import

    t = t.select(ANSWER_COLUMNS).cast(pa.schema([(c, pa.int64()) for c in ANSWER_COLUMNS]))
    return t.filter(pc.not_equal(t.column("campaign"), CLOSER))


def paced_values(n: int, keys: int, seed: int) -> List[Tuple[str, str]]:
    """n YSB events as JSON cut around their event_time: (head, tail), the
    value being head + str(event time) + tail."""
    mark = '"event_time":-7777'
    out = []
    for v in ysb_json(n, keys, 1000, seed).to_pylist():
        v = v.replace(f'"event_time":{json.loads(v)["event_time"]}', mark, 1)
        head, tail = v.split(mark, 1)
        out.append((head + '"event_time":', tail))
    return out


#: events/s fed while the side starts (see produce_paced)
TRICKLE_RATE = 100
#: how produce_paced feeds: auto (the core's producer when the core has
#: Kafka), core or confluent
PRODUCER_ENV = "SLASH_KAFKA_PRODUCER"


def producer_kind() -> str:
    """Which form :func:`produce_paced` takes: ``core`` (the C core's paced
    producer, :class:`slash._core.KafkaPacer`) when the core was built with
    librdkafka, else ``confluent`` (a Python loop over confluent-kafka);
    :data:`PRODUCER_ENV` overrides the choice."""
    want = os.environ.get(PRODUCER_ENV, "auto") or "auto"
    if want not in ("auto", "core", "confluent"):
        raise InvalidArgument(f"{PRODUCER_ENV} must be auto, core or confluent, got {want!r}")
    have = kafka_fetch_available() is not None
    if want == "core" and not have:
        raise NotSupported(f"{PRODUCER_ENV}=core: the core was built without librdkafka "
                           "(apt-get install librdkafka-dev, then rebuild)")
    return "core" if want != "confluent" and have else "confluent"


def produce_paced(bootstrap: str, topic: str, partitions: int, rate: int,
                  until: Callable[[], Optional[float]], values: List[Tuple[str, str]],
                  tick_s: float = 0.01, limit_s: float = 900.0,
                  starting: Callable[[], bool] = lambda: False) -> Dict[str, int]:
    """``rate`` events/s, each stamped with the wall clock (ms) when it is
    produced (event k: ``head + ms + tail`` of ``values[k % len(values)]``),
    round-robin over the partitions, until the time ``until()`` returns
    (None: not known yet; at most ``limit_s``). While ``starting()`` holds
    (the side is not up yet), a trickle of TRICKLE_RATE events/s instead,
    so that the side starts on a live stream without a backlog of its
    start-up to catch up on. Returns the events, the first and last ms, and
    those of the span at ``rate`` (``full_events``, ``full_from_ms``).

    Two forms (:func:`producer_kind`): the core's producer runs in C on a
    thread of its own without the GIL (this thread only watches ``until``
    and ``starting``), so it takes little of the CPU the side measured
    needs; the confluent-kafka loop makes a Python string per event."""
    form = _paced_core if producer_kind() == "core" else _paced_confluent
    return form(bootstrap, topic, partitions, rate, until, values, tick_s, limit_s, starting)


def _paced_core(bootstrap: str, topic: str, partitions: int, rate: int,
                until: Callable[[], Optional[float]], values: List[Tuple[str, str]],
                tick_s: float, limit_s: float, starting: Callable[[], bool]) -> Dict[str, int]:
    pacer = KafkaPacer(topic, partitions, producer_config(bootstrap), values)
    got: Dict[str, Any] = {}

    def feed() -> None:
        try:
            got["counts"] = pacer.run(rate, TRICKLE_RATE, tick_s, limit_s)
        except BaseException as e:  # raised on the caller's thread below
            got["error"] = e

    t = threading.Thread(target=feed, name=f"paced-{topic}", daemon=True)
    t.start()
    full = False
    try:
        try:
            while t.is_alive():
                if not full and not starting():
                    pacer.full()
                    full = True
                end = until()
                if end is not None:
                    pacer.end(end)
                t.join(tick_s)
        finally:
            if t.is_alive():  # until() or starting() raised: the feed stops with it
                pacer.end(0)
                t.join()
        if "error" in got:
            raise SystemFailure(f"paced topic {topic!r}: {got['error']}") from got["error"]
        try:
            pacer.flush(60)
        except SlashError as e:
            raise SystemFailure(f"paced topic {topic!r}: {e}") from e
    finally:
        pacer.close()
    return got["counts"]


def _paced_confluent(bootstrap: str, topic: str, partitions: int, rate: int,
                     until: Callable[[], Optional[float]], values: List[Tuple[str, str]],
                     tick_s: float, limit_s: float, starting: Callable[[], bool]
                     ) -> Dict[str, int]:
    p = producer(bootstrap)
    n, i = 0, 0
    t0 = time.time()
    first_ms = int(t0 * 1000)
    due = 0.0
    full_n, full_from, last = 0, None, t0
    while True:
        now = time.time()
        end = until()
        if (end is not None and now >= end) or now - t0 >= limit_s:
            break
        if full_from is None and not starting():
            full_from, full_n = now, n
        due += (now - last) * (rate if full_from is not None else TRICKLE_RATE)
        last = now
        ms = str(int(now * 1000))
        while n < int(due):
            if n % 256 == 255 and time.time() - now >= tick_s:
                break  # no longer than a tick: the rest stays due (see the core's form)
            head, tail = values[i]
            i = (i + 1) % len(values)
            while True:
                try:
                    p.produce(topic, head + ms + tail, partition=n % partitions)
                    break
                except BufferError:
                    p.poll(0.01)
            n += 1
        p.poll(0)
        time.sleep(max(0.0, tick_s - (time.time() - now)))
    last_ms = int(time.time() * 1000)
    if p.flush(60):
        raise SystemFailure(f"paced topic {topic!r}: records not acknowledged within 60 s")
    full_from = last if full_from is None else full_from
    return {"events": n, "first_ms": first_ms, "last_ms": last_ms,
            "full_events": n - full_n, "full_from_ms": int(full_from * 1000)}
