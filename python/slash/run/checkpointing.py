"""A checkpointed rank's feature (:class:`Checkpointing`, see
:mod:`slash.run.recovery.checkpointed`): its cuts, taken as the rank's loop
(:class:`slash.run.rank.RankLoop`) runs, with the rank's position at each
(:class:`SplitPositions` for a fixed split, :class:`LivePositions` for a
live-scalable rank, a join's own), and the restore a checkpointed attempt
starts with (:func:`restore`, :func:`restore_from`). What a cut is made of
(the asks, the image's files, the late rows) is :mod:`slash.run.rank_ckpt`'s."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.checkpoint import Checkpoint
from slash.executor import Executor
from slash.run.ckpt import Writer, checkpoint_leaders, part_name, read_partitions
from slash.run.faults import kill_after_cuts, kill_in_write, kill_point
from slash.run.plan import AttemptPlan
from slash.run.rank import RankLoop
from slash.run.rank_ckpt import AskSchedule, LateRows, write_image
from slash.sources import FileSource, Position, Work


class SplitPositions:
    """A fixed split's positions at each push (and, given ``work`` in global
    terms, the work it has left: ``remaining(work, position)``, the source's,
    e.g. :meth:`FileSource.remaining`), for :class:`Checkpointing`."""

    def __init__(self, start: Optional[Position], work: Any,
                 remaining: Optional[Callable[[Any, Any], Any]] = None) -> None:
        self.start, self.work = start, work
        self.remaining = remaining or FileSource.remaining
        self.after: Dict[int, Optional[Position]] = {}

    def begin(self, loop: RankLoop) -> None:
        self.after = {loop.pushes: self.start}

    def note(self, loop: RankLoop) -> None:
        self.after[loop.pushes] = loop.pos

    def sync(self, loop: RankLoop) -> None:
        pass

    def at(self, pushes: int) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, bytes]]:
        info: Dict[str, Any] = {"position": self.after[pushes]}
        if self.work is not None:  # what is left of this rank's input, in global terms
            info["work"] = self.remaining(self.work, self.after[pushes])
        return info, {}, {}

    def forget_before(self, pushes: int) -> None:
        for k in [k for k in self.after if k < pushes]:
            del self.after[k]


class LivePositions:
    """A live-scalable rank's positions (:mod:`slash.run.recovery.live`): at each
    push count, the scale generations it can be described in, each with its
    work in global terms, the position in it and its active ranks."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.cands: Dict[int, List[Tuple[int, Work, Any, List[int]]]] = {}

    def begin(self, loop: RankLoop) -> None:
        a = self.agent
        self.cands = {loop.pushes: [(a.sid, a.work, None, list(a.active))]}

    def note(self, loop: RankLoop) -> None:
        a = self.agent
        self.cands[loop.pushes] = [(a.sid, a.work, a.pos, list(a.active))]

    def sync(self, loop: RankLoop) -> None:
        # a scale commit since the last push: the same push count is also described by
        # the new generation (its new work, nothing of it read)
        a, now = self.agent, self.cands[loop.pushes]
        if now[-1][0] != a.sid:
            now.append((a.sid, a.work, None, list(a.active)))

    def at(self, pushes: int) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, bytes]]:
        gens = {str(g): {"work": FileSource.remaining(w, pos), "active": act}
                for g, w, pos, act in self.cands[pushes]}
        return {"position": None, "live": gens}, {"gens": sorted(int(g) for g in gens)}, {}

    def forget_before(self, pushes: int) -> None:
        for k in [k for k in self.cands if k < pushes]:
            del self.cands[k]


def restore(ex: Executor, plan: AttemptPlan, n: int,
            spread: Optional[List[int]] = None) -> Optional[Checkpoint]:
    """The restore step: ``ex`` restored from ``plan.resume_id`` (None: a
    fresh start) by :func:`restore_from`. Returns the checkpoint."""
    if plan.resume_id is None:
        return None
    ck = plan.store().load(plan.resume_id)
    restore_from(ex, ck, n, plan.partitions, spread)
    return ck


def restore_from(ex: Executor, ck: Checkpoint, n: int, partitions: int,
                 spread: Optional[List[int]] = None) -> None:
    """``ex`` (rank ``ex.rank`` of a group of ``n``) restored from checkpoint
    ``ck``: every rank's meta, and every image of the partitions it leads
    under the leader map the ranks followed at the cut when the group has
    the checkpoint's size, else ``spread`` (default: partition mod n); every
    image of a partition is merged."""
    metas = [ck.read(f"rank-{r}.meta") for r in range(ck.executors)]
    leaders = checkpoint_leaders(ck, n, partitions)
    if leaders is None:
        leaders = spread
    lead = leaders if leaders is not None else [p % n for p in range(partitions)]
    ex.restore(metas, read_partitions(ck, lambda p: lead[p] == ex.rank), leaders)


class Checkpointing:
    """Checkpoint cuts (see :mod:`slash.run.recovery.checkpointed`): rank 0 asks for them
    (:class:`AskSchedule`), every rank writes its image on a background
    thread (:class:`Writer`) with its position at the cut (``positions``:
    :class:`SplitPositions`, :class:`LivePositions` or a join's: ``at(pushes)``
    gives (rank-<r>.json entries, report stats, files to write with the
    image)), the windows fired before the cut as its segment and the late
    rows found before it. A ``CheckpointNow`` from the driver asks at the
    next chance. The windows fired after the newest cut are held until the
    next one (``pending``). A partition's file is :func:`slash.run.ckpt.part_name`'s."""

    def __init__(self, plan: AttemptPlan, link: Any, positions: Any, pushes: int = 0,
                 records: int = 0) -> None:
        self.plan, self.link, self.positions = plan, link, positions
        self.base_pushes, self.base_records = pushes, records
        self.store = plan.store()
        self.pending: List[pa.RecordBatch] = []
        self.records_at: Dict[int, int] = {}

    def install(self, loop: RankLoop) -> None:
        plan, ex = self.plan, loop.ex
        self.loop = loop
        loop.pushes, loop.records = self.base_pushes, self.base_records
        self.records_at = {loop.pushes: loop.records}
        self.positions.begin(loop)
        self.writer = Writer(loop.rank)
        self.asks = AskSchedule(ex, plan.every, plan.next_id, loop.pushes)  # rank 0's
        self.kill_at = kill_point(loop.rank, plan.attempt)
        loop.late = LateRows() if plan.want_late else None
        loop.collect = self.pending.extend
        loop.handlers["checkpoint_now"] = lambda msg: self.asks.force()
        loop.on_push.append(self.pushed)
        loop.before_take.append(self.cuts)
        loop.after_take.append(self.ask)
        loop.after_item.append(self.kill)
        loop.after_finish.append(self.finished)
        loop.closers.append(self.writer.close)

    def pushed(self) -> None:
        self.records_at[self.loop.pushes] = self.loop.records
        self.positions.note(self.loop)

    def cuts(self) -> None:
        loop, ex, rank = self.loop, self.loop.ex, self.loop.rank
        self.positions.sync(loop)
        while True:
            img = ex.take_checkpoint()
            if img is None:
                break
            # the windows fired before the cut go with it; those the service thread
            # fired since (peers' later epochs) go with the next cut (split_at_cut)
            loop.take()
            self.pending, after = ex.results_at_cut(img, self.pending, take=False)
            version, leaders_now = ex.leader_map()  # the map this rank followed at the cut
            info = {"rank": rank, "pushes": img.pushes, "records": self.records_at[img.pushes],
                    "windows": sum(b.num_rows for b in self.pending),
                    "leader_map": {"version": version, "leaders": leaders_now}}
            more, stats, extra = self.positions.at(img.pushes)
            info.update(more)
            # the executor call holding the cut (alignment + the core's image), in the loop
            stats = {"cut_seconds": time.monotonic() - loop.call_t, **stats}
            self.writer.submit(write_image, self.store, self.link, rank, img, self.pending,
                               loop.result_schema, info, lambda p: part_name(p, rank),
                               kill_in_write(self.store, self.plan, self.kill_at, rank,
                                             loop.pushes), stats, extra,
                               loop.late.at_cut(img.pushes) if loop.late is not None else None)
            loop.out.extend(self.pending)
            self.pending = after
            loop.collect = self.pending.extend
            for k in [k for k in self.records_at if k < img.pushes]:  # older cuts are not needed
                del self.records_at[k]
            self.positions.forget_before(img.pushes)
            self.asks.cut(img.id)

    def ask(self) -> None:
        if self.loop.rank == 0 and not self.loop.ex.finished:  # a finished executor takes no asks
            self.asks.step(self.loop.pushes)

    def kill(self) -> None:
        k, loop = self.kill_at, self.loop
        if k is not None and not k[2] and loop.pushes >= k[0]:
            kill_after_cuts(loop.ex, self.store, self.plan, k, loop.rank, loop.pushes,
                            loop.service)

    def finished(self) -> None:
        self.writer.drain()  # every checkpoint this rank took is durable and reported
        self.loop.out.extend(self.pending)
        self.pending = []
        self.loop.collect = self.loop.out.extend
