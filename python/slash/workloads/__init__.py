"""Seeded, deterministic generators of the benchmark workloads (YSB,
NEXMark, cluster monitoring, read-only count) and a bounded zipf for any
workload's key, with the generation in C.

Every record is a pure function of (seed, index), so any range of a stream
can be generated on its own (``start=`` / ``first_event=``) and splits across
executors concatenate to the same stream. Results are Arrow tables or
record-batch iterators over NumPy buffers (no copies), or Parquet files.

>>> import slash.workloads as w
>>> w.ysb(10, keys=10_000_000, skew="zipf:0.8", seed=1).num_rows
10
"""
from __future__ import annotations

from slash.workloads import zipf
from slash.workloads.gen_cm import cm, cm_batches, cm_sample, find_sample
from slash.workloads.gen_nexmark import (auctions, auctions_batches, bids, bids_batches, nexmark,
                                     persons, persons_batches)
from slash.workloads.parquet import WORKLOADS, write_parquet
from slash.workloads.gen_ro import ro, ro_batches
from slash.workloads.gen_ysb import ysb, ysb_ads, ysb_batches
from slash.workloads._common import parse_skew

__all__ = ["WORKLOADS", "auctions", "auctions_batches", "bids", "bids_batches", "cm",
           "cm_batches", "cm_sample", "find_sample", "nexmark", "parse_skew", "persons",
           "persons_batches", "ro", "ro_batches", "write_parquet", "ysb", "ysb_ads",
           "ysb_batches", "zipf"]
