"""How ``slash bench kafka`` measures a side: a side's process run under a
child subreaper (:func:`measured`: wall time, the CPU of its whole process
tree from the kernel's account, the broker's CPU over the same span), the
query timed inside a side's process (:class:`Clock`), and the protocol of
a live side's process (it prints :data:`READY` once up, then waits for a
line on stdin to stop).

Invariant: a side's CPU counts every process under it (a forkserver's
executors, a JVM, Python workers) alike, reaped or alive.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from slash.bench._kafka_topic import Topic, comparable
from slash.errors import SystemFailure
# ---- measuring a side --------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system, with reaped children's) of ``root`` and
    every live process under it, from /proc."""
    parent: Dict[int, int] = {}
    cpu: Dict[int, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # rest[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17
        parent[int(d)] = int(rest[1])
        cpu[int(d)] = sum(int(x) for x in rest[11:15]) / _TICK
    total, frontier = 0.0, [root]
    kids: Dict[int, List[int]] = {}
    for pid, pp in parent.items():
        kids.setdefault(pp, []).append(pid)
    seen = set()
    while frontier:
        pid = frontier.pop()
        if pid in seen or pid not in cpu:
            continue
        seen.add(pid)
        total += cpu[pid]
        frontier.extend(kids.get(pid, []))
    return total


@dataclass
class SideRun:
    """One side's run: its answer and measurements."""

    side: str
    answer: Optional[pa.Table]
    seconds: float
    cpu_s: float
    broker_cpu_s: float = 0.0
    detail: Dict[str, Any] = field(default_factory=dict)


#: runs argv[1:] as a child subreaper: every process under it that outlives
#: its parent (a forkserver's executors, a JVM) is reaped here, so the kernel's
#: account of this process's children holds the CPU of the whole tree
_REAPER = """
import ctypes, os, subprocess, sys
ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
rc = subprocess.call(sys.argv[1:])
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
sys.exit(rc)
"""


def measured(cmd: List[str], broker_pid: Optional[int], timeout: float) -> Dict[str, Any]:
    """Runs ``cmd`` (a side's process) and returns its wall time, the CPU time
    of it and of every process under it (reaped by a subreaper, the kernel's
    account), the broker's CPU over the same span, and the side's own
    report: the JSON object it printed last on stdout (a side that times its
    query itself reports ``seconds`` and ``cpu_s`` there)."""
    b0 = tree_cpu(broker_pid) if broker_pid else 0.0
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _REAPER, *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: List[str] = []
    err: List[str] = []
    readers = [threading.Thread(target=lambda s, b: b.extend(s), args=(s, b), daemon=True)
               for s, b in ((proc.stdout, out), (proc.stderr, err))]
    for r in readers:
        r.start()
    status, usage = 0, None
    try:
        while usage is None:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                usage = ru
            elif time.perf_counter() - t0 > timeout:
                raise SystemFailure(f"{' '.join(cmd[:5])} did not finish within {timeout:g} s")
            else:
                time.sleep(0.05)
    finally:
        if usage is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    wall = time.perf_counter() - t0
    b1 = tree_cpu(broker_pid) if broker_pid else 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join(10)
    if proc.returncode != 0:
        raise SystemFailure(f"{' '.join(cmd[:6])} ... exited with {proc.returncode}:\n"
                            + "".join(err)[-3000:])
    report: Dict[str, Any] = {}
    for line in reversed("".join(out).splitlines()):
        if line.startswith("{"):
            report = json.loads(line)
            break
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "broker_cpu": b1 - b0,
            "report": report}


Side = Callable[[Topic, int, str, Dict[str, Any]], SideRun]


def side_process(name: str, topic: Topic, cores: int, workdir: str,
                opts: Dict[str, Any], extra: Dict[str, Any]) -> SideRun:
    spec = {"side": name, "topic": asdict(topic), "cores": cores, "workdir": workdir,
            "broker_pid": opts.get("broker_pid"), **extra}
    cmd = [sys.executable, "-m", "slash.bench.kafka", json.dumps(spec)]
    m = measured(cmd, opts.get("broker_pid"), opts["timeout"])
    r = m["report"]
    if not r:
        raise SystemFailure(f"side {name} printed no report")
    ans = pq.read_table(r["answer"])
    return SideRun(name, comparable(ans), r["seconds"], r["cpu_s"], r["broker_cpu_s"],
                   {"timed": "the query, the session already up",
                    "process_wall_s": round(m["wall"], 2), "process_cpu_s": round(m["cpu"], 2),
                    **r.get("detail", {})})


class Clock:
    """Wall and CPU time (this process's tree, and the broker's) from start()."""

    def __init__(self, broker_pid: Optional[int]) -> None:
        self.broker_pid = broker_pid

    def start(self) -> None:
        self.t0, self.c0 = time.perf_counter(), tree_cpu(os.getpid())
        self.b0 = tree_cpu(self.broker_pid) if self.broker_pid else 0.0

    def stop(self) -> Dict[str, float]:
        return {"seconds": time.perf_counter() - self.t0, "cpu_s": tree_cpu(os.getpid()) - self.c0,
                "broker_cpu_s": (tree_cpu(self.broker_pid) - self.b0) if self.broker_pid else 0.0}


def until_stopped() -> None:
    """A live side: tells the benchmark it is up, and waits for its stop (a line on stdin)."""
    print(READY, flush=True)
    sys.stdin.readline()


READY = "side is up"
