"""Every representable time is applied: windows at both ends of the int64
range, for every window kind and time unit, against an independent
computation in Python integers (and DuckDB for the issue's five records).

The rule (docs/windows.md): a tumbling window or a session reaching past an
end of the int64 range is clipped there (start INT64_MIN, end INT64_MAX);
sliding windows past an end would share a clipped bound, so a record in one is
refused with OutOfRange naming its time; nothing is dropped. Window lengths
that overflow int64 ticks and window/slide ratios above max_windows are
refused when the query is checked. Runs under ASan/UBSan too (test.sh)."""
import pandas as pd
import numpy as np
import pyarrow as pa
import pytest

from slash.errors import InvalidArgument, OutOfRange
from slash.query import Query
from slash.runner import run
from slash.window import Sliding, parse_window

MIN, MAX = -2**63, 2**63 - 1
FIVE = [MIN + 1, -9223372036854770000, -1, 0, MAX]  # the issue's five records
TICKS = {"ms": 1, "us": 1000, "ns": 1_000_000}


def _clip(x):
    return max(MIN, min(MAX, x))


def tumbling_ref(times, size):
    """{(start, end): count} in Python integers, clipped to int64."""
    out = {}
    for t in times:
        s = t // size * size
        w = (_clip(s), _clip(s + size))
        out[w] = out.get(w, 0) + 1
    return out


def session_ref(times, gap):
    out, cur = {}, None
    for t in sorted(times):
        if cur is not None and t <= cur[1]:
            cur = [cur[0], max(cur[1], _clip(t + gap)), cur[2] + 1]
            continue
        if cur is not None:
            out[(cur[0], cur[1])] = cur[2]
        cur = [t, _clip(t + gap), 1]
    out[(cur[0], cur[1])] = cur[2]
    return out


def sliding_ref(times, size, slide):
    out = {}
    for t in times:
        k = t // slide
        while k * slide + size > t:
            w = (k * slide, k * slide + size)
            assert MIN <= w[0] and w[1] <= MAX, "the test's times stay inside"
            out[w] = out.get(w, 0) + 1
            k -= 1
    return out


def _rows(result):
    d = result.to_pydict()
    return {(s, e): c for s, e, c in zip(d["window_start"], d["window_end"], d["count"])}


def _ints(result):
    t = result.cast(pa.schema([pa.field(n, pa.int64()) if pa.types.is_timestamp(f.type) else f
                               for n, f in zip(result.schema.names, result.schema)]))
    return _rows(t)


def _table(times, typ=pa.int64()):
    return pa.table({"ts": pa.array(times, pa.int64()).view(typ) if typ != pa.int64()
                     else pa.array(times, pa.int64()), "k": [7] * len(times)})


def test_the_issues_five_records_all_land_in_their_clipped_tumbling_windows():
    import duckdb

    m = {}
    got = _rows(run(Query(time="ts", window="tumbling:10s", key=["k"], aggregates=["count"]),
                    _table(FIVE), executors=2, metrics=m))
    assert got == tumbling_ref(FIVE, 10_000)
    assert sum(got.values()) == 5 and m["late_records"] == 0 and m["null_time_records"] == 0
    # DuckDB in HUGEINT (128-bit), clipped the same way
    con = duckdb.connect()
    con.execute("create table t(ts hugeint)")
    con.executemany("insert into t values (?)", [[t] for t in FIVE])
    ref = con.execute(f"""select greatest(floor(ts / 10000)::hugeint * 10000, {MIN}) s,
                                 least(floor(ts / 10000)::hugeint * 10000 + 10000, {MAX}) e,
                                 count(*) from t group by all""").fetchall()
    assert got == {(int(s), int(e)): c for s, e, c in ref}


@pytest.mark.parametrize("window,unit", [("tumbling:10s", "ms"), ("tumbling:1d", "us"),
                                         ("tumbling:1d", "ns"), ("session:10s", "ms"),
                                         ("session:10s", "ns")])
def test_integer_times_at_both_ends_are_applied(window, unit):
    w = parse_window(window)
    f = TICKS[unit]
    times = [MIN, MIN + 1, MIN + 5, -1, 0, MAX - 3, MAX]
    q = Query(time="ts", window=w, key=["k"], aggregates=["count"], time_unit=unit)
    got = _rows(run(q, _table(times), executors=2))
    size = (w.size_ms if w.kind == "tumbling" else w.gap_ms) * f
    ref = tumbling_ref(times, size) if w.kind == "tumbling" else session_ref(times, size)
    # integer columns report windows in ms (floored)
    assert got == {(s // f, e // f): c for (s, e), c in ref.items()}


@pytest.mark.parametrize("unit", ["us", "ns"])
def test_timestamp_columns_at_both_ends_are_applied(unit):
    times = [MIN + 1, MIN + 2, 0, MAX]  # MIN + 1: pandas' Timestamp.min in ns
    q = Query(time="ts", window="tumbling:1d", key=["k"], aggregates=["count"])
    got = _ints(run(q, _table(times, pa.timestamp(unit)), executors=1))
    assert got == tumbling_ref(times, 86_400_000 * TICKS[unit])


def test_pandas_timestamp_min_in_a_day_window_is_applied():
    ts = pa.array([pd.Timestamp.min.value, pd.Timestamp.max.value], pa.timestamp("ns"))
    got = _ints(run(Query(time="ts", window="tumbling:1d", key=["k"], aggregates=["count"]),
                    pa.table({"ts": ts, "k": [1, 1]}), executors=1))
    day = 86_400_000_000_000
    assert got == {(MIN, (pd.Timestamp.min.value // day + 1) * day): 1,
                   (pd.Timestamp.max.value // day * day, MAX): 1}


def test_sliding_windows_inside_the_range_near_both_ends_are_exact():
    times = [-9223372036854770000, -9223372036854769999, -1, 0, 9223372036854764999]
    got = _rows(run(Query(time="ts", window="sliding:10s/5s", key=["k"], aggregates=["count"]),
                    _table(times), executors=2))
    assert got == sliding_ref(times, 10_000, 5_000)


@pytest.mark.parametrize("t", [MIN + 1, MAX])
def test_a_sliding_window_past_an_end_is_refused_naming_the_time(t):
    with pytest.raises(OutOfRange) as e:
        run(Query(time="ts", window="sliding:10s/5s", key=["k"], aggregates=["count"]),
            _table([0, t]), executors=1)
    assert str(t) in str(e.value)


def test_seconds_that_overflow_milliseconds_are_refused_naming_the_time():
    with pytest.raises(OutOfRange) as e:
        run(Query(time="ts", window="tumbling:1d", key=["k"], aggregates=["count"], time_unit="s"),
            _table([1, 2**62]), executors=1)
    assert str(2**62) in str(e.value)


def test_a_window_size_that_overflows_the_time_unit_is_refused_at_check():
    q = Query(time="ts", window="tumbling:200000d", key=["k"], aggregates=["count"])
    with pytest.raises(InvalidArgument) as e:
        q.check(_table([0], pa.timestamp("ns")).schema)
    assert "window size" in str(e.value) and "int64" in str(e.value)
    q.check(_table([0]).schema)  # the same size in ms fits


def test_too_many_sliding_windows_per_record_are_refused_with_the_number():
    with pytest.raises(InvalidArgument) as e:
        parse_window("sliding:1d/1ms")
    assert "86,400,000" in str(e.value)
    assert Sliding(86_400_000, 1, max_windows=100_000_000).slide_ms == 1  # allowed when asked
    parse_window("sliding:10s/1ms")  # 10,000: the default limit itself


def test_a_logic_switch_after_the_last_time_stays_in_int64():
    from slash.control import LogicPlan

    plan = LogicPlan(Query(time="ts", window="sliding:10s/2s", key=["k"], aggregates=["count"]))
    assert plan.switch_point(MAX - 1, plan.slide_ticks(1)) == MAX
    assert plan.switch_point(MAX, None) == MAX


@pytest.mark.parametrize("window", ["session:10s", "tumbling:10s"])
def test_a_join_at_the_last_time_pairs_its_records_in_the_clipped_window(window):
    from slash.query import JoinQuery

    left = pa.table({"ts": pa.array([0, MAX], pa.int64()), "k": pa.array([1, 2], pa.int64()),
                     "a": [1, 2]})
    right = pa.table({"ts": pa.array([5, MAX], pa.int64()), "k": pa.array([1, 2], pa.int64()),
                      "b": [3, 4]})
    got = run(JoinQuery(time="ts", window=window, on=["k"]), (left, right), executors=2)
    d = got.to_pydict()
    top = MAX if window.startswith("session") else MAX // 10_000 * 10_000
    first_end = 10_005 if window.startswith("session") else 10_000
    assert list(zip(d["window_start"], d["window_end"], d["k"], d["left_a"], d["right_b"])) == \
        [(0, first_end, 1, 1, 3), (top, MAX, 2, 2, 4)]


@pytest.mark.parametrize("window", ["tumbling:10s", "sliding:10s/5s", "session:10s"])
def test_a_spark_streams_late_windows_at_both_ends_stay_in_int64(window):
    from slash.spark.stream import late_windows
    from slash.window import parse_window

    w = parse_window(window)
    got = late_windows(np.array([MIN + 1, MAX], np.int64), w)
    # each time falls in its one tumbling window / session, and in size/slide = 2 sliding ones
    assert sum(c for _, _, c in got) == (4 if window.startswith("sliding") else 2), got
    for start, end, _ in got:
        assert MIN <= start <= end <= MAX, (start, end)
    assert any(s <= MIN + 1 < e for s, e, _ in got) and any(s <= MAX <= e for s, e, _ in got)
