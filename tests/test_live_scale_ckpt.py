"""A live-scalable group that takes checkpoints (runner.run with checkpoint=
and max_executors=, slash.run.recovery.live): scaled live at random points with
checkpoints cut at random points, killed after a live scale, or scaled out
beyond its provisioned size (the restart path), its output equals DuckDB's
and the static run's; each scale says which path it took."""
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import _slash_run

from slash.checkpoint import MANIFEST
from slash.control import request, wait_for_socket
from slash.errors import InvalidArgument
from slash.executor import GroupConfig
from slash.query import Query
from slash.runner import run

FILES, ROWS, GROUP_ROWS, SPAN_MS = 4, 24_000, 2_000, 120_000
TOTAL = FILES * ROWS
Q = Query(time="t", window="tumbling:10s", key="k", aggregates=["count", "sum:v"])
COLS = ["window_start", "k", "count", "sum_v"]


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Part files that each span the whole time range, several row groups
    (units) each, so a live deal moves units between ranks."""
    d = tmp_path_factory.mktemp("liveckpt")
    rng = np.random.default_rng(11)
    for f in range(FILES):
        t = np.sort(rng.integers(0, SPAN_MS, ROWS)).astype(np.int64)
        pq.write_table(pa.table({"t": t, "k": rng.integers(0, 40, ROWS),
                                 "v": rng.integers(0, 1000, ROWS)}),
                       str(d / f"part-{f:03d}.parquet"), row_group_size=GROUP_ROWS)
    return str(d)


@pytest.fixture(scope="module")
def reference(parts):
    """DuckDB's answer, and the static run's (2 executors, no scaling, no checkpoint)."""
    ref = sorted(tuple(r) for r in duckdb.sql(
        f"select (t // 10000) * 10000, k, count(*), sum(v) from read_parquet('{parts}/*.parquet') "
        f"group by all").fetchall())
    return ref, rows(run(Q, parts, executors=2))


def rows(result):
    return sorted(tuple(r[c] for c in COLS) for r in result.to_pylist())


def driven_run(parts, tmp_path, ops, points, partitions=32, **kw):
    """runner.run with checkpoint= and max_executors=; a thread applies ``ops``
    once the status says ``points`` (fractions of the input) were read."""
    sock = str(tmp_path / "c.sock")
    ops_done = _slash_run.ops_at(sock, ops, points, TOTAL)
    m = {}
    # 32 partitions: images of 32 files per rank, cheap to cut every batch or two
    out, done = _slash_run.beside(
        lambda: ops_done() + [request(sock, "status")],
        lambda: run(Q, parts, control=sock, metrics=m, timeout=120,
                    group=GroupConfig(partitions=partitions),
                    checkpoint=str(tmp_path / "ck"), **kw))
    return out, m, done


@pytest.mark.parametrize("seed", [1, 2])
def test_scaled_live_1_to_2_to_1_with_checkpoints_at_random_points_equals_duckdb_and_static(
        parts, tmp_path, reference, seed):
    rng = random.Random(seed)
    points = sorted(rng.uniform(0.1, 0.6) for _ in range(2))
    out, m, done = driven_run(parts, tmp_path, ["scale-out", "scale-in"], points, executors=1,
                              max_executors=2, rate=30_000,
                              checkpoint_every=f"{rng.randint(1, 4)} batches")
    assert [d["executors"] for d in done[:2]] == [2, 1]
    assert [(s["to"], s["path"]) for s in m["live_scales"]] == [(2, "live"), (1, "live")]
    assert len(m["checkpoints"]) >= 3 and m["recoveries"] == []
    assert m["late_records"] == 0 and m["records_in"] == TOTAL
    assert rows(out) == reference[0] == reference[1]


def test_a_rank_killed_after_a_live_scale_resumes_from_a_cut_of_both_active_ranks_and_equals(
        parts, tmp_path, reference, monkeypatch):
    # rank 1 (standby at the start) kills itself after 6 pushes of its own, once 8
    # checkpoints are committed (rank 0 asks every 2 batches: the newest cut then comes
    # after the scale-out at 5% of the input)
    monkeypatch.setenv("SLASH_TEST_KILL", "1:6:0:8")
    out, m, done = driven_run(parts, tmp_path, ["scale-out"], [0.05], executors=1,
                              max_executors=2, rate=20_000, checkpoint_every="2 batches")
    assert done[0]["executors"] == 2 and done[0]["path"] == "live"
    assert len(m["recoveries"]) == 1
    rec = m["recoveries"][0]
    assert rec["rank"] == 1 and rec["from_checkpoint"] is not None
    assert rec["active_at_cut"] == [0, 1]  # the cut recorded the new deal, both ranks reading
    assert m["late_records"] == 0
    assert rows(out) == reference[0] == reference[1]


def test_a_standby_killed_after_a_scale_in_resumes_as_a_standby_and_equals(parts, tmp_path,
                                                                           reference):
    sock, ck = str(tmp_path / "c.sock"), str(tmp_path / "ck")
    scale = _slash_run.ops_at(sock, ["scale-out", "scale-in"], [0.1, 0.25], TOTAL)

    def newest_deal() -> tuple:  # (scale generation, active ranks) of the newest committed cut
        cuts = sorted(int(n[4:]) for n in (os.listdir(ck) if os.path.isdir(ck) else [])
                      if n.startswith("chk-") and os.path.exists(os.path.join(ck, n, MANIFEST)))
        if not cuts:
            return 0, []
        d = os.path.join(ck, f"chk-{cuts[-1]:012d}")
        try:  # (an older cut is removed once two newer ones committed)
            with open(os.path.join(d, MANIFEST)) as f:
                gen = str(json.load(f).get("info", {}).get("live_gen", 0))
            with open(os.path.join(d, "rank-0.json")) as f:
                return int(gen), json.load(f)["live"][gen]["active"]
        except FileNotFoundError:
            return 0, []

    def kill_the_standby():
        done = scale()
        # a cut committed in the scale-in's generation (the second scale: 2), one rank
        # standby (a cut asked before the scale-in may commit after it on a busy machine)
        _slash_run.wait_until(lambda: (lambda g, a: g >= 2 and len(a) == 1)(*newest_deal()), 120,
                              "a committed cut after the scale-in")
        st = request(sock, "status")
        standby = st["standby_ranks"][0]
        os.kill(st["per_executor"][str(standby)]["pid"], signal.SIGKILL)
        return done + [standby]

    m = {}
    out, done = _slash_run.beside(
        kill_the_standby,
        lambda: run(Q, parts, executors=1, max_executors=2, control=sock, rate=15_000, metrics=m,
                    timeout=120, checkpoint=ck, checkpoint_every="300ms",
                    group=GroupConfig(partitions=32)))  # cheap images: a cut every 0.3 s
    standby = done[2]
    assert [d["executors"] for d in done[:2]] == [2, 1]
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["rank"] == standby
    assert m["recoveries"][0]["active_at_cut"] == [1 - standby]  # it resumed standby
    assert m["late_records"] == 0
    assert rows(out) == reference[0] == reference[1]


def test_a_scale_out_beyond_max_executors_takes_the_restart_path_and_equals(
        parts, tmp_path, reference, caplog):
    caplog.set_level(logging.WARNING, logger="slash.run.recovery.live")
    # the scale-in right after the restart answered (a restarted group counts its
    # records afresh in the status, so a later point might come after the input's end)
    out, m, done = driven_run(parts, tmp_path, ["scale-out", "scale-out", "scale-in"],
                              [0.1, 0.2, 0.0], executors=1, max_executors=2, rate=30_000,
                              checkpoint_every="3 batches")
    live1, restart, live2, status = done
    assert (live1["executors"], live1["path"], live1["live"]) == (2, "live", True)
    assert (restart["executors"], restart["path"], restart["live"]) == (3, "restart", False)
    assert restart["max_executors"] == 3 and restart["checkpoint"] is not None
    assert (live2["executors"], live2["path"]) == (2, "live")  # a standby of the new group of 3
    assert [s["path"] for s in status["scales"]] == ["live", "restart", "live"]
    assert status["max_executors"] == 3 and len(status["standby_ranks"]) == 1
    assert [s["path"] for s in m["live_scales"]] == ["live", "restart", "live"]
    assert m["max_executors"] == 3 and m["recoveries"] == []
    assert any("restart path" in r.getMessage() for r in caplog.records)
    assert m["late_records"] == 0
    assert rows(out) == reference[0] == reference[1]


@pytest.mark.slow
@pytest.mark.quiet  # its scale-in at 40-50 % of the input came after the end at load 20+ (seeds 0, 2, 5)
@pytest.mark.parametrize("seed", range(6))
def test_a_restart_beyond_max_executors_then_a_live_scale_in_late_emits_each_window_key_once(
        parts, tmp_path, reference, seed):
    # the settings of a run that once gave duplicate (window, key) rows: 256 partitions, the
    # scale-in halfway through the restarted group's input, cuts every batch or two (the
    # windows the service thread fired after a cut went with it: test_ckpt_cut_results)
    rng = random.Random(seed)
    out, m, done = driven_run(parts, tmp_path, ["scale-out", "scale-out", "scale-in"],
                              [0.1, rng.uniform(0.15, 0.3), rng.uniform(0.4, 0.5)],
                              partitions=256, executors=1, max_executors=2, rate=20_000,
                              checkpoint_every=f"{rng.randint(1, 2)} batches")
    assert [s["path"] for s in m["live_scales"]] == ["live", "restart", "live"]
    got = rows(out)
    assert len({(w, k) for w, k, *_ in got}) == len(got), "a (window, key) was emitted twice"
    assert m["late_records"] == 0
    assert got == reference[0]


def test_beyond_max_executors_without_checkpoint_is_refused_saying_to_provision_or_checkpoint(
        parts, tmp_path):
    sock = str(tmp_path / "c.sock")
    got = []

    def driver():
        wait_for_socket(sock, 60)
        # the socket answers before the live group's operations are hooked in
        _slash_run.wait_until(lambda: request(sock, "status").get("active_ranks"), 60,
                              "the live group's status")
        try:
            request(sock, "scale-out", {"k": 2})
        except InvalidArgument as e:
            got.append(str(e))

    th = threading.Thread(target=driver)
    th.start()
    run(Q, parts, executors=1, max_executors=2, control=sock, rate=100_000, timeout=120)
    th.join()
    assert len(got) == 1 and "max_executors=2" in got[0]
    assert "provision more" in got[0] and "checkpoint=" in got[0]


def test_an_update_of_a_checkpointed_live_group_takes_effect_at_T_and_is_recorded(parts, tmp_path):
    sock, ck = str(tmp_path / "c.sock"), str(tmp_path / "ck")
    out, got = _slash_run.beside(
        _slash_run.ops_at(sock, ["update"], [0.2], TOTAL, {"filter": ["v < 500"]}),
        lambda: run(Q, parts, executors=1, max_executors=2, control=sock, rate=30_000,
                    timeout=120, checkpoint=ck, checkpoint_every="300ms",
                    group=GroupConfig(partitions=32)))
    T = got[0]["effective_from_ms"]
    assert 0 < T < SPAN_MS
    want = sorted(tuple(r) for r in duckdb.sql(
        f"select (t // 10000) * 10000, k, count(*), sum(v) from read_parquet('{parts}/*.parquet') "
        f"where t < {T} or v < 500 group by all").fetchall())
    assert rows(out) == want
    manifests = sorted(os.path.join(ck, f, "_MANIFEST.json") for f in os.listdir(ck)
                       if os.path.exists(os.path.join(ck, f, "_MANIFEST.json")))
    assert manifests, "no checkpoint was kept"
    with open(manifests[-1], encoding="utf-8") as f:  # the newest: cut after the update
        logic = json.load(f)["info"]["logic"]
    assert logic == [{"from_ticks": got[0]["effective_from_ticks"],
                      "args": {"filter": ["v < 500"]}}]


def test_slash_ctl_scales_a_checkpointed_slash_run_beyond_max_executors_naming_the_path(
        parts, tmp_path, reference):
    sock, out = str(tmp_path / "c.sock"), str(tmp_path / "out.parquet")
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--input", parts, "--time", "t",
                          "--window", "tumbling:10s", "--key", "k", "--agg", "count",
                          "--agg", "sum:v", "--executors", "1", "--max-executors", "2",
                          "--rate", "20000", "--checkpoint", str(tmp_path / "ck"),
                          "--checkpoint-every", "3 batches", "--control", sock, "--output", out],
                         env=_slash_run.ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        wait_for_socket(sock, 60)
        ctl = [sys.executable, "-m", "slash", "ctl", "--socket", sock]
        r = subprocess.run(ctl + ["scale-out", "2"], capture_output=True, text=True,
                           env=_slash_run.ENV, timeout=90)
        assert r.returncode == 0, r.stderr
        assert "3 executors (restart path)" in r.stdout
        st = subprocess.run(ctl + ["status"], capture_output=True, text=True,
                            env=_slash_run.ENV, timeout=60)
        assert "active ranks [0, 1, 2], standby ranks []" in st.stdout, st.stdout
        assert "scale 1 -> 3: restart" in st.stdout, st.stdout
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    assert "restart path, 1 -> 3 executors from checkpoint" in stderr
    assert "restart scale 1 -> 3 active executors" in stdout
    assert rows(pq.read_table(out)) == reference[0]


def sink_rows(broker, topic):
    """What a read_committed reader of the sink topic sees, as :func:`rows`
    gives a result, and the checkpoint ids its records carry."""
    from test_kafka import read_topic

    got = read_topic(broker, topic)
    return (sorted(tuple(v[c] for c in COLS) for _, v, _ in got),
            [h.get("slash-cut") for _, _, h in got])


def test_a_live_group_delivers_each_window_to_a_transactional_sink_exactly_once_across_scales(
        parts, tmp_path, reference, kafka_broker):
    """Scaled live 1 -> 2 -> 1 with a cut every batch or two: every committed
    checkpoint's windows go to the topic in its transaction (a cut dropped
    for straddling a scale, with the next commit), the rest at the end; a
    read_committed reader sees DuckDB's answer, each window once."""
    from slash.kafka import KafkaSink

    out_topic = f"live-eo-{os.getpid()}"
    kafka_broker.create_topic(out_topic, 2)
    sink = KafkaSink(kafka_broker.bootstrap, out_topic, key="k", transactional_id=out_topic)
    try:
        out, m, done = driven_run(parts, tmp_path, ["scale-out", "scale-in"], [0.2, 0.5],
                                  executors=1, max_executors=2, rate=30_000,
                                  checkpoint_every="1 batches", sink=sink)
    finally:
        sink.close()
    assert [(s["to"], s["path"]) for s in m["live_scales"]] == [(2, "live"), (1, "live")]
    got, cuts = sink_rows(kafka_broker, out_topic)
    assert rows(out) == reference[0]
    assert got == reference[0]
    assert None not in cuts and len(set(cuts)) >= 2  # delivered by checkpoints, not at the end


def test_a_live_group_without_checkpoints_writes_its_windows_to_a_sink_at_least_once(
        parts, reference, kafka_broker):
    from slash.kafka import KafkaSink

    out_topic = f"live-alo-{os.getpid()}"
    kafka_broker.create_topic(out_topic, 2)
    sink = KafkaSink(kafka_broker.bootstrap, out_topic, key="k")
    try:
        run(Q, parts, executors=1, max_executors=2, sink=sink)
    finally:
        sink.close()
    assert sink_rows(kafka_broker, out_topic)[0] == reference[0]
