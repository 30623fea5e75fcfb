"""Benchmarks behind ``slash bench NAME``.

Every public module of this package that defines the four names below is a
benchmark; the CLI finds them with :func:`discover` and needs no list:

* ``NAME``: the subcommand (``slash bench NAME``);
* ``HELP``: one line for ``slash bench --help``;
* ``add_arguments(parser)``: adds the benchmark's own options;
* ``run(args) -> dict``: runs it and returns the result, one run as a flat
  dict, several as ``{"runs": [dict, ...], ...}``;
* optionally ``summary(run) -> str``: the line the CLI prints per run
  (default: the run's scalar fields as ``key=value``).

The CLI adds ``--json PATH`` to every benchmark (it writes the returned dict
with a ``recorded`` field from :func:`recorded`: date, commit, machine load,
machine, command and the peers' versions, which ``slash bench report`` shows
beside every figure), so a benchmark must not define that option itself.

Modules whose name starts with ``_`` and helpers that lack those names
(``baselines``, ``plot``) are not benchmarks. A module that fails to import
(a missing optional dependency) is still listed, and running it reports the
import error instead of hiding the benchmark.

Performance is always reported as a ratio against a baseline measured in the
same run on the same machine, never as a time measured alone.

>>> from slash.bench import discover
>>> "channel" in discover()
True
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import logging
import os
import pkgutil
import platform
import subprocess
import sys
from dataclasses import dataclass
from types import ModuleType
from importlib import metadata
from typing import Any, Callable, Dict, List, Optional, Sequence

from slash.errors import NotSupported

log = logging.getLogger(__name__)

#: the names a module must define to be a benchmark
PROTOCOL = ("NAME", "HELP", "add_arguments", "run")


@dataclass(frozen=True)
class Benchmark:
    """One discovered benchmark: its subcommand name and where it comes from.

    ``error`` is set (and ``module`` is None) when the module failed to import;
    ``run`` then raises :class:`slash.errors.NotSupported` naming the error.
    """

    name: str
    help: str
    module_name: str
    module: Optional[ModuleType] = None
    error: Optional[str] = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        if self.module is not None:
            self.module.add_arguments(parser)

    def run(self, args: argparse.Namespace) -> Dict[str, Any]:
        if self.module is None:
            raise NotSupported(f"benchmark {self.name!r} is unavailable: {self.error}")
        result = self.module.run(args)
        if not isinstance(result, dict):
            raise TypeError(f"{self.module_name}.run() returned {type(result).__name__}, not dict")
        return result

    def summary(self, run: Dict[str, Any]) -> str:
        """One line for one run: the module's ``summary(run)`` if it has one."""
        fn: Optional[Callable[[Dict[str, Any]], str]] = getattr(self.module, "summary", None)
        if fn is not None:
            return fn(run)
        fields = " ".join(f"{k}={_fmt(v)}" for k, v in run.items()
                          if isinstance(v, (int, float, str, bool)))
        return f"{self.name}: {fields}"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def discover(package: str = __name__) -> Dict[str, Benchmark]:
    """Finds the benchmarks in ``package`` (default: this one), by subcommand name.

    Imports each public module; a module that raises ImportError is listed
    under its module name with the error, so the user learns what to install.
    """
    pkg = importlib.import_module(package)
    found: Dict[str, Benchmark] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_") or info.ispkg:
            continue
        full = f"{package}.{info.name}"
        try:
            mod = importlib.import_module(full)
        except ImportError as e:
            log.debug("benchmark module %s failed to import: %s", full, e)
            found[info.name] = Benchmark(info.name, f"(unavailable: {e})", full, None, str(e))
            continue
        missing: List[str] = [n for n in PROTOCOL if not hasattr(mod, n)]
        if missing:
            log.debug("%s is a helper, not a benchmark (lacks %s)", full, ", ".join(missing))
            continue
        found[mod.NAME] = Benchmark(mod.NAME, mod.HELP, full, mod)
    return dict(sorted(found.items()))


#: the distributions whose versions a result records (the peers a benchmark compares with)
PEERS = ("pyspark", "duckdb", "apache-flink", "pyarrow", "confluent-kafka")


def _commit(cwd: str) -> Optional[str]:
    """The checkout's commit (``+`` when it has uncommitted changes), or None outside one."""
    try:
        head = subprocess.run(["git", "-C", cwd, "rev-parse", "--short=7", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", cwd, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+" if dirty else head or None


def recorded(argv: Sequence[str] = (), cwd: Optional[str] = None) -> Dict[str, Any]:
    """Where and when a result was measured, stamped on every ``--json`` result.

    ``commit`` is the git commit of ``cwd`` (default: the working directory;
    a trailing ``+`` marks uncommitted changes) or, outside a checkout, the
    installed package's version; ``load`` is the 1-minute load average when
    the result was written (benchmarks record their own around each side).
    """
    try:
        version = metadata.version("slash")
    except metadata.PackageNotFoundError:
        version = None
    versions = {}
    for dist in PEERS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": _commit(cwd or os.getcwd()) or (f"slash {version}" if version else None),
            "load": round(os.getloadavg()[0], 2),
            "machine": f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()} {platform.release()}",
            "command": " ".join(["slash", *argv]) if argv else " ".join(sys.argv),
            "versions": versions}
