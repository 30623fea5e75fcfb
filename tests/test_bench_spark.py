"""``slash bench spark --layout``: the option parses, and the spanning layout
holds the ordered file's records dealt across part files that each span the
whole time range (no timings here: benchmarks are not timed tests)."""
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.bench import spark as bench_spark
from slash.cli import build_parser
from slash.errors import InvalidArgument

RECORDS = 6000


def _parse(*argv):
    return build_parser(["bench", "spark", *argv]).parse_args(["bench", "spark", *argv])


def test_layout_option_defaults_to_ordered_and_accepts_spanning():
    assert _parse().layout == "ordered"
    assert _parse("--layout", "spanning").layout == "spanning"


def test_unknown_layout_is_refused(capsys):
    with pytest.raises(SystemExit):
        _parse("--layout", "sideways")
    assert "--layout" in capsys.readouterr().err
    with pytest.raises(InvalidArgument, match="layout"):
        bench_spark.SparkBenchConfig(layout="sideways")


def test_layouts_get_different_data_names():
    a = bench_spark.SparkBenchConfig(records=RECORDS, layout="ordered")
    b = bench_spark.SparkBenchConfig(records=RECORDS, layout="spanning")
    assert bench_spark.data_name(a).startswith("ysb-nn-") and bench_spark.data_name(a).endswith(".parquet")
    assert bench_spark.data_name(b).startswith("ysb-nn-")
    assert bench_spark.data_name(a) != bench_spark.data_name(b)


def test_spanning_layout_holds_the_ordered_records_in_part_files_spanning_the_time_range(tmp_path):
    ordered = bench_spark.SparkBenchConfig(records=RECORDS, keys=50, row_group=1000)
    spanning = bench_spark.SparkBenchConfig(records=RECORDS, keys=50, row_group=1000, layout="spanning")
    one = bench_spark.make_data(str(tmp_path / bench_spark.data_name(ordered)), ordered)
    d = bench_spark.make_data(str(tmp_path / bench_spark.data_name(spanning)), spanning)
    assert os.path.isdir(d)
    files = sorted(os.listdir(d))
    assert len(files) == bench_spark.SPANNING_FILES and all(f.endswith(".parquet") for f in files)
    want = pq.read_table(one)
    t_all = want.column("event_time").to_numpy()
    parts = []
    for f in files:
        pf = pq.ParquetFile(os.path.join(d, f))
        assert pf.metadata.num_row_groups == RECORDS // 1000, f
        part = pf.read()
        t = part.column("event_time").to_numpy()
        # each part spans the whole time range (to within a few events)
        assert t.min() - t_all.min() < 20 and t_all.max() - t.max() < 20, f
        assert 0.4 * RECORDS < part.num_rows < 0.6 * RECORDS
        parts.append(part)
    def decoded(t):
        return pa.table({c: (t.column(c).cast(t.column(c).type.value_type)
                             if pa.types.is_dictionary(t.column(c).type) else t.column(c))
                         for c in t.column_names})

    got, want = decoded(pa.concat_tables(parts)), decoded(want)
    order = [(c, "ascending") for c in want.column_names]
    assert got.sort_by(order).equals(want.sort_by(order))
    assert not any(n.startswith(os.path.basename(d) + ".tmp") for n in os.listdir(tmp_path))


# --- --workload count and --consume ------------------------------------------

def test_workload_and_consume_options_default_to_ysb_and_none():
    args = _parse()
    assert args.workload == "ysb" and args.consume == ["none"]
    args = _parse("--workload", "count", "--consume", "spark", "arrow")
    assert args.workload == "count" and args.consume == ["spark", "arrow"]


def test_unknown_consume_mode_is_refused(capsys):
    with pytest.raises(SystemExit):
        _parse("--consume", "pandas")
    assert "--consume" in capsys.readouterr().err
    with pytest.raises(InvalidArgument, match="consume"):
        bench_spark.SparkBenchConfig(consume=("pandas",))
    with pytest.raises(InvalidArgument, match="consume"):
        bench_spark.SparkBenchConfig(consume=())


def test_count_workload_refuses_a_skewed_or_spanning_layout():
    with pytest.raises(InvalidArgument, match="dist='zipf:1.5'"):
        bench_spark.SparkBenchConfig(workload="count", dist="zipf:1.5")
    with pytest.raises(InvalidArgument, match="layout='spanning'"):
        bench_spark.SparkBenchConfig(workload="count", layout="spanning")


def test_count_workload_data_is_two_files_of_sorted_ts_and_k(tmp_path):
    cfg = bench_spark.SparkBenchConfig(records=RECORDS, workload="count", keys=7)
    paths = bench_spark.make_data(str(tmp_path / bench_spark.data_name(cfg)), cfg)
    assert len(paths) == bench_spark.COUNT_FILES
    t = pa.concat_tables([pq.read_table(p) for p in paths])
    assert t.num_rows == RECORDS and t.column_names == ["ts", "k"]
    ts = t.column("ts").to_numpy()
    assert (ts[1:] >= ts[:-1]).all() and 0 <= ts.min() and ts.max() < bench_spark.COUNT_SPAN_MS
    assert set(t.column("k").to_pylist()) == set(range(7))
    assert bench_spark.query_of(cfg)["key"] == "k"


@pytest.mark.slow
def test_count_workload_times_each_consume_mode_and_checks_the_answer(tmp_path):
    pytest.importorskip("pyspark")
    cfg = bench_spark.SparkBenchConfig(records=20_000, workload="count", repeat=1, warmup=0,
                                       warmup_seconds=0.0, consume=("spark", "arrow"))
    out = bench_spark.run_all([cfg], data_dir=str(tmp_path), driver_memory="1g")
    run = out["runs"][0]
    t = pa.concat_tables([pq.read_table(p) for p in sorted(tmp_path.rglob("part-*.parquet"))])
    groups = {(ts // 10_000, k) for ts, k in zip(t.column("ts").to_pylist(), t.column("k").to_pylist())}
    assert out["all_verified"] and run["result_rows"] == len(groups)
    assert set(run["modes"]) == {"spark", "arrow"}
    assert all(m["slash_seconds"] > 0 and m["spark_seconds"] > 0 for m in run["modes"].values())
    assert "consumed spark" in bench_spark.summary(run) and "consumed arrow" in bench_spark.summary(run)


@pytest.mark.slow
def test_the_in_spark_consumer_keeps_sparks_grouping(tmp_path):
    """agg(sum(count)) alone lets Spark's optimizer drop the window grouping
    (sum(1) over the scan); the bench's consumer must not."""
    pytest.importorskip("pyspark")
    from pyspark.sql import functions as F

    from slash.spark import session, spark_window_aggregate

    cfg = bench_spark.SparkBenchConfig(records=2000, workload="count", keys=5)
    paths = bench_spark.make_data(str(tmp_path / "d"), cfg)
    spark = session("local[2]", "slash-bench-consumer-test")
    try:  # stopped: getOrCreate in a later module on this worker would get this local[2]
        ref = spark_window_aggregate(spark, paths, **bench_spark.COUNT_QUERY)

        def optimized(df):
            return df._jdf.queryExecution().optimizedPlan().toString()

        assert "window" not in optimized(ref.agg(F.sum("count")))  # what the consumer avoids
        assert "Aggregate [window" in optimized(bench_spark.in_spark_query(ref))
        groups, total = bench_spark.in_spark_query(ref).collect()[0]
    finally:
        spark.stop()
    t = pa.concat_tables([pq.read_table(p) for p in paths])
    assert total == cfg.records
    assert groups == len({(ts // 10_000, k) for ts, k in zip(t.column("ts").to_pylist(),
                                                            t.column("k").to_pylist())})


@pytest.mark.slow
def test_a_dataframe_input_takes_the_fast_path_with_the_same_answer(tmp_path):
    """run.sh's main job: slash.spark handed spark.read.parquet of the files."""
    pytest.importorskip("pyspark")
    cfg = bench_spark.SparkBenchConfig(records=20_000, workload="count", repeat=1, warmup=0,
                                       warmup_seconds=0.0, input="dataframe")
    out = bench_spark.run_all([cfg], data_dir=str(tmp_path), driver_memory="1g")
    run = out["runs"][0]
    assert out["all_verified"] and run["fast_path"] and run["input"] == "dataframe"


def test_an_unknown_input_is_refused():
    with pytest.raises(InvalidArgument, match="input must be one of"):
        bench_spark.SparkBenchConfig(input="table")
