"""KafkaSource against a real broker (the session's ``kafka_broker``, KRaft,
started from the Apache Kafka jars): window results over a topic equal
DuckDB's over the records produced into it."""
from __future__ import annotations

import itertools
import threading
import json
import os
import time

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from slash.errors import Timeout, UnknownName
from slash.executor import GroupConfig
from slash.query import Query
from slash.runner import run

ck = pytest.importorskip("confluent_kafka")
from slash.kafka import KafkaSource, KafkaStream  # noqa: E402
from slash.sources import Watermark  # noqa: E402

SCHEMA = pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", pa.int64()),
                    ("seq", pa.int64())])
WINDOWS = {"tumbling": "tumbling:1s", "sliding": "sliding:2s/500ms", "session": "session:300ms"}
_names = itertools.count()


def topic_name(kind: str) -> str:
    return f"{kind}-{next(_names)}-{os.getpid()}"


def records(n: int, seed: int = 0, span_ms: int = 20_000, keys: int = 7):
    """n JSON records (k, t, v, seq), times ascending with jitter (out of order by < 200 ms)."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, span_ms, n)) + rng.integers(0, 200, n)
    k = rng.integers(0, keys, n)
    v = rng.integers(-50, 50, n)
    return [{"k": f"c{k[i]}", "t": int(t[i]), "v": int(v[i]), "seq": i} for i in range(n)]


def produce(broker, topic, recs, partition_of, partitions, key=None, timestamp=None):
    """Creates ``topic`` and writes ``recs`` (dicts, or bytes) to it. Its records
    are kept whatever their timestamps (no retention: old ones are not deleted)."""
    broker.create_topic(topic, partitions, **{"retention.ms": "-1"})
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                     "enable.idempotence": True})
    for i, r in enumerate(recs):
        value = r if isinstance(r, (bytes, type(None))) else json.dumps(r).encode()
        kw = {}
        if timestamp is not None:
            kw["timestamp"] = timestamp(i, r)
        p.produce(topic, value=value, key=None if key is None else key(i, r),
                  partition=partition_of(i, r), **kw)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def query(kind: str, time_col: str = "t") -> Query:
    return Query(time=time_col, window=WINDOWS[kind], key="k", aggregates=["count", "sum:v"])


def duckdb_windows(recs, kind: str) -> list:
    """The windows' (start, end, k, count, sum_v) by DuckDB over the records."""
    con = duckdb.connect()
    con.register("t", pa.Table.from_pylist(recs).rename_columns(
        ["k", "tm", "v", "seq"]))
    def start(col, n):
        return f"({col} - ((({col} % {n}) + {n}) % {n}))"
    if kind == "tumbling":
        q = f"""SELECT {start('tm', 1000)} AS s, {start('tm', 1000)} + 1000 AS e, k, count(*) AS c,
                sum(v)::BIGINT AS sv FROM t GROUP BY ALL"""
    elif kind == "sliding":
        q = f"""WITH w AS (SELECT {start('tm', 500)} - j * 500 AS s, * FROM t, range(0, 4) r(j))
                SELECT s, s + 2000 AS e, k, count(*) AS c, sum(v)::BIGINT AS sv FROM w
                WHERE tm < s + 2000 GROUP BY ALL"""
    else:
        q = """WITH f AS (SELECT *, CASE WHEN tm - lag(tm) OVER (PARTITION BY k ORDER BY tm)
                                    <= 300 THEN 0 ELSE 1 END AS new FROM t),
                    g AS (SELECT *, sum(new) OVER (PARTITION BY k ORDER BY tm
                          ROWS UNBOUNDED PRECEDING) AS sid FROM f)
               SELECT min(tm) AS s, max(tm) + 300 AS e, k, count(*) AS c, sum(v)::BIGINT AS sv
               FROM g GROUP BY k, sid"""
    return sorted(tuple(r) for r in con.sql(q).fetchall())


def windows(result: pa.Table) -> list:
    def ms(x):
        return int(x.timestamp() * 1000) if hasattr(x, "timestamp") else int(x)
    rows = [(ms(r["window_start"]), ms(r["window_end"]), r["k"], r["count"], r["sum_v"])
            for r in result.to_pylist()]
    assert len(rows) == len(set(rows[i][:3] for i in range(len(rows)))), "a window twice"
    return sorted(rows)


def run_in_background(*args, **kw):
    """``run(*args, **kw)`` on a thread: (the thread, a dict that gets "result"
    and "metrics", or "error")."""
    out = {"metrics": {}}

    def go():
        try:
            out["result"] = run(*args, metrics=out["metrics"], **kw)
        except BaseException as e:  # noqa: BLE001 -- the test asserts on it
            out["error"] = e

    th = threading.Thread(target=go)
    th.start()
    return th, out


@pytest.fixture(scope="module")
def four_partitions(kafka_broker):
    """3000 records over 4 partitions by key."""
    recs = records(3000, seed=1)
    topic = topic_name("four")
    produce(kafka_broker, topic, recs, lambda i, r: int(r["k"][1:]) % 4, 4)
    return topic, recs


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session"])
def test_window_counts_over_a_topic_equal_duckdb(kafka_broker, four_partitions, kind):
    topic, recs = four_partitions
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA)
    got = run(query(kind), src, executors=2)
    assert windows(got) == duckdb_windows(recs, kind)


def test_schema_is_inferred_from_the_first_records(kafka_broker, four_partitions):
    topic, recs = four_partitions
    src = KafkaSource(kafka_broker.bootstrap, topic)
    assert src.schema.names == ["k", "t", "v", "seq", "kafka_timestamp"]
    assert src.schema.field("t").type == pa.int64()
    assert windows(run(query("tumbling"), src, executors=2)) == duckdb_windows(recs, "tumbling")


def test_a_topic_with_fewer_partitions_than_executors(kafka_broker):
    recs = records(1500, seed=2)
    topic = topic_name("fewer")
    produce(kafka_broker, topic, recs, lambda i, r: i % 2, 2)
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA)
    assert windows(run(query("tumbling"), src, executors=3)) == duckdb_windows(recs, "tumbling")


def test_skewed_partitions_and_an_empty_one_are_dealt_by_record_count(kafka_broker):
    """8 partitions, partition 0 holds 70% of the records, partition 7 none:
    the split deals units by record count, and the result is DuckDB's."""
    recs = records(4000, seed=3)
    topic = topic_name("skew")
    produce(kafka_broker, topic, recs,
            lambda i, r: 0 if i % 10 < 7 else 1 + i % 6, 8)
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA, unit_records=500)
    rows = [sum(u.rows for u in src.split(r, 3)) for r in range(3)]
    assert sum(rows) == 4000 and max(rows) - min(rows) <= 500
    assert src.ends[7] == src.starts[7]  # the empty partition has no unit
    got = run(query("sliding"), src, executors=3)
    assert windows(got) == duckdb_windows(recs, "sliding")


def test_time_from_the_kafka_record_timestamp(kafka_broker):
    recs = records(1200, seed=4)
    topic = topic_name("ts")
    base = 1_700_000_000_000
    produce(kafka_broker, topic, recs, lambda i, r: i % 3, 3,
            timestamp=lambda i, r: base + r["t"])
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA, time="kafka_timestamp")
    got = run(query("tumbling", "kafka_timestamp"), src, executors=2)
    want = duckdb_windows([dict(r, t=base + r["t"]) for r in recs], "tumbling")
    assert windows(got) == want


def test_raw_format_keeps_key_and_value_bytes(kafka_broker):
    topic = topic_name("raw")
    values = [bytes([i % 256]) * (i % 5) + b"\x00\xff" for i in range(300)]
    produce(kafka_broker, topic, values, lambda i, r: i % 2, 2, key=lambda i, r: b"k%d" % i)
    src = KafkaSource(kafka_broker.bootstrap, topic, format="raw")
    assert src.schema.names == ["key", "value", "kafka_timestamp"]
    got = pa.Table.from_batches([b for b in src.read(0, 1) if isinstance(b, pa.RecordBatch)])
    pairs = sorted(zip(got.column("key").to_pylist(), got.column("value").to_pylist()))
    assert pairs == sorted((b"k%d" % i, v) for i, v in enumerate(values))


def test_malformed_values_are_skipped_counted_and_reported_with_their_offsets(
        kafka_broker, tmp_path, caplog):
    recs = records(900, seed=5)
    values = [json.dumps(r).encode() for r in recs]
    bad_at = {17: b"{not json", 300: b'{"k": "c1", "t": "soon", "v": 1, "seq": 0}',
              301: b"[1, 2]", 650: None, 899: b""}
    for i, v in bad_at.items():
        values[i] = v
    topic = topic_name("bad")
    produce(kafka_broker, topic, values, lambda i, r: 0, 1)
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA,
                      bad_records=str(tmp_path / "bad"))
    with caplog.at_level("WARNING", logger="slash.kafka"):
        got = run(query("tumbling"), src)  # in process: the reader's warning is caught here
    good = [r for i, r in enumerate(recs) if i not in bad_at]
    assert windows(got) == duckdb_windows(good, "tumbling")
    assert f"topic {topic!r} partition 0: 5 malformed value(s) skipped, the first at offset 17" \
        in caplog.text
    [f] = os.listdir(tmp_path / "bad")
    found = [json.loads(line) for line in open(tmp_path / "bad" / f)]
    assert [(b["topic"], b["partition"], b["offset"]) for b in found] == \
        [(topic, 0, i) for i in sorted(bad_at)]
    assert "null value" in found[3]["error"] and "schema" in found[1]["error"]


def test_malformed_values_read_by_executor_processes_are_counted_in_the_runs_metrics(
        kafka_broker):
    values = [json.dumps(r).encode() for r in records(600, seed=6)]
    for i in (5, 250, 401):
        values[i] = b"{oops"
    topic = topic_name("badm")
    produce(kafka_broker, topic, values, lambda i, r: i % 2, 2)
    m = {}
    run(query("tumbling"), KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA),
        executors=2, metrics=m)
    assert m["malformed_records"] == 3
    assert sorted(x["malformed_records"] for x in m["per_executor"]) == [1, 2]


def test_an_unreachable_broker_is_a_clear_error_within_seconds():
    from slash.bench._kafka_broker import free_port

    t0 = time.monotonic()
    with pytest.raises(Timeout, match=r"unreachable within 3 s"):
        KafkaSource(f"127.0.0.1:{free_port()}", "t", schema=SCHEMA, connect_timeout=3)
    assert time.monotonic() - t0 < 8


def test_a_missing_topic_is_named(kafka_broker):
    with pytest.raises(UnknownName, match="no topic 'nosuch'"):
        KafkaSource(kafka_broker.bootstrap, "nosuch", schema=SCHEMA)


def test_positions_are_offsets_and_a_resplit_reads_every_record_once(kafka_broker):
    """Half of each rank's work read, the rest re-dealt to 3 ranks: every
    record (by seq) is read exactly once in all."""
    recs = records(2000, seed=6)
    topic = topic_name("resplit")
    produce(kafka_broker, topic, recs, lambda i, r: i % 5, 5)
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA, unit_records=150)
    seen, lefts = [], []
    for rank in range(2):
        work = src.work(rank, 2)
        pos = None
        for i, (pos, item) in enumerate(src.read_work(work, ["seq"], batch_rows=40)):
            seen += item.column(0).to_pylist()
            if i == 7:
                break
        lefts.append(src.remaining(work, pos))
        p, lo, _ = src.ranges[lefts[-1][0][0]]
        assert lo + 40 * lefts[-1][0][1] <= src.ends[p]  # [unit, batches]: an offset of p
    for work in src.resplit(lefts, 3):
        seen += [s for _, b in src.read_work(work, ["seq"], batch_rows=40)
                 for s in b.column(0).to_pylist()]
    assert sorted(seen) == list(range(2000))


def test_an_executor_killed_mid_topic_with_checkpoints_gives_duckdbs_output(
        kafka_broker, tmp_path, monkeypatch):
    recs = records(6000, seed=7)
    topic = topic_name("kill")
    produce(kafka_broker, topic, recs, lambda i, r: i % 4, 4)
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA, unit_records=400)
    monkeypatch.setenv("SLASH_TEST_KILL", "1:6:0:1")  # rank 1 at push 6, after a cut
    m = {}
    got = run(query("session"), src, executors=2, checkpoint=str(tmp_path / "ck"),
              checkpoint_every="2 batches", group=GroupConfig(epoch_ms=10), metrics=m)
    assert windows(got) == duckdb_windows(recs, "session")
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["from_checkpoint"] is not None


# ---- KafkaStream: unbounded, watermarks per partition -----------------------------------
@pytest.mark.parametrize("kind", ["tumbling", "session"])
def test_stream_window_counts_over_a_topic_equal_duckdb(kafka_broker, four_partitions, kind):
    topic, recs = four_partitions
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=250,
                      idle_timeout=0.5, end_after_idle=1.0)
    m = {}
    got = run(query(kind), src, executors=2, metrics=m)
    assert windows(got) == duckdb_windows(recs, kind)
    assert m["late_records"] == 0


def test_per_partition_watermarks_keep_a_lagging_partition_on_time(kafka_broker):
    """Partition 0 is 10 s of event time ahead of partition 1, whose records
    arrive 2.5 s later, both in order: with lateness 0 nothing is late, since
    the rank's watermark is the minimum over its partitions (one watermark
    from the largest time seen would make all of partition 1 late)."""
    ahead = [dict(r, t=r["t"] + 10_000) for r in records(800, seed=8)]
    behind = [dict(r, seq=r["seq"] + 800) for r in records(800, seed=9)]
    recs = [dict(r, t=r["t"] - r["t"] % 200) for r in ahead + behind]  # ascending per partition
    topic = topic_name("lag")
    produce(kafka_broker, topic, recs[:800], lambda i, r: 0, 2)

    def later():
        time.sleep(2.5)
        p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap})
        for r in recs[800:]:
            p.produce(topic, json.dumps(r).encode(), partition=1)
        p.flush(10)

    th = threading.Thread(target=later)
    th.start()
    try:
        src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=0,
                          idle_timeout=30, end_after_idle=4.0)
        m = {}
        got = run(query("tumbling"), src, executors=1, metrics=m)
    finally:
        th.join()
    assert m["late_records"] == 0
    assert windows(got) == duckdb_windows(recs, "tumbling")


def test_an_idle_partition_stops_holding_the_watermark_after_the_idle_timeout(kafka_broker):
    """Partition 1 stays silent while partition 0 gets a record every 50 ms:
    no watermark until partition 1 has been idle for idle_timeout, then the
    watermark follows partition 0 alone."""
    topic = topic_name("idle")
    kafka_broker.create_topic(topic, 2)
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=0,
                      idle_timeout=1.0)
    stop = threading.Event()
    sent = []

    def feed():
        p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0})
        i = 0
        while not stop.is_set() and i < 80:
            r = {"k": "c0", "t": 1000 * i, "v": 1, "seq": i}
            p.produce(topic, json.dumps(r).encode(), partition=0)
            p.flush(5)
            sent.append(r["t"])
            i += 1
            time.sleep(0.05)

    th = threading.Thread(target=feed)
    t0 = time.monotonic()
    th.start()
    marks = []
    try:
        for item in src.read(0, 1, time="t"):
            if isinstance(item, Watermark):
                marks.append((time.monotonic() - t0, item.value.as_py()))
                if len(marks) >= 5:
                    break
            assert time.monotonic() - t0 < 20
    finally:
        stop.set()
        th.join()
    assert marks[0][0] >= 1.0  # partition 1 held the rank back until it was idle
    assert [v for _, v in marks] == sorted(v for _, v in marks)
    assert all(v in sent for _, v in marks)  # partition 0's largest time, lateness 0


def test_a_stream_goes_on_across_a_broker_restart(kafka_broker):
    """Half the records, then the broker restarts (same port and data) while
    the stream reads, then the other half: every record counted once."""
    recs = records(2000, seed=12)
    topic = topic_name("restart")
    produce(kafka_broker, topic, recs[:1000], lambda i, r: i % 2, 2)
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=250,
                      idle_timeout=30, end_offsets={0: 1000, 1: 1000})
    th, out = run_in_background(query("tumbling"), src, executors=2)
    time.sleep(2.0)  # the stream has read the first half and waits for more
    kafka_broker.restart()
    p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "enable.idempotence": True})
    for i, r in enumerate(recs[1000:]):
        p.produce(topic, json.dumps(r).encode(), partition=i % 2)
    assert p.flush(30) == 0
    th.join(120)
    assert not th.is_alive() and "error" not in out, out.get("error")
    assert out["metrics"]["late_records"] == 0
    assert windows(out["result"]) == duckdb_windows(recs, "tumbling")


def test_a_stream_picks_up_partitions_the_topic_gains(kafka_broker):
    """A topic of 2 partitions gains a third while 2 executors read it: the
    rank that owns it (2 mod 2 = rank 0) reads it from its start."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    recs = records(600, seed=15)
    later = [dict(r, t=r["t"] + 25_000, seq=r["seq"] + 600) for r in records(300, seed=16)]
    topic = topic_name("grow")
    produce(kafka_broker, topic, recs, lambda i, r: i % 2, 2)
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=250,
                      idle_timeout=30, partition_check=0.2,
                      end_offsets={0: 300, 1: 300, 2: 300})
    th, out = run_in_background(query("tumbling"), src, executors=2)
    time.sleep(2.0)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for r in later:
        p.produce(topic, json.dumps(r).encode(), partition=2)
    assert p.flush(30) == 0
    th.join(120)
    assert not th.is_alive() and "error" not in out, out.get("error")
    assert out["metrics"]["late_records"] == 0
    assert windows(out["result"]) == duckdb_windows(recs + later, "tumbling")


# ---- slash run ---------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["bounded", "stream"])
def test_slash_run_reads_a_topic(kafka_broker, four_partitions, tmp_path, stream):
    import subprocess
    import sys

    import pyarrow.parquet as pq

    topic, recs = four_partitions
    out = tmp_path / "out.parquet"
    argv = [sys.executable, "-m", "slash", "run", "--kafka-bootstrap", kafka_broker.bootstrap,
            "--topic", topic, "--time", "t", "--window", "tumbling:1s", "--key", "k",
            "--agg", "count", "--agg", "sum:v", "--executors", "2", "--output", str(out)]
    if stream:
        argv += ["--kafka-stream", "--lateness", "250ms", "--kafka-idle-timeout", "500ms",
                 "--kafka-end-after-idle", "1s"]
    got = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert "3,000 records" in got.stdout + got.stderr
    assert windows(pq.read_table(out)) == duckdb_windows(recs, "tumbling")


def test_slash_run_names_a_missing_kafka_option(tmp_path):
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-m", "slash", "run", "--topic", "t", "--time", "t",
                          "--window", "tumbling:1s", "--key", "k", "--agg", "count",
                          "--output", str(tmp_path / "o.parquet")],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode != 0
    assert "needs both --kafka-bootstrap HOST:PORT and --topic T" in got.stderr


def test_a_stream_killed_mid_topic_with_checkpoints_resumes_at_its_offsets(
        kafka_broker, tmp_path, monkeypatch):
    """Rank 1 is SIGKILLed after a committed checkpoint; the group restarts
    from it, each rank seeking its partitions to the offsets the checkpoint
    recorded: the output equals DuckDB's (no record lost or counted twice)."""
    recs = records(6000, seed=10)
    topic = topic_name("skill")
    produce(kafka_broker, topic, recs, lambda i, r: i % 4, 4)
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=250,
                      idle_timeout=0.5, end_after_idle=1.0, batch_records=200)
    monkeypatch.setenv("SLASH_TEST_KILL", "1:8:0:1")  # rank 1 at push 8, after a cut
    m = {}
    got = run(query("tumbling"), src, executors=2, checkpoint=str(tmp_path / "ck"),
              checkpoint_every="2 batches", group=GroupConfig(epoch_ms=10), metrics=m)
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["from_checkpoint"] is not None
    assert m["late_records"] == 0
    assert windows(got) == duckdb_windows(recs, "tumbling")


def killed_then_resumed(monkeypatch, q, src, kill, first_n, then_n, directory):
    """A checkpointed run of ``first_n`` executors killed by SLASH_TEST_KILL=``kill``
    with no restart left, then the same query resumed from ``directory`` with
    ``then_n``: (its result, its metrics)."""
    kw = dict(checkpoint=directory, checkpoint_every="2 batches", group=GroupConfig(epoch_ms=10))
    monkeypatch.setenv("SLASH_TEST_KILL", kill)
    with pytest.raises(Exception):
        run(q, src, executors=first_n, max_restarts=0, **kw)
    monkeypatch.delenv("SLASH_TEST_KILL")
    m = {}
    return run(q, src, executors=then_n, metrics=m, **kw), m


def test_a_checkpoint_of_a_topic_resumes_on_another_executor_count(
        kafka_broker, tmp_path, monkeypatch):
    """A run of 2 executors dies (no restart left) after a checkpoint; the
    same query resumed from its directory with 3 executors re-deals the
    units left, with their offsets, and gives DuckDB's output."""
    recs = records(6000, seed=11)
    topic = topic_name("rescale")
    produce(kafka_broker, topic, recs, lambda i, r: i % 5, 5)
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA, unit_records=300)
    got, m = killed_then_resumed(monkeypatch, query("sliding"), src, "0:8:0:1", 2, 3,
                                 str(tmp_path / "ck"))
    assert windows(got) == duckdb_windows(recs, "sliding")
    assert m["records_replayed"] < 6000  # resumed from the cut, not from the start


# ---- KafkaSink --------------------------------------------------------------------------
def read_topic(broker, topic, isolation="read_committed"):
    """Every record of ``topic`` as (key, value dict, headers) in partition/offset order."""
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                     "isolation.level": isolation, "enable.partition.eof": True,
                     "enable.auto.commit": False})
    out = []
    md = c.list_topics(topic, timeout=10).topics[topic]
    for p in sorted(md.partitions):
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                break
            out.append((m.key().decode(), json.loads(m.value()), dict(m.headers() or [])))
        c.unassign()
    c.close()
    return out


def test_sink_writes_each_fired_window_keyed_by_its_group_key(kafka_broker, four_partitions):
    from slash.kafka import KafkaSink

    topic, recs = four_partitions
    result = run(query("sliding"), KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA),
                 executors=2)
    out = topic_name("out")
    kafka_broker.create_topic(out, 3)
    sink = KafkaSink(kafka_broker.bootstrap, out, key="k")
    assert sink.write(result) == result.num_rows
    sink.close()
    got = read_topic(kafka_broker, out)
    assert all(k == v["k"] for k, v, _ in got)
    assert sorted((v["window_start"], v["window_end"], v["k"], v["count"], v["sum_v"])
                  for _, v, _ in got) == duckdb_windows(recs, "sliding")


def window_table(cut: int) -> pa.Table:
    """The windows a checkpoint `cut` covers (a fixed table per cut)."""
    return pa.table({"window_start": pa.array([cut * 1000] * 3, pa.int64()),
                     "window_end": pa.array([cut * 1000 + 1000] * 3, pa.int64()),
                     "k": ["a", "b", "c"], "count": pa.array([cut, cut + 1, cut + 2], pa.int64())})


_DIES_IN_A_TRANSACTION = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from test_kafka import window_table
from slash.kafka import KafkaSink
s = KafkaSink({bootstrap!r}, {topic!r}, key="k", transactional_id="tx-test")
s.deliver(1, window_table(1))            # checkpoint 1: committed
p = s._p()
p.begin_transaction()                    # checkpoint 2: written, never committed
s._produce(window_table(2), [("slash-cut", b"2")])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_transactional_sink_recovers_a_killed_delivery_exactly_once(kafka_broker):
    """A producer dies inside checkpoint 2's transaction: the recovering sink
    (same transactional id) aborts it and delivers checkpoint 2 again; a
    read_committed reader sees each window once (a read_uncommitted one sees
    the dead attempt's records too), and recovering again delivers nothing."""
    import subprocess
    import sys

    from slash.kafka import KafkaSink

    topic = topic_name("tx")
    kafka_broker.create_topic(topic, 2)
    child = subprocess.run([sys.executable, "-c", _DIES_IN_A_TRANSACTION.format(
        tests=os.path.dirname(os.path.abspath(__file__)), bootstrap=kafka_broker.bootstrap,
        topic=topic)], capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr
    sink = KafkaSink(kafka_broker.bootstrap, topic, key="k", transactional_id="tx-test")
    assert sink.recover({1: window_table(1), 2: window_table(2)}) == [2]
    want = sorted(tuple(r.values()) for c in (1, 2) for r in window_table(c).to_pylist())
    got = read_topic(kafka_broker, topic)
    assert sorted(tuple(v.values()) for _, v, _ in got) == want
    assert sorted(h["slash-cut"] for _, _, h in got) == [b"1"] * 3 + [b"2"] * 3
    dirty = read_topic(kafka_broker, topic, "read_uncommitted")
    assert len(dirty) == 9  # the aborted attempt's 3 records are in the log
    sink.close()
    again = KafkaSink(kafka_broker.bootstrap, topic, key="k", transactional_id="tx-test")
    assert again.recover({1: window_table(1), 2: window_table(2)}) == []
    again.close()


def test_a_running_group_over_a_topic_rescales_two_to_three_to_two(kafka_broker, tmp_path):
    """Rescales of a checkpointed run (checkpoint, stop, restart with the new
    count): the topic's units left are re-dealt with their offsets each time,
    and the output is DuckDB's."""
    from slash.run.recovery.checkpointed import CheckpointedRun

    recs = records(8000, seed=13)
    topic = topic_name("scale")
    produce(kafka_broker, topic, recs, lambda i, r: i % 6, 6)
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA, unit_records=250)
    control = CheckpointedRun()
    th, out = run_in_background(query("session"), src, executors=2,
                                checkpoint=str(tmp_path / "ck"), checkpoint_every="2 batches",
                                group=GroupConfig(epoch_ms=10), control=control,
                                rate=1500)  # paced: ~5 s of input, the rescales land mid-run
    deadline = time.monotonic() + 30
    while control.executors is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    first = control.scale_out(1, timeout=60)
    second = control.rescale(2, timeout=60)
    th.join(120)
    assert not th.is_alive() and "error" not in out, out.get("error")
    assert (first["from"], first["to"], second["from"], second["to"]) == (2, 3, 3, 2)
    assert [(r["from"], r["to"]) for r in out["metrics"]["rescales"]] == [(2, 3), (3, 2)]
    assert windows(out["result"]) == duckdb_windows(recs, "session")


def test_a_window_join_over_two_topics_equals_duckdb(kafka_broker):
    """Clicks joined with views of the same key in the same tumbling window,
    each side a topic of its own (3 and 2 partitions)."""
    from slash.query import JoinQuery

    rng = np.random.default_rng(14)
    left = [{"k": int(rng.integers(0, 40)), "t": int(rng.integers(0, 20_000)), "a": i}
            for i in range(1500)]
    right = [{"k": int(rng.integers(0, 40)), "t": int(rng.integers(0, 20_000)), "b": i}
             for i in range(1200)]
    lt, rt = topic_name("left"), topic_name("right")
    produce(kafka_broker, lt, left, lambda i, r: i % 3, 3)
    produce(kafka_broker, rt, right, lambda i, r: i % 2, 2)
    src = (KafkaSource(kafka_broker.bootstrap, lt, timestamp_column=None),
           KafkaSource(kafka_broker.bootstrap, rt, timestamp_column=None))
    got = run(JoinQuery(time="t", window="tumbling:2s", on="k"), src, executors=2)
    pairs = sorted(zip(got.column("window_start").cast(pa.int64()).to_pylist(),
                       got.column("k").to_pylist(), got.column("left_a").to_pylist(),
                       got.column("right_b").to_pylist()))
    con = duckdb.connect()
    con.register("lhs", pa.Table.from_pylist(left))
    con.register("rhs", pa.Table.from_pylist(right))
    want = sorted(con.sql("select l.t - l.t % 2000, l.k, l.a, r.b from lhs l join rhs r "
                          "on l.k = r.k and l.t // 2000 = r.t // 2000").fetchall())
    assert len(want) > 500
    assert pairs == want


def test_partitions_that_wake_up_together_after_a_pause_make_no_record_late(kafka_broker):
    """Both partitions go quiet past idle_timeout; then partition 0 gets
    later records and partition 1 gets records of the same times 0.3 s
    after: no watermark passes partition 1's records before they are read
    (idleness is relative: when all were quiet, each gets idle_timeout again)."""
    topic = topic_name("wake")
    kafka_broker.create_topic(topic, 2)
    p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0})

    def send(part, times):
        for i, t in enumerate(times):
            p.produce(topic, json.dumps({"k": "c0", "t": t, "v": 1, "seq": i}).encode(),
                      partition=part)
        p.flush(5)

    def wake():  # both partitions quiet for 2 s (> idle_timeout), then one after the other
        time.sleep(3.0)
        send(0, range(5000, 6000, 100))
        time.sleep(0.3)
        send(1, range(5000, 6000, 100))

    send(0, range(0, 1000, 100))
    send(1, range(0, 1000, 100))
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=0,
                      idle_timeout=1.0)
    th = threading.Thread(target=wake)
    th.start()
    t0 = time.monotonic()
    mark, late, read = None, [], 0
    try:
        for item in src.read(0, 1, time="t"):
            assert time.monotonic() - t0 < 30
            if isinstance(item, Watermark):
                mark = item.value.as_py()
            elif item.num_rows:
                times = item.column("t").to_pylist()
                late += [t for t in times if mark is not None and t < mark]
                read += len(times)
            if read == 40:
                break
    finally:
        th.join()
    assert late == []


@pytest.mark.parametrize("stream", [False, True], ids=["bounded", "stream"])
def test_a_reader_hands_out_items_with_the_collector_running_and_no_record_twice(
        kafka_broker, stream):
    """Every item a rank gets (a stream's, in batches of several partitions'
    polls, and a bounded unit's) is given with Python's garbage collector
    running (it is paused only while a poll's records are decoded), every
    record once; a reader dropped mid-way leaves it running too."""
    import gc

    recs = records(3000, seed=11)
    topic = topic_name("gc")
    produce(kafka_broker, topic, recs, lambda i, r: i % 3, 3)
    if stream:
        src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, batch_records=500,
                          end_offsets={0: 1000, 1: 1000, 2: 1000})
        items = (item for _, item in src.read_work(src.work(0, 1), time="t"))
    else:
        src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA, unit_records=400)
        items = src.read(0, 1, time="t")
    seqs = []
    for item in items:
        assert gc.isenabled()
        if not isinstance(item, Watermark):
            seqs += item.column("seq").to_pylist()
    assert sorted(seqs) == list(range(3000))
    again = (src.read_work(src.work(0, 1), time="t") if stream else src.read(0, 1, time="t"))
    next(again)
    again.close()
    assert gc.isenabled()
