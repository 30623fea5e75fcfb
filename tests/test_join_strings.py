"""String and binary payload columns (and long string keys) in window joins:
each NYC-style flight joined with its origin's weather of the same hour,
keeping strings, against DuckDB's join of the same Parquet files: nulls,
empty strings, non-ASCII and long values come back as they went in, through
one and two executors, both modes, both transports, a checkpoint restart, a
live rescale, the CLI and slash.spark.window_join; values longer than the
declared width and keys longer than the limit are refused naming the user's
column."""
from __future__ import annotations

import functools
import subprocess
import sys
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import slash
from slash import errors
from slash.executor import GroupConfig
from slash.join import JoinBackend
from slash.limits import JOIN_KEY_MAX_BYTES
from slash.query import JoinQuery, payload_words
from slash.runner import run
from slash.sources import FileSource, GeneratorSource

from test_live_scale_join import scaled_join

HOUR = 3_600_000
ORIGINS = ["JFK", "LGA", "EWR", "Zürich"]
CARRIERS = ["UA", "AA", "", "Ünïcødé ✈", None, "B6" * 15]
TAILS = [b"\x00\xff", b"", None, b"N123"]
CONDS = ["clear", None, "", "nieve ❄", "x" * 60]
NEEDS_OFI = pytest.mark.skipif(not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)")


def flights(seed: int, n: int, hours: int = 6) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "origin": pa.array(rng.choice(ORIGINS, n)),
        "ts": pa.array(np.sort(rng.integers(0, hours * HOUR, n)), pa.int64()),
        "carrier": pa.array([CARRIERS[i] for i in rng.integers(0, len(CARRIERS), n)], pa.string()),
        "tail": pa.array([TAILS[i] for i in rng.integers(0, len(TAILS), n)], pa.binary()),
        "delay": pa.array(rng.normal(size=n))})


def weather(seed: int, n: int, hours: int = 6) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "origin": pa.array(rng.choice(ORIGINS, n)),
        "ts": pa.array(np.sort(rng.integers(0, hours * HOUR, n)), pa.int64()),
        "cond": pa.array([CONDS[i] for i in rng.integers(0, len(CONDS), n)], pa.string()),
        "temp": pa.array(rng.normal(size=n))})


def duck_hourly(left: str, right: str) -> list:
    """The same join in SQL: flights with the weather of the same hour and origin."""
    return rows(duckdb.sql(f"""
        SELECT l.ts // {HOUR} * {HOUR} AS window_start, l.ts // {HOUR} * {HOUR} + {HOUR} AS window_end,
               l.origin, l.ts AS left_ts, l.carrier AS left_carrier, l.tail AS left_tail,
               l.delay AS left_delay, r.ts AS right_ts, r.cond AS right_cond, r.temp AS right_temp
        FROM read_parquet('{left}') l JOIN read_parquet('{right}') r
          ON l.origin = r.origin AND l.ts // {HOUR} = r.ts // {HOUR}""").to_arrow_table())


COLS = ["window_start", "window_end", "origin", "left_ts", "left_carrier", "left_tail", "left_delay",
        "right_ts", "right_cond", "right_temp"]


def rows(t: pa.Table) -> list:
    t = t.select(COLS)
    return sorted((tuple(r.values()) for r in t.to_pylist()), key=repr)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("joinstr")
    lp, rp = str(d / "flights.parquet"), str(d / "weather.parquet")
    pq.write_table(flights(1, 3000), lp, row_group_size=500)
    pq.write_table(weather(2, 150), rp, row_group_size=50)
    want = duck_hourly(lp, rp)
    assert len(want) > 10_000
    return lp, rp, want


def hourly(**kw) -> JoinQuery:
    return JoinQuery(time="ts", window="tumbling:1h", on="origin", string_bytes=64, **kw)


@pytest.mark.parametrize("n,mode,transport", [
    (1, "slash", "shm"), (2, "slash", "shm"), (2, "repartition", "shm"),
    pytest.param(2, "slash", "ofi:tcp", marks=NEEDS_OFI)])
def test_string_and_binary_payloads_join_as_duckdb_joins_them(files, n, mode, transport):
    lp, rp, want = files
    got = run(hourly(), (lp, rp), executors=n, mode=mode, transport=transport)
    assert got.schema.field("left_carrier").type == pa.string()
    assert got.schema.field("left_tail").type == pa.binary()
    g = rows(got)
    assert g == want
    carriers = {r[4] for r in g}
    assert {None, "", "Ünïcødé ✈", "B6" * 15} <= carriers  # nulls, empty, non-ASCII, 30 bytes
    assert {None, b""} <= {r[5] for r in g}


def test_a_value_longer_than_string_bytes_is_refused_naming_its_column(files):
    lp, rp, _ = files
    with pytest.raises(errors.SchemaError, match=r"right payload column 'cond'.*60 bytes.*string_bytes=32"):
        run(JoinQuery(time="ts", window="tumbling:1h", on="origin"), (lp, rp), executors=1)


def test_strings_of_hundreds_of_bytes_join_at_a_larger_string_bytes(tmp_path):
    rng = np.random.default_rng(5)
    lp, rp = str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")
    notes = ["é" * 200, "z" * 400, "", None, "ok"]  # "é" * 200 is 400 bytes of UTF-8
    pq.write_table(pa.table({"k": rng.integers(0, 20, 800), "ts": np.sort(rng.integers(0, 10_000, 800)),
                             "note": pa.array([notes[i] for i in rng.integers(0, 5, 800)])}), lp)
    pq.write_table(pa.table({"k": rng.integers(0, 20, 300), "ts": np.sort(rng.integers(0, 10_000, 300)),
                             "v": rng.integers(0, 9, 300)}), rp)
    got = run(JoinQuery(time="ts", window="tumbling:1s", on="k", string_bytes=400), (lp, rp),
              executors=2)
    want = duckdb.sql(f"SELECT l.k, l.ts, l.note, r.ts, r.v FROM read_parquet('{lp}') l JOIN "
                      f"read_parquet('{rp}') r ON l.k = r.k AND l.ts // 1000 = r.ts // 1000").fetchall()
    cols = ["k", "left_ts", "left_note", "right_ts", "right_v"]
    g = sorted((tuple(r[c] for c in cols) for r in got.to_pylist()), key=repr)
    assert len(g) > 1000 and g == sorted(want, key=repr)
    assert "z" * 400 in {r[2] for r in g} and "é" * 200 in {r[2] for r in g}


def test_a_payload_wider_than_a_row_holds_is_refused_naming_the_side():
    q = JoinQuery(time="ts", window="tumbling:1h", on="origin", string_bytes=300)
    wide = flights(1, 1).schema
    with pytest.raises(errors.SchemaError, match=r"left input: the payload .* words of 8 bytes.*"
                                                 r"string_bytes=300"):
        q.check(wide, weather(2, 1).schema)
    with pytest.raises(errors.InvalidArgument, match="string_bytes must be an int"):
        JoinQuery(time="ts", window="tumbling:1h", on="origin", string_bytes=0)


def test_the_join_state_counts_the_bytes_of_string_payloads():
    """A row of a string column costs its declared width in the state's
    log (and so in memory_bytes), whatever the value's length."""
    left, right = flights(3, 2000), weather(4, 10)
    used = {}
    for width in (32, 240):
        q = JoinQuery(time="ts", window="tumbling:1h", on="origin", string_bytes=width,
                      left_columns=["carrier"], right_columns=[])
        with JoinBackend(q.join_config(left.schema, right.schema)) as jb:
            jb.update_batch("left", q.prepare("left", left.to_batches()[0], left.schema))
            used[width] = jb.stats()["log_bytes"]
    extra = 8 * (payload_words(240) - payload_words(32))
    assert used[240] - used[32] >= 2000 * extra


def test_dictionary_encoded_string_payloads_come_back_in_their_type():
    left = pa.table({"k": [1, 1, 2], "ts": [1, 2, 3],
                     "c": pa.array(["ä", None, ""]).dictionary_encode()})
    right = pa.table({"k": [1, 2], "ts": [4, 5], "v": [10, 20]})
    q = JoinQuery(time="ts", window="tumbling:1s", on="k")
    with JoinBackend(q.join_config(left.schema, right.schema)) as jb:
        for side, t in (("left", left), ("right", right)):
            jb.update_batch(side, q.prepare(side, t.to_batches()[0], t.schema))
        out = q.finalize(pa.Table.from_batches([jb.emit(1000)]), left.schema, right.schema)
    assert out.schema.field("left_c").type == left.schema.field("c").type
    assert sorted(((r["k"], r["left_c"], r["right_v"]) for r in out.to_pylist()), key=repr) == \
        sorted([(1, "ä", 10), (1, None, 10), (2, "", 20)], key=repr)


def test_a_string_key_longer_than_the_state_backends_64_bytes_is_joined(tmp_path):
    lp, rp = str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet")
    keys = ["k" * JOIN_KEY_MAX_BYTES, "ö" * 100, "short"]  # 255, 200 and 5 bytes
    pq.write_table(pa.table({"name": keys, "ts": [1, 2, 3], "a": ["x", None, ""]}), lp)
    pq.write_table(pa.table({"name": keys * 2, "ts": [4, 5, 6, 7, 8, 9], "b": [1, 2, 3, 4, 5, 6]}), rp)
    got = run(JoinQuery(time="ts", window="tumbling:1s", on="name"), (lp, rp), executors=2)
    assert sorted((r["name"], r["left_a"], r["right_b"]) for r in got.to_pylist()) == sorted(
        [(keys[0], "x", 1), (keys[0], "x", 4), (keys[1], None, 2), (keys[1], None, 5),
         (keys[2], "", 3), (keys[2], "", 6)], key=repr)


def test_a_key_longer_than_the_join_limit_is_refused_naming_the_users_column(tmp_path):
    lp = str(tmp_path / "l.parquet")
    pq.write_table(pa.table({"name": ["k" * (JOIN_KEY_MAX_BYTES + 1)], "ts": [1], "a": [1]}), lp)
    with pytest.raises(errors.SchemaError, match=rf"key column 'name'.*{JOIN_KEY_MAX_BYTES + 1} bytes"):
        run(JoinQuery(time="ts", window="tumbling:1s", on="name"), (lp, lp), executors=1)


def test_slash_run_join_cli_keeps_strings(files, tmp_path):
    lp, rp, want = files
    out = tmp_path / "joined.parquet"
    r = subprocess.run([sys.executable, "-m", "slash", "run", "--join", "--left", lp, "--right", rp,
                        "--on", "origin", "--time", "ts", "--window", "tumbling:1h",
                        "--string-bytes", "64", "--executors", "2", "--output", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert rows(pq.read_table(out)) == want


# -- a checkpoint restart and a live rescale ---------------------------------------------

BATCHES, ROWS = 24, 300
SCHEMA = {"left": pa.schema([("t", pa.int64()), ("k", pa.string()), ("s", pa.string())]),
          "right": pa.schema([("t", pa.int64()), ("k", pa.string()), ("b", pa.binary())])}
WORDS = ["", None, "Grüße", "a" * 40, "✈✈"]


def _batch(side: str, rank: int, i: int) -> pa.RecordBatch:
    rng = np.random.default_rng([0 if side == "left" else 1, rank, i])
    t = i * 500 + (0 if side == "left" else 250) + np.sort(rng.integers(0, 250, ROWS))
    vals = [WORDS[j] for j in rng.integers(0, len(WORDS), ROWS)]
    if side == "right":
        vals = [None if v is None else v.encode() for v in vals]
    return pa.record_batch([pa.array(t), pa.array([f"key-{k}" for k in rng.integers(0, 500, ROWS)]),
                            pa.array(vals, SCHEMA[side].field(2).type)], schema=SCHEMA[side])


def _make(side: str, rank: int, n: int, pace: float = 0.02):
    for i in range(BATCHES):
        time.sleep(pace)
        yield _batch(side, rank, i)


def _sources():
    return (GeneratorSource(functools.partial(_make, "left"), SCHEMA["left"]),
            GeneratorSource(functools.partial(_make, "right"), SCHEMA["right"]))


def test_string_payloads_survive_a_checkpoint_restart(tmp_path, monkeypatch):
    q = JoinQuery(time="t", window="tumbling:2s", on="k", lateness="1s", string_bytes=48)
    con = duckdb.connect()
    con.register("lhs", pa.Table.from_batches([b for r in range(2) for b in _make("left", r, 2, 0)]))
    con.register("rhs", pa.Table.from_batches([b for r in range(2) for b in _make("right", r, 2, 0)]))
    want = sorted(con.sql("SELECT l.k, l.t, l.s, r.t, r.b FROM lhs l JOIN rhs r "
                          "ON l.k = r.k AND l.t // 2000 = r.t // 2000").fetchall(), key=repr)
    monkeypatch.setenv("SLASH_TEST_KILL", "1:20:0:1")
    m = {}
    got = run(q, _sources(), executors=2, checkpoint=str(tmp_path / "ck"), checkpoint_every="4 batches",
              metrics=m, group=GroupConfig(epoch_ms=10, lateness="1s"))
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["from_checkpoint"] is not None
    cols = ["k", "left_t", "left_s", "right_t", "right_b"]
    g = sorted((tuple(r[c] for c in cols) for r in got.to_pylist()), key=repr)
    assert len(g) == len(want) > 500
    assert g == want


def test_string_payloads_survive_a_live_rescale(files, tmp_path):
    """Scaled 1 -> 2 -> 1 while both inputs stream: the partitions (their
    string rows) are handed over between the ranks, and the pairs are DuckDB's."""
    lp, rp, want = files
    total = pq.ParquetFile(lp).metadata.num_rows + pq.ParquetFile(rp).metadata.num_rows
    out, m, done = scaled_join(None, hourly(), str(tmp_path / "c.sock"), ["scale-out", "scale-in"], 7,
                               rate=1_500, total=total,
                               sources=(FileSource(lp, time="ts"), FileSource(rp, time="ts")))
    assert [d["executors"] for d in done] == [2, 1]
    assert m["late_records"] == 0
    assert rows(out) == want


def test_spark_window_join_keeps_strings(spark, files):
    from slash.spark import window_join
    lp, rp, want = files
    got = window_join(spark, lp, rp, on="origin", time="ts", window="tumbling:1h",
                      executors=2, string_bytes=64)
    g = sorted((tuple(r[c] for c in COLS) for r in got.collect()), key=repr)
    # Spark gives binary as bytearray
    assert [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in g] == want
