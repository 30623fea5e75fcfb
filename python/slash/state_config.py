"""What a state holds: its aggregates (:class:`Aggregate`), the core's slots
behind them (:class:`CoreSlot`), and its configuration (:class:`StateConfig`:
window, key type, partitions, value types, time unit, nullable columns).

A config is checked when it is made (a bad aggregate, window or type is an
InvalidArgument naming it) and is all a state, an executor or a checkpoint
needs to agree on a state's layout. Invariant: two configs that compare
equal give the same core slots in the same order (:func:`core_args`), so
deltas and images of one can be merged into the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from slash import _core
from slash.errors import InvalidArgument
from slash.limits import MAX_AGGREGATES, MAX_PARTITIONS
from slash.window import Window, state_window, window_ticks


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


def check_keys_and_partitions(key_type: str, partitions: int) -> None:
    """InvalidArgument unless ``key_type`` is one of KEY_TYPES and
    ``partitions`` an int in 1..MAX_PARTITIONS (a state's and a join's)."""
    if key_type not in KEY_TYPES:
        raise InvalidArgument(f"key_type must be one of {KEY_TYPES}, got {key_type!r}")
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not (
            1 <= partitions <= MAX_PARTITIONS):
        raise InvalidArgument(f"partitions must be an int in 1..{MAX_PARTITIONS}, got "
                              f"{partitions!r}")


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
        check_keys_and_partitions(self.key_type, self.partitions)
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
