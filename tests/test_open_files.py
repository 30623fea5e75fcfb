"""A group's open files (slash.open_files): the count per peer is what an
executor really holds; a group whose executors need more than the soft
RLIMIT_NOFILE raises it up to the hard one and runs (DuckDB's answer); a
group past the hard limit is refused before any process starts, naming the
limit, the need and the remedy; executors whose meshes would not fit in one
process run in processes of their own. The limits are lowered with
setrlimit in a child interpreter, so the test process keeps its own."""
import secrets
import subprocess
import sys
import textwrap
import threading

import pytest

import slash
from slash.open_files import OFI_PER_PEER, SHM_PER_PEER, executor_fds, largest_group, open_now

N = 3


def _descriptors_of_a_group(transport):
    """Descriptors N executors joined on threads of this process opened for
    the group (its channels, after the listeners existed)."""
    token = secrets.token_hex(8)
    listeners = [slash.Executor.listen(transport, token=token) for _ in range(N)]
    addrs = [lst.address for lst in listeners]
    exs, errs = [None] * N, []

    def join(r):
        try:
            exs[r] = slash.Executor(listeners[r], r, addrs, slash.StateConfig(window="tumbling:10s"),
                                    slash.GroupConfig(transport=transport, timeout=60), token=token)
        except BaseException as e:  # reported below
            errs.append(e)

    before = open_now()
    threads = [threading.Thread(target=join, args=(r,)) for r in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = open_now()
    for ex in exs:
        if ex is not None:
            ex.close()
    for lst in listeners:
        lst.close()
    assert not errs, errs
    return after - before


def test_an_executor_holds_seven_descriptors_per_peer_over_shm():
    assert _descriptors_of_a_group("shm") == N * (N - 1) * SHM_PER_PEER


@pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)")
def test_an_executor_holds_at_most_the_counted_descriptors_per_peer_over_ofi_tcp():
    got = _descriptors_of_a_group("ofi:tcp")
    assert 0 < got <= N * (N - 1) * OFI_PER_PEER


def _child(body, soft, hard):
    """Runs ``body`` in a child interpreter whose RLIMIT_NOFILE is (soft, hard)."""
    script = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
    """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)


def test_a_group_past_the_hard_limit_is_refused_before_any_process_starts():
    r = _child("""
        import multiprocessing
        import numpy as np, pyarrow as pa
        from slash.errors import ResourceLimit
        from slash.query import Query
        from slash.runner import run
        t = pa.table({"ts": np.arange(1000), "k": np.arange(1000) % 7})
        try:
            run(Query(time="ts", window="tumbling:10s", key="k", aggregates=["count"]), t,
                executors=128)
        except ResourceLimit as e:
            print("REFUSED", e)
        print("CHILDREN", len(multiprocessing.active_children()))
    """, 256, 256)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "REFUSED a group of 128 executors over shm" in out, out
    assert f"needs {executor_fds(128, 'shm')} open files" in out
    assert "RLIMIT_NOFILE allows 256 (soft 256, hard 256)" in out
    assert "ulimit -n" in out and "LimitNOFILE=" in out
    assert f"at most {largest_group('shm', 256)} executors" in out
    assert "CHILDREN 0" in out


def test_slash_run_refuses_a_group_past_the_hard_limit_with_exit_status_1(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"ts": np.arange(1000), "k": np.arange(1000) % 7}), tmp_path / "in.parquet")
    r = _child(f"""
        import sys
        from slash.cli import main
        sys.exit(main(["run", "--input", {str(tmp_path / 'in.parquet')!r}, "--time", "ts",
                       "--window", "tumbling:10s", "--key", "k", "--agg", "count",
                       "--executors", "128", "--output", {str(tmp_path / 'out.parquet')!r}]))
    """, 256, 256)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "RLIMIT_NOFILE" in r.stderr and "ulimit -n" in r.stderr, r.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_a_group_above_the_soft_limit_raises_it_and_gives_duckdbs_answer():
    # 8 executor processes hold some 10 descriptors of their own and 7 x 7 for
    # the mesh, the launcher 3 per process: each past a soft limit of 32
    r = _child("""
        import resource
        import duckdb, numpy as np, pyarrow as pa
        from slash.executor import GroupConfig
        from slash.query import Query
        from slash.runner import run
        rng = np.random.default_rng(5)
        t = pa.table({"ts": np.sort(rng.integers(0, 100_000, 20_000)),
                      "k": rng.integers(0, 50, 20_000)})
        m = {}
        got = run(Query(time="ts", window="tumbling:10s", key="k", aggregates=["count"]), t,
                  executors=8, group=GroupConfig(isolation="process"), metrics=m)
        want = duckdb.sql("SELECT ts // 10000 * 10000, k, count(*) FROM t GROUP BY ALL "
                          "ORDER BY ALL").fetchall()
        got = sorted(zip(got["window_start"].to_pylist(), got["k"].to_pylist(),
                         got["count"].to_pylist()))
        print("EXECUTORS", m["executors"], "IN_PROCESS", m["in_process"])
        print("SAME", got == [tuple(w) for w in want])
        print("SOFT", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    """, 32, 4096)
    assert r.returncode == 0, r.stderr
    assert "EXECUTORS 8 IN_PROCESS False" in r.stdout, r.stdout
    assert "SAME True" in r.stdout
    assert "SOFT 4096" in r.stdout


def test_executors_whose_meshes_would_not_fit_in_one_process_run_in_processes():
    # threads of one process hold every executor's mesh: 16 over shm need
    # 16 x (7 x 15 + 1) = 1,696, past a hard limit of 1024; 4 need 88
    r = _child("""
        import numpy as np, pyarrow as pa
        from slash.runner import runs_in_process
        from slash.sources import as_source
        src = as_source(pa.table({"ts": np.arange(10), "k": np.arange(10)}))
        print("THREADS", runs_in_process(src, 4), runs_in_process(src, 16),
              runs_in_process(src, 16, "ofi:tcp"), runs_in_process(src, 8, "ofi:tcp"))
    """, 1024, 1024)
    assert r.returncode == 0, r.stderr
    assert "THREADS True False False False" in r.stdout, r.stdout
