"""Sources over units read by index: Parquet and Arrow IPC files
(:class:`FileSource`) and generated batches (:class:`BatchSource`).

A :class:`FileSource` finds its files (directories, glob patterns, Hive
``name=value/`` partition directories), checks that they share one schema
(the error names the file that differs), cuts them into units (row groups,
IPC record batches) and bounds each unit's times by its statistics. A rank
reads its units (or any ``work`` in global unit indices, as a checkpoint
re-deals it) with the next unit decoded on a thread while it folds the last.

:class:`BatchSource` is the same machinery over ``make(i)``: each batch a
unit, its bound ``bound(i)``; it overrides where bounds and null flags come
from and how a unit is read (``unit_bounds``, ``may_have_nulls``,
``_read_unit``), and keeps the split, the positions and the re-deal.

Invariant: a position ``[i, k]`` says the next item is batch k of work
item i; resuming there reads what an uninterrupted read would have read
from there on, and nothing before it.
"""
from __future__ import annotations

import glob
import json
import logging
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from slash.sources import parquet_chunks
from slash.arrow_np import scalar
from slash.errors import InvalidArgument, SchemaError, UnknownName
from slash.sources.contract import register
from slash.sources.parquet_chunks import ChunkReader, chunk_plan
from slash.sources.units import (ALL_NULL, Bound, Unit, Watermark, Work, batch_min, bound_key,
                                contiguous, deal, no_column, promises)

#: the sources' logger, as before the split
log = logging.getLogger("slash.sources")


_PARQUET = (".parquet", ".parq", ".pq")
_IPC = (".arrow", ".feather", ".ipc", ".arrows")


_OPEN_FILES = 128  # ParquetFile / IPC readers kept open by one read(): an LRU, not one per file


# ---- Parquet statistics -----------------------------------------------------------
_UNITS = {"s": 0, "ms": 1, "us": 2, "ns": 3}
_PQ_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns",
             "TIMESTAMP_MILLIS": "ms", "TIMESTAMP_MICROS": "us"}


def _parquet_time_unit(col: Any) -> Optional[str]:
    """The unit a Parquet INT64 timestamp column stores, or None."""
    lt = col.logical_type
    if lt is not None and lt.type == "TIMESTAMP":
        return _PQ_UNITS.get(json.loads(lt.to_json()).get("timeUnit"))
    return _PQ_UNITS.get(col.converted_type)


def _parquet_min(stats: Any, rows: int, col: Any, t: pa.DataType) -> Bound:
    """A row group's bound on a column of Arrow type ``t`` from its Parquet
    statistics; a value that cannot be converted exactly is floored."""
    if stats is None:
        return None
    if stats.has_null_count and stats.null_count == rows:
        return ALL_NULL
    if not stats.has_min_max or col.physical_type == "INT96":  # Spark's legacy INT96: no usable order
        return None
    if pa.types.is_timestamp(t):
        unit = _parquet_time_unit(col)
        if unit is None or col.physical_type != "INT64":
            return None
        raw, shift = int(stats.min_raw), _UNITS[t.unit] - _UNITS[unit]
        v = raw * 10 ** shift if shift >= 0 else raw // 10 ** -shift  # floor, never up
        return scalar(v, t)
    if pa.types.is_date32(t) and col.physical_type == "INT32":
        return scalar(int(stats.min_raw), t)
    if pa.types.is_date64(t) and col.physical_type == "INT32":  # Parquet DATE is days
        return scalar(int(stats.min_raw) * 86_400_000, t)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return scalar(stats.min, t)
    return None


def _leaf_index(md: pq.FileMetaData, name: str) -> Optional[int]:
    """The Parquet column index of top-level primitive field ``name``, or None."""
    for j in range(md.num_columns):
        if md.schema.column(j).path == name:
            return j
    return None


# ---- discovery -------------------------------------------------------------------
def _hidden(rel: str) -> bool:
    """A path below an input directory Spark and Hive would skip (``_SUCCESS``,
    ``_temporary/``, ``.part-0.crc``)."""
    return any(part.startswith(("_", ".")) for part in rel.split(os.sep))


def _expand(paths: Sequence[str]) -> List[Tuple[str, Optional[str]]]:
    """Input files as (path, directory their Hive partitions are relative to)."""
    out: List[Tuple[str, Optional[str]]] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            found = sorted(f for f in glob.glob(os.path.join(p, "**", "*"), recursive=True)
                           if f.endswith(_PARQUET + _IPC) and os.path.isfile(f)
                           and not _hidden(os.path.relpath(f, p)))
            if not found:
                raise UnknownName(f"input directory {p!r} holds no Parquet or Arrow files")
            out += [(f, p) for f in found]
        elif any(ch in p for ch in "*?["):
            found = sorted(glob.glob(p))
            if not found:
                raise UnknownName(f"input pattern {p!r} matches no file")
            out += [(f, None) for f in found]
        elif not os.path.exists(p):
            raise UnknownName(f"input path {p!r} does not exist")
        else:
            out.append((p, None))
    if not out:
        raise InvalidArgument("no input paths given")
    return out


def _partitions(files: List[Tuple[str, Optional[str]]]) -> Tuple[List[pa.Field], Dict[str, Dict[str, Any]]]:
    """Hive partition fields (as pyarrow.dataset infers them, per input
    directory) and each file's partition values (None for a null partition)."""
    fields: List[pa.Field] = []
    values: Dict[str, Dict[str, Any]] = {}
    bases: Dict[str, List[str]] = {}
    for f, base in files:
        # only a name=value directory below the input directory is a partition
        if base is not None and any("=" in d for d in
                                    os.path.dirname(os.path.relpath(f, base)).split(os.sep)):
            bases.setdefault(base, []).append(f)
    if bases:
        # only here: pyarrow.dataset imports pandas, ~0.3 s of every process's start
        import pyarrow.dataset as ds  # start-up: ~0.7 s, only for hive-partitioned directories
    for base, members in bases.items():
        for fmt, ends in (("parquet", _PARQUET), ("ipc", _IPC)):
            group = [f for f in members if f.endswith(ends)]
            if not group:
                continue
            try:
                d = ds.dataset(group, format=fmt, partitioning="hive", partition_base_dir=base)
            except (pa.ArrowInvalid, OSError) as e:
                raise SchemaError(f"cannot read the partitions of input directory {base!r}: {e}") from None
            names = set()
            for frag in d.get_fragments():
                keys = ds.get_partition_keys(frag.partition_expression)
                values[os.path.normpath(frag.path)] = keys
                names.update(keys)
            # (d.partitioning.schema may list the files' columns too: the
            # fragments' keys say which fields are partitions)
            fields += [f for f in d.schema if f.name in names and f.name not in
                       [x.name for x in fields]]
    return fields, values


def _is_ipc(path: str) -> bool:
    return path.endswith(_IPC)


def _open_ipc(path: str) -> ipc.RecordBatchFileReader:
    return ipc.open_file(pa.memory_map(path, "r"))


class _Readers:
    """Open ParquetFile / IPC readers of one read(), least recently used closed first."""

    def __init__(self, dictionary: Sequence[str] = ()) -> None:
        self.dictionary = dictionary  # columns Parquet files read as dictionary arrays
        self.open: "OrderedDict[str, Any]" = OrderedDict()
        # the core's reader of integer column chunks (parquet_chunks), with an
        # OS file descriptor per Parquet file it reads from (closed with the file)
        self.chunks = ChunkReader() if parquet_chunks.ENABLED else None
        self.fds: Dict[str, int] = {}
        self.leaves: Dict[str, Dict[str, Optional[int]]] = {}

    def get(self, path: str) -> Any:
        r = self.open.get(path)
        if r is None:
            if len(self.open) >= _OPEN_FILES:
                gone, old = self.open.popitem(last=False)
                self._close(old)
                fd = self.fds.pop(gone, None)
                if fd is not None:
                    os.close(fd)
            # pre_buffer: a row group's column chunks in one coalesced read
            r = self.open[path] = _open_ipc(path) if _is_ipc(path) else \
                _open_parquet(path, self.dictionary)
        else:
            self.open.move_to_end(path)
        return r

    @staticmethod
    def _close(r: Any) -> None:
        if isinstance(r, pq.ParquetFile):
            r.close()

    def fd(self, path: str) -> int:
        """An OS file descriptor of ``path`` (opened by :meth:`get`), kept open with it."""
        fd = self.fds.get(path)
        if fd is None:
            fd = self.fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def leaf(self, path: str, md: pq.FileMetaData, name: str) -> Optional[int]:
        """:func:`_leaf_index` of ``name`` in file ``path``, worked out once per file and column."""
        got = self.leaves.setdefault(path, {})
        if name not in got:
            got[name] = _leaf_index(md, name)
        return got[name]

    def close(self) -> None:
        for r in self.open.values():
            self._close(r)
        self.open.clear()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _open_parquet(path: str, dictionary: Sequence[str] = ()) -> pq.ParquetFile:
    """A Parquet file whose INT96 timestamps (Spark's default writer) read as
    microseconds: exact over Spark's whole range (years 0001-9999), where
    nanoseconds overflow outside 1677-2262; ``dictionary``: columns read as
    dictionary arrays (see FileSource)."""
    return pq.ParquetFile(path, coerce_int96_timestamp_unit="us", pre_buffer=True,
                          read_dictionary=list(dictionary) or None)


def _instants(schema: pa.Schema, md: pq.FileMetaData) -> pa.Schema:
    """``schema`` with each top-level INT96 column as ``timestamp[us, UTC]``:
    Spark writes its TimestampType (an instant) as INT96, so the column is
    an instant like a TIMESTAMP column with isAdjustedToUTC=true, not a wall
    clock (Spark shows it in the session time zone)."""
    for j in range(md.num_columns):
        c = md.schema.column(j)
        if c.physical_type == "INT96" and c.path in schema.names:
            i = schema.get_field_index(c.path)
            f = schema.field(i)
            if pa.types.is_timestamp(f.type) and f.type.tz is None:
                schema = schema.set(i, f.with_type(pa.timestamp("us", "UTC")))
    return schema


@register("files")
class FileSource:
    """Parquet / Arrow IPC files, or directories of them (Hive partitions included).

    ``time`` names the event-time column whose statistics order the split
    (``read(time=...)`` overrides it); ``base``: the directory that files
    given one by one take their Hive partitions from (as a directory given
    whole does); ``columns``: the only columns the source has (files and
    partitions), in that order: the files must agree on these alone, by name
    (each file may hold others, in any order), as a union of scans of files
    written apart reads them; ``dictionary``: string columns read as
    dictionary arrays where every file is Parquet holding them as ``string``
    (cheaper to decode and filter; for columns a query filters on only)::

        src = FileSource("events/", time="ts")   # events/day=2013-01-01/part-0.parquet ...
        for item in src.read(rank=0, n=4, columns=["ts", "day"], time="ts"):
            ...  # RecordBatch, or Watermark between units

    Files and directories whose names start with ``_`` or ``.`` and files
    without rows are skipped. Parquet units are bounded by their row-group
    statistics; Arrow IPC units by the minimum of each record batch, computed
    at open from the memory-mapped file.
    """

    bounded = True
    #: read as work in global unit indices from the start (slash.sources.contract)
    global_units = True

    def __init__(self, paths: Union[str, Sequence[str]], time: Optional[str] = None,
                 base: Optional[str] = None, columns: Optional[Sequence[str]] = None,
                 dictionary: Sequence[str] = ()) -> None:
        given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        files = _expand(given)
        if base is not None:  # files listed one by one (e.g. Spark's pruned scan) below a Hive root
            root = os.path.join(os.path.abspath(base), "")
            files = [(f, b if b is not None or not os.path.abspath(f).startswith(root) else base)
                     for f, b in files]
        self.paths = [f for f, _ in files]
        #: the paths as given (files, directories, glob patterns): what an output may not be
        self.inputs = [os.fspath(p) for p in given]
        self.time = time
        part_fields, self._parts = _partitions(files)
        self.units: List[Unit] = []
        self.schema: Optional[pa.Schema] = None
        first: Optional[str] = None
        empty: Optional[Tuple[str, pa.Schema]] = None  # the first file, if no file has rows
        nullable: Dict[str, bool] = {}
        footers: Dict[str, Any] = {}
        encoded = set(dictionary)  # (those plain strings in every file, all of them Parquet)
        for p in self.paths:
            try:
                if _is_ipc(p):
                    r = _open_ipc(p)
                    schema = r.schema
                    units = [Unit(p, i, r.get_batch(i).num_rows) for i in range(r.num_record_batches)]
                else:
                    with _open_parquet(p) as f:
                        md, schema = f.metadata, _instants(f.schema_arrow, f.metadata)
                    footers[p] = md
                    units = [Unit(p, i, md.row_group(i).num_rows) for i in range(md.num_row_groups)]
            except (pa.ArrowInvalid, OSError) as e:
                raise SchemaError(f"cannot read input file {p!r}: {e}") from None
            units = [u for u in units if u.rows]
            encoded -= {c for c in encoded if _is_ipc(p) or c not in schema.names
                        or schema.field(c).type != pa.string()}
            if not units:  # a file without rows is skipped
                empty = empty or (p, schema)
                continue
            for fld in part_fields:
                if fld.name in schema.names and (columns is None or fld.name in columns):
                    raise SchemaError(f"input file {p!r} holds a column {fld.name!r} that is also "
                                      "a partition directory name")
            if columns is None:
                schema = pa.schema(list(schema) + part_fields)
            else:
                schema = _only(p, schema, part_fields, columns)
            if self.schema is None:
                self.schema, first = schema, p
            elif not _same_columns(schema, self.schema):
                raise SchemaError(f"input file {p!r} has schema {_plain(schema)} which differs "
                                  f"from that of input file {first!r}: {_plain(self.schema)}")
            for fld in schema:
                nullable[fld.name] = nullable.get(fld.name, False) or fld.nullable
            self.units += units
        if self.schema is None:  # no file has rows: the first one's schema
            assert empty is not None
            self.schema = (pa.schema(list(empty[1]) + part_fields) if columns is None
                           else _only(empty[0], empty[1], part_fields, columns))
            nullable = {f.name: f.nullable for f in self.schema}
        #: string columns read as dictionary arrays (Parquet keeps them so in
        #: its pages): cheaper to decode and to filter, for columns a query
        #: only filters on (a key or a value needs the strings)
        self.dictionary = [c for c in dictionary if c in encoded]
        self.schema = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), pa.string())
                                          if f.name in self.dictionary else f.type,
                                          nullable[f.name]) for f in self.schema])
        self._part_names = {f.name for f in part_fields}
        log.debug("input: %d files, %d units, %d rows, partitions %s", len(self.paths),
                  len(self.units), self.rows, sorted(self._part_names))
        self._bounds: Dict[str, List[Bound]] = {}
        # each Parquet footer as read here, kept (and pickled into Spark tasks) so the
        # statistics behind the plan and may_have_nulls are not read again
        self._footers: Dict[str, Any] = footers
        self._nulls: Dict[str, bool] = {}
        if time is not None:
            self.unit_bounds(time)  # statistics of the time column: read once, at open

    @property
    def rows(self) -> int:
        return sum(u.rows for u in self.units)

    def __getstate__(self) -> Dict[str, Any]:
        # a pickled pa.Scalar is rebuilt by pa.scalar(), which imports pandas
        # in the executor that unpickles it: the bounds travel as 1-row arrays
        state = dict(self.__dict__)
        state["_bounds"] = {c: [pa.repeat(b, 1) if isinstance(b, pa.Scalar) else b for b in bs]
                            for c, bs in self._bounds.items()}
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        state["_bounds"] = {c: [b[0] if isinstance(b, pa.Array) else b for b in bs]
                            for c, bs in state.get("_bounds", {}).items()}
        self.__dict__.update(state)

    # -- the split --------------------------------------------------------------
    def _plan_idx(self, rank: int, n: int, time: Optional[str]) -> List[int]:
        """Global indices (into ``self.units``) of rank's units, in read order."""
        if not 0 <= rank < n:
            raise InvalidArgument(f"rank {rank} is outside 0..{n - 1}")
        if time is None:
            return contiguous(self.units, rank, n)
        return deal(self.units, self.unit_bounds(time), n)[rank]

    def _plan(self, rank: int, n: int, time: Optional[str]) -> Tuple[List[Unit], List[Bound]]:
        idx = self._plan_idx(rank, n, time)
        bounds = self.unit_bounds(time) if time is not None else None
        return [self.units[i] for i in idx], [bounds[i] if bounds else None for i in idx]

    def describe(self) -> str:
        """What identifies the input in a checkpoint's fingerprint."""
        return f"files {sorted(self.paths)} ({self.rows} rows)"

    def work(self, rank: int, n: int, time: Optional[str] = None) -> "Work":
        """Rank's split in global terms: ``[[unit, 0], ...]`` in read order
        (``unit`` indexes :attr:`units`; the second field counts the unit's
        batches already read, none here). See :meth:`read_work`."""
        return [[i, 0] for i in self._plan_idx(rank, n, time if time is not None else self.time)]

    @staticmethod
    def remaining(work: "Work", pos: Optional[Sequence[int]]) -> "Work":
        """What is left of ``work`` at position ``pos`` (as :meth:`read_work`
        yields it; None: nothing read yet): the unit in progress with the
        batches read of it, then the units not started.

        >>> FileSource.remaining([[4, 0], [7, 0], [9, 0]], [1, 2])
        [[7, 2], [9, 0]]
        """
        if pos is None:
            return [list(w) for w in work]
        u, k = int(pos[0]), int(pos[1])
        if u >= len(work):
            return []
        return [[int(work[u][0]), max(k, int(work[u][1]))]] + [list(w) for w in work[u + 1:]]

    def resplit(self, left: Sequence["Work"], n: int, time: Optional[str] = None) -> List["Work"]:
        """Deals the work ``left`` by the ranks of a checkpoint (each rank's
        :meth:`remaining`) to ``n`` ranks: a unit in progress stays one work
        item (its batches already read are skipped by whoever gets it), units
        fully read are in no list. The assignment is deterministic (every
        rank computes it alone) and follows the rules of the first split:
        with a time column, items sorted by (no statistics, minimum time,
        path, index) and dealt greedily by rows; without one, contiguous runs
        in file order. Raises :class:`InvalidArgument` if a unit is in two
        lists or outside this source (the checkpoint is of other input).

        >>> src = FileSource.__new__(FileSource)
        >>> src.units, src.time = [Unit("a", i, 10) for i in range(4)], None
        >>> src.resplit([[[1, 1], [2, 0]], [[3, 0]]], 2)   # units 1-3 left, unit 1 in part
        [[[1, 1]], [[2, 0], [3, 0]]]
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"resplit needs n >= 1 ranks, got {n!r}")
        items: Dict[int, int] = {}
        for lst in left:
            for g, k in lst:
                g, k = int(g), int(k)
                if not 0 <= g < len(self.units) or k < 0:
                    raise InvalidArgument(f"work item {[g, k]} is outside this input's "
                                          f"{len(self.units)} units (a checkpoint of other input?)")
                if g in items:
                    raise InvalidArgument(f"unit {g} ({self.units[g].path!r}, index "
                                          f"{self.units[g].index}) is left to two ranks")
                items[g] = k
        order = sorted(items)
        subset = [self.units[g] for g in order]
        time = time if time is not None else self.time
        if time is None:
            idx = [contiguous(subset, r, n) for r in range(n)]
        else:
            b = self.unit_bounds(time)
            idx = deal(subset, [b[g] for g in order], n)
        return [[[order[i], items[order[i]]] for i in per] for per in idx]

    def split(self, rank: int, n: int) -> List[Unit]:
        """Executor rank's units in read order: dealt by the time column's
        statistics when the source has a ``time``, else a contiguous run."""
        return self._plan(rank, n, self.time)[0]

    def unit_bounds(self, time: str) -> List[Bound]:
        """Each unit's bound on column ``time``, by global unit index: a
        lower bound of the unit's non-null times (from statistics, read once
        and cached), :data:`ALL_NULL` for a unit whose times are all null, or
        None where nothing is known. What the split, a live re-deal and a
        rank's watermark promise rest on. UnknownName for a column the
        source lacks."""
        got = self._bounds.get(time)
        if got is not None:
            return got
        assert self.schema is not None
        if time not in self.schema.names:
            raise no_column(time, self.schema)
        t = self.schema.field(time).type
        out: List[Bound] = []
        if time in self._part_names:
            for u in self.units:
                v = self._parts.get(os.path.normpath(u.path), {}).get(time)
                out.append(ALL_NULL if v is None else scalar(v, t))
        else:
            for path, units in self._by_file():
                if _is_ipc(path):
                    r = _open_ipc(path)
                    out += [batch_min(r.get_batch(u.index).column(time)) for u in units]
                    continue
                md = self._footer(path)
                j = _leaf_index(md, time)
                for u in units:
                    if j is None:
                        out.append(None)
                    else:
                        rg = md.row_group(u.index)
                        out.append(_parquet_min(rg.column(j).statistics, rg.num_rows,
                                                md.schema.column(j), t))
        self._bounds[time] = out
        return out

    def _by_file(self) -> Iterator[Tuple[str, List[Unit]]]:
        """Units grouped by file, in self.units order."""
        i = 0
        while i < len(self.units):
            j = i
            while j < len(self.units) and self.units[j].path == self.units[i].path:
                j += 1
            yield self.units[i].path, self.units[i:j]
            i = j

    def _footer(self, path: str) -> Any:
        """A Parquet file's metadata, read once."""
        md = self._footers.get(path)
        if md is None:
            with pq.ParquetFile(path) as f:
                md = self._footers[path] = f.metadata
        return md

    def may_have_nulls(self, column: str) -> bool:
        """False only when the statistics of every unit say ``column`` holds no null."""
        assert self.schema is not None
        if column not in self.schema.names:
            raise no_column(column, self.schema)
        got = self._nulls.get(column)
        if got is not None:
            return got
        if column in self._part_names:
            got = any(self._parts.get(os.path.normpath(u.path), {}).get(column) is None
                      for u in self.units)
        else:
            got = False
            for path, units in self._by_file():
                if _is_ipc(path):
                    r = _open_ipc(path)
                    got = any(r.get_batch(u.index).column(column).null_count for u in units)
                else:
                    md = self._footer(path)
                    j = _leaf_index(md, column)
                    for u in units:
                        s = md.row_group(u.index).column(j).statistics if j is not None else None
                        if s is None or not s.has_null_count or s.null_count:
                            got = True
                            break
                if got:
                    break
        self._nulls[column] = got
        return got

    # -- reading ----------------------------------------------------------------
    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = 1 << 20, time: Optional[str] = None
             ) -> Iterator[Union[pa.RecordBatch, Watermark]]:
        """Executor rank's RecordBatches (only ``columns``, in that order, if
        given); with ``time``, also a :class:`Watermark` after each unit when
        the units left promise one."""
        for _, item in self.read_from(rank, n, columns, batch_rows, time):
            yield item

    def read_from(self, rank: int, n: int, columns: Optional[List[str]] = None,
                  batch_rows: int = 1 << 20, time: Optional[str] = None,
                  start: Optional[Sequence[int]] = None
                  ) -> Iterator[Tuple[List[int], Union[pa.RecordBatch, Watermark]]]:
        """What :meth:`read` yields, each item with its *position*: ``[u, k]``
        = the next item is unit u's batch k of this rank's split (after a
        unit's Watermark, ``[u + 1, 0]``). ``start`` resumes at a position:
        earlier units are skipped without being read; in unit u the first k
        batches are skipped (the unit is decoded once). A Watermark already
        given before ``start`` may be given again (a watermark only moves
        forward, so that is harmless)."""
        return self.read_work(self.work(rank, n, time), columns, batch_rows, time, start)

    def read_work(self, work: "Work", columns: Optional[List[str]] = None,
                  batch_rows: int = 1 << 20, time: Optional[str] = None,
                  start: Optional[Sequence[int]] = None
                  ) -> Iterator[Tuple[List[int], Union[pa.RecordBatch, Watermark]]]:
        """Reads ``work`` (``[[unit, batches already read], ...]``, from
        :meth:`work` or :meth:`resplit`) in order, as :meth:`read_from`
        reads a rank's split: each item with its position ``[i, k]`` (the
        next item is batch k of work item i), a Watermark after each item
        when ``time`` is given and the items left promise one (the promise
        of a unit read in part is its whole unit's bound: still a lower
        bound of its rows left)."""
        assert self.schema is not None
        units = [self.units[int(g)] for g, _ in work]
        read_before = [int(k) for _, k in work]
        bounds: List[Bound] = ([self.unit_bounds(time)[int(g)] for g, _ in work]
                                if time is not None else [None] * len(work))
        names = list(columns) if columns else self.schema.names
        for c in names:
            if c not in self.schema.names:
                raise no_column(c, self.schema)
        file_cols = [c for c in names if c not in self._part_names]
        u0, k0 = (int(start[0]), int(start[1])) if start is not None else (0, 0)
        if not (0 <= u0 <= len(units) and k0 >= 0):
            raise InvalidArgument(f"source position {list(start or [])} is outside this "
                                  f"split of {len(units)} units")
        markers = time is not None
        promise = promises(bounds) if markers else []
        last = None
        for i in range(1, u0 + 1 if markers else 1):  # the markers given before the start,
            w = promise[i] if i < len(bounds) else None    # without reading
            if w is not None and (last is None or bound_key(w) > last):
                last = bound_key(w)
        readers = _Readers(getattr(self, "dictionary", ()))
        # the next unit is decoded on a thread while the caller folds this
        # one (decode and fold both release the GIL): a rank's reading costs
        # its fold little more than the wait for the first unit
        ahead = ThreadPoolExecutor(1, thread_name_prefix="slash-read") \
            if len(units) - u0 > 1 else None

        def load(i: int) -> List[pa.RecordBatch]:
            return list(self._read_unit(readers, units[i], names, file_cols, batch_rows))

        try:
            nxt = ahead.submit(load, u0) if ahead is not None and u0 < len(units) else None
            for i in range(u0, len(units)):
                got = nxt.result() if nxt is not None else load(i)
                nxt = ahead.submit(load, i + 1) if ahead is not None and i + 1 < len(units) \
                    else None
                skip = max(k0 if i == u0 else 0, read_before[i])
                for k, b in enumerate(got):
                    if k >= skip:
                        yield [i, k + 1], b
                del got
                if markers and i + 1 < len(bounds):
                    w = promise[i + 1]
                    if w is not None and (last is None or bound_key(w) > last):
                        last = bound_key(w)
                        yield [i + 1, 0], Watermark(w)
        finally:
            if ahead is not None:
                ahead.shutdown(wait=True, cancel_futures=True)
            readers.close()

    def _read_unit(self, readers: _Readers, u: Unit, names: List[str], file_cols: List[str],
                   batch_rows: int) -> Iterator[pa.RecordBatch]:
        # batches of up to a whole (1 Mi-row) row group: each batch costs a
        # few Python calls; 64 Ki-row slices made a 100-key YSB split 11% slower
        r = readers.get(u.path)  # reopening parsed the footer per row group (12%)
        if _is_ipc(u.path):
            t = pa.Table.from_batches([r.get_batch(u.index).select(file_cols)])
            if any(t.schema.field(c).type != self.schema.field(c).type for c in file_cols):
                t = t.cast(pa.schema([self.schema.field(c) for c in file_cols]))  # large_string
        else:
            t = self._read_row_group(readers, r, u, file_cols)
        if len(file_cols) < len(names):  # partition columns: constant per unit
            keys = self._parts.get(os.path.normpath(u.path), {})
            arrays = [t.column(c) if c in file_cols else
                      pa.repeat(scalar(keys.get(c), self.schema.field(c).type), t.num_rows)
                      for c in names]
            t = pa.Table.from_arrays(arrays, schema=pa.schema([self.schema.field(c) for c in names]))
        yield from t.to_batches(max_chunksize=batch_rows)

    def _read_row_group(self, readers: _Readers, r: pq.ParquetFile, u: Unit,
                        cols: List[str]) -> pa.Table:
        """Columns ``cols`` of row group ``u`` as pyarrow reads them: integer
        chunks the core decodes (parquet_chunks), the others by pyarrow."""
        got: Dict[str, pa.Array] = {}
        if readers.chunks is not None:
            md = self._footer(u.path)
            for c in cols:
                j = readers.leaf(u.path, md, c)
                plan = chunk_plan(md, u.index, j, self.schema.field(c).type) \
                    if j is not None else None
                if plan is not None:
                    a = readers.chunks.read(readers.fd(u.path), plan, u.path, c)
                    if a is not None:
                        got[c] = a
        rest = [c for c in cols if c not in got]
        if rest or not got:  # (no column at all: pyarrow's table still has the rows)
            # a whole row group in one call, one thread: 1.6x iter_batches' rate
            t = r.read_row_group(u.index, columns=rest, use_threads=False)
            if any(t.schema.field(c).type != self.schema.field(c).type for c in rest):
                # INT96 instants (see _instants): a zone on the type, the values kept;
                # a large_string column of a file read with string ones (_same_columns)
                t = t.cast(pa.schema([t.schema.field(c).with_type(self.schema.field(c).type)
                                      for c in rest]))
            if not got:
                return t
            got.update((c, t.column(c)) for c in rest)
        fs = r.schema_arrow
        return pa.Table.from_arrays([got[c] for c in cols], schema=pa.schema(
            [t.schema.field(c) if c in rest else fs.field(c) for c in cols], metadata=fs.metadata))


def _only(path: str, schema: pa.Schema, part_fields: List[pa.Field],
          columns: Sequence[str]) -> pa.Schema:
    """File ``path``'s ``columns`` (its own or its partitions'), in that
    order; SchemaError naming the first it lacks."""
    fields = {f.name: f for f in [*part_fields, *schema]}  # a file's own column wins
    missing = [c for c in columns if c not in fields]
    if missing:
        raise SchemaError(f"input file {path!r} has no column {missing[0]!r} (it has "
                          f"{schema.names})")
    return pa.schema([fields[c] for c in columns])


def _plain(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    """Equal names and types, a large string or binary type equal to its
    plain one (pandas writes ``large_string``, Spark ``string``: a reader
    casts to the first file's); nullability and metadata may differ."""
    return a.names == b.names and all(_plain_type(x.type).equals(_plain_type(y.type))
                                      for x, y in zip(a, b))


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t


@register("batches")
class BatchSource(FileSource):
    """A generated input whose batch ``i`` is a function of ``i`` alone:
    ``make(i) -> RecordBatch`` for ``i`` in ``range(batches)`` (picklable and
    deterministic), each of about ``rows_per_batch`` rows. ``bound(i)``, if
    given, is a lower bound of batch i's non-null times (a value of the time
    column's type): the promise a rank's watermark may rest on, as Parquet
    row-group statistics are for files (without it nothing is promised
    until a rank's input ends).

    Each batch is a unit: the split, :meth:`read_work`, :meth:`resplit` and
    a live re-deal (:mod:`slash.live_scale`) work in terms of global batch
    indices, as for files, so a rate-like generator can be re-split to
    another executor count.

    >>> import pyarrow as pa
    >>> src = BatchSource(lambda i: pa.record_batch({"t": [10 * i, 10 * i + 5]}), 3,
    ...                   pa.schema([("t", pa.int64())]), 2, bound=lambda i: 10 * i)
    >>> [b.column(0).to_pylist() for b in src.read(0, 2, time="t")   # dealt by bound
    ...  if isinstance(b, pa.RecordBatch)]
    [[0, 5], [20, 25]]
    """

    bounded = True

    def __init__(self, make: Callable[[int], pa.RecordBatch], batches: int, schema: pa.Schema,
                 rows_per_batch: int, bound: Optional[Callable[[int], Any]] = None,
                 time: Optional[str] = None) -> None:
        if not callable(make):
            raise InvalidArgument("BatchSource needs a callable make(i)")
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
            raise InvalidArgument(f"batches must be an int >= 0, got {batches!r}")
        self.make, self.bound, self.schema, self.time = make, bound, schema, time
        # what names this input (a checkpoint's fingerprint): the maker and its batch count
        self.paths = [f"<batches of {getattr(make, '__module__', '?')}."
                      f"{getattr(make, '__qualname__', type(make).__name__)}: {batches}>"]
        self.units = [Unit(_BATCHES, i, int(rows_per_batch)) for i in range(batches)]
        self._start_caches()

    def _start_caches(self) -> None:
        """The caches FileSource's methods keep, empty: a source of batches has
        no files, footers or partition directories (subclasses call it too)."""
        self._parts: Dict[str, Dict[str, Any]] = {}
        self._part_names: set = set()
        self._bounds: Dict[str, List[Bound]] = {}
        self._footers: Dict[str, Any] = {}
        self._nulls: Dict[str, bool] = {}

    def unit_bounds(self, time: str) -> List[Bound]:
        """Each batch's bound on ``time``: ``bound(i)`` (None without ``bound``)."""
        got = self._bounds.get(time)
        if got is None:
            if time not in self.schema.names:
                raise no_column(time, self.schema)
            t = self.schema.field(time).type
            got = self._bounds[time] = [None if self.bound is None else scalar(self.bound(i), t)
                                        for i in range(len(self.units))]
        return got

    def may_have_nulls(self, column: str) -> bool:
        """The declared schema field's ``nullable`` flag."""
        if column not in self.schema.names:
            raise no_column(column, self.schema)
        return self.schema.field(column).nullable

    def _read_unit(self, readers: Any, u: Unit, names: List[str], file_cols: List[str],
                   batch_rows: int) -> Iterator[pa.RecordBatch]:
        b = self.make(u.index)
        yield from pa.Table.from_batches([b]).select(names).to_batches(max_chunksize=batch_rows)


_BATCHES = "<batches>"
