"""Executor groups (Slash §5.1, §7.2.2): P2, the distributed result equals a
sequential one (DuckDB over the whole input) for any number of executors, any
split, any skew, every window kind and aggregate, each (window, key) emitted
exactly once; P1, no window fires before every executor's watermark passed
it; late records counted and returned; a killed executor reported by rank."""
from __future__ import annotations

import multiprocessing as mp
import secrets
import time

import numpy as np
import pyarrow as pa
import pytest

import slash
from slash import errors
from slash.window import Session, Sliding, Tumbling

import executor_peers as peers
from _rdma import needs_verbs
from _state_reference import AGGS, VALUE_TYPES, assert_same, duckdb_reference

CTX = mp.get_context("spawn")
OFI = pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi)")


# ---- data ------------------------------------------------------------------
def stream(seed: int, n: int = 20000, nkeys: int = 300, skew="zipf:1.0", span_ms: int = 60000,
           jitter_ms: int = 200, string_keys: bool = False) -> pa.Table:
    """Records in time order up to `jitter_ms` of disorder; key 0 the heavy hitter."""
    rng = np.random.default_rng(seed)
    times = np.sort(rng.integers(0, span_ms, n)) + rng.integers(0, jitter_ms + 1, n)
    if skew == "uniform":
        keys = rng.integers(0, nkeys, n)
    else:
        s = float(skew.split(":")[1])
        p = 1.0 / np.arange(1, nkeys + 1) ** s
        keys = rng.choice(nkeys, n, p=p / p.sum())
    x = rng.integers(-1000, 1000, n)
    y = rng.integers(-1000, 1000, n).astype(np.float64) / 4  # exact in binary
    k = pa.array([f"k{v}" for v in keys]) if string_keys else pa.array(keys, pa.int64())
    return pa.table({"key": k, "time": pa.array(times, pa.int64()), "x": x, "y": y})


def split(table: pa.Table, n: int, how: str, seed: int = 0) -> list:
    if how == "one":  # one executor receives everything
        return [table] + [table.slice(0, 0)] * (n - 1)
    if how == "chunks":  # contiguous stretches of time: watermarks far apart
        step = -(-table.num_rows // n)
        return [table.slice(r * step, step) for r in range(n)]
    owner = np.random.default_rng(seed).integers(0, n, table.num_rows)
    return [table.filter(pa.array(owner == r)) for r in range(n)]


# ---- running a group ----------------------------------------------------------
def launch(target, n, transport, per_rank_args, token):
    addr_q, out_q = CTX.Queue(), CTX.Queue()
    addrs_qs = [CTX.Queue() for _ in range(n)]
    procs = []
    for r in range(n):
        p = CTX.Process(target=target, args=(transport, r, n, token, addr_q, addrs_qs[r], out_q,
                                             *per_rank_args(r)), daemon=True)
        p.start()
        procs.append(p)
    got = dict(addr_q.get(timeout=120) for _ in range(n))
    for q in addrs_qs:
        q.put([got[r] for r in range(n)])
    return procs, out_q


def collect(procs, out_q, n, timeout=240):
    reports = [out_q.get(timeout=timeout) for _ in range(n)]
    for p in procs:
        p.join(60)
    errs = [r for r in reports if r[0] == "error"]
    assert not errs, "\n".join(e[2] for e in errs)
    return sorted(reports, key=lambda r: r[1])


def run_group(table, n, transport, how, window, *, string_keys=False, lateness="200ms",
              group_kw=None):
    token = secrets.token_hex(8)
    parts = split(table, n, how)
    state_kw = dict(window=window, aggregates=AGGS, value_types=VALUE_TYPES,
                    key_type="string" if string_keys else "int64")
    gkw = dict(lateness=lateness, epoch_bytes=64 << 10, buffer_size=64 << 10)
    gkw.update(group_kw or {})
    procs, out_q = launch(peers.run, n, transport,
                          lambda r: (parts[r], state_kw, gkw), token)
    reports = collect(procs, out_q, n)
    results = pa.concat_tables([r[2] for r in reports])
    return results, [r[3] for r in reports]


def check_against_duckdb(table, results, metrics, window):
    assert sum(m["late_total"] for m in metrics) == 0
    keys = list(zip(results.column("window_start").to_pylist(), results.column("key").to_pylist()))
    assert len(keys) == len(set(keys)), "a (window, key) was emitted more than once"
    assert_same(results, duckdb_reference(table, slash.parse_window(window)))


# ---- P2 -------------------------------------------------------------------------
GROUPS = [pytest.param("shm", n, id=f"shm-{n}") for n in (1, 2, 3, 4, 8)]
GROUPS += [pytest.param("ofi:tcp", n, id=f"ofi-tcp-{n}", marks=OFI) for n in (2, 3, 4, 8)]
# over an RDMA device (scripts/verbs-tests.sh: soft-RoCE in a guest with a software CPU, hence 2 and 4)
GROUPS += [pytest.param("ofi:verbs", n, id=f"ofi-verbs-{n}", marks=needs_verbs) for n in (2, 4)]


@pytest.mark.parametrize("transport,n", GROUPS)
def test_group_result_equals_sequential(transport, n):
    table = stream(seed=n)
    results, metrics = run_group(table, n, transport, "random", "tumbling:5s")
    check_against_duckdb(table, results, metrics, "tumbling:5s")
    if n > 1:
        assert sum(m["delta_bytes_sent"] for m in metrics) > 0
        assert all(m["epochs"] >= 2 for m in metrics)


@pytest.mark.parametrize("window", ["tumbling:5s", "sliding:10s/2s", "session:2s"])
@pytest.mark.parametrize("string_keys", [False, True], ids=["int-keys", "string-keys"])
def test_every_window_kind_and_key_type(window, string_keys):
    table = stream(seed=7, n=10000, string_keys=string_keys)
    results, metrics = run_group(table, 3, "shm", "random", window, string_keys=string_keys)
    check_against_duckdb(table, results, metrics, window)


@pytest.mark.parametrize("how", ["one", "chunks"])
@pytest.mark.parametrize("skew", ["uniform", "zipf:0.5", "zipf:1.0", "zipf:2.0"])
def test_any_split_any_skew(how, skew):
    table = stream(seed=11, n=12000, skew=skew)
    results, metrics = run_group(table, 2, "shm", how, "tumbling:5s")
    check_against_duckdb(table, results, metrics, "tumbling:5s")


@pytest.mark.parametrize("window", ["tumbling:5s", "sliding:10s/2s", "session:2s"])
@pytest.mark.parametrize("own_rows", ["local", "leader"])
@pytest.mark.parametrize("string_keys", [False, True], ids=["int-keys", "string-keys"])
def test_own_rows_local_or_straight_to_leader_give_the_same_answer(window, own_rows, string_keys):
    table = stream(seed=13, n=10000, string_keys=string_keys)
    late = table.slice(0, 400)  # replayed at the end: late, counted, never applied
    results, metrics = run_group(pa.concat_tables([table, late]), 3, "shm", "chunks", window,
                                 string_keys=string_keys, group_kw={"own_rows": own_rows})
    assert sum(m["late_total"] for m in metrics) > 0
    keys = list(zip(results.column("window_start").to_pylist(), results.column("key").to_pylist()))
    assert len(keys) == len(set(keys))
    direct = sum(m["own_rows_direct"] for m in metrics)
    assert (direct > 0) == (own_rows == "leader")
    assert_same(results, duckdb_reference(table, slash.parse_window(window)))


def test_own_rows_auto_goes_to_the_leader_when_keys_hardly_repeat():
    table = stream(seed=17, n=30000, nkeys=10**9, skew="uniform")
    results, metrics = run_group(table, 2, "shm", "random", "tumbling:5s",
                                 group_kw={"epoch_bytes": 128 << 10})
    check_against_duckdb(table, results, metrics, "tumbling:5s")
    assert sum(m["own_rows_direct"] for m in metrics) > 0
    few = stream(seed=17, n=30000, nkeys=5, skew="uniform")
    results, metrics = run_group(few, 2, "shm", "random", "tumbling:5s",
                                 group_kw={"epoch_bytes": 128 << 10})
    check_against_duckdb(few, results, metrics, "tumbling:5s")
    assert sum(m["own_rows_direct"] for m in metrics) == 0


@pytest.mark.parametrize("window", ["tumbling:5s", "session:2s"])
def test_auto_routes_records_to_their_leaders_when_a_local_partial_would_not_reduce(window):
    table = stream(seed=19, n=60000, nkeys=10**9, skew="uniform")
    results, metrics = run_group(table, 3, "shm", "random", window,
                                 group_kw={"epoch_bytes": 1 << 20})
    check_against_duckdb(table, results, metrics, window)
    assert sum(m["epochs_routed"] for m in metrics) > 0
    assert sum(m["records_shipped"] for m in metrics) > 0


def test_routing_stops_once_keys_repeat_again():
    unique = stream(seed=23, n=30000, nkeys=10**9, skew="uniform", span_ms=30000)
    few = stream(seed=29, n=120000, nkeys=5, skew="uniform", span_ms=120000)
    few = few.set_column(1, "time", pa.compute.add(few.column("time"), 30500))
    table = pa.concat_tables([unique, few])
    results, metrics = run_group(table, 2, "shm", "random", "tumbling:5s",
                                 group_kw={"epoch_bytes": 1 << 20})
    check_against_duckdb(table, results, metrics, "tumbling:5s")
    routed = max(m["epochs_routed"] for m in metrics)
    epochs = min(m["epochs"] for m in metrics)
    assert routed > 0
    # the few-keys half alone spans many more epochs than one probe period
    assert epochs - routed > 10, (epochs, routed)


def test_session_windows_across_executors_with_skew():
    table = stream(seed=5, n=8000, nkeys=50, skew="zipf:1.5")
    results, metrics = run_group(table, 4, "shm", "random", "session:1500ms")
    check_against_duckdb(table, results, metrics, "session:1500ms")


# ---- P1 --------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["shm", pytest.param("ofi:verbs", id="ofi-verbs",
                                                            marks=needs_verbs)])
def test_no_window_fires_until_every_watermark_passes_it(transport):
    table = stream(seed=3, n=4000, span_ms=10000, jitter_ms=0)
    state_kw = dict(window="tumbling:1s", aggregates=AGGS, value_types=VALUE_TYPES)
    gkw = dict(lateness=0, epoch_bytes=16 << 10)
    ctl, expect, (p0, p1) = peers.push_and_hold_pair(CTX, table, state_kw, gkw, transport)

    expect("pushed")
    # rank 1 has promised nothing: nobody may fire anything
    ctl[0].put(("poll", 1.0))
    ctl[1].put(("poll",))
    polled = [expect("polled"), expect("polled")]
    assert sum(r[2].num_rows for r in polled) == 0
    # rank 1 promises 5000 ms: exactly the windows ending by then fire
    ctl[1].put(("advance", 5000))
    expect("advanced")
    ctl[0].put(("poll", 1.0))
    ctl[1].put(("poll",))
    polled = [expect("polled"), expect("polled")]
    early = pa.concat_tables([r[2] for r in polled])
    assert early.num_rows > 0
    assert max(early.column("window_end").to_pylist()) <= 5000
    want = duckdb_reference(table, Tumbling(1000))
    want_early = want.filter(pa.compute.less_equal(want.column("window_end"), 5000))
    assert_same(early, want_early)
    ctl[0].put(("finish",))
    ctl[1].put(("finish",))
    final = [expect("ok"), expect("ok")]
    assert_same(pa.concat_tables([r[2] for r in final]), want)
    p0.join(30), p1.join(30)


# ---- lateness ----------------------------------------------------------------------
def one_executor(window="tumbling:1s", lateness="500ms"):
    token = secrets.token_hex(8)
    lst = slash.Executor.listen("shm", token=token)
    ex = slash.Executor(lst, 0, [lst.address],
                        slash.StateConfig(window=window, aggregates=["count", "sum:x"],
                                          value_types={"x": "int64"}),
                        slash.GroupConfig(lateness=lateness), token=token)
    lst.close()
    return ex


def test_late_records_are_counted_returned_and_not_applied():
    ex = one_executor()
    on_time = pa.table({"key": pa.array([1, 1, 2], pa.int64()), "time": [100, 2500, 9999],
                        "x": [1, 2, 3]})
    assert ex.push_batch(on_time) == 0
    ex.end_epoch()  # publishes watermark 9999 - 500 = 9499
    assert ex.metrics["watermark"] == 9499
    mixed = pa.table({"key": pa.array([1, 2, 1], pa.int64()), "time": [9600, 3000, 9498],
                      "x": [10, 20, 30]})
    late = ex.push_batch(mixed, return_late=True)  # the side output
    assert late.column("time").to_pylist() == [3000, 9498]
    assert ex.metrics["late_records"] == 2
    ex.finish()
    got = ex.results_table()
    kept = pa.concat_tables([on_time, mixed.slice(0, 1)])
    want = duckdb_reference(kept.append_column("y", pa.array([0.0] * 4)), Tumbling(1000))
    assert sorted(zip(got.column("window_start").to_pylist(), got.column("key").to_pylist(),
                      got.column("count").to_pylist(), got.column("sum_x").to_pylist())) == \
        sorted(zip(want.column("window_start").to_pylist(), want.column("key").to_pylist(),
                   want.column("count").to_pylist(), want.column("sum_x").to_pylist()))
    ex.close()


def test_skipped_rows_are_neither_applied_nor_late_nor_counted():
    ex = one_executor()
    t = pa.table({"key": pa.array([1, 1, 2, 3], pa.int64()), "time": [100, 2500, 9999, 150],
                  "x": [1, 2, 3, 4]})
    assert ex.push_batch(t, skip=np.array([False, False, False, True])) == 0
    ex.end_epoch()  # watermark 9499
    mixed = pa.table({"key": pa.array([1, 2, 1, 2], pa.int64()), "time": [9600, 3000, 9498, 100],
                      "x": [10, 20, 30, 40]})
    late = ex.push_batch(mixed, return_late=True, skip=np.array([0, 0, 1, 1], np.uint8))
    assert late.column("time").to_pylist() == [3000]  # the skipped late rows are not late
    m = ex.metrics
    assert m["late_records"] == 1 and m["records_in"] == 3 + 1
    with pytest.raises(errors.SchemaError, match="skip has 2 values"):
        ex.push_batch(mixed, skip=np.array([0, 1], np.uint8))
    ex.finish()
    got = sorted((r["window_start"], r["key"], r["count"], r["sum_x"])
                 for r in ex.results_table().to_pylist())
    assert got == sorted([(0, 1, 1, 1), (2000, 1, 1, 2), (9000, 2, 1, 3), (9000, 1, 1, 10)])
    ex.close()


def test_out_of_order_within_lateness_is_applied():
    ex = one_executor(lateness="2s")
    t = pa.table({"key": pa.array([5] * 6, pa.int64()), "time": [3000, 1500, 2999, 1000, 4000, 2100],
                  "x": [1, 2, 3, 4, 5, 6]})
    assert ex.push_batch(t) == 0
    ex.finish()
    got = {(r["window_start"], r["count"], r["sum_x"]) for r in ex.results_table().to_pylist()}
    assert got == {(1000, 2, 6), (2000, 2, 9), (3000, 1, 1), (4000, 1, 5)}
    ex.close()


def test_metrics_are_readable_while_running():
    ex = one_executor()
    ex.push(np.arange(1000), np.arange(1000) * 10, {"x": np.ones(1000, np.int64)})
    m = ex.metrics
    assert m["records_in"] == 1000 and m["epochs"] >= 1 and m["rank"] == 0 and m["size"] == 1
    assert {"delta_bytes_sent", "merge_seconds", "watermark_lag_ms", "credit_stalls"} <= set(m)
    ex.close()


# ---- faults and bad settings -------------------------------------------------------
def test_killed_executor_is_named_by_the_others():
    table = stream(seed=9, n=30000)
    parts = split(table, 3, "random")
    token = secrets.token_hex(8)
    state_kw = dict(window="tumbling:5s", aggregates=["count"])
    t0 = time.monotonic()
    procs, out_q = launch(
        peers.run, 3, "shm",
        lambda r: (parts[r], state_kw, dict(lateness="200ms"), 100, 3 if r == 2 else None), token)
    reports = [out_q.get(timeout=120) for _ in range(2)]
    assert time.monotonic() - t0 < 60
    for rep in reports:
        assert rep[0] == "error"
        assert "PeerDisconnected" in rep[2] and "rank 2" in rep[2]
    for p in procs:
        p.join(30)


def test_bad_group_settings_are_clear_errors():
    with pytest.raises(errors.InvalidArgument, match="partitions"):
        slash.GroupConfig(partitions=0)
    with pytest.raises(errors.InvalidArgument, match="lateness"):
        slash.GroupConfig(lateness=-1)
    with pytest.raises(errors.InvalidArgument, match="duration|lateness"):
        slash.GroupConfig(lateness="soon")
    with pytest.raises(errors.InvalidArgument, match="at least the number of executors"):
        slash.GroupConfig(partitions=2).partitions_for(3)


@pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)")
def test_finished_executors_of_one_process_closed_one_after_another_over_ofi_close_at_once():
    # A remote channel's close waits until its consumer released what it was
    # sent; a peer of this process closed later by this thread cannot run, so
    # each outbound channel once waited out the 2 s drain timeout.
    from test_checkpoint_exec import in_threads, open_group
    state = slash.StateConfig(window="tumbling:1s", aggregates=AGGS, value_types=VALUE_TYPES)
    exs = open_group(3, state, transport="ofi:tcp", partitions=16)
    parts = split(stream(seed=4, n=3000), 3, "random")

    def rank(r):
        def f():
            exs[r].push_batch(parts[r])
            exs[r].finish()
            exs[r].results()
        return f

    seconds = []
    try:
        in_threads([rank(r) for r in range(3)])
    finally:
        for ex in exs:
            t0 = time.monotonic()
            ex.close()
            seconds.append(time.monotonic() - t0)
    assert max(seconds) < 1.0, seconds
