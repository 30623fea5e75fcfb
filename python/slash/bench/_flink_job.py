"""One Flink SQL job, run by the PyFlink venv's python (not the project's):
``python _flink_job.py SPEC.json`` (private: not a benchmark).

This file imports only the standard library, PyFlink and pyarrow (which
PyFlink brings), since the PyFlink venv has no ``slash``. The spec (JSON,
written by :mod:`slash.bench.flink`):

* ``mode``: ``"streaming"`` or ``"batch"`` (Flink's runtime mode);
* ``config``: Flink options, set on the table environment before anything
  runs (parallelism, managed memory, ...);
* ``statements``: DDL run first (the source tables);
* ``query``: the SELECT whose rows are the answer;
* ``timestamp_columns``: result columns of a TIMESTAMP type, turned into
  int64 epoch milliseconds (the session time zone is UTC);
* ``output``: where the answer goes, a Parquet file written with pyarrow;
* ``runs`` (optional, default 1): how many times the query runs, one
  after the other in this JVM (the later ones warm); the answer written is
  the last run's.
* ``live`` (optional): the query is an unbounded stream (a Kafka topic
  being fed): its rows are read as they come, and each value of the
  result column ``live`` names (the window's end, a timestamp) is stamped
  with the wall clock (ms) when its last row reached this process; the
  line ``first rows`` is printed when the first row arrives, and a line on
  stdin cancels the job. The report then holds ``visible``: [end ms,
  wall ms] per window, ``emitted`` (given a result column of that name, a
  timestamp stamped inside the job: its latest per window, in ms), and
  ``rows``; no answer is written.

The timed span runs from submitting the query to its last row collected
into this process: the whole job (read, window, aggregate, emit), not the
JVM's start, but with the local mini-cluster's start, which Flink does per
job; ``net_runtime_seconds`` is Flink's own figure for the job (from its
start in the cluster to its end: without the client's submission and the
cluster's start). On stdout, one JSON line: ``query_seconds``,
``net_runtime_seconds`` and ``cpu_seconds`` (this process and the JVM over
the timed span, from /proc), each a list with one entry per run;
``startup_seconds`` (the JVM and the table environment), ``rows`` (of the
last run), ``flink_version``, ``config`` (every option as the job saw it).
"""
import calendar
import datetime
import json
import os
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
from pyflink.table import EnvironmentSettings, TableEnvironment
from pyflink.version import __version__


def _tree_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its children so far (the gateway JVM)."""
    tick = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    total = 0.0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(name), int(fields[1])
        if pid == me or ppid == me:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _epoch_ms(v):
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return calendar.timegm(v.timetuple()) * 1000 + v.microsecond // 1000
    return v


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    t0 = time.perf_counter()
    settings = (EnvironmentSettings.in_streaming_mode() if spec["mode"] == "streaming"
                else EnvironmentSettings.in_batch_mode())
    env = TableEnvironment.create(settings)
    conf = env.get_config()
    conf.set("table.local-time-zone", "UTC")
    for k, v in spec["config"].items():
        conf.set(k, str(v))
    for stmt in spec["statements"]:
        env.execute_sql(stmt)
    startup = time.perf_counter() - t0
    if spec.get("live"):
        _live(env, spec)
        return

    runs = []  # (client seconds, net runtime seconds, cpu seconds) per run of the query
    for _ in range(int(spec.get("runs", 1))):
        cpu0 = _tree_cpu_seconds()
        t0 = time.perf_counter()
        result = env.sql_query(spec["query"]).execute()
        names = list(result.get_table_schema().get_field_names())
        rows = []
        with result.collect() as it:
            for row in it:
                rows.append(tuple(row))
        seconds = time.perf_counter() - t0
        cpu = _tree_cpu_seconds() - cpu0
        client = result.get_job_client()
        net_ms = client.get_job_execution_result().result().get_net_runtime() if client else None
        runs.append((seconds, None if net_ms is None else net_ms / 1000.0, cpu))

    ts = set(spec.get("timestamp_columns", ()))
    cols = {}
    for i, n in enumerate(names):
        vals = [r[i] for r in rows]
        cols[n] = pa.array([_epoch_ms(v) for v in vals], pa.int64()) if n in ts else pa.array(vals)
    pq.write_table(pa.table(cols) if cols else pa.table({}), spec["output"])

    seen = {k: conf.get_configuration().get_string(k, "") for k in spec["config"]}
    print(json.dumps({"query_seconds": [r[0] for r in runs], "startup_seconds": startup,
                      "rows": len(rows), "net_runtime_seconds": [r[1] for r in runs],
                      "cpu_seconds": [r[2] for r in runs], "flink_version": __version__,
                      "config": seen}), flush=True)


def _live(env, spec) -> None:
    result = env.sql_query(spec["query"]).execute()
    client = result.get_job_client()
    names = list(result.get_table_schema().get_field_names())
    end_at = names.index(spec["live"])
    stamp_at = names.index("emitted") if "emitted" in names else None
    stopped = threading.Event()

    def stop_on_a_line() -> None:
        sys.stdin.readline()
        stopped.set()
        client.cancel().result()

    threading.Thread(target=stop_on_a_line, daemon=True).start()
    visible = {}  # window end -> wall ms when its last row so far arrived
    emitted = {}  # window end -> the latest ``emitted`` stamp of its rows (ms)
    rows = 0
    try:
        with result.collect() as it:
            for row in it:
                now = int(time.time() * 1000)
                if rows == 0:
                    print("first rows", flush=True)
                rows += 1
                end = _epoch_ms(row[end_at])
                visible[end] = now
                if stamp_at is not None:
                    emitted[end] = max(emitted.get(end, 0), _epoch_ms(row[stamp_at]))
    except Exception:  # the cancelled job ends the iteration with an error
        if not stopped.is_set():
            raise
    print(json.dumps({"visible": sorted(visible.items()), "emitted": sorted(emitted.items()),
                      "rows": rows,
                      "flink_version": __version__}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
