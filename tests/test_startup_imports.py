"""What a plain ``slash run`` loads: not ``pyarrow.compute``, not ``numpy.ma``.

Importing ``pyarrow.compute`` is ~200 M instructions (40-50 ms of a core)
and ``numpy.ma`` ~45 M: together a fifth of a small job. A run with no
filter and no decimal column uses no kernel beyond those ``slash.compute``
calls by name, so it must finish without either module loaded. Each test
runs the real command in a fresh interpreter and reads its ``sys.modules``
at exit; the kernels ``slash.compute`` calls are checked against
``pyarrow.compute``'s own.
"""
import subprocess
import sys
import textwrap

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from slash import compute

PROBE = textwrap.dedent('''
    import atexit, sys
    atexit.register(lambda: print("LOADED", [m for m in ("pyarrow.compute", "numpy.ma")
                                             if m in sys.modules], file=sys.stderr))
    sys.argv = ["slash"] + sys.argv[1:]
    import runpy
    runpy.run_module("slash", run_name="__main__")
''')


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    rng = np.random.default_rng(3)
    n = 30_000
    ts = np.sort(rng.integers(0, 600_000, n))
    t = pa.table({"ts": pa.array(ts.astype("datetime64[ms]")), "n": ts,
                  "u": pa.array([f"user{i}" for i in rng.integers(0, 40, n)]),
                  "k": rng.integers(0, 7, n), "v": rng.random(n)})
    path = tmp_path_factory.mktemp("shapes") / "in.parquet"
    pq.write_table(t, path, row_group_size=7_000)
    return path


def _run(path, out, *args):
    r = subprocess.run([sys.executable, "-c", PROBE, "run", "--input", str(path),
                        "--output", str(out), "--executors", "2", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [x for x in r.stderr.splitlines() if x.startswith("LOADED")][-1]
    return line


@pytest.mark.parametrize("args", [
    ["--time", "n", "--window", "tumbling:10s", "--key", "k", "--agg", "count"],
    ["--time", "ts", "--window", "tumbling:10s", "--key", "u", "--agg", "count",
     "--agg", "sum:v", "--agg", "max:v"],
    ["--time", "ts", "--window", "session:5s", "--key", "u", "--key", "k", "--agg", "avg:v"],
], ids=["int-key", "string-key", "session-two-keys"])
def test_a_plain_run_loads_neither_pyarrow_compute_nor_numpy_ma(shapes, tmp_path, args):
    out = tmp_path / "out.parquet"
    assert _run(shapes, out, *args) == "LOADED []"
    assert pq.read_metadata(out).num_rows > 0


def test_a_filter_loads_the_kernels_when_it_runs_and_filters(shapes, tmp_path):
    out = tmp_path / "out.parquet"
    line = _run(shapes, out, "--time", "n", "--window", "tumbling:10s", "--key", "k",
                "--agg", "count", "--filter", "k < 3")
    assert "pyarrow.compute" in line
    got = pq.read_table(out).column("count").to_pylist()
    want = duckdb.sql(f"SELECT count(*) FROM '{shapes}' WHERE k < 3").fetchall()[0][0]
    assert sum(got) == want


def test_sort_indices_and_take_order_rows_as_pyarrow_compute_does():
    t = pa.table({"w": pa.array([3, 1, None, 1, 2], pa.int64()),
                  "s": pa.array(["b", "z", "a", None, "c"])})
    keys = [("w", "ascending"), ("s", "ascending")]
    idx = compute.sort_indices(t, keys)
    assert idx.equals(pc.sort_indices(t, keys))
    assert compute.take(t, idx).equals(pc.take(t, idx))


def test_min_max_skips_nulls_and_gives_nulls_for_none():
    a = pa.array([5, None, -2, 9], pa.timestamp("ms"))
    assert compute.min_max(a).equals(pc.min_max(a))
    empty = compute.min_max(pa.array([None, None], pa.int64()))
    assert empty["min"].as_py() is None and empty["max"].as_py() is None


def test_cast_refuses_a_lossy_cast_like_pyarrow():
    assert compute.cast(pa.scalar(7, pa.timestamp("us")), pa.int64()).as_py() == 7
    assert compute.cast(pa.array(["x", None]), pa.large_string()).equals(
        pa.array(["x", None], pa.large_string()))
    with pytest.raises(pa.ArrowInvalid):
        compute.cast(pa.array([300]), pa.int8())
