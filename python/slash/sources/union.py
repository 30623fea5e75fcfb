"""Files read as the inputs of a union: :class:`UnionFileSource`.

A union of scans (Spark's ``df1.union(df2)``) keeps every row of every
input, each input's rows those its own filters keep. Read as one
:class:`~slash.sources.files.FileSource` over all the inputs' files (a file
two inputs read is read twice, once per input), each unit keeps the input
it belongs to, and a unit's rows pass that input's filters before anyone
sees them; what every input filters alike is the query's, not the source's.

Invariants: the units are the files' (same split, positions, bounds and
re-deal as a FileSource of the same files); a row's fate depends on its
own values and its unit's input alone, so every split yields the same
rows; a null never passes a filter (as :class:`slash.filters.Filter`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa

from slash.errors import InvalidArgument
from slash.sources.contract import register
from slash.sources.files import FileSource
from slash.sources.units import Unit

if TYPE_CHECKING:  # (slash.filters loads numpy's and Arrow's kernels: not at start-up)
    from slash.filters import Filter


@dataclass(frozen=True)
class InputUnit(Unit):
    """A unit of the files of input ``part`` of the union."""

    part: int = 0


@register("union-files")
class UnionFileSource(FileSource):
    """``inputs``: each input's files (Parquet or Arrow IPC files, not
    directories) and the filters its rows must pass; ``base`` and
    ``columns`` as :class:`FileSource` takes them (``columns`` must hold
    the filters' columns) and ``dictionary`` as it takes them."""

    def __init__(self, inputs: Sequence[Tuple[Sequence[str], Sequence[Filter]]],
                 time: Optional[str] = None, base: Optional[str] = None,
                 columns: Optional[Sequence[str]] = None, dictionary: Sequence[str] = ()) -> None:
        files = [os.fspath(f) for fs, _ in inputs for f in fs]
        dirs = [f for f in files if os.path.isdir(f)]
        if dirs:
            raise InvalidArgument(f"a union's inputs are files, not directories: {dirs[0]!r}")
        super().__init__(files, time=time, base=base, columns=columns, dictionary=dictionary)
        assert self.schema is not None
        self.filters: Tuple[Tuple[Filter, ...], ...] = tuple(tuple(fs) for _, fs in inputs)
        for fs in self.filters:
            for f in fs:
                f.check(self.schema)  # SchemaError naming the column; converts the operands once
        # the units in the order FileSource made them: each file's units in
        # increasing index, the files in the order given (a file without
        # rows has none): a file's units are the run that starts at it
        owner = [part for part, (fs, _) in enumerate(inputs) for _ in fs]
        units: List[Unit] = []
        at = 0
        for path, part in zip(self.paths, owner):
            prev = -1
            while at < len(self.units) and self.units[at].path == path and \
                    self.units[at].index > prev:
                u = self.units[at]
                units.append(InputUnit(u.path, u.index, u.rows, part))
                prev, at = u.index, at + 1
        assert at == len(self.units)
        self.units = units

    def describe(self) -> str:
        """The files and each input's filters (a checkpoint of other rows is another run's)."""
        said = "; ".join(" and ".join(f"{f.column} {f.op} {f.value!r}" for f in fs) or "all"
                         for fs in self.filters)
        return f"{super().describe()} as a union of {len(self.filters)} inputs keeping {said}"

    def _read_unit(self, readers: Any, u: Unit, names: List[str], file_cols: List[str],
                   batch_rows: int) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc  # lazily: slash.sources imports this module (start-up)

        fs = self.filters[u.part] if isinstance(u, InputUnit) else ()
        if not fs:
            yield from super()._read_unit(readers, u, names, file_cols, batch_rows)
            return
        extra = [f.column for f in fs if f.column not in names]
        read = names + list(dict.fromkeys(extra))
        read_files = [c for c in read if c not in self._part_names]
        for b in super()._read_unit(readers, u, read, read_files, batch_rows):
            keep = fs[0].mask(b)
            for f in fs[1:]:
                keep = pc.and_(keep, f.mask(b))
            b = b.filter(keep)  # (a null in the mask drops the row)
            yield b.select(names) if extra else b
