"""Live leadership moves of a join (issue 17): a window join run by 2-3
executor processes whose partitions rank 0 moves at random points between
pushes (several seeds, tumbling and session windows, shm and ofi:tcp) gives
the same pairs as the same join run without moves and as DuckDB's join of
the same rows: no pair lost or doubled, no row late. Partitions moved back
before their hand-over arrived (versions faster than hand-overs, hand-overs
of many fragments) keep the answer too; while one partition's hand-over is
held back the others keep firing; and a checkpoint asked during a join's
hand-over is cut after it and restores to DuckDB's pairs.

The hand-over of a join partition merges it into what its new leader
already holds (tests/c/test_join_move.c proves the store part)."""
from __future__ import annotations

import collections
import random
import secrets
import time
import traceback
from typing import Any, Dict, List, Set, Tuple

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import slash
from slash import errors

import executor_peers as peers
from test_checkpoint_exec import in_threads, open_group
from test_executor import CTX, OFI, collect, launch, split
from test_join import rows_of

LEFT, RIGHT = {"a": "int64", "x": "float64"}, {"b": "int64"}
STEP_MS = 500  # the pushers advance both sides through time in steps of this
PACE_S = 0.02  # and serve their peers this long after each step


def side(seed: int, n: int, nkeys: int, cols: dict, id_base: int, span: int) -> pa.Table:
    """One join side in time order (up to 50 ms of disorder), a unique id per row."""
    rng = np.random.default_rng(seed)
    data = {"key": pa.array(rng.integers(0, nkeys, n), pa.int64()),
            "time": pa.array(np.sort(rng.integers(0, span, n)) + rng.integers(0, 50, n), pa.int64())}
    for name, t in cols.items():
        data[name] = (pa.array(np.arange(id_base, id_base + n), pa.int64()) if t == "int64"
                      else pa.array(rng.integers(-1000, 1000, n) / 4.0))
    return pa.table(data)


def duckdb_join(left: pa.Table, right: pa.Table, window: str) -> pa.Table:
    """DuckDB's windowed equi-join of the rows: tumbling windows by floor
    division; sessions per key over both sides' rows, a new one where the
    gap to the previous row exceeds the gap (rows exactly gap apart share
    one), every left x right pair of one session."""
    con = duckdb.connect()
    con.register("l", left)
    con.register("r", right)
    kind, size = window.split(":")
    ms = int(size.rstrip("ms")) * (1 if size.endswith("ms") else 1000)
    if kind == "tumbling":
        return con.sql(f"""
            SELECT CAST(floor(l.time / {ms}) * {ms} AS BIGINT) AS window_start,
                   CAST(floor(l.time / {ms}) * {ms} + {ms} AS BIGINT) AS window_end,
                   l.key AS key, l.a AS left_a, l.x AS left_x, r.b AS right_b
            FROM l JOIN r ON l.key = r.key AND floor(l.time / {ms}) = floor(r.time / {ms})
        """).to_arrow_table()
    return con.sql(f"""
        WITH u AS (SELECT key, time, 0 AS s, a, x, NULL::BIGINT AS b FROM l
                   UNION ALL SELECT key, time, 1, NULL, NULL, b FROM r),
        g AS (SELECT *, CASE WHEN time - lag(time) OVER (PARTITION BY key ORDER BY time, s, a, b) > {ms}
                             THEN 1 ELSE 0 END AS brk FROM u),
        s AS (SELECT *, sum(brk) OVER (PARTITION BY key ORDER BY time, s, a, b
                                       ROWS UNBOUNDED PRECEDING) AS sid FROM g),
        b AS (SELECT key, sid, min(time) AS ws, max(time) + {ms} AS we FROM s GROUP BY key, sid)
        SELECT b.ws AS window_start, b.we AS window_end, b.key AS key, sl.a AS left_a,
               sl.x AS left_x, sr.b AS right_b
        FROM s sl JOIN s sr ON sl.key = sr.key AND sl.sid = sr.sid AND sl.s = 0 AND sr.s = 1
        JOIN b ON b.key = sl.key AND b.sid = sl.sid
    """).to_arrow_table()


# ---- the executors (spawned: importable functions) ------------------------
def move_when_agreed(ex: slash.Executor, moves: Dict[int, int], patient: bool = True) -> bool:
    """Rank 0 asks for a move; while the previous one is being agreed it
    polls (its peers' markers arrive) and asks again (once only unless
    patient). False when it was not taken (a peer finished, or impatient)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            ex.move_partitions(moves)
            return True
        except errors.InvalidState as e:
            if "finished" in str(e) or not patient:
                return False
            assert time.monotonic() < deadline, "the previous move was never agreed"
            ex.poll(0.002)


def mover_for(plan: Dict[str, Any], n: int):
    """What rank 0 does before step i of its input (last=True: before
    finish): 'random' moves a random subset of partitions to random ranks
    at `moves` random steps; 'swap' hands every partition to the other
    rank at every step (moved back before its hand-over arrived) and once
    more just before finish; 'none' moves nothing."""
    rng = random.Random(plan["seed"])
    when = set(rng.sample(range(plan["steps"]), min(plan.get("moves", 0), plan["steps"])))

    def move(ex: slash.Executor, i: int, last: bool) -> None:
        leaders = ex.leader_map()[1]
        if plan["kind"] == "random" and i in when and not last:
            parts = rng.sample(range(len(leaders)), rng.randint(1, max(1, len(leaders) // 2)))
            if move_when_agreed(ex, {p: rng.randrange(n) for p in parts}):
                ex.end_epoch()  # switch now: the peers still push when they learn of it
        elif plan["kind"] == "swap":
            move_when_agreed(ex, {p: 1 - leaders[p] for p in range(len(leaders))}, patient=last)
    return move


def run_join_moving(transport, rank, n, token, addr_q, addrs_q, out_q, left, right, join_kw,
                    group_kw, plan, moved, begun):
    """A join executor pushing its left and right splits interleaved in time
    steps; rank 0 moves partitions between steps as `plan` says. Random
    moves: rank 0 then sets `moved`, which the other ranks wait for (serving
    their executors, ending epochs) before they finish, so a move is never
    refused because a peer finished first, however late rank 0's process
    started. The other ranks begin their steps once rank 0 has taken its
    first (`begun`), serving their executors meanwhile, so a rank whose
    process started first cannot run through its whole input before rank 0
    asks for its moves. Reports ("ok", rank, results,
    metrics, final leader map)."""
    try:
        ex = peers.join(transport, rank, token, addr_q, addrs_q, None, group_kw,
                        config=slash.JoinConfig(**join_kw))
        mover = mover_for(plan, n) if rank == 0 else None
        if plan["kind"] != "random":  # swaps until the end: a peer that finished refuses the last
            moved.set()
        results: List[pa.RecordBatch] = []
        late = 0
        deadline = time.monotonic() + 120
        while not mover and not begun.is_set():
            assert time.monotonic() < deadline, "rank 0 never took its first step"
            ex.poll(PACE_S)
        for i, lo in enumerate(range(0, plan["steps"] * STEP_MS, STEP_MS)):
            if mover:
                mover(ex, i, False)
            for name, t in (("left", left), ("right", right)):
                part = t.filter(pc.and_(pc.greater_equal(t.column("time"), lo),
                                        pc.less(t.column("time"), lo + STEP_MS)))
                if part.num_rows:
                    late += ex.push_side_batch(name, part)
            ex.poll(PACE_S)  # paced, so no rank finished while rank 0 still moves
            results += ex.results()
            if mover:
                begun.set()
        if mover:
            mover(ex, plan["steps"], True)
            moved.set()
        deadline = time.monotonic() + 120
        while not mover and not moved.is_set():
            assert time.monotonic() < deadline, "rank 0 never finished its moves"
            ex.end_epoch()  # an idle rank's epochs carry its part of each move's agreement
            ex.poll(PACE_S)
            results += ex.results()
        ex.finish()
        results += ex.results()
        m = ex.metrics
        m["late_pushed"] = late
        out = pa.Table.from_batches(results, schema=ex.result_schema())
        leaders = ex.leader_map()
        ex.close()
        out_q.put(("ok", rank, out, m, leaders))
    except BaseException as e:  # reported to the test, which fails with it
        out_q.put(("error", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


# ---- the tests ----------------------------------------------------------------
def run(n: int, transport: str, window: str, left: pa.Table, right: pa.Table, plan: Dict[str, Any],
        **group: Any):
    """The join over n processes with rank 0 moving as `plan` says: (pairs,
    metrics per rank, leader map per rank)."""
    lparts, rparts = split(left, n, "random", 1), split(right, n, "random", 2)
    join_kw = dict(window=window, left_columns=LEFT, right_columns=RIGHT)
    group_kw = dict(lateness="1s", epoch_bytes=8 << 10, buffer_size=64 << 10, partitions=16,
                    timeout=30)
    group_kw.update(group)
    span = max(pc.max(t.column("time")).as_py() for t in (left, right))
    plan = dict(plan, steps=span // STEP_MS + 2)
    moved, begun = CTX.Event(), CTX.Event()
    procs, out_q = launch(run_join_moving, n, transport,
                          lambda r: (lparts[r], rparts[r], join_kw, group_kw, plan, moved, begun),
                          secrets.token_hex(8))
    reports = collect(procs, out_q, n)
    return (pa.concat_tables([r[2] for r in reports]), [r[3] for r in reports],
            [r[4] for r in reports])


def assert_no_late(metrics) -> None:
    assert sum(m["late_pushed"] for m in metrics) == 0
    assert sum(m["late_records"] for m in metrics) == 0


def assert_moved(metrics, maps) -> None:
    assert all(m == maps[0] for m in maps), "executors ended on different leader maps"
    assert maps[0][0] >= 1, "no move took effect"
    assert sum(m["moves"] for m in metrics) == sum(m["moves_out"] for m in metrics) > 0
    assert all(m["held_partitions"] == 0 for m in metrics)


def inputs(seed: int, window: str):
    if window.startswith("session"):  # sparse keys: sessions end and new ones open
        return (side(seed, 1500, 60, LEFT, 0, span=20000),
                side(seed + 100, 1200, 60, RIGHT, 100000, span=20000))
    return (side(seed, 3000, 40, LEFT, 0, span=15000),
            side(seed + 100, 2000, 40, RIGHT, 100000, span=15000))


WINDOWS = ["tumbling:1s", "session:300ms"]


@pytest.mark.parametrize("window,seed,transport,mode", [
    *((w, s, "shm", "slash") for w in WINDOWS for s in (1, 2)),
    *((w, 5, "shm", "repartition") for w in WINDOWS),
    *(pytest.param(w, 4, "ofi:tcp", "slash", marks=OFI) for w in WINDOWS)])
def test_join_moves_at_random_points_give_the_pairs_of_the_run_without_moves(window, seed, transport,
                                                                             mode):
    """Deltas to leaders (mode slash) or rows routed to them (repartition);
    seed 1 also runs the same join without moves (the static reference)."""
    left, right = inputs(seed, window)
    got, metrics, maps = run(3, transport, window, left, right,
                             {"kind": "random", "seed": seed, "moves": 5}, mode=mode)
    static, _, _ = run(3, "shm", window, left, right, {"kind": "none", "seed": 0}) \
        if seed == 1 else (None, None, None)
    want = duckdb_join(left, right, window)
    assert got.num_rows == want.num_rows > 0, "a pair was lost or doubled"
    assert rows_of(got) == rows_of(want)
    if static is not None:
        assert rows_of(got) == rows_of(static)
    assert_moved(metrics, maps)
    assert_no_late(metrics)


@pytest.mark.parametrize("window,transport", [
    ("tumbling:1s", "shm"), ("session:300ms", "shm"),
    pytest.param("tumbling:1s", "ofi:tcp", marks=OFI)])
def test_join_partitions_moved_back_before_their_hand_over_arrived(window, transport):
    """Rank 0 hands every partition to the other rank at every step, and once
    more just before its final epoch, with small channel buffers: versions
    follow each other faster than hand-overs of many fragments, so an
    executor owes a partition for one version while the next moves it back
    to it. The pairs are DuckDB's, each once."""
    left, right = inputs(7, window)
    got, metrics, maps = run(2, transport, window, left, right, {"kind": "swap", "seed": 7},
                             partitions=4, buffer_size=4 << 10, credits=2)
    want = duckdb_join(left, right, window)
    assert got.num_rows == want.num_rows > 0, "a pair was lost or doubled"
    assert rows_of(got) == rows_of(want)
    assert_moved(metrics, maps)
    assert maps[0][0] >= 3, "versions did not follow each other"
    assert_no_late(metrics)
    moves = sum(m["moves"] for m in metrics)
    assert sum(m["moved_bytes"] for m in metrics) > moves * (4 << 10), \
        "hand-overs fit one 4 KiB fragment: the test proves nothing"


# ---- only the moved partition pauses ----------------------------------------
KEYS, WINDOW_MS, FAR = 30, 1000, 20_500

Pairs = Dict[Tuple[int, int], int]  # (window_end, key) -> pairs emitted


def both_sides(first: int, last: int, rank: int) -> List[Tuple[str, pa.Table]]:
    """Every key once per 100 ms of windows first..last-1 on each side, times
    offset by rank, values unique per rank: (side, rows) per 100 ms, in time
    order (a side pushed whole would make the other's rows late)."""
    out = []
    for w in range(first, last):
        for t in range(w * WINDOW_MS + rank, (w + 1) * WINDOW_MS, 100):
            base = {"key": pa.array(range(KEYS), pa.int64()), "time": pa.array([t] * KEYS, pa.int64())}
            ids = pa.array([rank * 10**6 + t * KEYS + k for k in range(KEYS)], pa.int64())
            out += [("left", pa.table({**base, "a": ids})), ("right", pa.table({**base, "b": ids}))]
    return out


def take_pairs(ex: slash.Executor, into: Pairs) -> None:
    got: Pairs = collections.Counter()
    for b in ex.results():
        d = b.to_pydict()
        for we, k in zip(d["window_end"], d["key"]):
            got[(we, k)] += 1
    for wk, c in got.items():
        assert wk not in into, f"window ending {wk[0]} of key {wk[1]} emitted twice"
        into[wk] = c


def progress(rows: Pairs, keys: Set[int]) -> int:
    """The latest window end emitted for any of `keys` (0 when none)."""
    return max((we for (we, k) in rows if k in keys), default=0)


def test_join_partitions_that_do_not_move_keep_firing_while_a_hand_over_is_held():
    """As test_partial_pause.py, for a join (threads over shm, 3 partitions,
    partition p led by rank p): rank 2 pushes far ahead once and stays idle
    without a call (it neither pushes nor polls), so its MAP marker never comes and rank 0 cannot hand partition 0 over;
    the partitions that do not move fire up to 9 s meanwhile, the moved one
    fires nothing past the move at either leader, and once rank 2 ends an
    epoch it catches up. Every (window, key) has exactly left x right pairs."""
    cfg = slash.JoinConfig(window="tumbling:1s", left_columns={"a": "int64"},
                           right_columns={"b": "int64"})
    exs = open_group(3, cfg, partitions=3, lateness="200ms", epoch_bytes=1 << 30, epoch_ms=60_000)
    rows: List[Pairs] = [{}, {}, {}]
    pushed: List[pa.Table] = []

    def push(r: int, batches: List[Tuple[str, pa.Table]]) -> None:
        for name, t in batches:
            assert exs[r].push_side_batch(name, t) == 0
            pushed.append(t)
        exs[r].end_epoch()

    def wait_for(cond, what: str, idle: Set[int] = frozenset()) -> None:
        deadline = time.monotonic() + 60
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for r, (ex, got) in enumerate(zip(exs, rows)):
                if r not in idle:  # an idle rank's service thread fires; its pairs are taken
                    ex.poll(0.01)
                take_pairs(ex, got)

    try:
        far = pa.table({"key": pa.array(range(KEYS), pa.int64()),
                        "time": pa.array([FAR] * KEYS, pa.int64())})
        push(2, [("left", far.append_column("a", pa.array(range(KEYS), pa.int64()))),
                 ("right", far.append_column("b", pa.array(range(KEYS), pa.int64())))])
        push(0, both_sides(0, 5, 0))
        push(1, both_sides(0, 5, 1))
        wait_for(lambda: all(progress(g, set(range(KEYS))) >= 4000 for g in rows),
                 "every rank to fire windows up to 4 s")
        part = {k: r for r, g in enumerate(rows) for (_, k) in g}  # a rank leads one partition
        assert set(part) == set(range(KEYS)) and len(set(part.values())) == 3
        keys_of = collections.defaultdict(set)
        for k, r in part.items():
            keys_of[r].add(k)
        before = progress(rows[0], keys_of[0])
        assert before == 4000

        exs[0].move_partitions({0: 1})
        push(0, both_sides(5, 10, 0))
        push(1, both_sides(5, 10, 1))
        wait_for(lambda: progress(rows[1], keys_of[1]) >= 9000 and
                 progress(rows[2], keys_of[2]) >= 9000,
                 "the partitions that do not move to fire up to 9 s", idle={2})
        m = [ex.metrics for ex in exs]
        assert m[1]["held_partitions"] == 1 and m[1]["moves"] == 0, m[1]
        assert m[0]["moves_out"] == 0, "rank 0 handed over without rank 2's marker"
        moved = keys_of[0]
        assert progress(rows[0], moved) == before, "the old leader fired a moved window"
        assert progress(rows[1], moved) == 0, "the new leader fired before the hand-over"

        exs[2].end_epoch()  # its marker: rank 0 hands partition 0 over
        wait_for(lambda: progress(rows[1], moved) >= 9000,
                 "the moved partition to catch up after its hand-over")
        m = [ex.metrics for ex in exs]
        assert m[1]["moves"] == 1 and m[1]["held_partitions"] == 0
        assert m[1]["moved_bytes"] == m[0]["moved_bytes_out"] > 0

        in_threads([ex.finish for ex in exs])
        for ex, g in zip(exs, rows):
            take_pairs(ex, g)
    finally:
        for ex in exs:
            ex.close()

    count: Dict[Tuple[str, int, int], int] = collections.Counter()
    for t in pushed:
        s = "L" if "a" in t.schema.names else "R"
        for k, ts in zip(t.column("key").to_pylist(), t.column("time").to_pylist()):
            count[(s, (ts // WINDOW_MS + 1) * WINDOW_MS, k)] += 1
    want = {(we, k): c * count[("R", we, k)] for (s, we, k), c in count.items()
            if s == "L" and count[("R", we, k)]}
    got: Pairs = {}
    for g in rows:
        for wk, c in g.items():
            assert wk not in got, f"{wk} emitted by two leaders"
            got[wk] = c
    assert got == want


# ---- a checkpoint asked during a join's hand-over ------------------------------
def time_slots(left: pa.Table, right: pa.Table, lo: int, hi: int) -> List[Tuple[str, pa.Table]]:
    """Both sides' rows with lo <= time < hi as (side, rows) per STEP_MS, in time order."""
    out = []
    for t0 in range(lo, hi, STEP_MS):
        for name, t in (("left", left), ("right", right)):
            part = t.filter(pc.and_(pc.greater_equal(t.column("time"), t0),
                                    pc.less(t.column("time"), min(t0 + STEP_MS, hi))))
            if part.num_rows:
                out.append((name, part))
    return out


def side_pushes(ex: slash.Executor) -> slash.Executor:
    """The checkpoint drivers push with push_batch: a (side, rows) item here."""
    ex.push_batch = lambda item: ex.push_side_batch(*item)
    return ex


@pytest.mark.parametrize("window", WINDOWS)
def test_a_checkpoint_asked_during_a_join_hand_over_restores_to_duckdbs_join(window):
    """Rank 0 moves the even partitions to rank 1 right before it asks for
    checkpoint 1: the cut falls after the hand-over (each partition in one
    image, under the moved map), and a group restored from the images by that
    map and fed the rest of the input gives DuckDB's pairs, each once."""
    from test_checkpoint_exec import finish_all, run_until_checkpoint

    left, right = inputs(3, window)
    cfg = slash.JoinConfig(window=window, left_columns=LEFT, right_columns=RIGHT)
    half = 8000
    lsplit, rsplit = split(left, 2, "random", 1), split(right, 2, "random", 2)
    first = [time_slots(lsplit[r], rsplit[r], 0, half) for r in range(2)]
    end = max(pc.max(t.column("time")).as_py() for t in (left, right)) + 1
    rest = [time_slots(lsplit[r], rsplit[r], half, end) for r in range(2)]
    exs = [side_pushes(ex) for ex in open_group(2, cfg, partitions=16, lateness="1s")]
    ask = exs[0].request_checkpoint

    def move_then_ask(cid):
        exs[0].move_partitions({p: 1 for p in range(0, 16, 2)})
        ask(cid)
    exs[0].request_checkpoint = move_then_ask
    try:
        images, before = run_until_checkpoint(exs, first)
        leaders = exs[0].leader_map()[1]
        assert all(ex.leader_map()[1] == leaders for ex in exs)
    finally:
        for ex in exs:
            ex.close()
    assert leaders == [1] * 16  # the evens moved to rank 1, which led the odds
    assert sorted(p for img in images.values() for p in img.parts) == list(range(16))
    assert set(images[1].parts) == set(range(16)), "a moved partition in the old leader's image"
    exs = [side_pushes(ex) for ex in open_group(2, cfg, partitions=16, lateness="1s")]
    metas = [images[r].meta for r in range(2)]
    parts = {p: blob for img in images.values() for p, blob in img.parts.items()}
    try:
        for r, ex in enumerate(exs):
            ex.restore(metas, {p: b for p, b in parts.items() if leaders[p] == r}, leaders)
        todo = [first[r][images[r].pushes:] + rest[r] for r in range(2)]
        after = finish_all(exs, todo)
    finally:
        for ex in exs:
            ex.close()
    got = pa.Table.from_batches(before + after)
    want = duckdb_join(left, right, window)
    assert got.num_rows == want.num_rows > 0, "a pair was lost or doubled"
    assert rows_of(got) == rows_of(want)
