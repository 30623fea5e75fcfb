"""A Kafka stream in the engine's rank loop, on the session's real broker
(``kafka_broker``): its watermarks come from the source while the stream
stays unbounded, a quiet topic is served, and fired windows go to a Kafka
sink exactly once, tied to checkpoints. Answers are DuckDB's over the
records produced."""
from __future__ import annotations

import glob
import json
import logging
import os
import time

import pyarrow as pa
import pytest

from slash._ipc import from_ipc
from slash.executor import Executor, GroupConfig
from slash.metrics import LiveMetrics
from slash.runner import execute_split, run

ck = pytest.importorskip("confluent_kafka")
from slash.kafka import KafkaStream  # noqa: E402
from test_kafka import (SCHEMA, duckdb_windows, four_partitions,  # noqa: E402,F401
                        killed_then_resumed, produce, query, read_topic, records,
                        run_in_background, topic_name, windows)


def in_order(recs):
    """``recs`` with times ascending (one partition's order, lateness 0)."""
    return [dict(r, seq=i) for i, r in enumerate(sorted(recs, key=lambda r: r["t"]))]


def test_a_stream_with_source_watermarks_is_unbounded_and_reports_window_latencies(
        kafka_broker):
    """Records whose event times are the last few seconds of the wall clock:
    the run's live metrics get each window's latency (emit - end >= 0) as
    the stream's windows fire by its partitions' watermarks, before the end."""
    now = int(time.time() * 1000)
    recs = [dict(r, t=now - 6000 + r["t"]) for r in in_order(records(600, seed=20,
                                                                       span_ms=5000))]
    topic = topic_name("lat")
    produce(kafka_broker, topic, recs, lambda i, r: 0, 1)
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=0,
                      idle_timeout=0.3, end_after_idle=1.5)
    assert src.bounded is False and src.source_watermarks is True
    live = LiveMetrics(2)
    m = {}
    got = run(query("tumbling"), src, executors=2, live=live, metrics=m)
    assert windows(got) == duckdb_windows(recs, "tumbling")
    assert m["late_records"] == 0
    ends = {e for _, e, _, _, _ in live.windows}
    assert len(ends) >= 4  # the windows before the newest fired while the stream ran
    assert all(lat >= 0 for _, _, _, lat, _ in live.windows)


def test_late_records_of_a_stream_are_warned_about_as_the_streams(kafka_broker, caplog):
    """A record 5 s behind its partition's watermark (lateness 0) is late:
    counted, and the warning names the stream's lateness, not row-group
    statistics (which a bounded input's late records would point at)."""
    recs = in_order(records(300, seed=21, span_ms=8000))
    behind = dict(recs[-1], t=recs[-1]["t"] - 5000, seq=300)
    topic = topic_name("late")
    produce(kafka_broker, topic, recs + [behind], lambda i, r: 0, 1)
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=0,
                      idle_timeout=0.3, end_after_idle=1.0, batch_records=100)  # it comes alone
    lst = Executor.listen("shm", token="late")
    m = {}
    with caplog.at_level(logging.WARNING, logger="slash.run.rank"):
        got = query("tumbling").finalize(
            execute_split(query("tumbling"), src, 0, [lst.address], lst, GroupConfig(), "late",
                          metrics=m), src.schema)
    lst.close()
    assert m["late_records"] == 1
    assert windows(got) == duckdb_windows(recs, "tumbling")  # the late one is in no window
    text = caplog.text
    assert "1 record(s) of the stream came after the watermark" in text
    assert "row-group statistics" not in text


def test_a_quiet_topic_is_served_windows_fire_and_checkpoints_are_cut(kafka_broker, tmp_path):
    """Partition 1 stays silent, so the watermark waits for its idle timeout
    (1 s) while the topic is quiet: the checkpointed stream fires the windows
    partition 0 closed and cuts checkpoints holding them during the silence,
    before the last record arrives and ends it."""
    recs = in_order(records(300, seed=22, span_ms=3000))
    last = {"k": "c0", "t": 9000, "v": 1, "seq": 300}
    topic = topic_name("quiet")
    produce(kafka_broker, topic, recs, lambda i, r: 0, 2)
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=0,
                      idle_timeout=1.0, end_offsets={0: 300, 1: 1})
    ckdir = tmp_path / "ck"
    th, out = run_in_background(query("tumbling"), src, executors=1, checkpoint=str(ckdir),
                                checkpoint_every="200ms", group=GroupConfig(epoch_ms=20))
    try:
        closed = {(s, e) for s, e, *_ in duckdb_windows(recs, "tumbling")
                  if e <= max(r["t"] for r in recs)}
        deadline = time.monotonic() + 30
        fired, cuts = set(), set()
        while time.monotonic() < deadline and not (fired >= closed and len(cuts) >= 3):
            time.sleep(0.2)
            for f in glob.glob(str(ckdir / "results" / "rank-0.chk-*.arrow")):
                if f in cuts:
                    continue
                cuts.add(f)
                with open(f, "rb") as fh:
                    t = from_ipc(fh.read())
                fired |= {(s, e) for s, e in zip(t.column("window_start").to_pylist(),
                                                  t.column("window_end").to_pylist())}
        assert th.is_alive() and "error" not in out, out.get("error")  # still silent
        assert fired >= closed, (sorted(fired), sorted(closed))
        assert len(cuts) >= 3
    finally:
        p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap})
        p.produce(topic, json.dumps(last).encode(), partition=1)
        p.flush(10)
        th.join(60)
    assert not th.is_alive() and "error" not in out, out.get("error")
    assert windows(out["result"]) == duckdb_windows(recs + [last], "tumbling")


def sink_windows(broker, topic):
    """The windows a read_committed reader of the sink topic sees, and the
    checkpoint ids their records carry."""
    got = read_topic(broker, topic)
    assert all(k == v["k"] for k, v, _ in got)
    rows = sorted((v["window_start"], v["window_end"], v["k"], v["count"], v["sum_v"])
                  for _, v, _ in got)
    return rows, {h.get("slash-cut") for _, _, h in got}


def stream_and_sink_topic(broker, name, seed, partitions, batch_records):
    """6000 records in a new topic of ``partitions`` (round robin), a
    KafkaStream over it, and a new sink topic: (records, stream, sink topic)."""
    recs = records(6000, seed=seed)
    topic, out = topic_name(f"{name}-in"), topic_name(f"{name}-out")
    produce(broker, topic, recs, lambda i, r: i % partitions, partitions)
    broker.create_topic(out, 2)
    return recs, KafkaStream(broker.bootstrap, topic, schema=SCHEMA, lateness=250,
                             idle_timeout=0.5, end_after_idle=1.0,
                             batch_records=batch_records), out


def test_a_killed_stream_delivers_each_window_to_a_transactional_sink_exactly_once(
        kafka_broker, tmp_path, monkeypatch):
    """Rank 1 is SIGKILLed after a committed checkpoint: the windows the dead
    attempt fired after that cut were in no committed checkpoint, so none of
    them reached the topic; the restarted group fires them again and they are
    delivered with a later cut. A read_committed reader sees each window once,
    equal to DuckDB's over the input topic, each in the transaction of the
    checkpoint that covered it."""
    from slash.kafka import KafkaSink

    recs, src, out = stream_and_sink_topic(kafka_broker, "eo", 23, 4, 200)
    sink = KafkaSink(kafka_broker.bootstrap, out, key="k", transactional_id=f"eo-{out}")
    monkeypatch.setenv("SLASH_TEST_KILL", "1:8:0:1")  # rank 1 at push 8, after a cut
    m = {}
    got = run(query("tumbling"), src, executors=2, checkpoint=str(tmp_path / "ck"),
              checkpoint_every="2 batches", group=GroupConfig(epoch_ms=10), metrics=m, sink=sink)
    sink.close()
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["from_checkpoint"] is not None
    want = duckdb_windows(recs, "tumbling")
    assert windows(got) == want
    rows, cuts = sink_windows(kafka_broker, out)
    assert rows == want
    # delivered by checkpoint, not at the end: every record carries the cut whose commit
    # delivered it (how many cuts carried windows depends on the machine's speed: one, when
    # every window fires after the restart's first cut)
    assert cuts and None not in cuts


def test_a_run_resumed_from_its_checkpoints_recovers_the_sink_exactly_once(
        kafka_broker, tmp_path, monkeypatch):
    """A run dies (no restart left) after checkpoints it delivered; the same
    query started again from the directory with a new sink of the same
    transactional id fences the old one, delivers only what the topic lacks,
    and a read_committed reader sees every window once."""
    from slash.errors import SlashError
    from slash.kafka import KafkaSink

    # a partition per rank: each rank's watermark moves from its first batch (a rank of
    # two partitions gets all of one before the other, and waits for the second)
    recs, src, out = stream_and_sink_topic(kafka_broker, "eo2", 24, 2, 100)
    kw = dict(checkpoint=str(tmp_path / "ck"), checkpoint_every="2 batches",
              group=GroupConfig(epoch_ms=10), executors=2)
    monkeypatch.setenv("SLASH_TEST_KILL", "0:15:0:3")  # of 30 pushes or more, after 3 cuts
    first = KafkaSink(kafka_broker.bootstrap, out, key="k", transactional_id=f"eo-{out}")
    with pytest.raises(SlashError):
        run(query("tumbling"), src, max_restarts=0, sink=first, **kw)
    first.close()
    before, _ = sink_windows(kafka_broker, out)
    assert 0 < len(before) < len(duckdb_windows(recs, "tumbling"))
    monkeypatch.delenv("SLASH_TEST_KILL")
    again = KafkaSink(kafka_broker.bootstrap, out, key="k", transactional_id=f"eo-{out}")
    run(query("tumbling"), src, sink=again, **kw)
    again.close()
    rows, _ = sink_windows(kafka_broker, out)
    assert rows == duckdb_windows(recs, "tumbling")


def test_a_sink_without_checkpoints_gets_the_windows_at_least_once(kafka_broker):
    from slash.kafka import KafkaSink

    recs = records(2000, seed=25)
    topic, out = topic_name("alo-in"), topic_name("alo-out")
    produce(kafka_broker, topic, recs, lambda i, r: i % 2, 2)
    kafka_broker.create_topic(out, 2)
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, lateness=250,
                      idle_timeout=0.5, end_after_idle=1.0)
    sink = KafkaSink(kafka_broker.bootstrap, out, key="k")
    run(query("tumbling"), src, executors=2, sink=sink)
    sink.close()
    rows, _ = sink_windows(kafka_broker, out)
    assert rows == duckdb_windows(recs, "tumbling")


def test_a_transactional_sink_without_checkpoints_is_refused(kafka_broker, four_partitions):
    from slash.errors import InvalidArgument
    from slash.kafka import KafkaSink

    topic, _ = four_partitions
    src = KafkaStream(kafka_broker.bootstrap, topic, schema=SCHEMA, end_after_idle=1.0)
    sink = KafkaSink(kafka_broker.bootstrap, topic, key="k", transactional_id="refused")
    with pytest.raises(InvalidArgument, match="without checkpoint= is written once at the end"):
        run(query("tumbling"), src, executors=2, sink=sink)


def test_slash_run_writes_a_sink_topic_exactly_once_with_checkpoints(kafka_broker, tmp_path):
    import subprocess
    import sys

    recs = records(2000, seed=26)
    topic, out = topic_name("cli-in"), topic_name("cli-out")
    produce(kafka_broker, topic, recs, lambda i, r: i % 2, 2)
    kafka_broker.create_topic(out, 2)
    argv = [sys.executable, "-m", "slash", "run", "--kafka-bootstrap", kafka_broker.bootstrap,
            "--topic", topic, "--kafka-stream", "--lateness", "250ms",
            "--kafka-idle-timeout", "500ms", "--kafka-end-after-idle", "1s", "--time", "t",
            "--window", "tumbling:1s", "--key", "k", "--agg", "count", "--agg", "sum:v",
            "--executors", "2", "--checkpoint", str(tmp_path / "ck"), "--checkpoint-every",
            "300ms", "--kafka-sink-topic", out, "--output", str(tmp_path / "o.parquet")]
    got = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    rows, cuts = sink_windows(kafka_broker, out)
    assert rows == duckdb_windows(recs, "tumbling")
    assert None not in cuts


def test_a_stream_checkpoint_cut_with_two_executors_resumes_with_three(
        kafka_broker, tmp_path, monkeypatch):
    """A stream of 2 executors over 6 partitions dies (no restart left) after
    checkpoints; the same query resumed from the directory with 3 executors
    deals every partition with its offset at the cut (KafkaStream.resplit):
    DuckDB's output, every record read once before or after the cut."""
    recs, src, _ = stream_and_sink_topic(kafka_broker, "rs", 27, 6, 100)
    got, m = killed_then_resumed(monkeypatch, query("tumbling"), src, "0:15:0:3", 2, 3,
                                 str(tmp_path / "ck"))
    assert m["resumed_from"] is not None
    assert m["late_records"] == 0
    assert windows(got) == duckdb_windows(recs, "tumbling")
    # the records read before the cut (carried by the checkpoint) and after it, each once
    assert m["records_in"] == 6000


@pytest.mark.parametrize("checkpointed", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_realtime_run_the_self_tuning_driver_runs_writes_its_windows_to_a_sink(
        kafka_broker, tmp_path, checkpointed):
    """realtime=True takes the self-tuning driver (measured, configuration
    fixed): its windows reach the sink as a fixed group's do, at least once
    without checkpoints, by checkpoint with them."""
    from slash.kafka import KafkaSink

    now = int(time.time() * 1000) + 500
    recs = sorted((dict(r, t=now + r["t"] // 10) for r in records(2000, seed=27)),
                  key=lambda r: r["t"])  # ~2 s of wall clock, in order
    src = pa.Table.from_pylist(recs, schema=SCHEMA)
    out = topic_name("rt-out")
    kafka_broker.create_topic(out, 2)
    kw = dict(checkpoint=str(tmp_path / "ck"), checkpoint_every="300ms") if checkpointed else {}
    sink = KafkaSink(kafka_broker.bootstrap, out, key="k",
                     transactional_id=f"rt-{out}" if checkpointed else None)
    m = {}
    try:
        got = run(query("tumbling"), src, executors=1, realtime=True, metrics=m, sink=sink, **kw)
    finally:
        sink.close()
    assert "autotune" in m  # the self-tuning driver ran it
    want = duckdb_windows(recs, "tumbling")
    assert windows(got) == want
    rows, cuts = sink_windows(kafka_broker, out)
    assert rows == want
    assert (None not in cuts) == checkpointed
