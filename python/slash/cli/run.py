"""``slash run``: a windowed aggregation or join over Parquet / Arrow files.

    slash run --input data/*.parquet --time ts --window tumbling:10s --key campaign \\
              --agg count --agg sum:price --filter "event_type == view" \\
              --executors 2 --transport shm --output out.parquet
    slash run --join --left persons/ --right auctions/ --on id --time ts \\
              --window tumbling:12h --output matches.parquet
    slash run --kafka-bootstrap 127.0.0.1:9092 --topic events --time ts \\
              --window tumbling:10s --key campaign --agg count --output out.parquet
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any, Dict, Optional, Tuple

from slash.errors import InvalidArgument

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``slash run``, in groups of one concern each (``--help`` shows them so)."""
    for add, title, what in (
            (_add_input, "input", "the files or the Kafka topic read"),
            (_add_query, "query", "what is computed: an aggregation or a join over event-time "
                                  "windows"),
            (_add_group, "group", "where it runs and where its result goes"),
            (_add_watch, "live view and control", "the running query's metrics, live page and "
                                                  "control socket"),
            (_add_supervision, "recovery and scaling", "checkpoints, restarts, a latency target "
                                                       "and a provisioned group")):
        add(p.add_argument_group(title, what))


def _add_input(g: Any) -> None:
    g.add_argument("--input", nargs="+", metavar="PATH",
                   help="Parquet or Arrow IPC files, directories or glob patterns (or "
                        "--kafka-bootstrap and --topic)")
    g.add_argument("--kafka-bootstrap", metavar="HOST:PORT",
                   help="read a Kafka topic (--topic) from this broker instead of --input: its "
                        "records from the start to the end offsets seen at start (a batch query), "
                        "or, with --kafka-stream, as an unbounded stream (docs/kafka.md)")
    g.add_argument("--topic", metavar="TOPIC", help="the Kafka topic of --kafka-bootstrap")
    g.add_argument("--kafka-stream", action="store_true",
                   help="read the topic as an unbounded stream: watermarks per partition "
                        "(largest time minus --lateness), the minimum over partitions that are "
                        "not idle; runs until stopped or --kafka-end-after-idle")
    g.add_argument("--kafka-format", choices=["json", "raw"], default="json",
                   help="json: values are JSON objects (schema inferred from the first records); "
                        "raw: columns key and value as bytes (default json)")
    g.add_argument("--kafka-start", default="earliest", choices=["earliest", "latest"],
                   help="where each partition is read from (default earliest)")
    g.add_argument("--kafka-idle-timeout", default="5s", metavar="DUR",
                   help="a partition silent this long stops holding the watermark (default 5s)")
    g.add_argument("--kafka-end-after-idle", default=None, metavar="DUR",
                   help="end the stream once every partition of an executor was silent this long")
    g.add_argument("--kafka-bad-records", default=None, metavar="DIR",
                   help="write malformed values (with topic, partition, offset) here as JSON lines")
    g.add_argument("--kafka-sink-topic", default=None, metavar="TOPIC",
                   help="also write each window as a record (JSON, key = the group key) to this "
                        "topic of --kafka-bootstrap: exactly once with --checkpoint (a Kafka "
                        "transaction per checkpoint, read_committed readers see each window "
                        "once), else at least once at the end of the run")


def _add_query(g: Any) -> None:
    g.add_argument("--time", required=True, metavar="COL",
                   help="event-time column: an integer (ms unless --time-unit), a timestamp of any "
                        "unit (Spark's INT96 too) or a date")
    g.add_argument("--time-unit", choices=["s", "ms", "us", "ns"], default=None,
                   help="unit of an integer time column (default ms)")
    g.add_argument("--window", metavar="SPEC",
                   help="tumbling:10s | sliding:7d/1d | session:10s (units ms, s, m, h, d, or "
                        "Spark's '10 seconds', '1 day'); +OFFSET moves tumbling and sliding "
                        "windows as Spark's startTime does: tumbling:1d+-8h")
    g.add_argument("--time-zone", default="UTC", metavar="ZONE",
                   help="the zone a date time column is read in: its midnight there, as Spark's "
                        "session time zone casts a date (default UTC; timestamps do not depend "
                        "on it)")
    g.add_argument("--key", metavar="COL[,COL]", help="key column(s) of an aggregation")
    g.add_argument("--agg", action="append", metavar="AGG",
                   help="count | count:COL | sum:COL | min:COL | max:COL | avg:COL | first:COL | "
                        "last:COL | approx_count_distinct:COL[:RSD] | percentile_approx:COL:Q | "
                        "count_distinct:COL (repeatable; nulls as in SQL; see docs/aggregates.md); "
                        "top:N:AGG keeps per window the N keys with the largest AGG (e.g. "
                        "top:3:count), ranked in a 'rank' column")
    g.add_argument("--join", action="store_true",
                   help="a windowed equi-join of --left and --right on --on (tumbling or session)")
    g.add_argument("--join-interval", metavar="LOWER,UPPER",
                   help="an interval join instead of a windowed one: pairs with left time "
                        "BETWEEN right time + LOWER AND right time + UPPER (inclusive), e.g. "
                        "-5s,+10s (give it as --join-interval=-5s,+10s)")
    g.add_argument("--left", nargs="+", metavar="PATH", help="left input of a join")
    g.add_argument("--right", nargs="+", metavar="PATH", help="right input of a join")
    g.add_argument("--on", metavar="COL[,COL]", help="join key column(s), named alike on both sides")
    g.add_argument("--string-bytes", type=int, default=32, metavar="N",
                   help="a join's string/binary payload values hold at most N bytes (each is kept "
                        "in N + 2 bytes rounded up to 8; a longer one is an error)")
    g.add_argument("--filter", action="append", default=[], metavar="'COL OP VALUE'",
                   help="keep records where it holds; OP: == != < <= > >= in (repeatable)")
    g.add_argument("--lateness", default="0ms", metavar="DUR",
                   help="allowed out-of-orderness of a stream; files are bounded and need none "
                        "(every record is applied, whatever the layout)")
    g.add_argument("--late-output", metavar="PATH",
                   help="Parquet file for records not applied as late (none for files unless "
                        "their statistics are wrong)")


def _add_group(g: Any) -> None:
    g.add_argument("--executors", type=int, default=None, metavar="N",
                   help="executor processes (default: the number of cores; an input of at most "
                        "16 M rows runs on one executor in this process)")
    g.add_argument("--transport", default="shm",
                   help="shm | ofi:tcp | ofi:verbs, or ofi:verbs@DEVICE|ADDRESS to pick the RDMA "
                        "device (default shm)")
    g.add_argument("--mode", default="slash", choices=["slash", "repartition"],
                   help="slash: eager local state merged at leaders (default); repartition: the "
                        "hash-repartitioning baseline over the same channels")
    g.add_argument("--output", required=True, metavar="OUT.parquet", help="result file")
    g.add_argument("--rate", type=float, default=None, metavar="RECORDS_PER_S",
                   help="replay the input as a stream at most this fast (records/s over all "
                        "executors; default: as fast as possible)")
    g.add_argument("--realtime", action="store_true",
                   help="the input's event times are wall-clock (Unix) times: read each batch no "
                        "earlier than its latest time; window latency = emit time - window end")
    g.add_argument("--timeout", default=None, metavar="SECONDS",
                   help="fail the run if it has not finished within SECONDS ('none': never); "
                        "default 3600 for files or a topic read as fast as possible, none for a "
                        "stream (--rate, --realtime, --kafka-stream)")


def _add_watch(g: Any) -> None:
    g.add_argument("--metrics-port", type=int, default=None, metavar="N",
                   help="serve live metrics in Prometheus' text format at http://ADDR:N/metrics while "
                        "the query runs (0: a free port; the URL is logged)")
    g.add_argument("--ui", action="store_true",
                   help="serve the live page (throughput, per-executor load and watermark, epochs) "
                        "on the metrics server (a free port unless --metrics-port)")
    g.add_argument("--ui-bind", default="127.0.0.1", metavar="ADDR",
                   help="address of the metrics server (default loopback; any other needs the "
                        "token the logged URL carries)")
    g.add_argument("--ui-token", default=None, metavar="TOKEN",
                   help="token for a non-loopback --ui-bind (default: a random one)")
    g.add_argument("--control", metavar="PATH", default=None,
                   help="control socket for `slash ctl` (default: run-PID.sock in the control "
                        "directory; its path is logged at start; docs/control.md)")
    g.add_argument("--no-control", action="store_true", help="serve no control socket")


def _add_supervision(g: Any) -> None:
    g.add_argument("--checkpoint", metavar="DIR",
                   help="checkpoint directory: exactly-once recovery from executor failures; "
                        "running again with the same DIR resumes (docs/recovery.md)")
    g.add_argument("--checkpoint-every", default="10s", metavar="EVERY",
                   help="10s | 'N epochs' | 'N batches' (default 10s)")
    g.add_argument("--max-restarts", type=int, default=3, metavar="K",
                   help="restarts from the last checkpoint before the run fails (default 3)")
    g.add_argument("--latency-target", default=None, metavar="DUR",
                   help="tune the run so that windows come out within DUR of their end (e.g. "
                        "500ms): epoch length and executor count, scaled live within a group "
                        "of --max-executors processes; with --checkpoint DIR a rescale restarts "
                        "from a checkpoint instead; needs --realtime (see docs/metrics.md)")
    g.add_argument("--min-executors", type=int, default=None, metavar="N",
                   help="with --latency-target: never fewer executors (default 1)")
    g.add_argument("--max-executors", type=int, default=None, metavar="N",
                   help="with --latency-target: never more executors (default max(--executors, "
                        "cores)); without it: provision a group of N executors, --executors of "
                        "them active and the rest standby, so `slash ctl scale-out/scale-in` change "
                        "the active count live, without a restart (docs/elastic.md)")

#: a timeout that is no cap: 31 years, within what every wait in the run takes
NO_TIMEOUT_S = 1e9


def _timeout(args: argparse.Namespace) -> float:
    """--timeout in seconds: given, 'none', or the default for the kind of run."""
    if args.timeout is None:
        return NO_TIMEOUT_S if (args.rate is not None or args.realtime or
                                getattr(args, "kafka_stream", False)) else 3600.0
    if str(args.timeout).strip().lower() in ("none", "inf", "0"):
        return NO_TIMEOUT_S
    try:
        value = float(args.timeout)
    except ValueError:
        value = -1.0
    if not 0 < value <= NO_TIMEOUT_S:
        raise InvalidArgument(f"--timeout must be a number of seconds > 0 or 'none', got "
                              f"{args.timeout!r}")
    return value


def _kafka_sink(args: argparse.Namespace, query: Any) -> Any:
    """--kafka-sink-topic as a KafkaSink keyed by the query's key; with
    --checkpoint DIR transactional, its id named by DIR (a run started
    again from DIR fences the one before it)."""
    import hashlib

    from slash.kafka import KafkaSink

    if not args.kafka_bootstrap:
        raise InvalidArgument("--kafka-sink-topic writes to the broker of --kafka-bootstrap "
                              "HOST:PORT: give it")
    tid = None
    if args.checkpoint:
        digest = hashlib.sha1(os.path.abspath(args.checkpoint).encode()).hexdigest()[:16]
        tid = f"slash-{digest}"
    key = [query.key] if isinstance(query.key, str) else list(query.key)
    return KafkaSink(args.kafka_bootstrap, args.kafka_sink_topic, key=key,
                     transactional_id=tid)


def _kafka_source(args: argparse.Namespace) -> Any:
    """--kafka-bootstrap / --topic as a KafkaSource (bounded) or KafkaStream."""
    from slash.kafka import KafkaSource, KafkaStream

    if not (args.kafka_bootstrap and args.topic):
        raise InvalidArgument("a Kafka input needs both --kafka-bootstrap HOST:PORT and --topic T")
    if args.input:
        raise InvalidArgument("--input and --kafka-bootstrap name two inputs: give one")
    common = dict(time=args.time, format=args.kafka_format, start=args.kafka_start,
                  bad_records=args.kafka_bad_records)
    if args.kafka_stream:
        return KafkaStream(args.kafka_bootstrap, args.topic, lateness=args.lateness,
                           idle_timeout=args.kafka_idle_timeout,
                           end_after_idle=args.kafka_end_after_idle, **common)
    return KafkaSource(args.kafka_bootstrap, args.topic, **common)


def _query_and_source(args: argparse.Namespace) -> Tuple[Any, Any, Optional[int]]:
    """The query the options ask for, its source, and the records it holds
    (None for a stream: known once read)."""
    # imported here, after run() started the executors' fork server when it could (the server
    # loads them once for every executor; this process would otherwise load them first)
    from slash.query import JoinQuery, Query
    from slash.sources import FileSource

    def cols(text: str) -> list:
        return [k for k in text.split(",") if k]

    if args.join:
        if not (args.left and args.right and args.on):
            raise InvalidArgument("--join needs --left PATH, --right PATH and --on COL")
        if args.input or args.agg or args.key or args.filter:
            raise InvalidArgument("--join takes --left/--right/--on, not --input/--key/--agg/--filter")
        query = JoinQuery(time=args.time, window=args.window, on=cols(args.on),
                          lateness=args.lateness, time_unit=args.time_unit,
                          time_zone=args.time_zone, string_bytes=args.string_bytes,
                          interval=args.join_interval)
        source = (FileSource(args.left), FileSource(args.right))
        rows_in = source[0].rows + source[1].rows
    else:
        kafka = args.kafka_bootstrap is not None or args.topic is not None
        if not ((args.input or kafka) and args.key and args.agg):
            raise InvalidArgument("an aggregation needs --input PATH (or --kafka-bootstrap and "
                                  "--topic), --key COL and --agg AGG (or --join with "
                                  "--left/--right/--on)")
        if not args.window:
            raise InvalidArgument("an aggregation needs --window SPEC (e.g. tumbling:10s)")
        query = Query(time=args.time, window=args.window, key=cols(args.key), aggregates=args.agg,
                      filters=args.filter, lateness=args.lateness, time_unit=args.time_unit,
                      time_zone=args.time_zone)
        if kafka:
            source = _kafka_source(args)
            rows_in = getattr(source, "rows", None)
        else:
            source = FileSource(args.input)
            rows_in = source.rows
    return query, source, rows_in


def _control(args: argparse.Namespace) -> Any:
    """The run's control socket: a path, True (the default path) or None."""
    control: Any = None
    live_join = args.join and args.max_executors is not None and not args.latency_target
    if not ((args.join and not live_join) or args.no_control):
        control = args.control or True  # a live-scalable join's: status, scale-out/in, rebalance
    elif args.control and not args.no_control:
        # a join of N asked for a socket: a live join group, all active; with --checkpoint the
        # checkpointed run's (status, rebalance, scale-out/in by restart); --latency-target is
        # refused for a join by the compatibility table, with its reason
        control = args.control
    return control


def _settings(args: argparse.Namespace, query: Any) -> Dict[str, Any]:
    """The keyword arguments of :func:`slash.runner.run` the options set
    beyond the query, source, group and output (each only when asked for)."""
    return {**({"rate": args.rate} if args.rate is not None else {}),
            **({"latency_target": args.latency_target,
                "min_executors": args.min_executors,
                "max_executors": args.max_executors}
               if args.latency_target else {}),
            **({"max_executors": args.max_executors}
               if args.max_executors is not None and not args.latency_target
               else {}),
            **({"realtime": True} if args.realtime else {}),
            **({"sink": _kafka_sink(args, query)}
               if args.kafka_sink_topic else {}),
            **({"checkpoint": args.checkpoint,
                "checkpoint_every": args.checkpoint_every,
                "max_restarts": args.max_restarts} if args.checkpoint else {})}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    from slash.run.launcher import use_forkserver

    process_settings = {"checkpoint": args.checkpoint, "max_executors": args.max_executors,
                        "latency_target": args.latency_target, "realtime": args.realtime}
    if any(process_settings.values()):  # processes for sure: the server's imports overlap ours
        use_forkserver(["slash._warm"])
    from slash.runner import executor_count, run as run_query, runs_in_process

    if args.rate is not None and not args.rate > 0:  # 0 would mean no pacing at all
        raise InvalidArgument(f"--rate must be > 0 records/s, got {args.rate:g}")
    timeout = _timeout(args)
    query, source, rows_in = _query_and_source(args)
    here = runs_in_process(source, args.executors, args.transport, **process_settings)
    if not here:
        # executors are forked from a server that loads their modules once
        # (started above, before this process's imports, when a setting
        # asked for processes; no-op if so)
        use_forkserver(["slash._warm"])
    executors = executor_count(source, args.executors, here)
    live = server = None
    if args.metrics_port is not None or args.ui:
        from slash.metrics import LiveMetrics, MetricsServer

        ranks = args.max_executors if args.max_executors and not args.latency_target \
            else executors  # a provisioned group: its standby ranks report too
        live = LiveMetrics(ranks, kind="run")
        server = MetricsServer(live, args.metrics_port or 0, args.ui_bind, args.ui_token)
        log.warning("slash run: live page %s , Prometheus endpoint %s", server.ui_url, server.url)
    control = _control(args)
    t0 = time.perf_counter()
    m: Dict[str, Any] = {}
    try:
        result = run_query(query, source, executors=args.executors, transport=args.transport,
                           mode=args.mode, output=args.output, metrics=m,
                           late_output=args.late_output, live=live, control=control,
                           timeout=timeout, **_settings(args, query))
    finally:
        if server is not None:
            server.close()
    secs = time.perf_counter() - t0
    if rows_in is None:  # a stream: what its executors read
        rows_in = int(m.get("records_in", 0) or 0)
    return {"output": args.output, "rows_in": rows_in, "rows_out": result.num_rows,
            "seconds": round(secs, 3), "records_per_s": rows_in / secs if secs else None,
            "executors": m.get("executors", executors), "in_process": m.get("in_process", False),
            "transport": args.transport, "mode": args.mode,
            "late_records": m.get("late_records", 0),
            "null_time_records": m.get("null_time_records", 0),
            "malformed_records": m.get("malformed_records", 0),
            "bad_records": getattr(args, "kafka_bad_records", None),
            "late_output": args.late_output,
            "checkpoints": m.get("checkpoints"), "recoveries": m.get("recoveries"),
            "records_replayed": m.get("records_replayed"), "logic": m.get("logic"),
            "autotune": m.get("autotune"), "live_scales": m.get("live_scales")}


def summary(r: Dict[str, Any]) -> str:
    text = (f"slash run: {r['rows_in']:,} records -> {r['rows_out']:,} rows in {r['seconds']:.2f} s "
            f"({r['records_per_s'] / 1e6:.2f} M records/s, "
            f"{r['executors']} executor{'s' if r['executors'] != 1 else ''}"
            f"{' in this process' if r.get('in_process') else ''}, "
            f"{r['transport']}, {r['mode']} mode) -> {r['output']}")
    if r.get("checkpoints") is not None:
        text += (f"\n  {len(r['checkpoints'])} checkpoint(s), {len(r['recoveries'] or [])} "
                 f"recovery(ies), {r.get('records_replayed') or 0:,} records replayed")
    if r.get("logic") and len(r["logic"]) > 1:
        for v in r["logic"]:
            text += (f"\n  logic v{v['version']} from "
                     f"{'the start' if v['from_time_ms'] is None else str(v['from_time_ms']) + ' ms'}"
                     f": filters {v['filters'] or 'none'}")
    if r.get("null_time_records"):
        text += (f"\n  {r['null_time_records']:,} record(s) with a null time are in no window "
                 "(not aggregated)")
    for sc in r.get("live_scales") or []:
        text += (f"\n  {sc.get('path', 'live')} scale {sc['from']} -> {sc['to']} active "
                 f"executors (ranks {sc['active_ranks']}): input paused {sc['paused_ms']:.1f} ms")
    auto = r.get("autotune")
    if auto and auto.get("latency_target_ms"):
        lat = auto.get("window_latency") or {}
        p99 = lat.get("p99_ms")
        text += (f"\n  latency target {auto['latency_target_ms']:.0f} ms: window p99 "
                 f"{'n/a' if p99 is None else f'{p99:.0f} ms'}, {len(auto['decisions'])} "
                 f"decision(s), ending with {auto['executors']} executor(s)")
        for d in auto["decisions"]:
            text += f"\n    {d['action']} {d['args']}: {d['reason']} ({d['outcome']})"
    if r.get("malformed_records"):
        text += (f"\n  WARNING: {r['malformed_records']:,} malformed value(s) skipped"
                 + (f" (written to {r['bad_records']})" if r.get("bad_records") else
                    " (--kafka-bad-records DIR keeps them)"))
    if r.get("late_records"):
        text += f"\n  WARNING: {r['late_records']:,} late record(s) not applied"
        text += f" (written to {r['late_output']})" if r.get("late_output") else \
            " (--late-output PATH keeps them)"
    return text
