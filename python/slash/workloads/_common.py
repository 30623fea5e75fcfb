"""Shared plumbing of the workload generators: argument checks that name the
parameter, the skew spec, chunked iteration, and NumPy -> Arrow wrapping
without copies."""
from __future__ import annotations

import math
from typing import Callable, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from slash.errors import InvalidArgument

#: the largest event index any generator accepts (the core's limit)
MAX_EVENTS = 1 << 62
DEFAULT_BATCH = 1 << 20


def check_int(name: str, value: object, lo: int, hi: int = MAX_EVENTS) -> int:
    """Returns value as int if it is an integer in [lo, hi]; else InvalidArgument naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if not lo <= v <= hi:
        raise InvalidArgument(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def check_stream(records: int, start: int, batch_size: int, seed: int, rate: int,
                 base_ms: int) -> Tuple[int, int, int, int, int, int]:
    """The arguments every generator shares, checked and as ints, in order."""
    records = check_int("records", records, 0)
    return (records, check_int("start", start, 0, MAX_EVENTS - records),
            check_int("batch_size", batch_size, 1, 1 << 31),
            check_int("seed", seed, 0, (1 << 64) - 1),
            check_int("rate", rate, 1, (1 << 63) - 1),
            check_int("base_ms", base_ms, 0, (1 << 63) - 1))


def parse_skew(skew: str) -> Tuple[str, float]:
    """``"uniform"`` or ``"zipf:S"`` (S > 0) to ``(dist, exponent)``.

    >>> parse_skew("zipf:0.8")
    ('zipf', 0.8)
    """
    if not isinstance(skew, str):
        raise InvalidArgument(f"skew must be 'uniform' or 'zipf:S', got {skew!r}")
    s = skew.strip().lower()
    if s == "uniform":
        return "uniform", 0.0
    kind, sep, arg = s.partition(":")
    if kind == "zipf" and sep:
        try:
            e = float(arg)
        except ValueError:
            e = float("nan")
        if math.isfinite(e) and 0.0 < e <= 100.0:
            return "zipf", e
        raise InvalidArgument(f"skew 'zipf:S' needs an exponent 0 < S <= 100 (the paper sweeps "
                              f"0.2 to 2.0), got {skew!r}")
    raise InvalidArgument(f"skew must be 'uniform' or 'zipf:S', got {skew!r}")


def check_columns(name: str, columns: Optional[Sequence[str]], known: Sequence[str]) -> Tuple[str, ...]:
    """None -> all known columns; otherwise each must be known (order kept as in known)."""
    if columns is None:
        return tuple(known)
    if isinstance(columns, str):
        raise InvalidArgument(f"{name} must be a sequence of column names, not a string")
    unknown = [c for c in columns if c not in known]
    if unknown or not columns:
        raise InvalidArgument(f"{name}: unknown or no columns {unknown or list(columns)}; "
                              f"choose from {list(known)}")
    return tuple(c for c in known if c in columns)


def chunks(start: int, count: int, batch_size: int) -> Iterator[Tuple[int, int]]:
    """(first, n) pieces covering [start, start + count)."""
    if count == 0:
        yield start, 0
        return
    end = start + count
    while start < end:
        n = min(batch_size, end - start)
        yield start, n
        start += n


def uuid_array(flat: np.ndarray) -> pa.Array:
    """n * 16 uint8 bytes as a fixed_size_binary(16) array, without a copy."""
    n = flat.size // 16
    return pa.Array.from_buffers(pa.binary(16), n, [None, pa.py_buffer(flat)])


def string_array(pair: Tuple[np.ndarray, np.ndarray]) -> pa.Array:
    """(int32 offsets, data) in Arrow layout as a string array, without a copy."""
    offsets, data = pair
    return pa.Array.from_buffers(pa.string(), offsets.size - 1,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def dictionary_array(codes: np.ndarray, values: Sequence[str]) -> pa.Array:
    """int8 codes over a small vocabulary as a dictionary array (codes not copied)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int8()),
                                          pa.array(values, type=pa.string()))


def to_batch(cols: Dict[str, object], order: Sequence[str],
             convert: Dict[str, Callable[[object], pa.Array]]) -> pa.RecordBatch:
    """Columns by name to a RecordBatch in `order`, converting special columns."""
    arrays, names = [], []
    for name in order:
        if name not in cols:
            continue
        v = cols[name]
        arrays.append(convert[name](v) if name in convert else pa.array(v))
        names.append(name)
    # every generator fills every row: declared non-null, so a Parquet reader
    # decodes no definition levels (a third of YSB's read time when nullable)
    schema = pa.schema([pa.field(n, a.type, nullable=False) for n, a in zip(names, arrays)])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def concat(batches: Iterator[pa.RecordBatch]) -> pa.Table:
    """All batches as one table (there is always at least one, maybe empty)."""
    return pa.Table.from_batches(list(batches))
