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
from abc import ABC, abstractmethod
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.checkpoint import Checkpoint, CheckpointStore
import slash.control
from slash.control import MoveWaiters, rebalance_spec
from slash.control.logic import recorded_logic
from slash.errors import InvalidArgument, InvalidState, SystemFailure, Timeout
from slash.executor import GroupConfig
from slash.run.launcher import ProcessGroup
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
from slash.run.worker import RankSpec, run_rank, worker

log = logging.getLogger(__name__)



def execute_split_checkpointed(query: Query, source: Any, rank: int, addresses: List[str],
                               listener: Any, group: GroupConfig, token: str, plan: AttemptPlan,
                               link: Any) -> Tuple[pa.Table, Dict[str, Any]]:
    """One executor's run with checkpoints (see the module doc; a Spark
    batch task's, over its task link): restores from ``plan.resume_id`` if
    given, then reads, pushes and cuts. Returns the windows this executor
    fired in this attempt and its metrics. The loop is
    :class:`slash.run.rank.RankLoop` with :class:`slash.run.checkpointing.Checkpointing`."""
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
        raise AttributeError("slash.run.recovery.checkpointed.RunControl was renamed slash.run.recovery.checkpointed.CheckpointedRun "
                             "(slash.control.RunControl is the control socket's side of a run)")
    raise AttributeError(f"module 'slash.run.recovery.checkpointed' has no attribute {name!r}")


class GroupKind(ABC):
    """What one kind of checkpointed group sets in :func:`run_supervised`,
    the one checkpointed-run skeleton: a fixed group (:class:`FixedGroup`)
    or a live-scalable one (:class:`slash.run.recovery.live.LiveGroup`). The rest
    (the store, the supervisor, a finished directory, the partition count a
    checkpoint fixes, the attempts' plans, each attempt's driver with its
    commits, the result) is the skeleton's. Its steps, in order:
    ``resuming(store, ck_n)`` (the newest checkpoint had ck_n executors),
    ``start(sup, store, group)`` (before the first attempt; ``group`` with
    the run's key partitions), per attempt ``begin(ck, plan)`` (what its
    ranks run), ``deadline``, ``serve(d, cut, checkpoints)`` (its handlers on
    the attempt's driver), ``attach(send)`` (the group started),
    ``resumed()`` (every rank resumed), ``after()`` (the attempt ended);
    between attempts ``rescaled`` / ``failed`` (the supervisor's callbacks);
    ``end()`` (the run ended, however) and ``end_metrics``."""

    #: cuts commit per scale generation (:class:`slash.run.driver.Committer`'s ``live``)
    live = False
    #: the group's size (ranks started; changes with a rescale by restart)
    size = 0
    #: the logic versions agreed (:class:`slash.control.logic.LogicUpdates`), if updates are served
    updates: Any = None
    #: a live group's cuts dropped for straddling a scale (their ids)
    dropped: Optional[List[int]] = None
    #: the attempt plan's fields beyond the skeleton's (:class:`AttemptPlan`)
    plan_settings: Dict[str, Any] = {}
    #: the metrics of a directory whose run had finished, beyond the common ones
    finished_metrics: Dict[str, Any] = {}

    def fingerprint(self, query: Query, source: Any) -> str:
        return fingerprint(query, source)

    def resuming(self, store: CheckpointStore, ck_n: int) -> None:
        pass

    def deadline(self, timeout: float) -> float:
        return time.monotonic() + timeout

    def after(self) -> None:
        pass

    # the steps every kind has its own of (see the class doc)
    @abstractmethod
    def start(self, sup: Supervisor, store: CheckpointStore, group: GroupConfig) -> None: ...
    @abstractmethod
    def begin(self, ck: Optional[Checkpoint], plan: AttemptPlan) -> RankSpec: ...
    @abstractmethod
    def serve(self, d: Driver, cut: RescaleCut, checkpoints: List[Dict[str, Any]]) -> None: ...
    @abstractmethod
    def attach(self, send: Callable[[int, Any], None]) -> None: ...
    @abstractmethod
    def resumed(self) -> None: ...
    @abstractmethod
    def rescaled(self, r: Rescale) -> None: ...
    @abstractmethod
    def failed(self, f: Failed, rec: Dict[str, Any], last: Optional[Checkpoint]) -> None: ...
    @abstractmethod
    def end(self) -> None: ...
    @abstractmethod
    def end_metrics(self, per_exec: List[Dict[str, Any]], result: pa.Table,
                    checkpoints: List[Dict[str, Any]]) -> Dict[str, Any]: ...


def run_supervised(kind: GroupKind, query: Query, source: Any, group: GroupConfig, *,
                   directory: str, every: Any, keep: int, max_restarts: int, timeout: float,
                   finalize: Callable[[pa.Table], pa.Table], metrics: Optional[Dict[str, Any]],
                   late: Optional[List[pa.Table]] = None, sink: Any = None) -> pa.Table:
    """The one checkpointed run (see the module doc) of a group of ``kind``;
    returns the finalized result. ``metrics`` (if given) receives
    per_executor, checkpoints, recoveries, records_replayed, resumed_from
    and finished_before, with the kind's own; ``late``: a list that receives
    the input rows found late (those of the cuts committed before the last
    attempt's start, and that attempt's); ``sink``: a transactional sink given
    each checkpoint's windows once it commits, exactly once."""
    policy = RestartPolicy(max_restarts)
    every_ = CheckpointEvery.parse(every)
    partitions = group.partitions_for(kind.size)
    store = CheckpointStore(directory, fingerprint=kind.fingerprint(query, source),
                            executors=kind.size, partitions=partitions, keep=keep,
                            inputs=input_stamp(source))
    sup = Supervisor(policy, store, Delivery(sink, finalize) if sink is not None else None)
    stored = sup.finished_before(late)
    if stored is not None:
        if metrics is not None:
            metrics.update(checkpoints=[], recoveries=[], records_replayed=0,
                           finished_before=True, **kind.finished_metrics)
        return stored
    shape = newest_shape(store, group.partitions)
    if shape is not None:  # resuming: the checkpoint's partition count, any executor count
        group = dataclasses.replace(group, partitions=shape[1])
        partitions = store.partitions = group.partitions_for(kind.size)
        kind.resuming(store, shape[0])
    # fixed for the life of the checkpoints: a rescaled group keeps it (not 4 x its own n)
    group = dataclasses.replace(group, partitions=partitions)
    checkpoints: List[Dict[str, Any]] = []
    late_now: List[pa.Table] = []  # the late rows the last attempt found
    if metrics is not None:
        metrics["resumed_from"] = sup.first.id if sup.first is not None else None

    def attempt(ck: Optional[Checkpoint]) -> Tuple[List[pa.Table], List[Dict[str, Any]]]:
        store.executors = kind.size
        updates = kind.updates
        plan = AttemptPlan(store.dir, store.fingerprint, kind.size, partitions, keep, every_,
                           ck.id if ck is not None else None, (ck.id + 1) if ck is not None else 1,
                           sup.attempt, want_late=late is not None,
                           versions=updates.versions() if updates is not None else (),
                           **kind.plan_settings)
        late_now.clear()
        try:
            spec = kind.begin(ck, plan)
            return _attempt(kind, spec, store, checkpoints, sup, timeout, late_now)
        finally:
            kind.after()

    try:
        kind.start(sup, store, group)
        tables, per_exec = sup.run(attempt, rescaled=kind.rescaled, failed=kind.failed)
    finally:
        kind.end()
    result = sup.finish(tables, finalize, len(checkpoints), late_now, late)
    if metrics is not None:
        metrics.update(per_executor=per_exec, checkpoints=checkpoints, recoveries=sup.recoveries,
                       records_replayed=sup.replayed, finished_before=False,
                       **kind.end_metrics(per_exec, result, checkpoints))
    return result


def _attempt(kind: GroupKind, spec: RankSpec, store: CheckpointStore,
             checkpoints: List[Dict[str, Any]], sup: Supervisor, timeout: float,
             late: List[pa.Table]) -> Tuple[List[pa.Table], List[Dict[str, Any]]]:
    """One attempt of :func:`run_supervised`: a group of ``kind.size`` from
    its plan's checkpoint to the end; raises a :class:`Failed`, or a
    :class:`Rescale` once the cut a rescale asked for commits. Each checkpoint
    committed goes to ``sup``'s sink; ``late`` receives the late rows each
    rank found in this attempt (its Finished report's)."""
    cut = RescaleCut()
    n, group = kind.size, spec.group
    with ProcessGroup(n, worker, lambda r: (spec, r), transport=group.transport) as pg:
        d = Driver(pg, n, kind.deadline(timeout), timeout)
        got = d.got
        updates = kind.updates
        Committer(d, store, checkpoints, cut, live=kind.live, dropped=kind.dropped,
                  committed=sup.committed,
                  info=updates.manifest_info if updates is not None else None)

        def resumed(rep: Resumed, every_rank: bool) -> None:
            if every_rank:
                kind.resumed()
                sup.resumed()

        d.on(Resumed, resumed)
        kind.serve(d, cut, checkpoints)
        try:
            d.start(group.timeout)
            kind.attach(pg.send)
            got = d.run()
        except (SystemFailure, Reported) as e:
            raise failed(e, pg, got.fail) from None
    late.extend(got.late)
    return got.tables(), got.per_exec


class FixedGroup(GroupKind):
    """A group of a fixed size, rescaled by restart from a cut
    (:class:`CheckpointedRun`): :func:`run_checkpointed`'s."""

    def __init__(self, query: Query, source: Any, n: int, token: str,
                 control: Optional[CheckpointedRun], live_every: Optional[float], realtime: bool,
                 rate: Optional[float], rounds: Any, max_restarts: int) -> None:
        self.query, self.source, self.size, self.token = query, source, n, token
        self.control, self.rounds, self.max_restarts = control, rounds, max_restarts
        self.plan_settings = {"live_every": live_every, "realtime": realtime, "rate": rate}
        self.finished_metrics = {"rescales": []}
        self.rescales: List[Dict[str, Any]] = []
        self.own_rounds = False
        self.sup: Optional[Supervisor] = None
        self.pending_resume: Optional[Dict[str, Any]] = None

    def resuming(self, store: CheckpointStore, ck_n: int) -> None:
        check_resplittable(self.source, ck_n, self.size, store.dir)
        if ck_n != self.size:
            log.info("resuming checkpoints of %d executors with %d: re-splitting the input",
                     ck_n, self.size)

    def start(self, sup: Supervisor, store: CheckpointStore, group: GroupConfig) -> None:
        self.sup, self.group = sup, group
        if self.control is not None:
            self.control._start(self.source, self.size, group.partitions, store.dir)
        logic = recorded_logic(sup.first)
        self.own_rounds = bool(logic) and self.rounds is None
        if self.own_rounds:  # the directory's run was updated: its versions hold, socket or not
            self.rounds = slash.control.RunControl(
                self.query, self.source.schema, self.size,
                bounded=watermarks_from_source(self.source), features=("checkpoint",))
        self.updates = self.rounds.updates if self.rounds is not None else None
        if self.updates is not None:
            self.updates.restore(logic)

    def begin(self, ck: Optional[Checkpoint], plan: AttemptPlan) -> RankSpec:
        if self.rounds is not None:
            self.rounds.regroup(self.size, "the group restarted from a checkpoint")
        control = self.control
        if control is not None and control.epoch is not None:  # a restart keeps a tuned epoch
            ms, nbytes = control.epoch
            self.group = dataclasses.replace(self.group, epoch_ms=ms or self.group.epoch_ms,
                                             epoch_bytes=nbytes or self.group.epoch_bytes)
        if ck is not None:
            log.info("starting %d executors from checkpoint %s (attempt %d)", self.size, ck.path,
                     plan.attempt)
        self.pending_resume = self.rescales[-1] if self.rescales and \
            "seconds_to_resume" not in self.rescales[-1] else None
        return RankSpec(self.query, self.source, self.group, self.token, plan=plan,
                        control=self.rounds is not None)

    def serve(self, d: Driver, cut: RescaleCut, checkpoints: List[Dict[str, Any]]) -> None:
        if self.control is not None:
            self.control.serve(d, cut, lambda: len(checkpoints))
        if self.rounds is not None:
            serve_rounds(d, self.rounds)

    def attach(self, send: Callable[[int, Any], None]) -> None:
        if self.rounds is not None:
            self.rounds.attach(send)

    def resumed(self) -> None:
        pending = self.pending_resume
        if pending is not None and self.control is not None:
            pending["seconds_to_resume"] = round(time.monotonic() - pending["_asked_at"], 3)
            self.control._done({k: v for k, v in pending.items() if not k.startswith("_")})
            self.pending_resume = None

    def rescaled(self, r: Rescale) -> None:
        _void_moves(self.control)
        log.info("rescale: %d -> %d executors from checkpoint %d", self.size, r.count, r.ckpt)
        self.rescales.append({"from": self.size, "to": r.count, "checkpoint": r.ckpt,
                              "seconds_to_cut": round(r.cut_at - r.asked_at, 3),
                              "_asked_at": r.asked_at})
        self.size = r.count

    def failed(self, f: Failed, rec: Dict[str, Any], last: Optional[Checkpoint]) -> None:
        _void_moves(self.control)
        start = f"checkpoint {last.id}" if last is not None else "the beginning"
        restarts = self.sup.restarts if self.sup is not None else 0
        log.warning("executor rank %s failed (%s): restarting all %d executors from %s "
                    "(restart %d of at most %d)", f.rank, f.cause, self.size, start, restarts,
                    self.max_restarts)
        if self.control is not None and self.control.on_event is not None:
            self.control.on_event(f"recovery {restarts}: rank {f.rank} failed ({f.cause}); "
                                  f"from {start}")

    def end(self) -> None:
        if self.control is not None:
            self.control._end()
        if self.own_rounds:
            self.rounds.close()

    def end_metrics(self, per_exec: List[Dict[str, Any]], result: pa.Table,
                    checkpoints: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {"rescales": [{k: v for k, v in r.items() if not k.startswith("_")}
                             for r in self.rescales], "executors_final": self.size}


def run_checkpointed(query: Query, source: Any, n: int, group: GroupConfig, token: str, *,
                     directory: str, every: Any, keep: int, max_restarts: int, timeout: float,
                     finalize: Callable[[pa.Table], pa.Table],
                     metrics: Dict[str, Any], control: Optional[CheckpointedRun] = None,
                     live_every: Optional[float] = None, realtime: bool = False,
                     rate: Optional[float] = None,
                     late: Optional[List[pa.Table]] = None, sink: Any = None,
                     rounds: Any = None) -> pa.Table:
    """The parent's side (see the module doc): :func:`run_supervised` of a
    :class:`FixedGroup`; returns the finalized result.
    ``metrics`` receives records_in, per_executor, checkpoints, recoveries,
    records_replayed, resumed_from and rescales. A run resumed from a
    checkpoint takes its key partition count from the checkpoint's manifest
    and may have another executor count (a FileSource's positions are
    re-split; other sources refuse). ``control``: see :class:`CheckpointedRun`.
    ``live_every``: executors report live metrics every so many seconds to
    ``control.on_metrics``; ``realtime``: see :class:`slash.run.features.Realtime`; ``rate``:
    records/s over the group (every attempt's ranks share it); ``late``: a
    list that receives the input rows found late (``late_output=``): those
    of the cuts committed before the last attempt's start, and that attempt's.
    ``sink``: a transactional sink given each checkpoint's windows once it
    commits, exactly once (:class:`slash.run.delivery.Delivery`).
    ``rounds``: the run's :class:`slash.control.RunControl` when it offers
    ``update``: the ranks run the control protocol, every checkpoint records
    the logic versions agreed so far and every attempt's ranks install them
    before reading (a directory resumed: those of its newest manifest)."""
    kind = FixedGroup(query, source, n, token, control, live_every, realtime, rate, rounds,
                      max_restarts)
    return run_supervised(kind, query, source, group, directory=directory, every=every,
                          keep=keep, max_restarts=max_restarts, timeout=timeout,
                          finalize=finalize, metrics=metrics, late=late, sink=sink)


def _void_moves(control: Optional[CheckpointedRun]) -> None:
    """A group stopped (rescale, failure): moves asked of it are void."""
    if control is not None:
        control._take_moves()
        control._moves.fail_pending("the group restarted from a checkpoint before rank 0 "
                                    "accepted the moves")
        control.per.clear()


