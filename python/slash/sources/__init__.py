"""Sources: where executors read their input, split without a shuffle.

* :class:`FileSource`: Parquet and Arrow IPC files, or directories of them
  (Hive-style ``day=2013-01-01/`` partition directories included), split by
  file and row group (Parquet) or record batch (IPC) into *units*. Every file
  must have the same schema up to nullability and metadata; a file that differs
  is named in the error, before any work starts.
* :class:`TableSource`: an in-memory Arrow table, split into slices.
* :class:`GeneratorSource`: a picklable ``make(rank, n) -> iterable of
  RecordBatch (and Watermark)`` with a declared schema (the benchmarks'
  generators).

Each executor calls ``read(rank, n, columns, time=...)`` and reads its split
itself; rows never pass through a coordinator. Every source here is bounded.

Where they live: files and generated batches in :mod:`slash.sources.files`, a
table and a generator in :mod:`slash.sources.memory`, units and their dealing
in :mod:`slash.sources.units`, a Spark stream's rate and directory sources in
:mod:`slash.sources.streams`, what every source says of itself (the
contract, and the registry of source kinds) in :mod:`slash.sources.contract`.
This module names them all and holds what the
engine asks of any source: its items with positions (:func:`read_from`), where
its watermark comes from, what an output may not overwrite, what stamps its
files, and any input as a source (:func:`as_source`).

The split, given a time column (bounded inputs, any layout): all units are
sorted by (no time statistics first, then minimum time, then path, then index)
and dealt greedily, each to the rank with the fewest rows so far (ties: the
lowest rank); each rank reads its units in that order. Every rank computes the
same assignment by itself. With ``read(..., time=COL)`` a rank yields, after
each unit it finishes, a :class:`Watermark` promising the smallest minimum of
COL over the units it has left, when all of those have statistics. That
promise, not the order rows arrive in, is what a bounded executor's watermark
may rest on: a Spark directory whose part files each span the whole time range
loses no record. Without a time column, units keep file / row-group order and
each rank reads a contiguous run of about rows / n rows.

Invariant of every ``read(..., time=COL)``: no batch yielded after a
``Watermark(v)`` holds a non-null COL value smaller than ``v``.

The protocol's two attributes that tell the engine how to treat a source
(:func:`watermarks_from_source` reads them):

* ``bounded`` (default True): the input ends; an unbounded one is a stream
  (its windows' latency is reported, a late record is the stream's, not a
  sign of wrong statistics).
* ``source_watermarks`` (default False): the executor's watermark moves by
  the source's Watermark markers alone (``read`` is given ``time=``), not by
  the largest time pushed minus the group's lateness. Every bounded source
  has this implicitly; an unbounded one declares it when it knows more than
  the order its rows arrive in (:class:`slash.kafka.KafkaStream`: per
  partition watermarks with an idle timeout).
"""
from __future__ import annotations

import fnmatch
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import pyarrow as pa

from slash.errors import InvalidArgument
from slash.sources.contract import (Resplittable, StreamRead, StreamSource, describe, global_units,
                                    register, registered, resplittable, source_type,
                                    why_not_resplit)
from slash.sources.files import BatchSource, FileSource
from slash.sources.joined import JoinedFileSource
from slash.sources.memory import GeneratorSource, TableSource
from slash.sources.streams import DirectorySource, RateSource
from slash.sources.union import UnionFileSource
from slash.sources.units import ALL_NULL, Position, Unit, Watermark, Work, promises

Source = Union[FileSource, TableSource, GeneratorSource]


def watermarks_from_source(source: Any) -> bool:
    """Whether an executor over ``source`` takes its watermark from the
    source's Watermark markers alone (see the module doc): a bounded
    source's, or one with ``source_watermarks = True``."""
    return bool(getattr(source, "bounded", True)) or bool(getattr(source, "source_watermarks",
                                                                   False))


def read_from(source: Any, rank: int, n: int, columns: Optional[List[str]],
              time: Optional[str], start: Optional[Position] = None,
              wait: Optional[Callable[[float], bool]] = None
              ) -> Iterator[Tuple[Position, Union[pa.RecordBatch, Watermark]]]:
    """``source.read(rank, n, columns[, time=time])``'s items, each with the
    position after it (JSON-able), resuming at ``start``.

    A :class:`FileSource` skips the units before ``start`` unread (see
    :meth:`FileSource.read_from`); another source with a ``read_from`` of its
    own (:class:`slash.kafka.KafkaStream`: offsets per partition) resumes by
    it. Any other source's position is the count
    of items (batches and Watermarks) read so far, and resuming reads again
    and drops that many: a :class:`TableSource`'s slices cost nothing, and a
    :class:`GeneratorSource` regenerates, which is exact because ``make`` is
    deterministic by contract. ``time`` is passed only to a source whose
    ``read`` takes it; ``wait`` (what to do while the input is quiet, see
    :meth:`slash.run.rank.RankLoop.source_kw`) only to a source with a
    ``read_from`` of its own.
    """
    if isinstance(source, FileSource):
        yield from source.read_from(rank, n, columns, time=time,
                                    start=start if isinstance(start, (list, tuple)) else None)
        return
    if not isinstance(source, (TableSource, GeneratorSource)) and \
            callable(getattr(source, "read_from", None)):  # positions of its own (a Kafka stream's offsets)
        kw = {} if wait is None else {"wait": wait}
        yield from source.read_from(rank, n, columns, time=time, start=start, **kw)
        return
    if start is not None and not isinstance(start, int):
        raise InvalidArgument(f"source position {start!r} is not an item count")
    if time is not None:
        items = source.read(rank, n, columns, time=time)
    else:
        items = source.read(rank, n, columns)
    pos = 0
    for item in items:
        pos += 1
        if start is None or pos > start:
            yield pos, item


def malformed_records(source: Any) -> int:
    """Malformed values ``source`` (or each source of a join's pair) skipped
    in this process: a Kafka topic's (``KafkaSource.malformed``); 0 for a
    source that parses nothing."""
    sources = source if isinstance(source, (tuple, list)) else (source,)
    return sum(int(getattr(s, "malformed", 0) or 0) for s in sources)


def output_overlaps_input(output: str, source: Any) -> Optional[str]:
    """The input (file, directory or glob pattern as given) that ``output``
    would overwrite or land in, or None. A file source's output may not be
    one of its input files, lie inside one of its input directories, or
    match one of its glob patterns (it would be read as input next time)."""
    sources = source if isinstance(source, (tuple, list)) else [source]
    out = os.path.realpath(output)
    for src in sources:
        if not isinstance(src, FileSource) or isinstance(src, BatchSource):  # batches: no files
            continue
        for given, f in [(g, None) for g in src.inputs] + [(f, f) for f in src.paths]:
            if any(ch in given for ch in "*?[") and f is None:
                pat = os.path.abspath(given).split(os.sep)
                parts = os.path.abspath(output).split(os.sep)
                if len(pat) == len(parts) and all(fnmatch.fnmatchcase(a, b)
                                                  for a, b in zip(parts, pat)):
                    return given
                continue
            real = os.path.realpath(given)
            if out == real or (os.path.isdir(real) and out.startswith(real.rstrip(os.sep) + os.sep)):
                return given
    return None


def input_stamp(source: Any) -> Dict[str, List[int]]:
    """Each input file of a file source (or of a join's two) as its absolute
    path -> [size, modification time in ns]: what tells a finished run's
    checkpoint directory that its input changed since (same names and row
    counts, new contents). Empty for sources that are not files."""
    out: Dict[str, List[int]] = {}
    for src in source if isinstance(source, (tuple, list)) else [source]:
        if isinstance(src, FileSource) and not isinstance(src, BatchSource):  # batches: no files
            for p in src.paths:
                st = os.stat(p)
                out[os.path.abspath(p)] = [st.st_size, st.st_mtime_ns]
    return out


def as_source(obj: Any) -> Source:
    """A path, list of paths, pyarrow.Table or Source as a Source: any object
    with a ``schema`` (pyarrow.Schema) and ``read(rank, n, columns, ...)``
    (e.g. :class:`slash.kafka.KafkaStream`) is one."""
    if isinstance(obj, (FileSource, TableSource, GeneratorSource)):
        return obj
    if callable(getattr(obj, "read", None)) and isinstance(getattr(obj, "schema", None), pa.Schema):
        return obj
    if isinstance(obj, pa.Table):
        return TableSource(obj)
    if isinstance(obj, (str, os.PathLike)) or (isinstance(obj, (list, tuple)) and obj and
                                               all(isinstance(p, (str, os.PathLike)) for p in obj)):
        return FileSource(obj)
    raise InvalidArgument(f"source must be file path(s), a pyarrow.Table or a Source, got {type(obj).__name__}")


__all__ = ["ALL_NULL", "BatchSource", "DirectorySource", "FileSource", "GeneratorSource", "JoinedFileSource",
           "Position", "RateSource", "Resplittable", "Source", "StreamRead", "StreamSource",
           "TableSource", "UnionFileSource", "Unit", "Watermark", "Work", "as_source", "describe", "global_units",
           "input_stamp", "malformed_records", "output_overlaps_input", "promises", "read_from",
           "register", "registered", "resplittable", "source_type", "watermarks_from_source",
           "why_not_resplit"]
