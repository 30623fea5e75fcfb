"""``slash.spark.window_join``: a windowed equi-join of two inputs computed by
Slash executors in one Spark barrier stage (fast path only).

Each barrier task reads its own split of both inputs with pyarrow (rows never
pass through the JVM), merges them by event time into its join executor,
and returns the pairs of the (window, key) groups it leads, inline to the
driver when small, else as Parquet; the returned DataFrame holds or reads
them, like :func:`slash.spark.window_aggregate`.
A DataFrame side that is a Parquet scan (:mod:`slash.spark.dataframe`) is read
from its files the same way; any other DataFrame is written as Parquet by
Spark first (a barrier stage has one input partition per task, so two
DataFrames would need a union of different schemas) and its files removed
after the join.
"""
from __future__ import annotations

import json
import logging
import secrets
import shutil
import time
from dataclasses import dataclass, replace
from typing import Any, List, Optional, Sequence, Union

from slash.errors import InvalidArgument
from slash.executor import GroupConfig
from slash.query import JoinQuery
from slash.run.recovery.join import execute_join_split_checkpointed
from slash.run.plan import CheckpointPlan
from slash.runner import execute_join_split
from slash.sources import FileSource
from slash.window import with_start_time
from slash.spark import _batch_ckpt, _env
from slash.spark._tasks import barrier_stage, rank_errors, raise_task_failure
from slash.spark.dataframe import join_input
from slash.spark.batch import (INLINE_BYTES, EarlyFrame, group_for, inline_limit, is_dataframe,
                               one_start_time, run_in_group, session_time_zone, start_rendezvous)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _JoinPlan:
    query: JoinQuery
    left: FileSource
    right: FileSource
    group: GroupConfig
    token: str
    out_dir: str
    rendezvous: Optional[tuple]
    inline_bytes: int = 0
    checkpoint: Optional[CheckpointPlan] = None  # checkpoint=: see slash.spark._batch_ckpt


def _make_join_task(plan: _JoinPlan):
    def task(batches):
        t0 = time.perf_counter()
        from pyspark import BarrierTaskContext  # optional dependency, in a Spark task

        rank = BarrierTaskContext.get().partitionId()
        with rank_errors(rank):
            for _ in batches:  # the partition's id: only the trigger
                pass
            yield run_in_group(
                plan, t0,
                lambda rank, addresses, lst, m: execute_join_split(
                    plan.query, plan.left, plan.right, rank, addresses, lst, plan.group,
                    plan.token),
                lambda rank, addresses, lst, ck, link: execute_join_split_checkpointed(
                    plan.query, plan.left, plan.right, rank, addresses, lst, plan.group,
                    plan.token, ck, link),
                lambda res: plan.query.finalize(res, plan.left.schema, plan.right.schema))
    return task


def window_join(spark: Any, left: Any, right: Any, *, on: Union[str, Sequence[str]], time: str,
                window: Optional[str] = None, lateness: Union[None, int, str] = None,
                left_columns: Optional[Sequence[str]] = None,
                right_columns: Optional[Sequence[str]] = None, executors: Optional[int] = None,
                transport: str = "shm", result_dir: Optional[str] = None,
                slots_wait: float = 30.0, result_inline_bytes: int = INLINE_BYTES,
                checkpoint: Optional[str] = None, checkpoint_every: Union[str, int, float] = "10s",
                checkpoint_keep: int = 2, start_time: Optional[str] = None,
                startTime: Optional[str] = None, string_bytes: int = 32,
                interval: Optional[Any] = None) -> Any:
    """Joins ``left`` and ``right`` (Parquet/Arrow paths) on ``on`` within
    ``window`` (``"tumbling:12h"`` or ``"session:10s"``) and returns an
    ordinary Spark DataFrame: ``window_start``, ``window_end``, the key
    columns, then ``left_COL`` and ``right_COL`` for each side's payload
    columns (numbers, dates, timestamps, strings, binary), as ``slash run
    --join`` writes them; ``string_bytes``: the most bytes a string or
    binary payload value holds (:class:`slash.query.JoinQuery`). A small result
    returns to the driver over the rendezvous link and is an in-memory
    DataFrame (``result_inline_bytes``, as for
    :func:`slash.spark.run_aggregate`); a larger one is Parquet files.

    ``checkpoint``, ``checkpoint_every``, ``checkpoint_keep``: as for
    :func:`slash.spark.run_aggregate`: a retried barrier stage resumes from
    the newest complete checkpoint (both inputs' positions) instead of
    starting over; the result is the same rows. ``start_time`` (or Spark's
    ``startTime``): moves tumbling windows as for
    :func:`slash.spark.window_aggregate`. ``window="sliding:SIZE/SLIDE"``
    pairs rows once per sliding window both fall in; ``interval=("-5s",
    "+10s")`` instead of a window: pairs with left time between right time
    - 5 s and right time + 10 s, inclusive, without window columns
    (:mod:`slash.interval`).

    >>> # df = window_join(spark, "persons/", "auctions/", on="id", time="ts", window="tumbling:12h")
    """
    _env.require_pyspark()
    query = JoinQuery(time=time, interval=interval,
                      window=window if window is None
                      else with_start_time(window, one_start_time(start_time, startTime)),
                      on=on, left_columns=left_columns,
                      right_columns=right_columns, lateness=0 if lateness is None else lateness,
                      time_zone=session_time_zone(spark), string_bytes=string_bytes)
    token = secrets.token_hex(16)
    root = _env.result_root(spark, result_dir).rstrip('/')
    written: List[str] = []
    try:
        return _run_join(spark, query, left, right, executors, transport, slots_wait,
                         result_inline_bytes, checkpoint, checkpoint_every, checkpoint_keep,
                         token, f"{root}/j-{token[:12]}", f"{root}/in-{token[:12]}", written)
    finally:
        for d in written:  # the inputs Spark wrote: the result never reads them
            shutil.rmtree(d, ignore_errors=True)


def _side_source(spark: Any, src: Any, side: str, query: JoinQuery,
                 columns: Optional[Sequence[str]], in_dir: str, written: List[str]) -> FileSource:
    """A side's FileSource: its paths, or a DataFrame read as its plan allows
    (:func:`slash.spark.dataframe.join_input`)."""
    if not is_dataframe(src):
        return FileSource(src)  # UnknownName / SchemaError before work
    cols = list(dict.fromkeys([query.time, *query.on, *(columns or ())]))
    written.append(f"{in_dir}-{side}")  # removed even when Spark fails half way through writing it
    source, made = join_input(spark, src, side, cols, query.time, written[-1])
    if made is not None and made != written[-1]:
        written.append(made)
    return source


def _run_join(spark: Any, query: JoinQuery, left: Any, right: Any, executors: Optional[int],
              transport: str, slots_wait: float, result_inline_bytes: int,
              checkpoint: Optional[str], checkpoint_every: Union[str, int, float],
              checkpoint_keep: int, token: str, out_dir: str, in_dir: str,
              written: List[str]) -> Any:
    # a DataFrame side's payload by default: the DataFrame's columns, not its files'
    if query.left_columns is None and is_dataframe(left):
        query = replace(query, left_columns=[c for c in left.columns if c not in query.on])
    if query.right_columns is None and is_dataframe(right):
        query = replace(query, right_columns=[c for c in right.columns if c not in query.on])
    lsrc = _side_source(spark, left, "left", query, query.left_columns, in_dir, written)
    rsrc = _side_source(spark, right, "right", query, query.right_columns, in_dir, written)
    query.check(lsrc.schema, rsrc.schema)
    n, group = group_for(spark, query, executors, transport, None, slots_wait)
    ck_plan = None
    if checkpoint is not None:
        ck_plan, group = _batch_ckpt.make_plan(checkpoint, "window_join", query, (lsrc, rsrc), n,
                                               group, checkpoint_every, checkpoint_keep)
    inline = inline_limit(result_inline_bytes, n)
    early = EarlyFrame(spark, out_dir, n)
    rdv, ckd = start_rendezvous(spark, n, token, early, ck_plan)
    plan = _JoinPlan(query, lsrc, rsrc, group, token, out_dir, rdv.address, inline, ck_plan)
    stage = barrier_stage(spark, n, _make_join_task(plan))
    if ck_plan is not None:
        stage = _batch_ckpt.retryable(stage)
    sc = spark.sparkContext
    sc.setJobDescription(f"slash join on {list(query.on)} within {query.window}, {n} executors")
    try:
        try:
            rows = stage.collect()
        except Exception as e:
            raise_task_failure(e, "slash.spark.window_join", rdv.root_cause())
        # before the links close: inline parts may still be on their way
        df = early.frame({r["rank"]: (json.loads(r["metrics"]).get("attempt"), r["path"]) for r in rows},
                         group.timeout)
    finally:
        sc.setJobDescription(None)
        rdv.close()
    log.info("slash.spark.window_join: %d executors, %d result rows", n, sum(r["rows"] for r in rows))
    if ckd is not None:
        log.info("slash.spark.window_join: checkpoints and recoveries: %s", ckd.summary())
    return df
