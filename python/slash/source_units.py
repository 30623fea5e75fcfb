"""Moved to :mod:`slash.sources.units`: this name stays importable, and warns.
Import from :mod:`slash.sources` instead."""
import warnings

from slash.sources.units import (  # noqa: F401
    ALL_NULL,
    Bound,
    Position,
    Work,
    Unit,
    Watermark,
    batch_min,
    bound_key,
    contiguous,
    deal,
    no_column,
    promises,
    with_markers,
)

warnings.warn("slash.source_units moved to slash.sources.units; import from slash.sources",
              DeprecationWarning, stacklevel=2)
