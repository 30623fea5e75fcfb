"""pyarrow.compute, loaded the first time a kernel is used.

Importing ``pyarrow.compute`` builds a documented Python wrapper for each
of Arrow's ~300 kernels: about 200 M instructions, 40-50 ms of a core,
more than a small job's whole query and a fifth of a plain ``slash run``'s
start-up. Most runs use no kernel at all: the core reads, folds and emits
with NumPy buffers. So every module takes ``pc`` from here, and the
wrappers are built only when some path calls one (a filter, a decimal
column, a Kafka batch ...). Python's import lock makes the first use safe
from several executor threads at once.

The kernels that every run uses (a batch's time range, :func:`min_max`; the
result's sort, :func:`sort_indices` and :func:`take`; :func:`cast`, which
pyarrow's own ``Array.cast`` and ``Scalar.cast`` reach through
``pyarrow.compute``) are called by name through
``pyarrow._compute``, the extension module that ``pyarrow.compute`` itself
wraps, without building the wrappers.

>>> import pyarrow as pa
>>> t = pa.table({"k": [3, 1, 2]})
>>> take(t, sort_indices(t, [("k", "ascending")])).column("k").to_pylist()
[1, 2, 3]
>>> min_max(pa.array([4, None, 2]))["max"].as_py()
4
>>> cast(pa.scalar(7, pa.timestamp("ms")), pa.int64()).as_py()
7
>>> pc.add(1, 2).as_py()
3
"""
from __future__ import annotations

import importlib
from typing import Any, List, Tuple

try:  # the kernels' registry, as pyarrow.compute uses it (pyarrow >= 1.0)
    from pyarrow._compute import (CastOptions, ScalarAggregateOptions, SortOptions,
                                  TakeOptions, call_function)
except ImportError:  # pragma: no cover - a pyarrow that moved it: the wrappers then
    call_function = None


class _Kernels:
    """``pyarrow.compute`` on first attribute access; each name is then
    kept on the instance, so later uses cost a plain attribute lookup."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(importlib.import_module("pyarrow.compute"), name)
        setattr(self, name, value)
        return value


pc: Any = _Kernels()


def sort_indices(data: Any, sort_keys: List[Tuple[str, str]]) -> Any:
    """The indices that sort ``data`` (a table) by ``sort_keys``, nulls last:
    ``pyarrow.compute.sort_indices``."""
    if call_function is None:
        return pc.sort_indices(data, sort_keys)
    return call_function("sort_indices", [data], SortOptions(sort_keys))


def take(data: Any, indices: Any) -> Any:
    """The rows of ``data`` (a table or an array) at ``indices``:
    ``pyarrow.compute.take``."""
    if call_function is None:
        return pc.take(data, indices)
    return call_function("take", [data, indices], TakeOptions(boundscheck=True))


def min_max(values: Any) -> Any:
    """A struct scalar of the smallest and largest non-null of ``values``
    (nulls when there are none): ``pyarrow.compute.min_max``."""
    if call_function is None:
        return pc.min_max(values)
    return call_function("min_max", [values], ScalarAggregateOptions(skip_nulls=True, min_count=1))


def cast(values: Any, to: Any) -> Any:
    """``values`` (an array or a scalar) as type ``to``, refusing a cast that
    loses information: ``values.cast(to)``."""
    if call_function is None:
        return values.cast(to)
    return call_function("cast", [values], CastOptions.safe(to))
