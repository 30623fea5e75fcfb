"""``slash bench kafka``: the same Kafka topic, the same query, the same
cores, read by Slash, by Spark Structured Streaming's own Kafka source and by
Flink's.

The topic. A single-node KRaft broker (:mod:`slash.bench._kafka_broker`,
the one the Kafka tests start; or ``--bootstrap`` names a running one) holds
a topic of ``--partitions`` (8) partitions filled with ``--records`` YSB
events (:mod:`slash.workloads.gen_ysb`) as JSON objects, the way most
producers write them::

    {"user_id": "...", "page_id": "...", "ad_id": "...", "ad_type": "banner",
     "event_type": "view", "event_time": 1234, "ip_address": "1.2.3.4", "campaign": 17}

``event_time`` is ms of event time at ``--rate`` events/s; event i goes to
partition i mod P, so each partition is in event-time order. After them,
one closing view per partition (campaign -1, a minute of event time later)
moves every partition's watermark past the last window, so a stream that
fires windows on its watermark (Spark's append mode) fires them all. (A
closer must pass the query's filter: Spark pushes the filter below its
watermark.) The closers' own window (campaign -1) is left out of every
answer and of the reference, and ``records`` counts the YSB events only.

The query (YSB's): the views (``event_type == 'view'``), counted per
campaign per 10 s tumbling window of ``event_time``. The answer of every
side is checked against DuckDB's over the topic's contents (the values read
back from the broker by a plain consumer, parsed by DuckDB's own JSON
reader): ``verified``.

The sides (:data:`SIDES`; ``--sides``), each in a process of its own with
``--cores`` cores (executors, or ``local[N]``):

* ``slash-run``: the CLI, ``slash run --kafka-bootstrap B --topic T ...
  --executors N`` (a bounded :class:`slash.kafka.KafkaSource`: read up to
  the end offsets seen at start, then finish); its wall and CPU time are
  the whole command's, start-up included (the query alone is not
  separable from outside);
* ``slash-spark``: :func:`slash.spark.stream` over a
  :class:`slash.kafka.KafkaStream` ending at the topic's end offsets, on
  ``local[N]``: each barrier task reads its partitions straight from the
  broker;
* ``spark``: Spark Structured Streaming's own source
  (``spark-sql-kafka-0-10``, resolved from Maven Central for the installed
  PySpark, or, when Maven lacks that release, the pom's own, with a warning;
  ``--spark-kafka-version`` names another; the run records which),
  ``from_json`` of the three fields the query reads, ``withWatermark(0 s)``,
  ``groupBy(window(ts, '10 seconds'), campaign).count()`` in append mode,
  ``trigger(availableNow=True)``, ``spark.sql.shuffle.partitions = N``.

A side's ``seconds`` is its query's wall time (for the Spark-hosted sides
from the query's start to its last result, the session already up);
``cpu_s`` the CPU time its whole process tree spent over that span (from
/proc: every process under the side's, user + system, with the children
they reaped), so a JVM and the Python workers count alike; the broker's CPU
over the same span is ``broker_cpu_s`` (serving the reads). ``records_per_s``
and ``cpu_s_per_m_records`` follow from them; ``vs`` holds each side's
records/s over every other's. ``load_before`` / ``load_after`` are
``os.getloadavg()`` around the side (the machine is shared).

Latency (``--latency-rate R``): for each side that runs live (``slash-spark``,
``spark``, ``flink``), a fresh topic of the same partitions is fed from the
side's start, a trickle of 100 events/s until the side is up (so that no
side starts behind by its start-up's backlog), then R events/s until
``--latency-seconds`` after a warm-up (``--latency-warmup``, 10 s) that
begins once the side is up (slash: its executors formed their group; Spark: a micro-batch
read records), each event's ``event_time`` the wall clock (ms) when it is
produced; the side runs the same query with
``--latency-window`` (1 s) windows as a stream (Spark: the default trigger,
append mode, ``withWatermark(0 s)``; slash.spark.stream: its own watermarks,
per partition; Flink: the same job unbounded, up when its first rows arrive,
each window visible when its last row reached the job's Python client; its
record also holds ``in_job``, the percentiles of when each window's last row
left Flink's window operator, stamped inside the job with
``CURRENT_TIMESTAMP``: without PyFlink's collect path to the client). A window's latency is the wall clock when its rows reached
the side's driver (Spark's ``foreachBatch``, slash's sink callable) minus the
window's end; p50/p95/p99/max over the windows that ended after the warm-up
and before the feed stopped (``events`` counts the whole feed).

* ``flink``: Flink SQL in PyFlink (the venv ``install_pyflink`` makes; the
  side is skipped, saying so, without it) over the topic with Flink's Kafka
  connector (``org.apache.flink:flink-connector-kafka``, ``jvm/flink-connector-kafka.pom.xml``'s
  release or ``--flink-kafka-version``, with kafka-clients, resolved from
  Maven and given as ``pipeline.jars``): the JSON format, event time
  ``TO_TIMESTAMP_LTZ(event_time, 3)`` with a watermark equal to it (Flink's
  Kafka source keeps one per partition, a subtask's the minimum over its
  partitions, as slash's executors), bounded by the topic's end offsets,
  ``TUMBLE`` 10 s count per campaign, parallelism ``--cores``; its
  ``seconds`` Flink's own net runtime of the job, its CPU the job's process
  and JVM over the client's span (:func:`side_flink`).

The highest sustained rate (``--sweep``): for each live side, latency runs
(below) of ``--sweep-seconds`` at rates doubling from ``--sweep-start``
until one fails, then ``--sweep-steps`` bisections (:func:`sweep_rates`);
a side sustains a rate when every window of the measured span is visible,
their p99 latency is under 1 s (Flink's: in the job, see below), and the producer (one Python process on the
same cores) fed at least 95 % of the rate (a rate it could not feed ends the
sweep: ``producer_bound``). Then every live side runs ``--latency-seconds``
at the highest rate all of them sustain (or ``--latency-rate``): the latency
distribution at a common rate. ``--table`` writes the runs as Markdown and
``--plot`` as a PNG (:func:`slash.bench.plot.plot_kafka`).

A further side is one more entry in :data:`SIDES`: a function ``(Topic, cores, workdir) ->
SideRun`` that runs the query in a process of its own (through
:func:`measured`) and returns its answer as a table of
``window_start, campaign, count``.

    slash bench kafka --records 4000000 --cores 2 --json kafka.json
    slash bench kafka --records 1000000 --latency-rate 10000 --latency-seconds 60
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.bench._kafka_broker import JVM_DIR, BENCH_JVM, KafkaBroker, maven_jars
from slash.bench._suite import Verdict, verify
from slash.errors import InvalidArgument, NotSupported, SystemFailure

log = logging.getLogger(__name__)

NAME = "kafka"
HELP = ("the same Kafka topic (YSB events as JSON, 8 partitions), a 10 s tumbling count per "
        "campaign: slash run and slash.spark.stream vs Spark Structured Streaming's and Flink's "
        "Kafka sources")

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


def _producer(bootstrap: str) -> Any:
    import confluent_kafka as ck  # optional dependency (confluent-kafka)

    return ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                        "compression.type": "none", "enable.idempotence": True,
                        "queue.buffering.max.messages": 1_000_000})


def _produce(p: Any, topic: str, values: Sequence[str], partitions: int, first: int) -> None:
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
    p = _producer(broker_bootstrap)
    last_ms = 0
    for first in range(0, records, chunk):
        n = min(chunk, records - first)
        values = ysb_json(n, keys, rate, seed, first).to_pylist()
        last_ms = json.loads(values[-1])["event_time"]
        _produce(p, name, values, partitions, first)
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


# ---- measuring a side --------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system, with reaped children's) of ``root`` and
    every live process under it, from /proc."""
    parent: Dict[int, int] = {}
    cpu: Dict[int, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # rest[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17
        parent[int(d)] = int(rest[1])
        cpu[int(d)] = sum(int(x) for x in rest[11:15]) / _TICK
    total, frontier = 0.0, [root]
    kids: Dict[int, List[int]] = {}
    for pid, pp in parent.items():
        kids.setdefault(pp, []).append(pid)
    seen = set()
    while frontier:
        pid = frontier.pop()
        if pid in seen or pid not in cpu:
            continue
        seen.add(pid)
        total += cpu[pid]
        frontier.extend(kids.get(pid, []))
    return total


@dataclass
class SideRun:
    """One side's run: its answer and measurements."""

    side: str
    answer: Optional[pa.Table]
    seconds: float
    cpu_s: float
    broker_cpu_s: float = 0.0
    detail: Dict[str, Any] = field(default_factory=dict)


#: runs argv[1:] as a child subreaper: every process under it that outlives
#: its parent (a forkserver's executors, a JVM) is reaped here, so the kernel's
#: account of this process's children holds the CPU of the whole tree
_REAPER = """
import ctypes, os, subprocess, sys
ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
rc = subprocess.call(sys.argv[1:])
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
sys.exit(rc)
"""


def measured(cmd: List[str], broker_pid: Optional[int], timeout: float) -> Dict[str, Any]:
    """Runs ``cmd`` (a side's process) and returns its wall time, the CPU time
    of it and of every process under it (reaped by a subreaper, the kernel's
    account), the broker's CPU over the same span, and the side's own
    report: the JSON object it printed last on stdout (a side that times its
    query itself reports ``seconds`` and ``cpu_s`` there)."""
    b0 = tree_cpu(broker_pid) if broker_pid else 0.0
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _REAPER, *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: List[str] = []
    err: List[str] = []
    readers = [threading.Thread(target=lambda s, b: b.extend(s), args=(s, b), daemon=True)
               for s, b in ((proc.stdout, out), (proc.stderr, err))]
    for r in readers:
        r.start()
    status, usage = 0, None
    try:
        while usage is None:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                usage = ru
            elif time.perf_counter() - t0 > timeout:
                raise SystemFailure(f"{' '.join(cmd[:5])} did not finish within {timeout:g} s")
            else:
                time.sleep(0.05)
    finally:
        if usage is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    wall = time.perf_counter() - t0
    b1 = tree_cpu(broker_pid) if broker_pid else 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join(10)
    if proc.returncode != 0:
        raise SystemFailure(f"{' '.join(cmd[:6])} ... exited with {proc.returncode}:\n"
                            + "".join(err)[-3000:])
    report: Dict[str, Any] = {}
    for line in reversed("".join(out).splitlines()):
        if line.startswith("{"):
            report = json.loads(line)
            break
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "broker_cpu": b1 - b0,
            "report": report}


# ---- the sides ---------------------------------------------------------------------------------
Side = Callable[[Topic, int, str, Dict[str, Any]], SideRun]


def comparable(t: pa.Table) -> pa.Table:
    """An answer as compared: its YSB windows (the closers' left out), int64 columns."""
    import pyarrow.compute as pc  # start-up: pyarrow.compute costs 35-48 ms to import

    t = t.select(ANSWER_COLUMNS).cast(pa.schema([(c, pa.int64()) for c in ANSWER_COLUMNS]))
    return t.filter(pc.not_equal(t.column("campaign"), CLOSER))


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


def _spark_side(name: str, topic: Topic, cores: int, workdir: str,
                opts: Dict[str, Any], extra: Dict[str, Any]) -> SideRun:
    spec = {"side": name, "topic": asdict(topic), "cores": cores, "workdir": workdir,
            "broker_pid": opts.get("broker_pid"), **extra}
    cmd = [sys.executable, "-m", "slash.bench.kafka", json.dumps(spec)]
    m = measured(cmd, opts.get("broker_pid"), opts["timeout"])
    r = m["report"]
    if not r:
        raise SystemFailure(f"side {name} printed no report")
    ans = pq.read_table(r["answer"])
    return SideRun(name, comparable(ans), r["seconds"], r["cpu_s"], r["broker_cpu_s"],
                   {"timed": "the query, the session already up",
                    "process_wall_s": round(m["wall"], 2), "process_cpu_s": round(m["cpu"], 2),
                    **r.get("detail", {})})


def side_slash_spark(topic: Topic, cores: int, workdir: str, opts: Dict[str, Any]) -> SideRun:
    return _spark_side("slash-spark", topic, cores, workdir, opts, {})


@functools.lru_cache(maxsize=4)
def spark_kafka_jars(version: Optional[str] = None) -> Tuple[str, List[str]]:
    """(release, jars): spark-sql-kafka-0-10 and the runtime dependencies
    PySpark does not ship. ``version`` None: the installed PySpark's, or, when
    Maven has no such release, the pom's own (``jvm/spark-sql-kafka.pom.xml``,
    a release that resolves), with a warning naming both."""
    import pyspark  # optional dependency (the Spark sides)

    pom = os.path.join(JVM_DIR, "spark-sql-kafka.pom.xml")
    want = version or pyspark.__version__
    try:
        d = maven_jars(pom, f"spark-sql-kafka-{want}", {"spark.version": want})
    except NotSupported as e:
        with open(pom) as f:
            fallback = f.read().split("<spark.version>", 1)[1].split("<", 1)[0]
        if version is not None or fallback == want:
            raise NotSupported(f"spark side: spark-sql-kafka-0-10 {want} did not resolve from "
                               f"Maven ({e})") from None
        log.warning("spark-sql-kafka-0-10 %s (the installed PySpark's) did not resolve from Maven; "
                    "the spark side uses %s, the pom's release (--spark-kafka-version names "
                    "another)", want, fallback)
        want = fallback
        d = maven_jars(pom, f"spark-sql-kafka-{want}", {"spark.version": want})
    shipped = {_artifact(j) for j in os.listdir(os.path.join(os.path.dirname(pyspark.__file__),
                                                             "jars"))}
    return want, [os.path.join(d, j) for j in sorted(os.listdir(d))
                  if j.endswith(".jar") and _artifact(j) not in shipped]


def _artifact(jar: str) -> str:
    """A jar's artifact name without its version: 'kafka-clients-3.9.2.jar' -> 'kafka-clients'."""
    parts = jar[:-4].split("-") if jar.endswith(".jar") else jar.split("-")
    keep = []
    for p in parts:
        if p[:1].isdigit():
            break
        keep.append(p)
    return "-".join(keep)


def side_spark(topic: Topic, cores: int, workdir: str, opts: Dict[str, Any]) -> SideRun:
    import pyspark  # optional dependency (the Spark sides)

    release, jars = spark_kafka_jars(opts.get("spark_kafka_version"))
    r = _spark_side("spark", topic, cores, workdir, opts, {"jars": jars})
    r.detail.update(spark_kafka_version=release, pyspark_version=pyspark.__version__)
    return r


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


#: the sides by name, in the order they run (a further engine: one more entry)
SIDES: Dict[str, Side] = {"slash-run": side_slash_run, "slash-spark": side_slash_spark,
                          "spark": side_spark, "flink": side_flink}


# ---- inside a side's process -------------------------------------------------------------------
def _session(cores: int, jars: Sequence[str] = ()) -> Any:
    from slash.spark import session  # optional dependency (pyspark)

    # the Python workers run this interpreter (the one slash is installed in)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {"spark.sql.shuffle.partitions": str(cores), "spark.driver.memory": "4g"}
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return session(f"local[{cores}]", "slash-bench-kafka", conf)


def _run_slash_spark(spec: Dict[str, Any]) -> Dict[str, Any]:
    from slash.kafka import KafkaStream  # optional dependency (confluent-kafka)
    from slash.spark import stream  # optional dependency (pyspark)

    topic = Topic(**{k: v for k, v in spec["topic"].items()})
    live, window_ms = spec.get("live", False), spec.get("window_ms", WINDOW_MS)
    spark = _session(spec["cores"])
    parts: List[pa.Table] = []
    seen: List[Tuple[int, int]] = []  # (window end, ms when the sink got it)

    def sink(t: pa.Table) -> None:
        seen.append((int(t.column("window_end")[0].as_py()), int(time.time() * 1000)))
        parts.append(t)

    src = KafkaStream(topic.bootstrap, topic.name, schema=SCHEMA, timestamp_column=None,
                      end_offsets=None if live else
                      {int(p): o for p, o in topic.end_offsets.items()},
                      idle_timeout="1s", poll_interval=0.01)
    clock = _Clock(spec.get("broker_pid"))
    clock.start()
    h = stream(spark, src, time="event_time", window=f"tumbling:{window_ms}ms", key="campaign",
               aggs=["count"], filter="event_type == view", sink=sink, executors=spec["cores"])
    if live:
        while h.base_ms is None and h.running:  # until the executors formed their group
            time.sleep(0.1)
        _until_stopped()
        m = h.stop(120)
    else:
        m = h.wait()
    timed = clock.stop()
    spark.stop()
    return {**timed, "answer": pa.concat_tables(parts), "visible": seen,
            "detail": {"records_in": m.get("records_in"), "late_records": m.get("late_records")}}


def _run_spark(spec: Dict[str, Any]) -> Dict[str, Any]:
    from pyspark.sql import functions as F  # optional dependency (pyspark)

    topic = Topic(**{k: v for k, v in spec["topic"].items()})
    live, window_ms = spec.get("live", False), spec.get("window_ms", WINDOW_MS)
    spark = _session(spec["cores"], spec["jars"])
    schema = "campaign BIGINT, event_type STRING, event_time BIGINT"
    parts: List[pa.Table] = []
    seen: List[Tuple[int, int]] = []  # (window end, ms when its rows reached the driver)

    def collect(df: Any, batch_id: int) -> None:
        rows = df.select(F.col("window.start").cast("long").alias("start_s"), "campaign",
                         "count").collect()
        now = int(time.time() * 1000)
        seen.extend((s * 1000 + window_ms, now) for s in sorted({r[0] for r in rows}))
        if rows:
            parts.append(pa.table({"window_start": [r[0] * 1000 for r in rows],
                                   "campaign": [r[1] for r in rows],
                                   "count": [r[2] for r in rows]}))

    clock = _Clock(spec.get("broker_pid"))
    clock.start()
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", topic.bootstrap)
              .option("subscribe", topic.name).option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true").load()
              .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
              .select("e.*").withColumn("ts", F.timestamp_millis("event_time")))
    q = (events.withWatermark("ts", "0 seconds").filter(F.col("event_type") == "view")
         .groupBy(F.window("ts", f"{window_ms // 1000} seconds"), "campaign").count()
         .writeStream.outputMode("append"))
    q = q if live else q.trigger(availableNow=True)
    q = (q.option("checkpointLocation", os.path.join(spec["workdir"], "spark-checkpoint"))
         .foreachBatch(collect).start())
    if live:  # up once a micro-batch has read records (the feed has started)
        while not any((x if isinstance(x, dict) else json.loads(x.json))["numInputRows"]
                      for x in q.recentProgress):
            if q.exception() is not None:
                raise SystemFailure(f"the Spark query failed: {q.exception()}")
            time.sleep(0.1)
        _until_stopped()
        q.stop()
    else:
        q.awaitTermination()
    timed = clock.stop()
    progress = [{"batch": p["batchId"], "rows": p["numInputRows"],
                 "watermark": p.get("eventTime", {}).get("watermark"),
                 "state_rows": [o.get("numRowsTotal") for o in p.get("stateOperators", [])]}
                for p in (x if isinstance(x, dict) else json.loads(x.json)
                          for x in q.recentProgress)]
    log.info("spark progress: %s", progress)
    batches = len(progress)
    spark.stop()
    empty = pa.table({c: pa.array([], pa.int64()) for c in ANSWER_COLUMNS})
    return {**timed, "answer": pa.concat_tables(parts) if parts else empty, "visible": seen,
            "detail": {"micro_batches": batches}}


def _run_flink(spec: Dict[str, Any]) -> Dict[str, Any]:
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
        _until_stopped()
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


class _Clock:
    """Wall and CPU time (this process's tree, and the broker's) from start()."""

    def __init__(self, broker_pid: Optional[int]) -> None:
        self.broker_pid = broker_pid

    def start(self) -> None:
        self.t0, self.c0 = time.perf_counter(), tree_cpu(os.getpid())
        self.b0 = tree_cpu(self.broker_pid) if self.broker_pid else 0.0

    def stop(self) -> Dict[str, float]:
        return {"seconds": time.perf_counter() - self.t0, "cpu_s": tree_cpu(os.getpid()) - self.c0,
                "broker_cpu_s": (tree_cpu(self.broker_pid) - self.b0) if self.broker_pid else 0.0}


def _until_stopped() -> None:
    """A live side: tells the benchmark it is up, and waits for its stop (a line on stdin)."""
    print(_READY, flush=True)
    sys.stdin.readline()


_READY = "side is up"
_IN_PROCESS = {"slash-spark": _run_slash_spark, "spark": _run_spark, "flink": _run_flink}


def _side_main(spec: Dict[str, Any]) -> None:
    logging.basicConfig(level=logging.WARNING)
    r = _IN_PROCESS[spec["side"]](spec)
    path = os.path.join(spec["workdir"], f"{spec['side']}-answer.parquet")
    pq.write_table(r.pop("answer"), path)
    r["answer"] = path
    print(json.dumps(r), flush=True)


# ---- latency at a paced rate ---------------------------------------------------------------------
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


def produce_paced(bootstrap: str, topic: str, partitions: int, rate: int,
                  until: Callable[[], Optional[float]], values: List[Tuple[str, str]],
                  tick_s: float = 0.01, limit_s: float = 900.0,
                  starting: Callable[[], bool] = lambda: False) -> Dict[str, int]:
    """``rate`` events/s, each stamped with the wall clock (ms) when it is
    produced, round-robin over the partitions, until the time ``until()``
    returns (None: not known yet; at most ``limit_s``). While ``starting()``
    holds (the side is not up yet), a trickle of TRICKLE_RATE events/s
    instead, so that the side starts on a live stream without a backlog of
    its start-up to catch up on. Returns the events, the first and last ms,
    and those of the span at ``rate`` (``full_events``, ``full_from_ms``)."""
    p = _producer(bootstrap)
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


def _percentiles(xs: List[float]) -> Dict[str, float]:

    if not xs:
        return {}
    a = np.asarray(xs, dtype=np.float64)
    return {f"p{q}": round(float(np.percentile(a, q)), 1) for q in (50, 95, 99)} | \
        {"max": round(float(a.max()), 1)}


def latency_run(side: str, bootstrap: str, create: Callable[[str, int], None], rate: int,
                seconds: float, warmup: float, window_ms: int, args: argparse.Namespace,
                workdir: str, values: List[Tuple[str, str]]) -> Dict[str, Any]:
    """One live side over a fresh topic fed at ``rate`` events/s: the
    latency (ms the result reached the side's driver - window end) of each
    window that ended after the warm-up and before the producer stopped."""
    name = f"lat-{side}-{os.getpid()}-{int(time.time())}"
    create(name, args.partitions)
    topic = Topic(bootstrap, name, args.partitions, 0)
    spec: Dict[str, Any] = {"side": side, "topic": asdict(topic), "cores": args.cores,
                            "workdir": workdir, "live": True, "window_ms": window_ms}
    if side == "spark":
        spec["jars"] = spark_kafka_jars(args.spark_kafka_version)[1]
    elif side == "flink":
        from slash.bench.flink import pyflink_python  # start-up: only the Flink side

        spec["python"] = pyflink_python(install=False)
        spec["jars"] = flink_kafka_jars(getattr(args, "flink_kafka_version", None))[1]
    os.makedirs(workdir, exist_ok=True)
    errors = os.path.join(workdir, "stderr.log")
    with open(errors, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "slash.bench.kafka", json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True, start_new_session=True)
    lines: List[str] = []
    ready: List[float] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == _READY:
                ready.append(time.time())
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proc.stdin is not None
        load = os.getloadavg()[0]
        # the feed starts with the side; measured: from warm-up after the side is up
        fed = produce_paced(
            bootstrap, name, args.partitions, rate,
            lambda: ready[0] + warmup + seconds if ready else
            (time.time() - 1 if proc.poll() is not None else None), values,
            starting=lambda: not ready)
        n, last_ms = fed["events"], fed["last_ms"]
        if not ready:
            raise SystemFailure(f"latency run of {side}: the side was not up within the feed "
                                f"(exit {proc.poll()})")
        drain = max(15.0, 3 * window_ms / 1000)
        time.sleep(drain)  # the last windows' results
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        proc.wait(180)
        reader.join(30)
        out = "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    report = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
    if report is None:
        with open(errors, errors="replace") as f:
            tail = f.read()[-3000:]
        raise SystemFailure(f"latency run of {side}: no report (exit {proc.returncode}):\n{tail}")
    lo, hi = ready[0] * 1000 + warmup * 1000, last_ms
    first = -(-int(lo) // window_ms) * window_ms  # the first window starting after the warm-up
    expected = list(range(first + window_ms, hi + 1, window_ms))  # window ends
    got = {e: v - e for e, v in report["visible"]}
    lats = [got[e] for e in expected if e in got]
    # Flink's: also when each window's last row left its window operator (inside the job)
    emitted = {e: v - e for e, v in report.get("emitted") or ()}
    in_job = {"in_job": _percentiles([emitted[e] for e in expected if e in emitted])} \
        if emitted else {}
    feed_s = max(1e-3, (last_ms - fed["full_from_ms"]) / 1000)
    return {"kind": "latency", "side": side, "rate": rate, "seconds": seconds,
            "window_ms": window_ms, "events": n, "feed_rate": round(fed["full_events"] / feed_s),
            "windows": len(lats),
            # windows of the measured span not visible by the stop (drain_s after the feed)
            "windows_missing": len(expected) - len(lats), "drain_s": drain,
            "windows_visible_in_all": len(got), **_percentiles(lats), **in_job,
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


# ---- the highest sustained rate -----------------------------------------------------------------
#: a side sustains a rate when the p99 of its window latency is under this (ms)
SUSTAINED_P99_MS = 1000.0
#: and the producer fed at least this share of the rate (else the rate was not given)
FEED_SHARE = 0.95


def sustains(r: Dict[str, Any], p99_ms: float = SUSTAINED_P99_MS) -> bool:
    """A latency run at a sustained rate: every window of the measured span
    visible, their p99 under ``p99_ms``, and the producer kept the rate.
    Flink's p99 is its windows' leaving the window operator (``in_job``),
    the figure most favourable to it: PyFlink's collect path to the client
    adds 300-650 ms at any rate (measured at 4,400 events/s: p50 221 ms in
    the job, 542 ms at the client)."""
    p99 = judged_p99(r)
    return r["windows"] > 0 and r["windows_missing"] == 0 and p99 is not None \
        and p99 < p99_ms and not fed_short(r)


def judged_p99(r: Dict[str, Any]) -> Optional[float]:
    """The p99 a latency run is judged by (:func:`sustains`): Flink's in the job."""
    return (r.get("in_job") or r).get("p99")


def fed_short(r: Dict[str, Any]) -> bool:
    """The producer (one Python process) fed less than FEED_SHARE of the rate."""
    return r["feed_rate"] < FEED_SHARE * r["rate"]


def sweep_rates(trial: Callable[[int], Dict[str, Any]], start: int, top: int,
                steps: int) -> Dict[str, Any]:
    """The highest rate ``trial`` sustains (:func:`sustains`): from ``start``
    doubling until a rate fails (or ``top``, or the producer falls short),
    halving instead while ``start`` fails (down to start/8), then ``steps``
    bisections between the highest good and the lowest failed rate (to the
    nearest 100 events/s). Returns the rate (None: not even start/8), the
    lowest failed one, and every trial."""
    trials: List[Dict[str, Any]] = []

    def run_one(rate: int) -> bool:
        r = trial(rate)
        r["sustained"] = sustains(r)
        trials.append(r)
        return r["sustained"]

    good: Optional[int] = None
    bad: Optional[int] = None
    rate = start
    if run_one(rate):
        good = rate
        while rate * 2 <= top and not fed_short(trials[-1]):
            rate *= 2
            if not run_one(rate):
                bad = rate
                break
            good = rate
    else:
        bad = rate
        while rate > max(1, start // 8):
            rate //= 2
            if run_one(rate):
                good = rate
                break
            bad = rate
    for _ in range(steps):
        if good is None or bad is None or fed_short(trials[-1]):
            break
        mid = int(round((good + bad) / 2, -2))
        if mid <= good or mid >= bad:
            break
        if run_one(mid):
            good = mid
        else:
            bad = mid
    return {"kind": "sweep", "side": trials[0]["side"], "sustained_rate": good,
            "lowest_failed_rate": bad, "p99_bound_ms": SUSTAINED_P99_MS,
            "window_ms": trials[0].get("window_ms"),
            "producer_bound": any(fed_short(t) for t in trials),
            "trials": [{**{k: t.get(k) for k in ("rate", "feed_rate", "windows", "windows_missing",
                                                 "p50", "p99", "max", "in_job", "sustained",
                                                 "load_before", "load_after")},
                        "judged_p99": judged_p99(t)} for t in trials]}


# ---- the benchmark -----------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=4_000_000,
                   help="YSB events in the topic (default 4 M)")
    p.add_argument("--partitions", type=int, default=8, help="topic partitions (default 8)")
    p.add_argument("--keys", type=int, default=100, help="campaigns (default 100, as YSB)")
    p.add_argument("--rate", type=int, default=100_000,
                   help="events per second of event time (default 100 k: 1 M events a window)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cores", type=int, default=2,
                   help="executors of the slash sides, local[N] of the Spark ones (default 2)")
    p.add_argument("--sides", default=",".join(SIDES),
                   help=f"comma-separated sides of {list(SIDES)} (default all)")
    p.add_argument("--repeat", type=int, default=1, help="runs per side; the fastest is kept")
    p.add_argument("--bootstrap", default=None, metavar="HOST:PORT",
                   help="a running broker to use (default: start the test broker)")
    p.add_argument("--spark-kafka-version", default=None, metavar="X.Y.Z",
                   help="the spark-sql-kafka-0-10 release (default: the installed PySpark's, "
                        "else the newest one known to resolve)")
    p.add_argument("--flink-kafka-version", default=None, metavar="X.Y.Z-1.20",
                   help="the org.apache.flink:flink-connector-kafka release of the flink side "
                        "(default: jvm/flink-connector-kafka.pom.xml's)")
    p.add_argument("--dir", default=None, help="working directory (default: a temporary one)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds a side may take")
    p.add_argument("--latency-rate", type=int, default=0, metavar="EVENTS_PER_S",
                   help="also feed a fresh topic at this rate, event time = wall clock, and "
                        "measure each live side's window latency (default 0: not measured)")
    p.add_argument("--latency-seconds", type=float, default=60.0,
                   help="seconds of the paced feed measured, from 10 s after the side is up "
                        "(default 60)")
    p.add_argument("--latency-warmup", type=float, default=10.0,
                   help="seconds at the rate, once the side is up, before the measured span "
                        "(default 10)")
    p.add_argument("--latency-window", type=int, default=1000, metavar="MS",
                   help="tumbling window of the latency runs in ms, whole seconds (default 1000)")
    p.add_argument("--sweep", action="store_true",
                   help="find each live side's highest rate with p99 window latency under 1 s "
                        "(doubling from --sweep-start, then bisecting), then measure every side's "
                        "latency for --latency-seconds at the highest rate all of them sustain")
    p.add_argument("--sweep-start", type=int, default=10_000, metavar="EVENTS_PER_S",
                   help="first rate of the sweep (default 10 k)")
    p.add_argument("--sweep-max", type=int, default=1_280_000, metavar="EVENTS_PER_S",
                   help="highest rate the sweep tries (default 1.28 M)")
    p.add_argument("--sweep-steps", type=int, default=3,
                   help="bisections after the doubling (default 3)")
    p.add_argument("--sweep-seconds", type=float, default=20.0,
                   help="seconds measured at each rate of the sweep (default 20)")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="write a plot of the runs here (matplotlib)")
    p.add_argument("--table", default=None, metavar="MD",
                   help="write the runs as a Markdown table here")


def _record(run: SideRun, topic: Topic, cores: int, verdict: Verdict,
            load: float) -> Dict[str, Any]:
    rps = topic.records / run.seconds if run.seconds > 0 else float("inf")
    return {"kind": "throughput", "side": run.side, "cores": cores, "records": topic.records,
            "seconds": round(run.seconds, 3), "records_per_s": round(rps),
            "cpu_s": round(run.cpu_s, 2),
            "cpu_s_per_m_records": round(run.cpu_s / topic.records * 1e6, 3),
            "broker_cpu_s": round(run.broker_cpu_s, 2), "verified": verdict.ok,
            "check": verdict.message, "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), **run.detail}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise InvalidArgument(f"--sides takes a comma-separated list of {list(SIDES)}, got {sides}")
    for name in ("records", "partitions", "keys", "rate", "cores", "repeat", "sweep_start",
                 "sweep_max"):
        v = getattr(args, name, 1)
        if v < 1:
            raise InvalidArgument(f"--{name} must be >= 1, got {v}")
    workdir = args.dir or tempfile.mkdtemp(prefix="slash-bench-kafka-")
    os.makedirs(workdir, exist_ok=True)
    broker: Optional[KafkaBroker] = None
    broker_dir: Optional[str] = None
    try:
        if args.bootstrap:
            bootstrap, broker_pid, create = args.bootstrap, None, _creator(args.bootstrap)
        else:
            broker_dir = tempfile.mkdtemp(prefix="broker-", dir=workdir)
            broker = KafkaBroker.start(broker_dir, jvm=BENCH_JVM)
            bootstrap, broker_pid = broker.bootstrap, broker.pid

            def create(name: str, partitions: int) -> None:
                assert broker is not None
                broker.create_topic(name, partitions, **{"retention.ms": "-1"})
        t0 = time.perf_counter()
        topic = fill_topic(bootstrap, create, f"ysb-{os.getpid()}-{int(time.time())}",
                           args.records, args.partitions, args.keys, args.rate, args.seed)
        fill_s = time.perf_counter() - t0
        want = reference(topic_values(topic), workdir)
        opts = {"broker_pid": broker_pid, "timeout": args.timeout,
                "spark_kafka_version": args.spark_kafka_version,
                "flink_kafka_version": getattr(args, "flink_kafka_version", None)}
        runs: List[Dict[str, Any]] = []
        skipped: Dict[str, str] = {}
        for name in sides:
            best: Optional[Dict[str, Any]] = None
            for _ in range(args.repeat):
                load = os.getloadavg()[0]
                d = os.path.join(workdir, f"{name}-{len(runs)}")
                os.makedirs(d, exist_ok=True)
                try:
                    r = SIDES[name](topic, args.cores, d, opts)
                except NotSupported as e:
                    skipped[name] = str(e)
                    log.warning("side %s skipped: %s", name, e)
                    break
                rec = _record(r, topic, args.cores, verify(r.answer, want), load)
                if best is None or rec["seconds"] < best["seconds"] or not rec["verified"]:
                    best = rec
                if not rec["verified"]:
                    break
            if best is not None:
                runs.append(best)
        for r in runs:
            r["vs"] = {o["side"]: round(r["records_per_s"] / o["records_per_s"], 2)
                       for o in runs if o is not r and o["records_per_s"] > 0}
        latency: List[Dict[str, Any]] = []
        live = [n for n in sides if n in _IN_PROCESS and n not in skipped]
        sweep = getattr(args, "sweep", False)
        if (args.latency_rate or sweep) and live:
            values = paced_values(200_000, args.keys, args.seed)

            def at(name: str, rate: int, seconds: float, tag: str) -> Dict[str, Any]:
                try:
                    return latency_run(name, bootstrap, create, rate, seconds,
                                       getattr(args, "latency_warmup", 10.0),
                                       args.latency_window, args,
                                       os.path.join(workdir, f"lat-{name}-{tag}-{rate}"), values)
                except SystemFailure as e:  # a side that fails at a rate does not sustain it
                    log.warning("kafka %s at %d events/s failed: %s", name, rate, e)
                    return {"kind": "latency", "side": name, "rate": rate, "feed_rate": rate,
                            "windows": 0, "windows_missing": -1, "error": str(e)[-500:],
                            "seconds": seconds, "window_ms": args.latency_window,
                            "drain_s": 0.0, "load_before": round(os.getloadavg()[0], 2),
                            "load_after": round(os.getloadavg()[0], 2)}
            fixed = args.latency_rate
            if sweep:
                found = {}
                for name in live:
                    sw = sweep_rates(lambda r, n=name: at(n, r, args.sweep_seconds, "sweep"),
                                     args.sweep_start, args.sweep_max, args.sweep_steps)
                    log.warning("kafka %s: sustains %s events/s (p99 < 1 s)", name,
                                sw["sustained_rate"])
                    latency.append(sw)
                    found[name] = sw["sustained_rate"]
                common = [r for r in found.values() if r]
                if not fixed and common:
                    fixed = min(common)
            if fixed:
                for name in live:
                    r = at(name, fixed, args.latency_seconds, "fixed")
                    r["sustained"] = sustains(r)
                    latency.append(r)
        result = {"benchmark": NAME, "topic": topic.name, "partitions": topic.partitions,
                  "records": topic.records, "cores": args.cores, "cpus": os.cpu_count(),
                  "fill_seconds": round(fill_s, 1), "reference_rows": want.num_rows,
                  "runs": runs + latency, "skipped": skipped,
                  "all_verified": all(r["verified"] for r in runs),
                  "note": "shared machine: other jobs may run at the same time (load_*)"}
    finally:
        if broker is not None:
            broker.stop()
        if broker_dir is not None:  # the topic's log
            shutil.rmtree(broker_dir, ignore_errors=True)
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if getattr(args, "table", None):
        with open(args.table, "w") as f:
            f.write(markdown(result))
        result["table"] = args.table
    if getattr(args, "plot", None):
        from slash.bench.plot import plot_kafka  # optional dependency (matplotlib)

        result["plot"] = plot_kafka(result, args.plot)
    if not result["all_verified"]:
        bad = "; ".join(f"{r['side']}: {r['check']}" for r in runs if not r["verified"])
        raise SystemFailure(f"kafka: an answer differs from DuckDB's over the topic: {bad}")
    return result


def _creator(bootstrap: str) -> Callable[[str, int], None]:
    def create(name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # optional dependency (confluent-kafka)

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                            operation_timeout=30)[name].result(30)
    return create


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:,.0f}"


def markdown(result: Dict[str, Any]) -> str:
    """The runs as Markdown tables: throughput over the filled topic, the
    highest sustained rate of each live side, the latency at the common rate."""
    runs = result["runs"]
    out = [f"{result['records']:,} YSB events as JSON in a topic of {result['partitions']} "
           f"partitions; 10 s tumbling count per campaign; {result['cores']} cores per side "
           f"({result['cpus']} on the machine, shared: load noted per run); every answer equal "
           "to DuckDB's over the topic.", "",
           "| side | records/s | seconds | CPU s / M records | timed | load |",
           "|---|---:|---:|---:|---|---|"]
    for r in (r for r in runs if r.get("kind") == "throughput"):
        out.append(f"| {r['side']} | {r['records_per_s']:,} | {r['seconds']:.2f} | "
                   f"{r['cpu_s_per_m_records']:.2f} | {r.get('timed', '')} | "
                   f"{r['load_before']} -> {r['load_after']} |")
    for side, why in result.get("skipped", {}).items():
        out.append(f"| {side} | skipped: {why} | | | | |")
    sweeps = [r for r in runs if r.get("kind") == "sweep"]
    if sweeps:
        out += ["", "Highest input rate with p99 window latency under 1 s "
                f"({sweeps[0].get('window_ms') or 1000} ms windows, event time the wall clock):", "",
                "| side | sustained events/s | lowest failed | rates tried (p99 ms; Flink's in "
                "the job; x: not sustained) |",
                "|---|---:|---:|---|"]
        for r in sweeps:
            tried = ", ".join(f"{t['rate']:,} ({_ms(t.get('judged_p99'))}"
                              f"{'' if t['sustained'] else ' x'})" for t in r["trials"])
            got = "none" if r["sustained_rate"] is None else f"{r['sustained_rate']:,}"
            if r["producer_bound"]:
                got += " (producer-bound)"
            out.append(f"| {r['side']} | {got} | {_ms(r['lowest_failed_rate'])} | {tried} |")
    fixed = [r for r in runs if r.get("kind") == "latency"]
    if fixed:
        out += ["", f"Window latency at {fixed[0]['rate']:,} events/s for "
                f"{fixed[0]['seconds']:g} s (ms from the window's end to its rows at the "
                "side's driver):", "",
                "| side | p50 | p95 | p99 | max | windows | missing | load |",
                "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in fixed:
            out.append(f"| {r['side']} | {_ms(r.get('p50'))} | {_ms(r.get('p95'))} | "
                       f"{_ms(r.get('p99'))} | {_ms(r.get('max'))} | {r['windows']} | "
                       f"{r['windows_missing']} | {r['load_before']} -> {r['load_after']} |")
        for r in fixed:
            j = r.get("in_job")
            if j:
                out.append(f"| {r['side']}, rows leaving the window operator (stamped in the "
                           f"job) | {_ms(j.get('p50'))} | {_ms(j.get('p95'))} | "
                           f"{_ms(j.get('p99'))} | {_ms(j.get('max'))} | | | |")
    return "\n".join(out) + "\n"


def summary(r: Dict[str, Any]) -> str:
    if r.get("kind") == "sweep":
        tried = ", ".join(f"{t['rate']:,}:{_ms(t.get('judged_p99'))}"
                          f"{'' if t['sustained'] else 'x'}" for t in r["trials"])
        return (f"kafka {r['side']:>12} sustains {_ms(r['sustained_rate'])} events/s with p99 "
                f"< {r['p99_bound_ms']:.0f} ms (lowest failed {_ms(r['lowest_failed_rate'])}"
                f"{', producer-bound' if r['producer_bound'] else ''}); rate:p99 ms {tried}")
    if r.get("kind") == "latency" and "error" in r:
        return f"kafka {r['side']:>12} at {r['rate']:,} events/s failed: {r['error'][-300:]}"
    if r.get("kind") == "latency":
        return (f"kafka {r['side']:>12} at {r['rate']:,} events/s, {r['window_ms']} ms windows: "
                f"latency p50 {r.get('p50', float('nan')):.0f} ms, p95 "
                f"{r.get('p95', float('nan')):.0f} ms, p99 {r.get('p99', float('nan')):.0f} ms, "
                f"max {r.get('max', float('nan')):.0f} ms over {r['windows']} windows "
                f"({r['windows_missing']} not visible {r['drain_s']:.0f} s after the feed)"
                + (f"; leaving the window operator p50 {_ms(r['in_job'].get('p50'))} ms, p99 "
                   f"{_ms(r['in_job'].get('p99'))} ms" if r.get("in_job") else "")
                + f"; load {r['load_before']} -> {r['load_after']}")
    vs = ", ".join(f"{v:.2f}x {k}" for k, v in r.get("vs", {}).items())
    return (f"kafka {r['side']:>12} on {r['cores']} core(s): "
            f"{r['records_per_s'] / 1e6:6.2f} M rec/s, "
            f"{r['seconds']:.2f} s, {r['cpu_s_per_m_records']:.2f} CPU s/M records "
            f"(broker {r['broker_cpu_s']:.1f} s){'; ' + vs if vs else ''}; "
            f"verified={str(r['verified']).lower()}; load {r['load_before']} -> {r['load_after']}")


if __name__ == "__main__":
    _side_main(json.loads(sys.argv[1]))
