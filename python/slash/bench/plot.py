"""Plots of benchmark results (matplotlib, drawn off-screen; no global backend is set).

>>> from slash.bench.plot import plot_channel_sweep
>>> plot_channel_sweep(result["runs"], "sweep.png")  # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Dict, List, Sequence


def _by_credits(points: Sequence[Dict[str, Any]]) -> Dict[int, List[Dict[str, Any]]]:
    groups: Dict[int, List[Dict[str, Any]]] = defaultdict(list)
    for p in points:
        groups[p["credits"]].append(p)
    return {c: sorted(g, key=lambda p: p["buffer_size"]) for c, g in sorted(groups.items())}


def plot_channel_sweep(points: Sequence[Dict[str, Any]], path: str) -> str:
    """Writes a PNG: throughput (channel solid, baseline dashed) and p50/p99 latency vs buffer size.

    One colour per credit count. Returns ``path``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency
    from matplotlib.figure import Figure  # optional dependency

    if not points:
        raise ValueError("no points to plot")
    fig = Figure(figsize=(11, 4.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    tput, lat = fig.subplots(1, 2)
    for (credits, group), color in zip(_by_credits(points).items(), _colors(len(points))):
        x = [p["buffer_size"] for p in group]
        tput.plot(x, [p["throughput_gbps"] for p in group], "o-", color=color, label=f"{credits} credits")
        tput.plot(x, [p["baseline_gbps"] for p in group], "x--", color=color, alpha=0.6)
        lat.plot(x, [p["p50_us"] for p in group], "o-", color=color, label=f"p50, {credits} credits")
        lat.plot(x, [p["p99_us"] for p in group], "^:", color=color, label=f"p99, {credits} credits")
    first = points[0]
    tput.set_title(f"{first['transport']}: throughput (dashed: {first['baseline']} baseline)")
    tput.set_ylabel("GB/s (payload)")
    lat.set_title(f"{first['transport']}: per-buffer latency under load")
    lat.set_ylabel("microseconds")
    lat.set_yscale("log")
    for ax in (tput, lat):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("buffer size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small", ncol=2)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_kafka(result: Dict[str, Any], path: str) -> str:
    """Writes a PNG of ``slash bench kafka``'s runs: records/s and CPU s per
    M records over the filled topic, p99 window latency against the input
    rate (the sweep; the 1 s bound dashed), and the latency percentiles at
    the common rate. Panels without runs are left out. Returns ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency
    from matplotlib.figure import Figure  # optional dependency
    from matplotlib.ticker import NullFormatter  # optional dependency

    runs = result["runs"]
    tput = [r for r in runs if r.get("kind") == "throughput"]
    sweeps = [r for r in runs if r.get("kind") == "sweep"]
    fixed = [r for r in runs if r.get("kind") == "latency" and r.get("p99") is not None]
    panels = [p for p in (tput, sweeps, fixed) if p]
    if not panels:
        raise ValueError("no runs to plot")
    fig = Figure(figsize=(5 * len(panels), 4.2), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(1, len(panels))) if len(panels) > 1 else [fig.subplots(1, 1)]
    sides = sorted({r["side"] for r in runs})
    color = dict(zip(sides, _colors(len(sides))))
    ax = axes.pop(0) if tput else None
    if ax is not None:
        x = range(len(tput))
        ax.bar(x, [r["records_per_s"] / 1e6 for r in tput], color=[color[r["side"]] for r in tput])
        for i, r in enumerate(tput):
            ax.annotate(f"{r['cpu_s_per_m_records']:.1f} CPU s/M", (i, r["records_per_s"] / 1e6),
                        ha="center", va="bottom", fontsize="small")
        ax.set_xticks(list(x), [r["side"] for r in tput])
        ax.set_ylabel("M records/s")
        ax.set_title(f"{result['records'] / 1e6:g} M records, {result['cores']} cores")
    ax = axes.pop(0) if sweeps else None
    if ax is not None:
        for r in sweeps:
            pts = sorted((t["rate"], t["judged_p99"]) for t in r["trials"]
                         if t.get("judged_p99") is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color[r["side"]],
                        label=f"{r['side']} (sustains {r['sustained_rate'] or 'none'})")
        ax.axhline(1000, linestyle="--", color="grey")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # the decades only: no overlapping labels
        ax.set_yscale("log")
        ax.set_xlabel("input events/s")
        ax.set_ylabel("p99 window latency (ms; Flink: in the job)")
        ax.set_title("highest rate with p99 < 1 s")
        ax.legend(fontsize="small")
    ax = axes.pop(0) if fixed else None
    if ax is not None:
        qs = ("p50", "p95", "p99", "max")
        w = 0.8 / len(fixed)
        for i, r in enumerate(fixed):
            ax.bar([j + i * w for j in range(len(qs))], [r.get(q) or 0 for q in qs], w,
                   color=color[r["side"]], label=r["side"])
        ax.set_xticks([j + 0.4 - w / 2 for j in range(len(qs))], list(qs))
        ax.set_yscale("log")
        ax.set_ylabel("window latency (ms)")
        ax.set_title(f"at {fixed[0]['rate']:,} events/s")
        ax.legend(fontsize="small")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_mesh(runs: Sequence[Dict[str, Any]], path: str) -> str:
    """Writes a PNG of ``slash bench mesh``'s runs against the group's size:
    the start (launch to mesh formed), the group's memory (RSS and PSS sums)
    and an executor's sync time per epoch, each with the N(N-1) channels'
    growth from the first point dotted for scale. Returns ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency
    from matplotlib.figure import Figure  # optional dependency

    if not runs:
        raise ValueError("no runs to plot")
    fig = Figure(figsize=(14, 4.2), constrained_layout=True)
    FigureCanvasAgg(fig)
    start, mem, epoch = fig.subplots(1, 3)
    x = [r["executors"] for r in runs]
    first = runs[0]

    def channels(y0: float) -> List[float]:  # N(N-1) scaled to the first point
        return [y0 * r["channels"] / first["channels"] for r in runs]

    start.plot(x, [r["start_seconds"] for r in runs], "o-", color="C0", label="start")
    start.plot(x, channels(first["start_seconds"]), ":", color="grey", label="x N(N-1)")
    start.set_ylabel("seconds, launch to every mesh formed")
    mem.plot(x, [r["rss_bytes"] / 2**20 for r in runs], "o-", color="C1", label="RSS sum")
    mem.plot(x, [r["pss_bytes"] / 2**20 for r in runs], "s-", color="C2", label="PSS sum")
    mem.plot(x, [r["shmem_pss_bytes"] / 2**20 for r in runs], "^-", color="C4",
             label="of it shared (the rings)")
    mem.plot(x, channels(first["shmem_pss_bytes"] / 2**20), ":", color="grey", label="x N(N-1)")
    mem.set_ylabel("MiB at the end of the run")
    epoch.plot(x, [r["epoch_sync_ms"] for r in runs], "o-", color="C3", label="sync per epoch")
    epoch.plot(x, channels(first["epoch_sync_ms"]), ":", color="grey", label="x N(N-1)")
    epoch.set_ylabel("ms per epoch, mean over executors")
    for ax in (start, mem, epoch):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(x, [str(v) for v in x])
        ax.set_xlabel(f"executors on one host ({first['transport']})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _colors(n: int) -> List[str]:
    return [f"C{i % 10}" for i in range(n)]
