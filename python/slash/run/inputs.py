"""What a rank loop asks of its input beyond the batches: which columns may
hold nulls, and what a unit's time bound promises in ticks."""
from __future__ import annotations

from typing import Any, List, Optional

import pyarrow as pa

from slash.sources import ALL_NULL


def source_nullable(source: Any, columns: List[str]) -> List[str]:
    """The columns that may hold nulls, as the source knows it (Parquet
    statistics, a table's null counts), else as its schema declares."""
    ask = getattr(source, "may_have_nulls", None)
    schema = source.schema
    out = []
    for c in columns:
        if c not in schema.names:
            continue
        if ask is not None:
            if ask(c):
                out.append(c)
        elif schema.field(c).nullable:
            out.append(c)
    return out


def bound_ticks(query: Any, schema: pa.Schema, bound: Any) -> Optional[int]:
    """A unit's bound in ticks (``query``: a window aggregation, or a join's
    key query): None without statistics (it bounds nothing below), the
    highest tick for a unit without a non-null time (no row of it is in any
    window, so no rank's watermark makes it late)."""
    if bound is None:
        return None
    if bound is ALL_NULL:
        return (1 << 63) - 1
    return query.watermark_ticks(bound, schema)
