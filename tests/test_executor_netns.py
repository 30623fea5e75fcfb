"""Across hosts: 3 executors in 3 network namespaces (joined by veth pairs to
a bridge) over ofi:tcp give the sequential answer. Skipped with the reason
where namespaces cannot be created or libfabric is missing."""
import os
import secrets
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import slash

import netns
import netns_executor

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = netns.needs_ofi_and_namespaces()


def test_three_executors_in_three_namespaces_equal_duckdb(tmp_path):
    token = secrets.token_hex(8)
    n = 3
    with netns.hosts(n) as hosts:
        procs = []
        try:
            for rank, (ns, addr) in enumerate(hosts):
                procs.append(netns.run_in(
                    ns, [sys.executable, os.path.join(HERE, "netns_executor.py"), str(rank), str(n),
                         addr, token, str(tmp_path / f"r{rank}.parquet")],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            addresses = [p.stdout.readline().strip() for p in procs]
            for (ns, addr), a in zip(hosts, addresses):
                assert a.startswith(addr + ":"), a
            for p in procs:
                p.stdin.write("".join(a + "\n" for a in addresses))
                p.stdin.flush()
            for p in procs:
                assert p.wait(timeout=180) == 0
        finally:
            for p in procs:
                p.kill()
    got = pa.concat_tables([pq.read_table(tmp_path / f"r{r}.parquet") for r in range(n)])
    con = duckdb.connect()
    con.register("t", netns_executor.stream())
    want = con.sql("SELECT time - time % 2000 AS window_start, key, count(*) AS c, sum(x) AS s "
                   "FROM t GROUP BY ALL").fetchall()
    rows = list(zip(got.column("window_start").to_pylist(), got.column("key").to_pylist(),
                    got.column("count").to_pylist(), got.column("sum_x").to_pylist()))
    assert len(rows) == len(set((r[0], r[1]) for r in rows))
    assert sorted(rows) == sorted(want)
