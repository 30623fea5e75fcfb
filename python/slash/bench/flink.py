"""``slash bench flink``: the Slash paper's comparison with Flink, on this
machine: YSB and NEXMark Q7 through PyFlink (a real Flink runtime, Flink's
own windowed aggregation in SQL) against Slash on the same records and cores.

Input. The stream of ``slash bench ysb`` / ``slash bench nexmark-q7`` (the
project's C generators, same seed), written once to one Parquet file under
``--dir`` (pyarrow, snappy, 1 Mi-row row groups) and reused. Every side reads
that file: Flink with its filesystem connector and Parquet format, Slash and
DuckDB with pyarrow, Spark through :mod:`slash.spark`.

Sides (each a fresh process, as a user runs it):

* ``flink``: a Flink SQL job (``TUMBLE`` window table function; Q7 a window
  join of the bids with their window's ``MAX(price)``, Flink's own NEXMark
  Q7 plan) run by the PyFlink venv's python (:mod:`slash.bench._flink_job`),
  in a local mini-cluster. Options (printed with the result, see
  :class:`FlinkOptions`): ``parallelism.default`` = ``--cores``, as many
  task slots, managed memory ``--flink-managed-memory`` (local execution
  honours its size, default there 128 MB; Flink's docs size it for batch
  operators, RocksDB and Python workers), the default hashmap state backend
  (the docs' choice when state fits in memory), ``pipeline.object-reuse``,
  no checkpoints (no side takes any). Streaming mode (``--flink-mode
  batch`` runs the batch runtime); the watermark trails event time by the
  input's whole span (``--flink-watermark-delay`` sets it), so no record is
  late whatever order Flink reads the file's splits in, and every window
  fires at the end of the input, as on the Slash sides.
* ``slash-run`` (YSB): ``slash run --executors --cores`` over the file.
* ``slash-spark`` (YSB): :func:`slash.spark.window_aggregate` in
  ``local[--cores]``, the answer collected to Arrow.
* ``slash`` (Q7, which ``slash run`` does not express): the executors of
  ``slash bench nexmark-q7`` (:func:`slash.bench._suite.run_group`), their
  records generated in memory before the clock starts.

Timing. One warm-up round of every side (its answer checked), then
``--repeat`` rounds with the sides taking turns; best and median kept. Each
round is a fresh process per side; the JVM sides (Flink, slash.spark) run
the query twice in it and the second, warm run is timed (the first, cold
one is reported as ``cold_query_median_s``); ``slash run`` and the Q7
executors run it once, cold. ``query_s`` is the query's own span (from
submitting it to the last row of the answer; the start of the JVM, the Spark
session or the executors excluded); for Flink its own net runtime of the
job, which also leaves out the local mini-cluster's start and the job's
submission (the client's span is in ``flink_client_seconds``): the figure
most favourable to Flink. ``wall_s`` and ``cpu_s`` are the whole process's
(its descendants included, reaped with a child subreaper). Throughput is
input records per second of ``query_s`` (``records_per_s``) and per CPU
second of the whole process divided by the queries it ran
(``records_per_cpu_s``, start-up included); ``ratio`` is a side's best
records/s over Flink's. Every answer is compared row for row with DuckDB's
over the same file; a difference fails the run.

    slash bench flink --workload ysb --records 20000000 --keys 100 --repeat 3

Latency (``--latency SECONDS``): a paced stream of ``--latency-rate``
records/s (default 100 k, the ``high`` load of ``slash bench latency``;
1,000 keys, 1 s tumbling windows, event time the wall clock), a count per
key per window. Flink: its datagen
source paced at that rate, the watermark equal to event time, each window's
latency the ``CURRENT_TIMESTAMP`` stamped on its last row as it leaves the
window operator, inside the job, minus the window's end (the window the end
of the input fires early is left out). Slash:
:func:`slash.bench.latency.measure` (the driver learning that every executor
fired the window, minus its end; epochs of 200 ms, Flink's watermark interval
is its default 200 ms). Percentiles over the windows; every record counted.

PyFlink lives in a venv of its own (it pins its own numpy and pyarrow):
``install_pyflink`` in ``scripts/install.sh`` makes it; this benchmark runs
it on first use (``--no-install`` refuses instead).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from slash.bench import _suite, latency, nexmark_q7, ysb
from slash.errors import InvalidArgument, NotSupported, SystemFailure

log = logging.getLogger(__name__)

NAME = "flink"
HELP = "the paper's comparison: YSB and NEXMark Q7 in PyFlink (Flink SQL) vs slash run and slash.spark"

WORKLOADS = ("ysb", "nexmark-q7")
JOB_SCRIPT = Path(__file__).with_name("_flink_job.py")
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "slash" / "pyflink-venv"
PYFLINK_VERSION = "1.20.3"  # what install_pyflink installs


# -- the PyFlink venv -----------------------------------------------------------
def pyflink_venv() -> Path:
    return Path(os.environ.get("SLASH_PYFLINK_VENV", DEFAULT_VENV))


def installer() -> Optional[Path]:
    """``scripts/install.sh`` of the checkout this package was built from (or the working directory's)."""
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        for d in (start, *start.parents):
            p = d / "scripts" / "install.sh"
            if p.is_file() and "install_pyflink()" in p.read_text():
                return p
    return None


def pyflink_python(install: bool = True) -> str:
    """The PyFlink venv's python; made with ``install_pyflink`` first if missing and ``install``.

    Raises :class:`NotSupported` saying how to install it otherwise."""
    venv = pyflink_venv()
    py = venv / "bin" / "python"
    if py.exists() and (venv / f".slash-pyflink-{PYFLINK_VERSION}").exists() and \
            any(venv.glob(".slash-jars-*")):
        return str(py)
    how = "source scripts/install.sh && install_pyflink"
    if not install:
        raise NotSupported(f"PyFlink is not installed in {venv}: run `{how}` in the slash checkout")
    script = installer()
    if script is None:
        raise NotSupported(f"PyFlink is not installed in {venv}, and no slash checkout with "
                           f"scripts/install.sh is found from here: run `{how}` in one")
    log.warning("installing PyFlink %s into %s (once; a few minutes, progress below)",
                PYFLINK_VERSION, venv)
    r = subprocess.run(["bash", "-c", f"source {_q(str(script))} && install_pyflink"],
                       stdout=subprocess.PIPE, text=True)  # its progress goes to our stderr
    if r.returncode != 0:
        raise SystemFailure(f"install_pyflink failed (exit {r.returncode}); see the log above")
    return r.stdout.strip().splitlines()[-1]


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


# -- Flink's options and one job --------------------------------------------------
@dataclass(frozen=True)
class FlinkOptions:
    """How Flink runs on one machine (see the module docstring for why)."""

    parallelism: int = 2
    managed_memory: str = "512m"
    mode: str = "streaming"

    def __post_init__(self) -> None:
        if isinstance(self.parallelism, bool) or not isinstance(self.parallelism, int) \
                or self.parallelism < 1:
            raise InvalidArgument(f"Flink parallelism must be an int >= 1, got {self.parallelism!r}")
        if self.mode not in ("streaming", "batch"):
            raise InvalidArgument(f"--flink-mode must be streaming or batch, got {self.mode!r}")
        if not re.fullmatch(r"\d+(k|m|g|kb|mb|gb)", self.managed_memory.lower()):
            raise InvalidArgument(f"--flink-managed-memory must be a size such as 512m, "
                                  f"got {self.managed_memory!r}")

    def config(self) -> Dict[str, str]:
        return {"parallelism.default": str(self.parallelism),
                "taskmanager.numberOfTaskSlots": str(self.parallelism),
                "taskmanager.memory.managed.size": self.managed_memory,
                "state.backend.type": "hashmap",
                "pipeline.object-reuse": "true"}


@dataclass(frozen=True)
class FlinkJob:
    """A Flink SQL job: source DDL, the query, result columns of a TIMESTAMP type."""

    statements: Tuple[str, ...]
    query: str
    timestamp_columns: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Measured:
    """One process: its wall and CPU seconds (descendants included) and what it printed."""

    wall_s: float
    cpu_s: float
    stdout: str
    stderr: str


#: runs argv[1:] as a child subreaper (orphaned descendants, such as a JVM
#: its launcher left, are reparented here and reaped), so RUSAGE_CHILDREN
#: holds the CPU of the whole tree; prints wall and CPU seconds as JSON
_MEASURE = r"""
import ctypes, json, os, resource, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
t = time.perf_counter()
p = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1] + ".out", "w"),
                   stderr=open(sys.argv[1] + ".err", "w"))
wall = time.perf_counter() - t
deadline = time.monotonic() + 30
while True:
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime}))
"""


def measure(cmd: Sequence[str], timeout: float = 3600.0, env: Optional[Dict[str, str]] = None) -> Measured:
    """Runs ``cmd``; raises :class:`SystemFailure` with its stderr's tail if it fails."""
    with tempfile.TemporaryDirectory(prefix="slash-bench-flink-") as d:
        base = os.path.join(d, "proc")
        r = subprocess.run([sys.executable, "-c", _MEASURE, base, *cmd], capture_output=True,
                           text=True, timeout=timeout, env=env)
        out = Path(base + ".out").read_text() if os.path.exists(base + ".out") else ""
        err = Path(base + ".err").read_text() if os.path.exists(base + ".err") else ""
        if r.returncode != 0:
            raise SystemFailure(f"measuring {cmd[0]} failed: {r.stderr[-2000:]}")
        m = json.loads(r.stdout.strip().splitlines()[-1])
        if m["rc"] != 0:
            what = "slash.spark" if "-c" in cmd[:2] else " ".join(os.path.basename(c) for c in cmd[:3])
            raise SystemFailure(f"{what} exited {m['rc']}; its stderr ended:\n{err[-3000:]}")
        return Measured(m["wall_s"], m["cpu_s"], out, err)


def _last_json(text: str, what: str) -> Dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemFailure(f"{what} printed no result line; its output ended:\n{text[-2000:]}")


def job_spec(job: FlinkJob, options: FlinkOptions, output: str, runs: int = 1,
             config: Optional[Dict[str, str]] = None, live: Optional[str] = None) -> Dict[str, Any]:
    """The spec :mod:`slash.bench._flink_job` runs (see its doc; ``live``:
    the window-end column of an unbounded query read as it comes)."""
    spec = {"mode": options.mode, "config": {**options.config(), **(config or {})},
            "statements": list(job.statements), "query": job.query,
            "timestamp_columns": list(job.timestamp_columns), "output": output, "runs": runs}
    if live:
        spec["live"] = live
    return spec


def run_flink_job(job: FlinkJob, options: FlinkOptions, output: str, python: str,
                  timeout: float = 3600.0, runs: int = 1,
                  config: Optional[Dict[str, str]] = None) -> Tuple[Measured, Dict[str, Any]]:
    """Runs ``job`` in the PyFlink venv's ``python``; the answer goes to ``output`` (Parquet).

    The query runs ``runs`` times in the one JVM; ``config`` adds Flink
    options to ``options``' (a connector's ``pipeline.jars``, ...). Returns the process's
    measurement and the job's report (``query_seconds``,
    ``net_runtime_seconds``, ``cpu_seconds``: one per run; ``rows``,
    ``config``, ``flink_version``)."""
    fd, path = tempfile.mkstemp(prefix="flink-job-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(job_spec(job, options, output, runs, config), f)
        m = measure([python, str(JOB_SCRIPT), path], timeout)
        return m, _last_json(m.stdout, "the Flink job")
    finally:
        os.unlink(path)


def interval_literal(ms: int) -> str:
    """Flink SQL's interval of at least ``ms`` milliseconds: whole seconds as
    HOUR TO SECOND below 100 hours, whole days above (the literal's leading
    field holds 2 digits)."""
    secs = max(0, math.ceil(ms / 1000))
    if secs < 100 * 3600:
        return f"INTERVAL '{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}' HOUR TO SECOND"
    days = math.ceil(ms / 86_400_000)
    if days > 99:
        raise InvalidArgument(f"an interval of {ms} ms is more than 99 days: Flink's interval "
                              "literal holds 2 digits")
    return f"INTERVAL '{days}' DAY"


def parquet_table_ddl(name: str, path: str, columns: Sequence[Tuple[str, str]], time_col: str,
                      watermark_delay_ms: int) -> str:
    """A filesystem/Parquet source table with an event-time attribute ``rt``
    (``time_col`` in epoch ms) whose watermark trails it by ``watermark_delay_ms``."""
    cols = ",\n  ".join(f"`{c}` {t}" for c, t in columns)
    return (f"CREATE TABLE {name} (\n  {cols},\n  rt AS TO_TIMESTAMP_LTZ(`{time_col}`, 3),\n"
            f"  WATERMARK FOR rt AS rt - {interval_literal(watermark_delay_ms)}\n) WITH ("
            f"'connector' = 'filesystem', 'path' = 'file://{os.path.abspath(path)}', "
            f"'format' = 'parquet')")


# -- the workloads ------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    name: str
    plan: _suite.Plan
    flink: Callable[[str, int], FlinkJob]  # (parquet path, watermark delay ms) -> job
    time_col: str


def _ysb_flink(path: str, delay_ms: int) -> FlinkJob:
    ddl = parquet_table_ddl("events", path, [("key", "BIGINT"), ("event_time", "BIGINT"),
                                             ("event_type", "STRING")], "event_time", delay_ms)
    q = (f"SELECT window_start, window_end, `key`, COUNT(*) AS `count` FROM TABLE(TUMBLE("
         f"TABLE events, DESCRIPTOR(rt), INTERVAL '{ysb.WINDOW_MS // 1000}' SECOND)) "
         f"WHERE event_type = 'view' GROUP BY window_start, window_end, `key`")
    return FlinkJob((ddl,), q, ("window_start", "window_end"))


def _q7_flink(path: str, delay_ms: int) -> FlinkJob:
    ddl = parquet_table_ddl("bids", path, [("auction", "BIGINT"), ("bidder", "BIGINT"),
                                           ("price", "BIGINT"), ("date_time", "BIGINT")],
                            "date_time", delay_ms)
    w = f"INTERVAL '{nexmark_q7.WINDOW_MS // 1000}' SECOND"
    q = (f"SELECT B.window_start, B.window_end, B.auction, B.bidder, B.price, B.date_time FROM "
         f"(SELECT * FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(rt), {w}))) B JOIN "
         f"(SELECT window_start, window_end, MAX(price) AS top FROM TABLE(TUMBLE(TABLE bids, "
         f"DESCRIPTOR(rt), {w})) GROUP BY window_start, window_end) M "
         f"ON B.window_start = M.window_start AND B.window_end = M.window_end AND B.price = M.top")
    return FlinkJob((ddl,), q, ("window_start", "window_end"))


def workload(name: str, records: int, keys: int = 100, seed: int = 1) -> Workload:
    if name == "ysb":
        return Workload(name, ysb.plan(records, keys=keys, seed=seed), _ysb_flink, "event_time")
    if name == "nexmark-q7":
        return Workload(name, nexmark_q7.plan(records, seed=seed), _q7_flink, "date_time")
    raise InvalidArgument(f"--workload must be one of {list(WORKLOADS)}, got {name!r}")


def write_input(root: str, wl: Workload) -> Tuple[str, int]:
    """The workload's stream as one Parquet file under ``root`` (written once); (path, span ms)."""
    s = wl.plan.inputs[0][1]
    tag = f"{wl.name}-{s.records}-{s.keys}-{s.seed}-{s.rate}"
    path = os.path.join(root, f"{tag}.parquet")
    if not os.path.exists(path):
        os.makedirs(root, exist_ok=True)
        log.info("flink: writing %s", path)
        pq.write_table(s.table(), path + ".tmp", row_group_size=1 << 20)
        os.replace(path + ".tmp", path)
    md = pq.read_metadata(path)
    ci = md.schema.names.index(wl.time_col)
    lo = min(md.row_group(g).column(ci).statistics.min for g in range(md.num_row_groups))
    hi = max(md.row_group(g).column(ci).statistics.max for g in range(md.num_row_groups))
    return path, int(hi - lo) + 1


def reference(wl: Workload, path: str) -> pa.Table:
    """DuckDB's answer over the file (the plan's SQL, the stream's table name bound to it)."""
    import duckdb  # optional dependency (bench)

    con = duckdb.connect()
    try:
        con.execute(f"CREATE VIEW {wl.plan.inputs[0][0]} AS SELECT * FROM read_parquet('{path}')")
        return con.sql(wl.plan.sql).to_arrow_table()
    finally:
        con.close()


def check(got: pa.Table, want: pa.Table) -> _suite.Verdict:
    """Row-for-row comparison (as multisets), with the result columns cast to the reference's."""
    if any(c not in got.column_names for c in want.column_names):
        return _suite.verify(got, want)
    cols = [got.column(c).cast(want.schema.field(c).type)
            if pa.types.is_integer(want.schema.field(c).type) else got.column(c)
            for c in want.column_names]
    return _suite.verify(pa.table(cols, names=want.column_names), want)


# -- the Slash sides -----------------------------------------------------------------
_SLASH_SPARK = r"""
import json, sys, time
import pyarrow as pa
import pyarrow.parquet as pq
import slash.spark as ss
path, cores, out, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
spark = ss.session(f"local[{cores}]", app_name="slash-bench-flink",
                   conf={"spark.sql.shuffle.partitions": str(cores), "spark.driver.memory": "2g"})
seconds = []
for _ in range(runs):
    t = time.perf_counter()
    df = ss.window_aggregate(spark, path, time="event_time", window="tumbling:%dms", key="key",
                             aggs=["count"], filter="event_type == view", executors=cores)
    ans = df.toArrow() if hasattr(df, "toArrow") else pa.Table.from_pandas(df.toPandas())
    seconds.append(time.perf_counter() - t)
pq.write_table(ans, out)
print(json.dumps({"query_seconds": seconds, "rows": ans.num_rows}), flush=True)
spark.stop()
""" % ysb.WINDOW_MS

_RAN = re.compile(r"query ran on \d+ executors?(?: in this process)? in ([0-9.]+) s")

#: how often a JVM side (Flink, slash.spark) runs the query in one process: the
#: first run pays the JVM's warm-up (JIT, class loading, Python workers), the
#: last one is timed warm
JVM_RUNS = 2


@dataclass(frozen=True)
class Round:
    """One process of a side: the timed (warm) query's seconds, the first
    (cold) one's, and the process's wall and CPU seconds over ``queries`` runs."""

    query_s: float
    cold_s: float
    wall_s: float
    cpu_s: float
    queries: int = 1


@dataclass
class Side:
    """One side's rounds: the answer checked at the warm-up round, then one Round per round."""

    name: str
    run: Callable[[str], Round]  # the answer's path -> the round
    rounds: List[Round]
    verdict: Optional[_suite.Verdict] = None


def _slash_run_side(path: str, cores: int, slash_cmd: Sequence[str]) -> Callable[[str], Round]:
    def run(out: str) -> Round:
        m = measure([*slash_cmd, "-v", "run", "--input", path, "--time", "event_time", "--window",
                     f"tumbling:{ysb.WINDOW_MS}ms", "--key", "key", "--agg", "count", "--filter",
                     "event_type == view", "--executors", str(cores), "--output", out])
        found = _RAN.findall(m.stderr)
        if not found:
            raise SystemFailure(f"slash run logged no query time; its log ended:\n{m.stderr[-2000:]}")
        return Round(float(found[-1]), float(found[-1]), m.wall_s, m.cpu_s)
    return run


def _slash_spark_side(path: str, cores: int) -> Callable[[str], Round]:
    def run(out: str) -> Round:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}  # Spark's workers: this Python
        m = measure([sys.executable, "-c", _SLASH_SPARK, path, str(cores), out, str(JVM_RUNS)],
                    env=env)
        q = _last_json(m.stdout, "slash.spark")["query_seconds"]
        return Round(q[-1], q[0], m.wall_s, m.cpu_s, len(q))
    return run


def _slash_group_side(wl: Workload, cores: int) -> Callable[[str], Round]:
    def run(out: str) -> Round:
        c0, t0 = _children_cpu(), time.perf_counter()
        r = _suite.run_group(wl.plan, cores, "slash")
        wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
        pq.write_table(r["answer"], out)
        return Round(r["seconds"], r["seconds"], wall, cpu)
    return run


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# -- window latency of a paced stream ---------------------------------------------
def paced_flink_job(rate: int, keys: int, seconds: int, window_ms: int) -> FlinkJob:
    """Flink's side of the latency run: its datagen source paced at ``rate``
    records/s in total for ``seconds``, random keys in [0, keys), event time
    the wall clock at generation (``NOW()``, a watermark equal to it: in
    order per subtask), a count per key per tumbling window."""
    if window_ms % 1000:
        raise InvalidArgument(f"the latency window must be whole seconds, got {window_ms} ms")
    ddl = (f"CREATE TABLE paced (k BIGINT, rt AS NOW(), WATERMARK FOR rt AS rt) WITH ("
           f"'connector' = 'datagen', 'rows-per-second' = '{rate}', "
           f"'number-of-rows' = '{rate * seconds}', 'fields.k.kind' = 'random', "
           f"'fields.k.min' = '0', 'fields.k.max' = '{keys - 1}')")
    # each result row is stamped as it leaves the window operator, inside the
    # job: PyFlink's client takes milliseconds per row over py4j, which would
    # measure the client instead of Flink
    q = (f"SELECT window_start, window_end, k, `count`, CAST(CURRENT_TIMESTAMP AS TIMESTAMP(3)) "
         f"AS emitted FROM ("
         f"SELECT window_start, window_end, k, COUNT(*) AS `count` FROM TABLE(TUMBLE("
         f"TABLE paced, DESCRIPTOR(rt), INTERVAL '{window_ms // 1000}' SECOND)) "
         f"GROUP BY window_start, window_end, k)")
    return FlinkJob((ddl,), q, ("window_start", "window_end", "emitted"))


def window_latencies(t: pa.Table) -> List[float]:
    """Per window, its last row's ``emitted`` stamp minus the window's end
    (ms), in window order, without the last window (the end of the input
    fires it early, before its end)."""
    ends = t.column("window_end").to_numpy()
    arr = t.column("emitted").to_numpy()
    uniq = sorted(set(ends.tolist()))[:-1]
    return [float(arr[ends == e].max() - e) for e in uniq]


def _percentiles(lat: Sequence[float]) -> Dict[str, float]:
    if not len(lat):
        return {}
    p50, p95, p99 = np.percentile(np.asarray(lat, dtype=np.float64), [50, 95, 99])
    return {"windows": len(lat), "p50_ms": round(float(p50), 1), "p95_ms": round(float(p95), 1),
            "p99_ms": round(float(p99), 1), "max_ms": round(float(max(lat)), 1)}


def run_latency(opts: FlinkOptions, seconds: int, python: Optional[str],
                sides: Sequence[str], rate: int = 100_000) -> Dict[str, Any]:
    """Flink and Slash on a paced stream of ``rate`` records/s with the keys
    of ``slash bench latency``'s ``high`` load (1,000 keys, 1 s windows), one
    after the other."""
    keys = latency.LOADS["high"][0]
    window_ms = 1000
    res: Dict[str, Any] = {"workload": "latency", "records_per_s": rate, "keys": keys,
                           "window_ms": window_ms, "seconds": seconds, "cores": opts.parallelism,
                           "load_before": [round(x, 2) for x in os.getloadavg()]}
    if "flink" in sides:
        assert python is not None
        with tempfile.TemporaryDirectory(prefix="slash-bench-flink-lat-") as d:
            out = os.path.join(d, "flink.parquet")
            job = paced_flink_job(rate, keys, seconds, window_ms)
            run_flink_job(job, opts, out, python)
            t = pq.read_table(out)
        counted = int(pc.sum(t.column("count")).as_py() or 0)
        res["flink"] = {**_percentiles(window_latencies(t)), "records_counted": counted,
                        "records_generated": rate * seconds}
        if counted != rate * seconds:
            raise SystemFailure(f"flink latency run: {counted} records counted, "
                                f"{rate * seconds} generated")
    if any(s != "flink" for s in sides):
        r = latency.measure("shm", "high", float(seconds), epoch_ms=200, tick_ms=10,
                            window_ms=window_ms, executors=opts.parallelism, rate=rate)
        res["slash"] = {k: r[k] for k in ("windows", "p50_ms", "p95_ms", "p99_ms", "max_ms",
                                         "records_in", "epoch_ms") if k in r}
    res["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return res


# -- one invocation ------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", default="ysb,nexmark-q7",
                   help=f"comma-separated of {list(WORKLOADS)} (default both)")
    p.add_argument("--records", type=int, default=20_000_000,
                   help="YSB records / NEXMark events (default 20 M)")
    p.add_argument("--keys", type=int, default=100,
                   help="YSB campaigns (default 100, the original benchmark's)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                   help="Flink parallelism, slash executors, Spark local[N] (default: all cores)")
    p.add_argument("--repeat", type=int, default=3, help="timed rounds after a warm-up (default 3)")
    p.add_argument("--dir", default="/tmp/slash_bench_flink", help="where the input is kept")
    p.add_argument("--sides", default="flink,slash-run,slash-spark",
                   help="comma-separated of flink, slash-run, slash-spark (YSB; Q7 runs flink "
                        "and the slash executors)")
    p.add_argument("--flink-mode", default="streaming", help="streaming (default) or batch")
    p.add_argument("--flink-managed-memory", default="512m", help="Flink managed memory (default 512m)")
    p.add_argument("--flink-watermark-delay", type=int, default=None, metavar="SECONDS",
                   help="how far Flink's watermark trails event time (default: the input's whole "
                        "span, so no record is late whatever order Flink reads the file's splits "
                        "in; shorter keeps less state, and a record it makes late fails the check)")
    p.add_argument("--latency", type=int, default=0, metavar="SECONDS",
                   help="also a paced stream of SECONDS (--latency-rate, 1,000 keys, 1 s "
                        "windows) through Flink and slash: per-window latency (default: off)")
    p.add_argument("--latency-rate", type=int, default=100_000,
                   help="records/s of the paced stream in total (default 100 k)")
    p.add_argument("--no-install", action="store_true",
                   help="fail instead of installing PyFlink when it is missing")
    p.add_argument("--slash", default=None, metavar="CMD",
                   help="the slash command to time (default: this Python's -m slash)")


SIDES = ("flink", "slash-run", "slash-spark")


def _names(value: str, allowed: Sequence[str], option: str) -> List[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names or any(n not in allowed for n in names):
        raise InvalidArgument(f"{option} takes a comma-separated list of {list(allowed)}, "
                              f"got {value!r}")
    return names


def parse(args: argparse.Namespace) -> Tuple[List[str], List[str], FlinkOptions]:
    """(workloads, sides, Flink options) from the arguments; InvalidArgument on a bad one."""
    wls = _names(args.workload, WORKLOADS, "--workload")
    sides = _names(args.sides, SIDES, "--sides")
    d = args.flink_watermark_delay
    if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 0):
        raise InvalidArgument(f"--flink-watermark-delay must be seconds >= 0, got {d!r}")
    if isinstance(args.latency, bool) or not isinstance(args.latency, int) or args.latency < 0:
        raise InvalidArgument(f"--latency must be a number of seconds >= 0, got {args.latency!r}")
    for name in ("records", "keys", "cores", "repeat", "latency_rate"):
        v = getattr(args, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidArgument(f"--{name.replace('_', '-')} must be an int >= 1, got {v!r}")
    return wls, sides, FlinkOptions(args.cores, args.flink_managed_memory, args.flink_mode)


def run_workload(wl: Workload, sides: List[str], opts: FlinkOptions, root: str, repeat: int,
                 python: Optional[str], slash_cmd: Sequence[str],
                 watermark_delay_ms: Optional[int] = None) -> Dict[str, Any]:
    path, span = write_input(root, wl)
    records = wl.plan.records
    want = reference(wl, path)
    cores = opts.parallelism
    flink_info: Dict[str, Any] = {}
    todo: List[Side] = []
    if "flink" in sides:
        assert python is not None
        delay = span if watermark_delay_ms is None else watermark_delay_ms
        job = wl.flink(path, delay)

        def flink_run(out: str) -> Round:
            m, rep = run_flink_job(job, opts, out, python, runs=JVM_RUNS)
            flink_info.update(flink_version=rep["flink_version"], config=rep["config"])
            flink_info.setdefault("client_seconds", []).append(round(rep["query_seconds"][-1], 3))
            q = [n if n is not None else c
                 for n, c in zip(rep["net_runtime_seconds"], rep["query_seconds"])]
            return Round(q[-1], q[0], m.wall_s, m.cpu_s, len(q))
        todo.append(Side("flink", flink_run, []))
    if wl.name == "ysb":
        if "slash-run" in sides:
            todo.append(Side("slash-run", _slash_run_side(path, cores, slash_cmd), []))
        if "slash-spark" in sides:
            todo.append(Side("slash-spark", _slash_spark_side(path, cores), []))
    elif "slash-run" in sides or "slash-spark" in sides:
        todo.append(Side("slash", _slash_group_side(wl, cores), []))
    out_dir = tempfile.mkdtemp(prefix="slash-bench-flink-out-")
    load = [round(x, 2) for x in os.getloadavg()]
    try:
        for rnd in range(repeat + 1):  # round 0 warms up and checks the answers
            for s in todo:
                out = os.path.join(out_dir, f"{s.name}.parquet")
                r = s.run(out)
                log.info("%s %s round %d: query %.3f s (cold %.3f), wall %.3f s, cpu %.3f s",
                         wl.name, s.name, rnd, r.query_s, r.cold_s, r.wall_s, r.cpu_s)
                if rnd == 0:
                    s.verdict = check(pq.read_table(out), want)
                    continue
                s.rounds.append(r)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    runs = [_summary_run(s, records, cores) for s in todo]
    flink_best = next((r["records_per_s"] for r in runs if r["side"] == "flink"), None)
    for r in runs:
        if flink_best:
            r["ratio"] = round(r["records_per_s"] / flink_best, 2)
    return {"workload": wl.name, "records": records, "file": path, "event_time_span_ms": span,
            "flink_watermark_delay_ms": span if watermark_delay_ms is None else watermark_delay_ms,
            "result_rows": want.num_rows, "cores": cores, "runs": runs,
            "load_before": load, "load_after": [round(x, 2) for x in os.getloadavg()],
            "flink_options": {"mode": opts.mode, **opts.config()},
            "flink_version": flink_info.get("flink_version"),
            "flink_options_seen": flink_info.get("config"),
            "flink_client_seconds": flink_info.get("client_seconds", [])[1:],
            "all_verified": all(s.verdict is not None and s.verdict.ok for s in todo)}


def _summary_run(s: Side, records: int, cores: int) -> Dict[str, Any]:
    assert s.verdict is not None
    q = [r.query_s for r in s.rounds]
    cpu_per_query = statistics.median(r.cpu_s / r.queries for r in s.rounds)
    return {"side": s.name, "query_best_s": round(min(q), 6),
            "query_median_s": round(statistics.median(q), 6),
            "cold_query_median_s": round(statistics.median(r.cold_s for r in s.rounds), 6),
            "queries_per_process": s.rounds[0].queries,
            "wall_best_s": round(min(r.wall_s for r in s.rounds), 6),
            "wall_median_s": round(statistics.median(r.wall_s for r in s.rounds), 6),
            "cpu_median_s": round(statistics.median(r.cpu_s for r in s.rounds), 6),
            "records_per_s": round(records / min(q)),
            "records_per_s_median": round(records / statistics.median(q)),
            "records_per_cpu_s": round(records / cpu_per_query),
            "verified": s.verdict.ok, "check": s.verdict.message}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    wls, sides, opts = parse(args)
    python = pyflink_python(install=not args.no_install) if "flink" in sides else None
    slash_cmd = args.slash.split() if args.slash else [sys.executable, "-m", "slash"]
    results = [run_workload(workload(w, args.records, args.keys, args.seed), sides, opts,
                            args.dir, args.repeat, python, slash_cmd,
                            None if args.flink_watermark_delay is None
                            else args.flink_watermark_delay * 1000) for w in wls]
    if args.latency:
        results.append(run_latency(opts, args.latency, python, sides, args.latency_rate))
    out = {"runs": results, "parameters": _suite.parameters(args),
           "all_verified": all(r.get("all_verified", True) for r in results)}
    if not out["all_verified"]:
        bad = [f"{r['workload']} {s['side']}: {s['check']}" for r in results
               for s in r.get("runs", ()) if not s["verified"]]
        raise SystemFailure("flink: answer differs from DuckDB's: " + "; ".join(bad))
    return out


def summary(r: Dict[str, Any]) -> str:
    if r["workload"] == "latency":
        def side(name: str) -> str:
            x = r.get(name)
            return (f"{name} p50 {x.get('p50_ms')} ms, p99 {x.get('p99_ms')} ms over "
                    f"{x.get('windows')} windows") if x else f"{name} not run"
        return (f"latency: {r['records_per_s'] / 1e3:.0f} k rec/s, {r['keys']} keys, "
                f"{r['window_ms']} ms windows, {r['cores']} cores, load {r['load_before']} -> "
                f"{r['load_after']}: {side('flink')}; {side('slash')}")
    lines = [f"{r['workload']}: {r['records'] / 1e6:.1f} M records, {r['cores']} cores, "
             f"load {r['load_before']} -> {r['load_after']}, Flink {r['flink_version']} "
             f"{r['flink_options']}"]
    for s in r["runs"]:
        ratio = f" ({s['ratio']:.2f}x Flink)" if "ratio" in s else ""
        lines.append(
            f"  {s['side']:>11}: query best {s['query_best_s']:.3f} s (median "
            f"{s['query_median_s']:.3f}, cold {s['cold_query_median_s']:.3f}) = "
            f"{s['records_per_s'] / 1e6:.2f} M rec/s{ratio}; process wall best "
            f"{s['wall_best_s']:.2f} s, CPU {s['cpu_median_s']:.2f} s for "
            f"{s['queries_per_process']} quer{'y' if s['queries_per_process'] == 1 else 'ies'} = "
            f"{s['records_per_cpu_s'] / 1e6:.2f} M rec/CPU-s; verified={s['verified']}")
    return "\n".join(lines)
