"""A group's listener is reachable by any local process (an shm listener is an
abstract Unix socket, listed in /proc/net/unix): a connection with a wrong
token, with garbage, or with nothing at all is closed and logged, and the group
still forms with its real peers; only a real peer that never comes fails it."""
import logging
import secrets
import socket
import threading
import time

import pyarrow as pa
import pytest

import slash
from slash import errors

STATE = dict(window="tumbling:10ms", aggregates=["count"], key_type="int64")


def _hostile(address, transport="shm"):
    """Connects to a listener as a stranger would: a wrong token, and on shm
    also garbage and a connection that sends nothing (held open until the
    test ends)."""
    held = []

    def wrong_token():
        try:
            slash.Channel.connect(transport, address, token="not-the-token", timeout=10)
        except errors.SlashError:
            pass

    t = threading.Thread(target=wrong_token, daemon=True)
    t.start()
    if transport != "shm":
        t.join(10)
        return t, held
    for payload in (b"", b"\x00garbage-garbage-garbage"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect("\0slash-" + address)
        if payload:
            s.send(payload)
        held.append(s)
    return t, held


def _rank(lst, rank, addresses, token, table, out, timeout=30.0, transport="shm"):
    try:
        ex = slash.Executor(lst, rank, addresses, slash.StateConfig(**STATE),
                            slash.GroupConfig(transport=transport, timeout=timeout), token=token)
        ex.push_batch(table.to_batches()[0]) if table.num_rows else None
        ex.finish()
        rows = ex.results()
        ex.close()
        out[rank] = sum(sum(b.column("count").to_pylist()) for b in rows)
    except BaseException as e:  # reported to the test
        out[rank] = e


@pytest.mark.parametrize("transport,strangers_each", [
    ("shm", 3), pytest.param("ofi:tcp", 1, marks=pytest.mark.skipif(
        not slash.have_ofi(), reason="this build has no libfabric (ofi)"))])
def test_group_forms_despite_hostile_connections_and_logs_them(caplog, transport, strangers_each):
    token = secrets.token_hex(8)
    lst = [slash.Executor.listen(transport, token=token) for _ in range(2)]
    addresses = [x.address for x in lst]
    strangers = [_hostile(a, transport) for a in addresses]
    table = pa.table({"key": pa.array([1, 2, 3], pa.int64()), "time": pa.array([1, 2, 3], pa.int64())})
    out = {}
    caplog.set_level(logging.WARNING, logger="slash.executor")
    t0 = time.monotonic()
    threads = [threading.Thread(target=_rank, args=(lst[r], r, addresses, token,
                                                    table if r == 0 else table.slice(0, 0), out),
                                kwargs={"transport": transport})
               for r in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert all(isinstance(v, int) for v in out.values()) and sum(out.values()) == 3, out
    assert time.monotonic() - t0 < 20  # not the join's deadline: each stranger costs <= 2 s
    refused = [r for r in caplog.records if "refused and closed" in r.getMessage()]
    assert len(refused) == 2
    assert all(f"{strangers_each} connection(s)" in r.getMessage() for r in refused)
    for t, held in strangers:
        t.join(10)
        for s in held:
            s.close()
    for x in lst:
        x.close()


def test_a_real_peer_that_never_comes_still_fails_the_join_in_time():
    token = secrets.token_hex(8)
    lst = [slash.Executor.listen("shm", token=token) for _ in range(2)]
    addresses = [x.address for x in lst]
    _, held = _hostile(addresses[0])
    out = {}
    t0 = time.monotonic()
    _rank(lst[0], 0, addresses, token, pa.table({"key": pa.array([], pa.int64()),
                                                 "time": pa.array([], pa.int64())}),
          out, timeout=3.0)
    assert isinstance(out[0], errors.SystemFailure), out
    assert time.monotonic() - t0 < 15
    for s in held:
        s.close()
    for x in lst:
        x.close()
