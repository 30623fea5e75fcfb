"""``slash bench recovery``: what exactly-once recovery (``checkpoint=``) costs.

Three parts, all on ``slash.runner.run`` (what ``slash run`` does) with
executor processes over shm:

* **throughput**: a YSB-like job (count per campaign per 10 s tumbling
  window over a generated stream) without checkpoints, with one every 10 s
  and one every 2 s. The configurations take turns (round i runs them in
  order, round i+1 rotated) after a warm-up run; the best run of each is
  kept and reported as a ratio against the run without checkpoints
  (target: >= 0.9 for every 10 s).
* **checkpoint size and write time** per GB of state, for states of about
  ``--state-mb`` MB (default 100 and 1000): many distinct keys in one long
  window, so every key stays in the state.
* **time to resume** after a SIGKILL of one executor (rank 1, killed by
  this process right after a checkpoint of the full state committed): from
  the kill to the first record the restarted group pushes past the cut
  (target: < 5 s for 1 GB). The phases are reported too: kill -> restarted
  executors run again (detection, process start, reading the checkpoint
  files, restoring the stores) and -> first new record (regenerating the
  items before the cut, which a generator source drops).

The generator (:class:`Gen`) logs, per executor process, when it yields
each batch; the throughput-over-time plot across the kill comes from those
logs (items a restarted generator drops are left out).

    slash bench recovery --json bench/results/recovery.json --plot bench/results/recovery.png
    slash bench recovery --state-mb 50,200 --seconds 10   # smaller, faster
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slash.bench._progress import Progress
from slash.checkpoint import MANIFEST, CheckpointStore
from slash.executor import Executor, GroupConfig
from slash.query import Query
from slash.run.recovery.checkpointed import fingerprint, read_partitions
from slash.runner import run as slash_run, source_nullable
from slash.sources import GeneratorSource

log = logging.getLogger(__name__)

NAME = "recovery"
HELP = ("exactly-once recovery: throughput with checkpoints every 10 s / 2 s vs none, checkpoint "
        "size and write time per GB of state, time from a SIGKILL to resumed progress")

SCHEMA = pa.schema([("event_time", pa.int64()), ("key", pa.int64())])
#: one line of a generator's log: time, rank, item index, rows
_LINE = "{:.6f} {} {} {}\n"


@dataclass(frozen=True)
class Gen:
    """``make(rank, n)`` of a deterministic, cheap generated stream.

    Rank r's batch i holds ``rows`` records with keys
    ``(r + n * (i * rows + j)) % keys`` (each rank its own keys; every key
    once before any repeats) and event times rising ``ms_per_batch`` per
    batch. With ``log_dir`` each process appends ``time rank item rows`` per
    batch to ``log_dir/<pid>.log``."""

    batches: int
    rows: int
    keys: int
    ms_per_batch: int
    log_dir: Optional[str] = None

    def __call__(self, rank: int, n: int) -> Iterator[pa.RecordBatch]:
        fd = None
        if self.log_dir is not None:
            fd = os.open(os.path.join(self.log_dir, f"{os.getpid()}.log"),
                         os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            # a first line (item -1): when make was called and when this process started
            os.write(fd, _LINE.format(time.time(), rank, -1, _process_start()).encode())
        step = np.arange(self.rows, dtype=np.int64)
        offs = step * self.ms_per_batch // self.rows
        try:
            for i in range(self.batches):
                keys = (rank + n * (i * self.rows + step)) % self.keys
                times = i * self.ms_per_batch + offs
                b = pa.record_batch([pa.array(times), pa.array(keys)], schema=SCHEMA)
                if fd is not None:
                    os.write(fd, _LINE.format(time.time(), rank, i, self.rows).encode())
                yield b
        finally:
            if fd is not None:
                os.close(fd)


def _process_start() -> float:
    """When this process started (epoch seconds, to a clock tick), from /proc."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return float("nan")


def _read_logs(log_dir: str) -> List[Tuple[float, int, int, int, int]]:
    """(time, pid, rank, item, rows) of every logged batch, by time."""
    out = []
    for path in glob.glob(os.path.join(log_dir, "*.log")):
        pid = int(os.path.basename(path).split(".")[0])
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) == 4 and p[2] != "-1":
                    out.append((float(p[0]), pid, int(p[1]), int(p[2]), int(p[3])))
    return sorted(out)


def _starts(log_dir: str) -> Dict[int, Tuple[int, float, float]]:
    """pid -> (rank, process start, make called) from the generators' first lines."""
    out = {}
    for path in glob.glob(os.path.join(log_dir, "*.log")):
        with open(path) as f:
            p = f.readline().split()
        if len(p) == 4 and p[2] == "-1":
            out[int(os.path.basename(path).split(".")[0])] = (int(p[1]), float(p[3]), float(p[0]))
    return out


def _query(window: str) -> Any:
    return Query(time="event_time", window=window, key="key", aggregates=["count"])


def _group() -> Any:
    return GroupConfig(transport="shm")


# ---- (a) throughput ---------------------------------------------------------------------
def _throughput_run(gen: Gen, n: int, every: Optional[str], work: str) -> Dict[str, Any]:
    m: Dict[str, Any] = {}
    d = tempfile.mkdtemp(prefix="ckpt-", dir=work) if every else None
    kw: Dict[str, Any] = dict(checkpoint=d, checkpoint_every=every) if d else {}
    t0 = time.perf_counter()
    res = slash_run(_query("tumbling:10s"), GeneratorSource(gen, SCHEMA), executors=n,
                    group=_group(), metrics=m, **kw)
    s = time.perf_counter() - t0
    if d:
        shutil.rmtree(d, ignore_errors=True)
    records = gen.batches * gen.rows * n
    cks = m.get("checkpoints", [])
    return {"every": every or "none", "seconds": round(s, 3), "records": records,
            "records_per_s": records / s, "rows": res.num_rows, "checkpoints": len(cks),
            "checkpoint_bytes_max": max((c["bytes"] for c in cks), default=0),
            "checkpoint_seconds_max": max((c["seconds"] for c in cks), default=0.0)}


def throughput(args: argparse.Namespace, work: str, prog: Progress) -> Dict[str, Any]:
    n = args.executors
    rows = 1 << 16
    gen = Gen(batches=2, rows=rows, keys=args.keys, ms_per_batch=rows * 1000 // args.rate)
    with prog.stage("throughput: warm-up and calibration"):
        small = _throughput_run(gen, n, None, work)  # start and stop of a group, nearly no work
        w = _throughput_run(replace(gen, batches=60), n, None, work)
    # the rate past starting and stopping: runs of --seconds then have that much work
    rate = (w["records"] - small["records"]) / max(1e-3, w["seconds"] - small["seconds"])
    batches = max(20, int(rate / n * args.seconds / rows))
    gen = replace(gen, batches=batches)
    log.info("recovery bench: %.1f M rec/s past a group's start (%.2f s): %d batches of %d rows "
             "per executor (~%.0f s a run)", rate / 1e6, small["seconds"], batches, rows,
             args.seconds)
    configs: List[Optional[str]] = [None, "10s", "2s"]
    runs: List[Dict[str, Any]] = []
    for r in range(args.rounds):
        order = configs[r % 3:] + configs[:r % 3]
        for every in order:
            with prog.stage(f"throughput round {r + 1}/{args.rounds}: checkpoints "
                            f"{'every ' + every if every else 'none'}"):
                got = _throughput_run(gen, n, every, work)
            got["round"] = r
            runs.append(got)
            log.info("  every %s: %.2f M rec/s, %d checkpoints", got["every"],
                     got["records_per_s"] / 1e6, got["checkpoints"])
    names = [c or "none" for c in configs]
    best = {c: max(x["records_per_s"] for x in runs if x["every"] == c) for c in names}

    def round_ratio(c: str) -> float:  # the median over rounds of c against none in that round
        rs = sorted(next(x for x in runs if x["round"] == r and x["every"] == c)["records_per_s"] /
                    next(x for x in runs if x["round"] == r and x["every"] == "none")["records_per_s"]
                    for r in range(args.rounds))
        return rs[len(rs) // 2] if len(rs) % 2 else (rs[len(rs) // 2 - 1] + rs[len(rs) // 2]) / 2

    return {"records_per_run": gen.batches * rows * n, "group_start_stop_seconds": small["seconds"],
            "keys": args.keys, "window": "tumbling:10s", "runs": runs, "best_records_per_s": best,
            "ratio_10s": best["10s"] / best["none"], "ratio_2s": best["2s"] / best["none"],
            "ratio_10s_median_of_rounds": round_ratio("10s"),
            "ratio_2s_median_of_rounds": round_ratio("2s")}


# ---- (b) + (c) state size and recovery ------------------------------------------------------
def _watch(directory: str, stop: threading.Event, seen: Dict[int, Dict[str, Any]]) -> None:
    """Copies every committed checkpoint's manifest and rank-*.json as it appears."""
    while not stop.is_set():
        for d in glob.glob(os.path.join(directory, "chk-*")):
            cid = int(d.rsplit("-", 1)[1])
            if cid in seen or not os.path.exists(os.path.join(d, MANIFEST)):
                continue
            try:
                with open(os.path.join(d, MANIFEST)) as f:
                    man = json.load(f)
                ranks = {}
                for p in glob.glob(os.path.join(d, "rank-*.json")):
                    with open(p) as f:
                        ranks[int(os.path.basename(p)[5:-5])] = json.load(f)
            except (OSError, ValueError):
                continue  # pruned meanwhile
            seen[cid] = {"t": time.time(), "manifest": man, "ranks": ranks}
        stop.wait(0.02)


def _pids_by_rank(log_dir: str) -> Dict[int, int]:
    """The live generator process of each rank (the newest log per rank)."""
    out: Dict[int, Tuple[float, int]] = {}
    for path in glob.glob(os.path.join(log_dir, "*.log")):
        pid = int(os.path.basename(path).split(".")[0])
        try:
            with open(path) as f:
                first = f.readline().split()
        except OSError:
            continue
        if len(first) == 4:
            t, rank = float(first[0]), int(first[1])
            if rank not in out or out[rank][0] < t:
                out[rank] = (t, pid)
    return {r: p for r, (_, p) in out.items()}


def state_run(args: argparse.Namespace, mb: int, work: str, prog: Progress) -> Dict[str, Any]:
    """One run whose state reaches ~mb MB; rank 1 is SIGKILLed right after the
    first checkpoint of the full state commits."""
    n = args.executors
    rows = 1 << 16
    keys = max(rows * n, int(mb * 1e6 / args.bytes_per_key)) // n * n
    per_rank = -(-keys // (n * rows))  # batches for every key once
    batches = 2 * per_rank + 4  # every key twice
    cut_every = max(2, per_rank // 3)  # several cuts: the kill follows the first of the full state
    log_dir = tempfile.mkdtemp(prefix="genlog-", dir=work)
    ck_dir = tempfile.mkdtemp(prefix="ckpt-", dir=work)
    gen = Gen(batches=batches, rows=rows, keys=keys, ms_per_batch=10, log_dir=log_dir)
    m: Dict[str, Any] = {}
    box: Dict[str, Any] = {}

    def body() -> None:
        try:
            box["result"] = slash_run(_query("tumbling:100000000s"), GeneratorSource(gen, SCHEMA),
                                      executors=n, group=_group(), metrics=m, checkpoint=ck_dir,
                                      checkpoint_every=f"{cut_every} batches", checkpoint_keep=2,
                                      max_restarts=2)
        except BaseException as e:  # re-raised below
            box["error"] = e

    seen: Dict[int, Dict[str, Any]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(ck_dir, stop, seen), daemon=True)
    runner = threading.Thread(target=body, daemon=True)
    t_kill: Optional[float] = None
    killed_pid: Optional[int] = None
    with prog.stage(f"state ~{mb} MB: {keys:,} keys, {batches * rows * n:,} records, "
                    f"kill after the first checkpoint of the full state"):
        t_start = time.time()
        watcher.start()
        runner.start()
        full: Optional[int] = None  # the first checkpoint holding every key
        while runner.is_alive() and t_kill is None:
            full = next((c for c in sorted(seen) if len(seen[c]["ranks"]) == n and
                         all(int(i["pushes"]) >= per_rank for i in seen[c]["ranks"].values())),
                        None)
            if full is not None:
                pids = _pids_by_rank(log_dir)
                if 1 % n in pids:
                    killed_pid = pids[1 % n]
                    t_kill = time.time()
                    os.kill(killed_pid, signal.SIGKILL)
                    log.info("recovery bench: SIGKILL to rank %d (pid %d) %.2f s after the "
                             "checkpoint committed", 1 % n, killed_pid, t_kill - seen[full]["t"])
                    break
            time.sleep(0.005)
        runner.join()
        stop.set()
        watcher.join()
    if "error" in box:
        raise box["error"]
    res = box["result"]
    want = keys  # one window: one row per key, the counts summing to every record once

    expected_total = batches * rows * n
    got_total = pc.sum(res.column("count")).as_py()
    out: Dict[str, Any] = {"state_mb_target": mb, "keys": keys, "records": expected_total,
                           "result_rows": res.num_rows, "result_rows_expected": want,
                           "result_count_total": got_total,
                           "correct": res.num_rows == want and got_total == expected_total,
                           "run_seconds": round(time.time() - t_start, 3)}
    cks = m.get("checkpoints", [])
    first = next((c for c in cks if c["id"] == full), None)
    if first is None:
        log.warning("recovery bench: no checkpoint of the full ~%d MB state committed (the "
                    "executors were not abreast?): no kill, no recovery figures", mb)
    if first is not None:
        gb = first["bytes"] / 1e9
        out.update(checkpoint_bytes=first["bytes"], checkpoint_seconds=first["seconds"],
                   bytes_per_key=round(first["bytes"] / keys, 2),
                   checkpoint_seconds_per_gb=round(first["seconds"] / gb, 3) if gb else None,
                   checkpoint_gb_per_s=(round(gb / first["seconds"], 3) if first["seconds"]
                                        else None))
    out["checkpoints"] = cks
    recs = m.get("recoveries", [])
    out["recoveries"] = recs
    logs = _read_logs(log_dir)
    if t_kill is not None and recs:
        from_id = recs[0].get("from_checkpoint")
        cut = seen.get(from_id, {}).get("ranks", {})
        position = {r: int(info["position"]) for r, info in cut.items()}
        old = {x[1] for x in logs if x[0] < t_kill}  # processes of the killed attempt
        new = [x for x in logs if x[0] > t_kill and x[1] not in old]
        first_new = min((x[0] for x in new), default=None)
        past_cut = [x for x in new if x[3] >= position.get(x[2], 0)]
        first_past = min((x[0] for x in past_cut), default=None)
        all_past = max((min(x[0] for x in past_cut if x[2] == r) for r in range(n)
                        if any(x[2] == r for x in past_cut)), default=None)
        out.update(
            killed_rank=1 % n, from_checkpoint=from_id,
            seconds_kill_to_restarted=round(first_new - t_kill, 3) if first_new else None,
            seconds_kill_to_first_new_record=round(first_past - t_kill, 3) if first_past else None,
            seconds_kill_to_all_ranks_resumed=round(all_past - t_kill, 3) if all_past else None,
            seconds_detect_to_restored=recs[0].get("seconds_to_resume"),
            records_replayed=m.get("records_replayed"))
        starts = {pid: v for pid, v in _starts(log_dir).items() if v[1] > t_kill - 0.05}
        if starts:
            v = list(starts.values())
            out["profile"] = {
                "kill_to_new_processes_started": round(min(x[1] for x in v) - t_kill, 3),
                "kill_to_all_executors_restored": round(max(x[2] for x in v) - t_kill, 3),
                "process_start_to_restored_max": round(max(x[2] - x[1] for x in v), 3)}
        out["timeline"] = _timeline(logs, position, killed_pid, t_kill, t_start)
        out["kill_at"] = round(t_kill - t_start, 3)
        if first_past:
            out["resumed_at"] = round(first_past - t_start, 3)
    out.setdefault("profile", {}).update(_restore_profile(ck_dir, gen, n))
    shutil.rmtree(ck_dir, ignore_errors=True)
    shutil.rmtree(log_dir, ignore_errors=True)
    return out


def _restore_profile(ck_dir: str, gen: Gen, n: int) -> Dict[str, float]:
    """Reading the newest checkpoint's files (with their crc32 checks) and
    restoring all its partitions into one executor, timed in this process."""
    src = GeneratorSource(gen, SCHEMA)
    q = _query("tumbling:100000000s")
    parts_n = _group().partitions_for(n)
    store = CheckpointStore(ck_dir, fingerprint=fingerprint(q, src), executors=n,
                            partitions=parts_n)
    ck = store.latest(verify=False)
    if ck is None:
        return {}
    t0 = time.perf_counter()
    metas = [ck.read(f"rank-{r}.meta") for r in range(n)]
    parts = read_partitions(ck, lambda p: True)
    t1 = time.perf_counter()
    token = secrets.token_hex(8)
    lst = Executor.listen("shm", token=token)
    state = q.state_config(SCHEMA, parts_n, source_nullable(src, [*q.key, *q.value_columns]))
    ex = Executor(lst, 0, [lst.address], state, GroupConfig(transport="shm", partitions=parts_n),
                  token=token)
    try:
        t2 = time.perf_counter()
        ex.restore(metas, parts)
        t3 = time.perf_counter()
    finally:
        ex.close()
        lst.close()
    return {"read_checkpoint_files_s": round(t1 - t0, 3),
            "restore_all_partitions_one_executor_s": round(t3 - t2, 3),
            "checkpoint_read_bytes": sum(len(b) for bs in parts.values() for b in bs) +
            sum(map(len, metas))}


def _timeline(logs: List[Tuple[float, int, int, int, int]], position: Dict[int, int],
              killed_pid: Optional[int], t_kill: float, t0: float, bin_s: float = 0.25
              ) -> Dict[str, List[float]]:
    """Records pushed per second over time, in bins (dropped replay items left out)."""
    old = {p for t, p, *_ in logs if t < t_kill}
    counts: Dict[int, int] = {}
    for t, pid, rank, item, rows in logs:
        if pid not in old and item < position.get(rank, 0):
            continue  # regenerated and dropped by the restarted source
        b = int((t - t0) / bin_s)
        counts[b] = counts.get(b, 0) + rows
    if not counts:
        return {"t": [], "records_per_s": []}
    last = max(counts)
    return {"t": [round(b * bin_s, 3) for b in range(last + 1)],
            "records_per_s": [counts.get(b, 0) / bin_s for b in range(last + 1)]}


def plot(result: Dict[str, Any], path: str) -> Optional[str]:
    """Throughput over time across the kill, one line per state size."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency
    from matplotlib.figure import Figure  # optional dependency

    runs = [r for r in result.get("state", []) if r.get("timeline", {}).get("t")]
    if not runs:
        return None
    fig = Figure(figsize=(9, 4.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for i, r in enumerate(runs):
        c = f"C{i}"
        tl = r["timeline"]
        ax.plot(tl["t"], [v / 1e6 for v in tl["records_per_s"]], color=c,
                label=f"~{r['state_mb_target']} MB state ({r.get('checkpoint_bytes', 0) / 1e6:.0f} "
                      f"MB checkpoint)")
        ax.axvline(r["kill_at"], color=c, linestyle="--", alpha=0.8)
        if "resumed_at" in r:
            ax.axvline(r["resumed_at"], color=c, linestyle=":", alpha=0.8)
    ax.set_xlabel("seconds since start (dashed: SIGKILL of rank 1; dotted: first record past "
                  "the cut)")
    ax.set_ylabel("M records/s pushed (all executors)")
    ax.set_title("slash run with checkpoint=: throughput across a SIGKILL of one executor")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


# ---- CLI ----------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executors", type=int, default=2, help="executor processes (default 2)")
    p.add_argument("--seconds", type=float, default=40.0,
                   help="work of one throughput run without checkpoints, in seconds (default 40: "
                        "3 or more checkpoints every 10 s)")
    p.add_argument("--rounds", type=int, default=3, help="throughput rounds (default 3)")
    p.add_argument("--keys", type=int, default=1_000_000,
                   help="campaigns of the throughput job (default 1,000,000)")
    p.add_argument("--rate", type=int, default=1_000_000,
                   help="records per second of event time per executor (default 1,000,000)")
    p.add_argument("--state-mb", default="100,1000",
                   help="comma-separated state sizes in MB (default 100,1000); smaller if "
                        "memory or time demands")
    p.add_argument("--bytes-per-key", type=float, default=24.0,
                   help="checkpoint bytes per key used to size the state (default 24; the "
                        "measured figure is reported)")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: throughput, state")
    p.add_argument("--dir", default=None,
                   help="directory for checkpoints (default: a temporary one)")
    p.add_argument("--plot", default="bench/results/recovery.png",
                   help="PNG of throughput over time across a kill ('' for none)")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    sizes = [int(x) for x in args.state_mb.split(",") if x.strip()]
    stages = (0 if "throughput" in skip else 1 + 3 * args.rounds) + \
        (0 if "state" in skip else len(sizes))
    work = tempfile.mkdtemp(prefix="slash-bench-recovery-", dir=args.dir)
    out: Dict[str, Any] = {"benchmark": NAME, "executors": args.executors, "transport": "shm",
                           "cores": os.cpu_count()}
    try:
        with Progress(NAME, stages) as prog:
            if "throughput" not in skip:
                out["throughput"] = throughput(args, work, prog)
            if "state" not in skip:
                out["state"] = [state_run(args, mb, work, prog) for mb in sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.plot and out.get("state"):
        out["plot"] = plot(out, args.plot)
    return out


def summary(r: Dict[str, Any]) -> str:
    parts = []
    t = r.get("throughput")
    if t:
        b = t["best_records_per_s"]
        parts.append(f"throughput none {b['none'] / 1e6:.2f} M rec/s, every 10 s "
                     f"{t['ratio_10s']:.3f}x (median of rounds {t['ratio_10s_median_of_rounds']:.3f}x), "
                     f"every 2 s {t['ratio_2s']:.3f}x ({t['ratio_2s_median_of_rounds']:.3f}x)")
    for s in r.get("state", []):
        parts.append(f"state ~{s['state_mb_target']} MB: checkpoint "
                     f"{s.get('checkpoint_bytes', 0) / 1e6:.0f} MB in {s.get('checkpoint_seconds')} s ({s.get('checkpoint_seconds_per_gb')} s/GB), "
                     f"kill -> first new record {s.get('seconds_kill_to_first_new_record')} s, "
                     f"correct={s.get('correct')}")
    return "recovery: " + "; ".join(parts)
