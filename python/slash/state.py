"""The state backend: windowed CRDT aggregates over a log-structured hash table.

:class:`StateBackend` folds batches of columns (NumPy or Arrow) into partial
window states in C, hands out the changed span of each key partition as a
zero-copy buffer at epoch boundaries (:meth:`StateBackend.delta`), merges such
buffers from other executors (:meth:`StateBackend.merge_delta`), and emits
finished windows as an Arrow record batch.

The state's configuration lives in :mod:`slash.state_config`, the conversion
of its columns in and out of the core in :mod:`slash.state_columns`; this
module holds the backend and names all three's public parts. Invariant: a
backend's partial state merged with other executors' deltas in any order
gives the state a single executor would hold (CRDT partials).

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

from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np
import pyarrow as pa

from slash import _core
from slash.errors import InvalidArgument, SchemaError
from slash.state_columns import (aggregate_columns, as_numeric, byte_keys, hash_column,
                                 prepare_columns, result_batch)
from slash.state_config import (AGGREGATE_KINDS, AT_TIME_KINDS, COUNT_DISTINCT_MAX, COUNT_KINDS,
                                DEFAULT_RSD, FLOAT_KINDS, KEY_TYPES, NULL_KEY_BYTES, NULL_KEY_INT,
                                PARAM_KINDS, QUANTILE_SCALE, SKETCH_ANY_TYPE, TIME_UNITS,
                                VALUE_TYPES, Aggregate, CoreSlot, StateConfig, core_args,
                                core_slots, value_columns)


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
            per_slot = [None if v is None else v[keep] if isinstance(v, _core.RawValues)
                        else np.ascontiguousarray(v[keep]) for v in per_slot]
            if k is not None:
                k = np.ascontiguousarray(k[keep])
            else:
                sel = pa.Array.from_buffers(pa.large_binary() if offsets.dtype == np.int64 else pa.binary(),
                                            len(keep), [None, pa.py_buffer(offsets),
                                                        pa.py_buffer(data)]).filter(pa.array(keep))
                offsets, data, _ = byte_keys(sel, "keys")
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


__all__ = ["AGGREGATE_KINDS", "AT_TIME_KINDS", "COUNT_DISTINCT_MAX", "COUNT_KINDS", "DEFAULT_RSD",
           "FLOAT_KINDS", "KEY_TYPES", "NULL_KEY_BYTES", "NULL_KEY_INT", "PARAM_KINDS",
           "QUANTILE_SCALE", "SKETCH_ANY_TYPE", "TIME_UNITS", "VALUE_TYPES", "Aggregate", "CoreSlot",
           "StateBackend", "StateConfig", "aggregate_columns", "as_numeric", "core_args",
           "core_slots", "hash_column", "prepare_columns", "result_batch", "value_columns"]
