"""``slash bench report``: every JSON result in a folder as one Markdown
report with PNG plots.

Reads each ``*.json`` under ``--results`` (recursively) written by any
``slash bench ... --json``; a file holds one run as a flat dict or several as
``{"runs": [...]}``. Runs are recognised by their fields, whichever
benchmark wrote them:

* engine runs (``engine``, ``records_per_s``: ysb, nexmark-*, cm, ro);
* side-by-side runs with ``records_per_s`` and ``OTHER_records_per_s``
  fields (``slash bench spark``, ``ssb``): one row per engine;
* the skew sweep (``skew`` with slash and repartition rates: ``modes``);
* scaling runs (``executors``, ``records_per_s_per_executor``);
* channel points (``buffer_size``, ``throughput_gbps``).

Writes ``report.md`` and ``throughput.png`` (records/s per engine and
workload), ``skew.png`` and ``channel.png`` when such runs are present, into
``--out`` (default: the results folder). Files that are not JSON or hold
nothing recognisable are listed in the report, not dropped silently.

    slash bench report --results bench/results --out bench/report
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from slash.bench.modes import plot as plot_skew
from slash.bench.plot import plot_channel_sweep
from slash.errors import InvalidArgument

log = logging.getLogger(__name__)

NAME = "report"
HELP = "gather JSON results of slash bench into a Markdown table and PNG plots"


@dataclass
class Gathered:
    """Everything found, by kind; ``ignored`` maps a file to why it was not used."""

    engine_rows: List[Dict[str, Any]] = field(default_factory=list)
    skew_runs: List[Dict[str, Any]] = field(default_factory=list)
    scaling_runs: List[Dict[str, Any]] = field(default_factory=list)
    channel_points: List[Dict[str, Any]] = field(default_factory=list)
    other: List[Tuple[str, Dict[str, Any]]] = field(default_factory=list)
    files: List[str] = field(default_factory=list)
    ignored: Dict[str, str] = field(default_factory=dict)


def _label(name: str, run: Dict[str, Any], params: Dict[str, Any]) -> str:
    """The workload's name plus what sets this run apart (keys, skew) when present."""
    parts = [run.get("workload") or name]
    merged = {**params, **run.get("parameters", {}), **run}
    if merged.get("sample"):  # the real trace: the generator's keys and skew do not apply
        return " ".join([*map(str, parts), "trace sample"])
    for k in ("keys", "skew", "dist"):
        v = merged.get(k)
        if v is not None and v != "uniform" and not isinstance(v, (dict, list)):
            parts.append(f"{k}={v}")
    return " ".join(str(p) for p in parts)


def _classify(name: str, run: Dict[str, Any], params: Dict[str, Any], g: Gathered) -> bool:
    """Files one run under its kind; False if nothing in it is recognised."""
    if "buffer_size" in run and "throughput_gbps" in run:
        g.channel_points.append(run)
        return True
    if "skew" in run and "slash_records_per_s" in run and "repartition_records_per_s" in run:
        g.skew_runs.append(run)
        return True
    if "engine" in run and "records_per_s" in run:
        g.engine_rows.append({**run, "workload": _label(name, run, params)})
        return True
    if "records_per_s_per_executor" in run and "executors" in run:
        g.scaling_runs.append({"benchmark": name, **run})
        return True
    rates = {k[: -len("_records_per_s")]: v for k, v in run.items()
             if k.endswith("_records_per_s") and isinstance(v, (int, float))}
    if rates:
        if "records_per_s" in run:  # the benchmark's own engine is slash
            rates.setdefault("slash", run["records_per_s"])
        wl = _label(name, run, params)
        for engine, rps in rates.items():
            g.engine_rows.append({"workload": wl, "engine": engine, "records_per_s": rps,
                                  "verified": run.get("verified"),
                                  "vs": {e: rps / o for e, o in rates.items() if e != engine and o}})
        return True
    scalars = {k: v for k, v in run.items() if isinstance(v, (int, float, str, bool))}
    if scalars:
        g.other.append((name, scalars))
        return True
    return False


def gather(results: str) -> Gathered:
    """Reads every JSON file under ``results``."""
    root = Path(results)
    if not root.is_dir():
        raise InvalidArgument(f"--results {results!r} is not a directory")
    g = Gathered()
    for path in sorted(root.rglob("*.json")):
        rel = str(path.relative_to(root))
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            g.ignored[rel] = f"not readable as JSON ({e})"
            continue
        if not isinstance(data, dict):
            g.ignored[rel] = f"top level is a {type(data).__name__}, not an object"
            continue
        name = str(data.get("benchmark") or data.get("bench") or path.stem)
        runs = data["runs"] if isinstance(data.get("runs"), list) else [data]
        params = data.get("parameters") if isinstance(data.get("parameters"), dict) else {}
        used = [_classify(name, r, params, g) for r in runs if isinstance(r, dict)]
        if any(used):
            g.files.append(rel)
        else:
            g.ignored[rel] = "no runs with recognised fields"
    return g


# -- Markdown --------------------------------------------------------------------
def _m(v: Optional[float]) -> str:
    return "" if v is None else f"{v / 1e6:.2f}"


def _ratio(row: Dict[str, Any], engine: str) -> str:
    v = (row.get("vs") or {}).get(engine)
    return "" if v is None or engine == row.get("engine") else f"{v:.2f}x"


def _table(head: List[str], rows: List[List[Any]]) -> List[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def markdown(g: Gathered, plots: Dict[str, str]) -> str:
    lines = ["# Benchmark report", "",
             "Throughput is input records per second measured side by side in one invocation; "
             "ratios compare engines of the same invocation only. The machine may be shared, so "
             "absolute numbers vary between runs.", ""]
    if g.engine_rows:
        lines += ["## Throughput per engine and workload", ""]
        rows = [[r["workload"], r["engine"], r.get("cores", ""), _m(r.get("records_per_s")),
                 _m(r.get("records_per_s_per_core")), _ratio(r, "duckdb-1") or _ratio(r, "duckdb"),
                 _ratio(r, "repartition"), _ratio(r, "spark"), r.get("verified", "")]
                for r in g.engine_rows]
        lines += _table(["workload", "engine", "cores", "M rec/s", "M rec/s per core",
                         "vs DuckDB (1 thread)", "vs repartition", "vs Spark", "verified"], rows)
        lines += ["", f"![throughput]({plots['throughput']})", ""] if "throughput" in plots else [""]
    if g.skew_runs:
        lines += ["## Skew sweep (slash vs repartition)", ""]
        lines += _table(["skew", "slash M rec/s", "repartition M rec/s", "ratio", "verified"],
                        [[r["skew"], _m(r["slash_records_per_s"]), _m(r["repartition_records_per_s"]),
                          f"{r.get('ratio', 0):.2f}", r.get("verified", "")] for r in g.skew_runs])
        lines += ["", f"![skew sweep]({plots['skew']})", ""] if "skew" in plots else [""]
    if g.scaling_runs:
        lines += ["## Scaling", ""]
        lines += _table(["executors", "M rec/s total", "M rec/s per executor", "sync share",
                         "verified"],
                        [[r["executors"], _m(r.get("records_per_s")),
                          _m(r.get("records_per_s_per_executor")),
                          f"{100 * r.get('sync_share', 0):.1f}%", r.get("verified", "")]
                         for r in g.scaling_runs])
        lines.append("")
    if g.channel_points:
        lines += ["## Channel buffer-size sweep", ""]
        pts = sorted(g.channel_points, key=lambda p: (p.get("transport", ""), p.get("credits", 0),
                                                      p["buffer_size"]))
        lines += _table(["transport", "credits", "buffer bytes", "GB/s", "baseline", "baseline GB/s",
                         "ratio", "p50 us", "p99 us"],
                        [[p.get("transport", ""), p.get("credits", ""), p["buffer_size"],
                          f"{p['throughput_gbps']:.2f}", p.get("baseline", ""),
                          f"{p.get('baseline_gbps') or 0:.2f}",
                          "" if p.get("ratio") is None else f"{p['ratio']:.2f}",
                          f"{p.get('p50_us', float('nan')):.1f}", f"{p.get('p99_us', float('nan')):.1f}"]
                         for p in pts])
        lines += ["", f"![channel sweep]({plots['channel']})", ""] if "channel" in plots else [""]
    if g.other:
        lines += ["## Other results", ""]
        for name, scalars in g.other:
            lines.append(f"* {name}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in scalars.items()))
        lines.append("")
    lines += ["## Sources", ""] + [f"* {f}" for f in g.files]
    if g.ignored:
        lines += ["", "Not used:"] + [f"* {f}: {why}" for f, why in g.ignored.items()]
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# -- plots -----------------------------------------------------------------------
def plot_throughput(rows: List[Dict[str, Any]], path: str) -> str:
    """Grouped bars: M records/s (log scale) per workload, one bar per engine."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency
    from matplotlib.figure import Figure  # optional dependency

    by_wl: Dict[str, Dict[str, float]] = defaultdict(dict)
    for r in rows:
        by_wl[r["workload"]][r["engine"]] = max(by_wl[r["workload"]].get(r["engine"], 0.0),
                                                float(r["records_per_s"]))
    workloads = list(by_wl)
    engines = list(dict.fromkeys(e for r in by_wl.values() for e in r))
    fig = Figure(figsize=(max(6.0, 1.4 * len(workloads) + 2), 4.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.8 / max(len(engines), 1)
    for j, e in enumerate(engines):
        xs = [i + (j - (len(engines) - 1) / 2) * width for i in range(len(workloads))]
        ys = [by_wl[w].get(e, 0.0) / 1e6 for w in workloads]
        ax.bar(xs, ys, width, label=e, color=f"C{j % 10}")
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads, rotation=20, ha="right", fontsize="small")
    ax.set_ylabel("M records/s")
    ax.set_yscale("log")
    ax.set_title("throughput per engine and workload (same invocation per workload)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


@dataclass(frozen=True)
class ReportConfig:
    results: str
    out: Optional[str] = None

    def __post_init__(self) -> None:
        if not os.path.isdir(self.results):
            raise InvalidArgument(f"--results {self.results!r} is not a directory")


def build(cfg: ReportConfig) -> Dict[str, Any]:
    """Writes report.md and the plots; returns what was written and counted."""
    out = cfg.out or cfg.results
    os.makedirs(out, exist_ok=True)
    g = gather(cfg.results)
    plots: Dict[str, str] = {}
    if g.engine_rows:
        plots["throughput"] = os.path.basename(plot_throughput(g.engine_rows,
                                                               os.path.join(out, "throughput.png")))
    if g.skew_runs:
        plots["skew"] = os.path.basename(plot_skew(g.skew_runs, os.path.join(out, "skew.png")))
    if g.channel_points:
        pts = [p for p in g.channel_points
               if all(k in p for k in ("credits", "p50_us", "p99_us", "baseline_gbps", "transport"))]
        if pts:
            plots["channel"] = os.path.basename(plot_channel_sweep(pts, os.path.join(out, "channel.png")))
    md = os.path.join(out, "report.md")
    with open(md, "w") as f:
        f.write(markdown(g, plots))
    return {"benchmark": NAME, "markdown": md, "plots": [os.path.join(out, p) for p in plots.values()],
            "files": len(g.files), "ignored": len(g.ignored), "engine_rows": len(g.engine_rows),
            "skew_runs": len(g.skew_runs), "channel_points": len(g.channel_points),
            "scaling_runs": len(g.scaling_runs)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", required=True, metavar="DIR", help="folder of JSON results (searched recursively)")
    p.add_argument("--out", metavar="DIR", help="where report.md and the PNGs go (default: --results)")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    return build(ReportConfig(results=args.results, out=args.out))


def summary(r: Dict[str, Any]) -> str:
    return (f"report: {r['files']} file(s) ({r['ignored']} not used), {r['engine_rows']} engine rows, "
            f"{r['skew_runs']} skew runs, {r['channel_points']} channel points -> {r['markdown']}"
            + (f", {', '.join(r['plots'])}" if r["plots"] else ""))
