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
from test_kafka import (SCHEMA, duckdb_windows, produce, query, records,  # noqa: E402
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
