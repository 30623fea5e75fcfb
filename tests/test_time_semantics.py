"""What a time means, without Spark: INT96 columns (as Spark writes its
TimestampType) are instants read exactly over years 0001-9999; a date is its
midnight in the query's time zone; window offsets move windows as Spark's
startTime does; a time the run's unit cannot hold is refused, never wrapped;
nanosecond bounds given to Spark are floored. Each against a reference
computed here in plain Python (zoneinfo, integer arithmetic)."""
from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash import errors
from slash.query import Query
from slash.runner import run
from slash.sources import FileSource
from slash.state import StateConfig
from slash.window import Sliding, Tumbling, parse_window, with_start_time

UTC = dt.timezone.utc
DAY_US = 86_400_000_000


def _us(t: dt.datetime) -> int:
    """An aware datetime as UTC microseconds since the epoch, exactly."""
    d = t - dt.datetime(1970, 1, 1, tzinfo=UTC)
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _int96_file(tmp_path, times):
    path = str(tmp_path / "int96.parquet")
    t = pa.table({"t": pa.array(times, pa.timestamp("us")), "k": pa.array([1] * len(times)),
                  "v": pa.array(range(len(times)), pa.int64())})
    pq.write_table(t, path, use_deprecated_int96_timestamps=True)
    assert pq.ParquetFile(path).metadata.schema.column(0).physical_type == "INT96"
    return path


def test_int96_column_is_an_instant_in_microseconds(tmp_path):
    path = _int96_file(tmp_path, [dt.datetime(2016, 3, 27, 19, 39, 30)])
    assert FileSource(path).schema.field("t").type == pa.timestamp("us", "UTC")


def test_int96_years_0001_and_9999_give_their_own_day_windows(tmp_path):
    times = [dt.datetime(1, 1, 1, 10, 0, 0), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]
    path = _int96_file(tmp_path, times)
    out = run(Query(time="t", window="tumbling:1d", key="k", aggregates=["count"]), path,
              executors=1)
    starts = out.column("window_start").cast(pa.int64()).to_pylist()
    want = [_us(dt.datetime(t.year, t.month, t.day, tzinfo=UTC)) for t in times]
    assert starts == want
    assert out.schema.field("window_start").type == pa.timestamp("us", "UTC")


def _midnight_us(day: dt.date, zone: str) -> int:
    return _us(dt.datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(zone)))


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Los_Angeles", "America/Sao_Paulo"])
def test_date_time_column_is_midnight_in_the_time_zone(tmp_path, zone):
    # 2018-11-04: Sao Paulo's clocks skip its midnight (00:00 -> 01:00); Spark takes 01:00
    days = [dt.date(2016, 3, 12), dt.date(2016, 3, 13), dt.date(2018, 11, 4)]
    path = str(tmp_path / "dates.parquet")
    pq.write_table(pa.table({"d": pa.array(days, pa.date32()), "k": [1, 1, 1]}), path)
    out = run(Query(time="d", window="tumbling:1h", key="k", aggregates=["count"],
                    time_zone=zone), path, executors=1)
    assert out.schema.field("window_start").type == pa.timestamp("ms", "UTC")
    got = [v * 1000 for v in out.column("window_start").cast(pa.int64()).to_pylist()]
    assert got == sorted(_midnight_us(d, zone) // 3_600_000_000 * 3_600_000_000 for d in days)


def test_unknown_time_zone_is_refused_by_name():
    with pytest.raises(errors.InvalidArgument, match="Mars/Olympus"):
        Query(time="t", window="tumbling:1d", key="k", time_zone="Mars/Olympus")


@pytest.mark.parametrize("spec,size,slide,offset", [
    ("tumbling:1d+-8h", 86_400_000, 86_400_000, -28_800_000),
    ("tumbling:10s+5s", 10_000, 10_000, 5_000),
    ("sliding:10s/5s+2s", 10_000, 5_000, 2_000),
    ("sliding:1 day/1 hour+-30 minutes", 86_400_000, 3_600_000, -1_800_000),
])
def test_window_offset_windows_start_at_multiples_of_the_slide_plus_the_offset(
        tmp_path, spec, size, slide, offset):
    rng = np.random.default_rng(5)
    t = np.sort(rng.integers(-3 * size, 3 * size, 400))
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"t": pa.array(t, pa.int64()), "k": pa.array(t % 3)}), path)
    out = run(Query(time="t", window=spec, key="k", aggregates=["count"]), path, executors=2)
    want = {}
    for ti, ki in zip(t.tolist(), (t % 3).tolist()):
        last = (ti - offset) // slide * slide + offset  # the latest start <= ti
        for s in range(last, ti - size, -slide):
            want[(s, ki)] = want.get((s, ki), 0) + 1
    got = {(s, k): c for s, e, k, c in zip(*(out.column(n).to_pylist() for n in
                                              ("window_start", "window_end", "k", "count")))
           if e - s == size}
    assert got == want and out.num_rows == len(want)


def test_spark_start_time_moves_the_window():
    assert with_start_time("tumbling:1 day", "-8 hours") == Tumbling(86_400_000, -28_800_000)
    assert with_start_time("sliding:10s/5s", "2 seconds") == Sliding(10_000, 5_000, 2_000)


def test_offset_of_a_whole_slide_is_refused_as_spark_refuses_it():
    with pytest.raises(errors.InvalidArgument, match="smaller in absolute value than the window slide"):
        parse_window("tumbling:1d+1d")


def test_session_window_takes_no_offset():
    with pytest.raises(errors.InvalidArgument, match="session window has no"):
        parse_window("session:10s+2s")
    with pytest.raises(errors.InvalidArgument, match="session window has no start time"):
        with_start_time("session:10s", "2s")


def test_state_given_an_offset_window_refuses_it_naming_the_query():
    with pytest.raises(errors.InvalidArgument, match="belongs to a Query"):
        StateConfig(window="tumbling:10s+5s")


def test_seconds_time_column_beyond_int64_milliseconds_is_refused_not_wrapped(tmp_path):
    path = str(tmp_path / "s.parquet")
    big = 2 ** 62  # seconds: its milliseconds overflow int64
    pq.write_table(pa.table({"t": pa.array([0, big], pa.int64()), "k": [1, 1]}), path)
    with pytest.raises(errors.OutOfRange, match="time column .t.*4611686018427387904"):
        run(Query(time="t", window="tumbling:1d", key="k", time_unit="s"), path, executors=1)


def test_nanosecond_bounds_before_1970_are_floored_to_microseconds():
    from slash.spark._tasks import as_micros

    ns = pa.array([-1, -1500, -1000, 1500, None], pa.timestamp("ns", "UTC"))
    out = as_micros(pa.table({"window_start": ns})).column(0)
    assert out.type == pa.timestamp("us", "UTC")
    assert out.cast(pa.int64()).to_pylist() == [-1, -2, -1, 1, None]


def test_join_date_time_column_is_midnight_in_the_time_zone(tmp_path):
    from slash.query import JoinQuery

    day = dt.date(2016, 3, 13)
    paths = []
    for side in ("left", "right"):
        paths.append(str(tmp_path / f"{side}.parquet"))
        pq.write_table(pa.table({"d": pa.array([day], pa.date32()), "k": [1],
                                 side[0]: pa.array([1.5])}), paths[-1])
    out = run(JoinQuery(time="d", window="tumbling:1h", on="k", time_zone="Asia/Tokyo"),
              (FileSource(paths[0]), FileSource(paths[1])), executors=1)
    assert out.column("window_start").cast(pa.int64()).to_pylist() == \
        [_midnight_us(day, "Asia/Tokyo") // 1000]


def test_string_time_column_is_refused_saying_how_spark_would_cast_it():
    with pytest.raises(errors.SchemaError, match=r"time column 't'.*cast\('timestamp'\)"):
        Query(time="t", window="tumbling:1d", key="k").check(
            pa.schema([("t", pa.string()), ("k", pa.int64())]))
