"""Exactly-once recovery (issue 16): slash.runner.run(checkpoint=DIR).

The reference of every recovered run is the failure-free run of the same
query (itself checked against DuckDB): a recovered run must give the same
rows, row for row, with no window twice. Workers are killed with SIGKILL at
a chosen push through the documented test hook SLASH_TEST_KILL
(slash.run.recovery.checkpointed)."""
import functools
import json
import os
import random
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.checkpoint import MANIFEST, CheckpointStore, chk_name
from slash.errors import CheckpointCorrupt, InvalidArgument, SystemFailure
from slash.executor import Executor, GroupConfig
from slash.query import Query
from slash.run.recovery.checkpointed import CheckpointEvery
from slash.runner import run
from slash.sources import FileSource, GeneratorSource, TableSource, read_from

needs_core = pytest.mark.skipif(not hasattr(Executor, "take_checkpoint"),
                                reason="the core's checkpoint API (wip-ckpt-core) is not merged")

BATCHES, ROWS = 30, 2000
SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])
WINDOWS = {"tumbling": "tumbling:10s", "sliding": "sliding:10s/5s", "session": "session:3s"}


def _batch(rank: int, i: int) -> pa.RecordBatch:
    rng = np.random.default_rng(1000 * rank + i)
    # batch i of a rank: times in [i s, (i + 1) s)
    t = i * 1000 + np.sort(rng.integers(0, 1000, ROWS))
    keys = rng.integers(0, 40, ROWS)
    return pa.record_batch([pa.array(t), pa.array(keys), pa.array(rng.integers(0, 100, ROWS))],
                           schema=SCHEMA)


def make(rank: int, n: int, pace: float = 0.01):
    """Deterministic: the same batches for the same (rank, n), every call.
    Paced (``pace`` s a batch): a rank that raced through its input on a
    loaded machine would take part in no further cut, and a kill hook waiting
    for one would fire before any checkpoint committed."""
    for i in range(BATCHES):
        if i % 7 != 6:  # every 7th second empty: sessions close in between
            time.sleep(pace)
            yield _batch(rank, i)


def _query(kind: str) -> Query:
    return Query(time="t", window=WINDOWS[kind], key="k", aggregates=["count", "sum:v"])


def _gen() -> GeneratorSource:
    return GeneratorSource(make, SCHEMA)


def _slow_gen() -> GeneratorSource:
    """The same batches, 50 ms apart: for the tests whose kill waits for two
    committed cuts, which both ranks must still be pushing to take part in."""
    return GeneratorSource(functools.partial(make, pace=0.05), SCHEMA)


_reference = {}


def reference(kind: str, source_kind: str, source) -> pa.Table:
    got = _reference.get((kind, source_kind))
    if got is None:
        got = _reference[(kind, source_kind)] = run(_query(kind), source, executors=2)
    return got


def _rows(t: pa.Table):
    return t.to_pylist()


def _assert_same(got: pa.Table, want: pa.Table) -> None:
    g, w = _rows(got), _rows(want)
    keys = [(r["window_start"], r["window_end"], r["k"]) for r in g]
    assert len(keys) == len(set(keys)), "a window is in the result twice"
    assert g == w


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("input")
    for r in range(2):
        batches = list(make(r, 2))
        for j in range(0, len(batches), 5):  # 5 files of 5 row groups per rank
            pq.write_table(pa.Table.from_batches(batches[j:j + 5]), str(d / f"part-{r}-{j:02d}.parquet"),
                           row_group_size=ROWS)
    return str(d)


# ---- the reference itself ---------------------------------------------------------
def test_failure_free_tumbling_run_equals_duckdb():
    t = pa.Table.from_batches([b for r in range(2) for b in make(r, 2)])
    want = duckdb.sql("select (t // 10000) * 10000 as ws, k, count(*) as c, sum(v) as s "
                      "from t group by all order by ws, k").fetchall()
    got = reference("tumbling", "gen", _gen())
    start = got.column("window_start").cast(pa.int64()).to_pylist() \
        if not pa.types.is_timestamp(got.schema.field("window_start").type) else \
        got.column("window_start").cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
    assert list(zip(start, got.column("k").to_pylist(), got.column("count").to_pylist(),
                    got.column("sum_v").to_pylist())) == [(a, b, c, int(d)) for a, b, c, d in want]


# ---- CheckpointStore alone ------------------------------------------------------------
def _store(d, fp="q1", n=2, parts=8, keep=2):
    return CheckpointStore(str(d), fingerprint=fp, executors=n, partitions=parts, keep=keep)


def _commit(s, cid, payload=b"state"):
    files = {"rank-0.meta": s.write(cid, "rank-0.meta", payload),
             "rank-0.json": s.write(cid, "rank-0.json", json.dumps({"position": cid}).encode())}
    seg, entry = s.write_segment(0, cid, b"windows-%d" % cid)
    return s.commit(cid, files, {seg: entry})


def test_store_latest_is_the_newest_committed_checkpoint(tmp_path):
    s = _store(tmp_path)
    assert s.latest() is None
    _commit(s, 1)
    _commit(s, 2)
    ck = s.latest()
    assert ck.id == 2 and ck.rank_info(0) == {"position": 2}
    assert sorted(ck.segments()) == ["results/rank-0.chk-000000000001.arrow",
                                     "results/rank-0.chk-000000000002.arrow"]


def test_store_keeps_the_last_k_checkpoints_and_every_result_segment(tmp_path):
    s = _store(tmp_path, keep=2)
    for c in range(1, 5):
        _commit(s, c)
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("chk-")) == \
        [chk_name(3), chk_name(4)]
    assert len(s.latest().segments()) == 4


def test_store_ignores_and_deletes_a_checkpoint_without_manifest(tmp_path):
    s = _store(tmp_path)
    _commit(s, 1)
    s.write(2, "rank-0.meta", b"half")  # cut 2 written, never committed
    s.write_segment(0, 2, b"uncommitted windows")
    assert s.latest().id == 1
    assert not os.path.exists(tmp_path / chk_name(2))
    assert os.listdir(tmp_path / "results") == ["rank-0.chk-000000000001.arrow"]


def test_store_writes_the_manifest_last(tmp_path, monkeypatch):
    import slash.checkpoint as ck

    order = []
    real = ck.write_durably
    s = _store(tmp_path)  # marks the directory (_SLASH_CHECKPOINT) before any checkpoint
    monkeypatch.setattr(ck, "write_durably", lambda p, d: order.append(os.path.basename(p)) or real(p, d))
    _commit(s, 1)
    assert order[-1] == MANIFEST and len(order) == 4


def test_store_refuses_a_truncated_file_naming_it(tmp_path):
    s = _store(tmp_path)
    _commit(s, 1, payload=b"x" * 100)
    path = tmp_path / chk_name(1) / "rank-0.meta"
    path.write_bytes(b"x" * 50)
    with pytest.raises(CheckpointCorrupt, match="rank-0.meta.*truncated"):
        s.latest()


def test_store_refuses_a_corrupted_file_naming_it(tmp_path):
    s = _store(tmp_path)
    _commit(s, 1, payload=b"x" * 100)
    path = tmp_path / chk_name(1) / "rank-0.meta"
    path.write_bytes(b"y" + b"x" * 99)
    with pytest.raises(CheckpointCorrupt, match="rank-0.meta.*crc32"):
        s.latest()


def test_store_refuses_a_manifest_that_does_not_parse_naming_it(tmp_path):
    s = _store(tmp_path)
    _commit(s, 1)
    (tmp_path / chk_name(1) / MANIFEST).write_text("{not json")
    with pytest.raises(CheckpointCorrupt, match=MANIFEST):
        s.latest()


def test_store_refuses_the_directory_of_another_query(tmp_path):
    _commit(_store(tmp_path, fp="q1"), 1)
    with pytest.raises(InvalidArgument, match="another query"):
        _store(tmp_path, fp="q2").latest()


def test_store_refuses_another_partition_count(tmp_path):
    _commit(_store(tmp_path, n=2, parts=8), 1)
    with pytest.raises(InvalidArgument, match="8 key partitions"):
        _store(tmp_path, n=2, parts=12).latest()


def test_store_reads_a_checkpoint_of_another_executor_count(tmp_path):
    _commit(_store(tmp_path, n=2), 1)
    assert _store(tmp_path, n=3).latest().executors == 2


def test_checkpoint_every_parses_durations_epochs_and_batches():
    assert CheckpointEvery.parse("10s") == CheckpointEvery(seconds=10.0)
    assert CheckpointEvery.parse(3) == CheckpointEvery(seconds=3.0)
    assert CheckpointEvery.parse("4 epochs") == CheckpointEvery(epochs=4)
    assert CheckpointEvery.parse("7 batches") == CheckpointEvery(batches=7)
    with pytest.raises(InvalidArgument, match="checkpoint_every"):
        CheckpointEvery.parse("often")


# ---- source positions -----------------------------------------------------------------
def _items(it):
    return [(pos, ("wm", i.value.as_py()) if not isinstance(i, pa.RecordBatch) else i.to_pylist())
            for pos, i in it]


@pytest.mark.parametrize("src", ["files", "table", "gen"])
def test_read_from_each_position_resumes_with_the_rest_of_the_read(src, files):
    source = {"files": lambda: FileSource(files),
              "table": lambda: TableSource(pa.Table.from_batches(list(make(0, 2)))),
              "gen": _gen}[src]()
    full = _items(read_from(source, 1, 2, ["t", "k"], "t"))
    assert [x[1] for x in full] == [x[1] for x in _items(enumerate(
        source.read(1, 2, ["t", "k"], time="t")))]
    assert len(full) > 3
    for j in range(len(full)):
        assert _items(read_from(source, 1, 2, ["t", "k"], "t", full[j][0])) == full[j + 1:]


# ---- end to end ------------------------------------------------------------------------
def _run(kind, source, d, **kw):
    m = {}
    kw.setdefault("checkpoint_every", "4 batches")
    kw.setdefault("group", GroupConfig(epoch_ms=10))  # short epochs: cuts align promptly
    return run(_query(kind), source, executors=2, checkpoint=str(d), metrics=m, **kw), m


@needs_core
@pytest.mark.parametrize("kind,seed", [("tumbling", 1), ("tumbling", 2), ("sliding", 2),
                                       ("session", 1), ("session", 3)])
def test_killed_worker_gives_the_failure_free_output(kind, seed, tmp_path, monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setenv("SLASH_TEST_KILL", f"{rng.randrange(2)}:{rng.randrange(3, 24)}")
    got, m = _run(kind, _gen(), tmp_path)
    _assert_same(got, reference(kind, "gen", _gen()))
    # (whether a cut commits in this short run is timing: a cut asked while a rank is finishing
    # is given up (Executor.request_checkpoint), and a rank can finish its share before rank 0
    # asks its first; at load 10-17 about one run in ten committed none, on the code before
    # and after the one-skeleton change alike. Restoring from a committed cut is proven by
    # test_killed_worker_over_parquet_files_gives_the_failure_free_output, killed after 2 cuts)
    assert len(m["recoveries"]) == 1


@needs_core
@pytest.mark.parametrize("kind", ["tumbling", "session"])
def test_killed_worker_over_parquet_files_gives_the_failure_free_output(kind, files, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("SLASH_TEST_KILL", "1:9:0:2")  # at push 9 or later, after 2 cuts
    got, m = _run(kind, FileSource(files), tmp_path)
    _assert_same(got, reference(kind, "files", FileSource(files)))
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["rank"] == 1
    assert m["recoveries"][0]["from_checkpoint"] is not None  # restored state, not a fresh start


@needs_core
def test_killed_twice_in_one_run_gives_the_failure_free_output(tmp_path, monkeypatch):
    monkeypatch.setenv("SLASH_TEST_KILL", "0:7:0,1:15:1")  # rank 0 in attempt 0, rank 1 in 1
    got, m = _run("sliding", _gen(), tmp_path)
    _assert_same(got, reference("sliding", "gen", _gen()))
    assert [r["rank"] for r in m["recoveries"]] == [0, 1]


@needs_core
def test_more_failures_than_max_restarts_fail_naming_the_cause(tmp_path, monkeypatch):
    monkeypatch.setenv("SLASH_TEST_KILL", "1:5:0,1:12:1")
    with pytest.raises(SystemFailure, match=r"after 1 restart.*rank 1 died \(killed by signal SIGKILL"):
        _run("tumbling", _gen(), tmp_path, max_restarts=1)


@needs_core
def test_a_run_started_again_resumes_from_the_directory(tmp_path, monkeypatch):
    # every executor (and the run) dies: max_restarts=0 gives up at once
    monkeypatch.setenv("SLASH_TEST_KILL", "0:14:0:2")
    with pytest.raises(SystemFailure):
        _run("session", _slow_gen(), tmp_path, max_restarts=0)
    monkeypatch.delenv("SLASH_TEST_KILL")
    got, m = _run("session", _slow_gen(), tmp_path)
    assert m["resumed_from"] is not None and m["resumed_from"] >= 1
    _assert_same(got, reference("session", "gen", _gen()))


@needs_core
def test_a_finished_run_returns_its_stored_result(tmp_path):
    first, _ = _run("tumbling", _gen(), tmp_path)
    again, m = _run("tumbling", _gen(), tmp_path)
    assert m["finished_before"] and again.equals(first)


@needs_core
def test_a_corrupted_checkpoint_file_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SLASH_TEST_KILL", "0:14:0:2")
    with pytest.raises(SystemFailure):
        _run("tumbling", _slow_gen(), tmp_path, max_restarts=0)
    monkeypatch.delenv("SLASH_TEST_KILL")
    # the newest committed checkpoint (the kill may have left a newer one without a manifest,
    # which a restart ignores)
    chk = sorted(p for p in os.listdir(tmp_path)
                 if p.startswith("chk-") and (tmp_path / p / "_MANIFEST.json").exists())[-1]
    part = sorted(p for p in os.listdir(tmp_path / chk) if p.startswith("part-"))[0]
    data = (tmp_path / chk / part).read_bytes()
    (tmp_path / chk / part).write_bytes(data[:len(data) // 2])
    with pytest.raises(CheckpointCorrupt, match=part):
        _run("tumbling", _slow_gen(), tmp_path)


@needs_core
def test_cli_run_with_checkpoint_recovers_a_killed_worker(files, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out.parquet"
    env = dict(os.environ, SLASH_TEST_KILL="0:8")
    p = subprocess.run([sys.executable, "-m", "slash", "run", "--input", files, "--time", "t",
                        "--window", WINDOWS["tumbling"], "--key", "k", "--agg", "count",
                        "--agg", "sum:v", "--executors", "2", "--output", str(out),
                        "--checkpoint", str(tmp_path / "ck"), "--checkpoint-every", "4 batches"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "1 recovery" in p.stdout + p.stderr
    _assert_same(pq.read_table(out), reference("tumbling", "files", FileSource(files)))


@needs_core
def test_a_checkpointed_run_reports_live_metrics_and_marks_its_recovery(files, tmp_path, monkeypatch):
    from slash.metrics import LiveMetrics

    monkeypatch.setenv("SLASH_TEST_KILL", "1:9:0:2")
    live = LiveMetrics(2, kind="run")
    got, m = _run("tumbling", FileSource(files), tmp_path, live=live)
    _assert_same(got, reference("tumbling", "files", FileSource(files)))
    snap = live.snapshot()
    assert sorted(snap["per_executor"]) == ["0", "1"]  # both ranks reported over their links
    assert all(p["records_in"] > 0 for p in snap["per_executor"].values())
    marks = [e["text"] for e in snap["events"]]
    assert len(m["recoveries"]) == 1
    assert any(t.startswith("recovery 1: rank 1 failed") for t in marks), marks
