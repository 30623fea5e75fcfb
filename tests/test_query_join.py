"""Windowed joins end to end: JoinQuery through the Python API and `slash run
--join`, on 1 and 2 executors, against DuckDB (tumbling) and a direct
reference (session); bad joins named before any work starts."""
from __future__ import annotations

import subprocess
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash import errors
from slash.query import JoinQuery
from slash.runner import run

from test_join import rows_of, session_reference


def write_side(path, seed, n, nkeys, cols, span=20000):
    rng = np.random.default_rng(seed)
    data = {"id": pa.array(rng.integers(0, nkeys, n), pa.int64()),
            "ts": pa.array(np.sort(rng.integers(0, span, n)), pa.int64())}
    for name, kind in cols.items():
        data[name] = (pa.array(rng.integers(0, 10**6, n), pa.int64()) if kind == "int"
                      else pa.array(rng.integers(-400, 400, n) / 4.0))
    t = pa.table(data)
    pq.write_table(t, path, row_group_size=500)
    return t


def duck_join(left, right, size):
    con = duckdb.connect()
    con.register("l", left)
    con.register("r", right)
    return con.sql(f"""
        SELECT l.ts - l.ts % {size} AS window_start, l.ts - l.ts % {size} + {size} AS window_end,
               l.id AS id, l.ts AS left_ts, l.reserve AS left_reserve, r.ts AS right_ts,
               r.price AS right_price
        FROM l JOIN r ON l.id = r.id AND l.ts // {size} = r.ts // {size}""").to_arrow_table()


@pytest.fixture
def sides(tmp_path):
    lp, rp = tmp_path / "persons.parquet", tmp_path / "auctions.parquet"
    left = write_side(lp, 1, 2000, 60, {"reserve": "int"})
    right = write_side(rp, 2, 3000, 60, {"price": "float"})
    return str(lp), str(rp), left, right


@pytest.mark.parametrize("mode", ["slash", "repartition"])
@pytest.mark.parametrize("n", [1, 2])
def test_tumbling_join_equals_duckdb(sides, n, mode):
    lp, rp, left, right = sides
    got = run(JoinQuery(time="ts", window="tumbling:2s", on="id", lateness="1s"), (lp, rp),
              executors=n, mode=mode)
    want = duck_join(left, right, 2000)
    assert got.num_rows == want.num_rows > 0
    assert rows_of(got) == rows_of(want.select(got.column_names))


def test_session_join_equals_reference(tmp_path):
    lp, rp = tmp_path / "l.parquet", tmp_path / "r.parquet"
    left = write_side(lp, 3, 500, 10, {"a": "int", "x": "float"}, span=40000)
    right = write_side(rp, 4, 400, 10, {"b": "int"}, span=40000)
    got = run(JoinQuery(time="ts", window="session:400ms", on="id", lateness="1s",
                        left_columns=["a", "x"], right_columns=["b"]), (str(lp), str(rp)), executors=2)
    rename = {"id": "key", "ts": "time"}
    want = session_reference(left.rename_columns([rename.get(c, c) for c in left.column_names]),
                             right.rename_columns([rename.get(c, c) for c in right.column_names]), 400)
    assert len(want) > 0
    assert rows_of(got.rename_columns(["window_start", "window_end", "key", "left_a", "left_x",
                                       "right_b"])) == want


def test_slash_run_join_cli(sides, tmp_path):
    lp, rp, left, right = sides
    out = tmp_path / "joined.parquet"
    r = subprocess.run([sys.executable, "-m", "slash", "run", "--join", "--left", lp, "--right", rp,
                        "--on", "id", "--time", "ts", "--window", "tumbling:2s", "--lateness", "1s",
                        "--executors", "2", "--output", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    got = pq.read_table(out)
    assert rows_of(got) == rows_of(duck_join(left, right, 2000).select(got.column_names))


def test_unsupported_payload_is_named(tmp_path):
    lp, rp = tmp_path / "l.parquet", tmp_path / "r.parquet"
    pq.write_table(pa.table({"id": [1], "ts": [5], "tags": [[1, 2]]}), lp)
    pq.write_table(pa.table({"id": [1], "ts": [6], "v": [2]}), rp)
    with pytest.raises(errors.SchemaError, match="left input: join payload column 'tags'"):
        run(JoinQuery(time="ts", window="tumbling:1s", on="id"), (str(lp), str(rp)), executors=1)
    with pytest.raises(errors.SchemaError, match="left input: key column 'nope'"):
        run(JoinQuery(time="ts", window="tumbling:1s", on="nope", left_columns=[]),
            (str(rp), str(rp)), executors=1)
