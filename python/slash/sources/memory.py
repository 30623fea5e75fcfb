"""Sources that are not files: an in-memory table (:class:`TableSource`) and
a picklable generator per rank (:class:`GeneratorSource`).

Both are bounded. A table is cut into slices dealt like file units (with a
time column) or read as one contiguous slice per rank; a generator yields
what ``make(rank, n)`` makes, which must be deterministic: a resumed rank
regenerates its items and skips those already read.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, List, Optional, Tuple, Union

import pyarrow as pa

from slash.errors import InvalidArgument
from slash.sources.contract import register
from slash.sources.units import (Bound, Unit, Watermark, batch_min, deal, no_column,
                                with_markers)


_TABLE = "<table>"


@register("table")
class TableSource:
    """An in-memory Arrow table.

    Without a time column each rank reads one contiguous slice; with one
    (``time`` here or in ``read``) the table is cut into slices of up to 64 Ki
    rows, ordered by their minimum time and dealt like :class:`FileSource`'s
    units::

        for item in TableSource(table).read(0, 2, time="ts"):
            ...  # RecordBatch, or Watermark
    """

    bounded = True
    max_unit_rows = 65536
    resplit_refusal = "a TableSource's slices depend on the executor count"

    def __init__(self, table: pa.Table, time: Optional[str] = None) -> None:
        if not isinstance(table, pa.Table):
            raise InvalidArgument(f"TableSource takes a pyarrow.Table, got {type(table).__name__}")
        self.table = table
        self.schema = table.schema
        self.time = time
        if time is not None and time not in self.schema.names:
            raise no_column(time, self.schema)

    @property
    def rows(self) -> int:
        return self.table.num_rows

    def _plan(self, rank: int, n: int, time: Optional[str]) -> Tuple[List[Unit], List[Bound]]:
        if not 0 <= rank < n:
            raise InvalidArgument(f"rank {rank} is outside 0..{n - 1}")
        if time is None:
            lo, hi = self.rows * rank // n, self.rows * (rank + 1) // n
            units = [Unit(_TABLE, lo, hi - lo)] if hi > lo else []
            return units, [None] * len(units)
        if time not in self.schema.names:
            raise no_column(time, self.schema)
        # units small enough that n ranks each get several, never above 64 Ki rows
        size = min(self.max_unit_rows, max(1024, -(-self.rows // (4 * n))))
        units = [Unit(_TABLE, off, min(size, self.rows - off)) for off in range(0, self.rows, size)]
        col = self.table.column(time)
        bounds = [batch_min(col.slice(u.index, u.rows)) for u in units]
        idx = deal(units, bounds, n)[rank]
        return [units[i] for i in idx], [bounds[i] for i in idx]

    def split(self, rank: int, n: int) -> List[Unit]:
        """Executor rank's slices in read order (``index`` is the first row)."""
        return self._plan(rank, n, self.time)[0]

    def may_have_nulls(self, column: str) -> bool:
        """Whether ``column`` holds a null."""
        if column not in self.schema.names:
            raise no_column(column, self.schema)
        return self.table.column(column).null_count > 0

    def describe(self) -> str:
        """What identifies the input in a checkpoint's fingerprint."""
        return f"table of {self.rows} rows {self.schema.names}"

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = 65536, time: Optional[str] = None
             ) -> Iterator[Union[pa.RecordBatch, Watermark]]:
        """Executor rank's RecordBatches; with ``time``, Watermarks between slices."""
        units, bounds = self._plan(rank, n, time if time is not None else self.time)
        for c in columns or []:
            if c not in self.schema.names:
                raise no_column(c, self.schema)
        table = self.table.select(columns) if columns else self.table
        parts = (iter(table.slice(u.index, u.rows).to_batches(max_chunksize=batch_rows))
                 for u in units)
        yield from with_markers(parts, bounds, time is not None)


@register("generator")
class GeneratorSource:
    """Batches made by ``make(rank, n)`` in each executor (must be picklable).

    ``make`` must be deterministic: called again with the same (rank, n) it
    yields the same items in the same order. A recovered run
    (``checkpoint=``) resumes a split by calling ``make`` again and skipping
    the items the checkpoint had consumed.

    ``make`` may yield :class:`Watermark` objects between batches, with the
    meaning ``read(..., time=...)`` gives them; they are passed through when
    ``read`` is given a time column and dropped otherwise.
    """

    bounded = True
    resplit_refusal = ("a GeneratorSource's make(rank, n) decides each executor's input, and "
                       "input made for one split cannot be dealt to another")

    def __init__(self, make: Callable[[int, int], Iterable[Union[pa.RecordBatch, Watermark]]],
                 schema: pa.Schema) -> None:
        if not callable(make):
            raise InvalidArgument("GeneratorSource needs a callable make(rank, n)")
        self.make = make
        self.schema = schema

    def may_have_nulls(self, column: str) -> bool:
        """The declared schema field's ``nullable`` flag."""
        if column not in self.schema.names:
            raise no_column(column, self.schema)
        return self.schema.field(column).nullable

    def describe(self) -> str:
        """What identifies the input in a checkpoint's fingerprint."""
        mk = self.make
        return (f"generator {getattr(mk, '__module__', '?')}."
                f"{getattr(mk, '__qualname__', type(mk).__name__)} {self.schema.names}")

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = 65536, time: Optional[str] = None
             ) -> Iterator[Union[pa.RecordBatch, Watermark]]:
        """The batches ``make(rank, n)`` yields (and its Watermarks, given ``time``)."""
        for b in self.make(rank, n):
            if isinstance(b, Watermark):
                if time is not None:
                    yield b
            else:
                yield b.select(columns) if columns else b
