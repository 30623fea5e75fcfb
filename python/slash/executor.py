"""Executors: the distributed part of Slash (paper §5.1, §7.2.2).

A group of N executors, one per process (or Spark task), each holding a rank.
Every executor updates a local partial state with whatever records it is
given (no repartitioning); at epoch ends it ships the changed part of each key
partition to that partition's leader (rank ``p mod N``), which merges lazily
and fires a window once every executor's published watermark has passed its
end. Each (window, key) result is emitted exactly once in the group, by the
leader of the key's partition.

Forming a group takes two steps, so whoever launches the executors (Spark's
``allGather``, a test, a script) can exchange the addresses in between:

>>> import slash
>>> lst = slash.Executor.listen("shm", token="secret")   # in every executor
>>> # gather every executor's lst.address into `addresses` (rank order), then:
>>> # ex = slash.Executor(lst, rank, addresses, slash.StateConfig(window="tumbling:10s"),
>>> #                     token="secret")
>>> lst.close()
"""
from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from slash import _core
from slash.errors import CheckpointCorrupt, InvalidArgument, SchemaError
from slash.group import GroupConfig
from slash.join import JoinConfig, join_core_args, join_result_batch, prepare_side
from slash.open_files import executor_fds, reserve
from slash.state import COUNT_KINDS, FLOAT_KINDS, StateConfig, core_args, prepare_columns, result_batch
from slash.window import Session

log = logging.getLogger(__name__)

#: the lateness that marks a bounded input (the core's SLASH_LATENESS_BOUNDED)
LATENESS_BOUNDED = (1 << 63) - 1

#: GroupConfig is defined in slash.group; it is imported from here too
__all__ = ["CheckpointImage", "Executor", "GroupConfig", "LATENESS_BOUNDED", "checkpoint_fired",
           "leaders_from_images", "split_at_cut"]


@dataclass(frozen=True)
class CheckpointImage:
    """One executor's part of a completed checkpoint (see
    :meth:`Executor.take_checkpoint`): the checkpoint ``id``, ``pushes`` (push
    calls this executor completed before the cut), its ``rank``, its META blob
    (watermarks, vector clock, counters) and ``parts``: partition -> blob of
    every key partition it led. Restore a group from the union of every
    rank's image with :meth:`Executor.restore`."""

    id: int
    pushes: int
    rank: int
    meta: bytes
    parts: Dict[int, bytes]


def checkpoint_fired(meta: bytes) -> int:
    """The watermark a checkpoint's cut fired windows at, read from any rank's
    META blob: a window ending at or before it (a session ending strictly
    before it) was fired BEFORE the cut, every other window after it. A
    recovery driver keeps the former and drops the latter from what the old
    group emitted (the restored group fires them again). Raises
    CheckpointCorrupt for something that is no META blob."""
    if len(meta) < 64 + 48 + 4 or meta[:4] != b"SLCK" or struct.unpack_from("<H", meta, 6)[0] != 2:
        raise CheckpointCorrupt("checkpoint meta blob: not a META blob (bad magic, kind or length)")
    return struct.unpack_from("<q", meta, 64 + 40)[0]


def split_at_cut(batches: Sequence[pa.RecordBatch], meta: bytes,
                 session: bool) -> Tuple[List[pa.RecordBatch], List[pa.RecordBatch]]:
    """``batches`` (fired results, oldest first) split at the cut of the
    checkpoint whose META blob is ``meta``: (the rows of windows fired before
    the cut, the rows of windows fired after it), by the cut's watermark
    (:func:`checkpoint_fired`: a window ending at or before it, a session
    ending strictly before it, was fired before the cut).

    A driver needs the split because a cut is not where results are taken:
    between the executor call that cut and the driver's
    :meth:`Executor.results`, the service thread goes on serving peers'
    epochs and fires every window their later watermarks close (up to this
    rank's own published watermark). Those windows are not in the image's
    fired state; a group restored from it fires them again, so they must go
    with the next cut, never with this one."""
    fired = checkpoint_fired(meta)
    before: List[pa.RecordBatch] = []
    after: List[pa.RecordBatch] = []
    for b in batches:
        if b.num_rows == 0:
            continue
        end = b.column(b.schema.get_field_index("window_end")).to_numpy()
        pre = end < fired if session else end <= fired
        if pre.all():
            before.append(b)
        elif not pre.any():
            after.append(b)
        else:
            before.append(b.filter(pa.array(pre)))
            after.append(b.filter(pa.array(~pre)))
    return before, after


class Executor:
    """One executor of a group; see the module docstring for forming a group.

    ``push()`` folds a batch into the local state (in C, without the GIL) and
    serves the sync channels; ``poll()`` serves them while idle; ``finish()``
    ends the input and waits for the whole group. Fired windows come back from
    ``push``/``poll``/``finish`` via :meth:`results` as Arrow record batches
    with columns window_start, window_end, key, then the aggregates.
    """

    def __init__(self, listener: "_core.Listener", rank: int, addresses: Sequence[str],
                 state: StateConfig, group: GroupConfig = GroupConfig(), *, token: str,
                 bounded: bool = False) -> None:
        if not isinstance(state, (StateConfig, JoinConfig)):
            raise InvalidArgument(f"state must be a StateConfig (aggregates) or a JoinConfig (a "
                                  f"windowed join), got {type(state).__name__}")
        if not isinstance(group, GroupConfig):
            raise InvalidArgument(f"group must be a GroupConfig, got {type(group).__name__}")
        n = len(addresses)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < max(n, 1):
            raise InvalidArgument(f"rank must be in 0..{n - 1}, got {rank!r}")
        # the mesh's descriptors are opened here, in the executor's process (a
        # Spark task, a forkserver child: not always started with the launcher's limit)
        reserve(executor_fds(n, group.transport),
                f"executor rank {rank} of a group of {n} over {group.transport}", group.transport, n)
        self.state = state
        self.group = group
        self.rank = rank
        self.size = n
        self.is_join = isinstance(state, JoinConfig)
        parts = group.partitions_for(n)
        args = join_core_args(state, parts) if self.is_join else core_args(state, parts)
        self.bounded = bounded
        self._null_times = 0
        # a bounded input (files, a table) has no lateness: its watermark moves
        # only by advance_watermark, from what the source has left to read
        lateness = LATENESS_BOUNDED if bounded else min(
            (group.lateness_ms + (state.lead_ms if self.is_join else 0)) * state.ticks_per_ms,
            LATENESS_BOUNDED - 1)
        log.debug("executor %d/%d joining over %s", rank, n, group.transport)
        self._core = _core.ExecutorCore(listener, rank, [str(a) for a in addresses], token, args,
                                        lateness, group.epoch_bytes, group.epoch_ms,
                                        group.buffer_size, group.credits, group.timeout,
                                        group.mode, "join" if self.is_join else "aggregate",
                                        group.own_rows)

    @staticmethod
    def listen(transport: str = "shm", *, token: str, bind: Optional[str] = None) -> "_core.Listener":
        """Step one: a listener whose ``address`` the other executors need."""
        return _core.Listener(transport, token=token, bind=bind)

    # -- input ---------------------------------------------------------------
    def push(self, keys: Any, times: Any, values: Optional[Mapping[str, Any]] = None, *,
             return_late: bool = False, skip: Optional[np.ndarray] = None) -> Union[int, Tuple[int, np.ndarray]]:
        """Folds one batch (NumPy or Arrow columns of one length).

        ``skip``: an optional selection (bool or uint8 per row, nonzero = the
        row is not part of the batch), e.g. a filter's, applied in the core
        without copying the selected rows out.

        Returns the number of late records; with ``return_late`` also the
        indices of the late rows, for a side output.
        """
        if self.is_join:
            raise InvalidArgument("this executor runs a join: use push_left/push_right")
        t, k, per_agg, offsets, data, null_times = prepare_columns(self.state, keys, times, values)
        if skip is not None:
            skip = np.ascontiguousarray(skip).view(np.uint8) if np.asarray(skip).dtype == np.bool_ \
                else np.ascontiguousarray(skip, dtype=np.uint8)
            if skip.ndim != 1 or len(skip) != len(t):
                raise SchemaError(f"skip has {skip.size} values, 'times' has {len(t)}")
        if null_times is not None:  # in no window: skipped and counted
            self._null_times += int(np.count_nonzero(null_times & (skip == 0))
                                    if skip is not None else np.count_nonzero(null_times))
            skip = null_times.view(np.uint8) if skip is None else (skip | null_times.view(np.uint8))
            skip = np.ascontiguousarray(skip)
        n_late, mask = self._core.push(t, k, per_agg, offsets, data, return_late, skip)
        return self._late(n_late, mask, return_late)

    def push_left(self, keys: Any, times: Any, columns: Optional[Mapping[str, Any]] = None, *,
                  return_late: bool = False) -> Union[int, Tuple[int, np.ndarray]]:
        """Join executors: folds a batch of left rows (key, time, the left
        columns); returns the number of late rows (and their indices)."""
        return self._push_side("left", keys, times, columns, return_late)

    def push_right(self, keys: Any, times: Any, columns: Optional[Mapping[str, Any]] = None, *,
                   return_late: bool = False) -> Union[int, Tuple[int, np.ndarray]]:
        """Join executors: folds a batch of right rows; as :meth:`push_left`."""
        return self._push_side("right", keys, times, columns, return_late)

    def _push_side(self, side: str, keys: Any, times: Any, columns: Optional[Mapping[str, Any]],
                   return_late: bool) -> Union[int, Tuple[int, np.ndarray]]:
        if not self.is_join:
            raise InvalidArgument("this executor computes aggregates: use push/push_batch")
        idx, t, k, cols, offsets, data, null_times = prepare_side(self.state, side, keys, times,
                                                                  columns)
        if null_times is not None:
            raise SchemaError(f"column 'times' of the {side} side has {int(null_times.sum())} null "
                              "value(s); drop them first (slash.query.JoinQuery does)")
        n_late, mask = self._core.push_join(idx, t, k, cols, offsets, data, return_late)
        return self._late(n_late, mask, return_late)

    @staticmethod
    def _late(n_late: int, mask: Optional[np.ndarray],
              return_late: bool) -> Union[int, Tuple[int, np.ndarray]]:
        if return_late:
            idx = np.flatnonzero(mask) if mask is not None else np.empty(0, np.int64)
            return n_late, idx
        return n_late

    def push_batch(self, batch: Union[pa.RecordBatch, pa.Table], *, key: str = "key",
                   time: str = "time", return_late: bool = False,
                   skip: Optional[np.ndarray] = None) -> Any:
        """Folds an Arrow batch whose columns are ``key``, ``time`` and the
        aggregates' value columns (only the rows ``skip`` leaves, if given; see
        :meth:`push`). With ``return_late`` returns the late rows as a table
        (the side output), else their number."""
        names = batch.schema.names
        if self.is_join:
            raise InvalidArgument("this executor runs a join: use push_side_batch")
        for c in [key, time] + self.state.value_columns:
            if c not in names:
                raise SchemaError(f"column {c!r} is missing from the batch (has {names})")
        out = self.push(batch.column(key), batch.column(time),
                        {c: batch.column(c) for c in self.state.value_columns},
                        return_late=return_late, skip=skip)
        if return_late:
            _, idx = out
            return batch.take(pa.array(idx, pa.int64()))
        return out

    def push_side_batch(self, side: str, batch: Union[pa.RecordBatch, pa.Table], *,
                        key: str = "key", time: str = "time", return_late: bool = False) -> Any:
        """Join executors: folds an Arrow batch of one side (``"left"`` or
        ``"right"``) with columns ``key``, ``time`` and the side's columns.
        With ``return_late`` returns the late rows (side output), else their number."""
        cols = list(self.state.columns(side)) if side in ("left", "right") else []
        names = batch.schema.names
        for c in [key, time] + cols:
            if c not in names:
                raise SchemaError(f"column {c!r} is missing from the {side} batch (has {names})")
        out = self._push_side(side, batch.column(key), batch.column(time),
                              {c: batch.column(c) for c in cols}, return_late)
        if return_late:
            return batch.take(pa.array(out[1], pa.int64()))
        return out

    def advance_watermark(self, time_ms: int) -> None:
        """Promises no record older than ``time_ms`` (in the state's time
        unit) follows: an idle stream, or what a bounded source has left."""
        self._core.advance(int(time_ms))

    def set_lateness(self, lateness_ms: int) -> None:
        """Changes the allowed out-of-orderness of an unbounded input from now
        on (ms); the published watermark never moves back, so a larger
        lateness holds it until the latest time seen minus the new lateness
        passes it. :class:`InvalidArgument` for a bounded executor."""
        if isinstance(lateness_ms, bool) or not isinstance(lateness_ms, int) or lateness_ms < 0:
            raise InvalidArgument(f"lateness must be an int >= 0 ms, got {lateness_ms!r}")
        self._core.set_lateness(min(lateness_ms * self.state.ticks_per_ms, LATENESS_BOUNDED - 1))

    def set_standby(self, follow: Optional[Sequence[int]]) -> None:
        """Makes this executor a standby of a pre-provisioned group (it reads
        no input): from now on its watermark is the minimum the ranks in
        ``follow`` published, so it never holds the group back; ``None``
        makes it active again (its watermark its own input's, from what it
        published; it never moves back). Ranks in ``follow`` must be active
        ones (a standby following a standby could hold both still).
        :class:`InvalidArgument` for a rank outside the group or this
        executor's own."""
        if follow is None:
            self._core.set_standby(None)
            return
        mask = bytearray(self.size)
        for r in follow:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.size \
                    or r == self.rank:
                raise InvalidArgument(f"standby: follow must name other ranks in "
                                      f"0..{self.size - 1}, got {r!r} (this is rank {self.rank})")
            mask[r] = 1
        self._core.set_standby(bytes(mask))

    def set_epoch(self, epoch_ms: Optional[int] = None, epoch_bytes: Optional[int] = None) -> None:
        """Changes the epoch length from now on (a latency/throughput knob:
        shorter epochs ship deltas and fire windows sooner, longer ones cost
        less per record). ``None`` leaves a limit as it is. The epoch in
        progress ends by the new limits. Never changes what windows hold."""
        if epoch_ms is None and epoch_bytes is None:
            raise InvalidArgument("set_epoch: give epoch_ms or epoch_bytes")
        for name, v, hi in (("epoch_ms", epoch_ms, (1 << 32) - 1), ("epoch_bytes", epoch_bytes, 1 << 62)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi):
                raise InvalidArgument(f"{name} must be an int in 1..{hi}, got {v!r}")
        self._core.set_epoch(epoch_ms or 0, epoch_bytes or 0)

    def end_epoch(self) -> None:
        """Ends an epoch now: ships deltas and publishes the watermark."""
        self._core.end_epoch()

    def poll(self, timeout: Optional[float] = 0.0) -> None:
        """Serves the sync channels for up to ``timeout`` seconds (returns as
        soon as a result is ready or the group watermark moved)."""
        self._core.poll(timeout)

    def finish(self) -> None:
        """End of input: final epoch, then waits until every executor finished
        and fires all remaining windows this executor leads."""
        self._core.finish()

    @property
    def finished(self) -> bool:
        return self._core.finished

    # -- output --------------------------------------------------------------
    def results(self) -> List[pa.RecordBatch]:
        """Fired results not yet returned, oldest first."""
        if self.is_join:
            return [join_result_batch(self.state, *r) for r in self._core.take()]
        return [result_batch(self.state, *r) for r in self._core.take()]

    def results_at_cut(self, img: CheckpointImage, held: Sequence[pa.RecordBatch] = (),
                       take: bool = True) -> Tuple[List[pa.RecordBatch], List[pa.RecordBatch]]:
        """``held`` (results taken earlier and not yet given to a cut) and,
        with ``take``, every result not yet taken, split at the cut of
        ``img`` (this executor's image, just taken): (fired before the cut:
        they go with the image, fired after it: they go with a later cut).
        See :func:`split_at_cut`."""
        session = isinstance(getattr(self.state, "window", None), Session)
        return split_at_cut(list(held) + (self.results() if take else []), img.meta, session)

    def results_table(self) -> pa.Table:
        """Fired results not yet returned, as one table (possibly empty)."""
        return pa.Table.from_batches(self.results(), schema=self.result_schema())

    def result_schema(self) -> pa.Schema:
        """Schema of :meth:`results` batches (window bounds in the state's time unit)."""
        key_t = {"int64": pa.int64(), "string": pa.string(), "binary": pa.binary()}[self.state.key_type]
        fields = [pa.field("window_start", pa.int64()), pa.field("window_end", pa.int64()),
                  pa.field("key", key_t)]
        if self.is_join:
            for side in ("left", "right"):
                for c, t in self.state.columns(side).items():
                    fields.append(pa.field(f"{side}_{c}", pa.float64() if t == "float64" else pa.int64()))
            return pa.schema(fields)
        for a in self.state.aggregates:
            is_f = a.kind in FLOAT_KINDS or (a.kind not in COUNT_KINDS and
                                       self.state.value_type(a.column) == "float64")
            fields.append(pa.field(a.name, pa.float64() if is_f else pa.int64()))
        return pa.schema(fields)

    def request_checkpoint(self, ckpt_id: int) -> None:
        """Asks the group for checkpoint ``ckpt_id`` (ids strictly increase;
        normally on rank 0 only). It is taken at this executor's next safe
        point - the end of a push, poll, advance_watermark or end_epoch call -
        and every other executor joins at its own next safe point, so keep
        calling :meth:`poll` while the source is idle. A checkpoint asked for
        while any executor is finishing is given up: no image appears."""
        if isinstance(ckpt_id, bool) or not isinstance(ckpt_id, int) or not 0 < ckpt_id < 1 << 64:
            raise InvalidArgument(f"ckpt_id must be a positive integer, got {ckpt_id!r}")
        self._core.request_checkpoint(ckpt_id)

    def take_checkpoint(self) -> Optional[CheckpointImage]:
        """The oldest checkpoint this executor completed and nobody took yet, or None."""
        got = self._core.take_checkpoint()
        if got is None:
            return None
        ckpt_id, pushes, rank, meta, parts = got
        log.debug("executor %d: checkpoint %d after %d pushes, %d partitions, %d bytes", rank,
                  ckpt_id, pushes, len(parts), len(meta) + sum(len(b) for b in parts.values()))
        return CheckpointImage(ckpt_id, pushes, rank, meta, parts)

    def restore(self, metas: Sequence[bytes], parts: Mapping[int, Union[bytes, Sequence[bytes]]],
                leaders: Optional[Sequence[int]] = None) -> None:
        """Restores this executor from a checkpoint, right after it was created
        and before any push: ``metas`` is the META blob of EVERY rank of the
        checkpoint, ``parts`` maps partitions to a blob or a list of blobs
        (those this executor now leads are used, the others ignored; several
        blobs of one partition - a cut taken during a hand-over has it in the
        old and the new leader's image - are merged). ``leaders`` (the same on every
        executor; see :func:`leaders_from_images`): the leader map to resume
        with, one rank per partition; None: partition mod group size. The
        group may have another size than the checkpoint's, not another
        partition count. Raises :class:`slash.errors.CheckpointCorrupt` with
        the core's detail for a truncated, corrupt or foreign blob."""
        if not metas:
            raise InvalidArgument("restore needs the META blob of every rank of the checkpoint")
        parts_n = self._core.metrics()["partitions"]
        if leaders is not None:
            leaders = self.set_leaders(leaders)
        lead = leaders if leaders is not None else [p % self.size for p in range(parts_n)]
        for i, meta in enumerate(metas):
            try:
                self._core.restore_meta(bytes(meta))
            except InvalidArgument as e:
                raise CheckpointCorrupt(f"META blob {i}: {e}") from None
        for p, blobs in parts.items():
            if not 0 <= p < parts_n or lead[p] != self.rank:
                continue
            for blob in ([blobs] if isinstance(blobs, (bytes, bytearray, memoryview)) else blobs):
                try:
                    self._core.restore_partition(int(p), bytes(blob))
                except InvalidArgument as e:
                    raise CheckpointCorrupt(f"partition {p}: {e}") from None
        log.debug("executor %d: restored from %d META blobs and %d partitions", self.rank,
                  len(metas), sum(1 for p in parts if 0 <= p < parts_n and lead[p] == self.rank))

    # -- leadership ----------------------------------------------------------
    def set_leaders(self, leaders: Sequence[int]) -> List[int]:
        """Before any push: the leader map to start with, one rank per
        partition, the same on every executor (a restore's, or a live group's
        partitions dealt over its active ranks); returns it as ints. Raises
        InvalidArgument for a map of another length or a rank outside the
        group."""
        parts_n = self._core.metrics()["partitions"]
        got = [int(r) for r in leaders]
        if len(got) != parts_n or not all(0 <= r < self.size for r in got):
            raise InvalidArgument(f"leaders must give a rank in 0..{self.size - 1} for each of "
                                  f"the {parts_n} partitions")
        self._core.restore_map(got)
        return got

    def move_partitions(self, moves: Mapping[int, int]) -> None:
        """Moves leadership of partitions: ``moves`` maps a partition to its new
        leader's rank. Call on rank 0 only. The move takes effect at rank 0's
        next epoch end and then at every executor's own next epoch end; only
        the moved partitions pause (their windows fire once the old leader's
        state arrived), see docs/elastic.md; an aggregation's and a join's
        partitions move alike. Raises InvalidArgument for a bad partition or
        rank, and InvalidState while the previous move is still being agreed
        (retry after an epoch or two).

        >>> ex.move_partitions({3: 0, 7: 0})   # doctest: +SKIP
        """
        if not isinstance(moves, Mapping):
            raise InvalidArgument(f"moves must map partition -> rank, got {type(moves).__name__}")
        parts, ranks = [], []
        for p, r in moves.items():
            if isinstance(p, bool) or isinstance(r, bool) or not isinstance(p, int) or \
                    not isinstance(r, int) or p < 0 or r < 0:
                raise InvalidArgument(f"moves must map partition (int) -> rank (int), got {p!r}: {r!r}")
            parts.append(p)
            ranks.append(r)
        self._core.move_partitions(parts, ranks)

    def leader_map(self) -> Tuple[int, List[int]]:
        """(version, leaders): the leader map this executor follows, leaders[p]
        being the rank that leads partition p; version 0 is partition mod N."""
        return self._core.leader_map()

    @property
    def metrics(self) -> Dict[str, Any]:
        """records_in, epochs, delta bytes shipped/received, merge time,
        watermark and its lag behind the group, credit stalls, late records."""
        m = self._core.metrics()
        lag = None
        if m["watermark"] > -(1 << 63) and m["group_watermark"] > -(1 << 63):
            lag = m["watermark"] - m["group_watermark"]
        m["watermark_lag_ms"] = lag if lag is None else lag // self.state.ticks_per_ms
        m["null_time_records"] = self._null_times
        return m

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Executor(rank={self.rank}, size={self.size}, transport={self.group.transport!r})"


def leaders_from_images(images: Sequence[CheckpointImage], partitions: int, size: int) -> List[int]:
    """The leader map a checkpoint recorded, for :meth:`Executor.restore` on a
    group of ``size``: each partition goes to the rank whose image holds it
    when that rank still exists, else to partition mod ``size``."""
    leaders = [p % size for p in range(partitions)]
    for im in images:
        for p in im.parts:
            if 0 <= p < partitions and im.rank < size:
                leaders[p] = im.rank
    return leaders
