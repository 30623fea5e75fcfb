"""`slash run` as a careful user drives it: SIGTERM stops it as SIGINT does,
--rate 0 is refused instead of running unthrottled, --timeout bounds (or
unbounds) a run, --control works with --realtime, and `slash ctl status`
shows a rank that stopped reporting as stalled."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _slash_run import ENV, start_slash_run, wait_until
from slash import control
from slash.control import RunControl
from slash.query import Query
from slash.run.protocol import Metrics


def _table(n=60_000):
    rng = np.random.default_rng(1)
    return pa.table({"t": pa.array(np.arange(n) * 2, pa.int64()),
                     "k": pa.array(rng.integers(0, 50, n), pa.int64()),
                     "v": pa.array(rng.integers(0, 9, n), pa.int64())})


def _cli(*argv, timeout=120):
    return subprocess.run([sys.executable, "-m", "slash", *argv], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def test_sigterm_stops_a_run_like_sigint_without_traceback_and_removes_its_socket(tmp_path):
    p, sock = start_slash_run(tmp_path, _table(), rate=5_000)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "Traceback" not in err and "terminated" in err
    assert not os.path.exists(sock)
    assert not (tmp_path / "out.parquet").exists()


def test_rate_zero_is_refused(tmp_path):
    pq.write_table(_table(100), tmp_path / "in.parquet")
    r = _cli("run", "--input", str(tmp_path / "in.parquet"), "--time", "t", "--window",
             "tumbling:1s", "--key", "k", "--agg", "count", "--executors", "1", "--rate", "0",
             "--output", str(tmp_path / "out.parquet"))
    assert r.returncode == 2 and "--rate must be > 0" in r.stderr


def test_timeout_on_the_command_line_bounds_the_run(tmp_path):
    pq.write_table(_table(), tmp_path / "in.parquet", row_group_size=5_000)
    r = _cli("run", "--input", str(tmp_path / "in.parquet"), "--time", "t", "--window",
             "tumbling:1s", "--key", "k", "--agg", "count", "--executors", "1", "--rate", "2000",
             "--no-control", "--timeout", "1.5", "--output", str(tmp_path / "out.parquet"))
    assert r.returncode == 1 and "within 1.5 s" in r.stderr, r.stderr
    bad = _cli("run", "--input", str(tmp_path / "in.parquet"), "--time", "t", "--window",
               "tumbling:1s", "--key", "k", "--agg", "count", "--timeout", "soon",
               "--output", str(tmp_path / "out.parquet"))
    assert bad.returncode == 2 and "--timeout" in bad.stderr


def test_stream_runs_have_no_timeout_by_default():
    from slash.cli.run import NO_TIMEOUT_S, _timeout

    class A:
        timeout, rate, realtime = None, None, False

    a = A()
    assert _timeout(a) == 3600.0
    a.rate = 100.0
    assert _timeout(a) == NO_TIMEOUT_S
    a.rate, a.realtime = None, True
    assert _timeout(a) == NO_TIMEOUT_S
    a.timeout = "none"
    assert _timeout(a) == NO_TIMEOUT_S


def test_control_socket_is_served_with_realtime(tmp_path):
    now = int(time.time() * 1000)
    n = 3000
    pq.write_table(pa.table({"t": pa.array(now + np.arange(n), pa.int64()),
                             "k": pa.array(np.arange(n) % 7, pa.int64())}),
                   tmp_path / "in.parquet", row_group_size=300)
    sock = str(tmp_path / "rt.sock")
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--input", str(tmp_path / "in.parquet"),
                          "--time", "t", "--window", "tumbling:500ms", "--key", "k", "--agg", "count",
                          "--executors", "1", "--realtime", "--control", sock,
                          "--output", str(tmp_path / "out.parquet")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        control.wait_for_socket(sock, 60)
        status = control.request(sock, "status")
        assert status["executors"] == 1
    finally:
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert pq.read_table(tmp_path / "out.parquet").column("count").to_pylist() and \
        sum(pq.read_table(tmp_path / "out.parquet").column("count").to_pylist()) == n


def test_status_shows_a_rank_that_stopped_reporting_as_stalled():
    ctl = RunControl(Query(time="t", window="tumbling:1s", key=["k"], aggregates=["count"]),
                     _table(1).schema, 2)
    ctl.stall_after = 0.2
    ctl.on_message(Metrics(0, {"records_in": 5}))
    ctl.on_message(Metrics(1, {"records_in": 5}))
    time.sleep(0.3)
    ctl.on_message(Metrics(1, {"records_in": 9}))
    st = ctl.status()
    assert st["stalled"] == [0]
    assert st["per_executor"]["0"]["stalled"] and not st["per_executor"]["1"]["stalled"]
    text = control.OPERATIONS["status"].summary(st)
    assert "STALLED: rank 0" in text
    ctl.finished = True  # a finished run has nothing stalled
    assert ctl.status()["stalled"] == []
