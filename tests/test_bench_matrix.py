"""``slash bench matrix``: a quick matrix runs end to end with every cell's
answers equal, the answer comparison catches a wrong answer, and the
benchmark's own DuckDB query agrees with the test suite's reference (no
timings here: benchmarks are not timed tests; the Spark side is left out to
keep the test fast, its query is the one tests/layouts.py checks)."""
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import slash
from slash.bench import matrix
from slash.cli import build_parser
from slash.errors import InvalidArgument, SystemFailure

import layouts

# the package these tests import (installed, or the source tree with an in-place build): the
# CLI run below must use the same one (a clean clone's source tree has no built extension)
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(slash.__file__)))


def _result(keys, counts, key="k"):
    return pa.table({"window_start": pa.array([0] * len(keys), pa.int64()),
                     "window_end": pa.array([10_000] * len(keys), pa.int64()),
                     key: pa.array(keys), "count": pa.array(counts, pa.int64())})


def test_quick_matrix_runs_every_query_kind_with_slash_and_duckdb_answers_equal(tmp_path):
    out = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "slash", "bench", "matrix", "--quick", "--no-spark", "--keys", "40",
         "--key-types", "string", "--layouts", "nullable", "--rows", "3000", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "matrix plan: 5 cells" in proc.stdout
    result = json.loads((out / "matrix.json").read_text())
    cells = result["runs"]
    assert sorted(c["query"] for c in cells) == sorted(matrix.QUERIES)
    for c in cells:
        assert c["equal"], c["differences"]
        assert c["result_rows"] > 0 and c["slash_seconds"] > 0 and c["duckdb_seconds"] > 0
        assert c["spark_seconds"] is None
    md = (out / "matrix.md").read_text()
    assert md.count("| equal |") == 5
    assert (out / "matrix.png").stat().st_size > 0


def test_compare_accepts_the_same_rows_in_another_order():
    a = _result([None, 1, 2], [3, 4, 5])
    b = _result([2, None, 1], [5, 3, 4])
    assert matrix.compare(a, b, ["window_start", "window_end", "k"]) is None


def test_compare_catches_a_wrong_count_in_the_null_key_group():
    a = _result([None, 1, 2], [3, 4, 5])
    b = _result([None, 1, 2], [2, 4, 5])
    msg = matrix.compare(a, b, ["window_start", "window_end", "k"], "cell")
    assert msg is not None and "'count'" in msg and "None" in msg


def test_compare_catches_a_null_key_group_counted_as_a_key():
    a = _result(["x", None], [1, 2], key="s")
    b = _result(["x", ""], [1, 2], key="s")
    assert matrix.compare(a, b, ["window_start", "window_end", "s"]) is not None


def test_compare_catches_a_null_aggregate_given_as_zero_and_a_missing_row():
    a = pa.table({"window_start": [0, 0], "window_end": [10, 10], "k": [1, 2],
                  "min_v": pa.array([None, 4], pa.int64())})
    b = pa.table({"window_start": [0, 0], "window_end": [10, 10], "k": [1, 2],
                  "min_v": pa.array([0, 4], pa.int64())})
    assert "'min_v'" in matrix.compare(a, b, ["window_start", "window_end", "k"])
    assert "rows" in matrix.compare(a, b.slice(0, 1), ["window_start", "window_end", "k"])


def test_compare_takes_floats_within_a_relative_1e_9_only():
    base = {"window_start": [0], "window_end": [10], "k": [1]}
    a = pa.table({**base, "avg_v": [1.0 / 3.0]})
    close = pa.table({**base, "avg_v": [1.0 / 3.0 * (1 + 1e-12)]})
    far = pa.table({**base, "avg_v": [0.3334]})
    assert matrix.compare(a, close, ["window_start", "window_end", "k"]) is None
    assert matrix.compare(a, far, ["window_start", "window_end", "k"]) is not None


@pytest.mark.parametrize("query", list(matrix.QUERIES))
@pytest.mark.parametrize("key_type", list(matrix.KEY_TYPES))
def test_benchmark_duckdb_query_matches_the_test_suite_reference(tmp_path, query, key_type):
    path = matrix.make_data(str(tmp_path / "d"), 3000, 30, "nullable", seed=3, row_group=700)
    q, key = matrix.QUERIES[query], matrix.KEY_TYPES[key_type]
    run, con = matrix.duckdb_runner(q, key, path)
    try:
        ours = run()
    finally:
        con.close()
    table = pa.concat_tables(pq.read_table(os.path.join(path, f)) for f in sorted(os.listdir(path)))
    if q.filter:
        table = table.filter(pa.compute.greater_equal(table.column("v"), 0))
    ref = layouts.duckdb_window_agg(table, "ts", q.window, [key], list(q.aggs))
    ours = ours.select(ref.column_names)
    layouts.assert_same_rows(ours, ref, ours_int_unit="ms", what=f"{query} {key_type}")


def test_nullable_layout_has_nulls_in_keys_values_and_times_and_spans_time_in_each_file(tmp_path):
    path = matrix.make_data(str(tmp_path / "d"), 4000, 50, "nullable", row_group=1000)
    files = sorted(os.listdir(path))
    assert len(files) == matrix.SPANNING_FILES
    for f in files:
        t = pq.read_table(os.path.join(path, f))
        for c in ("ts", "k", "s", "v"):
            assert t.column(c).null_count > 0, c
        ts = t.column("ts").drop_null().to_numpy()
        assert ts.max() - ts.min() > matrix.SPAN_MS * 0.9


def test_unknown_query_and_layout_are_refused_by_name():
    with pytest.raises(InvalidArgument, match="joins"):
        matrix.MatrixConfig(queries=("joins",))
    with pytest.raises(InvalidArgument, match="sideways"):
        matrix.MatrixConfig(layouts=("sideways",))


def test_a_cell_whose_slash_answer_is_wrong_fails_loudly(tmp_path, monkeypatch):
    def wrong_slash(q, key, path, executors=2):
        run, con = matrix.duckdb_runner(q, key, path)
        try:
            right = run()
        finally:
            con.close()
        counts = right.column("count").to_pylist()
        counts[0] += 1
        return right.set_column(right.column_names.index("count"), "count", pa.array(counts, pa.int64()))

    monkeypatch.setattr(matrix, "run_slash", wrong_slash)
    args = build_parser(["bench", "matrix"]).parse_args(
        ["bench", "matrix", "--quick", "--no-spark", "--queries", "count", "--keys", "20",
         "--key-types", "int64", "--layouts", "nullable", "--out", str(tmp_path)])
    with pytest.raises(SystemFailure, match="differ"):
        matrix.run(args)
    cell, = json.loads((tmp_path / "matrix.json").read_text())["runs"]
    assert not cell["equal"] and "'count'" in cell["differences"][0]
    assert "**DIFFER**" in (tmp_path / "matrix.md").read_text()


def test_slash_through_spark_needs_the_spark_side():
    with pytest.raises(InvalidArgument, match="--no-spark"):
        matrix.MatrixConfig(slash="spark", spark=False)
    with pytest.raises(InvalidArgument, match="--slash"):
        matrix.MatrixConfig(slash="flink")
