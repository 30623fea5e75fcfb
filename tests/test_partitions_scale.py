"""Partitions scale: a store with the maximum 4,096 partitions costs next to
nothing while idle (each partition's log reserves address space only at its
first record, sized from the store's budget), several such stores fit in one
process, and a group of executors with 4,096 partitions computes the same
result as DuckDB."""
from __future__ import annotations

import logging
import secrets

import numpy as np
import pyarrow as pa
import pytest

from slash import StateBackend, StateConfig

import executor_peers as peers
from _state_reference import AGGS, VALUE_TYPES
from test_executor import check_against_duckdb, collect, launch, split, stream

log = logging.getLogger(__name__)

PARTS = 4096


def _proc_status() -> dict:
    """VmSize and VmRSS of this process, in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmSize", "VmRSS"):
                out[k] = int(v.split()[0]) * 1024
    return out


def test_idle_partitions_reserve_almost_no_address_space_or_memory():
    before = _proc_status()
    cfg = StateConfig(window="tumbling:10s", aggregates=["count"], partitions=PARTS)
    stores = [StateBackend(cfg) for _ in range(2)]  # an executor opens two
    after = _proc_status()
    per_vm = (after["VmSize"] - before["VmSize"]) / (2 * PARTS)
    per_rss = (after["VmRSS"] - before["VmRSS"]) / (2 * PARTS)
    log.info("idle partition: %.0f bytes of address space, %.0f bytes resident", per_vm, per_rss)
    print(f"idle partition: VmSize +{per_vm:.0f} B, VmRSS +{per_rss:.0f} B")
    try:
        assert per_vm < 64 << 10, f"{per_vm:.0f} bytes of address space per idle partition"
        assert per_rss < 64 << 10, f"{per_rss:.0f} resident bytes per idle partition"
    finally:
        for s in stores:
            s.close()


def test_four_stores_of_4096_partitions_with_every_partition_used():
    """Eight executors' worth of touched partitions (each a log reservation) in one process."""
    cfg = StateConfig(window="tumbling:10s", aggregates=["count", "sum:v"],
                      value_types={"v": "int64"}, partitions=PARTS)
    n = 40_000  # ~10 keys per partition: every partition gets records
    keys = (np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
    stores = [StateBackend(cfg) for _ in range(4)]
    try:
        for i, sb in enumerate(stores):
            sb.update(keys, np.full(n, 1000 * i, np.int64), {"v": np.full(n, i + 1, np.int64)})
        print(f"4 stores x {PARTS} used partitions: VmSize {_proc_status()['VmSize'] >> 30} GiB")
        for i, sb in enumerate(stores):
            out = sb.emit(10_000)
            assert out.num_rows == n
            assert int(np.asarray(out.column("count")).sum()) == n
            assert int(np.asarray(out.column("sum_v")).sum()) == n * (i + 1)
    finally:
        for s in stores:
            s.close()


@pytest.mark.parametrize("string_keys", [False, True], ids=["int-keys", "string-keys"])
def test_executor_pair_with_4096_partitions_equals_duckdb(string_keys):
    table = stream(seed=41, n=6000, nkeys=2000, string_keys=string_keys)
    parts = split(table, 2, "random")
    state_kw = dict(window="tumbling:5s", aggregates=AGGS, value_types=VALUE_TYPES,
                    key_type="string" if string_keys else "int64", partitions=PARTS)
    gkw = dict(lateness="200ms", epoch_bytes=64 << 10, buffer_size=64 << 10)
    procs, out_q = launch(peers.run, 2, "shm", lambda r: (parts[r], state_kw, gkw),
                          secrets.token_hex(8))
    reports = collect(procs, out_q, 2)
    results = pa.concat_tables([r[2] for r in reports])
    check_against_duckdb(table, results, [r[3] for r in reports], "tumbling:5s")
