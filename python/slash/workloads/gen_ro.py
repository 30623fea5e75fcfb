"""The read-only count (RO) stream of the Slash paper (section 8.1.2): 16-byte
records, an 8-byte key drawn uniformly from 100 million keys (configurable,
or skewed) and an 8-byte event time; the query counts records per key.

Columns: ``key`` int64 in [0, keys), ``event_time`` int64 milliseconds
(base_ms + floor(i * 1000 / rate)).

>>> from slash.workloads import gen_ro as ro
>>> t = ro.ro(4, seed=3)
>>> t.column_names, t.num_rows
(['key', 'event_time'], 4)
"""
from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from slash import _core
from slash.workloads._common import (DEFAULT_BATCH, check_int, check_stream, chunks, concat,
                                     parse_skew, to_batch)

__all__ = ["RECORD_BYTES", "ro", "ro_batches"]

RECORD_BYTES = 16


def ro_batches(records: int, *, keys: int = 100_000_000, seed: int = 0, skew: str = "uniform",
               rate: int = 1_000_000, base_ms: int = 0, start: int = 0,
               batch_size: int = DEFAULT_BATCH) -> Iterator[pa.RecordBatch]:
    """Records [start, start + records) as RecordBatches; any split gives the same rows.

    >>> sum(b.num_rows for b in ro_batches(10, batch_size=4))
    10
    """
    keys = check_int("keys", keys, 1, 1 << 62)
    records, start, batch_size, seed, rate, base_ms = check_stream(records, start, batch_size,
                                                                   seed, rate, base_ms)
    dist, exponent = parse_skew(skew)
    kg = _core.KeyGenerator(keys, dist, exponent, seed)
    for first, n in chunks(start, records, batch_size):
        yield to_batch({"key": kg.fill(first, n), "event_time": _core.gen_times(base_ms, rate, first, n)},
                       ("key", "event_time"), {})


def ro(records: int, **kwargs) -> pa.Table:
    """Records as one Table; keyword arguments as in :func:`ro_batches`."""
    return concat(ro_batches(records, **kwargs))
