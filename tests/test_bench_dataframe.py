"""slash bench dataframe: its data has the issue's shape and each input's
answers are compared with Spark's own query on the same DataFrame."""
import pyarrow.parquet as pq
import pytest

from slash.bench import dataframe as bench_df
from slash.errors import InvalidArgument


def test_the_events_have_the_columns_and_key_counts_asked(tmp_path):
    cfg = bench_df.DataFrameBenchConfig(records=5000, keys=7, users=50)
    path = bench_df.write_events(str(tmp_path), cfg)
    t = pq.read_table(path)
    assert t.num_rows == 5000
    assert t.column_names == ["ts", "k", "user", "event_type", "ad_id", "price"]
    assert len(set(t.column("k").to_pylist())) == 7 and len(set(t.column("user").to_pylist())) == 50
    assert set(t.column("event_type").to_pylist()) == {"view", "click", "purchase"}
    assert len(list((tmp_path).glob("events-*/part-*.parquet"))) == bench_df.FILES


def test_the_pandas_writer_keeps_the_rows_in_pandas_types(tmp_path):
    cfg = bench_df.DataFrameBenchConfig(records=3000, keys=7, users=50, writer="pandas")
    path = bench_df.write_events(str(tmp_path), cfg)
    out = bench_df.rewrite_events(None, path, cfg.writer)
    a, b = pq.read_table(path), pq.read_table(out)
    assert b.schema.field("user").type == "large_string"
    assert sorted(a.to_pylist(), key=repr) == sorted(b.cast(a.schema).to_pylist(), key=repr)


def test_an_unknown_writer_is_refused():
    with pytest.raises(InvalidArgument, match="writer must be one of"):
        bench_df.DataFrameBenchConfig(writer="excel")


def test_unknown_inputs_and_key_kinds_are_refused():
    with pytest.raises(InvalidArgument, match="inputs must be among"):
        bench_df.DataFrameBenchConfig(inputs=("table",))
    with pytest.raises(InvalidArgument, match="inputs must be among"):
        bench_df.DataFrameBenchConfig(key_kinds=("float",))


@pytest.mark.slow
def test_every_input_gives_sparks_answer_and_says_its_path(tmp_path):
    pytest.importorskip("pyspark")
    cfg = bench_df.DataFrameBenchConfig(records=20_000, users=300, repeat=1, warmup=0)
    out = bench_df.run_all(cfg, str(tmp_path), driver_memory="1g")
    assert out["all_verified"]
    routes = {(r["input"], r["key"]): r["route"] for r in out["runs"]}
    assert routes[("scan", "string")] == "scan" and routes[("path", "int")] == "files"
    assert routes[("join", "int")] == "scan-join"  # the broadcast side joined by the executors
    assert routes[("union", "string")] == "scan"  # each input's files under its own filter
    assert all(r["ratio"] > 0 for r in out["runs"])
