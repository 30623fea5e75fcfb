"""slash.spark.stream over a DirectorySource rescaled by checkpoint: the
row groups each rank had not read and the files still to come are dealt to
the new executor count (positions in global terms), so with files arriving
all along, a stream scaled out 2 -> 3 and in 3 -> 2, or cut with 2 and
restored with 3, publishes every window the files close exactly once,
equal to DuckDB over all the files."""
import os
import time

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")

from slash.spark import DirectorySource, stream  # noqa: E402
from _spark import own_session  # noqa: E402

from test_spark_recovery import _write_file, read_sink, wait_for_checkpoints  # noqa: E402

pytestmark = pytest.mark.slow

FILES = 8
QUERY = dict(time="event_time", window="tumbling:1s", key="key", aggs=["count", "max:event_time"])


@pytest.fixture(scope="module")
def spark():
    """A local[3] session of the module's own: barrier stages of 3 executors."""
    s = own_session("local[3]", "slash-test-spark-stream-directory-rescale")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def parts():
    """Each file 2 s of event time after the previous (sorted within), 7 keys."""
    rng = np.random.default_rng(11)
    out = []
    for i in range(FILES):
        t = np.sort(rng.integers(i * 2000, (i + 1) * 2000, 3000))
        out.append(pa.table({"event_time": t, "key": rng.integers(0, 7, 3000)}))
    return out


def duckdb_closed_windows(parts):
    """{(window_start, key): (count, max event_time)} of every window the
    last file's watermark (its latest event time) closes, by DuckDB."""
    allrec = pa.concat_tables(parts)
    hi = int(allrec.column("event_time").to_numpy().max())
    con = duckdb.connect()
    con.register("r", allrec)
    return {(ws, k): (c, mx) for ws, k, c, mx in con.execute(
        f"SELECT event_time - event_time % 1000 AS ws, key, count(*), max(event_time) FROM r "
        f"GROUP BY ALL HAVING ws + 1000 <= {hi}").fetchall()}


def sink_windows(t):
    """{(window_start, key): (count, max)}; fails on a (window, key) seen twice."""
    if t is None:
        return {}
    keys = list(zip(t.column("window_start").to_pylist(), t.column("key").to_pylist()))
    assert len(keys) == len(set(keys)), "a window is in the sink twice"
    return dict(zip(keys, zip(t.column("count").to_pylist(),
                              t.column("max_event_time").to_pylist())))


def wait_for_windows(out, want, h, timeout=90):
    deadline = time.monotonic() + timeout
    while len(sink_windows(read_sink(out))) < len(want):
        assert h.running, "the stream ended"
        assert time.monotonic() < deadline, "the sink did not get every closed window"
        time.sleep(0.1)


def test_a_directory_stream_scaled_out_then_in_while_files_arrive_publishes_each_window_once(
        spark, tmp_path, parts):
    src, out, ck = tmp_path / "in", str(tmp_path / "out"), str(tmp_path / "ck")
    src.mkdir()
    for i in (0, 1):
        _write_file(str(src), f"f{i}.parquet", parts[i])
    h = stream(spark, DirectorySource(str(src)), sink=out, executors=2, checkpoint=ck,
               checkpoint_every="200ms", **QUERY)
    try:
        wait_for_checkpoints(h, 1)
        for i in (2, 3):
            _write_file(str(src), f"f{i}.parquet", parts[i])
        up = h.scale_out(1)
        assert (up["from"], up["to"]) == (2, 3) and h.executors == 3
        for i in (4, 5):
            _write_file(str(src), f"f{i}.parquet", parts[i])
        wait_for_checkpoints(h, len(h.metrics["checkpoints"]) + 1)
        down = h.scale_in(1)
        assert (down["from"], down["to"]) == (3, 2) and h.executors == 2
        for i in range(6, FILES):
            _write_file(str(src), f"f{i}.parquet", parts[i])
        want = duckdb_closed_windows(parts)
        wait_for_windows(out, want, h)
    finally:
        m = h.stop(120)
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 3), (3, 2)]
    assert m["recoveries"] == [] and m["late_records"] == 0
    assert sink_windows(read_sink(out)) == want


def test_a_directory_stream_cut_with_two_executors_resumes_with_three(spark, tmp_path, parts):
    src, out, ck = tmp_path / "in", str(tmp_path / "out"), str(tmp_path / "ck")
    src.mkdir()
    for i in range(3):
        _write_file(str(src), f"f{i}.parquet", parts[i])
    h = stream(spark, DirectorySource(str(src)), sink=out, executors=2, checkpoint=ck,
               checkpoint_every="200ms", **QUERY)
    try:
        wait_for_windows(out, duckdb_closed_windows(parts[:3]), h)
    finally:
        h.stop(120)
    for i in range(3, FILES):
        _write_file(str(src), f"f{i}.parquet", parts[i])
    h2 = stream(spark, DirectorySource(str(src)), sink=out, executors=3, checkpoint=ck,
                checkpoint_every="200ms", **QUERY)
    want = duckdb_closed_windows(parts)
    try:
        wait_for_windows(out, want, h2)
    finally:
        m = h2.stop(120)
    assert m["resumed_from"] is not None and m["executors"] == 3 and m["late_records"] == 0
    assert sink_windows(read_sink(out)) == want
