"""Shared body of the group benchmarks (scaling, modes): N executor processes,
each generating its own YSB-shaped stream in C and pushing it into its
executor, a count per key per tumbling window; the answer is checked against
DuckDB over the same (regenerated) records.

Each executor e generates ``records`` events with seed base_seed + e over the
same event-time span, so all executors advance through time together.
"""
from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Dict, List

import pyarrow as pa

import slash
from slash.errors import SystemFailure, Timeout
from slash.run.launcher import ProcessGroup
from slash.workloads import ysb_batches

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupBenchConfig:
    executors: int = 2
    records: int = 2_000_000  # per executor
    keys: int = 1000
    skew: str = "uniform"
    window_ms: int = 10_000
    mode: str = "slash"
    transport: str = "shm"
    rate: int = 200_000  # events per second of event time, per executor
    batch: int = 1 << 16
    seed: int = 1
    verify: bool = True
    epoch_bytes: int = 64 << 20  # epochs also end at every window close


def _stream(cfg: GroupBenchConfig, rank: int):
    return ysb_batches(cfg.records, keys=cfg.keys, skew=cfg.skew, seed=cfg.seed + rank,
                       rate=cfg.rate, batch_size=cfg.batch, columns=["key", "event_time"])


def _worker(cfg: GroupBenchConfig, rank: int, token: str, link) -> None:
    try:
        lst = slash.Executor.listen(cfg.transport, token=token)
        link.put(("addr", rank, lst.address))
        addresses = link.get(timeout=120)
        state = slash.StateConfig(window=f"tumbling:{cfg.window_ms}ms", aggregates=["count"])
        group = slash.GroupConfig(transport=cfg.transport, mode=cfg.mode, epoch_bytes=cfg.epoch_bytes)
        ex = slash.Executor(lst, rank, addresses, state, group, token=token)
        link.put(("joined", rank))
        lst.close()
        batches = list(_stream(cfg, rank))  # generated before timing
        out: List[pa.RecordBatch] = []
        t0 = time.perf_counter()
        for b in batches:
            ex.push(b.column(0), b.column(1))
            out += ex.results()
        t_push = time.perf_counter() - t0
        ex.finish()
        out += ex.results()
        elapsed = time.perf_counter() - t0
        m = ex.metrics
        table = pa.Table.from_batches(out, schema=ex.result_schema())
        memory = process_memory()  # with the mesh's rings still mapped
        ex.close()
        link.put(("ok", rank, elapsed, t_push, m, table, memory))
    except BaseException as e:
        link.put(("error", rank, f"{type(e).__name__}: {e}"))


def process_memory() -> Dict[str, int]:
    """This process's resident and proportional set sizes in bytes (``rss``,
    ``pss``: shared pages, the mesh's rings among them, divided among the
    processes that map them; /proc/self/smaps_rollup, empty without it)."""
    out: Dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("Rss", "Pss", "Pss_Shmem"):
                    out[name.lower()] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def run_group(cfg: GroupBenchConfig) -> Dict[str, Any]:
    """Runs one configuration and returns its measurements."""
    n = cfg.executors
    token = secrets.token_hex(8)
    t0 = time.monotonic()
    joined = 0
    start_seconds = 0.0
    with ProcessGroup(n, _worker, lambda r: (cfg, r, token), transport=cfg.transport) as pg:
        got: Dict[int, str] = {}
        reports = []
        try:
            while len(got) + len(reports) < n:  # an executor that fails at setup reports at once
                msg = pg.recv(timeout=120)
                if msg[0] == "addr":
                    got[msg[1]] = msg[2]
                else:
                    reports.append(msg)
            if not reports:
                pg.broadcast([got[r] for r in range(n)])
                while len(reports) < n:
                    msg = pg.recv(timeout=3600)
                    if msg[0] != "joined":
                        reports.append(msg)
                        continue
                    joined += 1
                    if joined == n:  # every executor's mesh is up
                        start_seconds = time.monotonic() - t0
        except Timeout as e:
            raise SystemFailure(f"benchmark group of {n}: {e}") from None
    errs = [r for r in reports if r[0] == "error"]
    if errs:
        raise SystemFailure("; ".join(f"executor {e[1]}: {e[2]}" for e in errs))
    reports.sort(key=lambda r: r[1])
    wall = max(r[2] for r in reports)
    per_exec = [cfg.records / r[2] for r in reports]
    sync = [r[4]["sync_seconds"] / r[2] for r in reports]
    result = pa.concat_tables([r[5] for r in reports])
    res: Dict[str, Any] = {
        "executors": n, "mode": cfg.mode, "transport": cfg.transport, "skew": cfg.skew,
        "keys": cfg.keys, "records_per_executor": cfg.records,
        "records_per_s": n * cfg.records / wall,
        "records_per_s_per_executor": sum(per_exec) / n,
        "sync_share": sum(sync) / n,
        "bytes_shipped": sum(r[4]["delta_bytes_sent"] for r in reports),
        "epochs": sum(r[4]["epochs"] for r in reports) / n,
        "result_rows": result.num_rows,
        # from the launch to every executor's mesh formed (process starts included)
        "start_seconds": start_seconds,
        "epoch_sync_ms": 1e3 * sum(r[4]["sync_seconds"] / max(1, r[4]["epochs"])
                                   for r in reports) / n,
        "rss_bytes": sum(r[6].get("rss", 0) for r in reports),
        "pss_bytes": sum(r[6].get("pss", 0) for r in reports),
        # of it, shared memory: the rings of the mesh (memfds over shm)
        "shmem_pss_bytes": sum(r[6].get("pss_shmem", 0) for r in reports),
    }
    if cfg.verify:
        res["verified"] = verify(cfg, result)
        if not res["verified"]:
            raise SystemFailure(f"benchmark answer differs from DuckDB's ({cfg})")
    return res


def verify(cfg: GroupBenchConfig, result: pa.Table) -> bool:
    """Compares the group's answer with DuckDB's on the same records."""
    import duckdb  # optional dependency

    data = pa.Table.from_batches([b for r in range(cfg.executors) for b in _stream(cfg, r)])
    con = duckdb.connect()
    con.execute("SET threads=1")
    con.register("t", data)
    w = cfg.window_ms
    want = con.sql(f"SELECT event_time - (((event_time % {w}) + {w}) % {w}) AS ws, key, count(*) AS c "
                   f"FROM t GROUP BY ALL ORDER BY ws, key").fetchall()
    got = sorted(zip(result.column("window_start").to_pylist(), result.column("key").to_pylist(),
                     result.column("count").to_pylist()))
    return got == [tuple(r) for r in want]
