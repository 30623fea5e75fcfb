"""slash.spark on a Spark standalone cluster of two workers on loopback,
started here from the pip-installed pyspark (spark_integration/cluster.py):
the same answers as Spark's own groupBy(window), over ofi:tcp where this
build has libfabric (shm otherwise: the workers share this host)."""
import os
import sys

import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

import slash  # noqa: E402
from slash.spark import run_aggregate, session, spark_window_aggregate  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "spark_integration"))
from cluster import LocalCluster  # noqa: E402

from test_spark import AGGS, assert_same, make_table  # noqa: E402

pytestmark = pytest.mark.slow
TRANSPORT = "ofi:tcp" if slash.have_ofi() else "shm"


def cluster_session(tmp_path_factory, app: str, *, cores: int, cores_max: int):
    """A Spark session on a fresh two-worker standalone cluster (``cores``
    per worker, at most ``cores_max`` one-core executors); skips without
    Java or when the cluster does not start. A generator for a fixture."""
    try:
        from slash.spark._env import require_java
        require_java()
    except Exception as e:
        pytest.skip(f"no Java for a Spark cluster: {e}")
    d = str(tmp_path_factory.mktemp("cluster"))
    try:
        c = LocalCluster(workers=2, cores=cores, memory="1g", directory=d).start()
    except Exception as e:
        pytest.skip(f"the standalone cluster did not start: {e}")
    s = None
    try:
        s = session(c.master_url, app,
                    {"spark.executor.cores": "1", "spark.cores.max": str(cores_max),
                     "spark.executor.memory": "512m",
                     "spark.slash.resultDir": os.path.join(d, "results")})
        yield s
    finally:
        if s is not None:
            s.stop()
        c.stop()


@pytest.fixture(scope="module")
def cluster_spark(tmp_path_factory):
    yield from cluster_session(tmp_path_factory, "slash-test-cluster", cores=1, cores_max=2)


@pytest.mark.parametrize("window", ["tumbling:10s", "session:3s"])
def test_two_worker_cluster_equals_spark(cluster_spark, tmp_path, window):
    spark = cluster_spark
    path = str(tmp_path / "events.parquet")
    pq.write_table(make_table(), path, row_group_size=700)
    res = run_aggregate(spark, path, time="t", window=window, key="k", aggs=AGGS, executors=2,
                        transport=TRANSPORT, slots_wait=90)
    assert res.executors == 2 and res.records_in == 6000
    # two worker executors (one core each) registered besides the driver
    assert spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() == 3
    ref = spark_window_aggregate(spark, path, time="t", window=window, key="k", aggs=AGGS)
    assert_same(res.df, ref, ["k"])
