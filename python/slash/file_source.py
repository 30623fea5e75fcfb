"""Moved to :mod:`slash.sources.files`: this name stays importable, and warns.
Import from :mod:`slash.sources` instead."""
import warnings

from slash.sources.files import (  # noqa: F401
    BatchSource,
    FileSource,
)

warnings.warn("slash.file_source moved to slash.sources.files; import from slash.sources",
              DeprecationWarning, stacklevel=2)
