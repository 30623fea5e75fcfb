"""Live scale-out / scale-in of a `slash run` within a pre-provisioned group
(slash.run.live.scale, max_executors=M): the output equals DuckDB's (or the
static run's, for sessions) whatever the points of the changes, no record is
late because of one, standby ranks do not hold the group back, and what
cannot scale live is refused naming why."""
import functools
import os
import random
import subprocess
import sys
import threading
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import _slash_run

from slash.control import request, wait_for_socket
from slash.errors import InvalidArgument, NotSupported
from slash.control import rebalance_spec
from slash.run.live.scale import deal_work, spread_moves
from slash.query import Query
from slash.runner import run
from slash.sources import BatchSource, GeneratorSource, Unit

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
SPAN_MS = 120_000
FILES, ROWS, GROUP_ROWS = 4, 24_000, 2_000


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Part files that each span the whole time range (as Spark writes them),
    sorted within a file, several row groups (units) each."""
    d = tmp_path_factory.mktemp("live")
    rng = np.random.default_rng(7)
    for f in range(FILES):
        t = np.sort(rng.integers(0, SPAN_MS, ROWS)).astype(np.int64)
        pq.write_table(pa.table({"t": t, "k": rng.integers(0, 40, ROWS),
                                 "v": rng.integers(0, 1000, ROWS)}),
                       str(d / f"part-{f:03d}.parquet"), row_group_size=GROUP_ROWS)
    return str(d)


def duck(path, sql):
    files = f" read_parquet('{path}/*.parquet')"
    return sorted(tuple(r) for r in duckdb.sql(sql.replace(" T", files)).fetchall())


def rows(result, cols):
    return sorted(tuple(r[c] for c in cols) for r in result.to_pylist())


wait_until = functools.partial(_slash_run.wait_until, every=0.02)


def scaled_run(path, query, sock, ops, seed, rate=40_000):
    """runner.run with 1 of 3 executors active; a thread applies ``ops`` at
    random points of the input (by records read, from the status)."""
    rng = random.Random(seed)
    total = FILES * ROWS
    points = sorted(rng.uniform(0.1, 0.6) for _ in ops)  # the last well before the end
    m = {}
    out, done = _slash_run.beside(
        _slash_run.ops_at(sock, ops, points, total),
        lambda: run(query, path, executors=1, max_executors=3, control=sock, rate=rate, metrics=m,
                    timeout=120))
    return out, m, done


# ---- the deal and the spread, against their rules -------------------------------------------
class _Src:
    def __init__(self, bounds, rows):
        self.units = [Unit("f", i, r) for i, r in enumerate(rows)]
        self._b = bounds

    def unit_bounds(self, _time):
        return self._b


@pytest.mark.parametrize("seed", range(20))
def test_the_deal_gives_every_unit_left_to_one_rank_whose_watermark_is_at_most_its_bound(seed):
    rng = random.Random(seed)
    n_units = rng.randint(1, 30)
    bounds = [rng.randint(0, 1000) for _ in range(n_units)]
    src = _Src(bounds, [rng.randint(1, 100) for _ in range(n_units)])
    ranks = list(range(4))
    left = {r: [] for r in ranks}
    for g in range(n_units):
        left[rng.choice(ranks)].append([g, rng.randint(0, 3)])
    # a holder's watermark is at most the bound of every unit it holds; standbys: None
    wm = {r: (min((bounds[g] for g, _ in left[r]), default=None) if rng.random() < 0.7 else None)
          for r in ranks}
    active = sorted(rng.sample(ranks, rng.randint(1, 4)))
    if all(wm[r] is not None and wm[r] > min(bounds) for r in active):
        wm[active[0]] = None  # a joining standby: may take anything
    out = deal_work(src, "t", left, wm, lambda b: b, active)
    got = sorted((g, k) for lst in out.values() for g, k in lst)
    assert got == sorted((g, k) for lst in left.values() for g, k in lst)
    for r, lst in out.items():
        assert r in active
        for g, _ in lst:
            assert wm[r] is None or wm[r] <= bounds[g], (r, g)
        assert [bounds[g] for g, _ in lst] == sorted(bounds[g] for g, _ in lst)  # read order


def test_a_unit_no_active_rank_may_take_is_refused_naming_it():
    src = _Src([5, 50], [10, 10])
    with pytest.raises(Exception, match="unit 0"):
        deal_work(src, "t", {0: [[0, 0]], 1: [[1, 0]]}, {0: 5, 1: 50}, lambda b: b, [1])


@pytest.mark.parametrize("seed", range(20))
def test_the_spread_leaves_the_active_ranks_leading_evenly_and_moves_no_more_than_needed(seed):
    rng = random.Random(seed)
    leaders = [rng.randrange(5) for _ in range(rng.randint(5, 64))]
    active = sorted(rng.sample(range(5), rng.randint(1, 5)))
    moves = spread_moves(leaders, active)
    after = [moves.get(p, r) for p, r in enumerate(leaders)]
    counts = [after.count(r) for r in active]
    assert set(after) <= set(active) and max(counts) - min(counts) <= 1
    assert all(leaders[p] != r for p, r in moves.items())
    # minimal: every partition an active rank can keep stays (the "+1" slots of an uneven
    # split go to the ranks leading the most), brute force over which ranks get them
    from itertools import combinations
    q, extra = divmod(len(leaders), len(active))
    keep = max(sum(min(leaders.count(r), q + (r in plus)) for r in active)
               for plus in combinations(active, extra))
    assert len(moves) == len(leaders) - keep


def test_an_automatic_rebalance_in_a_live_group_moves_between_active_ranks_only():
    per = {0: {"merge_seconds": 0.1}, 1: {"merge_seconds": 0.0}, 2: {"merge_seconds": 3.0},
           3: {"merge_seconds": 1.0}}
    assert rebalance_spec({}, per, 4) == {"from_rank": 2, "to_rank": 1}  # 1: a standby
    assert rebalance_spec({}, per, 4, [0, 2, 3]) == {"from_rank": 2, "to_rank": 0}


# ---- live runs against DuckDB and the static run ------------------------------------------------
OPS = ["scale-out", "scale-out", "scale-in", "scale-in"]


@pytest.mark.parametrize("seed", [1, 2])
def test_tumbling_windows_scaled_1_to_3_and_back_at_random_points_equal_duckdb(parts, tmp_path,
                                                                             seed):
    q = Query(time="t", window="tumbling:10s", key="k", aggregates=["count", "sum:v"])
    out, m, done = scaled_run(parts, q, str(tmp_path / "c.sock"), OPS, seed)
    assert [d["executors"] for d in done] == [2, 3, 2, 1]
    assert m["late_records"] == 0 and m["records_in"] == FILES * ROWS
    assert [s["to"] for s in m["live_scales"]] == [2, 3, 2, 1]
    assert all(p["records_in"] > 0 for p in m["per_executor"])  # every rank read some input
    assert rows(out, ["window_start", "k", "count", "sum_v"]) == duck(
        parts, "select (t // 10000) * 10000, k, count(*), sum(v) from T group by all")


def test_sliding_windows_scaled_live_equal_duckdb_no_window_lost_or_doubled(parts, tmp_path):
    q = Query(time="t", window="sliding:20s/5s", key="k", aggregates=["count", "max:v"])
    out, m, _ = scaled_run(parts, q, str(tmp_path / "c.sock"), OPS, 3)
    assert m["late_records"] == 0
    ref = duck(parts, """select ws, k, count(*), max(v) from
                         (select unnest(range((t // 5000 - 3) * 5000, (t // 5000 + 1) * 5000, 5000))
                          ws, * from T) group by all""")
    assert rows(out, ["window_start", "k", "count", "max_v"]) == sorted(ref)


def test_session_windows_scaled_live_equal_the_static_run(parts, tmp_path):
    q = Query(time="t", window="session:300ms", key="k", aggregates=["count", "sum:v"])
    out, m, _ = scaled_run(parts, q, str(tmp_path / "c.sock"), ["scale-out", "scale-in"], 4)
    assert m["late_records"] == 0
    static = run(q, parts, executors=2)
    cols = ["window_start", "window_end", "k", "count", "sum_v"]
    assert rows(out, cols) == rows(static, cols)


GEN_BATCHES, GEN_ROWS, GEN_SPAN = 300, 400, 200
GEN_SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])


def gen_batch(i):
    """Batch i of a rate-like generator: a function of i alone, times in
    [i * 200, i * 200 + 400) (overlapping the next batch's), in no order."""
    rng = np.random.default_rng(i)
    return pa.record_batch({"t": i * GEN_SPAN + rng.integers(0, 2 * GEN_SPAN, GEN_ROWS),
                            "k": rng.integers(0, 30, GEN_ROWS),
                            "v": rng.integers(0, 100, GEN_ROWS)}, schema=GEN_SCHEMA)


def gen_bound(i):
    return i * GEN_SPAN


def test_a_generator_by_global_batch_index_scaled_live_equals_duckdb(tmp_path):
    src = BatchSource(gen_batch, GEN_BATCHES, GEN_SCHEMA, GEN_ROWS, bound=gen_bound)
    q = Query(time="t", window="sliding:4s/2s", key="k", aggregates=["count", "sum:v"])
    sock = str(tmp_path / "c.sock")
    m = {}
    out, done = _slash_run.beside(
        _slash_run.ops_at(sock, ["scale-out", "scale-out", "scale-in"], [0.2, 0.4, 0.6],
                          GEN_BATCHES * GEN_ROWS),
        lambda: run(q, src, executors=1, max_executors=3, control=sock, rate=40_000, metrics=m,
                    timeout=120))
    assert [d["executors"] for d in done] == [2, 3, 2] and m["late_records"] == 0
    gen = pa.Table.from_batches([gen_batch(i) for i in range(GEN_BATCHES)])  # noqa: F841
    ref = duckdb.sql("""select ws, k, count(*), sum(v) from
                        (select unnest(range((t // 2000 - 1) * 2000, (t // 2000 + 1) * 2000, 2000))
                         ws, * from gen) group by all""").fetchall()
    assert rows(out, ["window_start", "k", "count", "sum_v"]) == sorted(tuple(r) for r in ref)


def test_a_standby_executor_follows_the_active_watermark_so_windows_fire_without_it():
    """The core's standby state, two executors: rank 0 pushes 10 s of records,
    rank 1 has no input. Without standby nothing fires (rank 1 promised
    nothing); as a standby following rank 0, every window rank 0's
    watermark closed fires while rank 1 still runs; active again, it
    finishes normally and the whole answer equals DuckDB."""
    import multiprocessing

    import executor_peers as peers

    ctx = multiprocessing.get_context("spawn")
    rng = np.random.default_rng(5)
    t = np.sort(rng.integers(0, 10_000, 3000)).astype(np.int64)
    recs = pa.table({"key": rng.integers(0, 20, 3000), "time": t, "x": rng.integers(0, 9, 3000)})
    state_kw = dict(window="tumbling:1s", aggregates=["count", "sum:x"],
                    value_types={"x": "int64"})
    gkw = dict(lateness=0, epoch_bytes=16 << 10)
    ctl, expect, (p0, p1) = peers.push_and_hold_pair(ctx, recs, state_kw, gkw)

    def poll_both():
        ctl[1].put(("poll",))
        ctl[0].put(("poll", 1.0))
        return pa.concat_tables([expect("polled")[2], expect("polled")[2]])

    expect("pushed")
    assert poll_both().num_rows == 0  # rank 1 holds the group back
    ctl[1].put(("standby", [0]))
    expect("standby")
    early = poll_both()
    ends = early.column("window_end").to_pylist()
    # rank 0's watermark is its latest time (lateness 0): every window ending by it fired
    assert ends and max(ends) == int(t.max()) // 1000 * 1000
    ctl[1].put(("standby", None))
    expect("standby")
    ctl[0].put(("finish",))
    ctl[1].put(("finish",))
    final = [expect("ok"), expect("ok")]
    p0.join(30), p1.join(30)
    ref = duckdb.sql("select (time // 1000) * 1000, key, count(*), sum(x) from recs "
                     "group by all").fetchall()
    out = pa.concat_tables([r[2] for r in final])
    assert rows(out, ["window_start", "key", "count", "sum_x"]) == sorted(tuple(r) for r in ref)
    assert all(r[3]["late_records"] == 0 for r in final)


def test_standby_ranks_do_not_hold_the_group_watermark_back(parts, tmp_path):
    sock = str(tmp_path / "c.sock")
    seen = []

    def watch():
        wait_for_socket(sock, 60)
        st = wait_until(lambda: (lambda s: s if s["reporting"] == 3 and (s["watermark_ms"] or -1)
                                 >= SPAN_MS // 4 else None)(request(sock, "status")), 60,
                        "the group watermark to pass a quarter of the input's span")
        seen.append(st)

    th = threading.Thread(target=watch)
    th.start()
    q = Query(time="t", window="tumbling:10s", key="k", aggregates=["count"])
    run(q, parts, executors=1, max_executors=3, control=sock, rate=40_000, timeout=120)
    th.join()
    st = seen[0]
    assert st["standby_ranks"] == [1, 2] and st["active_ranks"] == [0]
    assert st["records"] < FILES * ROWS  # while the stream still ran


def test_an_update_in_a_live_group_reaches_the_standby_ranks_and_holds_across_a_scale(parts,
                                                                                     tmp_path):
    sock = str(tmp_path / "c.sock")
    q = Query(time="t", window="tumbling:10s", key="k", aggregates=["count", "sum:v"])
    update_at = _slash_run.ops_at(sock, ["update"], [0.2], FILES * ROWS, {"filter": "v < 500"})
    out, (update, scale) = _slash_run.beside(
        lambda: (update_at()[0], request(sock, "scale-out", {"k": 1})),
        lambda: run(q, parts, executors=1, max_executors=2, control=sock, rate=40_000,
                    timeout=120))
    T = update["effective_from_ms"]
    assert scale["executors"] == 2 and T is not None and T % 10_000 == 0
    assert rows(out, ["window_start", "k", "count", "sum_v"]) == duck(
        parts, f"select (t // 10000) * 10000, k, count(*), sum(v) from T "
               f"where t < {T} or v < 500 group by all")


# ---- what is refused -----------------------------------------------------------------------------
def test_scaling_past_the_provisioned_group_is_refused_naming_max_executors(parts, tmp_path):
    sock = str(tmp_path / "c.sock")
    got = []

    def driver():
        wait_for_socket(sock, 60)
        for op, k in (("scale-out", 3), ("scale-in", 1)):
            try:
                request(sock, op, {"k": k})
            except InvalidArgument as e:
                got.append(str(e))

    th = threading.Thread(target=driver)
    th.start()
    q = Query(time="t", window="tumbling:10s", key="k", aggregates=["count"])
    run(q, parts, executors=1, max_executors=3, control=sock, rate=100_000, timeout=120)
    th.join()
    assert len(got) == 2 and all("max_executors=3" in e for e in got)
    assert "4 active executors is outside 1..3" in got[0] and "0 active" in got[1]


def test_a_generator_or_a_table_refuses_live_scaling_saying_why(parts, tmp_path):
    q = Query(time="t", window="tumbling:10s", key="k", aggregates=["count"])
    gen = GeneratorSource(lambda r, n: iter(()), pa.schema([("t", pa.int64()), ("k", pa.int64())]))
    with pytest.raises(NotSupported, match="GeneratorSource"):
        run(q, gen, executors=1, max_executors=2)
    table = pa.table({"t": pa.array([0, 1], pa.int64()), "k": [1, 2]})
    with pytest.raises(NotSupported, match="TableSource"):
        run(q, table, executors=1, max_executors=2)
    with pytest.raises(InvalidArgument, match="max_executors"):
        run(q, parts, executors=2, max_executors=1)


def test_slash_ctl_scales_a_slash_run_live_and_status_shows_active_and_standby(parts, tmp_path):
    sock, out = str(tmp_path / "c.sock"), str(tmp_path / "out.parquet")
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--input", parts, "--time", "t",
                          "--window", "tumbling:10s", "--key", "k", "--agg", "count",
                          "--executors", "1", "--max-executors", "2", "--rate", "30000",
                          "--control", sock, "--output", out], env=ENV,
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
    got = pq.read_table(out)
    assert rows(got, ["window_start", "k", "count"]) == duck(
        parts, "select (t // 10000) * 10000, k, count(*) from T group by all")


def test_the_bench_row_measures_each_live_operation_of_a_paced_replay():
    from slash.bench.elastic import live_scale_pause

    r = live_scale_pause(60_000, 30_000, every=0.02)
    assert r["late_records"] == 0
    ops = r["operations"]
    assert [o["op"] for o in ops] == ["scale-out", "scale-in"]
    for o in ops:
        assert 0 <= o["input_paused_ms"] <= o["answered_ms"]
        assert o["request_to_next_output_ms"] is not None


def slow_gen_batch(i):
    time.sleep(0.01)  # a paced generator: the run lasts long enough to be rescaled
    return gen_batch(i)


def test_a_batch_source_rescaled_by_checkpoint_restart_equals_duckdb(tmp_path):
    """The restart path (beyond a provisioned group) re-splits a BatchSource
    by global batch index too: 2 -> 3 executors from a cut."""
    from slash.run.recovery.checkpointed import CheckpointedRun as Rescaler

    src = BatchSource(slow_gen_batch, 300, GEN_SCHEMA, GEN_ROWS, bound=gen_bound)
    q = Query(time="t", window="tumbling:2s", key="k", aggregates=["count", "sum:v"])
    ctl, done = Rescaler(), []

    def rescale():
        wait_until(lambda: ctl.executors == 2, 60, "the checkpointed group to run")
        time.sleep(0.5)
        done.append(ctl.rescale(3, timeout=60))

    th = threading.Thread(target=rescale)
    th.start()
    m = {}
    out = run(q, src, executors=2, checkpoint=str(tmp_path / "ck"), checkpoint_every="5 batches",
              control=ctl, metrics=m)
    th.join()
    assert done and done[0]["to"] == 3 and m["executors"] == 3
    gen = pa.Table.from_batches([gen_batch(i) for i in range(300)])  # noqa: F841
    ref = sorted(tuple(r) for r in duckdb.sql(
        "select (t // 2000) * 2000, k, count(*), sum(v) from gen group by all").fetchall())
    assert rows(out, ["window_start", "k", "count", "sum_v"]) == ref
