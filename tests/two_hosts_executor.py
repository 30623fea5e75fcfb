"""One executor of a group whose ranks run on different hosts, started by
scripts/rxe-two-hosts.sh in each soft-RoCE guest (no launcher places a rank
on another host: each host starts its own, as a Spark task does, and the
ranks find each other through a directory both hosts see).

    python two_hosts_executor.py RANK N DIR TRANSPORT MODE [PEER_TIMEOUT]

Listens on TRANSPORT (``ofi:verbs``: the address of the host's RDMA
device), writes its address to DIR/addr.RANK and reads every rank's from
there, joins the group, writes DIR/joined.RANK, then:

* MODE ``answer``: pushes its share (every N-th row) of a seeded input,
  finishes and writes the windows it leads to DIR/result.RANK.parquet;
* MODE ``until-lost``: pushes an endless input paced by the clock, a batch
  every 0.2 s, until the group fails (a peer's host was killed), then writes
  the error to DIR/error.RANK;
* MODE ``answer,until-lost``: both in one process, one group after the
  other: ``answer`` in DIR, then a new group in DIR/lost (a guest's Python
  start costs about a minute of its software CPU; one start serves both).

PEER_TIMEOUT (seconds, default 60) is GroupConfig.timeout: a lost host is
reported within it.

The seeded input is :func:`table`; scripts/rxe-two-hosts.sh compares the
windows both ranks wrote with DuckDB's answer over it.
"""
import os
import sys
import time

import numpy as np
import pyarrow as pa

import slash
from netns_executor import push_share
from slash.errors import SlashError

TOKEN = "two-hosts"
#: the longest wait for a peer (GroupConfig.timeout) unless given: a lost host is reported within it
PEER_TIMEOUT = 60.0


def table(seed: int = 42, n: int = 20_000) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"key": pa.array(rng.integers(0, 100, n), pa.int64()),
                     "time": pa.array(np.sort(rng.integers(0, 20_000, n)), pa.int64()),
                     "x": rng.integers(0, 1000, n)})


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)  # the other host never reads half a file


def _addresses(d: str, n: int, deadline: float) -> list:
    while True:
        got = [os.path.join(d, f"addr.{r}") for r in range(n)]
        if all(os.path.exists(p) for p in got):
            return [open(p).read().strip() for p in got]
        if time.monotonic() > deadline:
            missing = [r for r, p in enumerate(got) if not os.path.exists(p)]
            raise TimeoutError(f"no address from rank(s) {missing} in {d}")
        time.sleep(0.2)


def join(rank: int, n: int, d: str, transport: str, peer_timeout: float) -> slash.Executor:
    """Listens, exchanges addresses through ``d`` and joins the group of ``n``."""
    os.makedirs(d, exist_ok=True)
    lst = slash.Executor.listen(transport, token=TOKEN)
    _write(os.path.join(d, f"addr.{rank}"), lst.address)
    print(f"rank {rank} listens at {lst.address}", flush=True)
    addresses = _addresses(d, n, time.monotonic() + 600)
    state = slash.StateConfig(window="tumbling:2s", aggregates=["count", "sum:x"],
                              value_types={"x": "int64"})
    group = slash.GroupConfig(transport=transport, timeout=peer_timeout)
    ex = slash.Executor(lst, rank, addresses, state, group, token=TOKEN)
    lst.close()
    _write(os.path.join(d, f"joined.{rank}"), str(time.time()))
    print(f"rank {rank} joined the group of {n} in {d}", flush=True)
    return ex


def until_lost(ex: slash.Executor, rank: int, d: str) -> None:
    """Pushes a paced endless input until the group fails; writes the error."""
    t, batch = 0, 0
    try:
        while True:
            keys = np.arange(100, dtype=np.int64)
            ex.push(keys, np.full(100, t, dtype=np.int64), {"x": keys})
            ex.results()
            t += 100
            batch += 1
            time.sleep(0.2)
    except SlashError as e:
        _write(os.path.join(d, f"error.{rank}"), f"{type(e).__name__}: {e}")
        print(f"rank {rank} stopped after {batch} batches: {e}", flush=True)


def main() -> int:
    rank, n, d, transport, mode = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4],
                                   sys.argv[5])
    peer_timeout = float(sys.argv[6]) if len(sys.argv) > 6 else PEER_TIMEOUT
    modes = mode.split(",")
    if not modes or not set(modes) <= {"answer", "until-lost"}:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    if "answer" in modes:
        ex = join(rank, n, d, transport, peer_timeout)
        push_share(ex, table(), rank, n, os.path.join(d, f"result.{rank}.parquet"))
        ex.close()
        print(f"rank {rank} finished", flush=True)
    if "until-lost" in modes:
        lost = os.path.join(d, "lost") if "answer" in modes else d
        until_lost(join(rank, n, lost, transport, peer_timeout), rank, lost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
