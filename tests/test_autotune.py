"""A run given a latency target tunes itself across a rate step (issue 18,
item 4; issue 30): slash.runner.run(latency_target=..., realtime=True)
scales out when the input steps up beyond what one executor follows,
releases the executor when the rate steps back down to a load that fits in
one with margin, logs every decision with its reason, and its output equals
the untuned run's row for row.

Nothing here assumes how fast this machine is or how busy: a calibration
on the same machine, under the same load, just before each step run
(fixture) measures one executor's capacity the way the controller measures
it (a tuned run of one executor over a recording already past, so that it
reads behind the clock and never waits for it: the controller's own
capacity estimate, metrics["autotune"]["capacity_records_per_s"]), and how
long a tuned run takes to start. The step is sized from that capacity C
and the controller's rules, for a run whose executor reads f x C (f: how
much faster the machine got since the calibration):

* HIGH is 6 C for 1.5 s, 9 C-seconds of records. One executor reads them
  behind the clock by more than the target for about 9 / f s, and the
  controller scales out after ``sustain`` (3) late ticks of 1 s with the
  input the bottleneck (the windows of the burst come out late for a tick
  or two after it): that holds for f up to about 2.25; on the first
  pair of reports that shows it already, late or not yet, where the demand
  it measures (6 C) is at least ``surge`` (1.5) x the f C it measures, for
  f up to 4, once a capacity sample is in. At f = 3 one
  executor still falls behind (at half the burst's rate) for about 3 s, at
  the edge of the rule, where under the earlier 3 C for 3 s it did not
  fall behind at all (the one failing run of 20 before this burst). The
  step exceeds the capacity the controller measures in the run (6 C > f C)
  for f up to 6.
* One executor alone drains the burst within 9 / f s of the step; the
  restart path adds its restart (up to 5 s under load), so p99 is back
  under the target within the 30 s the test allows while the machine is up
  to 2.7x slower (f >= 0.37), even where a second executor adds nothing (a
  2-core machine with a hog).
* LOW is C / 20: a release's premise (demand under fit x the measured
  capacity, ``fit`` 0.6) holds unless the machine gets 12x slower; the 50 s
  after the step leave the cool-down (5 s) and ``release_sustain`` (6)
  ticks room after a drain of 20 s, and on the restart path room for the
  release's own checkpoint cut and restart (with 40 s, a release decided
  late once found the input run out before a cut could be made). Whether it held is judged from the
  run's own capacity estimate: a run in which the low rate did not fit
  under ``fit`` x that capacity (a machine 16x slower than calibrated, at
  load 17, once) must not be asked to release and is reported as skipped,
  with both capacities.

Between them the two bounds allow the machine's speed to drift about 7x
between the calibration and the run (late ticks and the drain both scale
with the burst's C-seconds over f), and on a shared 2-core machine it
drifts that much: at load 5-7, 6 C for 2 s (12 C-seconds) failed 3 of 13
runs on the slow side (the run reading at about half the calibrated
capacity, p99 back 31-38 s after the step), 6 C for 1.5 s 2 of 13 on the
fast side (calibrated at 0.5 M rec/s while the run read 1.2-1.8 M: one
executor read the burst in 3 s and caught up before a third late tick, so
the controller rightly did not scale out). That case is judged from the run
itself: the timeline carries the controller's late streak and its
measured overload (demand over executors x capacity), and a run whose
executor was never late for ``sustain`` ticks, nor measured an overload of
``surge``, must not scale out and is reported as skipped, with the streak,
rather than passed.

The recording starts far enough ahead of the clock for the
file to be written and the group to start. The assertions compare the
controller's decisions with what it measured itself in the step run (its
capacity estimate), not with the calibration. The step tests run with a
one-core CPU hog beside them, always: a shared 2-core machine is the case
they must hold in."""
from __future__ import annotations

import logging
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

from slash.control.controller import ControllerConfig
from slash.errors import InvalidArgument
from slash.executor import GroupConfig
from slash.query import Query
from slash.runner import run

UNIT_MS = 100  # one Arrow IPC record batch (a FileSource unit) per 100 ms of event time
TARGET_MS = 250
FIT = 0.6
QUERY = Query(time="t", window="tumbling:1s", key="k", aggregates=["count", "sum:v", "min:v", "max:v"])
SCHEMA = pa.schema([("t", pa.timestamp("ms")), ("k", pa.int32()), ("v", pa.float32())])
LOW_SHARE, HIGH_SHARE = 1 / 20, 6.0  # the rates, in the capacity the controller measured
PHASE_S = (3, 1.5, 50)  # low, high, low: seconds of event time (the module doc says why)
CALIBRATION_SAMPLES = 3  # report intervals (0.5 s) the calibrated capacity rests on


def _write(path: str, phases, base_ms: int, keys: int = 100_000, seed: int = 7) -> int:
    """Writes phases [(records/s, seconds)] as one batch per UNIT_MS from
    base_ms on; returns the records written."""
    rng = np.random.default_rng(seed)
    offset = total = 0
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, SCHEMA) as w:
        for rate, secs in phases:
            for _ in range(int(secs * 1000) // UNIT_MS):
                m = int(rate) * UNIT_MS // 1000
                ts = base_ms + offset + np.sort(rng.integers(0, UNIT_MS, m))
                w.write_batch(pa.record_batch(
                    [pa.array(ts, pa.timestamp("ms")), pa.array(rng.integers(0, keys, m, dtype=np.int32)),
                     pa.array(rng.random(m, dtype=np.float32))], schema=SCHEMA))
                offset += UNIT_MS
                total += m
    return total


@pytest.fixture
def one_core_hog():
    """One more process spinning on a core for the whole test, calibration included."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield hog
    finally:
        hog.kill()
        hog.wait()


def _config() -> ControllerConfig:
    return ControllerConfig(latency_target=f"{TARGET_MS}ms", min_executors=1, max_executors=2,
                            cooldown=5.0, release_sustain=6, fit=FIT)


@pytest.fixture
def calibration(tmp_path_factory, one_core_hog):
    """This machine as loaded now (the hog running): the records/s one
    executor of QUERY reads as the controller measures it (its capacity
    estimate in a tuned run of one executor over a recording an hour in the
    past, read behind the clock from its first batch), the seconds such a
    run takes to start, and the records/s written to a file. The recording
    grows until the run lasted long enough for the estimate to rest on
    CALIBRATION_SAMPLES report intervals; its batches (a tenth of its
    records each) are then of the order of the step's HIGH batches."""
    d = tmp_path_factory.mktemp("calibration")
    # one executor that never acts: what it reads is all there is to measure
    cfg = ControllerConfig(latency_target=f"{TARGET_MS}ms", min_executors=1, max_executors=1,
                           sustain=10_000, release_sustain=10_000)
    n = 2_000_000
    for _ in range(3):  # at most 18 M records (290 MB)
        path = str(d / f"{n}.arrow")
        t0 = time.perf_counter()
        got = _write(path, [(n, 1.0)], int(time.time() * 1000) - 3_600_000, seed=n)
        write_rate = got / (time.perf_counter() - t0)
        m: dict = {}
        t0 = time.perf_counter()
        run(QUERY, path, executors=1, latency_target=cfg, realtime=True, metrics=m,
            group=GroupConfig(epoch_ms=50))
        took = time.perf_counter() - t0
        auto = m["autotune"]
        cap = auto["capacity_records_per_s"]
        if cap is not None and auto["capacity_samples"] >= CALIBRATION_SAMPLES:
            return {"capacity": cap, "samples": auto["capacity_samples"], "records": got,
                    "write_rate": write_rate, "startup_s": max(0.5, took - got / cap)}
        n *= 3
    pytest.fail(f"one executor read {n // 3} records too fast for {CALIBRATION_SAMPLES} "
                f"capacity samples: {auto}")


def write_stepped(path: str, cal: dict) -> dict:
    """Event times that are wall-clock times: LOW, HIGH, LOW records/s
    (from the calibrated capacity) for PHASE_S seconds, starting once the
    file is written and a run has started (both measured, with margin);
    returns the rates and the wall clock of each phase's start."""
    low, high = cal["capacity"] * LOW_SHARE, cal["capacity"] * HIGH_SHARE
    phases = list(zip((low, high, low), PHASE_S))
    records = sum(r * s for r, s in phases)
    lead_s = 2.0 + 2 * records / cal["write_rate"] + 3 * cal["startup_s"]
    base = int(time.time() * 1000 + lead_s * 1000)
    _write(path, phases, base)
    return {"low": low, "high": high, "up": (base + PHASE_S[0] * 1000) / 1000,
            "down": (base + (PHASE_S[0] + PHASE_S[1]) * 1000) / 1000}


def _trace(auto: dict, at: dict) -> str:
    """The run as a failure message: one line per tick, seconds from the step up (a tick
    that repeats the line before it is left out: the message is read whole in CI's log)."""
    lines, last = [], None
    for p in auto["timeline"]:
        cpu = ",".join("-" if c is None else f"{c:.2f}" for c in p["cpu_load"])
        lag = "-" if p["lag_ms"] is None else f"{p['lag_ms']:.0f}"
        line = (f"{p['executors']} x {p['epoch_ms']} ms, {(p['records_per_s'] or 0) / 1e6:.2f} M rec/s, "
                f"p99 {p['latency_p99_ms']}, cpu {cpu}, lag {lag} ms"
                f"{', backlog growing' if p['backlog_growing'] else ''}, late {p['late_streak']}, "
                f"release streak {p['release_streak']}")
        if line != last:
            lines.append(f"{p['t'] - at['up']:6.1f} s: {line}")
        last = line
    return "\n".join(lines)


def _step_run(tmp_path, caplog, cal, **how):
    """The rate step under a 250 ms target; checks what both paths share
    (scale-out in the burst for a rate beyond the measured capacity, p99 back
    under the target within 30 s, the executor released after it because
    the low rate fits one executor with margin, every decision logged,
    output equal to the fixed run's) and returns (metrics, decisions applied)."""
    path = str(tmp_path / "stepped.arrow")
    at = write_stepped(path, cal)
    cfg = _config()
    m: dict = {}
    # epochs of 50 ms are short for the target already (< target / 4), so the
    # controller's only remedy for the burst is executors: an epoch decision
    # first would spend the 5 s cool-down inside the burst
    with caplog.at_level(logging.INFO, logger="slash.control.controller"):
        tuned = run(QUERY, path, executors=1, latency_target=cfg, realtime=True, metrics=m,
                    group=GroupConfig(epoch_ms=50), **how)
    auto = m["autotune"]
    decisions = auto["decisions"]
    cap = auto["capacity_records_per_s"]
    seen = (f"calibration {cal}, the controller's capacity {cap}; step at {at}; {decisions}\n"
            + _trace(auto, at))
    outs = [d for d in decisions if d["action"] == "scale_out" and d["outcome"] == "applied"]
    ins = [d for d in decisions if d["action"] == "scale_in" and d["outcome"] == "applied"]
    # whether one executor fell behind long enough to scale is the controller's own
    # judgement of this run (its late streak in the timeline), not the calibration's
    # forecast: a machine that got faster since reads the burst without falling behind
    step = [p for p in auto["timeline"] if at["up"] <= p["t"] <= at["up"] + 30]
    late = max((p["late_streak"] or 0) for p in step)
    # and whether the demand it measured on any tick was a surge over its capacity
    surged = [p["overload"] for p in step if p["overload"] is not None and p["overload"] >= cfg.surge]
    if not outs:
        assert late < cfg.sustain, f"late for {late} ticks and no scale-out: {seen}"
        assert not surged, f"overloads {surged} and no scale-out: {seen}"
        assert tuned.equals(run(QUERY, path, executors=1))
        pytest.skip(f"one executor read the burst late for {late} ticks only (under "
                    f"{cfg.sustain}): the machine ran faster than calibrated, no scale-out due")
    assert at["up"] <= outs[0]["time"] <= at["up"] + 30, seen
    assert "target" in outs[0]["reason"] and outs[0]["bottleneck"] == "input"
    # the step went beyond what one executor read when it was behind, as the controller
    # measured it in this run (sized at 6x the same measure taken just before, this holds
    # unless the machine got 6x faster since)
    assert cap is not None and at["high"] > cap, seen
    # p99 back under the target within 30 s of the step
    back = [p for p in auto["timeline"] if at["up"] < p["t"] <= at["up"] + 30
            and p["t"] > outs[0]["time"] and p["latency_p99_ms"] is not None
            and p["latency_p99_ms"] < TARGET_MS]
    assert back, seen
    # every decision is in the log with its reason
    logged = [r.getMessage() for r in caplog.records if r.name == "slash.control.controller"]
    for d in decisions:
        assert any(d["action"] in line and d["reason"] in line for line in logged), d
    # output: the untuned run's, row for row (same input, fixed configuration)
    fixed = run(QUERY, path, executors=1)
    assert tuned.num_rows == fixed.num_rows
    assert tuned.equals(fixed)
    # a release is due only where the low rate fits one executor under fit by the capacity
    # the controller measured in this run (at 1/20 of the calibration, unless the machine got
    # 12x slower since): a machine that slow rightly keeps the executors
    if not at["low"] < FIT * cap:
        pytest.skip(f"the low rate {at['low']:.0f} rec/s is not under fit {FIT} x the capacity "
                    f"measured in the run, {cap:.0f} rec/s (calibrated {cal['capacity']:.0f}): "
                    f"the machine ran {cal['capacity'] / cap:.0f}x slower, no release due")
    # stepping back down releases the executor, for the load it measured
    assert ins and ins[-1]["time"] > at["down"], seen
    assert "measured capacity" in ins[-1]["reason"], ins[-1]
    assert auto["executors"] == 1 and m["executors_final"] == 1
    return m, outs + ins


@pytest.mark.quiet  # sized from a calibration just before: the machine must run as fast in the step
def test_latency_target_scales_live_on_a_rate_step_and_releases_after_it(tmp_path, caplog,
                                                                       calibration):
    m, applied = _step_run(tmp_path, caplog, calibration)
    assert m["autotune"]["path"] == "live"
    assert "rescales" not in m  # no restart from a checkpoint
    # each applied scale is a live scale of the provisioned group, in order
    live = m["live_scales"]
    assert [(s["from"], s["to"]) for s in live][:2] == [(1, 2), (2, 1)], live
    assert all(s["paused_ms"] < 2000 for s in live), live


@pytest.mark.quiet  # sized from a calibration just before: the machine must run as fast in the step
def test_latency_target_with_checkpoint_rescales_by_restart_on_a_rate_step(tmp_path, caplog,
                                                                          calibration):
    m, applied = _step_run(tmp_path, caplog, calibration, checkpoint=str(tmp_path / "ck"),
                           checkpoint_every="5s")
    assert m["autotune"].get("path", "restart") == "restart"
    assert [r["to"] for r in m["rescales"]][:1] == [2]


def test_latency_target_needs_wall_clock_event_times(tmp_path):
    t = pa.table({"t": pa.array([0, 1], pa.timestamp("ms")), "k": [1, 2], "v": [1.0, 2.0]})
    with pytest.raises(InvalidArgument, match="realtime=True"):
        run(QUERY, t, executors=1, latency_target="500ms")
    # (max_executors= alone provisions a group that scales live: test_live_scale.py)
    with pytest.raises(InvalidArgument, match="latency_target"):
        run(QUERY, t, executors=1, min_executors=1)


def _single_executor(epoch_ms: int):
    from slash.executor import Executor
    from slash.state import StateConfig

    lst = Executor.listen("shm", token="t")
    ex = Executor(lst, 0, [lst.address], StateConfig(window="tumbling:1h"),
                  GroupConfig(epoch_ms=epoch_ms, epoch_bytes=1 << 40), token="t", bounded=False)
    return lst, ex


def _epochs_during(ex, seconds: float) -> int:
    """Epochs ended while one record a 10 ms is pushed for `seconds`."""
    first = ex.metrics["epochs"]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ex.push_batch(pa.record_batch({"time": pa.array([1_000], pa.int64()),
                                       "key": pa.array([1], pa.int64())}))
        ex.poll(0.01)
    return ex.metrics["epochs"] - first


def test_set_epoch_shortens_the_epochs_of_a_running_executor():
    lst, ex = _single_executor(epoch_ms=60_000)
    try:
        _epochs_during(ex, 0.1)  # the first epochs measure the input (routing)
        before = _epochs_during(ex, 0.5)  # 60 s epochs, one 1 h window: none ends
        ex.set_epoch(epoch_ms=20)
        after = _epochs_during(ex, 0.5)  # about 25 of 20 ms
        assert before == 0 and after >= 5, (before, after)
        with pytest.raises(InvalidArgument, match="epoch_ms"):
            ex.set_epoch(epoch_ms=0)
        with pytest.raises(InvalidArgument, match="give epoch_ms or epoch_bytes"):
            ex.set_epoch()
    finally:
        ex.close()
        lst.close()


def test_ctl_scale_and_epoch_operations_are_registered_and_refused_by_a_run_without_them():
    import argparse
    import os
    import tempfile

    from slash.control import OPERATIONS, ControlServer, RunControl, add_ctl_arguments, request
    from slash.errors import NotSupported

    assert {"scale-out", "scale-in", "epoch"} <= set(OPERATIONS)
    p = argparse.ArgumentParser()
    add_ctl_arguments(p)
    ns = p.parse_args(["scale-out", "2"])
    assert ns.ctl_operation.name == "scale-out" and ns.k == 2
    schema = pa.schema([("t", pa.timestamp("ms")), ("k", pa.int64()), ("v", pa.float64())])
    ctl = RunControl(QUERY, schema, 2)
    path = os.path.join(tempfile.mkdtemp(prefix="slash-ctl-"), "run.sock")
    with ControlServer(ctl, path):
        with pytest.raises(NotSupported, match="scale-out"):
            request(path, "scale-out", {"k": 1})
        with pytest.raises(InvalidArgument, match="ms must be an int >= 1"):
            request(path, "epoch", {"ms": 0})
        ctl.provide("epoch", lambda ms: {"epoch_ms": ms})
        assert request(path, "epoch", {"ms": 50}) == {"epoch_ms": 50}


def test_slash_ctl_on_a_live_tuned_run_scales_live_sets_epochs_and_shows_the_controller(tmp_path):
    import threading

    from slash.control import request, wait_for_socket

    path = str(tmp_path / "steady.arrow")
    schema = SCHEMA
    rng = np.random.default_rng(3)
    base = int(time.time() * 1000) + 3000
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, schema) as w:
        for i in range(60):  # 6 s at 50 k rec/s, one batch per 100 ms
            ts = base + i * UNIT_MS + np.sort(rng.integers(0, UNIT_MS, 5000))
            w.write_batch(pa.record_batch([pa.array(ts, pa.timestamp("ms")),
                                           pa.array(rng.integers(0, 1000, 5000, dtype=np.int32)),
                                           pa.array(rng.random(5000, dtype=np.float32))],
                                          schema=schema))
    sock = str(tmp_path / "c.sock")
    got: dict = {}

    def by_hand():
        wait_for_socket(sock, 60)
        while time.time() * 1000 < base + 1500:
            time.sleep(0.05)
        got["epoch"] = request(sock, "epoch", {"ms": 20})
        got["scale"] = request(sock, "scale-out", {"k": 1})
        got["status"] = request(sock, "status")

    th = threading.Thread(target=by_hand)
    th.start()
    cfg = ControllerConfig(latency_target="30s", min_executors=1, max_executors=2)
    m: dict = {}
    tuned = run(QUERY, path, executors=1, latency_target=cfg, realtime=True, control=sock,
                metrics=m, group=GroupConfig(epoch_ms=100))
    th.join()
    assert got["epoch"]["epoch_ms"] == 20 and got["scale"]["executors"] == 2
    ctl = got["status"]["controller"]
    assert ctl["executors"] == 2 and ctl["epoch_ms"] == 20 and ctl["latency_target_ms"] == 30_000
    assert got["status"]["active_ranks"] == [0, 1]
    assert m["autotune"]["path"] == "live" and [(s["from"], s["to"]) for s in m["live_scales"]] \
        == [(1, 2)]
    assert tuned.equals(run(QUERY, path, executors=1))
