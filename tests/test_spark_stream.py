"""slash.spark.stream: windows reach the sink as they fire, in event-time
order, each once, and together equal the batch answer on the same records;
stopping ends the stage cleanly."""
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

from slash.spark import DirectorySource, RateSource, stream  # noqa: E402
from slash.workloads import ysb_batches  # noqa: E402

pytestmark = pytest.mark.slow


def expected_counts(table, size_ms, time_col="event_time", views_only=True):
    """{(window_start, key): count} computed with pyarrow alone."""
    if views_only:
        table = table.filter(pc.equal(table.column("event_type").cast(pa.string()), "view"))
    t = table.column(time_col).to_numpy()
    ws = t - t % size_ms
    g = pa.table({"ws": ws, "key": table.column("key")}).group_by(["ws", "key"]).aggregate([("key", "count")])
    return dict(zip(zip(g.column("ws").to_pylist(), g.column("key").to_pylist()),
                    g.column("key_count").to_pylist()))


def as_counts(table):
    return dict(zip(zip(table.column("window_start").to_pylist(), table.column("key").to_pylist()),
                    table.column("count").to_pylist()))


def check_order_once(handle, got):
    wins = handle.emitted_windows
    assert wins == sorted(wins, key=lambda w: (w[1], w[0])), "windows out of event-time order"
    assert len(set(wins)) == len(wins), "a window was emitted twice"
    for t in got:  # one callback call = one whole window
        assert len(set(zip(t.column("window_start").to_pylist(), t.column("window_end").to_pylist()))) == 1


def test_rate_source_to_callback_equals_batch(spark):
    got = []
    src = RateSource(rate=40_000, records=80_000, keys=20, batch=2_000, seed=5)
    h = stream(spark, src, time="event_time", window="tumbling:500ms", key="key", aggs=["count"],
               filter="event_type == 'view'", sink=got.append, executors=2)
    m = h.wait(120)
    check_order_once(h, got)
    assert len(got) >= 4  # 2 s of event time in 500 ms windows
    allrows = pa.concat_tables(got)
    records = pa.Table.from_batches(list(ysb_batches(80_000, keys=20, seed=5, rate=40_000,
                                                     base_ms=h.base_ms,
                                                     columns=["key", "event_time", "event_type"])))
    assert as_counts(allrows) == expected_counts(records, 500)
    assert m["records_in"] == sum(allrows.column("count").to_pylist())
    assert m["windows"] == len(got) and m["latency_ms"]["max"] >= m["latency_ms"]["p50"]
    # windows are handed over one by one as they fire, oldest first (how soon
    # after their end depends on the machine's load, so no wall-clock bound)
    emitted = [e + lat for _, e, lat, _ in m["window_latencies"]]
    assert emitted == sorted(emitted)


def test_unbounded_rate_source_stops_cleanly(spark):
    got = []
    h = stream(spark, RateSource(rate=20_000, keys=10, batch=1_000), time="event_time",
               window="tumbling:250ms", key="key", aggs=["count"], sink=got.append, executors=2)
    deadline = time.monotonic() + 120  # a bound for a broken build, not a timing
    while len(got) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert h.running and len(got) >= 4
    m = h.stop(60)
    assert not h.running
    check_order_once(h, got)
    assert m["windows"] >= 4
    assert m["records_in"] == sum(pa.concat_tables(got).column("count").to_pylist()) > 0


def _write_file(d, name, table):
    tmp = os.path.join(d, "_" + name)
    pq.write_table(table, tmp, row_group_size=500)
    os.replace(tmp, os.path.join(d, name))


def test_directory_source_to_parquet_sink(spark, tmp_path):
    src_dir, out_dir = tmp_path / "in", tmp_path / "out"
    src_dir.mkdir()
    rng = np.random.default_rng(2)
    n = 3_000
    parts = []
    for i in range(3):  # three files, each 3 s of event time after the previous
        t = np.sort(rng.integers(i * 3000, (i + 1) * 3000, n))
        parts.append(pa.table({"event_time": t, "key": rng.integers(0, 7, n), "v": rng.random(n)}))
    _write_file(str(src_dir), "f0.parquet", parts[0])
    h = stream(spark, DirectorySource(str(src_dir)), time="event_time", window="tumbling:1s",
               key="key", aggs=["count"], sink=str(out_dir), executors=2)
    for i in (1, 2):
        time.sleep(1.0)
        _write_file(str(src_dir), f"f{i}.parquet", parts[i])
    deadline = time.monotonic() + 60
    # windows of the first two files fire before stop (the third file's end moves the watermark)
    while time.monotonic() < deadline:
        files = list(out_dir.glob("*.parquet"))
        if files and pq.read_table(out_dir).column("window_end").to_numpy().max() >= 8000:
            break
        time.sleep(0.2)
    m = h.stop(60)
    out = pq.read_table(out_dir)
    keys = list(zip(out.column("window_start").to_pylist(), out.column("key").to_pylist()))
    assert len(keys) == len(set(keys)), "a (window, key) was written twice"
    assert as_counts(out) == expected_counts(pa.concat_tables(parts), 1000, views_only=False)
    assert m["records_in"] == 3 * n and m["windows"] == 9


# ---- late records ---------------------------------------------------------------
@pytest.mark.parametrize("window", ["tumbling:1s", "sliding:1s/300ms", "sliding:1s/400ms", "session:250ms"])
def test_late_windows_are_the_windows_each_late_record_would_fall_in(window):
    from slash.spark.stream import late_windows
    from slash.window import Session, parse_window

    w = parse_window(window)
    times = np.random.default_rng(7).integers(-5_000, 5_000, 500)
    want = {}
    for t in times.tolist():  # every aligned window holding t, one by one
        if isinstance(w, Session):
            spans = [(t, t + w.gap_ms)]
        else:
            size = w.size_ms
            slide = getattr(w, "slide_ms", size)
            spans = [(s, s + size) for s in range((t - size) // slide * slide, t + 1, slide) if s <= t < s + size]
        for span in spans:
            want[span] = want.get(span, 0) + 1
    assert {(s, e): c for s, e, c in late_windows(times, w)} == want


# an int key takes the filter as a selection (rows stay in place); a string key
# has the executor take the rows the filter keeps: both must write the source's rows
@pytest.mark.parametrize("key_type", [pa.int64(), pa.string()])
def test_late_records_are_warned_counted_by_window_and_written_to_late_output(spark, tmp_path, caplog, key_type):
    import logging
    import re
    import threading

    src_dir, late_dir = tmp_path / "in", tmp_path / "late"
    src_dir.mkdir()
    rng = np.random.default_rng(3)

    def rows(t):
        return pa.table({"event_time": t, "key": pa.array(rng.integers(0, 7, len(t))).cast(key_type),
                         "v": rng.random(len(t))})
    f0 = rows(np.r_[np.sort(rng.integers(0, 2999, 2999)), 2999])
    # the second file starts 800 records before the first one's end: late, as lateness is 0
    f1 = rows(np.r_[np.sort(rng.integers(1000, 2999, 800)), np.sort(rng.integers(3000, 6000, 2200))])
    f2 = rows(np.array([9000]))  # moves every rank's watermark past 6000 (if filtered out too)
    for i, t in enumerate((f0, f1, f2)):
        _write_file(str(src_dir), f"f{i}.parquet", t)
    wm = pc.max(f0.column("event_time"))
    kept = [t.filter(pc.less(t.column("v"), 0.8)) for t in (f0, f1, f2)]  # filter="v < 0.8"
    late = kept[1].filter(pc.less(kept[1].column("event_time"), wm))
    on_time = pa.concat_tables([kept[0], kept[1].filter(pc.greater_equal(kept[1].column("event_time"), wm)),
                                kept[2]])
    assert 500 < late.num_rows < 800

    got, last_window_of_f1 = [], threading.Event()

    def sink(t):
        got.append(t)
        if t.column("window_end")[0].as_py() == 6000:
            last_window_of_f1.set()
    caplog.set_level(logging.WARNING, logger="slash.spark.stream")
    h = stream(spark, DirectorySource(str(src_dir)), time="event_time", window="tumbling:1s", key="key",
               aggs=["count"], filter="v < 0.8", sink=sink, late_output=str(late_dir), executors=2)
    assert last_window_of_f1.wait(120), "the windows of the second file never fired"
    m = h.stop(120)

    assert as_counts(pa.concat_tables(got)) == expected_counts(on_time, 1000, views_only=False)
    assert m["records_in"] == on_time.num_rows and m["late_records"] == late.num_rows
    lt = late.column("event_time").to_numpy()
    ws, n = np.unique(lt - lt % 1000, return_counts=True)
    assert m["late_records_by_window"] == {(int(s), int(s) + 1000): int(c) for s, c in zip(ws, n)}
    names = sorted(os.listdir(late_dir))
    assert names and all(re.fullmatch(r"late-rank[01]-\d{8}\.parquet", f) for f in names), names
    written = pa.concat_tables([pq.read_table(late_dir / f) for f in names])
    order = [("event_time", "ascending"), ("key", "ascending"), ("v", "ascending")]
    assert written.schema == late.schema
    assert written.sort_by(order).equals(late.sort_by(order))
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "slash.spark.stream" and r.levelno == logging.WARNING]
    assert any(f"{late.num_rows} late record(s) not applied" in w and "lateness=0 ms" in w
               for w in warnings), warnings


# ---- callable sinks ----------------------------------------------------------------
def test_a_sink_may_read_the_handles_metrics(spark):
    import threading

    handle, started, seen = [], threading.Event(), []

    def sink(t):
        assert started.wait(60)
        seen.append(handle[0].metrics["windows"])  # deadlocked while the sink ran under the lock
    h = stream(spark, RateSource(rate=40_000, records=20_000, keys=5, batch=2_000), time="event_time",
               window="tumbling:100ms", key="key", aggs=["count"], sink=sink, executors=2)
    handle.append(h)
    started.set()
    m = h.wait(120)
    assert m["windows"] >= 4, m
    assert seen == list(range(m["windows"])), (seen, h.emitted_windows)


def test_a_sink_that_raises_stops_the_stream_and_keeps_the_windows_it_did_not_take(spark):
    import threading

    from slash.errors import SinkFailed

    got, failed = [], threading.Event()

    def sink(t):
        if len(got) == 2:
            failed.set()
            raise ValueError("sink is full")
        got.append(t)
    h = stream(spark, RateSource(rate=40_000, records=80_000, keys=20, batch=2_000, seed=5),
               time="event_time", window="tumbling:250ms", key="key", aggs=["count"], sink=sink, executors=2)
    assert failed.wait(120)
    with pytest.raises(SinkFailed, match="sink is full") as ei:
        h.stop(120)
    assert isinstance(ei.value.__cause__, ValueError) and not h.running
    first_two = [(t.column("window_start")[0].as_py(), t.column("window_end")[0].as_py()) for t in got]
    assert h.emitted_windows == first_two and len(first_two) == 2
    rest = h.undelivered()
    rest_windows = [(t.column("window_start")[0].as_py(), t.column("window_end")[0].as_py()) for t in rest]
    assert rest and rest_windows[0] == ei.value.window
    every = first_two + rest_windows
    assert every == sorted(every, key=lambda w: (w[1], w[0])) and len(set(every)) == len(every)
    for t in rest:  # one table = one whole window
        assert len(set(t.column("window_start").to_pylist())) == 1
    m = h.metrics
    assert m["undelivered_windows"] == len(rest)
    assert sum(pc.sum(t.column("count")).as_py() for t in got + rest) == m["records_in"] > 0
