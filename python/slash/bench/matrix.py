"""``slash bench matrix``: Slash against Spark's own query and DuckDB on the
queries and data users have, one cell per (query, key count, key type, layout).

Queries (``--queries``), all over an int64 epoch-millisecond time ``ts``:

* ``count``: a count per key per 10 s tumbling window;
* ``sum_avg``: ``sum(v)`` and ``avg(v)`` per key per 10 s tumbling window;
* ``filter_min_max``: ``min(v)``, ``max(v)`` and ``count`` of the records
  with ``v >= 0``, per key per 10 s tumbling window;
* ``sliding``: a count per key per 10 s window sliding by 2 s;
* ``session``: a count per key per session (gap 10 s).

Keys (``--keys``): 100, 100 k and 10 M distinct values drawn uniformly (with
fewer rows than keys, most keys of the 10 M space appear once); key type
(``--key-types``): ``int64`` (column ``k``) or ``string`` (column ``s``,
``"key-N"``). Layouts (``--layouts``): ``ordered``, one time-ordered file;
``spanning``, ``SPANNING_FILES`` part files that each span the whole time
range (rows dealt at random, as parallel writers leave them); ``nullable``,
the spanning files with ``NULL_FRACTION`` of the keys, values and times
null. The rows span ``SPAN_MS`` of event time whatever ``--rows`` is.

Each cell runs three sides on the same files, taking turns (``--warmup``
untimed rounds before the first cell of each query and key type, as the JIT
and Spark's generated code carry over to later cells of that shape; then
``--repeat`` timed rounds per cell; the best time per side kept):

* Slash: :func:`slash.runner.run` with 2 executors (an Arrow table); with
  ``--slash spark``, :func:`slash.spark.window_aggregate` in the same Spark
  application instead, read back with ``toArrow()``;
* Spark: ``groupBy(window(...))`` / ``session_window`` on local[2], read
  from the files and materialised with ``toArrow()``;
* DuckDB: the same aggregation in SQL over ``read_parquet``, 2 threads,
  materialised as an Arrow table.

The three answers are compared exactly (:func:`compare`: nulls as SQL, a
null key is a group, floats to 1e-9 relative); a cell whose answers differ
is reported as ``DIFFER`` with the first differing row, and the run raises
:class:`~slash.errors.SystemFailure` after writing its outputs. Ratios are
``spark_seconds / slash_seconds`` and ``duckdb_seconds / slash_seconds``
(above 1: Slash is faster). The speed targets are checked per cell:
Spark/Slash >= 2 with 100 k keys or more, >= 1.5 at 100 keys; DuckDB/Slash
>= 1.

Writes ``matrix.json``, ``matrix.md`` (a Markdown table) and ``matrix.png``
(heat maps of both ratios) into ``--out`` (default ``bench/results``).
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from slash import runner
from slash.bench._progress import Progress
from slash.errors import InvalidArgument, SystemFailure
from slash.query import Query
from slash.spark import session, window_aggregate

log = logging.getLogger(__name__)

NAME = "matrix"
HELP = ("queries x keys x key type x layout: Slash (runner, 2 executors) against Spark's own "
        "query (local[2]) and DuckDB (2 threads), answers checked")


@dataclass(frozen=True)
class QuerySpec:
    """One query of the matrix, as each side spells it."""

    name: str
    window: str                      #: Slash's window spec
    aggs: Tuple[str, ...]            #: Slash's aggregate specs
    filter: Optional[str] = None     #: ``"v >= 0"``: the same text in Slash, Spark SQL and DuckDB
    size_ms: int = 10_000
    slide_ms: int = 10_000           #: sliding windows only
    kind: str = "tumbling"           #: tumbling, sliding or session (gap = size_ms)


QUERIES: Dict[str, QuerySpec] = {
    "count": QuerySpec("count", "tumbling:10s", ("count",)),
    "sum_avg": QuerySpec("sum_avg", "tumbling:10s", ("sum:v", "avg:v")),
    "filter_min_max": QuerySpec("filter_min_max", "tumbling:10s", ("min:v", "max:v", "count"),
                                filter="v >= 0"),
    "sliding": QuerySpec("sliding", "sliding:10s/2s", ("count",), slide_ms=2_000, kind="sliding"),
    "session": QuerySpec("session", "session:10s", ("count",), kind="session"),
}
KEY_COUNTS = (100, 100_000, 10_000_000)
KEY_TYPES = {"int64": "k", "string": "s"}
LAYOUTS = ("ordered", "spanning", "nullable")
#: part files of the spanning and nullable layouts
SPANNING_FILES = 2
#: the share of keys, values and times that are null in the nullable layout
NULL_FRACTION = 0.05
#: event time covered by the rows: 60 tumbling windows of 10 s
SPAN_MS = 600_000
EPOCH0_MS = 1_700_000_000_000
DEFAULT_ROWS = 2_000_000
#: how the Slash side runs (``--slash``)
SLASH_SIDES = ("runner", "spark")
QUICK_ROWS = 4_000
#: the issue's targets: Spark/Slash at >= 100 k keys, at 100 keys; DuckDB/Slash everywhere
TARGET_SPARK_MANY, TARGET_SPARK_FEW, TARGET_DUCKDB = 2.0, 1.5, 1.0


def _agg_parts(spec: str) -> Tuple[str, Optional[str], str]:
    """``"sum:v"`` -> (``sum``, ``v``, ``sum_v``); ``"count"`` -> (``count``, None, ``count``)."""
    fn, _, col = spec.partition(":")
    return fn, (col or None), (f"{fn}_{col}" if col else fn)


# -- data ---------------------------------------------------------------------------------------
def data_name(rows: int, keys: int, layout: str, seed: int) -> str:
    """The file (ordered) or directory name of one dataset; every parameter
    that changes the rows is in it, so a kept ``--data-dir`` is reused safely
    (``v1``: the generator's version)."""
    base = f"matrix-v1-{rows}-{keys}-{seed}-{layout}"
    return f"{base}.parquet" if layout == "ordered" else base


def make_data(path: str, rows: int, keys: int, layout: str, seed: int = 1,
              row_group: int = 1 << 20) -> str:
    """Writes ``rows`` events (``ts`` int64 ms rising over :data:`SPAN_MS`,
    ``k`` int64 uniform in [0, keys), ``s`` = ``"key-" || k``, ``v`` int64 in
    [-1000, 1000]) at ``path`` in ``layout``: one time-ordered file, or a
    directory of part files that each span the whole time range (nullable:
    with nulls). Generated a row group at a time; written under a temporary
    name renamed into place at the end."""
    if layout not in LAYOUTS:
        raise InvalidArgument(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    rng = np.random.default_rng(seed)
    tmp = f"{path}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True) if os.path.isdir(tmp) else None
    files = 1 if layout == "ordered" else SPANNING_FILES
    if files > 1:
        os.makedirs(tmp)
    schema = pa.schema([("ts", pa.int64()), ("k", pa.int64()), ("s", pa.string()), ("v", pa.int64())])
    names = [tmp] if files == 1 else [os.path.join(tmp, f"part-{i:05d}.parquet") for i in range(files)]
    writers = [pq.ParquetWriter(n, schema, compression="snappy") for n in names]
    chunks = max(1, -(-rows // row_group))
    try:
        for c in range(chunks):
            n = min(row_group, rows - c * row_group)
            lo = EPOCH0_MS + SPAN_MS * c // chunks
            hi = EPOCH0_MS + SPAN_MS * (c + 1) // chunks
            ts = np.sort(rng.integers(lo, max(hi, lo + 1), n))
            k = rng.integers(0, keys, n)
            v = rng.integers(-1000, 1001, n)
            s = pc.binary_join_element_wise("key-", pa.array(k).cast(pa.string()), "")

            def nulls() -> Optional[Any]:
                return rng.random(n) < NULL_FRACTION if layout == "nullable" else None

            batch = pa.table({"ts": pa.array(ts, pa.int64(), mask=nulls()),
                              "k": pa.array(k, pa.int64(), mask=nulls()),
                              "s": pc.if_else(pa.array(nulls()), None, s) if layout == "nullable" else s,
                              "v": pa.array(v, pa.int64(), mask=nulls())}, schema=schema)
            if files == 1:
                writers[0].write_table(batch, row_group_size=row_group)
                continue
            owner = rng.integers(0, files, n)
            for i, w in enumerate(writers):
                part = batch.filter(pa.array(owner == i))
                if part.num_rows:
                    w.write_table(part, row_group_size=row_group)
    except BaseException:
        for w in writers:
            w.close()
        shutil.rmtree(tmp, ignore_errors=True) if files > 1 else os.unlink(tmp)
        raise
    for w in writers:
        w.close()
    os.replace(tmp, path)
    return path


def _parquet_glob(path: str) -> str:
    return os.path.join(path, "*.parquet") if os.path.isdir(path) else path


# -- the three sides ----------------------------------------------------------------------------
def slash_query(q: QuerySpec, key: str) -> Any:
    return Query(time="ts", window=q.window, key=key, aggregates=list(q.aggs),
                 filters=[q.filter] if q.filter else [])


def run_slash(q: QuerySpec, key: str, path: str, executors: int = 2) -> Any:
    """Slash's answer as an Arrow table (:func:`slash.runner.run`)."""
    return runner.run(slash_query(q, key), path, executors=executors)


def run_slash_spark(spark: Any, q: QuerySpec, key: str, path: str, executors: int = 2) -> Any:
    """Slash's answer through slash.spark (one barrier stage of ``executors``
    Slash executors in the running Spark application), read back as Arrow."""
    return window_aggregate(spark, path, time="ts", window=q.window, key=key, aggs=list(q.aggs),
                            filter=q.filter, executors=executors).toArrow()


def duckdb_sql(q: QuerySpec, key: str, path: str) -> str:
    """The query in DuckDB SQL over ``read_parquet``: windows by floor
    arithmetic on the ms time (tumbling, sliding: each record in the
    ``size / slide`` windows whose start lies in (ts - size, ts]), sessions by
    ``lag`` and a running sum per key (a new session where the previous event
    of the key is more than one gap earlier)."""
    src = f"read_parquet('{_parquet_glob(path)}')"
    where = "ts IS NOT NULL" + (f" AND {q.filter}" if q.filter else "")
    sel = []
    for a in q.aggs:
        fn, col, name = _agg_parts(a)
        e = {"count": "count(*)", "sum": f"sum({col})::BIGINT", "avg": f"avg({col})::DOUBLE",
             "min": f"min({col})", "max": f"max({col})"}[fn]
        sel.append(f"{e} AS {name}")
    aggs = ", ".join(sel)
    size, slide = q.size_ms, q.slide_ms
    if q.kind == "tumbling":
        return (f"SELECT ws AS window_start, ws + {size} AS window_end, {key}, {aggs} FROM "
                f"(SELECT ts - (((ts % {size}) + {size}) % {size}) AS ws, * FROM {src} WHERE {where}) "
                f"GROUP BY ws, {key}")
    if q.kind == "sliding":
        n = -(-size // slide)
        return (f"SELECT ws AS window_start, ws + {size} AS window_end, {key}, {aggs} FROM "
                f"(SELECT ts - (((ts % {slide}) + {slide}) % {slide}) - j * {slide} AS ws, * FROM "
                f"(SELECT * FROM {src} WHERE {where}), range(0, {n}) AS r(j)) "
                f"WHERE ws > ts - {size} GROUP BY ws, {key}")
    return (f"SELECT min(ts) AS window_start, max(ts) + {size} AS window_end, {key}, {aggs} FROM "
            f"(SELECT sum(CASE WHEN prev IS NULL OR ts - prev > {size} THEN 1 ELSE 0 END) OVER "
            f"(PARTITION BY {key} ORDER BY ts ROWS UNBOUNDED PRECEDING) AS sid, * FROM "
            f"(SELECT lag(ts) OVER (PARTITION BY {key} ORDER BY ts) AS prev, * FROM {src} "
            f"WHERE {where})) GROUP BY {key}, sid")


def duckdb_runner(q: QuerySpec, key: str, path: str, threads: int = 2) -> Tuple[Callable[[], Any], Any]:
    """A function that runs the query in DuckDB (``threads`` threads) and
    returns its Arrow table, and the connection (close it when done)."""
    import duckdb  # optional dependency

    con = duckdb.connect(config={"threads": threads})
    sql = duckdb_sql(q, key, path)
    return (lambda: con.sql(sql).to_arrow_table()), con


def spark_frame(spark: Any, q: QuerySpec, key: str, path: str) -> Any:
    """Spark's own query as a DataFrame: ``groupBy(F.window(...), key)`` or
    ``F.session_window``, the time read as epoch ms, null times dropped (Spark
    would put them in a null window), bounds back as epoch ms."""
    from pyspark.sql import functions as F  # optional dependency

    df = spark.read.parquet(path)
    ts = F.timestamp_millis(F.col("ts"))
    df = df.where(F.col("ts").isNotNull())
    if q.filter:
        df = df.where(q.filter)
    if q.kind == "session":
        w = F.session_window(ts, f"{q.size_ms} milliseconds")
    elif q.kind == "sliding":
        w = F.window(ts, f"{q.size_ms} milliseconds", f"{q.slide_ms} milliseconds")
    else:
        w = F.window(ts, f"{q.size_ms} milliseconds")
    outs = []
    for a in q.aggs:
        fn, col, name = _agg_parts(a)
        if fn == "count":
            outs.append(F.count(F.lit(1)).alias(name))
        elif fn == "avg":
            outs.append(F.avg(F.col(col)).cast("double").alias(name))
        else:
            outs.append({"sum": F.sum, "min": F.min, "max": F.max}[fn](F.col(col)).alias(name))
    g = df.groupBy(w.alias("w"), key).agg(*outs)
    return g.select(F.unix_millis(F.col("w.start")).alias("window_start"),
                    F.unix_millis(F.col("w.end")).alias("window_end"), key,
                    *(_agg_parts(a)[2] for a in q.aggs))


# -- comparing answers --------------------------------------------------------------------------
def _normalise(t: Any, columns: Sequence[str]) -> Any:
    cols = {}
    for c in columns:
        col = t.column(c)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        if pa.types.is_large_string(col.type):
            col = col.cast(pa.string())
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("ms")).cast(pa.int64())
        elif pa.types.is_integer(col.type) and col.type != pa.int64():
            col = col.cast(pa.int64())
        cols[c] = col
    return pa.table(cols)


def compare(a: Any, b: Any, group_by: Sequence[str], what: str = "") -> Optional[str]:
    """None when two results hold the same rows in any order, else a message
    naming the first difference. ``group_by``: the columns that identify a
    row (the window bounds and the key); the others are aggregates. Nulls
    equal only nulls; floats equal within 1e-9 relative; integer widths and
    string encodings are normalised first."""
    names_a, names_b = list(a.column_names), list(b.column_names)
    if sorted(names_a) != sorted(names_b):
        return f"{what}: columns {names_a} != {names_b}"
    if a.num_rows != b.num_rows:
        return f"{what}: {a.num_rows} rows != {b.num_rows} rows"
    order = list(group_by) + [c for c in names_a if c not in group_by]
    sort = [(c, "ascending", "at_start") for c in group_by]
    ta = _normalise(a, order).sort_by(sort)
    tb = _normalise(b, order).sort_by(sort)
    for c in order:
        x, y = ta.column(c), tb.column(c)
        if x.type != y.type and not (pa.types.is_floating(x.type) and pa.types.is_floating(y.type)):
            return f"{what}: column {c!r} is {x.type} on one side, {y.type} on the other"
        same_null = pc.equal(pc.is_null(x), pc.is_null(y))
        if pa.types.is_floating(x.type):
            x64, y64 = x.cast(pa.float64()), y.cast(pa.float64())
            tol = pc.multiply(pc.max_element_wise(pc.abs(x64), pc.abs(y64)), 1e-9)
            close = pc.less_equal(pc.abs(pc.subtract(x64, y64)), tol)
            same_val = pc.or_(close, pc.and_(pc.is_nan(x64), pc.is_nan(y64)))
        else:
            same_val = pc.equal(x, y)
        ok = pc.and_(same_null, pc.fill_null(same_val, True))
        if not pc.all(ok).as_py():
            i = pc.index(ok, False).as_py()
            return (f"{what}: first difference in column {c!r} at sorted row {i}: "
                    f"{ta.slice(i, 1).to_pylist()[0]} vs {tb.slice(i, 1).to_pylist()[0]}")
    return None


# -- running the matrix -------------------------------------------------------------------------
@dataclass(frozen=True)
class MatrixConfig:
    queries: Tuple[str, ...] = tuple(QUERIES)
    keys: Tuple[int, ...] = KEY_COUNTS
    key_types: Tuple[str, ...] = tuple(KEY_TYPES)
    layouts: Tuple[str, ...] = LAYOUTS
    rows: int = DEFAULT_ROWS
    repeat: int = 2
    warmup: int = 1
    executors: int = 2
    threads: int = 2
    master: str = "local[2]"
    seed: int = 1
    spark: bool = True
    #: how Slash runs: ``runner`` (:func:`slash.runner.run`, its own processes) or ``spark``
    #: (:func:`slash.spark.window_aggregate` in the benchmark's Spark application)
    slash: str = "runner"

    def __post_init__(self) -> None:
        for q in self.queries:
            if q not in QUERIES:
                raise InvalidArgument(f"--queries: unknown query {q!r} (known: {list(QUERIES)})")
        for t in self.key_types:
            if t not in KEY_TYPES:
                raise InvalidArgument(f"--key-types: unknown key type {t!r} (known: {list(KEY_TYPES)})")
        for lay in self.layouts:
            if lay not in LAYOUTS:
                raise InvalidArgument(f"--layouts: unknown layout {lay!r} (known: {list(LAYOUTS)})")
        for name in ("rows", "repeat", "executors", "threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise InvalidArgument(f"warmup must be an int >= 0, got {self.warmup!r}")
        if not self.keys or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.keys):
            raise InvalidArgument(f"keys must be ints >= 1, got {self.keys!r}")
        if self.slash not in SLASH_SIDES:
            raise InvalidArgument(f"--slash: must be one of {list(SLASH_SIDES)}, got {self.slash!r}")
        if self.slash == "spark" and not self.spark:
            raise InvalidArgument("--slash spark runs inside Spark: it cannot go with --no-spark")
        if not (self.queries and self.key_types and self.layouts):
            raise InvalidArgument("the matrix needs at least one query, key type and layout")

    def cells(self) -> List[Tuple[int, str, str, str]]:
        """(keys, layout, key type, query), grouped so each dataset is written once."""
        return list(itertools.product(self.keys, self.layouts, self.key_types, self.queries))


def plan_text(cfg: MatrixConfig) -> str:
    """What will run: the cells, rows per cell, rounds, the sides."""
    n = len(cfg.cells())
    sides = f"Slash ({cfg.slash}), Spark, DuckDB" if cfg.spark else f"Slash ({cfg.slash}), DuckDB"
    return (f"matrix plan: {n} cells = {len(cfg.queries)} queries {list(cfg.queries)} x "
            f"{len(cfg.keys)} key counts {list(cfg.keys)} x {len(cfg.key_types)} key types x "
            f"{len(cfg.layouts)} layouts {list(cfg.layouts)}; {cfg.rows:,} rows per cell over "
            f"{SPAN_MS // 1000} s of event time; {len(cfg.keys) * len(cfg.layouts)} datasets; "
            f"sides {sides} take turns: {cfg.warmup} warm-up round(s) before the first cell of each "
            f"query and key type, {cfg.repeat} timed rounds per cell, best kept; "
            f"Slash {cfg.executors} executors, Spark {cfg.master}, DuckDB {cfg.threads} threads")


def _target(keys: int) -> float:
    return TARGET_SPARK_MANY if keys >= 100_000 else TARGET_SPARK_FEW


def run_cell(q: QuerySpec, key_type: str, keys: int, layout: str, path: str, cfg: MatrixConfig,
             spark: Any, warm: bool = True) -> Dict[str, Any]:
    """Runs one cell: ``cfg.warmup`` untimed rounds of the sides in turn
    (when ``warm``), ``cfg.repeat`` timed ones, then the answers compared."""
    key = KEY_TYPES[key_type]
    ddb, con = duckdb_runner(q, key, path, cfg.threads)
    if cfg.slash == "spark":
        def slash_fn() -> Any:
            return run_slash_spark(spark, q, key, path, cfg.executors)
    else:
        def slash_fn() -> Any:
            return run_slash(q, key, path, cfg.executors)
    sides: List[Tuple[str, Callable[[], Any]]] = [("slash", slash_fn), ("duckdb", ddb)]
    if spark is not None:
        def spark_fn() -> Any:
            # a new DataFrame every round: calling toArrow() again on the same one reuses its
            # shuffle files (Spark skips the map stage), timing only the final aggregation
            return spark_frame(spark, q, key, path).toArrow()
        sides.append(("spark", spark_fn))
    times: Dict[str, List[float]] = {s: [] for s, _ in sides}
    outs: Dict[str, Any] = {}
    try:
        for _ in range(cfg.warmup if warm else 0):
            for s, fn in sides:
                fn()
        for _ in range(cfg.repeat):
            for s, fn in sides:
                t0 = time.perf_counter()
                outs[s] = fn()
                times[s].append(time.perf_counter() - t0)
    finally:
        con.close()
    label = f"{q.name} {keys:,} keys {key_type} {layout}"
    group_by = ["window_start", "window_end", key]
    problems = [m for s in outs if s != "slash"
                for m in [compare(outs["slash"], outs[s], group_by, f"{label}: slash vs {s}")] if m]
    best = {s: min(ts) for s, ts in times.items()}
    cell: Dict[str, Any] = {
        "query": q.name, "keys": keys, "key_type": key_type, "layout": layout, "rows": cfg.rows,
        "result_rows": outs["slash"].num_rows, "equal": not problems, "differences": problems,
        "slash_seconds": best["slash"], "duckdb_seconds": best["duckdb"],
        "spark_seconds": best.get("spark"), "runs": times,
        "duckdb_ratio": best["duckdb"] / best["slash"],
        "spark_ratio": best["spark"] / best["slash"] if "spark" in best else None}
    cell["spark_target"] = _target(keys)
    cell["meets_spark_target"] = (cell["spark_ratio"] >= cell["spark_target"]
                                  if cell["spark_ratio"] is not None else None)
    cell["meets_duckdb_target"] = cell["duckdb_ratio"] >= TARGET_DUCKDB
    for m in problems:
        log.error("ANSWERS DIFFER: %s", m)
    return cell


def run_matrix(cfg: MatrixConfig, data_dir: Optional[str] = None,
               on_cell: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Runs every cell of ``cfg``; returns ``{"runs": [cell, ...], ...}``.
    ``on_cell``, if given, receives the result so far after each cell (an
    interrupted run keeps what it measured)."""
    log.info("%s", plan_text(cfg))
    cells = cfg.cells()
    spark = None
    own_dir = data_dir is None
    d = tempfile.mkdtemp(prefix="slash-bench-matrix-") if own_dir else data_dir
    os.makedirs(d, exist_ok=True)
    runs: List[Dict[str, Any]] = []
    t_start = time.perf_counter()
    try:
        with Progress("matrix", stages=len(cells) + 1) as progress:
            if cfg.spark:
                with progress.stage(f"starting Spark {cfg.master}"):
                    spark = session(cfg.master, "slash-bench-matrix",
                                    {"spark.driver.memory": "4g", "spark.ui.showConsoleProgress": "false",
                                     "spark.sql.shuffle.partitions": "2"})
            else:
                with progress.stage("Spark side skipped"):
                    pass
            warmed = set()
            for keys, layout, key_type, qname in cells:
                path = os.path.join(d, data_name(cfg.rows, keys, layout, cfg.seed))
                if not os.path.exists(path):
                    log.info("writing %s rows, %s keys, %s layout", f"{cfg.rows:,}", f"{keys:,}", layout)
                    make_data(path, cfg.rows, keys, layout, cfg.seed)
                with progress.stage(f"{qname} {keys:,} keys {key_type} {layout}"):
                    # warm-up rounds before the first cell of each query and key type: the JVM's
                    # JIT and Spark's generated code are reused by the later cells of that shape
                    cell = run_cell(QUERIES[qname], key_type, keys, layout, path, cfg, spark,
                                    warm=(qname, key_type) not in warmed)
                    warmed.add((qname, key_type))
                runs.append(cell)
                sys.stderr.write(summary(cell) + "\n")  # progress: each cell's line as it ends
                sys.stderr.flush()
                if on_cell is not None:
                    on_cell(_result(runs, cfg, t_start))
    finally:
        if own_dir:
            shutil.rmtree(d, ignore_errors=True)
    return _result(runs, cfg, t_start)


def _result(runs: List[Dict[str, Any]], cfg: MatrixConfig, t_start: float) -> Dict[str, Any]:
    return {"runs": list(runs), "all_equal": all(r["equal"] for r in runs), "plan": plan_text(cfg),
            "parameters": asdict(cfg), "seconds": time.perf_counter() - t_start,
            "complete": len(runs) == len(cfg.cells()),
            "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()}}


# -- reporting ----------------------------------------------------------------------------------
def _ratio(r: Optional[float]) -> str:
    return "-" if r is None else f"{r:.2f}x"


def summary(run: Dict[str, Any]) -> str:
    """One line per cell."""
    sp = "-" if run["spark_seconds"] is None else f"{run['spark_seconds']:.2f}"
    return (f"matrix {run['query']:<15} keys={run['keys']:<9,} {run['key_type']:<6} {run['layout']:<8} "
            f"slash {run['slash_seconds']:6.2f} s  spark {sp:>6} s  duckdb {run['duckdb_seconds']:6.2f} s  "
            f"spark/slash {_ratio(run['spark_ratio']):>7}  duckdb/slash {_ratio(run['duckdb_ratio']):>7}  "
            f"answers {'equal' if run['equal'] else 'DIFFER'}")


def markdown(result: Dict[str, Any]) -> str:
    """The cells as a Markdown table ready to paste in the README."""
    lines = [f"{len(result['runs'])} cells, {result['parameters']['rows']:,} rows each; "
             f"seconds are the best of {result['parameters']['repeat']} runs per side, taken in turns "
             f"after {result['parameters']['warmup']} warm-up round(s) on the first cell of each query "
             f"and key type; ratios above 1 mean Slash is "
             f"faster. Targets: Spark/Slash >= {TARGET_SPARK_MANY} at >= 100k keys, >= "
             f"{TARGET_SPARK_FEW} at 100 keys; DuckDB/Slash >= {TARGET_DUCKDB}.", "",
             "| query | keys | key type | layout | result rows | Slash s | Spark s | DuckDB s "
             "| Spark/Slash | DuckDB/Slash | answers | targets |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in result["runs"]:
        sp = "-" if r["spark_seconds"] is None else f"{r['spark_seconds']:.2f}"
        miss = [n for n, ok in (("Spark", r["meets_spark_target"]), ("DuckDB", r["meets_duckdb_target"]))
                if ok is False]
        lines.append(f"| {r['query']} | {r['keys']:,} | {r['key_type']} | {r['layout']} | "
                     f"{'-' if r.get('result_rows') is None else format(r['result_rows'], ',')} | "
                     f"{r['slash_seconds']:.2f} | {sp} | {r['duckdb_seconds']:.2f} | "
                     f"{_ratio(r['spark_ratio'])} | {_ratio(r['duckdb_ratio'])} | "
                     f"{'equal' if r['equal'] else '**DIFFER**'} | "
                     f"{'met' if not miss else 'missed: ' + ', '.join(miss)} |")
    return "\n".join(lines) + "\n"


def plot(result: Dict[str, Any], path: str) -> str:
    """Two heat maps (Spark/Slash, DuckDB/Slash): rows query x key type,
    columns key count x layout, each cell annotated with its ratio."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency
    from matplotlib.figure import Figure  # optional dependency

    runs = result["runs"]
    rows = sorted({(r["query"], r["key_type"]) for r in runs},
                  key=lambda x: (list(QUERIES).index(x[0]), x[1]))
    cols = sorted({(r["keys"], r["layout"]) for r in runs}, key=lambda x: (x[0], LAYOUTS.index(x[1])))
    by = {(r["query"], r["key_type"], r["keys"], r["layout"]): r for r in runs}
    metrics = [("spark_ratio", "Spark / Slash (seconds)"), ("duckdb_ratio", "DuckDB (2 threads) / Slash")]
    metrics = [m for m in metrics if any(r[m[0]] is not None for r in runs)]
    fig = Figure(figsize=(max(6.0, 1.0 * len(cols)) * len(metrics), 0.45 * len(rows) + 2.2),
                 constrained_layout=True)
    FigureCanvasAgg(fig)
    for i, (m, title) in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        grid = [[math.nan] * len(cols) for _ in rows]
        for a, (q, kt) in enumerate(rows):
            for b, (k, lay) in enumerate(cols):
                r = by.get((q, kt, k, lay))
                if r is not None and r[m] is not None:
                    grid[a][b] = math.log2(max(r[m], 1e-3))
                    ax.text(b, a, f"{r[m]:.2g}" + ("" if r["equal"] else "!"), ha="center",
                            va="center", fontsize=7)
        im = ax.imshow(grid, cmap="RdYlGn", vmin=-2, vmax=2, aspect="auto")
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels([f"{k:,}\n{lay}" for k, lay in cols], fontsize=7)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{q} {kt}" for q, kt in rows], fontsize=7)
        ax.set_title(f"{title}: > 1 = Slash faster", fontsize=9)
        cb = fig.colorbar(im, ax=ax, ticks=[-2, -1, 0, 1, 2])
        cb.ax.set_yticklabels(["1/4", "1/2", "1", "2", "4"])
    fig.suptitle(f"slash bench matrix: {result['parameters']['rows']:,} rows per cell, "
                 f"{os.cpu_count()} cores (shared)", fontsize=10)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def write_outputs(result: Dict[str, Any], json_path: str, md_path: str, png_path: Optional[str]) -> None:
    for p in (json_path, md_path, png_path):
        if p:
            os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(result, f, indent=2, default=str)
        f.write("\n")
    with open(md_path, "w") as f:
        f.write(markdown(result))
    if png_path:
        plot(result, png_path)


# -- CLI ----------------------------------------------------------------------------------------
def _csv(kind: Callable[[str], Any]) -> Callable[[str], Tuple[Any, ...]]:
    def parse(text: str) -> Tuple[Any, ...]:
        items = tuple(kind(x.strip().replace("_", "")) if kind is int else kind(x.strip())
                      for x in text.split(",") if x.strip())
        if not items:
            raise argparse.ArgumentTypeError("expected a comma-separated list")
        return items
    return parse


def _keys(text: str) -> int:
    t = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    try:
        return int(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a key count: {text!r} (e.g. 100, 100k, 10M)") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queries", type=_csv(str), default=tuple(QUERIES),
                        help=f"comma-separated, of {','.join(QUERIES)} (default: all)")
    parser.add_argument("--keys", type=_csv(_keys), default=KEY_COUNTS,
                        help="comma-separated key counts, e.g. 100,100k,1M (default 100,100k,10M)")
    parser.add_argument("--key-types", type=_csv(str), default=tuple(KEY_TYPES),
                        help="comma-separated, of int64,string (default both)")
    parser.add_argument("--layouts", type=_csv(str), default=LAYOUTS,
                        help=f"comma-separated, of {','.join(LAYOUTS)} (default all)")
    parser.add_argument("--rows", type=int, default=None,
                        help=f"rows per cell (default {DEFAULT_ROWS:,}; --quick {QUICK_ROWS:,})")
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds per cell (best kept; default 2)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed rounds before the first cell of each query and key type (default 1)")
    parser.add_argument("--slash", choices=SLASH_SIDES, default=None,
                        help="spark: slash.spark.window_aggregate in the same Spark application "
                             "(default; the issue's targets are for slash.spark); runner: "
                             "slash.runner.run, 2 executor processes per query (default with "
                             "--no-spark)")
    parser.add_argument("--no-spark", action="store_true", help="leave out the Spark side")
    parser.add_argument("--quick", action="store_true",
                        help=f"tiny: {QUICK_ROWS:,} rows, 100 and 1k keys, one round (for tests)")
    parser.add_argument("--out", default=os.path.join("bench", "results"), metavar="DIR",
                        help="where matrix.json, matrix.md and matrix.png go (default bench/results)")
    parser.add_argument("--plot", default=None, metavar="PATH", help="the plot (default OUT/matrix.png)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="keep the Parquet files here and reuse them (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=1)


def config_from_args(args: argparse.Namespace) -> MatrixConfig:
    keys, rows, repeat, warmup = args.keys, args.rows, args.repeat, args.warmup
    if args.quick:
        keys = keys if keys != KEY_COUNTS else (100, 1_000)
        rows = rows or QUICK_ROWS
        repeat, warmup = 1, 0
    return MatrixConfig(queries=tuple(args.queries), keys=tuple(keys), key_types=tuple(args.key_types),
                        layouts=tuple(args.layouts), rows=rows or DEFAULT_ROWS, repeat=repeat,
                        warmup=warmup, seed=args.seed, spark=not args.no_spark,
                        slash=args.slash or ("runner" if args.no_spark else "spark"))


def run(args: argparse.Namespace) -> Dict[str, Any]:
    cfg = config_from_args(args)
    print(plan_text(cfg), flush=True)
    json_path = getattr(args, "json", None) or os.path.join(args.out, "matrix.json")
    md_path = os.path.join(args.out, "matrix.md")
    result = run_matrix(cfg, args.data_dir,
                        on_cell=lambda partial: write_outputs(partial, json_path, md_path, None))
    write_outputs(result, json_path, md_path, args.plot or os.path.join(args.out, "matrix.png"))
    print(markdown(result), flush=True)
    if not result["all_equal"]:
        bad = [m for r in result["runs"] for m in r["differences"]]
        raise SystemFailure(f"{len(bad)} cell comparison(s) differ (outputs written to {args.out}); "
                            f"first: {bad[0]}")
    return result
