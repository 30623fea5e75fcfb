"""Files joined to a small table: :class:`JoinedFileSource`.

The rows of a :class:`~slash.file_source.FileSource` inner-joined, as they
are read, to a small table whose key is unique (a star schema's dimension,
the side Spark would broadcast): each row of the files whose column ``on``
equals a key of the table gets that table row's columns; a row without a
match (or with a null ``on``) is dropped, as an inner join drops it. The
files keep their split, positions, bounds and re-deal: the join changes
what a unit's rows carry, never which units there are, so a checkpoint or a
rescale of a joined input works as one of its files does.

Invariants: the table's keys are unique and non-null (checked at build:
a repeated key would repeat the files' row, which a per-row lookup cannot
do); the added columns take names the files do not have; a row's fate
depends on its own ``on`` value alone, so every split of the files yields
the same joined rows.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import pyarrow as pa

from slash.errors import SchemaError
from slash.sources.contract import register
from slash.sources.files import FileSource
from slash.sources.units import Unit


@dataclass(frozen=True)
class Lookup:
    """The small side of the join: ``table``'s column ``key`` matched to the
    files' column ``on``; ``columns`` maps each table column the rows get to
    the name it gets there."""

    table: pa.Table
    on: str
    key: str
    columns: Tuple[Tuple[str, str], ...]

    @property
    def added(self) -> List[str]:
        return [name for _, name in self.columns]


def unique_keys(table: pa.Table, key: str, what: str) -> pa.Table:
    """``table`` without its null-key rows (they match nothing), or
    SchemaError when a key repeats (``what`` names the table)."""
    import pyarrow.compute as pc  # lazily: slash.sources imports this module; start-up loads no Arrow kernels (44 ms)

    col = table.column(key)
    if col.null_count:
        table = table.filter(pc.is_valid(col))
        col = table.column(key)
    distinct = pc.count_distinct(col).as_py()
    if distinct != table.num_rows:
        raise SchemaError(f"{what} has {table.num_rows} rows but {distinct} distinct values of its "
                          f"join column {key!r}: a key that repeats joins a row to several rows")
    return table


@register("joined-files")
class JoinedFileSource(FileSource):
    """``paths`` (as :class:`FileSource` takes them) inner-joined to
    ``lookup``'s table; the schema is the files' (``columns`` and
    ``dictionary`` as :class:`FileSource` takes them: ``on`` among the
    columns, not the dictionary ones) plus the added columns
    (nullable where the table's are)."""

    def __init__(self, paths: Union[str, Sequence[str]], lookup: Lookup,
                 time: Optional[str] = None, base: Optional[str] = None,
                 columns: Optional[Sequence[str]] = None, dictionary: Sequence[str] = ()) -> None:
        import pyarrow.compute as pc  # lazily, for start-up (as in unique_keys)

        super().__init__(paths, time=time, base=base, columns=columns, dictionary=dictionary)
        assert self.schema is not None
        files = self.schema
        if lookup.on not in files.names:
            raise SchemaError(f"join column {lookup.on!r} is not in the files (they have "
                              f"{files.names})")
        clash = sorted(set(lookup.added) & set(files.names))
        if clash:
            raise SchemaError(f"the joined table's column(s) {clash} have the names of columns of "
                              "the files")
        table = unique_keys(lookup.table, lookup.key, "the joined table")
        on_type = files.field(lookup.on).type
        try:
            keys = pc.cast(table.column(lookup.key), on_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaError(f"the joined table's key {lookup.key!r} ({table.schema.field(lookup.key).type}) "
                              f"does not convert to the type of the files' {lookup.on!r} "
                              f"({on_type}): {e}") from None
        self.lookup = lookup
        self._keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        self._added: Dict[str, pa.Array] = {
            name: table.column(src).combine_chunks() for src, name in lookup.columns}
        self.schema = pa.schema(list(files) + [
            pa.field(name, table.schema.field(src).type, self._added[name].null_count > 0)
            for src, name in lookup.columns])

    def describe(self) -> str:
        """The files and the joined table's contents (a checkpoint of a join
        to other rows is another run's)."""
        digest = hashlib.sha256()
        for batch in pa.Table.from_arrays([self._keys, *self._added.values()],
                                          names=["key", *self._added]).to_batches():
            for col in batch.columns:
                for buf in col.buffers():
                    if buf is not None:
                        digest.update(buf)
        return (f"{super().describe()} joined on {self.lookup.on!r} to {len(self._keys)} rows "
                f"{list(self._added)} sha256 {digest.hexdigest()[:16]}")

    def may_have_nulls(self, column: str) -> bool:
        if column in self._added:
            return self._added[column].null_count > 0
        return super().may_have_nulls(column)

    def _read_unit(self, readers: Any, u: Unit, names: List[str], file_cols: List[str],
                   batch_rows: int) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc  # lazily, for start-up (as in unique_keys)

        want = [c for c in names if c not in self._added]
        read = want if self.lookup.on in want else want + [self.lookup.on]
        read_files = [c for c in read if c not in self._part_names]
        schema = pa.schema([self.schema.field(c) for c in names])
        for b in super()._read_unit(readers, u, read, read_files, batch_rows):
            idx = pc.index_in(b.column(self.lookup.on), value_set=self._keys)
            if idx.null_count:
                keep = pc.is_valid(idx)
                b, idx = b.filter(keep), idx.filter(keep)
            cols = [self._added[c].take(idx) if c in self._added else b.column(c) for c in names]
            yield pa.RecordBatch.from_arrays(cols, schema=schema)
