"""Session windows close as Spark's ``session_window`` (and Flink) close them:
events of one key at most one gap apart share a session ``[first event,
last event + gap)``, so sessions that touch (one's end is the next event)
merge. The same rows, with many consecutive events exactly one gap apart,
aggregated by ``slash.runner.run`` on 1 and 2 executors, must equal Spark's
``groupBy(session_window(...))`` row for row, and a plain sequential
sessionizer written here."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import pyarrow as pa
import pytest

from slash.query import Query
from slash.runner import run

GAP_MS = 5_000
KEYS = 5
Row = Tuple[int, int, int, int, int]  # window_start, window_end, k, count, sum_v


def make_table(seed: int = 11) -> pa.Table:
    """Five keys; 600 events on a grid of the gap (so many neighbours are
    exactly one gap apart, and some two or more, which splits sessions) and
    300 at random milliseconds over the same span; sorted by time, so a
    bounded run drops nothing as late."""
    rng = np.random.default_rng(seed)
    n_grid, n_rand, span = 600, 300, 300
    t = np.concatenate([GAP_MS * rng.integers(0, span, n_grid),
                        rng.integers(0, span * GAP_MS, n_rand)])
    k = rng.integers(0, KEYS, n_grid + n_rand)
    v = rng.integers(-100, 100, n_grid + n_rand)
    order = np.argsort(t, kind="stable")
    return pa.table({"t": pa.array(t[order], pa.int64()), "k": pa.array(k[order], pa.int64()),
                     "v": pa.array(v[order], pa.int64())})


def sequential_sessions(table: pa.Table, gap: int) -> List[Row]:
    """Per key, events sorted by time; an event more than `gap` after the
    previous one starts a new session [first, last + gap)."""
    by_key: Dict[int, List[Tuple[int, int]]] = {}
    for t, k, v in zip(*(table.column(c).to_pylist() for c in ("t", "k", "v"))):
        by_key.setdefault(k, []).append((t, v))
    out: List[Row] = []
    for k, events in by_key.items():
        events.sort()
        start = last = events[0][0]
        count = total = 0
        for t, v in events:
            if t - last > gap:
                out.append((start, last + gap, k, count, total))
                start, count, total = t, 0, 0
            last = t
            count += 1
            total += v
        out.append((start, last + gap, k, count, total))
    return sorted(out)


def consecutive_differences(table: pa.Table) -> np.ndarray:
    """Per key, in time order: each event's distance to the one before it."""
    t = table.column("t").to_numpy()
    k = table.column("k").to_numpy()
    order = np.lexsort((t, k))
    t, k = t[order], k[order]
    same = k[1:] == k[:-1]
    return (t[1:] - t[:-1])[same]


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return make_table()


@pytest.fixture(scope="module", params=[1, 2], ids=["1-executor", "2-executors"])
def slash_rows(request, table) -> List[Row]:
    q = Query(time="t", window=f"session:{GAP_MS // 1000}s", key="k",
              aggregates=["count", "sum:v"])
    got = run(q, table, executors=request.param)
    return sorted(zip(*(got.column(c).to_pylist()
                        for c in ("window_start", "window_end", "k", "count", "sum_v"))))


@pytest.fixture(scope="module")
def spark_rows(spark, table) -> List[Row]:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    rows = list(zip(*(table.column(c).to_pylist() for c in ("t", "k", "v"))))
    df = (spark.createDataFrame(rows, "t long, k long, v long")
          .withColumn("ts", F.timestamp_millis(F.col("t"))))
    agg = (df.groupBy(F.session_window(F.col("ts"), f"{GAP_MS // 1000} seconds").alias("w"), "k")
           .agg(F.count("*").alias("count"), F.sum("v").alias("sum_v"))
           .select(F.unix_millis(F.col("w.start")), F.unix_millis(F.col("w.end")), "k", "count",
                   "sum_v"))
    return sorted(tuple(int(x) for x in r) for r in agg.collect())


def test_input_has_many_events_exactly_one_gap_apart_and_some_further(table):
    d = consecutive_differences(table)
    assert (d == GAP_MS).sum() >= 100  # ties the old rule split
    assert (d > GAP_MS).sum() >= 50    # real session boundaries


def test_events_one_gap_apart_share_a_session_in_the_sequential_reference(table):
    # the reference itself: its sessions are fewer than under a "< gap" rule
    rows = sequential_sessions(table, GAP_MS)
    strict = sequential_sessions(table, GAP_MS - 1)  # integer ms: "< gap" == "<= gap - 1"
    assert sum(r[3] for r in rows) == table.num_rows
    assert len(rows) < len(strict)


def test_sessions_equal_the_sequential_sessionizer(slash_rows, table):
    assert slash_rows == sequential_sessions(table, GAP_MS)


@pytest.mark.slow
def test_sessions_equal_spark_session_window(slash_rows, spark_rows):
    assert len(spark_rows) > 50
    assert slash_rows == spark_rows


@pytest.mark.slow
def test_spark_session_window_equals_the_sequential_sessionizer(spark_rows, table):
    assert spark_rows == sequential_sessions(table, GAP_MS)
