"""StateBackend results against DuckDB on the same data: count, sum, min,
max, avg over int64 and float64 columns; tumbling, sliding and session
windows; int64 and string keys; emitting in steps; several partitions."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from slash import StateBackend, StateConfig
from slash.window import parse_window

from _state_reference import AGGS, VALUE_TYPES, assert_same, duckdb_reference, random_table

WINDOWS = ["tumbling:50ms", "sliding:60ms/20ms", "sliding:50ms/20ms", "session:15ms"]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("key_type", ["int64", "string"])
@pytest.mark.parametrize("partitions", [1, 3])
def test_against_duckdb(window, key_type, partitions):
    rng = np.random.default_rng(hash((window, key_type, partitions)) % 2**32)
    table = random_table(rng, 20_000, 300, 1_000, key_type == "string")
    cfg = StateConfig(window=window, aggregates=AGGS, key_type=key_type,
                      partitions=partitions, value_types=VALUE_TYPES)
    with StateBackend(cfg) as sb:
        for batch in table.to_batches(max_chunksize=3_000):
            sb.update_batch(batch)
        first = sb.emit(0)
        assert all(e <= 0 for e in first.column("window_end").to_pylist())
        rest = sb.emit(2**62)
        assert sb.records == 0 and sb.late_records == 0
    got = pa.Table.from_batches([first, rest])
    assert got.schema.names == ["window_start", "window_end", "key", "count", "sum_x", "min_x",
                                "max_x", "avg_x", "sum_y", "min_y", "max_y", "avg_y", "first_x", "last_y"]
    assert_same(got, duckdb_reference(table, parse_window(window)))


def test_numpy_columns_and_timestamps():
    cfg = StateConfig(window="tumbling:1s", aggregates=["count", "max:v"],
                      value_types={"v": "int64"})
    with StateBackend(cfg) as sb:
        times = pa.array(np.array([0, 999, 1000, -1], dtype="datetime64[ms]"))
        sb.update(np.array([1, 1, 1, 1], dtype=np.int32), times,
                  {"v": np.array([5, 7, 1, 9], dtype=np.int16)})
        out = sb.emit(1000).to_pylist()
    assert sorted((r["window_start"], r["count"], r["max_v"]) for r in out) == [
        (-1000, 1, 9), (0, 2, 7)]


def test_late_records_are_counted_not_applied():
    with StateBackend(StateConfig(window="tumbling:10ms")) as sb:
        sb.update([1, 1], [3, 15])
        assert sb.emit(10).num_rows == 1
        sb.update([1, 1], [4, 16])  # 4 falls in the emitted window [0, 10)
        assert sb.late_records == 1
        rows = sb.emit(20).to_pylist()
        assert [(r["window_start"], r["count"]) for r in rows] == [(10, 2)]


def test_memory_is_reported_and_released():
    with StateBackend(StateConfig(window="tumbling:10ms")) as sb:
        empty = sb.memory_bytes
        sb.update(np.arange(200_000), np.zeros(200_000, np.int64))
        st = sb.stats()
        assert st["records"] == 200_000
        assert 200_000 * st["record_bytes"] <= sb.memory_bytes < 2 * 200_000 * st["record_bytes"]
        assert sb.emit(10).num_rows == 200_000
        assert sb.memory_bytes < empty + st["index_bytes"] + (1 << 20)
