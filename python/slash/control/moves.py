"""Moves of partition leadership in a running group (``rebalance``).

The rank side: rank 0 applies the driver's move requests
(:class:`MoveRequests`, served by the rank loop between batches). The
driver side: :class:`LiveMoves`, the feature that registers ``rebalance``
with a run's control facade (:class:`slash.control.RunControl`), choosing the
moves (:func:`rebalance_spec`) and waiting for rank 0's answer
(:class:`MoveWaiters`). A checkpointed run registers its own ``rebalance``
instead (:meth:`slash.run.recovery.checkpointed.CheckpointedRun.rebalance`), which uses the
same choice and waiters.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from slash import errors
from slash.errors import InvalidArgument, InvalidState, SlashError, SystemFailure, Timeout
from slash.run.live.scale import spread_moves
from slash.run.protocol import Move, Moved

log = logging.getLogger(__name__)

#: how long a control request waits for the running stream to act on it
REQUEST_TIMEOUT = 60.0


def parse_moves(spec: Any) -> Dict[int, int]:
    """``"P:R,P:R"`` or a mapping -> {partition: rank} (ints >= 0).

    >>> parse_moves("3:1, 7:0")
    {3: 1, 7: 0}
    """
    if isinstance(spec, str):
        out: Dict[int, int] = {}
        for item in spec.split(","):
            if not item.strip():
                continue
            p, sep, r = item.partition(":")
            try:
                if not sep:
                    raise ValueError(item)
                out[int(p)] = int(r)
            except ValueError:
                raise InvalidArgument(f"moves: {item.strip()!r} is not PARTITION:RANK "
                                      f"(e.g. --moves 3:1,7:0)") from None
        spec = out
    if not isinstance(spec, dict) or not spec:
        raise InvalidArgument(f"moves must map partition -> rank, e.g. '3:1,7:0', got {spec!r}")
    moves = {}
    for p, r in spec.items():
        try:
            p, r = int(p), int(r)
        except (TypeError, ValueError):
            raise InvalidArgument(f"moves: {p!r}:{r!r} is not PARTITION:RANK") from None
        if p < 0 or r < 0:
            raise InvalidArgument(f"moves: partition and rank must be >= 0, got {p}:{r}")
        moves[p] = r
    return moves


def _load(snap: Dict[str, Any]) -> Tuple[float, int]:
    """How loaded a leader is: (merge seconds, delta bytes received)."""
    return float(snap.get("merge_seconds") or 0.0), int(snap.get("delta_bytes_received") or 0)


def rebalance_spec(args: Dict[str, Any], per: Dict[int, Dict[str, Any]], n: int,
                   candidates: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """What rank 0 is asked to move for ``rebalance``: ``{"moves": {p: r}}``
    for explicit moves (``args["moves"]``), else ``{"from_rank": f,
    "to_rank": t}``: given in ``args``, or chosen from the executors' latest
    metrics ``per`` (rank -> snapshot): from the leader with the most merge
    time (then delta bytes received) to the least loaded one, among
    ``candidates`` if given (a live group's active ranks: a standby is
    always the least loaded). Rank 0 moves half of the partitions ``f``
    leads (see :class:`MoveRequests`)."""
    if args.get("moves") not in (None, "", {}):
        moves = parse_moves(args["moves"])
        bad = sorted(r for r in moves.values() if r >= n)
        if bad:
            raise InvalidArgument(f"moves: rank {bad[0]} is not in 0..{n - 1} (the run has {n} "
                                  f"executors)")
        return {"moves": moves}
    f, t = args.get("from_rank"), args.get("to_rank")
    if n < 2:
        raise InvalidArgument("rebalance needs at least 2 executors")
    if f is None or t is None:
        # candidates: the ranks an automatic choice may name (a live group's active ones)
        pool = list(range(n)) if candidates is None else list(candidates)
        have = {r: per[r] for r in pool if r in per}
        if len(have) < len(pool):
            raise InvalidState(f"rebalance: metrics from {len(have)} of {len(pool)} executors so "
                               "far; retry in a moment or give --moves")
        if len(have) < 2:
            raise InvalidArgument("rebalance needs at least 2 active executors")
        order = sorted(have, key=lambda r: _load(have[r]))
        f = order[-1] if f is None else f
        t = next(r for r in order if r != f) if t is None else t
    for name, v in (("from_rank", f), ("to_rank", t)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
            raise InvalidArgument(f"rebalance: {name} must be a rank in 0..{n - 1}, got {v!r}")
    if f == t:
        raise InvalidArgument(f"rebalance: from_rank and to_rank are both {f}")
    return {"from_rank": f, "to_rank": t}


class MoveRequests:
    """Rank 0's side of ``rebalance``: the driver's ``("move", id, spec)``
    requests (spec from :func:`rebalance_spec`), applied in order with
    ``Executor.move_partitions`` at the push loop's next chance. A request
    made while the previous move is still being agreed waits (it is tried
    again at every call of :meth:`apply`). ``{"from_rank": f, "to_rank": t}``
    moves every other partition ``f`` leads by the current map (half of
    them, at least one). Each request is answered ``("ctl-moved", 0, id,
    {"moves": {p: r}, "map_version": v})`` once rank 0 accepted it (it takes
    effect at each executor's next epoch end), or ``{"error": [type,
    message]}``."""

    def __init__(self, send: Callable[[Any], None], rank: int = 0) -> None:
        self.send = send
        self.rank = rank
        self.pending: List[Tuple[int, Dict[str, Any]]] = []
        # the map version the last accepted move makes: a request chosen from the map (a
        # spread, from_rank/to_rank) waits until this executor follows it, so it is not
        # chosen from the map before that move (e.g. a rebalance right after a scale's spread)
        self._expect = 0

    def add(self, msg: Move) -> None:
        self.pending.append((msg.moves_id, msg.spec))

    def _answer(self, rid: int, result: Dict[str, Any]) -> None:
        self.send(Moved(self.rank, rid, result))

    def fail_all(self, err: SlashError) -> None:
        for rid, _ in self.pending:
            self._answer(rid, {"error": [type(err).__name__, str(err)]})
        self.pending = []

    def apply(self, ex: Any) -> None:
        while self.pending:
            rid, spec = self.pending[0]
            version, leaders = ex.leader_map()
            if "moves" not in spec and version < self._expect:
                return  # the previous move is not in this executor's map yet: try again later
            if "moves" in spec:
                moves = {int(p): int(r) for p, r in spec["moves"].items()}
            elif "spread" in spec:  # a live scale: the active ranks lead every partition evenly
                moves = spread_moves(leaders, spec["spread"])
                if not moves:
                    self.pending.pop(0)
                    self._answer(rid, {"moves": {}, "map_version": version})
                    continue
            else:
                f, t = spec["from_rank"], spec["to_rank"]
                led = [p for p, r in enumerate(leaders) if r == f]
                moves = {p: t for p in led[::2]}
            if not moves:
                self.pending.pop(0)
                self._answer(rid, {"error": ["InvalidState", f"rank {spec['from_rank']} leads no "
                                             "partition: nothing to move"]})
                continue
            try:
                ex.move_partitions(moves)
            except InvalidState as e:
                if "finished" in str(e):
                    self.fail_all(InvalidState(f"rebalance: an executor finished its input; "
                                               f"leadership no longer moves ({e})"))
                return  # the previous move is being agreed: try again later
            except SlashError as e:
                self.pending.pop(0)
                self._answer(rid, {"error": [type(e).__name__, str(e)]})
                continue
            self.pending.pop(0)
            # the core adopts a new version only if some partition changes leader
            changes = any(p >= len(leaders) or leaders[p] != r for p, r in moves.items())
            if changes:
                self._expect = version + 1
            log.info("executor %d: moving %d partition(s) for rebalance request %d: %s", self.rank,
                     len(moves), rid, moves)
            self._answer(rid, {"moves": {str(p): r for p, r in moves.items()},
                               "map_version": version + changes})


def leadership(per: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """For ``status``: the leader map version (the highest an executor
    reported; 0 is partition mod N, and a group restarted from a checkpoint
    starts again at 0 with the checkpoint's map) and how many partitions
    each rank leads."""
    versions = [p["map_version"] for p in per.values() if p.get("map_version") is not None]
    return {"leader_map_version": max(versions) if versions else None,
            "led_partitions": {r: p.get("led_partitions") for r, p in per.items()}}


class MoveWaiters:
    """The driver's rebalance requests waiting for rank 0's answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rid = 0
        self._waiting: Dict[int, Tuple[threading.Event, List[Any]]] = {}
        self.closed = False

    def new(self) -> Tuple[int, threading.Event]:
        with self._lock:
            if self.closed:
                raise InvalidState("rebalance: the run has ended")
            self._rid += 1
            ev = threading.Event()
            self._waiting[self._rid] = (ev, [])
            return self._rid, ev

    def answer(self, rid: int, result: Dict[str, Any]) -> None:
        with self._lock:
            got = self._waiting.get(rid)
        if got is not None:
            got[1].append(result)
            got[0].set()

    def wait(self, rid: int, ev: threading.Event, timeout: float) -> Dict[str, Any]:
        ok = ev.wait(timeout)
        with self._lock:
            _, box = self._waiting.pop(rid)
        if not ok:
            raise Timeout(f"rebalance: rank 0 did not accept the moves within {timeout} s")
        result = box[0]
        if "error" in result:
            kind, message = result["error"]
            raise getattr(errors, kind, SystemFailure)(message)
        return result

    def close(self, why: str = "the run ended before rank 0 accepted the moves") -> None:
        with self._lock:
            self.closed = True
            waiting = list(self._waiting.values())
        for ev, box in waiting:
            box.append({"error": ["InvalidState", f"rebalance: {why}"]})
            ev.set()

    def fail_pending(self, why: str) -> None:
        """Answers every waiting request with InvalidState (a group restarted)."""
        with self._lock:
            waiting = list(self._waiting.values())
        for ev, box in waiting:
            if not box:
                box.append({"error": ["InvalidState", f"rebalance: {why}"]})
                ev.set()



class LiveMoves:
    """The ``rebalance`` feature of a live group: the request goes to rank 0
    over its link and :meth:`rebalance` returns once rank 0 accepted the
    moves. ``group`` is the run's control facade: its ``executors``,
    ``finished``, ``attached``, ``send(rank, msg)``, ``reports()`` (rank ->
    latest metrics), ``finished_ranks()`` and ``active_ranks()`` (a live
    group's active ranks, None when every rank is active)."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.waiters = MoveWaiters()

    def rebalance(self, args: Dict[str, Any], timeout: float = REQUEST_TIMEOUT) -> Dict[str, Any]:
        g = self.group
        if g.finished:
            raise InvalidState("rebalance: the run has ended")
        if not g.attached:
            raise InvalidState("rebalance: the executors are not running yet")
        if 0 in g.finished_ranks():
            raise InvalidState("rebalance: rank 0 has read all of its input; leadership no "
                               "longer moves")
        spec = rebalance_spec(args, g.reports(), g.executors, g.active_ranks())
        rid, ev = self.waiters.new()
        g.send(0, Move(rid, spec))
        return self.waiters.wait(rid, ev, timeout)
