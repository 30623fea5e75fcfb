"""``update`` with ``checkpoint=`` in slash.runner.run: every checkpoint
records the logic versions agreed so far, and a run started again on its
directory after its driver gave up (a rank SIGKILLed, ``max_restarts=0``)
agrees them again, with or without a control socket, so the result is
DuckDB's over the input split at the update's T: the old filter before T,
the new one from T on, each window once."""
import json
import os
import signal
import threading

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import _slash_run

from slash import control
from slash.errors import SystemFailure
from slash.query import Query
from slash.runner import run

ROWS, SPAN_MS = 60_000, 30_000
Q = Query(time="t", window="tumbling:1s", key="k", aggregates=["count", "sum:v"],
          filters=["v > 10"])


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rng = np.random.default_rng(5)
    t = pa.table({"t": np.sort(rng.integers(0, SPAN_MS, ROWS)).astype(np.int64),
                  "k": rng.integers(0, 20, ROWS), "v": rng.integers(0, 100, ROWS),
                  "c": rng.integers(0, 10, ROWS)})
    path = str(tmp_path_factory.mktemp("upd") / "in.parquet")
    pq.write_table(t, path, row_group_size=1_000)
    return t, path


def duck(t, where):
    con = duckdb.connect()
    con.register("t", t)
    return con.execute(f"select (t // 1000) * 1000, k, count(*), sum(v) from t where {where} "
                       "group by all order by all").fetchall()


def rows(result):
    return sorted(tuple(r[c] for c in ("window_start", "k", "count", "sum_v"))
                  for r in result.to_pylist())


def manifest_logic(ck):
    """The logic versions the newest committed checkpoint in ``ck`` records."""
    found = sorted(os.path.join(ck, d, "_MANIFEST.json") for d in os.listdir(ck)
                   if os.path.exists(os.path.join(ck, d, "_MANIFEST.json")))
    if not found:
        return None
    with open(found[-1], encoding="utf-8") as f:
        return json.load(f)["info"].get("logic")


def updated_then_killed(path, ck, sock):
    """Runs Q paced with a control socket; once 20 % is read updates the
    filter, waits for a checkpoint that records it, and SIGKILLs rank 1:
    with max_restarts=0 the run gives up and leaves the directory. Returns
    the update's answer."""
    got, errors = {}, []

    def driver():
        try:
            control.wait_for_socket(sock, 60)
            _slash_run.wait_until(lambda: control.request(sock, "status")["records"]
                                  >= 0.2 * ROWS, 60, "20% of the input read", every=0.02)
            got["update"] = control.request(sock, "update", {"filter": "c < 5"})
            _slash_run.wait_until(lambda: manifest_logic(ck), 30,
                                  "a checkpoint recording the update", every=0.02)
            st = control.request(sock, "status")
            assert 1 not in st["input_done"], "rank 1 read everything before the kill"
            os.kill(st["per_executor"]["1"]["pid"], signal.SIGKILL)
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread below
            errors.append(e)

    th = threading.Thread(target=driver)
    th.start()
    try:
        with pytest.raises(SystemFailure, match="rank 1"):
            run(Q, path, executors=2, control=sock, checkpoint=ck, checkpoint_every="300ms",
                max_restarts=0, rate=10_000, timeout=120)
    finally:
        th.join(120)
    if errors:
        raise errors[0]
    return got["update"]


@pytest.mark.parametrize("again_with_socket", [False, True])
def test_a_run_started_again_on_an_updated_directory_keeps_the_update(table, tmp_path,
                                                                      again_with_socket):
    t, path = table
    ck, sock = str(tmp_path / "ck"), str(tmp_path / "c.sock")
    upd = updated_then_killed(path, ck, sock)
    T = upd["effective_from_ms"]
    assert 0 < T < SPAN_MS and upd["version"] == 1
    assert manifest_logic(ck) == [{"from_ticks": upd["effective_from_ticks"],
                                   "args": {"filter": "c < 5"}}]
    m = {}
    out = run(Q, path, executors=2, checkpoint=ck, metrics=m, timeout=120,
              control=str(tmp_path / "again.sock") if again_with_socket else None)
    assert m["resumed_from"] is not None
    assert rows(out) == sorted(tuple(r) for r in duck(t, f"v > 10 and (t < {T} or c < 5)"))
    assert rows(out) != sorted(tuple(r) for r in duck(t, "v > 10"))  # the update did something
