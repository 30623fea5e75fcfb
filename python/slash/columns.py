"""Arrow columns in the forms the C core takes, and back.

A query's keys, times and values reach the core as int64, float64 or bytes
columns; its results come back in those forms. This module holds both
directions, and nothing about any one query:

* integer, boolean, date and timestamp columns as int64 (``as_int64``) and
  back (``from_int64``), dictionary columns decoded and re-encoded
  (``redict``);
* decimal128 columns (precision <= 18) as their unscaled int64 values and
  back;
* composite (or binary) keys as bytes (``encode_composite``) and back
  (``decode_composite``): per column a flag byte, then 8 big-endian bytes
  or a length byte and the value. Vectorised: no Python per row when
  encoding.

Invariant: every ``X`` and its inverse round-trip a column exactly, nulls
included, in the column's own type.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple, Union

import numpy as np
import pyarrow as pa

from slash.arrow_np import scalar, to_numpy
from slash.compute import pc, sort_indices, take
from slash.errors import SchemaError
from slash.limits import KEY_MAX_BYTES


def one_batch(batch: Union[pa.RecordBatch, pa.Table]) -> pa.RecordBatch:
    if isinstance(batch, pa.Table):
        return batch.combine_chunks().to_batches()[0] if batch.num_rows else \
            pa.RecordBatch.from_pylist([], schema=batch.schema)
    return batch


def is_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_boolean(t)


def is_str(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_bin(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def is_time_like(t: pa.DataType) -> bool:
    """Kept as int64 in the core: timestamps and dates."""
    return pa.types.is_timestamp(t) or pa.types.is_date(t)


def plain_type(t: pa.DataType) -> pa.DataType:
    """A dictionary column's value type; any other type as it is."""
    return t.value_type if pa.types.is_dictionary(t) else t


def int_like(t: pa.DataType) -> bool:
    """A key held as one int64: integers, booleans, dates, timestamps."""
    return is_int(t) or is_time_like(t)


def as_int64(col: pa.Array) -> pa.Array:
    """An integer, boolean, date or timestamp column as int64, nulls kept."""
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.dictionary_decode()
        t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_date64(t) or t == pa.uint64():
        return col.view(pa.int64())  # uint64: the same 64 bits, as a key needs no order
    if pa.types.is_date32(t):
        return col.view(pa.int32()).cast(pa.int64())
    if t == pa.int64():
        return col
    try:
        return col.cast(pa.int64())
    except pa.ArrowInvalid as e:
        raise SchemaError(f"{t} values do not fit int64: {e}") from None


def from_int64(col: pa.Array, t: pa.DataType) -> pa.Array:
    """The inverse of as_int64."""
    t = plain_type(t)
    if pa.types.is_timestamp(t) or pa.types.is_date64(t) or t == pa.uint64():
        return col.view(t)
    if pa.types.is_date32(t):
        return col.cast(pa.int32()).view(t)
    return col if t == pa.int64() else col.cast(t)


def redict(col: pa.Array, t: pa.DataType) -> pa.Array:
    """A decoded key column back in a dictionary type where the input had one."""
    if not pa.types.is_dictionary(t):
        return col
    return col.dictionary_encode().cast(t)


def decimal_unscaled(col: pa.Array) -> pa.Array:
    """A decimal128 column (precision <= 18) as its unscaled int64 values."""
    n, off = len(col), col.offset
    words = np.frombuffer(col.buffers()[1], np.int64, count=2 * (off + n))[2 * off::2]
    return pa.array(np.ascontiguousarray(words), pa.int64(),
                    mask=col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None)


def decimal_from_unscaled(col: pa.Array, t: pa.DataType) -> pa.Array:
    """int64 unscaled values (nulls kept) as a decimal128 column of type t."""
    v = col.to_numpy(zero_copy_only=False) if not col.null_count else \
        pc.fill_null(col, 0).to_numpy(zero_copy_only=False)
    words = np.empty((len(v), 2), np.int64)
    words[:, 0] = v
    words[:, 1] = np.where(v < 0, -1, 0)
    validity = col.buffers()[0] if col.null_count else None
    if validity is not None and col.offset:
        validity = pa.array(col.is_valid().to_numpy(zero_copy_only=False)).buffers()[1]
    return pa.Array.from_buffers(t, len(v), [validity, pa.py_buffer(words.tobytes())])


def sorted_table(table: pa.Table, by: List[str]) -> pa.Table:
    """``table`` in ascending order of the columns ``by`` (dictionary columns
    by their values: Arrow sorts no dictionaries)."""
    if not table.num_rows:
        return table
    keys = {c: (table.column(c).cast(table.schema.field(c).type.value_type)
                if pa.types.is_dictionary(table.schema.field(c).type) else table.column(c))
            for c in by}
    return take(table, sort_indices(pa.table(keys), [(c, "ascending") for c in by]))


def _spread(lens: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """For variable-length values of ``lens`` bytes laid end to end: each
    byte's row and its position within the row's value."""
    total = int(lens.sum())
    rows = np.repeat(np.arange(len(lens)), lens)
    within = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    return rows, within


def binary_buffers(col: pa.Array) -> Tuple[np.ndarray, np.ndarray]:
    """(int64 offsets of len(col) + 1, uint8 data) of a string/binary column."""
    bcol = col.cast(pa.large_binary())
    n = len(bcol)
    offs = np.frombuffer(bcol.buffers()[1], np.int64, count=bcol.offset + n + 1)[bcol.offset:]
    data = np.frombuffer(bcol.buffers()[2], np.uint8) if bcol.buffers()[2] is not None \
        else np.zeros(0, np.uint8)
    return offs, data


def encode_composite(cols: List[pa.Array], names: List[str],
                      key_max: int = KEY_MAX_BYTES) -> pa.Array:
    """Composite (or binary) keys as bytes: per column a flag byte (0: null,
    1: a value), then an int64 as 8 big-endian bytes, or a string's length
    (one byte) and its bytes; at most ``key_max`` bytes. Vectorised: no
    Python per row."""
    n = len(cols[0]) if cols else 0
    widths = np.zeros(n, np.int64)
    parts: List[Tuple[str, Any]] = []
    for col, name in zip(cols, names):
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        valid = to_numpy(col.is_valid()) if col.null_count else np.ones(n, bool)
        if int_like(col.type):
            try:
                v = as_int64(col)
            except SchemaError as e:
                raise SchemaError(f"key column {name!r}: {e}") from None
            v = to_numpy(pc.fill_null(v, scalar(0, v.type))).astype(np.int64)
            b = v.astype(">i8").view(np.uint8).reshape(n, 8)
            parts.append(("fixed", (valid, b)))
            widths += 1 + 8 * valid
        else:
            offs, data = binary_buffers(col)
            lens = np.diff(offs) * valid
            if n and lens.max() > min(key_max, 255):  # its length takes one byte
                raise SchemaError(f"key column {name!r}: a value is longer than "
                                  f"{min(key_max, 255)} bytes")
            parts.append(("var", (valid, offs, data, lens)))
            widths += 1 + (1 + lens) * valid
    if n and widths.max() > key_max:
        raise SchemaError(f"composite key {names} is {int(widths.max())} bytes for some records; "
                          f"at most {key_max} are allowed")
    out_offs = np.zeros(n + 1, np.int64)
    np.cumsum(widths, out=out_offs[1:])
    buf = np.zeros(int(out_offs[-1]), np.uint8)
    pos = out_offs[:-1].copy()
    for kind, p in parts:
        valid = p[0]
        buf[pos] = valid
        pos += 1
        if kind == "fixed":
            b = p[1]
            vi = np.flatnonzero(valid)
            for j in range(8):
                buf[pos[vi] + j] = b[vi, j]
            pos += 8 * valid
        else:
            _, offs, data, lens = p
            vi = np.flatnonzero(valid)
            buf[pos[vi]] = lens[vi]
            pos += valid
            if lens.any():
                rows, within = _spread(lens)
                buf[pos[rows] + within] = data[offs[:-1][rows] + within]
            pos += lens
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(out_offs),
                                                        pa.py_buffer(buf)]).cast(pa.binary())


def decode_composite(key_col: pa.Array, fields: List[Tuple[str, pa.DataType]]) -> Dict[str, pa.Array]:
    """The inverse of encode_composite."""
    decoded: List[List[Any]] = [[] for _ in fields]
    for raw in key_col.to_pylist():
        pos = 0
        for j, (_, t) in enumerate(fields):
            flag = raw[pos]
            pos += 1
            if not flag:
                decoded[j].append(None)
            elif int_like(plain_type(t)):
                decoded[j].append(int.from_bytes(raw[pos:pos + 8], "big", signed=True))
                pos += 8
            else:
                ln = raw[pos]
                decoded[j].append(raw[pos + 1:pos + 1 + ln])
                pos += 1 + ln
    cols: Dict[str, pa.Array] = {}
    for j, (k, t) in enumerate(fields):
        pt = plain_type(t)
        if int_like(pt):
            cols[k] = from_int64(pa.array(decoded[j], pa.int64()), pt)
        elif is_str(pt):
            cols[k] = pa.array([None if b is None else b.decode() for b in decoded[j]], pt)
        else:
            cols[k] = pa.array(decoded[j], pt)
    return cols
