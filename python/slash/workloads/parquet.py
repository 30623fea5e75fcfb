"""Writing any generated workload to Parquet in row groups, batch by batch, so
memory stays bounded by one batch whatever the size of the file.

>>> import tempfile, os, pyarrow.parquet as pq
>>> from slash.workloads import write_parquet
>>> d = tempfile.mkdtemp()
>>> p = write_parquet(os.path.join(d, "ro.parquet"), "ro", records=1000, row_group_size=256)
>>> pq.ParquetFile(p).metadata.num_row_groups
4
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Dict, Iterator, Union

import pyarrow as pa
import pyarrow.parquet as pq

from slash.errors import InvalidArgument
from slash.workloads import gen_cm, gen_nexmark, gen_ro, gen_ysb
from slash.workloads._common import check_int

__all__ = ["WORKLOADS", "write_parquet"]

log = logging.getLogger(__name__)

#: workload name -> batches(size, **params); the size is `records` or, for NEXMark, `events`
WORKLOADS: Dict[str, Callable[..., Iterator[pa.RecordBatch]]] = {
    "ysb": gen_ysb.ysb_batches,
    "ro": gen_ro.ro_batches,
    "cm": gen_cm.cm_batches,
    "nexmark-persons": gen_nexmark.persons_batches,
    "nexmark-auctions": gen_nexmark.auctions_batches,
    "nexmark-bids": gen_nexmark.bids_batches,
}


def write_parquet(path: Union[str, os.PathLike], workload: str, *, records: int,
                  row_group_size: int = 1 << 20, compression: str = "snappy",
                  **params) -> Path:
    """Generates `records` records (NEXMark: events) of `workload` into one
    Parquet file with row groups of row_group_size rows; returns the path.

    Other keywords go to the workload's generator (seed, keys, skew, ...).
    """
    if workload not in WORKLOADS:
        raise InvalidArgument(f"workload must be one of {sorted(WORKLOADS)}, got {workload!r}")
    row_group_size = check_int("row_group_size", row_group_size, 1, 1 << 31)
    if "batch_size" in params:
        raise InvalidArgument("write_parquet: batches follow row_group_size; drop batch_size")
    p = Path(path)
    batches = WORKLOADS[workload](records, batch_size=row_group_size, **params)
    first = next(batches)
    rows = 0
    with pq.ParquetWriter(p, first.schema, compression=compression) as w:
        for b in _chain(first, batches):
            w.write_batch(b, row_group_size=row_group_size)
            rows += b.num_rows
    log.info("wrote %d %s rows to %s", rows, workload, p)
    return p


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
