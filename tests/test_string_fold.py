"""String keys folded through the state backend's key cache, against DuckDB.

The fold of byte-string keys looks each record up in a per-batch cache that
names a key by its length and its first and last 8 bytes (alone enough for
keys of up to 16 bytes) and compares the bytes in between only for longer
keys. These tests feed it the keys that could fool such a cache — keys that
differ only after byte 16, keys equal in length, first and last 8 bytes,
keys that are prefixes of each other, empty keys — and Arrow dictionary
columns (nulls among the indices, a null inside the dictionary, entries no
row uses), and check every answer row for row against DuckDB over the same
table, on one executor and on two (where rows reach the leaders as plain
bytes over shm).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import layouts as L
from slash.query import Query
from slash.runner import run

WINDOW = "tumbling:10s"
AGGS = ["count", "sum:v", "max:v"]
ROWS = 4000


def _table(keys: pa.Array, seed: int = 3) -> pa.Table:
    """`keys` with int64 ms times over 60 s (so six windows) and int64 values."""
    rng = np.random.default_rng(seed)
    n = len(keys)
    ts = np.sort(rng.integers(0, 60_000, n)).astype(np.int64)
    return pa.table({"ts": pa.array(ts), "key": keys,
                     "v": pa.array(rng.integers(-1000, 1000, n), pa.int64())})


def _check(table: pa.Table, executors: int, what: str) -> None:
    q = Query(time="ts", window=WINDOW, key=["key"], aggregates=AGGS)
    ours = run(q, table, executors=executors)
    ref = L.duckdb_window_agg(table, "ts", WINDOW, ["key"], AGGS)
    L.assert_same_rows(ours, ref, what=what)


def _dealt(names: list, seed: int = 4) -> list:
    """ROWS keys drawn at random from `names`, interleaved."""
    rng = np.random.default_rng(seed)
    return [names[i] for i in rng.integers(0, len(names), ROWS)]


@pytest.mark.parametrize("executors", [1, 2])
def test_keys_differing_only_after_16_bytes_are_distinct_groups(executors):
    # same length, same first 16 and last 8 bytes: only bytes 16..31 differ
    names = [f"{'p' * 16}{i:016d}{'s' * 8}" for i in range(40)]
    _check(_table(pa.array(_dealt(names), pa.string())), executors, "middle bytes")


@pytest.mark.parametrize("executors", [1, 2])
def test_keys_of_every_length_up_to_64_bytes_and_prefixes_are_distinct(executors):
    # every length 0..64 of one alphabet: each key a prefix of the longer ones,
    # plus keys that differ in one byte at each position of a 24-byte key
    names = ["abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ()"[:n] for n in range(65)]
    base = "x" * 24
    names += [base[:i] + "y" + base[i + 1:] for i in range(24)]
    _check(_table(pa.array(_dealt(names), pa.string())), executors, "lengths and prefixes")


def test_binary_keys_with_zero_bytes_differ_from_shorter_keys():
    # a short key is zero-padded in the cache: b"ab" and b"ab\0" must stay apart
    names = [b"ab", b"ab\x00", b"ab\x00\x00", b"\x00", b"", b"\x00" * 9, b"\x00" * 8, b"ab\x00c"]
    t = _table(pa.array(_dealt(names), pa.binary()))
    q = Query(time="ts", window=WINDOW, key=["key"], aggregates=["count"])
    ours = run(q, t, executors=1)
    ref = L.duckdb_window_agg(t, "ts", WINDOW, ["key"], ["count"])
    L.assert_same_rows(ours, ref, what="binary keys")


@pytest.mark.parametrize("executors", [1, 2])
def test_dictionary_keys_with_null_indices_and_unused_entries(executors):
    dictionary = pa.array([f"entry-{i:03d}-{'z' * (i % 30)}" for i in range(50)], pa.string())
    rng = np.random.default_rng(8)
    codes = rng.integers(0, 25, ROWS).astype(np.int32)  # entries 25..49 are never used
    nulls = rng.random(ROWS) < 0.05
    indices = pa.array(codes, pa.int32(), mask=nulls)
    keys = pa.DictionaryArray.from_arrays(indices, dictionary)
    assert keys.null_count == int(nulls.sum())
    _check(_table(keys), executors, "dictionary with null indices and unused entries")


def test_dictionary_holding_a_null_value_groups_with_null_indices():
    # a null can sit in the dictionary itself: rows pointing at it are null keys
    dictionary = pa.array(["a", None, "b", "a-longer-than-sixteen-bytes"], pa.string())
    rng = np.random.default_rng(9)
    codes = rng.integers(0, 4, ROWS).astype(np.int32)
    nulls = rng.random(ROWS) < 0.05
    keys = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=nulls), dictionary)
    _check(_table(keys), 1, "null inside the dictionary")


def test_dictionary_keys_across_chunks_with_different_dictionaries():
    # each chunk has its own dictionary, in another order: codes mean different keys
    a = pa.DictionaryArray.from_arrays(pa.array(np.arange(ROWS // 2) % 3, pa.int32()),
                                       pa.array(["x", "y", "z" * 20]))
    b = pa.DictionaryArray.from_arrays(pa.array(np.arange(ROWS // 2) % 3, pa.int32()),
                                       pa.array(["z" * 20, "w", "x"]))
    _check(_table(pa.chunked_array([a, b])), 2, "chunks with different dictionaries")
