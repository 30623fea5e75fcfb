"""Checkpoints for the bounded Spark paths: ``window_aggregate`` and
``window_join`` with ``checkpoint=DIR`` (long jobs; docs/recovery.md,
"window_aggregate / window_join", and docs/spark.md for what makes a
DataFrame partition's position stable across attempts).

A barrier *ResultStage* is never retried by Spark, a barrier
*ShuffleMapStage* is, as a whole: :func:`retryable` follows the barrier
stage with a one-partition shuffle of its summary rows, so a new attempt's
tasks find the newest complete checkpoint and go on from it. A task
(:func:`run_task`) asks the driver where to start, then runs
:func:`slash.run.recovery.checkpointed.execute_split_checkpointed` (or its join twin) over a
link that tags each report with its attempt; its result is the windows it
fired plus its share (segment i to rank ``i mod N``) of the resumed
checkpoint's result segments. The driver's side (:class:`BatchCheckpoints`,
in the rendezvous thread) answers every rank of an attempt alike and
commits a cut once every rank of the current attempt reported it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import socket
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pyarrow as pa

from slash._ipc import from_ipc
from slash.checkpoint import CheckpointStore
from slash.errors import CheckpointCorrupt, InvalidArgument, NotSupported, Timeout
from slash.run.recovery.checkpointed import fingerprint
from slash.run.ckpt import commit
from slash.run.plan import AttemptPlan, CheckpointEvery, CheckpointPlan
from slash.run.protocol import CheckpointWritten, Resumed
from slash.sources import Watermark

log = logging.getLogger(__name__)


def retryable(stage: Any) -> Any:
    """The barrier stage followed by a one-partition shuffle of its summary
    rows: Spark then retries the barrier stage as a whole when a task fails
    (a barrier ResultStage would abort the job instead). An RDD of dicts or
    a DataFrame."""
    if hasattr(stage, "toDebugString"):  # the fast path's barrier RDD
        return stage.map(lambda row: (0, row)).partitionBy(1).values()
    return stage.repartition(1)


def make_plan(directory: Any, what: str, query: Any, source: Any, n: int, group: Any,
              every: Any, keep: int) -> Tuple[CheckpointPlan, Any]:
    """The checkpoint plan of one window_aggregate / window_join call and
    its GroupConfig, checked against what the directory already holds: its
    key partition count is kept, and positions resume only with the
    executor count that cut them (NotSupported otherwise). ``source``: the
    FileSource(s) / GeneratorSource, or the Spark DataFrame."""

    if not isinstance(directory, (str, os.PathLike)) or "://" in os.fspath(directory):
        raise NotSupported(f"checkpoint={directory!r}: a mounted directory every Spark worker and "
                           "the driver see (a local path), not a URI")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise InvalidArgument(f"checkpoint_keep must be an int >= 1, got {keep!r}")
    policy = CheckpointEvery.parse(every)
    d = os.path.abspath(os.fspath(directory))
    fp = f"spark {what} " + (f"{query!r} over {dataframe_label(source)}" if hasattr(source, "_jdf")
                             else fingerprint(query, source))
    parts = group.partitions_for(n)
    shape = CheckpointStore(d, fingerprint=fp, executors=n, partitions=parts, keep=keep).newest_shape()
    if shape is not None:
        ck_n, ck_parts = shape
        if group.partitions is not None and group.partitions != ck_parts:
            raise InvalidArgument(f"checkpoint directory {d!r} holds checkpoints with {ck_parts} key "
                                  f"partitions; this call asks for {group.partitions} (leave it unset)")
        parts = ck_parts
        if ck_n != n:
            raise NotSupported(f"checkpoint directory {d!r} was cut with {ck_n} executors and this "
                               f"call has {n}: resume with executors={ck_n} (a barrier stage's "
                               "input positions are per task)")
    group = dataclasses.replace(group, partitions=parts)
    group.partitions_for(n)
    return CheckpointPlan(d, fp, n, parts, keep, policy), group


def dataframe_label(df: Any) -> str:
    """A DataFrame in a fingerprint: its analyzed plan (hashed) and partition count."""
    plan = df._jdf.queryExecution().analyzed().toString()
    return f"dataframe {hashlib.sha1(plan.encode()).hexdigest()[:16]} of {df.rdd.getNumPartitions()} partitions"


class SortedPartition:
    """A Spark partition's rows (general path, with checkpoints) as a
    bounded source whose item count is a stable position: the partition is
    taken whole and sorted by ``time``, then by the other columns, so an
    attempt that gets the same rows in another order reads the same
    batches. It yields Watermarks between batches (the rows are in time
    order), so windows fire as the input goes by. The partition is held in
    the task's memory."""

    bounded = True

    def __init__(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch], time: str) -> None:
        got = [b for b in batches if b.num_rows]
        table = pa.Table.from_batches(got) if got else schema.empty_table()
        if table.schema != schema:
            table = table.select(schema.names).cast(schema)
        keys = [time] + [c for c in table.column_names if c != time and _sortable(table.schema.field(c).type)]
        self.table = table.sort_by([(c, "ascending") for c in keys]).combine_chunks()
        self.schema = schema
        self._time = time

    def may_have_nulls(self, column: str) -> bool:
        return column in self.table.column_names and self.table.column(column).null_count > 0

    def unit_rows(self) -> int:
        """Rows per batch: about 1/32 of the partition, 256 to 65536 (a
        function of the row count only, so every attempt cuts alike)."""
        return max(256, min(65536, -(-self.table.num_rows // 32)))

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             time: Optional[str] = None) -> Iterator[Any]:
        """The whole partition (it is this rank's input), in time order, in
        batches of :meth:`unit_rows`; with ``time``, a Watermark before each
        batch after the first: its first time, the smallest left."""
        t = self.table.select(columns) if columns else self.table
        tc = self.table.column(self._time)
        step = self.unit_rows()
        for off in range(0, t.num_rows, step):
            if time is not None and off and tc[off].is_valid:  # nulls sort last: none left to bound
                yield Watermark(tc[off])
            yield from t.slice(off, step).to_batches()


def _sortable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_timestamp(t) or
            pa.types.is_date(t) or pa.types.is_decimal(t) or pa.types.is_binary(t))


class _TaskLink:
    """execute_split_checkpointed's link to its parent, over the task's
    rendezvous connection: reports go to the driver tagged with the group;
    the driver sends nothing back while the executor runs."""

    def __init__(self, conn: Any, group: int) -> None:
        self._conn, self._group = conn, group

    def put(self, msg: Any) -> None:
        self._conn.send(("bck", self._group, msg))

    def poll(self, timeout: float = 0.0) -> bool:
        return False

    def get(self, timeout: Optional[float] = None) -> Any:
        raise Timeout("the Spark driver sends no requests to a bounded job's executors")


def _resume_point(conn: Any, rank: int, group: int, timeout: float) -> Tuple[Optional[int], int, int]:
    conn.send(("bck-resume?", rank, group, (socket.gethostname(), os.getpid())))
    if not conn.poll(timeout):
        raise Timeout(f"rank {rank}: the driver did not say where to resume within {timeout} s")
    msg = conn.recv()
    if msg[0] == "bck-resume-error":
        raise CheckpointCorrupt(msg[1])
    _, resume_id, next_id, attempt = msg
    return resume_id, next_id, attempt


def run_task(ck: CheckpointPlan, conn: Any, group: int, rank: int, n: int, timeout: float,
             run: Callable[[AttemptPlan, Any], Tuple[pa.Table, Dict[str, Any]]]
             ) -> Tuple[pa.Table, Dict[str, Any]]:
    """In a barrier task: asks where to resume, runs ``run(plan, link)``
    (execute_split_checkpointed or its join twin) and adds this rank's share
    of the windows the resumed checkpoint had committed. Returns (the
    windows, unfinalized; the executor's metrics, with ``records_in`` = the
    records of this rank's input over all attempts, ``records_in_attempt``
    those this attempt read)."""
    if conn is None:
        raise InvalidArgument("checkpoint= needs rendezvous='driver' (the driver commits the checkpoints)")
    resume_id, next_id, attempt = _resume_point(conn, rank, group, timeout)
    plan = AttemptPlan(ck.directory, ck.fingerprint, ck.executors, ck.partitions, ck.keep, ck.every,
                 resume_id, next_id, attempt)
    mine: List[pa.Table] = []
    before = 0  # records this rank had read by the cut
    if resume_id is not None:  # read now: newer checkpoints of this attempt prune this one
        c = plan.store().load(resume_id)
        mine = [from_ipc(c.read_segment(s)) for i, s in enumerate(sorted(c.segments())) if i % n == rank]
        before = int(c.rank_info(rank).get("records", 0))
    res, m = run(plan, _TaskLink(conn, group))
    m["records_in"] = int(m.get("records_read", m.get("records_in", 0)))
    m["records_in_attempt"] = m["records_in"] - before
    m["resumed_from"] = resume_id
    if mine:
        res = pa.concat_tables([t.cast(res.schema) if t.schema != res.schema else t
                                for t in mine] + [res])
    return res, m


class BatchCheckpoints:
    """The driver's side (see the module doc). ``on_message`` runs in the
    rendezvous thread; it answers over ``send_to(rank, msg)``."""

    def __init__(self, plan: CheckpointPlan, n: int, send_to: Callable[[int, Any], None],
                 lost: Callable[[], Optional[int]]) -> None:
        self.plan, self.n = plan, n
        self.store = plan.store()
        self.send_to, self._lost = send_to, lost
        first = self.store.latest()  # CheckpointCorrupt names a bad file, before anything runs
        self.resumed_from: Optional[int] = first.id if first is not None else None
        self.group: Optional[int] = None
        self.attempt = -1
        self.decision: Tuple[Any, ...] = ()
        self.reports: Dict[int, Dict[int, Tuple[Any, ...]]] = {}
        self.checkpoints: List[Dict[str, Any]] = []
        self.recoveries: List[Dict[str, Any]] = []
        self.resumed: set = set()
        self._heard = self._lost_at = 0.0

    def on_message(self, rank: int, msg: Tuple[Any, ...]) -> bool:
        """Handles a checkpoint message; False if it is none."""
        kind = msg[0]
        if kind == "bck-resume?":
            _, _, group, _pid = msg
            if group != self.group:
                self._new_group(group)
            self.send_to(rank, self.decision)
        elif kind == "bck":
            _, group, inner = msg
            if group != self.group:  # a report of a failed attempt
                return True
            self._heard = time.monotonic()  # ranks report progress every 50 ms while they read
            if isinstance(inner, CheckpointWritten):
                cid = inner.ckpt_id
                self.reports.setdefault(cid, {})[inner.rank] = (inner.files, inner.segments,
                                                                inner.stats)
                if len(self.reports[cid]) == self.n:
                    commit(self.store, cid, self.reports.pop(cid), self.checkpoints)
            elif isinstance(inner, Resumed):
                self.resumed.add(inner.rank)
                if len(self.resumed) == self.n and self.recoveries and \
                        "seconds_to_resume" not in self.recoveries[-1]:
                    self.recoveries[-1]["seconds_to_resume"] = round(time.monotonic() - self._lost_at, 3)
        else:
            return False
        return True

    def _new_group(self, group: int) -> None:
        self.attempt += 1
        self.group, self.reports, self.resumed = group, {}, set()
        self._lost_at = self._heard  # the failed attempt's last word: the failure, within ~50 ms
        try:
            ck = self.store.latest()
        except CheckpointCorrupt as e:
            self.decision = ("bck-resume-error", str(e))
            return
        cid = ck.id if ck is not None else None
        if self.attempt > 0:
            rank = self._lost()
            self.recoveries.append({"cause": "Spark retried the barrier stage" +
                                    (f" (rank {rank}'s task was lost)" if rank is not None else ""),
                                    "rank": rank, "from_checkpoint": cid})
            log.warning("slash.spark: the barrier stage is retried (attempt %d); resuming from %s",
                        self.attempt, f"checkpoint {cid}" if cid is not None else "the beginning")
        self.decision = ("bck-resume", cid, (cid + 1) if cid is not None else 1, self.attempt)

    def summary(self) -> Dict[str, Any]:
        return {"checkpoints": list(self.checkpoints), "recoveries": [dict(r) for r in self.recoveries],
                "resumed_from": self.resumed_from, "attempts": self.attempt + 1}
