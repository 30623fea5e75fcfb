"""Units of input and how they are dealt to executors, without a shuffle.

A source's input is cut into *units* (:class:`Unit`: a Parquet row group, an
IPC record batch, a table slice, a generated batch), each read whole by one
executor. Each unit has a *bound* on the time column: None (no statistics:
it may hold any time), :data:`ALL_NULL` (no non-null time) or a pa.Scalar no
larger than every non-null time it holds.

* :func:`deal`: with a time column, units sorted by (no statistics first,
  minimum time, path, index), each dealt to the rank with the fewest rows so
  far (ties: the lowest rank). Every rank computes the same assignment alone.
* :func:`contiguous`: without one, a contiguous run of about rows / n rows.
* :func:`promises` / :func:`with_markers`: the :class:`Watermark` a rank may
  yield after each unit: the smallest bound of the units it has left, when
  all of those have one.

Invariant: no batch yielded after a ``Watermark(v)`` holds a non-null time
smaller than ``v``.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import pyarrow as pa

from slash.compute import cast, pc
from slash.errors import UnknownName


@dataclass(frozen=True)
class Watermark:
    """A promise, yielded by ``read(..., time=COL)`` between batches: no batch
    yielded after it by the same iterator holds a non-null COL value smaller
    than ``value``.

    ``value`` is a pyarrow Scalar of COL's Arrow type as the source reads it::

        >>> Watermark(pa.scalar(5, pa.int64())).value.as_py()
        5
    """

    value: pa.Scalar


@dataclass(frozen=True)
class Unit:
    """A piece of input one executor reads whole: a Parquet row group, an IPC
    record batch, or (``path == "<table>"``) the slice of an in-memory table
    starting at row ``index``."""

    path: str
    index: int
    rows: int


# ---- time bounds of units -------------------------------------------------------
# A unit's bound on the time column is one of: None (no statistics: it may hold
# any time), ALL_NULL (it holds no non-null time: it bounds nothing), or a
# pa.Scalar no larger than every non-null time it holds.
class _AllNull:
    def __repr__(self) -> str:
        return "<all null>"

    def __reduce__(self) -> str:  # stays a singleton through pickling
        return "ALL_NULL"


ALL_NULL = _AllNull()
Bound = Union[None, _AllNull, pa.Scalar]


def bound_key(s: pa.Scalar) -> Any:
    """An orderable Python value of a time scalar (temporal types by their integer value)."""
    t = s.type
    if pa.types.is_temporal(t):
        return cast(s, pa.int32() if t.bit_width == 32 else pa.int64()).as_py()
    return s.as_py()


def _order_key(b: Bound) -> Tuple[int, Any]:
    if b is None:
        return (0, 0)
    if b is ALL_NULL:
        return (2, 0)
    return (1, bound_key(b))


def deal(units: Sequence[Unit], bounds: Sequence[Bound], n: int) -> List[List[int]]:
    """Unit indices per rank: sorted by (no statistics, min time, path, index),
    each dealt to the rank with the fewest rows so far (ties: lowest rank)."""
    order = sorted(range(len(units)),
                   key=lambda i: (_order_key(bounds[i]), units[i].path, units[i].index))
    heap = [(0, r) for r in range(n)]
    out: List[List[int]] = [[] for _ in range(n)]
    for i in order:
        rows, r = heapq.heappop(heap)
        out[r].append(i)
        heapq.heappush(heap, (rows + units[i].rows, r))
    return out


def contiguous(units: Sequence[Unit], rank: int, n: int) -> List[int]:
    """Unit indices of rank's contiguous run (about rows / n rows): a unit
    belongs where its middle row falls."""
    total = sum(u.rows for u in units)
    lo, hi = total * rank // n, total * (rank + 1) // n
    out, seen = [], 0
    for i, u in enumerate(units):
        if lo <= seen + u.rows / 2 < hi:
            out.append(i)
        seen += u.rows
    return out


def promises(bounds: Sequence[Bound]) -> List[Optional[pa.Scalar]]:
    """For each position i, the watermark the units from i on allow: the
    smallest of their minima, or None if one lacks statistics or none holds a
    non-null time."""
    out: List[Optional[pa.Scalar]] = [None] * (len(bounds) + 1)
    best: Optional[pa.Scalar] = None
    known = True
    for i in range(len(bounds) - 1, -1, -1):
        b = bounds[i]
        if b is None:
            known = False
        elif b is not ALL_NULL and (best is None or bound_key(b) < bound_key(best)):
            best = b
        out[i] = best if known else None
    return out


def with_markers(parts: Iterable[Iterator[pa.RecordBatch]], bounds: Sequence[Bound],
                  markers: bool) -> Iterator[Union[pa.RecordBatch, Watermark]]:
    """Each unit's batches, then (when ``markers``) a Watermark after every
    unit but the last whenever the promise of the units left has advanced."""
    promise = promises(bounds) if markers else []
    last = None
    for i, batches in enumerate(parts):
        yield from batches
        if markers and i + 1 < len(bounds):
            w = promise[i + 1]
            if w is not None and (last is None or bound_key(w) > last):
                last = bound_key(w)
                yield Watermark(w)


def batch_min(arr: Union[pa.Array, pa.ChunkedArray]) -> Bound:
    if arr.null_count == len(arr):
        return ALL_NULL
    return pc.min(arr)


def no_column(name: str, schema: pa.Schema) -> UnknownName:
    return UnknownName(f"input has no column {name!r} (columns: {', '.join(schema.names)})")


#: where a rank's read resumes: an item count, or ``[unit, batch]`` for files
Position = Union[int, List[int]]
#: a rank's share of a FileSource in global terms: ``[[unit, batches already read], ...]``
Work = List[List[int]]
