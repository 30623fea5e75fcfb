"""Shared body of the workload benchmarks (ysb, nexmark-q7/q8/q11, cm, ro):
one query over one generated stream, run by every engine asked for, each
answer checked against DuckDB on the same records.

Input. A :class:`Stream` is one seeded stream of the C generators cut into
blocks of ``block`` records (NEXMark: events); executor ``r`` of ``n`` gets
blocks r, r + n, r + 2n, ... so every executor's split is in time order and
all splits advance through event time together (as partitions of one live
stream would). The union of the splits is exactly the whole stream, which is
what DuckDB and Spark read.

Engines (``--engine``, comma-separated):

* ``slash`` / ``repartition``: N executor processes (spawned) run the query
  with :func:`slash.runner.execute_split` (the runner's per-executor body) in
  ``slash`` mode or the hash-repartitioning baseline. Each process generates
  its own split in C *before* the clock starts and reports how long that
  took; the group starts together once every split is ready, and the time is
  the slowest executor's, from joining the group to its last result.
* ``duckdb``: the same query in SQL over the whole stream as Arrow, with one
  thread (always run: it is the reference every answer is checked against)
  and with all threads.
* ``spark``: Spark's own operators (``groupBy(window(...))`` and joins) over
  the stream written to Parquet (not timed), in ``local[N]``; skipped with
  the reason when pyspark, Java or :mod:`slash.spark` is missing. Timed from
  building the DataFrame (which reads the files' footers) through a ``noop``
  write (the full job without collecting), then collected once for the check.
* ``slash.spark``: the same query through :mod:`slash.spark` on the same
  session and files, for the benchmarks that give a plan for it; timed the
  same way (its barrier stage runs while the DataFrame is built). With
  ``spark`` too, the two take turns each round.

Every answer is compared with DuckDB's (sorted; floats to a relative
tolerance); a mismatch names the column, row and values and fails the run.
Throughput is input records per second (all the query's input records,
before filters), per core (executors or threads), and the ratio against every
other engine measured in the same invocation.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import secrets
import shutil
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import slash.workloads as w
from slash.bench._progress import Progress
from slash.errors import InvalidArgument, NotSupported, SystemFailure
from slash.executor import Executor, GroupConfig
from slash.join import JoinConfig
from slash.run.launcher import ProcessGroup
from slash.query import Query
from slash.runner import execute_split
from slash.workloads import cm_sample
from slash.workloads.gen_nexmark import count

log = logging.getLogger(__name__)

ENGINES = ("slash", "repartition", "duckdb", "spark", "slash.spark")
STREAM_KINDS = ("ysb", "ro", "cm", "cm-sample", "person", "auction", "bid")
_NEXMARK = ("person", "auction", "bid")


# -- input ---------------------------------------------------------------------
@dataclass(frozen=True)
class Stream:
    """One generated stream, cut into blocks; picklable (executors rebuild
    their split from it). ``records`` counts events for NEXMark kinds (the
    records are that kind's share of them). ``constants`` adds int64 columns
    of one value (e.g. a single group key). ``hot`` makes keys hot: each
    ``(column, share, value)`` sets the int64 ``column`` to ``value`` on a
    ``share`` of the rows, picked by a hash of the row's index in the stream
    (so every split and the whole table agree)."""

    kind: str
    records: int
    block: int = 1 << 16
    keys: int = 100
    skew: str = "uniform"
    seed: int = 1
    rate: int = 1_000_000
    columns: Tuple[str, ...] = ()
    sample_path: str = ""
    constants: Tuple[Tuple[str, int], ...] = ()
    hot: Tuple[Tuple[str, float, int], ...] = ()

    def __post_init__(self) -> None:
        for col, share, _ in self.hot:
            if not 0.0 <= share <= 1.0:
                raise InvalidArgument(f"hot key share of {col!r} must be in [0, 1], got {share!r}")
        if self.kind not in STREAM_KINDS:
            raise InvalidArgument(f"stream kind must be one of {STREAM_KINDS}, got {self.kind!r}")
        for name in ("records", "block", "keys", "rate"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
        if self.kind == "cm-sample" and not self.sample_path:
            raise InvalidArgument("the cm-sample stream needs the trace sample's path")

    @property
    def blocks(self) -> int:
        return -(-self.records // self.block)

    def make(self, b: int) -> pa.RecordBatch:
        """Block b as one batch (generated in C; the sample is sliced)."""
        first = b * self.block
        n = min(self.block, self.records - first)
        cols = list(self.columns) or None
        if self.kind == "ysb":
            t = w.ysb(n, keys=self.keys, skew=self.skew, seed=self.seed, rate=self.rate,
                      start=first, batch_size=n, columns=cols)
        elif self.kind == "ro":
            t = w.ro(n, keys=self.keys, skew=self.skew, seed=self.seed, rate=self.rate,
                     start=first, batch_size=n)
        elif self.kind == "cm":
            t = w.cm(n, jobs=self.keys, skew=self.skew, seed=self.seed, rate=self.rate,
                     start=first, batch_size=n, columns=cols)
        elif self.kind == "cm-sample":
            t = _sample(self.sample_path).slice(first, n)
            t = t.select(cols) if cols else t
        else:
            fn = {"person": w.persons, "auction": w.auctions, "bid": w.bids}[self.kind]
            t = fn(n, seed=self.seed, rate=self.rate, first_event=first, batch_size=max(n, 1),
                   columns=cols)
        batch = t.combine_chunks().to_batches()[0] if t.num_rows else \
            pa.RecordBatch.from_pylist([], schema=t.schema)
        for name, value in self.constants:
            batch = batch.append_column(name, pa.array(np.full(batch.num_rows, value, np.int64)))
        for name, share, value in self.hot:
            col = batch.schema.get_field_index(name)
            keys = batch.column(col).to_numpy().copy()
            keys[_unit_hash(first, batch.num_rows, self.seed) < share] = value
            batch = batch.set_column(col, name, pa.array(keys, pa.int64()))
        return batch

    def split(self, rank: int, n: int) -> List[pa.RecordBatch]:
        """Executor rank's blocks: rank, rank + n, ..."""
        return [self.make(b) for b in range(rank, self.blocks, n)]

    def table(self, progress: Optional[Progress] = None) -> pa.Table:
        """The whole stream in order (what DuckDB and Spark read)."""
        batches = []
        for b in range(self.blocks):
            batches.append(self.make(b))
            if progress is not None:
                progress.advance()
        return pa.Table.from_batches(batches)

    def schema(self) -> pa.Schema:
        return self.make(0).schema


def _unit_hash(first: int, n: int, seed: int) -> np.ndarray:
    """A number in [0, 1) per row index first..first+n-1 (splitmix64 of the
    index and seed)."""
    with np.errstate(over="ignore"):
        x = np.arange(first, first + n, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@functools.lru_cache(maxsize=2)
def _sample(path: str) -> pa.Table:
    return cm_sample(path)


class BatchList:
    """A pre-generated split as a source for :func:`slash.runner.execute_split`.

    Unbounded in the runner's sense: the generators emit event time in order,
    as a stream would, and the benchmarks measure the stream path (windows
    fire as the watermark passes them, with the group's lateness); every
    run's answer is still checked against DuckDB."""

    bounded = False

    def __init__(self, batches: List[pa.RecordBatch], schema: pa.Schema) -> None:
        self.batches = batches
        self.schema = schema

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
        for b in self.batches:
            yield b.select(columns) if columns else b


# -- the query ----------------------------------------------------------------
@dataclass(frozen=True)
class MaxSemiJoin:
    """Q7's second step: keep the rows whose ``value`` equals their tumbling
    window's maximum (the first step's aggregate, broadcast to all executors).
    Output: window_start, window_end, then ``columns``."""

    window_ms: int
    value: str
    columns: Tuple[str, ...]


@dataclass(frozen=True)
class WindowJoin:
    """Q8: an executor-level windowed join of inputs[0] (left) and inputs[1]
    (right) on left_key = right_key; output one row per (window, key) that
    has a pair (DISTINCT), the key column named ``out_key``."""

    window: str
    left_key: str
    left_time: str
    right_key: str
    right_time: str
    out_key: str


@dataclass(frozen=True)
class TimeJoin:
    """An interval or sliding-window join (a :class:`slash.query.JoinQuery`
    with ``interval=`` or a sliding window) of inputs[0] (left) and
    inputs[1] (right), run as the runner runs it (prepare, push, finalize);
    ``rename`` renames input columns per side first (``(input, old, new)``),
    so both sides name the key and time alike."""

    query: Any
    rename: Tuple[Tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Plan:
    """A workload: its inputs (table name -> stream), the Slash plan (an
    aggregation ``query`` over inputs[0], optionally followed by ``semijoin``;
    or a ``join``), and the reference SQL over the same table names."""

    name: str
    inputs: Tuple[Tuple[str, Stream], ...]
    sql: str
    query: Optional[Query] = None
    semijoin: Optional[MaxSemiJoin] = None
    join: Optional[WindowJoin] = None
    time_join: Optional[TimeJoin] = None
    float_columns: Tuple[str, ...] = ()
    lateness_ms: int = 0

    @property
    def records(self) -> int:
        """Input records (the rows of every input)."""
        return sum(_rows(s) for _, s in self.inputs)


def _rows(s: Stream) -> int:
    if s.kind in _NEXMARK:
        return count(s.kind, s.records)
    if s.kind == "cm-sample":
        return min(s.records, _sample(s.sample_path).num_rows)
    return s.records


# -- checking answers ----------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str = ""


def verify(got: pa.Table, want: pa.Table, float_columns: Sequence[str] = (),
           rtol: float = 1e-9) -> Verdict:
    """Compares an answer with the reference as multisets of rows: same
    columns (by the reference's names), same row count, and after sorting by
    every column equal values (floats within ``rtol``). The message names the
    first difference."""
    names = want.column_names
    missing = [c for c in names if c not in got.column_names]
    if missing:
        return Verdict(False, f"columns {missing} missing (answer has {got.column_names})")
    if got.num_rows != want.num_rows:
        return Verdict(False, f"{got.num_rows} rows, the reference has {want.num_rows}")
    order = [c for c in names if c not in float_columns] + [c for c in names if c in float_columns]
    a_sorted = _sorted_columns(got.select(names), order)
    b_sorted = _sorted_columns(want, order)
    for c in names:
        a, b = a_sorted[c], b_sorted[c]
        if c in float_columns:
            bad = ~np.isclose(a, b, rtol=rtol, atol=0.0, equal_nan=True)
        else:
            bad = a != b
        if bad.any():
            i = int(np.argmax(bad))
            row = {k: _py(b_sorted[k][i]) for k in names}
            return Verdict(False, f"column {c!r} differs in {int(bad.sum())} of {len(a)} sorted rows; "
                                  f"first at row {i}: got {_py(a[i])}, reference {_py(b[i])} "
                                  f"(reference row {row})")
    return Verdict(True, f"{want.num_rows} rows equal")


def _py(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _sorted_columns(t: pa.Table, order: Sequence[str]) -> Dict[str, np.ndarray]:
    cols = {}
    for c in t.column_names:
        col = t.column(c)
        if pa.types.is_integer(col.type) or pa.types.is_boolean(col.type):
            cols[c] = col.to_numpy().astype(np.int64)
        elif pa.types.is_floating(col.type):
            cols[c] = col.to_numpy().astype(np.float64)
        else:
            cols[c] = np.asarray(col.to_pylist(), dtype=object)
    if not t.num_rows:
        return cols
    idx = np.lexsort([cols[c] for c in reversed(order)])
    return {c: v[idx] for c, v in cols.items()}


# -- engines -------------------------------------------------------------------
@dataclass(frozen=True)
class SuiteConfig:
    engines: Tuple[str, ...] = ("slash", "repartition", "duckdb", "spark")
    executors: int = 2
    transport: str = "shm"
    repeat: int = 1
    timeout: float = 3600.0

    def __post_init__(self) -> None:
        unknown = [e for e in self.engines if e not in ENGINES]
        if unknown or not self.engines:
            raise InvalidArgument(f"--engine takes a comma-separated list of {list(ENGINES)}, "
                                  f"got {list(self.engines)}")
        for name in ("executors", "repeat"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")


def run_duckdb(plan: Plan, tables: Dict[str, pa.Table], threads: int) -> Tuple[float, pa.Table]:
    """(seconds, answer) of the reference SQL with ``threads`` threads."""
    import duckdb  # optional dependency

    con = duckdb.connect()
    try:
        con.execute(f"SET threads={threads}")
        con.execute("SET enable_progress_bar=false")
        for name, t in tables.items():
            con.register(name, t)
        t0 = time.perf_counter()
        out = con.sql(plan.sql).to_arrow_table()
        return time.perf_counter() - t0, out
    finally:
        con.close()


def _execute(plan: Plan, parts: Dict[str, List[pa.RecordBatch]], schemas: Dict[str, pa.Schema],
             rank: int, addresses: List[str], lst: Any, group: Any, token: str,
             in_q: Any, out_q: Any) -> Tuple[pa.Table, Dict[str, Any]]:
    """One executor's timed work; returns (its part of the answer, metrics)."""
    metrics: Dict[str, Any] = {}
    if plan.join is not None:
        return _execute_join(plan, parts, rank, addresses, lst, group, token), metrics
    if plan.time_join is not None:
        return _execute_time_join(plan, parts, rank, addresses, lst, group, token), metrics
    name = plan.inputs[0][0]
    assert plan.query is not None
    part = execute_split(plan.query, BatchList(parts[name], schemas[name]), rank, addresses, lst,
                         group, token, metrics=metrics)
    if plan.semijoin is None:
        return part, metrics
    # Q7: the maxima of the windows this executor leads go to every executor
    # (a broadcast of one row per window), then each keeps its own rows at the max
    sj = plan.semijoin
    out_q.put(("phase1", rank, part))
    maxima: pa.Table = in_q.get(timeout=group.timeout)
    wins = maxima.column("window_start").to_numpy()
    tops = maxima.column(f"max_{sj.value}").to_numpy()
    order = np.argsort(wins)
    wins, tops = wins[order], tops[order]
    kept: List[pa.RecordBatch] = []
    for b in parts[name]:
        t = b.column(plan.query.time).to_numpy()
        ws = t - t % sj.window_ms
        i = np.minimum(np.searchsorted(wins, ws), max(len(wins) - 1, 0))
        if not len(wins):
            continue
        mask = (wins[i] == ws) & (b.column(sj.value).to_numpy() == tops[i])
        if mask.any():
            sel = np.flatnonzero(mask)
            kept.append(pa.RecordBatch.from_arrays(
                [pa.array(ws[sel]), pa.array(ws[sel] + sj.window_ms),
                 *(b.column(c).take(pa.array(sel)) for c in sj.columns)],
                names=["window_start", "window_end", *sj.columns]))
    schema = pa.schema([("window_start", pa.int64()), ("window_end", pa.int64()),
                        *((c, schemas[name].field(c).type) for c in sj.columns)])
    return pa.Table.from_batches(kept, schema=schema), metrics


def _join_pairs(cfg: JoinConfig, left: List[pa.RecordBatch], right: List[pa.RecordBatch],
                push: Callable[[Executor, pa.RecordBatch, pa.RecordBatch], None], rank: int,
                addresses: List[str], lst: Any, group: Any, token: str) -> pa.Table:
    """One join executor's pairs: ``push(ex, left block, right block)`` for
    each pair of blocks, then the end of input."""
    ex = Executor(lst, rank, addresses, cfg, group, token=token)
    out: List[pa.RecordBatch] = []
    try:
        for lb, rb in zip(left, right):
            push(ex, lb, rb)
            out += ex.results()
        ex.finish()
        out += ex.results()
        return pa.Table.from_batches(out, schema=ex.result_schema())
    finally:
        ex.close()


def _execute_join(plan: Plan, parts: Dict[str, List[pa.RecordBatch]], rank: int,
                  addresses: List[str], lst: Any, group: Any, token: str) -> pa.Table:
    j = plan.join
    assert j is not None
    (lname, _), (rname, _) = plan.inputs[0], plan.inputs[1]
    cfg = JoinConfig(window=j.window, partitions=group.partitions_for(len(addresses)))

    def push(ex: Executor, lb: pa.RecordBatch, rb: pa.RecordBatch) -> None:
        ex.push_left(lb.column(j.left_key), lb.column(j.left_time))
        ex.push_right(rb.column(j.right_key), rb.column(j.right_time))

    pairs = _join_pairs(cfg, parts[lname], parts[rname], push, rank, addresses, lst, group, token)
    # DISTINCT (window, key): each (window, key) is emitted by its one leader
    g = pairs.select(["window_start", "window_end", "key"]).group_by(
        ["window_start", "window_end", "key"], use_threads=False).aggregate([])
    return g.rename_columns(["window_start", "window_end", j.out_key])


def _renamed(tj: TimeJoin, name: str, b: pa.RecordBatch) -> pa.RecordBatch:
    new = {old: to for inp, old, to in tj.rename if inp == name}
    return b.rename_columns([new.get(c, c) for c in b.schema.names]) if new else b


def _execute_time_join(plan: Plan, parts: Dict[str, List[pa.RecordBatch]], rank: int,
                       addresses: List[str], lst: Any, group: Any, token: str) -> pa.Table:
    tj = plan.time_join
    assert tj is not None
    q = tj.query
    (lname, ls), (rname, rs) = plan.inputs[0], plan.inputs[1]
    schemas = {side: _renamed(tj, name, pa.RecordBatch.from_pylist([], schema=s.schema())).schema
               for side, (name, s) in (("left", (lname, ls)), ("right", (rname, rs)))}
    cfg = q.join_config(schemas["left"], schemas["right"], group.partitions_for(len(addresses)))

    def push(ex: Executor, lb: pa.RecordBatch, rb: pa.RecordBatch) -> None:
        for side, name, b in (("left", lname, lb), ("right", rname, rb)):
            ex.push_side_batch(side, q.prepare(side, _renamed(tj, name, b), schemas[side]))

    pairs = _join_pairs(cfg, parts[lname], parts[rname], push, rank, addresses, lst, group, token)
    return q.finalize(pairs, schemas["left"], schemas["right"])


def _worker(plan: Plan, rank: int, n: int, mode: str, transport: str, token: str, timeout: float,
            link: Any) -> None:
    in_q = out_q = link  # slash.run.launcher.Link: put() to the parent, get() from it
    try:
        lst = Executor.listen(transport, token=token)
        t0 = time.perf_counter()
        parts = {name: s.split(rank, n) for name, s in plan.inputs}
        gen = time.perf_counter() - t0
        schemas = {name: (parts[name][0].schema if parts[name] else s.schema())
                   for name, s in plan.inputs}
        out_q.put(("ready", rank, lst.address, gen, sum(b.num_rows for p in parts.values() for b in p)))
        addresses = in_q.get(timeout=timeout)
        group = GroupConfig(transport=transport, lateness=plan.lateness_ms, mode=mode)
        t0 = time.perf_counter()
        part, metrics = _execute(plan, parts, schemas, rank, addresses, lst, group, token, in_q,
                                 out_q)
        elapsed = time.perf_counter() - t0
        lst.close()
        out_q.put(("ok", rank, elapsed, metrics, part))
    except BaseException as e:  # the parent raises it, naming the rank
        out_q.put(("error", rank, f"{type(e).__name__}: {e}", traceback.format_exc(),
                   isinstance(e, NotSupported)))


def run_group(plan: Plan, executors: int, mode: str, transport: str = "shm",
              timeout: float = 3600.0) -> Dict[str, Any]:
    """Runs the Slash plan on ``executors`` spawned processes in ``mode``;
    returns seconds (slowest executor), generation seconds, the answer and
    per-executor metrics."""
    if plan.query is None and plan.join is None and plan.time_join is None:
        raise NotSupported(f"{plan.name}: no Slash plan for this query")
    token = secrets.token_hex(16)
    with ProcessGroup(executors, _worker,
                      lambda r: (plan, r, executors, mode, transport, token, timeout),
                      transport=transport) as pg:
        ready: Dict[int, Tuple[str, float, int]] = {}
        phase1: Dict[int, pa.Table] = {}
        done: Dict[int, Tuple[float, Dict[str, Any], pa.Table]] = {}
        t_start = time.monotonic()
        while len(done) < executors:
            try:
                msg = pg.recv(timeout=max(0.0, t_start + timeout - time.monotonic()))
            except SystemFailure as e:  # a dead executor, or slash.errors.Timeout
                raise SystemFailure(f"{plan.name} ({mode}): {e}") from None
            kind, rank = msg[0], msg[1]
            if kind == "error":
                log.debug("executor %d failed:\n%s", rank, msg[3])
                if msg[4]:
                    raise NotSupported(f"{plan.name} ({mode}): {msg[2]}")
                raise SystemFailure(f"{plan.name} ({mode}): executor rank {rank} failed: {msg[2]}")
            if kind == "ready":
                ready[rank] = (msg[2], msg[3], msg[4])
                if len(ready) == executors:  # every split generated: start together
                    pg.broadcast([ready[r][0] for r in range(executors)])
            elif kind == "phase1":
                phase1[rank] = msg[2]
                if len(phase1) == executors:
                    assert plan.query is not None
                    first = plan.inputs[0][1]
                    pg.broadcast(plan.query.finalize(pa.concat_tables(phase1.values()),
                                                     first.schema()))
            else:
                done[rank] = (msg[2], msg[3], msg[4])
    parts = pa.concat_tables([done[r][2] for r in range(executors)])
    if plan.semijoin is None and plan.join is None and plan.time_join is None:
        assert plan.query is not None
        parts = plan.query.finalize(parts, plan.inputs[0][1].schema())
    return {"seconds": max(d[0] for d in done.values()),
            "generation_seconds": max(r[1] for r in ready.values()),
            "generated_records": sum(r[2] for r in ready.values()),
            "answer": parts, "metrics": [done[r][1] for r in range(executors)]}


def spark_session(executors: int) -> Any:
    """A local[N] SparkSession, or raises NotSupported naming what is missing."""
    try:
        import slash.spark as ss  # optional dependency
    except ImportError as e:
        raise NotSupported(f"spark engine skipped: slash.spark is not available ({e})") from None
    try:
        return ss.session(f"local[{executors}]", app_name="slash-bench",
                          conf={"spark.sql.shuffle.partitions": str(executors),
                                "spark.driver.memory": "4g"})
    except ss.SparkUnavailable as e:
        raise NotSupported(f"spark engine skipped: {e}") from None


SparkBuilder = Callable[[Any, Dict[str, str]], Any]


def run_spark(spark: Any, build: SparkBuilder, paths: Dict[str, str]) -> Tuple[float, pa.Table]:
    """(seconds to build the DataFrame and run it into the noop sink, collected answer)."""
    t0 = time.perf_counter()
    df = build(spark, paths)
    df.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - t0
    answer = df.toArrow() if hasattr(df, "toArrow") else pa.Table.from_pandas(df.toPandas())
    return seconds, answer


# -- one invocation ------------------------------------------------------------
def _record(engine: str, cores: int, seconds: float, records: int, verdict: Verdict,
            **extra: Any) -> Dict[str, Any]:
    rps = records / seconds if seconds > 0 else float("inf")
    return {"engine": engine, "cores": cores, "seconds": seconds, "records": records,
            "records_per_s": rps, "records_per_s_per_core": rps / cores,
            "verified": verdict.ok, "check": verdict.message, **extra}


def run_suite(plan: Plan, cfg: SuiteConfig, spark_build: Optional[SparkBuilder] = None,
              parameters: Optional[Dict[str, Any]] = None,
              progress: Optional[Progress] = None,
              slash_spark_build: Optional[SparkBuilder] = None) -> Dict[str, Any]:
    """Runs ``plan`` on every engine of ``cfg``; returns the result dict
    (``runs``: one per engine). ``spark_build`` makes Spark's own query,
    ``slash_spark_build`` the query through slash.spark. Does not raise on a
    wrong answer: callers check ``all_verified`` (:func:`finish` does, loudly)."""
    cpus = os.cpu_count() or 1
    wanted = list(dict.fromkeys(cfg.engines))
    on_spark = [e for e in ("spark", "slash.spark") if e in wanted]
    stages = 2 + ("duckdb" in wanted) + ("slash" in wanted) + ("repartition" in wanted) \
        + bool(on_spark)
    prog = progress or Progress(plan.name, stages)
    runs: List[Dict[str, Any]] = []
    skipped: Dict[str, str] = {}
    records = plan.records
    with prog:
        with prog.stage("generate the stream for DuckDB/Spark",
                        total=sum(s.blocks for _, s in plan.inputs)):
            t0 = time.perf_counter()
            tables = {name: s.table(prog) for name, s in plan.inputs}
            gen_s = time.perf_counter() - t0
        with prog.stage("duckdb, 1 thread (reference)"):
            best, want = math.inf, None
            for _ in range(cfg.repeat):
                s, want = run_duckdb(plan, tables, 1)
                best = min(best, s)
        assert want is not None
        runs.append(_record("duckdb-1", 1, best, records, Verdict(True, "the reference"),
                            threads=1, result_rows=want.num_rows))
        if "duckdb" in wanted and cpus > 1:
            with prog.stage(f"duckdb, {cpus} threads"):
                best, got = math.inf, None
                for _ in range(cfg.repeat):
                    s, got = run_duckdb(plan, tables, cpus)
                    best = min(best, s)
            runs.append(_record(f"duckdb-{cpus}", cpus, best, records,
                                verify(got, want, plan.float_columns), threads=cpus))
        for mode in ("slash", "repartition"):
            if mode not in wanted:
                continue
            with prog.stage(f"{mode}, {cfg.executors} executors"):
                best_r: Optional[Dict[str, Any]] = None
                verdict = Verdict(True)
                for _ in range(cfg.repeat):
                    try:
                        r = run_group(plan, cfg.executors, mode, cfg.transport, cfg.timeout)
                    except NotSupported as e:
                        if mode == "slash":
                            raise
                        skipped[mode] = f"{mode} engine skipped: {e}"
                        log.warning("%s", skipped[mode])
                        break
                    v = verify(r["answer"], want, plan.float_columns)
                    if not v.ok:
                        verdict = v
                    if best_r is None or r["seconds"] < best_r["seconds"]:
                        best_r = r
            if best_r is None:
                continue
            m = best_r["metrics"]
            runs.append(_record(mode, cfg.executors, best_r["seconds"], records, verdict,
                                executors=cfg.executors, transport=cfg.transport,
                                generation_seconds=best_r["generation_seconds"],
                                generation_records_per_s_per_executor=(
                                    best_r["generated_records"] / cfg.executors /
                                    max(best_r["generation_seconds"], 1e-9)),
                                epochs=sum(x.get("epochs", 0) for x in m) / len(m),
                                late_records=sum(x.get("late_records", 0) for x in m),
                                bytes_shipped=sum(x.get("delta_bytes_sent", 0) for x in m)))
        if on_spark:
            with prog.stage(f"{' and '.join(on_spark)}, local[{cfg.executors}]"):
                builds = {"spark": spark_build, "slash.spark": slash_spark_build}
                for e in on_spark:
                    if builds[e] is None:
                        skipped[e] = f"{e} engine skipped: no {e} plan for {plan.name}"
                        log.warning("%s", skipped[e])
                try:
                    runs += _spark_runs(plan, cfg, {e: builds[e] for e in on_spark
                                                    if builds[e] is not None},
                                        tables, want, records)
                except NotSupported as e:
                    for name in on_spark:
                        skipped.setdefault(name, str(e))
                    log.warning("%s", e)
    for r in runs:
        r["workload"] = plan.name
    _ratios(runs)
    return {"benchmark": plan.name, "parameters": parameters or {}, "records": records,
            "cpus": cpus, "generation_seconds_parent": gen_s,
            "generation_records_per_s_parent": records / max(gen_s, 1e-9),
            "runs": runs, "skipped": skipped,
            "all_verified": all(r["verified"] for r in runs),
            "note": "shared machine: other engineers' jobs may run at the same time"}


def _spark_runs(plan: Plan, cfg: SuiteConfig, builds: Dict[str, SparkBuilder],
                tables: Dict[str, pa.Table], want: pa.Table, records: int) -> List[Dict[str, Any]]:
    """One record per engine of ``builds`` (engine -> DataFrame builder), on
    one session over the same files, the engines taking turns each round."""
    if not builds:
        return []
    spark = spark_session(cfg.executors)
    d = tempfile.mkdtemp(prefix="slash-bench-spark-")
    try:
        paths = {}
        for name, t in tables.items():
            paths[name] = os.path.join(d, f"{name}.parquet")
            pq.write_table(t, paths[name], row_group_size=1 << 20)
        best = {e: math.inf for e in builds}
        got: Dict[str, pa.Table] = {}
        for _ in range(cfg.repeat):
            for e, build in builds.items():
                s, got[e] = run_spark(spark, build, paths)
                best[e] = min(best[e], s)
        return [_record(e, cfg.executors, best[e], records,
                        verify(got[e], want, plan.float_columns), executors=cfg.executors)
                for e in builds]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _ratios(runs: List[Dict[str, Any]]) -> None:
    """Adds ``vs_ENGINE`` = this run's records/s over ENGINE's, for every pair."""
    for r in runs:
        r["vs"] = {o["engine"]: r["records_per_s"] / o["records_per_s"]
                   for o in runs if o is not r and o["records_per_s"] > 0}


# -- the CLI face --------------------------------------------------------------
def add_common(p: argparse.ArgumentParser, *, records: int, keys: Optional[int], rate: int,
               skew: bool = True, block: int = 1 << 16) -> None:
    """Options every workload benchmark shares."""
    p.add_argument("--engine", default=",".join(ENGINES),
                   help=f"comma-separated engines of {list(ENGINES)} (default all; duckdb with "
                        "1 thread always runs as the reference)")
    p.add_argument("--executors", type=int, default=2, help="executor processes (default 2)")
    p.add_argument("--records", type=int, default=records,
                   help=f"records in the stream (default {records:,})")
    if keys is not None:
        p.add_argument("--keys", type=int, default=keys, help=f"key range (default {keys:,})")
    if skew:
        p.add_argument("--skew", default="uniform", help="uniform or zipf:S (bounded zipf over the keys)")
    p.add_argument("--rate", type=int, default=rate,
                   help=f"records per second of event time (default {rate:,})")
    p.add_argument("--block", type=int, default=block,
                   help=f"records per generated block; blocks go round-robin to executors "
                        f"(default {block})")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--transport", default="shm", help="shm (default) or ofi:PROVIDER")
    p.add_argument("--repeat", type=int, default=1, help="runs per engine; the best is kept")


def suite_config(args: argparse.Namespace) -> SuiteConfig:
    engines = tuple(e.strip() for e in args.engine.split(",") if e.strip())
    return SuiteConfig(engines=engines, executors=args.executors, transport=args.transport,
                       repeat=args.repeat)


def finish(result: Dict[str, Any], args: argparse.Namespace) -> Dict[str, Any]:
    """Fails loudly on a wrong answer (after writing the JSON, if asked, for
    the record); else returns the result for the CLI."""
    if result["all_verified"]:
        return result
    bad = [f"{r['engine']}: {r['check']}" for r in result["runs"] if not r["verified"]]
    path = getattr(args, "json", None)
    if path and path != "-":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=2, default=str)
    raise SystemFailure(f"{result['benchmark']}: answer differs from DuckDB's: " + "; ".join(bad))


def summary(r: Dict[str, Any]) -> str:
    """One line per engine run."""
    vs = ", ".join(f"{v:.2f}x {k}" for k, v in r.get("vs", {}).items()
                   if k in ("duckdb-1", "repartition", "spark") and k != r["engine"])
    return (f"{r.get('workload', '')} {r['engine']:>12} on {r['cores']} core(s): {r['records_per_s'] / 1e6:8.2f} M rec/s, "
            f"{r['records_per_s_per_core'] / 1e6:7.2f} M rec/s/core, {r['seconds']:.3f} s"
            f"{'; ' + vs if vs else ''}; verified={str(r['verified']).lower()}")


def parameters(args: argparse.Namespace, **extra: Any) -> Dict[str, Any]:
    keep = {k: v for k, v in vars(args).items()
            if isinstance(v, (int, float, str, bool)) or v is None}
    keep.pop("verbose", None)
    return {**keep, **extra}
