"""Arrow tables as IPC stream bytes, and back: how result rows travel over a
Spark task's link and how result segments are stored in a checkpoint."""
from __future__ import annotations

import io

import pyarrow as pa


def to_ipc(table: pa.Table) -> bytes:
    """``table`` (its schema even when empty) as one Arrow IPC stream."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def from_ipc(data: bytes) -> pa.Table:
    """The table :func:`to_ipc` wrote."""
    return pa.ipc.open_stream(pa.BufferReader(data)).read_all()
