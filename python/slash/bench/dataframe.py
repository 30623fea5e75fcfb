"""``slash bench dataframe``: ``slash.spark.window_aggregate`` on DataFrames as
PySpark users hold them, against Spark's own ``groupBy(window(...), key)``
on the same DataFrame, local[2].

The data: ``--records`` events in ``FILES`` Parquet part files that each span
the event time (as parallel writers leave them; row groups of 1 Mi rows):
``ts`` (TimestampType, 2 h of event time), ``k`` (an int key of ``--keys``
values), ``user`` (a string key of ``--users`` values, ``user-12345``),
``event_type`` (view, click, purchase), ``ad_id`` (1,000 ads) and ``price``
(double). The query: keep ``event_type == 'view'``, 10 s tumbling windows,
``count`` and ``sum(price)`` per key.

The inputs, each side given the same DataFrame (``--inputs``):

* ``path``: Slash gets the directory's path (its fast path), Spark
  ``spark.read.parquet`` of it;
* ``scan``: both ``spark.read.parquet(dir)``, Spark's default partitioning;
* ``scan-512m``: the same read planned with
  ``spark.sql.files.maxPartitionBytes=512m`` (fewer, larger partitions);
* ``join``: ``events.join(broadcast(campaigns), "ad_id")`` (the YSB shape),
  keyed by the campaign for the int key (Slash: route ``scan-join``);
* ``union``: ``events.where(ad_id < 500).unionByName(events.where(ad_id >=
  500))`` (Slash: route ``scan``, each input's files under its own filter).

``--writer``: the files as pyarrow writes them (the default), as pandas
does (``to_parquet`` of each row group: ``large_string`` columns) or as
Spark does (``spark.read.parquet(...).write.parquet``: INT96 timestamps):
the fast path at 100 k string keys on files users have
(``--inputs path --key-kinds string --writer pandas``).

Both results go to Spark's ``noop`` sink (Spark computes every row, writes
nothing). The sides take turns (warm-up rounds first, then ``--repeat``
timed rounds each); ``ratio`` = Spark's best time / Slash's best time (> 1:
Slash is faster), ``median_ratio`` the same of the medians. Answers are
compared once per configuration: counts exactly, sums to 1e-9 relative.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.bench.spark import Progress, interleaved
from slash.errors import InvalidArgument
from slash.spark import run_aggregate, session, spark_window_aggregate

log = logging.getLogger(__name__)

NAME = "dataframe"
HELP = "window_aggregate on DataFrames (a scan, a join's output) against Spark's own query on them"

INPUTS = ("path", "scan", "scan-512m", "join", "union")
KEYS = ("int", "string")
#: who writes the Parquet files: pyarrow (one ParquetWriter per part file),
#: pandas (``DataFrame.to_parquet`` of each row group: pandas' types, e.g.
#: large_string) or Spark (``spark.read.parquet(...).write.parquet``: INT96
#: timestamps, Spark's file count and row groups)
WRITERS = ("pyarrow", "pandas", "spark")
FILES = 2
SPAN_US = 7_200 * 1_000_000  # 2 h of event time
ADS = 1_000
T0_US = 1_700_000_000 * 1_000_000


@dataclass(frozen=True)
class DataFrameBenchConfig:
    records: int = 20_000_000
    keys: int = 100
    users: int = 100_000
    repeat: int = 3
    warmup: int = 2
    seed: int = 1
    inputs: Tuple[str, ...] = INPUTS
    key_kinds: Tuple[str, ...] = KEYS
    writer: str = "pyarrow"

    def __post_init__(self) -> None:
        for name in ("records", "keys", "users", "repeat"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
        if self.writer not in WRITERS:
            raise InvalidArgument(f"writer must be one of {list(WRITERS)}, got {self.writer!r}")
        bad = [i for i in self.inputs if i not in INPUTS] + [k for k in self.key_kinds if k not in KEYS]
        if bad or not self.inputs or not self.key_kinds:
            raise InvalidArgument(f"inputs must be among {list(INPUTS)} and keys among {list(KEYS)}, "
                                  f"got {list(self.inputs)} / {list(self.key_kinds)}")


def write_events(directory: str, cfg: DataFrameBenchConfig) -> str:
    """The events as ``FILES`` part files in ``directory`` (made once per
    shape: a directory named by every parameter that changes the rows)."""
    path = os.path.join(directory, f"events-{cfg.records}-{cfg.keys}-{cfg.users}-{cfg.seed}")
    if os.path.isdir(path):
        return path
    tmp = f"{path}.tmp-{os.getpid()}"
    os.makedirs(tmp)
    rng = np.random.default_rng(cfg.seed)
    chunk = 1 << 20
    writers: List[Any] = []
    step = SPAN_US / cfg.records
    for start in range(0, cfg.records, chunk):
        n = min(chunk, cfg.records - start)
        ts = T0_US + ((start + np.arange(n)) * step).astype(np.int64) + rng.integers(0, 1000, n)
        users = rng.integers(0, cfg.users, n)
        table = pa.table({
            "ts": pa.array(ts, pa.timestamp("us", "UTC")),
            "k": pa.array(rng.integers(0, cfg.keys, n)),
            "user": pa.array(np.char.add("user-", users.astype(str)).astype(object), pa.string()),
            "event_type": pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, 3, n).astype(np.int32)),
                pa.array(["view", "click", "purchase"])).cast(pa.string()),
            "ad_id": pa.array(rng.integers(0, ADS, n)),
            "price": pa.array(np.round(rng.gamma(2.0, 20.0, n), 2)),
        })
        if not writers:
            writers = [pq.ParquetWriter(os.path.join(tmp, f"part-{i:05d}.parquet"), table.schema)
                       for i in range(FILES)]
        owner = rng.integers(0, FILES, n)
        for i, w in enumerate(writers):
            w.write_table(table.filter(pa.array(owner == i)), row_group_size=chunk)
    for w in writers:
        w.close()
    os.replace(tmp, path)
    return path


def rewrite_events(spark: Any, path: str, writer: str) -> str:
    """The events of ``path`` (:func:`write_events`) as ``writer`` writes
    them, next to it (made once)."""
    if writer == "pyarrow":
        return path
    out = f"{path}-{writer}"
    if os.path.isdir(out):
        return out
    tmp = f"{out}.tmp-{os.getpid()}"
    if writer == "spark":
        spark.read.parquet(path).write.parquet(tmp)
    else:
        os.makedirs(tmp)
        for name in sorted(os.listdir(path)):
            f = pq.ParquetFile(os.path.join(path, name))
            for i in range(f.metadata.num_row_groups):
                f.read_row_group(i).to_pandas().to_parquet(
                    os.path.join(tmp, f"{name[:-len('.parquet')]}-{i:03d}.parquet"), index=False)
    os.replace(tmp, out)
    return out


def _frame(spark: Any, path: str, kind: str) -> Any:
    from pyspark.sql import functions as F  # optional dependency: only a Spark side imports it

    events = spark.read.parquet(path)
    if kind == "union":
        return events.where(F.col("ad_id") < ADS // 2).unionByName(
            events.where(F.col("ad_id") >= ADS // 2))
    if kind != "join":
        return events
    campaigns = spark.range(ADS).select(F.col("id").alias("ad_id"),
                                        (F.col("id") % 100).alias("campaign_id"))
    return events.join(F.broadcast(campaigns), "ad_id")


def query(kind: str, key_kind: str) -> Dict[str, Any]:
    key = "user" if key_kind == "string" else ("campaign_id" if kind == "join" else "k")
    return dict(time="ts", window="tumbling:10s", key=key, aggs=["count", "sum:price"],
                filter="event_type == 'view'")


def sides(spark: Any, path: str, kind: str, key_kind: str) -> List[Tuple[str, Callable[[], Any]]]:
    """The timed functions: Slash, then Spark, each building its input anew."""
    q = query(kind, key_kind)
    conf = {"spark.sql.files.maxPartitionBytes": "512m"} if kind == "scan-512m" else {}

    def noop(df: Any) -> None:
        df.write.format("noop").mode("overwrite").save()

    def with_conf(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            before = {k: spark.conf.get(k, None) for k in conf}
            for k, v in conf.items():
                spark.conf.set(k, v)
            try:
                return fn()
            finally:
                for k, v in before.items():
                    spark.conf.unset(k) if v is None else spark.conf.set(k, v)
        return run

    def ours() -> Any:
        src = path if kind == "path" else _frame(spark, path, kind)
        res = run_aggregate(spark, src, **q)
        noop(res.df)
        return res

    def theirs() -> Any:
        noop(spark_window_aggregate(spark, _frame(spark, path, kind), **q))

    return [("slash", with_conf(ours)), ("spark", with_conf(theirs))]


def answers_equal(spark: Any, path: str, kind: str, key_kind: str) -> Tuple[bool, int, bool]:
    """(equal, result rows, the route the input took: AggregateResult.route)."""
    q = query(kind, key_kind)
    res = run_aggregate(spark, path if kind == "path" else _frame(spark, path, kind), **q)
    ours = res.df.toArrow()
    theirs = spark_window_aggregate(spark, _frame(spark, path, kind), **q).toArrow()
    order = [("window_start", "ascending"), (q["key"], "ascending")]
    a, b = ours.sort_by(order), theirs.sort_by(order)
    ok = a.num_rows == b.num_rows and all(
        a.column(c).equals(b.column(c)) for c in ("window_start", "window_end", q["key"], "count"))
    if ok:
        x = a.column("sum_price").to_numpy(zero_copy_only=False)
        y = b.column("sum_price").to_numpy(zero_copy_only=False)
        ok = bool(np.allclose(x, y, rtol=1e-9, equal_nan=True))
    return ok, a.num_rows, res.route


def run_config(spark: Any, path: str, cfg: DataFrameBenchConfig, kind: str, key_kind: str,
               progress: Progress) -> Dict[str, Any]:
    load_before = os.getloadavg()[0]
    label = f"{kind} {key_kind} key:"
    (t_slash, t_spark), _ = interleaved([(f"{label} {n}", fn) for n, fn in sides(spark, path, kind, key_kind)],
                                        cfg.warmup, 0.0, cfg.repeat, progress)
    ok, result_rows, route = answers_equal(spark, path, kind, key_kind)
    progress.step(f"{label} answers {'equal' if ok else 'DIFFER'}")
    return {"input": kind, "key": key_kind, "records": cfg.records, "route": route,
            "writer": cfg.writer,
            "slash_seconds": min(t_slash), "spark_seconds": min(t_spark),
            "ratio": min(t_spark) / min(t_slash),
            "median_ratio": statistics.median(t_spark) / statistics.median(t_slash),
            "slash_run_seconds": t_slash, "spark_run_seconds": t_spark,
            "slash_records_per_s": cfg.records / min(t_slash),
            "spark_records_per_s": cfg.records / min(t_spark),
            "verified": ok, "result_rows": result_rows, "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2), "parameters": asdict(cfg)}


def run_all(cfg: DataFrameBenchConfig, data_dir: Optional[str], driver_memory: str = "8g") -> Dict[str, Any]:
    combos = [(i, k) for i in cfg.inputs for k in cfg.key_kinds]
    progress = Progress(2 + len(combos) * (2 * cfg.repeat + 2))
    runs = []
    try:
        progress.describe("starting Spark")
        spark = session("local[2]", "slash-bench-dataframe", {"spark.driver.memory": driver_memory})
        progress.step("Spark started")
        d = data_dir or os.path.join(os.environ.get("TMPDIR", "/tmp"), "slash-bench-dataframe")
        os.makedirs(d, exist_ok=True)
        progress.describe(f"writing {cfg.records:,} events")
        path = rewrite_events(spark, write_events(d, cfg), cfg.writer)
        progress.step(f"data in {path}")
        for kind, key_kind in combos:
            runs.append(run_config(spark, path, cfg, kind, key_kind, progress))
    finally:
        progress.close()
    return {"runs": runs, "all_verified": all(r["verified"] for r in runs)}


def summary(run: Dict[str, Any]) -> str:
    return (f"dataframe  {run['input']:<9} {run['key']:<6} key  records={run['records']:,}  "
            f"slash {run['slash_records_per_s'] / 1e6:6.2f} M rec/s (route {run.get('route', '?')})  Spark {run['spark_records_per_s'] / 1e6:6.2f} M rec/s  ratio {run['ratio']:.2f}x "
            f"(medians {run['median_ratio']:.2f}x)  answers {'equal' if run['verified'] else 'DIFFER'}  "
            f"load {run['load_before']} -> {run['load_after']}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=20_000_000, metavar="N", help="events (default 20M)")
    parser.add_argument("--keys", type=int, default=100, help="values of the int key k (default 100)")
    parser.add_argument("--users", type=int, default=100_000,
                        help="values of the string key user (default 100k)")
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=list(INPUTS),
                        help="the DataFrames each side is given (default: all)")
    parser.add_argument("--key-kinds", nargs="+", choices=KEYS, default=list(KEYS),
                        help="group by the int key, the string key, or both (default)")
    parser.add_argument("--writer", choices=WRITERS, default="pyarrow",
                        help="who writes the Parquet files: pyarrow (default), pandas or Spark")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds of both sides (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds per side (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="where the events are written once and reused (default $TMPDIR/slash-bench-dataframe)")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    cfg = DataFrameBenchConfig(records=args.records, keys=args.keys, users=args.users, repeat=args.repeat,
                               warmup=args.warmup, seed=args.seed, inputs=tuple(args.inputs),
                               key_kinds=tuple(args.key_kinds), writer=args.writer)
    return run_all(cfg, args.data_dir)
