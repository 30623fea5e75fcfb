"""The layers of python/slash, read from its import statements with ast.

* No import circle: modules form a graph in which nothing imports upward
  (imports inside function bodies count too).
* No module imports another module's ``_private`` names.
* The package's folders are its layers (:data:`LAYERS`, bottom up): no
  module imports from a folder above its own, so a source imports no engine
  and no driver.
* The engine (``slash.run``) imports none of the modules built on it: not the
  runner, the autotuner, Spark, the command line or the benchmarks.
* Rank-side modules (what a rank's loop is built from) import no driver-side
  module.
* An import inside a function body says why on its line or the line before:
  an optional dependency, or a measured start-up cost (a time, "~0.3 s").
  Enforced for the engine and the modules listed in ``LAZY_CHECKED``.

docs/architecture.md draws the layers these tests keep.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

import pytest


def _package_dir() -> Path:
    here = Path(__file__).resolve().parent.parent / "python" / "slash"
    if here.is_dir():
        return here
    import slash  # a test run outside the source tree reads the installed copy

    return Path(slash.__file__).resolve().parent


PKG = _package_dir()

#: what a rank's loop is built from: none of these knows a driver
RANK_SIDE = {"slash", "slash.errors", "slash.limits", "slash.window", "slash.state",
             "slash.state_config", "slash.state_columns", "slash.join", "slash.query",
             "slash.agg_query", "slash.join_query", "slash.filters", "slash.columns",
             "slash.executor", "slash.group", "slash.sources", "slash._ipc", "slash.checkpoint",
             "slash.run.rank_ckpt", "slash.arrow_np", "slash.compute", "slash.interval",
             "slash.open_files", "slash._moved"}
#: packages whose every module is rank-side: a source (one module of slash.sources) imports no
#: driver; the generators a source makes its batches with
RANK_SIDE_PACKAGES = ("slash.sources.", "slash.workloads")
#: the drivers and everything above them (a package's name stands for its every module)
DRIVER_SIDE = {"slash.runner", "slash.run.driver", "slash.run.supervisor", "slash.run.launcher",
               "slash.run.worker", "slash.run.recovery", "slash.run.live", "slash.control",
               "slash.metrics", "slash.cli", "slash.spark", "slash.bench"}
#: what the engine must not import (it is below all of them)
ABOVE_ENGINE = ("slash.runner", "slash.control.autotune", "slash.spark", "slash.cli",
                "slash.bench", "slash.kafka")
#: the folders (and the few modules of the package's top) bottom up: a module imports only from
#: its own layer or one below. The flat modules not named are the bottom layer (the operators:
#: state, join, query, executor, checkpoint files, errors). A name stands for a package's every
#: module; the longest name that covers a module gives its layer.
LAYERS: List[Tuple[str, ...]] = [
    ("slash.workloads",),
    ("slash.sources",),
    ("slash.kafka",),
    ("slash.run", "slash.control"),  # the engine, its groups and their control
    ("slash.runner", "slash._warm"),
    ("slash.spark",),
    ("slash.bench",),
    ("slash.cli", "slash.__main__"),
]
#: modules whose imports inside functions must each say why (besides slash.run)
LAZY_CHECKED = RANK_SIDE | {
    "slash.run.recovery.checkpointed", "slash.run.recovery.join", "slash.run.recovery.live",
    "slash.run.live.join", "slash.run.live.scale", "slash.control.autotune", "slash.control",
    "slash.control.logic", "slash.control.moves", "slash.control.server", "slash.spark._env",
    "slash.spark.join", "slash.spark._batch_ckpt", "slash.spark._stream_ckpt", "slash.cli",
    "slash.cli.doctor", "slash.metrics", "slash.run.launcher"}
#: a reason for a lazy import: an optional dependency, or a measured cost
LAZY_REASON = re.compile(r"optional|start-?up|\d+(\.\d+)?\s*(ms|s)\b", re.IGNORECASE)


class Import(NamedTuple):
    module: str        # the importing module
    target: str        # the module imported from (a slash module, or any other)
    name: Optional[str]  # the name taken (from M import name), None for a module
    line: int
    in_function: bool


def modules(root: Path = PKG) -> Dict[str, Path]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = ("slash",) + p.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _statements(tree: ast.AST) -> Iterator[Tuple[ast.stmt, bool]]:
    def walk(node: ast.AST, in_fn: bool) -> Iterator[Tuple[ast.stmt, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_fn
            yield from walk(child, in_fn or isinstance(child, (ast.FunctionDef,
                                                               ast.AsyncFunctionDef, ast.Lambda)))
    yield from walk(tree, False)


def imports(mods: Dict[str, Path]) -> List[Import]:
    """Every import statement of every module, resolved to the module it reads."""
    out = []
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node, in_fn in _statements(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    out.append(Import(mod, a.name, None, node.lineno, in_fn))
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in mods:  # from package import submodule
                    out.append(Import(mod, sub, None, node.lineno, in_fn))
                else:
                    out.append(Import(mod, base, a.name, node.lineno, in_fn))
    return out


def owner(target: str, mods: Dict[str, Path]) -> Optional[str]:
    """The slash module that ``target`` names (a dotted name inside it counts), else None."""
    while target:
        if target in mods:
            return target
        target = target.rpartition(".")[0]
    return None


def graph(mods: Dict[str, Path], imps: List[Import]) -> Dict[str, Set[str]]:
    edges: Dict[str, Set[str]] = {m: set() for m in mods}
    for i in imps:
        t = owner(i.target, mods)
        if t is not None and t != i.module and t != "slash":
            edges[i.module].add(t)
    return edges


def circles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected groups of more than one module (Tarjan), and self-loops."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layer(module: str) -> int:
    """The module's place in :data:`LAYERS` (1 the lowest folder), 0 for the operators."""
    best, at = "", 0
    for i, names in enumerate(LAYERS, 1):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > len(best):
                best, at = n, i
    return at


def rank_side(module: str) -> bool:
    return module in RANK_SIDE or module.startswith(RANK_SIDE_PACKAGES)


def in_layer(module: str, layer: Set[str]) -> bool:
    return any(module == m or module.startswith(m + ".") for m in layer if m != "slash") \
        or module in layer


@pytest.fixture(scope="module")
def tree() -> Tuple[Dict[str, Path], List[Import]]:
    mods = modules()
    return mods, imports(mods)


def test_the_package_has_no_import_circle(tree):
    mods, imps = tree
    found = circles(graph(mods, imps))
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_no_module_imports_another_modules_private_names(tree):
    mods, imps = tree
    taken = [f"{i.module}:{i.line} takes {i.name} from {owner(i.target, mods)}" for i in imps
             if i.name and i.name.startswith("_") and not i.name.startswith("__")
             # the package root's private names are its compiled submodules (slash._core)
             and owner(i.target, mods) not in (None, "slash", i.module)]
    assert not taken, "\n".join(taken)


def test_the_engine_imports_nothing_built_on_it(tree):
    mods, imps = tree
    assert any(m.startswith("slash.run.") for m in mods), "the engine package slash.run is missing"
    up = [f"{i.module}:{i.line} imports {i.target}" for i in imps
          if i.module.startswith("slash.run.") or i.module == "slash.run"
          if (owner(i.target, mods) or "").startswith(ABOVE_ENGINE)]
    assert not up, "\n".join(up)


def test_no_module_imports_from_a_layer_above_its_own(tree):
    mods, imps = tree
    up = [f"{i.module}:{i.line} imports {owner(i.target, mods)}" for i in imps
          if owner(i.target, mods) not in (None, "slash")
          and layer(owner(i.target, mods)) > layer(i.module)]  # type: ignore[arg-type]
    assert not up, "\n".join(up)


def test_every_folder_of_the_package_has_its_layer(tree):
    mods, _ = tree
    folders = {m for m, p in mods.items() if p.name == "__init__.py" and m.count(".") == 1}
    assert folders <= {n for names in LAYERS for n in names}, sorted(
        f for f in folders if f not in {n for names in LAYERS for n in names})


def test_a_source_imports_no_engine_and_no_driver(tree):
    mods, imps = tree
    up = [f"{i.module}:{i.line} imports {owner(i.target, mods)}" for i in imps
          if i.module.startswith("slash.sources")
          and layer(owner(i.target, mods) or "slash") > layer("slash.sources")]
    assert not up, "\n".join(up)


def test_rank_side_modules_import_no_driver_side_module(tree):
    mods, imps = tree
    assert RANK_SIDE <= set(mods), sorted(RANK_SIDE - set(mods))
    up = [f"{i.module}:{i.line} imports {owner(i.target, mods)}" for i in imps
          if rank_side(i.module) and in_layer(owner(i.target, mods) or "", DRIVER_SIDE)]
    assert not up, "\n".join(up)


def test_rank_side_modules_import_only_rank_side_or_engine_modules(tree):
    mods, imps = tree
    other = [f"{i.module}:{i.line} imports {owner(i.target, mods)}" for i in imps
             if rank_side(i.module) and owner(i.target, mods) is not None
             and not rank_side(owner(i.target, mods))  # type: ignore[arg-type]
             and not owner(i.target, mods).startswith("slash.run.")]
    assert any(m.startswith(RANK_SIDE_PACKAGES) for m in mods), "slash.sources is no package"
    assert not other, "\n".join(other)


def test_imports_inside_functions_say_why(tree):
    mods, imps = tree
    checked = {m for m in mods if m.startswith(("slash.run.", "slash.bench")) or m in LAZY_CHECKED
               or m.startswith(RANK_SIDE_PACKAGES)}
    lines = {m: mods[m].read_text(encoding="utf-8").split("\n") for m in checked}
    silent = []
    for i in imps:
        if i.module not in checked or not i.in_function:
            continue
        here, before = lines[i.module][i.line - 1], lines[i.module][i.line - 2]
        said = [t.partition("#")[2] for t in (here, before) if "#" in t]
        if not any(LAZY_REASON.search(s) for s in said):
            silent.append(f"{i.module}:{i.line}: {here.strip()}")
    assert not silent, "\n".join(silent)


def test_the_checks_see_a_circle_a_private_name_and_a_silent_lazy_import(tmp_path):
    """The checks above can fail: a small package with each fault is caught."""
    pkg = tmp_path / "slash"
    (pkg / "run").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "run" / "__init__.py").write_text("")
    (pkg / "run" / "low.py").write_text("def f():\n    from slash.runner import go\n")
    (pkg / "runner.py").write_text("from slash.run.low import f\nfrom slash.query import _x\n")
    (pkg / "query.py").write_text("def g():\n    # optional dependency\n    import numpy\n")
    mods = modules(pkg)
    imps = imports(mods)
    assert circles(graph(mods, imps)) == [["slash.run.low", "slash.runner"]]
    assert [(i.module, i.name) for i in imps if i.name == "_x"] == [("slash.runner", "_x")]
    lazy = [i for i in imps if i.in_function]
    assert {(i.module, i.target) for i in lazy} == {("slash.run.low", "slash.runner"),
                                                    ("slash.query", "numpy")}
    low = (pkg / "run" / "low.py").read_text().split("\n")
    assert not any(LAZY_REASON.search(t) for t in low[:2])
    assert LAZY_REASON.search((pkg / "query.py").read_text().split("\n")[1])


def test_a_modules_layer_is_the_one_of_the_longest_name_covering_it():
    assert layer("slash.executor") == 0
    assert layer("slash.sources.files") < layer("slash.kafka.source") < layer("slash.run.driver")
    assert layer("slash.run.recovery.live") == layer("slash.control.moves") == layer("slash.run")
    assert layer("slash.run") < layer("slash.runner") < layer("slash.spark.batch") \
        < layer("slash.bench.matrix") < layer("slash.cli")
