"""The rank loops' guard against the cyclic garbage collector: the one
defined in :mod:`slash.gc_guard` (below the engine, so that the Kafka
readers use it too), under the name the engine imports it by."""
from __future__ import annotations

from slash.gc_guard import no_cyclic_gc

__all__ = ["no_cyclic_gc"]
