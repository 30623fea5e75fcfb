"""One executor run inside a network namespace by test_executor_netns.py.

    python netns_executor.py RANK N BIND_HOST TOKEN OUT.parquet
prints its listener address, reads every rank's address (one per line) from
stdin, pushes its share of a seeded stream, finishes and writes the windows it
leads to OUT.parquet.
"""
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import slash


def stream(seed: int = 21, n: int = 30000) -> pa.Table:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, 30000, n))
    return pa.table({"key": pa.array(rng.integers(0, 200, n), pa.int64()),
                     "time": pa.array(t, pa.int64()), "x": rng.integers(0, 100, n)})


def main() -> int:
    rank, n, host, token, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    lst = slash.Executor.listen("ofi:tcp", token=token, bind=f"{host}:0")
    print(lst.address, flush=True)
    addresses = [sys.stdin.readline().strip() for _ in range(n)]
    state = slash.StateConfig(window="tumbling:2s", aggregates=["count", "sum:x"],
                              value_types={"x": "int64"})
    ex = slash.Executor(lst, rank, addresses, state, slash.GroupConfig(transport="ofi:tcp"),
                        token=token)
    lst.close()
    push_share(ex, stream(), rank, n, out)
    ex.close()
    return 0


def push_share(ex: slash.Executor, table: pa.Table, rank: int, n: int, out: str) -> None:
    """Pushes rank's share of ``table`` (every n-th row) into ``ex``, finishes
    and writes the windows it fired to ``out`` (a Parquet file). Also the body
    of two_hosts_executor.py's ranks."""
    mine = table.filter(pa.array(np.arange(table.num_rows) % n == rank))
    results = []
    for b in mine.to_batches(max_chunksize=1000):
        ex.push_batch(b)
        results += ex.results()
    ex.finish()
    results += ex.results()
    pq.write_table(pa.Table.from_batches(results, schema=ex.result_schema()), out)


if __name__ == "__main__":
    sys.exit(main())
