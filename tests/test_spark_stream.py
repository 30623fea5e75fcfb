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

from slash.spark import DirectorySource, RateSource, session, stream  # noqa: E402
from slash.workloads import ysb_batches  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    s = session("local[2]", "slash-test-stream")
    yield s
    s.stop()


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
    # early windows fired while the source still ran: well before the last event
    first_lat = m["window_latencies"][0][2]
    assert first_lat < 1500, f"first window took {first_lat} ms after its end"


def test_unbounded_rate_source_stops_cleanly(spark):
    got = []
    h = stream(spark, RateSource(rate=20_000, keys=10, batch=1_000), time="event_time",
               window="tumbling:250ms", key="key", aggs=["count"], sink=got.append, executors=2)
    time.sleep(3)
    assert h.running
    t0 = time.monotonic()
    m = h.stop(60)
    assert time.monotonic() - t0 < 30 and not h.running
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
