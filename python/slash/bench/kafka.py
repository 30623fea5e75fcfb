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
their p99 latency is under 1 s (Flink's: in the job, see below), and the producer
(:func:`produce_paced`, on the same cores: the core's paced producer on a thread
without the GIL, ~1-2 CPU s per M events, or confluent-kafka's client in a Python
loop, ~4, when the core lacks librdkafka) fed at least 95 % of the rate (a rate it
could not feed ends the sweep: ``producer_bound``). Then every live side runs ``--latency-seconds``
at the highest rate all of them sustain (or ``--latency-rate``): the latency
distribution at a common rate. ``--table`` writes the runs as Markdown and
``--plot`` as a PNG (:func:`slash.bench.plot.plot_kafka`).

A further side is one more entry in :data:`SIDES`: a function ``(Topic, cores, workdir) ->
SideRun`` that runs the query in a process of its own (through
:func:`measured`) and returns its answer as a table of
``window_start, campaign, count``.

    slash bench kafka --records 4000000 --cores 2 --json kafka.json
    slash bench kafka --records 1000000 --latency-rate 10000 --latency-seconds 60

Where it is built: :mod:`slash.bench._kafka_topic` (the producer and the
reference), :mod:`slash.bench._kafka_measure` (a side's process and its
CPU), :mod:`slash.bench._kafka_slash`, :mod:`slash.bench._kafka_spark` and
:mod:`slash.bench._kafka_flink` (the sides), :mod:`slash.bench._kafka_sweep`
(latency runs, the sustained rate); this module runs them (:func:`run`),
writes the table and is the live sides' process (``python -m
slash.bench.kafka SPEC``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

import pyarrow.parquet as pq

from slash.bench._kafka_broker import BENCH_JVM, KafkaBroker
from slash.bench._kafka_flink import (FLINK_KAFKA_POM, flink_config, flink_job, flink_kafka_jars,
                                      run_flink, side_flink)
from slash.bench._kafka_measure import Side, SideRun, measured, tree_cpu
from slash.bench._kafka_slash import run_slash_spark, side_slash_run, side_slash_spark
from slash.bench._kafka_spark import run_spark, side_spark, spark_kafka_jars
from slash.bench._kafka_sweep import (FEED_SHARE, SUSTAINED_P99_MS, fed_short, judged_p99,
                                      latency_run, sustains, sweep_rates)
from slash.bench._kafka_topic import (ANSWER_COLUMNS, CLOSER, SCHEMA, SQL, TRICKLE_RATE,
                                      WINDOW_MS, Topic, comparable, end_offsets, fill_topic,
                                      paced_values, produce_paced, reference, topic_values,
                                      ysb_json)
from slash.bench._suite import Verdict, verify
from slash.errors import InvalidArgument, NotSupported, SystemFailure

log = logging.getLogger(__name__)

__all__ = ["ANSWER_COLUMNS", "CLOSER", "FEED_SHARE", "FLINK_KAFKA_POM", "HELP", "NAME", "SCHEMA",
           "SIDES", "SQL", "SUSTAINED_P99_MS", "Side", "SideRun", "TRICKLE_RATE", "Topic",
           "WINDOW_MS", "add_arguments", "comparable", "end_offsets", "fed_short", "fill_topic",
           "flink_config", "flink_job", "flink_kafka_jars", "judged_p99", "latency_run",
           "markdown", "measured", "paced_values", "produce_paced", "reference", "run",
           "side_flink", "side_slash_run", "side_slash_spark", "side_spark", "spark_kafka_jars",
           "summary", "sustains", "sweep_rates", "topic_values", "tree_cpu", "ysb_json"]

NAME = "kafka"
HELP = ("the same Kafka topic (YSB events as JSON, 8 partitions), a 10 s tumbling count per "
        "campaign: slash run and slash.spark.stream vs Spark Structured Streaming's and Flink's "
        "Kafka sources")


#: the sides by name, in the order they run (a further engine: one more entry)
SIDES: Dict[str, Side] = {"slash-run": side_slash_run, "slash-spark": side_slash_spark,
                          "spark": side_spark, "flink": side_flink}


#: the sides that run live (latency runs), by name: what their process runs
IN_PROCESS = {"slash-spark": run_slash_spark, "spark": run_spark, "flink": run_flink}


def _side_main(spec: Dict[str, Any]) -> None:
    logging.basicConfig(level=logging.WARNING)
    r = IN_PROCESS[spec["side"]](spec)
    path = os.path.join(spec["workdir"], f"{spec['side']}-answer.parquet")
    pq.write_table(r.pop("answer"), path)
    r["answer"] = path
    print(json.dumps(r), flush=True)


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
        live = [n for n in sides if n in IN_PROCESS and n not in skipped]
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
