"""Partition moves in real runs (issue 17): ``rebalance`` from the driver of
a ``slash run`` (explicit moves and automatic, over shm and ofi:tcp), with
and without checkpoints, and checkpoints that keep the leader map - a run whose
partitions moved and whose executor was then killed recovers to the
failure-free output, and a cut taken during a hand-over (the partition in
two images) restores the merge of both.

References: DuckDB over the whole input, and the same query run without
moves (the static run)."""
import subprocess
import sys
import threading
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import slash
from slash import control, errors
from slash.checkpoint import CheckpointStore
from slash.control import parse_moves, rebalance_spec
from slash.query import Query
from slash.run.recovery.checkpointed import CheckpointedRun, checkpoint_leaders, part_name, read_partitions
from slash.runner import run
from slash.sources import GeneratorSource

from _slash_run import ENV, start_slash_run, wait_until
from test_recovery import SCHEMA, _assert_same, _query, _slow_gen, make

def events(n, seed=3, span_ms=30_000, nkeys=200):
    rng = np.random.default_rng(seed)
    return pa.table({"t": np.sort(rng.integers(0, span_ms, n)).astype(np.int64),
                     "k": rng.integers(0, nkeys, n), "v": rng.integers(0, 100, n)})


def duck_tumbling(table, size_ms):
    con = duckdb.connect()
    con.register("t", table)
    return [tuple(r) for r in con.execute(
        f"select (t // {size_ms}) * {size_ms} ws, k, count(*), sum(v) from t "
        f"group by all order by ws, k").fetchall()]


def rows(result):
    return [(r["window_start"], r["k"], r["count"], r["sum_v"]) for r in result.to_pylist()]


# ---- the request ---------------------------------------------------------------------------------
def test_explicit_moves_parse_from_the_cli_form_and_a_bad_item_is_named():
    assert parse_moves("3:1, 7:0") == {3: 1, 7: 0}
    assert parse_moves({"3": "1"}) == {3: 1}
    with pytest.raises(errors.InvalidArgument, match="'3-1'"):
        parse_moves("3-1")
    with pytest.raises(errors.InvalidArgument, match="rank 5 is not in 0..2"):
        rebalance_spec({"moves": "3:5"}, {}, 3)


def test_automatic_rebalance_moves_from_the_busiest_leader_to_the_least_loaded():
    per = {0: {"merge_seconds": 0.2, "delta_bytes_received": 10},
           1: {"merge_seconds": 1.5, "delta_bytes_received": 5},
           2: {"merge_seconds": 0.1, "delta_bytes_received": 99}}
    assert rebalance_spec({}, per, 3) == {"from_rank": 1, "to_rank": 2}
    # equal merge time: delta bytes received decide
    per = {0: {"merge_seconds": 0.0, "delta_bytes_received": 10},
           1: {"merge_seconds": 0.0, "delta_bytes_received": 50}}
    assert rebalance_spec({}, per, 2) == {"from_rank": 1, "to_rank": 0}
    with pytest.raises(errors.InvalidState, match="metrics from 1 of 2"):
        rebalance_spec({}, {0: per[0]}, 2)


# ---- slash run without checkpoints ---------------------------------------------------------------
@pytest.mark.parametrize("transport", ["shm", pytest.param("ofi:tcp", marks=pytest.mark.skipif(
    not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)"))])
def test_slash_run_rebalanced_by_ctl_during_the_stream_equals_the_static_run_and_duckdb(tmp_path,
                                                                                      transport):
    table = events(150_000)
    # 7.5 s of stream: room for a `slash ctl` process to start and both
    # requests to take effect on a loaded machine before the input ends
    p, sock = start_slash_run(tmp_path, table, executors=3, transport=transport, rate=20_000)
    try:
        wait_until(lambda: control.request(sock, "status")["reporting"] == 3, 60, "reports")
        r = subprocess.run([sys.executable, "-m", "slash", "ctl", "--socket", sock, "rebalance",
                            "--moves", "0:1,1:2,2:0,5:0"], capture_output=True, text=True,
                           timeout=120, env=ENV)
        assert r.returncode == 0, r.stderr
        assert "moving 4 partition(s)" in r.stdout
        auto = control.request(sock, "rebalance", {})  # the busiest leader to the least loaded
        st = wait_until(lambda: (lambda s: s if all(e["map_version"] == 2 for e in
                                                    s["per_executor"].values()) else None)(
            control.request(sock, "status")), 60, "both moves in effect on every executor")
    finally:
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert auto["map_version"] == 2 and len(auto["moves"]) >= 1
    assert st["leader_map_version"] == 2
    # 256 partitions, 3 executors: the moves changed how many each leads
    led = st["led_partitions"]
    assert sum(led.values()) == 256 and sorted(led.values()) != [85, 85, 86]
    got = pq.read_table(tmp_path / "out.parquet")
    assert rows(got) == duck_tumbling(table, 1000)
    q = Query(time="t", window="tumbling:1s", key="k", aggregates=["count", "sum:v"])
    static = run(q, slash.sources.TableSource(table), executors=3)
    assert rows(got) == rows(static)


# ---- slash run with checkpoints ------------------------------------------------------------------
def _rebalance_when_running(ctl, **kw):
    """The driver's side: asks as soon as the run runs (retries until then)."""
    out = {}

    def go():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                out["result"] = ctl.rebalance(**kw)
                return
            except errors.InvalidState as e:
                if "not running" not in str(e):
                    out["error"] = e
                    return
                time.sleep(0.005)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def test_checkpointed_slash_run_rebalanced_over_its_control_socket_equals_the_static_run(tmp_path):
    sock = str(tmp_path / "ctl.sock")
    got, m = {}, {}

    def go():
        got["t"] = run(_query("tumbling"), _slow_gen(), executors=2, checkpoint=str(tmp_path / "ck"),
                       checkpoint_every="3 batches", control=sock, metrics=m)
    t = threading.Thread(target=go)
    t.start()
    try:
        control.wait_for_socket(sock, 60)
        wait_until(lambda: control.request(sock, "status")["reporting"] == 2, 60, "reports")
        moved = control.request(sock, "rebalance", {"from_rank": 1, "to_rank": 0})
        st = wait_until(lambda: (lambda s: s if all(e["map_version"] == 1 for e in
                                                    s["per_executor"].values()) else None)(
            control.request(sock, "status")), 60, "the move in effect on both executors")
    finally:
        t.join(120)
    assert len(moved["moves"]) == 64  # half of rank 1's 128 partitions
    assert st["leader_map_version"] == 1 and st["led_partitions"] == {"0": 192, "1": 64}
    want = run(_query("tumbling"), GeneratorSource(make, SCHEMA), executors=2)
    _assert_same(got["t"], want)


def test_a_run_killed_after_its_partitions_moved_recovers_with_the_moved_map(tmp_path, monkeypatch):
    # every partition of rank 1 moves to rank 0 as the run starts; rank 1 is killed
    # once two checkpoints committed: the restore keeps rank 0 leading everything
    monkeypatch.setenv("SLASH_TEST_KILL", "1:15:0:2")
    ctl = CheckpointedRun()
    th, asked = _rebalance_when_running(ctl, moves={p: 0 for p in range(1, 256, 2)})
    m = {}
    got = run(_query("session"), _slow_gen(), executors=2, checkpoint=str(tmp_path / "ck"),
              checkpoint_every="3 batches", control=ctl, metrics=m)
    th.join(10)
    assert "error" not in asked and len(asked["result"]["moves"]) == 128
    assert len(m["recoveries"]) == 1
    led = [e["led_partitions"] for e in m["per_executor"]]
    assert led == [256, 0], "the restore did not keep the checkpoint's leader map"
    monkeypatch.delenv("SLASH_TEST_KILL")
    want = run(_query("session"), GeneratorSource(make, SCHEMA), executors=2)
    _assert_same(got, want)


# ---- a cut taken during a hand-over -------------------------------------------------------------
def _store_images(directory, images, maps, partitions):
    """The images of one cut as recovery writes them (one file per image of
    a partition, each rank's leader map in its rank json)."""
    import json

    store = CheckpointStore(str(directory), fingerprint="handover", executors=len(images),
                            partitions=partitions)
    files = {}
    for r, img in images.items():
        files[f"rank-{r}.meta"] = store.write(1, f"rank-{r}.meta", img.meta)
        for p, data in img.parts.items():
            files[part_name(p, r)] = store.write(1, part_name(p, r), data)
        info = {"leader_map": {"version": maps[r][0], "leaders": maps[r][1]}}
        files[f"rank-{r}.json"] = store.write(1, f"rank-{r}.json", json.dumps(info).encode())
    return store.commit(1, files, {})


def _handover_cut(table, window):
    """A group of 2 where rank 0 moves the even partitions to rank 1 right
    before it asks for checkpoint 1: the checkpoint is asked during the hand-over."""
    from test_checkpoint_exec import batches, open_group, run_until_checkpoint
    from test_executor import split
    from _state_reference import AGGS, VALUE_TYPES

    state = slash.StateConfig(window=window, aggregates=AGGS, value_types=VALUE_TYPES)
    half = table.num_rows // 2
    inputs = [batches(t) for t in split(table.slice(0, half), 2, "random", seed=1)]
    exs = open_group(2, state, partitions=16)
    ask = exs[0].request_checkpoint

    def move_then_ask(cid):
        exs[0].move_partitions({p: 1 for p in range(0, 16, 2)})
        ask(cid)
    exs[0].request_checkpoint = move_then_ask
    try:
        images, before = run_until_checkpoint(exs, inputs)
        maps = {r: ex.leader_map() for r, ex in enumerate(exs)}
    finally:
        for ex in exs:
            ex.close()
    rest = [batches(t) for t in split(table.slice(half), 2, "random", seed=2)]
    todo = [inputs[r][images[r].pushes:] + rest[r] for r in range(2)]
    return state, images, maps, before, todo


def _resume(state, ck, todo, parts_of):
    from test_checkpoint_exec import finish_all, open_group

    exs = open_group(2, state, partitions=16)
    leaders = checkpoint_leaders(ck, 2, 16)
    metas = [ck.read(f"rank-{r}.meta") for r in range(2)]
    for r, ex in enumerate(exs):
        ex.restore(metas, parts_of(lambda p: leaders[p] == r), leaders)
    try:
        return finish_all(exs, todo), leaders
    finally:
        for ex in exs:
            ex.close()


def test_a_checkpoint_asked_during_a_hand_over_is_cut_after_it(tmp_path):
    """The core never cuts inside a hand-over (a held partition's closed
    windows have not fired): the attempt is dropped on every executor and
    retried, so each partition is in exactly one image, under the moved map."""
    from test_executor import stream

    table = stream(11, n=20000, nkeys=300, span_ms=30000)
    state, images, maps, before, todo = _handover_cut(table, "tumbling:1s")
    assert not set(images[0].parts) & set(images[1].parts)
    assert set(images[0].parts) | set(images[1].parts) == set(range(16))
    assert set(images[1].parts) == set(range(16))  # rank 1 leads the evens now, and its odds
    ck = _store_images(tmp_path, images, maps, 16)
    assert sorted(n for n in ck.files() if n.startswith("part-0.")) == ["part-0.r1.bin"]
    assert read_partitions(ck, lambda p: p < 2) == {0: [images[1].parts[0]], 1: [images[1].parts[1]]}
    assert checkpoint_leaders(ck, 2, 16) == [1] * 16  # the moved map: evens went to rank 1
    assert checkpoint_leaders(ck, 3, 16) is None  # another count: the default map


@pytest.mark.parametrize("window", ["tumbling:1s", "session:700ms"])
def test_a_checkpoint_asked_during_a_hand_over_restores_to_duckdbs_answer(tmp_path, window):
    from test_executor import stream
    from _state_reference import assert_same, duckdb_reference

    table = stream(11, n=20000, nkeys=300, span_ms=30000)
    state, images, maps, before, todo = _handover_cut(table, window)
    ck = _store_images(tmp_path, images, maps, 16)
    after, leaders = _resume(state, ck, todo, lambda want: read_partitions(ck, want))
    got = pa.Table.from_batches(before + after)
    keys = list(zip(got.column("window_start").to_pylist(), got.column("key").to_pylist()))
    assert len(keys) == len(set(keys)), "a (window, key) was emitted twice"
    assert_same(got, duckdb_reference(table, slash.parse_window(window)))



def test_the_controllers_rebalance_decision_moves_half_the_hot_leaders_partitions(tmp_path):
    # a latency_target run applies the controller's decision through this Actuator
    from slash.control.autotune import rebalance_op
    from slash.control.controller import Actuator, Decision
    from slash.metrics import LiveMetrics

    ctl, live = CheckpointedRun(), LiveMetrics(2, kind="run")
    actuator = Actuator({"rebalance": rebalance_op(ctl, live)})
    decision = Decision(time.time(), "rebalance", {"from_rank": 0, "to_rank": 1}, "merge",
                        "leader 0 merges most")
    applied = {}

    def apply_when_running():
        wait_until(lambda: ctl.executors is not None, 60, "the run")
        applied["ok"] = actuator.apply(decision)
    t = threading.Thread(target=apply_when_running, daemon=True)
    t.start()
    m = {}
    got = run(_query("tumbling"), _slow_gen(), executors=2, checkpoint=str(tmp_path / "ck"),
              checkpoint_every="3 batches", control=ctl, metrics=m)
    t.join(10)
    assert applied == {"ok": True}
    assert [e["led_partitions"] for e in m["per_executor"]] == [64, 192]
    assert any("rebalance: 64 partition(s) of rank 0 to rank 1" in e["text"]
               for e in live.snapshot()["events"])
    _assert_same(got, run(_query("tumbling"), GeneratorSource(make, SCHEMA), executors=2))
