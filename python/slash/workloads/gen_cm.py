"""The cluster-monitoring (CM) stream of the Slash paper (section 8.1.2):
64-byte task events of the Google cluster trace; the query averages CPU per
job over 2 s tumbling windows.

Two sources with one schema (widths sum to :data:`RECORD_BYTES` = 64):
``timestamp`` int64 ms, ``job_id``/``task_id``/``machine_id`` int64,
``event_type``/``user_id``/``category``/``priority`` int32,
``cpu``/``ram``/``disk`` float32 (normalised requests), ``constraints`` int32.

* :func:`cm_sample` loads the real 16,385-row sample shipped beside the repo
  (``shared/data/google-cluster-task-events-sample.txt``, its README says
  16,384; the file has 16,385 rows, the last without a newline). Its
  timestamps are seconds; they are returned in milliseconds like every
  generator here.
* :func:`cm` / :func:`cm_batches` generate any number of events shaped like
  the sample (see ``slash/gen_cm.h``): jobs by zipf popularity (the sample
  fits s = 1.42 over 240 jobs by maximum likelihood), per-job
  user/category/priority/cpu/ram/disk from the sample's frequencies, event
  types as in the sample, 25 events/s.

>>> from slash.workloads import gen_cm as cm
>>> cm.cm(3, seed=1).schema.field("cpu").type
DataType(float)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from slash import _core
from slash.workloads._common import (DEFAULT_BATCH, check_columns, check_int, check_stream,
                                     chunks, concat, parse_skew, to_batch)

__all__ = ["COLUMNS", "RECORD_BYTES", "SAMPLE_FILE", "SAMPLE_ROWS", "cm", "cm_batches",
           "cm_sample", "find_sample"]

COLUMNS = tuple(_core.CM_COLUMNS)
RECORD_BYTES: int = _core.CM_RECORD_BYTES
SAMPLE_FILE = "google-cluster-task-events-sample.txt"
SAMPLE_ROWS = 16_385
_DTYPES = {"timestamp": np.int64, "job_id": np.int64, "task_id": np.int64, "machine_id": np.int64,
           "event_type": np.int32, "user_id": np.int32, "category": np.int32,
           "priority": np.int32, "cpu": np.float32, "ram": np.float32, "disk": np.float32,
           "constraints": np.int32}
#: fitted from the sample: job popularity, jobs, events per second
SAMPLE_SKEW = "zipf:1.42"
SAMPLE_JOBS = 240
SAMPLE_RATE = 25


def _candidates() -> List[Path]:
    out = []
    env = os.environ.get("SLASH_DATA_DIR")
    if env:
        out.append(Path(env) / SAMPLE_FILE)
    for base in (Path.cwd(), Path(__file__).resolve().parent):
        for d in (base, *base.parents):
            out.append(d / "shared" / "data" / SAMPLE_FILE)
            out.append(d.parent / "shared" / "data" / SAMPLE_FILE)
    return out


def find_sample() -> Optional[Path]:
    """The sample's path: $SLASH_DATA_DIR, else a ``shared/data`` beside the
    working directory or the package, or one of their parents; None if absent."""
    for p in _candidates():
        if p.is_file():
            return p
    return None


def cm_sample(path: Union[str, os.PathLike, None] = None) -> pa.Table:
    """The real trace sample as a Table with the CM schema (timestamps in ms).

    Raises FileNotFoundError naming where it looked when there is no sample.
    """
    p = Path(path) if path is not None else find_sample()
    if p is None or not p.is_file():
        where = [str(path)] if path is not None else ["$SLASH_DATA_DIR", "<dir>/shared/data",
                                                      "<dir>/../shared/data"]
        raise FileNotFoundError(f"cluster-trace sample {SAMPLE_FILE} not found (looked in "
                                f"{', '.join(where)}); set SLASH_DATA_DIR to its folder")
    rows = np.array(p.read_text().split()).reshape(-1, len(COLUMNS))
    cols = {}
    for j, name in enumerate(COLUMNS):
        v = rows[:, j]
        if _DTYPES[name] is np.float32:
            cols[name] = v.astype(np.float32)
        else:
            cols[name] = v.astype(np.int64).astype(_DTYPES[name])
    cols["timestamp"] = cols["timestamp"] * 1000
    return pa.Table.from_batches([to_batch(cols, COLUMNS, {})])  # non-null, as generated


def cm_batches(records: int, *, jobs: int = SAMPLE_JOBS, machines: int = 12_500, seed: int = 0,
               skew: str = SAMPLE_SKEW, rate: int = SAMPLE_RATE, base_ms: int = 0,
               start: int = 0, batch_size: int = DEFAULT_BATCH,
               columns: Optional[Sequence[str]] = None) -> Iterator[pa.RecordBatch]:
    """Synthetic events [start, start + records) as RecordBatches.

    ``skew`` is the job popularity ("uniform" or "zipf:S"); jobs is the key
    range. Any split of the range gives the same rows.

    >>> next(cm_batches(2, columns=["timestamp", "job_id", "cpu"])).num_columns
    3
    """
    jobs = check_int("jobs", jobs, 1, 1 << 62)
    machines = check_int("machines", machines, 1, 1 << 62)
    records, start, batch_size, seed, rate, base_ms = check_stream(records, start, batch_size,
                                                                   seed, rate, base_ms)
    cols = check_columns("columns", columns, COLUMNS)
    dist, exponent = parse_skew(skew)
    g = _core.CmGenerator(seed, jobs, dist, exponent, machines, rate, base_ms)
    for first, n in chunks(start, records, batch_size):
        yield to_batch(g.fill(first, n, cols), cols, {})


def cm(records: int, **kwargs) -> pa.Table:
    """Synthetic events as one Table; keyword arguments as in :func:`cm_batches`."""
    return concat(cm_batches(records, **kwargs))
