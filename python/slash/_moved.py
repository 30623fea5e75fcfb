"""The package's old module names, kept importable after their modules moved
into a package of their concern (``slash.sources``, ``slash.kafka``,
``slash.control``, the engine ``slash.run`` and its ``recovery`` and ``live``
groups, ``slash.cli``).

One import hook (a :data:`sys.meta_path` finder) answers for every old name in
:data:`MOVED`: importing it warns (DeprecationWarning, naming the new home and
where to import from) and gives the new module itself, so the names it holds
are the very objects of their home, not copies that could drift. Invariant:
the hook finds only the names in :data:`MOVED` and answers None for any other,
so it never shadows a module that exists.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Dict, Optional, Sequence

#: old module name -> (its new home, the package users import its names from)
MOVED: Dict[str, tuple] = {
    "slash.file_source": ("slash.sources.files", "slash.sources"),
    "slash.source_units": ("slash.sources.units", "slash.sources"),
    "slash.memory_sources": ("slash.sources.memory", "slash.sources"),
    "slash.parquet_chunks": ("slash.sources.parquet_chunks", "slash.sources"),
    **{f"slash.kafka_{part}": (f"slash.kafka.{part}", "slash.kafka")
       for part in ("client", "decode", "reader", "sink", "source", "stream")},
    "slash.control_logic": ("slash.control.logic", "slash.control.logic"),
    "slash.control_moves": ("slash.control.moves", "slash.control.moves"),
    "slash.control_socket": ("slash.control.server", "slash.control"),
    "slash.controller": ("slash.control.controller", "slash.control.controller"),
    "slash.latency_model": ("slash.control.latency_model", "slash.control.latency_model"),
    # the engine's rank side and its checkpointed and live groups: imported from their home
    **{old: (home, home) for old, home in (
        ("slash.worker", "slash.run.worker"), ("slash.launcher", "slash.run.launcher"),
        ("slash.ckpt_worker", "slash.run.rank_ckpt"),
        ("slash.recovery", "slash.run.recovery.checkpointed"),
        ("slash.recovery_join", "slash.run.recovery.join"),
        ("slash.live_ckpt", "slash.run.recovery.live"),
        ("slash.live_scale", "slash.run.live.scale"), ("slash.live_join", "slash.run.live.join"))},
    # the command line's modules, and the latency target's driver beside its controller
    **{old: (home, home) for old, home in (
        ("slash.cli_run", "slash.cli.run"), ("slash.doctor", "slash.cli.doctor"),
        ("slash.autotune", "slash.control.autotune"))},
}


class _MovedLoader(importlib.abc.Loader):
    """Loads an old name as its new home's module, after the warning."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        home, public = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {home}; import from {public}",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(home)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new home ran when it was imported."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _LOADER)


_LOADER = _MovedLoader()


def install() -> None:
    """Puts the finder first on :data:`sys.meta_path`, once."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
