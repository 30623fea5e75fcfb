"""Live leadership moves (issue 17): partitions led by a versioned leader map,
moved between executors at epoch boundaries while the stream runs. A run
with moves at random points gives exactly DuckDB's answer over the whole
input (each (window, key) once), for tumbling, sliding and session windows;
handing every partition of rank 1 to rank 0 (a scale-in) does too (moves
of a join: test_join_moves.py).

Executors run as threads of this process, as in test_checkpoint_exec.py,
over shm and (where libfabric is built in) ofi:tcp."""
from __future__ import annotations

import logging
import random
import threading
import time
from typing import List

import pyarrow as pa
import pytest

import slash
from slash import errors

from _state_reference import AGGS, VALUE_TYPES, assert_same, duckdb_reference
from test_checkpoint_exec import in_threads, open_group
from test_executor import split, stream

BATCH = 400
NEEDS_OFI = pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)")
OFI = pytest.param("ofi:tcp", marks=NEEDS_OFI)


def batches(t: pa.Table) -> List[pa.Table]:
    return [t.slice(i, BATCH) for i in range(0, t.num_rows, BATCH)]


def move_when_agreed(ex: slash.Executor, moves) -> bool:
    """Rank 0 asks for a move; while the previous one is being agreed it
    polls (its peers' markers arrive) and asks again. False when a peer
    finished already (leadership no longer moves then)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            ex.move_partitions(moves)
            return True
        except errors.InvalidState as e:
            if "finished" in str(e):
                return False
            assert time.monotonic() < deadline, "the previous move was never agreed"
            ex.poll(0.005)


def finish_into(ex: slash.Executor, got: List[pa.RecordBatch], out: List[pa.RecordBatch],
                lock: threading.Lock) -> None:
    """A rank's end of input: finish, then its windows (got and the last
    ones) into the group's out."""
    ex.finish()
    got += ex.results()
    with lock:
        out.extend(got)


def run(table, n, window, *, seed, plan=None, partitions=16, string_keys=False, mover=None,
        finish_after=None, **group_kw):
    """Every rank pushes its share batch by batch; rank 0 calls plan(rng,
    leaders) before the batches chosen at random and moves what it returns
    (or calls mover(executor, last) before every batch and, last=True,
    before finish). finish_after: an Event the other ranks wait for, serving
    their executors, before they finish (a move asked late in rank 0's input
    still finds every peer unfinished, however the threads are scheduled).
    Returns (results, metrics per rank, final leader map per rank)."""
    state = slash.StateConfig(window=window, aggregates=AGGS, value_types=VALUE_TYPES,
                              key_type="string" if string_keys else "int64")
    exs = open_group(n, state, partitions=partitions, **group_kw)
    inputs = [batches(t) for t in split(table, n, "random", seed)]
    rng = random.Random(seed)
    when = set(rng.sample(range(max(len(inputs[0]), 1)), min(4, len(inputs[0]))))
    out: List[pa.RecordBatch] = []
    lock = threading.Lock()

    def rank_fn(r):
        def f():
            ex = exs[r]
            got = []
            for i, b in enumerate(inputs[r]):
                if r == 0 and mover is not None:
                    mover(ex, last=False)
                elif r == 0 and i in when:
                    moves = plan(rng, ex.leader_map()[1])
                    if moves:
                        move_when_agreed(ex, moves)
                assert ex.push_batch(b) == 0
                got += ex.results()
            if r == 0 and mover is not None:
                mover(ex, last=True)  # a version adopted just before the final epoch
            deadline = time.monotonic() + 60
            while r != 0 and finish_after is not None and not finish_after.is_set():
                assert time.monotonic() < deadline, "rank 0 never asked for its move"
                ex.poll(0.005)
                got += ex.results()
            finish_into(ex, got, out, lock)
        return f

    try:
        in_threads([rank_fn(r) for r in range(n)])
        metrics = [ex.metrics for ex in exs]
        maps = [ex.leader_map() for ex in exs]
    finally:
        for ex in exs:
            ex.close()
    return out, metrics, maps


def random_moves(n):
    def plan(rng, leaders):
        parts = rng.sample(range(len(leaders)), rng.randint(1, len(leaders) // 2))
        return {p: rng.randrange(n) for p in parts}
    return plan


def agreed(maps) -> None:
    assert all(m == maps[0] for m in maps), "executors ended on different leader maps"


@pytest.mark.parametrize("window,seed,transport", [
    *((w, s, "shm") for w in ("tumbling:1s", "sliding:3s/1s", "session:700ms") for s in (1, 2)),
    pytest.param("session:700ms", 2, "ofi:tcp", marks=NEEDS_OFI)])
def test_moves_at_random_points_give_the_answer_of_the_run_without_moves(window, seed, transport):
    table = stream(seed, n=12000, nkeys=200, span_ms=30000)
    n = 3
    got, metrics, maps = run(table, n, window, seed=seed, plan=random_moves(n), transport=transport)
    assert_same(pa.Table.from_batches(got), duckdb_reference(table, slash.parse_window(window)))
    agreed(maps)
    assert maps[0][0] >= 1, "no move took effect"
    assert sum(m["moves"] for m in metrics) == sum(m["moves_out"] for m in metrics) > 0
    assert all(m["held_partitions"] == 0 for m in metrics)


def test_moves_with_string_keys_and_the_default_partition_count():
    table = stream(7, n=8000, nkeys=150, span_ms=20000, string_keys=True)
    got, metrics, maps = run(table, 2, "tumbling:1s", seed=7, plan=random_moves(2),
                             partitions=None, string_keys=True)
    assert len(maps[0][1]) == 256
    assert_same(pa.Table.from_batches(got), duckdb_reference(table, slash.parse_window("tumbling:1s")))
    agreed(maps)


@pytest.mark.parametrize("window", ["tumbling:1s", "session:700ms"])
def test_scale_in_hand_over_of_every_partition_of_rank_1_keeps_the_answer(window):
    table = stream(5, n=10000, nkeys=200, span_ms=30000)
    done = []

    def plan(rng, leaders):
        if done:
            return None
        done.append(1)
        return {p: 0 for p, r in enumerate(leaders) if r == 1}

    got, metrics, maps = run(table, 2, window, seed=5, plan=plan)
    assert_same(pa.Table.from_batches(got), duckdb_reference(table, slash.parse_window(window)))
    agreed(maps)
    assert set(maps[0][1]) == {0}
    assert metrics[1]["led_partitions"] == 0 and metrics[0]["led_partitions"] == 16
    assert metrics[0]["moves"] == 8 and metrics[1]["moves_out"] == 8
    assert metrics[0]["moved_bytes"] == metrics[1]["moved_bytes_out"]


def test_a_move_on_a_rank_other_than_0_or_with_a_bad_partition_is_refused():
    state = slash.StateConfig(window="tumbling:1s", aggregates=["count"])
    exs = open_group(2, state, partitions=8)
    try:
        with pytest.raises(errors.InvalidState, match="rank 0"):
            exs[1].move_partitions({0: 1})
        with pytest.raises(errors.InvalidArgument, match="partition 8"):
            exs[0].move_partitions({8: 1})
        with pytest.raises(errors.InvalidArgument, match="rank 2"):
            exs[0].move_partitions({1: 2})
        assert exs[0].leader_map() == (0, [p % 2 for p in range(8)])
    finally:
        for ex in exs:
            ex.close()


def test_a_leader_map_set_before_any_push_is_followed_and_a_bad_one_refused():
    state = slash.StateConfig(window="tumbling:1s", aggregates=["count"])
    exs = open_group(2, state, partitions=8)
    try:
        with pytest.raises(errors.InvalidArgument, match="each of the 8 partitions"):
            exs[0].set_leaders([0] * 7)
        with pytest.raises(errors.InvalidArgument, match="rank in 0..1"):
            exs[0].set_leaders([2] * 8)
        for ex in exs:
            ex.set_leaders([0] * 8)  # every partition led by rank 0 (rank 1 standing by)
        assert [ex.leader_map()[1] for ex in exs] == [[0] * 8, [0] * 8]
    finally:
        for ex in exs:
            ex.close()



@pytest.mark.parametrize("transport", ["shm", OFI])
def test_partitions_moved_back_before_their_hand_over_arrived(transport):
    """Rank 0 moves every partition to the other rank as soon as the group
    agreed the previous version, so versions follow each other faster than
    hand-overs (small channel buffers: a hand-over takes many fragments, and
    a marker of the next version arrives while one is shipped). An executor
    owing a partition for one version and awaiting it back for the next
    takes the second role only after the first hand-over: no executor waits
    for a peer that waits for it, and the answer is DuckDB's. The last swap
    comes just before rank 0's final epoch: a version whose switch waits for
    an older hand-over is still switched to (and announced) before it."""
    def swap_all(ex, last):
        deadline = time.monotonic() + 30
        while True:
            leaders = ex.leader_map()[1]
            try:
                ex.move_partitions({p: 1 - leaders[p] for p in range(len(leaders))})
                return
            except errors.InvalidState as e:
                # the previous version still being agreed, or rank 1 finished
                if not last or "finished" in str(e):
                    return
                assert time.monotonic() < deadline, "the previous move was never agreed"
                ex.poll(0.001)  # the last one: as soon as agreed, then finish at once

    table = stream(11, n=16000, nkeys=400, span_ms=20000)
    got, metrics, maps = run(table, 2, "tumbling:1s", seed=11, partitions=32, mover=swap_all,
                             buffer_size=4 << 10, credits=2, timeout=20, transport=transport)
    assert_same(pa.Table.from_batches(got), duckdb_reference(table, slash.parse_window("tumbling:1s")))
    agreed(maps)
    assert maps[0][0] >= 3, "versions did not follow each other"
    assert all(m["held_partitions"] == 0 for m in metrics)


@pytest.mark.parametrize("window", ["sliding:10s/1s", "session:5s"])
def test_a_hand_over_of_many_fragments_imported_as_they_arrive_keeps_the_answer(window):
    """Small channel buffers (4 KiB): each moved partition goes over in many
    fragments, sent a slice of them at a time (other messages between the
    slices) and each imported on arrival (in whatever serve round it lands)
    while the new leader merges new-map updates of the same partition; the
    answer is DuckDB's, for windows whose records span several slices and for
    sessions."""
    table = stream(13, n=24000, nkeys=20000, span_ms=20000)
    got, metrics, maps = run(table, 2, window, seed=13, plan=random_moves(2), partitions=4,
                             buffer_size=4 << 10, credits=2, timeout=20)
    assert_same(pa.Table.from_batches(got), duckdb_reference(table, slash.parse_window(window)))
    agreed(maps)
    moves = sum(m["moves"] for m in metrics)
    assert moves > 0 and all(m["held_partitions"] == 0 for m in metrics)
    moved = sum(m["moved_bytes"] for m in metrics)
    # a hand-over of more than 16 fragments (one slice) on average
    assert moved > moves * 16 * (4 << 10), "hand-overs fit one slice: the test proves nothing"


def test_a_hand_over_queued_deeper_than_a_serve_round_imports_keeps_the_answer():
    """Small buffers and a deep ring (64 credits of 4 KiB): more hand-over
    fragments wait in the ring than one serve round imports (16, so a
    caller's call waits for at most that much import), the rest in later
    rounds, behind or among other messages; the answer is DuckDB's. One
    window holds the whole stream and rank 0 gives every partition it leads
    to rank 1 halfway, so every hand-over is many fragments."""
    table = stream(17, n=60000, nkeys=50000, span_ms=20000)
    calls = [0]
    moved = threading.Event()

    def mover(ex, last):
        calls[0] += 1
        if calls[0] == 40:
            leaders = ex.leader_map()[1]
            assert move_when_agreed(ex, {p: 1 for p, r in enumerate(leaders) if r == 0})
            moved.set()

    got, metrics, maps = run(table, 2, "tumbling:30s", seed=17, mover=mover, partitions=4,
                             buffer_size=4 << 10, credits=64, timeout=20, finish_after=moved)
    assert_same(pa.Table.from_batches(got),
                duckdb_reference(table, slash.parse_window("tumbling:30s")))
    agreed(maps)
    assert maps[0][1] == [1, 1, 1, 1]
    moves = sum(m["moves"] for m in metrics)
    assert moves > 0 and all(m["held_partitions"] == 0 for m in metrics)
    assert sum(m["moved_bytes"] for m in metrics) > moves * 32 * (4 << 10), \
        "hand-overs of a few fragments: the test proves nothing"


def serve_until(ex: slash.Executor, done, got: List[pa.RecordBatch], bound: float) -> float:
    """Polls ex (an idle source: nothing pushed) until done() holds, taking
    the windows it fires into got; the seconds it took, at most bound."""
    t0 = time.monotonic()
    while not done():
        assert time.monotonic() - t0 < bound, \
            f"rank {ex.metrics['rank']}: not done while its source was idle"
        ex.poll(0.005)
        got += ex.results()
    return time.monotonic() - t0


def test_a_move_asked_while_every_source_is_idle_is_agreed_and_handed_over_by_polls():
    """Both ranks push half their input, then their sources go idle: they
    only poll. Rank 0 swaps the leadership of every partition. A pending
    leader-map version ends the epoch of an executor that can switch to it,
    so the idle ranks switch, exchange their markers and hand the partitions'
    state over within a bound, before either pushes anything more (an epoch's
    byte or time budget ends it only with something to publish, which an idle
    rank has not). The rest of the input then goes to the new leaders, and the
    answer is DuckDB's."""
    window = "tumbling:1s"
    table = stream(5, n=8000, nkeys=150, span_ms=20000)
    state = slash.StateConfig(window=window, aggregates=AGGS, value_types=VALUE_TYPES)
    parts = 16
    exs = open_group(2, state, partitions=parts)
    inputs = [batches(t) for t in split(table, 2, "random", 5)]
    idle = [threading.Event(), threading.Event()]
    agreed_in: List[float] = [0.0, 0.0]
    out: List[pa.RecordBatch] = []
    lock = threading.Lock()

    def handed_over(ex):
        m = ex.metrics
        return ex.leader_map()[0] == 1 and m["held_partitions"] == 0 and \
            m["moves"] == m["moves_out"] == parts // 2

    def rank_fn(r):
        def f():
            ex, got, half = exs[r], [], len(inputs[r]) // 2
            for i, b in enumerate(inputs[r]):
                if i == half:  # the source idle: only polls until the move is done
                    idle[r].set()
                    serve_until(ex, idle[1 - r].is_set, got, 60)
                    if r == 0:
                        ex.move_partitions({p: 1 - p % 2 for p in range(parts)})
                    agreed_in[r] = serve_until(ex, lambda: handed_over(ex), got, 10)
                assert ex.push_batch(b) == 0
                got += ex.results()
            finish_into(ex, got, out, lock)
        return f

    try:
        in_threads([rank_fn(r) for r in range(2)])
        maps = [ex.leader_map() for ex in exs]
    finally:
        for ex in exs:
            ex.close()
    agreed(maps)
    assert maps[0] == (1, [1 - p % 2 for p in range(parts)])
    assert_same(pa.Table.from_batches(out), duckdb_reference(table, slash.parse_window(window)))
    logging.getLogger(__name__).info("idle ranks agreed the move in %.3f s and %.3f s", *agreed_in)
