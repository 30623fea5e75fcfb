"""The one supervisor of a checkpointed group: it runs the group's attempts
until one finishes.

An attempt is one group of processes (or one Spark barrier job) from a
checkpoint, or the beginning, to the end of its input. It ends in one of
three ways, and the supervisor does the same thing for every entry point:

* it **finishes**: the supervisor returns what the attempt returned;
* it stops at a committed cut for a **rescale beyond the provisioned group**
  (it raises :class:`Rescale`): the next attempt starts from that checkpoint
  with the new executor count;
* it **fails** (it raises a :class:`slash.run.failure.Failed`): the
  :class:`slash.run.failure.RestartPolicy` decides whether a restart can cure
  it (within ``max_restarts``; a usage error, a corrupt checkpoint or a full
  disk are final) and the next attempt starts from the newest complete
  checkpoint; the recovery is recorded in :attr:`Supervisor.recoveries`.

What differs between the entry points is a parameter, never a copy of this
loop: how an attempt runs (a callable given the checkpoint it starts from),
what a rescale and a recovery change before the next attempt (callbacks),
and the failure policy. This is the split Flink makes between a task's life
cycle, its ``RestartStrategy`` and the ``CheckpointCoordinator``'s store.

The module also holds the two ends every checkpointed run shares: a
directory that holds the query's finished run returns its result without
running (:meth:`Supervisor.finished_before`), and the result of the last
attempt is the committed windows of its checkpoint plus what it fired
(:meth:`Supervisor.finish`). A transactional sink (a
:class:`slash.run.delivery.Delivery`) is fed at those ends and at each commit
(:meth:`Supervisor.committed`), so every checkpointed driver delivers
exactly once the same way. :class:`RescaleCut` is how an attempt asks for
the cut a rescale restarts from, and :class:`Reports` what an attempt's
driver loop keeps of its ranks' reports.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import pyarrow as pa

from slash._ipc import from_ipc, to_ipc
from slash.checkpoint import Checkpoint, CheckpointStore
from slash.errors import CheckpointCorrupt, InvalidArgument
from slash.run.delivery import Delivery
from slash.run.failure import Failed, RestartPolicy
from slash.run.output import concat_as_first
from slash.run.protocol import CheckpointNow, CheckpointWritten, Finished, Progress, Resumed

log = logging.getLogger(__name__)

T = TypeVar("T")


class Rescale(Exception):
    """An attempt stopped at committed checkpoint ``ckpt`` so that the next
    starts with ``count`` executors (asked for at ``asked_at``, cut at
    ``cut_at``: monotonic seconds)."""

    def __init__(self, count: int, ckpt: Optional[int], asked_at: Optional[float] = None) -> None:
        super().__init__(f"restart with {count} executors from checkpoint {ckpt}")
        self.cut_at = time.monotonic()
        self.count, self.ckpt = count, ckpt
        self.asked_at = self.cut_at if asked_at is None else asked_at


class RescaleCut:
    """How one attempt asks for the cut a rescale beyond its group restarts
    from: rank 0 is asked for a checkpoint (at its next epoch boundary), and
    the first checkpoint committed after the ask ends the attempt
    (:meth:`committed` raises :class:`Rescale`)."""

    def __init__(self) -> None:
        self.count: Optional[int] = None  # the executor count asked for, once asked
        self.asked_at = 0.0
        self.after = 0  # checkpoints committed when the cut was asked for

    def ask(self, send: Callable[[int, Any], None], count: int, asked_at: float,
            committed: int) -> None:
        """Asks rank 0 for a cut (once: until :meth:`again`)."""
        if self.count is None:
            send(0, CheckpointNow())
            self.count, self.asked_at, self.after = count, asked_at, committed

    def committed(self, ckpt: int, committed: int) -> None:
        """Checkpoint ``ckpt`` committed, the ``committed``-th: raises
        :class:`Rescale` if it is a cut asked for."""
        if self.count is not None and committed > self.after:
            raise Rescale(self.count, ckpt, self.asked_at)

    def again(self) -> None:
        """The cut asked for was not committed: ask again."""
        self.count = None


class Reports:
    """What one attempt's driver loop keeps of its ``n`` ranks' reports: each
    rank's records read (the records a failure makes replay), the ranks that
    resumed, each cut's images until every rank wrote its own, and each
    rank's result and metrics once it finished."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.t0 = time.monotonic()
        self.progress: Dict[int, int] = {}
        self.resumed: set = set()
        self.parts: List[Optional[pa.Table]] = [None] * n
        self.per_exec: List[Dict[str, Any]] = [{} for _ in range(n)]
        self.late: List[pa.Table] = []  # the late rows the ranks found (their Finished's)
        self.done = 0
        self._written: Dict[int, Dict[int, Tuple[Any, ...]]] = {}

    def fail(self, rank: Optional[int], cause: str, err: BaseException) -> Failed:
        """The attempt's :class:`Failed`, carrying the records each rank had read."""
        err._slash_progress = dict(self.progress)  # type: ignore[attr-defined]
        return Failed(rank, cause, err)

    def take(self, rep: Any) -> Any:
        """Keeps ``rep`` if it is one of the reports every attempt keeps, and
        returns: for a :class:`Resumed`, whether every rank has now resumed;
        for a :class:`CheckpointWritten`, every rank's (files, segments,
        stats) once every rank wrote that cut, else None; True for a
        :class:`Progress` or a :class:`Finished`; None for any other report
        (the caller's)."""
        if isinstance(rep, Resumed):
            self.resumed.add(rep.rank)
            self.progress[rep.rank] = rep.records
            return len(self.resumed) == self.n
        if isinstance(rep, Progress):
            self.progress[rep.rank] = rep.records
            return True
        if isinstance(rep, CheckpointWritten):
            cut = self._written.setdefault(rep.ckpt_id, {})
            cut[rep.rank] = (rep.files, rep.segments, rep.stats)
            return self._written.pop(rep.ckpt_id) if len(cut) == self.n else None
        if isinstance(rep, Finished):
            self.parts[rep.rank] = rep.result
            self.per_exec[rep.rank] = rep.metrics
            if rep.late is not None:
                self.late.append(rep.late)
            self.done += 1
            return True
        return None

    @property
    def running(self) -> bool:
        """Whether a rank has not finished yet."""
        return self.done < self.n

    def finished(self, rank: int) -> bool:
        """Whether ``rank`` has sent its result (it takes no further checkpoint)."""
        return self.parts[rank] is not None

    def tables(self) -> List[pa.Table]:
        return [t for t in self.parts if t is not None]


def newest_shape(store: CheckpointStore, partitions: Optional[int], what: str = "run"
                 ) -> Optional[Tuple[int, int]]:
    """(executors, key partitions) of the newest checkpoint in ``store`` (None
    if it holds none). The partition count stays fixed for the life of the
    checkpoints, so a run that asks for another (``partitions``; None if
    unset) is refused."""
    shape = store.newest_shape()
    if shape is not None and partitions is not None and partitions != shape[1]:
        raise InvalidArgument(f"checkpoint directory {store.dir!r} holds checkpoints with "
                              f"{shape[1]} key partitions; this {what} asks for {partitions} "
                              "(the count stays fixed: leave it unset)")
    return shape


class Supervisor:
    """Runs the attempts of one checkpointed group (see the module doc) over
    ``store`` (None: the attempts find their checkpoint themselves, as a Spark
    stream's tasks do) under ``policy``. ``delivery``: the run's
    transactional sink, fenced and caught up before the first attempt, fed
    each committed checkpoint and, at the end, what no checkpoint covers."""

    def __init__(self, policy: RestartPolicy, store: Optional[CheckpointStore] = None,
                 delivery: Optional[Delivery] = None) -> None:
        self.policy, self.store, self.delivery = policy, store, delivery
        self.restarts = 0  #: failures restarted from
        self.attempt = 0  #: the current attempt's number (0: the first)
        self.replayed = 0  #: records read again after the failures (a lower bound)
        #: one entry per restart after a failure: cause, rank, from_checkpoint,
        #: records_replayed, seconds_to_resume (once every rank resumed)
        self.recoveries: List[Dict[str, Any]] = []
        self.failed_at: Optional[float] = None  # the last failure's time, until the next rescale
        #: the checkpoint the current attempt started from
        self.start: Optional[Checkpoint] = None
        self._first: Any = self  # not read yet

    @property
    def first(self) -> Optional[Checkpoint]:
        """The checkpoint the first attempt starts from: the directory's newest
        when first asked (once the store has the run's partition count: a
        checkpoint of another is refused)."""
        if self._first is self:
            self._first = self.store.latest() if self.store is not None else None
        return self._first

    def finished_before(self, late: Optional[List[pa.Table]]) -> Optional[pa.Table]:
        """The result of the query's finished run ``store`` holds (None if
        none): a run started again over a finished directory returns it
        without running; ``late`` receives its stored late rows."""
        assert self.store is not None
        stored = self.store.finished()
        if stored is None:
            return None
        log.info("checkpoint directory %r holds this query's finished run: returning its result "
                 "without running again", self.store.dir)
        if late is not None:
            kept = self.store.finished_late()
            if kept is None:
                log.warning("the finished run in %r ran without late_output=: its late rows were "
                            "not kept", self.store.dir)
            else:
                late.append(from_ipc(kept))
        result = from_ipc(stored)
        if self.delivery is not None:  # what a driver that died after finishing did not deliver
            self.delivery.finished(result, self.store.latest())
        return result

    def run(self, attempt: Callable[[Optional[Checkpoint]], T], *,
            rescaled: Callable[[Rescale], None],
            failed: Callable[[Failed, Dict[str, Any], Optional[Checkpoint]], None]) -> T:
        """Runs ``attempt(checkpoint to start from)`` until one returns.
        ``rescaled(r)`` shapes the next attempt after a :class:`Rescale`;
        ``failed(f, recovery, checkpoint)`` after a failure the policy lets
        restart (``recovery``: the entry appended to :attr:`recoveries`, which
        the caller may complete; ``checkpoint``: the newest, which the next
        attempt starts from, or None)."""
        if self.delivery is not None:  # fence a dead driver's sink; deliver what it committed
            self.delivery.recover(self.first)
        while True:
            if self.store is not None:
                self.start = self.first if self.attempt == 0 else self.store.latest()
            try:
                return attempt(self.start)
            except Rescale as r:
                rescaled(r)
                self.failed_at = None
            except Failed as f:
                if not self.policy.curable(f.error):
                    raise f.error
                # the newest complete checkpoint; interrupted ones are deleted, also when the
                # policy gives up: the directory is left as a later run resumes from it
                last = self.store.latest(verify=False) if self.store is not None else None
                self.policy.check(f, self.restarts)
                lost = _replayed(f.error, last)
                self.replayed += lost
                self.restarts += 1
                self.failed_at = time.monotonic()
                entry = {"cause": f.cause, "rank": f.rank,
                         "from_checkpoint": last.id if last is not None else None,
                         "records_replayed": lost}
                self.recoveries.append(entry)
                failed(f, entry, last)
            self.attempt += 1

    def committed(self, ck: Checkpoint) -> None:
        """Checkpoint ``ck`` committed (its manifest written): its windows to the sink."""
        if self.delivery is not None:
            self.delivery.committed(ck)

    def resumed(self) -> None:
        """Every rank of the current attempt restored: a recovery's time to resume."""
        if self.failed_at is not None and self.recoveries and \
                "seconds_to_resume" not in self.recoveries[-1]:
            self.recoveries[-1]["seconds_to_resume"] = round(time.monotonic() - self.failed_at, 3)

    def finish(self, tables: List[pa.Table], finalize: Callable[[pa.Table], pa.Table],
               checkpoints: int, late_now: List[pa.Table],
               late: Optional[List[pa.Table]]) -> pa.Table:
        """The run's result once the last attempt returned ``tables`` (what
        its ranks fired): the windows committed by the checkpoints before it
        plus those, finalized; stored in the directory as the finished run,
        with the late rows (``late``, if the caller wants them, receives
        every committed cut's and ``late_now``, the last attempt's)."""
        assert self.store is not None
        ck = self.start
        base = [from_ipc(ck.read_segment(rel)) for rel in sorted(ck.segments())] if ck else []
        result = finalize(pa.concat_tables([t.cast(tables[0].schema)
                                            if t.schema != tables[0].schema else t
                                            for t in base] + tables))
        kept: Optional[bytes] = None
        if late is not None:
            if ck is not None:
                late.extend(from_ipc(ck.read_segment(rel)) for rel in sorted(ck.late_segments()))
            late.extend(late_now)
            kept = to_ipc(concat_as_first(late) if late else pa.table({}))
        self.store.finish(to_ipc(result), {"checkpoints": checkpoints,
                                           "recoveries": len(self.recoveries)}, kept)
        if self.delivery is not None:  # the windows after the last cut
            self.delivery.finished(result, self.store.latest())
        return result


def _replayed(error: BaseException, last: Optional[Checkpoint]) -> int:
    """Records the failed attempt had read past checkpoint ``last`` (as last
    reported: a lower bound); carried on the Failed's progress."""
    prog: Dict[int, int] = getattr(error, "_slash_progress", {})
    cut: Dict[int, int] = {}
    if last is not None:
        for r in prog:
            try:
                cut[r] = int(last.rank_info(r)["records"])
            except (CheckpointCorrupt, KeyError):
                cut[r] = 0
    return sum(max(0, v - cut.get(r, 0)) for r, v in prog.items())
