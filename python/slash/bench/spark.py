"""``slash bench spark``: YSB through slash.spark against Spark's own
``groupBy(window(...), key).count()`` on the same Parquet files, local[2].

The data: ``--records`` YSB events (78-byte records, all nine columns) from
:mod:`slash.workloads`; event time rises at 1 M events/s. ``--layout``
picks how they are written: ``ordered`` (the default) one time-ordered
Parquet file in row groups of 1 Mi rows; ``spanning`` a directory of
``SPANNING_FILES`` part files that each span the whole time range, as
parallel writers leave them: every generated row group's rows are dealt at
random across the files (so each file holds N row groups, each covering its
slice of time). The query (the paper's YSB): keep
``event_type == 'view'``, count per campaign (``key``) per 10 s tumbling
window. By default three configurations run: 100 keys, 10 M keys, and zipf
1.5 over 10 M keys (``--keys``/``--dist`` pick one).

The sides take turns: untimed rounds (at least ``--warmup`` of them and
``--warmup-seconds``), then ``--repeat`` timed ones; the best time of each
side is kept (the machine is shared), and the ratio of the medians is
reported too (``median_ratio``). The warm-up matters on two cores: after 5
slash.spark queries the JVM's JIT compilers still burned 86 ms of CPU per
query, after 40 still 39 ms (measured per thread), CPU that a short query's
tasks share the two cores with; a long-lived Spark application has long
compiled that code.

``--workload count`` runs the plain count of ``slash bench count`` instead:
int64 ``ts`` (ms, sorted) and ``k`` (``--keys`` values) in two
pyarrow-written Parquet files over 2 h of event time (:func:`slash.bench.
count.write_input`), a count per (10 s tumbling window, k): 72,000 result
rows at 100 keys.

What is timed depends on ``--consume`` (one or more; each a measurement of
its own, the sides taking turns):

* ``none`` (the default): slash, :func:`slash.spark.run_aggregate`, the
  whole barrier stage until the result DataFrame exists; Spark, the same
  query with Spark's operators written to the ``noop`` sink (Spark computes
  every row and writes nothing: its most favourable measure);
* ``spark``: both results consumed inside Spark,
  ``.agg(count(*), sum(count)).collect()`` of each side's DataFrame: the
  number of groups and their total. Not ``.agg(sum(count))`` alone: Spark's
  optimizer turns ``groupBy(window, k).count().agg(sum(count))`` into
  ``sum(1)`` over the scan (the plan has no window, no grouping), so that
  times a row count against slash's whole windowed aggregation;
* ``arrow``: both results brought to Python as Arrow, ``.toArrow()``.

Spark's side builds its DataFrame anew every round (over one
``spark.read.parquet`` of the input): an action run again on the same
DataFrame reuses its shuffle files and times only the final aggregation.

Both answers are collected and compared exactly: ``verified``. Records/s
counts the input records (before the filter). ``ratio`` = slash / Spark in
records/s, best against best (> 1: slash is faster); per ``--consume`` mode
in ``modes``.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.bench.count import write_input as write_count_input
from slash.errors import InvalidArgument
from slash.spark import run_aggregate, session, spark_window_aggregate
from slash.workloads import WORKLOADS, parse_skew, write_parquet

log = logging.getLogger(__name__)

NAME = "spark"
HELP = "YSB 10 s count per campaign: slash.spark against Spark's own groupBy(window), local[2]"

QUERY = dict(time="event_time", window="tumbling:10s", key="key", aggs=["count"],
             filter="event_type == 'view'")
#: ``--workload count``: the plain count of ``slash bench count``
COUNT_QUERY = dict(time="ts", window="tumbling:10s", key="k", aggs=["count"])
#: the count input's event-time span (ms) and files, as ``slash bench count``'s defaults
COUNT_SPAN_MS = 7_200_000
COUNT_FILES = 2
WORKLOADS_RUN = ("ysb", "count")
#: how each side's result is used in the timed part (see the module docstring)
CONSUME = ("none", "spark", "arrow")
#: what slash.spark is handed: the path(s), or a DataFrame reading them (a scan: the fast path too)
INPUTS = ("path", "dataframe")
#: how the records are laid out on disk (see the module docstring)
LAYOUTS = ("ordered", "spanning")
#: part files of the spanning layout
SPANNING_FILES = 2
#: (keys, dist) of the default runs
DEFAULT_CONFIGS = ((100, "uniform"), (10_000_000, "uniform"), (10_000_000, "zipf:1.5"))


@dataclass(frozen=True)
class SparkBenchConfig:
    records: int = 20_000_000
    keys: int = 100
    dist: str = "uniform"
    repeat: int = 5
    warmup: int = 5
    warmup_seconds: float = 20.0
    executors: int = 2
    master: str = "local[2]"
    seed: int = 1
    row_group: int = 1 << 20
    layout: str = "ordered"
    workload: str = "ysb"
    consume: Tuple[str, ...] = ("none",)
    #: what slash.spark is handed: the files' path(s), or ``spark.read.parquet`` of them
    input: str = "path"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise InvalidArgument(f"layout must be one of {list(LAYOUTS)}, got {self.layout!r}")
        if self.input not in INPUTS:
            raise InvalidArgument(f"input must be one of {list(INPUTS)}, got {self.input!r}")
        if self.workload not in WORKLOADS_RUN:
            raise InvalidArgument(f"workload must be one of {list(WORKLOADS_RUN)}, got {self.workload!r}")
        if not self.consume or any(c not in CONSUME for c in self.consume):
            raise InvalidArgument(f"consume must be one or more of {list(CONSUME)}, got {self.consume!r}")
        if self.workload == "count" and (self.dist != "uniform" or self.layout != "ordered"):
            raise InvalidArgument("the count workload's keys are uniform in time-ordered files: "
                                  f"it takes no dist={self.dist!r} or layout={self.layout!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise InvalidArgument(f"warmup must be an int >= 0, got {self.warmup!r}")
        if isinstance(self.warmup_seconds, bool) or not isinstance(self.warmup_seconds, (int, float)) \
                or not 0 <= self.warmup_seconds < 86400:
            raise InvalidArgument(f"warmup_seconds must be a number of seconds >= 0, got "
                                  f"{self.warmup_seconds!r}")
        for name in ("records", "keys", "repeat", "executors", "row_group"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
        parse_skew(self.dist)


class Progress:
    """A progress bar on a terminal (rich), log lines elsewhere."""

    def __init__(self, total: int) -> None:
        self._bar = None
        self._done = 0
        self.total = total
        try:
            from rich.progress import (BarColumn, Progress as RichProgress,  # optional dependency
                                       TextColumn, TimeElapsedColumn)
            if sys.stderr.isatty():
                self._bar = RichProgress(TextColumn("{task.description:<44}"), BarColumn(),
                                         TextColumn("{task.completed}/{task.total}"),
                                         TimeElapsedColumn(), transient=False)
                self._bar.start()
                self._task = self._bar.add_task("starting", total=total)
        except ImportError:
            pass

    def step(self, what: str) -> None:
        self._done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=what)
        else:
            log.info("[%d/%d] %s", self._done, self.total, what)

    def describe(self, what: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=what)
        else:
            log.info("[%d/%d] %s ...", self._done + 1, self.total, what)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def query_of(cfg: SparkBenchConfig) -> Dict[str, Any]:
    """The query the configuration's workload runs (run_aggregate's keywords)."""
    return COUNT_QUERY if cfg.workload == "count" else QUERY


def make_data(path: str, cfg: SparkBenchConfig) -> Union[str, List[str]]:
    """Writes the records at ``path`` in ``cfg.layout``: one file (ordered) or
    a directory of part files (spanning); returns ``path``. The count
    workload: its files under directory ``path``, returned as a list."""
    if cfg.workload == "count":
        return write_count_input(path, cfg.records, COUNT_FILES, cfg.keys, COUNT_SPAN_MS, seed=cfg.seed)
    if cfg.layout == "spanning":
        return write_spanning(path, cfg)
    write_parquet(path, "ysb", records=cfg.records, keys=cfg.keys, skew=cfg.dist, seed=cfg.seed,
                  row_group_size=cfg.row_group)
    return path


def write_spanning(path: str, cfg: SparkBenchConfig, files: int = SPANNING_FILES) -> str:
    """The same records as :func:`make_data`'s ordered file, dealt at random
    (seeded) across ``files`` part files of directory ``path``: each
    generated row group's rows go to the files as row groups of their own, so
    every file spans the whole time range. Written into a temporary directory
    renamed into place at the end (a crash leaves no half-written data that a
    later run would reuse)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rng = np.random.default_rng(cfg.seed)
    writers: List[Any] = []
    try:
        for batch in WORKLOADS["ysb"](cfg.records, batch_size=cfg.row_group, keys=cfg.keys,
                                      skew=cfg.dist, seed=cfg.seed):
            if not writers:
                writers = [pq.ParquetWriter(os.path.join(tmp, f"part-{i:05d}.parquet"), batch.schema,
                                            compression="snappy") for i in range(files)]
            owner = rng.integers(0, files, batch.num_rows)
            for i, w in enumerate(writers):
                part = batch.filter(pa.array(owner == i))
                if part.num_rows:
                    w.write_batch(part, row_group_size=cfg.row_group)
    except BaseException:
        for w in writers:
            w.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for w in writers:
        w.close()
    os.replace(tmp, path)
    log.info("wrote %d YSB records as %d spanning part files in %s", cfg.records, files, path)
    return path


def data_name(cfg: SparkBenchConfig) -> str:
    """The file (ordered) or directory (spanning) name of a configuration's
    data: every parameter that changes the records or their layout is in it,
    so a kept ``--data-dir`` never hands one configuration another's data
    (``nn``: the generator's version)."""
    if cfg.workload == "count":  # a directory: write_input names its files by shape within
        return f"count-seed{cfg.seed}"
    base = f"ysb-nn-{cfg.records}-{cfg.keys}-{cfg.dist.replace(':', '')}-{cfg.seed}"
    return f"{base}.parquet" if cfg.layout == "ordered" else f"{base}-spanning{SPANNING_FILES}-{cfg.row_group}"


def data_bytes(path: Union[str, List[str]]) -> int:
    if isinstance(path, list):
        return sum(os.path.getsize(p) for p in path)
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def interleaved(sides: List[Tuple[str, Callable[[], Any]]], warmup: int, warmup_seconds: float,
                 repeat: int, progress: Progress) -> Tuple[List[List[float]], List[Any]]:
    """Runs the sides in turn: untimed rounds until ``warmup`` of them and
    ``warmup_seconds`` have passed, then ``repeat`` timed rounds (a side's
    runs are spread over the whole measurement, so a busy spell on the shared
    machine hits both sides alike); returns each side's times and last result."""
    times: List[List[float]] = [[] for _ in sides]
    outs: List[Any] = [None] * len(sides)
    start = time.perf_counter()
    rounds = 0
    while rounds < warmup or time.perf_counter() - start < warmup_seconds:
        rounds += 1
        for label, fn in sides:
            progress.describe(f"{label} warm-up {rounds}")
            fn()
    progress.step(f"warmed up: {rounds} rounds in {time.perf_counter() - start:.0f} s")
    for i in range(repeat):
        for j, (label, fn) in enumerate(sides):
            progress.describe(f"{label} run {i + 1}/{repeat}")
            t0 = time.perf_counter()
            outs[j] = fn()
            dt = time.perf_counter() - t0
            times[j].append(dt)
            progress.step(f"{label} {dt:.2f} s")
    return times, outs


def _sorted_columns(table, key: str) -> Dict[str, Any]:
    t = table.sort_by([("window_start", "ascending"), (key, "ascending")])
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in ("window_start", "window_end", key, "count")}


def verify(ours, theirs, key: str = "key") -> bool:
    if ours.num_rows != theirs.num_rows:
        log.warning("spark bench: slash has %d result rows, Spark %d", ours.num_rows, theirs.num_rows)
        return False
    a, b = _sorted_columns(ours, key), _sorted_columns(theirs, key)
    return all(np.array_equal(a[c], b[c]) for c in a)


def in_spark_query(df: Any) -> Any:
    """``--consume spark``'s query over a result: its number of groups and
    their total count (count(*) keeps Spark from dropping the grouping, see
    the module docstring)."""
    from pyspark.sql import functions as F  # optional dependency: only a Spark side imports it

    return df.agg(F.count(F.lit(1)).alias("groups"), F.sum("count").alias("total"))


def slash_input(spark: Any, path: Union[str, List[str]], cfg: SparkBenchConfig) -> Any:
    """What slash.spark is handed (``cfg.input``): the path(s) or a DataFrame
    of them, built anew each round as a user's job would."""
    if cfg.input == "path":
        return path
    return spark.read.parquet(*([path] if isinstance(path, str) else path))


def consumers(spark: Any, path: Union[str, List[str]], cfg: SparkBenchConfig,
              mode: str) -> Tuple[Callable[[], Any], Callable[[], Any]]:
    """The timed functions of both sides for one ``--consume`` mode:
    (slash, Spark). Each returns what the next round may check: slash's
    AggregateResult (mode ``none``) or the consumed value."""
    q = query_of(cfg)
    raw = spark.read.parquet(*([path] if isinstance(path, str) else path))

    def ours() -> Any:
        return run_aggregate(spark, slash_input(spark, path, cfg), executors=cfg.executors, **q)

    def theirs() -> Any:  # a new DataFrame each round (see the module docstring)
        return spark_window_aggregate(spark, raw, **q)

    if mode == "none":
        return ours, lambda: theirs().write.format("noop").mode("overwrite").save()
    if mode == "spark":
        def use(df: Any) -> Any:
            return tuple(in_spark_query(df).collect()[0])
    else:
        def use(df: Any) -> Any:
            return df.toArrow()
    return (lambda: use(ours().df)), (lambda: use(theirs()))


def run_config(spark: Any, path: Union[str, List[str]], cfg: SparkBenchConfig,
               progress: Progress) -> Dict[str, Any]:
    label = f"{cfg.workload} {cfg.keys} keys {cfg.dist}:"
    q = query_of(cfg)
    modes: Dict[str, Dict[str, Any]] = {}
    load_before = os.getloadavg()[0]
    for i, mode in enumerate(cfg.consume):
        ours_fn, theirs_fn = consumers(spark, path, cfg, mode)
        (ts_slash, ts_spark), _ = interleaved(
            [(f"{label} slash.spark ({mode})", ours_fn), (f"{label} Spark groupBy(window) ({mode})", theirs_fn)],
            cfg.warmup if i == 0 else 1, cfg.warmup_seconds if i == 0 else 0.0, cfg.repeat, progress)
        modes[mode] = {"slash_seconds": min(ts_slash), "spark_seconds": min(ts_spark),
                       "ratio": min(ts_spark) / min(ts_slash),
                       "median_ratio": statistics.median(ts_spark) / statistics.median(ts_slash),
                       "slash_run_seconds": ts_slash, "spark_run_seconds": ts_spark}
    progress.describe(f"{label} comparing answers")
    res = run_aggregate(spark, slash_input(spark, path, cfg), executors=cfg.executors, **q)
    ours, theirs = res.df.toArrow(), spark_window_aggregate(spark, path, **q).toArrow()
    ok = verify(ours, theirs, q["key"])
    progress.step(f"{label} answers {'equal' if ok else 'DIFFER'}")
    first = modes[cfg.consume[0]]
    t_slash, t_spark = first["slash_seconds"], first["spark_seconds"]
    rate, srate = cfg.records / t_slash, cfg.records / t_spark
    return {"workload": cfg.workload, "keys": cfg.keys, "dist": cfg.dist, "records": cfg.records,
            "layout": cfg.layout, "consume": cfg.consume[0], "input": cfg.input,
            "fast_path": res.fast_path,
            "slash_records_per_s": rate, "spark_records_per_s": srate, "ratio": rate / srate,
            "verified": ok, "result_rows": ours.num_rows, "slash_seconds": t_slash,
            "spark_seconds": t_spark, "median_ratio": first["median_ratio"],
            "slash_run_seconds": first["slash_run_seconds"], "spark_run_seconds": first["spark_run_seconds"],
            "modes": modes, "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2),
            "records_after_filter": res.records_in,
            "late_records": res.late_records, "parameters": asdict(cfg)}


@contextmanager
def _workdir(d: Optional[str]) -> Iterator[str]:
    if d:
        os.makedirs(d, exist_ok=True)
        yield d
        return
    d = tempfile.mkdtemp(prefix="slash-bench-spark-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_all(configs: List[SparkBenchConfig], data_dir: Optional[str] = None,
            driver_memory: str = "6g") -> Dict[str, Any]:
    per = (2 * configs[0].repeat + 1) * len(configs[0].consume) + 2  # data, warm-ups, runs, check
    progress = Progress(per * len(configs) + 1)
    runs = []
    try:
        progress.describe("starting Spark")
        spark = session(configs[0].master, "slash-bench-spark",
                        {"spark.driver.memory": driver_memory,
                         "spark.sql.shuffle.partitions": str(max(2, configs[0].executors))})
        progress.step("Spark started")
        with _workdir(data_dir) as d:
            for cfg in configs:
                path = os.path.join(d, data_name(cfg))
                progress.describe(f"writing {cfg.records:,} {cfg.workload} records ({cfg.keys:,} keys "
                                  f"{cfg.dist}, {cfg.layout})")
                if cfg.workload == "count" or not os.path.exists(path):
                    path = make_data(path, cfg)  # the count input: reused when present
                progress.step(f"data: {data_bytes(path) / 1e6:.0f} MB Parquet ({cfg.layout})")
                runs.append(run_config(spark, path, cfg, progress))
    finally:
        progress.close()
    return {"runs": runs, "all_verified": all(r["verified"] for r in runs)}


def summary(run: Dict[str, Any]) -> str:
    text = (f"spark  {run.get('workload', 'ysb')} keys={run['keys']:<9} dist={run['dist']:<8} "
            f"records={run['records']:,}  layout={run.get('layout', 'ordered')}  "
            f"slash.spark {run['slash_records_per_s'] / 1e6:7.1f} M rec/s  "
            f"Spark groupBy(window) {run['spark_records_per_s'] / 1e6:6.1f} M rec/s  "
            f"ratio {run['ratio']:5.2f}x (medians {run['median_ratio']:.2f}x)  "
            f"answers {'equal' if run['verified'] else 'DIFFER'}")
    for mode, m in run.get("modes", {}).items():
        text += (f"\n  consumed {mode:<5}: slash.spark {m['slash_seconds']:.3f} s, Spark "
                 f"{m['spark_seconds']:.3f} s: ratio {m['ratio']:.2f}x (medians {m['median_ratio']:.2f}x)")
    if "load_before" in run:
        text += f"\n  load {run['load_before']} -> {run['load_after']}"
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=20_000_000, metavar="N",
                        help="YSB records per configuration (default 20M)")
    parser.add_argument("--keys", type=int, default=None, metavar="K",
                        help="campaigns; with --dist picks one configuration (default: 100, 10M, "
                             "zipf:1.5 over 10M)")
    parser.add_argument("--dist", default=None, help="uniform or zipf:S (default: see --keys)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds of both sides first, "
                        "at least (default 5)")
    parser.add_argument("--warmup-seconds", type=float, default=20.0, metavar="S",
                        help="and warm up for at least S seconds (default 20): the JVM's JIT "
                        "still compiles for the first tens of jobs")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per side after the warm-up "
                        "(best kept; default 5)")
    parser.add_argument("--executors", type=int, default=2, help="Slash executors (default 2)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="keep the Parquet files here and reuse them (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workload", choices=WORKLOADS_RUN, default="ysb",
                        help="ysb (default): YSB's filtered count per campaign; count: the plain count "
                             "of 'slash bench count' (int64 ts and k in two files, 100 keys)")
    parser.add_argument("--consume", choices=CONSUME, nargs="+", default=["none"],
                        help="what is timed after the query: none (slash until its DataFrame exists, "
                             "Spark into the noop sink; default), spark (both .agg(count(*), "
                             "sum(count)).collect()), "
                             "arrow (both .toArrow()); several: one measurement each")
    parser.add_argument("--input", choices=INPUTS, default="path",
                        help="what slash.spark is handed: path (the files, default) or dataframe "
                             "(spark.read.parquet of them, as a PySpark user holds them)")
    parser.add_argument("--layout", choices=LAYOUTS, default="ordered",
                        help="ordered: one time-ordered file (default); spanning: the same records "
                             f"dealt across {SPANNING_FILES} part files that each span the whole "
                             "time range")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    if args.workload == "count":
        pairs = ((args.keys if args.keys is not None else 100, args.dist or "uniform"),)
    elif args.keys is None and args.dist is None:
        pairs = DEFAULT_CONFIGS
    else:
        pairs = ((args.keys if args.keys is not None else 100, args.dist or "uniform"),)
    configs = [SparkBenchConfig(records=args.records, keys=k, dist=d, repeat=args.repeat, warmup=args.warmup,
                                warmup_seconds=args.warmup_seconds,
                                executors=args.executors, master=args.master, seed=args.seed,
                                layout=args.layout, workload=args.workload, consume=tuple(args.consume),
                                input=args.input)
               for k, d in pairs]
    return run_all(configs, args.data_dir)
