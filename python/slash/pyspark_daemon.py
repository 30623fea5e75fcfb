"""The PySpark daemon of the sessions :func:`slash.spark.session` makes
(``spark.python.daemon.module``): pyspark's own daemon, whose forked
workers import pyspark from the installed package instead of from the
``pyspark.zip`` Spark puts first on their PYTHONPATH.

Python keeps no bytecode of a module it imports from a zip, so every new
worker compiled ``pyspark.worker`` and what it imports anew: 3.7-4.3 s of
CPU a worker start against 0.14-0.41 s from the installed package's cached
bytecode (2 cores at load 20-25, 2026-12-07). A worker starts at a session's
first query and again after each idle minute (Spark ends a Python worker
idle that long), so a Slash query after a longer Spark one paid it twice.

The zips move behind the installed package only when they lie inside it
(pip's pyspark: the same files, so the same version); otherwise the path
stays as Spark set it. This module imports nothing pyspark's daemon does
not import itself before it forks (a thread started before a fork can
deadlock the child, the reason pyspark imports its worker after the fork).
Run as ``python -m slash.pyspark_daemon pyspark.worker``, as Spark runs it.
"""
from __future__ import annotations

import importlib.machinery
import os
from typing import List, Optional


def installed_pyspark(path: List[str]) -> Optional[str]:
    """The directory of the pyspark package ``path`` finds outside a zip, or None."""
    spec = importlib.machinery.PathFinder.find_spec(
        "pyspark", [p for p in path if not p.endswith(".zip")])
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.realpath(locations[0]) if locations else None


def prefer_installed(path: List[str]) -> List[str]:
    """``path`` with the zips that lie inside the installed pyspark package
    (its ``pyspark.zip`` and ``py4j-*.zip``) moved to its end; unchanged
    when there is no installed package or no zip of its own on it."""
    home = installed_pyspark(path)
    if home is None:
        return list(path)
    own = [p for p in path if p.endswith(".zip") and
           os.path.realpath(p).startswith(os.path.join(home, ""))]
    return [p for p in path if p not in own] + own


if __name__ == "__main__":
    import sys

    sys.path[:] = prefer_installed(sys.path)
    from pyspark import daemon

    daemon.manager()
