"""Kafka topics under PySpark, on the session's real broker (KRaft):

* ``slash.spark.stream(source=KafkaStream(...))``: each barrier task reads its
  own partitions; windows equal DuckDB's over the topic's records, exactly
  once after a SIGKILLed task and across a rescale 2 -> 3 -> 2 (offsets per
  partition in the checkpoint, re-dealt with the partitions), and an idle
  partition stops holding the watermark back;
* ``slash.spark.window_aggregate(spark, KafkaSource(...))``: a bounded topic
  gives DuckDB's windows and Spark's own ``groupBy(window(...))``'s over the
  same records.

Every stream's topic ends with one closing record per partition, far later
in event time: it moves each partition's watermark past every window of the
records before it, whose windows are then the expected output."""
from __future__ import annotations

import glob
import itertools
import json
import os
import signal
import time

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")
ck = pytest.importorskip("confluent_kafka")

from slash.errors import InvalidArgument  # noqa: E402
from slash.kafka import KafkaSource, KafkaStream  # noqa: E402
from slash.spark import stream, window_aggregate  # noqa: E402
from _spark import own_session  # noqa: E402

SCHEMA = pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", pa.int64())])
QUERY = dict(time="t", window="tumbling:1s", key="k", aggs=["count", "sum:v"])
SPAN_MS = 20_000  # event time the records cover
_names = itertools.count()


@pytest.fixture(scope="module")
def spark():
    """A local[3] session of the module's own: barrier stages of 3 executors."""
    s = own_session("local[3]", "slash-test-kafka-spark")
    yield s
    s.stop()


def new_topic(broker, kind, partitions):
    name = f"spark-{kind}-{next(_names)}-{os.getpid()}"
    broker.create_topic(name, partitions, **{"retention.ms": "-1"})
    return name


def records(n, seed, partitions):
    """n records (k, t, v) ascending in time; record i goes to partition
    i mod ``partitions`` (so each partition is in order: no lateness needed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, SPAN_MS, n))
    k, v = rng.integers(0, 9, n), rng.integers(-50, 50, n)
    return [(i % partitions, {"k": f"c{k[i]}", "t": int(t[i]), "v": int(v[i])}) for i in range(n)]


def produce(broker, topic, recs):
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                     "enable.idempotence": True})
    for part, r in recs:
        p.produce(topic, json.dumps(r).encode(), partition=part)
    assert p.flush(30) == 0


def closers(partitions):
    """One record per partition far past the others: every window before it closes."""
    return [(p, {"k": "end", "t": SPAN_MS + 60_000, "v": 0}) for p in partitions]


def duckdb_windows(recs, slide_ms=1000, size_ms=1000):
    """{(window_start, k): (count, sum v)} by DuckDB over the records."""
    con = duckdb.connect()
    con.register("r", pa.Table.from_pylist([r for _, r in recs], schema=SCHEMA))
    con.register("o", pa.table({"j": list(range(size_ms // slide_ms))}))
    rows = con.execute(f"""SELECT t - t % {slide_ms} - j * {slide_ms} AS ws, k, count(*),
                                  sum(v)::BIGINT FROM r, o GROUP BY ALL""").fetchall()
    return {(ws, k): (c, s) for ws, k, c, s in rows}


def sink_windows(path):
    """{(window_start, k): (count, sum v)} a reader of the directory sink sees;
    fails on a window published twice."""
    if not os.path.isdir(path):
        return {}
    t = ds.dataset(path, format="parquet").to_table()
    if not t.num_columns:
        return {}
    keys = list(zip(t.column("window_start").to_pylist(), t.column("k").to_pylist()))
    assert len(keys) == len(set(keys)), "a window is in the sink twice"
    return {w: r for w, r in zip(keys, zip(t.column("count").to_pylist(),
                                           t.column("sum_v").to_pylist()))
            if w[1] != "end"}  # the closers' window fires only when a stream finishes


def wait_for_windows(h, out, want, timeout=60):
    deadline = time.monotonic() + timeout
    while len(sink_windows(out)) < len(want):
        assert h.running, "the stream ended"
        assert time.monotonic() < deadline, (f"the sink got {len(sink_windows(out))} of "
                                             f"{len(want)} windows")
        time.sleep(0.1)


def wait_for_checkpoints(h, k, timeout=60):
    deadline = time.monotonic() + timeout
    while len(h.metrics["checkpoints"]) < k:
        assert h.running and time.monotonic() < deadline, "no checkpoint committed"
        time.sleep(0.02)


def kafka_stream(broker, topic, **kw):
    return KafkaStream(broker.bootstrap, topic, schema=SCHEMA, idle_timeout="1s",
                       poll_interval=0.02, **kw)


def checkpointed_stream(spark, broker, tmp_path, partitions, seed, first):
    """A topic of 6000 records over ``partitions``, its ``first`` records
    produced, and a stream over it on 2 executors checkpointing every 200 ms
    into ``tmp_path/ck``: (topic, records, handle, sink directory)."""
    topic = new_topic(broker, f"ck{seed}", partitions)
    recs = records(6000, seed=seed, partitions=partitions)
    produce(broker, topic, recs[:first])
    out = str(tmp_path / "out")
    h = stream(spark, kafka_stream(broker, topic), sink=out, executors=2,
               checkpoint=str(tmp_path / "ck"), checkpoint_every="200ms", **QUERY)
    return topic, recs, h, out


def stream_to_windows(spark, broker, topic, recs, tmp_path):
    """A stream over ``topic`` on 2 executors until its sink holds every window
    of ``recs``: (the sink's windows, DuckDB's, the stream's final metrics)."""
    out = str(tmp_path / "out")
    h = stream(spark, kafka_stream(broker, topic), sink=out, executors=2, **QUERY)
    want = duckdb_windows(recs)
    try:
        wait_for_windows(h, out, want)
    finally:
        m = h.stop(60)
    return sink_windows(out), want, m


def test_a_tumbling_count_over_a_topic_equals_duckdb(spark, kafka_broker, tmp_path):
    topic = new_topic(kafka_broker, "tumbling", 4)
    recs = records(4000, seed=1, partitions=4)
    produce(kafka_broker, topic, recs + closers(range(4)))
    got, want, m = stream_to_windows(spark, kafka_broker, topic, recs, tmp_path)
    assert got == want
    assert m["late_records"] == 0 and m["records_in"] == 4000 + 4


def test_a_sigkilled_task_resumes_at_the_checkpoints_offsets_exactly_once(
        spark, kafka_broker, tmp_path):
    topic, recs, h, out = checkpointed_stream(spark, kafka_broker, tmp_path, 4, seed=2,
                                              first=3000)
    try:
        wait_for_checkpoints(h, 2)
        # the cut's positions: every partition with its next offset, in the ranks' work
        works = [json.loads(open(f).read())["work"]
                 for f in glob.glob(os.path.join(str(tmp_path / "ck"), "**", "rank-*.json"),
                                    recursive=True)]
        assert works and all(sorted(w) in (["0", "2"], ["1", "3"]) for w in works)
        victim = h.task_pids()[1]
        os.kill(victim, signal.SIGKILL)
        produce(kafka_broker, topic, recs[3000:] + closers(range(4)))
        want = duckdb_windows(recs)
        wait_for_windows(h, out, want)
    finally:
        m = h.stop(60)
    [rec] = m["recoveries"]
    assert rec["rank"] == 1 and str(victim) in rec["cause"]
    assert sink_windows(out) == want
    assert m["late_records"] == 0


def topic_windows(broker, topic):
    """{(window_start, k): (count, sum v)} a read_committed reader of a sink
    topic sees; fails on a window delivered twice."""
    from test_kafka import read_topic

    got = [v for _, v, _ in read_topic(broker, topic)]
    keys = [(v["window_start"], v["k"]) for v in got]
    assert len(keys) == len(set(keys)), "a window is in the topic twice"
    return {(v["window_start"], v["k"]): (v["count"], v["sum_v"]) for v in got if v["k"] != "end"}


def test_a_sigkilled_task_delivers_each_window_to_a_transactional_sink_exactly_once(
        spark, kafka_broker, tmp_path):
    """The windows of each committed checkpoint go to the topic in one
    transaction; a task SIGKILLed mid-stream loses its attempt's uncommitted
    windows, which the replay fires again: a read_committed reader sees
    DuckDB's windows, each once, each carrying the checkpoint that covered it."""
    from slash.kafka import KafkaSink
    from test_kafka import read_topic

    topic, out = new_topic(kafka_broker, "eo-in", 4), new_topic(kafka_broker, "eo-out", 2)
    recs = records(6000, seed=12, partitions=4)
    produce(kafka_broker, topic, recs[:3000])
    sink = KafkaSink(kafka_broker.bootstrap, out, key="k", transactional_id=f"eo-{out}")
    h = stream(spark, kafka_stream(kafka_broker, topic), sink=sink, executors=2,
               checkpoint=str(tmp_path / "ck"), checkpoint_every="200ms", **QUERY)
    want = duckdb_windows(recs)
    try:
        wait_for_checkpoints(h, 2)
        victim = h.task_pids()[1]
        os.kill(victim, signal.SIGKILL)
        produce(kafka_broker, topic, recs[3000:] + closers(range(4)))
        deadline = time.monotonic() + 90
        while len(topic_windows(kafka_broker, out)) < len(want):
            assert h.running and time.monotonic() < deadline, "the topic did not get every window"
            time.sleep(0.5)
    finally:
        m = h.stop(60)
        sink.close()
    [rec] = m["recoveries"]
    assert rec["rank"] == 1
    assert topic_windows(kafka_broker, out) == want
    cuts = {h.get("slash-cut") for _, _, h in read_topic(kafka_broker, out)}
    assert None not in cuts and len(cuts) >= 2


def test_a_finished_streams_last_windows_reach_a_transactional_sink_once(
        spark, kafka_broker, tmp_path):
    """A stream whose source ends (every partition idle after its end): the
    windows after the last cut, the closers' among them, are delivered under
    one more id; started again on its finished directory with a new sink of
    the same transactional id, it is refused and the topic gains nothing."""
    from slash.errors import InvalidState
    from slash.kafka import KafkaSink
    from test_kafka import read_topic

    topic, out = new_topic(kafka_broker, "eo-end", 3), new_topic(kafka_broker, "eo-end-out", 2)
    recs = records(3000, seed=13, partitions=3) + closers(range(3))
    produce(kafka_broker, topic, recs)
    sink = KafkaSink(kafka_broker.bootstrap, out, key="k", transactional_id=f"eo-{out}")
    kw = dict(executors=2, checkpoint=str(tmp_path / "ck"), checkpoint_every="200ms", **QUERY)
    try:
        stream(spark, kafka_stream(kafka_broker, topic, end_after_idle=1.0), sink=sink,
               **kw).wait(120)
    finally:
        sink.close()
    want = duckdb_windows(recs)
    got = read_topic(kafka_broker, out)
    assert sorted(((v["window_start"], v["k"]), (v["count"], v["sum_v"])) for _, v, _ in got) == \
        sorted(want.items())
    assert [v for _, v, _ in got if v["k"] == "end"]  # fired at the end, delivered
    again = KafkaSink(kafka_broker.bootstrap, out, key="k", transactional_id=f"eo-{out}")
    try:
        with pytest.raises(InvalidState, match="ran to its end"):
            stream(spark, kafka_stream(kafka_broker, topic, end_after_idle=1.0), sink=again, **kw)
    finally:
        again.close()
    assert len(read_topic(kafka_broker, out)) == len(got)


def test_a_transactional_sink_without_checkpoints_is_refused_saying_why(spark, kafka_broker):
    from slash.kafka import KafkaSink

    topic = new_topic(kafka_broker, "eo-refused", 1)
    sink = KafkaSink(kafka_broker.bootstrap, topic, key="k", transactional_id=f"eo-{topic}")
    with pytest.raises(InvalidArgument, match="transaction when the checkpoint commits"):
        stream(spark, kafka_stream(kafka_broker, topic), sink=sink, executors=2, **QUERY)


def test_a_rescale_two_three_two_re_deals_partitions_with_their_offsets(
        spark, kafka_broker, tmp_path):
    topic, recs, h, out = checkpointed_stream(spark, kafka_broker, tmp_path, 5, seed=3,
                                              first=2000)
    try:
        wait_for_checkpoints(h, 1)
        up = h.scale_out(1)
        assert (up["from"], up["to"]) == (2, 3)
        produce(kafka_broker, topic, recs[2000:4000])
        wait_for_checkpoints(h, len(h.metrics["checkpoints"]) + 1)
        down = h.scale_in(1)
        assert (down["from"], down["to"]) == (3, 2) and h.executors == 2
        produce(kafka_broker, topic, recs[4000:] + closers(range(5)))
        want = duckdb_windows(recs)
        wait_for_windows(h, out, want)
    finally:
        m = h.stop(60)
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 3), (3, 2)]
    assert m["recoveries"] == [] and m["late_records"] == 0
    assert sink_windows(out) == want


def test_a_stream_stopped_and_started_again_on_its_directory_seeks_to_its_offsets(
        spark, kafka_broker, tmp_path):
    """Stopped with 2 executors, started again with 3 over a new KafkaStream
    of the same topic: the checkpoint names the same stream, its offsets are
    dealt to the 3 ranks, and the sink holds every window once."""
    topic, recs, h, out = checkpointed_stream(spark, kafka_broker, tmp_path, 3, seed=6,
                                              first=3000)
    try:
        wait_for_checkpoints(h, 2)
    finally:
        h.stop(60)
    produce(kafka_broker, topic, recs[3000:] + closers(range(3)))
    h2 = stream(spark, kafka_stream(kafka_broker, topic), sink=out, executors=3,
                checkpoint=str(tmp_path / "ck"), checkpoint_every="200ms", **QUERY)
    want = duckdb_windows(recs)
    try:
        wait_for_windows(h2, out, want)
    finally:
        m = h2.stop(60)
    assert m["resumed_from"] is not None and m["executors"] == 3
    assert sink_windows(out) == want and m["late_records"] == 0


def test_an_idle_partition_stops_holding_back_the_windows(spark, kafka_broker, tmp_path):
    """Partition 2 never gets a record; rank 0 reads partitions 0 and 2, so
    its watermark waits for partition 2 until it is idle (1 s), then every
    window of partitions 0 and 1 fires."""
    topic = new_topic(kafka_broker, "idle", 3)
    recs = records(3000, seed=4, partitions=2)
    produce(kafka_broker, topic, recs + closers(range(2)))
    out = str(tmp_path / "out")
    src = kafka_stream(kafka_broker, topic)
    assert src.assignment(0, 2) == [0, 2]
    h = stream(spark, src, sink=out, executors=2, **QUERY)
    want = duckdb_windows(recs)
    try:
        wait_for_windows(h, out, want)
    finally:
        m = h.stop(60)
    assert sink_windows(out) == want and m["late_records"] == 0


def test_a_stream_lateness_other_than_the_sources_is_refused(spark, kafka_broker):
    topic = new_topic(kafka_broker, "lateness", 1)
    produce(kafka_broker, topic, [(0, {"k": "a", "t": 1, "v": 1})])
    src = kafka_stream(kafka_broker, topic, lateness="1s")
    with pytest.raises(InvalidArgument, match="KafkaStream's lateness"):
        stream(spark, src, sink=lambda t: None, lateness="2s", **QUERY)


@pytest.fixture(scope="module")
def bounded_topic(kafka_broker):
    topic = new_topic(kafka_broker, "bounded", 3)
    recs = records(2000, seed=5, partitions=3)
    produce(kafka_broker, topic, recs)
    return topic, recs


def spark_windows(spark, recs, size, slide):
    """Spark's own groupBy(window(...), k) over the same records (a DataFrame
    built from them in Python)."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(r["k"], r["t"], r["v"]) for _, r in recs],
                               "k string, t long, v long")
    df = df.withColumn("ts", F.expr("timestamp_millis(t)"))
    g = df.groupBy(F.window("ts", size, slide), "k").agg(F.count("*").alias("c"),
                                                         F.sum("v").alias("s"))
    rows = g.select(F.expr("unix_millis(window.start)").alias("ws"), "k", "c", "s").collect()
    return {(r["ws"], r["k"]): (r["c"], r["s"]) for r in rows}


@pytest.mark.parametrize("window,size,slide", [
    ("tumbling:1s", "1 second", "1 second"),
    ("sliding:2s/500ms", "2 seconds", "500 milliseconds")])
def test_window_aggregate_over_a_kafka_source_equals_duckdb_and_spark(
        spark, kafka_broker, bounded_topic, window, size, slide):
    topic, recs = bounded_topic
    src = KafkaSource(kafka_broker.bootstrap, topic, schema=SCHEMA, unit_records=1000)
    df = window_aggregate(spark, src, time="t", window=window, key="k", aggs=["count", "sum:v"],
                          executors=2)
    got = {(r["window_start"], r["k"]): (r["count"], r["sum_v"]) for r in df.collect()}
    assert len(got) == df.count()
    if window.startswith("tumbling"):
        assert got == duckdb_windows(recs)
    else:
        assert got == duckdb_windows(recs, slide_ms=500, size_ms=2000)
    assert got == spark_windows(spark, recs, size, slide)


def test_malformed_values_are_counted_in_the_streams_metrics(spark, kafka_broker, tmp_path):
    topic = new_topic(kafka_broker, "bad", 2)
    recs = records(1000, seed=9, partitions=2)
    produce(kafka_broker, topic, recs[:500])
    p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for part, value in ((0, b"{oops"), (1, b"[1, 2]"), (1, b"")):
        p.produce(topic, value, partition=part)
    assert p.flush(30) == 0
    produce(kafka_broker, topic, recs[500:] + closers(range(2)))
    got, want, m = stream_to_windows(spark, kafka_broker, topic, recs, tmp_path)
    assert got == want and m["malformed_records"] == 3
