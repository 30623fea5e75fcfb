"""Executor processes for test_executor.py (importable, so the "spawn" start
method finds them: every executor starts clean, as in a Spark worker)."""
from __future__ import annotations

import os
import signal
import time
import traceback

import pyarrow as pa

import slash


def join(transport, rank, token, addr_q, addrs_q, state_kw, group_kw, bind=None, config=None):
    """Listens, reports the address, learns everyone's, joins the group (an
    aggregation after state_kw, or the given config, e.g. a JoinConfig)."""
    lst = slash.Executor.listen(transport, token=token, bind=bind)
    addr_q.put((rank, lst.address))
    addresses = addrs_q.get(timeout=60)
    ex = slash.Executor(lst, rank, addresses, config or slash.StateConfig(**state_kw),
                        slash.GroupConfig(transport=transport, **group_kw), token=token)
    lst.close()
    return ex


def run(transport, rank, n, token, addr_q, addrs_q, out_q, table, state_kw, group_kw,
        batch_rows=500, kill_after=None, bind=None):
    """Joins the group, pushes `table` in batches, finishes, and reports
    ("ok", rank, results table, metrics) or ("error", rank, exception text)."""
    try:
        ex = join(transport, rank, token, addr_q, addrs_q, state_kw, group_kw, bind)
        late = 0
        results = []
        for i, batch in enumerate(table.to_batches(max_chunksize=batch_rows)):
            if kill_after is not None and i == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            late += ex.push_batch(batch)
            results += ex.results()
        ex.finish()
        results += ex.results()
        m = ex.metrics
        m["late_total"] = late
        out = pa.Table.from_batches(results, schema=ex.result_schema())
        ex.close()
        out_q.put(("ok", rank, out, m))
    except BaseException as e:  # reported to the test, which fails with it
        out_q.put(("error", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def hold_then_advance(transport, rank, n, token, addr_q, addrs_q, out_q, state_kw, group_kw, ctl_q):
    """An executor with no input whose watermark the test moves by hand:
    it waits for ("advance", t) / ("poll",) / ("standby", follow) /
    ("finish",) commands on ctl_q."""
    try:
        ex = join(transport, rank, token, addr_q, addrs_q, state_kw, group_kw)
        results = []
        while True:
            cmd = ctl_q.get(timeout=120)
            if cmd[0] == "advance":
                ex.advance_watermark(cmd[1])
                ex.end_epoch()
                out_q.put(("advanced", rank))
            elif cmd[0] == "poll":
                ex.poll(0.2)
                results += ex.results()
                out_q.put(("polled", rank, pa.Table.from_batches(results, schema=ex.result_schema())))
            elif cmd[0] == "standby":  # ("standby", ranks to follow or None)
                ex.set_standby(cmd[1])
                out_q.put(("standby", rank))
            else:
                break
        ex.finish()
        results += ex.results()
        out_q.put(("ok", rank, pa.Table.from_batches(results, schema=ex.result_schema()), ex.metrics))
        ex.close()
    except BaseException as e:
        out_q.put(("error", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def push_then_wait(transport, rank, n, token, addr_q, addrs_q, out_q, table, state_kw, group_kw,
                   ctl_q):
    """Pushes its table, then reports what it emitted while polling, until
    told to finish."""
    try:
        ex = join(transport, rank, token, addr_q, addrs_q, state_kw, group_kw)
        results = []
        for batch in table.to_batches(max_chunksize=200):
            ex.push_batch(batch)
            results += ex.results()
        ex.end_epoch()
        out_q.put(("pushed", rank))
        while True:
            cmd = ctl_q.get(timeout=120)
            if cmd[0] == "poll":
                deadline = time.monotonic() + cmd[1]
                while time.monotonic() < deadline:
                    ex.poll(0.05)
                    results += ex.results()
                out_q.put(("polled", rank, pa.Table.from_batches(results, schema=ex.result_schema())))
            else:
                break
        ex.finish()
        results += ex.results()
        out_q.put(("ok", rank, pa.Table.from_batches(results, schema=ex.result_schema()), ex.metrics))
        ex.close()
    except BaseException as e:
        out_q.put(("error", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_join(transport, rank, n, token, addr_q, addrs_q, out_q, left, right, join_kw, group_kw):
    """A join executor: pushes its left and right splits interleaved in time
    order, finishes, reports ("ok", rank, results, metrics)."""
    try:
        ex = join(transport, rank, token, addr_q, addrs_q, None, group_kw,
                  config=slash.JoinConfig(**join_kw))
        results = []
        import pyarrow.compute as pc
        tmax = max(pc.max(t.column("time")).as_py() or 0 for t in (left, right))
        for lo in range(0, tmax + 500, 500):  # both sides advance through time together
            for name, t in (("left", left), ("right", right)):
                part = t.filter(pc.and_(pc.greater_equal(t.column("time"), lo),
                                        pc.less(t.column("time"), lo + 500)))
                if part.num_rows:
                    late = ex.push_side_batch(name, part)
                    assert late == 0, f"{late} late {name} rows"
            results += ex.results()
        ex.finish()
        results += ex.results()
        out_q.put(("ok", rank, pa.Table.from_batches(results, schema=ex.result_schema()), ex.metrics))
        ex.close()
    except BaseException as e:
        out_q.put(("error", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def push_and_hold_pair(ctx, table, state_kw, group_kw, transport="shm"):
    """A group of two spawned processes: rank 0 pushes ``table`` and waits
    (push_then_wait), rank 1 pushes nothing and waits for commands
    (hold_then_advance). Returns (their command queues, expect(kind): the
    next report, asserted to be of that kind, the processes)."""
    import secrets

    token = secrets.token_hex(8)
    ctl = [ctx.Queue(), ctx.Queue()]
    addr_q, out_q = ctx.Queue(), ctx.Queue()
    addrs_qs = [ctx.Queue(), ctx.Queue()]
    procs = [ctx.Process(target=push_then_wait, daemon=True,
                         args=(transport, 0, 2, token, addr_q, addrs_qs[0], out_q, table, state_kw,
                               group_kw, ctl[0])),
             ctx.Process(target=hold_then_advance, daemon=True,
                         args=(transport, 1, 2, token, addr_q, addrs_qs[1], out_q, state_kw,
                               group_kw, ctl[1]))]
    for p in procs:
        p.start()
    got = dict(addr_q.get(timeout=120) for _ in range(2))
    for q in addrs_qs:
        q.put([got[0], got[1]])

    def expect(kind):
        r = out_q.get(timeout=120)
        assert r[0] == kind, r
        return r

    return ctl, expect, procs
