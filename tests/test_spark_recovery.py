"""slash.spark.stream(checkpoint=...): a task's Python worker killed mid-stream
costs a restart from the newest checkpoint, not the output; a stream stopped
and started again with the same directory continues; its directory sink shows
each window exactly once (never a window twice, never a half-written file);
a callable sink only gets windows a committed checkpoint covers, labelled
with its id. References: DuckDB over the generated records, and a run
without failure."""
import os
import shutil
import signal
import time

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")

from slash.errors import CheckpointCorrupt, InvalidState, TaskFailed  # noqa: E402
from slash.spark import DirectorySource, RateSource, stream  # noqa: E402
from slash.workloads import ysb_batches  # noqa: E402
from slash.run.protocol import Resume, ResumeAsk  # noqa: E402
from slash.run.driver import Dispatch  # noqa: E402

pytestmark = pytest.mark.slow

SRC = RateSource(rate=50_000, records=150_000, keys=20, batch=2_000, seed=3)
QUERY = dict(time="event_time", window="tumbling:500ms", key="key", aggs=["count", "max:event_time"],
             filter="event_type == 'view'", executors=2)


def duckdb_windows(base_ms, src=SRC, slides=(0,)):
    """{(window_start, key): (count, max event_time)} of the views, by DuckDB:
    500 ms windows, or with ``slides=(0, 500)`` the 1 s windows sliding by 500 ms."""
    records = pa.Table.from_batches(list(ysb_batches(src.records, keys=src.keys, seed=src.seed,
                                                     rate=src.rate, base_ms=base_ms,
                                                     columns=list(src.columns))))
    con = duckdb.connect()
    con.register("r", records)
    con.register("o", pa.table({"off": list(slides)}))
    rows = con.execute("""SELECT event_time - event_time % 500 - off AS ws, key, count(*),
                                 max(event_time)
                          FROM r, o WHERE CAST(event_type AS VARCHAR) = 'view'
                          GROUP BY ALL""").fetchall()
    return {(ws, k): (c, mx) for ws, k, c, mx in rows}


def sink_windows(table):
    """{(window_start, key): (count, max)}; fails on a (window, key) seen twice."""
    keys = list(zip(table.column("window_start").to_pylist(), table.column("key").to_pylist()))
    assert len(keys) == len(set(keys)), "a window is in the sink twice"
    return dict(zip(keys, zip(table.column("count").to_pylist(),
                              table.column("max_event_time").to_pylist())))


def read_sink(path):
    """What a reader of the directory sees (pyarrow skips _pending/ and _tmp-)."""
    t = ds.dataset(path, format="parquet").to_table()
    return t if t.num_columns else None


def wait_for_checkpoints(h, k, timeout=60):
    deadline = time.monotonic() + timeout
    while len(h.metrics["checkpoints"]) < k:
        assert time.monotonic() < deadline, "no checkpoint committed"
        assert h.running, "the stream ended before its checkpoints"
        time.sleep(0.02)


def per_key_totals(table):
    g = table.group_by("key").aggregate([("count", "sum")])
    return dict(zip(g.column("key").to_pylist(), g.column("count_sum").to_pylist()))


def test_killed_worker_recovers_and_directory_sink_holds_each_window_once(spark, tmp_path):
    clean = str(tmp_path / "clean")
    h0 = stream(spark, SRC, sink=clean, **QUERY)  # the failure-free reference
    h0.wait(120)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **QUERY)
    wait_for_checkpoints(h, 1)
    victim = h.task_pids()[1]
    os.kill(victim, signal.SIGKILL)
    seen = 0
    while h.running:  # what a reader sees meanwhile: never a window twice, only growing
        t = read_sink(out)
        if t is not None:
            assert t.num_rows >= seen
            seen = t.num_rows
            sink_windows(t)
        time.sleep(0.05)
    m = h.wait(120)
    [rec] = m["recoveries"]
    assert rec["rank"] == 1 and str(victim) in rec["cause"]
    assert rec["from_checkpoint"] >= 1 and rec["seconds_to_resume"] > 0
    assert m["checkpoints"] and all(c["bytes"] > 0 for c in m["checkpoints"])
    got = read_sink(out)
    assert sink_windows(got) == duckdb_windows(h.base_ms)
    assert per_key_totals(got) == per_key_totals(read_sink(clean))
    assert os.listdir(os.path.join(out, "_pending")) == []


def test_a_stream_out_of_restarts_fails_and_resumes_when_started_again(spark, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", max_restarts=0,
               **QUERY)
    wait_for_checkpoints(h, 1)
    os.kill(h.task_pids()[0], signal.SIGKILL)
    with pytest.raises(TaskFailed, match="max_restarts=0"):
        h.wait(120)
    h2 = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **QUERY)
    m = h2.wait(120)
    assert m["resumed_from"] is not None and m["recoveries"] == []
    assert sink_windows(read_sink(out)) == duckdb_windows(h.base_ms)
    with pytest.raises(InvalidState, match="ran to its end"):  # a stream that ended is not run again
        stream(spark, SRC, sink=out, checkpoint=ck, **QUERY)


#: SRC until stopped: a stop always falls inside it, whatever the machine's speed
ENDLESS = RateSource(rate=SRC.rate, keys=SRC.keys, batch=SRC.batch, seed=SRC.seed)


def _before(windows, w):
    return {k: v for k, v in windows.items() if k[0] < w}


def _wait_published_past(out, w, h, timeout=300):
    """Waits until the sink holds a window starting at ``w`` or later: every
    window starting before ``w - 1000`` is then closed and published."""
    deadline = time.monotonic() + timeout
    while True:
        t = read_sink(out)
        if t is not None and max(t.column("window_start").to_pylist()) >= w:
            return
        assert time.monotonic() < deadline and h.running, f"no window from {w} in the sink"
        time.sleep(0.05)


@pytest.mark.parametrize("window,slides", [("tumbling:500ms", (0,)), ("sliding:1s/500ms", (0, 500))])
def test_stopped_stream_started_again_continues_without_duplicates(spark, tmp_path, window, slides):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    q = dict(QUERY, window=window)
    h = stream(spark, ENDLESS, sink=out, checkpoint=ck, checkpoint_every="2 batches", **q)
    deadline = time.monotonic() + 300
    while read_sink(out) is None:  # stop once some windows are published
        assert time.monotonic() < deadline and h.running
        time.sleep(0.05)
    first = h.stop()
    last = first["checkpoints"][-1]["id"]
    assert h.running is False and first["resumed_from"] is None
    before = read_sink(out)
    # the answer is checked on the windows starting before w, all closed once one from w + 1000
    w = max(before.column("window_start").to_pylist()) + 1000
    h2 = stream(spark, ENDLESS, sink=out, checkpoint=ck, checkpoint_every="2 batches", **q)
    _wait_published_past(out, w + 1000, h2)
    m = h2.stop()
    assert m["resumed_from"] == last and m["recoveries"] == []
    got = read_sink(out)
    # the records up to w + 1000 (a sliding window's end), and more
    src = RateSource(rate=SRC.rate, records=(w + 2000 - h.base_ms) * SRC.rate // 1000,
                     keys=SRC.keys, batch=SRC.batch, seed=SRC.seed)
    assert _before(sink_windows(got), w) == _before(duckdb_windows(h.base_ms, src, slides), w)
    assert h2.base_ms == h.base_ms
    # what the first run published stays, unchanged; the rest came after
    assert set(sink_windows(before).items()) < set(sink_windows(got).items())


def test_callable_sink_gets_only_committed_windows_labelled_with_their_checkpoint(spark, tmp_path):
    got = []
    committed = []
    handle = []

    def sink(t):
        while not handle:  # the sink may run before stream() returned
            time.sleep(0.01)
        label = t.schema.metadata[b"slash.checkpoint_id"].decode()
        committed.append((label, [c["id"] for c in handle[0].metrics["checkpoints"]]))
        got.append(t)

    h = stream(spark, SRC, sink=sink, checkpoint=str(tmp_path / "ck"), checkpoint_every="3 batches",
               **QUERY)
    handle.append(h)
    h.wait(120)
    for label, ids in committed:  # delivered after its checkpoint committed
        assert label == "final" or int(label) in ids
    labels = [int(x) for x, _ in committed if x != "final"]
    assert labels == sorted(labels) and labels, "windows before the end come with their checkpoint"
    assert sink_windows(pa.concat_tables(got)) == duckdb_windows(h.base_ms)


def test_corrupt_checkpoint_is_refused_naming_the_file(spark, tmp_path):
    ck = str(tmp_path / "ck")
    h = stream(spark, RateSource(rate=50_000, keys=20, batch=2_000, seed=3), sink=str(tmp_path / "o"),
               checkpoint=ck, checkpoint_every="2 batches", **QUERY)
    wait_for_checkpoints(h, 2)
    m = h.stop()
    # partition 0 in rank 0's image (one file per image: slash.run.recovery.checkpointed.part_name)
    chk = os.path.join(ck, f"chk-{m['checkpoints'][-1]['id']:012d}", "part-0.r0.bin")
    with open(chk, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xfe")
    with pytest.raises(CheckpointCorrupt, match=r"part-0\.r0\.bin"):
        stream(spark, RateSource(rate=50_000, keys=20, batch=2_000, seed=3), sink=str(tmp_path / "o"),
               checkpoint=ck, **QUERY)


def _write_file(directory, name, table):
    """Writes elsewhere, renames in (as a DirectorySource expects); 3 row groups."""
    tmp = os.path.join(directory, "_" + name)
    pq.write_table(table, tmp, row_group_size=max(1, table.num_rows // 3))
    os.replace(tmp, os.path.join(directory, name))


def test_directory_source_resumes_after_its_files_when_a_worker_is_killed(spark, tmp_path):
    src_dir, out, ck = tmp_path / "in", str(tmp_path / "out"), str(tmp_path / "ck")
    src_dir.mkdir()
    rng = np.random.default_rng(4)
    parts = []
    for i in range(6):  # each file 2 s of event time after the previous
        t = np.sort(rng.integers(i * 2000, (i + 1) * 2000, 3000))
        parts.append(pa.table({"event_time": t, "key": rng.integers(0, 7, 3000)}))
    for i in (0, 1):
        _write_file(str(src_dir), f"f{i}.parquet", parts[i])
    h = stream(spark, DirectorySource(str(src_dir)), time="event_time", window="tumbling:1s",
               key="key", aggs=["count"], sink=out, executors=2, checkpoint=ck,
               checkpoint_every="200ms")
    wait_for_checkpoints(h, 1)
    os.kill(h.task_pids()[1], signal.SIGKILL)
    for i in range(2, 6):
        _write_file(str(src_dir), f"f{i}.parquet", parts[i])
    allrec = pa.concat_tables(parts)
    hi = int(allrec.column("event_time").to_numpy().max())  # the last file's end: the watermark
    con = duckdb.connect()
    con.register("r", allrec)
    want = {(ws, k): c for ws, k, c in con.execute(
        f"SELECT event_time - event_time % 1000 AS ws, key, count(*) FROM r GROUP BY ALL "
        f"HAVING ws + 1000 <= {hi}").fetchall()}
    deadline = time.monotonic() + 60
    while True:  # every window the files close is published once
        t = read_sink(out)
        got = {} if t is None else {(ws, k): c for ws, k, c in zip(
            t.column("window_start").to_pylist(), t.column("key").to_pylist(),
            t.column("count").to_pylist())}
        if len(got) >= len(want) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    m = h.stop(60)
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["rank"] == 1
    t = read_sink(out)
    keys = list(zip(t.column("window_start").to_pylist(), t.column("key").to_pylist()))
    assert len(keys) == len(set(keys)), "a window is in the sink twice"
    assert dict(zip(keys, t.column("count").to_pylist())) == want


def test_a_restarted_driver_rolls_the_newest_commit_forward_and_drops_uncommitted_parts(tmp_path):
    """The driver died after committing checkpoint 2's manifest, before renaming
    its pending parts; checkpoint 3 was never committed. The next start
    publishes 2's parts (once) and deletes 3's."""
    from slash.run.recovery.checkpointed import CheckpointEvery
    from slash.spark._stream_ckpt import PENDING, CheckpointPlan, DriverCheckpoints

    sink = tmp_path / "out"
    (sink / PENDING).mkdir(parents=True)
    plan = CheckpointPlan(str(tmp_path / "ck"), "q", 2, 4, 2, CheckpointEvery.parse("1s"))
    store = plan.store()
    table = pa.table({"window_start": [0], "window_end": [1000], "key": [1], "count": [5]})
    renames = {}
    for r in (0, 1):
        pq.write_table(table, str(sink / PENDING / f"g7-part-r{r:04d}-c000000000002.parquet"))
        renames[f"{PENDING}/g7-part-r{r:04d}-c000000000002.parquet"] = \
            f"part-r{r:04d}-c000000000002.parquet"
    pq.write_table(table, str(sink / PENDING / "g7-part-r0000-c000000000003.parquet"))
    store.commit(2, {"rank-0.json": store.write(2, "rank-0.json", b'{"pushes": 4}')}, {},
                 {"base_ms": 123, "sink": renames})
    store.write(3, "rank-0.json", b'{"pushes": 6}')  # no manifest: never committed
    sent = []
    d = DriverCheckpoints(plan, str(sink), lambda r, m: sent.append((r, m)), lambda m: None,
                          lambda t, label: None, lambda w, now: None)
    d.check_start()
    reports = Dispatch()
    d.register(reports, lambda: 2)
    reports.handle(ResumeAsk(0, ("h", 1), 99))
    assert sent == [(0, Resume(2, 123, 3, []))]
    assert sorted(os.listdir(sink)) == [PENDING, "part-r0000-c000000000002.parquet",
                                        "part-r0001-c000000000002.parquet"]
    assert os.listdir(sink / PENDING) == []
    assert not os.path.exists(os.path.join(store.dir, "chk-000000000003"))


def test_a_tasks_usage_error_ends_the_stream_with_that_error_without_a_restart(spark, tmp_path):
    """A file that appears before one a rank already read (name order) is an
    error of the input, which a restart would not cure: the tasks report it
    as the run layer's Error record, and the stream ends with that error (its
    type, naming the file and the rank), as a local run would, after no
    restart although it may restart three times."""
    src_dir, out, ck = tmp_path / "in", str(tmp_path / "out"), str(tmp_path / "ck")
    src_dir.mkdir()
    rng = np.random.default_rng(5)
    part = pa.table({"event_time": np.sort(rng.integers(0, 2000, 3000)),
                     "key": rng.integers(0, 7, 3000)})
    _write_file(str(src_dir), "f5.parquet", part)
    h = stream(spark, DirectorySource(str(src_dir)), time="event_time", window="tumbling:1s",
               key="key", aggs=["count"], sink=out, executors=2, checkpoint=ck,
               checkpoint_every="200ms", max_restarts=3)
    wait_for_checkpoints(h, 1)
    _write_file(str(src_dir), "f1.parquet", part)  # before f5 in name order: taken too late
    with pytest.raises(InvalidState, match=r"executor rank \d: .*'f1\.parquet' appeared after "
                                           r"'f5\.parquet'"):
        h.wait(120)
    assert h.metrics["recoveries"] == []
