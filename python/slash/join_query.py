"""A windowed join query: an inner equi-join of two inputs (:class:`JoinQuery`).

Tumbling and session windows pair rows in the join state directly; interval
and sliding-window joins run on buckets (:mod:`slash.interval`) and filter
the candidate pairs when finalising. Keys and times become the core's as a
:class:`slash.agg_query.Query` over the key columns makes them.

Payload: numbers travel as one int64 or float64 word each; a string or
binary column as ``payload_words(string_bytes)`` words (its length, then its
bytes, zero-padded); a side's ``__valid`` word holds bit j set when payload
column j is not null. Invariant: a side's payload takes at most
``MAX_JOIN_COLUMNS - 1`` words; a longer value is refused, never cut.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from slash import _core
from slash.agg_query import Query
from slash.arrow_np import scalar, to_numpy
from slash.columns import (as_int64, binary_buffers, from_int64, is_bin, is_int, is_str, is_time_like,
                           one_batch, plain_type, redict, sorted_table)
from slash.compute import pc
from slash.errors import InvalidArgument, SchemaError
from slash.interval import TS, IntervalPlan, take_rows
from slash.join import JoinConfig
from slash.limits import JOIN_KEY_MAX_BYTES, MAX_JOIN_COLUMNS
from slash.state_config import TIME_UNITS
from slash.window import Sliding, Window, parse_window


def _is_numeric_payload(t: pa.DataType) -> bool:
    return is_int(t) or pa.types.is_floating(t) or is_time_like(t)


def _is_bytes_payload(t: pa.DataType) -> bool:
    t = plain_type(t)
    return is_str(t) or is_bin(t)


_VALID = "__valid"  # a side's payload validity: bit j set = column j not null

# A string or binary payload column COL travels as the 8-byte words COL,
# COL\x1f1, COL\x1f2, ... of its values packed to string_bytes: per row the
# value's length (2 bytes, little-endian) and its bytes, zero-padded. The
# join state, its deltas, checkpoints and hand-overs hold them as any other
# column, so each value costs its declared width whatever its length.
_WORD = "\x1f"
_LEN_BYTES = 2
MAX_STRING_BYTES = 8 * (MAX_JOIN_COLUMNS - 1) - _LEN_BYTES  # one word is the validity


def payload_words(string_bytes: int) -> int:
    """8-byte words a string/binary payload column of ``string_bytes`` takes."""
    return (string_bytes + _LEN_BYTES + 7) // 8


def _word_names(col: str, words: int) -> List[str]:
    return [col] + [f"{col}{_WORD}{i}" for i in range(1, words)]


def _pack_bytes(col: pa.Array, width: int, what: str) -> List[np.ndarray]:
    """A string/binary column as payload_words(width) int64 columns (nulls
    as empty values; the validity word keeps them). SchemaError naming
    ``what`` for a value longer than ``width`` bytes."""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if col.null_count:
        col = pc.fill_null(col, scalar("" if is_str(col.type) else b"", col.type))
    n = len(col)
    offs, data = binary_buffers(col)
    lens = np.diff(offs)
    if n and int(lens.max()) > width:
        row = int(np.argmax(lens > width))
        raise SchemaError(f"{what}: the value at row {row} is {int(lens[row])} bytes, longer "
                          f"than string_bytes={width}, the most a joined string or binary value "
                          f"holds (raise string_bytes, up to {MAX_STRING_BYTES})")
    return list(_core.pack_payload_bytes(np.ascontiguousarray(offs), data, payload_words(width)))


def _unpack_bytes(words: List[np.ndarray], t: pa.DataType, valid: np.ndarray) -> pa.Array:
    """The inverse of _pack_bytes: the column in type ``t``, null where
    ``valid`` (bool per row) is False."""
    n = len(words[0])
    offs, data = _core.unpack_payload_bytes(list(words))
    plain = plain_type(t)
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    arr = pa.Array.from_buffers(pa.large_string() if is_str(plain) else pa.large_binary(), n,
                                [bitmap, pa.py_buffer(offs), pa.py_buffer(data)])
    return redict(arr.cast(plain), t)


@dataclass(frozen=True)
class JoinQuery:
    """A windowed inner equi-join of two inputs (NEXMark Q8's shape).

    ``time``: the event-time column of both sides (as :class:`Query` takes
    it: integers with ``time_unit``, timestamps, dates at midnight in
    ``time_zone``); ``window``:
    ``"tumbling:SIZE"`` (pairs whose rows fall in the same window) or
    ``"session:GAP"`` (pairs within one session of the key, sessions formed
    over both sides' rows); ``on``: the key column(s), named alike on both
    sides (string, binary or composite keys of at most 255 bytes);
    ``left_columns`` / ``right_columns``: the payload each side carries
    (default: every column but the keys): integers, floats, dates,
    timestamps, strings and binary. ``string_bytes``: the most bytes
    (UTF-8 for strings) a string or binary payload value holds; each such
    value is kept and shipped in that many bytes plus 2 (rounded up to 8),
    whatever its length, and a longer one is refused (SchemaError naming the
    column). A side's payload fits in 63 words of 8 bytes (numbers: one;
    strings: ``payload_words(string_bytes)``). Null keys never match (SQL);
    rows with a null time are in no window; null payload values come back
    as nulls.

    Output: ``window_start``, ``window_end``, the key columns, then
    ``left_COL`` for each left payload column and ``right_COL`` for each right one.
    """

    time: str
    window: Union[str, Window, None] = None
    on: Sequence[str] = ()
    left_columns: Optional[Sequence[str]] = None
    right_columns: Optional[Sequence[str]] = None
    lateness: Union[int, str] = 0
    time_unit: Optional[str] = None
    time_zone: Optional[str] = None
    string_bytes: int = 32
    interval: Optional[Any] = None

    def __post_init__(self) -> None:
        sb = self.string_bytes
        if isinstance(sb, bool) or not isinstance(sb, int) or not 1 <= sb <= MAX_STRING_BYTES:
            raise InvalidArgument(f"string_bytes must be an int in 1..{MAX_STRING_BYTES}, "
                                  f"got {sb!r}")
        if not self.on:
            raise InvalidArgument("on: a join needs its key column(s), named alike on both sides")
        # -- interval and sliding-window joins (slash.interval) run on buckets
        plan = None
        if self.interval is not None:
            if self.window is not None:
                raise InvalidArgument(f"interval={self.interval!r} and window={self.window!r}: an "
                                      "interval join pairs rows by their time distance, not by "
                                      "windows; give one")
            plan = IntervalPlan.for_interval(self.interval)
            object.__setattr__(self, "interval", (plan.lo, plan.hi))
        elif self.window is None:
            raise InvalidArgument("a join needs window= (tumbling, session or sliding) or "
                                  "interval= (lower, upper)")
        elif isinstance(parse_window(self.window), Sliding):
            plan = IntervalPlan.for_sliding(parse_window(self.window))
        object.__setattr__(self, "_plan", plan)
        helper = Query(time=self.time, window=plan.window if plan else self.window, key=self.on,
                       lateness=self.lateness, time_unit=self.time_unit, time_zone=self.time_zone)
        object.__setattr__(self, "time_zone", helper.time_zone)
        if plan is None or plan.sliding is None:
            object.__setattr__(self, "window", None if plan else helper.window)
        object.__setattr__(self, "on", helper.key)
        object.__setattr__(self, "lateness", helper.lateness)
        for name in ("left_columns", "right_columns"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, tuple([v] if isinstance(v, str) else v))

    @property
    def key_query(self) -> Query:
        """The window aggregation over the same time, window (an interval
        join's: its buckets), key, lateness and time unit: what reads the
        join's keys and event times (encodes keys, converts times and
        statistics bounds to ticks) the way the engine's aggregations do."""
        plan = self._plan
        return Query(time=self.time, window=plan.window if plan else self.window, key=self.on,
                     lateness=self.lateness, time_unit=self.time_unit, time_zone=self.time_zone)

    def payload(self, side: str, schema: pa.Schema) -> List[str]:
        given = self.left_columns if side == "left" else self.right_columns
        if given is None:
            return [c for c in schema.names if c not in self.on and c != _VALID]
        return list(given)

    def check(self, left: pa.Schema, right: pa.Schema) -> None:
        """Raises SchemaError naming the side and column that cannot run."""
        for side, schema in (("left", left), ("right", right)):
            try:
                self.key_query.check(schema)
            except SchemaError as e:
                raise SchemaError(f"{side} input: {e}") from None
            cols = self.payload(side, schema)
            for c in cols:
                if c not in schema.names:
                    raise SchemaError(f"{side} input: payload column {c!r} is missing "
                                      f"(has {schema.names})")
                t = schema.field(c).type
                if not (_is_numeric_payload(t) or _is_bytes_payload(t)):
                    raise SchemaError(f"{side} input: join payload column {c!r} is {t}; joins carry "
                                      "integer, float, date, timestamp, string or binary columns "
                                      "(select others out)")
            words = sum(self._words(schema, c) for c in cols)
            if words > MAX_JOIN_COLUMNS - 1:
                raise SchemaError(
                    f"{side} input: the payload {cols} takes {words} words of 8 bytes, at most "
                    f"{MAX_JOIN_COLUMNS - 1} fit (a number takes 1, a string or binary column "
                    f"{payload_words(self.string_bytes)} at string_bytes={self.string_bytes}): "
                    "carry fewer columns or lower string_bytes")
        kt = [self.key_query.key_type(s) for s in (left, right)]
        if kt[0] != kt[1]:
            raise SchemaError(f"join keys {list(self.on)} have different types on the two sides "
                              f"({kt[0]} vs {kt[1]})")
        units = [self.key_query.tick_unit(s) for s in (left, right)]
        if units[0] != units[1]:
            raise SchemaError(f"time column {self.time!r} has different units on the two sides "
                              f"({left.field(self.time).type} vs {right.field(self.time).type})")

    def _words(self, schema: pa.Schema, col: str) -> int:
        """8-byte words payload column ``col`` takes in the join state."""
        return payload_words(self.string_bytes) if _is_bytes_payload(schema.field(col).type) else 1

    def join_config(self, left: pa.Schema, right: pa.Schema, partitions: int = 1):
        self.check(left, right)

        def types(side: str, schema: pa.Schema) -> Dict[str, str]:
            out: Dict[str, str] = {}
            for c in self.payload(side, schema):
                t = schema.field(c).type
                if _is_bytes_payload(t):
                    out.update((w, "int64") for w in _word_names(c, self._words(schema, c)))
                else:
                    out[c] = "float64" if pa.types.is_floating(t) else "int64"
            out[_VALID] = "int64"
            if self._plan:
                out[TS] = "int64"
            return out

        w = self.key_query.window
        unit = self.key_query.tick_unit(left)
        plan = self._plan  # its candidates filtered to the interval as they are emitted
        band = (TS, plan.lo * TIME_UNITS[unit], plan.hi * TIME_UNITS[unit]) if plan else None
        return JoinConfig(window=replace(w, offset_ms=0) if getattr(w, "offset_ms", 0)
                          else w, key_type=self.key_query.key_type(left),
                          left_columns=types("left", left), right_columns=types("right", right),
                          partitions=partitions, time_unit=unit, key_names=tuple(self.on),
                          lead_ms=plan.lead_ms if plan else 0, band=band)

    def input_columns(self, side: str, schema: pa.Schema) -> List[str]:
        return list(dict.fromkeys([self.time, *self.on, *self.payload(side, schema)]))

    def prepare(self, side: str, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
        """One side's batch as the executor takes it: key, time, payload
        (rows with a null key or time left out)."""
        return self.prepare_counted(side, batch, schema)[0]

    def prepare_counted(self, side: str, batch: pa.RecordBatch,
                        schema: pa.Schema) -> Tuple[pa.RecordBatch, int]:
        """As :meth:`prepare`, with the number of rows left out for a null time."""
        batch = one_batch(batch)
        null_times = batch.column(self.time).null_count
        drop = None
        for c in (self.time, *self.on):
            col = batch.column(c)
            if col.null_count:
                ok = col.is_valid()
                drop = ok if drop is None else pc.and_(drop, ok)
        if drop is not None:
            batch = batch.filter(drop)
        keys = self.key_query
        cols = {"key": keys.encode_keys(batch, JOIN_KEY_MAX_BYTES),
                "time": keys.time_ticks(batch.column(self.time), batch.schema)}
        valid = np.zeros(batch.num_rows, np.int64)
        for j, c in enumerate(self.payload(side, schema)):
            col = batch.column(c)
            if _is_bytes_payload(col.type):
                valid |= (to_numpy(col.is_valid()).astype(np.int64) if col.null_count else 1) << j
                words = _pack_bytes(col, self.string_bytes, f"{side} payload column {c!r}")
                cols.update(zip(_word_names(c, len(words)), words))
                continue
            if is_time_like(col.type):
                col = as_int64(col)
            if col.null_count:
                valid |= col.is_valid().to_numpy(zero_copy_only=False).astype(np.int64) << j
                col = pc.fill_null(col, 0)
            else:
                valid |= 1 << j
            cols[c] = col
        cols[_VALID] = pa.array(valid, pa.int64())
        if self._plan:  # stored at their buckets' times, with the event time kept
            ts = to_numpy(cols["time"]).astype(np.int64, copy=False)
            idx, stored = self._plan.stored_times(side, ts, TIME_UNITS[keys.tick_unit(schema)])
            n = len(ts)
            cols[TS] = pa.array(ts, pa.int64())
            cols["time"] = pa.array(stored[:n], pa.int64())
            out = pa.RecordBatch.from_pydict(cols)
            if len(idx) == n:
                return out, null_times
            extra = take_rows(out, idx[n:]).set_column(1, "time", pa.array(stored[n:], pa.int64()))
            return pa.Table.from_batches([out, extra]).combine_chunks().to_batches()[0], null_times
        return pa.RecordBatch.from_pydict(cols), null_times

    def finalize(self, results: pa.Table, left: pa.Schema, right: pa.Schema) -> pa.Table:
        """Executor results to the output shape: window bounds in the input's
        kind, keys decoded, payload types and nulls restored, rows sorted."""
        keys = self.key_query
        if self._plan:
            results, ws, we = self._time_pairs(results, left)
        else:
            ws, we = results.column("window_start"), results.column("window_end")
        cols: Dict[str, Any] = {}
        if ws is not None:
            cols = {"window_start": keys.window_column(ws, left),
                    "window_end": keys.window_column(we, left)}
        cols.update(keys.decode_keys(results.column("key"), left))
        for side, schema in (("left", left), ("right", right)):
            valid = results.column(f"{side}_{_VALID}").to_numpy()
            for j, c in enumerate(self.payload(side, schema)):
                t = schema.field(c).type
                col = results.column(f"{side}_{c}")
                if isinstance(col, pa.ChunkedArray):
                    col = col.combine_chunks()
                mask = (valid >> j) & 1 == 0
                if _is_bytes_payload(t):
                    cols[f"{side}_{c}"] = _unpack_bytes(
                        [to_numpy(results.column(f"{side}_{w}"))
                         for w in _word_names(c, self._words(schema, c))], t, ~mask)
                    continue
                if is_time_like(t):
                    col = from_int64(col.cast(pa.int64()), t)
                elif is_int(t):
                    col = col.cast(t)
                elif col.type != t:
                    col = col.cast(t)
                if mask.any():
                    col = pc.if_else(pa.array(mask), pa.scalar(None, col.type), col)
                cols[f"{side}_{c}"] = col
        out = pa.table(cols)
        return sorted_table(out, out.column_names)

    def _time_pairs(self, results: pa.Table, schema: pa.Schema) -> Tuple[pa.Table, Any, Any]:
        """Interval and sliding joins: the candidate pairs of the buckets
        filtered to the interval (sliding: repeated once per window both rows
        fall in), with their window bounds in ticks (None for an interval
        join). The join state's band (join_config) emits only pairs inside
        the interval, so the filter here takes nothing out; it stays as the
        check of what an emit promises."""
        plan = self._plan
        tpm = TIME_UNITS[self.key_query.tick_unit(schema)]
        lt, rt = (to_numpy(results.column(f"{s}_{TS}")).astype(np.int64) for s in ("left", "right"))
        keep = np.flatnonzero(plan.matches(lt, rt, tpm))
        if len(keep) < len(lt):
            results, lt, rt = results.take(pa.array(keep, pa.int64())), lt[keep], rt[keep]
        if plan.sliding is None:
            return results, None, None
        pair, start, end = plan.windows(lt, rt, tpm)
        return results.take(pa.array(pair, pa.int64())), pa.array(start, pa.int64()), \
            pa.array(end, pa.int64())
