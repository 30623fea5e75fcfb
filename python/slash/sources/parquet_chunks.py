"""Integer column chunks of Parquet row groups decoded by the C core
(``src/slashcore/pq_read.c``) instead of pyarrow.

:func:`chunk_plan` says from a file's footer whether a column chunk is one
the core decodes (INT32/INT64 values, top level, at most one definition
level, UNCOMPRESSED or SNAPPY, an Arrow type whose values are the stored
integers bit for bit) and where its bytes are. :class:`ChunkReader` decodes
planned chunks into Arrow arrays; it returns None for a chunk the core
refuses (another encoding in a page, a malformed page), and the caller
reads that chunk with pyarrow, which decodes it or raises its own error:
the answer is pyarrow's either way.

Output buffers are reused: a buffer is handed out again only once no Arrow
array refers to it any more (its reference count says so), so a fold that
drops each batch before the next one reuses warm memory instead of having
the kernel zero fresh pages for every row group.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any, List, NamedTuple, Optional

import numpy as np
import pyarrow as pa

from slash import _core

log = logging.getLogger("slash.sources")

#: the Parquet timestamp units pyarrow's metadata names, as Arrow units
_PQ_UNIT = {"MILLIS": "ms", "MICROS": "us", "NANOS": "ns",
            "milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}
_CODECS = {"UNCOMPRESSED": _core.PQ_UNCOMPRESSED, "SNAPPY": _core.PQ_SNAPPY}
_PHYSICAL = {"INT32": (_core.PQ_INT32, 4), "INT64": (_core.PQ_INT64, 8)}

#: SLASH_PQ_READER=0 turns the core's reader off (every chunk read by pyarrow)
ENABLED = os.environ.get("SLASH_PQ_READER", "1") != "0"


class ChunkPlan(NamedTuple):
    """Where a column chunk lies and how the core decodes it."""
    offset: int
    length: int
    physical: int
    codec: int
    max_def: int
    rows: int
    type: pa.DataType
    width: int


def _time_unit(col: Any) -> Optional[str]:
    """The unit of a Parquet INT64 TIMESTAMP column (logical or converted type)."""
    lt = col.logical_type
    if lt is not None and lt.type == "TIMESTAMP":
        return _PQ_UNIT.get(json.loads(lt.to_json()).get("timeUnit"))
    return {"TIMESTAMP_MILLIS": "ms", "TIMESTAMP_MICROS": "us"}.get(col.converted_type)


def _same_bits(t: pa.DataType, col: Any, width: int) -> bool:
    """Whether pyarrow reads Parquet column ``col`` as Arrow type ``t`` by
    taking each stored integer as it is (no unit change, no narrowing)."""
    if pa.types.is_timestamp(t):
        return width == 8 and _time_unit(col) == t.unit
    if pa.types.is_date32(t):
        return width == 4
    if pa.types.is_integer(t):
        lt = col.logical_type
        return t.bit_width == 8 * width and (lt is None or lt.type in ("NONE", "INT"))
    return False


def chunk_plan(md: Any, rg: int, j: int, t: pa.DataType) -> Optional[ChunkPlan]:
    """The plan for column ``j`` of row group ``rg`` of a file with footer
    ``md``, read as Arrow type ``t``; None when the core does not decode it."""
    col = md.schema.column(j)
    phys = _PHYSICAL.get(col.physical_type)
    if phys is None or col.max_repetition_level != 0 or col.max_definition_level > 1 \
            or "." in col.path or not _same_bits(t, col, phys[1]):
        return None
    cc = md.row_group(rg).column(j)
    codec = _CODECS.get(cc.compression)
    if codec is None or cc.file_path:  # (a chunk kept in another file: pyarrow's business)
        return None
    start = cc.data_page_offset
    if cc.has_dictionary_page and cc.dictionary_page_offset is not None \
            and 0 < cc.dictionary_page_offset < start:
        start = cc.dictionary_page_offset
    return ChunkPlan(start, cc.total_compressed_size, phys[0], codec, col.max_definition_level,
                     md.row_group(rg).num_rows, t, phys[1])


class _Pool:
    """Byte buffers handed out again once nothing else refers to them."""

    def __init__(self) -> None:
        self.free: List[np.ndarray] = []

    def take(self, nbytes: int) -> np.ndarray:
        """The smallest free buffer of at least ``nbytes`` bytes, or a new one."""
        best = None
        for a in self.free:
            # references: the list, the loop variable, getrefcount's argument
            # (not enumerate(): the tuple it reuses holds one more)
            if a.nbytes >= nbytes and sys.getrefcount(a) == 3 and \
                    (best is None or a.nbytes < best.nbytes):
                best = a
        if best is not None:
            return best
        a = np.empty(max(nbytes, 64), np.uint8)
        self.free.append(a)
        if len(self.free) > 16:  # arrays kept by the caller: stop tracking the oldest
            self.free.pop(0)
        return a


class ChunkReader:
    """Decodes planned chunks of one file at a time (one per reading thread)."""

    def __init__(self) -> None:
        self.core = _core.ParquetChunkReader()
        self.pool = _Pool()

    def read(self, fd: int, plan: ChunkPlan, path: str, name: str) -> Optional[pa.Array]:
        """The chunk as an Arrow array of ``plan.type``, or None when the core
        refuses it (read it with pyarrow)."""
        n, w = plan.rows, plan.width
        data = self.pool.take(n * w)
        valid = self.pool.take((n + 7) // 8) if plan.max_def else None
        nulls = self.core.read_fd(fd, plan.offset, plan.length, plan.physical, plan.codec,
                                  plan.max_def, n, data, w, valid)
        if nulls < 0:
            log.debug("column %r of %s at %d: read by pyarrow (%s)", name, path, plan.offset,
                      self.core.reason)
            return None
        vbuf = pa.py_buffer(valid)[:(n + 7) // 8] if nulls else None
        return pa.Array.from_buffers(plan.type, n, [vbuf, pa.py_buffer(data)[:n * w]], nulls)
