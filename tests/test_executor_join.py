"""Windowed equi-joins across executor groups: each executor appends the rows
of its own splits to append-set CRDTs, deltas travel to partition leaders,
and leaders emit every left x right pair of a (window, key) once its window
closed everywhere. Tumbling joins against DuckDB, session joins against a
direct reference, on 1-3 executor processes."""
from __future__ import annotations

import secrets

import numpy as np
import pyarrow as pa
import pytest

import slash
from slash import errors

import executor_peers as peers
from test_executor import OFI, collect, launch, split
from test_join import duckdb_tumbling_join, rows_of, session_reference


def side(seed: int, n: int, nkeys: int, cols: dict, id_base: int, span: int = 20000) -> pa.Table:
    rng = np.random.default_rng(seed)
    data = {"key": pa.array(rng.integers(0, nkeys, n), pa.int64()),
            "time": pa.array(np.sort(rng.integers(0, span, n)) + rng.integers(0, 50, n), pa.int64())}
    for name, t in cols.items():
        data[name] = (pa.array(np.arange(id_base, id_base + n), pa.int64()) if t == "int64"
                      else pa.array(rng.integers(-1000, 1000, n) / 4.0))
    return pa.table(data)


LEFT, RIGHT = {"a": "int64", "x": "float64"}, {"b": "int64"}


def run_join(n, transport, window, left, right, mode="slash", **group):
    lparts, rparts = split(left, n, "random", 1), split(right, n, "random", 2)
    join_kw = dict(window=window, left_columns=LEFT, right_columns=RIGHT)
    group_kw = {**dict(lateness="1s", epoch_bytes=16 << 10, buffer_size=64 << 10, mode=mode), **group}
    procs, out_q = launch(peers.run_join, n, transport,
                          lambda r: (lparts[r], rparts[r], join_kw, group_kw), secrets.token_hex(8))
    reports = collect(procs, out_q, n)
    return pa.concat_tables([r[2] for r in reports]), [r[3] for r in reports]


GROUPS = [pytest.param("shm", n, id=f"shm-{n}") for n in (1, 2, 3)]
GROUPS += [pytest.param("ofi:tcp", 2, id="ofi-tcp-2", marks=OFI)]


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("transport,n", GROUPS)
def test_tumbling_join_equals_duckdb(transport, n, mode):
    left = side(1, 3000, 40, LEFT, 0)
    right = side(2, 2000, 40, RIGHT, 100000)
    got, metrics = run_join(n, transport, "tumbling:1s", left, right, mode)
    want = duckdb_tumbling_join(left, right, 1000)
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got) == rows_of(want)
    if n > 1:
        assert sum(m["delta_bytes_sent"] for m in metrics) > 0
        if mode == "repartition":
            assert sum(m["records_shipped"] for m in metrics) > 0


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("n", [1, 3])
def test_session_join_equals_reference(n, mode):
    left = side(3, 800, 15, LEFT, 0, span=30000)
    right = side(4, 600, 15, RIGHT, 100000, span=30000)
    got, _ = run_join(n, "shm", "session:300ms", left, right, mode)
    want = session_reference(left, right, 300)
    assert len(want) > 0
    assert rows_of(got) == want


@pytest.mark.parametrize("own_rows", ["local", "leader"])
def test_tumbling_join_own_rows_local_or_straight_to_leader_equal_duckdb(own_rows):
    left = side(5, 3000, 40, LEFT, 0)
    right = side(6, 2000, 40, RIGHT, 100000)
    got, metrics = run_join(3, "shm", "tumbling:1s", left, right, own_rows=own_rows)
    want = duckdb_tumbling_join(left, right, 1000)
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got) == rows_of(want)
    assert (sum(m["own_rows_direct"] for m in metrics) > 0) == (own_rows == "leader")


@pytest.mark.parametrize("own_rows", ["local", "leader"])
def test_session_join_own_rows_local_or_straight_to_leader_equal_reference(own_rows):
    left = side(7, 800, 15, LEFT, 0, span=30000)
    right = side(8, 600, 15, RIGHT, 100000, span=30000)
    got, metrics = run_join(3, "shm", "session:300ms", left, right, own_rows=own_rows)
    want = session_reference(left, right, 300)
    assert len(want) > 0
    assert rows_of(got) == want
    assert (sum(m["own_rows_direct"] for m in metrics) > 0) == (own_rows == "leader")


@pytest.mark.parametrize("keys,right_rows,direct", [(20000, 20000, True), (3, 60, False)],
                         ids=["one-row-per-key-goes-to-leader", "many-rows-per-key-fold-locally"])
def test_join_own_rows_auto_goes_to_the_leader_when_keys_hardly_repeat(keys, right_rows, direct):
    left = side(9, 20000, keys, LEFT, 0)
    right = side(10, right_rows, keys, RIGHT, 100000)
    got, metrics = run_join(2, "shm", "tumbling:10s", left, right, epoch_bytes=1 << 20)
    want = duckdb_tumbling_join(left, right, 10000)
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got) == rows_of(want)
    assert (sum(m["own_rows_direct"] for m in metrics) > 0) == direct
    assert (sum(m["epochs_routed"] for m in metrics) > 0) == direct


def test_join_executor_rejects_aggregate_pushes():
    token = secrets.token_hex(8)
    lst = slash.Executor.listen("shm", token=token)
    ex = slash.Executor(lst, 0, [lst.address],
                        slash.JoinConfig(window="tumbling:1s", left_columns=LEFT, right_columns=RIGHT),
                        token=token)
    lst.close()
    with pytest.raises(errors.InvalidArgument, match="push_left"):
        ex.push(np.arange(3), np.arange(3))
    with pytest.raises(errors.SchemaError, match="'b'"):
        ex.push_right(np.arange(3), np.arange(3), {})
    ex.close()
