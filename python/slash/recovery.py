"""The recovery driver: a :func:`slash.runner.run` that survives executor
failures (``run(..., checkpoint=DIR)``; the protocol, the files and the
guarantee are docs/recovery.md's "How it works" and "The files").

Rank 0 asks for a cut every ``checkpoint_every``; every rank writes its
image and the windows it fired before the cut (a background writer,
:class:`slash.run.ckpt.Writer`) and reports it once durable; the driver
(:func:`run_checkpointed`, one :class:`slash.run.driver.Driver` per attempt
under the one :class:`slash.run.supervisor.Supervisor`) commits the cut's
manifest once every rank reported it. A failure restarts the whole group
from the newest complete checkpoint; a finished run's directory returns
its stored result. A FileSource's position is also recorded in global
terms, so a checkpoint resumes with another executor count
(:func:`resplit`); :class:`CheckpointedRun` rescales a running group that
way. The test kill hook ``SLASH_TEST_KILL`` is :mod:`slash.run.faults`'s.

Invariant: each window is in the result exactly once: those fired before
the newest committed cut come from its result segments, the rest fire
again, identically, in the replay.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.checkpoint import Checkpoint, CheckpointStore
import slash.control
from slash.control import MoveWaiters, rebalance_spec
from slash.control.logic import recorded_logic
from slash.errors import InvalidArgument, InvalidState, SystemFailure, Timeout
from slash.executor import GroupConfig
from slash.launcher import ProcessGroup
from slash.query import Query
from slash.run.ckpt import checkpoint_leaders, part_name, read_partitions  # noqa: F401 (re-exported)
from slash.run.delivery import Delivery
from slash.run.driver import Committer, Driver, serve_rounds
from slash.run.failure import Failed, Reported, RestartPolicy, failed
from slash.run.plan import AttemptPlan, CheckpointEvery
from slash.run.protocol import Epoch, Metrics, Move, Moved, Resumed
from slash.run.resume import check_resplittable, resplit  # noqa: F401 (re-exported)
from slash.run.supervisor import Rescale, RescaleCut, Supervisor, newest_shape
from slash.sources import describe, input_stamp, watermarks_from_source
from slash.worker import RankSpec, run_rank, worker

log = logging.getLogger(__name__)



def execute_split_checkpointed(query: Query, source: Any, rank: int, addresses: List[str],
                               listener: Any, group: GroupConfig, token: str, plan: AttemptPlan,
                               link: Any) -> Tuple[pa.Table, Dict[str, Any]]:
    """One executor's run with checkpoints (see the module doc; a Spark
    batch task's, over its task link): restores from ``plan.resume_id`` if
    given, then reads, pushes and cuts. Returns the windows this executor
    fired in this attempt and its metrics. The loop is
    :class:`slash.run.rank.RankLoop` with :class:`slash.run.rank.Checkpointing`."""
    return run_rank(RankSpec(query, source, group, token, plan=plan), rank, addresses, listener,
                    link)


def fingerprint(query: Query, source: Any) -> str:
    """What identifies a run in its checkpoint directory: the query and its input
    (a join's: both inputs)."""
    if isinstance(source, tuple):
        return " and ".join(fingerprint(query, s) for s in source)
    return f"{query!r} over {describe(source)}"


class CheckpointedRun:
    """Operations on a running checkpointed run (:func:`slash.runner.run`
    with ``checkpoint=`` and ``control=CheckpointedRun()``), for a control
    plane (e.g. a control socket behind ``slash ctl``). Thread-safe: call its
    methods from any thread while ``run`` runs in another.

    :meth:`rescale` changes the executor count by checkpoint and restart: the
    group takes a checkpoint at its next cut, stops, and starts again with
    the new count from that checkpoint. The output stays exactly-once (the
    result equals the failure-free run's) because that is exactly the path
    of a recovery: windows fired before the cut are in the committed
    segments, the ones after it fire again in the new group. Records read
    after the cut by the old group are read again by the new one.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._want: Optional[int] = None  # a requested executor count not yet applied
        self._asked_at: Optional[float] = None
        self._result: Optional[Dict[str, Any]] = None
        self._seq = 0  # rescales completed
        self._state = "new"  # new, running, ended
        self._source: Any = None
        self._partitions = 0
        self._dir = ""
        self.executors: Optional[int] = None  #: the current group's executor count
        self.rescales: List[Dict[str, Any]] = []  #: one entry per completed rescale
        #: called with (rank, snapshot) for each live metrics report (``live_every``)
        self.on_metrics: Optional[Callable[[int, Dict[str, Any]], None]] = None
        #: called with a line of text on each recovery (a mark on the live page)
        self.on_event: Optional[Callable[[str], None]] = None
        #: (epoch_ms, epoch_bytes) set by :meth:`set_epoch` (0: unchanged), else None
        self.epoch: Optional[Tuple[int, int]] = None
        self._epoch_seq = 0
        self._moves = MoveWaiters()
        self._move_queue: List[Tuple[int, Dict[str, Any]]] = []  # (id, spec) not sent yet
        #: each rank's latest live metrics snapshot (with ``live_every``)
        self.per: Dict[int, Dict[str, Any]] = {}

    def rebalance(self, moves: Any = None, from_rank: Optional[int] = None,
                  to_rank: Optional[int] = None, timeout: Optional[float] = 60.0
                  ) -> Dict[str, Any]:
        """Moves partition leadership in the running group (live, no restart):
        ``moves`` ({partition: rank} or ``"P:R,P:R"``) explicitly, else half
        the partitions of ``from_rank`` to ``to_rank``, each chosen from the
        live metrics when not given (the most merge time / delta bytes
        received, the least; needs ``live_every``). Sent to rank 0 by the
        driver's loop; returns ``{"moves": {p: r}, "map_version": v}`` once
        rank 0 accepted them (they take effect at each executor's next epoch
        end). Raises InvalidArgument for a bad partition or rank,
        InvalidState when the run is not running or rank 0 has read all of
        its input, Timeout after ``timeout`` s."""
        with self._cond:
            if self._state != "running":
                raise InvalidState(f"rebalance: {self._not_running()}")
            n = self.executors or 0
            per = dict(self.per)
        args = {"moves": moves, "from_rank": from_rank, "to_rank": to_rank}
        spec = rebalance_spec(args, per, n)
        rid, ev = self._moves.new()
        with self._cond:
            self._move_queue.append((rid, spec))
        return self._moves.wait(rid, ev, timeout if timeout is not None else 1e9)

    def _take_moves(self) -> List[Tuple[int, Dict[str, Any]]]:
        with self._cond:
            got, self._move_queue = self._move_queue, []
            return got

    def set_epoch(self, epoch_ms: Optional[int] = None, epoch_bytes: Optional[int] = None) -> None:
        """Changes every executor's epoch length (``Executor.set_epoch``),
        sent over their links by the driver's loop within ~50 ms; a group
        started later (a rescale, a recovery) starts with it."""
        if epoch_ms is None and epoch_bytes is None:
            raise InvalidArgument("set_epoch: give epoch_ms or epoch_bytes")
        for name, v in (("epoch_ms", epoch_ms), ("epoch_bytes", epoch_bytes)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
        with self._cond:
            if self._state == "ended":
                raise InvalidState("set_epoch: the run has ended")
            self.epoch = (epoch_ms or 0, epoch_bytes or 0)
            self._epoch_seq += 1

    def rescale(self, n: int, timeout: Optional[float] = 120.0) -> Dict[str, Any]:
        """Restarts the running group with ``n`` executors from a checkpoint
        cut after this call; returns when the new group has restored and
        resumed reading: ``{"from": old n, "to": n, "checkpoint": id,
        "seconds_to_cut": request to the checkpoint's commit,
        "seconds_to_resume": request to every new executor resumed}``.

        Raises InvalidArgument for an n outside 1..partitions (the partition
        count stays fixed), NotSupported when the source cannot be re-split
        (a generator or a table: see :func:`check_resplittable`),
        InvalidState when the run is not running or ended before a cut
        (a group whose input is running out takes no further checkpoint),
        and Timeout after ``timeout`` seconds (the request stays queued).
        ``n`` equal to the current count returns at once with ``to == from``.
        One rescale at a time: a second call while one is pending replaces
        its target count.
        """
        with self._cond:
            if self._state != "running":
                raise InvalidState(f"rescale({n!r}): {self._not_running()}")
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self._partitions:
                raise InvalidArgument(f"rescale needs an executor count in 1..{self._partitions} "
                                      f"(the run's key partitions), got {n!r}")
            cur = self.executors
            assert cur is not None
            if n == cur:
                return {"from": cur, "to": n, "checkpoint": None, "seconds_to_cut": 0.0,
                        "seconds_to_resume": 0.0}
            check_resplittable(self._source, cur, n, self._dir)
            self._want, self._asked_at = n, time.monotonic()
            seq = self._seq
            if not self._cond.wait_for(lambda: self._seq > seq or self._state != "running",
                                       timeout):
                raise Timeout(f"rescale to {n} executors did not complete within {timeout} s")
            if self._seq > seq:
                return dict(self.rescales[-1])
            raise InvalidState(f"rescale to {n} executors: the run ended before a checkpoint "
                               "could be cut (its input ran out)")

    def scale_out(self, k: int = 1, timeout: Optional[float] = 120.0) -> Dict[str, Any]:
        """:meth:`rescale` to the current count plus ``k``."""
        return self.rescale((self.executors or 0) + k, timeout)

    def scale_in(self, k: int = 1, timeout: Optional[float] = 120.0) -> Dict[str, Any]:
        """:meth:`rescale` to the current count minus ``k``."""
        return self.rescale((self.executors or 0) - k, timeout)

    # -- the driver's side --------------------------------------------------------
    def serve(self, d: Driver, cut: RescaleCut, committed: Callable[[], int]) -> None:
        """This control's part of one attempt's driver loop ``d``: epoch
        changes and moves go to the ranks, a rescale asks ``cut`` for its cut
        (``committed()``: checkpoints committed so far), each rank's live
        metrics are kept (and given to :attr:`on_metrics`), and rank 0's
        answers to moves reach their callers."""
        epoch_sent = self._epoch_seq  # the group starts with the epoch set when it started

        def turn() -> bool:
            nonlocal epoch_sent
            got = d.got
            if self._epoch_seq != epoch_sent:
                epoch_sent = self._epoch_seq
                for r in range(d.n):
                    if not got.finished(r):
                        d.send(r, Epoch(*self.epoch))  # type: ignore[misc]
            for rid, move in self._take_moves():
                if got.finished(0):
                    self._moves.answer(rid, {"error": [
                        "InvalidState", "rebalance: rank 0 has read all of its input; "
                        "leadership no longer moves"]})
                else:
                    d.send(0, Move(rid, move))
            want, asked_at = self._pending()
            if want is not None and want != d.n and not got.finished(0):
                cut.ask(d.send, want, asked_at or time.monotonic(), committed())
            return False

        def metrics(rep: Metrics, _: Any) -> None:
            self.per[rep.rank] = rep.snapshot
            if self.on_metrics is not None:
                self.on_metrics(rep.rank, rep.snapshot)

        d.every_turn(turn, 0.05)
        d.on(Metrics, metrics)
        d.on(Moved, lambda rep, _: self._moves.answer(rep.moves_id, rep.result))

    def _start(self, source: Any, n: int, partitions: int, directory: str) -> None:
        with self._cond:
            self._source, self.executors, self._partitions, self._dir = source, n, partitions, directory
            self._state = "running"

    def _not_running(self) -> str:
        # called under self._cond, in a state other than "running"
        return ("the run has not started (not running)" if self._state == "new"
                else "the run has ended (not running)")

    def _pending(self) -> Tuple[Optional[int], Optional[float]]:
        with self._cond:
            return self._want, self._asked_at

    def _done(self, entry: Dict[str, Any]) -> None:
        with self._cond:
            self.rescales.append(entry)
            self.executors = entry["to"]
            self._want = self._asked_at = None
            self._seq += 1
            self._cond.notify_all()

    def _end(self) -> None:
        with self._cond:
            self._state = "ended"
            self._cond.notify_all()
        self._moves.close()


def __getattr__(name: str) -> Any:
    # the former name of CheckpointedRun: one name, one class (slash.control.RunControl is
    # the control socket's side of a run), so the old one answers with where it went
    if name == "RunControl":
        raise AttributeError("slash.recovery.RunControl was renamed slash.recovery.CheckpointedRun "
                             "(slash.control.RunControl is the control socket's side of a run)")
    raise AttributeError(f"module 'slash.recovery' has no attribute {name!r}")


def run_checkpointed(query: Query, source: Any, n: int, group: GroupConfig, token: str, *,
                     directory: str, every: Any, keep: int, max_restarts: int, timeout: float,
                     finalize: Callable[[pa.Table], pa.Table],
                     metrics: Dict[str, Any], control: Optional[CheckpointedRun] = None,
                     live_every: Optional[float] = None, realtime: bool = False,
                     rate: Optional[float] = None,
                     late: Optional[List[pa.Table]] = None, sink: Any = None,
                     rounds: Any = None) -> pa.Table:
    """The parent's side (see the module doc); returns the finalized result.
    ``metrics`` receives records_in, per_executor, checkpoints, recoveries,
    records_replayed, resumed_from and rescales. A run resumed from a
    checkpoint takes its key partition count from the checkpoint's manifest
    and may have another executor count (a FileSource's positions are
    re-split; other sources refuse). ``control``: see :class:`CheckpointedRun`.
    ``live_every``: executors report live metrics every so many seconds to
    ``control.on_metrics``; ``realtime``: see :class:`slash.run.rank.Realtime`; ``rate``:
    records/s over the group (every attempt's ranks share it); ``late``: a
    list that receives the input rows found late (``late_output=``): those
    of the cuts committed before the last attempt's start, and that attempt's.
    ``sink``: a transactional sink given each checkpoint's windows once it
    commits, exactly once (:class:`slash.run.delivery.Delivery`).
    ``rounds``: the run's :class:`slash.control.RunControl` when it offers
    ``update``: the ranks run the control protocol, every checkpoint records
    the logic versions agreed so far and every attempt's ranks install them
    before reading (a directory resumed: those of its newest manifest)."""
    policy = RestartPolicy(max_restarts)
    every_ = CheckpointEvery.parse(every)
    partitions = group.partitions_for(n)
    store = CheckpointStore(directory, fingerprint=fingerprint(query, source), executors=n,
                            partitions=partitions, keep=keep, inputs=input_stamp(source))
    sup = Supervisor(policy, store, Delivery(sink, finalize) if sink is not None else None)
    stored = sup.finished_before(late)
    if stored is not None:
        metrics.update(checkpoints=[], recoveries=[], records_replayed=0, finished_before=True,
                       rescales=[])
        return stored
    shape = newest_shape(store, group.partitions)
    if shape is not None:  # resuming: the checkpoint's partition count, any executor count
        ck_n, ck_parts = shape
        group = dataclasses.replace(group, partitions=ck_parts)
        partitions = store.partitions = group.partitions_for(n)
        check_resplittable(source, ck_n, n, store.dir)
        if ck_n != n:
            log.info("resuming checkpoints of %d executors with %d: re-splitting the input", ck_n, n)
    # fixed for the life of the checkpoints: a rescaled group keeps it (not 4 x its own n)
    group = dataclasses.replace(group, partitions=partitions)
    checkpoints: List[Dict[str, Any]] = []
    rescales: List[Dict[str, Any]] = []
    late_now: List[pa.Table] = []  # the late rows the last attempt found
    metrics["resumed_from"] = sup.first.id if sup.first is not None else None
    if control is not None:
        control._start(source, n, partitions, store.dir)
    logic = recorded_logic(sup.first)
    own_rounds = logic and rounds is None
    if own_rounds:  # the directory's run was updated: its versions hold, socket or not
        rounds = slash.control.RunControl(query, source.schema, n,
                                          bounded=watermarks_from_source(source),
                            features=("checkpoint",))
    updates = rounds.updates if rounds is not None else None
    if updates is not None:
        updates.restore(logic)

    def attempt(ck: Optional[Checkpoint]) -> Tuple[List[pa.Table], List[Dict[str, Any]]]:
        nonlocal group
        store.executors = n
        plan = AttemptPlan(store.dir, store.fingerprint, n, partitions, keep, every_,
                           ck.id if ck is not None else None, (ck.id + 1) if ck is not None else 1,
                           sup.attempt, live_every, realtime, rate, late is not None,
                           updates.versions() if updates is not None else ())
        if rounds is not None:
            rounds.regroup(n, "the group restarted from a checkpoint")
        if control is not None and control.epoch is not None:  # a restart keeps a tuned epoch
            ms, nbytes = control.epoch
            group = dataclasses.replace(group, epoch_ms=ms or group.epoch_ms,
                                        epoch_bytes=nbytes or group.epoch_bytes)
        if ck is not None:
            log.info("starting %d executors from checkpoint %s (attempt %d)", n, ck.path,
                     sup.attempt)
        late_now.clear()
        return _checkpointed_group(query, source, n, group, token, plan, store, timeout,
                                   checkpoints, sup, control, rescales, late_now,
                                   rounds)

    def rescaled(r: Rescale) -> None:
        nonlocal n
        _void_moves(control)
        log.info("rescale: %d -> %d executors from checkpoint %d", n, r.count, r.ckpt)
        rescales.append({"from": n, "to": r.count, "checkpoint": r.ckpt,
                         "seconds_to_cut": round(r.cut_at - r.asked_at, 3),
                         "_asked_at": r.asked_at})
        n = r.count

    def failed(f: Failed, rec: Dict[str, Any], last: Optional[Checkpoint]) -> None:
        _void_moves(control)
        start = f"checkpoint {last.id}" if last is not None else "the beginning"
        log.warning("executor rank %s failed (%s): restarting all %d executors from %s "
                    "(restart %d of at most %d)", f.rank, f.cause, n, start, sup.restarts,
                    max_restarts)
        if control is not None and control.on_event is not None:
            control.on_event(f"recovery {sup.restarts}: rank {f.rank} failed ({f.cause}); "
                             f"from {start}")

    try:
        tables, per_exec = sup.run(attempt, rescaled=rescaled, failed=failed)
    finally:
        if control is not None:
            control._end()
        if own_rounds:
            rounds.close()
    result = sup.finish(tables, finalize, len(checkpoints), late_now, late)
    metrics.update(per_executor=per_exec, checkpoints=checkpoints, recoveries=sup.recoveries,
                   records_replayed=sup.replayed, finished_before=False,
                   rescales=[{k: v for k, v in r.items() if not k.startswith("_")}
                             for r in rescales], executors_final=n)
    return result


def _void_moves(control: Optional[CheckpointedRun]) -> None:
    """A group stopped (rescale, failure): moves asked of it are void."""
    if control is not None:
        control._take_moves()
        control._moves.fail_pending("the group restarted from a checkpoint before rank 0 "
                                    "accepted the moves")
        control.per.clear()


def _checkpointed_group(query: Query, source: Any, n: int, group: GroupConfig, token: str,
                        plan: AttemptPlan, store: CheckpointStore, timeout: float,
                        checkpoints: List[Dict[str, Any]], sup: Supervisor,
                        control: Optional[CheckpointedRun], rescales: List[Dict[str, Any]],
                        late: List[pa.Table], rounds: Any = None) -> Tuple[List[pa.Table], List[Dict[str, Any]]]:
    """One attempt of :func:`run_checkpointed`: a group of n executors from
    plan's checkpoint to the end; raises Failed, or Rescale once a checkpoint
    asked for by ``control`` commits. ``late`` receives the late rows each
    rank found in this attempt (its Finished report's); each checkpoint
    committed goes to ``sup``'s sink (:meth:`Supervisor.committed`); ``rounds``:
    the run's RunControl serving updates (see :func:`run_checkpointed`)."""
    pending_resume = rescales[-1] if rescales and "seconds_to_resume" not in rescales[-1] else None
    cut = RescaleCut()
    spec = RankSpec(query, source, group, token, plan=plan, control=rounds is not None)
    with ProcessGroup(n, worker, lambda r: (spec, r), transport=group.transport) as pg:
        d = Driver(pg, n, time.monotonic() + timeout, timeout)
        got = d.got
        updates = rounds.updates if rounds is not None else None
        Committer(d, store, checkpoints, cut, committed=sup.committed,
                  info=updates.manifest_info if updates is not None else None)

        def resumed(rep: Resumed, every_rank: bool) -> None:
            nonlocal pending_resume
            if not every_rank:
                return
            if pending_resume is not None and control is not None:
                pending_resume["seconds_to_resume"] = round(
                    time.monotonic() - pending_resume["_asked_at"], 3)
                control._done({k: v for k, v in pending_resume.items()
                               if not k.startswith("_")})
                pending_resume = None
            sup.resumed()

        d.on(Resumed, resumed)
        if control is not None:
            control.serve(d, cut, lambda: len(checkpoints))
        if rounds is not None:
            serve_rounds(d, rounds)
        try:
            d.start(group.timeout)
            if rounds is not None:
                rounds.attach(pg.send)
            got = d.run()
        except (SystemFailure, Reported) as e:
            raise failed(e, pg, got.fail) from None
    late.extend(got.late)
    return got.tables(), got.per_exec
