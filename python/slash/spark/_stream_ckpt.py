"""Checkpoints and exactly-once output for :func:`slash.spark.stream`
(``checkpoint=DIR``); the protocol (cuts, where a new group resumes, the
directory sink's two-phase commit, a clean stop, a bounded source's end,
updates recorded in each manifest) is docs/recovery.md's "Spark streams".

:class:`TaskCheckpoints` is one barrier task's side: it asks the driver
where to start, restores, cuts, and reports each cut's files with the
windows fired before it. :class:`DriverCheckpoints` is the driver's: its
handlers, on the stream's table (:class:`slash.run.driver.Dispatch`),
answer where to resume, commit a cut once every rank of the current group
reported it (an older group's reports are ignored) and publish its windows.

A transactional sink (``sink=KafkaSink(..., transactional_id=...)``):
each task writes a cut's windows as that checkpoint's result segment, and
the driver hands every commit to :class:`slash.run.delivery.Delivery`;
a finished stream's last windows are written durably beside its marker
(``_STREAM_FINAL.arrow``) before they are delivered, so a driver that died
in between delivers them when the stream is started again on the directory.

Invariant: a window is published once, with the checkpoint that covers it
(the final names are fixed by rank and id, so a rename rolled forward after
a driver's crash is never done twice).
"""
from __future__ import annotations

import glob
import json
import logging
import os
import socket
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash._ipc import from_ipc, to_ipc
from slash.checkpoint import read_checked, write_durably
from slash.ckpt_worker import AskSchedule
from slash.control.logic import recorded_logic
from slash.errors import (CheckpointCorrupt, InvalidState, NotSupported, PeerDisconnected,
                          Timeout)
from slash.executor import split_at_cut
from slash.recovery import checkpoint_leaders, part_name, read_partitions
from slash.run.delivery import Delivery
from slash.run.driver import Dispatch
from slash.run.plan import CheckpointPlan
from slash.run.protocol import (Exit, Resume, ResumeAsk, ResumeError, StopAfter, Stopped, StopAt,
                                 StreamCheckpoint, StreamFinal)
from slash.spark._tasks import write_table

log = logging.getLogger(__name__)

PENDING = "_pending"
FINISHED = "_STREAM_FINISHED.json"
#: a finished stream's last windows for a transactional sink (beside the marker: the store
#: deletes result segments no manifest names)
FINAL = "_STREAM_FINAL.arrow"
META_KEY = b"slash.checkpoint_id"


def final_name(rank: int, ckpt_id: Optional[int]) -> str:
    return f"part-r{rank:04d}-{'final' if ckpt_id is None else f'c{ckpt_id:012d}'}.parquet"


def _windows(table: pa.Table) -> List[Tuple[int, int, int]]:
    """(window_start, window_end, rows) per window of a finalized table."""
    if not table.num_rows:
        return []
    g = table.group_by(["window_start", "window_end"]).aggregate([("window_start", "count")])
    return list(zip(g.column("window_start").to_pylist(), g.column("window_end").to_pylist(),
                    g.column("window_start_count").to_pylist()))


class TaskCheckpoints:
    """One barrier task's side (see the module doc)."""

    def __init__(self, plan: CheckpointPlan, rank: int, n: int, conn: Any, ex: Any,
                 finalize: Callable[[List[pa.RecordBatch]], Optional[pa.Table]],
                 sink_dir: Optional[str], session: bool, source: Any = None,
                 segments: bool = False) -> None:
        self.plan, self.rank, self.n, self.conn, self.ex = plan, rank, n, conn, ex
        self.finalize = finalize
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
        self.conn.send(ResumeAsk(self.rank, (socket.gethostname(), os.getpid()), group))
        deadline = time.monotonic() + timeout
        while True:
            if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                raise Timeout(f"rank {self.rank}: the driver did not say where to resume within "
                              f"{timeout} s")
            msg = self.conn.recv()
            if isinstance(msg, Resume):
                break
            if isinstance(msg, ResumeError):
                raise CheckpointCorrupt(msg.reason)
            on_other(msg)
        resume_id, base_ms, next_id, self.versions = msg.ckpt_id, msg.base_ms, msg.next_id, \
            msg.versions
        skip = 0
        if resume_id is not None:
            ck = self.store.load(resume_id)
            old_n = ck.executors
            metas = [ck.read(f"rank-{r}.meta") for r in range(old_n)]
            # the map the group followed at the cut (moves of StreamHandle.rebalance kept), or
            # partition mod n in a group of another size; every image of a partition is merged
            leaders = checkpoint_leaders(ck, self.n, self.plan.partitions)
            lead = leaders if leaders is not None else [p % self.n
                                                        for p in range(self.plan.partitions)]
            self.ex.restore(metas, read_partitions(ck, lambda p: lead[p] == self.rank), leaders)
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

    def read_to(self, pushes: int, left: Dict[str, Any]) -> None:
        """The task, right after push number ``pushes`` (the core's count):
        the source's work left after it, for the cut that ends there."""
        self.positions[pushes] = left

    def on_driver(self, msg: Tuple[Any, ...]) -> None:
        if isinstance(msg, StopAfter):
            self.stop_after = msg.ckpt_id
        elif isinstance(msg, Exit):
            self.exit = True

    def after_call(self) -> None:
        """Right after every executor call: takes finished cuts, holds the rest."""
        while True:
            img = self.ex.take_checkpoint()
            if img is None:
                break
            self._cut(img)
        self.held.extend(self.ex.results())

    def _cut(self, img: Any) -> None:
        t0 = time.monotonic()
        # windows ending by the cut's watermark fired before it
        pre, self.held = split_at_cut(self.held + self.ex.results(), img.meta, self.session)
        st = self.store
        r = self.rank
        files = {f"rank-{r}.meta": st.write(img.id, f"rank-{r}.meta", img.meta)}
        for p, data in img.parts.items():  # one file per image: a hand-over has p in two
            files[part_name(p, r)] = st.write(img.id, part_name(p, r), data)
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
        files[f"rank-{r}.json"] = st.write(img.id, f"rank-{r}.json", json.dumps(info).encode())
        segs, sink, rows, wins = self._pending(pre, img.id)
        size = sum(f["size"] for f in files.values())
        self.conn.send(StreamCheckpoint(r, self.group, img.id, files, segs, sink, rows, wins,
                                        {"bytes": size, "seconds": time.monotonic() - t0}))
        self.taken = max(self.taken, img.id)
        self.asks.cut(img.id)

    def maybe_request(self, pushes: int) -> None:
        """Rank 0: asks for the next checkpoint when one is due."""
        if self.rank == 0:
            self.asks.step(pushes)

    def stop_phase(self, serve: Callable[[float], None], pushes: int, timeout: float) -> None:
        """After "stop": a last checkpoint (rank 0 asks, the driver names it to
        all), then wait for the driver's "exit" without finishing."""
        if self.rank == 0:
            if self.asks.asked is None:  # else the outstanding ask is the last one
                self.asks.force()
                self.asks.step(pushes)
            c = self.asks.asked
            self.conn.send(StopAt(self.rank, self.group, c))
        deadline = time.monotonic() + timeout
        sent = False
        while not self.exit:
            if time.monotonic() > deadline:
                raise Timeout(f"rank {self.rank}: the last checkpoint of stop() was not taken "
                              f"within {timeout} s")
            try:
                serve(0.02)
            except PeerDisconnected:
                if sent:  # a peer got "exit" first and closed: this cut is complete
                    return
                raise
            self.after_call()
            if not sent and self.stop_after is not None and self.taken >= self.stop_after:
                self.conn.send(Stopped(self.rank, self.group))
                sent = True

    def final(self) -> None:
        """After finish(): the last windows (no checkpoint covers them; the
        driver publishes them once every rank sent its own)."""
        self.held.extend(self.ex.results())
        _, sink, rows, wins = self._pending(self.held, None)
        self.held = []
        self.conn.send(StreamFinal(self.rank, self.group, sink, rows, wins))

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
            return {rel: entry}, {}, None, _windows(table)
        if self.sink_dir is None:
            return {}, {}, to_ipc(table), _windows(table)
        final = final_name(self.rank, ckpt_id)
        write_table(table, os.path.join(self.sink_dir, PENDING), f"g{self.group}-{final}")
        return {}, {f"{PENDING}/g{self.group}-{final}": final}, None, _windows(table)


class DriverCheckpoints:
    """The driver's side (see the module doc); its methods run in the
    rendezvous thread, under nothing but their own state."""

    def __init__(self, plan: CheckpointPlan, sink_dir: Optional[str],
                 send_to: Callable[[int, Any], None], send_all: Callable[[Any], None],
                 deliver: Callable[[List[pa.Table], str], None],
                 observe: Callable[[List[Tuple[int, int, int]], int], None],
                 logic: Optional[Callable[[], Tuple[List[Tuple[int, Any]],
                                                    List[Dict[str, Any]]]]] = None,
                 delivery: Optional[Delivery] = None) -> None:
        self.plan = plan
        self.delivery = delivery  # a transactional sink, fed by the commits
        # the logic versions agreed so far: ([(start, query), ...] for the tasks,
        # [{"from_ticks", "args"}, ...] for the manifest), versions 1, 2, ...
        self.logic = logic if logic is not None else (lambda: ([], []))
        self.start_logic: List[Dict[str, Any]] = []  # the newest manifest's, at check_start
        self.store = plan.store()
        self.sink_dir = sink_dir
        self.send_to, self.send_all, self.deliver, self.observe = send_to, send_all, deliver, observe
        self.group: Optional[int] = None
        self.decision: Optional[Tuple[Any, ...]] = None
        self.reports: Dict[int, Dict[int, Tuple[Any, ...]]] = {}
        self.finals: Dict[int, Tuple[Any, ...]] = {}
        self.stopped: set = set()
        self.checkpoints: List[Dict[str, Any]] = []
        self.recoveries: List[Dict[str, Any]] = []
        self.failed_at: Optional[float] = None
        self.pids: Dict[int, Tuple[str, int]] = {}  # rank -> (host, pid) of its task's worker
        self.committed: Optional[int] = None
        self.fatal: Optional[BaseException] = None
        self.finished = False
        self.base_ms: Optional[int] = None
        self.rescaling = False  # the next group is a rescale's, not a retry
        self.n: Callable[[], int] = lambda: plan.executors  # the group's size (register())

    # -- before a group: what is there ------------------------------------------
    def check_start(self) -> None:
        """In stream(): refuses a finished directory, checks the newest
        checkpoint (CheckpointCorrupt names a bad file). A transactional
        sink is fenced and given the committed windows it lacks (also those
        of a finished directory, before the refusal)."""
        finished = os.path.join(self.store.dir, FINISHED)
        if os.path.exists(finished):
            if self.delivery is not None:
                self._deliver_final(json.loads(open(finished, "rb").read()).get("final"))
            raise InvalidState(f"checkpoint directory {self.store.dir!r} holds a stream that ran to "
                               "its end (its source was exhausted); give a new directory")
        ck = self.store.latest()
        self.committed = ck.id if ck is not None else None
        self.start_logic = recorded_logic(ck)
        if self.delivery is not None:
            self.delivery.recover(ck)

    def _prepare(self, started_ms: int) -> Tuple[Any, ...]:
        ck = self.store.latest()
        renames: Dict[str, str] = dict(ck.manifest.get("info", {}).get("sink", {})) if ck else {}
        if self.sink_dir is not None:
            self._rename(renames)  # roll the newest commit forward (idempotent)
            for f in glob.glob(os.path.join(self.sink_dir, PENDING, "*")):
                log.info("deleting pending sink part %s (no committed checkpoint covers it)", f)
                os.unlink(f)
        base = int(ck.manifest["info"]["base_ms"]) if ck is not None else started_ms
        self.base_ms = base
        self.committed = ck.id if ck is not None else None
        return Resume(ck.id if ck is not None else None, base, (ck.id + 1) if ck else 1,
                      self.logic()[0])

    def _rename(self, renames: Dict[str, str]) -> None:
        for pending, final in sorted(renames.items()):
            src = os.path.join(self.sink_dir, pending)  # type: ignore[arg-type]
            if os.path.exists(src):
                os.replace(src, os.path.join(self.sink_dir, final))  # type: ignore[arg-type]
        if renames:
            fd = os.open(self.sink_dir, os.O_RDONLY)  # type: ignore[arg-type]
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    # -- messages ------------------------------------------------------------------
    def register(self, d: Dispatch, n: Callable[[], int]) -> None:
        """Its handlers on the stream's table ``d``; ``n()``: the current group's size."""
        self.n = n
        d.on(ResumeAsk, self._resume_asked)
        d.on(StreamCheckpoint, self._written)
        d.on(StopAt, self._stop_at)
        d.on(Stopped, self._stopped)
        d.on(StreamFinal, self._final)

    def _resume_asked(self, msg: ResumeAsk, _: Any) -> None:
        group = msg.group
        self.pids[msg.rank] = msg.process
        if group != self.group:
            if self.rescaling:  # the next barrier job of a rescale: no failure
                self.rescaling = False
            elif self.group is not None and self.failed_at is None:  # Spark retried the stage
                self.recoveries.append({"cause": "Spark retried the barrier stage", "rank": None,
                                        "from_checkpoint": self.committed,
                                        "seconds_to_resume": None})
            self.group, self.reports, self.finals, self.stopped = group, {}, {}, set()
            try:
                self.decision = self._prepare(group)
            except Exception as e:  # a corrupt checkpoint: the stream fails with it
                self.fatal = e
                self.decision = ResumeError(str(e))
            if self.failed_at is not None and self.recoveries:
                self.recoveries[-1]["seconds_to_resume"] = round(time.monotonic() - self.failed_at, 3)
                self.failed_at = None
        self.send_to(msg.rank, self.decision)

    def _written(self, msg: StreamCheckpoint, _: Any) -> None:
        if msg.group != self.group:  # an older group's (a failed attempt)
            return
        cid = msg.ckpt_id
        self.reports.setdefault(cid, {})[msg.rank] = msg
        if len(self.reports[cid]) == self.n():
            self._commit(cid, self.reports.pop(cid))

    def _stop_at(self, msg: StopAt, _: Any) -> None:
        if msg.group == self.group:
            self.send_all(StopAfter(msg.ckpt_id))

    def _stopped(self, msg: Stopped, _: Any) -> None:
        if msg.group == self.group:
            self.stopped.add(msg.rank)
            if len(self.stopped) == self.n():
                self.send_all(Exit())

    def _final(self, msg: StreamFinal, _: Any) -> None:
        if msg.group != self.group:
            return
        self.finals[msg.rank] = (msg.sink, msg.rows, msg.windows)
        if len(self.finals) == self.n():
            self._publish_final()

    def _commit(self, cid: int, reports: Dict[int, StreamCheckpoint]) -> None:
        files: Dict[str, Dict[str, int]] = {}
        segs: Dict[str, Dict[str, int]] = {}
        renames: Dict[str, str] = {}
        size, secs = 0, 0.0
        for r in sorted(reports):
            rep = reports[r]
            files.update(rep.files)
            segs.update(rep.segments)
            renames.update(rep.sink)
            size += rep.stats["bytes"]
            secs = max(secs, rep.stats["seconds"])
        t = time.monotonic()
        ck = self.store.commit(cid, files, segs, {"bytes": size, "base_ms": self.base_ms,
                                                  "sink": renames, "logic": self.logic()[1]})
        self.committed = cid
        if self.delivery is not None:
            self.delivery.committed(ck)
        self.checkpoints.append({"id": cid, "bytes": size,
                                 "seconds": round(secs + time.monotonic() - t, 4)})
        self._publish({r: (rep.sink, rep.rows, rep.windows) for r, rep in reports.items()},
                      str(cid))
        log.info("stream checkpoint %d committed: %d bytes", cid, size)

    def _publish(self, parts: Dict[int, Tuple[Any, ...]], label: str) -> None:
        renames: Dict[str, str] = {}
        tables: List[pa.Table] = []
        wins: List[Tuple[int, int, int]] = []
        for r in sorted(parts):
            s, rows, w = parts[r]
            renames.update(s)
            if rows is not None:
                tables.append(pa.ipc.open_stream(rows).read_all())
            wins.extend(w)
        if self.sink_dir is not None or self.delivery is not None:
            self._rename(renames)
            self.observe(wins, int(time.time() * 1000))
        if tables and self.delivery is None:
            self.deliver(tables, label)

    def _publish_final(self) -> None:
        marker: Dict[str, Any] = {"query": self.store.fingerprint,
                                  "checkpoints": len(self.checkpoints)}
        if self.delivery is None:  # a directory sink's last parts in place, then the marker
            self._publish(dict(self.finals), "final")
            write_durably(os.path.join(self.store.dir, FINISHED), json.dumps(marker).encode())
        else:  # the last windows durable, the marker naming them, then delivered
            tables = [from_ipc(rows) for _, rows, _ in self.finals.values() if rows is not None]
            if tables:
                size, crc = write_durably(os.path.join(self.store.dir, FINAL),
                                          to_ipc(pa.concat_tables(tables)))
                marker["final"] = {"id": (self.committed or 0) + 1, "size": size, "crc32": crc}
            write_durably(os.path.join(self.store.dir, FINISHED), json.dumps(marker).encode())
            self._deliver_final(marker.get("final"))
            self._publish(dict(self.finals), "final")
        self.finished = True

    def _deliver_final(self, final: Optional[Dict[str, Any]]) -> None:
        """The committed checkpoints and the last windows (``final``: the
        finished marker's segment) to the sink, each id once."""
        assert self.delivery is not None
        also = {}
        if final is not None:
            data = read_checked(os.path.join(self.store.dir, FINAL), final,
                                named_by="the finished marker")
            also[int(final["id"])] = from_ipc(data)
        self.delivery.recover(self.store.latest(), also)

    def failed(self, cause: str, rank: Optional[int], silent: Optional[int] = None) -> None:
        """Records a failure; ``silent``: a rank whose task vanished without a
        word (killed), named as the cause before a peer's report of it."""
        if silent is not None and silent in self.pids:
            host, pid = self.pids[silent]
            cause = (f"executor rank {silent} (pid {pid} on {host}) vanished without an error "
                     f"(killed?); then: {cause}")
            rank = silent
        self.failed_at = time.monotonic()
        self.recoveries.append({"cause": cause, "rank": rank, "from_checkpoint": self.committed})


def add_metadata(table: pa.Table, label: str) -> pa.Table:
    md = dict(table.schema.metadata or {})
    md[META_KEY] = label.encode()
    return table.replace_schema_metadata(md)

