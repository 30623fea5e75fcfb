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
import pyarrow.compute as pc

from slash import _core
from slash.arrow_np import from_numpy, scalar, to_numpy
from slash.errors import InvalidArgument, OutOfRange, SchemaError
from slash.limits import KEY_MAX_BYTES, MAX_AGGREGATES, MAX_PARTITIONS
from slash.window import Window, state_window, window_ticks

log = logging.getLogger(__name__)

AGGREGATE_KINDS = ("count", "sum", "min", "max", "avg", "first", "last", "approx_count_distinct",
                   "percentile_approx", "count_distinct")
#: the kinds whose result is the value of one record, chosen by event time
AT_TIME_KINDS = ("first", "last")
#: the kinds whose result is a count (int64, never null)
COUNT_KINDS = ("count", "approx_count_distinct", "count_distinct")
#: the kinds that read a column of any type they can hash (not only numbers)
SKETCH_ANY_TYPE = ("approx_count_distinct", "count_distinct")
#: the most distinct values count_distinct keeps a window and key (distinct.h)
COUNT_DISTINCT_MAX = _core.COUNT_DISTINCT_MAX
#: the kinds that take a parameter after the column (``KIND:COL:PARAM``)
PARAM_KINDS = ("approx_count_distinct", "percentile_approx")
#: the kinds whose result is a float64 whatever the column's type
FLOAT_KINDS = ("avg", "percentile_approx")
#: percentile_approx's quantiles are given in steps of 1 / QUANTILE_SCALE
QUANTILE_SCALE = 10000
#: approx_count_distinct's default relative standard deviation (Spark's)
DEFAULT_RSD = 0.05
VALUE_TYPES = ("int64", "float64")
KEY_TYPES = ("int64", "string", "binary")
#: the time units a state runs in, as ticks per millisecond
TIME_UNITS = {"ms": 1, "us": 1000, "ns": 1_000_000}
#: a null int64 key is held as this value (a real key equal to it is refused
#: while the key may be null); a null string key as NULL_KEY_BYTES, which is
#: never valid UTF-8, so no string can collide with it
NULL_KEY_INT = -(1 << 63)
NULL_KEY_BYTES = b"\xff"
_I64 = np.iinfo(np.int64)


@dataclass(frozen=True)
class Aggregate:
    """One output column: ``kind`` over input ``column``.

    ``count`` counts records; ``count:COL`` counts the non-null values of
    COL; ``sum|min|max|avg:COL`` skip nulls (a window whose values are all
    null gives null), as Spark's and SQL's aggregates do.
    ``first:COL`` / ``last:COL``: the value of COL at the earliest / latest
    event time of the window (Spark's ``min_by(COL, time)`` /
    ``max_by(COL, time)``); a null there is the result, as in Spark. Among
    records of one event time the order is by value, a null below every
    value and NaN above every number: first takes the smallest, last the
    largest, so the answer depends on neither arrival order nor split.
    Output names: ``count``, ``count_COL``, ``sum_COL``, ``min_COL``,
    ``max_COL``, ``avg_COL``, ``first_COL``, ``last_COL``.
    ``approx_count_distinct:COL[:RSD]``: the number of distinct non-null
    values of COL (any numeric, boolean, date/time, string or binary
    column), estimated by a HyperLogLog sketch with relative standard
    deviation RSD (default 0.05, as Spark's); an int64 count, 0 when every
    value is null. Output name ``approx_count_distinct_COL``.
    ``count_distinct:COL``: the exact number of distinct non-null values
    (types as approx_count_distinct), for modest cardinalities: at most
    COUNT_DISTINCT_MAX (1023) a window and key, 8 KiB of state; a window
    past the bound is an OutOfRange error naming the column when it fires.
    ``percentile_approx:COL:Q``: the Q-quantile of COL's non-null values
    (the value at rank ceil(Q n), as Spark's percentile_approx and DuckDB's
    quantile_disc), approximated by a fixed-size log-bucket sketch within
    0.78 % of it while the values span under 2^15.9 in magnitude (see
    docs/aggregates.md); a float64, null when every value is null. Output
    name ``percentile_approx_COL_pQ`` (``percentile_approx_t_p99_9`` for Q 0.999).

    >>> Aggregate.parse("sum:price").name
    'sum_price'
    """

    kind: str
    column: Optional[str] = None
    param: Optional[float] = None

    def __post_init__(self) -> None:
        if self.kind not in AGGREGATE_KINDS:
            raise InvalidArgument(f"aggregate kind must be one of {AGGREGATE_KINDS}, got {self.kind!r}")
        if self.kind != "count" and not self.column:
            raise InvalidArgument(f"aggregate {self.kind!r} needs a column: '{self.kind}:COLUMN'")
        if self.param is not None and self.kind not in PARAM_KINDS:
            raise InvalidArgument(f"aggregate {self.kind}:{self.column} takes no parameter, got "
                                  f"{self.param!r}")
        if self.kind == "approx_count_distinct":
            self.precision  # checks the relative standard deviation
        if self.kind == "percentile_approx":
            self.quantile_scaled  # checks the quantile

    @property
    def quantile_scaled(self) -> int:
        """percentile_approx: the quantile in 1/10000 (the core's unit)."""
        q = self.param
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1 or \
                abs(round(q * QUANTILE_SCALE) - q * QUANTILE_SCALE) > 1e-6:
            raise InvalidArgument(f"percentile_approx:{self.column} needs a quantile in [0, 1] with "
                                  f"at most 4 decimals, e.g. 'percentile_approx:{self.column}:0.99', "
                                  f"got {q!r}")
        return int(round(q * QUANTILE_SCALE))

    @property
    def precision(self) -> int:
        """approx_count_distinct: the HyperLogLog precision p (2^p one-byte
        registers a window and key) Spark derives from the relative standard
        deviation: ceil(2 log2(1.106 / rsd))."""
        rsd = DEFAULT_RSD if self.param is None else self.param
        p = _core.hll_precision(float(rsd)) if isinstance(rsd, (int, float)) else 0
        if not _core.HLL_P_MIN <= p <= _core.HLL_P_MAX:
            lo = 1.106 / 2 ** (_core.HLL_P_MAX / 2)
            raise InvalidArgument(f"approx_count_distinct:{self.column}: the relative standard "
                                  f"deviation must be in [{lo:.5f}, 0.39] (HyperLogLog of "
                                  f"2^{_core.HLL_P_MIN}..2^{_core.HLL_P_MAX} registers), got {rsd!r}")
        return p

    @classmethod
    def parse(cls, spec: Union[str, "Aggregate"]) -> "Aggregate":
        """``"count"``, ``"KIND:COLUMN"`` or ``"KIND:COLUMN:PARAM"`` (kinds
        that take one, e.g. ``approx_count_distinct:user:0.02``) to an Aggregate."""
        if isinstance(spec, Aggregate):
            return spec
        if not isinstance(spec, str):
            raise InvalidArgument(f"aggregate must be a string like 'sum:price', got {spec!r}")
        kind, _, col = spec.partition(":")
        kind, param = kind.strip(), None
        if kind in PARAM_KINDS and ":" in col:
            col, _, text = col.rpartition(":")
            try:
                param = float(text)
            except ValueError:
                raise InvalidArgument(f"aggregate {spec!r}: the parameter after the column must "
                                      f"be a number, got {text!r}") from None
        return cls(kind, col.strip() or None, param)

    @property
    def name(self) -> str:
        if self.kind == "percentile_approx":  # percentile_approx_latency_p99, ..._p99_9
            return f"{self.kind}_{self.column}_p{self.quantile_scaled / 100:g}".replace(".", "_")
        return "count" if self.column is None else f"{self.kind}_{self.column}"


@dataclass(frozen=True)
class CoreSlot:
    """One aggregate of the C core. Null handling lives above the core: a
    nullable column's nulls reach it as the aggregate's identity (0, the
    largest or smallest value), and a ``valid`` slot sums the column's
    validity (1 per non-null value), which gives ``count:COL``, tells an
    all-null window (null result) and divides an average."""

    kind: str
    column: Optional[str] = None
    valid: bool = False
    param: Optional[int] = None  # a sketch's precision


def core_slots(aggregates: Sequence[Aggregate], nullable: Sequence[str]) -> Tuple[CoreSlot, ...]:
    """The core aggregates that compute `aggregates` when the columns in
    `nullable` may hold nulls (shared where two outputs need the same)."""
    slots: List[CoreSlot] = []

    def add(slot: CoreSlot) -> None:
        if slot not in slots:
            slots.append(slot)

    for a in aggregates:
        c = a.column
        if c is None:
            add(CoreSlot("count"))
        elif a.kind == "approx_count_distinct":  # a null hashes to "no value"
            add(CoreSlot(a.kind, c, param=a.precision))
        elif a.kind == "count_distinct":  # as the sketch: a set of hashes
            add(CoreSlot(a.kind, c))
        elif a.kind == "percentile_approx":  # a null is "no value"; all null: null
            add(CoreSlot(a.kind, c, param=a.quantile_scaled))
            if c in nullable:
                add(CoreSlot("sum", c, valid=True))
        elif c not in nullable:
            add(CoreSlot("count") if a.kind == "count" else CoreSlot(a.kind, c))
        else:
            if a.kind in AT_TIME_KINDS:
                # the validity of the chosen record, chosen by the same order
                add(CoreSlot(a.kind, c))
                add(CoreSlot(a.kind, c, valid=True))
                continue
            if a.kind in ("sum", "min", "max"):
                add(CoreSlot(a.kind, c))
            elif a.kind == "avg":
                add(CoreSlot("sum", c))
            add(CoreSlot("sum", c, valid=True))
    return tuple(slots)


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
    ``time_unit``: the unit of event times, ``"ms"`` (int64 ms or
    timestamp[ms]), ``"us"`` or ``"ns"``; window sizes are converted to it.
    ``nullable``: the value columns that may hold nulls (None: all of them);
    a column left out costs no validity tracking, and a null in it is an
    error. ``key_nullable``: keys may be null (a null key is a group of its
    own); False refuses null keys and skips the reserved-value check.
    ``key_names``: the input columns the keys come from (a query's key
    columns), named in errors about key values instead of ``'keys'``.

    Null times are in no window: such records are skipped and counted
    (:attr:`StateBackend.null_times`).

    >>> StateConfig(window="session:5s", aggregates=["count", "max:x"]).window
    Session(gap_ms=5000)
    """

    window: Union[str, Window] = "tumbling:10s"
    aggregates: Sequence[Union[str, Aggregate]] = ("count",)
    key_type: str = "int64"
    partitions: int = 1
    value_types: Mapping[str, str] = field(default_factory=dict)
    time_unit: str = "ms"
    nullable: Optional[Sequence[str]] = None
    key_nullable: bool = True
    key_names: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", state_window(self.window))
        if self.time_unit not in TIME_UNITS:
            raise InvalidArgument(f"time_unit must be one of {list(TIME_UNITS)}, got {self.time_unit!r}")
        if isinstance(self.aggregates, (str, Aggregate)):
            raise InvalidArgument("aggregates must be a list, e.g. ['count', 'sum:price']")
        aggs = tuple(Aggregate.parse(a) for a in self.aggregates)
        names = [a.name for a in aggs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise InvalidArgument(f"aggregates: duplicate output column(s) {sorted(dup)}")
        if len(aggs) > MAX_AGGREGATES:
            raise InvalidArgument(f"aggregates: at most {MAX_AGGREGATES}, got {len(aggs)}")
        object.__setattr__(self, "aggregates", aggs)
        if self.key_type not in KEY_TYPES:
            raise InvalidArgument(f"key_type must be one of {KEY_TYPES}, got {self.key_type!r}")
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or not (
                1 <= self.partitions <= MAX_PARTITIONS):
            raise InvalidArgument(f"partitions must be an int in 1..{MAX_PARTITIONS}, got "
                                  f"{self.partitions!r}")
        for col, t in self.value_types.items():
            if t not in VALUE_TYPES:
                raise InvalidArgument(f"value_types[{col!r}] must be one of {VALUE_TYPES}, got {t!r}")
        object.__setattr__(self, "value_types", dict(self.value_types))
        nullable = value_columns(aggs) if self.nullable is None else list(self.nullable)
        object.__setattr__(self, "nullable", tuple(c for c in nullable if c in value_columns(aggs)))
        slots = core_slots(aggs, self.nullable)
        if len(slots) > MAX_AGGREGATES:
            raise InvalidArgument(f"aggregates: at most {MAX_AGGREGATES} core aggregates, these need {len(slots)} "
                                  "(each nullable column adds one to count its values)")
        object.__setattr__(self, "_slots", slots)

    @property
    def slots(self) -> Tuple[CoreSlot, ...]:
        """The core's aggregates (see :class:`CoreSlot`)."""
        return self._slots  # type: ignore[attr-defined]

    @property
    def ticks_per_ms(self) -> int:
        return TIME_UNITS[self.time_unit]

    def value_type(self, column: str) -> str:
        return self.value_types.get(column, "float64")

    @property
    def value_columns(self) -> List[str]:
        """Input columns the aggregates read, in first-use order."""
        return value_columns(self.aggregates)


def _window_args(w: Window, ticks_per_ms: int = 1) -> Tuple[str, int, int]:
    """(kind, size, slide) in the state's time unit."""
    size, slide = window_ticks(w, ticks_per_ms)
    return w.kind, size, slide


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


def _byte_keys(obj: Any, name: str, nullable: bool = False,
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


def core_args(cfg: StateConfig, partitions: Optional[int] = None) -> Tuple[Any, ...]:
    """The core's view of a config: (window kind, size, slide in the time
    unit, key type, partitions, [(aggregate kind, value type)] per core slot)."""
    kind, size, slide = _window_args(cfg.window, cfg.ticks_per_ms)
    aggs = [("hll", s.param) if s.kind == "approx_count_distinct" else
            ("quantile", s.param) if s.kind == "percentile_approx" else
            (s.kind, "int64") if s.kind == "count_distinct" else
            (s.kind, None if s.kind == "count" else "int64" if s.valid else cfg.value_type(s.column))
            for s in cfg.slots]
    key = "int64" if cfg.key_type == "int64" else "bytes"
    return kind, size, slide, key, partitions or cfg.partitions, aggs


_ONES = np.ones(1 << 16, np.int64)


def _ones(n: int) -> np.ndarray:
    global _ONES
    if n > len(_ONES):
        _ONES = np.ones(max(n, 2 * len(_ONES)), np.int64)
    return _ONES[:n]


def _identity(kind: str, dtype: str) -> Any:
    """What a null becomes for the core: the identity of the aggregate (for
    first/last, the bottom of the value order, so a null never wins a tie of
    time for last; for first the validity slot says null whatever it holds)."""
    if kind in ("min", "first"):
        return _I64.max if dtype == "int64" else float("nan")  # NaN: the top of min's order
    if kind in ("max", "last"):
        return _I64.min if dtype == "int64" else float("-inf")
    return 0 if dtype == "int64" else 0.0


def hash_column(col: Any, name: str) -> np.ndarray:
    """Stable 64-bit hashes (as int64) of a value column for a sketch, 0
    for a null: integers, booleans, dates and times by their integer value,
    floats by value (-0.0 as 0.0, every NaN alike), strings and binary by
    their bytes. The same value hashes the same in every process."""
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
        return _core.hll_hash_strings(np.ascontiguousarray(offsets), data, valid)
    if pa.types.is_floating(t):
        values = as_numeric(arr, name, "float64", fill=0.0)
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        values = as_numeric(arr, name, "int64", fill=0)
    elif pa.types.is_temporal(t):
        values = as_numeric(arr.cast(pa.int64()) if t.bit_width == 64 else
                            arr.cast(pa.int32()).cast(pa.int64()), name, "int64", fill=0)
    else:
        raise SchemaError(f"column {name!r} has type {t}, which a sketch cannot hash")
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
        return hash_column(col, slot.column)
    if slot.kind == "percentile_approx":
        return _quantile_values(col, slot.column)
    if slot.valid:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if isinstance(col, pa.Array) and col.null_count:
            return np.ascontiguousarray(to_numpy(col.is_valid()), np.int64)
        return _ones(n)
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
        offsets, data, nk = _byte_keys(keys, "keys", cfg.key_nullable, cfg.key_type == "string",
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
    return key_arr.cast(pa.string() if cfg.key_type == "string" else pa.binary())


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
        self._null_times = 0

    # -- updates -----------------------------------------------------------
    def update(self, keys: Any, times: Any, values: Optional[Mapping[str, Any]] = None) -> None:
        """Folds a batch: ``keys``, event ``times`` (int64 or timestamps in
        the config's time unit) and one array per value column, all of one
        length, NumPy or Arrow. Nulls follow :class:`StateConfig`: null keys
        are a group, null values are skipped by the aggregates, and records
        with a null time are in no window (counted in :attr:`null_times`).

        Raises SchemaError naming the column on wrong dtypes, mismatched
        lengths or nulls where the config allows none; nothing of the batch
        is applied then.
        """
        t, k, per_slot, offsets, data, null_times = prepare_columns(self.config, keys, times, values)
        if null_times is not None:  # rare: copy the rows that have a time
            keep = ~null_times
            t = np.ascontiguousarray(t[keep])
            per_slot = [None if v is None else np.ascontiguousarray(v[keep]) for v in per_slot]
            if k is not None:
                k = np.ascontiguousarray(k[keep])
            else:
                sel = pa.Array.from_buffers(pa.large_binary() if offsets.dtype == np.int64 else pa.binary(),
                                            len(keep), [None, pa.py_buffer(offsets),
                                                        pa.py_buffer(data)]).filter(pa.array(keep))
                offsets, data, _ = _byte_keys(sel, "keys")
            self._null_times += int(null_times.sum())
        self._store.update(t, k, per_slot, offsets, data)

    @property
    def null_times(self) -> int:
        """Records skipped because their time was null (in no window)."""
        return self._null_times

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
