"""The test suite's shared SparkSession (tests/_spark.py, the ``spark`` fixture
in conftest.py): what one module leaves in it is gone for the next, and a
session of a module's own is never handed the shared one."""
import pytest

import _spark

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

ZONE = "spark.sql.session.timeZone"


def test_the_fixture_is_the_shared_local_2_session(spark):
    assert _spark.is_shared(spark)
    assert spark.sparkContext.master == _spark.SHARED_MASTER


def test_a_modules_confs_views_and_cache_are_gone_after_it(spark):
    confs = _spark.runtime_confs(spark)
    zone = spark.conf.get(ZONE)
    other = "Asia/Kolkata" if zone != "Asia/Kolkata" else "America/Los_Angeles"
    spark.conf.set(ZONE, other)
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    spark.conf.set("spark.slash.jvmExport", "false")
    df = spark.range(100).cache()
    assert df.count() == 100
    df.createOrReplaceTempView("left_by_a_module")
    assert spark.catalog.isCached("left_by_a_module")

    _spark.leave_as_found(spark, confs)

    assert _spark.is_shared(spark)  # no job ran on: the session goes on
    assert _spark.runtime_confs(spark) == confs
    assert spark.conf.get(ZONE) == zone
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert [t.name for t in spark.catalog.listTables() if t.isTemporary] == []


def test_a_session_of_a_modules_own_stops_the_shared_one_first(spark):
    """Spark keeps one SparkContext per process: getOrCreate would otherwise
    hand the module the shared local[2]."""
    assert _spark.is_shared(spark)
    own = _spark.own_session("local[1]", "slash-test-own-session")
    try:
        assert own.sparkContext.master == "local[1]"
        assert not _spark.is_shared(own)
        assert spark.sparkContext._jsc is None  # the shared one was stopped
    finally:
        own.stop()
    again = _spark.shared()  # the next module asking gets a new shared session
    assert again.sparkContext.master == _spark.SHARED_MASTER and _spark.is_shared(again)
