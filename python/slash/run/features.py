"""The features a rank's loop (:class:`slash.run.rank.RankLoop`) is run
with, each a small object whose ``install(loop)`` registers what it does with
the loop's hook lists: the control protocol's rank side (:class:`Control`),
rebalance requests without it (:class:`Moves`), a live-scalable rank
(:class:`Scaling`), live metrics (:class:`Report`), a stream's fired windows
(:class:`FiredWindows`), a realtime replay (:class:`Realtime`) and the
records read (:class:`ProgressReport`). A checkpointed rank's feature is
:class:`slash.run.rank_ckpt.Checkpointing`; a join's push is
:class:`slash.run.rank.JoinPush`."""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from slash.compute import pc
from slash.errors import InvalidState
from slash.run.plan import PROGRESS_S
from slash.run.protocol import Metrics, Progress, Windows
from slash.run.rank import NEVER, RankLoop
from slash.sources import malformed_records


class Control:
    """The control protocol's rank side (:class:`slash.control.logic.ExecutorControl`):
    its logic versions filter each batch, its requests are served between
    pushes, rank 0's rebalance moves are applied when their turn comes."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl

    def install(self, loop: RankLoop) -> None:
        ctl = self.ctl
        loop.prepare = ctl.prepare
        loop.columns = lambda: ctl.plan.input_columns
        loop.handlers["ctl"] = lambda msg: ctl.handle(msg, loop.ex)
        loop.handlers["move"] = ctl.moves.add
        ctl.other = loop.dispatch  # what a paused request meets goes to the one dispatch
        loop.after_serve.append(lambda: ctl.moves.pending and ctl.moves.apply(loop.ex))
        loop.before_finish.append(ctl.input_done)

        def status() -> Dict[str, Any]:
            s = dict(ctl.status())
            if ctl.max_seen is not None:
                s["max_event_time_ms"] = ctl.max_seen // loop.ex.state.ticks_per_ms
            return s
        loop.status.append(status)


class Moves:
    """Rank 0's rebalance requests without the control protocol (a
    checkpointed group's, :class:`slash.control.moves.MoveRequests`)."""

    def __init__(self, moves: Any) -> None:
        self.moves = moves

    def install(self, loop: RankLoop) -> None:
        moves = self.moves
        loop.handlers["move"] = moves.add
        loop.after_serve.append(lambda: moves.pending and moves.apply(loop.ex))
        loop.before_finish.append(lambda: moves.fail_all(InvalidState(
            "rebalance: rank 0 has read all of its input; leadership no longer moves")))


class Scaling:
    """A live-scalable rank (:class:`slash.run.live.scale.ScaleAgent`): it takes
    the driver's scale requests and tells the agent its watermark."""

    def __init__(self, agent: Any, ctl: Any, restored: bool = False) -> None:
        self.agent, self.ctl, self.restored = agent, ctl, restored

    def install(self, loop: RankLoop) -> None:
        agent = self.agent
        agent.start(loop.ex, self.ctl, loop.source, loop.query.time, restored=self.restored)
        loop.handlers["scale"] = agent.handle
        loop.on_advance.append(agent.advanced)
        loop.status.append(lambda: {"standby": not agent.is_active})


class Report:
    """Live metrics (:class:`slash.metrics.Reporter`) every so often and
    once at the end, each feature's ``status`` part in them."""

    def __init__(self, reporter: Any, send: Callable[[Any], None], at_finish: bool = True) -> None:
        self.reporter, self.send, self.at_finish = reporter, send, at_finish

    def install(self, loop: RankLoop) -> None:
        """``at_finish`` False: no report at the finish (its owner sends the last one, :meth:`now`)."""
        self.loop = loop
        loop.after_take.append(lambda: (self.reporter.due() or loop.ex.finished and self.at_finish)
                               and self.now())

    def now(self) -> None:
        """A report now (a stream stopped without finishing sends its last one)."""
        loop = self.loop
        snap = self.reporter.snapshot(loop.ex)
        snap["records_read"] = loop.records
        snap["malformed_records"] = malformed_records(loop.source)
        snap["pid"] = os.getpid()  # which process is which rank (status per_executor)
        for part in loop.status:
            snap.update(part())
        self.send(Metrics(loop.rank, snap))


def fired_windows(batches: List[pa.RecordBatch], ticks_per_ms: int) -> List[Tuple[int, int, int]]:
    """(window_start ms, window_end ms, rows) of each window in fired
    executor results (bounds in ticks), in order of window end.

    >>> b = pa.record_batch({"window_start": [0, 0, 1000], "window_end": [1000, 1000, 2000]})
    >>> fired_windows([b], 1)
    [(0, 1000, 2), (1000, 2000, 1)]
    """
    if not batches:
        return []
    s = np.concatenate([b.column("window_start").to_numpy() for b in batches]) // ticks_per_ms
    e = np.concatenate([b.column("window_end").to_numpy() for b in batches]) // ticks_per_ms
    if not len(s):
        return []
    u, c = np.unique(np.stack([e, s], axis=1), axis=0, return_counts=True)
    return [(int(a), int(b), int(k)) for (b, a), k in zip(u, c)]


class FiredWindows:
    """A stream's fired windows as they fire (:class:`Windows`: the group
    watermark in ms up to which this rank fired everything, None once it
    finished, and the windows), whenever either changed: the driver's
    per-window latency."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        self.send = send
        self.told: Optional[int] = NEVER
        self.gw: Optional[int] = None

    def install(self, loop: RankLoop) -> None:
        ex = loop.ex
        tpm = max(1, int(getattr(ex.state, "ticks_per_ms", 1) or 1))

        def before() -> None:  # the group watermark before taking: every window ending before it fired
            self.gw = ex.metrics["group_watermark"]

        def fired(got: List[pa.RecordBatch]) -> None:
            gw = self.gw
            mark = None if ex.finished else (NEVER if gw is None or gw <= NEVER else gw // tpm)
            if got or mark != self.told:
                self.told = mark
                self.send(Windows(loop.rank, mark, fired_windows(got, tpm)))
        loop.before_take.insert(0, before)
        loop.on_fired.append(fired)


class Realtime:
    """The input replayed at its event times (``realtime``): each batch is
    pushed no earlier than its latest time (:class:`slash.run.elastic.Pacer`),
    and with ``windows`` the windows fired are listed in the metrics
    (``windows``: ``[[window_end_ms, emit_ms, rows], ...]``, wall clock)."""

    def __init__(self, pacer: Any, windows: bool = True) -> None:
        self.pacer, self.windows = pacer, windows
        self.fired: List[List[int]] = []

    def install(self, loop: RankLoop) -> None:
        loop.before_push.append(
            lambda item: self.pacer.pace(loop.query, item, loop.wait, lambda: False))
        loop.status.append(self.pacer.snapshot)
        if not self.windows:
            return
        tpm = loop.ex.state.ticks_per_ms

        def fired(got: List[pa.RecordBatch]) -> None:
            now = int(time.time() * 1000)
            for b in got:
                if b.num_rows:
                    vc = pc.value_counts(b.column("window_end"))
                    for end, rows in zip(vc.field("values").to_pylist(),
                                         vc.field("counts").to_pylist()):
                        self.fired.append([end // tpm, now, rows])

        def status() -> Dict[str, Any]:
            got, self.fired = self.fired, []
            return {"windows": got}
        loop.on_fired.append(fired)
        loop.status.append(status)


class ProgressReport:
    """The records read, every PROGRESS_S (what a recovery replays)."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        self.send, self.last = send, time.monotonic()

    def install(self, loop: RankLoop) -> None:
        def progress() -> None:
            if time.monotonic() - self.last >= PROGRESS_S:
                self.last = time.monotonic()
                self.send(Progress(loop.rank, loop.records))
        loop.after_item.append(progress)


