"""``slash bench kafka`` (slash.bench.kafka), on the session's real broker:

* the topic's JSON values are the generator's YSB events;
* the reference is DuckDB over the values read back from the broker, and it
  equals counts made by hand from the same values;
* a side whose answer differs from the reference fails the run, naming it
  (the check cannot pass a wrong answer);
* a tiny end-to-end run of ``slash bench kafka --sides slash-run`` fills a
  topic of 8 partitions and reports a verified, measured run.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("confluent_kafka")

import slash.workloads as w  # noqa: E402
from slash.bench import kafka as kb  # noqa: E402
from slash.errors import SystemFailure  # noqa: E402


def args(bootstrap, tmp_path, **kw):
    a = dict(records=6000, partitions=8, keys=7, rate=200, seed=3, cores=2, sides="slash-run",
             repeat=1, bootstrap=bootstrap, spark_kafka_version=None, dir=str(tmp_path / "w"),
             timeout=120.0, latency_rate=0, latency_seconds=60.0, latency_window=1000)
    a.update(kw)
    return argparse.Namespace(**a)


def by_hand(values):
    """{(window_start, campaign): count} of the views, closers left out."""
    got = collections.Counter()
    for v in values:
        e = json.loads(v)
        if e["event_type"] == "view" and e["campaign"] != kb.CLOSER:
            got[(e["event_time"] - e["event_time"] % kb.WINDOW_MS, e["campaign"])] += 1
    return dict(got)


def test_the_topics_values_are_the_generators_ysb_events():
    values = [json.loads(v) for v in kb.ysb_json(500, keys=7, rate=1000, seed=3).to_pylist()]
    t = w.ysb(500, keys=7, rate=1000, seed=3, columns=["key", "event_time", "event_type"])
    assert [v["campaign"] for v in values] == t.column("key").to_pylist()
    assert [v["event_time"] for v in values] == t.column("event_time").to_pylist()
    assert [v["event_type"] for v in values] == t.column("event_type").cast(pa.string()).to_pylist()
    assert all(len(v["ad_id"]) == 32 and v["ip_address"].count(".") == 3 for v in values)


def test_the_reference_is_duckdb_over_the_values_read_back_from_the_broker(kafka_broker, tmp_path):
    topic = kb.fill_topic(kafka_broker.bootstrap, kafka_broker.create_topic, "kbench-ref",
                          3000, 3, 5, 200, 4)
    values = kb.topic_values(topic)
    assert len(values) == 3000 + 3  # the events and one closer per partition
    want = kb.reference(values, str(tmp_path))
    got = {(s, c): n for s, c, n in zip(*(want.column(x).to_pylist() for x in kb.ANSWER_COLUMNS))}
    assert got == by_hand(values) and len(got) == 2 * 5  # 15 s of events: 2 windows of 5 campaigns


def test_a_side_whose_answer_differs_from_duckdbs_fails_the_run(kafka_broker, tmp_path,
                                                                  monkeypatch):
    """A further side (as Flink's will be) is one entry of SIDES; this one
    answers from the topic's values, one count off."""
    def off_by_one(topic, cores, workdir, opts):
        rows = sorted(by_hand(kb.topic_values(topic)).items())
        (s, c), n = rows[0]
        rows[0] = ((s, c), n + 1)
        answer = pa.table({"window_start": [r[0][0] for r in rows],
                           "campaign": [r[0][1] for r in rows], "count": [r[1] for r in rows]})
        return kb.SideRun("off-by-one", kb.comparable(answer), 1.0, 1.0)

    monkeypatch.setitem(kb.SIDES, "off-by-one", off_by_one)
    with pytest.raises(SystemFailure, match=r"off-by-one: column 'count' differs in 1 of"):
        kb.run(args(kafka_broker.bootstrap, tmp_path, sides="off-by-one"))


def test_slash_run_over_a_topic_of_8_partitions_gives_duckdbs_windows_end_to_end(
        kafka_broker, tmp_path):
    out = tmp_path / "r.json"
    got = subprocess.run(
        [sys.executable, "-m", "slash", "bench", "kafka", "--bootstrap", kafka_broker.bootstrap,
         "--sides", "slash-run", "--records", "6000", "--keys", "7", "--rate", "200",
         "--json", str(out)], capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert got.returncode == 0, got.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["all_verified"] and r["partitions"] == 8 and r["records"] == 6000
    [run] = r["runs"]
    assert run["side"] == "slash-run" and run["verified"] and run["check"].endswith("rows equal")
    assert run["records_per_s"] > 0 and run["cpu_s"] > 0 and "load_before" in run
    assert r["reference_rows"] == int(run["check"].split()[0]) > 7
    assert "slash-run" in got.stdout and "verified=true" in got.stdout


# ---- the flink side ------------------------------------------------------------------------------
def _pyflink():
    from slash.bench import flink
    from slash.errors import NotSupported

    try:
        return flink.pyflink_python(install=False)
    except NotSupported as e:
        pytest.skip(f"no PyFlink venv ({e}); make it with "
                    "`source scripts/install.sh && install_pyflink`")


def test_without_the_pyflink_venv_the_flink_side_is_skipped_saying_how_to_install_it(
        kafka_broker, tmp_path, monkeypatch):
    monkeypatch.setenv("SLASH_PYFLINK_VENV", str(tmp_path / "no-venv"))
    r = kb.run(args(kafka_broker.bootstrap, tmp_path, sides="flink", records=800))
    assert r["runs"] == [] and "install_pyflink" in r["skipped"]["flink"]


def test_a_flink_kafka_connector_release_maven_cannot_resolve_is_named_in_the_refusal(tmp_path,
                                                                                     monkeypatch):
    from slash.errors import NotSupported

    if not __import__("shutil").which("mvn"):
        pytest.skip("no Maven (apt-get install maven)")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(NotSupported,
                       match=r"org\.apache\.flink:flink-connector-kafka:0\.0\.0-none"):
        kb.flink_kafka_jars("0.0.0-none")


def test_the_flink_job_reads_the_topic_up_to_the_end_offsets_seen_at_start():
    topic = kb.Topic("127.0.0.1:9", "t", 3, 10, {0: 4, 1: 3, 2: 5})
    ddl = kb.flink_job(topic).statements[0]
    assert "'scan.bounded.specific-offsets' = 'partition:0,offset:4;partition:1,offset:3;" \
           "partition:2,offset:5'" in ddl
    assert "bounded" not in kb.flink_job(topic, live=True).statements[0]


@pytest.mark.slow  # a JVM and a Flink mini-cluster: ~1 min on a busy machine
def test_flink_over_a_topic_of_8_partitions_gives_duckdbs_windows(kafka_broker, tmp_path):
    _pyflink()
    r = kb.run(args(kafka_broker.bootstrap, tmp_path, sides="flink", records=20_000, rate=1000,
                    timeout=600.0))
    [run] = r["runs"]
    assert r["all_verified"] and run["side"] == "flink" and run["verified"]
    assert run["check"].endswith("rows equal") and r["reference_rows"] > 7
    assert run["flink_config"]["parallelism.default"] == "2" and run["cpu_s"] > 0
    assert run["flink_kafka_version"] == "3.4.0-1.20" and run["flink_version"] == "1.20.3"


# ---- the highest sustained rate ------------------------------------------------------------------
def fake_side(capacity, producer_max=10**9):
    """A latency run of a side whose p99 is 200 ms up to ``capacity`` events/s and
    5 s above it, fed by a producer that manages at most ``producer_max``."""
    tried = []

    def trial(rate):
        tried.append(rate)
        return {"side": "fake", "rate": rate, "feed_rate": min(rate, producer_max),
                "windows": 20, "windows_missing": 0, "p50": 100.0,
                "p99": 200.0 if rate <= capacity else 5000.0, "max": 300.0,
                "load_before": 0.0, "load_after": 0.0, "window_ms": 1000}
    return trial, tried


def test_the_sweep_doubles_then_bisects_to_the_highest_rate_the_side_sustains():
    trial, tried = fake_side(capacity=57_000)
    r = kb.sweep_rates(trial, start=10_000, top=1_280_000, steps=3)
    assert tried[:4] == [10_000, 20_000, 40_000, 80_000]  # doubling until 80 k fails
    assert tried[4:] == [60_000, 50_000, 55_000]  # three bisections between 40 k and 80 k
    assert r["sustained_rate"] == 55_000 and r["lowest_failed_rate"] == 60_000
    assert [t["sustained"] for t in r["trials"]] == [True, True, True, False, False, True, True]


def test_a_side_that_fails_the_first_rate_is_tried_lower_and_may_sustain_none():
    r = kb.sweep_rates(fake_side(capacity=3_000)[0], 10_000, 1_280_000, 0)
    assert r["sustained_rate"] == 2_500 and r["lowest_failed_rate"] == 5_000
    r = kb.sweep_rates(fake_side(capacity=10)[0], 10_000, 1_280_000, 3)
    assert r["sustained_rate"] is None and [t["rate"] for t in r["trials"]] == [
        10_000, 5_000, 2_500, 1_250]


def test_a_rate_the_producer_could_not_feed_is_not_sustained_and_ends_the_sweep():
    trial, tried = fake_side(capacity=10**9, producer_max=50_000)
    r = kb.sweep_rates(trial, 10_000, 1_280_000, 3)
    assert tried == [10_000, 20_000, 40_000, 80_000]
    assert r["sustained_rate"] == 40_000 and r["producer_bound"]
    assert not r["trials"][-1]["sustained"]


def test_a_missing_window_is_not_sustained_whatever_the_p99():
    run = fake_side(capacity=10**9)[0](1000)
    assert kb.sustains(run)
    assert not kb.sustains({**run, "windows_missing": 1})


def sample_result():
    tput = {"kind": "throughput", "side": "flink", "cores": 2, "records": 1000,
            "seconds": 2.0, "records_per_s": 500, "cpu_s": 3.0, "cpu_s_per_m_records": 3000.0,
            "broker_cpu_s": 0.1, "verified": True, "check": "7 rows equal",
            "load_before": 1.0, "load_after": 1.2, "timed": "the query"}
    sweep = kb.sweep_rates(fake_side(capacity=57_000)[0], 10_000, 1_280_000, 1)
    fixed = {**fake_side(capacity=10**9)[0](40_000), "kind": "latency", "seconds": 60.0,
             "p95": 150.0, "drain_s": 15.0}
    return {"records": 1000, "partitions": 8, "cores": 2, "cpus": 2, "runs": [tput, sweep, fixed],
            "skipped": {"spark": "no jars"}}


def test_the_table_holds_each_runs_figures():
    md = kb.markdown(sample_result())
    assert "| flink | 500 | 2.00 | 3000.00 |" in md
    assert "| fake | 40,000 | 60,000 | 10,000 (200), 20,000 (200), 40,000 (200), " \
           "80,000 (5,000 x), 60,000 (5,000 x) |" in md
    assert "| fake | 100 | 150 | 200 | 300 | 20 | 0 |" in md and "spark | skipped: no jars" in md


def test_the_plot_is_a_png_of_the_runs(tmp_path):
    pytest.importorskip("matplotlib")
    from slash.bench.plot import plot_kafka

    path = plot_kafka(sample_result(), str(tmp_path / "k.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_table_holds_flinks_in_job_latency_beside_its_drivers():
    result = sample_result()
    result["runs"][2] = {**result["runs"][2], "side": "flink",
                         "in_job": {"p50": 20.0, "p95": 30.0, "p99": 40.0, "max": 50.0}}
    md = kb.markdown(result)
    assert "| flink | 100 | 150 | 200 | 300 | 20 | 0 |" in md
    assert "| flink, rows leaving the window operator (stamped in the job) | 20 | 30 | 40 | 50 |" \
        in md


@pytest.mark.slow  # a JVM and a Flink mini-cluster fed live: ~1.5 min on a busy machine
def test_flinks_live_side_delivers_every_window_of_the_measured_span(kafka_broker, tmp_path):
    _pyflink()
    a = args(kafka_broker.bootstrap, tmp_path)
    values = kb.paced_values(2000, keys=7, seed=3)
    r = kb.latency_run("flink", kafka_broker.bootstrap, kafka_broker.create_topic, 500, 5.0, 2.0,
                       1000, a, str(tmp_path / "lat"), values)
    assert r["windows"] >= 4 and r["windows_missing"] == 0 and r["feed_rate"] >= 450
    assert r["p50"] > 0 and 0 < r["in_job"]["p50"] <= r["p50"] + 1


def test_flinks_rate_is_judged_by_its_windows_leaving_the_window_operator():
    run = {**fake_side(capacity=0)[0](1000), "in_job": {"p99": 300.0}}
    assert run["p99"] == 5000.0 and kb.sustains(run)
    assert not kb.sustains({**run, "in_job": {"p99": 1500.0}})
