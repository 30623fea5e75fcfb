"""``slash bench kafka``'s slash sides: ``slash run`` over a bounded
:class:`slash.kafka.KafkaSource` (the whole command timed), and
:func:`slash.spark.stream` over a :class:`slash.kafka.KafkaStream` on
``local[N]`` (each barrier task reads its partitions from the broker).

Invariant: both read the same topic to the same end offsets and answer
``window_start, campaign, count`` as every side does.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, List, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from slash.bench._kafka_measure import Clock, SideRun, measured, side_process, until_stopped
from slash.bench._kafka_spark import spark_session
from slash.bench._kafka_topic import SCHEMA, WINDOW_MS, Topic, comparable
def side_slash_run(topic: Topic, cores: int, workdir: str, opts: Dict[str, Any]) -> SideRun:
    out = os.path.join(workdir, "slash-run.parquet")
    cmd = [sys.executable, "-m", "slash", "run", "--kafka-bootstrap", topic.bootstrap,
           "--topic", topic.name, "--time", "event_time", "--window", f"tumbling:{WINDOW_MS}ms",
           "--key", "campaign", "--agg", "count", "--filter", "event_type == view",
           "--executors", str(cores), "--output", out]
    m = measured(cmd, opts.get("broker_pid"), opts["timeout"])
    # the whole command's: wall from start to exit, CPU of every process under it
    return SideRun("slash-run", comparable(pq.read_table(out)), m["wall"], m["cpu"],
                   m["broker_cpu"],
                   {"timed": "the whole command, start-up included"})


def side_slash_spark(topic: Topic, cores: int, workdir: str, opts: Dict[str, Any]) -> SideRun:
    return side_process("slash-spark", topic, cores, workdir, opts, {})


def run_slash_spark(spec: Dict[str, Any]) -> Dict[str, Any]:
    from slash.kafka import KafkaStream  # optional dependency (confluent-kafka)
    from slash.spark import stream  # optional dependency (pyspark)

    topic = Topic(**{k: v for k, v in spec["topic"].items()})
    live, window_ms = spec.get("live", False), spec.get("window_ms", WINDOW_MS)
    spark = spark_session(spec["cores"])
    parts: List[pa.Table] = []
    seen: List[Tuple[int, int]] = []  # (window end, ms when the sink got it)

    def sink(t: pa.Table) -> None:
        seen.append((int(t.column("window_end")[0].as_py()), int(time.time() * 1000)))
        parts.append(t)

    src = KafkaStream(topic.bootstrap, topic.name, schema=SCHEMA, timestamp_column=None,
                      end_offsets=None if live else
                      {int(p): o for p, o in topic.end_offsets.items()},
                      idle_timeout="1s", poll_interval=0.01)
    clock = Clock(spec.get("broker_pid"))
    clock.start()
    h = stream(spark, src, time="event_time", window=f"tumbling:{window_ms}ms", key="campaign",
               aggs=["count"], filter="event_type == view", sink=sink, executors=spec["cores"])
    if live:
        while h.base_ms is None and h.running:  # until the executors formed their group
            time.sleep(0.1)
        until_stopped()
        m = h.stop(120)
    else:
        m = h.wait()
    timed = clock.stop()
    spark.stop()
    return {**timed, "answer": pa.concat_tables(parts), "visible": seen,
            "detail": {"records_in": m.get("records_in"), "late_records": m.get("late_records")}}
