"""The join side of the recovery driver (:mod:`slash.run.recovery.checkpointed`): one join
executor's run with checkpoints (docs/recovery.md, "Another executor count",
the paragraph on joins).

A join executor reads both of its inputs merged by event time
(:func:`merged`; :func:`time_ordered` is the same merge over one split's
reads) and pushes one side's rows at a time. Its position at a cut is its
push count (the merged sequence is a deterministic function of the two
sources: a restart with the same executor count drops the first ``pushes``
side batches) and, for FileSource sides, in global terms: each side's work
left after the batch the merge holds, plus the rows of that batch not pushed
yet (``rank-<r>.<side>.held-<unit>.arrow``), which a resume with another
executor count gives to the rank dealt their unit, before that unit's next
batch. When rank 0 asks for a cut and what a worker writes are the
aggregate worker's (:mod:`slash.run.rank_ckpt`).

Invariant: no row is pushed twice or skipped, and the restore makes no row
late (a row any rank had left meets at least the cut's group watermark in
the failure-free run too).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pyarrow as pa

from slash._ipc import from_ipc, to_ipc
from slash.compute import pc
from slash.control.logic import ExecutorControl, LogicPlan
from slash.control.moves import MoveRequests
from slash.errors import NotSupported
from slash.executor import GroupConfig
from slash.metrics import Reporter
from slash.query import JoinQuery
from slash.run.ckpt import SharedLink
from slash.run.protocol import Resumed
from slash.run.resume import resumed_counts
from slash.run.checkpointing import Checkpointing, restore
from slash.run.features import Control, Moves, ProgressReport, Report
from slash.run.rank import JoinPush, RankLoop, SideBatch, open_executor, paced
from slash.sources import FileSource, Work, global_units, watermarks_from_source

log = logging.getLogger(__name__)

SIDES = ("left", "right")
#: one side's state after a push: (position after the batch the merge holds, rows of it held)
SideState = Tuple[Any, Optional[pa.RecordBatch]]


class Side:
    """One input of the merge: ``items`` yields ``(position after, batch)``;
    ``cur`` is the batch in hand (rows not pushed yet), ``pos`` the position
    after the batch last pulled."""

    def __init__(self, items: Iterator[Tuple[Any, pa.RecordBatch]]) -> None:
        self.items, self.cur, self.pos = items, None, None  # type: ignore[var-annotated]

    def pull(self) -> None:
        self.cur = None
        for pos, b in self.items:
            self.pos = pos
            if b.num_rows:
                self.cur = b
                return

    def state(self) -> SideState:
        return self.pos, self.cur


def merged(query: JoinQuery, sides: Dict[str, Side],
           exact: bool = True) -> Iterator[Tuple[str, pa.RecordBatch]]:
    """Both sides' rows merged by event time. ``exact``: each step yields
    the rows of one side that come before the other side's next row, so
    neither side runs ahead of the other (rows out of order within one side
    are kept in their place; the lateness covers them): what an executor
    whose watermark follows the largest time pushed (an unbounded side)
    needs. Not ``exact`` (both sides' watermarks come from their sources,
    :func:`slash.sources.watermarks_from_source`, so no push order makes a
    row late): whole batches, the one beginning earlier first, so a side
    runs at most one batch ahead. Where the two sides' times interleave,
    the exact merge's steps are a row or two each, every one a push: an
    800 k-row interval join took some 400 k of them. When it yields, each
    side's :meth:`Side.state` is its state after that push (the next batch
    is pulled only when the merge goes on)."""
    keys = query.key_query

    def first_time(b: pa.RecordBatch) -> int:
        t = pc.min(keys.time_ticks(b.column(query.time), b.schema)).as_py()
        return -(1 << 63) if t is None else t  # all times null: dropped at once

    for s in SIDES:
        sides[s].pull()
    if not exact:
        yield from _by_batch(sides, first_time)
        return
    while sides["left"].cur is not None or sides["right"].cur is not None:
        live = [s for s in SIDES if sides[s].cur is not None]
        if len(live) == 1:
            one = sides[live[0]]
            b, one.cur = one.cur, None
            yield live[0], b
            one.pull()
            continue
        side = min(live, key=lambda s: first_time(sides[s].cur))
        other = "right" if side == "left" else "left"
        cur = sides[side].cur
        times = keys.time_ticks(cur.column(query.time), cur.schema)
        before = pc.fill_null(pc.less_equal(times, first_time(sides[other].cur)), True)
        rest = cur.filter(pc.invert(before))
        sides[side].cur = rest if rest.num_rows else None
        yield side, cur.filter(before)
        if sides[side].cur is None:
            sides[side].pull()


def _by_batch(sides: Dict[str, Side],
              first_time: Callable[[pa.RecordBatch], int]) -> Iterator[Tuple[str, pa.RecordBatch]]:
    """:func:`merged` not exact: each side's batches whole, the side whose
    batch in hand begins earlier first (its first time taken once a batch)."""
    first: Dict[str, Any] = {s: None for s in SIDES}
    while sides["left"].cur is not None or sides["right"].cur is not None:
        live = [s for s in SIDES if sides[s].cur is not None]
        for s in live:
            if first[s] is None:
                first[s] = first_time(sides[s].cur)
        side = min(live, key=lambda s: first[s])
        one = sides[side]
        b, one.cur, first[side] = one.cur, None, None
        yield side, b
        one.pull()


def exact_merge(*srcs: Any, paced: bool = False) -> bool:
    """Whether a join over these sources needs :func:`merged`'s exact merge:
    some side's watermark is not its source's, or the run is ``paced`` (a
    ``rate=``: the exact merge's small steps keep the rate smooth and let a
    control request land between them)."""
    return paced or not all(watermarks_from_source(s) for s in srcs)


def time_ordered(query: JoinQuery, left: Any, right: Any, rank: int, n: int,
                 batch_rows: int, paced: bool = False) -> Iterator[Tuple[str, pa.RecordBatch]]:
    """Both sides' rows of one split (``Source.read(rank, n, ...)``) in the
    order of :func:`merged`: the side batches a join executor pushes."""
    srcs = {"left": left, "right": right}
    return merged(query, {s: Side(_counted(iter(srcs[s].read(
        rank, n, query.input_columns(s, srcs[s].schema), batch_rows)))) for s in SIDES},
        exact_merge(left, right, paced=paced))


def file_items(src: FileSource, work: Work, held: Dict[int, pa.RecordBatch],
                columns: List[str], batch_rows: int) -> Iterator[Tuple[List[int], pa.RecordBatch]]:
    """``src.read_work(work)``'s batches with their positions, each unit's
    ``held`` rows (by global unit index) given before that unit's next batch
    at the position ``[item, batches read]``."""
    given = 0  # work items whose held rows are given

    def give(upto: int) -> Iterator[Tuple[List[int], pa.RecordBatch]]:
        nonlocal given
        while given < upto:
            h = held.get(int(work[given][0]))
            if h is not None:
                yield [given, int(work[given][1])], h
            given += 1

    for pos, b in src.read_work(work, columns, batch_rows):
        yield from give(int(pos[0]) + 1)
        yield pos, b
    yield from give(len(work))


def _counted(items: Iterator[Any]) -> Iterator[Tuple[int, pa.RecordBatch]]:
    for i, b in enumerate(items):
        yield i + 1, b


def held_at(work: Work, held: Dict[int, pa.RecordBatch],
             st: SideState) -> Dict[int, pa.RecordBatch]:
    """The rows a FileSource side holds at a cut, by global unit: the rows
    of the batch in hand not pushed yet (its unit is the first item of the
    work left), and the held rows this attempt was dealt for units it has
    not reached yet."""
    pos, cur = st
    if pos is None:
        return dict(held)
    i = int(pos[0])
    out = {int(g): held[int(g)] for g, _ in work[i + 1:] if int(g) in held}
    if cur is not None:
        out[int(work[i][0])] = cur
    return out


def held_name(rank: int, side: str, unit: int) -> str:
    return f"rank-{rank}.{side}.held-{unit}.arrow"


def side_at(rank: int, side: str, work: Work, held: Dict[int, pa.RecordBatch], st: SideState,
            extra: Dict[str, bytes]) -> Dict[str, Any]:
    """A FileSource side's position at a cut in global terms (``rank-<r>.json``):
    the work left after the batch the merge holds, and the units whose rows
    are held (:func:`held_at`), their rows added to ``extra`` (files of the image)."""
    now = held_at(work, held, st)
    for g, rows in now.items():
        extra[held_name(rank, side, g)] = to_ipc(pa.Table.from_batches([rows]))
    return {"work": FileSource.remaining(work, st[0]), "held": sorted(now)}


def _redealt(ck: Any, srcs: Dict[str, Any], old_n: int, n: int, rank: int, directory: str
             ) -> Tuple[Dict[str, Optional[Work]], Dict[str, Dict[int, pa.RecordBatch]]]:
    """Rank's share of each side's work left at a cut of ``old_n`` ranks,
    dealt to ``n`` (every rank computes the same deal), and the held rows of
    the units it got."""
    infos = [ck.rank_info(r) for r in range(old_n)]
    if any("sides" not in i for i in infos):
        raise NotSupported(f"checkpoint directory {directory!r} was cut with {old_n} executors "
                           f"and this run has {n}: its join positions are push counts only "
                           f"(written before joins recorded them in global terms). Resume with "
                           f"executors={old_n}")
    works: Dict[str, Optional[Work]] = {}
    held: Dict[str, Dict[int, pa.RecordBatch]] = {}
    for side in SIDES:
        lefts = [[[int(g), int(k)] for g, k in i["sides"][side]["work"]] for i in infos]
        works[side] = mine = srcs[side].resplit(lefts, n)[rank]
        units = {int(g) for g, _ in mine}
        held[side] = {int(g): read_held(ck, r, side, int(g))
                      for r, i in enumerate(infos) for g in i["sides"][side]["held"]
                      if int(g) in units}
    return works, held


def read_held(ck: Any, rank: int, side: str, unit: int) -> pa.RecordBatch:
    """The rows of ``unit`` of ``side`` that rank ``rank`` held at checkpoint ``ck``'s cut."""
    return from_ipc(ck.read(held_name(rank, side, unit))).combine_chunks().to_batches()[0]


def join_split_items(loop: RankLoop, n: int, batch_rows: int = 8192,
                     rate: Optional[float] = None) -> Iterator[Tuple[Any, SideBatch]]:
    """A join rank's split of both inputs in time order (:func:`time_ordered`)
    as the rank loop's items; ``rate``: records/s of both inputs together."""
    left, right = loop.source
    return paced(((None, SideBatch(side, b)) for side, b in
                  time_ordered(loop.query, left, right, loop.rank, n, batch_rows, bool(rate))),
                  loop, rate)


def execute_join_split(query: JoinQuery, left: Any, right: Any, rank: int,
                       addresses: List[str], listener: Any, group: GroupConfig, token: str,
                       metrics: Optional[Dict[str, Any]] = None) -> pa.Table:
    """One join executor's run without a driver link (a Spark batch task):
    its splits of both inputs, in time order. Rows with a null key never
    match (SQL) and are left out; rows with a null time are in no window and
    are counted (``null_time_records``)."""
    ex = open_executor(query, (left, right), rank, addresses, listener, group, token,
                       group.partitions_for(len(addresses)))
    with RankLoop(query, (left, right), ex) as loop:
        result = loop.use(JoinPush()).run(join_split_items(loop, len(addresses)))
        if metrics is not None:
            metrics.update(loop.metrics())
        return result


class JoinPositions:
    """A checkpointed join rank's positions (for :class:`Checkpointing`):
    with FileSource inputs, each side's state after each push (work left in
    global terms, rows the merge holds in hand, written with the image)."""

    def __init__(self, rank: int, sides: Dict[str, Side], works: Dict[str, Optional[Work]],
                 held: Dict[str, Dict[int, pa.RecordBatch]], files: bool) -> None:
        self.rank, self.sides, self.works, self.held, self.files = rank, sides, works, held, files
        self.state_at: Dict[int, Dict[str, SideState]] = {}

    def begin(self, loop: RankLoop) -> None:
        self.state_at = {loop.pushes: {s: (None, None) for s in SIDES}}

    def now(self, pushes: int) -> None:
        if self.files:
            self.state_at[pushes] = {s: self.sides[s].state() for s in SIDES}

    def note(self, loop: RankLoop) -> None:
        self.now(loop.pushes)

    def sync(self, loop: RankLoop) -> None:
        pass

    def at(self, pushes: int) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, bytes]]:
        info: Dict[str, Any] = {"position": None}
        extra: Dict[str, bytes] = {}
        if self.files:  # each side's position in global terms: work left, rows held
            st = self.state_at[pushes]
            info["sides"] = {}
            for s in SIDES:
                w = self.works[s]
                assert w is not None
                info["sides"][s] = side_at(self.rank, s, w, self.held[s], st[s], extra)
        return info, {}, extra

    def forget_before(self, pushes: int) -> None:
        for k in [k for k in self.state_at if k < pushes]:
            del self.state_at[k]


def _restore_join(ex: Any, plan: Any, rank: int, n: int, srcs: Dict[str, Any]
                  ) -> Tuple[int, int, Dict[str, Optional[Work]], Dict[str, Dict[int, pa.RecordBatch]]]:
    """The restore step of a checkpointed join rank: (push count and records
    at the cut, each FileSource side's work in this attempt, rows held)."""
    works: Dict[str, Optional[Work]] = {s: None for s in SIDES}
    held: Dict[str, Dict[int, pa.RecordBatch]] = {s: {} for s in SIDES}
    base = records = 0
    if plan.resume_id is not None:
        ck = restore(ex, plan, n)  # the leader map of the cut (moves kept) with its size
        old_n = ck.executors
        # the same count: the same merged sequence, the pushes before the cut dropped
        base, records = resumed_counts(ck, rank, n)
        if old_n != n:  # another executor count: what every rank left of each side, dealt to n
            works, held = _redealt(ck, srcs, old_n, n, rank, plan.directory)
            log.info("join executor %d of %d: resuming checkpoint %d of %d executors with "
                     "%s units left (left, right)", rank, n, plan.resume_id, old_n,
                     [len(works[s] or []) for s in SIDES])
    if all(global_units(srcs[s]) for s in SIDES) and works["left"] is None:
        works = {s: srcs[s].work(rank, n) for s in SIDES}
    return base, records, works, held


def _after(query: JoinQuery, sides: Dict[str, Side], base: int,
           positions: JoinPositions, exact: bool) -> Iterator[Tuple[Any, SideBatch]]:
    """The merged side batches after the first ``base`` (pushed before the
    cut: their rows are in the restored stores)."""
    pushes = 0
    for side, batch in merged(query, sides, exact):
        if pushes < base:
            pushes += 1
            positions.state_at = {}
            positions.now(pushes)
            continue
        yield None, SideBatch(side, batch)


def execute_join_split_checkpointed(query: JoinQuery, left: Any, right: Any, rank: int,
                                    addresses: List[str], listener: Any, group: GroupConfig,
                                    token: str, plan: Any, link: Any, batch_rows: int = 8192,
                                    control: bool = False) -> Tuple[pa.Table, Dict[str, Any]]:
    """One join executor's run with checkpoints (the rank loop with
    :class:`JoinPush` and :class:`Checkpointing`): restores from
    ``plan.resume_id`` if given - with the executor count that cut it, drops
    the side batches before the cut; with another (both inputs FileSources),
    reads the work dealt to it - then pushes and cuts. Rank 0 takes the
    driver's rebalance requests (over the control protocol with ``control``,
    :class:`slash.control.logic.ExecutorControl`, else as move requests
    alone); with ``plan.live_every`` the rank reports live metrics. Returns
    the pairs this executor fired in this attempt and its metrics."""
    n = len(addresses)
    srcs = {"left": left, "right": right}
    raw, link = link, SharedLink(link)  # the writer thread reports over it too
    ex = open_executor(query, (left, right), rank, addresses, listener, group, token,
                       plan.partitions)
    with RankLoop(query, (left, right), ex, link) as loop:
        ctl = ExecutorControl(link.put, raw.connection, rank, LogicPlan(query), group.timeout) \
            if control else None
        base, records, works, held = _restore_join(ex, plan, rank, n, srcs)
        link.put(Resumed(rank, records))
        cols = {s: query.input_columns(s, srcs[s].schema) for s in SIDES}
        sides = {s: Side(file_items(srcs[s], works[s], held[s], cols[s], batch_rows)
                         if works[s] is not None else
                         _counted(iter(srcs[s].read(rank, n, cols[s], batch_rows))))
                 for s in SIDES}
        positions = JoinPositions(rank, sides, works, held,
                                  all(global_units(srcs[s]) for s in SIDES))
        loop.use(JoinPush(), Control(ctl) if ctl is not None else
                 Moves(MoveRequests(link.put, rank)),
                 Checkpointing(plan, link, positions, base, records),
                 ProgressReport(link.put),
                 Report(Reporter(plan.live_every), link.put) if plan.live_every else None)
        items = _after(query, sides, base, positions,
                       exact_merge(left, right, paced=bool(plan.rate)))
        result = loop.run(paced(items, loop, plan.rate / n if plan.rate else None))
        return result, loop.metrics()
