"""UnionFileSource: the files of a union's inputs read as one source, each
file's rows under its own input's filters. Its rows are DuckDB's UNION ALL
of the inputs' filtered rows (a file two inputs read counted once per
input, nulls passing no filter), whatever the split; files written apart
(other column order, extra columns, large_string) read as one table when
only the columns read must agree."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

duckdb = pytest.importorskip("duckdb")

from slash.errors import SchemaError  # noqa: E402
from slash.filters import Filter  # noqa: E402
from slash.sources import FileSource, UnionFileSource, Watermark  # noqa: E402
from slash.sources.union import KEEPS, keeps_filter  # noqa: E402

N = 3000


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two files: ``a`` as Spark orders its columns, ``b`` with the columns in
    another order, an extra column and a large_string user (as pandas writes)."""
    rng = np.random.default_rng(5)
    d = tmp_path_factory.mktemp("union")
    out = {}
    for name in ("a", "b"):
        users = np.array([f"u{x}" for x in rng.integers(0, 30, N)], dtype=object)
        users[rng.random(N) < 0.05] = None
        t = pa.table({"ts": pa.array(np.sort(rng.integers(0, 100_000, N)), pa.int64()),
                      "user": pa.array(list(users), pa.large_string() if name == "b" else pa.string()),
                      "qty": pa.array(rng.integers(0, 9, N), mask=rng.random(N) < 0.05)})
        if name == "b":
            t = t.select(["qty", "user", "ts"]).append_column("junk", pa.array(rng.random(N)))
        path = str(d / f"{name}.parquet")
        pq.write_table(t, path, row_group_size=400)
        out[name] = path
    return out


def read_all(src, n=1):
    got = [item for r in range(n) for item in src.read(r, n, columns=["ts", "user", "qty"])
           if not isinstance(item, Watermark)]
    return sorted((tuple(r.values()) for b in got for r in b.to_pylist()), key=repr)


def reference(sql):
    return sorted(duckdb.sql(sql).fetchall(), key=repr)


@pytest.mark.parametrize("n", [1, 3])
def test_each_inputs_files_keep_the_rows_of_its_own_filters(files, n):
    src = UnionFileSource([([files["a"]], [Filter("qty", "<", 4)]),
                           ([files["b"], files["a"]], [Filter("user", ">=", "u2"),
                                                       Filter("qty", "!=", 7)])],
                          columns=["ts", "user", "qty"])
    want = reference(
        f"select ts, user, qty from '{files['a']}' where qty < 4 union all "
        f"select ts, user, qty from (select * from '{files['b']}' union all by name "
        f"select * from '{files['a']}') where user >= 'u2' and qty != 7")
    assert read_all(src, n) == want and want


def test_an_input_without_filters_keeps_every_row(files):
    src = UnionFileSource([([files["a"]], []), ([files["a"]], [Filter("user", "in", ("u1", "u3"))])],
                          columns=["ts", "user", "qty"])
    want = reference(f"select ts, user, qty from '{files['a']}' union all "
                     f"select ts, user, qty from '{files['a']}' where user in ('u1', 'u3')")
    assert read_all(src) == want


def test_files_agree_on_the_columns_read_alone(files):
    src = FileSource([files["a"], files["b"]], columns=["ts", "user", "qty"])
    assert src.schema.names == ["ts", "user", "qty"] and src.schema.field("user").type == pa.string()
    want = reference(f"select ts, user, qty from '{files['a']}' union all "
                     f"select ts, user, qty from '{files['b']}'")
    assert read_all(src, 2) == want


def test_files_that_differ_in_columns_read_are_refused_naming_the_file(files):
    with pytest.raises(SchemaError, match="b.parquet"):
        FileSource([files["a"], files["b"]])  # junk and the order differ: no columns= given
    with pytest.raises(SchemaError, match="'junk'"):
        FileSource([files["a"], files["b"]], columns=["ts", "junk"])


def test_a_filter_on_a_column_the_files_lack_is_refused_naming_it(files):
    with pytest.raises(SchemaError, match="'nope'"):
        UnionFileSource([([files["a"]], [Filter("nope", "==", 1)])], columns=["ts", "qty"])


def test_a_filter_only_column_read_as_a_dictionary_keeps_the_same_rows(files):
    f = Filter("user", "in", ("u1", "u2", "u7"))
    plain = FileSource([files["a"]])
    coded = FileSource([files["a"]], dictionary=["user"])
    assert pa.types.is_dictionary(coded.schema.field("user").type)
    for src in (plain, coded):
        f.check(src.schema)
    kept = [sorted(r for b in src.read(0, 1) if not isinstance(b, Watermark)
                   for r in zip(*(b.column(c).to_pylist() for c in ("ts", "qty")),
                                (~f.skip(b)).tolist()) if r[2])
            for src in (plain, coded)]
    assert kept[0] == kept[1] and kept[0]


def test_a_column_some_file_holds_as_large_string_is_not_read_as_a_dictionary(files):
    src = FileSource([files["a"], files["b"]], columns=["ts", "user"], dictionary=["user"])
    assert src.dictionary == [] and src.schema.field("user").type == pa.string()


# ---- each file decoded once; the inputs' verdict as a column the query selects by ----------
def two_inputs_of_a(files, overlapping):
    """Two inputs reading file ``a``: disjoint filters, or filters some rows pass both."""
    second = Filter("qty", ">=", 2 if overlapping else 4)
    return UnionFileSource([([files["a"]], [Filter("qty", "<", 4)]), ([files["a"]], [second])],
                           columns=["ts", "user", "qty"])


def test_a_file_several_inputs_read_is_one_run_of_units(files):
    src = two_inputs_of_a(files, overlapping=True)
    assert src.units == FileSource([files["a"]]).units and src.owners == {files["a"]: (0, 1)}


def verdict_rows(src, n=1):
    """The rows whose KEEPS is true, read with it as a column."""
    got = [b for r in range(n) for b in src.read(r, n, columns=["ts", "user", "qty", KEEPS])
           if not isinstance(b, Watermark)]
    assert got and all(b.schema.names[-1] == KEEPS and b.column(KEEPS).null_count == 0 for b in got)
    return sorted((r[:3] for b in got for r in zip(*(b.column(c).to_pylist() for c in b.schema.names))
                   if r[3]), key=repr)


@pytest.mark.parametrize("overlapping", [False, True])
def test_the_verdict_column_keeps_duckdbs_union_all_rows(files, overlapping):
    src = two_inputs_of_a(files, overlapping)
    low = 2 if overlapping else 4
    want = reference(f"select ts, user, qty from '{files['a']}' where qty < 4 union all "
                     f"select ts, user, qty from '{files['a']}' where qty >= {low}")
    assert verdict_rows(src, 3) == want == read_all(src, 3)


def test_rows_two_inputs_keep_come_in_one_batch_per_input_else_in_one(files):
    units = len(FileSource([files["a"]]).units)
    for overlapping, per_unit in ((False, 1), (True, 2)):
        src = two_inputs_of_a(files, overlapping)
        got = [b for b in src.read(0, 1, columns=["qty", KEEPS]) if not isinstance(b, Watermark)]
        assert len(got) == units * per_unit


def test_a_resumed_read_yields_the_rest_of_an_uninterrupted_one(files):
    src = two_inputs_of_a(files, overlapping=True)
    cols = ["ts", "qty", KEEPS]
    whole = list(src.read_from(0, 1, cols))
    for at in (3, 4):  # between the two inputs' batches of a unit, and after its last one
        pos = whole[at - 1][0]
        rest = list(src.read_from(0, 1, cols, start=pos))
        assert [(p, b.to_pydict()) for p, b in rest] == [(p, b.to_pydict()) for p, b in whole[at:]]


@pytest.mark.parametrize("overlapping", [False, True])
def test_a_query_filtering_on_the_verdict_folds_duckdbs_union_all(files, overlapping):
    from slash.query import Query
    from slash.runner import run

    src = two_inputs_of_a(files, overlapping)
    q = Query(time="ts", window="tumbling:10s", key="user", aggregates=["count", "sum:qty"],
              filters=["user != 'u7'", keeps_filter()])
    got = run(q, src, executors=2)
    low = 2 if overlapping else 4
    want = reference(
        f"select ts - ts % 10000, user, count(*), sum(qty) from (select * from '{files['a']}' "
        f"where qty < 4 union all select * from '{files['a']}' where qty >= {low}) "
        f"where user != 'u7' group by all")
    assert sorted(zip(*(got.column(c).to_pylist() for c in ("window_start", "user", "count",
                                                             "sum_qty"))), key=repr) == want


def test_files_holding_the_verdicts_column_name_are_refused(tmp_path):
    p = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"ts": [1], KEEPS: [True]}), p)
    with pytest.raises(SchemaError, match=KEEPS):
        UnionFileSource([([p], [])])
