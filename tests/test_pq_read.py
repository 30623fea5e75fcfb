"""The core's Parquet integer column reader (slash.sources.parquet_chunks, C
pq_read.c) against pyarrow: on files pyarrow writes in every combination of
the options that change the bytes of an integer chunk, the decoded array
equals pyarrow's; chunks it does not decode are left to pyarrow; corrupted
chunks are refused or decoded, never a crash; FileSource reads the same
tables with it as without it."""
import itertools
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash import _core
from slash.sources import parquet_chunks
from slash.sources import FileSource
from slash.sources.parquet_chunks import ChunkReader, chunk_plan

TYPES = {
    "int32": pa.int32(), "int64": pa.int64(), "date32": pa.date32(),
    "ts_s": pa.timestamp("s"), "ts_ms": pa.timestamp("ms"), "ts_us": pa.timestamp("us", "UTC"),
    "ts_ns": pa.timestamp("ns", "Europe/Paris"),
}


def values(t: pa.DataType, n: int, nulls: str, dict_like: bool, seed: int) -> pa.Array:
    rng = np.random.default_rng(seed)
    lo, hi = (-2**31, 2**31 - 1) if t.bit_width == 32 else (-2**62, 2**62)
    if pa.types.is_date32(t):
        lo, hi = -700_000, 2_900_000
    elif pa.types.is_timestamp(t):  # seconds are stored as milliseconds: no overflow
        lo, hi = -2**50, 2**50
    v = rng.integers(lo, hi, n) if not dict_like else rng.choice(rng.integers(lo, hi, 37), n)
    mask = {"none": None, "some": rng.random(n) < 0.3, "all": np.ones(n, bool)}[nulls]
    return pa.array(v.astype(np.int32 if t.bit_width == 32 else np.int64), mask=mask).cast(t)


def write(path, cols, *, dictionary, page_version, compression, page_size, row_group,
          version="2.6"):
    table = pa.table(cols)
    pq.write_table(table, path, use_dictionary=dictionary, data_page_version=page_version,
                   compression=compression, data_page_size=page_size, row_group_size=row_group,
                   version=version)
    return table


def decode_all(path):
    """Each (row group, column) as the core decodes it (None if refused) and as pyarrow does."""
    f = pq.ParquetFile(path)
    md, schema = f.metadata, f.schema_arrow
    reader = ChunkReader()
    fd = os.open(path, os.O_RDONLY)
    try:
        for rg in range(md.num_row_groups):
            want = f.read_row_group(rg)
            for j in range(md.num_columns):
                name = md.schema.column(j).path
                plan = chunk_plan(md, rg, j, schema.field(name).type)
                got = reader.read(fd, plan, path, name) if plan is not None else None
                yield rg, name, plan, got, want.column(name).combine_chunks()
    finally:
        os.close(fd)


COMBOS = list(itertools.product([True, False], ["1.0", "2.0"], ["snappy", "none"],
                                ["none", "some", "all"]))


@pytest.mark.parametrize("dictionary,page_version,compression,nulls", COMBOS)
def test_decoded_chunks_equal_pyarrows_in_every_writer_combination(
        tmp_path, dictionary, page_version, compression, nulls):
    seed = COMBOS.index((dictionary, page_version, compression, nulls))
    cols = {name: values(t, 3000, nulls, dictionary and i % 2 == 0, seed * 10 + i)
            for i, (name, t) in enumerate(TYPES.items())}
    for rows, page_size, row_group in [(40, 256, 1), (3000, 256, 1000), (3000, 1 << 20, 3000),
                                       (3000, 512, 777)]:
        path = str(tmp_path / f"f{page_size}_{row_group}.parquet")
        write(path, {c: v[:rows] for c, v in cols.items()}, dictionary=dictionary, page_version=page_version,
              compression=compression, page_size=page_size, row_group=row_group)
        decoded = 0
        for rg, name, plan, got, want in decode_all(path):
            assert plan is not None, name
            assert got is not None, (name, rg)
            assert got.type == want.type and got.null_count == want.null_count
            assert got.equals(want), (name, rg)
            decoded += 1
        assert decoded == len(TYPES) * pq.ParquetFile(path).metadata.num_row_groups


def test_a_million_row_group_of_sorted_times_and_small_keys(tmp_path):
    n = 1 << 20
    ts = np.sort(np.random.default_rng(1).integers(0, 10**12, n))
    k = np.random.default_rng(2).integers(0, 100, n)
    path = str(tmp_path / "big.parquet")
    write(path, {"ts": ts, "k": k, "d": ts // 1000}, dictionary=True, page_version="1.0",
          compression="snappy", page_size=1 << 20, row_group=n)
    for _, name, plan, got, want in decode_all(path):
        assert got is not None and got.equals(want), name


def test_int96_and_nested_and_narrow_integers_are_left_to_pyarrow(tmp_path):
    path = str(tmp_path / "other.parquet")
    t = pa.table({"i96": pa.array([1, 2, None], pa.timestamp("ns")),
                  "nest": pa.array([[1], [], None], pa.list_(pa.int64())),
                  "i8": pa.array([1, -2, 3], pa.int8()),
                  "u32": pa.array([1, 2**32 - 1, 3], pa.uint32())})
    pq.write_table(t, path, use_deprecated_int96_timestamps=True)
    md, schema = pq.ParquetFile(path).metadata, pq.ParquetFile(path).schema_arrow
    plans = {md.schema.column(j).path: chunk_plan(md, 0, j, schema.field(
        md.schema.column(j).path.split(".")[0]).type) for j in range(md.num_columns)}
    assert plans["i96"] is None and plans["i8"] is None
    assert all(p is None for name, p in plans.items() if name.startswith("nest"))
    assert plans["u32"] is not None  # the same 32 bits, read as unsigned


def test_other_encodings_and_codecs_fall_back_to_pyarrow(tmp_path):
    cols = {"a": np.arange(5000, dtype=np.int64) * 3, "b": np.arange(5000, dtype=np.int32)}
    for kw in [dict(use_dictionary=False, column_encoding="DELTA_BINARY_PACKED"),
               dict(use_dictionary=False, column_encoding="BYTE_STREAM_SPLIT"),
               dict(compression="zstd"), dict(compression="gzip")]:
        path = str(tmp_path / "enc.parquet")
        pq.write_table(pa.table(cols), path, **kw)
        for _, name, plan, got, want in decode_all(path):
            assert got is None, (kw, name)
        src = FileSource(path)
        assert pa.Table.from_batches(list(src.read(0, 1))).equals(pq.read_table(path))


def corrupted(chunk: bytes, rng: random.Random) -> bytes:
    b = bytearray(chunk)
    how = rng.randrange(3)
    if how == 0:
        return bytes(b[:rng.randrange(len(b))])
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b))
        b[i] = rng.randrange(256) if how == 1 else b[i] ^ (1 << rng.randrange(8))
    return bytes(b)


def test_corrupted_chunks_are_refused_or_decoded_never_a_crash(tmp_path):
    rng = random.Random(7)
    results = {"refused": 0, "decoded": 0}
    for dictionary, page_version, compression in itertools.product(
            [True, False], ["1.0", "2.0"], ["snappy", "none"]):
        path = str(tmp_path / "c.parquet")
        write(path, {"a": values(pa.int64(), 2000, "some", dictionary, 3),
                     "b": values(pa.int32(), 2000, "none", dictionary, 4)},
              dictionary=dictionary, page_version=page_version, compression=compression,
              page_size=300, row_group=2000)
        md = pq.ParquetFile(path).metadata
        raw = open(path, "rb").read()
        core = _core.ParquetChunkReader()
        for j, (phys, w) in enumerate([(_core.PQ_INT64, 8), (_core.PQ_INT32, 4)]):
            plan = chunk_plan(md, 0, j, [pa.int64(), pa.int32()][j])
            chunk = raw[plan.offset:plan.offset + plan.length]
            for _ in range(300):
                out = np.empty(2000 * w, np.uint8)
                valid = np.empty(250, np.uint8)
                nulls = core.decode(corrupted(chunk, rng), phys, plan.codec, plan.max_def,
                                    2000, out, w, valid)
                assert nulls >= -1 and nulls <= 2000
                results["refused" if nulls < 0 else "decoded"] += 1
    assert results["refused"] > 0 and results["decoded"] > 0


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="the reference, pyarrow's own reader (not instrumented), aborts on some "
                           "of these corrupted pages under ASan's allocator")
def test_a_corrupted_file_reads_as_pyarrow_reads_it(tmp_path):
    """A bit flipped in a column chunk: FileSource gives pyarrow's table, or
    fails where pyarrow fails (the core refuses the chunk, pyarrow raises)."""
    rng = random.Random(11)
    outcomes = {"same table": 0, "both fail": 0}
    for dictionary, page_version, compression in itertools.product(
            [True, False], ["1.0", "2.0"], ["snappy", "none"]):
        path = str(tmp_path / "good.parquet")
        write(path, {"a": values(pa.int64(), 4000, "some", dictionary, 5)}, dictionary=dictionary,
              page_version=page_version, compression=compression, page_size=400, row_group=4000)
        plan = chunk_plan(pq.ParquetFile(path).metadata, 0, 0, pa.int64())
        raw = open(path, "rb").read()
        for k in range(40):
            b = bytearray(raw)
            b[plan.offset + rng.randrange(plan.length)] ^= 1 << rng.randrange(8)
            bad = str(tmp_path / "bad.parquet")
            open(bad, "wb").write(bytes(b))
            try:
                want = pq.ParquetFile(bad).read_row_group(0)
            except (OSError, pa.ArrowException):
                want = None
            try:
                got = pa.Table.from_batches(list(FileSource(bad).read(0, 1)))
            except (OSError, pa.ArrowException):
                got = None
            assert (got is None) == (want is None), (dictionary, page_version, compression, k)
            if got is not None:
                assert got.equals(want)
            outcomes["same table" if got is not None else "both fail"] += 1
    assert min(outcomes.values()) > 0, outcomes


@pytest.mark.parametrize("enabled", [True, False])
def test_file_source_reads_the_same_table_with_and_without_the_core_reader(
        tmp_path, monkeypatch, enabled):
    monkeypatch.setattr(parquet_chunks, "ENABLED", enabled)
    path = str(tmp_path / "mixed.parquet")
    t = pa.table({"ts": values(pa.timestamp("ms", "UTC"), 5000, "some", False, 1),
                  "k": values(pa.int64(), 5000, "none", True, 2),
                  "s": pa.array([str(i % 7) for i in range(5000)]),
                  "d": values(pa.date32(), 5000, "all", False, 3)})
    pq.write_table(t, path, row_group_size=1200)
    src = FileSource(path)
    for cols in (None, ["k", "ts"], ["s", "d", "k"]):
        got = pa.Table.from_batches(list(src.read(0, 1, columns=cols)))
        want = pq.read_table(path, columns=cols)
        assert got.equals(want, check_metadata=True), cols


def _two_row_groups(tmp_path):
    path = str(tmp_path / "two.parquet")
    write(path, {"a": values(pa.int64(), 2000, "some", False, 9)}, dictionary=False,
          page_version="1.0", compression="snappy", page_size=1 << 20, row_group=1000)
    md = pq.ParquetFile(path).metadata
    return path, [chunk_plan(md, g, 0, pa.int64()) for g in range(2)]


def test_a_buffer_an_array_still_holds_is_never_decoded_into_again(tmp_path):
    path, plans = _two_row_groups(tmp_path)
    reader, fd = ChunkReader(), os.open(path, os.O_RDONLY)
    first = reader.read(fd, plans[0], path, "a")
    kept = first.to_pylist()
    second = reader.read(fd, plans[1], path, "a")
    os.close(fd)
    assert first.to_pylist() == kept and second.to_pylist() != kept
    assert second.equals(pq.ParquetFile(path).read_row_group(1).column("a").combine_chunks())


def test_the_buffers_of_dropped_arrays_are_reused(tmp_path):
    path, plans = _two_row_groups(tmp_path)
    reader, fd = ChunkReader(), os.open(path, os.O_RDONLY)
    a = reader.read(fd, plans[0], path, "a")
    address = a.buffers()[1].address
    del a
    b = reader.read(fd, plans[1], path, "a")
    os.close(fd)
    assert b.buffers()[1].address == address and len(reader.pool.free) == 2


def test_only_partition_columns_keep_the_row_groups_rows(tmp_path):
    d = tmp_path / "day=3"
    d.mkdir()
    pq.write_table(pa.table({"k": np.arange(10, dtype=np.int64)}), str(d / "p.parquet"),
                   row_group_size=4)
    got = pa.Table.from_batches(list(FileSource(str(tmp_path)).read(0, 1, columns=["day"])))
    assert got.column("day").to_pylist() == [3] * 10
