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
