"""What every checkpointing worker of :mod:`slash.run.recovery.checkpointed` does around a
cut, shared by the aggregate rank loop (:class:`slash.run.checkpointing.Checkpointing`),
the join worker (:mod:`slash.run.recovery.join`) and, for the asks, a Spark
stream's tasks (:mod:`slash.spark._stream_ckpt`):

* :class:`AskSchedule` - when rank 0 asks its executor for the next
  checkpoint (``request_checkpoint``): every ``seconds`` of wall time,
  ``epochs`` epochs or ``batches`` push calls (:class:`slash.run.plan.CheckpointEvery`),
  or at once when the parent forces one (a rescale).
* :func:`write_image` - how the image the executor hands over at a cut
  becomes the rank's files in ``DIR/chk-<c>/`` and its result segment, and
  the ``("ckpt", ...)`` report to the parent once they are durable.
* :class:`LateRows` - a run with ``late_output=``: the input rows found late,
  each given to the first cut after the push that found it.

Invariants: ids are asked in increasing order from the plan's ``next_id``;
at most one ask is outstanding unless it went uncut for twice the period
(a peer that finished its input takes part in no further cut, so the ask is
given up and a new id asked; ``give_up=False``, a stream's, never asks while
one is outstanding); the report is sent only after every file of
the image is written.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash._ipc import to_ipc
from slash.checkpoint import CheckpointStore
from slash.errors import InvalidState
from slash.run.protocol import CheckpointWritten

log = logging.getLogger(__name__)


class AskSchedule:
    """Rank 0's checkpoint asks. Call :meth:`step` after each push call,
    :meth:`cut` when an image is taken, :meth:`force` when the parent wants
    a checkpoint now.

    >>> from slash.run.plan import CheckpointEvery
    >>> class Ex:
    ...     metrics = {"epochs": 0}
    ...     asked = []
    ...     def request_checkpoint(self, c): self.asked.append(c)
    >>> ex = Ex()
    >>> s = AskSchedule(ex, CheckpointEvery(batches=2), next_id=5, pushes=0)
    >>> for pushes in range(1, 6): s.step(pushes)
    >>> ex.asked  # asked at 2 pushes; at 4, checkpoint 5 is not cut yet
    [5]
    >>> s.cut(5); s.step(6); ex.asked
    [5, 6]
    """

    def __init__(self, ex: Any, every: Any, next_id: int, pushes: int,
                 give_up: bool = True) -> None:
        self.ex, self.every = ex, every
        #: whether an ask uncut for twice the period is given up for a new id (a
        #: stream's ranks never finish midway, so it keeps one ask until it is cut)
        self.give_up = give_up
        self.next_id = next_id  #: the id the next ask takes
        self.asked: Optional[int] = None  #: the id asked for and not cut yet
        self.forced = False
        self.last_t, self.last_epochs, self.last_pushes = time.monotonic(), 0, pushes

    def force(self) -> None:
        """Ask at the next step (an outstanding ask serves instead)."""
        self.forced = True

    def cut(self, ckpt_id: int) -> None:
        """The executor took checkpoint ``ckpt_id``."""
        if self.asked == ckpt_id:
            self.asked = None

    def step(self, pushes: int) -> None:
        """Asks for the next checkpoint if one is due after ``pushes`` push calls."""
        every, now = self.every, time.monotonic()
        due = self.forced or (
            (every.seconds is not None and now - self.last_t >= every.seconds) or
            (every.batches is not None and pushes - self.last_pushes >= every.batches))
        if not due and every.epochs is not None:
            due = self.ex.metrics["epochs"] - self.last_epochs >= every.epochs
        if self.asked is not None:  # not cut yet; given up if a peer was finishing
            due = due and self.give_up and ((every.seconds is not None and now - self.last_t >= 2 * every.seconds) or
                           (every.batches is not None and
                            pushes - self.last_pushes >= 2 * every.batches))
        if due and self.asked is not None and self.forced:
            due = False  # the cut already asked for serves the forced one
            self.forced = False
        if due:
            self.forced = False
            try:
                self.ex.request_checkpoint(self.next_id)
            except InvalidState:
                if self.asked is None:
                    raise
                # the group still runs the earlier ask (a slow cut, e.g. across a live
                # scale's pause; not a finishing peer): it serves, wait for it again
                self.last_t, self.last_pushes = now, pushes
                return
            self.asked = self.next_id
            self.next_id += 1
            self.last_t, self.last_pushes = now, pushes
            if every.epochs is not None:
                self.last_epochs = self.ex.metrics["epochs"]


class LateRows:
    """A checkpointing rank's late input rows (``late_output=``), each kept
    with the push count of the push that found it late until a cut at that
    count or later takes it (:meth:`at_cut`): its late segment. A restart
    replays the pushes after the cut, which find their late rows again, so
    every late row is in exactly one committed late segment of a cut before
    the last attempt or in that attempt's :meth:`found` (as the windows a
    rank fired are).

    >>> rows = LateRows()
    >>> rows.add(3, pa.table({"t": [1]})); rows.add(5, pa.table({"t": [2, 4]}))
    >>> rows.at_cut(4).num_rows, rows.found().num_rows
    (1, 3)
    """

    def __init__(self) -> None:
        self._by_push: List[Tuple[int, pa.Table]] = []  # not given to a cut yet
        self._cut: List[pa.Table] = []  # given to this attempt's cuts

    def add(self, pushes: int, late: Any) -> None:
        """The late rows of the push that brought the count to ``pushes``."""
        if late.num_rows:
            self._by_push.append((pushes, pa.table(late) if isinstance(late, pa.RecordBatch)
                                  else late))

    def at_cut(self, pushes: int) -> Optional[pa.Table]:
        """The late rows of pushes up to ``pushes`` not given to an earlier
        cut (None if there are none)."""
        before = [t for p, t in self._by_push if p <= pushes]
        self._by_push = [(p, t) for p, t in self._by_push if p > pushes]
        self._cut.extend(before)
        return pa.concat_tables(before) if before else None

    def found(self) -> Optional[pa.Table]:
        """Every late row this attempt found, given to a cut or not (None if none)."""
        every = self._cut + [t for _, t in self._by_push]
        return pa.concat_tables(every) if every else None


def write_state(store: CheckpointStore, rank: int, img: Any, part_file: Callable[[int], str],
                midway: Optional[Callable[[int], None]] = None) -> Dict[str, Dict[str, int]]:
    """Rank ``rank``'s state in image ``img`` written durably into ``store``:
    ``rank-<r>.meta`` and each partition's blob as ``part_file(p)`` (``midway(id)``:
    called once half of the partitions are written). Returns name -> manifest entry."""
    files = {f"rank-{rank}.meta": store.write(img.id, f"rank-{rank}.meta", img.meta)}
    for i, (p, data) in enumerate(img.parts.items()):
        if i == len(img.parts) // 2 and midway is not None:
            midway(img.id)
        name = part_file(p)
        files[name] = store.write(img.id, name, data)
    return files


def write_image(store: CheckpointStore, link: Any, rank: int, img: Any,
                fired: List[pa.RecordBatch], result_schema: pa.Schema, info: Dict[str, Any],
                part_file: Callable[[int], str], midway: Optional[Callable[[int], None]] = None,
                stats: Optional[Dict[str, Any]] = None,
                extra: Optional[Dict[str, bytes]] = None,
                late: Optional[pa.Table] = None) -> None:
    """Writes rank ``rank``'s image ``img`` of checkpoint ``img.id`` durably
    into ``store`` - ``rank-<r>.meta``, each partition's blob as
    ``part_file(p)``, the windows ``fired`` before the cut as the rank's
    result segment, the input rows found ``late`` before it as its late
    segment (if any), the files ``extra`` names (a join worker's rows held
    back by its time merge), then ``rank-<r>.json`` (``info``) - and then reports
    ``("ckpt", rank, id, files, {segment: entry}, stats)`` over ``link``
    (``stats``: bytes, seconds and whatever ``stats`` adds). ``midway(id)``
    is called once half of the partitions are written (the test hook's kill
    inside a write). Raises what the store raises; nothing is reported then."""
    t0 = time.monotonic()
    files = write_state(store, rank, img, part_file, midway)
    seg, entry = store.write_segment(rank, img.id,
                                     to_ipc(pa.Table.from_batches(fired, result_schema)))
    segs = {seg: entry}
    if late is not None and late.num_rows:
        rel, got = store.write_segment(rank, img.id, to_ipc(late), late=True)
        segs[rel] = got
    for name, data in (extra or {}).items():
        files[name] = store.write(img.id, name, data)
    files[f"rank-{rank}.json"] = store.write(img.id, f"rank-{rank}.json",
                                             json.dumps(info, sort_keys=True).encode())
    size = sum(f["size"] for f in files.values()) + sum(e["size"] for e in segs.values())
    link.put(CheckpointWritten(rank, img.id, files, segs,
                               {"bytes": size, "seconds": time.monotonic() - t0, **(stats or {})}))
