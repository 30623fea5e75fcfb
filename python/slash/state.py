"""The state backend: windowed CRDT aggregates over a log-structured hash table.

:class:`StateBackend` folds batches of columns (NumPy or Arrow) into partial
window states in C, hands out the changed span of each key partition as a
zero-copy buffer at epoch boundaries (:meth:`StateBackend.delta`), merges such
buffers from other executors (:meth:`StateBackend.merge_delta`), and emits
finished windows as an Arrow record batch.

>>> import numpy as np
>>> from slash.state import StateBackend, StateConfig
>>> cfg = StateConfig(window="tumbling:10s", aggregates=["count", "sum:price"],
...                   value_types={"price": "int64"})
>>> with StateBackend(cfg) as sb:
...     sb.update(keys=np.array([1, 2, 1]), times=np.array([0, 5_000, 12_000]),
...               values={"price": np.array([10, 20, 30])})
...     sb.emit(10_000).to_pylist()
[{'window_start': 0, 'window_end': 10000, 'key': 1, 'count': 1, 'sum_price': 10}, \
{'window_start': 0, 'window_end': 10000, 'key': 2, 'count': 1, 'sum_price': 20}]
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from slash import _core
from slash.errors import InvalidArgument, SchemaError
from slash.window import Session, Sliding, Tumbling, Window, parse_window

log = logging.getLogger(__name__)

AGGREGATE_KINDS = ("count", "sum", "min", "max", "avg")
VALUE_TYPES = ("int64", "float64")
KEY_TYPES = ("int64", "string", "binary")
KEY_MAX_BYTES = 64


@dataclass(frozen=True)
class Aggregate:
    """One output column: ``kind`` over input ``column`` (none for count).

    Output names: ``count``, ``sum_COL``, ``min_COL``, ``max_COL``, ``avg_COL``.

    >>> Aggregate.parse("sum:price").name
    'sum_price'
    """

    kind: str
    column: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in AGGREGATE_KINDS:
            raise InvalidArgument(f"aggregate kind must be one of {AGGREGATE_KINDS}, got {self.kind!r}")
        if self.kind == "count" and self.column is not None:
            raise InvalidArgument("aggregate 'count' takes no column (it counts records)")
        if self.kind != "count" and not self.column:
            raise InvalidArgument(f"aggregate {self.kind!r} needs a column: '{self.kind}:COLUMN'")

    @classmethod
    def parse(cls, spec: Union[str, "Aggregate"]) -> "Aggregate":
        """``"count"`` or ``"KIND:COLUMN"`` to an Aggregate."""
        if isinstance(spec, Aggregate):
            return spec
        if not isinstance(spec, str):
            raise InvalidArgument(f"aggregate must be a string like 'sum:price', got {spec!r}")
        kind, _, col = spec.partition(":")
        return cls(kind.strip(), col.strip() or None)

    @property
    def name(self) -> str:
        return "count" if self.kind == "count" else f"{self.kind}_{self.column}"


def value_columns(aggregates: Sequence[Aggregate]) -> List[str]:
    """The input columns some aggregates read, in first-use order."""
    out: List[str] = []
    for a in aggregates:
        if a.column and a.column not in out:
            out.append(a.column)
    return out


@dataclass(frozen=True)
class StateConfig:
    """Configuration of a :class:`StateBackend`.

    ``window``: a spec string (``"tumbling:10s"``, ``"sliding:60s/10s"``,
    ``"session:10s"``) or a :mod:`slash.window` dataclass. ``aggregates``:
    ``"count"`` and ``"sum|min|max|avg:COLUMN"``. ``value_types`` gives each
    value column's type, ``"int64"`` or ``"float64"`` (default float64).
    ``key_type``: ``"int64"``, ``"string"`` or ``"binary"`` (at most 64 bytes).
    ``partitions``: key partitions (each with its own index, log and delta).

    >>> StateConfig(window="session:5s", aggregates=["count", "max:x"]).window
    Session(gap_ms=5000)
    """

    window: Union[str, Window] = "tumbling:10s"
    aggregates: Sequence[Union[str, Aggregate]] = ("count",)
    key_type: str = "int64"
    partitions: int = 1
    value_types: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", parse_window(self.window))
        if isinstance(self.aggregates, (str, Aggregate)):
            raise InvalidArgument("aggregates must be a list, e.g. ['count', 'sum:price']")
        aggs = tuple(Aggregate.parse(a) for a in self.aggregates)
        names = [a.name for a in aggs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise InvalidArgument(f"aggregates: duplicate output column(s) {sorted(dup)}")
        if len(aggs) > 16:
            raise InvalidArgument(f"aggregates: at most 16, got {len(aggs)}")
        object.__setattr__(self, "aggregates", aggs)
        if self.key_type not in KEY_TYPES:
            raise InvalidArgument(f"key_type must be one of {KEY_TYPES}, got {self.key_type!r}")
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or not (
                1 <= self.partitions <= 4096):
            raise InvalidArgument(f"partitions must be an int in 1..4096, got {self.partitions!r}")
        for col, t in self.value_types.items():
            if t not in VALUE_TYPES:
                raise InvalidArgument(f"value_types[{col!r}] must be one of {VALUE_TYPES}, got {t!r}")
        object.__setattr__(self, "value_types", dict(self.value_types))

    def value_type(self, column: str) -> str:
        return self.value_types.get(column, "float64")

    @property
    def value_columns(self) -> List[str]:
        """Input columns the aggregates read, in first-use order."""
        return value_columns(self.aggregates)


def _window_args(w: Window) -> Tuple[str, int, int]:
    if isinstance(w, Tumbling):
        return "tumbling", w.size_ms, w.size_ms
    if isinstance(w, Sliding):
        return "sliding", w.size_ms, w.slide_ms
    assert isinstance(w, Session)
    return "session", w.gap_ms, w.gap_ms


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


def _numeric(obj: Any, name: str, dtype: str) -> np.ndarray:
    """A C-contiguous int64 or float64 NumPy array without nulls; safe casts only."""
    arr = _to_arrow_or_numpy(obj, name)
    if isinstance(arr, pa.Array):
        if arr.null_count:
            raise SchemaError(f"column {name!r} has {arr.null_count} null value(s)")
        t = arr.type
        if pa.types.is_timestamp(t) or pa.types.is_date64(t) or pa.types.is_duration(t):
            if dtype != "int64":
                raise SchemaError(f"column {name!r}: {t} where {dtype} is expected")
            if pa.types.is_timestamp(t) and t.unit != "ms":
                raise SchemaError(f"column {name!r}: timestamps must be in ms, got {t}")
            arr = arr.view(pa.int64())
        arr = arr.to_numpy(zero_copy_only=False)
    if isinstance(arr, np.ma.MaskedArray) and np.ma.is_masked(arr):
        raise SchemaError(f"column {name!r} has masked (null) values")
    arr = np.asarray(arr)
    if arr.ndim != 1:
        raise SchemaError(f"column {name!r} must be one-dimensional, got shape {arr.shape}")
    want = np.dtype(dtype)
    if arr.dtype != want:
        if arr.dtype.kind not in "iub" and not (arr.dtype.kind == "f" and want.kind == "f"):
            raise SchemaError(f"column {name!r} has dtype {arr.dtype}, expected {dtype}")
        if not np.can_cast(arr.dtype, want, "safe"):
            raise SchemaError(f"column {name!r} has dtype {arr.dtype}, which does not fit "
                              f"{dtype} exactly")
        arr = arr.astype(want)
    return np.ascontiguousarray(arr)


def _byte_keys(obj: Any, name: str) -> Tuple[np.ndarray, np.ndarray, int]:
    """(offsets int32|int64, data uint8, n) of a string/binary column."""
    arr = _to_arrow_or_numpy(obj, name)
    if isinstance(arr, np.ndarray):
        if arr.dtype.kind not in "OUS":
            raise SchemaError(f"column {name!r} has dtype {arr.dtype}, expected strings or bytes")
        try:
            arr = pa.array(arr, from_pandas=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SchemaError(f"column {name!r}: {e}") from None
    t = arr.type
    if arr.null_count:
        raise SchemaError(f"column {name!r} has {arr.null_count} null value(s)")
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
    if n and int(np.max(np.diff(offsets))) > KEY_MAX_BYTES:
        row = int(np.argmax(np.diff(offsets) > KEY_MAX_BYTES))
        raise SchemaError(f"column {name!r}: key at row {row} is longer than {KEY_MAX_BYTES} bytes")
    return np.ascontiguousarray(offsets), data, n


def core_args(cfg: StateConfig, partitions: Optional[int] = None) -> Tuple[Any, ...]:
    """The core's view of a config: (window kind, size, slide, key type,
    partitions, [(aggregate kind, value type)])."""
    kind, size, slide = _window_args(cfg.window)
    aggs = [(a.kind, None if a.kind == "count" else cfg.value_type(a.column))
            for a in cfg.aggregates]
    key = "int64" if cfg.key_type == "int64" else "bytes"
    return kind, size, slide, key, partitions or cfg.partitions, aggs


def prepare_columns(cfg: StateConfig, keys: Any, times: Any,
                    values: Optional[Mapping[str, Any]]) -> Tuple[Any, ...]:
    """Checks and converts one batch's columns for the core: returns (times,
    int64 keys or None, per-aggregate value arrays, key offsets, key data).
    Raises SchemaError naming the column on nulls, wrong dtypes or lengths."""
    t = _numeric(times, "times", "int64")
    n = len(t)
    if cfg.key_type == "int64":
        k = _numeric(keys, "keys", "int64")
        offsets = data = None
        nk = len(k)
    else:
        offsets, data, nk = _byte_keys(keys, "keys")
        k = None
    if nk != n:
        raise SchemaError(f"columns 'keys' and 'times' differ in length ({nk} != {n})")
    values = dict(values or {})
    unknown = set(values) - set(cfg.value_columns)
    if unknown:
        raise SchemaError(f"unknown value column(s) {sorted(unknown)}; the aggregates read "
                          f"{cfg.value_columns}")
    cols: Dict[str, np.ndarray] = {}
    for c in cfg.value_columns:
        if c not in values:
            raise SchemaError(f"value column {c!r} is missing")
        cols[c] = _numeric(values[c], c, cfg.value_type(c))
        if len(cols[c]) != n:
            raise SchemaError(f"column {c!r} has {len(cols[c])} values, 'times' has {n}")
    per_agg = [None if a.kind == "count" else cols[a.column] for a in cfg.aggregates]
    return t, k, per_agg, offsets, data


def result_batch(cfg: StateConfig, ws: np.ndarray, we: np.ndarray, keys: Any,
                 cols: List[np.ndarray]) -> pa.RecordBatch:
    """The Arrow form of emitted results: window_start, window_end, key, then
    one column per aggregate."""
    if cfg.key_type == "int64":
        key_arr = pa.array(keys, pa.int64())
    else:
        offs, data = keys
        t = pa.large_string() if cfg.key_type == "string" else pa.large_binary()
        key_arr = pa.Array.from_buffers(t, len(ws), [None, pa.py_buffer(offs), pa.py_buffer(data)])
        key_arr = key_arr.cast(pa.string() if cfg.key_type == "string" else pa.binary())
    arrays = [pa.array(ws, pa.int64()), pa.array(we, pa.int64()), key_arr]
    arrays += [pa.array(c) for c in cols]
    names = ["window_start", "window_end", "key"] + [a.name for a in cfg.aggregates]
    return pa.RecordBatch.from_arrays(arrays, names=names)


class StateBackend:
    """Windowed aggregation state of one executor: update, epoch deltas, emit.

    Results of :meth:`emit` are a ``pyarrow.RecordBatch`` with columns
    ``window_start``, ``window_end`` (int64 ms), ``key``, then one column per
    aggregate (``count``, ``sum_COL``, ...). Records of windows already
    emitted are dropped and counted in :attr:`late_records`.

    Distributed use (after Slash's epoch protocol): a helper calls
    :meth:`begin_epoch`, ships each ``delta(p)`` to the partition's leader,
    which calls :meth:`merge_delta`, then the helper calls :meth:`reset_delta`.

    >>> import numpy as np
    >>> cfg = StateConfig(window="tumbling:10s", aggregates=["count"])
    >>> helper, leader = StateBackend(cfg), StateBackend(cfg)
    >>> helper.update(np.array([7, 7]), np.array([1, 2]))
    >>> helper.begin_epoch()
    >>> leader.merge_delta(helper.delta(0))
    >>> helper.reset_delta()
    >>> leader.emit(10_000).column("count").to_pylist()
    [2]
    >>> helper.close(); leader.close()
    """

    def __init__(self, config: StateConfig, *, log_reserve_bytes: int = 0) -> None:
        if not isinstance(config, StateConfig):
            raise InvalidArgument(f"config must be a StateConfig, got {type(config).__name__}")
        self.config = config
        self._store = _core.StateStore(*core_args(config), log_reserve_bytes)

    # -- updates -----------------------------------------------------------
    def update(self, keys: Any, times: Any, values: Optional[Mapping[str, Any]] = None) -> None:
        """Folds a batch: ``keys``, event ``times`` (int64 ms or timestamp[ms])
        and one array per value column, all of one length, NumPy or Arrow.

        Raises SchemaError naming the column on nulls, wrong dtypes or
        mismatched lengths; nothing of the batch is applied then.
        """
        self._store.update(*prepare_columns(self.config, keys, times, values))

    def update_batch(self, batch: Union[pa.RecordBatch, pa.Table], key: str = "key",
                     time: str = "time") -> None:
        """Folds an Arrow batch or table whose columns are named ``key``,
        ``time`` and the value columns of the aggregates."""
        names = batch.schema.names
        for c in [key, time] + self.config.value_columns:
            if c not in names:
                raise SchemaError(f"column {c!r} is missing from the batch (has {names})")
        self.update(batch.column(key), batch.column(time),
                    {c: batch.column(c) for c in self.config.value_columns})

    # -- epochs --------------------------------------------------------------
    def begin_epoch(self) -> None:
        """Seals every partition's changed span as this epoch's delta."""
        self._store.begin_epoch()

    def delta(self, partition: int = 0) -> memoryview:
        """The sealed delta of one partition: a read-only memoryview of the
        store's own memory (no copy), valid until :meth:`reset_delta`."""
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise InvalidArgument(f"partition must be an int >= 0, got {partition!r}")
        return memoryview(self._store.delta(partition))

    def deltas(self) -> List[memoryview]:
        """The sealed deltas of all partitions."""
        return [self.delta(p) for p in range(self.config.partitions)]

    def merge_delta(self, region: Any) -> None:
        """Merges a delta of a store with the same config (any bytes-like)."""
        mv = memoryview(region).cast("B") if not isinstance(region, bytes) else region
        self._store.merge_delta(mv)

    def reset_delta(self) -> None:
        """Drops the shipped records (they restart from zero). Release the
        memoryviews from :meth:`delta` first."""
        self._store.reset_delta()

    # -- results -------------------------------------------------------------
    def emit(self, up_to: int) -> pa.RecordBatch:
        """Every (window, key) result of windows ending at or before
        ``up_to`` ms not emitted before; frees their state."""
        return result_batch(self.config, *self._store.emit(int(up_to)))

    # -- introspection -------------------------------------------------------
    def stats(self) -> Dict[str, Any]:
        """Counters: records, late, epoch, memory_bytes, log_bytes, index_bytes,
        record_bytes, sealed, watermark."""
        return self._store.stats()

    @property
    def memory_bytes(self) -> int:
        """Bytes held: log pages in use plus the hash index."""
        return self.stats()["memory_bytes"]

    @property
    def records(self) -> int:
        """Live (window, key) records."""
        return self.stats()["records"]

    @property
    def late_records(self) -> int:
        """Records dropped because their windows had been emitted."""
        return self.stats()["late"]

    def close(self) -> None:
        """Frees the state. Safe to call twice."""
        self._store.close()

    @property
    def closed(self) -> bool:
        return self._store.closed

    def __enter__(self) -> "StateBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StateBackend({self.config!r})"


__all__ = ["Aggregate", "StateBackend", "StateConfig"]
