"""Shared by the tests that drive a real ``slash run`` over its control
socket (test_control.py, test_rebalance.py, ...): the environment a child
``python -m slash`` needs to import this checkout, starting a run of a
tumbling count/sum query over a parquet file with a control socket,
polling a condition with a deadline, ``slash ctl`` scaling a run out, and a run driven by a thread beside it
(operations sent at fractions of its input)."""
import os
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq

from slash import control

#: a child process imports slash from the same path as this test process
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def start_slash_run(tmp_path, table, *extra, executors=2, transport="shm", rate=100_000):
    """Writes ``table`` to ``tmp_path/in.parquet`` and starts ``slash run``
    (tumbling:1s by k, count and sum:v, into ``tmp_path/out.parquet``) with
    a control socket; returns (the process, the socket's path) once the
    socket answers. ``extra``: more command-line arguments."""
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=5_000)
    sock = str(tmp_path / "ctl.sock")
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--input", str(tmp_path / "in.parquet"),
                          "--time", "t", "--window", "tumbling:1s", "--key", "k", "--agg", "count",
                          "--agg", "sum:v", "--executors", str(executors), "--transport", transport,
                          "--output", str(tmp_path / "out.parquet"), "--control", sock,
                          "--rate", str(rate), *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        control.wait_for_socket(sock, 60)
    except BaseException:
        p.kill()
        p.communicate(timeout=60)
        raise
    return p, sock


def ctl_scale_out_one(sock):
    """``slash ctl scale-out 1`` then ``slash ctl status`` on a ``slash run`` of 1 active
    executor of 2: the command line answers 2 executors, and the status shows ranks
    0 and 1 active and none standby."""
    ctl = [sys.executable, "-m", "slash", "ctl", "--socket", sock]
    r = subprocess.run(ctl + ["scale-out", "1"], capture_output=True, text=True, env=ENV,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "2 executors" in r.stdout
    st = subprocess.run(ctl + ["status"], capture_output=True, text=True, env=ENV, timeout=60)
    assert "active ranks [0, 1], standby ranks []" in st.stdout, st.stdout


def wait_until(cond, timeout, what, every=0.05):
    """cond()'s first truthy value, polled every ``every`` s; AssertionError
    naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def beside(act, go):
    """``go()`` (a run) while a thread does ``act()`` (what the test does to
    the running run); returns (go's result, act's result); act's error is
    raised once go returned."""
    got, errors = {}, []

    def thread():
        try:
            got["act"] = act()
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread below
            errors.append(e)

    th = threading.Thread(target=thread)
    th.start()
    try:
        out = go()
    finally:
        th.join()
    if errors:
        raise errors[0]
    return out, got.get("act")


def ops_at(sock, ops, points, total, args=None):
    """An ``act`` for :func:`beside`: sends each of ``ops`` (``args``, default
    ``{"k": 1}``) over the control socket once its status says the fraction
    of ``total`` records in ``points`` was read; returns the answers."""
    def act():
        control.wait_for_socket(sock, 60)
        done = []
        for op, frac in zip(ops, points):
            wait_until(lambda: control.request(sock, "status")["records"] >= frac * total, 60,
                       f"{frac:.0%} of the input read", every=0.02)
            done.append(control.request(sock, op, {"k": 1} if args is None else args))
        return done
    return act
