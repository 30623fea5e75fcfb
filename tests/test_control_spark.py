"""StreamHandle.update of a running slash.spark.stream: every task switches
its filter at the T the driver agreed, checked against DuckDB over the same
(regenerated) events split at T; StreamHandle.rebalance: live partition
moves in the running barrier group (explicit, automatic, kept by a
checkpoint), checked against DuckDB over the regenerated events."""
import glob
import os
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

from slash.errors import InvalidArgument, InvalidState, NotSupported, SchemaError  # noqa: E402
from slash.spark import RateSource, stream  # noqa: E402
from slash.workloads import ysb_batches  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_stream_update_switches_every_task_to_the_new_filter_at_T(spark):
    got = []
    src = RateSource(rate=20_000, keys=20, batch=1_000, seed=9)  # until stopped: T falls inside
    h = stream(spark, src, time="event_time", window="tumbling:500ms", key="key", aggs=["count"],
               filter="event_type == 'view'", sink=got.append, executors=2)
    deadline = time.monotonic() + 300
    while not got and time.monotonic() < deadline:  # a first window has fired
        time.sleep(0.05)
    assert got, "no window within 300 s"
    with pytest.raises(SchemaError, match="'colour'"):
        h.update(filter="colour == 'red'")
    with pytest.raises(NotSupported, match="aggregate"):
        h.update(aggregate="count:key")
    upd = h.update(filter="key < 10")
    T = upd["effective_from_ms"]
    assert upd["version"] == 1 and T % 500 == 0 and T > upd["max_event_time_seen_ms"]
    w = T + 1000  # the answer is checked on the windows before w: two after the change
    while max(t.column("window_start")[-1].as_py() for t in got) < w + 500:  # all before w fired
        assert time.monotonic() < deadline + 300 and h.running, "no window past the change"
        time.sleep(0.05)
    h.stop(120)
    records = pa.Table.from_batches(list(ysb_batches((w + 1000 - h.base_ms) * 20, keys=20, seed=9,
                                                     rate=20_000, base_ms=h.base_ms,
                                                     columns=["key", "event_time", "event_type"])))
    con = duckdb.connect()
    con.register("r", records.set_column(2, "event_type",
                                         records.column("event_type").cast(pa.string())))
    want = con.execute(f"""select event_time // 500 * 500 ws, key, count(*) from r
                           where event_type = 'view' and (event_time < {T} or key < 10)
                           and event_time < {w} group by all order by ws, key""").fetchall()
    allrows = pa.concat_tables(got).sort_by([("window_start", "ascending"), ("key", "ascending")])
    assert [(r["window_start"], r["key"], r["count"]) for r in allrows.to_pylist()
            if r["window_start"] < w] == [tuple(x) for x in want]


# ---- StreamHandle.rebalance: live partition moves in the running barrier group --------------------
def _first_window(got, timeout=120):
    deadline = time.monotonic() + timeout
    while not got() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got(), f"no window within {timeout} s"


def _duck_counts(records, size_ms):
    con = duckdb.connect()
    con.register("r", records.select(["key", "event_time"]))
    return [tuple(x) for x in con.execute(
        f"select event_time // {size_ms} * {size_ms} ws, key, count(*) from r "
        "group by all order by ws, key").fetchall()]


def _events(h, records, seed):
    return pa.Table.from_batches(list(ysb_batches(records, keys=20, seed=seed, rate=20_000,
                                                  base_ms=h.base_ms,
                                                  columns=["key", "event_time", "event_type"])))


def _led(h):
    return {int(r): c for r, c in h.status()["led_partitions"].items()}


def test_a_stream_rebalanced_live_gives_the_windows_of_the_static_run(spark):
    got = []
    src = RateSource(rate=20_000, records=120_000, keys=20, batch=1_000, seed=4)
    h = stream(spark, src, time="event_time", window="tumbling:500ms", key="key", aggs=["count"],
               sink=got.append, executors=2)
    _first_window(lambda: got and len(_led(h)) == 2)  # a window, and both ranks reported
    assert _led(h) == {0: 128, 1: 128}  # 256 partitions, p mod 2
    explicit = h.rebalance({0: 1, 2: 1, 4: 1})
    assert explicit == {"moves": {"0": 1, "2": 1, "4": 1}, "map_version": 1}
    assert _led(h) == {0: 125, 1: 131} and h.status()["leader_map_version"] == 1
    auto = h.rebalance()  # half of the busiest leader's partitions to the other rank
    assert auto["map_version"] == 2
    to = set(auto["moves"].values())
    assert len(to) == 1
    t = to.pop()
    before = {0: 125, 1: 131}
    assert len(auto["moves"]) == (before[1 - t] + 1) // 2
    assert _led(h) == {t: before[t] + len(auto["moves"]), 1 - t: before[1 - t] - len(auto["moves"])}
    assert h.running, "both moves should fall inside the stream"
    h.wait(120)
    windows = h.emitted_windows
    assert len(windows) == len(set(windows)), "a window was handed to the sink twice"
    allrows = pa.concat_tables(got).sort_by([("window_start", "ascending"), ("key", "ascending")])
    assert [(r["window_start"], r["key"], r["count"]) for r in allrows.to_pylist()] == \
        _duck_counts(_events(h, 120_000, 4), 500)


def test_a_stream_rebalance_refuses_bad_moves_naming_them_and_a_stream_not_running(spark):
    got = []
    src = RateSource(rate=20_000, records=20_000, keys=20, batch=1_000, seed=5)
    h = stream(spark, src, time="event_time", window="tumbling:500ms", key="key", aggs=["count"],
               sink=got.append, executors=2)
    with pytest.raises(InvalidArgument, match="partition 256 is not in 0..255"):
        h.rebalance({256: 0})
    with pytest.raises(InvalidArgument, match="rank 2 is not in 0..1"):
        h.rebalance("3:2")
    with pytest.raises(InvalidArgument, match="'3-1'"):
        h.rebalance("3-1")
    with pytest.raises(InvalidArgument, match="from_rank and to_rank are both 1"):
        h.rebalance(from_rank=1, to_rank=1)
    h.wait(120)
    with pytest.raises(InvalidState, match="not running"):
        h.rebalance({0: 1})



def _assert_sink_once(out, events):
    """The directory sink holds each (window, key) once, with DuckDB's counts
    of ``events`` in 500 ms windows."""
    table = pq.read_table(sorted(glob.glob(os.path.join(out, "part-*.parquet"))))
    pairs = list(zip(table.column("window_start").to_pylist(), table.column("key").to_pylist()))
    assert len(pairs) == len(set(pairs)), "a window's row was published twice"
    table = table.sort_by([("window_start", "ascending"), ("key", "ascending")])
    assert [(r["window_start"], r["key"], r["count"]) for r in table.to_pylist()] == \
        _duck_counts(events, 500)

def test_a_checkpointed_stream_keeps_its_moved_map_across_a_stop_and_resume(spark, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    # 30 s of input: the stop below must reach the stream before its source ends, also on a
    # busy machine (100,000 records, 5 s, ran out at load 25 while it waited for checkpoints)
    src = RateSource(rate=20_000, records=600_000, keys=20, batch=1_000, seed=6)
    kw = dict(time="event_time", window="tumbling:500ms", key="key", aggs=["count"], sink=out,
              executors=2, checkpoint=ck, checkpoint_every="300ms")
    h = stream(spark, src, **kw)
    _first_window(lambda: glob.glob(os.path.join(out, "part-*.parquet")))
    moved = h.rebalance({1: 0, 3: 0, 5: 0, 7: 0})
    assert moved["map_version"] == 1 and _led(h) == {0: 132, 1: 124}
    n_ck = len(h.metrics["checkpoints"])
    deadline = time.monotonic() + 20  # a checkpoint cut after every executor switched
    while len(h.metrics["checkpoints"]) < n_ck + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(h.metrics["checkpoints"]) >= n_ck + 2, "no two checkpoints within 20 s of the move"
    h.stop(120)
    base = h.base_ms
    h2 = stream(spark, src, **kw)
    assert h2.metrics["resumed_from"] is not None
    h2.wait(120)
    # the resumed group led by the checkpoint's map, not p mod 2 (its executors' last reports)
    assert _led(h2) == {0: 132, 1: 124}
    assert h2.base_ms == base
    _assert_sink_once(out, _events(h2, 600_000, 6))


def test_a_rebalanced_checkpointed_stream_rescaled_to_one_executor_keeps_each_window_once(
        spark, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(spark, RateSource(rate=20_000, records=100_000, keys=20, batch=1_000, seed=7),
               time="event_time", window="tumbling:500ms", key="key", aggs=["count"], sink=out,
               executors=2, checkpoint=ck, checkpoint_every="300ms")
    _first_window(lambda: glob.glob(os.path.join(out, "part-*.parquet")))
    h.rebalance(from_rank=0, to_rank=1)  # 64 of rank 0's partitions to rank 1
    assert _led(h) == {0: 64, 1: 192}
    h.rescale(1)  # a checkpoint of the moved map, restored by one executor leading all 256
    with pytest.raises(InvalidArgument, match="rank 1 is not in 0..0"):
        h.rebalance({0: 1})
    h.wait(120)
    assert _led(h) == {0: 256}
    _assert_sink_once(out, _events(h, 100_000, 7))
