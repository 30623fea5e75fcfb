"""The latency floor (issue 18, item 5) and per-window latency of ``slash run``.

* An executor idle in ``poll`` wakes as soon as a peer's epoch moves its
  group watermark (before, it slept to its timeout when it led none of the
  window's rows), and idles without burning its core.
* ``slash.runner.run`` with live metrics reports every window's latency:
  the driver's wall clock when the last executor fired it, minus its end.
"""
from __future__ import annotations

import resource
import secrets
import threading
import time

import numpy as np
import pytest

from slash.bench.latency import PacedSource
from slash.executor import Executor, GroupConfig
from slash.metrics import LiveMetrics
from slash.query import Query
from slash.runner import run
from slash.state import StateConfig

NEVER = -(1 << 63)


def _pair(epoch_ms: int = 0):
    """Two executors of one group in this process (joined from two threads)."""
    token = secrets.token_hex(8)
    lst = [Executor.listen("shm", token=token) for _ in range(2)]
    addrs = [x.address for x in lst]
    state = StateConfig(window="tumbling:1s", aggregates=["count"], partitions=2)
    group = GroupConfig(transport="shm", epoch_ms=epoch_ms)
    out = [None, None]
    errs = []

    def join(r: int) -> None:
        try:
            out[r] = Executor(lst[r], r, addrs, state, group, token=token)
        except BaseException as e:  # noqa: BLE001 -- the test fails with it
            errs.append(e)

    ts = [threading.Thread(target=join, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    for x in lst:
        x.close()
    assert not errs, errs
    return out


def test_an_idle_poll_returns_when_a_peer_moves_the_group_watermark():
    a, b = _pair()
    try:
        a.advance_watermark(10_000)
        a.end_epoch()  # rank 0's own watermark is 10 s: the group's waits for rank 1
        assert a.metrics["group_watermark"] == NEVER
        entered = threading.Event()
        took = []

        def poll() -> None:
            entered.set()
            t0 = time.monotonic()
            a.poll(20.0)  # rank 0 leads no rows: no result will make it return
            took.append(time.monotonic() - t0)

        t = threading.Thread(target=poll)
        t.start()
        entered.wait(10)
        time.sleep(0.3)  # rank 0 is inside poll
        b.advance_watermark(5_000)
        b.end_epoch()
        t.join(30)
        assert took, "poll did not return"
        # the old poll slept to its 20 s timeout; the bound is generous for a loaded machine
        assert took[0] < 0.3 + 5.0
        assert a.metrics["group_watermark"] == 5_000
    finally:
        a.close()
        b.close()


def test_an_idle_poll_does_not_burn_its_core():
    a, b = _pair()
    try:
        used = []

        def poll() -> None:
            r0 = resource.getrusage(resource.RUSAGE_THREAD)
            a.poll(1.0)
            r1 = resource.getrusage(resource.RUSAGE_THREAD)
            used.append((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime))

        t = threading.Thread(target=poll)
        t.start()
        t.join(30)
        # sleeps of at most 1 ms between rounds: a few % of a core (spinning would be ~100%)
        assert used and used[0] < 0.3
    finally:
        a.close()
        b.close()


def test_a_window_is_emitted_once_every_executor_fired_it():
    live = LiveMetrics(executors=2, kind="run")
    live.executor_windows(0, 1000, [(0, 1000, 3)], now_ms=1010)
    assert live.snapshot()["window_latency"]["count"] == 0  # rank 1 has not fired it yet
    live.executor_windows(1, 999, [], now_ms=1020)
    assert live.snapshot()["window_latency"]["count"] == 0  # nor passed its end
    live.executor_windows(1, 1500, [(0, 1000, 2)], now_ms=1030)
    assert list(live.windows) == [(0, 1000, 1030.0, 30.0, 5)]
    lat = live.snapshot()["window_latency"]
    assert lat["count"] == 1 and lat["rows"] == 5 and lat["p50_ms"] == pytest.approx(30.0)


def test_a_window_only_one_executor_has_rows_of_is_emitted_when_the_other_passes_it():
    live = LiveMetrics(executors=2, kind="run")
    live.executor_windows(0, 2000, [(1000, 2000, 1)], now_ms=2004)
    live.executor_windows(1, 2000, [], now_ms=2007)
    assert list(live.windows) == [(1000, 2000, 2007.0, 7.0, 1)]


def test_windows_flushed_by_finish_before_their_end_are_not_observed():
    live = LiveMetrics(executors=1, kind="run")
    live.executor_windows(0, None, [(1000, 2000, 4)], now_ms=1500)
    assert live.windows_flushed == 1
    assert live.snapshot()["window_latency"]["count"] == 0


def test_runner_window_latency_is_emit_time_minus_window_end():
    window_ms = 500
    start = (int(time.time() * 1000) + 2500) // window_ms * window_ms / 1000.0 + window_ms / 1000.0
    src = PacedSource(rate=200, keys=5, seconds=2.0, tick_ms=10, start=start)
    live = LiveMetrics(executors=2, kind="run")
    q = Query(time="t", window=f"tumbling:{window_ms}ms", key="k", aggregates=["count"])
    t0 = time.time() * 1000
    out = run(q, src, executors=2, live=live)
    t1 = time.time() * 1000
    wins = list(live.windows)
    assert wins, "no window latency observed"
    for s, e, emit, lat, rows in wins:
        assert lat == emit - e  # exactly: one clock reading per window
        assert e <= emit <= t1  # never before the window ended (event time is wall clock)
        assert t0 <= emit
    # emitted as the stream ran, not when it ended: the first window before the last one ended
    ends = sorted(w[1] for w in wins)
    assert len(ends) >= 3
    assert min(wins, key=lambda w: w[1])[2] < ends[-1]
    # every window the run returned (and ended before it did) was observed, with its rows
    res = out.group_by(["window_start", "window_end"]).aggregate([("count", "sum")])
    got = {(int(s), int(e)): int(c) for s, e, c in zip(res.column("window_start").to_pylist(),
                                                      res.column("window_end").to_pylist(),
                                                      res.column("count_sum").to_pylist())}
    observed = {(s, e): rows for s, e, _, _, rows in wins}
    per_key_rows = out.group_by(["window_start", "window_end"]).aggregate([("k", "count")])
    rows_of = {(int(s), int(e)): int(c) for s, e, c in zip(per_key_rows.column("window_start").to_pylist(),
                                                          per_key_rows.column("window_end").to_pylist(),
                                                          per_key_rows.column("k_count").to_pylist())}
    assert set(observed) <= set(got)
    assert len(observed) + live.windows_flushed == len(got)
    for w, rows in observed.items():
        assert rows == rows_of[w]
    assert sum(got.values()) == 2.0 * 200  # every record counted once
    # the Prometheus histogram counts them too
    hist = [m for m in live.collect() if m.name == "slash_window_latency_seconds"][0]
    count = [s.value for s in hist.samples if s.name.endswith("_count")][0]
    assert count == len(wins)
    assert np.isfinite(live.snapshot()["window_latency"]["p99_ms"])


def test_a_stream_watermark_ends_the_epoch_without_waiting_for_a_record():
    # 1 record/s over 2 executors: each gets a record every 2 s, and its
    # watermark promises every 10 ms. The source sleeps (no wait hook): a
    # window closed by a promise alone used to wait for that executor's
    # next record (1-2 s); now the promise ends the epoch at once.
    start = (int(time.time() * 1000) + 2500) // 1000 + 1.0
    src = PacedSource(rate=1, keys=1, seconds=4.0, tick_ms=10, start=start, serve=False)
    live = LiveMetrics(executors=2, kind="run")
    run(Query(time="t", window="tumbling:1s", key="k", aggregates=["count"]), src, executors=2,
        live=live)
    lat = sorted(w[3] for w in live.windows)
    assert len(lat) >= 3
    assert lat[len(lat) // 2] < 700.0
