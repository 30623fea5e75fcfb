"""The Kafka source's per-record cost (issue 29), stage by stage, side by
side in one run, on one topic of YSB events (``slash bench kafka``'s: JSON
values of ~240 B, event i in partition i mod P):

* ``client``: a bare confluent-kafka ``consume(num_messages=N)`` loop that
  only touches each record's ``value()``: the client's floor;
* ``client-nogc``: the same with Python's garbage collector off (each
  record is a collectable Message object: a collector running meanwhile
  walks them);
* ``decode``: the sources' reader (``slash.kafka.reader.open_reader``: the
  core's, on librdkafka's C API, one buffer per poll, or confluent-kafka's
  consumer), each poll's partitions decoded to Arrow by the sources'
  :class:`slash.kafka.decode.Decoder`;
* ``stream``: :class:`slash.kafka.KafkaStream`'s read path as a rank of the
  stream task uses it (``read_work`` with a ``wait``, per-partition
  watermarks on ``event_time``, positions), up to the topic's end offsets;
* ``bounded``: :class:`slash.kafka.KafkaSource`'s units of the rank, read
  as ``slash run`` reads them.

Every stage reads rank ``--rank``'s share (``--ranks``: partitions
r, r+n, ...) alone, in a process of its own (a fresh consumer, nothing cached
but the broker's page cache), under each ``--python LABEL=INTERPRETER`` (the
slash installed there; default: this one), stages and interpreters
alternating, ``--repeat`` times: the best of each is reported, in records/s
of the rank and CPU seconds per million records. ``--profile`` also profiles
the stream stage of this interpreter (cProfile; ``py-spy record --native`` when
``py-spy`` is on PATH) and prints each function's share.

    python bench/kafka_consume.py --records 1000000 --readers core,confluent \\
        --python before=/work/main/.venv/bin/python --python after=.venv/bin/python

``--paced RATE`` measures instead a reader caught up with a live topic
(:func:`run_paced`: a producer process feeding RATE events/s), for each
``--fetch-min-bytes`` value: its CPU and the broker's per million records
and its read lag, the medians of ``--repeat`` runs (results in
``bench/results/kafka_consume_paced.json``)::

    python bench/kafka_consume.py --paced 30000 --fetch-min-bytes 1,262144

A broker is started for the run (the tests' :class:`KafkaBroker`, with the
benchmark's JVM) unless ``--bootstrap`` and ``--topic`` name a filled one.
Results go to ``bench/results/kafka_consume.json`` (``--out``), with the load.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import logging
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

log = logging.getLogger("kafka_consume")

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "kafka_consume.json")
STAGES = ("client", "client-nogc", "decode", "stream", "bounded")
#: records per consume() call, as the sources ask (slash.kafka.decode.BATCH_RECORDS)
POLL = 65_536


# ---- the stages (run in a worker process) -----------------------------------------------------
def _share(ends: Dict[int, int], rank: int, ranks: int) -> List[int]:
    return sorted(ends)[rank::ranks]


def _client_loop(bootstrap: str, topic: str, ends: Dict[int, int], parts: List[int],
                 each: Callable[[List[Any]], None]) -> int:
    """Reads ``parts`` from offset 0 to their end offsets with the sources'
    consumer settings, ``each(msgs)`` per poll; the records read."""
    import confluent_kafka as ck  # optional dependency (confluent-kafka)

    from slash.kafka.client import consumer_config

    c = ck.Consumer(consumer_config(bootstrap, None))
    c.assign([ck.TopicPartition(topic, p, 0) for p in parts])
    left = {p for p in parts if ends[p] > 0}
    n = 0
    try:
        while left:
            got = c.consume(num_messages=POLL, timeout=0.1)
            good = []
            for m in got:
                if m.error() is None:
                    good.append(m)
                    if m.offset() >= ends[m.partition()] - 1:
                        left.discard(m.partition())
            each(good)
            n += len(good)
    finally:
        c.close()
    return n


def stage_client(bootstrap: str, topic: str, ends: Dict[int, int], parts: List[int],
                 rank: int, ranks: int) -> Callable[[], int]:
    def touch(msgs: List[Any]) -> None:
        for m in msgs:
            m.value()
    return lambda: _client_loop(bootstrap, topic, ends, parts, touch)


def stage_client_nogc(bootstrap: str, topic: str, ends: Dict[int, int], parts: List[int],
                      rank: int, ranks: int) -> Callable[[], int]:
    """The bare loop with Python's garbage collector off: the client's floor."""
    def read() -> int:
        gc.disable()
        try:
            return stage_client(bootstrap, topic, ends, parts, rank, ranks)()
        finally:
            gc.enable()
    return read


def stage_decode(bootstrap: str, topic: str, ends: Dict[int, int], parts: List[int],
                 rank: int, ranks: int) -> Callable[[], int]:
    """The sources' reader (:func:`slash.kafka.reader.open_reader`: the core's
    or confluent-kafka's, as ``SLASH_KAFKA_READER`` says), each poll's
    partitions decoded to Arrow by the sources' Decoder; under a slash that
    predates the reader, the ``client`` loop with each poll's Messages decoded."""
    from slash.bench._kafka_topic import SCHEMA
    from slash.kafka.decode import Decoder

    dec = Decoder(topic, "json", SCHEMA, "kafka_timestamp", None)
    try:
        from slash.kafka.reader import end_of_log, open_reader
    except ImportError:  # a slash before the reader: Messages decoded
        def read_messages() -> int:
            rows = [0]

            def decode(msgs: List[Any]) -> None:
                if msgs:
                    b, _ = dec.decode(-1, msgs)
                    rows[0] += b.num_rows
            n = _client_loop(bootstrap, topic, ends, parts, decode)
            assert rows[0] == n, (rows[0], n)
            return n
        return read_messages

    def read() -> int:
        r = open_reader(bootstrap, topic, None)
        r.assign([(p, 0) for p in parts])
        left = {p for p in parts if ends[p] > 0}
        n = 0
        try:
            while left:
                got = r.fetch(POLL, 0.1)
                end_of_log(got.events, topic)
                for p, recs in got.runs():
                    b, _ = dec.decode(p, recs)
                    n += b.num_rows
                    if int(recs.offset[-1]) >= ends[p] - 1:
                        left.discard(p)
        finally:
            r.close()
        return n
    return read


def stage_stream(bootstrap: str, topic: str, ends: Dict[int, int], parts: List[int],
                 rank: int, ranks: int) -> Callable[[], int]:
    from slash.bench._kafka_topic import SCHEMA
    from slash.kafka import KafkaStream

    src = KafkaStream(bootstrap, topic, schema=SCHEMA, time="event_time", end_offsets=ends)

    def wait(seconds: float) -> bool:  # the stream task serves its executor meanwhile
        time.sleep(seconds)
        return False

    def read() -> int:
        n = 0
        for _, item in src.read_work(src.work(rank, ranks), time="event_time", wait=wait,
                                     deal=(rank, ranks)):
            n += getattr(item, "num_rows", 0)
        return n
    return read


def stage_bounded(bootstrap: str, topic: str, ends: Dict[int, int], parts: List[int],
                  rank: int, ranks: int) -> Callable[[], int]:
    from slash.bench._kafka_topic import SCHEMA
    from slash.kafka import KafkaSource

    src = KafkaSource(bootstrap, topic, schema=SCHEMA, time="event_time")

    def read() -> int:
        n = 0
        try:
            for item in src.read(rank, ranks, time="event_time"):
                n += getattr(item, "num_rows", 0)
        finally:
            src.close()
        return n
    return read


#: each stage: its set-up (a source's open: the topic's metadata), then the read timed
STAGE_FNS: Dict[str, Callable[..., Callable[[], int]]] = {
    "client": stage_client, "client-nogc": stage_client_nogc, "decode": stage_decode,
    "stream": stage_stream, "bounded": stage_bounded}


def _warm() -> None:
    """What every stage imports once, before the clock starts: the Kafka
    modules and what pyarrow imports at its first ``pa.array`` of a list
    (pandas' check), one-time costs of a rank, not per-record ones."""
    import pyarrow as pa

    import slash.bench._kafka_topic  # noqa: F401  (the schema)
    import slash.kafka  # noqa: F401

    pa.array([0], pa.int64())


def run_stage(stage: str, bootstrap: str, topic: str, ends: Dict[int, int], rank: int,
              ranks: int) -> Dict[str, Any]:
    """One stage timed: wall and CPU seconds of the read, the records read."""
    parts = _share(ends, rank, ranks)
    _warm()
    read = STAGE_FNS[stage](bootstrap, topic, ends, parts, rank, ranks)
    t0, c0 = time.perf_counter(), time.process_time()
    n = read()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    want = sum(ends[p] for p in parts)
    if n != want:
        raise SystemExit(f"stage {stage}: read {n} records of rank {rank}'s {want}")
    return {"stage": stage, "records": n, "seconds": round(wall, 3), "cpu_s": round(cpu, 3),
            "records_per_s": round(n / wall), "cpu_s_per_m_records": round(cpu / n * 1e6, 3)}


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` spent so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _feed(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float) -> None:
    from slash.bench._kafka_topic import paced_values, produce_paced

    values = paced_values(20_000, 100, 3)
    end = time.time() + seconds
    produce_paced(bootstrap, topic, partitions, rate, lambda: end, values)


def run_paced(bootstrap: str, rate: int, seconds: float, partitions: int,
              fetch_min_bytes: Optional[int], broker_pid: Optional[int]) -> Dict[str, Any]:
    """A reader caught up with a live topic: a producer process paces
    ``rate`` events/s (event time = the wall clock) into a fresh topic, one
    rank's KafkaStream reads every partition as records arrive; over the
    span after its first records (less the last 3 s), its CPU and the
    broker's per million records, and the read lag (the wall clock at each
    batch minus the event time of its last record)."""
    import multiprocessing as mp

    import confluent_kafka.admin as cka  # optional dependency (confluent-kafka)

    from slash.bench._kafka_topic import SCHEMA
    from slash.kafka import KafkaStream

    topic = f"paced-{os.getpid()}-{int(time.time())}"
    admin = cka.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([cka.NewTopic(topic, partitions, 1)])[topic].result()
    config = {} if fetch_min_bytes is None else {"fetch.min.bytes": fetch_min_bytes}
    for attempt in range(50):  # a new topic's partitions get their leader a moment later
        try:
            src = KafkaStream(bootstrap, topic, schema=SCHEMA, time="event_time", config=config)
            break
        except cka.KafkaException:
            if attempt == 49:
                raise
            time.sleep(0.2)
    feeder = mp.get_context("spawn").Process(target=_feed,
                                             args=(bootstrap, topic, partitions, rate, seconds))
    feeder.start()

    lags: List[float] = []
    n, start, opened = 0, None, time.monotonic()

    def wait(s: float) -> bool:  # True: stop (the span is over, or the feed never came)
        time.sleep(s)
        return (start is not None and time.monotonic() - start > seconds - 3) or \
            (start is None and time.monotonic() - opened > 120)
    try:
        for _, item in src.read_work(src.work(0, 1), time="event_time", wait=wait):
            rows = getattr(item, "num_rows", 0)
            if start is not None and time.monotonic() - start > seconds - 3:
                break
            if not rows:
                continue
            if start is None:
                start, c0 = time.monotonic(), time.process_time()
                b0 = _cpu_of(broker_pid) if broker_pid else 0.0
            else:
                n += rows
                lags.append(time.time() * 1000 - item.column("event_time")[rows - 1].as_py())
        if start is None or not n:
            raise SystemExit("paced: no record from the producer within 120 s")
        wall, cpu = time.monotonic() - start, time.process_time() - c0
        bcpu = _cpu_of(broker_pid) - b0 if broker_pid else None
    finally:
        feeder.terminate()
        feeder.join()
    lags.sort()
    return {"stage": "paced", "fetch.min.bytes": fetch_min_bytes, "rate": rate, "records": n,
            "seconds": round(wall, 2), "records_per_s": round(n / wall),
            "cpu_s_per_m_records": round(cpu / n * 1e6, 3),
            "broker_cpu_s_per_m_records": None if bcpu is None else round(bcpu / n * 1e6, 3),
            "read_lag_ms_p50": round(lags[len(lags) // 2]),
            "read_lag_ms_p99": round(lags[int(len(lags) * 0.99)])}


# ---- the driver --------------------------------------------------------------------------------
def _broker(workdir: str) -> Any:
    from slash.bench._kafka_broker import BENCH_JVM, KafkaBroker

    return KafkaBroker.start(os.path.join(workdir, "broker"), jvm=BENCH_JVM)


def _fill(args: argparse.Namespace, workdir: str) -> Tuple[Any, str, str]:
    from slash.bench._kafka_topic import fill_topic

    broker = _broker(workdir)
    name = "ysb-consume"
    t0 = time.perf_counter()
    fill_topic(broker.bootstrap, broker.create_topic, name, args.records, args.partitions,
               keys=100, rate=100_000, seed=7)
    log.info("topic %s: %d records in %d partitions, filled in %.1f s", name, args.records,
             args.partitions, time.perf_counter() - t0)
    return broker, broker.bootstrap, name


def _worker(python: str, stage: str, bootstrap: str, topic: str, ends: Dict[int, int],
            rank: int, ranks: int, reader: str = "auto") -> Dict[str, Any]:
    cmd = [python, os.path.abspath(__file__), "--worker", stage, "--bootstrap", bootstrap,
           "--topic", topic, "--ends", json.dumps(ends), "--rank", str(rank),
           "--ranks", str(ranks)]
    env = dict(os.environ, SLASH_KAFKA_READER=reader)
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd="/", env=env)
    if got.returncode != 0:
        raise SystemExit(f"{stage} under {python} failed:\n{got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def profile_stream(bootstrap: str, topic: str, ends: Dict[int, int], rank: int, ranks: int,
                   workdir: str) -> Dict[str, Any]:
    """The stream stage of this interpreter under py-spy (native frames) when
    it is on PATH, else cProfile: each function's share of the time."""
    if shutil.which("py-spy"):
        out = os.path.join(workdir, "stream.txt")
        cmd = ["py-spy", "record", "--native", "--format", "raw", "--rate", "250", "-o", out,
               "--", sys.executable, os.path.abspath(__file__), "--worker", "stream",
               "--bootstrap", bootstrap, "--topic", topic, "--ends", json.dumps(ends),
               "--rank", str(rank), "--ranks", str(ranks)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        return {"tool": "py-spy --native, the read's samples", "self": _collapsed_shares(out, leaf=True),
                "inclusive": _collapsed_shares(out, leaf=False)}
    prof = cProfile.Profile()
    prof.enable()
    run_stage("stream", bootstrap, topic, ends, rank, ranks)
    prof.disable()
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    total = sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]
    rows = sorted(((v[2], f"{os.path.basename(k[0])}:{k[1]}:{k[2]}")
                   for k, v in st.stats.items()), reverse=True)[:25]  # type: ignore[attr-defined]
    return {"tool": "cProfile (own time)",
            "self": [[name, round(100 * t / total, 1)] for t, name in rows]}


def _collapsed_shares(path: str, leaf: bool) -> List[List[Any]]:
    """Shares of the read's samples in a collapsed-stack file (py-spy's raw
    format; the stacks under the stage's ``read``): by the innermost frame
    (``leaf``) or by every frame on the stack."""
    counts: Dict[str, int] = {}
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            k = int(n)
            frames = stack.split(";")
            if not any(".read (" in f and "kafka_consume.py" in f for f in frames):
                continue  # the process's start-up and the source's open: not the read
            total += k
            names = [frames[-1]] if leaf else set(frames)
            for fr in names:
                counts[fr] = counts.get(fr, 0) + k
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:30]
    return [[name, round(100 * c / max(total, 1), 1)] for name, c in top]


def paced(args: argparse.Namespace, pythons: List[Tuple[str, str]], bootstrap: str,
          broker_pid: Optional[int]) -> None:
    """``--paced``: run_paced for each interpreter and fetch.min.bytes,
    alternating, ``--repeat`` times; the median of each is reported."""
    runs: Dict[str, List[Dict[str, Any]]] = {}
    load_before = os.getloadavg()
    for _ in range(args.repeat):
        for label, python in pythons:
            python, _, reader = python.partition(":")
            env = dict(os.environ, SLASH_KAFKA_READER=reader or "auto")
            for fmb in args.fetch_min_bytes.split(","):
                cmd = [python, os.path.abspath(__file__), "--worker", "paced", "--bootstrap",
                       bootstrap, "--paced", str(args.paced), "--paced-seconds",
                       str(args.paced_seconds), "--partitions", str(args.partitions),
                       "--fetch-min-bytes", fmb]
                if broker_pid:
                    cmd += ["--broker-pid", str(broker_pid)]
                got = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd="/",
                                     env=env)
                if got.returncode != 0:
                    raise SystemExit(f"paced under {python} failed:\n{got.stderr[-3000:]}")
                r = json.loads(got.stdout.strip().splitlines()[-1])
                runs.setdefault(f"{label} fetch.min.bytes={fmb}", []).append(r)
                log.info("%-8s fetch.min.bytes=%-8s %7d rec/s %6.3f CPU s/M, broker %s s/M, "
                         "lag p50 %d ms p99 %d ms", label, fmb, r["records_per_s"],
                         r["cpu_s_per_m_records"], r["broker_cpu_s_per_m_records"],
                         r["read_lag_ms_p50"], r["read_lag_ms_p99"])
    median = {k: {m: sorted(r[m] for r in rs)[len(rs) // 2] for m in
                  ("cpu_s_per_m_records", "broker_cpu_s_per_m_records", "read_lag_ms_p50",
                   "read_lag_ms_p99") if rs[0][m] is not None} for k, rs in runs.items()}
    for k, m in median.items():
        log.info("median %-36s %s", k, m)
    res = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
           "cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg(),
           "rate": args.paced, "partitions": args.partitions, "pythons": dict(pythons),
           "median": median, "runs": runs}
    out = args.out if args.out != RESULTS else RESULTS.replace(".json", "_paced.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    log.info("written to %s", out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--python", action="append", default=[],
                   help="LABEL=INTERPRETER (repeatable; default this=sys.executable)")
    p.add_argument("--readers", default="auto",
                   help="SLASH_KAFKA_READER values compared under each --python (e.g. "
                        "core,confluent; a slash before the core's reader ignores it)")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--bootstrap")
    p.add_argument("--topic")
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--paced", type=int, metavar="RATE",
                   help="instead of the stages: a reader caught up with a topic fed at RATE "
                        "events/s, for each --fetch-min-bytes (see run_paced)")
    p.add_argument("--paced-seconds", type=float, default=20.0)
    p.add_argument("--fetch-min-bytes", default="default,1,262144",
                   help="the consumer's fetch.min.bytes values compared (default: the source's)")
    p.add_argument("--broker-pid", type=int, help="the broker's process (its CPU) with --bootstrap")
    p.add_argument("--worker", choices=STAGES + ("paced",), help=argparse.SUPPRESS)
    p.add_argument("--ends", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker == "paced":
        fmb = None if args.fetch_min_bytes == "default" else int(args.fetch_min_bytes)
        print(json.dumps(run_paced(args.bootstrap, args.paced, args.paced_seconds,
                                   args.partitions, fmb, args.broker_pid)))
        return
    if args.worker:
        ends = {int(k): v for k, v in json.loads(args.ends).items()}
        print(json.dumps(run_stage(args.worker, args.bootstrap, args.topic, ends, args.rank,
                                   args.ranks)))
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stages = [s for s in args.stages.split(",") if s]
    for s in stages:
        if s not in STAGES:
            p.error(f"unknown stage {s!r} (stages: {', '.join(STAGES)})")
    pythons = [tuple(x.split("=", 1)) for x in args.python] or [("this", sys.executable)]
    readers = [r for r in args.readers.split(",") if r]
    if readers != ["auto"]:  # each interpreter under each reader: LABEL/READER
        pythons = [(f"{label}/{r}", f"{python}:{r}") for label, python in pythons
                   for r in readers]
    workdir = tempfile.mkdtemp(prefix="kafka-consume-")
    broker = None
    try:
        if args.paced:
            if args.bootstrap:
                bootstrap, broker_pid = args.bootstrap, args.broker_pid
            else:
                broker = _broker(workdir)
                bootstrap, broker_pid = broker.bootstrap, broker.pid
            paced(args, pythons, bootstrap, broker_pid)
            return
        if args.bootstrap and args.topic:
            bootstrap, topic = args.bootstrap, args.topic
        else:
            broker, bootstrap, topic = _fill(args, workdir)
        from slash.bench._kafka_topic import end_offsets

        ends = end_offsets(bootstrap, topic)
        load_before = os.getloadavg()
        runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
        for rep in range(args.repeat):
            for stage in stages:
                for label, python in pythons:
                    exe, _, reader = python.partition(":")
                    r = _worker(exe, stage, bootstrap, topic, ends, args.rank, args.ranks,
                                reader or "auto")
                    runs.setdefault(label, {}).setdefault(stage, []).append(r)
                    log.info("%-16s %-8s %9d rec/s  %6.3f CPU s/M rec", label, stage,
                             r["records_per_s"], r["cpu_s_per_m_records"])
        best = {label: {stage: max(rs, key=lambda r: r["records_per_s"])
                        for stage, rs in by.items()} for label, by in runs.items()}
        log.info("best of %d, rank %d of %d (%d records):", args.repeat, args.rank, args.ranks,
                 sum(ends[q] for q in _share(ends, args.rank, args.ranks)))
        log.info("%-8s %s", "stage", "".join(f"{label:>24}" for label, _ in pythons))
        for stage in stages:
            log.info("%-8s %s", stage, "".join(
                f"{best[label][stage]['records_per_s']:>14} rec/s {best[label][stage]['cpu_s_per_m_records']:5.2f}s/M"
                for label, _ in pythons))
        prof = profile_stream(bootstrap, topic, ends, args.rank, args.ranks, workdir) \
            if args.profile else None
        if prof is not None:
            log.info("profile of the stream stage (%s), share of the samples:", prof["tool"])
            for name, share in prof["self"][:20]:
                log.info("  %5.1f%%  %s", share, name)
        res = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "host": platform.node(), "cpus": os.cpu_count(), "load_before": load_before,
               "load_after": os.getloadavg(), "records": sum(ends.values()),
               "partitions": len(ends), "rank": args.rank, "ranks": args.ranks,
               "pythons": dict(pythons), "best": best, "runs": runs, "profile": prof,
               "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        log.info("written to %s", args.out)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
