"""A live-scalable group that takes checkpoints: ``runner.run(..., checkpoint=DIR,
max_executors=M)`` (``slash run --checkpoint DIR --max-executors M``): the
group of :mod:`slash.run.live.scale` (M ranks, N active, live scales within
1..M), checkpointed and recovered as :mod:`slash.run.recovery.checkpointed` does. What a
rank records at a cut (its work left in global terms, per scale
generation), which generation a cut commits in, recovery and the restart
path beyond M are docs/elastic.md's "A live group that takes checkpoints".

Late rows (``late_output=``) go with the cut after the push that found them
(:class:`slash.run.rank_ckpt.LateRows`), as the fired windows do. Updates:
every manifest records the logic versions agreed so far, installed by every
attempt's ranks before reading. Joins run the same group with
:mod:`slash.run.live.join`'s ranks and scaler (:class:`slash.run.live.join.LiveJoinPositions`
records both sides' work left per generation and the rows the merge holds).

Invariant: a cut commits only in a generation every rank can be described
in; one that straddles a whole scale is dropped, its result segments
carried into the next committed cut (no fired window lost).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.checkpoint import Checkpoint, CheckpointStore
from slash.control import ControlServer, RunControl
from slash.control.logic import recorded_logic
from slash.errors import CheckpointCorrupt, InvalidArgument, InvalidState, Timeout
from slash.executor import GroupConfig
from slash.limits import MAX_EXECUTORS
from slash.run.live.join import SIDES, JoinLiveScaler
from slash.run.live.scale import LiveScaler
from slash.run.recovery.checkpointed import GroupKind, fingerprint, run_supervised
from slash.run.ckpt import live_gen
from slash.run.driver import Driver, serve_rounds, show_live
from slash.run.failure import Failed
from slash.run.inputs import bound_ticks
from slash.run.output import write_parquet_atomically
from slash.run.plan import AttemptPlan
from slash.run.supervisor import Rescale, RescaleCut, Supervisor
from slash.sources import Work
from slash.run.worker import RankSpec

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
    (the current attempt's :class:`slash.run.live.scale.LiveScaler`); beyond it a
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
    :func:`slash.run.live.join.restored_held`)."""
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


class LiveGroup(GroupKind):
    """A live-scalable group of ``m`` ranks, ``n`` active, scaled live within
    ``m`` and by restart beyond it (:class:`ElasticCheckpointed`):
    :func:`run_live_checkpointed`'s setting of :func:`slash.run.recovery.checkpointed.run_supervised`."""

    live = True
    finished_metrics = {"live_scales": []}

    def __init__(self, query: Any, source: Any, n: int, m: int, token: str,
                 rate: Optional[float], control: Any, live: Any) -> None:
        self.query, self.source, self.size, self.active_n = query, source, m, n
        self.token, self.rate, self.view, self.control = token, rate, live, control
        self.join = isinstance(source, tuple)  # a join's (left, right): live_join's ranks
        self.schemas = [s.schema for s in source] if self.join else [source.schema]
        self.dropped: List[int] = []
        self.t_start = time.monotonic()
        self.resumed_scale: Optional[_Restart] = None  # a restart whose new group is starting
        self.scaler: Any = None
        self.ctl: Any = None
        self.server: Any = None
        self.sup: Optional[Supervisor] = None
        self.elastic = ElasticCheckpointed()
        self.report_every = getattr(live, "report_interval", 0.5) if live is not None else 0.5

    def fingerprint(self, query: Any, source: Any) -> str:
        return fingerprint(query, source) + " in a live group"

    def start(self, sup: Supervisor, store: CheckpointStore, group: GroupConfig) -> None:
        self.sup, self.group, control = sup, group, self.control
        if isinstance(control, RunControl):
            ctl = control
            ctl.declare("checkpoint", "live_scale")
        elif not (control in (None, True, False) or isinstance(control, (str, os.PathLike))):
            raise InvalidArgument(f"control must be True, a socket path or a "
                                  f"slash.control.RunControl with max_executors=, got "
                                  f"{type(control).__name__}")
        else:
            ctl = RunControl(self.query, self.schemas[0], self.size,
                             features=("checkpoint", "live_scale"))
        self.ctl = ctl
        # every manifest records the versions agreed; a resume agrees them again
        self.updates = ctl.updates
        if self.updates is not None and sup.first is not None:
            self.updates.restore(recorded_logic(sup.first))
        elastic = self.elastic
        ctl.provide("scale-out", elastic.scale_out)
        ctl.provide("scale-in", elastic.scale_in)
        ctl.provide("elastic-status", elastic.status)
        if not isinstance(control, RunControl):  # served once it can answer every operation
            self.server = ControlServer(ctl, None if control in (None, True, False)
                                        else os.fspath(control))

    def begin(self, ck: Optional[Checkpoint], plan: AttemptPlan) -> RankSpec:
        query, source, size = self.query, self.source, self.size
        if ck is not None and ck.executors != size:
            log.info("starting a group of %d (%d active) from checkpoint %d of %d executors: "
                     "re-dealing the input left", size, self.active_n, ck.id, ck.executors)
        works, active = resume_shape(ck, source, size, self.active_n, query.time)
        ticks = lambda b: bound_ticks(query, self.schemas[0], b)  # noqa: E731
        self.scaler = JoinLiveScaler(source, query, size, len(active)) if self.join else \
            LiveScaler(source, query, size, len(active), ticks)
        self.scaler.active = list(active)
        self.ctl.regroup(size, "the group restarted from a checkpoint")
        self.elastic._attach(self.scaler)
        # the ranks' loop: slash.run.rank.RankLoop with Scaling and Checkpointing (LivePositions)
        return RankSpec(query, source, self.group, self.token, report_every=self.report_every,
                        control=True, rate=self.rate, active=list(active), works=works,
                        plan=plan)

    def deadline(self, timeout: float) -> float:
        return self.t_start + timeout

    def serve(self, d: Driver, cut: RescaleCut, checkpoints: List[Dict[str, Any]]) -> None:
        elastic, scaler, got = self.elastic, self.scaler, d.got

        def restart() -> bool:
            """A scale beyond the group asks for the cut it restarts from."""
            req = elastic.restart
            if req is None or req is self.resumed_scale:  # this group is that restart's
                return False
            if scaler.finishing or got.finished(0):
                elastic._end_restart(InvalidState(
                    f"{req.what}: the run is ending (every rank has read its input); no "
                    "checkpoint can be cut to restart from"))
            else:
                cut.ask(d.send, req.count, req.asked, len(checkpoints))
            return True

        if self.view is not None:  # the live page
            show_live(d, self.view)
        serve_rounds(d, self.ctl, scaler, between=restart)

    def attach(self, send: Callable[[int, Any], None]) -> None:
        self.ctl.attach(send)
        self.scaler.attach(send)

    def resumed(self) -> None:
        _resumed(self.resumed_scale, self.elastic)

    def after(self) -> None:
        if self.scaler is not None:
            self.scaler.close()
        self.elastic._detach()

    def rescaled(self, r: Rescale) -> None:
        req = self.elastic.restart
        size, old_active = self.size, len(self.scaler.active)
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
        self.resumed_scale = req
        self.size = self.active_n = max(size, r.count)

    def failed(self, f: Failed, rec: Dict[str, Any], last: Optional[Checkpoint]) -> None:
        rec["active_at_cut"] = (None if last is None else resume_shape(
            last, self.source, self.size, self.active_n, self.query.time)[1])
        assert self.sup is not None
        log.warning("executor rank %s failed (%s): restarting the group of %d from %s "
                    "(restart %d of at most %d)", f.rank, f.cause, self.size,
                    f"checkpoint {last.id}" if last is not None else "the beginning",
                    self.sup.restarts, self.sup.policy.max_restarts)
        if self.resumed_scale is not None and self.resumed_scale.done.is_set():
            self.resumed_scale = None

    def end(self) -> None:
        self.elastic._end()
        if self.ctl is not None:
            self.ctl.close()
        if self.server is not None:
            self.server.close()

    def end_metrics(self, per_exec: List[Dict[str, Any]], result: pa.Table,
                    checkpoints: List[Dict[str, Any]]) -> Dict[str, Any]:
        scales = self.elastic.history
        assert self.sup is not None
        log.info("query ran on a live group of %d in %.2f s: %d result rows, %d checkpoints "
                 "(%d dropped), %d recoveries, %d scales", self.size,
                 time.monotonic() - self.t_start, result.num_rows, len(checkpoints),
                 len(self.dropped), len(self.sup.recoveries), len(scales))
        totals = {k: sum(int(x.get(k, 0) or 0) for x in per_exec)
                  for k in ("late_records", "null_time_records")}
        totals["records_in"] = sum(int(x.get("records_read", 0) or 0) for x in per_exec)
        return {**totals, "rows": result.num_rows, "executors": len(self.scaler.active),
                "max_executors": self.size, "checkpoints_dropped": self.dropped,
                "live_scales": scales}


def run_live_checkpointed(query: Any, source: Any, n: int, m: int, group: GroupConfig, token: str,
                          *, directory: str, every: Any, keep: int, max_restarts: int,
                          timeout: float, rate: Optional[float], control: Any,
                          metrics: Optional[Dict[str, Any]], output: Optional[str],
                          live: Any = None, late: Optional[List[pa.Table]] = None,
                          sink: Any = None) -> pa.Table:
    """:func:`slash.runner.run` with ``checkpoint=`` and ``max_executors=``:
    the live group of ``m`` ranks, ``n`` active, with checkpoints (see the
    module doc): :func:`slash.run.recovery.checkpointed.run_supervised` of a :class:`LiveGroup`.
    ``control``: as for the live group (True, a socket path or a
    RunControl); ``metrics`` receives what a checkpointed run's does
    (checkpoints, recoveries, records_replayed) plus ``live_scales`` (each
    scale, ``path`` "live" or "restart") and ``checkpoints_dropped``;
    ``late``, if given, receives the late rows (``late_output=``); ``sink``:
    a transactional sink given each committed checkpoint's windows, exactly
    once (:class:`slash.run.delivery.Delivery`; a cut dropped for
    straddling a live scale goes with the next commit)."""
    kind = LiveGroup(query, source, n, m, token, rate, control, live)
    finalize = lambda raw: query.finalize(raw, *kind.schemas)  # noqa: E731
    result = run_supervised(kind, query, source, group, directory=os.fspath(directory),
                            every=every, keep=keep, max_restarts=max_restarts, timeout=timeout,
                            finalize=finalize, metrics=metrics, late=late, sink=sink)
    if output:
        write_parquet_atomically(result, output)
    return result


def _resumed(req: Optional[_Restart], elastic: ElasticCheckpointed) -> None:
    """Every rank of a new group restored: a restart scale is done."""
    if req is not None and not req.done.is_set() and req.entry is not None:
        entry = dict(req.entry)
        entry["seconds_to_resume"] = round(time.monotonic() - req.asked, 3)
        entry["paused_ms"] = round(1000 * entry["seconds_to_resume"], 3)
        with elastic._cond:
            elastic.history.append(entry)
        elastic._end_restart(None, {"executors": entry["to"], **entry, "live": False})
