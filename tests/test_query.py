"""Queries end to end (filter, projection, window, aggregates by key columns)
through the Python API and through `slash run`, on 1, 2 and 4 executors,
against DuckDB on the same files; bad input caught before any work starts."""
from __future__ import annotations

import os
import subprocess
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash import errors
from slash.query import Query
from slash.runner import run
from slash.window import Session, Sliding, Tumbling


def make_files(tmp_path, nfiles=3, rows=6000, seed=1):
    """Time-ordered Parquet files with several row groups each."""
    rng = np.random.default_rng(seed)
    paths, t0 = [], 0
    for f in range(nfiles):
        t = t0 + np.sort(rng.integers(0, 20000, rows))
        t0 = int(t[-1]) + 1
        table = pa.table({
            "ts": pa.array(t, pa.int64()),
            "user": pa.array(rng.integers(0, 50, rows), pa.int64()),
            "region": pa.array(rng.choice(["eu", "us", "apac"], rows)),
            "kind": pa.array(rng.choice(["view", "click", "buy"], rows)),
            "price": pa.array(rng.integers(1, 400, rows).astype(np.float64) / 4),
            "qty": pa.array(rng.integers(-5, 20, rows), pa.int32()),
        })
        p = tmp_path / f"part{f}.parquet"
        pq.write_table(table, p, row_group_size=1000)
        paths.append(str(p))
    return paths


SQL_AGG = {"count": "count(*)", "sum": "sum({c})", "min": "min({c})", "max": "max({c})",
           "avg": "avg({c})"}


def duck(q: Query, paths) -> pa.Table:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW src AS SELECT * FROM read_parquet({list(paths)!r})")
    where = " AND ".join(
        f"{f.column} IN {tuple(f.value)!r}" if f.op == "in" else
        f"{f.column} {'=' if f.op == '==' else f.op} {f.value!r}" for f in q.filters) or "TRUE"
    keys = ", ".join(q.key)
    aggs = ", ".join(f"{SQL_AGG[a.kind].format(c=a.column)} AS {a.name}" for a in q.aggregates)
    w = q.window

    def start(col, n):
        return f"({col} - ((({col} % {n}) + {n}) % {n}))"

    if isinstance(w, Tumbling):
        sql = (f"SELECT {start(q.time, w.size_ms)} AS window_start, "
               f"{start(q.time, w.size_ms)} + {w.size_ms} AS window_end, {keys}, {aggs} "
               f"FROM src WHERE {where} GROUP BY ALL")
    elif isinstance(w, Sliding):
        sql = (f"WITH f AS (SELECT {start(q.time, w.slide_ms)} - j * {w.slide_ms} AS window_start, * "
               f"FROM src, range(0, {-(-w.size_ms // w.slide_ms)}) r(j) WHERE {where}) "
               f"SELECT window_start, window_start + {w.size_ms} AS window_end, {keys}, {aggs} "
               f"FROM f WHERE {q.time} < window_start + {w.size_ms} GROUP BY ALL")
    else:
        g = w.gap_ms
        sql = (f"WITH f AS (SELECT *, CASE WHEN {q.time} - lag({q.time}) OVER (PARTITION BY {keys} "
               f"ORDER BY {q.time}) <= {g} THEN 0 ELSE 1 END AS new FROM src WHERE {where}), "
               f"s AS (SELECT *, sum(new) OVER (PARTITION BY {keys} ORDER BY {q.time} "
               f"ROWS UNBOUNDED PRECEDING) AS sid FROM f) "
               f"SELECT min({q.time}) AS window_start, max({q.time}) + {g} AS window_end, {keys}, "
               f"{aggs} FROM s GROUP BY {keys}, sid")
    return con.sql(sql).to_arrow_table()


def same(got: pa.Table, want: pa.Table, q: Query) -> None:
    order = ["window_start", *q.key]

    def at(r):  # a null key sorts first
        return [(r[c] is not None, r[c] if r[c] is not None else 0) for c in order]

    g = sorted(got.to_pylist(), key=at)
    w = sorted(want.to_pylist(), key=at)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        assert a.keys() == b.keys()
        for c in b:
            if isinstance(b[c], float):
                assert a[c] == pytest.approx(b[c], rel=1e-9)
            else:
                assert a[c] == b[c], (c, a, b)


QUERIES = {
    "tumbling-filter": Query(time="ts", window="tumbling:2s", key="user",
                             aggregates=["count", "sum:price", "min:qty", "max:qty", "avg:price"],
                             filters=["kind == view"]),
    "sliding-in-filter": Query(time="ts", window="sliding:4s/1s", key="user",
                               aggregates=["count", "max:price"], filters=["kind in ('view', 'buy')",
                                                                           "price >= 10"]),
    "session-string-key": Query(time="ts", window="session:50ms", key="region",
                                aggregates=["count", "sum:qty"]),
    "composite-key": Query(time="ts", window="tumbling:5s", key=["region", "user"],
                           aggregates=["count", "avg:price"], filters=["qty != 0"]),
}


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("name", list(QUERIES))
def test_python_api_equals_duckdb(tmp_path, name, n, mode):
    paths = make_files(tmp_path)
    q = QUERIES[name]
    same(run(q, paths, executors=n, mode=mode), duck(q, paths), q)


def test_in_memory_table_source(tmp_path):
    paths = make_files(tmp_path, nfiles=1)
    q = QUERIES["tumbling-filter"]
    same(run(q, pq.read_table(paths[0]), executors=2), duck(q, paths), q)


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_slash_run_cli_equals_duckdb(tmp_path, n, mode):
    paths = make_files(tmp_path)
    out = tmp_path / "out.parquet"
    cmd = [sys.executable, "-m", "slash", "run", "--input", *paths, "--time", "ts",
           "--window", "tumbling:2s", "--key", "region,user", "--agg", "count", "--agg", "sum:price",
           "--agg", "min:qty", "--filter", "kind == click", "--executors", str(n), "--mode", mode,
           "--output", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "records" in r.stdout
    q = Query(time="ts", window="tumbling:2s", key=["region", "user"],
              aggregates=["count", "sum:price", "min:qty"], filters=["kind == click"])
    same(pq.read_table(out), duck(q, paths), q)


# ---- bad input: clear errors before any work, nothing partial written -------------
def run_cli(tmp_path, *extra):
    out = tmp_path / "bad.parquet"
    r = subprocess.run([sys.executable, "-m", "slash", "run", "--output", str(out), *extra],
                       capture_output=True, text=True, timeout=120)
    assert not out.exists(), "a failed run must not leave output behind"
    return r


@pytest.mark.parametrize("extra,message", [
    (["--filter", "colour == red"], "missing column 'colour'"),
    (["--agg", "sum:nope"], "missing column 'nope'"),
    (["--agg", "sum:kind"], "needs a numeric column"),
    (["--window", "tumbling:10 parsecs"], "window"),
    (["--window", "tumbling:-5s"], "> 0"),
    (["--key", "nobody"], "key column 'nobody' is missing"),
])
def test_cli_bad_query_named_before_work(tmp_path, extra, message):
    paths = make_files(tmp_path, nfiles=1, rows=100)
    base = {"--time": "ts", "--window": "tumbling:1s", "--key": "user", "--agg": "count"}
    args = ["--input", *paths]
    for k, v in base.items():
        if k not in extra:
            args += [k, v]
    r = run_cli(tmp_path, *args, *extra)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_file_with_different_schema_is_named(tmp_path):
    paths = make_files(tmp_path, nfiles=2, rows=100)
    odd = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"ts": [1, 2], "user": ["a", "b"]}), odd)
    r = run_cli(tmp_path, "--input", *paths, str(odd), "--time", "ts", "--window", "tumbling:1s",
                "--key", "user", "--agg", "count")
    assert r.returncode == 2
    assert "odd.parquet" in r.stderr and "differs" in r.stderr


def test_missing_input_path_is_named(tmp_path):
    with pytest.raises(errors.UnknownName, match="does not exist"):
        run(QUERIES["tumbling-filter"], str(tmp_path / "nowhere.parquet"), executors=1)


def test_bad_specs_are_invalid_arguments():
    with pytest.raises(errors.InvalidArgument, match="OP"):
        Query(time="t", window="tumbling:1s", key="k", filters=["price ~ 3"])
    with pytest.raises(errors.InvalidArgument, match="aggregate"):
        Query(time="t", window="tumbling:1s", key="k", aggregates=["median:x"])
    with pytest.raises(errors.InvalidArgument, match="window"):
        Query(time="t", window="hopping:1s", key="k")


@pytest.mark.parametrize("spec", ["ev == 'view'", "ev != 'view'", "ev in ('view', 'buy')",
                                  "ev in ('view', 'buy', 'click')", "ev == 'none'",
                                  "plain == 'buy'", "x > 5", "x in (1, 2)"])
@pytest.mark.parametrize("nulls", [False, True])
def test_filter_selection_drops_exactly_the_rows_the_filter_drops(spec, nulls):
    from slash.query import Filter

    rng = np.random.default_rng(7)
    words = np.array(["view", "buy", "click"])[rng.integers(0, 3, 5000)].tolist()
    xs = rng.integers(0, 10, 5000).tolist()
    if nulls:
        for i in range(0, 5000, 7):
            words[i] = None
            xs[i] = None
    batch = pa.record_batch({"ev": pa.array(words).dictionary_encode(), "plain": pa.array(words),
                             "x": pa.array(xs, pa.int64())})
    f = Filter.parse(spec)
    skip = f.skip(batch)
    assert skip.dtype == np.bool_ and len(skip) == 5000
    assert np.array_equal(skip, ~f.mask(batch).to_numpy(zero_copy_only=False))


def test_prepare_selected_feeds_the_same_rows_as_prepare():
    q = Query(time="t", window="tumbling:10s", key="k", aggregates=["count", "sum:x"],
              filters=["ev == 'view'", "x >= 3"])
    rng = np.random.default_rng(3)
    batch = pa.record_batch({"t": pa.array(rng.integers(0, 10**5, 4000), pa.int64()),
                             "k": pa.array(rng.integers(0, 50, 4000), pa.int64()),
                             "ev": pa.array(np.array(["view", "buy"])[rng.integers(0, 2, 4000)])
                             .dictionary_encode(),
                             "x": pa.array(rng.integers(0, 9, 4000), pa.int64())})
    full, skip = q.prepare_selected(batch)
    assert skip is not None and full.num_rows == 4000
    assert full.filter(pa.array(~skip)).equals(q.prepare(batch))
    # a null in a column the executor reads stays a selection: the executor takes nulls
    with_null = batch.set_column(3, "x", pa.array([None] + batch.column(3).to_pylist()[1:], pa.int64()))
    b, skip = q.prepare_selected(with_null)
    assert skip is not None and b.filter(pa.array(~skip)).equals(q.prepare(with_null))


@pytest.mark.parametrize("dictionary", [False, True])
def test_prepare_selected_with_one_string_key_is_a_selection_of_the_same_rows(dictionary):
    q = Query(time="t", window="tumbling:10s", key="u", aggregates=["count", "sum:x"],
              filters=["ev == 'view'"])
    rng = np.random.default_rng(5)
    users = [None if i % 11 == 0 else f"user-{k}" for i, k in enumerate(rng.integers(0, 300, 4000))]
    u = pa.array(users, pa.large_string())
    batch = pa.record_batch({"t": pa.array(rng.integers(0, 10**5, 4000), pa.int64()),
                             "u": u.dictionary_encode() if dictionary else u,
                             "ev": pa.array(np.array(["view", "buy"])[rng.integers(0, 2, 4000)]),
                             "x": pa.array(rng.integers(0, 9, 4000), pa.int64())})
    full, skip = q.prepare_selected(batch)
    assert skip is not None and full.num_rows == 4000
    assert full.filter(pa.array(~skip)).equals(q.prepare(batch))


def test_string_key_longer_than_a_key_may_be_in_a_row_the_filter_drops_is_never_folded(tmp_path):
    from slash.limits import KEY_MAX_BYTES

    q = Query(time="ts", window="tumbling:1s", key="user", aggregates=["count", "sum:price"],
              filters=["kind == 'view'"])
    table = pa.table({"ts": pa.array([0, 10, 20, 1500], pa.int64()),
                      "user": ["a", "x" * (KEY_MAX_BYTES + 1), "a", "b"],
                      "kind": ["view", "buy", "view", "view"],
                      "price": [1.0, 2.0, 3.0, 4.0]})
    b, skip = q.prepare_selected(table.to_batches()[0])
    assert skip is None and b.num_rows == 3  # filtered as prepare() filters, not a selection
    pq.write_table(table, tmp_path / "long.parquet")
    same(run(q, table, executors=2), duck(q, [str(tmp_path / "long.parquet")]), q)


def test_many_string_keys_with_nulls_under_a_filter_equal_duckdb(tmp_path):
    """200 k rows over 50 k string keys (some null) and 4 windows: a state
    past the size at which the fold prefetches, the filter a selection."""
    rng = np.random.default_rng(11)
    n = 200_000
    codes = rng.integers(0, 50_000, n)
    users = pa.array([f"user-{k}" for k in codes], pa.large_string())
    users = pa.compute.if_else(pa.array(codes % 97 == 0), pa.nulls(n, pa.large_string()), users)
    table = pa.table({"ts": pa.array(np.sort(rng.integers(0, 4000, n)), pa.int64()),
                      "user": users,
                      "kind": pa.array(np.array(["view", "click", "buy"])[rng.integers(0, 3, n)]),
                      "price": pa.array(rng.integers(1, 400, n) / 4)})
    path = str(tmp_path / "many.parquet")
    pq.write_table(table, path, row_group_size=50_000)
    q = Query(time="ts", window="tumbling:1s", key="user", aggregates=["count", "sum:price"],
              filters=["kind == 'view'"])
    got = run(q, path, executors=2)
    assert got.column("user").null_count > 0
    same(got, duck(q, [path]), q)


def test_null_times_are_in_no_window_counted_and_warned(caplog):
    import logging

    t = pa.table({"t": pa.array([1, None, 2, None, 15_000], pa.int64()), "k": [1, 1, 2, 2, 1]})
    m = {}
    with caplog.at_level(logging.WARNING, logger="slash.runner"):
        out = run(Query(time="t", window="tumbling:10s", key="k"), t, executors=2, metrics=m)
    assert m["null_time_records"] == 2 and m["late_records"] == 0
    assert any("2 record(s) have a null time 't'" in r.getMessage() for r in caplog.records)
    assert sorted(zip(out["window_start"].to_pylist(), out["k"].to_pylist(), out["count"].to_pylist())) \
        == [(0, 1, 1), (0, 2, 1), (10_000, 1, 1)]


def test_reserved_key_value_error_names_the_key_column_and_no_state_option(tmp_path):
    path = str(tmp_path / "k.parquet")
    pq.write_table(pa.table({"t": pa.array([1, 2], pa.int64()),
                             "user": pa.array([-2 ** 63, None], pa.int64())}), path)
    with pytest.raises(errors.SchemaError) as e:
        run(Query(time="t", window="tumbling:10s", key="user"), path, executors=1)
    assert "key column 'user'" in str(e.value) and "key_nullable" not in str(e.value)
