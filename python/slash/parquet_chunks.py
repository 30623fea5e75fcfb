"""Moved to :mod:`slash.sources.parquet_chunks`: this name stays importable, and warns.
Import from :mod:`slash.sources` instead."""
import warnings

from slash.sources.parquet_chunks import (  # noqa: F401
    ChunkPlan,
    ChunkReader,
    ENABLED,
    chunk_plan,
)

warnings.warn("slash.parquet_chunks moved to slash.sources.parquet_chunks; import from slash.sources",
              DeprecationWarning, stacklevel=2)
