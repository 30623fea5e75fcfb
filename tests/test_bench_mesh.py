"""slash bench mesh on small groups: every size gives DuckDB's answer and
reports the mesh's channels, the open files each executor is counted to
need, the group's memory (the rings' shared part among it) and the refusal
of 128 executors under a lowered open-file limit. Run as the command (in a
child: the benchmark forks its executors from a server, as slash run does,
which a test process must not be left with)."""
import json
import subprocess
import sys

from slash.open_files import executor_fds


def test_slash_bench_mesh_reports_the_mesh_of_each_group_and_the_refusal(tmp_path):
    out = tmp_path / "mesh.json"
    r = subprocess.run([sys.executable, "-m", "slash", "bench", "mesh", "--executors", "2,3",
                        "--records", "2000", "--plot", str(tmp_path / "mesh.png"),
                        "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert [x["executors"] for x in got["runs"]] == [2, 3]
    for x in got["runs"]:
        n = x["executors"]
        assert x["verified"] is True
        assert x["channels"] == n * (n - 1)
        assert x["fds_per_executor"] == executor_fds(n, "shm")
        assert x["start_seconds"] > 0 and x["epoch_sync_ms"] > 0
        assert 0 < x["shmem_pss_bytes"] < x["pss_bytes"] <= x["rss_bytes"]
    assert got["refusal"]["executors"] == 128 and got["refusal"]["seconds"] > 0
    assert (tmp_path / "mesh.png").stat().st_size > 0
