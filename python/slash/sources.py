"""Sources: where executors read their input, split without a shuffle.

* :class:`FileSource`: Parquet and Arrow IPC files, split by file and row
  group (Parquet) or record batch (IPC) into contiguous runs of about equal
  rows, one run per executor, so a time-ordered set of files stays
  time-ordered in every split. Every file must have the same schema; a file
  that differs is named in the error, before any work starts.
* :class:`TableSource`: an in-memory Arrow table, split into contiguous slices.
* :class:`GeneratorSource`: a picklable ``make(rank, n) -> iterable of
  RecordBatch`` with a declared schema (the benchmarks' generators).

Each executor calls ``read(rank, n, columns)`` and reads its split itself;
rows never pass through a coordinator.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from slash.errors import InvalidArgument, SchemaError, UnknownName

_PARQUET = (".parquet", ".parq", ".pq")
_IPC = (".arrow", ".feather", ".ipc", ".arrows")


@dataclass(frozen=True)
class Unit:
    """A piece of a file one executor reads: a Parquet row group or an IPC batch."""

    path: str
    index: int
    rows: int


def _expand(paths: Sequence[str]) -> List[str]:
    out: List[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            found = sorted(f for f in glob.glob(os.path.join(p, "**", "*"), recursive=True)
                           if f.endswith(_PARQUET + _IPC))
            if not found:
                raise UnknownName(f"input directory {p!r} holds no Parquet or Arrow files")
            out += found
        elif any(ch in p for ch in "*?["):
            found = sorted(glob.glob(p))
            if not found:
                raise UnknownName(f"input pattern {p!r} matches no file")
            out += found
        elif not os.path.exists(p):
            raise UnknownName(f"input path {p!r} does not exist")
        else:
            out.append(p)
    if not out:
        raise InvalidArgument("no input paths given")
    return out


def _is_ipc(path: str) -> bool:
    return path.endswith(_IPC)


def _open_ipc(path: str) -> ipc.RecordBatchFileReader:
    return ipc.open_file(pa.memory_map(path, "r"))


class FileSource:
    """Parquet / Arrow IPC files (or directories of them)."""

    def __init__(self, paths: Union[str, Sequence[str]]) -> None:
        self.paths = _expand([paths] if isinstance(paths, (str, os.PathLike)) else list(paths))
        self.units: List[Unit] = []
        self.schema: Optional[pa.Schema] = None
        for p in self.paths:
            try:
                if _is_ipc(p):
                    r = _open_ipc(p)
                    schema = r.schema
                    units = [Unit(p, i, r.get_batch(i).num_rows) for i in range(r.num_record_batches)]
                else:
                    md = pq.ParquetFile(p).metadata
                    schema = pq.read_schema(p)
                    units = [Unit(p, i, md.row_group(i).num_rows) for i in range(md.num_row_groups)]
            except (pa.ArrowInvalid, OSError) as e:
                raise SchemaError(f"cannot read input file {p!r}: {e}") from None
            schema = schema.remove_metadata()
            if self.schema is None:
                self.schema = schema
            elif not schema.equals(self.schema):
                raise SchemaError(f"input file {p!r} has schema {schema} which differs from the "
                                  f"first file's {self.schema}")
            self.units += [u for u in units if u.rows]

    @property
    def rows(self) -> int:
        return sum(u.rows for u in self.units)

    def split(self, rank: int, n: int) -> List[Unit]:
        """Executor rank's contiguous run of units (about rows / n rows)."""
        total = self.rows
        lo, hi = total * rank // n, total * (rank + 1) // n
        out, seen = [], 0
        for u in self.units:
            mid = seen + u.rows / 2  # a unit belongs where its middle row falls
            if lo <= mid < hi:
                out.append(u)
            seen += u.rows
        return out

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = 1 << 20) -> Iterator[pa.RecordBatch]:
        # batches of up to a whole (1 Mi-row) row group: each batch costs a
        # few Python calls; 64 Ki-row slices made a 100-key YSB split 11% slower
        files: Dict[str, pq.ParquetFile] = {}  # reopening parsed the footer per row group (12%)
        for u in self.split(rank, n):
            if _is_ipc(u.path):
                b = _open_ipc(u.path).get_batch(u.index)
                if columns:
                    b = b.select(columns)
                for off in range(0, b.num_rows, batch_rows):
                    yield b.slice(off, batch_rows)
            else:
                # a whole row group in one call, one thread: 1.6x iter_batches' rate
                f = files.get(u.path)
                if f is None:
                    files.clear()  # units come file by file
                    f = files[u.path] = pq.ParquetFile(u.path)
                t = f.read_row_group(u.index, columns=columns, use_threads=False)
                yield from t.to_batches(max_chunksize=batch_rows)


class TableSource:
    """An in-memory Arrow table, split into contiguous slices."""

    def __init__(self, table: pa.Table) -> None:
        if not isinstance(table, pa.Table):
            raise InvalidArgument(f"TableSource takes a pyarrow.Table, got {type(table).__name__}")
        self.table = table
        self.schema = table.schema

    @property
    def rows(self) -> int:
        return self.table.num_rows

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
        lo, hi = self.rows * rank // n, self.rows * (rank + 1) // n
        part = self.table.slice(lo, hi - lo)
        if columns:
            part = part.select(columns)
        yield from part.to_batches(max_chunksize=batch_rows)


class GeneratorSource:
    """Batches made by ``make(rank, n)`` in each executor (must be picklable)."""

    def __init__(self, make: Callable[[int, int], Iterable[pa.RecordBatch]], schema: pa.Schema) -> None:
        if not callable(make):
            raise InvalidArgument("GeneratorSource needs a callable make(rank, n)")
        self.make = make
        self.schema = schema

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
        for b in self.make(rank, n):
            yield b.select(columns) if columns else b


Source = Union[FileSource, TableSource, GeneratorSource]


def as_source(obj) -> Source:
    """A path, list of paths, pyarrow.Table or Source as a Source."""
    if isinstance(obj, (FileSource, TableSource, GeneratorSource)):
        return obj
    if isinstance(obj, pa.Table):
        return TableSource(obj)
    if isinstance(obj, (str, os.PathLike)) or (isinstance(obj, (list, tuple)) and obj and
                                               all(isinstance(p, (str, os.PathLike)) for p in obj)):
        return FileSource(obj)
    raise InvalidArgument(f"source must be file path(s), a pyarrow.Table or a Source, got {type(obj).__name__}")
