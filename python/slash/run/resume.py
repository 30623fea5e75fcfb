"""Where a checkpointed rank resumes: what it had left at a cut in global
terms, and that work dealt to another executor count (the one place a
checkpoint's input is redistributed, as Flink's StateAssignmentOperation is
for state)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from slash.errors import NotSupported
from slash.sources import FileSource, GeneratorSource, TableSource


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
    if isinstance(source, FileSource):
        pos = pos if isinstance(pos, (list, tuple)) else None
    return type(source).remaining(source.work(rank, n, time_col), pos)


def resplittable(source: Any) -> bool:
    """Whether ``source``'s positions at a cut can be dealt to another
    executor count: a FileSource's units, or any source with ``resplit``
    and the ``work`` / ``remaining`` that describe a rank's share in global
    terms (a KafkaStream's partitions with their offsets)."""
    return isinstance(source, FileSource) or all(
        callable(getattr(source, m, None)) for m in ("resplit", "work", "remaining", "read_work"))


def check_resplittable(source: Any, ck_n: int, n: int, directory: str) -> None:
    """Raises NotSupported, naming the reason, unless ``source``'s positions
    at a cut of ck_n executors can be dealt to n."""
    if ck_n == n or resplittable(source):
        return
    if isinstance(source, (tuple, list)):  # a join: each input's units must re-split
        for side, s in zip(("left", "right"), source):  # (its held rows are kept per unit)
            if not isinstance(s, FileSource):
                raise NotSupported(f"checkpoint directory {directory!r} was cut with {ck_n} "
                                   f"executors and this run has {n}: the join's {side} input is "
                                   f"not a FileSource ({_why_not_resplit(s)}). Resume with "
                                   f"executors={ck_n}, or join files (FileSource), whose "
                                   f"positions re-split to any executor count")
        return
    raise NotSupported(f"checkpoint directory {directory!r} was cut with {ck_n} executors and this "
                       f"run has {n}: {_why_not_resplit(source)}. Resume with executors={ck_n}, "
                       f"or read files (FileSource), whose positions re-split to any executor "
                       f"count")


def _why_not_resplit(source: Any) -> str:
    """Why ``source``'s positions cannot be dealt to another executor count."""
    return {GeneratorSource: "a GeneratorSource's make(rank, n) decides each executor's input, "
                             "and input made for one split cannot be dealt to another",
            TableSource: "a TableSource's slices depend on the executor count"}.get(
        type(source), f"a {type(source).__name__} records no position in global terms")


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
