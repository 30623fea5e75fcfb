"""Running a query on N executor processes of this machine.

:func:`run` checks the query against the source's schema, starts N executor
processes (the "spawn" method: each starts clean), lets them exchange their
listener addresses, and gathers the results. Each process runs
:func:`execute_split`: it reads its own split of the source, pushes it
through the query's filter and projection into its executor, and returns the
windows it leads. The Spark integration calls :func:`execute_split` from each
barrier task in the same way.

>>> import pyarrow as pa
>>> from slash.query import Query
>>> t = pa.table({"t": [0, 1500, 12000], "k": [1, 1, 2], "v": [1.0, 2.0, 3.0]})
>>> run(Query(time="t", window="tumbling:10s", key="k", aggregates=["count", "sum:v"]), t,
...     executors=1).to_pylist()[0]
{'window_start': 0, 'window_end': 10000, 'k': 1, 'count': 2, 'sum_v': 3.0}
"""
from __future__ import annotations

import gc
import logging
import multiprocessing as mp
import os
import secrets
import tempfile
import time
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from slash.errors import InvalidArgument, SlashError, SystemFailure
from slash.executor import Executor, GroupConfig
from slash.query import JoinQuery, Query
from slash.sources import Source, as_source

log = logging.getLogger(__name__)


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The push loop allocates a few wrapper objects per batch and frees them
    at once; the cyclic collector still ran every few hundred of them (3% of
    a 100-key YSB task) scanning the task's whole heap for nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def execute_split(query: Query, source: Source, rank: int, addresses: List[str], listener: Any,
                  group: GroupConfig, token: str,
                  on_batch: Optional[Callable[[pa.RecordBatch], None]] = None,
                  metrics: Optional[Dict[str, Any]] = None) -> pa.Table:
    """One executor's whole run: read split `rank`, push, finish; returns the
    results this executor leads (key column still named ``key``). With
    ``on_batch`` each fired batch is also handed over as soon as it fires;
    ``metrics``, if given, receives the executor's final metrics."""
    n = len(addresses)
    state = query.state_config(source.schema, group.partitions_for(n))
    ex = Executor(listener, rank, addresses, state, group, token=token)
    out: List[pa.RecordBatch] = []

    def drain() -> None:
        for b in ex.results():
            out.append(b)
            if on_batch is not None:
                on_batch(b)

    try:
        with _no_cyclic_gc():
            for batch in source.read(rank, n, query.input_columns):
                b, skip = query.prepare_selected(batch)
                ex.push_batch(b, skip=skip)
                drain()
            ex.finish()
            drain()
        m = ex.metrics
        if metrics is not None:
            metrics.update(m)
        log.info("executor %d/%d: %d records in, %d epochs, %d late, %d rows out", rank, n,
                 m["records_in"], m["epochs"], m["late_records"], m["rows_emitted"])
        return pa.Table.from_batches(out, schema=ex.result_schema())
    finally:
        ex.close()


def _time_ordered(query: JoinQuery, left: Source, right: Source, rank: int, n: int,
                  batch_rows: int) -> Iterator[Tuple[str, pa.RecordBatch]]:
    """Both sides' rows of one split merged by event time at batch grain:
    each step yields the rows of one side that come before the other side's
    next row, so neither side runs ahead of the other (rows out of order
    within one side are kept in their place; the lateness covers them)."""
    import pyarrow.compute as pc

    its = {"left": left.read(rank, n, query.input_columns("left", left.schema), batch_rows),
           "right": right.read(rank, n, query.input_columns("right", right.schema), batch_rows)}

    def pull(side: str) -> Optional[pa.RecordBatch]:
        for b in its[side]:
            if b.num_rows:
                return b
        return None

    def first_time(b: pa.RecordBatch) -> int:
        return pc.min(b.column(query.time)).cast(pa.int64()).as_py()

    cur = {side: pull(side) for side in its}
    while cur["left"] is not None or cur["right"] is not None:
        live = [s for s in cur if cur[s] is not None]
        if len(live) == 1:
            yield live[0], cur[live[0]]
            cur[live[0]] = pull(live[0])
            continue
        side = min(live, key=lambda s: first_time(cur[s]))
        other = "right" if side == "left" else "left"
        times = cur[side].column(query.time).cast(pa.int64())
        before = pc.less_equal(times, first_time(cur[other]))
        yield side, cur[side].filter(before)
        rest = cur[side].filter(pc.invert(before))
        cur[side] = rest if rest.num_rows else pull(side)


def execute_join_split(query: JoinQuery, left: Source, right: Source, rank: int,
                       addresses: List[str], listener: Any, group: GroupConfig, token: str,
                       batch_rows: int = 8192) -> pa.Table:
    """One join executor's run: its splits of both inputs, in time order."""
    n = len(addresses)
    cfg = query.join_config(left.schema, right.schema, group.partitions_for(n))
    ex = Executor(listener, rank, addresses, cfg, group, token=token)
    out: List[pa.RecordBatch] = []
    try:
        schemas = {"left": left.schema, "right": right.schema}
        for side, batch in _time_ordered(query, left, right, rank, n, batch_rows):
            ex.push_side_batch(side, query.prepare(side, batch, schemas[side]))
            out += ex.results()
        ex.finish()
        out += ex.results()
        return pa.Table.from_batches(out, schema=ex.result_schema())
    finally:
        ex.close()


def _worker(query, source, rank, n, group, token, addr_q, addrs_q, out_q) -> None:
    try:
        lst = Executor.listen(group.transport, token=token)
        addr_q.put((rank, lst.address))
        addresses = addrs_q.get(timeout=group.timeout)
        if isinstance(query, JoinQuery):
            result = execute_join_split(query, source[0], source[1], rank, addresses, lst, group,
                                        token)
        else:
            result = execute_split(query, source, rank, addresses, lst, group, token)
        lst.close()
        out_q.put(("ok", rank, result))
    except BaseException as e:  # the parent raises it, naming the rank
        out_q.put(("error", rank, e if isinstance(e, SlashError) else None,
                   f"{type(e).__name__}: {e}", traceback.format_exc()))


def run(query: Query, source: Any, *, executors: Optional[int] = None, transport: str = "shm",
        mode: str = "slash", group: Optional[GroupConfig] = None, output: Optional[str] = None,
        timeout: float = 3600.0) -> pa.Table:
    """Runs `query` over `source` on `executors` processes (default: cores).

    ``mode="repartition"`` runs the same query by hash-repartitioning records
    across the executors instead (the baseline Slash is compared with).

    Returns the result table (rows sorted by window, then key); with
    ``output`` also writes it as Parquet, atomically (nothing partial is left
    on failure). Raises the first executor's error, naming its rank.
    """
    if isinstance(query, JoinQuery):
        if not (isinstance(source, (tuple, list)) and len(source) == 2):
            raise InvalidArgument("a join runs over two sources: source=(left, right)")
        src = (as_source(source[0]), as_source(source[1]))
        query.check(src[0].schema, src[1].schema)  # every schema error before any process starts
    elif isinstance(query, Query):
        src = as_source(source)
        query.check(src.schema)  # every schema error before any process starts
    else:
        raise InvalidArgument(f"query must be a slash.query.Query or JoinQuery, got "
                              f"{type(query).__name__}")
    n = executors if executors is not None else (os.cpu_count() or 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024:
        raise InvalidArgument(f"executors must be an int in 1..1024, got {executors!r}")
    if group is None:
        group = GroupConfig(transport=transport, lateness=query.lateness, mode=mode)
    group.partitions_for(n)
    token = secrets.token_hex(16)
    ctx = mp.get_context("spawn")
    addr_q, out_q = ctx.Queue(), ctx.Queue()
    addrs_qs = [ctx.Queue() for _ in range(n)]
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(query, src, r, n, group, token, addr_q, addrs_qs[r], out_q))
             for r in range(n)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    try:
        got = {}
        while len(got) < n:
            _check_alive(procs, out_q)
            try:
                r, addr = addr_q.get(timeout=1.0)
                got[r] = addr
            except Exception:
                if time.monotonic() - t0 > group.timeout:
                    raise SystemFailure(f"only {len(got)} of {n} executors started in time") from None
        for q in addrs_qs:
            q.put([got[r] for r in range(n)])
        parts: List[pa.Table] = [None] * n  # type: ignore[list-item]
        done = 0
        while done < n:
            try:
                rep = out_q.get(timeout=1.0)
            except Exception:
                _check_alive(procs, None)
                if time.monotonic() - t0 > timeout:
                    raise SystemFailure(f"query did not finish within {timeout} s") from None
                continue
            if rep[0] == "error":
                _, rank, exc, text, tb = rep
                log.debug("executor %d failed:\n%s", rank, tb)
                if exc is not None:
                    raise type(exc)(f"executor rank {rank}: {exc}")
                raise SystemFailure(f"executor rank {rank} failed: {text}")
            parts[rep[1]] = rep[2]
            done += 1
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    if isinstance(query, JoinQuery):
        result = query.finalize(pa.concat_tables(parts), src[0].schema, src[1].schema)
    else:
        result = query.finalize(pa.concat_tables(parts), src.schema)
    log.info("query ran on %d executors in %.2f s: %d result rows", n, time.monotonic() - t0,
             result.num_rows)
    if output:
        write_parquet_atomically(result, output)
    return result


def _check_alive(procs, out_q) -> None:
    for r, p in enumerate(procs):
        if p.exitcode not in (None, 0):
            raise SystemFailure(f"executor rank {r} died (exit code {p.exitcode}) before reporting")


def write_parquet_atomically(table: pa.Table, path: str) -> None:
    d = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".slash-", suffix=".parquet", dir=d)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
