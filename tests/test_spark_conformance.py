"""Spark's own window tests (DataFrameTimeWindowingSuite and
DataFrameSessionWindowingSuite, in a compact translation), plus the cases
where a session time zone changes the answer, run four ways: on the
DataFrame, on the same rows as Parquet written by Spark with INT96 and with
TIMESTAMP_MICROS timestamps (read by path), and through ``slash.runner.run``
over the INT96 file. Each way runs in a UTC session and in an
America/Los_Angeles one, and each answer is compared with Spark's own
``groupBy(window(...))`` / ``session_window`` query in the same session: the
window bounds as Spark shows them (cast to string, which renders instants in
the session zone), their type (instant or TimestampNTZ), the key and the
aggregates (NaN equal to NaN).

One SparkSession for the module; each case's data, files and Spark answer
are made once per zone."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

import slash.runner  # noqa: E402
from slash.query import Query  # noqa: E402
from slash.spark import window_aggregate  # noqa: E402

ZONES = ["UTC", "America/Los_Angeles"]
WAYS = ["dataframe", "int96", "micros", "runner"]


@dataclass(frozen=True)
class Case:
    """Rows ``(time, value, id)`` (time as Spark casts a string, or an NTZ
    or a date), Slash's window spec and Spark's arguments for the same window."""

    name: str
    rows: Tuple[Tuple[Optional[str], Any, str], ...]
    window: str
    spark: Tuple[str, ...]  # window(time, *spark), or ("session", gap)
    time_type: str = "timestamp"  # or "timestamp_ntz", "date"
    value_type: str = "int"
    aggs: Tuple[str, ...] = ("count", "sum:value", "min:value", "max:value")


_T = (("2016-03-27 19:39:34", 1, "a"), ("2016-03-27 19:39:56", 2, "a"),
      ("2016-03-27 19:39:27", 4, "b"))
_S = (("2016-03-27 19:39:34", 1, "a"), ("2016-03-27 19:39:39", 1, "a"),
      ("2016-03-27 19:39:56", 2, "a"), ("2016-03-27 19:40:04", 2, "a"),
      ("2016-03-27 19:39:27", 4, "b"))
_O = (("2016-03-27 19:39:34", 1, "a"), ("2016-03-27 19:39:39", 1, "b"),
      ("2016-03-27 19:39:40", 2, "a"), ("2016-03-27 19:39:45", 2, "b"),
      ("2016-03-27 19:39:27", 4, "b"))
_NULLS = (("2016-03-27 09:00:05", 1, "x"), ("2016-03-27 09:00:32", 2, "x"), (None, 3, "x"),
          (None, 4, "x"))
_MS = (("2016-03-27 09:00:00.41", 3, "x"), ("2016-03-27 09:00:00.62", 6, "x"),
       ("2016-03-27 09:00:00.715", 8, "x"))
# around midnight and the spring-forward change in Los Angeles (2016-03-13 02:00 local)
_DST = (("2016-03-12 23:30:00", 1, "a"), ("2016-03-13 00:10:00", 2, "a"),
        ("2016-03-13 01:30:00", 3, "a"), ("2016-03-13 03:20:00", 4, "a"),
        ("2016-03-13 08:00:00", 5, "b"), ("2016-03-14 16:59:59", 6, "b"))

CASES = [
    # DataFrameTimeWindowingSuite
    Case("tumbling_record_at_window_start", (("2016-03-27 19:39:30", 1, "a"),), "tumbling:10s",
         ("10 seconds",)),
    Case("tumbling_negative_start_time", (("2016-03-27 19:39:30", 1, "a"),
                                          ("2016-03-27 19:39:25", 2, "a")),
         "tumbling:10s+-5s", ("10 seconds", "10 seconds", "-5 seconds")),
    Case("tumbling_group_by", _T, "tumbling:10s", ("10 seconds",)),
    Case("sliding_grouping", _T, "sliding:10s/3s", ("10 seconds", "3 seconds", "0 second")),
    Case("null_timestamps", _NULLS, "tumbling:10s", ("10 seconds",)),
    Case("negative_timestamps", (("1970-01-01 00:00:02", 1, "x"), ("1970-01-01 00:00:12", 2, "x")),
         "tumbling:10s+5s", ("10 seconds", "10 seconds", "5 seconds")),
    Case("millisecond_sliding", _MS, "sliding:200ms/40ms",
         ("200 milliseconds", "40 milliseconds", "0 milliseconds")),
    Case("tumbling_group_by_ntz", _T, "tumbling:10s", ("10 seconds",), "timestamp_ntz"),
    # DataFrameSessionWindowingSuite
    Case("session_group_by", _T, "session:10s", ("session", "10 seconds")),
    Case("session_multiple_keys", _S, "session:10s", ("session", "10 seconds")),
    Case("session_keys_overlapped", _O, "session:10s", ("session", "10 seconds")),
    Case("session_ntz", (("2016-03-27 19:39:30", 1, "a"), ("2016-03-27 19:39:25", 2, "a")),
         "session:10s", ("session", "10 seconds"), "timestamp_ntz"),
    # where the session zone changes the answer
    Case("day_windows_across_dst", _DST, "tumbling:1d", ("1 day",)),
    Case("day_windows_start_time", _DST, "tumbling:1d+-8h", ("1 day", "1 day", "-8 hours")),
    Case("session_across_dst", _DST, "session:1h", ("session", "1 hour")),
    Case("day_windows_ntz_across_dst", _DST, "tumbling:1d", ("1 day",), "timestamp_ntz"),
    Case("date_day_windows", (("2016-03-12", 1, "a"), ("2016-03-13", 2, "a"),
                              ("2016-03-14", 3, "b")), "tumbling:1d", ("1 day",), "date"),
    Case("years_0001_and_9999", (("0001-01-01 00:00:00", 1, "a"), ("0001-01-01 10:00:00", 2, "a"),
                                 ("9999-12-31 23:59:59", 3, "b")), "tumbling:1d", ("1 day",)),
    Case("nan_in_min_max", (("2016-03-27 19:39:31", 1.0, "a"), ("2016-03-27 19:39:32", "NaN", "a"),
                            ("2016-03-27 19:39:33", 3.0, "a"), ("2016-03-27 19:39:34", "NaN", "b"),
                            ("2016-03-27 19:39:35", None, "c"), ("2016-03-27 19:39:36", "NaN", "c"),
                            ("2016-03-27 19:39:37", "-Infinity", "d")),
         "tumbling:10s", ("10 seconds",), value_type="double"),
]


@dataclass
class _Made:
    df: Any
    int96: str
    micros: str
    expected: List[tuple]
    expected_type: str


_MADE: Dict[Tuple[str, str], _Made] = {}


def _frame(spark, case: Case):
    import pyspark.sql.functions as F

    df = spark.createDataFrame([(t, None if v is None else v if case.value_type == "int"
                                 else float(v), i) for t, v, i in case.rows],
                               f"time string, value {case.value_type}, id string")
    return df.withColumn("time", F.col("time").cast(case.time_type))


def _spark_answer(df, case: Case) -> Tuple[List[tuple], str]:
    import pyspark.sql.functions as F

    if case.spark[0] == "session":
        w = F.session_window("time", case.spark[1])
    else:
        w = F.window("time", *case.spark)
    cols = []
    for a in case.aggs:
        kind, _, col = a.partition(":")
        cols.append(F.count("*").alias("count") if kind == "count" else
                    getattr(F, kind)(col).alias(f"{kind}_{col}"))
    out = df.groupBy(w.alias("w"), "id").agg(*cols)
    kind = out.schema["w"].dataType["start"].dataType.typeName()
    rows = out.select(F.col("w.start").cast("string"), F.col("w.end").cast("string"), "id",
                      *[c for c in out.columns if c not in ("w", "id")]).collect()
    return _normal(rows), kind


def _normal(rows) -> List[tuple]:
    def norm(v):
        if isinstance(v, float):
            return "NaN" if math.isnan(v) else v
        return v
    return sorted((tuple(norm(v) for v in r) for r in rows), key=repr)


def _slash_answer(res) -> Tuple[List[tuple], str]:
    import pyspark.sql.functions as F

    kind = res.schema["window_start"].dataType.typeName()
    rows = res.select(F.col("window_start").cast("string"), F.col("window_end").cast("string"),
                      *[c for c in res.columns if c not in ("window_start", "window_end")]
                      ).collect()
    return _normal(rows), kind


def _made(spark, tmp_path_factory, case: Case, zone: str) -> _Made:
    got = _MADE.get((case.name, zone))
    if got is None:
        spark.conf.set("spark.sql.session.timeZone", zone)
        df = _frame(spark, case).cache()
        d = tmp_path_factory.mktemp(f"{case.name}-{zone.replace('/', '-')}")
        paths = {}
        for kind in ("INT96", "TIMESTAMP_MICROS"):
            spark.conf.set("spark.sql.parquet.outputTimestampType", kind)
            paths[kind] = str(d / kind)
            df.coalesce(1).write.parquet(paths[kind])
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
        expected, kind = _spark_answer(df, case)
        got = _MADE[(case.name, zone)] = _Made(df, paths["INT96"], paths["TIMESTAMP_MICROS"],
                                                expected, kind)
    return got


def _run(spark, made: _Made, case: Case, zone: str, way: str):
    if way == "runner":
        from pyspark.sql.pandas.types import from_arrow_schema

        q = Query(time="time", window=case.window, key="id", aggregates=list(case.aggs),
                  time_zone=zone)
        table = slash.runner.run(q, made.int96, executors=1)  # one file, one row group
        return spark.createDataFrame(table, schema=from_arrow_schema(table.schema))
    if way == "dataframe":  # its two partitions, one per executor
        if "+" in case.window:  # Spark's own keyword for the offset
            return window_aggregate(spark, made.df, time="time", window=case.window.split("+")[0],
                                    startTime=case.spark[2], key="id", aggs=list(case.aggs),
                                    executors=2)
        return window_aggregate(spark, made.df, time="time", window=case.window, key="id",
                                aggs=list(case.aggs), executors=2)
    return window_aggregate(spark, made.int96 if way == "int96" else made.micros, time="time",
                            window=case.window, key="id", aggs=list(case.aggs), executors=1)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_spark_window_case_agrees_with_spark(spark, tmp_path_factory, case, zone, way):
    made = _made(spark, tmp_path_factory, case, zone)
    spark.conf.set("spark.sql.session.timeZone", zone)
    got, kind = _slash_answer(_run(spark, made, case, zone, way))
    assert kind == made.expected_type, f"window bounds are {kind}, Spark's are {made.expected_type}"
    assert got == made.expected


def test_dataframe_ending_in_coalesce_runs_and_agrees_with_spark(spark):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    case = next(c for c in CASES if c.name == "tumbling_group_by")
    df = _frame(spark, case).repartition(4).coalesce(2)  # a barrier stage refuses this chain
    got, kind = _slash_answer(window_aggregate(spark, df, time="time", window=case.window,
                                               key="id", aggs=list(case.aggs), executors=2))
    assert (got, kind) == _spark_answer(df, case)


def test_over_long_string_key_error_names_the_key_column_and_no_foreign_option(spark, tmp_path):
    import pyspark.sql.functions as F

    from slash.errors import SchemaError, TaskFailed

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    path = str(tmp_path / "long")
    spark.createDataFrame([("2016-03-27 19:39:30", 1, "x" * 80)],
                          "time string, value int, user string") \
        .withColumn("time", F.col("time").cast("timestamp")).write.parquet(path)
    with pytest.raises((SchemaError, TaskFailed)) as e:
        window_aggregate(spark, path, time="time", window="tumbling:10s", key="user", executors=1)
    text = str(e.value)
    assert "key column 'user'" in text and "80 bytes" in text
    assert "'keys'" not in text and "key_nullable" not in text


def test_barrier_refusal_spark_reports_is_named_with_its_cause_and_fix():
    from slash.errors import InvalidArgument
    from slash.spark._tasks import raise_task_failure

    spark_text = ("An error occurred while calling o94.collectToPython.\n: org.apache.spark."
                  "SparkException: [SPARK-24820][SPARK-24821]: Barrier execution mode does not "
                  "allow the following pattern of RDD chain within a barrier stage")
    with pytest.raises(InvalidArgument, match=r"coalesce\(\).*df\.repartition\(n\)"):
        raise_task_failure(RuntimeError(spark_text), "slash.spark.window_aggregate")


def test_nanosecond_session_before_1970_starts_at_its_first_record_floored(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pyspark.sql.functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    path = str(tmp_path / "ns.parquet")
    pq.write_table(pa.table({"t": pa.array([-1_500, -500], pa.timestamp("ns", "UTC")),
                             "id": ["a", "a"]}), path)
    res = window_aggregate(spark, path, time="t", window="session:1s", key="id", executors=1)
    start, end = res.select(F.unix_micros("window_start"), F.unix_micros("window_end")).first()
    assert (start, end) == (-2, 999_999)  # floor(-1500 ns), floor(-500 ns + 1 s)


def test_window_join_takes_sparks_start_time(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pyspark.sql.functions as F

    from slash.spark import window_join

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    ms = pa.timestamp("ms", "UTC")
    lp, rp = str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")
    pq.write_table(pa.table({"ts": pa.array([1_000, 2_500, 11_999, 12_000], ms), "k": [1, 1, 1, 1],
                             "a": [1, 2, 3, 4]}), lp)
    pq.write_table(pa.table({"ts": pa.array([1_500, 12_500], ms), "k": [1, 1], "b": [10, 20]}), rp)
    res = window_join(spark, lp, rp, on="k", time="ts", window="tumbling:10s",
                      startTime="2 seconds", executors=1)
    got = sorted(tuple(r) for r in res.select(F.unix_millis("window_start"),
                                              F.unix_millis("window_end"), "left_a",
                                              "right_b").collect())
    # 10 s windows from 2 s: [-8 s, 2 s) holds 1.0 s and 1.5 s; [2 s, 12 s) no right row;
    # [12 s, 22 s) holds 12.0 s and 12.5 s
    assert got == [(-8_000, 2_000, 1, 10), (12_000, 22_000, 4, 20)]
