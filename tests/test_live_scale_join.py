"""Live scale-out / scale-in of a window join (slash.run.live.join, max_executors=M):
scaled 1 -> 2 -> 3 -> 2 -> 1 at random points while both inputs stream, the
pairs equal DuckDB's join and the static run's, each pair once, no record
late, every record read once; partitions move to the active ranks, and a
standby rank that still leads partitions (no moves) keeps firing them."""
import functools
import random
import subprocess
import sys
import threading

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import _slash_run
from _join_sides import TOTAL, duck_tumbling, pairs, srcs, static, write_sides

import slash
from slash.control import request, wait_for_socket
from slash.errors import NotSupported
from slash.query import JoinQuery
from slash.runner import run
from slash.sources import BatchSource, GeneratorSource

ENV = _slash_run.ENV
OPS = ["scale-out", "scale-out", "scale-in", "scale-in"]
wait_until = functools.partial(_slash_run.wait_until, every=0.02)


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    return write_sides(tmp_path_factory.mktemp("live-join"), (11, 12))


def scaled_join(sides, query, sock, ops, seed, rate=16_000, total=TOTAL, sources=None, **kw):
    """runner.run of the join with 1 of 3 executors active; a thread applies
    ``ops`` at random points of the input (by records read, from status);
    ``total``: the records of both inputs; ``sources``: default srcs(sides)."""
    rng = random.Random(seed)
    points = sorted(rng.uniform(0.1, 0.6) for _ in ops)
    m = {}
    out, done = _slash_run.beside(
        _slash_run.ops_at(sock, ops, points, total),
        lambda: run(query, sources or srcs(sides), executors=1, max_executors=3, control=sock,
                    rate=rate, metrics=m, timeout=120, **kw))
    return out, m, done


@pytest.mark.parametrize("seed", [1, 2])
def test_a_tumbling_join_scaled_1_2_3_2_1_at_random_points_equals_duckdb_and_the_static_run(
        sides, tmp_path, seed):
    q = JoinQuery(time="t", window="tumbling:10s", on="k")
    out, m, done = scaled_join(sides, q, str(tmp_path / "c.sock"), OPS, seed)
    assert [d["executors"] for d in done] == [2, 3, 2, 1]
    assert [s["to"] for s in m["live_scales"]] == [2, 3, 2, 1]
    assert m["late_records"] == 0 and m["records_in"] == TOTAL  # each row read once
    assert sum(p["records_in"] > 0 for p in m["per_executor"]) >= 2  # the work was re-dealt
    want = duck_tumbling(sides, 10_000)
    assert len(want) > 1000
    assert pairs(out) == want  # each pair once: a multiset equality
    assert pairs(out) == pairs(static(sides, "tumbling:10s"))


def test_a_session_join_scaled_live_equals_the_static_run(sides, tmp_path):
    q = JoinQuery(time="t", window="session:2s", on="k")
    out, m, done = scaled_join(sides, q, str(tmp_path / "c.sock"), OPS, 3)
    assert [d["executors"] for d in done] == [2, 3, 2, 1]
    assert m["late_records"] == 0 and m["records_in"] == TOTAL
    want = pairs(static(sides, "session:2s"))
    assert len(want) > 100
    assert pairs(out) == want


def test_scale_out_and_in_of_a_join_move_its_partitions_to_the_active_ranks(sides, tmp_path):
    """With join moves, a joining rank is given partitions and a leaving one
    hands all of its partitions over (live moves) while the stream runs."""
    sock = str(tmp_path / "c.sock")
    seen = {}

    def led(st, r):
        return st["per_executor"].get(str(r), {}).get("led_partitions")

    def watch():
        wait_for_socket(sock, 60)
        seen["before"] = wait_until(lambda: (lambda s: s if s["records"] >= 0.15 * TOTAL
                                             else None)(request(sock, "status")), 60, "15%")
        seen["out"] = request(sock, "scale-out", {"k": 1})
        seen["joined"] = wait_until(lambda: (lambda s: s if (led(s, 1) or 0) > 0 else None)(
            request(sock, "status")), 60, "rank 1 to lead partitions")
        wait_until(lambda: request(sock, "status")["records"] >= 0.4 * TOTAL, 60, "40%")
        seen["in"] = request(sock, "scale-in", {"k": 1})
        gone = seen["in"]["left"][0]
        every = led(seen["before"], 0)  # rank 0, alone active, led every partition
        seen["left"] = wait_until(lambda: (lambda s: s if led(s, gone) == 0 and
                                           led(s, 1 - gone) == every else None)(
            request(sock, "status")), 60, f"rank {gone} to lead nothing")

    th = threading.Thread(target=watch)
    th.start()
    m = {}
    q = JoinQuery(time="t", window="tumbling:10s", on="k")
    out = run(q, srcs(sides), executors=1, max_executors=2, control=sock, rate=16_000,
              metrics=m, timeout=120)
    th.join()
    assert seen["out"]["executors"] == 2 and seen["in"]["executors"] == 1
    assert led(seen["before"], 1) == 0 and led(seen["before"], 0) > 0
    assert seen["left"]["records"] < TOTAL  # handed over while the stream still ran
    assert m["late_records"] == 0 and m["records_in"] == TOTAL
    assert pairs(out) == duck_tumbling(sides, 10_000)


def test_a_rank_that_left_without_moves_keeps_firing_the_join_partitions_it_leads(
        sides, tmp_path, monkeypatch):
    """A scale change that moves nothing (live_join.JOIN_MOVES off: the path
    when a spread cannot be made) is correct too: the rank that left turns
    standby and still leads its partitions; it fires their windows as the
    group watermark passes them (before the stream ends), not only at finish."""
    from slash.run.live import join as live_join

    monkeypatch.setattr(live_join, "JOIN_MOVES", False)  # read by the driver's commit
    sock = str(tmp_path / "c.sock")
    seen = {}

    def watch():
        wait_for_socket(sock, 60)
        wait_until(lambda: request(sock, "status")["records"] >= 0.3 * TOTAL, 60, "30%")
        seen["in"] = request(sock, "scale-in", {"k": 1})
        seen["at_in"] = request(sock, "status")
        st = wait_until(lambda: (lambda s: s if s["records"] >= 0.8 * TOTAL else None)(
            request(sock, "status")), 60, "80%")
        seen["late"] = st

    th = threading.Thread(target=watch)
    th.start()
    m = {}
    q = JoinQuery(time="t", window="tumbling:10s", on="k")
    out = run(q, srcs(sides), executors=2, max_executors=2, control=sock, rate=16_000,
              metrics=m, timeout=120)  # both lead partitions from the start
    th.join()
    assert seen["in"]["executors"] == 1
    gone = seen["in"]["left"][0]
    st = seen["late"]
    assert st["standby_ranks"] == [gone]
    led = st["per_executor"][str(gone)]
    assert led["led_partitions"] > 0  # it still leads partitions...
    # ...and fired pairs of them while the stream still ran (its rows_emitted grew after it left)
    before = seen["at_in"]["per_executor"][str(gone)].get("rows_emitted", 0)
    assert led["rows_emitted"] > before
    assert m["late_records"] == 0
    assert pairs(out) == duck_tumbling(sides, 10_000)


def test_slash_ctl_scales_a_slash_run_join_live_and_status_shows_the_ranks(sides, tmp_path):
    sock, out = str(tmp_path / "c.sock"), str(tmp_path / "out.parquet")
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--join", "--left", sides["left"],
                          "--right", sides["right"], "--on", "k", "--time", "t",
                          "--window", "tumbling:10s", "--executors", "1", "--max-executors", "2",
                          "--rate", "16000", "--control", sock, "--output", out], env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_socket(sock, 60)
        _slash_run.ctl_scale_out_one(sock)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, stderr
    assert "live scale 1 -> 2 active executors" in stdout + stderr
    assert pairs(pq.read_table(out)) == duck_tumbling(sides, 10_000)


GEN_BATCHES, GEN_ROWS, GEN_SPAN = 100, 200, 200


def gen_batch(col, seed, i):
    """Batch i of one side of a rate-like generator: a function of i alone,
    times in [i * 200, i * 200 + 400) (overlapping the next batch's), in no
    order."""
    rng = np.random.default_rng([seed, i])
    return pa.record_batch({"t": i * GEN_SPAN + rng.integers(0, 2 * GEN_SPAN, GEN_ROWS),
                            "k": rng.integers(0, 500, GEN_ROWS),
                            col: rng.integers(0, 10**6, GEN_ROWS)}, schema=gen_schema(col))


def gen_schema(col):
    return pa.schema([("t", pa.int64()), ("k", pa.int64()), (col, pa.int64())])


def gen_bound(i):
    return i * GEN_SPAN


def gen_side(col, seed):
    make = functools.partial(gen_batch, col, seed)
    return make, BatchSource(make, GEN_BATCHES, gen_schema(col), GEN_ROWS, bound=gen_bound)


def test_a_join_of_two_batch_sources_scaled_live_equals_duckdb(tmp_path):
    (mk_l, left), (mk_r, right) = gen_side("a", 1), gen_side("b", 2)
    sock, total = str(tmp_path / "c.sock"), 2 * GEN_BATCHES * GEN_ROWS
    m = {}
    out, done = _slash_run.beside(
        _slash_run.ops_at(sock, ["scale-out", "scale-out", "scale-in"], [0.2, 0.35, 0.5], total),
        lambda: run(JoinQuery(time="t", window="tumbling:2s", on="k"), (left, right), executors=1,
                    max_executors=3, control=sock, rate=16_000, metrics=m, timeout=120))
    assert [d["executors"] for d in done] == [2, 3, 2]
    assert m["late_records"] == 0 and m["records_in"] == total
    lt = pa.Table.from_batches([mk_l(i) for i in range(GEN_BATCHES)])  # noqa: F841
    rt = pa.Table.from_batches([mk_r(i) for i in range(GEN_BATCHES)])  # noqa: F841
    want = sorted(tuple(r) for r in duckdb.sql(
        "select l.t // 2000 * 2000, l.t // 2000 * 2000 + 2000, l.k, l.a, r.b from lt l "
        "join rt r on l.k = r.k and l.t // 2000 = r.t // 2000").fetchall())
    assert len(want) > 1000
    assert pairs(out) == want


def test_a_join_whose_input_is_not_files_refuses_live_scaling_naming_the_side(sides):
    gen = GeneratorSource(lambda r, n: iter(()), pa.schema([("t", pa.int64()), ("k", pa.int64()),
                                                           ("b", pa.int64())]))
    with pytest.raises(NotSupported, match="right input is a GeneratorSource"):
        run(JoinQuery(time="t", window="tumbling:10s", on="k"), (sides["left"], gen),
            executors=1, max_executors=2)


NEEDS_OFI = pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)")


@NEEDS_OFI
def test_a_tumbling_join_scaled_live_over_ofi_tcp_equals_duckdb(sides, tmp_path):
    q = JoinQuery(time="t", window="tumbling:10s", on="k")
    out, m, done = scaled_join(sides, q, str(tmp_path / "c.sock"), OPS, 5, transport="ofi:tcp")
    assert [d["executors"] for d in done] == [2, 3, 2, 1]
    assert m["late_records"] == 0 and m["records_in"] == TOTAL
    assert pairs(out) == duck_tumbling(sides, 10_000)
