"""A windowed aggregation query: source -> filter -> projection -> window ->
aggregates by key columns (:class:`Query`).

A :class:`Query` is checked against the input schema before any work starts
(missing columns, non-numeric aggregates, bad window specs are errors naming
the column or spec). Per batch, filters run as Arrow compute kernels and the
surviving columns go to the executor's C core; no Python runs per record.
Invariant: the times the state sees are the time column in the query's tick
unit less the window offset; ``finalize`` adds the offset back.

Output columns: ``window_start``, ``window_end`` (timestamps of the input's
unit and zone when the time column is a timestamp: an instant stays an
instant, a wall clock without a zone stays one; instants in UTC (ms) when it
is a date, taken at midnight in ``time_zone`` as Spark casts a date; int64 ms
when it is an integer), the key columns (their input types, nulls kept), then one
column per aggregate (``count``, ``count_COL``, ``sum_COL``, ``min_COL``,
``max_COL``, ``avg_COL``). Nulls follow Spark and SQL (see :class:`Query`).

>>> q = Query(time="t", window="tumbling:10s", key=["user"],
...           aggregates=["count", "sum:price"], filters=["price > 0"])
>>> q.output_names(pa.schema([("t", pa.int64()), ("user", pa.int64()), ("price", pa.float64())]))
['window_start', 'window_end', 'user', 'count', 'sum_price']
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from slash.arrow_np import scalar, to_numpy
from slash.columns import (as_int64, decimal_from_unscaled, decimal_unscaled, decode_composite,
                           encode_composite, from_int64, int_like, is_bin, is_int, is_str, is_time_like,
                           one_batch, plain_type, redict, sorted_table)
from slash.compute import cast, pc
from slash.errors import InvalidArgument, OutOfRange, SchemaError
from slash.filters import Filter
from slash.limits import KEY_MAX_BYTES
from slash.state_config import (COUNT_KINDS, FLOAT_KINDS, SKETCH_ANY_TYPE, TIME_UNITS, Aggregate,
                                StateConfig, value_columns)
from slash.window import Window, parse_duration, parse_window, window_ticks


def _i64(v: int) -> pa.Scalar:
    return scalar(v, pa.int64())


def check_time_zone(zone: Optional[str]) -> str:
    """A time zone name Arrow knows (``"UTC"``, ``"America/Los_Angeles"``,
    ``"+08:00"``), or InvalidArgument naming it; None is UTC."""
    if zone is None or zone == "UTC":
        return "UTC"
    if not isinstance(zone, str) or not zone:
        raise InvalidArgument(f"time_zone must name a time zone, got {zone!r}")
    try:
        pc.assume_timezone(pa.array([0], pa.timestamp("s")), zone)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        raise InvalidArgument(f"time_zone {zone!r} is not a time zone this machine knows "
                              "(e.g. 'UTC', 'America/Los_Angeles', '+08:00')") from None
    return zone


def _midnight_ms(col: pa.Array, zone: str) -> pa.Array:
    """Dates as the instant (UTC ms) of their midnight in ``zone``, as Spark
    casts a date to a timestamp in its session time zone (a midnight a DST
    change skips is the first instant after the gap)."""
    if pa.types.is_date64(col.type):
        col = col.cast(pa.date32())
    local = col.cast(pa.timestamp("ms"))
    if zone != "UTC":
        local = pc.assume_timezone(local, zone, ambiguous="earliest", nonexistent="latest")
    return local.view(pa.int64())


_TIME_UNITS = ("s", "ms", "us", "ns")
_SCALE_TO_MS = {"s": 1000, "ms": 1}


def _value_ok(t: pa.DataType) -> bool:
    return is_int(t) or pa.types.is_floating(t) or (
        pa.types.is_decimal(t) and t.bit_width == 128 and t.precision <= 18)


def _sum_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_decimal(t):
        return pa.decimal128(min(38, t.precision + 10), t.scale)
    return pa.int64()


@dataclass(frozen=True)
class Query:
    """A windowed aggregation: see the module docstring.

    ``time``: the event-time column: any integer (milliseconds, or the unit
    ``time_unit`` names: ``"s"``, ``"ms"``, ``"us"``, ``"ns"``), a
    timestamp of any unit with or without a time zone (Spark's INT96 too),
    or a date. ``window``: ``"tumbling:10s"``, ``"sliding:60s/10s"``,
    ``"session:10s"``, ``"tumbling:1d"``, Spark's ``"tumbling:1 day"``;
    ``key``: one or more columns (integers, booleans, strings, binary,
    dictionary-encoded strings, dates, timestamps; composite keys encode to
    at most 64 bytes); ``aggregates``: ``"count"``, ``"count:COL"``,
    ``"sum|min|max|avg:COL"`` over integer, float or decimal128 (precision
    <= 18) columns; ``filters``: ``"COL OP VALUE"`` strings, all of which
    must hold; ``lateness``: allowed out-of-orderness of a stream
    (``"2s"`` or ms; bounded inputs never need it). ``time_zone``: the zone
    a date time column is read in (its midnight there, as Spark's session
    time zone casts a date to a timestamp; default UTC); instants and wall
    clocks do not depend on it. A window offset (``"tumbling:1d+-8h"``) is
    applied here: each time is shifted by it before the state sees it and
    each bound shifted back.

    ``min``/``max`` of floats order NaN above every number, as Spark does
    (a NaN makes ``max`` NaN; ``min`` is NaN only when every value is).

    Top-N per window: ``"top:N:COL"`` among the aggregates (or ``top=(N,
    COL)``), COL the output name of another aggregate of the query
    (``count``, ``sum_price``, ...), keeps per window only the N keys with
    the largest COL, ranked 1..N in an added ``rank`` column (SQL's
    ``row_number() OVER (PARTITION BY window ORDER BY COL DESC, keys)``:
    ties go to the smaller key, a null COL ranks last). It is computed from
    the leaders' merged, fired windows: each leader holds every key of its
    partitions, so its N best are the only candidates, and the N best of
    those are the window's. Bounded runs only (``run``, ``slash run``,
    ``slash.spark.window_aggregate``); a stream appends each window as its
    leaders fire it, so no part of the output could say which keys rank
    first until every leader has fired the window.

    Nulls follow Spark's ``groupBy`` and SQL: a null key is a group of its
    own (per column of a composite key); aggregates skip nulls (a window
    whose values are all null gives null); ``count`` counts records and
    ``count:COL`` non-null values; a record whose time is null is in no
    window (counted and warned about, never an error).
    """

    time: str
    window: Union[str, Window]
    key: Sequence[str]
    aggregates: Sequence[Union[str, Aggregate]] = ("count",)
    filters: Sequence[Union[str, Filter]] = ()
    lateness: Union[int, str] = 0
    time_unit: Optional[str] = None
    time_zone: Optional[str] = None
    top: Optional[Tuple[int, str]] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", parse_window(self.window))
        object.__setattr__(self, "time_zone", check_time_zone(self.time_zone))
        key = [self.key] if isinstance(self.key, str) else list(self.key)
        if not key or not all(isinstance(k, str) and k for k in key):
            raise InvalidArgument(f"key must name one or more columns, got {self.key!r}")
        if len(set(key)) != len(key):
            raise InvalidArgument(f"key names a column twice: {key}")
        object.__setattr__(self, "key", tuple(key))
        if isinstance(self.aggregates, (str, Aggregate)):
            raise InvalidArgument("aggregates must be a list, e.g. ['count', 'sum:price']")
        tops = [a for a in self.aggregates if isinstance(a, str) and a.strip().startswith("top:")]
        aggs = tuple(Aggregate.parse(a) for a in self.aggregates if a not in tops)
        object.__setattr__(self, "top", _parse_top(tops, self.top, [a.name for a in aggs]))
        if not aggs:
            raise InvalidArgument("at least one aggregate is needed (e.g. 'count')")
        names = [a.name for a in aggs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidArgument(f"aggregates: duplicate output column(s) {dup}")
        object.__setattr__(self, "aggregates", aggs)
        filters = [self.filters] if isinstance(self.filters, (str, Filter)) else list(self.filters)
        object.__setattr__(self, "filters", tuple(Filter.parse(f) for f in filters))
        if not isinstance(self.time, str) or not self.time:
            raise InvalidArgument(f"time must name a column, got {self.time!r}")
        if isinstance(self.lateness, str):
            object.__setattr__(self, "lateness", parse_duration(self.lateness, "lateness"))
        if isinstance(self.lateness, bool) or not isinstance(self.lateness, int) or self.lateness < 0:
            raise InvalidArgument(f"lateness must be >= 0 ms or a duration like '2s', got {self.lateness!r}")
        if self.time_unit is not None and self.time_unit not in _TIME_UNITS:
            raise InvalidArgument(f"time_unit must be one of {list(_TIME_UNITS)}, got {self.time_unit!r}")

    # -- schema ----------------------------------------------------------------
    @property
    def value_columns(self) -> List[str]:
        return value_columns(self.aggregates)

    @property
    def input_columns(self) -> List[str]:
        """The projection: every column the query reads."""
        cols = [self.time, *self.key, *self.value_columns, *(f.column for f in self.filters)]
        return list(dict.fromkeys(cols))

    def check(self, schema: pa.Schema) -> None:
        """Raises SchemaError naming the column when the input cannot run this query."""
        names = schema.names
        if self.time not in names:
            raise SchemaError(f"time column {self.time!r} is missing (input has {names})")
        t = schema.field(self.time).type
        if not (pa.types.is_integer(t) or is_time_like(t)):
            hint = (" (cast it to a timestamp first, as Spark's window() casts a string in the "
                    "session time zone: df.withColumn(COL, F.col(COL).cast('timestamp')))"
                    if is_str(plain_type(t)) else "")
            raise SchemaError(f"time column {self.time!r} must be an integer (ms, or time_unit=), "
                              f"a timestamp or a date, got {t}{hint}")
        if self.time_unit is not None and not pa.types.is_integer(t):
            raise SchemaError(f"time_unit={self.time_unit!r} applies to integer time columns; "
                              f"{self.time!r} is {t}, which carries its own unit")
        for k in self.key:
            if k not in names:
                raise SchemaError(f"key column {k!r} is missing (input has {names})")
            kt = plain_type(schema.field(k).type)
            if not (int_like(kt) or is_str(kt) or is_bin(kt)):
                why = (": a key is encoded into a fixed width (at most 64 bytes for a composite key) "
                       "and an array or map of any length has none; group by its elements instead"
                       if pa.types.is_list(kt) or pa.types.is_large_list(kt) or pa.types.is_map(kt)
                       else "")
                raise SchemaError(f"key column {k!r} must be an integer, boolean, string, binary, "
                                  f"date or timestamp column, got {schema.field(k).type}{why}")
        for a in self.aggregates:
            if a.column is None:
                continue
            if a.column not in names:
                raise SchemaError(f"aggregate {a.kind}:{a.column} reads missing column {a.column!r} "
                                  f"(input has {names})")
            vt = schema.field(a.column).type
            if a.kind in SKETCH_ANY_TYPE and (_value_ok(vt) or int_like(plain_type(vt)) or
                                              is_str(plain_type(vt)) or is_bin(plain_type(vt))):
                continue
            if a.kind != "count" and not _value_ok(vt):
                hint = " (decimal precision must be <= 18)" if pa.types.is_decimal(vt) else ""
                raise SchemaError(f"aggregate {a.kind}:{a.column} needs a numeric column; "
                                  f"{a.column!r} is {vt}{hint}")
        for f in self.filters:
            f.check(schema)
        window_ticks(self.window, TIME_UNITS[self.tick_unit(schema)])  # lengths fit in int64 ticks

    def tick_unit(self, schema: pa.Schema) -> str:
        """The unit the state runs in: the time column's own where it is
        finer than ms (us, ns), else ms."""
        t = schema.field(self.time).type
        if pa.types.is_timestamp(t):
            return t.unit if t.unit in ("us", "ns") else "ms"
        if pa.types.is_integer(t) and self.time_unit in ("us", "ns"):
            return self.time_unit
        return "ms"

    def _key_mode(self, schema: pa.Schema) -> str:
        """How keys reach the core: 'int' (one int64), 'string' (one string
        column) or 'composite' (encoded bytes; also a single binary column)."""
        if len(self.key) == 1:
            t = plain_type(schema.field(self.key[0]).type)
            if int_like(t):
                return "int"
            if is_str(t):
                return "string"
        return "composite"

    def key_type(self, schema: pa.Schema) -> str:
        return {"int": "int64", "string": "string", "composite": "binary"}[self._key_mode(schema)]

    def state_config(self, schema: pa.Schema, partitions: int = 1,
                     nullable: Optional[Sequence[str]] = None) -> StateConfig:
        """The state's config for this query over `schema`. ``nullable``: the
        columns that may hold nulls (default: the schema's nullable fields);
        a column known to hold none costs no null tracking."""
        self.check(schema)
        may_null = set(nullable) if nullable is not None else \
            {f.name for f in schema if f.nullable}
        types = {c: "float64" if pa.types.is_floating(schema.field(c).type) else "int64"
                 for c in self.value_columns}
        mode = self._key_mode(schema)
        # the state aligns windows at 0: time_ticks has shifted the times by the offset
        return StateConfig(window=replace(self.window, offset_ms=0) if self.offset_ms
                           else self.window, aggregates=self.aggregates,
                           key_type=self.key_type(schema), partitions=partitions, value_types=types,
                           time_unit=self.tick_unit(schema),
                           nullable=[c for c in self.value_columns if c in may_null],
                           key_nullable=mode != "composite" and self.key[0] in may_null,
                           key_names=self.key)

    def output_names(self, schema: pa.Schema) -> List[str]:
        return ["window_start", "window_end", *self.key, *(a.name for a in self.aggregates),
                *(["rank"] if self.top else [])]

    # -- time ------------------------------------------------------------------
    @property
    def offset_ms(self) -> int:
        """The window's offset (Spark's startTime), 0 for none."""
        return getattr(self.window, "offset_ms", 0)

    def time_ticks(self, col: Any, schema: pa.Schema) -> pa.Array:
        """The time column as int64 in :meth:`tick_unit` (nulls kept; floored),
        less the window offset: the times the state sees. A date is its
        midnight in :attr:`time_zone`. A time the unit cannot hold raises
        SchemaError naming it (never wraps)."""
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        t = col.type
        scale = 1
        if pa.types.is_timestamp(t):
            out = col.view(pa.int64())
            scale = 1000 if t.unit == "s" else 1
        elif pa.types.is_date(t):
            out = _midnight_ms(col, self.time_zone or "UTC")
        else:
            out = col if t == pa.int64() else col.cast(pa.int64())
            scale = _SCALE_TO_MS.get(self.time_unit or "ms", 1)
        off = self.offset_ms * TIME_UNITS[self.tick_unit(schema)]
        if scale == 1 and not off:
            return out
        try:
            if scale != 1:
                out = pc.multiply_checked(out, _i64(scale))
            return pc.subtract_checked(out, _i64(off)) if off else out
        except pa.ArrowInvalid:
            raise self._unrepresentable(col, schema) from None

    def _unrepresentable(self, col: pa.Array, schema: pa.Schema) -> OutOfRange:
        mm = pc.min_max(col)
        return OutOfRange(
            f"time column {self.time!r}: a time between {mm['min']} and {mm['max']} cannot be "
            f"held as int64 {self.tick_unit(schema)}"
            + (f" shifted by the window offset of {self.offset_ms} ms" if self.offset_ms else "")
            + "; it would wrap around, so it is refused")

    def watermark_ticks(self, value: Any, schema: pa.Schema) -> Optional[int]:
        """A source's promise (a scalar of the time column's type) in ticks."""
        if value is None:
            return None
        if isinstance(value, pa.Scalar):
            if not value.is_valid:
                return None
            arr = pa.repeat(value, 1)  # (pa.array of a Python value imports pandas)
        else:
            arr = pa.array([value], schema.field(self.time).type)
        want = schema.field(self.time).type
        if arr.type != want:
            arr = arr.cast(want)
        return self.time_ticks(arr, schema)[0].as_py()

    def ticks_to_ms(self, ticks: int, schema: pa.Schema) -> int:
        """State ticks (:meth:`time_ticks`) back to the time column's ms."""
        return ticks // TIME_UNITS[self.tick_unit(schema)] + self.offset_ms

    def window_column(self, col: Any, schema: pa.Schema) -> pa.Array:
        """Window bounds (int64 ticks) in the input's kind: timestamps for
        timestamps and dates, int64 ms for integers."""
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        t = schema.field(self.time).type
        unit = self.tick_unit(schema)
        if self.offset_ms:
            col = pc.add(col, _i64(self.offset_ms * TIME_UNITS[unit]))
        if pa.types.is_timestamp(t):
            return col.view(pa.timestamp(unit, t.tz))
        if pa.types.is_date(t):  # midnight in time_zone: an instant, as Spark's cast makes it
            return col.view(pa.timestamp("ms", "UTC"))
        div = TIME_UNITS[unit]
        if div == 1:
            return col
        return pa.array(np.floor_divide(col.to_numpy(zero_copy_only=False), div), pa.int64())

    # -- per batch -------------------------------------------------------------
    def prepare(self, batch: Union[pa.RecordBatch, pa.Table]) -> pa.RecordBatch:
        """Filter and projection: a batch of columns ``key``, ``time`` (int64
        ticks) and the value columns, as the executor takes them."""
        batch = one_batch(batch)
        if self.filters and batch.num_rows:
            m = self.filters[0].mask(batch)
            for f in self.filters[1:]:
                m = pc.and_(m, f.mask(batch))
            batch = batch.filter(m)
        return self.project(batch)

    def project(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The columns the executor takes (``key``, ``time`` in int64 ticks,
        the value columns) of ``batch`` as it is, its rows not filtered (what
        :meth:`prepare` does after the filters)."""
        cols = {"key": self.encode_keys(batch),
                "time": self.time_ticks(batch.column(self.time), batch.schema)}
        for c in self.value_columns:
            col = batch.column(c)
            t = col.type
            if pa.types.is_decimal(t):
                col = decimal_unscaled(col)
            elif pa.types.is_dictionary(t):
                col = col.dictionary_decode()
            cols[c] = col
        return pa.RecordBatch.from_pydict(cols)

    def prepare_selected(self, batch: Union[pa.RecordBatch, pa.Table]
                         ) -> Tuple[pa.RecordBatch, Optional[np.ndarray]]:
        """As :meth:`prepare`, but the filters become a selection for
        :meth:`slash.Executor.push_batch` (``skip=``, True = dropped) instead
        of a copy of the rows that pass: (batch of every row, skip or None).
        A batch whose key is not one integer or string column, or whose
        string key somewhere is longer than a key may be (that row may be
        one the filters drop), is filtered as :meth:`prepare` does."""
        batch = one_batch(batch)
        if not self.filters or not batch.num_rows or not self._selectable(batch):
            return self.prepare(batch), None
        skip = self.filters[0].skip(batch)
        for f in self.filters[1:]:
            skip |= f.skip(batch)
        return self.project(batch), skip

    def _selectable(self, batch: pa.RecordBatch) -> bool:
        """Whether every row's key reaches the core as it is, filtered or not:
        one integer key, or one string key none of whose values (a
        dictionary's: its entries) is longer than KEY_MAX_BYTES."""
        mode = self._key_mode(batch.schema)
        if mode == "int":
            return True
        if mode != "string":
            return False
        col = batch.column(self.key[0])
        if pa.types.is_dictionary(col.type):
            col = col.dictionary
        longest = pc.max(pc.binary_length(col)).as_py()
        return longest is None or longest <= KEY_MAX_BYTES

    def encode_keys(self, batch: pa.RecordBatch, key_max: int = KEY_MAX_BYTES) -> pa.Array:
        """The key column(s) as the executor's ``key``; ``key_max``: the most
        bytes an encoded key may take (a join's may be longer)."""
        mode = self._key_mode(batch.schema)
        if mode == "int":
            return as_int64(batch.column(self.key[0]))
        if mode == "string":
            col = batch.column(self.key[0])
            return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col
        return encode_composite([batch.column(k) for k in self.key], list(self.key), key_max)

    def decode_keys(self, key_col: Any, schema: pa.Schema) -> Dict[str, pa.Array]:
        """The executor's ``key`` column back into the key columns, in order."""
        if isinstance(key_col, pa.ChunkedArray):
            key_col = key_col.combine_chunks()
        mode = self._key_mode(schema)
        k0 = schema.field(self.key[0]).type
        if mode == "int":
            return {self.key[0]: redict(from_int64(cast(key_col, pa.int64()), k0), k0)}
        if mode == "string":
            return {self.key[0]: redict(cast(key_col, plain_type(k0)), k0)}
        cols = decode_composite(key_col, [(k, schema.field(k).type) for k in self.key])
        return {k: redict(c, schema.field(k).type) for k, c in cols.items()}

    def finalize(self, results: pa.Table, schema: pa.Schema, sort: bool = True) -> pa.Table:
        """Executor results (key column ``key``, window bounds in ticks) to
        the output shape: window bounds in the input's kind, the key decoded
        into its columns (types as in the input), min/max in the value
        column's type, sums of decimals as decimals; rows sorted (unless
        ``sort`` is false: a Spark task's part need not be, and sorting
        millions of rows costs more than the rest)."""
        cols: Dict[str, Any] = {"window_start": self.window_column(results.column("window_start"), schema),
                                "window_end": self.window_column(results.column("window_end"), schema)}
        cols.update(self.decode_keys(results.column("key"), schema))
        for a in self.aggregates:
            col = results.column(a.name)
            if isinstance(col, pa.ChunkedArray):
                col = col.combine_chunks()
            vt = schema.field(a.column).type if a.column else None
            if vt is not None and pa.types.is_dictionary(vt):
                vt = vt.value_type
            if vt is not None and a.kind not in COUNT_KINDS:
                if pa.types.is_decimal(vt):
                    if a.kind in FLOAT_KINDS:
                        col = pc.divide(col, float(10 ** vt.scale))
                    else:
                        col = decimal_from_unscaled(col.cast(pa.int64()),
                                                     _sum_type(vt) if a.kind == "sum" else vt)
                elif a.kind in ("min", "max", "first", "last") and col.type != vt:
                    col = col.cast(vt)
            cols[a.name] = col
        out = pa.table(cols)
        if self.top:
            return _top_n(out, self.top[0], self.top[1], list(self.key))
        return sorted_table(out, ["window_start", *self.key]) if sort else out


def _parse_top(specs: List[str], given: Any, names: List[str]) -> Optional[Tuple[int, str]]:
    """(N, COL) of a query's one ``top:N:COL`` (or its ``top=`` argument)."""
    if len(specs) + (given is not None) > 1:
        raise InvalidArgument(f"a query takes one top:N:COL, got {specs + ([given] if given else [])}")
    if not specs and given is None:
        return None
    spec = specs[0].strip()[len("top:"):] if specs else given
    if isinstance(spec, str):
        n_text, _, col = spec.partition(":")
        try:
            n: Any = int(n_text)
        except ValueError:
            raise InvalidArgument(f"top:N:COL needs an integer N, got {n_text!r}") from None
    elif isinstance(spec, (tuple, list)) and len(spec) == 2:
        n, col = spec
    else:
        raise InvalidArgument(f"top must be (N, COL) or 'N:COL', got {spec!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgument(f"top:N:COL needs N >= 1, got {n!r}")
    if col not in names:
        raise InvalidArgument(f"top:{n}:{col}: {col!r} is not an aggregate of this query; it ranks "
                              f"by one of {names}")
    return n, col


def _top_n(table: pa.Table, n: int, col: str, keys: List[str]) -> pa.Table:
    """Per window_start, the n rows with the largest ``col`` (ties: the
    smaller key first; nulls last), in rank order, with a ``rank`` column."""
    by = ["window_start", col, *keys]
    cols = {c: (table.column(c).cast(table.schema.field(c).type.value_type)
                if pa.types.is_dictionary(table.schema.field(c).type) else table.column(c))
            for c in by}
    order = pc.sort_indices(pa.table(cols), [(c, "descending" if c == col else "ascending")
                                             for c in by])  # nulls at the end: Arrow's default
    t = table.take(order)
    ws = to_numpy(as_int64(t.column("window_start").combine_chunks()))
    pos = np.arange(len(ws))
    first = np.maximum.accumulate(np.where(np.r_[True, ws[1:] != ws[:-1]], pos, 0)) if len(ws) \
        else pos
    rank = pos - first + 1
    keep = rank <= n
    return t.filter(pa.array(keep)).append_column("rank", pa.array(rank[keep], pa.int64()))
