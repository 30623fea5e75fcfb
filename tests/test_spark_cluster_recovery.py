"""Recovery and rescaling on a Spark standalone cluster of two workers on
loopback (issues 16 and 17), started here from the pip-installed pyspark
(spark_integration/cluster.py) like test_spark_cluster.py's, but with two
cores per worker and three one-core executors (``spark.cores.max=3``), so a
stream can grow from 2 to 3 executors:

* a checkpointed ``slash.spark.stream`` whose task's Python worker is killed
  mid-stream recovers, and its directory sink holds each window exactly once
  (DuckDB over the generated records is the reference);
* a stream rescaled from 2 to 3 executors keeps its exactly-once output;
* a checkpointed ``window_aggregate`` whose worker is killed is retried by
  Spark and resumes from its checkpoint, equal to Spark's groupBy(window).
"""
import os
import signal

import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
pytest.importorskip("duckdb")

import slash  # noqa: E402
from slash.spark import RateSource, run_aggregate, spark_window_aggregate, stream  # noqa: E402

from test_spark import AGGS, assert_same, make_table  # noqa: E402
from test_spark_cluster import cluster_session  # noqa: E402
from test_spark_batch_recovery import killed  # noqa: E402
from test_spark_recovery import (QUERY, duckdb_windows, read_sink, sink_windows,  # noqa: E402
                                 wait_for_checkpoints)

pytestmark = pytest.mark.slow
TRANSPORT = "ofi:tcp" if slash.have_ofi() else "shm"
SRC = RateSource(rate=40_000, records=120_000, keys=20, batch=2_000, seed=11)
Q = dict(QUERY, transport=TRANSPORT, slots_wait=90)


@pytest.fixture(scope="module")
def cluster_spark(tmp_path_factory):
    """Two 2-core workers, at most three 1-core executors: room to grow 2 -> 3."""
    yield from cluster_session(tmp_path_factory, "slash-test-cluster-recovery", cores=2, cores_max=3)


def executors(spark):
    """Executors registered (the driver's block manager not counted)."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


def test_cluster_stream_recovers_a_killed_worker_with_each_window_once(cluster_spark, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(cluster_spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **Q)
    wait_for_checkpoints(h, 1, timeout=120)
    victim = h.task_pids()[1]
    os.kill(victim, signal.SIGKILL)
    m = h.wait(180)
    [rec] = m["recoveries"]
    assert rec["rank"] == 1 and str(victim) in rec["cause"] and rec["from_checkpoint"] >= 1
    assert sink_windows(read_sink(out)) == duckdb_windows(h.base_ms, src=SRC)
    assert os.listdir(os.path.join(out, "_pending")) == []


def test_cluster_stream_rescaled_from_two_to_three_keeps_exactly_once_output(cluster_spark, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(cluster_spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **Q)
    wait_for_checkpoints(h, 1, timeout=120)
    up = h.rescale(3)
    assert (up["from"], up["to"]) == (2, 3) and h.executors == 3
    assert executors(cluster_spark) == 3  # the three tasks run in three executors over two workers
    m = h.wait(180)
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 3)] and m["recoveries"] == []
    assert sink_windows(read_sink(out)) == duckdb_windows(h.base_ms, src=SRC)
    assert os.listdir(os.path.join(out, "_pending")) == []


def test_cluster_window_aggregate_retry_resumes_from_its_checkpoint(cluster_spark, tmp_path):
    path = str(tmp_path / "events.parquet")
    pq.write_table(make_table(6000), path, row_group_size=200)
    q = dict(time="t", window="tumbling:10s", key="k", aggs=AGGS, executors=2, transport=TRANSPORT,
             slots_wait=90)
    with killed(cluster_spark, "1:8:0:1"):
        res = run_aggregate(cluster_spark, path, checkpoint=str(tmp_path / "ck"),
                            checkpoint_every="2 batches", **q)
    assert res.recovery["attempts"] == 2 and res.recovery["recoveries"][0]["from_checkpoint"] >= 1
    assert res.records_in == 6000 and sum(m["records_in_attempt"] for m in res.metrics) < 6000
    assert_same(res.df, spark_window_aggregate(cluster_spark, path, time="t", window="tumbling:10s",
                                               key="k", aggs=AGGS), ["k"])
