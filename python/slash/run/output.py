"""A run's result files: written whole or not at all."""
from __future__ import annotations

import os
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

from slash.errors import SystemCallError


def write_parquet_atomically(table: pa.Table, path: str) -> None:
    """``table`` as the Parquet file ``path``, through a temporary file in the
    same directory renamed over it: a reader sees the old file or the new
    one, never a part; a failure names ``path``."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".slash-", suffix=".parquet", dir=d)
    except OSError as e:  # name the user's path, not the hidden temporary file
        raise SystemCallError(f"cannot write {path!r}: {e.strerror}") from None
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise SystemCallError(f"cannot write {path!r}: {e.strerror or e}") from None
    except BaseException:
        os.unlink(tmp)
        raise
