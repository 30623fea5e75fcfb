"""window_aggregate / window_join with checkpoint=DIR (issue 16, long Spark
jobs): the barrier stage checkpoints at epoch boundaries; when a task's
Python worker is killed, Spark retries the stage as a whole and the new
attempt resumes from the newest complete checkpoint instead of starting
over. References: Spark's own groupBy(window) and the failure-free run.

The kill is slash.run.recovery.checkpointed's documented test hook (SLASH_TEST_KILL, given
to the Python workers through ``SparkContext.environment``): the worker of
rank RANK SIGKILLs itself after PUSHES pushes in attempt 0, once CUTS
checkpoints are committed."""
import contextlib
import logging
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

from slash.errors import NotSupported  # noqa: E402
from slash.spark import run_aggregate, spark_window_aggregate, window_join  # noqa: E402

from test_spark import AGGS, assert_same, make_table, rows  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    """6000 events in 30 row groups: each rank pushes ~15 batches."""
    path = str(tmp_path_factory.mktemp("events") / "events.parquet")
    pq.write_table(make_table(6000), path, row_group_size=200)
    return path


@contextlib.contextmanager
def killed(spark, spec):
    """The Python workers started meanwhile carry SLASH_TEST_KILL=spec."""
    env = spark.sparkContext.environment
    env["SLASH_TEST_KILL"] = spec
    try:
        yield
    finally:
        env.pop("SLASH_TEST_KILL", None)


def assert_resumed(res, total):
    rec = res.recovery
    assert rec["attempts"] == 2, rec
    [r] = rec["recoveries"]
    assert r["from_checkpoint"] is not None and r["from_checkpoint"] >= 1
    assert r["seconds_to_resume"] > 0
    assert res.records_in == total  # every record applied once over both attempts
    # the retried attempt read only what lay after the checkpoint
    assert 0 < sum(m["records_in_attempt"] for m in res.metrics) < total


def test_retried_stage_resumes_from_checkpoint_and_equals_spark(spark, events, tmp_path):
    window = "tumbling:10s"
    q = dict(time="t", window=window, key="k", aggs=AGGS, executors=2)
    clean = run_aggregate(spark, events, **q)
    with killed(spark, "1:8:0:1"):
        res = run_aggregate(spark, events, checkpoint=str(tmp_path / "ck"), checkpoint_every="2 batches",
                            **q)
    assert_resumed(res, 6000)
    assert res.recovery["recoveries"][0]["rank"] == 1
    assert_same(res.df, spark_window_aggregate(spark, events, time="t", window=window, key="k",
                                               aggs=AGGS), ["k"])
    assert_same(res.df, clean.df, ["k"])


def test_dataframe_input_resumes_from_its_sorted_partition_positions(spark, events, tmp_path):
    df = spark.read.parquet(events).repartition(2)
    q = dict(time="t", window="sliding:30s/10s", key="s", aggs=AGGS, executors=2)
    spark.conf.set("spark.slash.jvmExport", "false")  # mapInArrow's partitions, not exported files
    try:
        with killed(spark, "1:8:0:1"):
            res = run_aggregate(spark, df, checkpoint=str(tmp_path / "ck"), checkpoint_every="2 batches",
                                **q)
    finally:
        spark.conf.unset("spark.slash.jvmExport")
    assert res.route == "arrow"
    assert_resumed(res, 6000)
    assert_same(res.df, spark_window_aggregate(spark, events, time="t", window="sliding:30s/10s",
                                               key="s", aggs=AGGS), ["s"])


def test_a_partition_in_any_order_reads_as_the_same_batches_and_watermarks():
    """The general path's position (an item count) holds across attempts
    that get the same rows in another order."""
    from slash.sources import read_from
    from slash.spark._batch_ckpt import SortedPartition

    t = make_table(3000).select(["t", "k", "s", "v"])
    t = pa.concat_tables([t, t.slice(0, 50)])  # rows equal in every column too
    rng = np.random.default_rng(1)
    reads = []
    for _ in range(2):
        shuffled = t.take(pa.array(rng.permutation(t.num_rows)))
        src = SortedPartition(t.schema, iter(shuffled.to_batches(max_chunksize=700)), "t")
        src.table.validate()
        reads.append([(pos, item) for pos, item in read_from(src, 1, 2, ["t", "k", "v"], "t")])
    assert [p for p, _ in reads[0]] == [p for p, _ in reads[1]]
    kinds = [isinstance(item, pa.RecordBatch) for _, item in reads[0]]
    assert kinds.count(True) > 1 and kinds.count(False) > 0  # several batches, Watermarks between
    for (_, a), (_, b) in zip(*reads):
        assert type(a) is type(b)
        assert a.equals(b) if isinstance(a, pa.RecordBatch) else a.value == b.value


def test_without_checkpoint_the_stage_has_no_shuffle_and_with_it_one(spark, events, tmp_path):
    plain = run_aggregate(spark, events, time="t", window="tumbling:10s", key="k", executors=2)
    assert "ShuffledRDD" not in plain.plan and plain.recovery is None
    ck = run_aggregate(spark, events, time="t", window="tumbling:10s", key="k", executors=2,
                       checkpoint=str(tmp_path / "ck"), checkpoint_every="2 batches")
    assert ck.recovery["attempts"] == 1 and ck.recovery["checkpoints"]
    assert_same(ck.df, plain.df, ["k"])


def test_a_call_again_with_the_directory_resumes_and_another_executor_count_is_refused(
        spark, events, tmp_path):
    q = dict(time="t", window="session:3s", key="k", aggs=AGGS)
    first = run_aggregate(spark, events, checkpoint=str(tmp_path / "ck"), checkpoint_every="2 batches",
                          executors=2, **q)
    again = run_aggregate(spark, events, checkpoint=str(tmp_path / "ck"), executors=2, **q)
    assert again.recovery["resumed_from"] == first.recovery["checkpoints"][-1]["id"]
    assert_same(again.df, first.df, ["k"])
    with pytest.raises(NotSupported, match="executors=2"):
        run_aggregate(spark, events, checkpoint=str(tmp_path / "ck"), executors=1, **q)


def _join_inputs(d):
    rng = np.random.default_rng(9)
    paths = []
    for name in ("left", "right"):
        t = np.sort(rng.integers(0, 60_000, 3000))
        table = pa.table({"ts": t, "id": rng.integers(0, 11, 3000), "x": rng.integers(0, 100, 3000)})
        p = os.path.join(d, f"{name}.parquet")
        pq.write_table(table, p, row_group_size=150)
        paths.append(p)
    return paths


def test_window_join_resumes_after_a_killed_worker(spark, tmp_path, caplog):
    left, right = _join_inputs(str(tmp_path))
    q = dict(on="id", time="ts", window="tumbling:10s", executors=2)
    clean = window_join(spark, left, right, **q)
    with killed(spark, "1:8:0:1"), caplog.at_level(logging.INFO, "slash.spark"):
        got = window_join(spark, left, right, checkpoint=str(tmp_path / "ck"),
                          checkpoint_every="2 batches", **q)
    assert re.search(r"retried \(attempt 1\); resuming from checkpoint \d+", caplog.text)
    assert "'attempts': 2" in caplog.text
    key = ["id", "left_x", "right_x"]
    a, b = rows(got, key), rows(clean, key)
    assert len(a["window_start"]) == len(b["window_start"]) > 0
    for c in a:
        np.testing.assert_array_equal(a[c], b[c], err_msg=c)


def test_a_corrupt_checkpoint_is_refused_naming_the_file(spark, events, tmp_path):
    from slash.errors import CheckpointCorrupt

    ck = str(tmp_path / "ck")
    q = dict(time="t", window="tumbling:10s", key="k", executors=2)
    res = run_aggregate(spark, events, checkpoint=ck, checkpoint_every="2 batches", **q)
    last = res.recovery["checkpoints"][-1]["id"]
    meta = os.path.join(ck, f"chk-{last:012d}", "rank-1.meta")
    with open(meta, "r+b") as f:
        f.seek(4)
        f.write(b"\xff\xfe")
    with pytest.raises(CheckpointCorrupt, match="rank-1.meta"):
        run_aggregate(spark, events, checkpoint=ck, **q)
