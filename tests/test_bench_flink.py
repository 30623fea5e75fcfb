"""`slash bench flink`: the answer check, the argument handling, the process
measurement, the input and its DuckDB reference, and (when the PyFlink venv
exists) Flink's own answers on a tiny input.

No timing assertions: these machines are shared.
"""
import argparse
import os
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from slash import errors
from slash.bench import flink


def _args(**kw):
    p = argparse.ArgumentParser()
    flink.add_arguments(p)
    a = p.parse_args([])
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def _answer(counts=(5, 7), key_type=pa.int64()):
    return pa.table({"window_start": pa.array([0, 10_000], pa.int64()),
                     "window_end": pa.array([10_000, 20_000], pa.int64()),
                     "key": pa.array([3, 4], key_type), "count": pa.array(list(counts), pa.int64())})


# -- the answer check ----------------------------------------------------------------
def test_check_accepts_the_same_rows_in_another_order_and_integer_width():
    want = _answer()
    got = _answer(key_type=pa.int32()).take([1, 0])
    v = flink.check(got, want)
    assert v.ok, v.message


def test_check_names_the_column_that_differs():
    v = flink.check(_answer(counts=(5, 8)), _answer())
    assert not v.ok and "'count'" in v.message and "got 8, reference 7" in v.message


def test_check_reports_a_missing_column():
    v = flink.check(_answer().drop(["count"]), _answer())
    assert not v.ok and "count" in v.message


def test_check_reports_a_missing_row():
    v = flink.check(_answer().slice(0, 1), _answer())
    assert not v.ok and "1 rows, the reference has 2" in v.message


# -- arguments and Flink's options -------------------------------------------------
def test_defaults_parse_to_both_workloads_all_sides_and_parallelism_equal_to_cores():
    wls, sides, opts = flink.parse(_args(cores=3))
    assert wls == ["ysb", "nexmark-q7"] and sides == ["flink", "slash-run", "slash-spark"]
    c = opts.config()
    assert c["parallelism.default"] == "3" and c["taskmanager.numberOfTaskSlots"] == "3"
    assert c["taskmanager.memory.managed.size"] == "512m" and opts.mode == "streaming"


@pytest.mark.parametrize("field,value,name", [
    ("workload", "ysb,q5", "--workload"), ("sides", "flink,storm", "--sides"),
    ("records", 0, "--records"), ("cores", True, "--cores"), ("repeat", -1, "--repeat")])
def test_a_bad_argument_is_refused_naming_the_option(field, value, name):
    with pytest.raises(errors.InvalidArgument, match=name):
        flink.parse(_args(**{field: value}))


@pytest.mark.parametrize("kw,match", [({"mode": "micro-batch"}, "--flink-mode"),
                                      ({"managed_memory": "lots"}, "--flink-managed-memory"),
                                      ({"parallelism": 0}, "parallelism")])
def test_bad_flink_options_are_refused(kw, match):
    with pytest.raises(errors.InvalidArgument, match=match):
        flink.FlinkOptions(**kw)


def test_the_watermark_trails_by_the_delay_in_whole_seconds():
    ddl = flink.parquet_table_ddl("t", "/x/y.parquet", [("ts", "BIGINT")], "ts", 3_723_001)
    assert "WATERMARK FOR rt AS rt - INTERVAL '1:02:04' HOUR TO SECOND" in ddl
    assert "TO_TIMESTAMP_LTZ(`ts`, 3)" in ddl and "'path' = 'file:///x/y.parquet'" in ddl


def test_a_delay_of_100_hours_or_more_is_written_in_days():
    assert flink.interval_literal(100 * 3_600_000) == "INTERVAL '5' DAY"


def test_a_delay_beyond_the_interval_literal_is_refused():
    with pytest.raises(errors.InvalidArgument, match="99 days"):
        flink.interval_literal(100 * 86_400_000)


def test_a_missing_pyflink_venv_without_install_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("SLASH_PYFLINK_VENV", str(tmp_path / "none"))
    with pytest.raises(errors.NotSupported, match="install_pyflink"):
        flink.pyflink_python(install=False)


# -- measuring a process -------------------------------------------------------------
def test_measure_counts_the_cpu_of_a_descendant_its_parent_left_running():
    # the child starts a busy grandchild and exits at once, as a JVM launcher may
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
    parent = (f"import subprocess, sys\n"
              f"subprocess.Popen([sys.executable, '-c', {busy!r}])\nprint('started')\n")
    m = flink.measure([sys.executable, "-c", parent])
    assert m.stdout.strip() == "started"
    assert m.cpu_s >= 0.35  # the grandchild was reaped here and its CPU counted


def test_measure_raises_with_the_failed_process_stderr():
    with pytest.raises(errors.SystemFailure, match="boom-7"):
        flink.measure([sys.executable, "-c", "import sys; sys.exit('boom-7')"])


# -- the input and the reference -----------------------------------------------------
def test_the_input_file_is_the_workload_stream_and_the_reference_counts_its_views(tmp_path):
    wl = flink.workload("ysb", 30_000, keys=7)
    path, span = flink.write_input(str(tmp_path), wl)
    t = pq.read_table(path)
    assert t.num_rows == 30_000 and set(t.column_names) >= {"key", "event_time", "event_type"}
    ts = t.column("event_time").to_numpy()
    assert span == ts.max() - ts.min() + 1
    # independently of DuckDB: numpy counts per (window, key) over the views
    views = t.filter(pc.equal(t.column("event_type").cast(pa.string()), "view"))
    win = views.column("event_time").to_numpy() // 10_000 * 10_000
    pairs, counts = np.unique(np.stack([win, views.column("key").to_numpy()]), axis=1,
                              return_counts=True)
    want = pa.table({"window_start": pairs[0], "window_end": pairs[0] + 10_000, "key": pairs[1],
                     "count": counts.astype(np.int64)})
    v = flink.check(flink.reference(wl, path), want)
    assert v.ok, v.message
    assert flink.write_input(str(tmp_path), wl) == (path, span)  # written once, then reused


def test_slash_sides_run_in_turns_and_match_the_reference(tmp_path):
    r = flink.run(_args(workload="ysb,nexmark-q7", records=40_000, sides="slash-run",
                        repeat=2, cores=2, dir=str(tmp_path)))
    assert r["all_verified"]
    ysb, q7 = r["runs"]
    assert [s["side"] for s in ysb["runs"]] == ["slash-run"]
    assert [s["side"] for s in q7["runs"]] == ["slash"]  # Q7: the executors, not slash run
    for w in (ysb, q7):
        s = w["runs"][0]
        assert s["verified"] and 0 < s["query_best_s"] <= s["query_median_s"]
        assert s["queries_per_process"] == 1  # slash run and the executors: one cold query
        assert s["records_per_s"] == pytest.approx(w["records"] / s["query_best_s"], rel=0.05)
        assert len(w["load_before"]) == 3 and w["flink_options"]["parallelism.default"] == "2"


# -- Flink itself, when its venv exists -------------------------------------------
def _pyflink():
    try:
        return flink.pyflink_python(install=False)
    except errors.NotSupported as e:
        pytest.skip(f"no PyFlink venv ({e}); make it with "
                    "`source scripts/install.sh && install_pyflink`")


@pytest.mark.slow  # a JVM and a Flink mini-cluster: ~20 s quiet, a minute on a busy machine
@pytest.mark.parametrize("name", ["ysb", "nexmark-q7"])
def test_flink_answers_equal_duckdb_on_the_same_file(tmp_path, name):
    python = _pyflink()
    wl = flink.workload(name, 20_000, keys=10)
    path, span = flink.write_input(str(tmp_path), wl)
    out = str(tmp_path / "flink.parquet")
    m, rep = flink.run_flink_job(wl.flink(path, span), flink.FlinkOptions(2), out, python,
                                 runs=2)
    assert rep["config"]["parallelism.default"] == "2" and rep["flink_version"] == flink.PYFLINK_VERSION
    assert len(rep["net_runtime_seconds"]) == 2 and min(rep["net_runtime_seconds"]) > 0
    assert m.cpu_s > 0
    want = flink.reference(wl, path)
    assert want.num_rows > 0 and rep["rows"] == want.num_rows
    v = flink.check(pq.read_table(out), want)
    assert v.ok, v.message


# -- the latency run ----------------------------------------------------------------
def test_window_latency_is_the_last_emission_past_the_window_end_without_the_last_window():
    t = pa.table({"window_end": [1000, 1000, 2000, 3000], "emitted": [1010, 1250, 2040, 2500]})
    assert flink.window_latencies(t) == [250.0, 40.0]  # window 3000 fired early by the end of input


def test_the_paced_flink_source_runs_at_the_rate_for_the_seconds_asked():
    job = flink.paced_flink_job(5000, 10, 4, 1000)
    assert "'rows-per-second' = '5000'" in job.statements[0]
    assert "'number-of-rows' = '20000'" in job.statements[0]
    assert "'fields.k.max' = '9'" in job.statements[0] and "INTERVAL '1' SECOND" in job.query
    assert "CAST(CURRENT_TIMESTAMP AS TIMESTAMP(3)) AS emitted" in job.query and "emitted" in job.timestamp_columns


def test_a_latency_window_of_a_fraction_of_a_second_is_refused():
    with pytest.raises(errors.InvalidArgument, match="whole seconds"):
        flink.paced_flink_job(1000, 10, 4, 500)


@pytest.mark.parametrize("field,value,name", [("latency", -1, "--latency"),
                                              ("latency_rate", 0, "--latency-rate"),
                                              ("flink_watermark_delay", -5, "--flink-watermark-delay")])
def test_a_bad_latency_argument_is_refused(field, value, name):
    with pytest.raises(errors.InvalidArgument, match=name):
        flink.parse(_args(**{field: value}))


def test_slash_latency_side_paces_the_rate_asked_and_counts_every_record():
    from slash.bench import latency

    r = latency.measure("shm", "high", 2.0, epoch_ms=200, tick_ms=10, rate=3000)
    assert r["records_per_s"] == 3000 and r["records_in"] == 6000
    assert r["windows"] >= 1 and r["p99_ms"] >= r["p50_ms"]
