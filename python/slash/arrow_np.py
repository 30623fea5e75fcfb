"""Arrow arrays and scalars from NumPy arrays and Python values, built from
buffers, without pyarrow's pandas probe.

``pa.array(x)`` and ``pa.scalar(x)`` of anything that is not already Arrow
first ask pyarrow's pandas shim whether ``x`` is a pandas object, and the
shim imports pandas (0.3-0.5 s of CPU, ~60 MB) the first time it is asked.
An executor reads, folds and emits with NumPy and Arrow alone: its
per-batch and per-result code builds arrays here instead, so no executor
process imports pandas (``tests/test_rank_imports.py``).

Types taken: fixed-width integers, floats, booleans, timestamps, dates,
durations (from their integer storage), strings and binaries (from Python
values only). Anything else is handed to ``pa.array`` as before.

>>> import numpy as np
>>> from_numpy(np.arange(3), pa.int64()).to_pylist()
[0, 1, 2]
>>> from_numpy(np.array([1.5, 2.0]), valid=np.array([True, False])).to_pylist()
[1.5, None]
>>> scalar(7, pa.timestamp("ms")).value, scalar("view", pa.string()).as_py()
(7, 'view')
>>> from_pylist([3, None], pa.int32()).to_pylist()
[3, None]
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa

_NP_TO_ARROW = {np.dtype(np.int8): pa.int8(), np.dtype(np.int16): pa.int16(),
                np.dtype(np.int32): pa.int32(), np.dtype(np.int64): pa.int64(),
                np.dtype(np.uint8): pa.uint8(), np.dtype(np.uint16): pa.uint16(),
                np.dtype(np.uint32): pa.uint32(), np.dtype(np.uint64): pa.uint64(),
                np.dtype(np.float32): pa.float32(), np.dtype(np.float64): pa.float64(),
                np.dtype(np.bool_): pa.bool_()}


def _storage(t: pa.DataType) -> Optional[np.dtype]:
    """The NumPy dtype of a fixed-width Arrow type's values, or None."""
    if pa.types.is_boolean(t):
        return np.dtype(np.bool_)
    if pa.types.is_floating(t):
        return np.dtype({16: np.float16, 32: np.float32, 64: np.float64}[t.bit_width])
    if pa.types.is_integer(t):
        return np.dtype(f"{'i' if pa.types.is_signed_integer(t) else 'u'}{t.bit_width // 8}")
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date64(t) \
            or pa.types.is_time64(t):
        return np.dtype(np.int64)
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return np.dtype(np.int32)
    return None


def _fits(v: Any, want: np.dtype) -> bool:
    """Whether NumPy stores ``v`` in ``want`` as pyarrow would convert it
    (no bool as a number, no float truncated to an integer)."""
    if want == np.bool_:
        return isinstance(v, (bool, np.bool_))
    if isinstance(v, (bool, np.bool_)):
        return False
    if want.kind in "iu":
        return isinstance(v, (int, np.integer)) and np.iinfo(want).min <= v <= np.iinfo(want).max
    return isinstance(v, (int, float, np.integer, np.floating))


def _bits(mask: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(np.ascontiguousarray(mask, dtype=np.bool_), bitorder="little"))


def from_numpy(values: np.ndarray, t: Optional[pa.DataType] = None,
               valid: Optional[np.ndarray] = None) -> pa.Array:
    """``values`` (1-d) as an Arrow array of type ``t`` (default: the
    dtype's own), ``valid`` (bool per row, optional) marking non-null rows;
    what ``pa.array(values, t, mask=~valid)`` gives, for the fixed-width
    types. Values are cast (NumPy ``astype``) to ``t``'s storage when their
    dtype differs; a type without a fixed-width storage goes to ``pa.array``."""
    values = np.asarray(values)
    if t is None:
        t = _NP_TO_ARROW.get(values.dtype)
        if t is None:
            return pa.array(values, mask=None if valid is None else ~np.asarray(valid, np.bool_))
    want = _storage(t)
    if want is None or values.ndim != 1:
        return pa.array(values, t, mask=None if valid is None else ~np.asarray(valid, np.bool_))
    n = len(values)
    nulls = 0
    validity = None
    if valid is not None:
        valid = np.asarray(valid, np.bool_)
        nulls = n - int(np.count_nonzero(valid))
        if nulls:
            validity = _bits(valid)
    if want == np.bool_:
        data = _bits(values.astype(np.bool_, copy=False))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values, dtype=want))
    return pa.Array.from_buffers(t, n, [validity, data], null_count=nulls)


def from_pylist(values: Sequence[Any], t: pa.DataType) -> pa.Array:
    """Python values (None = null) as an Arrow array of type ``t``: the
    fixed-width types above, strings and binaries; others go to ``pa.array``.
    Values of a temporal type are its integer storage (ms since the epoch
    for ``timestamp("ms")``, days for ``date32``)."""
    valid = np.array([v is not None for v in values], np.bool_)
    want = _storage(t)
    if want is not None and not all(v is None or _fits(v, want) for v in values):
        return pa.array(list(values), t)  # pyarrow's own conversion and errors
    if want is not None:
        filled = [0 if v is None else v for v in values]
        return from_numpy(np.array(filled, dtype=want), t, valid)
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) \
            or pa.types.is_large_binary(t):
        raw = [b"" if v is None else (v.encode() if isinstance(v, str) else bytes(v))
               for v in values]
        big = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        offsets = np.zeros(len(raw) + 1, np.int64 if big else np.int32)
        np.cumsum([len(r) for r in raw], out=offsets[1:])
        nulls = len(values) - int(np.count_nonzero(valid))
        return pa.Array.from_buffers(t, len(raw), [_bits(valid) if nulls else None,
                                                   pa.py_buffer(offsets),
                                                   pa.py_buffer(b"".join(raw))],
                                     null_count=nulls)
    return pa.array(list(values), t)


def scalar(value: Any, t: pa.DataType) -> pa.Scalar:
    """``value`` (a Python value as :func:`from_pylist` takes it, or None)
    as a pyarrow Scalar of type ``t``."""
    return from_pylist([value], t)[0]


def to_numpy(arr: Any) -> np.ndarray:
    """The values of a fixed-width Arrow array (or one-chunk ChunkedArray)
    as NumPy: a zero-copy view, booleans unpacked (a copy). The slots of
    null rows hold whatever the buffer holds: fill nulls first where they
    matter. Other types go to ``Array.to_numpy``."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_dictionary(t):
        return arr.to_numpy(zero_copy_only=False)
    want = _storage(t)
    if want is None:
        return arr.to_numpy(zero_copy_only=False)
    n, off = len(arr), arr.offset
    buf = arr.buffers()[1]
    if want == np.bool_:
        if buf is None:
            return np.zeros(n, np.bool_)
        bits = np.frombuffer(buf, np.uint8)
        return np.unpackbits(bits, count=off + n, bitorder="little")[off:].view(np.bool_)
    if buf is None:
        return np.zeros(n, want)
    return np.frombuffer(buf, want, count=off + n)[off:]
