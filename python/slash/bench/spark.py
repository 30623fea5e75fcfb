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

* slash: :func:`slash.spark.run_aggregate`, the whole barrier stage until
  the result DataFrame exists (the results written as Parquet);
* Spark: the same query with Spark's operators, written to the ``noop``
  sink (Spark computes every row and writes nothing: its most favourable
  measure).

Both answers are collected and compared exactly: ``verified``. Records/s
counts the input records (before the filter). ``ratio`` = slash / Spark.
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
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.errors import InvalidArgument
from slash.spark import run_aggregate, session, spark_window_aggregate
from slash.workloads import WORKLOADS, parse_skew, write_parquet

log = logging.getLogger(__name__)

NAME = "spark"
HELP = "YSB 10 s count per campaign: slash.spark against Spark's own groupBy(window), local[2]"

QUERY = dict(time="event_time", window="tumbling:10s", key="key", aggs=["count"],
             filter="event_type == 'view'")
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

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise InvalidArgument(f"layout must be one of {list(LAYOUTS)}, got {self.layout!r}")
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


def make_data(path: str, cfg: SparkBenchConfig) -> str:
    """Writes the records at ``path`` in ``cfg.layout``: one file (ordered) or
    a directory of part files (spanning); returns ``path``."""
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
    base = f"ysb-nn-{cfg.records}-{cfg.keys}-{cfg.dist.replace(':', '')}-{cfg.seed}"
    return f"{base}.parquet" if cfg.layout == "ordered" else f"{base}-spanning{SPANNING_FILES}-{cfg.row_group}"


def data_bytes(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def _interleaved(sides: List[Tuple[str, Callable[[], Any]]], warmup: int, warmup_seconds: float,
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


def _sorted_columns(table) -> Dict[str, Any]:
    t = table.sort_by([("window_start", "ascending"), ("key", "ascending")])
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in ("window_start", "window_end", "key", "count")}


def verify(ours, theirs) -> bool:
    if ours.num_rows != theirs.num_rows:
        log.warning("spark bench: slash has %d result rows, Spark %d", ours.num_rows, theirs.num_rows)
        return False
    a, b = _sorted_columns(ours), _sorted_columns(theirs)
    return all(np.array_equal(a[c], b[c]) for c in a)


def run_config(spark: Any, path: str, cfg: SparkBenchConfig, progress: Progress) -> Dict[str, Any]:
    label = f"{cfg.keys} keys {cfg.dist}:"
    ref = spark_window_aggregate(spark, path, **QUERY)
    (ts_slash, ts_spark), (res, _) = _interleaved(
        [(f"{label} slash.spark", lambda: run_aggregate(spark, path, executors=cfg.executors, **QUERY)),
         (f"{label} Spark groupBy(window)", lambda: ref.write.format("noop").mode("overwrite").save())],
        cfg.warmup, cfg.warmup_seconds, cfg.repeat, progress)
    t_slash, t_spark = min(ts_slash), min(ts_spark)
    progress.describe(f"{label} comparing answers")
    ours, theirs = res.df.toArrow(), ref.toArrow()
    ok = verify(ours, theirs)
    progress.step(f"{label} answers {'equal' if ok else 'DIFFER'}")
    rate, srate = cfg.records / t_slash, cfg.records / t_spark
    return {"keys": cfg.keys, "dist": cfg.dist, "records": cfg.records, "layout": cfg.layout,
            "slash_records_per_s": rate, "spark_records_per_s": srate, "ratio": rate / srate,
            "verified": ok, "result_rows": ours.num_rows, "slash_seconds": t_slash,
            "spark_seconds": t_spark, "median_ratio": statistics.median(ts_spark) / statistics.median(ts_slash),
            "slash_run_seconds": ts_slash, "spark_run_seconds": ts_spark,
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
    per = 2 * configs[0].repeat + 3  # data, warm-up, both sides' runs, the check
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
                progress.describe(f"writing {cfg.records:,} YSB records ({cfg.keys:,} keys {cfg.dist}, "
                                  f"{cfg.layout})")
                if not os.path.exists(path):
                    make_data(path, cfg)
                progress.step(f"data: {data_bytes(path) / 1e6:.0f} MB Parquet ({cfg.layout})")
                runs.append(run_config(spark, path, cfg, progress))
    finally:
        progress.close()
    return {"runs": runs, "all_verified": all(r["verified"] for r in runs)}


def summary(run: Dict[str, Any]) -> str:
    return (f"spark  keys={run['keys']:<9} dist={run['dist']:<8} records={run['records']:,}  "
            f"layout={run.get('layout', 'ordered')}  "
            f"slash.spark {run['slash_records_per_s'] / 1e6:7.1f} M rec/s  "
            f"Spark groupBy(window) {run['spark_records_per_s'] / 1e6:6.1f} M rec/s  "
            f"ratio {run['ratio']:5.2f}x (medians {run['median_ratio']:.2f}x)  "
            f"answers {'equal' if run['verified'] else 'DIFFER'}")


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
    parser.add_argument("--layout", choices=LAYOUTS, default="ordered",
                        help="ordered: one time-ordered file (default); spanning: the same records "
                             f"dealt across {SPANNING_FILES} part files that each span the whole "
                             "time range")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    if args.keys is None and args.dist is None:
        pairs = DEFAULT_CONFIGS
    else:
        pairs = ((args.keys if args.keys is not None else 100, args.dist or "uniform"),)
    configs = [SparkBenchConfig(records=args.records, keys=k, dist=d, repeat=args.repeat, warmup=args.warmup,
                                warmup_seconds=args.warmup_seconds,
                                executors=args.executors, master=args.master, seed=args.seed,
                                layout=args.layout)
               for k, d in pairs]
    return run_all(configs, args.data_dir)
