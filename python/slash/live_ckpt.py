"""A live-scalable group that takes checkpoints: ``runner.run(..., checkpoint=DIR,
max_executors=M)`` (``slash run --checkpoint DIR --max-executors M``): the
group of :mod:`slash.live_scale` (M ranks, N active, live scales within
1..M), checkpointed and recovered as :mod:`slash.recovery` does. What a
rank records at a cut (its work left in global terms, per scale
generation), which generation a cut commits in, recovery and the restart
path beyond M are docs/elastic.md's "A live group that takes checkpoints".

Late rows (``late_output=``) go with the cut after the push that found them
(:class:`slash.ckpt_worker.LateRows`), as the fired windows do. Updates:
every manifest records the logic versions agreed so far, installed by every
attempt's ranks before reading. Joins run the same group with
:mod:`slash.live_join`'s ranks and scaler (:class:`slash.live_join.LiveJoinPositions`
records both sides' work left per generation and the rows the merge holds).

Invariant: a cut commits only in a generation every rank can be described
in; one that straddles a whole scale is dropped, its result segments
carried into the next committed cut (no fired window lost).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.checkpoint import Checkpoint, CheckpointStore
from slash.control import ControlServer, RunControl
from slash.control.logic import recorded_logic
from slash.errors import CheckpointCorrupt, InvalidArgument, InvalidState, SystemFailure, Timeout
from slash.executor import GroupConfig
from slash.launcher import ProcessGroup
from slash.limits import MAX_EXECUTORS
from slash.live_join import SIDES, JoinLiveScaler
from slash.live_scale import LiveScaler
from slash.recovery import CheckpointEvery, fingerprint
from slash.run.ckpt import live_gen
from slash.run.delivery import Delivery
from slash.run.driver import Committer, Driver, serve_rounds, show_live
from slash.run.failure import Failed, Reported, RestartPolicy, failed
from slash.run.inputs import bound_ticks
from slash.run.output import write_parquet_atomically
from slash.run.plan import AttemptPlan
from slash.run.protocol import Resumed
from slash.run.supervisor import Rescale, RescaleCut, Supervisor, newest_shape
from slash.sources import Work, input_stamp
from slash.worker import RankSpec, worker

log = logging.getLogger(__name__)

# ---- the driver's side ---------------------------------------------------------------------------
class _Restart:
    """A scale-out beyond the provisioned group, carried out by restart."""

    def __init__(self, count: int, what: str) -> None:
        self.count, self.what = count, what
        self.asked = time.monotonic()
        self.done = threading.Event()
        self.result: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None
        self.entry: Optional[Dict[str, Any]] = None


class ElasticCheckpointed:
    """``scale-out`` / ``scale-in`` / ``elastic-status`` of a checkpointed
    live group, across its attempts: within the provisioned size a live scale
    (the current attempt's :class:`slash.live_scale.LiveScaler`); beyond it a
    restart from a checkpoint (:class:`_Restart`, carried out by
    :func:`run_live_checkpointed`)."""

    def __init__(self, timeout: float = 120.0) -> None:
        self._cond = threading.Condition()
        self.scaler: Any = None
        self.size = 0
        self.history: List[Dict[str, Any]] = []  # scales of attempts that ended, both paths
        self.restart: Optional[_Restart] = None
        self.ended = False
        self.timeout = timeout

    def _current(self, what: str) -> Any:
        with self._cond:
            if not self._cond.wait_for(lambda: self.scaler is not None or self.ended,
                                       self.timeout):
                raise Timeout(f"{what}: the group did not (re)start within {self.timeout} s")
            if self.ended:
                raise InvalidState(f"{what}: the run has ended")
            if self.restart is not None:
                raise InvalidState(f"{what}: a restart to {self.restart.count} executors is in "
                                   "progress")
            return self.scaler

    def scale_out(self, k: int) -> Dict[str, Any]:
        what = f"scale-out {k}"
        scaler = self._current(what)
        count = len(scaler.active) + k
        if count > scaler.size:
            return self._restart(count, what)
        return scaler.scale_out(k)

    def scale_in(self, k: int) -> Dict[str, Any]:
        return self._current(f"scale-in {k}").scale_in(k)

    def _restart(self, count: int, what: str) -> Dict[str, Any]:
        if count > MAX_EXECUTORS:
            raise InvalidArgument(f"{what}: {count} executors is more than {MAX_EXECUTORS}")
        with self._cond:
            if self.restart is not None:
                raise InvalidState(f"{what}: a restart to {self.restart.count} executors is "
                                   "in progress")
            req = self.restart = _Restart(count, what)
        log.warning("%s: %d executors is beyond the provisioned group of %d; taking the restart "
                    "path (checkpoint, then a group of %d)", what, count, self.size, count)
        if not req.done.wait(self.timeout):
            raise Timeout(f"{what}: the restart did not complete within {self.timeout} s")
        if req.error is not None:
            raise req.error
        assert req.result is not None
        return req.result

    def status(self) -> Dict[str, Any]:
        with self._cond:
            scaler = self.scaler
            hist = list(self.history)
        st = scaler.status() if scaler is not None else {}
        st["scales"] = hist + list(st.get("scales", []))
        st["checkpointed"] = True
        return st

    def all_scales(self) -> List[Dict[str, Any]]:
        return self.status()["scales"]

    # -- the driver's loop
    def _attach(self, scaler: Any) -> None:
        with self._cond:
            self.scaler, self.size = scaler, scaler.size
            self._cond.notify_all()

    def _detach(self) -> None:
        with self._cond:
            if self.scaler is not None:
                self.history.extend(self.scaler.history)
            self.scaler = None

    def _end_restart(self, err: Optional[BaseException],
                     result: Optional[Dict[str, Any]] = None) -> None:
        with self._cond:
            req, self.restart = self.restart, None
        if req is not None:
            req.error, req.result = err, result
            req.done.set()

    def _end(self) -> None:
        with self._cond:
            self.ended = True
            self._cond.notify_all()
        self._end_restart(InvalidState("the run ended before the restart took effect"))


def resume_shape(ck: Optional[Checkpoint], source: Any, size: int, active_n: int,
                 time_col: str) -> Tuple[List[Any], List[int]]:
    """(each rank's work, the active ranks) a group of ``size`` starts with
    from checkpoint ``ck``: with the checkpoint's size, each rank its own list
    and the active set of the committed generation; with another size (a
    restart beyond M, or a directory resumed with another M) every list
    re-dealt to ranks ``0..active_n-1``; without a checkpoint the first split.
    A join's source is ``(left, right)`` and a rank's work ``{side: list}``
    (dealt side by side; the rows held at the cut go with their unit,
    :func:`slash.live_join.restored_held`)."""
    join = isinstance(source, tuple)
    srcs = dict(zip(SIDES, source)) if join else {None: source}

    def per_rank(lists: Dict[Any, List[Work]]) -> List[Any]:
        return [{s: lists[s][r] for s in SIDES} if join else lists[None][r] for r in range(size)]

    if ck is None:
        return (per_rank({s: [src.work(r, active_n, time_col) if r < active_n else []
                              for r in range(size)] for s, src in srcs.items()}),
                list(range(active_n)))
    gen = str(live_gen(ck))
    infos = [ck.rank_info(r) for r in range(ck.executors)]
    for r, i in enumerate(infos):
        if gen not in i.get("live", {}):
            raise CheckpointCorrupt(f"checkpoint {ck.path!r}: rank {r} recorded no work of scale "
                                    f"generation {gen} (not cut by a live group?)")
    recorded = [i["live"][gen] for i in infos]
    lefts = {s: [[[int(g), int(k)] for g, k in (rec["sides"][s] if join else rec)["work"]]
                 for rec in recorded] for s in srcs}
    if ck.executors == size:
        return per_rank(lefts), sorted(int(r) for r in recorded[0]["active"])
    dealt = {s: src.resplit(lefts[s], active_n, time_col) for s, src in srcs.items()}
    return (per_rank({s: [dealt[s][r] if r < active_n else [] for r in range(size)]
                      for s in srcs}), list(range(active_n)))


def run_live_checkpointed(query: Any, source: Any, n: int, m: int, group: GroupConfig, token: str,
                          *, directory: str, every: Any, keep: int, max_restarts: int,
                          timeout: float, rate: Optional[float], control: Any,
                          metrics: Optional[Dict[str, Any]], output: Optional[str],
                          live: Any = None, late: Optional[List[pa.Table]] = None,
                          sink: Any = None) -> pa.Table:
    """:func:`slash.runner.run` with ``checkpoint=`` and ``max_executors=``:
    the live group of ``m`` ranks, ``n`` active, with checkpoints (see the
    module doc). ``control``: as for the live group (True, a socket path or a
    RunControl); ``metrics`` receives what a checkpointed run's does
    (checkpoints, recoveries, records_replayed) plus ``live_scales`` (each
    scale, ``path`` "live" or "restart") and ``checkpoints_dropped``;
    ``late``, if given, receives the late rows (``late_output=``); ``sink``:
    a transactional sink given each committed checkpoint's windows, exactly
    once (:class:`slash.run.delivery.Delivery`; a cut dropped for
    straddling a live scale goes with the next commit)."""
    policy = RestartPolicy(max_restarts)
    t_start = time.monotonic()
    every_ = CheckpointEvery.parse(every)
    partitions = group.partitions_for(m)
    fp = fingerprint(query, source) + " in a live group"
    store = CheckpointStore(os.fspath(directory), fingerprint=fp, executors=m,
                            partitions=partitions, keep=keep, inputs=input_stamp(source))
    join = isinstance(source, tuple)  # a join's (left, right): slash.live_join's ranks and scaler
    schemas = [s.schema for s in source] if join else [source.schema]
    finalize = lambda raw: query.finalize(raw, *schemas)  # noqa: E731
    sup = Supervisor(policy, store, Delivery(sink, finalize) if sink is not None else None)
    stored = sup.finished_before(late)
    if stored is not None:
        if metrics is not None:
            metrics.update(checkpoints=[], recoveries=[], records_replayed=0,
                           finished_before=True, live_scales=[])
        return stored
    shape = newest_shape(store, group.partitions)
    if shape is not None:
        partitions = store.partitions = shape[1]
    group = dataclasses.replace(group, partitions=partitions)

    if isinstance(control, RunControl):
        ctl, server = control, None
        ctl.declare("checkpoint", "live_scale")
    elif not (control in (None, True, False) or isinstance(control, (str, os.PathLike))):
        raise InvalidArgument(f"control must be True, a socket path or a "
                              f"slash.control.RunControl with max_executors=, got "
                              f"{type(control).__name__}")
    else:
        ctl = RunControl(query, schemas[0], m, features=("checkpoint", "live_scale"))
        server = None
    updates = ctl.updates  # every manifest records the versions agreed; a resume agrees them again
    if updates is not None and sup.first is not None:
        updates.restore(recorded_logic(sup.first))
    elastic = ElasticCheckpointed()
    ctl.provide("scale-out", elastic.scale_out)
    ctl.provide("scale-in", elastic.scale_in)
    ctl.provide("elastic-status", elastic.status)
    if not isinstance(control, RunControl):  # served once it can answer every operation
        server = ControlServer(ctl, None if control in (None, True, False) else os.fspath(control))
    report_every = getattr(live, "report_interval", 0.5) if live is not None else 0.5
    ticks = lambda b: bound_ticks(query, schemas[0], b)  # noqa: E731

    checkpoints: List[Dict[str, Any]] = []
    dropped: List[int] = []
    late_now: List[pa.Table] = []  # the late rows the last attempt found
    size, active_n = m, n
    resumed_scale: Optional[_Restart] = None  # a restart whose new group is starting
    scaler: Any = None

    def attempt(ck: Optional[Checkpoint]) -> Tuple[List[pa.Table], List[Dict[str, Any]]]:
        nonlocal scaler
        if ck is not None and ck.executors != size:
            log.info("starting a group of %d (%d active) from checkpoint %d of %d executors: "
                     "re-dealing the input left", size, active_n, ck.id, ck.executors)
        works, active = resume_shape(ck, source, size, active_n, query.time)
        store.executors = size
        plan = AttemptPlan(store.dir, store.fingerprint, size, partitions, keep, every_,
                           ck.id if ck is not None else None, (ck.id + 1) if ck is not None else 1,
                           sup.attempt, want_late=late is not None,
                           versions=updates.versions() if updates is not None else ())
        scaler = JoinLiveScaler(source, query, size, len(active)) if join else \
            LiveScaler(source, query, size, len(active), ticks)
        scaler.active = list(active)
        ctl.regroup(size, "the group restarted from a checkpoint")
        elastic._attach(scaler)
        late_now.clear()
        try:
            return _live_group(query, source, size, group, token, plan, store, works, active,
                               rate, report_every, ctl, scaler, elastic, live, checkpoints,
                               dropped, sup, resumed_scale, t_start, timeout, late_now)
        finally:
            elastic._detach()

    def rescaled(r: Rescale) -> None:
        nonlocal resumed_scale, size, active_n
        req = elastic.restart
        old_active = len(scaler.active)
        log.warning("scale-out beyond max_executors=%d: restart path, %d -> %d executors "
                    "from checkpoint %d", size, old_active, r.count, r.ckpt)
        if req is not None:
            req.entry = {"sid": None, "from": old_active, "to": r.count,
                         "active_ranks": list(range(r.count)),
                         "joined": list(range(size, r.count)), "left": [],
                         "path": "restart", "checkpoint": r.ckpt,
                         "max_executors": r.count,
                         "seconds_to_cut": round(time.monotonic() - req.asked, 3),
                         "at": time.time()}
        resumed_scale = req
        size = active_n = max(size, r.count)

    def failed(f: Failed, rec: Dict[str, Any], last: Optional[Checkpoint]) -> None:
        nonlocal resumed_scale
        rec["active_at_cut"] = (None if last is None else
                                resume_shape(last, source, size, active_n, query.time)[1])
        log.warning("executor rank %s failed (%s): restarting the group of %d from %s "
                    "(restart %d of at most %d)", f.rank, f.cause, size,
                    f"checkpoint {last.id}" if last is not None else "the beginning",
                    sup.restarts, max_restarts)
        if resumed_scale is not None and resumed_scale.done.is_set():
            resumed_scale = None

    try:
        tables, per_exec = sup.run(attempt, rescaled=rescaled, failed=failed)
    finally:
        elastic._end()
        ctl.close()
        if server is not None:
            server.close()
    result = sup.finish(tables, finalize, len(checkpoints), late_now, late)
    scales = elastic.history
    log.info("query ran on a live group of %d in %.2f s: %d result rows, %d checkpoints "
             "(%d dropped), %d recoveries, %d scales", size, time.monotonic() - t_start,
             result.num_rows, len(checkpoints), len(dropped), len(sup.recoveries), len(scales))
    if metrics is not None:
        totals = {k: sum(int(x.get(k, 0) or 0) for x in per_exec)
                  for k in ("late_records", "null_time_records")}
        totals["records_in"] = sum(int(x.get("records_read", 0) or 0) for x in per_exec)
        metrics.update(totals, rows=result.num_rows, executors=len(scaler.active),
                       max_executors=size, per_executor=per_exec, checkpoints=checkpoints,
                       checkpoints_dropped=dropped, recoveries=sup.recoveries,
                       records_replayed=sup.replayed, finished_before=False,
                       resumed_from=sup.first.id if sup.first is not None else None,
                       live_scales=scales)
    if output:
        write_parquet_atomically(result, output)
    return result


def _live_group(query: Any, source: Any, size: int, group: GroupConfig, token: str, plan: Any,
                store: CheckpointStore, works: List[Work], active: List[int],
                rate: Optional[float], report_every: float, ctl: Any, scaler: Any,
                elastic: ElasticCheckpointed, live: Any, checkpoints: List[Dict[str, Any]],
                dropped: List[int], sup: Supervisor, resumed_scale: Optional[_Restart],
                t_start: float, timeout: float,
                late: List[pa.Table]) -> Tuple[List[pa.Table], List[Dict[str, Any]]]:
    """One attempt of :func:`run_live_checkpointed`: a group of ``size`` from
    ``plan``'s checkpoint to the end; raises a :class:`slash.run.failure.Failed`,
    or a :class:`slash.run.supervisor.Rescale` once the cut a restart asked for
    commits. ``late`` receives the late rows each rank found in this attempt."""
    cut = RescaleCut()
    # the ranks' loop: slash.run.rank.RankLoop with Scaling and Checkpointing (LivePositions)
    spec = RankSpec(query, source, group, token, report_every=report_every, control=True,
                    rate=rate, active=list(active), works=works, plan=plan)
    pg = ProcessGroup(size, worker, lambda r: (spec, r), transport=group.transport)
    try:
        with pg:
            d = Driver(pg, size, t_start + timeout, timeout)
            got = d.got
            Committer(d, store, checkpoints, cut, live=True, dropped=dropped,
                      committed=sup.committed, info=ctl.updates.manifest_info if ctl.updates is not None else None)

            def restart() -> bool:
                """A scale beyond the group asks for the cut it restarts from."""
                req = elastic.restart
                if req is None or req is resumed_scale:  # this group is that restart's
                    return False
                if scaler.finishing or got.finished(0):
                    elastic._end_restart(InvalidState(
                        f"{req.what}: the run is ending (every rank has read its input); no "
                        "checkpoint can be cut to restart from"))
                else:
                    cut.ask(pg.send, req.count, req.asked, len(checkpoints))
                return True

            def resumed(rep: Resumed, every_rank: bool) -> None:
                if every_rank:
                    _resumed(resumed_scale, elastic)
                    sup.resumed()

            if live is not None:
                show_live(d, live)
            serve_rounds(d, ctl, scaler, between=restart)
            d.on(Resumed, resumed)
            try:
                d.start(group.timeout)
                ctl.attach(pg.send)
                scaler.attach(pg.send)
                got = d.run()
            except (SystemFailure, Reported) as e:
                raise failed(e, pg, got.fail) from None
    finally:
        scaler.close()
    late.extend(got.late)
    return got.tables(), got.per_exec


def _resumed(req: Optional[_Restart], elastic: ElasticCheckpointed) -> None:
    """Every rank of a new group restored: a restart scale is done."""
    if req is not None and not req.done.is_set() and req.entry is not None:
        entry = dict(req.entry)
        entry["seconds_to_resume"] = round(time.monotonic() - req.asked, 3)
        entry["paused_ms"] = round(1000 * entry["seconds_to_resume"], 3)
        with elastic._cond:
            elastic.history.append(entry)
        elastic._end_restart(None, {"executors": entry["to"], **entry, "live": False})
