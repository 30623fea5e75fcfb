"""The same query with Spark's own operators: ``groupBy(window(...), key).agg``
(``session_window`` for sessions), with Slash's output columns and types.
The tests, ``slash bench spark`` and ``run.sh`` compare Slash against it.

>>> # ref = spark_window_aggregate(spark, "events/", time="t", window="tumbling:10s",
>>> #                              key="user", aggs=["count"])
"""
from __future__ import annotations

from typing import Any, Sequence, Union

from slash.errors import InvalidArgument
from slash.spark.batch import make_query
from slash.spark.dataframe import spark_filter
from slash.window import Session, Sliding, Tumbling


def spark_window_aggregate(spark: Any, source: Any, *, time: str, window: str,
                           key: Union[str, Sequence[str]], aggs: Sequence[str] = ("count",),
                           filter: Union[None, str, Sequence[str]] = None) -> Any:
    """Spark's own answer (a lazy DataFrame). ``source``: path(s) or a DataFrame."""
    from pyspark.sql import DataFrame, functions as F
    from pyspark.sql.types import NumericType, TimestampNTZType, TimestampType

    q = make_query(time, window, key, aggs, filter, None)
    df = source if isinstance(source, DataFrame) else spark.read.parquet(
        *([source] if isinstance(source, str) else [str(p) for p in source]))
    for f in q.filters:
        df = df.where(spark_filter(f))
    tt = df.schema[q.time].dataType
    from pyspark.sql.types import DateType

    from pyspark.sql.types import StringType

    is_ts = isinstance(tt, (TimestampType, TimestampNTZType, DateType, StringType))
    ts = F.col(q.time) if isinstance(tt, (TimestampType, TimestampNTZType)) else \
        F.col(q.time).cast("timestamp") if isinstance(tt, (DateType, StringType)) else \
        F.timestamp_millis(F.col(q.time).cast("long"))
    w = q.window
    if isinstance(w, Tumbling):
        wcol = F.window(ts, f"{w.size_ms} milliseconds", f"{w.size_ms} milliseconds",
                        f"{w.offset_ms} milliseconds")
    elif isinstance(w, Sliding):
        wcol = F.window(ts, f"{w.size_ms} milliseconds", f"{w.slide_ms} milliseconds",
                        f"{w.offset_ms} milliseconds")
    elif isinstance(w, Session):
        wcol = F.session_window(ts, f"{w.gap_ms} milliseconds")
    else:  # pragma: no cover - parse_window admits only these
        raise InvalidArgument(f"unknown window {w!r}")
    outs = []
    for a in q.aggregates:
        if a.kind == "count":
            outs.append((F.count(F.lit(1)) if a.column is None else F.count(F.col(a.column)))
                        .cast("long").alias(a.name))
            continue
        col = F.col(a.column)
        is_int = isinstance(df.schema[a.column].dataType, NumericType) and \
            df.schema[a.column].dataType.typeName() in ("byte", "short", "integer", "long")
        if a.kind in ("first", "last"):
            # min_by/max_by(COL, time), ties of time broken by value (nulls
            # first, as Spark orders a struct): Slash's order, made total
            by = F.min_by if a.kind == "first" else F.max_by
            out = by(col, F.struct(F.col(q.time), col))
        elif a.kind == "approx_count_distinct":  # Spark's own HLL++, at the same error
            out = F.approx_count_distinct(col, 0.05 if a.param is None else a.param)
        elif a.kind == "count_distinct":
            out = F.count_distinct(col)
        elif a.kind == "percentile_approx":  # Spark's own (GK summary, default accuracy)
            out = F.percentile_approx(col, a.param)
        else:
            out = {"sum": F.sum, "min": F.min, "max": F.max, "avg": F.avg}[a.kind](col)
        if a.kind in ("approx_count_distinct", "count_distinct"):
            out = out.cast("long")
        elif a.kind in ("avg", "percentile_approx") or not is_int:
            out = out.cast("double")
        elif a.kind in ("sum", "first", "last"):
            out = out.cast("long")
        outs.append(out.alias(a.name))
    g = df.groupBy(wcol.alias("w"), *q.key).agg(*outs)
    # window bounds as Slash gives them: timestamps for a timestamp (or date)
    # time column, int64 ms for an integer one
    bound = (lambda c: c) if is_ts else F.unix_millis
    return g.select(bound(F.col("w.start")).alias("window_start"),
                    bound(F.col("w.end")).alias("window_end"), *q.key, *(a.name for a in q.aggregates))
