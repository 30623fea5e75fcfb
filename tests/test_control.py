"""The control plane (slash.control, `slash ctl`): the socket and its
protocol, status of a running `slash run`, and update(filter=...) taking
effect at one event time T on every executor -- checked against DuckDB over
the same input split at T."""
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash import control
from slash.control import ControlServer, LogicPlan, Operation, RunControl, register
from slash.errors import InvalidState, NotSupported, UnknownName
from slash.query import Query
from slash.runner import run
from slash.sources import GeneratorSource

from _slash_run import ENV, start_slash_run, wait_until

def slash(*argv, timeout=120):
    return subprocess.run([sys.executable, "-m", "slash", *argv], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def events(n, seed=1, span_ms=30_000):
    rng = np.random.default_rng(seed)
    return pa.table({"t": np.sort(rng.integers(0, span_ms, n)).astype(np.int64),
                     "k": rng.integers(0, 20, n), "v": rng.integers(0, 100, n),
                     "c": rng.integers(0, 10, n)})


def duck(table, sql):
    con = duckdb.connect()
    con.register("t", table)
    return [tuple(r) for r in con.execute(sql).fetchall()]


def rows(result, cols):
    return [tuple(r[c] for c in cols) for r in result.to_pylist()]


def tumbling_reference(table, size, where):
    return duck(table, f"select (t // {size}) * {size} ws, k, count(*), sum(v) from t "
                       f"where {where} group by all order by ws, k")


# ---- the rule for T ----------------------------------------------------------------------------
def test_the_switch_point_is_the_first_slide_multiple_strictly_after_the_highest_time_seen():
    plan = LogicPlan(Query(time="t", window="sliding:10s/2s", key="k"))
    slide = plan.slide_ticks(1)
    assert slide == 2000
    assert [plan.switch_point(m, slide) for m in (0, 1999, 2000, 2001)] == [2000, 2000, 4000, 4000]
    assert plan.switch_point(-1, slide) == 0
    plan.add(8000, Query(time="t", window="sliding:10s/2s", key="k", filters=["k > 1"]))
    assert plan.switch_point(3000, slide) == 8000  # never before an earlier change


def test_a_session_window_switches_right_after_the_highest_time_seen():
    plan = LogicPlan(Query(time="t", window="session:5s", key="k"))
    assert plan.slide_ticks(1) is None and plan.switch_point(12_345, None) == 12_346


def test_each_row_follows_the_version_its_time_falls_in_as_plain_python_decides():
    rng = np.random.default_rng(7)
    n = 5000
    times = rng.integers(0, 10_000, n)
    t = pa.table({"t": pa.array(np.where(rng.random(n) < 0.05, -1, times)).cast(pa.int64()),
                  "k": pa.array([f"key{x}" for x in rng.integers(0, 9, n)]),
                  "v": rng.integers(0, 100, n)})
    t = t.set_column(0, "t", pa.array([None if x < 0 else int(x) for x in t.column("t").to_pylist()],
                                      pa.int64()))
    base = Query(time="t", window="tumbling:1s", key="k", aggregates=["sum:v"], filters=["v > 20"])
    plan = LogicPlan(base)
    plan.add(3000, Query(time="t", window="tumbling:1s", key="k", aggregates=["sum:v"],
                         filters=["v > 20", "k in ('key1', 'key2', 'key3')"]))
    plan.add(7000, Query(time="t", window="tumbling:1s", key="k", aggregates=["sum:v"],
                         filters=["v < 50"]))
    b, skip, hi = plan.prepare(t.to_batches(max_chunksize=n)[0])
    kept = b if skip is None else b.filter(pa.array(~skip))

    def keep(r):
        tt, k, v = r["t"], r["k"], r["v"]
        if tt is not None and tt < 3000:
            return v > 20
        if tt is not None and tt < 7000:
            return v > 20 and k in ("key1", "key2", "key3")
        return v < 50  # nulls follow the newest version
    want = [r for r in t.to_pylist() if keep(r)]
    assert kept.column("time").to_pylist() == [r["t"] for r in want]
    assert kept.column("v").to_pylist() == [r["v"] for r in want]
    assert hi == max(x for x in t.column("t").to_pylist() if x is not None)


# ---- the socket and its protocol -----------------------------------------------------------------
@pytest.fixture
def idle_server(tmp_path):
    schema = pa.schema([("t", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])
    ctl = RunControl(Query(time="t", window="tumbling:1s", key="k", filters=["v > 1"]), schema, 2)
    with ControlServer(ctl, str(tmp_path / "c.sock")) as srv:
        yield srv


def test_the_socket_is_only_for_its_owner(idle_server):
    assert stat.S_IMODE(os.stat(idle_server.path).st_mode) == 0o600


def test_status_of_a_stream_not_yet_reporting_names_its_logic(idle_server):
    s = control.request(idle_server.path, "status")
    assert s["executors"] == 2 and s["reporting"] == 0 and s["logic_version"] == 0
    assert s["logic"] == [{"version": 0, "from_time_ms": None, "filters": ["v > 1"],
                           "lateness_ms": 0}]


def test_a_bad_request_gets_an_error_answer_and_the_connection_stays_usable(idle_server):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(idle_server.path)
        f = s.makefile("rwb")
        for line in (b"not json\n", b'{"op": "nope"}\n', b'{"op": "status"}\n'):
            f.write(line)
            f.flush()
        answers = [json.loads(f.readline()) for _ in range(3)]
    assert answers[0]["error"]["type"] == "InvalidArgument"
    assert answers[1]["error"]["type"] == "UnknownName" and "status" in answers[1]["error"]["message"]
    assert answers[2]["ok"] and answers[2]["result"]["executors"] == 2


def test_a_registered_operation_is_reachable_by_name(idle_server):
    calls = []
    idle_server.ctl.provide("echo-test", lambda x: calls.append(x) or {"got": x})
    register(Operation("echo-test", lambda ctl, a: ctl.call("echo-test", a["x"]), "test"))
    try:
        assert control.request(idle_server.path, "echo-test", {"x": 3}) == {"got": 3}
        assert calls == [3]
    finally:
        del control.OPERATIONS["echo-test"]
    with pytest.raises(UnknownName, match="echo-test"):
        control.request(idle_server.path, "echo-test", {"x": 3})


def test_an_operation_without_a_runner_hook_is_refused_by_name(idle_server):
    with pytest.raises(NotSupported, match="scale-out"):
        idle_server.ctl.call("scale-out", 1)


def test_a_second_stream_cannot_take_a_live_socket(idle_server):
    with pytest.raises(InvalidState, match="running stream"):
        ControlServer(idle_server.ctl, idle_server.path)


def test_a_stale_socket_of_an_ended_run_is_replaced(tmp_path, idle_server):
    path = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()  # left behind, nobody listening
    with pytest.raises(InvalidState, match="ended"):
        control.request(path, "status")
    with ControlServer(idle_server.ctl, path):
        assert control.request(path, "status")["executors"] == 2


def test_slash_ctl_says_no_stream_runs_at_a_missing_socket(tmp_path):
    r = slash("ctl", "--socket", str(tmp_path / "none.sock"), "status")
    assert r.returncode == 2
    assert "no stream is running at" in r.stderr and "none.sock" in r.stderr


def test_adding_an_aggregate_is_refused_saying_why(idle_server):
    with pytest.raises(NotSupported, match="aggregate slots"):
        control.request(idle_server.path, "update", {"aggregate": ["max:v"]})


def test_a_lateness_change_of_a_bounded_input_is_refused_saying_why(idle_server):
    with pytest.raises(NotSupported, match="bounded"):
        control.request(idle_server.path, "update", {"lateness": "2s"})


# ---- a real `slash run` -----------------------------------------------------------------------
def test_slash_run_updates_its_filter_at_one_window_boundary_on_every_executor(tmp_path):
    table = events(300_000)
    # 10 s of input at 30,000 a second: `slash ctl` (a new interpreter) must start and ask
    # while the run still reads; at 100,000 a second (3 s) the run had ended first at load 25
    p, sock = start_slash_run(tmp_path, table, "--filter", "v > 10", rate=30_000)
    try:
        st = wait_until(lambda: (lambda s: s if s["records"] > 20_000 else None)(
            control.request(sock, "status")), 60, "records flowing")
        assert st["executors"] == 2 and st["logic_version"] == 0
        r = slash("ctl", "--socket", sock, "--json", "update", "--filter", "c < 5")
        assert r.returncode == 0, r.stderr
        upd = json.loads(r.stdout)
        st2 = control.request(sock, "status")
    finally:
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    T = upd["effective_from_ms"]
    assert T % 1000 == 0 and upd["max_event_time_seen_ms"] < T <= upd["max_event_time_seen_ms"] + 1000
    assert 0 < T < 29_000, "the change should fall inside the stream"
    assert st2["logic_version"] == 1 and st2["logic"][1]["from_time_ms"] == T
    assert f"logic v1 from {T} ms" in out
    got = rows(pq.read_table(tmp_path / "out.parquet"), ["window_start", "k", "count", "sum_v"])
    want = tumbling_reference(table, 1000, f"v > 10 and (t < {T} or c < 5)")
    assert got == want
    assert got != tumbling_reference(table, 1000, "v > 10")  # the change did something
    assert got != tumbling_reference(table, 1000, "v > 10 and c < 5")


def test_slash_ctl_refuses_a_filter_on_a_missing_column_naming_it(tmp_path):
    # 100 s of input, killed once answered: the run is still there when `slash ctl` asks
    p, sock = start_slash_run(tmp_path, events(100_000), rate=1_000)
    try:
        r = slash("ctl", "--socket", sock, "update", "--filter", "colour == 'red'")
        st = control.request(sock, "status")
    finally:
        p.kill()
        p.communicate(timeout=60)
    assert r.returncode == 2
    assert "'colour'" in r.stderr and "missing column" in r.stderr
    assert st["logic_version"] == 0


# ---- the Python API ------------------------------------------------------------------------------
def run_with_update(tmp_path, query, table, args, after_records, rate):
    sock = str(tmp_path / "api.sock")
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=5_000)
    out = {}

    def go():
        try:
            out["result"] = run(query, str(tmp_path / "in.parquet"), executors=2, control=sock,
                                rate=rate, metrics=out)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    th = threading.Thread(target=go)
    th.start()
    try:
        control.wait_for_socket(sock, 60)
        wait_until(lambda: control.request(sock, "status")["records"] >= after_records, 60,
                   "records flowing")
        upd = control.request(sock, "update", args)
    finally:
        th.join(120)
    if "error" in out:
        raise out["error"]
    return out["result"], upd


def test_a_sliding_window_straddling_T_holds_old_logic_rows_before_T_and_new_after(tmp_path):
    table = events(200_000, seed=3)
    q = Query(time="t", window="sliding:2s/500ms", key="k", aggregates=["count", "sum:v"])
    got, upd = run_with_update(tmp_path, q, table, {"filter": "v >= 50"}, 20_000, 100_000)
    T = upd["effective_from_ms"]
    assert T % 500 == 0 and 0 < T < 29_000
    want = duck(table, f"""
        with w as (select range * 500 ws from range(-3, 61))
        select ws, k, count(*), sum(v) from t join w on t.t >= ws and t.t < ws + 2000
        where t.t < {T} or v >= 50 group by all order by ws, k""")
    assert rows(got, ["window_start", "k", "count", "sum_v"]) == want


def test_an_update_after_every_executor_read_its_input_is_refused(tmp_path):
    table = events(2_000)
    sock = str(tmp_path / "late.sock")
    ctl = RunControl(Query(time="t", window="tumbling:1s", key="k"), table.schema, 2)
    result = run(Query(time="t", window="tumbling:1s", key="k"), table, executors=2, control=ctl)
    assert result.num_rows and ctl.status()["input_done"] == [0, 1]
    with ControlServer(RunControl(ctl.query, table.schema, 2), sock) as srv:
        srv.ctl._input_done = {0: 10, 1: 20}  # what a finished group reported
        srv.ctl.attach(lambda r, m: pytest.fail("nothing may be sent to finished executors"))
        stop = threading.Event()

        def loop():  # the runner's loop
            while not stop.is_set():
                srv.ctl.service()
                time.sleep(0.01)
        t = threading.Thread(target=loop)
        t.start()
        try:
            with pytest.raises(InvalidState, match="already read all"):
                control.request(sock, "update", {"filter": "k > 3"})
        finally:
            stop.set()
            t.join()


# ---- lateness of an unbounded input ------------------------------------------------------------
BATCHES, PER_BATCH = 24, 200
STRAGGLER_MS = 2500  # each batch's first record lies this far behind the batch's start


def straggling_batches(rank, n):
    """Batch j: one record at j*1000 - 2500 (a straggler), then 200 records
    over [j*1000, j*1000 + 1000); the same for every rank."""
    for j in range(BATCHES):
        t = np.concatenate([[j * 1000 - STRAGGLER_MS], j * 1000 + np.arange(PER_BATCH) * 5])
        yield pa.record_batch({"t": pa.array(t, pa.int64()),
                               "k": pa.array(np.arange(len(t)) % 3 + 10 * rank, pa.int64())})


class UnboundedGenerator(GeneratorSource):
    """An unbounded source (the runner's own sources are all bounded)."""

    bounded = False


def test_a_lower_lateness_makes_stragglers_late_from_the_first_batch_after_T(tmp_path):
    from slash.executor import GroupConfig

    sock = str(tmp_path / "late.sock")
    q = Query(time="t", window="tumbling:1s", key="k", aggregates=["count"], lateness="10s")
    out = {}

    def go():
        try:
            src = UnboundedGenerator(straggling_batches, pa.schema([("t", pa.int64()),
                                                                    ("k", pa.int64())]))
            out["result"] = run(q, src, executors=2, control=sock, metrics=out,
                                rate=2 * 4 * (PER_BATCH + 1),  # 4 batches/s per executor
                                group=GroupConfig(epoch_ms=10, lateness="10s"))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    th = threading.Thread(target=go)
    th.start()
    try:
        control.wait_for_socket(sock, 30)
        wait_until(lambda: "error" in out or
                   (control.request(sock, "status")["max_event_time_ms"] or 0) >= 3000,
                   60, "3 s of event time")
        upd = control.request(sock, "update", {"lateness": "1s"})
    finally:
        th.join(120)
    if "error" in out:
        raise out["error"]
    T = upd["effective_from_ms"]
    assert upd["lateness_ms"] == 1000 and T % 1000 == 0 and 3000 < T < (BATCHES - 2) * 1000
    # plain Python: a straggler is late once its executor published a watermark
    # under the new lateness, i.e. in every batch after the one that reached T
    late = {(rank, j) for rank in (0, 1) for j in range(BATCHES) if j > T // 1000}
    assert out["late_records"] == len(late)
    want = {}
    for rank in (0, 1):
        for j, b in enumerate(straggling_batches(rank, 2)):
            for i, (t, k) in enumerate(zip(b.column("t").to_pylist(), b.column("k").to_pylist())):
                if i == 0 and (rank, j) in late:
                    continue
                key = (t // 1000 * 1000, k)
                want[key] = want.get(key, 0) + 1
    assert rows(out["result"], ["window_start", "k", "count"]) == \
        sorted((ws, k, c) for (ws, k), c in want.items())


def test_a_bounded_executor_refuses_a_lateness_naming_why():
    from slash.errors import InvalidArgument
    from slash.executor import Executor
    from slash.state import StateConfig

    lst = Executor.listen("shm", token="t")
    with Executor(lst, 0, [lst.address], StateConfig(window="tumbling:1s"), token="t",
                  bounded=True) as ex:
        with pytest.raises(InvalidArgument, match="bounded input has no lateness"):
            ex.set_lateness(1000)
    lst.close()
