"""``slash bench kafka``'s Spark side: Spark Structured Streaming's own
Kafka source (``spark-sql-kafka-0-10``, resolved from Maven for the
installed PySpark, or the pom's release with a warning), ``from_json``,
``withWatermark(0 s)``, a tumbling count per campaign in append mode; and
the Spark session every Spark-hosted side runs in.

Invariant: the side gets the same cores (``local[N]``, N shuffle
partitions) and the same topic as every other side.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa

from slash.bench._kafka_broker import JVM_DIR, maven_jars
from slash.bench._kafka_measure import Clock, SideRun, side_process, until_stopped
from slash.bench._kafka_topic import ANSWER_COLUMNS, WINDOW_MS, Topic
from slash.errors import NotSupported, SystemFailure

#: the benchmark's modules log as one (``slash.bench.kafka``)
log = logging.getLogger("slash.bench.kafka")

@functools.lru_cache(maxsize=4)
def spark_kafka_jars(version: Optional[str] = None) -> Tuple[str, List[str]]:
    """(release, jars): spark-sql-kafka-0-10 and the runtime dependencies
    PySpark does not ship. ``version`` None: the installed PySpark's, or, when
    Maven has no such release, the pom's own (``jvm/spark-sql-kafka.pom.xml``,
    a release that resolves), with a warning naming both."""
    import pyspark  # optional dependency (the Spark sides)

    pom = os.path.join(JVM_DIR, "spark-sql-kafka.pom.xml")
    want = version or pyspark.__version__
    try:
        d = maven_jars(pom, f"spark-sql-kafka-{want}", {"spark.version": want})
    except NotSupported as e:
        with open(pom) as f:
            fallback = f.read().split("<spark.version>", 1)[1].split("<", 1)[0]
        if version is not None or fallback == want:
            raise NotSupported(f"spark side: spark-sql-kafka-0-10 {want} did not resolve from "
                               f"Maven ({e})") from None
        log.warning("spark-sql-kafka-0-10 %s (the installed PySpark's) did not resolve from Maven; "
                    "the spark side uses %s, the pom's release (--spark-kafka-version names "
                    "another)", want, fallback)
        want = fallback
        d = maven_jars(pom, f"spark-sql-kafka-{want}", {"spark.version": want})
    shipped = {_artifact(j) for j in os.listdir(os.path.join(os.path.dirname(pyspark.__file__),
                                                             "jars"))}
    return want, [os.path.join(d, j) for j in sorted(os.listdir(d))
                  if j.endswith(".jar") and _artifact(j) not in shipped]


def _artifact(jar: str) -> str:
    """A jar's artifact name without its version: 'kafka-clients-3.9.2.jar' -> 'kafka-clients'."""
    parts = jar[:-4].split("-") if jar.endswith(".jar") else jar.split("-")
    keep = []
    for p in parts:
        if p[:1].isdigit():
            break
        keep.append(p)
    return "-".join(keep)


def side_spark(topic: Topic, cores: int, workdir: str, opts: Dict[str, Any]) -> SideRun:
    import pyspark  # optional dependency (the Spark sides)

    release, jars = spark_kafka_jars(opts.get("spark_kafka_version"))
    r = side_process("spark", topic, cores, workdir, opts, {"jars": jars})
    r.detail.update(spark_kafka_version=release, pyspark_version=pyspark.__version__)
    return r


def spark_session(cores: int, jars: Sequence[str] = ()) -> Any:
    from slash.spark import session  # optional dependency (pyspark)

    # the Python workers run this interpreter (the one slash is installed in)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {"spark.sql.shuffle.partitions": str(cores), "spark.driver.memory": "4g"}
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return session(f"local[{cores}]", "slash-bench-kafka", conf)


def run_spark(spec: Dict[str, Any]) -> Dict[str, Any]:
    from pyspark.sql import functions as F  # optional dependency (pyspark)

    topic = Topic(**{k: v for k, v in spec["topic"].items()})
    live, window_ms = spec.get("live", False), spec.get("window_ms", WINDOW_MS)
    spark = spark_session(spec["cores"], spec["jars"])
    schema = "campaign BIGINT, event_type STRING, event_time BIGINT"
    parts: List[pa.Table] = []
    seen: List[Tuple[int, int]] = []  # (window end, ms when its rows reached the driver)

    def collect(df: Any, batch_id: int) -> None:
        rows = df.select(F.col("window.start").cast("long").alias("start_s"), "campaign",
                         "count").collect()
        now = int(time.time() * 1000)
        seen.extend((s * 1000 + window_ms, now) for s in sorted({r[0] for r in rows}))
        if rows:
            parts.append(pa.table({"window_start": [r[0] * 1000 for r in rows],
                                   "campaign": [r[1] for r in rows],
                                   "count": [r[2] for r in rows]}))

    clock = Clock(spec.get("broker_pid"))
    clock.start()
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", topic.bootstrap)
              .option("subscribe", topic.name).option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true").load()
              .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
              .select("e.*").withColumn("ts", F.timestamp_millis("event_time")))
    q = (events.withWatermark("ts", "0 seconds").filter(F.col("event_type") == "view")
         .groupBy(F.window("ts", f"{window_ms // 1000} seconds"), "campaign").count()
         .writeStream.outputMode("append"))
    q = q if live else q.trigger(availableNow=True)
    q = (q.option("checkpointLocation", os.path.join(spec["workdir"], "spark-checkpoint"))
         .foreachBatch(collect).start())
    if live:  # up once a micro-batch has read records (the feed has started)
        while not any((x if isinstance(x, dict) else json.loads(x.json))["numInputRows"]
                      for x in q.recentProgress):
            if q.exception() is not None:
                raise SystemFailure(f"the Spark query failed: {q.exception()}")
            time.sleep(0.1)
        until_stopped()
        q.stop()
    else:
        q.awaitTermination()
    timed = clock.stop()
    progress = [{"batch": p["batchId"], "rows": p["numInputRows"],
                 "watermark": p.get("eventTime", {}).get("watermark"),
                 "state_rows": [o.get("numRowsTotal") for o in p.get("stateOperators", [])]}
                for p in (x if isinstance(x, dict) else json.loads(x.json)
                          for x in q.recentProgress)]
    log.info("spark progress: %s", progress)
    batches = len(progress)
    spark.stop()
    empty = pa.table({c: pa.array([], pa.int64()) for c in ANSWER_COLUMNS})
    return {**timed, "answer": pa.concat_tables(parts) if parts else empty, "visible": seen,
            "detail": {"micro_batches": batches}}
