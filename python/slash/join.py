"""The windowed join state: an inner equi-join of two streams on a key within
tumbling or session windows, kept as append-set CRDTs in C.

:class:`JoinBackend` appends batches of each side's rows (NumPy or Arrow
columns) to the (window, key) sets in C, hands out each key partition's
changed span as a zero-copy buffer at epoch boundaries
(:meth:`JoinBackend.delta`), merges (appends) such buffers from other
executors (:meth:`JoinBackend.merge_delta`), and emits every left x right pair
of finished windows as an Arrow record batch. Merging is multiset union, so
results are a multiset: their row order is unspecified (sort to compare).

Windows: ``tumbling:SIZE`` puts a row at t in ``[floor(t/size)*size, +size)``
(start inclusive, end exclusive, aligned at 0); ``session:GAP`` forms, per
key and over the rows of *both* sides, sessions ``[first row, last row +
gap)`` in which consecutive rows are at most ``gap`` apart (as Spark's
``session_window`` and Flink's session windows form them); a row that
bridges two sessions fuses them. A pair is joined when both rows have the
same key and fall in the same window or session (the NEXMark Q8 shape).

>>> import numpy as np
>>> from slash.join import JoinBackend, JoinConfig
>>> cfg = JoinConfig(window="tumbling:10s", left_columns={"name": "int64"},
...                  right_columns={"price": "float64"})
>>> with JoinBackend(cfg) as jb:
...     jb.update_left(keys=[1, 2], times=[1_000, 2_000], columns={"name": [7, 8]})
...     jb.update_right(keys=[1, 1], times=[3_000, 12_000], columns={"price": [9.5, 1.0]})
...     jb.emit(10_000).to_pylist()
[{'window_start': 0, 'window_end': 10000, 'key': 1, 'left_name': 7, 'right_price': 9.5}]
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import pyarrow as pa

from slash import _core
from slash.errors import InvalidArgument, SchemaError
from slash.limits import JOIN_KEY_MAX_BYTES, MAX_JOIN_COLUMNS
from slash.state import TIME_UNITS, VALUE_TYPES, StateBackend, StateConfig, as_numeric, \
    prepare_columns, result_batch
from slash.state_config import check_keys_and_partitions
from slash.window import Session, Sliding, Tumbling, Window, state_window, window_ticks

log = logging.getLogger(__name__)

MAX_COLUMNS = MAX_JOIN_COLUMNS  # per side
SIDES = ("left", "right")


def _check_columns(cols: Any, what: str) -> Dict[str, str]:
    if not isinstance(cols, Mapping):
        raise InvalidArgument(f"{what} must be a mapping of column name to 'int64' or "
                              f"'float64', got {cols!r}")
    if len(cols) > MAX_COLUMNS:
        raise InvalidArgument(f"{what}: at most {MAX_COLUMNS} columns, got {len(cols)}")
    for name, t in cols.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"{what}: column names must be non-empty strings, got {name!r}")
        if t not in VALUE_TYPES:
            raise InvalidArgument(f"{what}[{name!r}] must be one of {VALUE_TYPES}, got {t!r}")
    return dict(cols)


@dataclass(frozen=True)
class JoinConfig:
    """Configuration of a :class:`JoinBackend`.

    ``window``: ``"tumbling:SIZE"`` or ``"session:GAP"`` (or a
    :mod:`slash.window` Tumbling/Session). ``key_type``: ``"int64"``,
    ``"string"`` or ``"binary"`` (at most 255 bytes: ``JOIN_KEY_MAX_BYTES``).
    ``left_columns`` and ``right_columns`` map each side's payload columns
    to ``"int64"`` or ``"float64"`` (at most 64 per side); results name them
    ``left_NAME`` and ``right_NAME``. ``partitions``: key partitions, each
    with its own delta. ``key_names``: the input columns the keys come from
    (a query's join keys), named in errors about key values. ``lead_ms``:
    how far the times rows are stored at may lead their event times (an
    interval join's buckets, :mod:`slash.interval`); an executor's watermark
    holds back by it, so a stored copy is late only when its row is.
    ``band``: None, or ``(column, lo, hi)``: an emit gives only the pairs
    whose int64 ``column`` (on both sides) has ``lo <= left - right <= hi``
    (in the column's units): an interval join's candidates filtered to its
    interval in C, each group's right rows sorted once (join_band.c).

    >>> JoinConfig(window="session:5s", right_columns={"bid": "int64"}).output_names
    ['window_start', 'window_end', 'key', 'right_bid']
    """

    window: Union[str, Window] = "tumbling:10s"
    key_type: str = "int64"
    left_columns: Mapping[str, str] = field(default_factory=dict)
    right_columns: Mapping[str, str] = field(default_factory=dict)
    partitions: int = 1
    time_unit: str = "ms"
    key_names: Tuple[str, ...] = ()
    lead_ms: int = 0
    band: Optional[Tuple[str, int, int]] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_names", tuple(self.key_names))
        if isinstance(self.lead_ms, bool) or not isinstance(self.lead_ms, int) or self.lead_ms < 0:
            raise InvalidArgument(f"lead_ms must be an int >= 0, got {self.lead_ms!r}")
        if self.time_unit not in TIME_UNITS:
            raise InvalidArgument(f"time_unit must be one of {list(TIME_UNITS)}, got {self.time_unit!r}")
        w = state_window(self.window)
        if isinstance(w, Sliding):
            raise InvalidArgument(f"window: a join takes a tumbling or session window, got {w} "
                                  "(a sliding window would copy each row into several sets)")
        object.__setattr__(self, "window", w)
        check_keys_and_partitions(self.key_type, self.partitions)
        object.__setattr__(self, "left_columns", _check_columns(self.left_columns, "left_columns"))
        object.__setattr__(self, "right_columns",
                           _check_columns(self.right_columns, "right_columns"))
        if self.band is not None:
            self._check_band()

    def _check_band(self) -> None:
        band = self.band
        if not (isinstance(band, tuple) and len(band) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) for v in band[1:])):
            raise InvalidArgument(f"band must be (column, lo, hi) with int bounds, got {band!r}")
        col, lo, hi = band
        for side in SIDES:
            if self.columns(side).get(col) != "int64":
                raise InvalidArgument(f"band column {col!r} must be an int64 column of the "
                                      f"{side} side (has {dict(self.columns(side))})")
        if lo > hi:
            raise InvalidArgument(f"band: lower bound {lo} is above the upper bound {hi}")

    @property
    def ticks_per_ms(self) -> int:
        return TIME_UNITS[self.time_unit]

    def columns(self, side: str) -> Dict[str, str]:
        return self.left_columns if side == "left" else self.right_columns

    @property
    def output_names(self) -> List[str]:
        """Columns of an emitted batch, in order."""
        return (["window_start", "window_end", "key"]
                + [f"left_{c}" for c in self.left_columns]
                + [f"right_{c}" for c in self.right_columns])


def _window_args(w: Window, ticks_per_ms: int = 1) -> tuple:
    assert isinstance(w, (Tumbling, Session))
    return w.kind, window_ticks(w, ticks_per_ms)[0]


def _key_config(config: JoinConfig) -> StateConfig:
    """The state backend's view of the key and window, whose helpers check key
    and time columns and build the window/key columns of results."""
    return StateConfig(window=config.window, aggregates=(), key_type=config.key_type,
                       time_unit=config.time_unit, key_nullable=False, key_names=config.key_names)


def join_core_args(config: JoinConfig, partitions: Optional[int] = None) -> tuple:
    """The core's view of a join config: (window kind, size, key type,
    partitions, left column types, right column types, band: None or (left
    column index, right column index, lo, hi))."""
    kind, size = _window_args(config.window, config.ticks_per_ms)
    band = None
    if config.band is not None:
        col, lo, hi = config.band
        band = (list(config.left_columns).index(col), list(config.right_columns).index(col),
                lo, hi)
    return (kind, size, "int64" if config.key_type == "int64" else "bytes",
            partitions or config.partitions, list(config.left_columns.values()),
            list(config.right_columns.values()), band)


def prepare_side(config: JoinConfig, side: str, keys: Any, times: Any,
                 columns: Optional[Mapping[str, Any]]) -> tuple:
    """Checks one side's batch: returns (side index, times, int64 keys or None,
    columns, key offsets, key data). SchemaError names the bad column."""
    if side not in SIDES:
        raise InvalidArgument(f"side must be 'left' or 'right', got {side!r}")
    t, k, _, offsets, data, null_times = prepare_columns(_key_config(config), keys, times, None,
                                                         JOIN_KEY_MAX_BYTES)
    want = config.columns(side)
    columns = dict(columns or {})
    unknown = set(columns) - set(want)
    if unknown:
        raise SchemaError(f"unknown {side} column(s) {sorted(unknown)}; the {side} side has "
                          f"{list(want)}")
    cols = []
    for name, dtype in want.items():
        if name not in columns:
            raise SchemaError(f"{side} column {name!r} is missing")
        col = as_numeric(columns[name], f"{side}_{name}", dtype)
        if len(col) != len(t):
            raise SchemaError(f"column '{side}_{name}' has {len(col)} values, 'times' has "
                              f"{len(t)}")
        cols.append(col)
    return SIDES.index(side), t, k, cols, offsets, data, null_times


def join_result_batch(config: JoinConfig, ws: Any, we: Any, keys: Any, left: List[Any],
                      right: List[Any]) -> pa.RecordBatch:
    """The Arrow form of emitted join pairs."""
    head = result_batch(_key_config(config), ws, we, keys, [])
    arrays = list(head.columns) + [pa.array(c) for c in left] + [pa.array(c) for c in right]
    return pa.RecordBatch.from_arrays(arrays, names=config.output_names)


class JoinBackend:
    """Windowed inner equi-join state of one executor: update each side,
    epoch deltas, emit.

    :meth:`emit` returns a ``pyarrow.RecordBatch`` with ``window_start``,
    ``window_end`` (int64 ms), ``key``, then the left columns as
    ``left_NAME`` and the right columns as ``right_NAME``: one row per
    left x right pair of each finished (window, key). Rows of windows already
    emitted are dropped and counted in :attr:`late_records`.

    Distributed use, as :class:`slash.StateBackend`: a helper calls
    :meth:`begin_epoch`, ships each ``delta(p)`` to the partition's leader,
    which calls :meth:`merge_delta`, then the helper calls :meth:`reset_delta`.

    >>> cfg = JoinConfig(window="session:10ms")
    >>> helper, leader = JoinBackend(cfg), JoinBackend(cfg)
    >>> helper.update_left([5], [0]); leader.update_right([5], [15])
    >>> helper.update_left([5], [8])   # bridges [0, 10) and [15, 25) once merged
    >>> helper.begin_epoch(); leader.merge_delta(helper.delta(0)); helper.reset_delta()
    >>> leader.emit(100).to_pylist()
    [{'window_start': 0, 'window_end': 25, 'key': 5}, {'window_start': 0, 'window_end': 25, 'key': 5}]
    >>> helper.close(); leader.close()
    """

    def __init__(self, config: JoinConfig, *, log_reserve_bytes: int = 0) -> None:
        if not isinstance(config, JoinConfig):
            raise InvalidArgument(f"config must be a JoinConfig, got {type(config).__name__}")
        self.config = config
        # the key and time columns are checked, and the window/key columns of
        # results built, by the state backend's helpers through this config
        self._store = _core.JoinStore(*join_core_args(config), log_reserve=log_reserve_bytes)
        log.debug("join backend opened: %s", config)

    # -- updates -----------------------------------------------------------
    def _update(self, side: str, keys: Any, times: Any,
                columns: Optional[Mapping[str, Any]]) -> None:
        *args, null_times = prepare_side(self.config, side, keys, times, columns)
        if null_times is not None:
            raise SchemaError(f"column 'times' of the {side} side has {int(null_times.sum())} null "
                              "value(s); drop them first (slash.query.JoinQuery does)")
        self._store.update(*args)

    def update_left(self, keys: Any, times: Any,
                    columns: Optional[Mapping[str, Any]] = None) -> None:
        """Appends left rows: ``keys``, event ``times`` (int64 ms or
        timestamp[ms]) and one array per left column, all of one length,
        NumPy or Arrow. Raises SchemaError naming the column on nulls, wrong
        dtypes, missing or unknown columns or mismatched lengths; nothing of
        the batch is applied then."""
        self._update("left", keys, times, columns)

    def update_right(self, keys: Any, times: Any,
                     columns: Optional[Mapping[str, Any]] = None) -> None:
        """Appends right rows; as :meth:`update_left`."""
        self._update("right", keys, times, columns)

    def update_batch(self, side: str, batch: Union[pa.RecordBatch, pa.Table], key: str = "key",
                     time: str = "time") -> None:
        """Appends an Arrow batch or table of one side (``"left"`` or
        ``"right"``) whose columns are named ``key``, ``time`` and the side's
        columns."""
        if side not in SIDES:
            raise InvalidArgument(f"side must be 'left' or 'right', got {side!r}")
        names = batch.schema.names
        for c in [key, time] + list(self.config.columns(side)):
            if c not in names:
                raise SchemaError(f"column {c!r} is missing from the {side} batch (has {names})")
        self._update(side, batch.column(key), batch.column(time),
                     {c: batch.column(c) for c in self.config.columns(side)})

    # -- epochs --------------------------------------------------------------
    # The epoch protocol, memory and closing work exactly as the state
    # backend's (they only touch ``_store`` and ``config.partitions``), so
    # they are its methods, not copies: begin_epoch() seals every partition's
    # changed span; delta(p) is a zero-copy read-only memoryview valid until
    # reset_delta(); merge_delta(region) appends a peer's delta (a malformed
    # one raises ProtocolError and changes nothing); reset_delta() drops the
    # shipped rows once the views are released.
    begin_epoch = StateBackend.begin_epoch
    delta = StateBackend.delta
    deltas = StateBackend.deltas
    merge_delta = StateBackend.merge_delta
    reset_delta = StateBackend.reset_delta
    memory_bytes = StateBackend.memory_bytes
    late_records = StateBackend.late_records
    close = StateBackend.close
    closed = StateBackend.closed
    __exit__ = StateBackend.__exit__

    # -- results -------------------------------------------------------------
    def emit(self, up_to: int) -> pa.RecordBatch:
        """Every left x right pair of each (window, key) ending at or before
        ``up_to`` ms not emitted before; frees their state."""
        return join_result_batch(self.config, *self._store.emit(int(up_to)))

    # -- introspection -------------------------------------------------------
    def stats(self) -> Dict[str, Any]:
        """Counters: groups, left_rows, right_rows, chunks, late, epoch,
        memory_bytes, log_bytes, index_bytes, sealed, watermark."""
        return self._store.stats()

    def __enter__(self) -> "JoinBackend":
        return self

    def __repr__(self) -> str:
        return f"JoinBackend({self.config!r})"


__all__ = ["JoinBackend", "JoinConfig"]
