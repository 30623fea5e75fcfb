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


def _colors(n: int) -> List[str]:
    return [f"C{i % 10}" for i in range(n)]
