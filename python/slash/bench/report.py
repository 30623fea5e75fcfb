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

With ``--page PATH`` it writes the per-benchmark page instead
(``docs/benchmarks.md``): per benchmark, how to run it, what each side was
given, a table of its recorded runs with date, commit, load and machine
(from the ``recorded`` field ``slash bench --json`` stamps, or the fields an
older result kept; "not recorded" where a result has none, never a guess),
its tables and its plots (in ``benchmarks/`` beside the page). A result may
carry ``headline`` (``figure``, ``peer``, ``what``): those form the headline
table at the top of the page (and ``reading``, paragraphs on what the
figures say, follows its runs), and ``--readme PATH`` rewrites the same table
between the README's ``<!-- headline -->`` and ``<!-- /headline -->``
markers, so each figure is written in one place, its JSON result.

    slash bench report --results bench/results --page docs/benchmarks.md --readme README.md
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from slash.bench import discover
from slash.bench.modes import plot as plot_skew
from slash.bench.plot import plot_channel_sweep, plot_kafka
from slash.errors import InvalidArgument

log = logging.getLogger(__name__)

#: a result's prose fields: shown as what the sides were given, not as figures
PROSE = ("note", "notes", "wall_notes", "tool", "plan", "sides", "command", "benchmark", "bench",
         "reading")
#: the most columns a table of a benchmark's own scalar fields shows
MAX_COLUMNS = 14

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
    scalars = {k: v for k, v in run.items()
               if isinstance(v, (int, float, str, bool)) and k not in PROSE}
    if scalars:
        g.other.append((name, scalars))
        return True
    return False


def _read(root: Path) -> List[Tuple[str, Any]]:
    """Every ``*.json`` under ``root`` as (relative path, parsed object or the reason it is not)."""
    out: List[Tuple[str, Any]] = []
    for path in sorted(root.rglob("*.json")):
        rel = str(path.relative_to(root))
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            out.append((rel, ValueError(f"not readable as JSON ({e})")))
            continue
        if not isinstance(data, dict):
            out.append((rel, ValueError(f"top level is a {type(data).__name__}, not an object")))
            continue
        out.append((rel, data))
    return out


def _name(rel: str, data: Dict[str, Any]) -> str:
    return str(data.get("benchmark") or data.get("bench") or Path(rel).stem)


def _add_file(rel: str, data: Dict[str, Any], g: Gathered) -> None:
    runs = data["runs"] if isinstance(data.get("runs"), list) else [data]
    params = data.get("parameters") if isinstance(data.get("parameters"), dict) else {}
    used = [_classify(_name(rel, data), r, params, g) for r in runs if isinstance(r, dict)]
    if any(used):
        g.files.append(rel)
    else:
        g.ignored[rel] = "no runs with recognised fields"


def _root(results: str) -> Path:
    root = Path(results)
    if not root.is_dir():
        raise InvalidArgument(f"--results {results!r} is not a directory")
    return root


def gather(results: str) -> Gathered:
    """Reads every JSON file under ``results``."""
    g = Gathered()
    for rel, data in _read(_root(results)):
        if isinstance(data, Exception):
            g.ignored[rel] = str(data)
        else:
            _add_file(rel, data, g)
    return g


# -- Markdown --------------------------------------------------------------------
def _m(v: Optional[float]) -> str:
    return "" if v is None else f"{v / 1e6:.2f}"


def _ratio(row: Dict[str, Any], engine: str) -> str:
    v = (row.get("vs") or {}).get(engine)
    return "" if v is None or engine == row.get("engine") else f"{v:.2f}x"


def _table(head: List[str], rows: List[List[Any]]) -> List[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out


def _cell(c: Any) -> str:
    """A table cell: one line, its bars escaped (an escaped one stays as it is)."""
    return re.sub(r"(?<!\\)\|", r"\\|", " ".join(str(c).split()))


def markdown(g: Gathered, plots: Dict[str, str]) -> str:
    lines = ["# Benchmark report", "",
             "Throughput is input records per second measured side by side in one invocation; "
             "ratios compare engines of the same invocation only. The machine may be shared, so "
             "absolute numbers vary between runs.", ""]
    lines += _sections(g, plots, "##")
    lines += ["## Sources", ""] + [f"* {f}" for f in g.files]
    if g.ignored:
        lines += ["", "Not used:"] + [f"* {f}: {why}" for f, why in g.ignored.items()]
    return "\n".join(lines) + "\n"


def _sections(g: Gathered, plots: Dict[str, str], h: str, other: str = "Other results") -> List[str]:
    """The tables (and plot links) of everything in ``g``, under headings of level ``h``."""
    lines: List[str] = []
    if g.engine_rows:
        lines += [f"{h} Throughput per engine and workload", ""]
        rows = [[r["workload"], r["engine"], r.get("cores", ""), _m(r.get("records_per_s")),
                 _m(r.get("records_per_s_per_core")), _ratio(r, "duckdb-1") or _ratio(r, "duckdb"),
                 _ratio(r, "repartition"), _ratio(r, "spark"), r.get("verified", "")]
                for r in g.engine_rows]
        lines += _table(["workload", "engine", "cores", "M rec/s", "M rec/s per core",
                         "vs DuckDB (1 thread)", "vs repartition", "vs Spark", "verified"], rows)
        lines += ["", f"![throughput]({plots['throughput']})", ""] if "throughput" in plots else [""]
    if g.skew_runs:
        lines += [f"{h} Skew sweep (slash vs repartition)", ""]
        lines += _table(["skew", "slash M rec/s", "repartition M rec/s", "ratio", "verified"],
                        [[r["skew"], _m(r["slash_records_per_s"]), _m(r["repartition_records_per_s"]),
                          f"{r.get('ratio', 0):.2f}", r.get("verified", "")] for r in g.skew_runs])
        lines += ["", f"![skew sweep]({plots['skew']})", ""] if "skew" in plots else [""]
    if g.scaling_runs:
        lines += [f"{h} Scaling", ""]
        lines += _table(["executors", "M rec/s total", "M rec/s per executor", "sync share",
                         "verified"],
                        [[r["executors"], _m(r.get("records_per_s")),
                          _m(r.get("records_per_s_per_executor")),
                          f"{100 * r.get('sync_share', 0):.1f}%", r.get("verified", "")]
                         for r in g.scaling_runs])
        lines.append("")
    if g.channel_points:
        lines += [f"{h} Channel buffer-size sweep", ""]
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
        lines += [f"{h} {other}", ""]
        by_name: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
        for name, scalars in g.other:
            by_name[name].append(scalars)
        for name, runs in by_name.items():
            head = list(dict.fromkeys(k for r in runs for k in r))[:MAX_COLUMNS]
            if len(by_name) > 1:
                lines += ([] if lines[-1] == "" else [""]) + [f"{name}:", ""]
            lines += _table(head, [[_fmt(r.get(k, "")) for k in head] for r in runs]) + [""]
    return lines


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


# -- the per-benchmark page (docs/benchmarks.md) ----------------------------------
NOT_RECORDED = "not recorded"
HEADLINE_START, HEADLINE_END = "<!-- headline -->", "<!-- /headline -->"
#: the fields in which benchmarks kept the load average around their runs
LOAD_FIELDS = ("load", "load_avg", "load_average", "load_average_before", "load_average_after",
               "load_before", "load_after")


@dataclass(frozen=True)
class Provenance:
    """When, where and from what a result was measured; NOT_RECORDED where it does not say."""

    date: str
    commit: str
    load: str
    machine: str
    command: Optional[str] = None
    source: Optional[str] = None  # where date and commit come from, when not stamped by the run
    versions: str = NOT_RECORDED  # the peers' versions the run had installed


def _loads(data: Dict[str, Any]) -> List[float]:
    """The load averages a result kept itself (top level and per run; a list is 1, 5, 15 min)."""
    items = [data] + ([r for r in data["runs"] if isinstance(r, dict)]
                      if isinstance(data.get("runs"), list) else [])
    if isinstance(data.get("machine"), dict):
        items.append(data["machine"])
    vals: List[float] = []
    for it in items:
        for k in LOAD_FIELDS:
            v = it.get(k)
            if isinstance(v, list) and v:
                v = v[0]
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                vals.append(float(v))
    return vals


def provenance(data: Dict[str, Any]) -> Provenance:
    """The result's ``recorded`` stamp, else the fields it kept itself; never a guess."""
    rec = data.get("recorded") if isinstance(data.get("recorded"), dict) else {}
    vals = _loads(data)
    if vals:
        lo, hi = min(vals), max(vals)
        load = f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"
    elif isinstance(rec.get("load"), (int, float)):
        load = f"{rec['load']:.1f}"
    else:
        load = str(rec.get("load") or NOT_RECORDED)
    own = data.get("machine")
    cores = data.get("cores") or (own.get("cpus") if isinstance(own, dict) else None)
    machine = rec.get("machine") or (own if isinstance(own, str) else None) or (
        f"{cores} cores" if isinstance(cores, int) else NOT_RECORDED)
    return Provenance(date=str(rec.get("date") or data.get("date") or NOT_RECORDED),
                      commit=str(rec.get("commit") or data.get("commit") or NOT_RECORDED),
                      load=load, machine=str(machine), command=rec.get("command"),
                      source=rec.get("from"),
                      versions=", ".join(f"{k} {v}" for k, v in (rec.get("versions") or {}).items())
                      or NOT_RECORDED)


def _group(name: str) -> str:
    """A benchmark's name without a note in parentheses (``elastic (live rows)`` is ``elastic``)."""
    return name.split(" (")[0].strip()


def anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def _text(v: Any) -> str:
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_text(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(_text(x) for x in v)
    return _fmt(v)


def _figures(data: Dict[str, Any], g: Gathered) -> str:
    """One cell: the result's headline figure, else what its runs hold."""
    head = data.get("headline")
    if isinstance(head, dict) and head.get("figure"):
        return f"{head['figure']} vs {head.get('peer', 'its peer')}"
    parts = []
    for r in g.engine_rows:
        vs = ", ".join(f"{r['engine']} {v:.2f}x {e}" for e, v in (r.get("vs") or {}).items()
                       if r["engine"].startswith("slash"))
        if vs:
            parts.append(f"{r['workload']}: {vs}")
    if g.skew_runs:
        ratios = [r.get("ratio", 0) for r in g.skew_runs]
        parts.append(f"slash/repartition {min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} skews")
    if g.channel_points:
        parts.append(f"{len(g.channel_points)} buffer sizes")
    if g.scaling_runs:
        parts.append(f"{len(g.scaling_runs)} executor counts")
    if len(g.other) == 1 and "ratio" in g.other[0][1]:  # one run that states its own ratio
        ratio = " ".join(str(g.other[0][1]["ratio"]).split())
        parts.append(ratio if len(ratio) <= 160 else ratio[:157].rsplit(" ", 1)[0] + " ...")
    elif g.other:
        parts.append(f"{len(g.other)} run(s), table below")
    return "; ".join(parts[:4]) or "nested figures: see the file"


@dataclass
class BenchmarkResults:
    """One benchmark's results: its JSON files (relative path, content) and their runs by kind."""

    name: str
    files: List[Tuple[str, Dict[str, Any]]] = field(default_factory=list)
    gathered: Gathered = field(default_factory=Gathered)


def _benchmarks(root: Path) -> Tuple[List[BenchmarkResults], Dict[str, str]]:
    benches: Dict[str, BenchmarkResults] = {}
    unreadable: Dict[str, str] = {}
    for rel, data in _read(root):
        if isinstance(data, Exception):
            unreadable[rel] = str(data)
            continue
        b = benches.setdefault(_group(_name(rel, data)), BenchmarkResults(_group(_name(rel, data))))
        b.files.append((rel, data))
        _add_file(rel, data, b.gathered)
    def order(b: BenchmarkResults) -> Tuple[float, str]:  # headlines first, by their ``order``, then by name
        heads = [d["headline"] for _, d in b.files if isinstance(d.get("headline"), dict)]
        return (min((float(h.get("order", 1e9)) for h in heads), default=float("inf")), b.name)

    first = sorted(benches.values(), key=order)
    return first, unreadable


def _plots(b: BenchmarkResults, root: Path, out: Path) -> Dict[str, str]:
    """Draws a benchmark's plots into ``out`` (and copies PNGs kept beside its results)."""
    slug = anchor(b.name) or "results"
    made: Dict[str, str] = {}
    g = b.gathered
    try:
        if g.engine_rows:
            made["throughput"] = plot_throughput(g.engine_rows, str(out / f"{slug}-throughput.png"))
        if g.skew_runs:
            made["skew"] = plot_skew(g.skew_runs, str(out / f"{slug}-skew.png"))
        pts = [p for p in g.channel_points
               if all(k in p for k in ("credits", "p50_us", "p99_us", "baseline_gbps", "transport"))]
        if pts:
            made["channel"] = plot_channel_sweep(pts, str(out / f"{slug}-channel.png"))
        for rel, data in b.files:
            runs = data.get("runs") if isinstance(data.get("runs"), list) else []
            if any(isinstance(r, dict) and r.get("kind") in ("throughput", "sweep", "latency") for r in runs):
                made[rel] = plot_kafka(data, str(out / f"{slug}-{Path(rel).stem}.png"))
    except ImportError as e:  # matplotlib is optional: the tables stand without it
        log.warning("no plots for %s: %s", b.name, e)
    for rel, _ in b.files:
        png = (root / rel).with_suffix(".png")
        if png.is_file():
            dst = out / f"{slug}-{png.name}" if not png.name.startswith(slug) else out / png.name
            shutil.copyfile(png, dst)
            made[f"{rel} (kept)"] = str(dst)
    return made


def _sides(files: List[Tuple[str, Dict[str, Any]]]) -> List[str]:
    """What each side was given: a result's ``sides`` (side: what it had), else its plan or note."""
    items: List[str] = []
    for rel, d in files:
        given = d.get("sides")
        if isinstance(given, dict):
            items += [f"* {side}: {_text(what)}" for side, what in given.items()]
            continue
        text = str(given or d.get("plan") or d.get("note") or d.get("notes") or "")
        if text:
            items.append(f"* `{rel}`: {text}" if len(files) > 1 else text)
    items = list(dict.fromkeys(items))
    if len(items) == 1 and not items[0].startswith("* "):
        return ["What each side was given: " + items[0], ""]
    return ["What each side was given:" + ("" if items else f" {NOT_RECORDED}"), ""] + \
        (items + [""] if items else [])


def _headline_rows(benches: List[BenchmarkResults], link: str) -> List[List[str]]:
    rows = []
    for b in benches:
        for _, data in b.files:
            head = data.get("headline")
            if not isinstance(head, dict):
                continue
            p = provenance(data)
            rows.append([f"[{b.name}]({link}#{anchor(b.name)})", f"**{head.get('figure', '')}**",
                         str(head.get("peer", NOT_RECORDED)), str(head.get("what", "")),
                         p.date, p.commit, p.load, p.machine])
    return rows


def headline_table(benches: List[BenchmarkResults], link: str) -> List[str]:
    """The headline: one figure per benchmark that names one, against its peer."""
    return _table(["benchmark", "figure", "against", "what", "date", "commit", "load", "machine"],
                  _headline_rows(benches, link))


def page(results: str, page_path: str, helps: Dict[str, str]) -> Tuple[str, List[BenchmarkResults]]:
    """The Markdown of the per-benchmark page; plots go to ``benchmarks/`` beside it."""
    root = _root(results)
    benches, unreadable = _benchmarks(root)
    plot_dir = Path(page_path).resolve().parent / "benchmarks"
    plot_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# Benchmarks", "",
             f"Generated by `slash bench report --results {results} --page {page_path}` from the "
             "JSON results in `{0}`; edit those, not this page. Every figure is a ratio of sides "
             "measured in one invocation on the same machine, taking turns; the machines are "
             "shared, so each run carries its load average (1 minute) and ratios move between "
             "runs. Date, commit and load come from the `recorded` stamp of `slash bench --json`, "
             "else from the fields the result kept; \"not recorded\" where it has neither."
             .format(results), ""]
    if any("headline" in d for b in benches for _, d in b.files):
        lines += ["## Headline", ""] + headline_table(benches, "") + [""]
    for b in benches:
        lines += [f"## {b.name}", ""]
        helps_line = helps.get(b.name)
        if helps_line:
            lines += [helps_line[:1].upper() + helps_line[1:] + ".", ""]
        provs = [(rel, data, provenance(data)) for rel, data in b.files]
        commands = list(dict.fromkeys(
            p.command or (f"slash bench {b.name} --json {results}/{b.name}-$(date +%F).json" if b.name in helps
                          else str(data.get("tool") or data.get("command") or NOT_RECORDED))
            for rel, data, p in provs))
        lines += ["How to run:", "", "```console"] + commands + ["```", ""]
        lines += _sides(b.files)
        runs, per_file = [], []
        for rel, data, p in provs:
            one = Gathered()
            _add_file(rel, data, one)
            per_file.append((rel, one))
            runs.append([p.date, p.commit, p.load, p.machine, p.versions, _figures(data, one), f"`{rel}`"])
        lines += ["Runs:", ""] + _table(["date", "commit", "load", "machine", "versions", "figures", "result"],
                                        runs)
        notes = [f"* `{rel}`: date and commit {p.source}" for rel, _, p in provs if p.source]
        lines += [""] + (notes + [""] if notes else [])
        for _, data in b.files:  # what the result's own prose says it means
            reading = data.get("reading")
            for par in [reading] if isinstance(reading, str) else reading or []:
                lines += [str(par), ""]
        plots = _plots(b, root, plot_dir)
        rel_plots = {k: os.path.relpath(v, Path(page_path).resolve().parent) for k, v in plots.items()}
        for rel, one in per_file:
            lines += _sections(one, {}, "###", other=f"Figures of `{rel}`")
        lines += [f"![{b.name}: {k}]({v})" for k, v in rel_plots.items()] + ([""] if rel_plots else [])
    if unreadable:
        lines += ["## Results not read", ""] + [f"* `{f}`: {why}" for f, why in unreadable.items()] + [""]
    return "\n".join(lines).rstrip("\n") + "\n", benches


def rewrite_readme(readme: str, benches: List[BenchmarkResults], page_path: str) -> None:
    """Replaces the README's headline block with the table from the results."""
    text = Path(readme).read_text()
    start, end = text.find(HEADLINE_START), text.find(HEADLINE_END)
    if start < 0 or end < start:
        raise InvalidArgument(f"--readme {readme!r} has no {HEADLINE_START} ... {HEADLINE_END} block")
    link = os.path.relpath(Path(page_path).resolve(), Path(readme).resolve().parent)
    block = "\n".join([HEADLINE_START, *headline_table(benches, link), ""])
    Path(readme).write_text(text[:start] + block + text[end:])


@dataclass(frozen=True)
class ReportConfig:
    results: str
    out: Optional[str] = None
    page: Optional[str] = None
    readme: Optional[str] = None

    def __post_init__(self) -> None:
        if not os.path.isdir(self.results):
            raise InvalidArgument(f"--results {self.results!r} is not a directory")


def build_page(cfg: ReportConfig) -> Dict[str, Any]:
    """Writes the per-benchmark page (and the README's headline); returns what was written."""
    assert cfg.page is not None
    helps = {name: b.help for name, b in discover().items()}
    md, benches = page(cfg.results, cfg.page, helps)
    Path(cfg.page).parent.mkdir(parents=True, exist_ok=True)
    Path(cfg.page).write_text(md)
    if cfg.readme:
        rewrite_readme(cfg.readme, benches, cfg.page)
    return {"benchmark": NAME, "markdown": cfg.page, "benchmarks": len(benches),
            "files": sum(len(b.files) for b in benches), "readme": cfg.readme,
            "headlines": len(_headline_rows(benches, ""))}


def build(cfg: ReportConfig) -> Dict[str, Any]:
    """Writes report.md and the plots; returns what was written and counted."""
    if cfg.page:
        return build_page(cfg)
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
    p.add_argument("--page", metavar="PATH",
                   help="write the per-benchmark page here instead (e.g. docs/benchmarks.md; plots in "
                        "benchmarks/ beside it)")
    p.add_argument("--readme", metavar="PATH",
                   help="with --page: rewrite the headline table between the README's "
                        f"{HEADLINE_START} and {HEADLINE_END} markers")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    if args.readme and not args.page:
        raise InvalidArgument("--readme needs --page (the headline links to the page)")
    return build(ReportConfig(results=args.results, out=args.out, page=args.page, readme=args.readme))


def summary(r: Dict[str, Any]) -> str:
    if "benchmarks" in r:
        return (f"report: {r['benchmarks']} benchmark(s) from {r['files']} file(s), "
                f"{r['headlines']} headline figure(s) -> {r['markdown']}"
                + (f", {r['readme']}" if r.get("readme") else ""))
    return (f"report: {r['files']} file(s) ({r['ignored']} not used), {r['engine_rows']} engine rows, "
            f"{r['skew_runs']} skew runs, {r['channel_points']} channel points -> {r['markdown']}"
            + (f", {', '.join(r['plots'])}" if r["plots"] else ""))
