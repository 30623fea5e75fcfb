"""Live scale-out / scale-in of a window join in a pre-provisioned group
(:mod:`slash.run.live.scale` for the protocol; this module holds what a join
adds: two inputs per rank, each a work list in global terms, read merged by
event time; a rank's watermark is the minimum over its sides of the bound
of the units it has not finished, so no row is late). A prepare first
pushes the rows the merge holds in hand, so what a rank has left of each
side is exactly its units not finished; a commit deals each side's units by
:func:`slash.run.live.scale.deal_work` over the same new active set, or changes
nothing. Partitions move as for aggregations. The whole protocol, and what
proves it, is docs/elastic.md's "A window join in a provisioned group".

With ``checkpoint=`` the group is :mod:`slash.run.recovery.live`'s: a rank's cut
records per scale generation both sides' work left and the rows its merge
holds (:class:`LiveJoinPositions`), and a restore gives the held rows to
the rank dealt their unit (:func:`restored_held`), before that unit's next
batch; a prepare pushes them, as it pushes the rows in hand.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa

from slash.run.live.scale import LiveScaler, ScaleAgent, Work, deal_work
from slash.run.recovery.join import Side, exact_merge, file_items, merged, read_held, side_at
from slash.run.elastic import wait_for_work
from slash.run.inputs import bound_ticks
from slash.run.rank import JoinPush, RankLoop, SideBatch
from slash.sources import FileSource

log = logging.getLogger(__name__)

SIDES = ("left", "right")
_TOP = (1 << 63) - 1
#: whether a scale change spreads leadership over the new active set by live
#: moves (the core hands a join partition's state over, exec_moves.c /
#: join_move.c); False leaves leadership where it is (correct too: a rank
#: that left leads and fires its partitions as a standby)
JOIN_MOVES = True

Works = Dict[str, Work]
Held = Dict[str, Dict[int, pa.RecordBatch]]


# ---- the executor's side -------------------------------------------------------------------------
class JoinScaleAgent(ScaleAgent):
    """A join rank's end of live scaling: :class:`ScaleAgent` with a work
    list per side (``works``) and the merge's sides in hand (``sides``: the
    :class:`slash.run.recovery.join.Side` of each, None while it reads
    nothing); ``push(side, batch)`` pushes rows (the loop's, with its
    counting), used to push the rows held in hand at a prepare."""

    def __init__(self, rank: int, size: int, works: Works, active: Sequence[int], send: Any,
                 conn: Any, timeout: float, held: Optional[Held] = None) -> None:
        super().__init__(rank, size, [], active, send, conn, timeout)
        self.works: Works = {s: [list(w) for w in works[s]] for s in SIDES}
        #: per side, rows a checkpoint's cut held of units of ``works`` (by global unit),
        #: given before their unit's next batch; a dict is replaced, never changed
        self.held: Held = {s: dict((held or {}).get(s, {})) for s in SIDES}
        self.sides: Optional[Dict[str, Any]] = None
        self.srcs: Dict[str, FileSource] = {}
        self.query: Any = None
        self.push: Optional[Callable[[str, pa.RecordBatch], None]] = None
        # per side, for the works in hand: the smallest bound (ticks) of items i.. (None: one
        # lacks statistics; _TOP: none left), so a push costs no walk over the units
        self._suffix: Dict[str, Tuple[Work, List[Optional[int]]]] = {}

    def start_join(self, ex: Any, ctl: Any, query: Any, srcs: Dict[str, FileSource],
                   push: Callable[[str, pa.RecordBatch], None], restored: bool = False) -> None:
        self.query, self.srcs, self.push = query, srcs, push
        self.start(ex, ctl, None, query.time, restored=restored)

    @property
    def has_work(self) -> bool:
        return any(self.works[s] for s in SIDES)

    def left_of(self, side: str) -> Work:
        """What this rank has not finished of ``side`` (rows in hand aside)."""
        pos = None if self.sides is None else self.sides[side].pos
        return FileSource.remaining(self.works[side], pos)

    def _suffix_of(self, side: str) -> List[Optional[int]]:
        w = self.works[side]
        got = self._suffix.get(side)
        if got is not None and got[0] is w:
            return got[1]
        src = self.srcs[side]
        b = src.unit_bounds(self.time)
        out: List[Optional[int]] = [_TOP] * (len(w) + 1)
        keys = self.query.key_query
        for i in range(len(w) - 1, -1, -1):
            t = bound_ticks(keys, src.schema, b[int(w[i][0])])
            nxt = out[i + 1]
            out[i] = None if t is None or nxt is None else min(t, nxt)
        self._suffix[side] = (w, out)
        return out

    def promise_ticks(self) -> Optional[int]:
        """The watermark (ticks) what both sides have left allows: the
        minimum over the sides of the bounds of their units not finished
        (the unit of the position read to included: the rows the merge holds
        in hand are of it); None when it allows nothing (a unit without
        statistics, or nothing left at all)."""
        best = _TOP
        for s in SIDES:
            pos = None if self.sides is None else self.sides[s].pos
            suffix = self._suffix_of(s)
            t = suffix[0 if pos is None else min(int(pos[0]), len(suffix) - 1)]
            if t is None:
                return None
            best = min(best, t)
        return None if best >= _TOP else best

    def flush(self) -> None:
        """Pushes the rows the merge holds in hand, then the held rows of the
        units not reached yet (then ``left_of`` is all that is left). Each
        leaves the rank's state before its push, so a cut at any of these
        pushes finds the rest still held."""
        if self.push is None:
            return
        for s in SIDES:
            side = None if self.sides is None else self.sides[s]
            if side is not None and side.cur is not None:
                cur, side.cur = side.cur, None
                if cur.num_rows:
                    self.push(s, cur)
            pos = None if side is None else side.pos
            for g, _ in self.works[s][0 if pos is None else int(pos[0]) + 1:]:
                if int(g) in self.held[s]:
                    rest = dict(self.held[s])
                    rows = rest.pop(int(g))
                    self.held[s] = rest
                    self.push(s, rows)
            self.held[s] = {}

    # a prepare pushes the rows in hand first; both sides' lists are reported and replaced
    def _before_ack(self) -> None:
        self.flush()

    def _left_report(self) -> Any:
        return {s: self.left_of(s) for s in SIDES}

    def _adopt_work(self, work: Any) -> None:
        self.works = {s: [list(w) for w in work[s]] for s in SIDES}
        self.held = {s: {} for s in SIDES}  # every rank pushed its held rows at the prepare
        self.sides = None  # the loop reopens both readers on the new work

    def _who(self) -> str:
        return f"join executor {self.rank}"

    def _units(self) -> str:
        return f"{[len(self.works[s]) for s in SIDES]} unit(s) (left, right)"


class JoinScaling:
    """A live-scalable join rank's feature of the rank loop: its agent takes
    the driver's scale requests, pushes the rows in hand at a prepare
    through the loop's join push, and after each push the watermark
    advances by what both sides have left (:meth:`JoinScaleAgent.promise_ticks`)."""

    def __init__(self, agent: JoinScaleAgent, ctl: Any, restored: bool = False) -> None:
        self.agent, self.ctl, self.restored = agent, ctl, restored

    def install(self, loop: RankLoop) -> None:
        agent, ex = self.agent, loop.ex
        srcs = dict(zip(SIDES, loop.source))
        agent.start_join(ex, self.ctl, loop.query, srcs,
                         lambda side, b: loop.push(SideBatch(side, b)), self.restored)
        loop.handlers["scale"] = agent.handle
        loop.on_push.append(self.advance)
        loop.status.append(lambda: {"standby": not agent.is_active})
        self.ex = ex

    def advance(self) -> None:
        agent = self.agent
        t = agent.promise_ticks()
        if t is not None and (agent.wm is None or t > agent.wm):
            self.ex.advance_watermark(t)
            agent.advanced(t)


class LiveJoinPositions:
    """A checkpointed live join rank's positions (for
    :class:`slash.run.checkpointing.Checkpointing`), as
    :class:`slash.run.checkpointing.LivePositions` records an aggregation rank's: at
    each push count, the scale generations it can be described in, each with
    its active ranks and, per side, the work left in global terms and the
    rows held (the merge's batch in hand, a restore's rows of units not
    reached yet: :func:`slash.run.recovery.join.side_at`). Only the generation a
    rank was in before a commit can hold rows: a prepare pushes them all."""

    def __init__(self, agent: JoinScaleAgent) -> None:
        self.agent = agent
        self.cands: Dict[int, List[Tuple[int, Works, Dict[str, Any], Held, List[int]]]] = {}

    def _now(self) -> Tuple[int, Works, Dict[str, Any], Held, List[int]]:
        a = self.agent
        st = {s: (None, None) if a.sides is None else a.sides[s].state() for s in SIDES}
        return a.sid, a.works, st, dict(a.held), list(a.active)

    def begin(self, loop: RankLoop) -> None:
        self.cands = {loop.pushes: [self._now()]}

    def note(self, loop: RankLoop) -> None:
        self.cands[loop.pushes] = [self._now()]

    def sync(self, loop: RankLoop) -> None:
        # a scale commit since the last push: the same push count is also described by
        # the new generation (its new work, nothing of it read, nothing held)
        now = self.cands[loop.pushes]
        if now[-1][0] != self.agent.sid:
            now.append(self._now())

    def at(self, pushes: int) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, bytes]]:
        rank, extra = self.agent.rank, {}  # type: ignore[var-annotated]
        gens = {str(g): {"sides": {s: side_at(rank, s, works[s], held[s], st[s], extra)
                                   for s in SIDES}, "active": act}
                for g, works, st, held, act in self.cands[pushes]}
        return {"position": None, "live": gens}, {"gens": sorted(int(g) for g in gens)}, extra

    def forget_before(self, pushes: int) -> None:
        for k in [k for k in self.cands if k < pushes]:
            del self.cands[k]


def restored_held(ck: Any, gen: int, works: Works) -> Held:
    """The rows held at checkpoint ``ck``'s cut (scale generation ``gen``)
    of the units in ``works`` (a rank's share of each side), by whichever
    rank held them."""
    out: Held = {s: {} for s in SIDES}
    for r in range(ck.executors):
        sides = ck.rank_info(r)["live"][str(gen)]["sides"]
        for s in SIDES:
            mine = {int(g) for g, _ in works[s]}
            for g in sides[s]["held"]:
                if int(g) in mine:
                    out[s][int(g)] = read_held(ck, r, s, int(g))
    return out


def live_join_items(loop: RankLoop, scaling: JoinScaling, push: JoinPush,
                    rate: Optional[float] = None,
                    batch_rows: int = 8192) -> Iterator[Tuple[Any, SideBatch]]:
    """A live-scalable join rank's items: ``agent.works`` of both sides
    merged by time, both readers reopened when a scale commit gave it new
    work; with nothing to read (a standby, or its work done) it serves the
    executor until new work or the driver's finish comes. ``rate``:
    records/s over all active ranks (``push.rows`` counts what it pushed)."""
    agent, query = scaling.agent, loop.query
    srcs = dict(zip(SIDES, loop.source))
    cols = {s: query.input_columns(s, srcs[s].schema) for s in SIDES}
    while True:
        if agent.has_work:
            per = rate / max(1, len(agent.active)) if rate else None
            t0, base = time.monotonic(), push.rows
            sides = {s: Side(file_items(srcs[s], agent.works[s], agent.held[s], cols[s],
                                        batch_rows)) for s in SIDES}
            agent.sides = sides
            scaling.advance()  # what its (new) work allows at once
            stop = False
            for side, batch in merged(query, sides, exact_merge(*loop.source, paced=bool(rate))):
                yield None, SideBatch(side, batch)  # pushed, served and the driver heard
                while per and not agent.changed:
                    ahead = (push.rows - base) / per - (time.monotonic() - t0)
                    if ahead <= 0:
                        break
                    loop.wait(min(ahead, 0.01))
                    loop.serve()
                if agent.changed:  # a commit: the merge's state is dropped
                    stop = True
                    break
            if stop:
                agent.changed = False
                continue
            # read to its end (the held rows too: file_items gave every one)
            agent.works, agent.sides, agent.held = {s: [] for s in SIDES}, None, \
                {s: {} for s in SIDES}
        if not wait_for_work(loop, agent):
            return


# ---- the driver's side ---------------------------------------------------------------------------
class JoinLiveScaler(LiveScaler):
    """:class:`LiveScaler` for a join: ``source`` is ``(left, right)``; the
    ranks answer with what they have left of each side, and the commit deals
    each side by :func:`deal_work` over the same new active set."""

    def __init__(self, sources: Tuple[FileSource, FileSource], query: Any, size: int,
                 active: int, request_timeout: float = 60.0) -> None:
        super().__init__(sources, query, size, active, lambda b: None, request_timeout)
        self.srcs = dict(zip(SIDES, sources))

    def _deal(self, left: Dict[int, Works], wm: Dict[int, Optional[int]],
              active: List[int]) -> Dict[int, Works]:
        out: Dict[int, Works] = {r: {} for r in active}
        keys = self.query.key_query
        for s in SIDES:
            src = self.srcs[s]
            got = deal_work(src, self.query.time, {r: left[r][s] for r in left}, wm,
                            lambda b, sch=src.schema: bound_ticks(keys, sch, b), active)
            for r in active:
                out[r][s] = got[r]
        return out

    _what = " of a join"

    @property
    def _moves(self) -> bool:
        return JOIN_MOVES  # read at each commit (a test turns it off)

    def _no_work(self) -> Works:
        return {s: [] for s in SIDES}

    def _has_work(self, work: Works) -> bool:
        return any(work[s] for s in SIDES)

