"""A query's filters: ``COLUMN OP VALUE`` predicates, all of which must hold.

A :class:`Filter` is parsed from its string form, checked against the input
schema on the driver (the value must fit the column's type; the error names
the column and the value), and applied per batch as Arrow compute kernels:
a mask (rows kept) or a skip selection (rows dropped) for the executor.
Invariant: a null never passes a filter (SQL's three-valued logic: unknown
is not true).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Tuple, Union

import numpy as np
import pyarrow as pa

from slash.arrow_np import scalar, to_numpy
from slash.compute import pc
from slash.errors import InvalidArgument, SchemaError


#: each operator's Arrow kernel, by name (looked up when a filter runs: see slash.compute)
_OPS = {"==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
        ">": "greater", ">=": "greater_equal"}
_FALSE = scalar(False, pa.bool_())


_FILTER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(==|!=|<=|>=|<|>|\bin\b)\s*(.+?)\s*$")


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word is a string: event_type == view


@dataclass(frozen=True)
class Filter:
    """``COLUMN OP VALUE`` with OP one of ==, !=, <, <=, >, >=, in.

    >>> Filter.parse("event_type in ('view', 'click')").values
    ('view', 'click')
    """

    column: str
    op: str
    value: Any
    #: the value(s) as an Arrow array per column type: converted by the
    #: driver's check and pickled with the query, so a rank converts nothing
    #: (``pa.scalar`` of a Python value imports pandas, slash.arrow_np)
    _operands: Dict[pa.DataType, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.op not in _OPS and self.op != "in":
            raise InvalidArgument(f"filter operator must be one of {list(_OPS) + ['in']}, got {self.op!r}")
        if self.op == "in" and not isinstance(self.value, (tuple, list, set, frozenset)):
            raise InvalidArgument(f"filter '{self.column} in ...' needs a list of values, got {self.value!r}")

    @classmethod
    def parse(cls, spec: Union[str, "Filter"]) -> "Filter":
        if isinstance(spec, Filter):
            return spec
        m = _FILTER.match(spec) if isinstance(spec, str) else None
        if not m:
            raise InvalidArgument(f"filter must look like 'COLUMN OP VALUE' (OP: == != < <= > >= in), "
                                  f"got {spec!r}")
        col, op, raw = m.groups()
        value = _literal(raw)
        if op == "in":
            if isinstance(value, str):
                value = tuple(_literal(v.strip()) for v in value.strip("()[]").split(","))
            value = tuple(value) if isinstance(value, (list, tuple, set)) else (value,)
        return cls(col, op, value)

    @property
    def values(self) -> Tuple[Any, ...]:
        return tuple(self.value) if self.op == "in" else (self.value,)

    def mask(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        col = batch.column(self.column)
        if pa.types.is_dictionary(col.type):
            # decide each distinct value once, then gather by index (7x faster
            # than comparing the decoded column, e.g. YSB's event_type)
            return pc.fill_null(pc.take(self._mask_values(col.dictionary), col.indices), _FALSE)
        return self._mask_values(col)

    def skip(self, batch: pa.RecordBatch) -> np.ndarray:
        """The rows this filter drops, as a NumPy bool array (the executor's
        selection form: no rows are copied)."""
        col = batch.column(self.column)
        if pa.types.is_dictionary(col.type) and not col.null_count:
            keep = to_numpy(self._mask_values(col.dictionary))
            codes = to_numpy(col.indices)
            passing = np.flatnonzero(keep)
            if len(passing) == 0:
                return np.ones(len(col), np.bool_)
            code = codes.dtype.type  # compare in the codes' own width, not widened to int64
            if len(passing) == 1:  # one SIMD compare, 30x a gather (YSB's 'view')
                return codes != code(passing[0])
            failing = np.flatnonzero(~keep)
            if len(failing) == 0:
                return np.zeros(len(col), np.bool_)
            if len(failing) == 1:
                return codes == code(failing[0])
            return np.take(~keep, codes)
        return np.logical_not(to_numpy(self.mask(batch)))

    def _mask_values(self, col: pa.Array) -> pa.BooleanArray:
        if self.op == "in":
            return pc.fill_null(pc.is_in(col, value_set=self._operand(col.type)), _FALSE)
        return pc.fill_null(getattr(pc, _OPS[self.op])(col, self._operand(col.type)), _FALSE)

    def _operand(self, t: pa.DataType) -> Any:
        """The value as a Scalar of type ``t`` (for 'in': the values as an
        Array), converted once per type."""
        got = self._operands.get(t)
        if got is None:
            # an Array even for one value: a pickled Scalar is rebuilt by pa.scalar
            got = self._operands[t] = pa.array(list(self.values), t)
        return got if self.op == "in" else got[0]

    def check(self, schema: pa.Schema) -> None:
        if self.column not in schema.names:
            raise SchemaError(f"filter on missing column {self.column!r} (input has {schema.names})")
        t = schema.field(self.column).type
        if pa.types.is_dictionary(t):  # a value is checked against the dictionary's values
            t = t.value_type
        bad = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)
        try:
            self._operand(t)
        except bad:
            for v in self.values:  # name the value that does not fit
                try:
                    pa.scalar(v, t)
                except bad:
                    raise SchemaError(f"filter on {self.column!r}: value {v!r} does not fit the "
                                      f"column's type {t}") from None
            raise
