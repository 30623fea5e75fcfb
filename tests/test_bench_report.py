"""slash bench report --page: docs/benchmarks.md generated from small
hand-made JSON results: per benchmark how to run it, what each side was
given, its runs with date, commit and load ("not recorded" where a result
has none), its plots; the headline table from the results' ``headline``
fields, also written into a README between its markers; and ``slash bench
--json`` stamps what the page shows."""
from __future__ import annotations

import json
import re

import pytest

from slash.bench import recorded, report
from slash.errors import InvalidArgument

HELPS = {"spark": "slash.spark vs Spark's own groupBy(window)", "ysb": "YSB"}


def _write(d, name, obj):
    (d / name).write_text(json.dumps(obj))


@pytest.fixture
def results(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    _write(res, "spark.json", {
        "benchmark": "spark",
        "recorded": {"date": "2026-11-24 23:32 UTC", "commit": "1488129", "load": 3.25,
                     "machine": "2 cores (shared)", "command": "slash bench spark --records 20000000",
                     "versions": {"pyspark": "4.3.0", "duckdb": "2.0.1"}},
        "headline": {"order": 1, "figure": "3.0-3.7x", "peer": "Spark 4.3.0 groupBy(window)",
                     "what": "YSB count per campaign"},
        "sides": {"slash.spark": "window_aggregate, local[2]", "Spark": "groupBy(window).count(), local[2]"},
        "reading": ["Spark's own query is warm after 20 s of rounds."],
        "runs": [{"keys": 100, "slash_records_per_s": 1.5e8, "spark_records_per_s": 4.3e7}]})
    _write(res, "ysb.json", {  # an old result: no date, no commit, no load
        "benchmark": "ysb", "runs": [
            {"workload": "ysb", "engine": "slash", "cores": 2, "records_per_s": 2.0e7, "verified": True,
             "vs": {"duckdb-1": 2.5}},
            {"workload": "ysb", "engine": "duckdb-1", "cores": 1, "records_per_s": 8.0e6, "verified": True,
             "vs": {"slash": 0.4}}]})
    _write(res, "kept_load.json", {"benchmark": "recovery (state part)", "note": "before and after",
                                   "runs": [{"records": 10, "load_before": 2.0, "load_after": 5.5}]})
    (res / "broken.json").write_text("{not json")
    return res


def _section(md, name):
    m = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", md, re.S | re.M)
    assert m, f"no section {name!r} in\n{md}"
    return m.group(1)


def _row(md, cells):
    return "| " + " | ".join(cells) + " |" in md


def test_page_gives_each_benchmark_its_command_sides_and_runs(results, tmp_path):
    md, _ = report.page(str(results), str(tmp_path / "docs" / "benchmarks.md"), HELPS)
    spark = _section(md, "spark")
    assert "slash bench spark --records 20000000" in spark
    assert "* slash.spark: window_aggregate, local[2]" in spark
    assert "* Spark: groupBy(window).count(), local[2]" in spark
    assert _row(spark, ["2026-11-24 23:32 UTC", "1488129", "3.2", "2 cores (shared)", "pyspark 4.3.0, duckdb 2.0.1",
                        "3.0-3.7x vs Spark 4.3.0 groupBy(window)", "`spark.json`"])
    assert "\nSpark's own query is warm after 20 s of rounds.\n" in spark


def test_a_result_without_date_or_commit_says_not_recorded(results, tmp_path):
    md, _ = report.page(str(results), str(tmp_path / "benchmarks.md"), HELPS)
    ysb = _section(md, "ysb")
    assert _row(ysb, ["not recorded", "not recorded", "not recorded", "not recorded", "not recorded",
                      "ysb: slash 2.50x duckdb-1", "`ysb.json`"])
    # a benchmark with no recorded command is run the way the CLI offers it
    assert f"slash bench ysb --json {results}/ysb-$(date +%F).json" in ysb
    assert "What each side was given: not recorded" in ysb


def test_the_load_a_result_kept_itself_is_shown_as_a_range(results, tmp_path):
    md, _ = report.page(str(results), str(tmp_path / "benchmarks.md"), HELPS)
    rec = _section(md, "recovery")  # "recovery (state part)" is filed under recovery
    assert "| not recorded | not recorded | 2.0-5.5 | not recorded | not recorded |" in rec
    assert "What each side was given: before and after" in rec


def test_headline_lists_one_figure_per_result_that_names_one(results, tmp_path):
    md, benches = report.page(str(results), str(tmp_path / "benchmarks.md"), HELPS)
    head = _section(md, "Headline")
    assert _row(head, ["[spark](#spark)", "**3.0-3.7x**", "Spark 4.3.0 groupBy(window)", "YSB count per campaign",
                       "2026-11-24 23:32 UTC", "1488129", "3.2", "2 cores (shared)"])
    assert head.count("](#") == 1
    assert [b.name for b in benches][0] == "spark"  # headlines first


def test_unreadable_results_are_listed_not_dropped(results, tmp_path):
    md, _ = report.page(str(results), str(tmp_path / "benchmarks.md"), HELPS)
    assert "`broken.json`: not readable as JSON" in _section(md, "Results not read")


def test_plots_are_drawn_beside_the_page(results, tmp_path):
    pytest.importorskip("matplotlib")
    page = tmp_path / "docs" / "benchmarks.md"
    md, _ = report.page(str(results), str(page), HELPS)
    assert "](benchmarks/ysb-throughput.png)" in md
    data = (tmp_path / "docs" / "benchmarks" / "ysb-throughput.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_readme_headline_is_rewritten_between_its_markers(results, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# X\n\nintro\n\n{report.HEADLINE_START}\nstale table\n{report.HEADLINE_END}\n\nrest\n")
    page = tmp_path / "docs" / "benchmarks.md"
    r = report.build(report.ReportConfig(results=str(results), page=str(page), readme=str(readme)))
    text = readme.read_text()
    assert r["headlines"] == 1 and page.exists()
    assert "stale table" not in text and text.startswith("# X\n\nintro\n") and text.endswith("\nrest\n")
    assert "[spark](docs/benchmarks.md#spark)" in text and "**3.0-3.7x**" in text
    report.build(report.ReportConfig(results=str(results), page=str(page), readme=str(readme)))
    assert readme.read_text() == text  # idempotent


def test_readme_without_markers_is_refused_naming_it(results, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# X\n")
    with pytest.raises(InvalidArgument, match="README.md"):
        report.build(report.ReportConfig(results=str(results), page=str(tmp_path / "b.md"), readme=str(readme)))
    assert readme.read_text() == "# X\n"


def test_page_from_the_cli(results, tmp_path, capsys):
    from slash.cli import main

    page = tmp_path / "benchmarks.md"
    assert main(["bench", "report", "--results", str(results), "--page", str(page)]) == 0
    assert "3 benchmark(s)" in capsys.readouterr().out
    assert page.read_text().startswith("# Benchmarks\n")


def test_bench_json_is_stamped_with_date_commit_load_and_command(tmp_path):
    from slash.cli import main

    out = tmp_path / "r.json"
    assert main(["bench", "report", "--results", str(tmp_path), "--out", str(tmp_path / "o"),
                 "--json", str(out)]) == 0
    rec = json.loads(out.read_text())["recorded"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", rec["date"])
    assert rec["commit"] and isinstance(rec["load"], float)
    assert rec["command"].startswith("slash bench report --results")
    assert report.provenance({"recorded": rec}).commit == rec["commit"]


def test_recorded_outside_a_checkout_names_the_package_version(tmp_path):
    rec = recorded(["bench", "x"], cwd=str(tmp_path))
    assert rec["commit"] is None or rec["commit"].startswith("slash ")
    assert rec["command"] == "slash bench x"


def test_a_bar_or_line_break_in_a_figure_stays_inside_its_cell(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    _write(res, "layout.json", {"benchmark": "spark", "runs": [{"measured": "ordered|spanning\n2 runs", "ratio": "3x"}]})
    md, _ = report.page(str(res), str(tmp_path / "benchmarks.md"), HELPS)
    assert "| ordered\\|spanning 2 runs | 3x |" in md
    assert "| not recorded | 3x | `layout.json` |" in md  # a run's own ratio is its figure
