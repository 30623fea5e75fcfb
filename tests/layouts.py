"""Realistic data layouts and independent references for the correctness matrix.

One logical dataset (:func:`make_events`: a seeded table of events with a time
column ``ts``, an int64 key ``k``, a string key ``s``, an int64 value ``v``
and a float64 value ``x``, optionally with nulls) is written the ways users
have it: one time-ordered file, part files that each span the whole time range
(a parallel writer), rows shuffled within files, Hive ``day=`` directories,
files written by Spark itself (micros and INT96 timestamps), by pandas (ns
timestamps), and files of very unequal sizes with an empty file and a
``_SUCCESS`` marker. Every writer returns a :class:`Layout`: the path(s) to
hand to the system under test and the exact Table of what was written, read
back from the files, so a reference reads the same rows.

The references compute the same windowed aggregation independently of Slash:
:func:`duckdb_window_agg` in DuckDB SQL and :func:`spark_window_agg` with
Spark's own ``groupBy(F.window(...))`` / ``F.session_window``. Window specs
are parsed here, not by Slash. :func:`assert_same_rows` compares two results
row for row after normalising window bounds to int64 nanoseconds since the
epoch (nulls included, floats to 1e-9 relative).

Conventions (those of Spark and SQL): windows aligned at the Unix epoch,
[start, end); a null key is a group of its own; sum/min/max/avg skip nulls
(all-null gives null); ``count`` counts rows, ``count:COL`` non-null values;
a null time is in no window; sessions: an event at most one gap after the
previous event of its key joins its session, which ends one gap after its last
event.
"""
from __future__ import annotations

import datetime as dt
import decimal
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: 2023-11-14 22:13:20 UTC: realistic epoch times, far from 0
EPOCH0_MS = 1_700_000_000_000
DAY_MS = 86_400_000
NS_PER = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}

TIME_TYPES = ("int64", "timestamp[ms]", "timestamp[us]", "timestamp[ns]")


# -- the logical dataset ------------------------------------------------------------------------
def make_events(rows: int = 3000, keys: int = 12, span_ms: int = 600_000, null_fraction: float = 0.0,
                seed: int = 1, time_type: str = "int64", tz: Optional[str] = None,
                null_keys: bool = True, null_values: bool = True, null_times: bool = True,
                start_ms: int = EPOCH0_MS) -> pa.Table:
    """``rows`` events over ``[start_ms, start_ms + span_ms)``, sorted by time.

    Times are uniform with bursts (about a tenth of the events repeat an
    earlier instant, so ties occur) and, for timestamp[us|ns], sub-millisecond
    parts. ``k``: int64 in [0, keys) with a skewed (zipf-like) popularity;
    ``s``: ``"user-N"`` strings over ``keys // 2 + 1`` names; ``v``: int64 in
    [-1000, 1000]; ``x``: float64 normal. With ``null_fraction`` > 0 that
    share of each of k/s (``null_keys``), v/x (``null_values``) and ts
    (``null_times``) is null, independently. ``time_type``: one of
    :data:`TIME_TYPES` (int64 is epoch milliseconds); ``tz`` applies to
    timestamps.
    """
    rng = np.random.default_rng(seed)
    t_ms = start_ms + rng.integers(0, span_ms, rows)
    dup = rng.random(rows) < 0.1
    t_ms[dup] = t_ms[rng.integers(0, rows, int(dup.sum()))]
    t_ms.sort()
    weights = 1.0 / np.arange(1, keys + 1) ** 1.1
    k = rng.choice(keys, rows, p=weights / weights.sum()).astype(np.int64)
    s = np.array([f"user-{i}" for i in rng.integers(0, keys // 2 + 1, rows)], dtype=object)
    v = rng.integers(-1000, 1001, rows).astype(np.int64)
    x = rng.normal(50.0, 20.0, rows)

    def mask(on: bool) -> Optional[np.ndarray]:
        if not on or null_fraction <= 0:
            return None
        return rng.random(rows) < null_fraction

    if time_type == "int64":
        ts = pa.array(t_ms, pa.int64(), mask=mask(null_times))
    else:
        m = re.fullmatch(r"timestamp\[(s|ms|us|ns)\]", time_type)
        if not m:
            raise ValueError(f"time_type must be one of {TIME_TYPES}, got {time_type!r}")
        unit = m.group(1)
        per_ms = NS_PER["ms"] // NS_PER[unit] if unit != "s" else None
        if unit == "s":
            raw = t_ms // 1000
        else:
            raw = t_ms * per_ms + (rng.integers(0, per_ms, rows) if per_ms > 1 else 0)
            raw.sort()
        ts = pa.array(raw, pa.timestamp(unit, tz), mask=mask(null_times))
    return pa.table({
        "ts": ts,
        "k": pa.array(k, pa.int64(), mask=mask(null_keys)),
        "s": pa.array(s, pa.string(), mask=mask(null_keys)),
        "v": pa.array(v, pa.int64(), mask=mask(null_values)),
        "x": pa.array(x, pa.float64(), mask=mask(null_values)),
    })


# -- layouts ------------------------------------------------------------------------------------
@dataclass
class Layout:
    """What a writer produced: ``path`` (a file, a directory or a list of
    files, as a user would pass it) and ``table``, the rows written, read
    back from the files."""

    name: str
    path: Union[str, List[str]]
    table: pa.Table


def _time_order(table: pa.Table) -> pa.Table:
    return table.sort_by([("ts", "ascending")]) if table.num_rows else table


def _row_group(rows: int, groups: int) -> int:
    return max(1, -(-rows // groups))


def _split_random(table: pa.Table, parts: int, rng: np.random.Generator,
                  p: Optional[Sequence[float]] = None) -> List[pa.Table]:
    """Each row to a random part: every part spans the whole time range."""
    owner = rng.choice(parts, table.num_rows, p=p)
    return [table.take(pa.array(np.flatnonzero(owner == i))) for i in range(parts)]


def write_one_file(table: pa.Table, d: str, row_groups: int = 6) -> Layout:
    """One time-ordered file of several row groups."""
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "events.parquet")
    pq.write_table(_time_order(table), path, row_group_size=_row_group(table.num_rows, row_groups))
    return Layout("one_file", path, pq.read_table(path))


def write_spanning(table: pa.Table, d: str, parts: int = 4, row_groups: int = 3,
                   seed: int = 7) -> Layout:
    """``parts`` files, each time-ordered and each covering the whole time
    range, as N parallel writers produce them (a directory)."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, part in enumerate(_split_random(table, parts, rng)):
        part = _time_order(part)
        pq.write_table(part, os.path.join(d, f"part-{i:05d}.parquet"),
                       row_group_size=_row_group(part.num_rows, row_groups))
    return Layout("spanning", d, _read_dir(d))


def write_shuffled(table: pa.Table, d: str, parts: int = 3, row_groups: int = 4,
                   seed: int = 11) -> Layout:
    """``parts`` files spanning the time range with rows in random order
    inside each file (so every row group's time range is the whole range)."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i, part in enumerate(_split_random(table, parts, rng)):
        part = part.take(pa.array(rng.permutation(part.num_rows)))
        path = os.path.join(d, f"shuffled-{i}.parquet")
        pq.write_table(part, path, row_group_size=_row_group(part.num_rows, row_groups))
        paths.append(path)
    return Layout("shuffled", paths, pa.concat_tables([pq.read_table(p) for p in paths]))


def _day_of(table: pa.Table) -> List[Optional[str]]:
    ts = table.column("ts")
    if pa.types.is_timestamp(ts.type):
        ns = pc.multiply(ts.cast(pa.int64()), NS_PER[ts.type.unit])
    else:
        ns = pc.multiply(ts, NS_PER["ms"])
    out = []
    for n in ns.to_pylist():
        out.append(None if n is None else
                   (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=n // 1000)).strftime("%Y-%m-%d"))
    return out


HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def write_hive(table: pa.Table, d: str, parts_per_day: int = 2, seed: int = 13) -> Layout:
    """``day=YYYY-MM-DD/part-N.parquet`` (UTC days of ``ts``; rows with a null
    time under ``day=__HIVE_DEFAULT_PARTITION__``, as Spark and Hive write
    them), each day's rows spread over ``parts_per_day`` files that span the
    day. The returned table has the partition column ``day`` (string, null
    for the default partition) after the file columns."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    days = np.array([HIVE_NULL if x is None else x for x in _day_of(table)], dtype=object)
    pieces = []
    for day in sorted(set(days)):
        rows = table.take(pa.array(np.flatnonzero(days == day)))
        sub = os.path.join(d, f"day={day}")
        os.makedirs(sub, exist_ok=True)
        for i, part in enumerate(_split_random(rows, parts_per_day, rng)):
            if not part.num_rows:
                continue
            part = _time_order(part)
            pq.write_table(part, os.path.join(sub, f"part-{i:05d}.parquet"),
                           row_group_size=_row_group(part.num_rows, 2))
            read = pq.read_table(os.path.join(sub, f"part-{i:05d}.parquet"))
            pieces.append(read.append_column("day", pa.array([None if day == HIVE_NULL else day]
                                                             * read.num_rows, pa.string())))
    return Layout("hive", d, pa.concat_tables(pieces))


def write_pandas(table: pa.Table, d: str) -> Layout:
    """``DataFrame.to_parquet`` as a pandas user writes it: the time as
    pandas datetime64[ns] (an int64 ms time is converted to it), nullable
    integer columns as pandas' Int64, strings as objects."""
    import pandas as pd

    os.makedirs(d, exist_ok=True)
    df = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    t = table.column("ts")
    if not pa.types.is_timestamp(t.type):
        df["ts"] = pd.to_datetime(t.to_pandas(), unit="ms").astype("datetime64[ns]")
    else:
        df["ts"] = t.to_pandas().astype("datetime64[ns]" if t.type.tz is None
                                        else f"datetime64[ns, {t.type.tz}]")
    path = os.path.join(d, "events-pandas.parquet")
    df.to_parquet(path, index=False)
    return Layout("pandas", path, pq.read_table(path))


def write_unequal(table: pa.Table, d: str, seed: int = 17) -> Layout:
    """Files of very different sizes (about 70 %, 22 %, 7 % and 1 % of the
    rows, each spanning the time range), an empty Parquet file with the same
    schema, and an empty ``_SUCCESS`` marker (a directory)."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, part in enumerate(_split_random(table, 4, rng, p=[0.70, 0.22, 0.07, 0.01])):
        part = _time_order(part)
        pq.write_table(part, os.path.join(d, f"part-{i:05d}.parquet"),
                       row_group_size=_row_group(part.num_rows, 3))
    pq.write_table(table.schema.empty_table(), os.path.join(d, "part-00004.parquet"))
    open(os.path.join(d, "_SUCCESS"), "w").close()
    return Layout("unequal", d, _read_dir(d))


def write_spark(spark: Any, table: pa.Table, d: str, partitions: int = 3,
                int96: bool = False) -> Layout:
    """Spark writes the table itself: ``df.repartition(n).write.parquet``
    (round-robin, so each part file spans the time range; a ``_SUCCESS``
    file and ``.crc`` files beside). Timestamps as Spark's default
    TIMESTAMP_MICROS, or with ``int96`` as INT96 (Spark's TimestampType, an
    instant: the returned table has them as timestamp[us, UTC], as Slash and
    Spark read them). A timestamp[ns] time loses its sub-microsecond part
    (Spark keeps microseconds); the returned table is what Spark wrote."""
    df = spark.createDataFrame(table)
    key = "spark.sql.parquet.outputTimestampType"
    old = spark.conf.get(key)
    spark.conf.set(key, "INT96" if int96 else "TIMESTAMP_MICROS")
    try:
        df.repartition(partitions).write.mode("overwrite").parquet(d)
    finally:
        spark.conf.set(key, old)
    return Layout("spark_int96" if int96 else "spark_micros", d, _read_dir(d))


def _read_dir(d: str) -> pa.Table:
    files = sorted(f for f in os.listdir(d) if f.endswith(".parquet"))
    return pa.concat_tables([_read_instants(os.path.join(d, f)) for f in files])


def _read_instants(path: str) -> pa.Table:
    """A Parquet file with each INT96 column as timestamp[us, UTC]: an INT96
    is Spark's TimestampType, an instant (pyarrow alone gives a wall clock in
    nanoseconds, which wraps outside 1677-2262)."""
    f = pq.ParquetFile(path)
    int96 = {f.metadata.schema.column(j).path for j in range(f.metadata.num_columns)
             if f.metadata.schema.column(j).physical_type == "INT96"}
    t = pq.read_table(path, coerce_int96_timestamp_unit="us")
    for i, name in enumerate(t.column_names):
        if name in int96:
            t = t.set_column(i, name, t.column(i).cast(pa.timestamp("us", "UTC")))
    return t


# -- window specs, parsed independently of Slash ------------------------------------------------
_UNIT_MS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "second": 1000, "seconds": 1000,
            "m": 60_000, "minute": 60_000, "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000,
            "hours": 3_600_000, "d": DAY_MS, "day": DAY_MS, "days": DAY_MS}


def duration_ms(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]+)\s*", text)
    if not m or m.group(2) not in _UNIT_MS:
        raise ValueError(f"not a duration: {text!r}")
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_window(spec: str) -> Tuple[str, int, int]:
    """``"tumbling:10s"`` -> ("tumbling", 10000, 10000); ``"sliding:7d/1d"`` ->
    ("sliding", size, slide); ``"session:5 seconds"`` -> ("session", gap, 0)."""
    kind, _, rest = spec.partition(":")
    if kind == "tumbling":
        size = duration_ms(rest)
        return kind, size, size
    if kind == "sliding":
        size, _, slide = rest.partition("/")
        return kind, duration_ms(size), duration_ms(slide)
    if kind == "session":
        return kind, duration_ms(rest), 0
    raise ValueError(f"not a window: {spec!r}")


def parse_agg(spec: str) -> Tuple[str, Optional[str], str]:
    """``"count"`` -> ("count", None, "count"); ``"sum:v"`` -> ("sum", "v", "sum_v")."""
    if spec == "count":
        return "count", None, "count"
    fn, _, col = spec.partition(":")
    return fn, col, f"{fn}_{col}"


# -- the DuckDB reference -----------------------------------------------------------------------
def _time_ns_per_unit(t: pa.DataType, time_unit: Optional[str]) -> int:
    if pa.types.is_timestamp(t):
        return NS_PER[t.unit]
    if pa.types.is_date32(t):
        return 86_400 * NS_PER["s"]
    if pa.types.is_date64(t):
        return NS_PER["ms"]
    return NS_PER[time_unit or "ms"]


def _as_table(table_or_path: Any) -> pa.Table:
    if isinstance(table_or_path, pa.Table):
        return table_or_path
    if isinstance(table_or_path, Layout):
        return table_or_path.table
    if isinstance(table_or_path, (list, tuple)):
        return pa.concat_tables([pq.read_table(p) for p in table_or_path])
    if os.path.isdir(table_or_path):
        return _read_dir(table_or_path)
    return pq.read_table(table_or_path)


def duckdb_window_agg(table_or_path: Any, time: str, window: str, keys: Sequence[str],
                      aggs: Sequence[str], time_unit: Optional[str] = None) -> pa.Table:
    """The windowed aggregation in DuckDB SQL. Returns ``window_start``,
    ``window_end`` (int64 ns since the epoch), the key columns (as DuckDB
    returns them), then one column per aggregate, sorted.

    The time column becomes an integer in its own unit (``__t``; an integer
    column is in ``time_unit``, default ms), windows are computed on it by
    floor arithmetic (tumbling, sliding) or with ``lag``/``sum`` window
    functions per key (sessions: a new session starts where the previous
    event of the key is more than one gap earlier), then scaled to ns.
    """
    import duckdb

    table = _as_table(table_or_path)
    keys = list(keys)
    ttype = table.schema.field(time).type
    per = _time_ns_per_unit(ttype, time_unit)
    if pa.types.is_timestamp(ttype):
        traw = table.column(time).cast(pa.timestamp(ttype.unit)).cast(pa.int64())
    elif pa.types.is_date32(ttype):
        traw = table.column(time).cast(pa.int32()).cast(pa.int64())
    elif pa.types.is_date64(ttype):
        traw = table.column(time).cast(pa.int64())
    else:
        traw = table.column(time).cast(pa.int64())
    kind, size_ms, slide_ms = parse_window(window)
    to_unit = NS_PER["ms"] / per  # window lengths in the time's unit
    size, slide = size_ms * to_unit, slide_ms * to_unit
    if size != int(size) or slide != int(slide):
        raise ValueError(f"window {window} is not a whole number of the time column's unit")
    size, slide = int(size), int(slide)
    cols = {"__t": traw}
    for k in keys:
        c = table.column(k)
        if pa.types.is_dictionary(c.type):
            c = c.cast(c.type.value_type)
        cols[k] = c
    for a in aggs:
        fn, col, _ = parse_agg(a)
        if col is not None:
            cols[col] = table.column(col)
    src = pa.table(cols)  # noqa: F841 (read by DuckDB by name)
    q = lambda c: '"' + c.replace('"', '""') + '"'  # noqa: E731
    kq = ", ".join(q(k) for k in keys)
    sel = []
    for a in aggs:
        fn, col, name = parse_agg(a)
        if fn == "count":
            e = "count(*)" if col is None else f"count({q(col)})"
        elif fn == "avg":
            e = f"avg({q(col)}::DOUBLE)"
        elif fn == "sum":
            t = table.schema.field(col).type
            if pa.types.is_integer(t):
                e = f"sum({q(col)})::BIGINT"
            elif pa.types.is_floating(t):
                e = f"sum({q(col)}::DOUBLE)"
            else:
                e = f"sum({q(col)})"
        else:
            e = f"{fn}({q(col)})"
        sel.append(f"{e} AS {q(name)}")
    if kind == "tumbling":
        body = (f"SELECT __t - (((__t % {size}) + {size}) % {size}) AS ws, "
                f"__t - (((__t % {size}) + {size}) % {size}) + {size} AS we, * FROM src "
                f"WHERE __t IS NOT NULL")
    elif kind == "sliding":
        n = -(-size // slide)
        body = (f"SELECT ws, ws + {size} AS we, * EXCLUDE (last, j) FROM ("
                f"SELECT __t - (((__t % {slide}) + {slide}) % {slide}) - j * {slide} AS ws, * FROM "
                f"(SELECT __t - (((__t % {slide}) + {slide}) % {slide}) AS last, * FROM src "
                f"WHERE __t IS NOT NULL), range(0, {n}) AS r(j)) WHERE ws > __t - {size}")
    else:
        part = f"PARTITION BY {kq}" if keys else ""
        body = (f"SELECT min(__t) OVER (PARTITION BY {kq + ', ' if keys else ''}sid) AS ws, "
                f"max(__t) OVER (PARTITION BY {kq + ', ' if keys else ''}sid) + {size} AS we, * "
                f"FROM (SELECT sum(CASE WHEN prev IS NULL OR __t - prev > {size} THEN 1 ELSE 0 END) "
                f"OVER ({part} ORDER BY __t ROWS UNBOUNDED PRECEDING) AS sid, * FROM "
                f"(SELECT lag(__t) OVER ({part} ORDER BY __t) AS prev, * FROM src "
                f"WHERE __t IS NOT NULL))")
    sql = (f"SELECT ws * {per} AS window_start, we * {per} AS window_end, {kq}, {', '.join(sel)} "
           f"FROM ({body}) GROUP BY ws, we, {kq} ORDER BY ws, we, {kq}")
    con = duckdb.connect()
    try:
        con.register("src", src)
        out = con.sql(sql).to_arrow_table()
    finally:
        con.close()
    return out


def duckdb_window_join(left: pa.Table, right: pa.Table, time: str, window: str,
                       on: Sequence[str]) -> pa.Table:
    """A tumbling-window inner equi-join in DuckDB SQL: every pair of a left
    and a right row with equal keys (SQL's ``=``: a null key matches nothing)
    whose times (int64 ms) fall in the same window. Columns:
    ``window_start``, ``window_end`` (int64 ns), the keys, ``left_COL`` for
    each other left column (the time included), ``right_COL`` likewise."""
    import duckdb

    kind, size, _ = parse_window(window)
    if kind != "tumbling":
        raise ValueError("duckdb_window_join: tumbling windows only")
    q = lambda c: '"' + c.replace('"', '""') + '"'  # noqa: E731
    lcols = [c for c in left.column_names if c not in on]  # the time is payload too
    rcols = [c for c in right.column_names if c not in on]
    ws = f"(l.{q(time)} - ((l.{q(time)} % {size}) + {size}) % {size})"
    sel = [f"{ws} * 1000000 AS window_start", f"({ws} + {size}) * 1000000 AS window_end",
           *(f"l.{q(k)}" for k in on), *(f"l.{q(c)} AS {q('left_' + c)}" for c in lcols),
           *(f"r.{q(c)} AS {q('right_' + c)}" for c in rcols)]
    cond = " AND ".join([f"l.{q(k)} = r.{q(k)}" for k in on] +
                        [f"{ws} = (r.{q(time)} - ((r.{q(time)} % {size}) + {size}) % {size})"])
    con = duckdb.connect()
    try:
        con.register("l", left)
        con.register("r", right)
        return con.sql(f"SELECT {', '.join(sel)} FROM l JOIN r ON {cond}").to_arrow_table()
    finally:
        con.close()


# -- the Spark reference ------------------------------------------------------------------------
def spark_window_agg(spark: Any, source: Any, time: str, window: str, keys: Sequence[str],
                     aggs: Sequence[str], time_unit: Optional[str] = None) -> pa.Table:
    """Spark's own answer: ``groupBy(F.window(ts, size[, slide]), *keys)`` or
    ``F.session_window(ts, gap)``; ``source`` a path, list of paths or a Spark
    DataFrame. An integer time column is read as epoch ``time_unit`` (ms by
    default). Returns window bounds as int64 ns (from Spark's microseconds)."""
    from pyspark.sql import DataFrame, functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    if isinstance(source, DataFrame):
        df = source
    else:
        paths = [source] if isinstance(source, str) else [str(p) for p in source]
        df = spark.read.parquet(*paths)
    tt = df.schema[time].dataType
    if isinstance(tt, (TimestampType, TimestampNTZType)):
        ts = F.col(time)
    else:
        conv = {"s": F.timestamp_seconds, "ms": F.timestamp_millis, "us": F.timestamp_micros}
        ts = conv[time_unit or "ms"](F.col(time).cast("long"))
    kind, size, slide = parse_window(window)
    if kind == "session":
        w = F.session_window(ts, f"{size} milliseconds")
    elif kind == "sliding":
        w = F.window(ts, f"{size} milliseconds", f"{slide} milliseconds")
    else:
        w = F.window(ts, f"{size} milliseconds")
    outs = []
    for a in aggs:
        fn, col, name = parse_agg(a)
        if fn == "count":
            outs.append((F.count(F.lit(1)) if col is None else F.count(F.col(col))).alias(name))
        elif fn == "avg":
            outs.append(F.avg(F.col(col)).cast("double").alias(name))
        else:
            outs.append({"sum": F.sum, "min": F.min, "max": F.max}[fn](F.col(col)).alias(name))
    g = df.where(ts.isNotNull()).groupBy(w.alias("w"), *keys).agg(*outs)
    res = g.select((F.unix_micros(F.col("w.start")) * 1000).alias("window_start"),
                   (F.unix_micros(F.col("w.end")) * 1000).alias("window_end"), *keys,
                   *(parse_agg(a)[2] for a in aggs))
    return res.toArrow()


# -- comparing results --------------------------------------------------------------------------
def bounds_ns(col: pa.ChunkedArray, int_unit: str = "ms") -> List[Optional[int]]:
    """Window bounds as int64 ns: timestamps by their unit, integers as
    ``int_unit`` (Slash's integer bounds are ms)."""
    t = col.type
    if pa.types.is_timestamp(t):
        return [None if v is None else v * NS_PER[t.unit]
                for v in col.cast(pa.timestamp(t.unit)).cast(pa.int64()).to_pylist()]
    return [None if v is None else v * NS_PER[int_unit] for v in col.to_pylist()]


def _plain(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return ("ts", (v - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1))
    if isinstance(v, dt.date):
        return ("date", v.toordinal())
    if isinstance(v, decimal.Decimal):
        return ("dec", v)
    if isinstance(v, bool):
        return ("b", v)
    return v


def _rows(t: pa.Table, int_unit: str) -> List[tuple]:
    names = t.column_names
    cols = []
    for n in names:
        c = t.column(n)
        if n in ("window_start", "window_end"):
            cols.append(bounds_ns(c, int_unit))
            continue
        if pa.types.is_dictionary(c.type):
            c = c.cast(c.type.value_type)
        if pa.types.is_timestamp(c.type) and c.type.tz is not None:
            c = c.cast(pa.timestamp(c.type.unit))
        cols.append([_plain(v) for v in c.to_pylist()])
    return list(zip(*cols))


def _sort_key(row: tuple) -> tuple:
    # None first, then by value; mixed types compare by their repr's type tag
    return tuple((v is not None, type(v).__name__ if not isinstance(v, (int, float)) else "num",
                  v if v is not None else 0) for v in row)


def _equal(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, tuple) or isinstance(b, tuple):
            return False
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return fa == fb or abs(fa - fb) <= 1e-9 * max(abs(fa), abs(fb))
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == "dec" and b[0] == "dec":
        return a[1] == b[1]
    return a == b


def assert_same_rows(ours: pa.Table, ref: pa.Table, ours_int_unit: str = "ms",
                     ref_int_unit: str = "ns", what: str = "") -> None:
    """Row-for-row equality of two window aggregation results, whatever their
    row order: same column names, window bounds compared as int64 ns (an
    integer bound is in ``*_int_unit``; the references return ns), nulls
    equal only to nulls, floats within 1e-9 relative. The first differing
    rows are named in the failure."""
    assert ours.column_names == ref.column_names, \
        f"{what}: columns {ours.column_names} != reference {ref.column_names}"
    a = sorted(_rows(ours, ours_int_unit), key=_sort_key)
    b = sorted(_rows(ref, ref_int_unit), key=_sort_key)
    diffs = []
    for i, (ra, rb) in enumerate(zip(a, b)):
        if len(ra) != len(rb) or not all(_equal(x, y) for x, y in zip(ra, rb)):
            diffs.append((i, ra, rb))
            if len(diffs) >= 5:
                break
    msg = "\n".join(f"  row {i}: ours {ra}\n          ref  {rb}" for i, ra, rb in diffs)
    assert len(a) == len(b) and not diffs, \
        f"{what}: {len(a)} rows vs {len(b)} in the reference; first differences:\n{msg}"


def expected_bound_type(time_type: pa.DataType) -> pa.DataType:
    """The type of window_start/window_end for a time column of this type."""
    if pa.types.is_timestamp(time_type):
        return time_type
    if pa.types.is_date(time_type):  # midnight in the query's time zone: an instant
        return pa.timestamp("ms", "UTC")
    return pa.int64()


def expected_types(schema: pa.Schema, time: str, keys: Sequence[str],
                   aggs: Sequence[str]) -> Dict[str, pa.DataType]:
    """Output column -> Arrow type, as the API promises."""
    bt = expected_bound_type(schema.field(time).type)
    out: Dict[str, pa.DataType] = {"window_start": bt, "window_end": bt}
    for k in keys:
        out[k] = schema.field(k).type
    for a in aggs:
        fn, col, name = parse_agg(a)
        if fn == "count":
            out[name] = pa.int64()
            continue
        t = schema.field(col).type
        if fn == "avg":
            out[name] = pa.float64()
        elif fn == "sum":
            out[name] = (pa.int64() if pa.types.is_integer(t) else
                         pa.float64() if pa.types.is_floating(t) else t)
        else:
            out[name] = t
    return out


def assert_output_types(ours: pa.Table, schema: pa.Schema, time: str, keys: Sequence[str],
                        aggs: Sequence[str]) -> None:
    want = expected_types(schema, time, keys, aggs)
    assert ours.column_names == list(want), f"columns {ours.column_names} != {list(want)}"
    for name, t in want.items():
        got = ours.schema.field(name).type
        if pa.types.is_decimal(t) and name.startswith("sum_"):
            assert pa.types.is_decimal(got) and got.scale == t.scale, f"{name}: {got}, want decimal"
            continue
        assert got == t, f"output column {name!r} is {got}, the API promises {t}"


def assert_sorted_by_window_then_key(ours: pa.Table, keys: Sequence[str]) -> None:
    """Rows come sorted by window_start, then by the keys (checked among the
    rows of one window_start whose keys are all non-null: where nulls sort
    is not promised)."""
    starts = bounds_ns(ours.column("window_start"))
    assert starts == sorted(starts), "rows are not sorted by window_start"
    cols = []
    for k in keys:
        c = ours.column(k)
        if pa.types.is_dictionary(c.type):
            c = c.cast(c.type.value_type)
        cols.append([_plain(v) for v in c.to_pylist()])
    prev: Dict[int, tuple] = {}
    for i, start in enumerate(starts):
        key = tuple(col[i] for col in cols)
        if any(v is None for v in key):
            continue
        if start in prev:
            assert prev[start] <= key, f"rows of window {start} ns are not sorted by {list(keys)}: " \
                                       f"{prev[start]} before {key}"
        prev[start] = key
