"""The core's limits, declared once in its C headers (``SLASH_MAX_PARTITIONS``,
``SLASH_SSB_MAX_AGGS``, ``SLASH_SSB_KEY_MAX``, ``SLASH_JOIN_MAX_COLS``,
``SLASH_JOIN_KEY_MAX``, ``SLASH_GROUP_MAX``) and read from the extension, so the configurations
check against the very values the core enforces.

>>> MAX_PARTITIONS
4096
"""
from slash._core import LIMITS

MAX_PARTITIONS: int = LIMITS["partitions"]
MAX_AGGREGATES: int = LIMITS["aggregates"]
KEY_MAX_BYTES: int = LIMITS["key_bytes"]
MAX_JOIN_COLUMNS: int = LIMITS["join_columns"]
JOIN_KEY_MAX_BYTES: int = LIMITS["join_key_bytes"]
MAX_EXECUTORS: int = LIMITS["executors"]

__all__ = ["MAX_PARTITIONS", "MAX_AGGREGATES", "KEY_MAX_BYTES", "MAX_JOIN_COLUMNS", "JOIN_KEY_MAX_BYTES",
           "MAX_EXECUTORS"]
