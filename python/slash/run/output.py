"""A run's result files: written whole or not at all, and the late rows'
file (written only when there are late rows, with a warning that counts them)."""
from __future__ import annotations

import logging
import os
import tempfile
from typing import List

import pyarrow as pa
import pyarrow.parquet as pq

from slash.errors import write_error

log = logging.getLogger(__name__)


def write_parquet_atomically(table: pa.Table, path: str) -> None:
    """``table`` as the Parquet file ``path``, through a temporary file in the
    same directory renamed over it: a reader sees the old file or the new
    one, never a part; a failure names ``path`` (a full disk: "no space left
    on DIR"). The file is created 0600, as every file that holds data."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".slash-", suffix=".parquet", dir=d)
    except OSError as e:  # name the user's path, not the hidden temporary file
        raise write_error(path, e) from None
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):
            raise write_error(path, e) from None
        raise


def concat_as_first(tables: List[pa.Table]) -> pa.Table:
    """One table of ``tables`` (the first one's schema; a rank without a
    nullable column may have typed it not null)."""
    return pa.concat_tables([t.cast(tables[0].schema) if t.schema != tables[0].schema else t
                             for t in tables])


def write_late(late: List[pa.Table], path: str) -> None:
    """Writes the late rows (every rank's, every committed cut's) to ``path``
    if there are any, and warns with their count."""
    rows = concat_as_first(late)
    if rows.num_rows:
        log.warning("%d late record(s) were not applied (written to %s)", rows.num_rows, path)
        write_parquet_atomically(rows, path)
