"""``slash bench kafka``'s Flink side: Flink SQL in PyFlink over the topic
with Flink's Kafka connector (resolved from Maven, given as
``pipeline.jars``), event time with a watermark equal to it (per
partition), ``TUMBLE`` count per campaign; bounded by the topic's end
offsets, or live (unbounded, each row stamped as it leaves the window
operator).

Invariant: no source idle timeout (see :func:`flink_config`): Flink's
idleness over a backlog would drop a partition's records silently.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from slash.bench._kafka_broker import JVM_DIR, maven_jars
from slash.bench._kafka_measure import SideRun, tree_cpu, until_stopped
from slash.bench._kafka_topic import ANSWER_COLUMNS, WINDOW_MS, Topic, comparable
from slash.errors import InvalidArgument, NotSupported, SystemFailure
#: Flink's Kafka connector (the thin one, with kafka-clients beside it), a
#: release for PyFlink's Flink minor; ``--flink-kafka-version`` names another
FLINK_KAFKA_POM = os.path.join(JVM_DIR, "flink-connector-kafka.pom.xml")


@functools.lru_cache(maxsize=4)
def flink_kafka_jars(version: Optional[str] = None) -> Tuple[str, List[str]]:
    """(release, jars): ``org.apache.flink:flink-connector-kafka`` (the pom's
    release, or ``version``) and the runtime dependencies PyFlink's lib does
    not hold, resolved by Maven. NotSupported names the artifact that did
    not resolve."""
    with open(FLINK_KAFKA_POM) as f:
        release = version or f.read().split("<flink.kafka.version>", 1)[1].split("<", 1)[0]
    try:
        d = maven_jars(FLINK_KAFKA_POM, f"flink-connector-kafka-{release}",
                       {"flink.kafka.version": release})
    except NotSupported as e:
        raise NotSupported(f"flink side: org.apache.flink:flink-connector-kafka:{release} (and its "
                           f"dependencies) did not resolve from Maven ({e})") from None
    return release, sorted(os.path.join(d, j) for j in os.listdir(d) if j.endswith(".jar"))


def flink_job(topic: Topic, window_ms: int = WINDOW_MS, live: bool = False) -> Any:
    """Flink SQL over the topic: its Kafka table source (JSON values, the
    three fields the query reads), event time ``rt`` from ``event_time`` with
    a watermark equal to it (per partition, as the Kafka source computes
    watermarks per split, the subtask's the minimum over its splits), and
    ``TUMBLE`` count per campaign of the views. Bounded by the topic's end
    offsets, or (``live``) unbounded from the earliest offset."""
    from slash.bench.flink import FlinkJob, interval_literal  # start-up: only the Flink side

    if window_ms % 1000:
        raise InvalidArgument(f"Flink's window must be whole seconds, got {window_ms} ms")
    if live:
        bound = ""
    else:
        offsets = ";".join(f"partition:{p},offset:{o}" for p, o in sorted(topic.end_offsets.items()))
        bound = (", 'scan.bounded.mode' = 'specific-offsets', "
                 f"'scan.bounded.specific-offsets' = '{offsets}'")
    ddl = ("CREATE TABLE events (campaign BIGINT, event_type STRING, event_time BIGINT, "
           "rt AS TO_TIMESTAMP_LTZ(event_time, 3), WATERMARK FOR rt AS rt) WITH ("
           f"'connector' = 'kafka', 'topic' = '{topic.name}', "
           f"'properties.bootstrap.servers' = '{topic.bootstrap}', "
           "'properties.group.id' = 'slash-bench-flink', "
           "'scan.startup.mode' = 'earliest-offset'" + bound + ", 'format' = 'json')")
    query = ("SELECT window_start, window_end, campaign, COUNT(*) AS `count` FROM TABLE(TUMBLE("
             f"TABLE events, DESCRIPTOR(rt), {interval_literal(window_ms)})) "
             "WHERE event_type = 'view' GROUP BY window_start, window_end, campaign")
    if live:  # each row also stamped as it leaves the window operator, inside the job
        query = ("SELECT window_start, window_end, campaign, `count`, "
                 f"CAST(CURRENT_TIMESTAMP AS TIMESTAMP(3)) AS emitted FROM ({query})")
        return FlinkJob((ddl,), query, ("window_start", "window_end", "emitted"))
    return FlinkJob((ddl,), query, ("window_start", "window_end"))


def flink_config(jars: Sequence[str]) -> Dict[str, str]:
    """The Flink options of the Kafka side besides FlinkOptions': the
    connector's jars. No source idle timeout (``table.exec.source.idle-timeout``
    stays 0, off): every partition of the topic holds records, and Flink's
    idleness is wall time without a record from a split, which over a
    backlog marks a partition not yet fetched idle, lets the watermark run
    ahead on the others and drops the late partition's records (with 1 s,
    measured: 9 in 10 of the views of a 20,000-event topic lost, silently)."""
    return {"pipeline.jars": ";".join(f"file://{j}" for j in jars)}


def side_flink(topic: Topic, cores: int, workdir: str, opts: Dict[str, Any]) -> SideRun:
    from slash.bench.flink import FlinkOptions, pyflink_python, run_flink_job  # start-up: Flink side

    python = pyflink_python(install=False)
    release, jars = flink_kafka_jars(opts.get("flink_kafka_version"))
    out = os.path.join(workdir, "flink.parquet")
    broker = opts.get("broker_pid")
    b0 = tree_cpu(broker) if broker else 0.0
    m, rep = run_flink_job(flink_job(topic), FlinkOptions(cores), out, python,
                           timeout=opts["timeout"], config=flink_config(jars))
    b1 = tree_cpu(broker) if broker else 0.0
    net, client = rep["net_runtime_seconds"][0], rep["query_seconds"][0]
    # Flink's own net runtime of the job (the client's submission and the
    # mini-cluster's start left out: the figure most favourable to Flink);
    # CPU: the job's process and its JVM over the client's span
    return SideRun("flink", comparable(pq.read_table(out)), net if net else client,
                   rep["cpu_seconds"][0], b1 - b0,
                   {"timed": "Flink's net runtime of the job (submission and mini-cluster start "
                             "left out)", "client_seconds": round(client, 3),
                    "process_wall_s": round(m.wall_s, 2), "process_cpu_s": round(m.cpu_s, 2),
                    "flink_version": rep["flink_version"], "flink_kafka_version": release,
                    "flink_config": {k: v for k, v in rep["config"].items()
                                     if k != "pipeline.jars"}})


def run_flink(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Flink's live side: the job in the PyFlink venv's python, reading the
    topic as it is fed; up when its first rows arrive, stopped (cancelled)
    on the benchmark's stop, its windows' arrival times passed on."""
    from slash.bench.flink import JOB_SCRIPT, FlinkOptions, job_spec  # start-up: Flink side

    topic = Topic(**{k: v for k, v in spec["topic"].items()})
    job = flink_job(topic, spec.get("window_ms", WINDOW_MS), live=True)
    path = os.path.join(spec["workdir"], "flink-live.json")
    with open(path, "w") as f:
        json.dump(job_spec(job, FlinkOptions(spec["cores"]), os.path.join(spec["workdir"], "unused"),
                           config=flink_config(spec["jars"]), live="window_end"), f)
    with open(os.path.join(spec["workdir"], "flink-stderr.log"), "w") as err:
        proc = subprocess.Popen([spec["python"], str(JOB_SCRIPT), path], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.strip() == "first rows":
                break
        else:
            raise SystemFailure(f"the Flink job ended (exit {proc.wait()}) before its first rows; "
                                f"see {err.name}")
        until_stopped()
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        out = proc.stdout.read()
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
    if report is None:
        raise SystemFailure(f"the Flink job printed no report (exit {proc.returncode}); "
                            f"see {err.name}")
    empty = pa.table({c: pa.array([], pa.int64()) for c in ANSWER_COLUMNS})
    return {"seconds": 0.0, "cpu_s": 0.0, "broker_cpu_s": 0.0, "answer": empty,
            "visible": report["visible"], "emitted": report.get("emitted"),
            "detail": {"rows": report["rows"]}}
