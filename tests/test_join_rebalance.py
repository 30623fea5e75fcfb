"""Rebalance of a running window join (issue 17): leadership of join key
partitions moved live (explicit ``moves={partition: rank}`` and automatic)
from the control socket, interleaved with live scale-out / scale-in at random
points (slash.run.live.join, max_executors=M): the pairs equal DuckDB's join and
the static run's, each pair once, no record late, every record read once."""
import functools
import os
import random
import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import _slash_run
from _join_sides import TOTAL, duck_tumbling, pairs, srcs, static, write_sides

import slash
from slash.control import request, wait_for_socket
from slash.query import JoinQuery
from slash.runner import run

RATE = 10_000  # records/s over the active ranks: a stream of ~5 s, the operations in its first half
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
wait_until = functools.partial(_slash_run.wait_until, every=0.02)


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    return write_sides(tmp_path_factory.mktemp("join-rebalance"), (21, 22))


def random_ops(rng, count, max_executors):
    """A random sequence of ``count`` operations over a group of 1 active of
    ``max_executors``: scale-out / scale-in when the bounds allow, explicit
    and automatic rebalances (automatic only with 2 or more active)."""
    ops, active = [], 1
    while len(ops) < count:
        pick = []
        if active < max_executors:
            pick.append("scale-out")
        if active > 1:
            pick += ["scale-in", "rebalance-auto"]
        pick.append("rebalance-moves")
        op = rng.choice(pick)
        active += {"scale-out": 1, "scale-in": -1}.get(op, 0)
        ops.append(op)
    for must in ("rebalance-moves", "rebalance-auto"):  # each kind at least once
        if must not in ops:
            ops += ["scale-out", must] if must == "rebalance-auto" and active < 2 else [must]
    return ops


def apply_op(sock, op, rng, partitions):
    """Sends ``op``; returns (op, what was asked, the answer)."""
    if op in ("scale-out", "scale-in"):
        return op, None, request(sock, op, {"k": 1})
    if op == "rebalance-auto":
        return op, None, request(sock, "rebalance", {})
    active = request(sock, "status")["active_ranks"]
    moves = {p: rng.choice(active) for p in rng.sample(range(partitions), 3)}
    return op, moves, request(sock, "rebalance", {"moves": ",".join(f"{p}:{r}" for p, r in
                                                                     moves.items())})


def rebalanced_join(sides, query, sock, seed, count=5, max_executors=3, **kw):
    """runner.run of the join with 1 of ``max_executors`` active; a thread
    applies a random sequence of ``count`` scale and rebalance operations at
    random points of the input (by records read, from status)."""
    rng = random.Random(seed)
    ops = random_ops(rng, count, max_executors)
    points = sorted(rng.uniform(0.1, 0.5) for _ in ops)
    done, errors = [], []

    def driver():
        try:
            wait_for_socket(sock, 60)
            parts = None
            for op, frac in zip(ops, points):
                st = wait_until(lambda: (lambda s: s if s["records"] >= frac * TOTAL
                                         and s["reporting"] == max_executors else None)(
                    request(sock, "status")), 60, f"{frac:.0%} of the input read")
                parts = parts or sum(v or 0 for v in st["led_partitions"].values())
                done.append(apply_op(sock, op, rng, parts))
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread below
            errors.append(e)

    th = threading.Thread(target=driver)
    th.start()
    m = {}
    try:
        out = run(query, srcs(sides), executors=1, max_executors=max_executors, control=sock,
                  rate=RATE, metrics=m, timeout=120, **kw)
    finally:
        th.join()
    if errors:
        raise errors[0]
    return out, m, done, ops


def check_answers(done, ops):
    assert [d[0] for d in done] == ops
    for op, moves, got in done:
        if op == "rebalance-moves":
            assert {int(p): r for p, r in got["moves"].items()} == moves
        elif op == "rebalance-auto":
            assert got["moves"] and got["map_version"] >= 1


@pytest.mark.parametrize("seed", [1, 2])
def test_a_tumbling_join_under_random_scale_and_rebalance_equals_duckdb_and_the_static_run(
        sides, tmp_path, seed):
    q = JoinQuery(time="t", window="tumbling:10s", on="k")
    out, m, done, ops = rebalanced_join(sides, q, str(tmp_path / "c.sock"), seed)
    check_answers(done, ops)
    assert m["late_records"] == 0 and m["records_in"] == TOTAL  # each row read once
    want = duck_tumbling(sides, 10_000)
    assert len(want) > 1000
    assert pairs(out) == want  # each pair once: a multiset equality
    assert pairs(out) == pairs(static(sides, "tumbling:10s"))


@pytest.mark.parametrize("seed", [3, 4])
def test_a_session_join_under_random_scale_and_rebalance_equals_the_static_run(
        sides, tmp_path, seed):
    q = JoinQuery(time="t", window="session:2s", on="k")
    out, m, done, ops = rebalanced_join(sides, q, str(tmp_path / "c.sock"), seed)
    check_answers(done, ops)
    assert m["late_records"] == 0 and m["records_in"] == TOTAL
    want = pairs(static(sides, "session:2s"))
    assert len(want) > 100
    assert pairs(out) == want


NEEDS_OFI = pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)")


@NEEDS_OFI
def test_a_tumbling_join_under_random_scale_and_rebalance_over_ofi_tcp_equals_duckdb(
        sides, tmp_path):
    q = JoinQuery(time="t", window="tumbling:10s", on="k")
    out, m, done, ops = rebalanced_join(sides, q, str(tmp_path / "c.sock"), 5,
                                        transport="ofi:tcp")
    check_answers(done, ops)
    assert m["late_records"] == 0 and m["records_in"] == TOTAL
    assert pairs(out) == duck_tumbling(sides, 10_000)


def test_slash_ctl_rebalance_moves_the_partitions_of_a_slash_run_join_and_status_shows_it(
        sides, tmp_path):
    sock, out = str(tmp_path / "c.sock"), str(tmp_path / "out.parquet")
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--join", "--left", sides["left"],
                          "--right", sides["right"], "--on", "k", "--time", "t",
                          "--window", "tumbling:10s", "--executors", "2", "--max-executors", "2",
                          "--rate", str(RATE), "--control", sock, "--output", out], env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_socket(sock, 60)
        before = wait_until(lambda: (lambda s: s if s["reporting"] == 2 and
                                     s["records"] >= 0.1 * TOTAL else None)(
            request(sock, "status")), 60, "both ranks reporting")
        led0, led1 = before["led_partitions"]["0"], before["led_partitions"]["1"]
        assert led0 > 0 and led1 > 0  # partition mod 2
        ctl = [sys.executable, "-m", "slash", "ctl", "--socket", sock]
        r = subprocess.run(ctl + ["rebalance", "--moves", "1:0,3:0,5:0"], capture_output=True,
                           text=True, env=ENV, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "1->0" in r.stdout and "5->0" in r.stdout, r.stdout
        wait_until(lambda: request(sock, "status")["led_partitions"] == {"0": led0 + 3,
                                                                        "1": led1 - 3},
                   30, "rank 0 to lead 3 more partitions")
        r = subprocess.run(ctl + ["rebalance"], capture_output=True, text=True, env=ENV,
                           timeout=60)  # automatic: half of the busiest rank's to the other
        assert r.returncode == 0, r.stderr
        st = wait_until(lambda: (lambda s: s if all(  # every report counts by the moved map
            p.get("map_version") == 2 for p in s["per_executor"].values()) else None)(
            request(sock, "status")), 30, "the automatic move in both ranks' reports")
        assert sum(st["led_partitions"].values()) == led0 + led1
        assert st["led_partitions"] != {"0": led0 + 3, "1": led1 - 3}
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, stderr
    assert pairs(pq.read_table(out)) == duck_tumbling(sides, 10_000)


def test_slash_run_join_with_control_and_no_max_executors_serves_status_and_rebalance(
        sides, tmp_path):
    """A join of 2 with --control (no --max-executors) runs as a live join
    group of 2, both active: status and rebalance reach it."""
    sock, out = str(tmp_path / "c.sock"), str(tmp_path / "out.parquet")
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--join", "--left", sides["left"],
                          "--right", sides["right"], "--on", "k", "--time", "t",
                          "--window", "session:2s", "--executors", "2", "--rate", str(RATE),
                          "--control", sock, "--output", out], env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_socket(sock, 60)
        before = wait_until(lambda: (lambda s: s if s["reporting"] == 2 and
                                     s["records"] >= 0.1 * TOTAL else None)(
            request(sock, "status")), 60, "both ranks reporting")
        assert before["active_ranks"] == [0, 1]
        got = request(sock, "rebalance", {"moves": "0:1,2:1"})
        assert got["moves"] == {"0": 1, "2": 1}
        led = before["led_partitions"]
        wait_until(lambda: request(sock, "status")["led_partitions"] == {"0": led["0"] - 2,
                                                                        "1": led["1"] + 2},
                   30, "rank 1 to lead 2 more partitions")
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, stderr
    assert pairs(pq.read_table(out)) == pairs(static(sides, "session:2s"))


def test_a_join_over_a_generator_refuses_a_control_socket_naming_what_it_needs(sides):
    from slash.errors import InvalidArgument
    from slash.sources import GeneratorSource

    gen = GeneratorSource(lambda r, n: iter(()), pa.schema([("t", pa.int64()), ("k", pa.int64()),
                                                           ("b", pa.int64())]))
    with pytest.raises(InvalidArgument, match="a join serves a control socket over file inputs"):
        run(JoinQuery(time="t", window="tumbling:10s", on="k"), (sides["left"], gen),
            executors=1, control=True)
