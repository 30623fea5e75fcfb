"""Kafka records to Arrow batches (:class:`Decoder`), for both topic
inputs.

JSON values (``json``) are parsed in bulk by ``pyarrow.json``, one call per
batch over the values as polled (:class:`slash.kafka.reader.Polled`: one
buffer, the values joined by newlines); raw values (``raw``) are kept as
bytes (columns ``key`` and ``value``). Every row also gets the record's
Kafka timestamp as ``timestamp_column`` (``timestamp[ms, UTC]``; None
leaves it out).

Invariants: decoding is deterministic (the same records give the same
batch), which exactly-once replay rests on; a value that is not a JSON
object of the schema is never a crash and never dropped silently: it is
skipped, counted in :attr:`Decoder.malformed`, logged with its
topic/partition/offset and, given ``bad_records=DIR``, written to
``DIR/bad-<topic>-<partition>-<first offset>.jsonl`` (one file per read
range, so a range read again after a restart rewrites its file).
"""
from __future__ import annotations

import io
import json
import logging
import os
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from slash.errors import SchemaError, UnknownName
from slash.kafka.reader import Polled

#: the Kafka modules log as one (``slash.kafka``), as before the split
log = logging.getLogger("slash.kafka")

#: records decoded into one batch at most
BATCH_RECORDS = 65_536
#: the type of the Kafka timestamp column
TS_TYPE = pa.timestamp("ms", tz="UTC")


class Decoder:
    """Kafka records -> Arrow batches (see the module doc and :mod:`slash.kafka`)."""

    def __init__(self, topic: str, fmt: str, value_schema: Optional[pa.Schema],
                 timestamp_column: Optional[str], bad_records: Optional[str]) -> None:
        self.topic, self.format, self.value_schema = topic, fmt, value_schema
        self.timestamp_column, self.bad_records = timestamp_column, bad_records
        fields = list(value_schema) if fmt == "json" else [pa.field("key", pa.binary()),
                                                            pa.field("value", pa.binary())]
        if timestamp_column is not None:
            if timestamp_column in [f.name for f in fields]:
                raise SchemaError(f"timestamp_column {timestamp_column!r} is also a field of the "
                                  f"values of topic {topic!r}: name it otherwise or pass None")
            fields.append(pa.field(timestamp_column, TS_TYPE))
        self.schema = pa.schema(fields)
        #: the schema without the Kafka timestamp (a reader that does not read it)
        self.value_columns = pa.schema(fields[:-1]) if timestamp_column is not None \
            else self.schema
        self.malformed = 0

    def decode(self, partition: int, recs: Polled, timestamps: bool = True
               ) -> Tuple[Optional[pa.RecordBatch], List[Dict[str, Any]]]:
        """One batch of ``recs`` (records of one partition, as polled), and the
        malformed ones. ``timestamps=False``: without the Kafka timestamp column
        (of schema :attr:`value_columns`), for a reader that does not read it."""
        bad: List[Dict[str, Any]] = []
        keep: Optional[List[int]] = None  # the records kept, if not all
        n = len(recs)
        if self.format == "raw":
            cols = [recs.binary(keys=True), recs.binary()]
        else:
            table = None if recs.has_null() else self._parse(recs.lines(), n)
            if table is None and n:  # some value is malformed: find which, one by one
                good: List[bytes] = []
                keep = []
                for i in range(n):
                    v = recs.value(i)
                    why = self._check(v)
                    if why is None:
                        good.append(v)  # type: ignore[arg-type]
                        keep.append(i)
                    else:
                        bad.append({"topic": self.topic, "partition": partition,
                                    "offset": int(recs.offset[i]), "error": why,
                                    "value": None if v is None else v.decode("utf-8", "replace")})
                table = self._parse(b"\n".join(good), len(good)) if good else None
                if table is None and good:  # cannot happen: each value parsed alone
                    raise SchemaError(f"topic {self.topic!r} partition {partition}: values "
                                      "that parse alone fail together")
            cols = ([table.column(i).combine_chunks() for i in range(table.num_columns)]
                    if table is not None else
                    [pa.array([], f.type) for f in self.value_schema])
        schema = self.value_columns
        rows = n if keep is None else len(keep)
        if self.timestamp_column is not None and timestamps:
            ts = recs.timestamp if keep is None else recs.timestamp[keep]
            cols.append(pa.array(np.ascontiguousarray(ts, np.int64)).cast(TS_TYPE))
            schema = self.schema
        if bad:
            self.malformed += len(bad)
        if not rows:
            return None, bad
        return pa.RecordBatch.from_arrays(cols, schema=schema), bad

    def _parse(self, data: Union[bytes, memoryview], rows: int) -> Optional[pa.Table]:
        """``rows`` values given as lines, parsed in one call, or None if one is malformed."""
        if not rows:
            return pa.table({f.name: pa.array([], f.type) for f in self.value_schema})
        try:
            t = pj.read_json(pa.BufferReader(pa.py_buffer(data)), read_options=pj.ReadOptions(
                use_threads=False, block_size=max(1 << 20, len(data) + 1)),
                parse_options=pj.ParseOptions(explicit_schema=self.value_schema,
                                              unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if t.num_rows != rows:  # an empty value: no row
            return None
        return t.select(self.value_schema.names)

    def _check(self, v: Optional[bytes]) -> Optional[str]:
        """Why one value is malformed, or None."""
        if v is None:
            return "null value"
        try:
            obj = json.loads(v)
        except ValueError as e:
            return f"not JSON: {e}"
        if not isinstance(obj, dict):
            return f"not a JSON object: {type(obj).__name__}"
        try:
            pj.read_json(io.BytesIO(json.dumps(obj).encode()), parse_options=pj.ParseOptions(
                explicit_schema=self.value_schema, unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            return f"does not fit the schema: {e}"
        return None

    def report(self, bad: List[Dict[str, Any]], partition: int, first_offset: int) -> None:
        """Logs the malformed records of a unit (and writes them, given ``bad_records``)."""
        if not bad:
            return
        log.warning("topic %r partition %d: %d malformed value(s) skipped, the first at offset "
                    "%d (%s)", self.topic, partition, len(bad), bad[0]["offset"], bad[0]["error"])
        if self.bad_records is not None:
            os.makedirs(self.bad_records, exist_ok=True)
            path = os.path.join(self.bad_records,
                                f"bad-{self.topic}-{partition}-{first_offset}.jsonl")
            tmp = f"{path}.tmp-{os.getpid()}"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(b) + "\n" for b in bad)
            os.replace(tmp, path)

    def reads_timestamps(self, names: List[str]) -> bool:
        """Whether a reader of columns ``names`` needs the Kafka timestamps."""
        return self.timestamp_column is not None and self.timestamp_column in names

    def check_column(self, column: Optional[str]) -> None:
        """UnknownName unless ``column`` (None: nothing to check) is a column of the topic."""
        if column is not None and column not in self.schema.names:
            raise UnknownName(f"topic {self.topic!r} has no column {column!r} (columns: "
                              f"{', '.join(self.schema.names)})")

    def may_have_nulls(self, column: str) -> bool:
        """Any JSON field may be missing (null); the Kafka timestamp never is."""
        self.check_column(column)
        return column != self.timestamp_column
