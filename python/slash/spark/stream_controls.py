"""The live controls of a running Spark stream, as methods of its handle
(:class:`slash.spark.stream_handle.StreamHandle` mixes them in):
``update`` (the query's logic from the next window boundary on),
``rebalance`` (leadership moves within the barrier group) and ``status``.

Invariants: an update or a rebalance in flight when the barrier job
restarts fails with InvalidState and changes nothing (:meth:`_next_group`);
while a rebalance moves partitions, a callable sink gets no window ending
after what every rank had passed when it began, until every executor
follows the new leader map with no partition held (``_freeze``), so a moved
partition's window is never handed over before its hand-over merged.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from slash.control import RunControl
from slash.control.moves import parse_moves
from slash.errors import InvalidArgument, InvalidState, Timeout
from slash.metrics import LiveMetrics
from slash.run.protocol import Metrics
from slash.spark._stream_ckpt import DriverCheckpoints
from slash.spark._tasks import Rendezvous

#: the stream's warnings keep the logger users configure
log = logging.getLogger("slash.spark.stream")


class StreamControls:
    """update, rebalance and status of a running stream (see the module doc).
    The state they share with the rest of the handle is its, declared here."""

    executors: int
    live: LiveMetrics
    _cond: threading.Condition
    _ctl: Optional[RunControl]
    _rdv: Optional[Rendezvous]
    _ck: Optional[DriverCheckpoints]
    _gw: List[int]
    _follow: Dict[int, Tuple[int, int]]  # rank -> (map version, held partitions)
    _freeze: Optional[int]
    _freeze_version: int
    _groups: int
    _partitions: int
    _rescale_to: Optional[int]
    _rescales: List[Dict[str, Any]]
    _stop_sent: bool
    _done: Set[int]
    running: bool  # the handle's: its stage thread is alive
    _take: Callable[..., None]  # StreamOutput's: hands complete windows to the sink's queue
    def update(self, filter: Union[None, str, Sequence[str]] = None, *,
               drop_filter: Union[None, str, Sequence[str]] = None, clear_filters: bool = False,
               aggregate: Union[None, str, Sequence[str]] = None,
               lateness: Union[None, int, str] = None, timeout: float = 60.0) -> Dict[str, Any]:
        """Changes the running query's logic from the next window boundary on
        (the rule for T, and what cannot change: docs/control.md).

        ``filter``: each replaces the filters on its column or adds one;
        ``drop_filter``: columns whose filters are removed; ``clear_filters``:
        remove all first. Every task pauses its pushes (serving its channels)
        for one round trip through the driver while T is agreed. Returns
        ``version``, ``effective_from_ms`` (T), ``max_event_time_seen_ms``,
        ``agreed_ms`` and the new ``filters``. A filter on a missing column
        raises :class:`SchemaError` naming it; ``aggregate`` and ``lateness``
        raise :class:`NotSupported` saying why. With ``checkpoint=`` every
        checkpoint records the versions agreed so far: a restart (a failed
        task, a rescale, the stream started again on the directory)
        re-applies them, so the replay after the cut follows the same logic
        as the run without the failure."""
        if self._ctl is None or not self.running:
            raise InvalidState("StreamHandle.update: the stream is not running")
        args = {k: v for k, v in {"filter": filter, "drop_filter": drop_filter,
                                  "clear_filters": clear_filters, "aggregate": aggregate,
                                  "lateness": lateness}.items() if v not in (None, False, [], ())}
        r = self._ctl.submit(args)
        deadline = time.monotonic() + timeout
        while not r.done.is_set():
            rdv = self._rdv
            with self._cond:  # every task of the group reported: past where to resume
                resumed = len(self._follow) == self.executors
            if rdv is not None and rdv.started_ms is not None and resumed and \
                    rdv.connected == self.executors:  # every task can be reached
                self._ctl.service()
            if not self.running:
                self._ctl.close()
            elif time.monotonic() > deadline:
                raise Timeout(f"StreamHandle.update: not agreed within {timeout} s")
            r.done.wait(0.005)
        return self._ctl.outcome(r)

    def _logic(self) -> Tuple[List[Tuple[int, Any]], List[Dict[str, Any]]]:
        """The logic versions agreed so far (1, 2, ...): [(start, query)] for
        the tasks of a restarted group, [{"from_ticks", "args"}] for a
        checkpoint's manifest (see :mod:`slash.spark._stream_ckpt`), as
        :class:`slash.control.logic.LogicUpdates` keeps them."""
        updates = self._ctl.updates if self._ctl is not None else None
        if updates is None:
            return [], []
        versions, record = updates.versions_and_record()
        return list(versions), record

    def _restore_logic(self, record: Sequence[Dict[str, Any]]) -> None:
        """A stream started again on a checkpoint directory: the versions
        its newest manifest records, agreed again on the driver (the tasks
        get them with where to resume)."""
        assert self._ctl is not None and self._ctl.updates is not None
        self._ctl.updates.restore(list(record))

    def rebalance(self, moves: Union[None, str, Dict[int, int]] = None, *,
                  from_rank: Optional[int] = None, to_rank: Optional[int] = None,
                  timeout: float = 60.0) -> Dict[str, Any]:
        """Moves leadership of key partitions in the running barrier group,
        live (no checkpoint, no restart: unlike :meth:`rescale`, the group
        keeps its executors and only the moved partitions pause for their
        hand-over; see docs/elastic.md).

        ``moves`` ({partition: rank} or ``"P:R,P:R"``) explicitly; else half
        the partitions ``from_rank`` leads go to ``to_rank``, each chosen
        from the executors' latest metrics when not given (the leader with
        the most merge time, then delta bytes received, to the least loaded
        one), as ``slash ctl rebalance`` does (:func:`slash.control.moves.rebalance_spec`).
        Rank 0's task applies the moves (``Executor.move_partitions``); this
        returns once every executor reported the new leader map version:
        ``{"moves": {"p": rank}, "map_version": v}``. With ``checkpoint=``
        the next checkpoint keeps the moved map (a restart with the same
        executor count resumes with it; a rescale starts from partition mod
        N, each partition's state merged into its new leader).

        Raises :class:`InvalidArgument` naming a partition outside
        0..partitions-1 or a rank outside 0..executors-1,
        :class:`InvalidState` when the stream is not running (or is
        rescaling, or rank 0 has read all of its input), and
        :class:`Timeout` after ``timeout`` s."""
        ctl = self._ctl
        if ctl is None or not self.running or self._stop_sent:
            raise InvalidState("StreamHandle.rebalance: the stream is not running")
        if self._rescale_to is not None or (self._rescales and
                                            "seconds_to_resume" not in self._rescales[-1]):
            raise InvalidState("StreamHandle.rebalance: the stream is rescaling; retry once "
                               "rescale() returned")
        groups = self._groups
        if moves not in (None, "", {}):
            moves = self._checked_moves(moves)  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout
        with self._cond:
            # a moved partition fires nothing from its old leader's switch to its new leader's
            # merge of the hand-over, while the group watermark goes on: a callable sink gets no
            # window ending after what every rank had passed now until the move is over
            if self._ck is None:
                f = min(self._gw)
                self._freeze = f if self._freeze is None else min(self._freeze, f)
                self._freeze_version = 1 << 62  # the version is not known yet
        try:
            got = ctl.rebalance({"moves": moves, "from_rank": from_rank, "to_rank": to_rank},
                                timeout=timeout)
        except BaseException:
            with self._cond:  # nothing moves (or the run ended): release once nothing is held
                self._freeze_version = max((v for v, _ in self._follow.values()), default=0)
                if self._freeze is not None and self._moved_everywhere(self._freeze_version):
                    self._freeze = None
                    self._take()
            raise
        version = int(got["map_version"])
        with self._cond:
            self._freeze_version = version
        self._await_followed(version, groups, deadline, timeout)
        self.live.event(f"rebalance: leader map version {version}, moves {got['moves']}")
        log.info("slash.spark.stream: every executor follows leader map version %d (moves %s)",
                 version, got["moves"])
        return got

    def _checked_moves(self, moves: Union[str, Dict[int, int]]) -> Dict[int, int]:
        """``moves`` parsed, every partition one the stream has."""
        parsed = parse_moves(moves)
        bad = sorted(p for p in parsed if p >= self._partitions)
        if bad:
            raise InvalidArgument(f"rebalance: partition {bad[0]} is not in "
                                  f"0..{self._partitions - 1} (the stream has "
                                  f"{self._partitions} key partitions)")
        return parsed

    def _await_followed(self, version: int, groups: int, deadline: float, timeout: float) -> None:
        """Returns once every executor follows leader map ``version`` with no
        hand-over left; raises if the barrier job restarted, the stream ended
        or ``deadline`` passed."""
        # every executor switches at its own next epoch end and reports its map in its metrics;
        # done when every one follows the version and no hand-over is left
        while True:
            with self._cond:
                if self._groups != groups:
                    raise InvalidState("StreamHandle.rebalance: the barrier job restarted from a "
                                       "checkpoint before every executor followed the moves; "
                                       "the new group leads by the checkpoint's map (see "
                                       "status()['led_partitions'])")
                if self._moved_everywhere(version):
                    break
                late = {r: self._follow.get(r) for r in range(self.executors)}
            if not self.running:
                raise InvalidState(f"StreamHandle.rebalance: the stream ended before every "
                                   f"executor followed leader map version {version} "
                                   f"((version, held partitions) per rank: {late})")
            if time.monotonic() > deadline:
                raise Timeout(f"StreamHandle.rebalance: not every executor followed leader map "
                              f"version {version} within {timeout} s ((version, held "
                              f"partitions) per rank: {late})")
            time.sleep(0.02)

    def _next_group(self) -> None:
        """The stage thread, before the next barrier job (a restart or a
        rescale): rebalance and status() address the new group, whose ranks
        have reported nothing (no error, no link lost) and read all of
        nothing yet."""
        with self._cond:
            self._follow.clear()
            self._done.clear()
            self._groups += 1
        if self._rdv is not None:
            self._rdv.errors.clear()
            self._rdv.lost.clear()
        if self._ctl is not None:
            self._ctl.new_group("StreamHandle.update: the barrier job restarted from a checkpoint "
                                "while the update was being agreed; nothing changed, send it again")

    def _followed(self, msg: Metrics, _: Any) -> None:
        """A rank's map version and held partitions: a rebalance's freeze
        ends once every rank followed the moves."""
        snap = msg.snapshot
        with self._cond:
            self._follow[msg.rank] = (int(snap.get("map_version") or 0),
                                      int(snap.get("held_partitions") or 0))
            if self._freeze is not None and self._moved_everywhere(self._freeze_version):
                self._freeze = None  # every hand-over merged and its windows sent: go on
                self._take()

    def _moved_everywhere(self, version: int) -> bool:
        """With the lock held: every rank's latest report follows map ``version``
        (or a later one) and holds no partition for a hand-over."""
        return all(self._follow.get(r, (-1, 1))[0] >= version and not self._follow[r][1]
                   for r in range(self.executors))

    def status(self) -> Dict[str, Any]:
        """What ``slash ctl status`` shows of a run, for this stream: executors,
        epoch, watermark, records, the leader map version and the partitions
        each rank leads (``led_partitions``, from the latest metrics), the
        query's logic versions and each executor's latest metrics."""
        if self._ctl is None:
            raise InvalidState("StreamHandle.status: the stream has not started")
        return self._ctl.status()
