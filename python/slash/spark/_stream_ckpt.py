"""Checkpoints and exactly-once output for :func:`slash.spark.stream`
(``checkpoint=DIR``); the protocol (cuts, where a new group resumes, the
directory sink's two-phase commit, a clean stop, a bounded source's end,
updates recorded in each manifest) is docs/recovery.md's "Spark streams".

The task's side is the engine's (:class:`slash.run.stream_ckpt.TaskCheckpoints`,
a feature of the task's rank loop). :class:`DriverCheckpoints` is the driver's: its handlers, on the
stream's table (:class:`slash.run.driver.Dispatch`), answer where to resume,
commit a cut once every rank of the current group reported it (an older
group's reports are ignored; the one commit, :func:`slash.run.ckpt.commit`)
and publish its windows.

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
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash._ipc import from_ipc, to_ipc
from slash.checkpoint import read_checked, write_durably
from slash.control.logic import recorded_logic
from slash.errors import InvalidState
from slash.run.ckpt import commit
from slash.run.delivery import Delivery
from slash.run.driver import Dispatch
from slash.run.plan import CheckpointPlan
from slash.run.protocol import (Exit, Resume, ResumeAsk, ResumeError, StopAfter, Stopped, StopAt,
                                 StreamCheckpoint, StreamFinal)
from slash.run.stream_ckpt import PENDING

log = logging.getLogger(__name__)

FINISHED = "_STREAM_FINISHED.json"
#: a finished stream's last windows for a transactional sink (beside the marker: the store
#: deletes result segments no manifest names)
FINAL = "_STREAM_FINAL.arrow"
META_KEY = b"slash.checkpoint_id"


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
        """The one commit (:func:`slash.run.ckpt.commit`), with the stream's
        base time, the sink parts the cut publishes and the logic versions."""
        renames: Dict[str, str] = {}
        for r in sorted(reports):
            renames.update(reports[r].sink)
        ck = commit(self.store, cid, {r: (rep.files, rep.segments, rep.stats)
                                      for r, rep in reports.items()}, self.checkpoints,
                    info={"base_ms": self.base_ms, "sink": renames, "logic": self.logic()[1]})
        self.committed = cid
        if self.delivery is not None:
            self.delivery.committed(ck)
        self._publish({r: (rep.sink, rep.rows, rep.windows) for r, rep in reports.items()},
                      str(cid))

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

