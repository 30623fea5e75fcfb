"""Growth: 50 million distinct keys inserted with no preset size; the
reported memory stays within 2x of keys x record size, and every key is
there once."""
from __future__ import annotations

import numpy as np
import pytest

from slash import StateBackend, StateConfig

KEYS = 50_000_000
BATCH = 5_000_000


@pytest.mark.slow
def test_fifty_million_keys_without_preset_size():
    cfg = StateConfig(window="tumbling:10s", aggregates=["count", "sum:v"],
                      value_types={"v": "int64"})
    with StateBackend(cfg) as sb:
        assert sb.memory_bytes < 1 << 20  # nothing sized in advance
        times = np.zeros(BATCH, np.int64)
        ones = np.ones(BATCH, np.int64)
        for lo in range(0, KEYS, BATCH):
            # distinct, scattered keys: an odd multiplier is a bijection mod 2^64
            keys = (np.arange(lo, lo + BATCH, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
            sb.update(keys, times, {"v": ones})
        st = sb.stats()
        assert st["records"] == KEYS
        assert KEYS * st["record_bytes"] <= st["memory_bytes"] <= 2 * KEYS * st["record_bytes"], st
        # the first keys again: found, not inserted twice
        keys = (np.arange(0, 1000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
        sb.update(keys, np.full(1000, 5, np.int64), {"v": np.full(1000, 7, np.int64)})
        assert sb.records == KEYS
        out = sb.emit(10_000)
        assert out.num_rows == KEYS
        counts = np.asarray(out.column("count"))
        assert int(counts.sum()) == KEYS + 1000
        assert int(np.asarray(out.column("sum_v")).sum()) == KEYS + 7 * 1000
        assert sb.records == 0
