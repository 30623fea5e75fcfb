"""A windowed aggregation as one Spark barrier stage, without a shuffle.

N barrier tasks are the N Slash executors. Each opens a listener, learns the
others' addresses with ``BarrierTaskContext.allGather`` (rank = partition id),
joins the group with a token made for this query on the driver, runs
:func:`slash.runner.execute_split`, and hands over the windows it leads: a
small part (``result_inline_bytes``) as Arrow IPC bytes over its link to the
driver, a larger one as a Parquet file written with pyarrow. The driver
receives one summary row per task and returns an ordinary DataFrame (show,
limit, join, write all work; a barrier RDD would refuse ``take``), computed
once, so every action sees the same rows: ``spark.createDataFrame`` of the
parts when all came inline (a local relation when small, else an RDD of
their Arrow batches: either way no job reads files back), else
``spark.read.parquet`` of the files, and large results never pass through
the driver.

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

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import pyarrow as pa

from slash.limits import MAX_EXECUTORS
from slash.errors import InvalidArgument, SchemaError
from slash.executor import GroupConfig
from slash.query import Query
from slash.run.recovery.checkpointed import execute_split_checkpointed
from slash.run.plan import CheckpointPlan
from slash.runner import execute_split
from slash.sources import FileSource, Source
from slash.window import with_start_time
from slash.spark import _env
from slash.spark._env import TaskFailed
from slash.sources.joined import JoinedFileSource
from slash.spark import _batch_ckpt, jvm_export
from slash.spark.broadcast_scan import NotAJoin, broadcast_scan
from slash.spark.dataframe import (NotAScan, StructKey, check_columns, file_scan, flat_key,
                                   flatten_structs, general_input, rebuild_structs, renamed_back,
                                   renamed_query, struct_keys)
from slash.spark._tasks import (PartitionSource, as_micros, Rendezvous, barrier_stage, driver_host, join_group,
                                conf_get, open_fs, rank_errors, raise_task_failure, report_error,
                                spark_input_schema, write_table)

log = logging.getLogger(__name__)

#: default bound on one task's part that returns to the driver over the
#: rendezvous link (Arrow IPC bytes) instead of as a Parquet file
INLINE_BYTES = 4 << 20
#: bound on all tasks' inline parts together (each task gets 1/N of it at most)
INLINE_TOTAL_BYTES = 64 << 20

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
    path: Optional[str]  # the result directory; None when every part came back inline
    executors: int
    seconds: float
    metrics: List[Dict[str, Any]] = field(repr=False)
    fast_path: bool = True
    stage: Any = field(default=None, repr=False)  # the barrier stage (already run): RDD or DataFrame
    #: with checkpoint=: checkpoints (id, bytes, seconds), recoveries (cause,
    #: rank, from_checkpoint, seconds_to_resume), resumed_from, attempts
    recovery: Optional[Dict[str, Any]] = None
    #: how the input reached the executors: "files" (paths given), "scan" (a
    #: DataFrame that is a Parquet scan: its files), "export" (a DataFrame's
    #: rows written as Arrow files by the Spark tasks computing them),
    #: "scan-join" (a Parquet scan joined to a table Spark broadcasts: its
    #: files, joined by the executors) or "arrow" (handed over through
    #: mapInArrow)
    route: str = "files"

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
    def inline(self) -> bool:
        """True when every task's part came back over the driver link (the
        DataFrame is in memory, no result file was written)."""
        return bool(self.metrics) and all(m.get("result") == "inline" for m in self.metrics)

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
    inline_bytes: int = 0  # a part up to this size goes to the driver over the link; 0: files
    checkpoint: Optional[CheckpointPlan] = None  # checkpoint=: see slash.spark._batch_ckpt


def task_summary(rank: int, out: pa.Table, m: Dict[str, Any], seconds: float,
                  path: Optional[str]) -> Dict[str, Any]:
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
        t0 = time.perf_counter()
        from pyspark import BarrierTaskContext
        rank = BarrierTaskContext.get().partitionId()
        with rank_errors(rank):
            if plan.source is not None:
                for _ in batches:  # the partition's id: only the trigger
                    pass
                source = plan.source
            elif plan.checkpoint is not None:  # positions must hold across attempts: sorted rows
                source = _batch_ckpt.SortedPartition(
                    pa.schema([plan.schema.field(c) for c in plan.query.input_columns]), batches,
                    plan.query.time)
            else:
                source = PartitionSource(plan.schema, batches, plan.time_columns)
            yield run_in_group(
                plan, t0,
                lambda rank, addresses, lst, m: execute_split(
                    plan.query, source, rank, addresses, lst, plan.group, plan.token, metrics=m),
                lambda rank, addresses, lst, ck, link: execute_split_checkpointed(
                    plan.query, source, rank, addresses, lst, plan.group, plan.token, ck, link),
                lambda res: plan.query.finalize(res, plan.schema, sort=False))
    return task


def run_in_group(plan: Any, t0: float, split: Callable[..., Any],
                 split_checkpointed: Callable[..., Any],
                 finalize: Callable[[Any], pa.Table]) -> Dict[str, Any]:
    """The body of a batch query's barrier task, aggregate or join (``plan``: its
    group, token, rendezvous, checkpoint, out_dir and inline_bytes): joins the
    group, runs this rank's split (``split(rank, addresses, listener, metrics)``,
    or under ``plan.checkpoint`` ``split_checkpointed(rank, addresses, listener,
    checkpoint, link)`` through slash.spark._batch_ckpt), finalizes and delivers
    the rank's part, and returns the task's summary row. An error is reported to
    the driver over the link before it is raised."""
    started_at = time.time()
    rank, addresses, lst, conn, group_ms = join_group(plan.group.transport, plan.token,
                                                      plan.rendezvous, plan.group.timeout)
    try:
        t1 = time.perf_counter()
        m: Dict[str, Any] = {}
        try:
            if plan.checkpoint is None:
                res = split(rank, addresses, lst, m)
            else:
                res, m = _batch_ckpt.run_task(
                    plan.checkpoint, conn, group_ms, rank, len(addresses), plan.group.timeout,
                    lambda ck, link: split_checkpointed(rank, addresses, lst, ck, link))
        finally:
            lst.close()
        t2 = time.perf_counter()
        out = finalize(res)
        path, attempt = deliver_result(conn, out, plan.out_dir, rank, plan.inline_bytes, m)
        m.update(join_seconds=t1 - t0, run_seconds=t2 - t1, write_seconds=time.perf_counter() - t2,
                 attempt=attempt, started_at=started_at, ended_at=time.time())
    except BaseException as e:
        report_error(conn, rank, e)
        raise
    finally:
        if conn is not None:
            conn.close()
    return task_summary(rank, out, m, time.perf_counter() - t0, path)


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


#: Spark's names of aggregate functions that are Slash aggregates under another
#: name: ``min_by:COL`` is Spark's ``min_by(COL, time)``, the value at the
#: earliest event time (``first:COL``), ``max_by:COL`` the latest (``last:COL``);
#: ``countDistinct:COL`` is ``count_distinct:COL``
SPARK_AGG_NAMES = {"min_by": "first", "max_by": "last", "countDistinct": "count_distinct"}


def spark_aggregate(spec: Any) -> Any:
    """An aggregate spec with Spark's function name replaced by Slash's
    (:data:`SPARK_AGG_NAMES`); any other spec as given."""
    if not isinstance(spec, str):
        return spec
    kind, sep, rest = spec.partition(":")
    return SPARK_AGG_NAMES.get(kind.strip(), kind.strip()) + sep + rest if sep else spec


def make_query(time: str, window: str, key: Union[str, Sequence[str]], aggs: Sequence[str],
               filter: Union[None, str, Sequence[str]], lateness: Union[None, int, str],
               time_zone: Optional[str] = None, start_time: Optional[str] = None) -> Query:
    return Query(time=time, window=with_start_time(window, start_time), key=key,
                 aggregates=[spark_aggregate(a) for a in aggs] if not isinstance(aggs, str) else aggs,
                 filters=_as_list(filter), lateness=0 if lateness is None else lateness,
                 time_zone=time_zone)


def one_start_time(start_time: Optional[str], startTime: Optional[str]) -> Optional[str]:
    """The window start time given as ``start_time=`` or in Spark's spelling
    ``startTime=`` (None: none); both is an InvalidArgument."""
    if start_time is not None and startTime is not None:
        raise InvalidArgument("give start_time or Spark's spelling startTime, not both")
    return start_time if start_time is not None else startTime


def session_time_zone(spark: Any) -> str:
    """Spark's session time zone (``spark.sql.session.timeZone``): the zone
    a date time column is cast in, as Spark's own window() casts it."""
    return conf_get(spark, "spark.sql.session.timeZone") or "UTC"


def is_dataframe(obj: Any) -> bool:
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
                  rendezvous: str = "driver",
                  result_inline_bytes: int = INLINE_BYTES, checkpoint: Optional[str] = None,
                  checkpoint_every: Union[str, int, float] = "10s",
                  checkpoint_keep: int = 2, start_time: Optional[str] = None,
                  startTime: Optional[str] = None) -> AggregateResult:
    """Runs the aggregation now as one barrier stage; see :func:`window_aggregate`.

    ``rendezvous``: how the tasks exchange listener addresses: ``"driver"``
    (an authenticated socket on the driver, milliseconds) or ``"allgather"``
    (``BarrierTaskContext.allGather``, which costs about a second).

    ``result_inline_bytes``: a task whose part of the result is at most this
    many bytes (Arrow IPC; and at most :data:`INLINE_TOTAL_BYTES` / N) sends
    it to the driver over the rendezvous link, and when every part came that
    way the DataFrame is built in memory (``spark.createDataFrame``: using it
    runs no job that reads files back); larger parts are Parquet files under
    ``result_dir``. 0 always writes files; so does ``rendezvous="allgather"``
    (no driver link). Either way the DataFrame has the same schema and rows.

    ``checkpoint``: a directory every Spark worker and the driver see (a
    long job's insurance): the barrier tasks take aligned checkpoints there
    every ``checkpoint_every`` (``"10s"``, ``"N epochs"``, ``"N batches"``;
    the newest ``checkpoint_keep`` stay), the stage becomes one Spark retries
    as a whole when a task fails (``spark.stage.maxConsecutiveAttempts``,
    default 4 attempts), and a retried attempt, or a call made again with
    the same directory, resumes from the newest complete checkpoint instead
    of starting over. The result is the same rows. A DataFrame's partitions
    must hold the same rows in every attempt: see docs/spark.md.
    ``AggregateResult.recovery`` has the checkpoints and recoveries.

    Returns the DataFrame with the executors' metrics. Raises the slash.errors
    classes: SchemaError / UnknownName / InvalidArgument before anything runs,
    NotEnoughSlots when the cluster has fewer task slots than executors,
    TaskFailed naming the rank when an executor fails.
    """
    _env.require_pyspark()
    import pyspark.sql.functions  # noqa: F401  (fail here, not in a task)

    query = make_query(time, window, key, aggs, filter, lateness, session_time_zone(spark),
                       one_start_time(start_time, startTime))
    # what a call leaves behind on the way (a DataFrame's exported files) goes at its end
    with contextlib.ExitStack() as cleanup:
        fast = not is_dataframe(source)
        time_columns: tuple = ()
        frame = None  # the general path's DataFrame
        structs: List[StructKey] = []  # struct key columns, flattened for the executors
        route = "files"
        user_query = query  # the query in the DataFrame's column names
        renames: Dict[str, str] = {}  # a renamed scan's result columns -> the DataFrame's names
        if not fast:
            structs = struct_keys(source, query.key)
            got = dataframe_input(source, query, structs, spark, cleanup.callback)
            source, frame, query, route, renames = got.source, got.frame, got.query, got.route, got.renames
            fast = frame is None
        if fast:
            # any bounded source (the contract: schema, read); an unbounded one is slash.spark.stream's
            src = source if isinstance(source, Source) and getattr(source, "bounded", True) else None
            if src is None:
                if not (isinstance(source, (str, os.PathLike)) or
                        (isinstance(source, (list, tuple)) and source and
                         all(isinstance(p, (str, os.PathLike)) for p in source))):
                    raise InvalidArgument("source must be Parquet/Arrow path(s), a FileSource, a "
                                          "GeneratorSource, a KafkaSource or a Spark DataFrame, got "
                                          f"{type(source).__name__}")
                src = FileSource(source)  # UnknownName for a missing path, SchemaError for a bad file
            schema = src.schema
        else:
            schema, time_columns = spark_input_schema(frame)
        query.check(schema)

        if executors is None and not fast:
            executors = min(frame.rdd.getNumPartitions(), _env.default_executors(spark))
        n, group = group_for(spark, query, executors, transport, group, slots_wait)
        ck_plan = None
        if checkpoint is not None:
            if rendezvous != "driver":
                raise InvalidArgument("checkpoint= needs rendezvous='driver' (the driver commits the "
                                      "checkpoints the tasks report)")
            ck_plan, group = _batch_ckpt.make_plan(checkpoint, "window_aggregate", query,
                                                   src if fast else frame, n, group, checkpoint_every,
                                                   checkpoint_keep)

        token = secrets.token_hex(16)
        out_dir = f"{_env.result_root(spark, result_dir).rstrip('/')}/q-{token[:12]}"
        if rendezvous not in ("driver", "allgather"):
            raise InvalidArgument(f"rendezvous must be 'driver' or 'allgather', got {rendezvous!r}")
        inline = inline_limit(result_inline_bytes, n) if rendezvous == "driver" else 0
        early = EarlyFrame(spark, out_dir, n)
        rdv, ckd = (start_rendezvous(spark, n, token, early, ck_plan) if rendezvous == "driver"
                    else (None, None))
        plan = _Plan(query, schema, group, token, out_dir, src if fast else None, time_columns,
                     rdv.address if rdv else None, inline, ck_plan)
        task = _make_task(plan)
        if fast:
            stage = barrier_stage(spark, n, task)
        else:
            df = frame
            if df.rdd.getNumPartitions() != n:
                log.info("general path: repartitioning the input round-robin to %d partitions", n)
                df = df.repartition(n)
            else:
                odd = barrier_refused(df)
                if odd is not None:
                    log.info("general path: the input's last stage has %s, which a barrier stage "
                             "refuses (every RDD in it must have its partition count); "
                             "repartitioning it round-robin to %d partitions first", odd, n)
                    df = df.repartition(n)
            stage = df.mapInArrow(_as_arrow(task), SUMMARY_SCHEMA, barrier=True)
        run_stage = stage if ck_plan is None else _batch_ckpt.retryable(stage)

        sc = spark.sparkContext
        sc.setJobDescription(f"slash {query.window} by {list(query.key)} on {n} executors")
        t0 = _now()
        try:
            try:
                rows = run_stage.collect()
            except Exception as e:  # py4j / PythonException: name the rank that failed first
                raise_task_failure(e, "slash.spark.window_aggregate", rdv.root_cause() if rdv else None)
            seconds = _now() - t0
            metrics = []
            for r in sorted(rows, key=lambda r: r["rank"]):
                m = json.loads(r["metrics"])
                m.update(rank=r["rank"], rows=r["rows"], seconds=r["seconds"], path=r["path"])
                metrics.append(m)
            # before the links close: inline parts may still be on their way
            df = early.frame({m["rank"]: (m.get("attempt"), m["path"]) for m in metrics}, group.timeout)
            df = rebuild_structs(df, structs, user_query.key) if structs else df
            df = renamed_back(df, renames) if renames else df
            if query.top:
                df = _rank_top(df, user_query)
        finally:
            sc.setJobDescription(None)
            if rdv is not None:
                rdv.close()
        late = sum(m["late_records"] for m in metrics)
        if late:
            log.warning("slash.spark: %d late record(s) were not applied (raise lateness=, now %d ms)",
                        late, query.lateness)
        log.info("slash.spark: %d executors, %d records in, %d result rows in %.2f s", n,
                 sum(m["records_in"] for m in metrics), sum(m["rows"] for m in metrics), seconds)
        wrote = any(m["path"] is not None for m in metrics)
        return AggregateResult(df, out_dir if wrote else None, n, seconds, metrics, fast, stage,
                               ckd.summary() if ckd is not None else None, route=route)


@dataclass(frozen=True)
class DataFrameInput:
    """How a DataFrame reaches the executors (:func:`dataframe_input`)."""

    source: Any  # a FileSource (scan, export), or the DataFrame itself (arrow)
    frame: Any  # the DataFrame mapInArrow hands over (arrow), else None
    query: Query  # the query the executors run
    route: str  # "scan", "scan-join", "export" or "arrow" (AggregateResult.route)
    renames: Dict[str, str] = field(default_factory=dict)  # result column -> the DataFrame's name


def dataframe_input(df: Any, query: Query, structs: Sequence[StructKey] = (), spark: Any = None,
                    at_end: Optional[Callable[[Callable[[], None]], Any]] = None) -> DataFrameInput:
    """Where a DataFrame's rows come from, decided by its plan
    (:mod:`slash.spark.dataframe`), said at WARNING level with the reason.
    A Parquet scan: its files, the plan's filters added to the query's (a
    scan whose columns are renamed runs the query on the files' names, and
    ``renames`` gives the result the DataFrame's). Anything else: the
    general path's rows, the query's filters and columns applied by Spark
    (the executors' query has no filters left), written as Arrow files by
    the Spark tasks themselves when the session has the exporter and
    ``spark.slash.jvmExport`` is not "false" (:func:`exported_input`;
    ``at_end`` removes them), else handed over by mapInArrow."""
    check_columns(df, query.input_columns)
    time_type = type(df.schema[query.time].dataType).__name__
    if structs:
        why = (f"key column {structs[0].name!r} is a struct, which Spark flattens into its fields "
               "first")
    elif time_type == "StringType":
        why = (f"time column {query.time!r} is a string, which Spark casts to a timestamp in the "
               "session time zone first")
    else:
        try:
            scan = file_scan(df, query.input_columns)
            if not scan.files:
                raise NotAScan("Spark's partition pruning leaves no file to read")
            back: Dict[str, str] = {}
            if scan.renamed:
                query, back = renamed_query(query, scan.columns)
            merged = dataclasses.replace(query, filters=tuple(query.filters) + scan.filters +
                                         scan.selection)
            src = scan.source(merged.input_columns, filtered_only(merged))
            log.warning("slash.spark: the fast path: the DataFrame is %s of %d file(s), read by the "
                        "Slash executors themselves (%d filter(s) from its plan applied by Slash, %d "
                        "partition filter(s) by Spark's pruning)", scan.what, len(scan.files),
                        len(scan.filters), scan.pruned_by_spark)
            return DataFrameInput(src, None, merged, "scan", back)
        except NotAScan as e:
            why = str(e)
        try:
            return _broadcast_input(df, query)
        except NotAJoin:
            pass
        except NotAScan as e:
            why = str(e)
    frame = general_input(df, query.time, query_columns_read(query), query.filters)
    if structs:
        frame = flatten_structs(frame, structs)
        query = dataclasses.replace(query, key=tuple(flat_key(query.key, structs)))
    query = dataclasses.replace(query, filters=())
    query.check(spark_input_schema(frame)[0])  # SchemaError naming the column before any work
    if spark is not None and at_end is not None:
        exported = exported_input(spark, frame, why, at_end)
        if exported is not None:
            return DataFrameInput(exported, None, query, "export")
    log.warning("slash.spark: the general path (rows from Spark through mapInArrow, the query's "
                "filters and columns applied in Spark first): the DataFrame is no Parquet scan "
                "Slash reads itself: %s", why)
    return DataFrameInput(df, frame, query, "arrow")


def _broadcast_input(df: Any, query: Query) -> DataFrameInput:
    """A scan joined to a broadcast table (:mod:`slash.spark.broadcast_scan`)
    as a joined file source and the query on its columns."""
    got = broadcast_scan(df, query.input_columns, query.time)
    scan = got.scan
    if not scan.files:
        raise NotAScan("Spark's partition pruning leaves no file of its scan to read")
    if scan.parts:
        raise NotAScan("its scan is a union whose inputs filter differently, which Slash does not "
                       "join to a broadcast table")
    query, back = renamed_query(query, got.columns)
    merged = dataclasses.replace(query, filters=tuple(query.filters) + scan.filters)
    read = [c for c in merged.input_columns if c not in got.lookup.added]
    try:
        src = JoinedFileSource(list(scan.files), got.lookup, base=scan.base,
                               columns=list(dict.fromkeys([*read, got.lookup.on])),
                               dictionary=[c for c in filtered_only(merged) if c != got.lookup.on])
    except SchemaError as e:
        raise NotAScan(str(e)) from None
    log.warning("slash.spark: the fast path: the DataFrame is %s of %d file(s) joined to a "
                "broadcast table of %d rows on %r, read and joined by the Slash executors "
                "themselves (%d filter(s) from its plan applied by Slash, %d partition filter(s) by "
                "Spark's pruning)", scan.what, len(scan.files), got.lookup.table.num_rows, got.lookup.on,
                len(scan.filters), scan.pruned_by_spark)
    return DataFrameInput(src, None, merged, "scan-join", back)


def exported_input(spark: Any, frame: Any, why: str,
                   at_end: Callable[[Callable[[], None]], Any]) -> Optional[FileSource]:
    """The general path's rows written as Arrow files by the Spark tasks that
    compute them (:mod:`slash.spark.jvm_export`: no row through Python, any
    number of partitions, no shuffle), as a FileSource the fast path reads;
    the files go when the call ends (``at_end``). None when the session
    cannot load the exporter or a column's type is not one it writes: then
    mapInArrow carries the rows."""
    from slash.errors import NotSupported

    if not jvm_export.wanted(spark):
        return None
    try:
        out = jvm_export.export_columns(spark, frame, frame.columns)
    except (SchemaError, NotSupported) as e:
        log.info("slash.spark: the JVM export does not take this DataFrame (%s)", e)
        return None
    at_end(out.cleanup)
    log.warning("slash.spark: the general path through the JVM export: the DataFrame is no Parquet "
                "scan Slash reads itself (%s); its %d partition(s) were written as Arrow files by the "
                "Spark tasks computing them (%d rows, %.2f s), read by the Slash executors", why,
                len(out.parts), out.rows, out.seconds)
    return FileSource(out.files)


def filtered_only(query: Query) -> List[str]:
    """The columns ``query`` reads for its filters alone: a file source may
    read those as dictionary arrays (FileSource's ``dictionary``)."""
    read = set(query_columns_read(query))
    return list(dict.fromkeys(f.column for f in query.filters if f.column not in read))


def query_columns_read(query: Query) -> List[str]:
    """The columns a query reads other than for its filters."""
    return list(dict.fromkeys([query.time, *query.key, *query.value_columns]))


def _rank_top(df: Any, query: Query) -> Any:
    """The window's top N of the tasks' parts: each task kept its leader's N
    best keys of each window (Query.finalize), so the N best of those are the
    window's; ranked as Query.finalize ranks them."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    n, col = query.top
    order = Window.partitionBy("window_start").orderBy(
        F.col(col).desc_nulls_last(), *(F.col(k).asc_nulls_last() for k in query.key))
    return df.withColumn("rank", F.row_number().over(order).cast("long")).where(F.col("rank") <= n)


def barrier_refused(df: Any) -> Optional[str]:
    """The RDD of ``df``'s last stage that a barrier stage refuses, named,
    or None: Spark runs a stage in barrier mode only when every RDD in it
    has the stage's partition count (no ``coalesce()``, ``union()`` or
    partition pruning since the last shuffle)."""
    def name(rdd: Any) -> str:
        return f"{rdd.getClass().getSimpleName()} {rdd.id()} ({rdd.getNumPartitions()} partitions)"

    top = df._jdf.queryExecution().toRdd()
    want = top.getNumPartitions()
    todo, seen = [top], set()
    while todo:
        rdd = todo.pop()
        if rdd.id() in seen:
            continue
        seen.add(rdd.id())
        deps = rdd.dependencies()
        for i in range(deps.size()):
            d = deps.apply(i)
            if "Shuffle" in d.getClass().getSimpleName():
                continue  # the stage starts after a shuffle
            if d.rdd().getNumPartitions() != want:
                return f"{name(rdd)} over {name(d.rdd())}"
            todo.append(d.rdd())
    return None


def start_rendezvous(spark: Any, n: int, token: str, early: "EarlyFrame",
                     ck_plan: Optional[CheckpointPlan]) -> Tuple[Rendezvous, Any]:
    """The driver's rendezvous; with checkpoints it also commits them
    (:class:`slash.spark._batch_ckpt.BatchCheckpoints`)."""
    if ck_plan is None:
        return Rendezvous(driver_host(spark), n, token, on_message=early.on_message), None
    holder: List[Rendezvous] = []
    ckd = _batch_ckpt.BatchCheckpoints(ck_plan, n, lambda r, msg: holder[0].send_to(r, msg),
                                       lambda: holder[0].silent_loss())

    def on_message(rank: int, msg: Tuple[Any, ...]) -> None:
        if not ckd.on_message(rank, msg):
            early.on_message(rank, msg)

    holder.append(Rendezvous(driver_host(spark), n, token, on_message=on_message))
    return holder[0], ckd


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


def inline_limit(per_task: int, n: int) -> int:
    """The size up to which each of ``n`` tasks returns its part inline:
    ``per_task``, but no more than :data:`INLINE_TOTAL_BYTES` over all tasks."""
    if isinstance(per_task, bool) or not isinstance(per_task, int) or per_task < 0:
        raise InvalidArgument(f"result_inline_bytes must be an int >= 0 (0: always files), got {per_task!r}")
    return min(per_task, INLINE_TOTAL_BYTES // n)




def inline_payload(table: pa.Table, limit: int) -> Optional[bytes]:
    """``table`` as Arrow IPC stream bytes if they are at most ``limit``
    bytes and Spark has a type for every column (else None: write a file,
    which Spark reads with its own widening, e.g. of unsigned keys)."""
    if limit <= 0 or table.nbytes > limit:  # nbytes: a lower bound of the IPC size
        return None
    table = as_micros(table)  # as its Parquet file reads back (write_table)
    if _arrow_to_spark(table.schema) is None:
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    buf = sink.getvalue()
    return buf.to_pybytes() if buf.size <= limit else None


def deliver_result(conn: Any, out: pa.Table, out_dir: str, rank: int, inline_bytes: int,
                   m: Dict[str, Any]) -> Tuple[Optional[str], int]:
    """In a task: hands this task's part to the driver, inline over the
    rendezvous link (``("result", attempt, ipc_bytes)``) when it is small
    enough, else as ``out_dir/part-RANK.parquet`` (announced as "written").
    Returns (the file's path or None, the task attempt's id) and records
    which way it went in ``m``. A part goes one way only: the driver takes
    inline parts, like files, only from the attempt that succeeded."""
    from pyspark import BarrierTaskContext

    attempt = BarrierTaskContext.get().taskAttemptId()
    data = inline_payload(out, inline_bytes) if conn is not None else None
    if data is not None:
        try:
            conn.send(("result", attempt, data))
            m.update(result="inline", result_bytes=len(data))
            return None, attempt
        except OSError as e:  # the link is gone: the file still reaches the driver
            log.warning("rank %d: sending the result to the driver failed (%s); writing a file", rank, e)
    path = write_table(out, out_dir, f"part-{rank:05d}.parquet")
    announce_written(conn, path)
    m.update(result="file")
    return path, attempt


class EarlyFrame:
    """The result DataFrame, built while the barrier job winds down.

    Each task reports its part with its task attempt id: a file it wrote
    ("written", attempt, path) or the part itself ("result", attempt, Arrow
    IPC bytes). Once all N have, a thread builds the DataFrame: every part
    inline, ``spark.createDataFrame`` of their concatenation (a local
    relation: no job reads it back); every part a file, ``spark.read.parquet``
    of the directory (10-30 ms, about what the job takes from its last task's
    end to collect()); a mix, the driver writes the inline parts as files
    next to the others first. :meth:`frame` takes it only if the parts it saw
    are those of the attempts that succeeded; otherwise (a retried stage,
    allGather) it builds again from the parts of those attempts."""

    def __init__(self, spark: Any, out_dir: str, n: int) -> None:
        self._spark, self._dir, self._n = spark, out_dir, n
        self._written: Dict[int, Tuple[int, Optional[str]]] = {}
        self._inline: Dict[Tuple[int, int], bytes] = {}  # (rank, attempt) -> IPC stream
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._seen: Optional[Dict[int, Tuple[int, Optional[str]]]] = None
        self._df: Any = None

    def on_message(self, rank: int, msg: Tuple[Any, ...]) -> None:
        if msg[0] == "written":
            entry: Tuple[int, Optional[str]] = (msg[1], msg[2])
        elif msg[0] == "result":
            entry = (msg[1], None)
        else:
            return
        with self._cond:
            if msg[0] == "result":
                self._inline[(rank, msg[1])] = msg[2]
            self._written[rank] = entry
            self._cond.notify_all()
            if len(self._written) == self._n and self._thread is None:
                self._thread = threading.Thread(target=self._build, args=(dict(self._written),),
                                                name="slash-result-frame", daemon=True)
                self._thread.start()

    def _build(self, seen: Dict[int, Tuple[int, Optional[str]]]) -> None:
        inline = sum(path is None for _, path in seen.values())
        if 0 < inline < len(seen):  # a mix writes files: only for the attempts that succeeded
            return
        try:
            self._df = self._make(seen)
            self._seen = seen
        except Exception as e:  # built again by frame()
            log.debug("slash.spark: building the result early failed: %s", e)

    def _make(self, parts: Dict[int, Tuple[Any, Optional[str]]]) -> Any:
        inline = sorted(r for r, (_, path) in parts.items() if path is None)
        if parts and len(inline) == len(parts):
            tables = [self._table(r, parts[r][0]) for r in inline]
            return _inline_frame(self._spark, pa.concat_tables(tables))
        first = next((parts[r][1] for r in sorted(parts) if parts[r][1] is not None), None)
        for r in inline:  # a mix: the small parts join the others as files
            write_table(self._table(r, parts[r][0]), self._dir, f"part-{r:05d}.parquet")
        return _result_frame(self._spark, self._dir, first)

    def _table(self, rank: int, attempt: Any) -> pa.Table:
        with self._cond:
            data = self._inline[(rank, attempt)]
        return pa.ipc.open_stream(data).read_all()

    def frame(self, final: Dict[int, Tuple[Any, Optional[str]]], timeout: float = 60.0) -> Any:
        """The DataFrame of the parts ``final`` names (rank -> (attempt id,
        path or None for inline), from the tasks' summaries). Call it before
        the rendezvous closes: it waits up to ``timeout`` s for inline parts
        still on their way (a task sends its part before it ends)."""
        missing = [(r, a) for r, (a, path) in final.items() if path is None]
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(k not in self._inline for k in missing):
                left = deadline - time.monotonic()
                if left <= 0:
                    r = next(r for r, a in missing if (r, a) not in self._inline)
                    raise TaskFailed(f"slash.spark: the result of Slash executor rank {r} did not reach "
                                     f"the driver within {timeout} s", r, "result not received")
                self._cond.wait(left)
            t = self._thread
        if t is not None:
            t.join()
            if self._df is not None and self._seen == final:
                return self._df
        return self._make(final)


#: the Spark setting under which ``createDataFrame`` of Arrow data builds a
#: LocalRelation (rows held on the driver) rather than an RDD of Arrow batches
_LOCAL_RELATION_THRESHOLD = "spark.sql.execution.arrow.localRelationThreshold"
#: Arrow bytes of an inline result above which its DataFrame is an RDD of
#: Arrow batches, not a LocalRelation. Measured (local[2], warmed; build, then
#: use; 4 int64 columns): at 1,000 rows a LocalRelation's collect() is 3x
#: faster (it runs no job); at 10,000 rows the RDD is as fast or faster for
#: agg().collect(), collect() and toArrow(); at 72,000 rows the RDD takes
#: 0.12 s for build and agg(sum).collect() against 0.39 s, 0.09 s against
#: 0.25 s for toArrow(): a LocalRelation costs the driver the rows'
#: conversion when it is built and again in every query over it (the
#: optimizer projects its rows there, the scan ships them in its tasks)
INLINE_RDD_BYTES = 128 << 10
_conf_lock = threading.Lock()


def _inline_frame(spark: Any, table: pa.Table) -> Any:
    """A DataFrame of the parts that came back inline, with the schema their
    files would have had (:func:`_spark_schema`): a LocalRelation up to
    :data:`INLINE_RDD_BYTES` of Arrow data, above it an RDD of Arrow record
    batches (a LogicalRDD) that stay columnar until a task reads them. Spark
    picks the kind by ``spark.sql.execution.arrow.localRelationThreshold``,
    set for this call only (the session's own value is restored)."""
    schema = _arrow_to_spark(table.schema)
    with _conf_lock:
        before = conf_get(spark, _LOCAL_RELATION_THRESHOLD)
        spark.conf.set(_LOCAL_RELATION_THRESHOLD, str(INLINE_RDD_BYTES))
        try:
            return spark.createDataFrame(table, schema=schema)
        finally:
            if before is None:
                spark.conf.unset(_LOCAL_RELATION_THRESHOLD)
            else:
                spark.conf.set(_LOCAL_RELATION_THRESHOLD, before)


def _arrow_to_spark(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        return from_arrow_schema(schema)
    except Exception:  # e.g. an unsigned key column: Spark reads it as the next wider type
        return None


def _spark_schema(path: str) -> Any:
    """The result files' Spark schema, from one footer (no inference job)."""
    import pyarrow.parquet as pq

    fsys, p = open_fs(path)
    return _arrow_to_spark(pq.read_schema(p, filesystem=fsys))


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
    reads its split with pyarrow), a :class:`slash.kafka.KafkaSource` (a
    topic from its start to the end offsets seen when it was made; each task
    reads its units of the partitions directly with librdkafka, no record
    through the JVM) or a Spark DataFrame (general path). The
    spellings are those of ``slash run``: ``window="tumbling:10s"``,
    ``"sliding:60s/10s"`` or ``"session:5s"``; ``aggs=["count", "sum:price"]``
    (count, sum, min, max, avg); ``filter="event_type == 'view'"`` (or a
    list, all must hold). Windows and durations also take ``d`` and Spark's
    spellings (``"tumbling:1 day"``); ``start_time="-8 hours"`` (or Spark's
    ``startTime=``) moves tumbling and sliding windows as Spark's
    ``window(t, size, slide, startTime)`` does (also spelled
    ``"tumbling:1 day+-8 hours"``). Output columns: ``window_start``,
    ``window_end`` (start inclusive, end exclusive; TimestampType for a
    TimestampType time column, INT96 included, and for a DateType one, which
    is taken at midnight in the session time zone as Spark casts it;
    TimestampNTZType for a TimestampNTZType one; int64 ms for an integer),
    the key columns (nulls kept: a null key is a group), then ``count``,
    ``count_COL``, ``sum_price``, ... (aggregates skip nulls, as Spark's).

    Every record of a bounded input is applied whatever its layout (part
    files that each span the time range, shuffled rows): no lateness is
    needed, and ``lateness`` is ignored there (it applies to streams).

    ``executors``: Slash executors = barrier tasks (default: all task slots);
    ``transport``: ``"shm"`` (one host) or ``"ofi:tcp"``. Other options go to
    :func:`run_aggregate` (``group=GroupConfig(...)``, ``result_dir=``,
    ``checkpoint=DIR``/``checkpoint_every=``: a long job's checkpoints, from
    which a barrier stage Spark retries after a lost task resumes).

    The stage runs when this function is called; the DataFrame reads the
    result files it wrote, so it is computed once whatever actions follow.
    """
    return run_aggregate(spark, source, time=time, window=window, key=key, aggs=aggs,
                         filter=filter, lateness=lateness, executors=executors,
                         transport=transport, **options).df
