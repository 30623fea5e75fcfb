"""slash.pyspark_daemon: the Python workers of a session made by
slash.spark.session import pyspark from the installed package (cached
bytecode), not from the pyspark.zip Spark puts first on their path, and
only when that zip is the installed package's own."""
import os
import sys

import pytest

from slash.pyspark_daemon import installed_pyspark, prefer_installed


def fake_pyspark(root):
    pkg = root / "site" / "pyspark"
    (pkg / "python" / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    return str(root / "site"), str(pkg / "python" / "lib" / "pyspark.zip"), \
        str(pkg / "python" / "lib" / "py4j-0.10.9.9-src.zip")


def test_the_installed_packages_own_zips_go_behind_it(tmp_path):
    site, zip_, py4j = fake_pyspark(tmp_path)
    path = [zip_, py4j, "/usr/lib/python3.11", site]
    assert prefer_installed(path) == ["/usr/lib/python3.11", site, zip_, py4j]


def test_a_zip_of_another_spark_home_stays_first(tmp_path):
    site, _, _ = fake_pyspark(tmp_path)
    other = str(tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip")
    assert prefer_installed([other, site]) == [other, site]


def test_without_an_installed_package_the_path_stays(tmp_path):
    zip_ = str(tmp_path / "pyspark.zip")
    assert installed_pyspark([zip_, str(tmp_path)]) is None
    assert prefer_installed([zip_, str(tmp_path)]) == [zip_, str(tmp_path)]


@pytest.mark.slow
def test_a_sessions_workers_import_pyspark_from_the_installed_package():
    pytest.importorskip("pyspark")
    from slash.spark import session

    spark = session("local[1]", "slash-test-pyspark-daemon")
    try:
        got = spark.sparkContext.parallelize([0], 1).map(
            lambda _: __import__("sys").modules["pyspark.worker"].__file__).collect()[0]
    finally:
        spark.stop()
    assert ".zip" not in got
    assert os.path.realpath(got).startswith(installed_pyspark(sys.path))
