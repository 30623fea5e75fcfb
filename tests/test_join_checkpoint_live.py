"""A checkpointed window join that scales live and is rebalanced (issue 25:
checkpoint= with max_executors=, and checkpoint= with rebalance, for joins).

Both inputs are test_live_scale_join's: part files that each span the
whole time range, several row groups (units) each, so the merge by event
time pushes batches in parts and a cut finds rows held back on both sides. Scaled live within the
provisioned group, killed (SIGKILL) after a live scale, scaled beyond it by
restart, or rebalanced over its control socket and then killed, the join's
pairs equal DuckDB's join of the same files, each pair once, no record late
and every record read once."""
import json
import os
import signal
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _slash_run import ENV, beside, ops_at, wait_until

from slash.control import request, wait_for_socket
from slash.executor import GroupConfig
from slash.query import JoinQuery
from slash.runner import run

from test_live_scale_join import TOTAL, duck_tumbling, pairs, sides, srcs  # noqa: F401 (sides)

RATE = 16_000  # records/s over the group: a stream of ~3 s, the operations in its first half
PARTITIONS = 32  # small images: cheap cuts
Q = JoinQuery(time="t", window="tumbling:10s", on="k")
#: a hang's bound, not a speed: a run of ~3 s took over 120 s at load 25 on 2 cores
HANG_S = 600


@pytest.fixture(scope="module")
def duckdb_pairs(sides):
    want = duck_tumbling(sides, 10_000)
    assert len(want) > 10_000
    return want


def checkpointed(sides, tmp_path, sock, **kw):
    """A go for beside(): the checkpointed join with a control socket; its metrics in ``m``."""
    m = {}

    def go():
        return run(Q, srcs(sides), control=sock, metrics=m, timeout=HANG_S,
                   group=GroupConfig(partitions=PARTITIONS), checkpoint=str(tmp_path / "ck"),
                   checkpoint_every="150ms", **kw)
    return go, m


def driven(sides, tmp_path, ops, points, **kw):
    """The checkpointed join, ``ops`` sent over its socket at ``points`` of the input."""
    sock = str(tmp_path / "c.sock")
    go, m = checkpointed(sides, tmp_path, sock, rate=RATE, **kw)
    out, done = beside(ops_at(sock, ops, points, TOTAL), go)
    return out, m, done


def test_a_checkpointed_join_scaled_out_then_in_live_equals_duckdb(sides, tmp_path,
                                                                  duckdb_pairs):
    out, m, done = driven(sides, tmp_path, ["scale-out", "scale-in"], [0.15, 0.4],
                          executors=1, max_executors=2)
    assert [(d["executors"], d["path"]) for d in done] == [(2, "live"), (1, "live")]
    assert [(s["to"], s["path"]) for s in m["live_scales"]] == [(2, "live"), (1, "live")]
    assert len(m["checkpoints"]) >= 3 and m["recoveries"] == []
    assert m["late_records"] == 0 and m["records_in"] == TOTAL
    assert pairs(out) == duckdb_pairs  # each pair once: a multiset equality


def test_a_rank_killed_after_a_live_scale_restarts_from_the_newest_checkpoint(
        sides, tmp_path, duckdb_pairs, monkeypatch):
    # rank 1 (standby at the start) kills itself after 20 pushes of its own, once 6
    # checkpoints of the attempt are committed: the newest cut comes after the scale-out
    monkeypatch.setenv("SLASH_TEST_KILL", "1:20:0:6")
    out, m, done = driven(sides, tmp_path, ["scale-out"], [0.05], executors=1, max_executors=2)
    assert done[0]["executors"] == 2 and done[0]["path"] == "live"
    assert len(m["recoveries"]) == 1
    rec = m["recoveries"][0]
    assert rec["from_checkpoint"] is not None
    assert rec["active_at_cut"] == [0, 1]  # a cut of the scaled group, resumed as it was
    assert m["late_records"] == 0
    assert pairs(out) == duckdb_pairs


def test_a_checkpointed_join_scaled_beyond_max_executors_restarts_from_a_checkpoint(
        sides, tmp_path, duckdb_pairs):
    out, m, done = driven(sides, tmp_path, ["scale-out", "scale-out"], [0.1, 0.3],
                          executors=1, max_executors=2)
    assert [(d["executors"], d["path"]) for d in done] == [(2, "live"), (3, "restart")]
    restart = m["live_scales"][1]
    assert restart["max_executors"] == 3 and restart["checkpoint"] is not None
    assert m["max_executors"] == 3 and m["recoveries"] == []
    assert m["late_records"] == 0 and m["records_in"] == TOTAL
    assert pairs(out) == duckdb_pairs


def test_the_rows_a_live_joins_cut_holds_are_in_its_checkpoint_by_unit(sides, tmp_path,
                                                                       duckdb_pairs):
    """The merge pushes batches in parts: a cut records, per scale generation
    and side, the work left in global terms and the units whose rows it held,
    each with its file in the image."""
    out, m, _ = driven(sides, tmp_path, [], [], executors=2, max_executors=2,
                       checkpoint_keep=1000)
    assert pairs(out) == duckdb_pairs
    held = 0
    for chk in sorted((tmp_path / "ck").glob("chk-*")):
        for r in range(2):
            gens = json.loads((chk / f"rank-{r}.json").read_text())["live"]
            for gen in gens.values():
                assert gen["active"] == [0, 1]
                for side in ("left", "right"):
                    for unit in gen["sides"][side]["held"]:
                        assert (chk / f"rank-{r}.{side}.held-{unit}.arrow").exists()
                        held += 1
    assert held > 0


def test_a_checkpointed_join_rebalanced_over_its_socket_then_killed_keeps_the_moved_map(
        sides, tmp_path, duckdb_pairs):
    """Rank 1's partitions move to rank 0 over the control socket; once a
    checkpoint is cut after the move, rank 1 is SIGKILLed: the group restarts
    from that checkpoint with the moved leader map, and the pairs are
    DuckDB's."""
    sock, ck = str(tmp_path / "c.sock"), tmp_path / "ck"

    def committed():
        return {p.name for p in ck.glob("chk-*") if (p / "_MANIFEST.json").exists()}

    def act():
        wait_for_socket(sock, 60)
        wait_until(lambda: request(sock, "status")["reporting"] == 2, 60, "reports")
        moves = ",".join(f"{p}:0" for p in range(1, PARTITIONS, 2))  # all rank 1 leads
        moved = request(sock, "rebalance", {"moves": moves})
        st = wait_until(lambda: (lambda s: s if all(
            e.get("map_version") == 1 for e in s["per_executor"].values()) else None)(
            request(sock, "status")), 60, "the move in effect on both ranks")
        before = committed()
        wait_until(lambda: committed() - before, 60, "a checkpoint cut after the move")
        records = request(sock, "status")["records"]
        os.kill(st["per_executor"]["1"]["pid"], signal.SIGKILL)
        return moved, records

    go, m = checkpointed(sides, tmp_path, sock, executors=2, rate=RATE // 2)
    out, (moved, records_at_kill) = beside(act, go)
    assert len(moved["moves"]) == PARTITIONS // 2
    assert records_at_kill < TOTAL  # killed while the stream still ran
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["from_checkpoint"] is not None
    led = [e["led_partitions"] for e in m["per_executor"]]
    assert led == [PARTITIONS, 0], "the restore did not keep the checkpoint's leader map"
    assert m["late_records"] == 0
    assert pairs(out) == duckdb_pairs


def test_slash_ctl_rebalances_and_rescales_a_checkpointed_slash_run_join(sides, tmp_path,
                                                                        duckdb_pairs):
    sock, out = str(tmp_path / "c.sock"), str(tmp_path / "out.parquet")
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--join", "--left", sides["left"],
                          "--right", sides["right"], "--on", "k", "--time", "t",
                          "--window", "tumbling:10s", "--executors", "2", "--rate", "8000",
                          "--checkpoint", str(tmp_path / "ck"), "--checkpoint-every", "300ms",
                          "--control", sock, "--output", out], env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_socket(sock, 60)
        ctl = [sys.executable, "-m", "slash", "ctl", "--socket", sock]
        wait_until(lambda: request(sock, "status")["reporting"] == 2, 60, "reports")
        moved = subprocess.run(ctl + ["rebalance", "--moves", "1:0,3:0"], capture_output=True,
                               text=True, env=ENV, timeout=60)
        assert moved.returncode == 0, moved.stderr
        assert "1->0" in moved.stdout and "3->0" in moved.stdout, moved.stdout
        scaled = subprocess.run(ctl + ["scale-out", "1"], capture_output=True, text=True,
                                env=ENV, timeout=120)
        assert scaled.returncode == 0, scaled.stderr
        assert "3 executors" in scaled.stdout
        _, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, stderr
    assert pairs(pq.read_table(out)) == duckdb_pairs


def _rows(n, start):
    return pa.record_batch({"t": pa.array(range(start, start + n), pa.int64())})


def test_a_prepare_pushes_the_rows_in_hand_and_the_held_rows_of_units_not_reached_once():
    """A restored rank holds rows of units 7 and 9 (unit 5's were given
    already: it is reading unit 5); a scale's prepare pushes the merge's
    batch in hand, then unit 9's held rows (7 is behind the position), each
    leaving the rank's state before its push, and nothing is held after."""
    from slash.run.live.join import JoinScaleAgent, LiveJoinPositions
    from slash.run.recovery.join import Side, side_at

    works = {"left": [[5, 2], [9, 0]], "right": [[7, 1]]}
    held = {"left": {5: _rows(3, 0), 9: _rows(4, 100)}, "right": {7: _rows(2, 200)}}
    agent = JoinScaleAgent(0, 1, works, [0], None, None, 1.0, held)
    left = Side(iter(()))
    left.pos, left.cur = [0, 3], _rows(5, 10)  # reading unit 5: its held rows were given
    right = Side(iter(()))  # nothing read of unit 7 yet: its held rows are still to come
    agent.sides = {"left": left, "right": right}
    positions, pushed, states = LiveJoinPositions(agent), [], []

    def push(side, batch):
        pushed.append((side, batch.column(0).to_pylist()))
        states.append(positions._now())  # what a cut at this push would record

    agent.push = push
    agent.flush()
    assert pushed == [("left", list(range(10, 15))), ("left", list(range(100, 104))),
                      ("right", [200, 201])]
    # what a cut at each push records held: not that push's rows, still the ones after it
    recorded = [{s: side_at(0, s, works_[s], held_[s], st[s], {})["held"] for s in works_}
                for _, works_, st, held_, _ in states]
    assert recorded == [{"left": [9], "right": [7]}, {"left": [], "right": [7]},
                        {"left": [], "right": []}]
    assert agent.held == {"left": {}, "right": {}}
