"""Live scale-out / scale-in of a window join in a pre-provisioned group
(:mod:`slash.live_scale` for the protocol; this module holds what a join
adds: two inputs per rank).

A join rank of a group started with ``max_executors=M`` holds, for each side
(``left``, ``right``, both :class:`slash.sources.FileSource`), its work in
global terms (``[[unit, batches read], ...]``). It reads both sides merged by
event time (:func:`slash.recovery_join.merged`, the merge of
:func:`slash.runner._time_ordered`) and, after every push, advances its
watermark to what both sides have left: per side the smallest bound (minimum
time by the statistics) of the units it has not finished (the rows the merge
holds in hand are of the unit in progress); the rank's watermark is the
minimum over its sides (a side with nothing left bounds nothing; a unit
without statistics stops the watermark). So the join fires windows while
the stream runs, and no row is late: every row still to come from a rank is
at least that rank's watermark.

A scale request goes as for aggregations (prepare, every rank's answer,
commit), with two differences:

* at **prepare** a rank first pushes the rows the merge holds in hand (rows
  of a batch pulled but pushed only in part; pushing them early changes no
  pair, and they are above the watermark), so what it has left of each side
  is exactly its units not finished (:meth:`FileSource.remaining`); it
  answers with both lists and its watermark;
* at **commit** the driver deals each side's units by the same rule
  (:func:`slash.live_scale.deal_work`: each unit only to an active rank whose
  watermark is at most the unit's bound), over the same new active set; if
  either side cannot be dealt nothing changes. Scale-in picks the leaving
  ranks among those with the highest watermarks; a rank's watermark is at
  most the bound of every unit it holds on either side, so the ranks that
  stay can take them.

Partitions: after a commit rank 0 spreads leadership evenly over the new
active set by live moves (the core hands a join partition's buffered rows of
both sides over to its new leader; only the moved partitions pause firing),
as for aggregations: a joining rank is given partitions, a leaving one hands
all of its own over. Until a move is agreed - and with :data:`JOIN_MOVES`
off - a rank leads what it led: a joining rank that leads nothing reads and
ships deltas; a leaving rank turns standby and goes on leading its
partitions - it serves its channels, merges the deltas of their windows and
fires them as the group watermark (which it follows) passes their ends, and
finish() fires the rest. See docs/elastic.md.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa

from slash.errors import InvalidState
from slash.live_scale import NO_WATERMARK, LiveScaler, ScaleAgent, Work, deal_work
from slash.recovery_join import Side, merged
from slash.run.elastic import wait_for_work
from slash.run.inputs import bound_ticks
from slash.run.protocol import ScaleCommit
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


# ---- the executor's side -------------------------------------------------------------------------
class JoinScaleAgent(ScaleAgent):
    """A join rank's end of live scaling: :class:`ScaleAgent` with a work
    list per side (``works``) and the merge's sides in hand (``sides``: the
    :class:`slash.recovery_join.Side` of each, None while it reads
    nothing); ``push(side, batch)`` pushes rows (the loop's, with its
    counting), used to push the rows held in hand at a prepare."""

    def __init__(self, rank: int, size: int, works: Works, active: Sequence[int], send: Any,
                 conn: Any, timeout: float) -> None:
        super().__init__(rank, size, [], active, send, conn, timeout)
        self.works: Works = {s: [list(w) for w in works[s]] for s in SIDES}
        self.sides: Optional[Dict[str, Any]] = None
        self.srcs: Dict[str, FileSource] = {}
        self.query: Any = None
        self.push: Optional[Callable[[str, pa.RecordBatch], None]] = None
        # per side, for the works in hand: the smallest bound (ticks) of items i.. (None: one
        # lacks statistics; _TOP: none left), so a push costs no walk over the units
        self._suffix: Dict[str, Tuple[Work, List[Optional[int]]]] = {}

    def start_join(self, ex: Any, ctl: Any, query: Any, srcs: Dict[str, FileSource],
                   push: Callable[[str, pa.RecordBatch], None]) -> None:
        self.query, self.srcs, self.push = query, srcs, push
        self.start(ex, ctl, None, query.time)

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
        """Pushes the rows the merge holds in hand (then ``left_of`` is all
        that is left)."""
        if self.sides is None or self.push is None:
            return
        for s in SIDES:
            cur = self.sides[s].cur
            if cur is not None:
                self.sides[s].cur = None
                if cur.num_rows:
                    self.push(s, cur)

    # a prepare pushes the rows in hand first; both sides' lists are reported and replaced
    def _before_ack(self) -> None:
        self.flush()

    def _left_report(self) -> Any:
        return {s: self.left_of(s) for s in SIDES}

    def _adopt_work(self, work: Any) -> None:
        self.works = {s: [list(w) for w in work[s]] for s in SIDES}
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

    def __init__(self, agent: JoinScaleAgent, ctl: Any) -> None:
        self.agent, self.ctl = agent, ctl

    def install(self, loop: RankLoop) -> None:
        agent, ex = self.agent, loop.ex
        srcs = dict(zip(SIDES, loop.source))
        agent.start_join(ex, self.ctl, loop.query, srcs,
                         lambda side, b: loop.push_item(SideBatch(side, b)))
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
            sides = {s: Side(iter(srcs[s].read_work(agent.works[s], cols[s], batch_rows)))
                     for s in SIDES}
            agent.sides = sides
            scaling.advance()  # what its (new) work allows at once
            stop = False
            for side, batch in merged(query, sides):
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
            agent.works, agent.sides = {s: [] for s in SIDES}, None  # read to its end
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

    def _commit(self, op: Any) -> None:
        old = list(self.active)
        wm = {r: op.acks[r]["wm"] for r in range(self.size)}
        if op.count >= len(old):
            new = sorted(old + op.joining)
        else:  # leavers: the highest watermarks; on a tie the higher ranks leave
            by = sorted(old, key=lambda r: (NO_WATERMARK if wm[r] is None else wm[r], r))
            new = sorted(by[:op.count])
        left = {r: op.acks[r]["left"] for r in range(self.size)}
        err: Optional[BaseException] = None
        try:
            work = self._deal(left, wm, new)
        except InvalidState as e:  # nothing changes: each rank goes on with what it has
            err, new = e, old
            work = {r: left[r] for r in old}
        moving = new != old and JOIN_MOVES
        empty: Works = {s: [] for s in SIDES}
        for r in range(self.size):
            self.send(r, ScaleCommit(op.sid, work.get(r, empty), new,
                                     self.moves_id + op.sid if moving and r == 0 else None))
        pause = time.monotonic() - op.t0
        with self._lock:
            self.active = new
            self.idle = {r for r in range(self.size)
                         if not any(work.get(r, empty)[s] for s in SIDES)}
            entry = {"sid": op.sid, "from": len(old), "to": len(new), "active_ranks": new,
                     "joined": sorted(set(new) - set(old)), "left": sorted(set(old) - set(new)),
                     "paused_ms": round(1000 * pause, 3), "at": time.time()}
            self.history.append(entry)
        if err is not None:
            return self._end(op, err)
        log.warning("live scale: %d -> %d active executors (ranks %s) of a join; input paused "
                    "%.1f ms", len(old), len(new), new, 1000 * pause)
        self._end(op, None, {"executors": len(new), **entry, "live": True})

