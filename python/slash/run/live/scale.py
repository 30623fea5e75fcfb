"""Live scale-out / scale-in of a ``slash run`` within a pre-provisioned group
(``runner.run(..., max_executors=M)``, ``slash run --max-executors M``; the
protocol in full is docs/elastic.md's "Live scale-out / scale-in within a
provisioned group").

The group has M ranks, the first N active, the rest standby (reading
nothing, leading nothing, their watermark following the active ranks').
``scale_out(k)`` / ``scale_in(k)`` change the active set at an agreed point,
without a restart: **prepare** (every rank stops pushing between batches
and answers with its work left in global terms and its watermark), then
**commit** (the driver deals all the work left over the new active set,
:func:`deal_work`; rank 0 spreads leadership over it by live moves). A
window join scales by the same protocol with a work list per side
(:mod:`slash.run.live.join`); a group with checkpoints is :mod:`slash.run.recovery.live`'s.

Invariants: every unit left is in exactly one new list (no record read
twice or skipped); a unit goes only to a rank whose watermark is at most
its bound, and scale-in picks the leavers among the highest watermarks (no
record late because of a scale).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from slash.errors import InvalidArgument, InvalidState, SystemFailure, Timeout
from slash.run.protocol import (Epoch, Move, ScaleAck, ScaleCommit, ScaleFinish, ScaleIdle,
                                 ScalePrepare)
from slash.sources import FileSource, Watermark, promises

log = logging.getLogger(__name__)

Work = List[List[int]]
NO_WATERMARK = -(1 << 63)


# ---- the deal ------------------------------------------------------------------------------------
def deal_work(source: Any, time_col: str, left: Dict[int, Work], wm: Dict[int, Optional[int]],
              ticks: Callable[[Any], Optional[int]], active: Sequence[int]) -> Dict[int, Work]:
    """Deals the units ``left`` (rank -> its remaining work) over ``active``:
    items sorted as the first split sorts units (no statistics first, then
    minimum time, then unit index), each to the least loaded (rows) active
    rank that may take it - its watermark ``wm[r]`` (ticks; None: nothing
    published) at most the unit's bound (a unit without statistics: only a
    rank with nothing published); ties: its current holder, then the
    lowest rank. Raises :class:`InvalidState` naming a unit no active rank
    may take (nothing changes then).

    >>> from slash.sources import Unit
    >>> class S:  # four units of 10 rows, bounds 0, 10, 20, 30
    ...     units = [Unit("f", i, 10) for i in range(4)]
    ...     def unit_bounds(self, t): return [0, 10, 20, 30]
    >>> deal_work(S(), "t", {0: [[1, 3], [3, 0]], 1: []}, {0: 5, 1: None}, lambda b: b, [0, 1])
    {0: [[1, 3]], 1: [[3, 0]]}
    """
    bounds = source.unit_bounds(time_col)
    holder: Dict[int, int] = {}
    items: Dict[int, int] = {}
    for r, lst in left.items():
        for g, k in lst:
            g, k = int(g), int(k)
            if g in items:
                raise SystemFailure(f"live scale: unit {g} is left to ranks {holder[g]} and {r}")
            items[g], holder[g] = k, r

    def order(g: int) -> Tuple[int, Any, int]:
        b = ticks(bounds[g])
        return (0, 0, g) if b is None else (1, b, g)

    load = {r: 0 for r in active}
    out: Dict[int, Work] = {r: [] for r in active}
    for g in sorted(items, key=order):
        b = ticks(bounds[g])
        ok = [r for r in active if wm.get(r) is None or (b is not None and wm[r] <= b)]
        if not ok:
            u = source.units[g]
            raise InvalidState(f"live scale: no active rank may read unit {g} ({u.path!r}, "
                               f"index {u.index}) without its rows being late (its bound {b} is "
                               f"below every active rank's watermark); nothing changed")
        r = min(ok, key=lambda r: (load[r], r != holder[g], r))
        out[r].append([g, items[g]])
        load[r] += source.units[g].rows
    return out


def spread_moves(leaders: Sequence[int], active: Sequence[int]) -> Dict[int, int]:
    """Moves that make ``active`` lead every partition, evenly (counts differ
    by at most one), moving as few as it can: partitions of inactive ranks
    first, then the surplus of the busiest active ones.

    >>> spread_moves([0, 0, 0, 0], [0, 1])
    {2: 1, 3: 1}
    >>> spread_moves([0, 1, 0, 1], [0])
    {1: 0, 3: 0}
    """
    act = sorted(set(active))
    count = {r: 0 for r in act}
    for r in leaders:
        if r in count:
            count[r] += 1
    q, extra = divmod(len(leaders), len(act))
    # the ranks that already lead the most keep the "+1" slots: fewer moves
    by_load = sorted(act, key=lambda r: (-count[r], r))
    target = {r: q + (1 if i < extra else 0) for i, r in enumerate(by_load)}
    moves: Dict[int, int] = {}
    spare: List[int] = []
    kept = {r: 0 for r in act}
    for p, r in enumerate(leaders):
        if r in kept and kept[r] < target[r]:
            kept[r] += 1
        else:
            spare.append(p)
    for p in spare:
        r = min(act, key=lambda a: (kept[a] - target[a], a))
        kept[r] += 1
        if leaders[p] != r:
            moves[p] = r
    return moves


# ---- the executor's side -------------------------------------------------------------------------
class ScaleAgent:
    """One rank's end of live scaling. The push loop reads ``work`` (global
    terms, :meth:`FileSource.read_work`) from ``pos``; :meth:`handle` takes
    the driver's scale messages (:mod:`slash.run.protocol`, through
    :class:`slash.control.logic.ExecutorControl`'s ``other``). ``changed`` tells the
    loop to reopen its reader on the new work; ``finish`` that the stream is
    over."""

    def __init__(self, rank: int, size: int, work: Work, active: Sequence[int], send: Any,
                 conn: Any, timeout: float) -> None:
        self.rank, self.size = rank, size
        self.work: Work = [list(w) for w in work]
        self.pos: Optional[List[int]] = None
        self.active = sorted(active)
        self.send, self.conn, self.timeout = send, conn, timeout
        self.wm: Optional[int] = None   # the highest Watermark promise pushed (ticks)
        self.changed = False
        self.finish = False
        self.sid = 0
        self.ex: Any = None
        self.ctl: Any = None
        self.paused_seconds = 0.0
        self._idle_told = -1
        self.source: Any = None
        self.time: Optional[str] = None

    @property
    def is_active(self) -> bool:
        return self.rank in self.active

    def start(self, ex: Any, ctl: Any, source: Any, time_col: str,
              restored: bool = False) -> None:
        """Before any push: the leader map over the active ranks (unless
        ``restored``: the checkpoint's restore set it), and standby if this
        rank is not active."""
        self.ex, self.ctl = ex, ctl
        self.source, self.time = source, time_col
        if not restored:
            parts = ex.metrics["partitions"]
            ex.set_leaders([self.active[p % len(self.active)] for p in range(parts)])
        if not self.is_active:
            ex.set_standby([r for r in self.active if r != self.rank])

    def advanced(self, ticks: int) -> None:
        if self.wm is None or ticks > self.wm:
            self.wm = ticks

    def promise(self) -> Any:
        """A Watermark for what this rank's work has left (the smallest bound
        of its units from ``pos`` on, when all have statistics), else None.
        Sound by the source's invariant: no row left is older."""
        left = self.left()
        if not left or self.source is None:
            return None
        b = self.source.unit_bounds(self.time)
        w = promises([b[int(g)] for g, _ in left])[0]
        return None if w is None else Watermark(w)

    def left(self) -> Work:
        return FileSource.remaining(self.work, self.pos)

    def idle(self) -> None:
        """Tells the driver (once per commit) that this rank has nothing to read."""
        if self._idle_told != self.sid:
            self._idle_told = self.sid
            self.send(ScaleIdle(self.rank, self.sid))

    def _commit_expected(self, msg: Any) -> None:
        if isinstance(msg, ScaleFinish):
            raise SystemFailure(f"executor rank {self.rank}: told to finish inside a scale request")
        self.ctl.other_message(msg)  # a rebalance request meanwhile

    def handle(self, msg: Any) -> None:
        if isinstance(msg, Epoch):
            # the latency controller's epoch length (LiveScaler.broadcast): in force by the
            # next epoch end; what windows hold never changes
            self.ex.set_epoch(epoch_ms=msg.epoch_ms or None, epoch_bytes=msg.epoch_bytes or None)
            return
        if isinstance(msg, ScaleFinish):
            self.finish = True
            return
        if isinstance(msg, ScaleCommit):
            raise SystemFailure(f"executor rank {self.rank}: scale message 'commit' out of turn")
        if not isinstance(msg, ScalePrepare):
            raise SystemFailure(f"executor rank {self.rank}: unexpected message from the driver "
                                f"{msg!r:.80}")
        sid, joining = msg.sid, msg.joining
        t0 = time.monotonic()
        ex = self.ex
        if self.rank in joining:
            ex.set_standby(None)  # frozen at what it published: at most every active rank's
        # its watermark as the group knows it or soon will: what it published (a standby's
        # followed value too) or the highest promise it pushed, whichever is later
        self._before_ack()
        wm = max(NO_WATERMARK if self.wm is None else self.wm, int(ex.metrics["watermark"]))
        self.send(ScaleAck(self.rank, sid, {"left": self._left_report(),
                                            "wm": None if wm <= NO_WATERMARK else wm}))
        got: ScaleCommit = self.ctl.await_commit(ex, "scale", sid, t0 + self.timeout,
                                                 self._commit_expected)
        work, active, moves_id = got.work, got.active, got.moves_id
        self.sid = sid
        self._adopt_work(work)
        self.active = sorted(active)
        self.changed = True
        if self.is_active:
            ex.set_standby(None)
        else:
            ex.set_standby(list(self.active))
        if self.rank == 0 and moves_id is not None:
            self.ctl.moves.add(Move(moves_id, {"spread": self.active}))
        self.paused_seconds += time.monotonic() - t0
        log.info("%s: %s with %s after scale request %d (paused %.1f ms)", self._who(),
                 "active" if self.is_active else "standby", self._units(), sid,
                 1000 * (time.monotonic() - t0))

    # what a kind of work (one list here, one per side for a join) changes in a scale request
    def _before_ack(self) -> None:
        """Before answering a prepare: nothing held outside ``left()``."""

    def _left_report(self) -> Any:
        """What the prepare answer says is left (global terms)."""
        return self.left()

    def _adopt_work(self, work: Any) -> None:
        """The commit's work for this rank, read from its start."""
        self.work, self.pos = [list(w) for w in work], None

    def _who(self) -> str:
        return f"executor {self.rank}"

    def _units(self) -> str:
        return f"{len(self.work)} unit(s)"


# ---- the driver's side ---------------------------------------------------------------------------
class _Op:
    def __init__(self, sid: int, count: int) -> None:
        self.sid, self.count = sid, count
        self.done = threading.Event()
        self.acks: Dict[int, Dict[str, Any]] = {}
        self.sent = False
        self.joining: List[int] = []
        self.result: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None
        self.t0 = 0.0


class LiveScaler:
    """The driver's end: ``scale_out(k)`` / ``scale_in(k)`` (control server
    threads) queue an operation that :meth:`service` (the runner's loop)
    carries out; :meth:`on_message` takes the ranks' ``scale-*`` messages."""

    def __init__(self, source: Any, query: Any, size: int, active: int,
                 ticks: Callable[[Any], Optional[int]], request_timeout: float = 60.0) -> None:
        self.source, self.query, self.size = source, query, size
        self.active = list(range(active))
        self.ticks = ticks
        self.timeout = request_timeout
        self._lock = threading.Lock()
        self._queue: List[_Op] = []
        self._op: Optional[_Op] = None
        self._sid = 0
        self.idle: set = set()
        self.finishing = False
        self.send: Optional[Callable[[int, Any], None]] = None
        self.history: List[Dict[str, Any]] = []
        self.moves_id = 1 << 30  # rebalance request ids (MoveWaiters) stay below this
        self.closed = False
        self._outbox: List[Any] = []  # messages for every rank, sent by service()

    # -- operations
    def scale_out(self, k: int) -> Dict[str, Any]:
        return self._request(len(self.active) + k, f"scale-out {k}")

    def scale_in(self, k: int) -> Dict[str, Any]:
        return self._request(len(self.active) - k, f"scale-in {k}")

    def _request(self, count: int, what: str) -> Dict[str, Any]:
        if not 1 <= count <= self.size:
            more = ("; provision more (a larger max_executors) or run with checkpoint=, "
                    "which takes a scale beyond it by restart" if count > self.size else "")
            raise InvalidArgument(f"{what}: {count} active executors is outside 1..{self.size} "
                                  f"(the group was provisioned with max_executors={self.size}; "
                                  f"{len(self.active)} active now{more})")
        with self._lock:
            if self.closed or self.finishing:
                raise InvalidState(f"{what}: the run is ending (every rank has read its input)")
            self._sid += 1
            op = _Op(self._sid, count)
            self._queue.append(op)
        if not op.done.wait(self.timeout + 5):
            raise Timeout(f"{what}: not agreed within {self.timeout} s")
        if op.error is not None:
            raise op.error
        assert op.result is not None
        return op.result

    def broadcast(self, msg: Any) -> None:
        """Queues ``msg`` for every rank (any thread); the runner's loop
        sends it at its next :meth:`service` (:class:`slash.run.protocol.Epoch`: the
        latency controller's epoch length, taken by :meth:`ScaleAgent.handle`)."""
        with self._lock:
            if self.closed or self.finishing:
                raise InvalidState("the run is ending (every rank has read its input)")
            self._outbox.append(msg)

    @property
    def busy(self) -> bool:
        return self._op is not None

    def status(self) -> Dict[str, Any]:
        act = list(self.active)
        return {"active_ranks": act, "standby_ranks": [r for r in range(self.size) if r not in act],
                "max_executors": self.size, "scales": list(self.history)}

    # -- the runner's loop
    def attach(self, send: Callable[[int, Any], None]) -> None:
        self.send = send

    def on_message(self, msg: Tuple[Any, ...]) -> bool:
        if isinstance(msg, ScaleAck):
            with self._lock:
                op = self._op
                if op is not None and op.sid == msg.sid:
                    op.acks[msg.rank] = msg.report
            return True
        if isinstance(msg, ScaleIdle):
            with self._lock:
                if msg.sid == self._sid_committed():
                    self.idle.add(msg.rank)
            return True
        return False

    def _sid_committed(self) -> int:
        return self.history[-1]["sid"] if self.history else 0

    def service(self) -> None:
        """Advances the operation in progress, starts the next, or ends the
        stream once every rank is idle."""
        assert self.send is not None
        with self._lock:
            out, self._outbox = self._outbox, []
            op = self._op
        for msg in out:
            for r in range(self.size):
                self.send(r, msg)
        with self._lock:
            op = self._op
            if op is None and self._queue:
                op = self._op = self._queue.pop(0)
        if op is None:
            if not self.finishing and len(self.idle) == self.size:
                self.finishing = True
                for r in range(self.size):
                    self.send(r, ScaleFinish())
            return
        if not op.sent:
            if self.finishing:
                return self._end(op, InvalidState("the run is ending: every rank has read its "
                                                  "input"))
            op.t0 = time.monotonic()
            op.joining = [r for r in range(self.size) if r not in self.active][
                :max(0, op.count - len(self.active))]
            op.sent = True
            for r in range(self.size):
                self.send(r, ScalePrepare(op.sid, op.joining))
            return
        if len(op.acks) < self.size:
            if time.monotonic() - op.t0 > self.timeout:
                raise SystemFailure(f"live scale {op.sid}: ranks "
                                    f"{sorted(set(range(self.size)) - set(op.acks))} did not "
                                    f"answer within {self.timeout} s")
            return
        self._commit(op)

    def _commit(self, op: _Op) -> None:
        old = list(self.active)
        # a joining standby's watermark (frozen at prepare) is at most every active rank's,
        # and an active rank's at most the bound of every unit it holds: the units can move
        wm = {r: op.acks[r]["wm"] for r in range(self.size)}
        if op.count >= len(old):
            new = sorted(old + op.joining)
        else:  # leavers: the highest watermarks (their units may go to any rank that stays);
            # on a tie the higher ranks leave (rank 0 stays active while it can)
            by = sorted(old, key=lambda r: (NO_WATERMARK if wm[r] is None else wm[r], r))
            new = sorted(by[:op.count])
        left = {r: op.acks[r]["left"] for r in range(self.size)}
        err: Optional[BaseException] = None
        try:
            work = self._deal(left, wm, new)
        except InvalidState as e:  # nothing changes: each rank goes on with what it has
            err, new = e, old
            work = {r: left[r] for r in old}
        moving = new != old and self._moves
        empty = self._no_work()
        for r in range(self.size):
            self.send(r, ScaleCommit(op.sid, work.get(r, empty), new,
                                     self.moves_id + op.sid if moving and r == 0 else None))
        pause = time.monotonic() - op.t0
        with self._lock:
            self.active = new
            self.idle = {r for r in range(self.size) if not self._has_work(work.get(r, empty))}
            entry = {"sid": op.sid, "from": len(old), "to": len(new), "active_ranks": new,
                     "joined": sorted(set(new) - set(old)), "left": sorted(set(old) - set(new)),
                     "paused_ms": round(1000 * pause, 3), "at": time.time(), "path": "live"}
            self.history.append(entry)
        if err is not None:
            return self._end(op, err)
        log.warning("live scale: %d -> %d active executors (ranks %s)%s; input paused %.1f ms",
                    len(old), len(new), new, self._what, 1000 * pause)
        self._end(op, None, {"executors": len(new), **entry, "live": True})

    # what a kind of work (one list here, one per side for a join) changes in a commit
    _what = ""  # how the log names the query

    @property
    def _moves(self) -> bool:
        """Whether a scale change spreads leadership over the new active set."""
        return True

    def _deal(self, left: Dict[int, Any], wm: Dict[int, Optional[int]],
              active: List[int]) -> Dict[int, Any]:
        """Every rank's work left (``left``) dealt over ``active`` (:func:`deal_work`)."""
        return deal_work(self.source, self.query.time, left, wm, self.ticks, active)

    def _no_work(self) -> Any:
        return []

    def _has_work(self, work: Any) -> bool:
        return bool(work)

    def _end(self, op: _Op, err: Optional[BaseException],
             result: Optional[Dict[str, Any]] = None) -> None:
        with self._lock:
            self._op = None
        op.error, op.result = err, result
        op.done.set()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            pending = self._queue + ([self._op] if self._op is not None else [])
            self._queue, self._op = [], None
        for op in pending:
            op.error = InvalidState("the run ended before the scale took effect")
            op.done.set()
