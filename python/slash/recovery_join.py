"""The join side of the recovery driver (:mod:`slash.recovery`): one join
executor's run with checkpoints.

A join executor reads both of its inputs merged by event time (:func:`merged`;
:func:`time_ordered` is the same merge over one split's reads, the order of a
join run without checkpoints, :func:`slash.runner.execute_join_split`) and
pushes one side's rows at a time. Its position at a cut is recorded twice:

* its push count: the merged sequence of side batches is a deterministic
  function of the two sources, so a restart with the executor count that cut
  it reads them again from the start and drops the first ``pushes`` side
  batches without pushing them (the items before the cut), then pushes the
  rest. This works for every source.
* for a :class:`slash.sources.FileSource` side, in global terms (``sides`` in
  ``rank-<r>.json``): the work the rank had left of that side after the batch
  the merge holds (``[[unit, batches read], ...]``, as the aggregate worker
  records it), plus the rows of that batch not pushed yet (the merge pushes
  the rows of one side that come before the other side's next row, so a batch
  may be pushed in parts), written as ``rank-<r>.<side>.held.arrow``. A resume
  with another executor count deals each side's work left by every rank to
  the new ranks (:meth:`FileSource.resplit`); the held rows go with the unit
  they came from (the first item of the rank's work left) and are pushed
  before that unit's next batch. No row is pushed twice or skipped.

The leader stores a restored executor takes hold both sides' buffered rows of
every window and key of the partitions it leads (the core's join partition
blobs; with another executor count, partition p is led by rank p mod n), so
the pairs fired after the cut are fired again - those fired before it come
from the committed result segments, as for aggregations.

Lateness with another executor count: the core starts every executor of the
new group at the cut's group watermark (the smallest rank watermark, over
both sides); a row any rank had left at the cut meets at least that
watermark in the failure-free run too (the group watermark only rises), so
the restore makes no row late. Each new rank then reads its dealt units in
the order of the first split's rule (by the time column's statistics when
the source has a ``time``), and its held rows before their unit's next
batch, as a rank of a first run of that size would.

Everything else - when rank 0 asks for a cut and what a worker writes into
``DIR/chk-<c>/`` and reports to the parent (:mod:`slash.ckpt_worker`), the
test hook ``SLASH_TEST_KILL`` (:mod:`slash.recovery`) - is the aggregate
worker's.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from slash._ipc import from_ipc, to_ipc
from slash.ckpt_worker import AskSchedule, serve_driver, write_image
from slash.errors import NotSupported
from slash.executor import Executor, GroupConfig
from slash.query import JoinQuery
from slash.run.pacing import RatePacer
from slash.run.faults import kill_after_cuts, kill_in_write, kill_point
from slash.run.gc import no_cyclic_gc
from slash.run.plan import PROGRESS_S
from slash.run.protocol import Progress, Resumed
from slash.sources import FileSource, Work

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


def merged(query: JoinQuery, sides: Dict[str, Side]) -> Iterator[Tuple[str, pa.RecordBatch]]:
    """Both sides' rows merged by event time at batch grain: each step
    yields the rows of one side that come before the other side's next row,
    so neither side runs ahead of the other (rows out of order within one
    side are kept in their place; the lateness covers them). When it
    yields, each side's :meth:`Side.state` is its state after that push
    (the next batch is pulled only when the merge goes on)."""
    def first_time(b: pa.RecordBatch) -> int:
        t = pc.min(query._keys.time_ticks(b.column(query.time), b.schema)).as_py()
        return -(1 << 63) if t is None else t  # all times null: dropped at once

    for s in SIDES:
        sides[s].pull()
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
        times = query._keys.time_ticks(cur.column(query.time), cur.schema)
        before = pc.fill_null(pc.less_equal(times, first_time(sides[other].cur)), True)
        rest = cur.filter(pc.invert(before))
        sides[side].cur = rest if rest.num_rows else None
        yield side, cur.filter(before)
        if sides[side].cur is None:
            sides[side].pull()


def time_ordered(query: JoinQuery, left: Any, right: Any, rank: int, n: int,
                 batch_rows: int) -> Iterator[Tuple[str, pa.RecordBatch]]:
    """Both sides' rows of one split (``Source.read(rank, n, ...)``) in the
    order of :func:`merged`: the side batches a join executor pushes."""
    srcs = {"left": left, "right": right}
    return merged(query, {s: Side(_counted(iter(srcs[s].read(
        rank, n, query.input_columns(s, srcs[s].schema), batch_rows)))) for s in SIDES})


def _file_items(src: FileSource, work: Work, held: Dict[int, pa.RecordBatch],
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


def _held_at(work: Work, held: Dict[int, pa.RecordBatch],
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


def _held_name(rank: int, side: str, unit: int) -> str:
    return f"rank-{rank}.{side}.held-{unit}.arrow"


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
        held[side] = {}
        for r, i in enumerate(infos):
            for g in i["sides"][side]["held"]:
                if int(g) in units:
                    t = from_ipc(ck.read(_held_name(r, side, int(g)))).combine_chunks()
                    held[side][int(g)] = t.to_batches()[0]
    return works, held


def execute_join_split_checkpointed(query: JoinQuery, left: Any, right: Any, rank: int,
                                    addresses: List[str], listener: Any, group: GroupConfig,
                                    token: str, plan: Any, link: Any,
                                    batch_rows: int = 8192) -> Tuple[pa.Table, Dict[str, Any]]:
    """One join executor's run with checkpoints: restores from
    ``plan.resume_id`` if given - with the executor count that cut it, drops
    the side batches before the cut; with another (both inputs FileSources),
    reads the work dealt to it - then pushes and cuts. Returns the pairs this
    executor fired in this attempt and its metrics."""
    n = len(addresses)
    store = plan.store()
    srcs = {"left": left, "right": right}
    cfg = query.join_config(left.schema, right.schema, plan.partitions)
    bounded = bool(getattr(left, "bounded", True)) and bool(getattr(right, "bounded", True))
    ex = Executor(listener, rank, addresses, cfg, group, token=token, bounded=bounded)
    files = all(isinstance(srcs[s], FileSource) for s in SIDES)
    # each FileSource side's work in global terms in this attempt (None: read by rank and n)
    works: Dict[str, Optional[Work]] = {s: None for s in SIDES}
    held: Dict[str, Dict[int, pa.RecordBatch]] = {s: {} for s in SIDES}
    base_pushes = 0
    records = 0
    try:
        if plan.resume_id is not None:
            ck = store.load(plan.resume_id)
            old_n = ck.executors
            metas = [ck.read(f"rank-{r}.meta") for r in range(old_n)]
            parts = {p: ck.read(f"part-{p}.bin") for p in range(plan.partitions) if p % n == rank}
            ex.restore(metas, parts)
            if old_n == n:  # the same merged sequence: drop the pushes before the cut
                info = ck.rank_info(rank)
                base_pushes, records = int(info["pushes"]), int(info["records"])
            else:  # another executor count: what every rank left of each side, dealt to n
                works, held = _redealt(ck, srcs, old_n, n, rank, store.dir)
                records = sum(int(ck.rank_info(r)["records"]) for r in range(old_n)) \
                    if rank == 0 else 0
                # the core counts push calls afresh in a group of another size
                log.info("join executor %d of %d: resuming checkpoint %d of %d executors with "
                         "%s units left (left, right)", rank, n, plan.resume_id, old_n,
                         [len(works[s] or []) for s in SIDES])
        if files and works["left"] is None:
            works = {s: srcs[s].work(rank, n) for s in SIDES}
        link.put(Resumed(rank, records))
        schemas = {"left": left.schema, "right": right.schema}
        cols = {s: query.input_columns(s, schemas[s]) for s in SIDES}
        sides = {s: Side(_file_items(srcs[s], works[s], held[s], cols[s], batch_rows)
                          if works[s] is not None else
                          _counted(iter(srcs[s].read(rank, n, cols[s], batch_rows))))
                 for s in SIDES}
        result_schema = ex.result_schema()
        pushes = 0  # side batches consumed, the dropped ones before the cut included
        records_at: Dict[int, int] = {base_pushes: records}
        # push count -> each FileSource side's state after it (a cut records it in global terms)
        state_at: Dict[int, Dict[str, SideState]] = {
            base_pushes: {s: (None, None) for s in SIDES}}
        out: List[pa.RecordBatch] = []
        pending: List[pa.RecordBatch] = []  # fired since the last cut
        asks = AskSchedule(ex, plan.every, plan.next_id, base_pushes)  # rank 0's
        last_progress = time.monotonic()
        kill_at = kill_point(rank, plan.attempt)
        dropped = 0
        throttle = RatePacer(plan.rate / n) if plan.rate else None

        def after_call() -> None:
            nonlocal pending
            while True:
                img = ex.take_checkpoint()
                if img is None:
                    break
                # the pairs fired before the cut go with it; those the service thread
                # fired since (peers' later epochs) go with the next cut (split_at_cut)
                pending, after = ex.results_at_cut(img, pending)
                info: Dict[str, Any] = {"rank": rank, "position": None, "pushes": img.pushes,
                                        "records": records_at[img.pushes],
                                        "windows": sum(b.num_rows for b in pending)}
                extra: Dict[str, bytes] = {}
                if files:  # each side's position in global terms: work left, rows held
                    st = state_at[img.pushes]
                    info["sides"] = {}
                    for s in SIDES:
                        w = works[s]
                        assert w is not None
                        now = _held_at(w, held[s], st[s])
                        info["sides"][s] = {"work": FileSource.remaining(w, st[s][0]),
                                            "held": sorted(now)}
                        for g, rows in now.items():
                            extra[_held_name(rank, s, g)] = to_ipc(pa.Table.from_batches([rows]))
                write_image(store, link, rank, img, pending, result_schema, info,
                            lambda p: f"part-{p}.bin",
                            kill_in_write(store, plan, kill_at, rank, pushes), extra=extra)
                out.extend(pending)
                pending = after
                for k in [k for k in records_at if k < img.pushes]:  # older cuts are not needed
                    del records_at[k]
                    state_at.pop(k, None)
                asks.cut(img.id)
            pending.extend(ex.results())

        with no_cyclic_gc():
            for side, batch in merged(query, sides):
                if pushes < base_pushes:  # pushed before the cut: its rows are in the stores
                    pushes += 1
                    if files:
                        state_at = {pushes: {s: sides[s].state() for s in SIDES}}
                    continue
                b, gone = query.prepare_counted(side, batch, schemas[side])
                dropped += gone
                ex.push_side_batch(side, b)
                pushes += 1
                records += batch.num_rows
                records_at[pushes] = records
                if files:
                    state_at[pushes] = {s: sides[s].state() for s in SIDES}
                if throttle is not None:  # cuts and results are served while it waits
                    throttle.after(batch.num_rows, lambda s: (ex.poll(s), after_call()))
                after_call()
                serve_driver(link, ex, asks, None)  # a rescale's forced cut; epoch lengths
                if rank == 0:
                    asks.step(pushes)
                if kill_at is not None and not kill_at[2] and pushes >= kill_at[0]:
                    kill_after_cuts(ex, store, plan, kill_at, rank, pushes, after_call)
                if time.monotonic() - last_progress >= PROGRESS_S:
                    last_progress = time.monotonic()
                    link.put(Progress(rank, records))
            ex.finish()
            after_call()
        out.extend(pending)
        m = dict(ex.metrics)
        m["records_read"] = records
        m["null_time_records"] = dropped
        return pa.Table.from_batches(out, schema=result_schema), m
    finally:
        ex.close()
