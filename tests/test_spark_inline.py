"""Small results of slash.spark come back to the driver over the rendezvous
link and become an in-memory DataFrame; larger ones stay Parquet files. Both
give the same DataFrame (schema and rows) as each other and as Spark's own
groupBy(window(...)); only the parts of the task attempts that succeeded are
used; in local[2]."""
from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

from slash.errors import InvalidArgument  # noqa: E402
from slash.spark import (TaskFailed, run_aggregate, spark_window_aggregate,  # noqa: E402
                         window_join)
from slash.spark import batch  # noqa: E402
from slash.spark._tasks import write_table  # noqa: E402

pytestmark = pytest.mark.slow

AGGS = ["count", "sum:i", "max:v"]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """Events over ~100 s: an int (ms) and a timestamp time column, a string
    key with nulls, an int and a float value."""
    rng = np.random.default_rng(7)
    n = 4000
    t = np.sort(rng.integers(0, 100_000, n))
    keys = rng.integers(0, 6, n)
    table = pa.table({
        "t": t,
        "ts": pa.array(t * 1000, pa.timestamp("us", "UTC")),
        "s": pa.array([None if k == 0 else f"user-{k}" for k in keys]),
        "i": rng.integers(-10, 100, n),
        "v": rng.normal(5, 2, n),
    })
    p = str(tmp_path_factory.mktemp("inline") / "events.parquet")
    pq.write_table(table, p, row_group_size=900)
    return p


def sorted_rows(df):
    return sorted(df.collect(), key=lambda r: tuple((v is not None, v) for v in r))


def assert_same_frame(a, b, nullability=True):
    if nullability:
        assert a.schema == b.schema
    else:  # Spark's own count is declared non-null
        assert [(f.name, f.dataType) for f in a.schema] == [(f.name, f.dataType) for f in b.schema]
    ra, rb = sorted_rows(a), sorted_rows(b)
    assert len(ra) == len(rb) > 0
    assert ra == rb


def jobs_run_by(spark, action):
    """How many Spark jobs ``action()`` starts."""
    sc = spark.sparkContext
    group = f"probe-{time.monotonic_ns()}"
    sc.setJobGroup(group, "probe")
    try:
        action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("time_col", ["t", "ts"])
def test_inline_and_file_results_are_the_same_dataframe(spark, path, time_col):
    inline = run_aggregate(spark, path, time=time_col, window="tumbling:10s", key="s", aggs=AGGS,
                           executors=2)
    files = run_aggregate(spark, path, time=time_col, window="tumbling:10s", key="s", aggs=AGGS,
                          executors=2, result_inline_bytes=0)
    assert inline.inline and inline.path is None
    assert [m["result"] for m in inline.metrics] == ["inline", "inline"]
    assert not files.inline and files.path is not None
    assert_same_frame(inline.df, files.df)
    # and both are Spark's own answer, null key group included
    ref = spark_window_aggregate(spark, path, time=time_col, window="tumbling:10s", key="s", aggs=AGGS)
    assert_same_frame(inline.df, ref.select(*inline.df.columns), nullability=False)
    assert any(r["s"] is None for r in inline.df.collect())


def test_timestamp_windows_are_spark_timestamps(spark, path):
    from pyspark.sql.types import TimestampType

    res = run_aggregate(spark, path, time="ts", window="tumbling:10s", key="s", aggs=["count"])
    assert res.inline
    assert isinstance(res.df.schema["window_start"].dataType, TimestampType)
    assert isinstance(res.df.schema["window_end"].dataType, TimestampType)


def test_using_an_inline_result_runs_no_spark_job(spark, path):
    inline = run_aggregate(spark, path, time="t", window="tumbling:10s", key="s", aggs=["count"])
    files = run_aggregate(spark, path, time="t", window="tumbling:10s", key="s", aggs=["count"],
                          result_inline_bytes=0)
    assert jobs_run_by(spark, inline.df.collect) == 0
    assert jobs_run_by(spark, files.df.collect) >= 1  # the probe can see a job


def test_a_part_above_the_threshold_is_a_file(spark, path):
    small = run_aggregate(spark, path, time="t", window="tumbling:10s", key="s", aggs=AGGS)
    limit = min(m["result_bytes"] for m in small.metrics) - 1  # every part is larger
    big = run_aggregate(spark, path, time="t", window="tumbling:10s", key="s", aggs=AGGS,
                        result_inline_bytes=limit)
    assert not big.inline and big.path is not None
    assert [m["result"] for m in big.metrics] == ["file", "file"]
    assert all(m["path"].startswith(big.path) for m in big.metrics)
    assert_same_frame(big.df, small.df)


def test_total_bound_splits_across_tasks():
    assert batch.inline_limit(4 << 20, 2) == 4 << 20
    assert batch.inline_limit(4 << 20, 64) == batch.INLINE_TOTAL_BYTES // 64
    assert batch.inline_limit(0, 2) == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4MiB"])
def test_bad_threshold_is_refused(spark, path, bad):
    with pytest.raises(InvalidArgument, match="result_inline_bytes"):
        run_aggregate(spark, path, time="t", window="tumbling:10s", key="s", aggs=["count"],
                      result_inline_bytes=bad)


def test_allgather_rendezvous_keeps_files(spark, path):
    res = run_aggregate(spark, path, time="t", window="tumbling:10s", key="s", aggs=["count"],
                        rendezvous="allgather")
    assert not res.inline and res.path is not None
    assert [m["result"] for m in res.metrics] == ["file", "file"]


def test_window_join_inline_equals_files(spark, tmp_path):
    from test_query_join import write_side

    lp, rp = str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")
    write_side(lp, 5, 2000, 30, {"reserve": "int"})
    write_side(rp, 6, 2500, 30, {"price": "float"})
    kw = dict(on="id", time="ts", window="tumbling:2s", lateness="1s", executors=2)
    a = window_join(spark, lp, rp, **kw)
    b = window_join(spark, lp, rp, result_inline_bytes=0, **kw)
    assert "FileScan" not in a._jdf.queryExecution().executedPlan().toString()  # in memory
    assert "FileScan" in b._jdf.queryExecution().executedPlan().toString()
    assert_same_frame(a, b)


# --- the driver's side, with parts fed as the tasks would send them ---------

def ipc(table):
    return batch.inline_payload(table, 1 << 20)


def part(lo, hi):
    return pa.table({"window_start": pa.array(range(lo, hi), pa.int64()),
                     "k": pa.array([f"k{i}" if i % 3 else None for i in range(lo, hi)])})


def test_a_retried_attempts_part_replaces_the_failed_ones(spark, tmp_path):
    early = batch.EarlyFrame(spark, str(tmp_path / "q"), 2)
    early.on_message(0, ("result", 10, ipc(part(0, 5))))  # attempt 10 of rank 0 ...
    early.on_message(1, ("result", 11, ipc(part(5, 8))))
    early.on_message(0, ("result", 12, ipc(part(100, 104))))  # ... was retried as attempt 12
    df = early.frame({0: (12, None), 1: (11, None)}, timeout=5)
    assert sorted(r["window_start"] for r in df.collect()) == [5, 6, 7, 100, 101, 102, 103]


def test_a_part_still_on_its_way_is_waited_for(spark, tmp_path):
    early = batch.EarlyFrame(spark, str(tmp_path / "q"), 1)
    early.on_message(0, ("result", 3, ipc(part(0, 2))))  # a stale attempt's
    later = threading.Timer(0.3, early.on_message, (0, ("result", 4, ipc(part(7, 9)))))
    later.start()
    df = early.frame({0: (4, None)}, timeout=10)
    assert sorted(r["window_start"] for r in df.collect()) == [7, 8]


def test_a_part_that_never_arrives_names_the_rank(spark, tmp_path):
    early = batch.EarlyFrame(spark, str(tmp_path / "q"), 2)
    early.on_message(0, ("result", 1, ipc(part(0, 2))))
    with pytest.raises(TaskFailed, match="rank 1") as e:
        early.frame({0: (1, None), 1: (2, None)}, timeout=0.3)
    assert e.value.rank == 1


def test_inline_and_file_parts_mix_into_one_dataframe(spark, tmp_path):
    d = str(tmp_path / "q")
    early = batch.EarlyFrame(spark, d, 2)
    f1 = write_table(part(10, 20), d, "part-00001.parquet")
    early.on_message(0, ("result", 1, ipc(part(0, 10))))
    early.on_message(1, ("written", 2, f1))
    df = early.frame({0: (1, None), 1: (2, f1)}, timeout=5)
    assert sorted(r["window_start"] for r in df.collect()) == list(range(20))
    assert sum(r["k"] is None for r in df.collect()) == len([i for i in range(20) if i % 3 == 0])
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == ["part-00000.parquet",
                                                                 "part-00001.parquet"]


# --- a large inline result: an RDD of Arrow batches, not a LocalRelation ----

@pytest.fixture(scope="module")
def many_keys(tmp_path_factory):
    """20,000 events over 20 s with 5,000 keys: ~20,000 result rows, above
    INLINE_RDD_BYTES of Arrow data but far below the inline bound."""
    rng = np.random.default_rng(3)
    n = 20_000
    table = pa.table({"t": np.sort(rng.integers(0, 20_000, n)), "k": rng.integers(0, 5_000, n)})
    p = str(tmp_path_factory.mktemp("many") / "events.parquet")
    pq.write_table(table, p)
    return p


def physical_plan(df):
    return df._jdf.queryExecution().executedPlan().toString()


def test_a_large_inline_result_is_an_rdd_of_arrow_batches(spark, many_keys):
    res = run_aggregate(spark, many_keys, time="t", window="tumbling:10s", key="k", aggs=["count"])
    assert res.inline
    assert sum(m["result_bytes"] for m in res.metrics) > batch.INLINE_RDD_BYTES
    plan = physical_plan(res.df)
    assert "LocalTableScan" not in plan and "FileScan" not in plan and "ExistingRDD" in plan


def test_a_small_inline_result_is_a_local_relation(spark, path):
    res = run_aggregate(spark, path, time="t", window="tumbling:10s", key="s", aggs=["count"])
    assert res.inline and sum(m["result_bytes"] for m in res.metrics) <= batch.INLINE_RDD_BYTES
    assert "LocalTableScan" in physical_plan(res.df)


def test_a_large_inline_result_has_the_rows_of_files_and_of_spark(spark, many_keys):
    kw = dict(time="t", window="tumbling:10s", key="k", aggs=["count", "min:t"])
    inline = run_aggregate(spark, many_keys, **kw).df
    files = run_aggregate(spark, many_keys, result_inline_bytes=0, **kw).df
    assert_same_frame(inline, files)
    ref = spark_window_aggregate(spark, many_keys, **kw)
    assert_same_frame(inline, ref.select(*inline.columns), nullability=False)


@pytest.mark.parametrize("own", [None, "1234"])
def test_the_sessions_local_relation_threshold_is_left_as_it_was(spark, many_keys, own):
    key = "spark.sql.execution.arrow.localRelationThreshold"
    if own is not None:
        spark.conf.set(key, own)
    before = spark.conf.get(key)
    try:
        run_aggregate(spark, many_keys, time="t", window="tumbling:10s", key="k", aggs=["count"])
        assert spark.conf.get(key) == before
    finally:
        spark.conf.unset(key)
