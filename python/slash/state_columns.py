"""A state's columns on their way in and out of the C core.

In: :func:`prepare_columns` checks one batch's keys, times and values
against a :class:`slash.state_config.StateConfig` and converts them to the
core's arrays (int64 or float64, C-contiguous; string keys as offsets and
bytes; sketches' values hashed); an error names the column. Out:
:func:`result_batch` turns the core's emitted columns into the user's Arrow
batch (nulls where a window saw no non-null value, averages divided).

Invariant: a null never reaches the core as a value it could mistake for
data: a null key becomes NULL_KEY_INT / NULL_KEY_BYTES (a real key equal to
it is refused), a null value the identity of its aggregate with its
validity counted apart, a null time a record in no window.
"""
from __future__ import annotations

import sys
from typing import Any, List, Mapping, Optional, Tuple, Union

import numpy as np
import pyarrow as pa

from slash import _core
from slash.arrow_np import from_numpy, scalar, to_numpy
from slash.compute import cast, pc
from slash.errors import OutOfRange, SchemaError
from slash.limits import KEY_MAX_BYTES
from slash.state_config import (AT_TIME_KINDS, COUNT_DISTINCT_MAX, NULL_KEY_BYTES, NULL_KEY_INT,
                                SKETCH_ANY_TYPE, CoreSlot, StateConfig)


_I64 = np.iinfo(np.int64)


# --- input columns --------------------------------------------------------

def _to_arrow_or_numpy(obj: Any, name: str) -> Union[pa.Array, np.ndarray]:
    if isinstance(obj, pa.ChunkedArray):
        obj = obj.combine_chunks()
    if isinstance(obj, (pa.Array, np.ndarray)):
        return obj
    if obj is None:
        raise SchemaError(f"column {name!r} is missing")
    try:
        return pa.array(obj)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        raise SchemaError(f"column {name!r}: cannot read it as an array ({e})") from None


def as_numeric(obj: Any, name: str, dtype: str, fill: Any = None, unit: str = "ms") -> np.ndarray:
    """A C-contiguous int64 or float64 NumPy array; safe casts only. Nulls
    are an error unless ``fill`` is given (they become ``fill``).
    Timestamps must be in ``unit``."""
    arr = _to_arrow_or_numpy(obj, name)
    if isinstance(arr, pa.Array):
        t = arr.type
        if pa.types.is_timestamp(t) or pa.types.is_date64(t) or pa.types.is_duration(t):
            if dtype != "int64":
                raise SchemaError(f"column {name!r}: {t} where {dtype} is expected")
            if pa.types.is_timestamp(t) and t.unit != unit:
                raise SchemaError(f"column {name!r}: timestamps must be in {unit}, got {t}")
            arr = arr.view(pa.int64())
        if arr.null_count:
            if fill is None:
                raise SchemaError(f"column {name!r} has {arr.null_count} null value(s)")
            try:
                arr = arr.cast(pa.int64() if dtype == "int64" else pa.float64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(f"column {name!r}: {arr.type} does not fit {dtype} ({e})") from None
            arr = pc.fill_null(arr, scalar(fill, arr.type))
        arr = to_numpy(arr)
    # numpy.ma only if the caller's program loaded it (a masked array cannot exist
    # otherwise): np.ma on its own would import it, ~15 ms of the first batch
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(arr, ma.MaskedArray) and ma.is_masked(arr):
        raise SchemaError(f"column {name!r} has masked (null) values")
    arr = np.asarray(arr)
    if arr.ndim != 1:
        raise SchemaError(f"column {name!r} must be one-dimensional, got shape {arr.shape}")
    want = np.dtype(dtype)
    if arr.dtype != want:
        if arr.dtype.kind not in "iub" and not (arr.dtype.kind == "f" and want.kind == "f"):
            raise SchemaError(f"column {name!r} has dtype {arr.dtype}, expected {dtype}")
        if not np.can_cast(arr.dtype, want, "safe"):
            if arr.dtype == np.uint64 and want == np.int64 and (not len(arr) or arr.max() <= _I64.max):
                return np.ascontiguousarray(arr.astype(want))
            raise SchemaError(f"column {name!r} has dtype {arr.dtype}, which does not fit "
                              f"{dtype} exactly")
        arr = arr.astype(want)
    return np.ascontiguousarray(arr)


def _times(obj: Any, cfg: StateConfig) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Event times as int64 in the config's unit, and a mask of the null
    times (None when there are none): such records are in no window."""
    arr = _to_arrow_or_numpy(obj, "times")
    nulls = None
    if isinstance(arr, pa.Array) and arr.null_count:
        nulls = to_numpy(arr.is_null())
        return as_numeric(arr, "times", "int64", fill=0, unit=cfg.time_unit), nulls
    return as_numeric(arr, "times", "int64", unit=cfg.time_unit), nulls


def _key_label(cfg: StateConfig) -> str:
    """How errors name the keys: the query's key column(s), else 'keys'."""
    names = list(cfg.key_names)
    if len(names) == 1:
        return f"key column {names[0]!r}"
    return f"composite key {names}" if names else "column 'keys'"


def _int_keys(obj: Any, cfg: StateConfig) -> np.ndarray:
    """int64 keys; nulls become NULL_KEY_INT while keys may be null."""
    arr = _to_arrow_or_numpy(obj, "keys")
    if isinstance(arr, pa.Array) and arr.null_count:
        if not cfg.key_nullable:
            raise SchemaError(f"{_key_label(cfg)} has {arr.null_count} null value(s) and the "
                              "state was configured with key_nullable=False")
        out = as_numeric(arr, "keys", "int64", fill=0)
        _check_reserved(out, arr, cfg)
        return np.where(to_numpy(arr.is_null()), NULL_KEY_INT, out)
    out = as_numeric(arr, "keys", "int64")
    if cfg.key_nullable and out.dtype == np.int64 and len(out) and _may_hold_min(arr):
        _check_reserved(out, arr, cfg)
    return out


def _may_hold_min(arr: Any) -> bool:
    """Only 64-bit integers (or untyped input) can hold NULL_KEY_INT."""
    t = arr.type if isinstance(arr, pa.Array) else None
    if t is None:
        return np.asarray(arr).dtype.itemsize >= 8
    return t in (pa.int64(), pa.uint64()) or pa.types.is_timestamp(t) or pa.types.is_date64(t)


def _check_reserved(out: np.ndarray, arr: Any, cfg: StateConfig) -> None:
    valid = out if not (isinstance(arr, pa.Array) and arr.null_count) else \
        out[to_numpy(arr.is_valid())]
    if len(valid) and valid.min() == NULL_KEY_INT:
        fix = ("give the input a non-nullable key column (its schema or statistics then rule "
               "nulls out) or map that value to another" if cfg.key_names else
               "declare the key non-null (key_nullable=False) or use another value")
        raise SchemaError(f"{_key_label(cfg)} holds the value {NULL_KEY_INT}, which stands for a "
                          f"null key while the key may be null; {fix}")


def byte_keys(obj: Any, name: str, nullable: bool = False,
               is_string: bool = True, label: Optional[str] = None,
               key_max: int = KEY_MAX_BYTES) -> Tuple[np.ndarray, np.ndarray, int]:
    """(offsets int32|int64, data uint8, n) of a string/binary column; nulls
    of a string column become NULL_KEY_BYTES when ``nullable``. Errors name
    ``label`` (default ``column 'name'``)."""
    arr = _to_arrow_or_numpy(obj, name)
    if isinstance(arr, np.ndarray):
        if arr.dtype.kind not in "OUS":
            raise SchemaError(f"column {name!r} has dtype {arr.dtype}, expected strings or bytes")
        try:
            arr = pa.array(arr, from_pandas=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SchemaError(f"column {name!r}: {e}") from None
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = arr.type
    if arr.null_count:
        if not nullable:
            raise SchemaError(f"column {name!r} has {arr.null_count} null value(s)")
        if not is_string:
            raise SchemaError(f"column {name!r} has {arr.null_count} null value(s): binary keys "
                              "cannot be null in the state backend (slash.query.Query encodes "
                              "them)")
        if pa.types.is_string(t) or pa.types.is_binary(t):
            arr = pc.fill_null(arr.cast(pa.binary()), scalar(NULL_KEY_BYTES, pa.binary()))
        elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            arr = pc.fill_null(arr.cast(pa.large_binary()),
                               scalar(NULL_KEY_BYTES, pa.large_binary()))
        t = arr.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        otype = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        otype = np.int64
    else:
        raise SchemaError(f"column {name!r} has type {t}, expected string or binary keys")
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=otype, count=arr.offset + n + 1)[arr.offset:]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    if n and int(np.max(np.diff(offsets))) > key_max:
        row = int(np.argmax(np.diff(offsets) > key_max))
        raise SchemaError(f"{label or f'column {name!r}'}: the value at row {row} is "
                          f"{int(np.diff(offsets)[row])} bytes, longer than {key_max} bytes "
                          "(the most a key holds)")
    return np.ascontiguousarray(offsets), data, n


def _identity(kind: str, dtype: str) -> Any:
    """What a null becomes for the core: the identity of the aggregate (for
    first/last, the bottom of the value order, so a null never wins a tie of
    time for last; for first the validity slot says null whatever it holds)."""
    if kind in ("min", "first"):
        return _I64.max if dtype == "int64" else float("nan")  # NaN: the top of min's order
    if kind in ("max", "last"):
        return _I64.min if dtype == "int64" else float("-inf")
    return 0 if dtype == "int64" else 0.0


def _hash_input(col: Any, name: str) -> Tuple[Any, Optional[np.ndarray]]:
    """What a sketch hashes of a value column: (int64 or float64 values, or
    (offsets, data) of byte strings; uint8 validity or None): integers,
    booleans, dates and times as int64, floats as float64, strings and
    binary by their bytes."""
    arr = _to_arrow_or_numpy(col, name)
    if isinstance(arr, np.ndarray):
        arr = pa.array(arr)
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    valid = np.ascontiguousarray(to_numpy(arr.is_valid()), np.uint8) if arr.null_count else None
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or \
            pa.types.is_large_binary(t):
        arr = arr.cast(pa.large_binary())
        bufs = arr.buffers()
        offsets = np.frombuffer(bufs[1], np.int64, count=arr.offset + len(arr) + 1)[arr.offset:]
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        return (np.ascontiguousarray(offsets), data), valid
    if pa.types.is_floating(t):
        return as_numeric(arr, name, "float64", fill=0.0), valid
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return as_numeric(arr, name, "int64", fill=0), valid
    if pa.types.is_temporal(t):
        return as_numeric(arr.cast(pa.int64()) if t.bit_width == 64 else
                          arr.cast(pa.int32()).cast(pa.int64()), name, "int64", fill=0), valid
    raise SchemaError(f"column {name!r} has type {t}, which a sketch cannot hash")


def hash_column(col: Any, name: str) -> np.ndarray:
    """Stable 64-bit hashes (as int64) of a value column for a sketch, 0
    for a null: integers, booleans, dates and times by their integer value,
    floats by value (-0.0 as 0.0, every NaN alike), strings and binary by
    their bytes. The same value hashes the same in every process."""
    values, valid = _hash_input(col, name)
    if isinstance(values, tuple):
        return _core.hll_hash_strings(values[0], values[1], valid)
    return _core.hll_hash_values(values, valid)


def _sketch_input(col: Any, name: str) -> Any:
    """A sketch's column for the core: a number column without nulls as its
    values, which the fold hashes as it adds them (no pass of its own, no
    array of hashes); else the hashes (hash_column), 0 for a null."""
    values, valid = _hash_input(col, name)
    if valid is None and not isinstance(values, tuple):
        return _core.RawValues(values)
    if isinstance(values, tuple):
        return _core.hll_hash_strings(values[0], values[1], valid)
    return _core.hll_hash_values(values, valid)


#: a float64 that stands for "no value" in a quantile sketch's input (a
#: signalling NaN the core skips: SLASH_QS_NULL_BITS in quantile.h)
_QS_NULL = np.array([0x7FF4000000000BAD], np.uint64).view(np.float64)[0]


def _quantile_values(col: Any, name: str) -> np.ndarray:
    """float64 values for a quantile sketch; nulls as _QS_NULL (and the
    column's own NaNs made the one canonical NaN, so none reads as a null)."""
    arr = _to_arrow_or_numpy(col, name)
    if isinstance(arr, pa.Array) and arr.null_count:
        values = as_numeric(arr, name, "float64", fill=0.0)
        values = np.where(np.isnan(values), np.nan, values)
        return np.where(to_numpy(arr.is_valid()), values, _QS_NULL)
    return as_numeric(arr, name, "float64")


def _slot_values(cfg: StateConfig, slot: CoreSlot, col: Any, n: int) -> np.ndarray:
    if slot.kind in SKETCH_ANY_TYPE:
        return _sketch_input(col, slot.column)
    if slot.kind == "percentile_approx":
        return _quantile_values(col, slot.column)
    if slot.valid:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if isinstance(col, pa.Array) and col.null_count:
            return np.ascontiguousarray(to_numpy(col.is_valid()), np.int64)
        return _core.ones(n)  # the fold then counts it with the count's delta
    dtype = cfg.value_type(slot.column)
    fill = _identity(slot.kind, dtype) if slot.column in cfg.nullable else None
    return as_numeric(col, slot.column, dtype, fill=fill)


def prepare_columns(cfg: StateConfig, keys: Any, times: Any,
                    values: Optional[Mapping[str, Any]],
                    key_max: int = KEY_MAX_BYTES) -> Tuple[Any, ...]:
    """Checks and converts one batch's columns for the core: returns (times,
    int64 keys or None, per-core-slot value arrays, key offsets, key data,
    mask of null times or None). Raises SchemaError naming the column on
    nulls where none may be, wrong dtypes or lengths; ``key_max``: the most
    bytes a string/binary key holds (a join's keys may be longer)."""
    t, null_times = _times(times, cfg)
    n = len(t)
    if cfg.key_type == "int64":
        k = _int_keys(keys, cfg)
        offsets = data = None
        nk = len(k)
    else:
        offsets, data, nk = byte_keys(keys, "keys", cfg.key_nullable, cfg.key_type == "string",
                                       _key_label(cfg), key_max)
        k = None
    if nk != n:
        raise SchemaError(f"columns 'keys' and 'times' differ in length ({nk} != {n})")
    values = dict(values or {})
    unknown = set(values) - set(cfg.value_columns)
    if unknown:
        raise SchemaError(f"unknown value column(s) {sorted(unknown)}; the aggregates read "
                          f"{cfg.value_columns}")
    for c in cfg.value_columns:
        if c not in values:
            raise SchemaError(f"value column {c!r} is missing")
        if len(values[c]) != n:
            raise SchemaError(f"column {c!r} has {len(values[c])} values, 'times' has {n}")
    per_slot = [None if s.kind == "count" else _slot_values(cfg, s, values[s.column], n)
                for s in cfg.slots]
    return t, k, per_slot, offsets, data, null_times


def _key_array(cfg: StateConfig, keys: Any, n: int) -> pa.Array:
    if cfg.key_type == "int64":
        k = np.asarray(keys)
        if cfg.key_nullable:
            mask = k == NULL_KEY_INT
            if mask.any():
                return from_numpy(k, pa.int64(), valid=~mask)
        return from_numpy(k, pa.int64())
    offs, data = keys
    t = pa.large_string() if cfg.key_type == "string" else pa.large_binary()
    if cfg.key_nullable and cfg.key_type == "string":
        raw = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(data)])
        mask = pc.equal(raw, scalar(NULL_KEY_BYTES, pa.large_binary()))
        if pc.any(mask).as_py():
            raw = pc.if_else(mask, scalar(None, pa.large_binary()), raw)
            return raw.cast(pa.large_string()).cast(pa.string())
    key_arr = pa.Array.from_buffers(t, n, [None, pa.py_buffer(offs), pa.py_buffer(data)])
    return cast(key_arr, pa.string() if cfg.key_type == "string" else pa.binary())


def _masked(values: np.ndarray, valid: Optional[np.ndarray], t: pa.DataType) -> pa.Array:
    return from_numpy(values, t, valid=None if valid is None else valid != 0)


def aggregate_columns(cfg: StateConfig, cols: List[np.ndarray]) -> List[pa.Array]:
    """The user's aggregate columns from the core slots' columns: nulls
    where a window saw no non-null value, averages of nullable columns."""
    by_slot = dict(zip(cfg.slots, cols))
    out: List[pa.Array] = []
    for a in cfg.aggregates:
        c = a.column
        if c is None or (a.kind == "count" and c not in cfg.nullable):
            out.append(from_numpy(by_slot[CoreSlot("count")], pa.int64()))
            continue
        if a.kind == "approx_count_distinct":
            out.append(from_numpy(by_slot[CoreSlot(a.kind, c, param=a.precision)], pa.int64()))
            continue
        if a.kind == "count_distinct":
            counts = np.asarray(by_slot[CoreSlot(a.kind, c)])
            over = int(np.count_nonzero(counts < 0))
            if over:
                raise OutOfRange(f"count_distinct:{c}: {over} window(s) hold more than "
                                 f"{COUNT_DISTINCT_MAX} distinct values, the most an exact count "
                                 f"keeps a window and key; use approx_count_distinct:{c}")
            out.append(from_numpy(counts, pa.int64()))
            continue
        if a.kind == "percentile_approx":
            q = np.asarray(by_slot[CoreSlot(a.kind, c, param=a.quantile_scaled)])
            out.append(_masked(q, np.asarray(by_slot[CoreSlot("sum", c, valid=True)])
                               if c in cfg.nullable else None, pa.float64()))
            continue
        ftype = pa.float64() if cfg.value_type(c) == "float64" else pa.int64()
        if c not in cfg.nullable:
            out.append(from_numpy(by_slot[CoreSlot(a.kind, c)],
                                  pa.float64() if a.kind == "avg" else ftype))
            continue
        if a.kind in AT_TIME_KINDS:
            chosen = np.asarray(by_slot[CoreSlot(a.kind, c, valid=True)])
            out.append(_masked(np.asarray(by_slot[CoreSlot(a.kind, c)]), chosen, ftype))
            continue
        valid = np.asarray(by_slot[CoreSlot("sum", c, valid=True)])
        if a.kind == "count":
            out.append(from_numpy(valid, pa.int64()))
        elif a.kind == "avg":
            total = np.asarray(by_slot[CoreSlot("sum", c)], np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                avg = total / np.where(valid == 0, 1, valid)
            out.append(_masked(avg, valid, pa.float64()))
        else:
            out.append(_masked(np.asarray(by_slot[CoreSlot(a.kind, c)]), valid, ftype))
    return out


def result_batch(cfg: StateConfig, ws: np.ndarray, we: np.ndarray, keys: Any,
                 cols: List[np.ndarray]) -> pa.RecordBatch:
    """The Arrow form of emitted results: window_start, window_end (int64 in
    the config's time unit), key, then one column per aggregate."""
    key_arr = _key_array(cfg, keys, len(ws))
    arrays = [from_numpy(ws, pa.int64()), from_numpy(we, pa.int64()), key_arr]
    arrays += aggregate_columns(cfg, cols)
    names = ["window_start", "window_end", "key"] + [a.name for a in cfg.aggregates]
    return pa.RecordBatch.from_arrays(arrays, names=names)
