"""Slash on data laid out as users have it, against DuckDB and Spark.

One seeded dataset (see :mod:`layouts`) written as one time-ordered file, part
files that each span the whole time range, rows shuffled within files, Hive
``day=`` directories, files written by Spark (micros and INT96), by pandas (ns
timestamps), and very unequal files beside an empty file and ``_SUCCESS``.
For every layout and 1, 2 or 3 executors, ``slash.runner.run`` must give the
answer DuckDB gives over the same rows, row for row, nulls included, with no
lateness configured (P3: a bounded input never loses a record). Then window
kinds, key and value types, time column types, day-long windows over weeks,
Spark's duration spellings, the CLI, ``slash.spark.window_aggregate`` against
Spark's own ``groupBy(window)``, and the real Google cluster-trace sample.

The first tests check the generator and the two references on their own
(DuckDB and Spark agree on every layout), so a failure further down is the
system's, not the harness's.
"""
from __future__ import annotations

import datetime as dt
import decimal
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import layouts as L
import slash
from slash.query import Query
from slash.runner import run

pytestmark = pytest.mark.slow

AGGS = ["count", "count:v", "sum:v", "min:v", "max:x", "avg:x"]
TUMBLING = "tumbling:10s"
ROWS = 3000
LAYOUTS = ["one_file", "spanning", "shuffled", "hive", "spark_micros", "spark_int96", "pandas",
           "unequal"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "..", "shared", "data", "google-cluster-task-events-sample.txt")


def _have_spark() -> bool:
    try:
        import pyspark  # noqa: F401
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


needs_spark = pytest.mark.skipif(not _have_spark(), reason="pyspark and pandas are needed")


# -- fixtures: one SparkSession, the layouts written once per module ------------------------------
@pytest.fixture(scope="module")
def spark(spark):
    """The shared session (conftest.py) in UTC, as the layouts' references are."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    return spark


@pytest.fixture(scope="module")
def events() -> pa.Table:
    """3,000 events over 10 minutes of 2023, 12 skewed int keys, 3 % nulls in
    keys, values and times (int64 epoch ms)."""
    return L.make_events(ROWS, keys=12, span_ms=600_000, null_fraction=0.03, seed=5)


def _as_timestamps(table: pa.Table) -> pa.Table:
    """The same events with ``ts`` as timestamp[us, UTC] (what Spark and
    pandas users hold)."""
    ts = table.column("ts").cast(pa.int64())
    us = pc.multiply(ts, 1000).cast(pa.timestamp("us", "UTC"))
    return table.set_column(0, "ts", us)


class Layouts(dict):
    """name -> Layout; a layout written by Spark or pandas is missing where
    they are not installed, and a test that asks for it skips saying so."""

    def __missing__(self, name: str) -> L.Layout:
        pytest.skip(f"layout {name!r} is written by Spark or pandas, not installed here")


@pytest.fixture(scope="module")
def layouts(events, tmp_path_factory, request) -> Layouts:
    d = tmp_path_factory.mktemp("layouts")
    ts_events = _as_timestamps(events)
    out = [L.write_one_file(events, str(d / "one")),
           L.write_spanning(events, str(d / "spanning")),
           L.write_shuffled(events, str(d / "shuffled")),
           L.write_hive(events, str(d / "hive")),
           L.write_unequal(events, str(d / "unequal"))]
    try:
        import pandas  # noqa: F401
        out.append(L.write_pandas(ts_events, str(d / "pandas")))
    except ImportError:
        pass
    if _have_spark():
        spark = request.getfixturevalue("spark")
        out += [L.write_spark(spark, ts_events, str(d / "spark-micros")),
                L.write_spark(spark, ts_events, str(d / "spark-int96"), int96=True)]
    return Layouts((lay.name, lay) for lay in out)


def check(result: pa.Table, source: pa.Table, time: str, window: str, keys, aggs, what: str,
          time_unit=None) -> None:
    """``result`` is DuckDB's answer over ``source``, row for row, with the
    promised output types and row order."""
    ref = L.duckdb_window_agg(source, time, window, keys, aggs, time_unit=time_unit)
    L.assert_same_rows(result, ref, what=what)
    L.assert_output_types(result, source.schema, time, keys, aggs)
    L.assert_sorted_by_window_then_key(result, keys)


# -- the generator and the references on their own -------------------------------------------------
def test_every_layout_holds_the_same_events(events, layouts):
    """Each writer wrote every event once (times compared as int64 ms)."""
    def canon(t: pa.Table):
        ts = t.column("ts")
        if pa.types.is_timestamp(ts.type):
            ms = pc.divide(ts.cast(pa.timestamp(ts.type.unit)).cast(pa.int64()),
                                   L.NS_PER["ms"] // L.NS_PER[ts.type.unit])
        else:
            ms = ts
        rows = zip(ms.to_pylist(), *(t.column(c).to_pylist() for c in ("k", "s", "v", "x")))
        return sorted(rows, key=lambda r: tuple((v is None, v if v is not None else 0) for v in r))

    want = canon(events)
    assert len(layouts) == len(LAYOUTS) or not _have_spark()
    for name, lay in layouts.items():
        assert canon(lay.table) == want, name


def test_spanning_parts_each_cover_the_whole_time_range(layouts, events):
    lay = layouts["spanning"]
    files = sorted(os.listdir(lay.path))
    assert len(files) == 4
    t = events.column("ts").drop_null().to_numpy()
    for f in files:
        meta = pq.ParquetFile(os.path.join(lay.path, f)).metadata
        assert meta.num_row_groups >= 3
        part = pq.read_table(os.path.join(lay.path, f)).column("ts").drop_null().to_numpy()
        assert part.min() - t.min() < 60_000 and t.max() - part.max() < 60_000, f


def test_shuffled_files_are_out_of_time_order(layouts):
    for p in layouts["shuffled"].path:
        ts = pq.read_table(p).column("ts").drop_null().to_numpy()
        assert (np.diff(ts) < 0).sum() > len(ts) // 4, p


def test_hive_layout_has_day_directories_and_a_default_partition(tmp_path):
    t = L.make_events(2000, span_ms=5 * L.DAY_MS, null_fraction=0.02, seed=2)
    lay = L.write_hive(t, str(tmp_path / "h"))
    dirs = sorted(os.listdir(lay.path))
    assert len(dirs) >= 6 and dirs[-1] == f"day={L.HIVE_NULL}"
    assert all(d.startswith("day=20") for d in dirs[:-1])
    assert lay.table.column("day").null_count == t.column("ts").null_count > 0


def test_unequal_layout_has_an_empty_file_and_a_success_marker(layouts):
    d = layouts["unequal"].path
    names = sorted(os.listdir(d))
    assert "_SUCCESS" in names and os.path.getsize(os.path.join(d, "_SUCCESS")) == 0
    sizes = [pq.ParquetFile(os.path.join(d, n)).metadata.num_rows for n in names if n.endswith(".parquet")]
    assert 0 in sizes and max(sizes) > 30 * min(s for s in sizes if s)


def test_spark_layouts_carry_micros_and_int96_timestamps(layouts):
    assert layouts["spark_micros"].table.schema.field("ts").type == pa.timestamp("us", "UTC")
    parts = sorted(f for f in os.listdir(layouts["spark_int96"].path) if f.endswith(".parquet"))
    md = pq.ParquetFile(os.path.join(layouts["spark_int96"].path, parts[0])).metadata
    ts = [md.schema.column(j) for j in range(md.num_columns) if md.schema.column(j).path == "ts"]
    assert ts[0].physical_type == "INT96"  # Spark's default writer; an instant, read as one:
    assert layouts["spark_int96"].table.schema.field("ts").type == pa.timestamp("us", "UTC")
    assert os.path.exists(os.path.join(layouts["spark_int96"].path, "_SUCCESS"))
    assert len(parts) == 3
    assert layouts["pandas"].table.schema.field("ts").type == pa.timestamp("ns", "UTC")


@pytest.mark.parametrize("name", [n for n in LAYOUTS if n != "pandas"])  # Spark cannot read ns+tz
def test_duckdb_and_spark_agree_on_layout(spark, layouts, name):
    lay = layouts[name]
    for window in (TUMBLING, "sliding:30s/10s", "session:2s"):
        ref = L.duckdb_window_agg(lay.table, "ts", window, ["k", "s"], AGGS)
        theirs = L.spark_window_agg(spark, lay.path, "ts", window, ["k", "s"], AGGS)
        L.assert_same_rows(theirs, ref, ours_int_unit="ns", what=f"Spark vs DuckDB {name} {window}")


def test_duckdb_and_spark_agree_that_one_gap_apart_is_one_session(spark):
    t = pa.table({"ts": pa.array([1000, 3000, 5000, 7001, 9001, 20000], pa.int64()), "k": [1] * 6})
    ref = L.duckdb_window_agg(t, "ts", "session:2s", ["k"], ["count"])
    assert ref.column("count").to_pylist() == [3, 2, 1]
    theirs = L.spark_window_agg(spark, spark.createDataFrame(t), "ts", "session:2s", ["k"], ["count"])
    L.assert_same_rows(theirs, ref, ours_int_unit="ns")


def test_harness_baseline_non_null_one_file_equals_duckdb(tmp_path):
    """The case Slash handled before layouts mattered (non-null int64 ms
    times in one time-ordered file): if this fails, suspect the harness."""
    t = L.make_events(ROWS, keys=12, span_ms=600_000, null_fraction=0.0, seed=5)
    lay = L.write_one_file(t, str(tmp_path / "one"))
    aggs = ["count", "sum:v", "min:v", "max:x", "avg:x"]
    for window in (TUMBLING, "sliding:30s/10s", "session:2s"):
        q = Query(time="ts", window=window, key=["k"], aggregates=aggs)
        check(run(q, lay.path, executors=2), lay.table, "ts", window, ["k"], aggs, f"baseline {window}")


# -- every layout x executors, equal to DuckDB ------------------------------------------------------
@pytest.mark.parametrize("executors", [1, 2, 3])
@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_tumbling_equals_duckdb(layouts, name, executors):
    lay = layouts[name]
    q = Query(time="ts", window=TUMBLING, key=["k"], aggregates=AGGS)
    check(run(q, lay.path, executors=executors), lay.table, "ts", TUMBLING, ["k"], AGGS,
          f"{name} x {executors}")


@settings(max_examples=6, deadline=None, derandomize=True,  # no shrinking: each example runs a query
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(parts=st.integers(1, 5), shuffle=st.booleans(), row_groups=st.integers(1, 6),
       executors=st.integers(1, 3), window=st.sampled_from([TUMBLING, "sliding:30s/10s", "session:2s"]),
       seed=st.integers(0, 2**16))
def test_any_split_of_the_events_equals_duckdb(events, tmp_path_factory, parts, shuffle, row_groups,
                                                executors, window, seed):
    """P3 over random layouts: the events dealt at random into 1-5 files of
    1-6 row groups, time-ordered or shuffled within each file, any executor
    count: the answer is DuckDB's."""
    d = tmp_path_factory.mktemp("split")
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, parts, events.num_rows)
    for i in range(parts):
        part = events.filter(pa.array(owner == i))
        part = part.take(pa.array(rng.permutation(part.num_rows))) if shuffle else \
            part.sort_by([("ts", "ascending")])
        pq.write_table(part, str(d / f"part-{i}.parquet"),
                       row_group_size=max(1, -(-part.num_rows // row_groups)))
    table = pa.concat_tables([pq.read_table(str(d / f"part-{i}.parquet")) for i in range(parts)])
    q = Query(time="ts", window=window, key=["k"], aggregates=AGGS)
    check(run(q, str(d), executors=executors), table, "ts", window, ["k"], AGGS,
          f"{parts} parts, shuffled={shuffle}, {row_groups} row groups, {executors} executors")


@pytest.mark.parametrize("window", ["sliding:30s/10s", "session:2s"])
@pytest.mark.parametrize("name", ["spanning", "shuffled", "hive", "spark_int96"])
def test_layout_sliding_and_session_equal_duckdb(layouts, name, window):
    lay = layouts[name]
    q = Query(time="ts", window=window, key=["k"], aggregates=AGGS)
    check(run(q, lay.path, executors=2), lay.table, "ts", window, ["k"], AGGS, f"{name} {window}")


def test_string_key_on_shuffled_files_equals_duckdb(layouts):
    lay = layouts["shuffled"]
    q = Query(time="ts", window=TUMBLING, key=["s"], aggregates=AGGS)
    check(run(q, lay.path, executors=3), lay.table, "ts", TUMBLING, ["s"], AGGS, "s key")


def test_composite_key_with_nulls_per_column_equals_duckdb(layouts):
    lay = layouts["spanning"]
    q = Query(time="ts", window="sliding:30s/10s", key=["k", "s"], aggregates=AGGS)
    check(run(q, lay.path, executors=2), lay.table, "ts", "sliding:30s/10s", ["k", "s"], AGGS,
          "(k, s) key")


@pytest.mark.parametrize("name", ["spanning", "hive"])
def test_ofi_tcp_transport_equals_duckdb(layouts, name):
    if not slash.have_ofi():
        pytest.skip("this build has no libfabric (apt-get install libfabric-dev, rebuild)")
    lay = layouts[name]
    q = Query(time="ts", window=TUMBLING, key=["k"], aggregates=AGGS)
    check(run(q, lay.path, executors=2, transport="ofi:tcp"), lay.table, "ts", TUMBLING, ["k"], AGGS,
          f"{name} ofi:tcp")


@pytest.mark.parametrize("name", ["spanning", "unequal"])
def test_repartition_mode_equals_duckdb(layouts, name):
    lay = layouts[name]
    q = Query(time="ts", window="session:2s", key=["k"], aggregates=AGGS)
    check(run(q, lay.path, executors=3, mode="repartition"), lay.table, "ts", "session:2s", ["k"],
          AGGS, f"{name} repartition")


# -- time column types ------------------------------------------------------------------------------
@pytest.mark.parametrize("time_type,tz", [("timestamp[ms]", None), ("timestamp[us]", "UTC"),
                                          ("timestamp[ns]", None),
                                          ("timestamp[ms]", "America/New_York")])
def test_timestamp_time_column_gives_timestamp_bounds_equal_to_duckdb(tmp_path, time_type, tz):
    t = L.make_events(1500, span_ms=300_000, null_fraction=0.03, seed=8, time_type=time_type, tz=tz)
    lay = L.write_spanning(t, str(tmp_path / "ts"), parts=3)
    q = Query(time="ts", window=TUMBLING, key=["k"], aggregates=AGGS)
    res = run(q, lay.path, executors=2)
    assert res.schema.field("window_start").type == lay.table.schema.field("ts").type
    check(res, lay.table, "ts", TUMBLING, ["k"], AGGS, f"{time_type} {tz}")


def test_integer_seconds_with_time_unit_equal_duckdb(tmp_path, events):
    secs = pc.divide(events.column("ts"), 1000)
    t = events.set_column(0, "ts", secs)
    lay = L.write_shuffled(t, str(tmp_path / "secs"))
    q = Query(time="ts", window="tumbling:1m", key=["k"], aggregates=AGGS, time_unit="s")
    res = run(q, lay.path, executors=2)
    assert res.schema.field("window_start").type == pa.int64()
    ref = L.duckdb_window_agg(lay.table, "ts", "tumbling:1m", ["k"], AGGS, time_unit="s")
    L.assert_same_rows(res, ref, what="int seconds")  # bounds: int64 ms


def test_date32_time_column_with_daily_windows(tmp_path):
    base = L.make_events(1200, span_ms=20 * L.DAY_MS, null_fraction=0.02, seed=9)
    days = pc.divide(base.column("ts"), L.DAY_MS).cast(pa.int32()).cast(pa.date32())
    t = base.set_column(0, "ts", days)
    res = run(Query(time="ts", window="sliding:7d/1d", key=["k"], aggregates=AGGS), t, executors=2)
    # a date is midnight in the query's time zone (UTC here): an instant, as Spark casts it
    assert res.schema.field("window_start").type == pa.timestamp("ms", "UTC")
    check(res, t, "ts", "sliding:7d/1d", ["k"], AGGS, "date32")


# -- day-long windows over weeks, Hive partitions ---------------------------------------------------
@pytest.fixture(scope="module")
def weeks(tmp_path_factory) -> L.Layout:
    """Three weeks of timestamp[ms] events in Hive day partitions."""
    t = L.make_events(3000, keys=8, span_ms=21 * L.DAY_MS, null_fraction=0.02, seed=21,
                      time_type="timestamp[ms]")
    return L.write_hive(t, str(tmp_path_factory.mktemp("weeks") / "events"))


@pytest.mark.parametrize("window", ["tumbling:1 day", "sliding:7d/1d"])
def test_daily_windows_over_weeks_of_hive_partitions_equal_duckdb(weeks, window):
    q = Query(time="ts", window=window, key=["k"], aggregates=AGGS)
    check(run(q, weeks.path, executors=3), weeks.table, "ts", window, ["k"], AGGS, window)


def test_hive_partition_column_is_readable_as_a_key(weeks):
    q = Query(time="ts", window="tumbling:1d", key=["day"], aggregates=["count", "sum:v"])
    res = run(q, weeks.path, executors=2)
    day = res.column("day")
    if pa.types.is_dictionary(day.type):
        day = day.cast(day.type.value_type)
    res = res.set_column(2, "day", day.cast(pa.string()))
    ref = L.duckdb_window_agg(weeks.table, "ts", "tumbling:1d", ["day"], ["count", "sum:v"])
    L.assert_same_rows(res, ref, what="key=day")
    # a day's window holds exactly that day's partition
    for r in res.to_pylist():
        start = r["window_start"]
        assert r["day"] == start.strftime("%Y-%m-%d")


def test_duckdb_and_spark_agree_on_daily_windows_over_weeks(spark, weeks):
    for window in ("tumbling:1d", "sliding:7d/1d"):
        ref = L.duckdb_window_agg(weeks.table, "ts", window, ["k"], AGGS)
        theirs = L.spark_window_agg(spark, weeks.path, "ts", window, ["k"], AGGS)
        L.assert_same_rows(theirs, ref, ours_int_unit="ns", what=window)


# -- Spark's duration spellings ---------------------------------------------------------------------
@pytest.mark.parametrize("window", ["tumbling:10 seconds", "sliding:2 minutes/30 seconds",
                                    "session:2 seconds"])
def test_spark_duration_spellings(layouts, window):
    lay = layouts["spanning"]
    q = Query(time="ts", window=window, key=["k"], aggregates=AGGS, lateness="0 seconds")
    check(run(q, lay.path, executors=2), lay.table, "ts", window, ["k"], AGGS, window)


# -- nulls as Spark and SQL have them ---------------------------------------------------------------
def test_nulls_follow_sql_group_by_semantics():
    """A null key is a group; all-null values give null sum/min/max/avg and
    count:v 0; a null time is in no window and is not an error."""
    t = pa.table({
        "ts": pa.array([1000, 2000, None, 3000, 4000, 12000, None], pa.int64()),
        "k": pa.array([1, None, 1, None, 1, 2, None], pa.int64()),
        "v": pa.array([None, 5, 7, None, None, None, 9], pa.int64()),
        "x": pa.array([None, 1.5, 2.0, 2.5, None, None, 3.0], pa.float64()),
    })
    res = run(Query(time="ts", window=TUMBLING, key=["k"], aggregates=AGGS), t, executors=2)
    check(res, t, "ts", TUMBLING, ["k"], AGGS, "nulls")
    def order(r):
        return (r["window_start"], r["k"] is not None, r["k"] or 0)

    assert sorted(res.to_pylist(), key=order) == [
        {"window_start": 0, "window_end": 10000, "k": None, "count": 2, "count_v": 1, "sum_v": 5,
         "min_v": 5, "max_x": 2.5, "avg_x": 2.0},
        {"window_start": 0, "window_end": 10000, "k": 1, "count": 2, "count_v": 0, "sum_v": None,
         "min_v": None, "max_x": None, "avg_x": None},
        {"window_start": 10000, "window_end": 20000, "k": 2, "count": 1, "count_v": 0, "sum_v": None,
         "min_v": None, "max_x": None, "avg_x": None}]


def test_window_join_over_spanning_parts_never_matches_null_keys(tmp_path):
    """A tumbling join of two inputs, each as part files spanning the time
    range, with null keys on both sides: every matching pair once, nulls
    matching nothing (DuckDB's inner join)."""
    from slash.query import JoinQuery

    def side(seed: int, payload: str) -> pa.Table:
        t = L.make_events(600, keys=15, span_ms=60_000, null_fraction=0.05, seed=seed,
                          null_values=False, null_times=False)
        return pa.table({"ts": t.column("ts"), "k": t.column("k"), payload: t.column("v")})

    left = L.write_spanning(side(31, "a"), str(tmp_path / "left"), parts=2)
    right = L.write_spanning(side(32, "b"), str(tmp_path / "right"), parts=2)
    assert left.table.column("k").null_count and right.table.column("k").null_count
    res = run(JoinQuery(time="ts", window=TUMBLING, on=["k"]), (left.path, right.path), executors=2)
    ref = L.duckdb_window_join(left.table, right.table, "ts", TUMBLING, ["k"])
    assert ref.num_rows > 1000
    L.assert_same_rows(res, ref, what="join")


# -- key and value types ----------------------------------------------------------------------------
def _typed(n: int = 600, seed: int = 4) -> pa.Table:
    rng = np.random.default_rng(seed)
    t = np.sort(L.EPOCH0_MS + rng.integers(0, 60_000, n))
    return pa.table({"ts": t, "c": rng.integers(0, 6, n), "v": rng.integers(-100, 100, n)})


KEY_TYPES = {  # name -> (Arrow type, key value for code 0..5)
    "int8": (pa.int8(), lambda c: c - 3), "int16": (pa.int16(), lambda c: c * -1000),
    "int32": (pa.int32(), lambda c: c * 100_000), "uint8": (pa.uint8(), lambda c: c + 250),
    "uint16": (pa.uint16(), lambda c: c * 10_000), "uint32": (pa.uint32(), lambda c: c + 4_000_000_000),
    "uint64": (pa.uint64(), lambda c: c + 18_000_000_000_000_000_000),
    "bool": (pa.bool_(), lambda c: c % 2 == 0),
    "string": (pa.string(), lambda c: f"user-{c}"),
    "large_string": (pa.large_string(), lambda c: f"key-{c}"),
    "dictionary": (pa.dictionary(pa.int32(), pa.string()), lambda c: f"d{c}"),
    "date32": (pa.date32(), lambda c: dt.date(2024, 1, 1) + dt.timedelta(days=c)),
    "timestamp": (pa.timestamp("us", "UTC"),
                  lambda c: dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=c)),
}


@pytest.mark.parametrize("name", list(KEY_TYPES))
def test_key_type_with_nulls_equals_duckdb(name):
    typ, make = KEY_TYPES[name]
    base = _typed()
    vals = [None if i % 17 == 0 else make(c) for i, c in enumerate(base.column("c").to_pylist())]
    if pa.types.is_dictionary(typ):
        key = pa.array(vals, pa.string()).dictionary_encode()
    else:
        key = pa.array(vals, typ)
    assert key.type == typ
    t = base.append_column("key", key)
    aggs = ["count", "sum:v"]
    res = run(Query(time="ts", window=TUMBLING, key=["key"], aggregates=aggs), t, executors=2)
    check(res, t, "ts", TUMBLING, ["key"], aggs, name)


VALUE_GROUPS = {  # at most 3 columns per query: count + 5 aggregates each stays within 16
    "signed": [pa.int8(), pa.int16(), pa.int32()],
    "unsigned": [pa.uint8(), pa.uint16(), pa.uint32()],
    "wide": [pa.int64(), pa.uint64()],
    "floats": [pa.float32(), pa.float64()],
    "decimal": [pa.decimal128(12, 2), pa.decimal128(18, 4)],
}


@pytest.mark.parametrize("group", list(VALUE_GROUPS))
def test_value_types_sum_min_max_avg_equal_duckdb(group):
    base = _typed(seed=6)
    rng = np.random.default_rng(7)
    cols, aggs = {}, ["count"]
    for i, typ in enumerate(VALUE_GROUPS[group]):
        name = f"v{i}"
        if pa.types.is_decimal(typ):
            raw = [decimal.Decimal(int(x)).scaleb(-typ.scale)
                   for x in rng.integers(-10**6, 10**6, base.num_rows)]
        elif pa.types.is_floating(typ):
            raw = rng.normal(0, 100, base.num_rows).astype(typ.to_pandas_dtype()).tolist()
        else:
            lo = -100 if pa.types.is_signed_integer(typ) else 0
            raw = rng.integers(lo, lo + 200, base.num_rows).tolist()
        raw = [None if j % 13 == 0 else v for j, v in enumerate(raw)]
        cols[name] = pa.array(raw, typ)
        aggs += [f"count:{name}", f"sum:{name}", f"min:{name}", f"max:{name}", f"avg:{name}"]
    t = pa.table({"ts": base.column("ts"), "c": base.column("c"), **cols})
    res = run(Query(time="ts", window=TUMBLING, key=["c"], aggregates=aggs), t, executors=2)
    check(res, t, "ts", TUMBLING, ["c"], aggs, group)


# -- the CLI ----------------------------------------------------------------------------------------
def _cli(*argv: str) -> subprocess.CompletedProcess:
    # the CLI of the very package these tests import (installed, or a dev tree)
    import slash

    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(slash.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [pkg_root,
                                                                  os.environ.get("PYTHONPATH")] if p))
    return subprocess.run([sys.executable, "-m", "slash", *argv], capture_output=True, text=True,
                          timeout=180, env=env)


def test_cli_run_over_spanning_parts_equals_duckdb_and_spark(spark, layouts, tmp_path):
    lay = layouts["spanning"]
    out = str(tmp_path / "out.parquet")
    r = _cli("run", "--input", lay.path, "--time", "ts", "--window", "tumbling:10s", "--key", "k",
             *[a for agg in AGGS for a in ("--agg", agg)], "--executors", "2", "--transport", "shm",
             "--output", out)
    assert r.returncode == 0, r.stderr[-2000:]
    ours = pq.read_table(out)
    check(ours, lay.table, "ts", TUMBLING, ["k"], AGGS, "CLI spanning")
    theirs = L.spark_window_agg(spark, lay.path, "ts", TUMBLING, ["k"], AGGS)
    L.assert_same_rows(ours, theirs, what="CLI spanning vs Spark groupBy(window)")


def test_cli_run_with_time_unit_and_spark_spelling(events, tmp_path):
    secs = events.set_column(0, "ts", pc.divide(events.column("ts"), 1000))
    lay = L.write_unequal(secs, str(tmp_path / "in"))
    out = str(tmp_path / "out.parquet")
    r = _cli("run", "--input", lay.path, "--time", "ts", "--time-unit", "s", "--window",
             "sliding:1 minute/20 seconds", "--key", "k,s", "--agg", "count", "--agg", "sum:v",
             "--executors", "3", "--output", out)
    assert r.returncode == 0, r.stderr[-2000:]
    ref = L.duckdb_window_agg(lay.table, "ts", "sliding:1 minute/20 seconds", ["k", "s"],
                              ["count", "sum:v"], time_unit="s")
    L.assert_same_rows(pq.read_table(out), ref, what="CLI seconds")


# -- slash.spark against Spark's own groupBy(window) ------------------------------------------------
@pytest.mark.parametrize("name,window", [("spanning", "tumbling:10 seconds"),
                                         ("spark_micros", "session:2s")])
def test_spark_fast_path_on_files_equals_spark_groupby(spark, layouts, name, window):
    from slash.spark import window_aggregate

    lay = layouts[name]
    ours = window_aggregate(spark, lay.path, time="ts", window=window, key=["k", "s"], aggs=AGGS,
                            executors=2).toArrow()
    theirs = L.spark_window_agg(spark, lay.path, "ts", window, ["k", "s"], AGGS)
    L.assert_same_rows(ours, theirs, what=f"slash.spark {name} {window}")


def test_spark_general_path_on_a_dataframe_equals_spark_groupby(spark, layouts):
    from slash.spark import window_aggregate

    lay = layouts["hive"]
    df = spark.read.parquet(lay.path).where("v IS NULL OR v > -900")
    ours = window_aggregate(spark, df, time="ts", window="sliding:30s/10s", key=["k"], aggs=AGGS,
                            executors=2).toArrow()
    theirs = L.spark_window_agg(spark, df, "ts", "sliding:30s/10s", ["k"], AGGS)
    L.assert_same_rows(ours, theirs, what="slash.spark DataFrame")


# -- the real Google cluster-trace sample -----------------------------------------------------------
def test_cluster_trace_sample_cm_query_equals_duckdb(tmp_path):
    """The CM query (per 60 s tumbling window and category: count, sum and
    average of cpu) over the real trace sample written as 4 part files that
    each span its time range (timestamps in seconds)."""
    if not os.path.exists(SAMPLE):
        pytest.skip(f"the trace sample is not at {os.path.normpath(SAMPLE)} (CI has shared/ beside "
                    "the checkout)")
    raw = np.loadtxt(SAMPLE, dtype=np.float64)
    assert raw.shape[1] == 12
    t = pa.table({"timestamp": raw[:, 0].astype(np.int64), "jobId": raw[:, 1].astype(np.int64),
                  "category": raw[:, 6].astype(np.int64), "cpu": raw[:, 8]})
    d = tmp_path / "cm"
    d.mkdir()
    rng = np.random.default_rng(3)
    owner = rng.integers(0, 4, t.num_rows)
    for i in range(4):
        pq.write_table(t.filter(pa.array(owner == i)), str(d / f"part-{i}.parquet"), row_group_size=1024)
    table = pa.concat_tables([pq.read_table(str(d / f"part-{i}.parquet")) for i in range(4)])
    aggs = ["count", "sum:cpu", "avg:cpu"]
    q = Query(time="timestamp", window="tumbling:60s", key=["category"], aggregates=aggs, time_unit="s")
    res = run(q, str(d), executors=2)
    ref = L.duckdb_window_agg(table, "timestamp", "tumbling:60s", ["category"], aggs, time_unit="s")
    assert ref.num_rows > 20
    L.assert_same_rows(res, ref, what="CM on the trace sample")
