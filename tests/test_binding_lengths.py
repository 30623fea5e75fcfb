"""The bindings check every column against the batch's length where they
take C pointers: the core reads n rows of each and knows nothing more."""
import numpy as np
import pytest

from slash import _core, errors
from slash.state import StateConfig, core_args


@pytest.fixture
def store():
    cfg = StateConfig(window="tumbling:10s", aggregates=["count", "sum:v"],
                      value_types={"v": "int64"}, nullable=())
    s = _core.StateStore(*core_args(cfg), 0)
    yield s
    s.close()


def test_short_keys_are_refused(store):
    t = np.arange(10, dtype=np.int64)
    with pytest.raises(errors.InvalidArgument, match="keys have 3 values"):
        store.update(t, np.arange(3, dtype=np.int64), [None, np.arange(10, dtype=np.int64)])


def test_short_value_columns_are_refused(store):
    t = np.arange(10, dtype=np.int64)
    with pytest.raises(errors.InvalidArgument, match="value column 1 has 4 values"):
        store.update(t, np.arange(10, dtype=np.int64), [None, np.arange(4, dtype=np.int64)])


def test_key_offsets_outside_the_key_data_are_refused():
    cfg = StateConfig(window="tumbling:10s", aggregates=["count"], key_type="string")
    s = _core.StateStore(*core_args(cfg), 0)
    try:
        t = np.arange(2, dtype=np.int64)
        with pytest.raises(errors.InvalidArgument, match="key_offsets have 2 values"):
            s.update(t, None, [None], np.array([0, 1], np.int32), np.frombuffer(b"ab", np.uint8))
        with pytest.raises(errors.InvalidArgument, match="outside key_data"):
            s.update(t, None, [None], np.array([0, 1, 99], np.int32), np.frombuffer(b"ab", np.uint8))
    finally:
        s.close()
