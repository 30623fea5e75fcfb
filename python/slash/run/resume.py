"""Where a checkpointed rank resumes: what it had left at a cut in global
terms, and that work dealt to another executor count (the one place a
checkpoint's input is redistributed, as Flink's StateAssignmentOperation is
for state)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from slash.errors import NotSupported
from slash.sources import global_units, resplittable, why_not_resplit


def resumed_counts(ck: Any, rank: int, n: int) -> Tuple[int, int]:
    """(push count, records read) that rank of a group of n resumes at from
    checkpoint ``ck`` (None: a fresh start, 0 and 0): its own at the cut when
    the cut's group had n ranks too; else the core counts push calls afresh
    and rank 0 carries every rank's records, so the run's total stays the
    cut's."""
    if ck is None:
        return 0, 0
    if ck.executors == n:
        info = ck.rank_info(rank)
        return int(info["pushes"]), int(info["records"])
    return 0, (sum(int(ck.rank_info(r)["records"]) for r in range(ck.executors))
               if rank == 0 else 0)


def left_of(source: Any, info: Dict[str, Any], rank: int, n: int,
             time_col: Optional[str]) -> Any:
    """What rank of a group of n had left of a re-splittable source at a
    cut, in global terms: its ``work`` (recorded since rescaling exists),
    else its position in its own split of n (checkpoints written before;
    a :class:`slash.kafka.KafkaStream`'s: its partitions' next offsets)."""
    work = info.get("work")
    if isinstance(work, dict):  # {"<partition>": offset}
        return {str(p): int(o) for p, o in work.items()}
    if work is not None:
        return [[int(g), int(k)] for g, k in work]
    pos = info.get("position")
    if global_units(source):  # a unit position [i, k], or none
        pos = pos if isinstance(pos, (list, tuple)) else None
    return type(source).remaining(source.work(rank, n, time_col), pos)


def check_resplittable(source: Any, ck_n: int, n: int, directory: str) -> None:
    """Raises NotSupported, naming the reason, unless ``source``'s positions
    at a cut of ck_n executors can be dealt to n."""
    if ck_n == n or resplittable(source):
        return
    if isinstance(source, (tuple, list)):  # a join: each input's units must re-split
        for side, s in zip(("left", "right"), source):  # (its held rows are kept per unit)
            if not global_units(s):
                raise NotSupported(f"checkpoint directory {directory!r} was cut with {ck_n} "
                                   f"executors and this run has {n}: the join's {side} input is "
                                   f"not a FileSource ({why_not_resplit(s)}). Resume with "
                                   f"executors={ck_n}, or join files (FileSource), whose "
                                   f"positions re-split to any executor count")
        return
    raise NotSupported(f"checkpoint directory {directory!r} was cut with {ck_n} executors and this "
                       f"run has {n}: {why_not_resplit(source)}. Resume with executors={ck_n}, "
                       f"or read files (FileSource), whose positions re-split to any executor "
                       f"count")


def resplit(source: Any, infos: List[Dict[str, Any]], ck_n: int, n: int,
            time_col: Optional[str], directory: str) -> List[Any]:
    """Every rank's work left at a cut of ck_n executors (``infos``: their
    rank-<r>.json), dealt to n ranks (:meth:`FileSource.resplit`): every rank
    of the new group computes the same lists. Units read whole are in none,
    a unit read in part resumes after its batches read, so no record is
    read twice or skipped. The watermark stays correct: the core restores
    every rank of another group size at the cut's group watermark (the
    smallest rank watermark), below every record any rank had left."""
    check_resplittable(source, ck_n, n, directory)
    lefts = [left_of(source, infos[r], r, ck_n, time_col) for r in range(ck_n)]
    return source.resplit(lefts, n, time_col)
