"""A Spark stream task's checkpoints (``slash.spark.stream(checkpoint=DIR)``):
:class:`TaskCheckpoints`, a feature of the task's rank loop
(:class:`slash.run.rank.RankLoop`). It asks the driver where to start,
restores (:func:`slash.run.checkpointing.restore_from`), cuts, and reports each cut's
files with the windows fired before it, written by the engine's
:class:`slash.run.ckpt.Writer` on its thread; a clean stop ends with a last
cut, a bounded source's end with the last windows. The protocol, and the
driver's side (``slash.spark._stream_ckpt.DriverCheckpoints``), are
docs/recovery.md's "Spark streams".

Invariant: a cut's report is sent only once its files are durable, and
every report before the task's ``stopped`` or final message.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash._ipc import to_ipc
from slash.run.rank_ckpt import AskSchedule, write_state
from slash.errors import CheckpointCorrupt, InvalidState, NotSupported, PeerDisconnected, Timeout
from slash.executor import split_at_cut
from slash.run.ckpt import Writer, part_name
from slash.run.plan import CheckpointPlan
from slash.run.protocol import (Resume, ResumeAsk, ResumeError, StopAfter, Stopped, StopAt,
                                 StreamCheckpoint, StreamFinal)
from slash.run.checkpointing import restore_from

log = logging.getLogger(__name__)

#: where a directory sink's parts wait for the checkpoint that publishes them
PENDING = "_pending"


def final_name(rank: int, ckpt_id: Optional[int]) -> str:
    return f"part-r{rank:04d}-{'final' if ckpt_id is None else f'c{ckpt_id:012d}'}.parquet"


def table_windows(table: pa.Table) -> List[Tuple[int, int, int]]:
    """(window_start, window_end, rows) per window of a finalized table."""
    if not table.num_rows:
        return []
    g = table.group_by(["window_start", "window_end"]).aggregate([("window_start", "count")])
    return list(zip(g.column("window_start").to_pylist(), g.column("window_end").to_pylist(),
                    g.column("window_start_count").to_pylist()))


class TaskCheckpoints:
    """One barrier task's side (see the module doc)."""

    def __init__(self, plan: CheckpointPlan, rank: int, n: int, link: Any, ex: Any,
                 finalize: Callable[[List[pa.RecordBatch]], Optional[pa.Table]],
                 sink_dir: Optional[str], session: bool, source: Any = None,
                 segments: bool = False, timeout: float = 120.0,
                 write_part: Optional[Callable[[pa.Table, str, str], Any]] = None) -> None:
        self.plan, self.rank, self.n, self.link, self.ex = plan, rank, n, link, ex
        self.finalize = finalize
        self.timeout = timeout  # a clean stop's last cut is taken within it
        self.write_part = write_part  # a directory sink's part writer (directory, name)
        self.sink_dir = sink_dir
        self.segments = segments  # a transactional sink's windows: result segments
        self.session = session
        self.store = plan.store()
        self.group: Optional[int] = None
        self.held: List[pa.RecordBatch] = []  # fired after the newest cut taken
        self.taken = 0  # the newest checkpoint id this task took
        # rank 0's asks, one at a time (the core refuses another while one is pending)
        self.asks = AskSchedule(ex, plan.every, next_id=1, pushes=0, give_up=False)
        self.stop_after: Optional[int] = None  # the driver's stop checkpoint
        self.exit = False
        self.schema = ex.result_schema()
        # a source whose positions are global (see RateSource.work, DirectorySource.work):
        # this rank's work left, so a checkpoint re-splits to any count
        self.source = source if hasattr(source, "resplit") and hasattr(source, "work") else None
        self.work: Optional[Dict[str, Any]] = (self.source.work(rank, n)
                                               if self.source is not None else None)
        self.base_pushes = 0  # the core's push count when this group started
        # the core's push count -> the work left after that push (read_to); pruned at each cut
        self.positions: Dict[int, Any] = {}
        # batches the source passes over first: a checkpoint that recorded a count, no work
        self.source_skip = 0
        # the logic versions agreed so far ((start, query) for versions 1, 2, ...): the
        # driver's, sent with where to resume, for the task to install before reading
        self.versions: List[Tuple[int, Any]] = []

    def handshake(self, group: int, timeout: float, on_other: Callable[[Tuple[Any, ...]], None]
                  ) -> Tuple[int, int]:
        """Asks the driver where to start, restores; returns (batches to skip, base_ms)."""
        self.group = group
        self.link.put(ResumeAsk(self.rank, (socket.gethostname(), os.getpid()), group))
        deadline = time.monotonic() + timeout
        while True:
            if not self.link.poll(max(0.0, deadline - time.monotonic())):
                raise Timeout(f"rank {self.rank}: the driver did not say where to resume within "
                              f"{timeout} s")
            msg = self.link.get()
            if isinstance(msg, Resume):
                break
            if isinstance(msg, ResumeError):
                raise CheckpointCorrupt(msg.reason)
            if isinstance(msg, StopAfter):  # a rescale asked before this rank's answer came:
                self.take_stop(msg)  # rank 0 resumed and asked the group to stop
                continue
            on_other(msg)
        resume_id, base_ms, next_id, self.versions = msg.ckpt_id, msg.base_ms, msg.next_id, \
            msg.versions
        skip = 0
        if resume_id is not None:
            ck = self.store.load(resume_id)
            old_n = ck.executors
            # the map the group followed at the cut (moves of StreamHandle.rebalance kept), or
            # partition mod n in a group of another size
            restore_from(self.ex, ck, self.n, self.plan.partitions)
            if old_n == self.n:  # each rank goes on with its own share
                info = ck.rank_info(self.rank)
                skip = int(info["pushes"])
                if self.work is not None:
                    self.work = self._left(info, self.rank, old_n)
                    if self.work is None:  # a count only: the source passes over as many
                        self.source_skip = skip
            else:  # another executor count: every rank's work left, dealt to n
                left = [self._left(ck.rank_info(r), r, old_n) for r in range(old_n)]
                if self.work is None or any(w is None for w in left):
                    raise NotSupported(f"checkpoint {ck.path!r} was cut with {old_n} executors "
                                       f"and this stream has {self.n}: its ranks' positions are "
                                       "counts of their own batches, not the work left in "
                                       f"global terms; start it with executors={old_n}")
                self.work = self.source.resplit(left, self.n)[self.rank]
                skip = 0  # the core counts push calls afresh in a group of another size
            self.taken = resume_id
            log.info("stream rank %d: resumed from checkpoint %s of %d executors (%d batches "
                     "already taken)", self.rank, ck.path, old_n, skip)
        self.base_pushes = skip
        self.asks = AskSchedule(self.ex, self.plan.every, next_id, skip, give_up=False)
        return skip, base_ms

    def _left(self, info: Dict[str, Any], rank: int, n: int) -> Optional[Dict[str, Any]]:
        """Rank's work left at a cut: as recorded, else from its push count
        when the source can count (RateSource.advance), else None."""
        if info.get("work") is not None:
            return info["work"]
        if hasattr(self.source, "advance"):
            return self.source.advance(self.source.work(rank, n), int(info["pushes"]))
        return None

    def install(self, loop: Any) -> None:
        """Its handlers on the task's :class:`slash.run.rank.RankLoop` (after
        :meth:`handshake`): the windows fired are held for the next cut, each
        push's position is kept for the cut that ends there, cuts are taken
        after every executor call, rank 0 asks for them; a stop ends with a
        last cut (:meth:`stop_phase`), a finish with :meth:`final`."""
        self.loop = loop
        self.writer = Writer(self.rank)
        loop.closers.append(self.writer.close)
        loop.pushes = self.base_pushes
        loop.collect = self.held.extend
        loop.handlers["stop_after"] = self.take_stop
        loop.handlers["exit"] = lambda msg: setattr(self, "exit", True)
        # the source's work left after push number loop.pushes (the core's count)
        loop.on_push.append(lambda: self.positions.__setitem__(loop.pushes, loop.pos))
        loop.before_take.append(self.cuts)
        loop.after_take.append(lambda: self.rank == 0 and not loop.stopped and
                               not self.ex.finished and self.asks.step(loop.pushes))
        loop.on_stop.append(lambda: self.stop_phase(loop.pushes, self.timeout))
        loop.after_finish.append(self.final)

    def take_stop(self, msg: StopAfter) -> None:
        """The driver's stop: this task ends after checkpoint ``msg.ckpt_id``."""
        self.stop_after = msg.ckpt_id

    def cuts(self) -> None:
        """Right after every executor call: takes finished cuts (the windows
        fired before each go with it, the rest are held)."""
        while True:
            img = self.ex.take_checkpoint()
            if img is None:
                break
            self.loop.take()
            self._cut(img)

    def _cut(self, img: Any) -> None:
        """Cut ``img``: what the rank records with it, its files written by
        the writer's thread (:class:`slash.run.ckpt.Writer`)."""
        # windows ending by the cut's watermark fired before it
        pre, after = split_at_cut(self.held, img.meta, self.session)
        self.held[:] = after
        r = self.rank
        version, leaders = self.ex.leader_map()  # the map this rank followed at the cut
        info: Dict[str, Any] = {"rank": r, "pushes": img.pushes,
                                "leader_map": {"version": version, "leaders": leaders}}
        if self.source is not None:  # what is left of this rank's share, in global terms
            if img.pushes == self.base_pushes:
                if self.work is not None:  # else only the count is known, as before
                    info["work"] = self.work
            elif img.pushes in self.positions:
                info["work"] = self.positions[img.pushes]
            else:
                raise InvalidState(f"rank {r}: checkpoint {img.id} ends after push {img.pushes}, "
                                   f"whose source position was not recorded")
            for p in [p for p in self.positions if p < img.pushes]:
                del self.positions[p]
        self.writer.submit(self._write, img, info, pre)
        self.taken = max(self.taken, img.id)
        self.asks.cut(img.id)

    def _write(self, img: Any, info: Dict[str, Any], pre: List[pa.RecordBatch]) -> None:
        """On the writer's thread: the cut's files (one per image: a
        hand-over has a partition in two), its windows, then the report."""
        t0, st, r = time.monotonic(), self.store, self.rank
        files = write_state(st, r, img, lambda p: part_name(p, r))
        files[f"rank-{r}.json"] = st.write(img.id, f"rank-{r}.json", json.dumps(info).encode())
        segs, sink, rows, wins = self._pending(pre, img.id)
        size = sum(f["size"] for f in files.values())
        self.link.put(StreamCheckpoint(r, self.group, img.id, files, segs, sink, rows, wins,
                                        {"bytes": size, "seconds": time.monotonic() - t0}))

    def stop_phase(self, pushes: int, timeout: float) -> None:
        """After "stop": a last checkpoint (rank 0 asks, the driver names it to
        all), then wait for the driver's "exit" without finishing."""
        if self.rank == 0:
            if self.asks.asked is None:  # else the outstanding ask is the last one
                self.asks.force()
                self.asks.step(pushes)
            c = self.asks.asked
            self.link.put(StopAt(self.rank, self.group, c))
        deadline = time.monotonic() + timeout
        sent = False
        while not self.exit:
            if time.monotonic() > deadline:
                raise Timeout(f"rank {self.rank}: the last checkpoint of stop() was not taken "
                              f"within {timeout} s")
            try:
                self.loop.serve()
                self.ex.poll(0.02)
            except PeerDisconnected:
                if sent:  # a peer got "exit" first and closed: this cut is complete
                    return
                raise
            self.loop.service()
            if not sent and self.stop_after is not None and self.taken >= self.stop_after:
                self.writer.drain()  # the last cut reported before the stop is
                self.link.put(Stopped(self.rank, self.group))
                sent = True

    def final(self) -> None:
        """After finish(): the last windows (no checkpoint covers them; the
        driver publishes them once every rank sent its own)."""
        self.writer.drain()  # every cut reported first
        _, sink, rows, wins = self._pending(self.held, None)
        self.held.clear()
        self.link.put(StreamFinal(self.rank, self.group, sink, rows, wins))

    def _pending(self, fired: List[pa.RecordBatch], ckpt_id: Optional[int]
                 ) -> Tuple[Dict[str, Dict[str, int]], Dict[str, str], Optional[bytes],
                            List[Tuple[int, int, int]]]:
        """The windows ``fired`` as the driver publishes them with checkpoint
        ``ckpt_id`` (None: the final flush): a transactional sink's result
        segment of the cut (name -> manifest entry), a directory sink's
        pending part (pending name -> final name), else Arrow IPC; and
        (start, end, rows) per window."""
        table = self.finalize(fired)
        if table is None or not table.num_rows:
            return {}, {}, None, []
        if self.segments and ckpt_id is not None:
            rel, entry = self.store.write_segment(self.rank, ckpt_id, to_ipc(table))
            return {rel: entry}, {}, None, table_windows(table)
        if self.sink_dir is None or self.write_part is None:
            return {}, {}, to_ipc(table), table_windows(table)
        final = final_name(self.rank, ckpt_id)
        self.write_part(table, os.path.join(self.sink_dir, PENDING), f"g{self.group}-{final}")
        return {}, {f"{PENDING}/g{self.group}-{final}": final}, None, table_windows(table)
