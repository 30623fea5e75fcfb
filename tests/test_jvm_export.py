"""slash.spark.jvm_export: the Arrow IPC files the Spark tasks write (the
JVM-side io.slash.spark.ArrowExport) read back as Spark's own rows
(``df.toArrow()``) for every type it takes, nulls, NaN, the ends of Spark's
date and time range, another session time zone, empty partitions, 1, 2 and
200 partitions, a join's, a union's and a UDF's output; a type it does not
take is refused naming the column; and Slash's fast path over the files
answers as Spark's own groupBy(window) on the same DataFrame."""
import datetime
import math
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

from slash.errors import InvalidArgument, SchemaError, UnknownName  # noqa: E402
from slash.sources import FileSource  # noqa: E402
from slash.spark import jvm_export, spark_window_aggregate, window_aggregate  # noqa: E402

pytestmark = pytest.mark.slow

UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def spark(spark):
    """The shared session (conftest.py), when it has the package's jar."""
    if not jvm_export.available(spark):
        pytest.skip("slash-spark.jar is not built (scripts/install.sh build_jar, which ./test.sh runs)")
    return spark


def read_files(files):
    """The rows of the exported files, in file order, as one Table."""
    tables = [ipc.open_file(pa.memory_map(f, "r")).read_all() for f in files]
    return pa.concat_tables(tables)


def spark_rows(df):
    """Spark's own rows of ``df`` as Arrow, its instants in UTC (toArrow gives
    them in the session zone: the same instants)."""
    t = df.toArrow()
    return t.cast(pa.schema([f.with_type(pa.timestamp("us", "UTC"))
                             if pa.types.is_timestamp(f.type) and f.type.tz else f for f in t.schema]))


def plain(table):
    """Rows as dicts, NaN spelled out (NaN equals nothing, not even NaN)."""
    return [{k: ("NaN" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in table.to_pylist()]


def assert_exports_as_spark(spark, df, **kw):
    with jvm_export.export_columns(spark, df, df.columns, **kw) as got:
        assert len(got.parts) == df.rdd.getNumPartitions()
        mine = read_files(got.files)
    theirs = spark_rows(df)
    assert mine.num_rows == theirs.num_rows == got.rows
    assert mine.column_names == theirs.column_names
    assert plain(mine) == plain(theirs.cast(mine.schema))
    return mine


ALL_TYPES = """
    select id % 2 = 0 as b, cast(id % 200 - 100 as tinyint) as i8, cast(id * 7 % 60000 - 30000 as smallint) as i16,
           cast(id * 1000 as int) as i32, id * 1000000007 as i64,
           cast(id / 3 as float) as f32, cast(id as double) / 7 as f64,
           date_add(date'2001-02-03', cast(id as int)) as d,
           timestamp_micros(id * 1000003 + 1700000000000000) as ts,
           cast(timestamp_micros(id * 999 + 1600000000000000) as timestamp_ntz) as ntz,
           concat('key-', cast(id % 17 as string), repeat('é', cast(id % 3 as int))) as s,
           cast(concat('b', cast(id as string)) as binary) as bin
    from range(0, {n}, 1, {parts})"""


def with_nulls(spark, n, parts):
    """Every column of ALL_TYPES null on every 5th row (a different row per column)."""
    from pyspark.sql import functions as F

    df = spark.sql(ALL_TYPES.format(n=n, parts=parts)).withColumn("row", F.monotonically_increasing_id())
    cols = [c for c in df.columns if c != "row"]
    return df.select(*[F.when((F.col("row") + i) % 5 == 0, F.lit(None)).otherwise(F.col(c)).alias(c)
                       for i, c in enumerate(cols)])


def test_every_type_reads_back_as_sparks_rows(spark):
    assert_exports_as_spark(spark, spark.sql(ALL_TYPES.format(n=5000, parts=3)), batch_rows=700)


def test_nulls_read_back_as_nulls(spark):
    t = assert_exports_as_spark(spark, with_nulls(spark, 3000, 3), batch_rows=500)
    assert all(t.column(c).null_count == 600 for c in t.column_names)


def test_columns_have_arrows_types(spark):
    df = spark.sql(ALL_TYPES.format(n=10, parts=1))
    with jvm_export.export_columns(spark, df, df.columns) as got:
        schema = FileSource(got.files).schema
    assert [str(f.type) for f in schema] == [
        "bool", "int8", "int16", "int32", "int64", "float", "double", "date32[day]",
        "timestamp[us, tz=UTC]", "timestamp[us]", "string", "binary"]


def test_only_the_named_columns_in_their_order(spark):
    df = spark.sql(ALL_TYPES.format(n=100, parts=2))
    with jvm_export.export_columns(spark, df, ["s", "ts", "i32"]) as got:
        t = read_files(got.files)
    assert t.column_names == ["s", "ts", "i32"]
    assert plain(t) == plain(spark_rows(df.select("s", "ts", "i32")))


def test_nan_infinities_and_negative_zero_kept(spark):
    df = spark.sql("""select * from values (double('NaN'), float('NaN')), (double('Infinity'), float('-Infinity')),
                      (-0.0d, cast(-0.0 as float)), (1.5d, cast(null as float)) as v(d, f)""")
    t = assert_exports_as_spark(spark, df)
    d = t.column("d").to_pylist()
    assert math.isnan(d[0]) and d[1] == math.inf and math.copysign(1, d[2]) == -1
    f = t.column("f").to_pylist()
    assert math.isnan(f[0]) and f[1] == -math.inf and f[3] is None


def test_years_1_and_9999(spark):
    df = spark.sql("""select * from values
        (date'0001-01-01', timestamp'0001-01-01 00:00:00Z', timestamp_ntz'0001-01-01 00:00:00'),
        (date'9999-12-31', timestamp'9999-12-31 23:59:59.999999Z', timestamp_ntz'9999-12-31 23:59:59.999999'),
        (date'1969-12-31', timestamp'1969-12-31 23:59:59.999999Z', timestamp_ntz'1970-01-01 00:00:00')
        as v(d, ts, ntz)""")
    with jvm_export.export_columns(spark, df, df.columns) as got:
        t = read_files(got.files)
    assert t.column("d").to_pylist() == [datetime.date(1, 1, 1), datetime.date(9999, 12, 31),
                                         datetime.date(1969, 12, 31)]
    assert t.column("ts").cast(pa.int64()).to_pylist() == [-62135596800000000, 253402300799999999, -1]
    assert t.column("ntz").cast(pa.int64()).to_pylist() == [-62135596800000000, 253402300799999999, 0]


def test_instants_whatever_the_session_time_zone(spark):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        df = spark.sql("select timestamp'2024-03-10 12:00:00' as ts, "
                       "timestamp_ntz'2024-03-10 12:00:00' as ntz, date'2024-03-10' as d")
        t = assert_exports_as_spark(spark, df)
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert t.column("ts").to_pylist() == [datetime.datetime(2024, 3, 10, 19, 0, tzinfo=UTC)]
    assert t.column("ntz").to_pylist() == [datetime.datetime(2024, 3, 10, 12, 0)]


def test_an_empty_partition_gets_a_file_without_rows(spark):
    df = spark.range(0, 100, 1, 4).where("id < 10")  # partitions 1-3 hold no row
    with jvm_export.export_columns(spark, df, ["id"]) as got:
        assert [p.rows for p in got.parts] == [10, 0, 0, 0]
        assert [ipc.open_file(f).num_record_batches for f in got.files] == [1, 0, 0, 0]
        src = FileSource(got.files)
        assert src.rows == 10 and src.schema.names == ["id"]


def test_no_row_at_all_still_has_the_schema(spark):
    df = spark.sql(ALL_TYPES.format(n=100, parts=2)).where("i32 < 0")
    with jvm_export.export_columns(spark, df, ["ts", "s"]) as got:
        assert got.rows == 0
        src = FileSource(got.files)
    assert src.rows == 0 and [str(f.type) for f in src.schema] == ["timestamp[us, tz=UTC]", "string"]


@pytest.mark.parametrize("parts", [1, 2, 200])
def test_a_file_per_partition_without_a_shuffle(spark, parts):
    df = spark.sql(ALL_TYPES.format(n=4000, parts=parts))
    assert_exports_as_spark(spark, df)
    jobs_before = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
    with jvm_export.export_columns(spark, df, ["i64", "s"]) as got:
        assert sorted(p.partition for p in got.parts) == list(range(parts))
    new = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) - jobs_before
    stages = [s for j in new for s in spark.sparkContext.statusTracker().getJobInfo(j).stageIds]
    assert len(new) == 1 and len(stages) == 1  # one job of one stage: no shuffle before the export


def test_a_joins_output(spark):
    from pyspark.sql import functions as F

    events = with_nulls(spark, 3000, 3).withColumn("ad", (F.coalesce("i32", F.lit(0)) / 1000 % 50).cast("int"))
    ads = spark.range(0, 50).select(F.col("id").cast("int").alias("ad"),
                                    F.concat(F.lit("campaign-"), (F.col("id") % 7).cast("string")).alias("campaign"))
    assert_exports_as_spark(spark, events.join(F.broadcast(ads), "ad"))
    assert_exports_as_spark(spark, events.join(ads, "ad"))  # a sort-merge join: after a shuffle


def test_a_unions_output(spark):
    a = spark.sql(ALL_TYPES.format(n=1000, parts=2))
    b = with_nulls(spark, 700, 3)
    assert_exports_as_spark(spark, a.unionByName(b))


def test_a_udfs_output(spark):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    label = F.udf(lambda s: None if s is None else s.upper(), StringType())
    df = with_nulls(spark, 2000, 2).select("ts", label("s").alias("label"), "f64")
    assert_exports_as_spark(spark, df)


def test_a_type_it_does_not_take_is_refused_naming_the_column(spark):
    df = spark.sql("select 1 as k, cast(2.5 as decimal(10, 2)) as price")
    with pytest.raises(SchemaError, match="'price'.*decimal"):
        jvm_export.export_columns(spark, df, ["k", "price"])
    with jvm_export.export_columns(spark, df, ["k"]) as got:  # a column not named is not looked at
        assert got.rows == 1


def test_an_unknown_column_is_named(spark):
    with pytest.raises(UnknownName, match="'nope'"):
        jvm_export.export_columns(spark, spark.range(3), ["id", "nope"])
    with pytest.raises(InvalidArgument):
        jvm_export.export_columns(spark, spark.range(3), ["id"], batch_rows=0)


def test_leaving_the_context_removes_the_directory(spark, tmp_path):
    with jvm_export.export_columns(spark, spark.range(10), ["id"], directory=str(tmp_path)) as got:
        assert os.path.dirname(got.directory) == str(tmp_path)
        assert all(os.path.isfile(f) for f in got.files)
    assert not os.path.exists(got.directory)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("key", ["k", "s"])
def test_fast_path_over_the_export_answers_as_spark(spark, key):
    """window_aggregate over the exported files of a join's output equals
    Spark's own groupBy(window) on the DataFrame: counts exactly, sums to rounding."""
    from pyspark.sql import functions as F

    events = spark.sql("""
        select timestamp_micros(1700000000000000 + id * 3331) as ts,
               case when id % 97 = 0 then null else cast(xxhash64(id) % 40 as int) end as k,
               concat('user-', cast(abs(xxhash64(id, 1)) % 300 as string)) as s,
               element_at(array('view', 'click', 'buy'), cast(id % 3 + 1 as int)) as event_type,
               cast(id % 20 as int) as ad_id,
               case when id % 11 = 0 then null else (id % 1000) / 10.0d end as price
        from range(0, 60000, 1, 3)""")
    ads = spark.range(0, 20).select(F.col("id").cast("int").alias("ad_id"))
    df = events.join(F.broadcast(ads), "ad_id")
    q = dict(time="ts", window="tumbling:10s", key=key, aggs=["count", "sum:price"],
             filter="event_type == 'view'")
    with jvm_export.export_columns(spark, df, ["ts", key, "event_type", "price"]) as got:
        ours = window_aggregate(spark, got.files, **q).toArrow()
    theirs = spark_window_aggregate(spark, df, **q).toArrow()
    order = [("window_start", "ascending"), (key, "ascending")]
    a, b = ours.sort_by(order).to_pylist(), theirs.sort_by(order).to_pylist()
    assert len(a) == len(b) > 100
    for x, y in zip(a, b):
        assert (x["window_start"], x["window_end"], x[key], x["count"]) == \
            (y["window_start"], y["window_end"], y[key], y["count"])
        assert (x["sum_price"] is None) == (y["sum_price"] is None)
        if x["sum_price"] is not None:
            assert math.isclose(x["sum_price"], y["sum_price"], rel_tol=1e-12)


def test_a_session_started_without_the_jar_gets_it_when_needed(tmp_path):
    """A user's own SparkSession (no spark.jars): load() adds the package's jar
    to the running driver and executors, and the export runs."""
    code = textwrap.dedent("""
        from pyspark.sql import SparkSession
        from slash.spark import jvm_export
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                 .getOrCreate())
        before = jvm_export.available(spark)
        with jvm_export.export_columns(spark, spark.range(0, 1000, 1, 3), ["id"]) as got:
            print(before, jvm_export.available(spark), got.rows, len(got.files))
        spark.stop()
    """)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "True", "1000", "3"]
