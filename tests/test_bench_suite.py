"""The workload benchmarks (slash bench ysb, nexmark-q5/q7/q8/q11, cm, ro) and
slash bench report: every query on small data through every available engine
equals DuckDB, the check catches wrong answers, and the report builds
Markdown and PNGs from JSON results of every shape."""
from __future__ import annotations

import argparse
import functools
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from slash.bench import (_suite, cm, interval_join, nexmark_q5, nexmark_q7, nexmark_q8, nexmark_q11,
                         report, ro, ysb)
from slash.bench._progress import Progress
from slash.errors import SystemFailure

BLOCK = 16_384


def _spark_available() -> bool:
    try:
        from slash.spark import _env

        _env.require_pyspark()
        _env.require_java()
    except Exception:
        return False
    return True


HOT_INTERVAL = (-5_000, 10_000)
ENGINES = ("slash", "repartition", "duckdb") + (("spark", "slash.spark") if _spark_available() else ())

PLANS = {
    "ysb": lambda: ysb.plan(150_000, keys=1000, rate=20_000, block=BLOCK),
    "ysb-zipf": lambda: ysb.plan(150_000, keys=1000, skew="zipf:1.5", rate=20_000, block=BLOCK),
    "ro": lambda: ro.plan(150_000, keys=100_000_000, block=BLOCK),
    "cm": lambda: cm.plan(150_000, rate=20_000, block=BLOCK),
    "nexmark-q5": lambda: nexmark_q5.plan(300_000, rate=2_000, block=BLOCK),
    "nexmark-q7": lambda: nexmark_q7.plan(300_000, rate=2_000, block=BLOCK),
    "nexmark-q8": lambda: nexmark_q8.plan(300_000, rate=2, block=BLOCK),
    "nexmark-q11": lambda: nexmark_q11.plan(300_000, block=BLOCK),
    # streams with a block's lateness: the watermark moves while rows are buffered
    "interval-join": lambda: interval_join.plan(300_000, block=BLOCK),
    # issue 44's case: one id on 5 % of each side, an interval reaching both ways
    "interval-join-hot": lambda: interval_join.plan(300_000, block=BLOCK, hot_key=0.05,
                                                    interval=HOT_INTERVAL),
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_engine_equals_duckdb(name):
    plan = PLANS[name]()
    res = _suite.run_suite(plan, _suite.SuiteConfig(engines=ENGINES, executors=2),
                           _spark_builders()[name.split("-zipf")[0]], progress=Progress(name, 6, plain=True),
                           slash_spark_build=SLASH_SPARK.get(name))
    engines = {r["engine"] for r in res["runs"]}
    assert {"duckdb-1", "slash"} <= engines, res
    if name in SLASH_SPARK and "spark" in ENGINES:  # through PySpark as well, same answer
        assert {"spark", "slash.spark"} <= engines, res["skipped"]
    # repartition runs every aggregation; a join only where the core offers it
    assert "repartition" in engines or (name == "nexmark-q8" and "repartition" in res["skipped"])
    for r in res["runs"]:
        assert r["verified"], (r["engine"], r["check"])
        assert r["records"] == plan.records and r["records_per_s"] > 0
    assert res["runs"][0]["result_rows"] > 0
    assert res["all_verified"]
    slash = next(r for r in res["runs"] if r["engine"] == "slash")
    assert slash["late_records"] == 0
    assert slash["vs"]["duckdb-1"] > 0


#: the benchmarks that also time their query through slash.spark
SLASH_SPARK = {"nexmark-q5": nexmark_q5.slash_spark_plan}


def _spark_builders():
    return {"ysb": ysb.spark_plan, "nexmark-q5": nexmark_q5.spark_plan, "ro": ro.spark_plan(3_600_000), "cm": cm.spark_plan, "nexmark-q7": nexmark_q7.spark_plan,
            "nexmark-q8": nexmark_q8.spark_plan, "nexmark-q11": nexmark_q11.spark_plan,
            "interval-join": interval_join.spark_plan,
            "interval-join-hot": functools.partial(interval_join.spark_plan, interval=HOT_INTERVAL)}


def test_cm_on_the_trace_sample():
    from slash.workloads.gen_cm import find_sample

    path = os.environ.get("SLASH_DATA_DIR") and find_sample() or next(
        (p for p in ("/work/shared/data/google-cluster-task-events-sample.txt",) if os.path.exists(p)), None)
    if path is None:
        pytest.skip("the cluster-trace sample is not on this machine (set SLASH_DATA_DIR)")
    plan = cm.plan(10**9, sample=str(path))
    assert plan.records == 16_385
    res = _suite.run_suite(plan, _suite.SuiteConfig(engines=("slash", "duckdb"), executors=2),
                           progress=Progress("cm", 4, plain=True))
    assert res["all_verified"], res["runs"]


def test_splits_are_the_whole_stream_in_order():
    s = _suite.Stream("ysb", 50_000, block=4096, keys=77, columns=("key", "event_time"))
    whole = s.table()
    assert whole.num_rows == 50_000
    parts = [s.split(r, 3) for r in range(3)]
    # block b goes to rank b % 3; interleaving them back gives the stream
    merged = [parts[b % 3][b // 3] for b in range(s.blocks)]
    assert pa.Table.from_batches(merged).equals(whole)
    for p in parts:  # each split is in time order
        t = pa.Table.from_batches(p).column("event_time").to_numpy()
        assert (t[1:] >= t[:-1]).all()


def _answer() -> pa.Table:
    return pa.table({"window_start": [0, 0, 10], "window_end": [10, 10, 20], "key": [1, 2, 1],
                     "count": [3, 4, 5], "avg_x": [0.5, 0.25, 1.0]})


def test_verify_accepts_any_row_order_and_float_noise():
    want = _answer()
    got = want.take([2, 0, 1]).set_column(4, "avg_x", pa.array([1.0, 0.5, 0.25 * (1 + 1e-12)]))
    assert _suite.verify(got, want, ["avg_x"]).ok


@pytest.mark.parametrize("wrong, words", [
    (lambda t: t.set_column(3, "count", pc.add(t.column("count"), pa.array([0, 1, 0]))), "'count'"),
    (lambda t: t.slice(0, 2), "2 rows"),
    (lambda t: t.set_column(4, "avg_x", pa.array([0.5, 0.25, 1.001])), "'avg_x'"),
    (lambda t: t.drop_columns(["key"]), "missing"),
    (lambda t: t.set_column(2, "key", pa.array([1, 3, 1])), "'key'"),
])
def test_verify_rejects_a_wrong_answer_naming_it(wrong, words):
    v = _suite.verify(wrong(_answer()), _answer(), ["avg_x"])
    assert not v.ok and words in v.message, v.message


def test_a_wrong_answer_fails_the_run_loudly(tmp_path):
    res = {"benchmark": "ysb", "all_verified": False,
           "runs": [{"engine": "slash", "verified": False, "check": "column 'count' differs"}]}
    path = tmp_path / "out.json"
    with pytest.raises(SystemFailure, match="slash: column 'count' differs"):
        _suite.finish(res, argparse.Namespace(json=str(path)))
    assert json.loads(path.read_text())["all_verified"] is False  # kept for the record
    ok = {**res, "all_verified": True}
    assert _suite.finish(ok, argparse.Namespace(json=None)) is ok


def test_slash_engine_rejects_a_plan_it_cannot_run():
    plan = _suite.Plan(name="x", inputs=(("events", _suite.Stream("ro", 10)),), sql="SELECT 1")
    with pytest.raises(_suite.NotSupported):
        _suite.run_group(plan, 2, "slash")


def _write(d, name, obj):
    (d / name).write_text(json.dumps(obj))


def test_report_builds_markdown_and_pngs(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    _write(res, "ysb.json", {"benchmark": "ysb", "parameters": {"keys": 100, "skew": "uniform"}, "runs": [
        {"workload": "ysb", "engine": "slash", "cores": 2, "records_per_s": 2.0e7,
         "records_per_s_per_core": 1.0e7, "verified": True, "vs": {"duckdb-1": 2.5, "repartition": 1.5}},
        {"workload": "ysb", "engine": "duckdb-1", "cores": 1, "records_per_s": 8.0e6,
         "records_per_s_per_core": 8.0e6, "verified": True, "vs": {"slash": 0.4}}]})
    _write(res, "modes.json", {"benchmark": "modes", "runs": [
        {"skew": s, "executors": 2, "slash_records_per_s": 1e7 * (i + 1),
         "repartition_records_per_s": 5e6, "ratio": 2.0 * (i + 1), "verified": True}
        for i, s in enumerate(["uniform", "zipf:1.0", "zipf:2.0"])]})
    _write(res, "channel.json", {"bench": "channel", "sweep": True, "runs": [
        {"bench": "channel", "transport": "shm", "buffer_size": b, "credits": 8, "throughput_gbps": b / 1e4,
         "baseline": "shm-ring", "baseline_gbps": b / 9e3, "ratio": 0.9, "p50_us": 3.0, "p99_us": 9.0}
        for b in (4096, 65536, 262144)]})
    _write(res, "spark.json", {"runs": [{"keys": 100, "dist": "uniform", "slash_records_per_s": 6e6,
                                         "spark_records_per_s": 2e6, "ratio": 3.0, "verified": True}]})
    _write(res, "ssb.json", {"records_per_s": 3e7, "duckdb_records_per_s": 1e7, "ratio": 3.0,
                             "verified": True, "parameters": {"keys": 100}})
    (res / "broken.json").write_text("{not json")
    out = tmp_path / "report"
    r = report.build(report.ReportConfig(results=str(res), out=str(out)))
    md = (out / "report.md").read_text()
    assert r["files"] == 5 and r["ignored"] == 1
    assert "| ysb keys=100 | slash | 2 | 20.00 | 10.00 | 2.50x | 1.50x |" in md
    assert "zipf:2.0" in md and "262144" in md and "broken.json" in md
    assert "spark keys=100" in md  # the side-by-side file becomes one row per engine
    for png in ("throughput.png", "skew.png", "channel.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, png
        assert f"]({png})" in md


def test_report_from_the_cli(tmp_path, capsys):
    from slash.cli import main

    res = tmp_path / "r"
    res.mkdir()
    _write(res, "ro.json", {"benchmark": "ro", "runs": [
        {"workload": "ro", "engine": "slash", "cores": 2, "records_per_s": 1e7,
         "records_per_s_per_core": 5e6, "verified": True, "vs": {}}]})
    assert main(["bench", "report", "--results", str(res)]) == 0
    assert "1 engine rows" in capsys.readouterr().out
    assert (res / "report.md").exists() and (res / "throughput.png").exists()
    assert main(["bench", "report", "--results", str(tmp_path / "nope")]) == 2


def test_workload_benchmarks_are_discovered():
    from slash.bench import discover

    found = discover()
    for name in ("ysb", "nexmark-q5", "nexmark-q7", "nexmark-q8", "nexmark-q11", "cm", "ro", "report"):
        assert name in found and found[name].module is not None, name


def test_nexmark_rejects_skew():
    from slash.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="hot"):
        nexmark_q7.run(argparse.Namespace(skew="zipf:1.0"))
