"""Slash from PySpark: windowed aggregations as one barrier stage of Slash
executors, without a shuffle, returned as ordinary DataFrames; and streams
that emit each window as it fires (:mod:`slash.spark.stream`).

>>> # from slash.spark import session, window_aggregate
>>> # spark = session("local[2]")
>>> # df = window_aggregate(spark, "ysb/", time="event_time", window="tumbling:10s",
>>> #                       key="key", aggs=["count"], filter="event_type == 'view'")
>>> # df.orderBy("window_start", "key").show()

``window_join`` is not offered yet: it waits for an executor-level join
(the join store exists, but not a group operator over it).

pyspark is imported only when a function is called, so ``import slash.spark``
works without it and the functions raise :class:`SparkUnavailable`.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from slash.spark._env import NotEnoughSlots, SparkUnavailable, TaskFailed, task_slots
from slash.spark.batch import AggregateResult, run_aggregate, window_aggregate
from slash.spark.join import window_join
from slash.spark.reference import spark_window_aggregate
from slash.spark.stream import DirectorySource, RateSource, StreamHandle, stream


def session(master: str = "local[2]", app_name: str = "slash", conf: Optional[Dict[str, Any]] = None) -> Any:
    """A SparkSession set up for Slash (Arrow on, UI off, quiet logs, the
    package's slash-spark.jar on ``spark.jars`` for :mod:`slash.spark.jvm_export`,
    Python workers that import pyspark's cached bytecode: :mod:`slash.pyspark_daemon`),
    after checking that pyspark, pandas and Java are there (SparkUnavailable
    names what is missing)."""
    from slash.spark import _env, jvm_export

    _env.require_pyspark()
    _env.require_java()
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master(master).appName(app_name)
    defaults = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                "spark.sql.execution.arrow.pyspark.enabled": "true",
                "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.python.daemon.module": "slash.pyspark_daemon"}
    conf = dict(conf or {})
    jar = jvm_export.jar_path()
    if jar is not None:
        conf["spark.jars"] = ",".join(j for j in (conf.get("spark.jars"), jar) if j)
    for k, v in {**defaults, **conf}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


__all__ = ["window_join", "AggregateResult", "DirectorySource", "NotEnoughSlots", "RateSource", "SparkUnavailable",
           "StreamHandle", "TaskFailed", "run_aggregate", "session", "spark_window_aggregate", "stream",
           "task_slots", "window_aggregate"]
