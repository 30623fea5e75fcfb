"""Files read as the inputs of a union: :class:`UnionFileSource`.

A union of scans (Spark's ``df1.union(df2)``) keeps every row of every
input, each input's rows those its own filters keep. Read as one
:class:`~slash.sources.files.FileSource` over the inputs' distinct files,
each file is decoded once however many inputs read it, and each of its
rows is taken once per input whose filters keep it; what every input
filters alike is the query's, not the source's.

How a row's inputs decide reaches the fold as the query's own filters do:
a query that reads column :data:`KEEPS` and filters on it
(:func:`keeps_filter`) gets every decoded row with a boolean verdict, which
its filters turn into the executor's selection (``skip``), so no row is
copied; a file that inputs keep overlapping rows of comes once per input
(the same decoded columns, each input's verdict). A read that does not ask
for :data:`KEEPS` gets the rows kept, copied out of the decoded batch.

Invariants: the units are the distinct files' (same split, positions,
bounds and re-deal as a FileSource of those files); the batches of a unit
depend on its rows alone, so every split and every resumed read yields the
same rows; a null never passes a filter (as :class:`slash.filters.Filter`).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from slash.errors import InvalidArgument, SchemaError
from slash.sources.contract import register
from slash.sources.files import FileSource
from slash.sources.units import Unit

if TYPE_CHECKING:  # (slash.filters loads numpy's and Arrow's kernels: not at start-up)
    from slash.filters import Filter

#: the boolean column of a union's rows: whether the row's input keeps it
KEEPS = "__slash_union_keeps"


def keeps_filter() -> Filter:
    """The filter that keeps the rows a union's inputs keep: a query over a
    :class:`UnionFileSource` adds it to fold them as a selection."""
    # lazily: slash.sources imports this module at start-up, and slash.filters loads Arrow's kernels
    from slash.filters import Filter

    return Filter(KEEPS, "==", True)


@register("union-files")
class UnionFileSource(FileSource):
    """``inputs``: each input's files (Parquet or Arrow IPC files, not
    directories) and the filters its rows must pass; ``base`` and
    ``columns`` as :class:`FileSource` takes them (``columns`` must hold
    the filters' columns) and ``dictionary`` as it takes them. The schema
    is the files' columns and :data:`KEEPS` (read only when asked for)."""

    def __init__(self, inputs: Sequence[Tuple[Sequence[str], Sequence[Filter]]],
                 time: Optional[str] = None, base: Optional[str] = None,
                 columns: Optional[Sequence[str]] = None, dictionary: Sequence[str] = ()) -> None:
        listed = [[os.fspath(f) for f in fs] for fs, _ in inputs]
        dirs = [f for fs in listed for f in fs if os.path.isdir(f)]
        if dirs:
            raise InvalidArgument(f"a union's inputs are files, not directories: {dirs[0]!r}")
        files = list(dict.fromkeys(f for fs in listed for f in fs))
        super().__init__(files, time=time, base=base, columns=columns, dictionary=dictionary)
        assert self.schema is not None and len(self.paths) == len(files)
        if KEEPS in self.schema.names:
            raise SchemaError(f"input files hold a column named {KEEPS!r}, which a union's read "
                              "adds")
        self.filters: Tuple[Tuple[Filter, ...], ...] = tuple(tuple(fs) for _, fs in inputs)
        for fs in self.filters:
            for f in fs:
                f.check(self.schema)  # SchemaError naming the column; converts the operands once
        #: each file's inputs, an input as often as it lists the file
        self.owners: Dict[str, Tuple[int, ...]] = {
            path: tuple(part for part, fs in enumerate(listed) for f in fs if f == given)
            for path, given in zip(self.paths, files)}
        self.schema = self.schema.append(pa.field(KEEPS, pa.bool_(), nullable=False))

    def describe(self) -> str:
        """The files and each input's filters (a checkpoint of other rows is another run's)."""
        said = "; ".join(" and ".join(f"{f.column} {f.op} {f.value!r}" for f in fs) or "all"
                         for fs in self.filters)
        return f"{super().describe()} as a union of {len(self.filters)} inputs keeping {said}"

    def may_have_nulls(self, column: str) -> bool:
        return False if column == KEEPS else super().may_have_nulls(column)

    def read_work(self, work: Any, columns: Optional[List[str]] = None,
                  batch_rows: int = 1 << 20, time: Optional[str] = None,
                  start: Optional[Sequence[int]] = None) -> Iterator[Tuple[List[int], Any]]:
        """As :meth:`FileSource.read_work`; every column but :data:`KEEPS` when
        ``columns`` is not given (the rows the inputs keep, copied out)."""
        assert self.schema is not None
        names = list(columns) if columns else [c for c in self.schema.names if c != KEEPS]
        return super().read_work(work, names, batch_rows, time, start)

    def _read_unit(self, readers: Any, u: Unit, names: List[str], file_cols: List[str],
                   batch_rows: int) -> Iterator[pa.RecordBatch]:
        cols = [c for c in names if c != KEEPS]
        fss = [self.filters[part] for part in self.owners[u.path]]
        extra = list(dict.fromkeys(f.column for fs in fss for f in fs if f.column not in cols))
        read = cols + extra
        read_files = [c for c in read if c not in self._part_names]
        for b in super()._read_unit(readers, u, read, read_files, batch_rows):
            for keep in _verdicts(b, fss):
                if KEEPS in names:  # the verdict as a column: the query's filter selects
                    arrays = [keep if c == KEEPS else b.column(c) for c in names]
                    yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(
                        [self.schema.field(c) if c == KEEPS else b.schema.field(c) for c in names]))
                else:
                    kept = b if keep.true_count == b.num_rows else b.filter(keep)  # (a copy)
                    yield kept.select(cols) if extra else kept


def _verdicts(b: pa.RecordBatch, inputs: Sequence[Sequence[Filter]]) -> List[pa.BooleanArray]:
    """Which rows of ``b`` each input keeps, as few verdicts as the rows
    allow: one when no row is kept by two inputs (the inputs' verdicts
    or'ed), else one per input, in the inputs' order."""
    from slash.compute import pc  # lazily: slash.sources imports this module (start-up)

    got: List[pa.BooleanArray] = []
    for fs in inputs:
        keep = pa.array(np.ones(b.num_rows, np.bool_)) if not fs else fs[0].mask(b)
        for f in fs[1:]:
            keep = pc.and_(keep, f.mask(b))  # (masks hold no null: Filter fills them false)
        got.append(keep)
    if len(got) == 1:
        return got
    one = got[0]
    for keep in got[1:]:
        one = pc.or_(one, keep)
    return [one] if one.true_count == sum(k.true_count for k in got) else got
