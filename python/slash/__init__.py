"""Slash: shuffle-free stateful stream processing for PySpark.

Each executor updates a local partial state eagerly; partial states are CRDTs
merged lazily at epoch boundaries through ring channels written with one-sided
writes (after Slash, SIGMOD 2022).
"""
from __future__ import annotations

import importlib
from typing import Any, List

from slash import _moved, errors

_moved.install()  # the old names of modules moved into packages still import, and warn

__version__ = "0.1.0"

# The public names, imported from their modules at first use (PEP 562): a
# program that only needs the command line, the launcher or the errors (the
# `slash run` command before it starts its executors' fork server, `slash
# doctor` where numpy or pyarrow are missing) does not pay for numpy,
# pyarrow and the core.
_LAZY = {
    "Channel": "slash._core", "Listener": "slash._core", "Message": "slash._core",
    "Transport": "slash._core", "have_ofi": "slash._core",
    "Executor": "slash.executor", "GroupConfig": "slash.group",
    "JoinBackend": "slash.join", "JoinConfig": "slash.join",
    "Aggregate": "slash.state", "StateBackend": "slash.state", "StateConfig": "slash.state",
    "Session": "slash.window", "Sliding": "slash.window", "Tumbling": "slash.window",
    "parse_window": "slash.window",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'slash' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Aggregate", "Channel", "Executor", "GroupConfig", "Listener", "Message", "Session",
           "Sliding", "StateBackend", "StateConfig", "Transport", "Tumbling", "errors",
           "have_ofi", "parse_window", "__version__"]
__all__ += ["JoinBackend", "JoinConfig"]
