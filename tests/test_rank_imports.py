"""What an executor process imports: never pandas.

pyarrow imports pandas (0.3-0.5 s of a core) the first time it converts a
Python or NumPy value (``pa.array``, ``pa.scalar``, ``Array.to_numpy``,
unpickling a ``pa.Scalar``); in an executor that happened while it read
its first row group. Each test runs a real query with executor processes,
with a ``sitecustomize`` on the path (inherited by every process the run
starts) that records, per process, a stack of where pandas got imported;
no process but the driver may record one.
"""
import os
import subprocess
import sys
import textwrap

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

HOOK = textwrap.dedent('''
    import os, sys, traceback

    class _PandasWatch:
        def find_spec(self, name, path=None, target=None):
            if name == "pandas":
                with open(os.path.join(os.environ["PANDAS_WATCH"], str(os.getpid())), "w") as f:
                    f.write(" ".join(sys.argv) + "\\n" + "".join(traceback.format_stack()))
            return None

    if os.environ.get("PANDAS_WATCH"):
        sys.meta_path.insert(0, _PandasWatch())
''')

QUERY = ["--time", "ts", "--window", "tumbling:10s", "--key", "k", "--agg", "count",
         "--agg", "sum:x", "--filter", "k < 40"]


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(5)
    n = 60_000
    ts = np.sort(rng.integers(0, 600_000, n))
    t = pa.table({"ts": ts, "k": rng.integers(0, 100, n),
                  "x": pa.array(rng.random(n), mask=rng.random(n) < 0.1)})
    path = tmp_path / "in.parquet"
    pq.write_table(t, path, row_group_size=10_000)  # several units: Watermarks between them
    return path


def _env(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    seen = tmp_path / "seen"
    seen.mkdir()
    path = [str(hook)] + [p for p in sys.path if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), PANDAS_WATCH=str(seen)), seen


def _others(seen, driver_pid):
    return {p.name: p.read_text() for p in seen.iterdir() if p.name != str(driver_pid)}


def _expected(path):
    return duckdb.sql(f"SELECT ts // 10000 * 10000 AS ws, k, count(*) AS c, sum(x) AS s "
                      f"FROM '{path}' WHERE k < 40 GROUP BY ALL ORDER BY ws, k").fetchall()


def _got(path):
    t = pq.read_table(path)
    return list(zip(t["window_start"].to_pylist(), t["k"].to_pylist(), t["count"].to_pylist(),
                    t["sum_x"].to_pylist()))


def _same(got, want):
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert all(a[3] == b[3] if a[3] is None or b[3] is None else
               abs(a[3] - b[3]) <= 1e-9 * max(1.0, abs(b[3])) for a, b in zip(got, want))


def test_slash_run_executors_and_their_fork_server_import_no_pandas(tmp_path, data):
    env, seen = _env(tmp_path)
    out = tmp_path / "out.parquet"
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--input", str(data), *QUERY,
                          "--executors", "2", "--no-control", "--output", str(out)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert _others(seen, p.pid) == {}
    _same(_got(out), _expected(data))


def test_spawned_executors_of_runner_run_import_no_pandas(tmp_path, data):
    env, seen = _env(tmp_path)
    out = tmp_path / "out.parquet"
    code = textwrap.dedent(f'''
        import os
        from slash.query import Query
        from slash.runner import run
        from slash.sources import FileSource
        print(os.getpid(), flush=True)
        q = Query(time="ts", window="tumbling:10s", key="k", aggregates=["count", "sum:x"],
                  filters=["k < 40"])
        run(q, FileSource({str(data)!r}, time="ts"), executors=2, output={str(out)!r})
    ''')
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert _others(seen, int(r.stdout.split()[0])) == {}
    _same(_got(out), _expected(data))
