"""The test kill hook: ``SLASH_TEST_KILL="RANK:PUSHES[:ATTEMPT[:CUTS[:w]]],..."``
makes the worker of rank RANK SIGKILL itself right after a push call that
brings its push count (counted from the start of the run, as the core counts
them) to PUSHES or more, in attempt ATTEMPT (default 0; attempt k is the
k-th restart), once CUTS checkpoints of that attempt are committed (default
0; the worker polls its executor until they are, for at most 10 s). A fifth
field ``w`` moves the kill into the next checkpoint write after that point:
after the worker wrote its meta and half of its partitions' files, before
its ``rank-<r>.json`` and its report (so that checkpoint never commits).
Used by the recovery tests only; every checkpointed rank loop reads it here."""
from __future__ import annotations

import logging
import os
import signal
import time
from typing import Callable, Optional, Tuple

from slash.checkpoint import CheckpointStore
from slash.executor import Executor
from slash.run.plan import AttemptPlan

log = logging.getLogger(__name__)


def kill_point(rank: int, attempt: int) -> Optional[Tuple[int, int, bool]]:
    """(pushes, cuts, in_write) after which this worker kills itself (test
    hook), or None."""
    spec = os.environ.get("SLASH_TEST_KILL")
    if not spec:
        return None
    for part in spec.split(","):
        fields = part.split(":")
        in_write = len(fields) > 4 and fields[4] == "w"
        f = [int(x) for x in fields[:4]]
        if f[0] == rank and (f[2] if len(f) > 2 else 0) == attempt:
            return f[1], (f[3] if len(f) > 3 else 0), in_write
    return None


def _committed_since(store: CheckpointStore, first_id: int) -> int:
    """Committed checkpoints with an id >= first_id (for the test hook)."""
    return sum(1 for i in store.committed_ids() if i >= first_id)


def kill_after_cuts(ex: Executor, store: CheckpointStore, plan: AttemptPlan,
                    kill_at: Tuple[int, ...], rank: int, pushes: int,
                    after_call: Callable[[], None]) -> None:
    """The SLASH_TEST_KILL hook between pushes: waits (polling, <= 10 s) for
    the hook's CUTS committed checkpoints, then SIGKILLs this process."""
    waited = time.monotonic()
    while _committed_since(store, plan.next_id) < kill_at[1] and time.monotonic() - waited < 10:
        ex.poll(0.01)
        after_call()
    log.warning("test hook SLASH_TEST_KILL: rank %d kills itself after %d pushes", rank, pushes)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_in_write(store: CheckpointStore, plan: AttemptPlan, kill_at: Optional[Tuple[int, ...]],
                  rank: int, pushes: int) -> Optional[Callable[[int], None]]:
    """The SLASH_TEST_KILL hook with ``:w``, for the write of an image cut
    after ``pushes`` push calls: a ``midway`` for :func:`write_image` that
    SIGKILLs this process halfway through the partition files once the
    hook's CUTS checkpoints are committed; None when the hook does not apply."""
    if kill_at is None or not kill_at[2] or pushes < kill_at[0]:
        return None

    def midway(ckpt_id: int) -> None:
        if _committed_since(store, plan.next_id) >= kill_at[1]:
            log.warning("test hook SLASH_TEST_KILL: rank %d kills itself while writing "
                        "checkpoint %d", rank, ckpt_id)
            os.kill(os.getpid(), signal.SIGKILL)
    return midway
