"""Exactly-once output to a transactional sink, tied to checkpoints: the
driver's side of the two-phase scheme (:class:`slash.kafka.KafkaSink`).

The pre-commit is the checkpoint itself: the windows a cut covers are
durable in its result segments (``results/rank-<r>.chk-<c>.arrow``) before
its manifest commits. Then (:meth:`Delivery.committed`) the driver hands
them to ``sink.deliver(c, windows)``, one transaction per checkpoint, in id
order. A run started from a checkpoint directory first calls
``sink.recover({c: windows})`` over every committed checkpoint
(:meth:`Delivery.recover`): it fences what a dead driver left open and
delivers the checkpoints the topic lacks. The windows fired after the last
cut are delivered when the run finishes (:meth:`Delivery.finished`), as one
more id (the last checkpoint's + 1), and a run that finds its directory
finished recovers them the same way. Windows an attempt fired after its
last committed cut and before it failed are in no segment: the restarted
attempt fires them again, and they are delivered once, with a later cut.
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any, Callable, Dict, List, Optional

import pyarrow as pa

from slash._ipc import from_ipc
from slash.checkpoint import Checkpoint
from slash.errors import InvalidArgument, SinkFailed

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r".*\.chk-(\d+)\.arrow")


def segments_by_cut(ck: Checkpoint) -> Dict[int, List[str]]:
    """The result segments a committed checkpoint's manifest lists (its own
    and every earlier cut's), by the id of the cut that wrote them."""
    out: Dict[int, List[str]] = {}
    for rel in sorted(ck.segments()):
        m = _SEGMENT.fullmatch(rel)
        if m is not None:
            out.setdefault(int(m.group(1)), []).append(rel)
    return out


def rows_minus(table: pa.Table, done: pa.Table) -> pa.Table:
    """The rows of ``table`` that are not in ``done`` (a multiset difference
    over whole rows; ``done``'s rows are a sub-multiset of ``table``'s).

    >>> t = pa.table({"k": ["a", "b", "a"], "c": [1, 2, 1]})
    >>> rows_minus(t, pa.table({"k": ["a"], "c": [1]})).to_pylist()
    [{'k': 'b', 'c': 2}, {'k': 'a', 'c': 1}]
    """
    seen = Counter(zip(*(c.to_pylist() for c in done.columns)))
    keep = []
    for row in zip(*(c.to_pylist() for c in table.columns)):
        if seen[row] > 0:
            seen[row] -= 1
            keep.append(False)
        else:
            keep.append(True)
    return table.filter(pa.array(keep, pa.bool_())) if table.num_rows else table


class Delivery:
    """A transactional sink fed by a checkpointed run (see the module doc).
    ``finalize``: executor results to the output shape (the run's)."""

    def __init__(self, sink: Any, finalize: Callable[[pa.Table], pa.Table]) -> None:
        if not callable(getattr(sink, "deliver", None)) or \
                getattr(sink, "transactional_id", None) is None:
            raise InvalidArgument(
                "sink= with checkpoint= delivers each checkpoint's windows in one transaction "
                "when its manifest commits (exactly once): give a KafkaSink with a "
                "transactional_id (without checkpoint=, a sink without one is written at "
                "least once)")
        self.sink, self.finalize = sink, finalize
        #: the highest cut whose windows the sink has (delivered, or recovered at the start);
        #: a checkpoint delivers every segment of a later cut its manifest lists, so a live
        #: group's dropped cut (its segments carried into the next commit) goes with that one
        self.upto = 0

    def _windows(self, ck: Checkpoint, rels: List[str]) -> pa.Table:
        tables = [from_ipc(ck.read_segment(rel)) for rel in rels]
        tables = [t for t in tables if t.num_rows] or tables[:1]
        return self.finalize(pa.concat_tables(tables))

    def recover(self, ck: Optional[Checkpoint],
                also: Optional[Dict[int, pa.Table]] = None) -> List[int]:
        """At a run's start: the sink fenced, and the committed checkpoints
        of ``ck``'s manifest (None: none) it lacks delivered; ``also``: more
        windows by id (a finished stream's last ones)."""
        cuts = {c: self._windows(ck, rels) for c, rels in segments_by_cut(ck).items()} \
            if ck is not None else {}
        cuts.update(also or {})
        got = self.sink.recover(cuts)
        self.upto = ck.id if ck is not None else 0
        if got:
            log.info("sink: delivered checkpoint(s) %s that a run before this one had committed",
                     got)
        return got

    def committed(self, ck: Checkpoint) -> None:
        """Checkpoint ``ck`` committed: its windows (those of every cut after
        the last delivered that its manifest lists), in one transaction."""
        rels = [rel for c, rels in segments_by_cut(ck).items() if c > self.upto for rel in rels]
        try:
            n = self.sink.deliver(ck.id, self._windows(ck, rels)) if rels else 0
        except Exception as e:  # not the executors' failure: the group must not restart for it
            raise SinkFailed(f"sink: checkpoint {ck.id} committed but its windows were not "
                             f"delivered ({e}); a run started again from the same checkpoint "
                             "directory delivers them") from e
        self.upto = ck.id
        log.debug("sink: checkpoint %d delivered (%d windows)", ck.id, n)

    def finished(self, result: pa.Table, ck: Optional[Checkpoint]) -> List[int]:
        """The run finished with ``result``: what no committed checkpoint
        (of ``ck``, the newest) covers, delivered as id ``ck.id + 1``."""
        cuts = segments_by_cut(ck) if ck is not None else {}
        every = [rel for rels in cuts.values() for rel in rels]
        done = {c: self._windows(ck, rels) for c, rels in cuts.items()}
        rest = rows_minus(result, self._windows(ck, every).cast(result.schema)) if every \
            else result
        done[(ck.id if ck is not None else 0) + 1] = rest
        return self.sink.recover(done)
