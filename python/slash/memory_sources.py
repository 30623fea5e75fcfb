"""Moved to :mod:`slash.sources.memory`: this name stays importable, and warns.
Import from :mod:`slash.sources` instead."""
import warnings

from slash.sources.memory import (  # noqa: F401
    GeneratorSource,
    TableSource,
)

warnings.warn("slash.memory_sources moved to slash.sources.memory; import from slash.sources",
              DeprecationWarning, stacklevel=2)
