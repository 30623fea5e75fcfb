"""A Spark standalone cluster on loopback, started from the pip-installed
pyspark (which ships ``bin/spark-class`` but not the ``sbin/start-*``
scripts): one Master and N Workers as child processes, bound to 127.0.0.1.

    python spark_integration/cluster.py start --workers 2 --cores 1   # prints the master URL
    python spark_integration/cluster.py stop

From Python (the tests): ``with LocalCluster(workers=2) as c: ... c.master_url``.
Logs and the pid file go to ``--dir`` (default /tmp/slash-spark-cluster).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float, log: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark master exited ({proc.returncode}); see {log}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"the Spark master did not listen on 127.0.0.1:{port} within {timeout} s; see {log}")


@dataclass
class LocalCluster:
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    directory: str = "/tmp/slash-spark-cluster"
    start_timeout: float = 90.0
    procs: List[subprocess.Popen] = field(default_factory=list)
    master_url: Optional[str] = None

    def _spawn(self, name: str, args: List[str]) -> subprocess.Popen:
        env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
                   SPARK_NO_DAEMONIZE="1")
        log = open(os.path.join(self.directory, f"{name}.log"), "ab")
        cls = os.path.join(spark_home(), "bin", "spark-class")
        p = subprocess.Popen([cls, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p

    def start(self) -> "LocalCluster":
        os.makedirs(self.directory, exist_ok=True)
        port = free_port()
        master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                        "--port", str(port), "--webui-port", str(free_port())])
        try:
            _wait_port(port, master, self.start_timeout, os.path.join(self.directory, "master.log"))
            self.master_url = f"spark://127.0.0.1:{port}"
            for i in range(self.workers):
                work = os.path.join(self.directory, f"work-{i}")
                os.makedirs(work, exist_ok=True)
                self._spawn(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", self.master_url,
                                             "--host", "127.0.0.1", "--cores", str(self.cores),
                                             "--memory", self.memory, "--webui-port", str(free_port()),
                                             "--work-dir", work])
        except BaseException:
            self.stop()
            raise
        with open(os.path.join(self.directory, "cluster.json"), "w") as f:
            json.dump({"master": self.master_url, "pids": [p.pid for p in self.procs]}, f)
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        self.procs.clear()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _stop_from_file(directory: str) -> None:
    path = os.path.join(directory, "cluster.json")
    if not os.path.exists(path):
        print(f"no cluster recorded in {path}", file=sys.stderr)
        return
    with open(path) as f:
        pids = json.load(f)["pids"]
    for pid in reversed(pids):
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    os.unlink(path)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["start", "stop"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--memory", default="1g")
    ap.add_argument("--dir", default="/tmp/slash-spark-cluster")
    a = ap.parse_args(argv)
    if a.action == "stop":
        _stop_from_file(a.dir)
        return 0
    c = LocalCluster(a.workers, a.cores, a.memory, a.dir).start()
    # the processes run on in their own sessions; `stop` ends them by the recorded pids
    c.procs.clear()
    print(c.master_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
