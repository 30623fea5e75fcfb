"""The one driver loop of a local group: every entry point's group of ranks
(plain, checkpointed, live, checkpointed live) is served by :class:`Driver`.

The loop, as Redis' ``ae.c`` runs its events: start the group (every rank's
address, then the list of them to every rank), then until every rank has
finished:

1. give each registered **turn** its go, in order (a control round, a live
   scale, a rescale's cut request, an epoch change; a turn that returns True
   takes the rest of this go: one agreement at a time);
2. receive the next report, waiting at most the shortest **tick** a feature
   asked for (so turns come round while the ranks are quiet);
3. a rank's :class:`~slash.run.protocol.Error` ends the loop as
   :class:`~slash.run.failure.Reported` (keeping the error's type,
   attributes and cause); any other report is kept by
   :class:`~slash.run.supervisor.Reports` if it is one every group keeps
   (progress, resumed, checkpoint images, a rank's result) and then handed
   to the **handlers** registered for its type, with what ``Reports`` made
   of it; a report of no registered type goes to the **claims** (the
   control rounds' and live scale's own tuples) until one takes it.

The handler table is :class:`Dispatch`, which a Spark stream's handle
feeds from its rendezvous thread (its tasks' reports, the same handlers'
protocol, no loop of its own). Features live with their own modules and
register here; the driver-side pieces every checkpointed group shares are
in this module:
:class:`Committer` (a cut's manifest once every rank wrote its image; in a
live group only in a scale generation every rank can be described in).

Invariant: a report is handled once, by the one thread that feeds the
table (the loop's, or a stream's rendezvous thread); a turn or a
handler never blocks (anything slow runs on the caller's threads and is
picked up by a turn).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional

from slash.checkpoint import Checkpoint, CheckpointStore
from slash.errors import SystemFailure, Timeout
from slash.run.launcher import ProcessGroup
from slash.run.ckpt import commit
from slash.run.failure import first_cause, reported
from slash.run.protocol import CheckpointWritten, Error, Metrics, Windows
from slash.run.supervisor import Reports, RescaleCut

log = logging.getLogger(__name__)

#: a handler of a typed report: called with the report and what Reports kept of it
Handler = Callable[[Any, Any], None]


class Dispatch:
    """The handler table of a driver: each report to the **handlers**
    registered for its type (in order), with what the caller kept of it; a
    report no handler is registered for to the **claims** until one takes
    it. :class:`Driver` feeds it from its group's loop; a Spark stream's
    handle (:mod:`slash.spark.stream_handle`) from its rendezvous thread.
    It never raises a rank's error: the feeder decides what an Error ends."""

    def __init__(self) -> None:
        self._handlers: Dict[type, List[Handler]] = {}
        self._claims: List[Callable[[Any], bool]] = []

    def on(self, kind: type, handler: Handler) -> None:
        """``handler(report, kept)`` for each report of type ``kind``."""
        self._handlers.setdefault(kind, []).append(handler)

    def claim(self, take: Callable[[Any], bool]) -> None:
        """``take(report)`` for each report no handler is registered for, until one returns True."""
        self._claims.append(take)

    def handle(self, rep: Any, kept: Any = None) -> None:
        """Hands ``rep`` to its handlers, else (``kept`` None) to the claims."""
        handlers = self._handlers.get(type(rep))
        if handlers is not None:
            for h in handlers:
                h(rep, kept)
        elif kept is None and not any(take(rep) for take in self._claims):
            log.debug("a report no feature of this run takes: %r", rep[:2])


class Driver(Dispatch):
    """The loop that serves the group ``pg`` of ``n`` ranks until every rank
    finished (:meth:`run`), or until ``deadline`` (time.monotonic) passes:
    then SystemFailure naming ``timeout`` seconds. ``wait_for_cause``: a rank
    whose peer went away is raised as that peer's own error when it arrives
    within :data:`slash.run.failure.CAUSE_GRACE_S` (a run without restarts
    reports the first cause; a supervised one finds the dead rank itself)."""

    def __init__(self, pg: ProcessGroup, n: int, deadline: float, timeout: float,
                 wait_for_cause: bool = False) -> None:
        super().__init__()
        self.pg, self.n = pg, n
        self.deadline, self.timeout = deadline, timeout
        self.wait_for_cause = wait_for_cause
        self.got = Reports(n)
        self.tick: Optional[float] = None
        self._turns: List[Callable[[], Optional[bool]]] = []

    def every_turn(self, turn: Callable[[], Optional[bool]], tick: float) -> None:
        """``turn()`` runs before each receive, at least every ``tick`` seconds;
        True takes the rest of this go from the turns registered after it."""
        self._turns.append(turn)
        self.tick = tick if self.tick is None else min(self.tick, tick)

    def send(self, rank: int, msg: Any) -> None:
        self.pg.send(rank, msg)

    # -- the loop ---------------------------------------------------------------------------------
    def start(self, within: float) -> None:
        """Every rank's address within ``within`` seconds, then the list of
        them to every rank."""
        by = self.got.t0 + within
        got: Dict[int, str] = {}
        while len(got) < self.n:
            try:
                rep = self.pg.recv(timeout=max(0.0, by - time.monotonic()))
            except Timeout:
                raise SystemFailure(f"only {len(got)} of {self.n} executors started within "
                                    f"{within:g} s") from None
            if isinstance(rep, Error):
                self._raise(rep)
            got[rep.rank] = rep.address
        self.pg.broadcast([got[r] for r in range(self.n)])

    def run(self) -> Reports:
        """Serves the group until every rank finished; returns what the ranks reported."""
        while self.got.running:
            for turn in self._turns:
                if turn():
                    break
            left = max(0.0, self.deadline - time.monotonic())
            try:
                rep = self.pg.recv(timeout=left if self.tick is None else min(left, self.tick))
            except Timeout:
                if self.tick is not None and left > self.tick:
                    continue
                raise SystemFailure(f"query did not finish within {self.timeout} s") from None
            self.dispatch(rep)
        return self.got

    def dispatch(self, rep: Any) -> None:
        if isinstance(rep, Error):
            self._raise(rep)
        self.handle(rep, self.got.take(rep))

    def _raise(self, rep: Error) -> None:
        raise reported(first_cause(rep, self.pg) if self.wait_for_cause else rep)


class Committer:
    """Commits each cut once every rank of the group wrote its image (the
    manifest, last: :func:`slash.run.ckpt.commit`), appending it to
    ``checkpoints``; then ``cut`` (a rescale waiting for a cut) hears of it
    and ``committed`` gets the checkpoint (a transactional sink's commit).

    In a live group (``live``) a cut commits only in a scale generation every
    rank can be described in (:mod:`slash.run.recovery.live`); a cut that straddles a
    whole scale is dropped (its id appended to ``dropped``) and its result
    segments are carried into the next committed cut, so no fired window is
    lost; a rescale waiting for it asks again. ``info()``, if given, adds to
    each manifest's info (the logic versions agreed so far)."""

    def __init__(self, d: Driver, store: CheckpointStore, checkpoints: List[Dict[str, Any]],
                 cut: RescaleCut, live: bool = False,
                 committed: Optional[Callable[[Checkpoint], None]] = None,
                 dropped: Optional[List[int]] = None,
                 info: Optional[Callable[[], Dict[str, Any]]] = None) -> None:
        self.store, self.checkpoints, self.cut, self.info = store, checkpoints, cut, info
        self.live, self.committed = live, committed
        self.dropped = dropped if dropped is not None else []
        self.carried: Dict[str, Dict[str, int]] = {}  # segments of cuts not committed
        d.on(CheckpointWritten, self._written)

    def _written(self, rep: CheckpointWritten, kept: Any) -> None:
        if kept is None:  # not every rank wrote this cut yet
            return
        cid, gen = rep.ckpt_id, None
        if self.live:
            common = set.intersection(*(set(st.get("gens", [0])) for _, _, st in kept.values()))
            if not common:
                for _, segs, _ in kept.values():
                    self.carried.update(segs)
                self.dropped.append(cid)
                log.warning("checkpoint %d not committed: its cut straddles a live scale (no "
                            "generation every rank can be described in); its windows go with "
                            "the next cut", cid)
                self.cut.again()
                return
            gen = max(common)
        ck = commit(self.store, cid, kept, self.checkpoints, self.carried, gen=gen,
                    info=self.info() if self.info is not None else None)
        self.carried = {}
        if self.committed is not None:
            self.committed(ck)
        self.cut.committed(cid, len(self.checkpoints))


def feed_control(d: Dispatch, ctl: Any, scaler: Any = None) -> None:
    """The reports the control plane reads (metrics, acknowledgements) to
    ``ctl`` (:class:`slash.control.RunControl`) and ``scaler``."""
    d.on(Metrics, lambda rep, _: ctl.on_message(rep))
    d.claim(ctl.on_message)
    if scaler is not None:
        d.claim(scaler.on_message)


def serve_rounds(d: Driver, ctl: Any, scaler: Any = None,
                 between: Optional[Callable[[], bool]] = None) -> None:
    """The control plane's agreements on ``d``, one at a time: a live scale
    in progress (``scaler``, :class:`slash.run.live.scale.LiveScaler`) goes on
    first; then ``between`` (a restart's cut request: True when it acted);
    then a control round (``ctl``, :class:`slash.control.RunControl`: an
    update), and a live scale when no update is being agreed. Their reports
    (metrics, acknowledgements) go to ``ctl`` and ``scaler``."""
    def turn() -> bool:
        if scaler is not None and scaler.busy:
            scaler.service()
            return True
        if between is not None and between():
            return True
        ctl.service()
        if scaler is not None and not ctl.agreeing:
            scaler.service()
        return True

    d.every_turn(turn, ctl.tick)
    feed_control(d, ctl, scaler)


def show_live(d: Dispatch, live: Any) -> None:
    """Each rank's metrics and fired windows to the live view ``live``
    (:class:`slash.metrics.LiveMetrics`), as they arrive."""
    d.on(Metrics, lambda rep, _: live.update_executor(rep.rank, rep.snapshot))
    d.on(Windows, lambda rep, _: live.executor_windows(rep.rank, rep.mark, rep.windows))
