"""Progress on long benchmark runs: a rich progress bar when rich is installed
and stderr is a terminal, else one plain line on stderr per stage.

>>> with Progress("ysb", stages=2) as p:  # doctest: +SKIP
...     with p.stage("duckdb, 1 thread"):
...         pass
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional


def _rich_available() -> bool:
    try:
        import rich.progress  # noqa: F401  (optional dependency)
    except ImportError:
        return False
    return sys.stderr.isatty()


class Progress:
    """Stages of one benchmark invocation; ``stage()`` times one and shows it.

    ``advance(n)`` moves a stage's own bar (e.g. blocks generated) when the
    stage was opened with ``total``.
    """

    def __init__(self, title: str, stages: int, plain: Optional[bool] = None) -> None:
        self.title = title
        self.stages = stages
        self.done = 0
        self.plain = not _rich_available() if plain is None else plain
        self._bar: Any = None
        self._overall: Any = None
        self._task: Any = None

    def __enter__(self) -> "Progress":
        if not self.plain:
            from rich.console import Console  # optional dependency
            from rich.progress import (BarColumn, MofNCompleteColumn,  # optional dependency
                                       Progress as Bar, SpinnerColumn, TextColumn, TimeElapsedColumn)

            self._bar = Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
            self._bar.__enter__()
            self._overall = self._bar.add_task(f"{self.title}: stages", total=self.stages)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None

    @contextmanager
    def stage(self, label: str, total: Optional[int] = None) -> Iterator["Progress"]:
        t0 = time.perf_counter()
        if self._bar is not None:
            self._task = self._bar.add_task(f"{self.title}: {label}", total=total)
        else:
            sys.stderr.write(f"{self.title}: [{self.done + 1}/{self.stages}] {label} ...\n")
            sys.stderr.flush()
        try:
            yield self
        finally:
            self.done += 1
            if self._bar is not None:
                self._bar.remove_task(self._task)
                self._bar.advance(self._overall)
                self._task = None
            else:
                sys.stderr.write(f"{self.title}: [{self.done}/{self.stages}] {label}: "
                                 f"{time.perf_counter() - t0:.2f} s\n")
                sys.stderr.flush()

    def advance(self, n: int = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, n)
