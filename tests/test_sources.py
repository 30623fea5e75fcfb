"""Bounded sources (slash.sources) never lose a record, whatever the layout.

For layouts built here with pyarrow (one time-ordered file; part files that
each span the whole time range; rows shuffled inside files; Hive directories by
day with Spark's litter; an empty file; unequal file sizes) and 1..4 ranks:
every row is read exactly once (against pyarrow.dataset's own read), no rank
yields a row older than a Watermark it yielded before (checked with NumPy), and
time-ordered input still advances its Watermarks and balances the ranks. A
directory written by Spark (micros and INT96 timestamps) closes the loop."""
import os
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from slash.errors import SchemaError, UnknownName
from slash.sources import (FileSource, GeneratorSource, TableSource, Unit, Watermark,
                           as_source)

DAY_US = 86_400_000_000


# ---- layouts -----------------------------------------------------------------------
def _events(n, seed, t, **extra):
    rng = np.random.default_rng(seed)
    cols = {"id": pa.array(np.arange(n, dtype=np.int64) + seed * 1_000_000), "t": t,
            "k": pa.array(rng.integers(0, 7, n))}
    cols.update(extra)
    return pa.table(cols)


def layout_ordered(d):
    """One time-ordered file, 8 row groups."""
    t = np.cumsum(np.random.default_rng(1).integers(0, 5, 8000)).astype(np.int64)
    pq.write_table(_events(8000, 1, pa.array(t)), os.path.join(d, "events.parquet"),
                   row_group_size=1000)


def layout_spanning(d):
    """5 part files (as df.repartition(5).write would make), each spanning the
    whole time range, sorted inside each file, 4 row groups each."""
    rng = np.random.default_rng(2)
    t = np.sort(rng.integers(0, 100_000, 10_000))
    part = rng.integers(0, 5, t.size)
    for p in range(5):
        tp = t[part == p]
        pq.write_table(_events(tp.size, 10 + p, pa.array(tp)),
                       os.path.join(d, f"part-{p:05d}.parquet"), row_group_size=tp.size // 4 + 1)


def layout_shuffled(d):
    """Rows shuffled inside 2 files; nanosecond timestamps before and after
    1970 (statistics must not round them up); some null times."""
    rng = np.random.default_rng(3)
    for p in range(2):
        ns = rng.integers(-10**12, 10**12, 3000)
        arr = pa.array(ns, pa.timestamp("ns"), mask=rng.random(ns.size) < 0.05)
        pq.write_table(_events(ns.size, 20 + p, arr), os.path.join(d, f"part-{p}.parquet"),
                       row_group_size=700)


def layout_hive(d):
    """Hive directories by day (a string partition, as pyarrow.dataset infers
    it) with Spark's litter: _SUCCESS, .crc files, a _temporary directory, a
    null partition and an empty part file."""
    rng = np.random.default_rng(4)
    for i, day in enumerate(["2013-01-01", "2013-01-02", "2013-01-03",
                             "__HIVE_DEFAULT_PARTITION__"]):
        sub = os.path.join(d, f"day={day}")
        os.makedirs(sub)
        base = (i if i < 3 else 1) * DAY_US + 1_356_998_400_000_000
        for p in range(2):
            us = base + rng.integers(0, DAY_US, 1500)
            pq.write_table(_events(us.size, 30 + 2 * i + p, pa.array(us, pa.timestamp("us", tz="UTC"))),
                           os.path.join(sub, f"part-{p}.parquet"), row_group_size=500)
            open(os.path.join(sub, f".part-{p}.parquet.crc"), "wb").write(b"crc")
        empty = _events(0, 39, pa.array([], pa.timestamp("us", tz="UTC")))
        pq.write_table(empty, os.path.join(sub, "part-9.parquet"))
    open(os.path.join(d, "_SUCCESS"), "wb").close()
    os.makedirs(os.path.join(d, "_temporary", "0"))
    pq.write_table(_events(10, 99, pa.array(np.zeros(10, np.int64))),  # another schema: must be skipped
                   os.path.join(d, "_temporary", "0", "part-0.parquet"))


def layout_unequal(d):
    """Files of 120, 5000 and 900 rows (date32 times) plus an empty file."""
    rng = np.random.default_rng(5)
    for p, n in enumerate([120, 5000, 900, 0]):
        days = pa.array(rng.integers(15_000, 15_400, n).astype(np.int32)).cast(pa.date32())
        pq.write_table(_events(n, 50 + p, days), os.path.join(d, f"f{p}.parquet"),
                       row_group_size=400)


LAYOUTS = {"ordered": layout_ordered, "spanning": layout_spanning, "shuffled": layout_shuffled,
           "hive": layout_hive, "unequal": layout_unequal}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def layout(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(request.param))
    LAYOUTS[request.param](d)
    return request.param, d


def _reference(d):
    """pyarrow.dataset's own read of the directory."""
    return ds.dataset(d, format="parquet", partitioning="hive").to_table()


def _ints(a):
    """A time column's values as int64 NumPy (nulls dropped)."""
    a = pc.drop_null(a)
    if pa.types.is_date32(a.type):
        a = a.cast(pa.int32())
    return np.asarray(a.cast(pa.int64()))


def _scalar_int(s):
    return int(_ints(pa.array([s], s.type))[0])


def _read_all(src, n, **kw):
    """rank -> list of items its read() yields."""
    return {r: list(src.read(r, n, **kw)) for r in range(n)}


def _sorted(t):
    return t.sort_by([(c, "ascending") for c in t.column_names])


# ---- (a) every row exactly once --------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("time", [None, "t"])
def test_every_row_is_read_exactly_once(layout, n, time):
    _, d = layout
    src = FileSource(d, time=time)
    got = [b for items in _read_all(src, n, time=time).values() for b in items
           if isinstance(b, pa.RecordBatch)]
    ref = _reference(d)
    assert src.schema.names == ref.column_names
    table = pa.Table.from_batches(got, schema=src.schema)
    assert table.num_rows == src.rows == ref.num_rows
    assert _sorted(table).equals(_sorted(ref.cast(src.schema)))


# ---- (b) no row older than a promise ----------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_no_row_after_a_watermark_is_older_than_it(layout, n):
    _, d = layout
    src = FileSource(d)
    field = src.schema.field("t")
    for rank, items in _read_all(src, n, columns=["t", "id"], time="t").items():
        promised = None
        for item in items:
            if isinstance(item, Watermark):
                assert item.value.type == field.type
                promised = _scalar_int(item.value)
            elif promised is not None and item.num_rows:
                later = _ints(item.column(0))
                assert later.size == 0 or later.min() >= promised, (rank, promised, later.min())


def test_markers_only_with_a_time_column(layout):
    _, d = layout
    assert all(isinstance(b, pa.RecordBatch) for b in FileSource(d, time="t").read(0, 2))


# ---- (c) time-ordered input fires early and balances the ranks --------------------
@pytest.mark.parametrize("name", ["ordered", "spanning"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_time_ordered_files_advance_watermarks_and_balance_ranks(tmp_path, name, n):
    LAYOUTS[name](str(tmp_path))
    src = FileSource(str(tmp_path), time="t")
    largest = max(u.rows for u in src.units)
    for rank, items in _read_all(src, n, time="t").items():
        marks = [_scalar_int(i.value) for i in items if isinstance(i, Watermark)]
        units = len(src.split(rank, n))
        assert len(marks) >= units // 2 and marks == sorted(set(marks))  # strictly advancing
        rows = sum(i.num_rows for i in items if isinstance(i, pa.RecordBatch))
        assert abs(rows - src.rows / n) <= largest, (rank, rows)
        # the first marker comes before the last unit: windows can fire early
        if units > 1:
            first = next(k for k, i in enumerate(items) if isinstance(i, Watermark))
            assert first < len(items) - 1


def test_split_is_the_read_order_and_every_rank_computes_the_same_deal(tmp_path):
    layout_spanning(str(tmp_path))
    a, b = FileSource(str(tmp_path), time="t"), FileSource(str(tmp_path), time="t")
    parts = [a.split(r, 3) for r in range(3)]
    assert parts == [b.split(r, 3) for r in range(3)]
    assert sorted((u for p in parts for u in p), key=lambda u: (u.path, u.index)) == a.units
    # each rank reads its units ordered by their minimum time
    mins = {(u.path, u.index): m for u, m in zip(a.units, a.unit_bounds("t"))}
    for p in parts:
        keys = [_scalar_int(mins[(u.path, u.index)]) for u in p]
        assert keys == sorted(keys)


def test_without_a_time_column_ranks_read_contiguous_runs_in_file_order(tmp_path):
    layout_spanning(str(tmp_path))
    src = FileSource(str(tmp_path))
    order = [u for r in range(3) for u in src.split(r, 3)]
    assert order == src.units


def test_a_unit_without_statistics_withholds_markers_until_it_is_read(tmp_path):
    t = pa.table({"t": pa.array(np.arange(4000, dtype=np.int64))})
    pq.write_table(t, tmp_path / "a.parquet", row_group_size=1000)
    pq.write_table(t, tmp_path / "b.parquet", row_group_size=1000, write_statistics=False)
    src = FileSource(str(tmp_path), time="t")
    items = list(src.read(0, 1, time="t"))
    # b's 4 units have no statistics: dealt first, and no marker until all are read
    assert [u.path.endswith("b.parquet") for u in src.split(0, 1)] == [True] * 4 + [False] * 4
    first = next(k for k, i in enumerate(items) if isinstance(i, Watermark))
    assert sum(isinstance(i, pa.RecordBatch) for i in items[:first]) == 4
    assert [i.value.as_py() for i in items if isinstance(i, Watermark)] == [0, 1000, 2000, 3000]


# ---- (d) Hive partitions ---------------------------------------------------------
def test_hive_partition_columns_match_pyarrow_dataset(tmp_path):
    layout_hive(str(tmp_path))
    src = FileSource(str(tmp_path))
    ref = _reference(str(tmp_path))
    assert src.schema.field("day").type == ref.schema.field("day").type
    got = pa.Table.from_batches(list(src.read(0, 2, columns=["id", "day"])) +
                                list(src.read(1, 2, columns=["id", "day"])))
    assert got.column_names == ["id", "day"]
    assert _sorted(got).equals(_sorted(ref.select(["id", "day"])))
    assert got.column("day").null_count == 3000  # the __HIVE_DEFAULT_PARTITION__ rows


def test_a_partition_column_can_be_the_time_column(tmp_path):
    for day in [3, 1, 2]:
        os.makedirs(tmp_path / f"day={day}")
        pq.write_table(pa.table({"x": pa.array(np.arange(100) + day * 100)}),
                       tmp_path / f"day={day}" / "p.parquet")
    src = FileSource(str(tmp_path), time="day")
    items = list(src.read(0, 1, time="day"))
    assert [i.value.as_py() for i in items if isinstance(i, Watermark)] == [2, 3]
    assert [pc.unique(i.column(1)).to_pylist() for i in items if isinstance(i, pa.RecordBatch)] \
        == [[1], [2], [3]]


def test_spark_litter_and_empty_files_are_skipped(tmp_path):
    layout_hive(str(tmp_path))
    src = FileSource(str(tmp_path))
    assert not any("_temporary" in p or "crc" in p for p in src.paths)
    assert all(u.rows for u in src.units)


# ---- may_have_nulls ----------------------------------------------------------------
def test_may_have_nulls_follows_statistics_and_partition_values(tmp_path):
    layout_hive(str(tmp_path))
    src = FileSource(str(tmp_path))
    assert src.may_have_nulls("day") is True  # a null partition
    assert src.may_have_nulls("t") is False and src.may_have_nulls("id") is False
    other = tmp_path / "x"
    other.mkdir()
    layout_shuffled(str(other))
    assert FileSource(str(other)).may_have_nulls("t") is True
    with pytest.raises(UnknownName, match="'nope'"):
        src.may_have_nulls("nope")


def test_table_and_generator_may_have_nulls():
    t = pa.table({"a": [1, None], "b": [1, 2]})
    assert TableSource(t).may_have_nulls("a") and not TableSource(t).may_have_nulls("b")
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.int64())])
    g = GeneratorSource(lambda r, n: iter(()), schema)
    assert not g.may_have_nulls("a") and g.may_have_nulls("b")


def test_every_source_is_bounded(tmp_path):
    layout_ordered(str(tmp_path))
    assert FileSource(str(tmp_path)).bounded and TableSource(pa.table({"a": [1]})).bounded
    assert GeneratorSource(lambda r, n: iter(()), pa.schema([("a", pa.int64())])).bounded


# ---- bad input ------------------------------------------------------------------------
def test_missing_path_is_named(tmp_path):
    with pytest.raises(UnknownName, match="nope.parquet"):
        FileSource(str(tmp_path / "nope.parquet"))


def test_files_that_differ_in_type_are_both_named(tmp_path):
    pq.write_table(pa.table({"t": pa.array([1], pa.int64())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"t": pa.array([1], pa.int32())}), tmp_path / "b.parquet")
    with pytest.raises(SchemaError, match="b.parquet.*a.parquet"):
        FileSource(str(tmp_path))


def test_files_may_differ_in_nullability_and_metadata(tmp_path):
    a = pa.table({"t": [1, 2]}).replace_schema_metadata({"writer": "spark"})
    b = pa.Table.from_pydict({"t": [3]}, schema=pa.schema([pa.field("t", pa.int64(), False)]))
    pq.write_table(a, tmp_path / "a.parquet")
    pq.write_table(b, tmp_path / "b.parquet")
    src = FileSource(str(tmp_path))
    assert src.schema.field("t").nullable and src.rows == 3


def test_unknown_time_column_is_named(tmp_path):
    layout_ordered(str(tmp_path))
    with pytest.raises(UnknownName, match="'when'"):
        FileSource(str(tmp_path), time="when")
    with pytest.raises(UnknownName, match="'when'"):
        list(FileSource(str(tmp_path)).read(0, 1, time="when"))


# ---- Arrow IPC, tables, generators ------------------------------------------------------
def test_arrow_ipc_batches_are_bounded_by_their_minimum(tmp_path):
    rng = np.random.default_rng(6)
    t = pa.table({"t": pa.array(rng.permutation(6000).astype(np.int64)), "x": np.arange(6000)})
    feather.write_feather(t, str(tmp_path / "a.arrow"), chunksize=1000, compression="uncompressed")
    src = FileSource(str(tmp_path / "a.arrow"), time="t")
    got = []
    for r in range(2):
        promised = -1
        for i in src.read(r, 2, time="t"):
            if isinstance(i, Watermark):
                promised = i.value.as_py()
            else:
                assert pc.min(i.column(0)).as_py() >= promised
                got.append(i)
    assert _sorted(pa.Table.from_batches(got)).equals(_sorted(t))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_table_source_deals_slices_and_keeps_its_promises(n):
    rng = np.random.default_rng(7)
    rows = 200_000
    t = pa.table({"t": pa.array(rng.permutation(rows) // 1000), "id": np.arange(rows)})
    src = TableSource(t)
    ids, marks = [], 0
    for r in range(n):
        promised = None
        for i in src.read(r, n, time="t"):
            if isinstance(i, Watermark):
                promised = i.value.as_py()
                marks += 1
            else:
                assert promised is None or pc.min(i.column(0)).as_py() >= promised
                ids.append(np.asarray(i.column(1)))
    assert np.array_equal(np.sort(np.concatenate(ids)), np.arange(rows))


def test_table_source_sorted_by_time_advances_watermarks():
    t = pa.table({"t": pa.array(np.arange(300_000) // 7)})
    items = list(TableSource(t).read(1, 2, time="t"))
    marks = [i.value.as_py() for i in items if isinstance(i, Watermark)]
    assert len(marks) >= 2 and marks == sorted(set(marks))


def test_table_source_without_time_reads_one_contiguous_slice():
    t = pa.table({"a": np.arange(10)})
    src = TableSource(t)
    assert src.split(1, 3) == [Unit("<table>", 3, 3)]
    assert pa.Table.from_batches(list(src.read(1, 3))).column(0).to_pylist() == [3, 4, 5]


def _gen(rank, n):
    yield pa.record_batch({"t": [5, 6]})
    yield Watermark(pa.scalar(5, pa.int64()))
    yield pa.record_batch({"t": [7]})


def test_generator_watermarks_pass_through_only_with_a_time_column():
    g = GeneratorSource(_gen, pa.schema([("t", pa.int64())]))
    assert [type(i) for i in g.read(0, 1, time="t")] == [pa.RecordBatch, Watermark, pa.RecordBatch]
    assert [type(i) for i in g.read(0, 1)] == [pa.RecordBatch, pa.RecordBatch]


def test_a_file_source_survives_pickling(tmp_path):
    layout_hive(str(tmp_path))
    src = FileSource(str(tmp_path), time="t")
    back = pickle.loads(pickle.dumps(src))
    assert back.split(1, 3) == src.split(1, 3)
    assert [type(i) for i in back.read(1, 3, time="t")] == [type(i) for i in src.read(1, 3, time="t")]
    assert isinstance(as_source(str(tmp_path)), FileSource)


# ---- (e) a directory written by Spark --------------------------------------------------
@pytest.fixture(scope="module")
def spark_dirs(spark, tmp_path_factory):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    root = tmp_path_factory.mktemp("spark-written")
    out = {}
    df = spark.range(6000).selectExpr(
        "id", "id % 13 as k",
        "timestamp_micros(1356998400000000 + (id * 7919 % 6000) * 1000003) as t")
    for kind in ["TIMESTAMP_MICROS", "INT96"]:
        spark.conf.set("spark.sql.parquet.outputTimestampType", kind)
        out[kind] = str(root / kind)
        df.repartition(3).write.parquet(out[kind])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["TIMESTAMP_MICROS", "INT96"])
def test_spark_written_directory_reads_every_row_with_true_markers(spark_dirs, kind):
    d = spark_dirs[kind]
    assert os.path.exists(os.path.join(d, "_SUCCESS"))
    src = FileSource(d, time="t")
    ref = _reference(d)
    got, marks = [], []
    for r in range(2):
        promised = None
        for i in src.read(r, 2, time="t"):
            if isinstance(i, Watermark):
                promised = _scalar_int(i.value)
                marks.append(i)
            else:
                got.append(i)
                later = _ints(i.column(src.schema.get_field_index("t")))
                assert promised is None or later.min() >= promised
    assert _sorted(pa.Table.from_batches(got)).equals(_sorted(ref.cast(src.schema)))
    if kind == "INT96":
        # Spark's TimestampType as INT96: an instant, in microseconds (exact over 0001-9999)
        assert src.schema.field("t").type == pa.timestamp("us", "UTC") and marks == []
    else:
        assert src.schema.field("t").type.unit == "us" and len(marks) >= 1
