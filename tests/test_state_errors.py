"""Bad input to the state backend: clear errors naming the column or
parameter, nothing applied, and the process survives."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from slash import StateBackend, StateConfig, errors
from slash.window import Sliding, parse_window


@pytest.fixture
def sb():
    cfg = StateConfig(window="tumbling:10s", aggregates=["count", "sum:v"],
                      value_types={"v": "int64"})
    with StateBackend(cfg) as b:
        yield b


@pytest.mark.parametrize("spec, word", [
    ("tumbling:0s", "window size"), ("tumbling:-5ms", "window size"),
    ("sliding:10s/0s", "window slide"), ("sliding:10s/20s", "slide"),
    ("session:0ms", "session gap"), ("sliding:10s", "SIZE/SLIDE"), ("hopping:1s", "kind"),
    ("tumbling:10 parsecs", "unit"),
])
def test_bad_window(spec, word):
    with pytest.raises(errors.InvalidArgument, match=word):
        StateConfig(window=spec)


def test_window_dataclass_validates():
    with pytest.raises(errors.InvalidArgument, match="window size"):
        Sliding(size_ms=0, slide_ms=1)
    assert parse_window("tumbling:2m").size_ms == 120_000
    assert parse_window("sliding:1h/15m") == Sliding(3_600_000, 900_000)


@pytest.mark.parametrize("kwargs, word", [
    (dict(aggregates=["median:v"]), "aggregate kind"),
    (dict(aggregates=["sum"]), "needs a column"),
    (dict(aggregates=["count", "count"]), "duplicate"),
    (dict(key_type="float"), "key_type"),
    (dict(partitions=0), "partitions"),
    (dict(value_types={"v": "int8"}), "value_types"),
])
def test_bad_config(kwargs, word):
    with pytest.raises(errors.InvalidArgument, match=word):
        StateConfig(**kwargs)


def test_a_null_key_is_a_group_of_its_own(sb):
    sb.update(pa.array([1, None, None, 1]), [1, 2, 3, 4], {"v": [1, 2, 3, 4]})
    rows = {r["key"]: (r["count"], r["sum_v"]) for r in sb.emit(10_000).to_pylist()}
    assert rows == {1: (2, 5), None: (2, 5)}


def test_a_null_time_is_in_no_window_and_counted(sb):
    sb.update([1, 2, 2], pa.array([1, None, 3]), {"v": [1, 2, 3]})
    assert sb.null_times == 1
    assert sorted((r["key"], r["count"]) for r in sb.emit(10_000).to_pylist()) == [(1, 1), (2, 1)]


def test_aggregates_skip_null_values_and_all_null_gives_null():
    cfg = StateConfig(window="tumbling:10s", aggregates=["count", "count:v", "sum:v", "min:v", "avg:v"],
                      value_types={"v": "int64"})
    with StateBackend(cfg) as b:
        b.update([1, 1, 2], [1, 2, 3], {"v": pa.array([None, 4, None])})
        rows = {r["key"]: r for r in b.emit(10_000).to_pylist()}
    assert (rows[1]["count"], rows[1]["count_v"], rows[1]["sum_v"], rows[1]["min_v"], rows[1]["avg_v"]) \
        == (2, 1, 4, 4, 4.0)
    assert (rows[2]["count"], rows[2]["count_v"], rows[2]["sum_v"], rows[2]["min_v"], rows[2]["avg_v"]) \
        == (1, 0, None, None, None)


def test_nulls_where_the_config_allows_none_are_refused_naming_the_column():
    cfg = StateConfig(window="tumbling:10s", aggregates=["sum:v"], value_types={"v": "int64"},
                      nullable=(), key_nullable=False)
    with StateBackend(cfg) as b:
        with pytest.raises(errors.SchemaError, match="'keys'.*null"):
            b.update(pa.array([1, None]), [1, 2], {"v": [1, 2]})
        with pytest.raises(errors.SchemaError, match="'v'.*null"):
            b.update([1, 2], [1, 2], {"v": pa.array([1, None])})
        assert b.records == 0


def test_the_reserved_null_key_value_is_refused_in_a_nullable_int64_key(sb):
    with pytest.raises(errors.SchemaError, match="stands for a null key"):
        sb.update(pa.array([-(1 << 63), 1], pa.int64()), [1, 2], {"v": [1, 2]})
    assert sb.records == 0


def test_wrong_dtypes(sb):
    with pytest.raises(errors.SchemaError, match="'keys'.*float64"):
        sb.update(np.array([1.5]), [1], {"v": [1]})
    with pytest.raises(errors.SchemaError, match="'times'"):
        sb.update([1], ["yesterday"], {"v": [1]})
    with pytest.raises(errors.SchemaError, match="'v'.*uint64"):
        sb.update([1], [1], {"v": np.array([1 << 63], np.uint64)})
    with pytest.raises(errors.SchemaError, match="'times'.*ms"):
        sb.update([1], pa.array(np.array([1], "datetime64[us]")), {"v": [1]})
    with pytest.raises(errors.SchemaError, match="'keys'.*string"):
        with StateBackend(StateConfig(key_type="string")) as s:
            s.update([1, 2], [1, 2])
    assert sb.records == 0


def test_lengths_and_missing_columns(sb):
    with pytest.raises(errors.SchemaError, match="'keys' and 'times'"):
        sb.update([1, 2, 3], [1, 2], {"v": [1, 2]})
    with pytest.raises(errors.SchemaError, match="'v' has 1 values"):
        sb.update([1, 2], [1, 2], {"v": [1]})
    with pytest.raises(errors.SchemaError, match="'v' is missing"):
        sb.update([1, 2], [1, 2])
    with pytest.raises(errors.SchemaError, match="unknown value column"):
        sb.update([1], [1], {"v": [1], "w": [2]})
    with pytest.raises(errors.SchemaError, match="'time' is missing"):
        sb.update_batch(pa.table({"key": [1], "v": [1]}))
    assert sb.records == 0


def test_long_string_key():
    with StateBackend(StateConfig(key_type="string")) as s:
        s.update(["a" * 64], [1])
        with pytest.raises(errors.SchemaError, match="row 1.*64 bytes"):
            s.update(["b", "c" * 65], [1, 2])
        assert s.records == 1


def test_bad_delta_and_epoch_states(sb):
    with pytest.raises(errors.InvalidState, match="begin_epoch"):
        sb.delta(0)
    with pytest.raises(errors.InvalidState):
        sb.reset_delta()
    with pytest.raises(errors.ProtocolError, match="offset 0"):
        sb.merge_delta(b"\x00" * 48)
    with pytest.raises(errors.ProtocolError, match="truncated"):
        sb.merge_delta(b"\x00" * 5)
    sb.update([1], [1], {"v": [1]})
    sb.begin_epoch()
    with pytest.raises(errors.InvalidState, match="not reset"):
        sb.begin_epoch()
    with pytest.raises(errors.InvalidState, match="sealed"):
        sb.emit(10**9)
    with pytest.raises(errors.OutOfRange):
        sb.delta(1)
    view = sb.delta(0)
    other = StateBackend(StateConfig(window="tumbling:5s", aggregates=["count", "sum:v"],
                                     value_types={"v": "int64"}))
    with pytest.raises(errors.ProtocolError, match="another window"):
        other.merge_delta(view)
    other.close()
    with pytest.raises(errors.InvalidState, match="release"):
        sb.reset_delta()
    copy = bytes(view)
    view.release()
    sb.reset_delta()
    sb.merge_delta(copy)  # merging a delta back restores the state
    assert sb.emit(10**9).to_pylist()[0]["sum_v"] == 1


def test_closed_backend():
    b = StateBackend(StateConfig())
    b.close()
    b.close()
    with pytest.raises(errors.InvalidState, match="closed"):
        b.update([1], [1])
