"""A windowed aggregation as one Spark barrier stage, without a shuffle.

N barrier tasks are the N Slash executors. Each opens a listener, learns the
others' addresses with ``BarrierTaskContext.allGather`` (rank = partition id),
joins the group with a token made for this query on the driver, runs
:func:`slash.runner.execute_split`, and writes the windows it leads as one
Parquet file with pyarrow. The driver receives one summary row per task and
returns ``spark.read.parquet`` of those files: an ordinary DataFrame (show,
limit, join, write all work; a barrier RDD would refuse ``take``), computed
once, so every action sees the same rows, and results never pass through the
driver.

Two sources:

* the fast path, Parquet/Arrow paths (or a :class:`slash.sources.FileSource`
  / ``GeneratorSource``): a barrier RDD of N empty partitions drives the
  stage and each task reads its own contiguous split with pyarrow, so input
  rows never pass through the JVM;
* the general path, any Spark DataFrame: ``df.mapInArrow(..., barrier=True)``
  hands each partition's rows from the JVM to its task; N is the number of
  partitions (``executors=`` repartitions round-robin first). Spark's JVM to
  Python transfer caps this path (docs/spark.md gives measured rates), and the
  rows of a partition must arrive in time order up to ``lateness``.

>>> # df = window_aggregate(spark, "events/", time="t", window="tumbling:10s",
>>> #                       key="user", aggs=["count", "sum:price"])
>>> # df.orderBy("window_start", "user").show()
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import pyarrow as pa

from slash.limits import MAX_EXECUTORS
from slash.errors import InvalidArgument
from slash.executor import GroupConfig
from slash.query import Query
from slash.runner import execute_split
from slash.sources import FileSource, GeneratorSource
from slash.spark import _env
from slash.spark._tasks import (PartitionSource, Rendezvous, barrier_stage, driver_host, join_group,
                                open_fs, rank_errors, raise_task_failure, report_error,
                                spark_input_schema, write_table)

log = logging.getLogger(__name__)

#: one row per barrier task, collected on the driver
SUMMARY_SCHEMA = ("rank int, rows long, records_in long, late_records long, epochs long, "
                  "seconds double, path string, metrics string")

_SUMMARY_ARROW = pa.schema([("rank", pa.int32()), ("rows", pa.int64()), ("records_in", pa.int64()),
                            ("late_records", pa.int64()), ("epochs", pa.int64()),
                            ("seconds", pa.float64()), ("path", pa.string()),
                            ("metrics", pa.string())])


@dataclass(frozen=True)
class AggregateResult:
    """What :func:`run_aggregate` returns: the result DataFrame, where its files
    are, and each executor's metrics (rank order)."""

    df: Any
    path: str
    executors: int
    seconds: float
    metrics: List[Dict[str, Any]] = field(repr=False)
    fast_path: bool = True
    stage: Any = field(default=None, repr=False)  # the barrier stage (already run): RDD or DataFrame

    @property
    def plan(self) -> str:
        """The barrier stage's plan: the RDD lineage on the fast path (no
        ShuffledRDD), the executed plan on the general path (MapInArrow, no
        Exchange)."""
        if self.stage is None:
            return ""
        if hasattr(self.stage, "toDebugString"):
            text = self.stage.toDebugString()
            return text.decode() if isinstance(text, bytes) else str(text)
        return self.stage._jdf.queryExecution().executedPlan().toString()

    @property
    def records_in(self) -> int:
        return sum(m["records_in"] for m in self.metrics)

    @property
    def late_records(self) -> int:
        return sum(m["late_records"] for m in self.metrics)

    @property
    def rows(self) -> int:
        return sum(m["rows"] for m in self.metrics)


@dataclass(frozen=True)
class _Plan:
    """Everything a task needs; pickled into each task by Spark."""

    query: Query
    schema: pa.Schema
    group: GroupConfig
    token: str
    out_dir: str
    source: Any = None  # FileSource / GeneratorSource: fast path; None: the task's partition
    time_columns: tuple = ()
    rendezvous: Optional[Tuple[str, int]] = None  # the driver's; None: allGather


def _summary(rank: int, out: pa.Table, m: Dict[str, Any], seconds: float, path: str) -> Dict[str, Any]:
    plain = {k: v for k, v in m.items() if isinstance(v, (int, float, str, type(None)))}
    return {"rank": rank, "rows": out.num_rows, "records_in": int(m.get("records_in", 0)),
            "late_records": int(m.get("late_records", 0)), "epochs": int(m.get("epochs", 0)),
            "seconds": seconds, "path": path, "metrics": json.dumps(plain)}


def _as_arrow(task):
    """A task yielding summary dicts as a mapInArrow function (general path)."""
    def arrow_task(batches):
        for row in task(batches):
            yield pa.RecordBatch.from_pylist([row], schema=_SUMMARY_ARROW)
    return arrow_task


def _make_task(plan: _Plan):
    def task(batches):
        t0, started_at = time.perf_counter(), time.time()
        from pyspark import BarrierTaskContext
        rank = BarrierTaskContext.get().partitionId()
        with rank_errors(rank):
            if plan.source is not None:
                for _ in batches:  # the partition's id: only the trigger
                    pass
                source = plan.source
            else:
                source = PartitionSource(plan.schema, batches, plan.time_columns)
            rank, addresses, lst, conn, _ = join_group(plan.group.transport, plan.token, plan.rendezvous,
                                                    plan.group.timeout)
            try:
                t1 = time.perf_counter()
                m: Dict[str, Any] = {}
                try:
                    res = execute_split(plan.query, source, rank, addresses, lst, plan.group,
                                        plan.token, metrics=m)
                finally:
                    lst.close()
                t2 = time.perf_counter()
                out = plan.query.finalize(res, plan.schema, sort=False)
                path = write_table(out, plan.out_dir, f"part-{rank:05d}.parquet")
                attempt = announce_written(conn, path)
                m.update(join_seconds=t1 - t0, run_seconds=t2 - t1,
                         write_seconds=time.perf_counter() - t2, attempt=attempt,
                         started_at=started_at, ended_at=time.time())
            except BaseException as e:
                report_error(conn, e)
                raise
            finally:
                if conn is not None:
                    conn.close()
            yield _summary(rank, out, m, time.perf_counter() - t0, path)
    return task


def group_for(spark: Any, query: Query, executors: Optional[int], transport: str,
              group: Optional[GroupConfig], slots_wait: float) -> Tuple[int, GroupConfig]:
    """The number of executors (default: every task slot) and their GroupConfig,
    checked, with the slots there to run them (else NotEnoughSlots)."""
    n = executors if executors is not None else _env.default_executors(spark)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_EXECUTORS:
        raise InvalidArgument(f"executors must be an int in 1..{MAX_EXECUTORS}, got {executors!r}")
    group = GroupConfig.for_call(group, transport=transport, lateness=query.lateness)
    group.partitions_for(n)
    _env.check_slots(spark, n, slots_wait)
    return n, group


def _as_list(v: Union[None, str, Sequence[str]]) -> List[str]:
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


def make_query(time: str, window: str, key: Union[str, Sequence[str]], aggs: Sequence[str],
               filter: Union[None, str, Sequence[str]], lateness: Union[None, int, str]) -> Query:
    return Query(time=time, window=window, key=key, aggregates=list(aggs) if not isinstance(aggs, str)
                 else aggs, filters=_as_list(filter), lateness=0 if lateness is None else lateness)


def _is_dataframe(obj: Any) -> bool:
    try:
        from pyspark.sql import DataFrame
    except ImportError:
        return False
    return isinstance(obj, DataFrame)


def run_aggregate(spark: Any, source: Any, *, time: str, window: str,
                  key: Union[str, Sequence[str]], aggs: Sequence[str] = ("count",),
                  filter: Union[None, str, Sequence[str]] = None,
                  lateness: Union[None, int, str] = None, executors: Optional[int] = None,
                  transport: str = "shm", group: Optional[GroupConfig] = None,
                  result_dir: Optional[str] = None, slots_wait: float = 30.0,
                  rendezvous: str = "driver") -> AggregateResult:
    """Runs the aggregation now as one barrier stage; see :func:`window_aggregate`.

    ``rendezvous``: how the tasks exchange listener addresses: ``"driver"``
    (an authenticated socket on the driver, milliseconds) or ``"allgather"``
    (``BarrierTaskContext.allGather``, which costs about a second).

    Returns the DataFrame with the executors' metrics. Raises the slash.errors
    classes: SchemaError / UnknownName / InvalidArgument before anything runs,
    NotEnoughSlots when the cluster has fewer task slots than executors,
    TaskFailed naming the rank when an executor fails.
    """
    _env.require_pyspark()
    import pyspark.sql.functions  # noqa: F401  (fail here, not in a task)

    query = make_query(time, window, key, aggs, filter, lateness)
    fast = not _is_dataframe(source)
    time_columns: tuple = ()
    if fast:
        src = source if isinstance(source, (FileSource, GeneratorSource)) else None
        if src is None:
            if not (isinstance(source, (str, os.PathLike)) or
                    (isinstance(source, (list, tuple)) and source and
                     all(isinstance(p, (str, os.PathLike)) for p in source))):
                raise InvalidArgument("source must be Parquet/Arrow path(s), a FileSource, a "
                                      f"GeneratorSource or a Spark DataFrame, got {type(source).__name__}")
            src = FileSource(source)  # UnknownName for a missing path, SchemaError for a bad file
        schema = src.schema
    else:
        schema, time_columns = spark_input_schema(source)
    query.check(schema)

    if executors is None and not fast:
        executors = min(source.rdd.getNumPartitions(), _env.default_executors(spark))
    n, group = group_for(spark, query, executors, transport, group, slots_wait)

    token = secrets.token_hex(16)
    out_dir = f"{_env.result_root(spark, result_dir).rstrip('/')}/q-{token[:12]}"
    if rendezvous not in ("driver", "allgather"):
        raise InvalidArgument(f"rendezvous must be 'driver' or 'allgather', got {rendezvous!r}")
    early = EarlyFrame(spark, out_dir, n)
    rdv = Rendezvous(driver_host(spark), n, token, on_message=early.on_message) \
        if rendezvous == "driver" else None
    plan = _Plan(query, schema, group, token, out_dir, src if fast else None, time_columns,
                 rdv.address if rdv else None)
    task = _make_task(plan)
    if fast:
        stage = barrier_stage(spark, n, task)
    else:
        df = source.select(*query.input_columns)
        if df.rdd.getNumPartitions() != n:
            log.info("general path: repartitioning the input round-robin to %d partitions", n)
            df = df.repartition(n)
        stage = df.mapInArrow(_as_arrow(task), SUMMARY_SCHEMA, barrier=True)

    sc = spark.sparkContext
    sc.setJobDescription(f"slash {query.window} by {list(query.key)} on {n} executors")
    t0 = _now()
    try:
        rows = stage.collect()
    except Exception as e:  # py4j / PythonException: name the rank that failed first
        raise_task_failure(e, "slash.spark.window_aggregate", rdv.root_cause() if rdv else None)
    finally:
        sc.setJobDescription(None)
        if rdv is not None:
            rdv.close()
    seconds = _now() - t0
    metrics = []
    for r in sorted(rows, key=lambda r: r["rank"]):
        m = json.loads(r["metrics"])
        m.update(rank=r["rank"], rows=r["rows"], seconds=r["seconds"], path=r["path"])
        metrics.append(m)
    late = sum(m["late_records"] for m in metrics)
    if late:
        log.warning("slash.spark: %d late record(s) were not applied (raise lateness=, now %d ms)",
                    late, query.lateness)
    log.info("slash.spark: %d executors, %d records in, %d result rows in %.2f s", n,
             sum(m["records_in"] for m in metrics), sum(m["rows"] for m in metrics), seconds)
    df = early.frame({m["rank"]: (m.get("attempt"), m["path"]) for m in metrics})
    return AggregateResult(df, out_dir, n, seconds, metrics, fast, stage)


def _result_frame(spark: Any, out_dir: str, first_path: Optional[str]) -> Any:
    schema = _spark_schema(first_path) if first_path else None
    return (spark.read.schema(schema) if schema is not None else spark.read).parquet(out_dir)


def announce_written(conn: Any, path: str) -> int:
    """In a task: tells the driver this task's result file is in place (so
    it may list the results while the job winds down); returns the task
    attempt's id, which the task's summary carries too."""
    from pyspark import BarrierTaskContext

    attempt = BarrierTaskContext.get().taskAttemptId()  # unique per attempt
    if conn is not None:
        try:
            conn.send(("written", attempt, path))
        except OSError:  # best effort: the driver lists them after the job otherwise
            pass
    return attempt


class EarlyFrame:
    """The result DataFrame, built while the barrier job winds down: each
    task says when its file is written (rank, task attempt id, path); once all
    N have, a thread lists the directory (``spark.read.parquet`` costs 10-30
    ms here, about what the job takes from its last task's end to collect()).
    :meth:`frame` takes it only if the files it saw are those of the attempt
    that succeeded; otherwise (a retried stage, allGather) it lists again."""

    def __init__(self, spark: Any, out_dir: str, n: int) -> None:
        self._spark, self._dir, self._n = spark, out_dir, n
        self._written: Dict[int, Tuple[int, str]] = {}
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._seen: Optional[Dict[int, Tuple[int, str]]] = None
        self._df: Any = None

    def on_message(self, rank: int, msg: Tuple[Any, ...]) -> None:
        if msg[0] != "written":
            return
        with self._lock:
            self._written[rank] = (msg[1], msg[2])
            if len(self._written) == self._n and self._thread is None:
                self._thread = threading.Thread(target=self._build, args=(dict(self._written),),
                                                name="slash-result-frame", daemon=True)
                self._thread.start()

    def _build(self, seen: Dict[int, Tuple[int, str]]) -> None:
        try:
            self._df = _result_frame(self._spark, self._dir, seen[0][1])
            self._seen = seen
        except Exception as e:  # listed again by frame()
            log.debug("slash.spark: listing the results early failed: %s", e)

    def frame(self, final: Dict[int, Tuple[Any, str]]) -> Any:
        with self._lock:
            t = self._thread
        if t is not None:
            t.join()
            if self._df is not None and self._seen == final:
                return self._df
        return _result_frame(self._spark, self._dir, final[0][1] if final else None)


def _spark_schema(path: str) -> Any:
    """The result files' Spark schema, from one footer (no inference job)."""
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    fsys, p = open_fs(path)
    schema = pq.read_schema(p, filesystem=fsys)
    try:
        return from_arrow_schema(schema)
    except Exception:  # e.g. an unsigned key column: Spark reads it as the next wider type
        return None


def _now() -> float:
    return time.perf_counter()


def window_aggregate(spark: Any, source: Any, *, time: str, window: str,
                     key: Union[str, Sequence[str]], aggs: Sequence[str] = ("count",),
                     filter: Union[None, str, Sequence[str]] = None,
                     lateness: Union[None, int, str] = None, executors: Optional[int] = None,
                     transport: str = "shm", **options: Any) -> Any:
    """A windowed aggregation computed by Slash executors in one Spark barrier
    stage, returned as an ordinary Spark DataFrame.

    ``source``: Parquet/Arrow file(s) or directories (fast path: each task
    reads its split with pyarrow) or a Spark DataFrame (general path). The
    spellings are those of ``slash run``: ``window="tumbling:10s"``,
    ``"sliding:60s/10s"`` or ``"session:5s"``; ``aggs=["count", "sum:price"]``
    (count, sum, min, max, avg); ``filter="event_type == 'view'"`` (or a
    list, all must hold). Windows and durations also take ``d`` and Spark's
    spellings (``"tumbling:1 day"``). Output columns: ``window_start``,
    ``window_end`` (start inclusive, end exclusive; Spark timestamps when the
    time column is a timestamp or a date, int64 ms when it is an integer),
    the key columns (nulls kept: a null key is a group), then ``count``,
    ``count_COL``, ``sum_price``, ... (aggregates skip nulls, as Spark's).

    Every record of a bounded input is applied whatever its layout (part
    files that each span the time range, shuffled rows): no lateness is
    needed, and ``lateness`` is ignored there (it applies to streams).

    ``executors``: Slash executors = barrier tasks (default: all task slots);
    ``transport``: ``"shm"`` (one host) or ``"ofi:tcp"``. Other options go to
    :func:`run_aggregate` (``group=GroupConfig(...)``, ``result_dir=``).

    The stage runs when this function is called; the DataFrame reads the
    result files it wrote, so it is computed once whatever actions follow.
    """
    return run_aggregate(spark, source, time=time, window=window, key=key, aggs=aggs,
                         filter=filter, lateness=lateness, executors=executors,
                         transport=transport, **options).df
