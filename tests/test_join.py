"""JoinBackend results: the tumbling-window join against DuckDB's join on
window and key, the session-window join against a direct Python reference
(sessions over the union of both sides per key), split-and-merge through real
deltas equal to one store (hypothesis), memory, and bad input."""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slash import JoinBackend, JoinConfig, errors

LEFT = {"a": "int64", "x": "float64"}
RIGHT = {"b": "int64"}


def side_table(rng: np.random.Generator, n: int, nkeys: int, tspan: int, string_keys: bool,
               cols: dict, id_base: int) -> pa.Table:
    keys = rng.integers(-nkeys // 3, nkeys - nkeys // 3, n)
    data = {"key": pa.array([f"k{v}" for v in keys]) if string_keys else pa.array(keys, pa.int64()),
            "time": pa.array(rng.integers(-tspan, tspan, n), pa.int64())}
    for name, t in cols.items():
        if t == "int64":
            data[name] = pa.array(np.arange(id_base, id_base + n), pa.int64())  # row ids
        else:
            data[name] = pa.array(rng.integers(-1000, 1000, n) / 4.0)
    return pa.table(data)


def rows_of(batch_or_table) -> list:
    names = batch_or_table.schema.names
    cols = [batch_or_table.column(c).to_pylist() for c in names]
    return sorted(zip(*cols), key=lambda r: tuple(str(v) for v in r))


def duckdb_tumbling_join(left: pa.Table, right: pa.Table, size: int) -> pa.Table:
    con = duckdb.connect()
    con.register("l", left)
    con.register("r", right)
    return con.sql(f"""
        SELECT CAST(floor(l.time / {size}) * {size} AS BIGINT) AS window_start,
               CAST(floor(l.time / {size}) * {size} + {size} AS BIGINT) AS window_end,
               l.key AS key, l.a AS left_a, l.x AS left_x, r.b AS right_b
        FROM l JOIN r ON l.key = r.key AND floor(l.time / {size}) = floor(r.time / {size})
    """).to_arrow_table()


def session_reference(left: pa.Table, right: pa.Table, gap: int) -> list:
    """Per key, sort both sides' rows by time; a new session starts where
    the distance to the previous row is > gap (rows exactly gap apart share a
    session, as in Spark and Flink); every left x right pair of one session
    is a result row."""
    rows = [("L", k, t, (a, x)) for k, t, a, x in zip(*(left.column(c).to_pylist()
                                                     for c in ("key", "time", "a", "x")))]
    rows += [("R", k, t, (b,)) for k, t, b in zip(*(right.column(c).to_pylist()
                                                  for c in ("key", "time", "b")))]
    rows.sort(key=lambda r: (str(r[1]), r[2]))
    sessions, cur = [], []
    for r in rows:
        if cur and (r[1] != cur[-1][1] or r[2] - cur[-1][2] > gap):
            sessions.append(cur)
            cur = []
        cur.append(r)
    if cur:
        sessions.append(cur)
    out = []
    for s in sessions:
        ws, we = s[0][2], s[-1][2] + gap
        for l in (r for r in s if r[0] == "L"):
            for r in (r for r in s if r[0] == "R"):
                out.append((ws, we, l[1]) + l[3] + r[3])
    return sorted(out, key=lambda r: tuple(str(v) for v in r))


def run_store(cfg: JoinConfig, left: pa.Table, right: pa.Table, steps=(0, 2**62),
              chunk: int = 700) -> pa.Table:
    with JoinBackend(cfg) as jb:
        lb, rb = left.to_batches(max_chunksize=chunk), right.to_batches(max_chunksize=chunk)
        for i in range(max(len(lb), len(rb))):
            if i < len(lb):
                jb.update_batch("left", lb[i])
            if i < len(rb):
                jb.update_batch("right", rb[i])
        out = []
        for up_to in steps:
            b = jb.emit(up_to)
            assert all(e <= up_to for e in b.column("window_end").to_pylist())
            out.append(b)
        st_ = jb.stats()
        assert st_["groups"] == 0 and st_["left_rows"] == 0 and st_["right_rows"] == 0
        assert st_["late"] == 0
    return pa.Table.from_batches(out)


@pytest.mark.parametrize("key_type", ["int64", "string"])
@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("size", [50, 7])
def test_tumbling_join_against_duckdb(key_type, partitions, size):
    rng = np.random.default_rng(hash((key_type, partitions, size)) % 2**32)
    left = side_table(rng, 3000, 30, 1000, key_type == "string", LEFT, 0)
    right = side_table(rng, 2000, 30, 1000, key_type == "string", RIGHT, 10**6)
    cfg = JoinConfig(window=f"tumbling:{size}ms", key_type=key_type, left_columns=LEFT,
                     right_columns=RIGHT, partitions=partitions)
    got = run_store(cfg, left, right)
    assert got.schema.names == ["window_start", "window_end", "key", "left_a", "left_x", "right_b"]
    assert got.schema.field("left_x").type == pa.float64()
    want = duckdb_tumbling_join(left, right, size)
    assert want.num_rows > 300
    assert rows_of(got) == rows_of(want)


@pytest.mark.parametrize("key_type", ["int64", "string"])
@pytest.mark.parametrize("gap", [5, 30])
def test_session_join_against_reference(key_type, gap):
    rng = np.random.default_rng(gap * 7 + len(key_type))
    left = side_table(rng, 600, 8, 800, key_type == "string", LEFT, 0)
    right = side_table(rng, 500, 8, 800, key_type == "string", RIGHT, 10**6)
    cfg = JoinConfig(window=f"session:{gap}ms", key_type=key_type, left_columns=LEFT,
                     right_columns=RIGHT, partitions=2)
    got = run_store(cfg, left, right, steps=(-200, 100, 2**62), chunk=97)
    want = session_reference(left, right, gap)
    assert len(want) > 100
    assert rows_of(got) == want


def test_session_bridging_fuses_both_sides():
    cfg = JoinConfig(window="session:10ms", left_columns={"id": "int64"},
                     right_columns={"id": "int64"})
    with JoinBackend(cfg) as jb:
        jb.update_left([1], [0], {"id": [1]})
        jb.update_right([1], [15], {"id": [2]})
        assert jb.stats()["groups"] == 2
        assert jb.emit(12).num_rows == 0  # [0, 10) ended: one-sided, no pairs, freed
        jb.update_left([1], [8], {"id": [3]})  # the session [0, 10) is gone: late? no: [8, 18)
        rows = jb.emit(100).to_pylist()
    assert rows == [{"window_start": 8, "window_end": 25, "key": 1, "left_id": 3, "right_id": 2}]
    with JoinBackend(cfg) as jb:
        jb.update_left([1], [0], {"id": [1]})
        jb.update_right([1], [15], {"id": [2]})
        jb.update_left([1], [8], {"id": [3]})  # bridges before anything is emitted
        rows = jb.emit(100).to_pylist()
    assert sorted(r["left_id"] for r in rows) == [1, 3]
    assert {(r["window_start"], r["window_end"]) for r in rows} == {(0, 25)}


# --- split and merge (hypothesis) ---------------------------------------------

row = st.tuples(st.sampled_from(["left", "right"]), st.integers(-4, 4),
                st.integers(-60, 60))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["tumbling:10ms", "session:6ms"]), st.sampled_from(["int64", "string"]),
       st.integers(1, 3), st.lists(row, max_size=80), st.data())
def test_split_and_merge_equals_one_store(window, key_type, partitions, data, draw):
    cfg = JoinConfig(window=window, key_type=key_type, left_columns={"id": "int64"},
                     right_columns={"id": "int64", "v": "float64"}, partitions=partitions)
    nstores = draw.draw(st.integers(1, 4))
    owner = draw.draw(st.lists(st.integers(0, nstores - 1), min_size=len(data),
                               max_size=len(data)))
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=3)))

    def key(k):
        return f"k{k}" if key_type == "string" else k

    def feed(jb, rows):
        for side in ("left", "right"):
            sel = [(i, r) for i, r in rows if r[0] == side]
            if not sel:
                continue
            cols = {"id": [i for i, _ in sel]}
            if side == "right":
                cols["v"] = [i / 4 for i, _ in sel]
            getattr(jb, f"update_{side}")([key(r[1]) for _, r in sel], [r[2] for _, r in sel],
                                          cols)

    single = JoinBackend(cfg)
    feed(single, list(enumerate(data)))
    want = rows_of(single.emit(2**62))
    single.close()

    leader = JoinBackend(cfg)
    stores = [JoinBackend(cfg) for _ in range(nstores)]
    bounds = [0] + cuts + [len(data)]
    for lo, hi in zip(bounds, bounds[1:]):  # epochs
        for s, jb in enumerate(stores):
            feed(jb, [(i, data[i]) for i in range(lo, hi) if owner[i] == s])
        for jb in reversed(stores):
            jb.begin_epoch()
            for d in jb.deltas():
                leader.merge_delta(bytes(d))
                d.release()
            jb.reset_delta()
    got = rows_of(leader.emit(2**62))
    for jb in stores:
        assert jb.stats()["groups"] == 0
        jb.close()
    leader.close()
    assert got == want


# --- deltas, memory, arrow input -------------------------------------------------

def test_delta_is_a_zero_copy_view_and_guards_the_store():
    cfg = JoinConfig(window="tumbling:10ms", left_columns={"v": "int64"})
    with JoinBackend(cfg) as jb, JoinBackend(cfg) as leader:
        jb.update_left([1, 2], [1, 2], {"v": [10, 20]})
        jb.update_right([1], [3])
        jb.begin_epoch()
        d = jb.delta(0)
        assert d.readonly and len(d) > 0
        assert bytes(d) == bytes(jb.delta(0))
        with pytest.raises(errors.InvalidState, match="delta views"):
            jb.reset_delta()
        with pytest.raises(errors.InvalidState, match="sealed"):
            jb.emit(100)
        leader.merge_delta(d)
        d.release()
        import gc
        gc.collect()
        jb.reset_delta()
        assert jb.stats()["groups"] == 0
        assert leader.emit(10).to_pylist() == [
            {"window_start": 0, "window_end": 10, "key": 1, "left_v": 10}]


def test_memory_reported_and_released():
    cfg = JoinConfig(window="tumbling:1s", left_columns={"a": "int64", "b": "float64"},
                     right_columns={"c": "int64"})
    with JoinBackend(cfg) as jb:
        empty = jb.memory_bytes
        n = 200_000
        keys = np.arange(n) % 5000
        jb.update_left(keys, np.zeros(n, np.int64), {"a": np.arange(n), "b": np.ones(n)})
        jb.update_right(keys[:5000], np.zeros(5000, np.int64), {"c": np.arange(5000)})
        st_ = jb.stats()
        payload = n * 16 + 5000 * 8
        assert payload < st_["log_bytes"] < 3 * payload  # chunked append-sets, bounded slack
        assert jb.memory_bytes > st_["log_bytes"]
        out = jb.emit(1000)
        assert out.num_rows == n
        assert out.column("left_a").to_numpy()[:3].dtype == np.int64
        assert jb.stats()["log_bytes"] == 0
        assert jb.memory_bytes <= empty + st_["index_bytes"] + (64 << 10)  # the index stays


def test_timestamps_numpy_and_late_rows():
    cfg = JoinConfig(window="tumbling:1s", left_columns={"v": "float64"})
    with JoinBackend(cfg) as jb:
        times = pa.array(np.array([0, 999, 1000], dtype="datetime64[ms]"))
        jb.update_left(np.array([1, 1, 1], np.int32), times, {"v": np.array([1, 2, 3], np.float32)})
        jb.update_right([1, 1], [5, 1500])
        assert sorted(jb.emit(1000).column("left_v").to_pylist()) == [1.0, 2.0]
        jb.update_right([1], [10])  # its window [0, 1000) was emitted
        assert jb.late_records == 1
        assert jb.emit(2000).column("left_v").to_pylist() == [3.0]


# --- bad input ----------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, word", [
    (dict(window="sliding:10s/5s"), "tumbling or session"),
    (dict(window="tumbling:0s"), "window size"),
    (dict(window="session:-1s"), "session gap"),
    (dict(key_type="float"), "key_type"),
    (dict(partitions=0), "partitions"),
    (dict(partitions=True), "partitions"),
    (dict(left_columns={"a": "int32"}), r"left_columns\['a'\]"),
    (dict(right_columns={"": "int64"}), "right_columns: column names"),
    (dict(right_columns=["b"]), "right_columns must be a mapping"),
    (dict(left_columns={f"c{i}": "int64" for i in range(65)}), "at most 64"),
])
def test_bad_config(kwargs, word):
    with pytest.raises(errors.InvalidArgument, match=word):
        JoinConfig(**kwargs)


@pytest.fixture
def jb():
    cfg = JoinConfig(window="tumbling:10ms", key_type="string", left_columns={"p": "int64"},
                     right_columns={"q": "float64"})
    with JoinBackend(cfg) as b:
        yield b


def test_bad_batches_name_the_column(jb):
    with pytest.raises(errors.SchemaError, match="'keys'.*null"):
        jb.update_left(pa.array(["a", None]), [1, 2], {"p": [1, 2]})
    with pytest.raises(errors.SchemaError, match="'times'.*null"):
        jb.update_left(["a", "b"], pa.array([1, None]), {"p": [1, 2]})
    with pytest.raises(errors.SchemaError, match="'left_p'.*null"):
        jb.update_left(["a", "b"], [1, 2], {"p": pa.array([1, None])})
    with pytest.raises(errors.SchemaError, match="left column 'p' is missing"):
        jb.update_left(["a"], [1], {})
    with pytest.raises(errors.SchemaError, match=r"unknown right column\(s\) \['p'\]"):
        jb.update_right(["a"], [1], {"q": [1.0], "p": [1]})
    with pytest.raises(errors.SchemaError, match="'right_q'.*float64"):
        jb.update_right(["a"], [1], {"q": ["x"]})
    with pytest.raises(errors.SchemaError, match="'left_p' has dtype float64, expected int64"):
        jb.update_left(["a"], [1], {"p": np.array([1.5])})
    with pytest.raises(errors.SchemaError, match="'left_p' has 1 values"):
        jb.update_left(["a", "b"], [1, 2], {"p": [1]})
    with pytest.raises(errors.SchemaError, match="'keys' and 'times' differ"):
        jb.update_left(["a", "b"], [1], {"p": [1, 2]})
    with pytest.raises(errors.SchemaError, match="longer than 255 bytes"):
        jb.update_left(["a" * 256], [1], {"p": [1]})
    with pytest.raises(errors.SchemaError, match="expected strings"):
        jb.update_left(np.array([1]), [1], {"p": [1]})
    with pytest.raises(errors.SchemaError, match="'time' is missing from the right batch"):
        jb.update_batch("right", pa.table({"key": ["a"], "q": [1.0]}))
    with pytest.raises(errors.InvalidArgument, match="side"):
        jb.update_batch("middle", pa.table({"key": ["a"]}))
    assert jb.stats()["groups"] == 0  # nothing of a bad batch was applied


def test_bad_deltas_change_nothing(jb):
    jb.update_left(["a"], [1], {"p": [1]})
    before = jb.stats()
    other = JoinBackend(JoinConfig(window="session:10ms", key_type="string",
                                   left_columns={"p": "int64"}, right_columns={"q": "float64"}))
    other.update_left(["a"], [1], {"p": [1]})
    other.begin_epoch()
    region = bytes(other.delta(0))
    with pytest.raises(errors.ProtocolError, match="another window"):
        jb.merge_delta(region)
    with pytest.raises(errors.ProtocolError, match="bad magic"):
        jb.merge_delta(b"\x00" * 64)
    same = JoinBackend(jb.config)
    same.update_right(["a"], [2], {"q": [0.5]})
    same.begin_epoch()
    good = bytearray(same.delta(0))
    with pytest.raises(errors.ProtocolError, match="truncated|size"):
        jb.merge_delta(good[:-8])
    bad = bytearray(good)
    bad[15] ^= 0xFF
    with pytest.raises(errors.ProtocolError, match="bad magic"):
        jb.merge_delta(bad)
    assert jb.stats() == before
    jb.merge_delta(good)
    assert jb.emit(10).to_pylist() == [{"window_start": 0, "window_end": 10, "key": "a",
                                        "left_p": 1, "right_q": 0.5}]
    for s in (other, same):
        s.reset_delta()
        s.close()
    with pytest.raises(errors.InvalidArgument, match="partition"):
        jb.delta(-1)
    with pytest.raises(errors.InvalidState, match="no epoch is sealed"):
        jb.delta(0)
    jb.begin_epoch()
    with pytest.raises(errors.OutOfRange, match="partition 1 of 1"):
        jb.delta(1)


def test_close_is_safe_twice_and_refuses_use():
    jb = JoinBackend(JoinConfig())
    jb.close()
    jb.close()
    assert jb.closed
    with pytest.raises(errors.InvalidState, match="closed"):
        jb.update_left([1], [1])
    with pytest.raises(errors.InvalidArgument, match="JoinConfig"):
        JoinBackend({"window": "tumbling:1s"})
