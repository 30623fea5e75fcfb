"""min:COL and max:COL of doubles, which the fold keeps pending per cache
slot as an order-preserving image of the values (src/slashcore/ssb.c,
f64_order) instead of updating the record row by row, give Spark's answer:
NaN (any sign or payload) above every number, so a NaN makes max NaN and
min is NaN only when every value is; -0.0 and 0.0 are equal in value (the
partial orders -0.0 below 0.0, so the sign is the same whatever the order of
arrival or split); nulls skipped, null when all are null.

Checked against DuckDB (whose min/max order NaN the same way) through the
run path, with many rows per window and key so the pending images cover
long runs, and row by row against the definition over random batches
(bit for bit, the sign of zero included). So do first:COL and last:COL of
doubles (updated in place): the value at the earliest / latest time, ties by
the same order, a null lowest."""
from __future__ import annotations

import math
import struct

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slash import StateBackend, StateConfig
from slash.query import Query
from slash.runner import run

from _state_reference import f64_bits, spark_order_key


def _double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


# NaNs of both signs and with payloads, the zeros, the infinities, the extremes
NANS = [float("nan"), -float("nan"), _double(0x7FF0000000000001), _double(0xFFF4000000000ABC),
        _double(0x7FFFFFFFFFFFFFFF)]
SPECIALS = NANS + [-0.0, 0.0, math.inf, -math.inf, 1.7976931348623157e308, -1.7976931348623157e308,
                   5e-324]


def table(rows: int = 20000, seed: int = 11) -> pa.Table:
    """20 keys over 5 one-second windows; keys 0-1 hold only NaNs, 2-3 only
    zeros of either sign, 4 only nulls, 5 nulls and NaNs; the rest a mix of
    numbers, specials (a quarter) and nulls (a tenth)."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 20, rows, dtype=np.int64)
    t = rng.integers(0, 5000, rows, dtype=np.int64)
    y = rng.integers(-1000, 1000, rows).astype(np.float64) / 8
    special = rng.random(rows) < 0.25
    y[special] = np.array(SPECIALS)[rng.integers(0, len(SPECIALS), special.sum())]
    nan_only, zeros = k < 2, (k == 2) | (k == 3)
    y[nan_only] = np.array(NANS)[rng.integers(0, len(NANS), nan_only.sum())]
    y[zeros] = np.where(rng.random(zeros.sum()) < 0.5, -0.0, 0.0)
    null = (k == 4) | (rng.random(rows) < 0.1)
    y[k == 5] = NANS[rng.integers(0, len(NANS))]
    return pa.table({"t": t, "k": k, "y": pa.array(y, mask=null)})


def _same(a, b) -> bool:
    """Equal as Spark compares doubles: NaN equals NaN, -0.0 equals 0.0."""
    if a is None or b is None:
        return a is None and b is None
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("aggs", [["count", "min:y", "max:y"], ["min:y"], ["max:y", "count"],
                                  ["count", "max:y", "sum:y"]])
def test_float_min_and_max_equal_duckdb_with_nans_zeros_infinities_and_nulls(aggs):
    tbl = table()
    got = run(Query(time="t", window="tumbling:1s", key="k", aggregates=aggs), tbl)
    got = got.sort_by([("window_start", "ascending"), ("k", "ascending")])
    want = duckdb.sql("SELECT t - t % 1000 AS ws, k, min(y) AS mn, max(y) AS mx FROM tbl "
                      "GROUP BY ALL ORDER BY ws, k").fetchall()
    assert got.num_rows == len(want) == 100
    names = got.schema.names
    for i, (ws, k, mn, mx) in enumerate(want):
        assert got.column("window_start")[i].as_py() == ws and got.column("k")[i].as_py() == k
        if "min_y" in names:
            assert _same(got.column("min_y")[i].as_py(), mn), (ws, k)
        if "max_y" in names:
            assert _same(got.column("max_y")[i].as_py(), mx), (ws, k)
    by_key = {r["k"]: r for r in got.to_pylist()}  # what the groups above were built to show
    if "min_y" in names:
        assert math.isnan(by_key[0]["min_y"]) and by_key[4]["min_y"] is None
        assert math.isnan(by_key[5]["min_y"])  # nulls and NaNs only
    if "max_y" in names:
        assert math.isnan(by_key[7]["max_y"]) and by_key[2]["max_y"] == 0.0


def _fold_in_batches(recs, cuts, aggs) -> list:
    """The emitted rows of (key, time, y) records fed to one store in
    batches cut at `cuts` (each update call flushes its pending images)."""
    cfg = StateConfig(window="tumbling:20ms", aggregates=aggs, value_types={"y": "float64"})
    bounds = sorted({0, len(recs), *(c for c in cuts if c < len(recs))})
    with StateBackend(cfg) as sb:
        for lo, hi in zip(bounds, bounds[1:]):
            k, t, y = zip(*recs[lo:hi])
            sb.update(np.array(k, np.int64), np.array(t, np.int64), {"y": pa.array(y, pa.float64())})
        return sb.emit(2**62).to_pylist()


VALUE = st.one_of(st.none(), st.sampled_from(SPECIALS + [1.5, -2.0, 0.25]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 59), VALUE), max_size=300),
       st.lists(st.integers(0, 300), max_size=4),
       st.sampled_from([["min:y"], ["count", "min:y"], ["count", "max:y"],
                        ["max:y", "min:y", "count:y"], ["max:y", "avg:y"]]))
def test_float_min_and_max_fold_row_by_row_as_the_definition(recs, cuts, aggs):
    """Rows fed in batches cut anywhere (each update call flushes its
    pending images) give, per window and key, the minimum and maximum of
    the definition's order bit for bit: the fold's images lose nothing,
    not the sign of a zero nor a NaN's place."""
    rows = _fold_in_batches(recs, cuts, aggs)
    got = {(r["window_start"], r["key"]): (f64_bits(r.get("min_y")), f64_bits(r.get("max_y"))) for r in rows}
    want = {}
    for k, t, _ in recs:
        w = t // 20 * 20
        vals = [y for kk, tt, y in recs if kk == k and tt // 20 * 20 == w and y is not None]
        want[(w, k)] = (f64_bits(min(vals, key=spark_order_key)) if vals and "min:y" in aggs else None,
                        f64_bits(max(vals, key=spark_order_key)) if vals and "max:y" in aggs else None)
    assert got == want


def _at_key(r):
    """first/last's order of (time, value): a null below every value."""
    return (r[1], 0, ()) if r[2] is None else (r[1], 1, spark_order_key(r[2]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 59), VALUE), max_size=300),
       st.lists(st.integers(0, 300), max_size=4),
       st.sampled_from([["first:y"], ["count", "last:y"], ["first:y", "last:y", "min:y"]]))
def test_float_first_and_last_fold_row_by_row_as_the_definition(recs, cuts, aggs):
    """Times 0..59 over 3 windows of 20 ms tie often: the value at the
    earliest / latest time, among ties the least / greatest (NaN above
    every number, -0.0 below 0.0, a null lowest), bit for bit."""
    rows = _fold_in_batches(recs, cuts, aggs)
    got = {(r["window_start"], r["key"]): (f64_bits(r.get("first_y")), f64_bits(r.get("last_y")))
           for r in rows}
    want = {}
    for k, t, _ in recs:
        w = t // 20 * 20
        rs = [r for r in recs if r[0] == k and r[1] // 20 * 20 == w]
        want[(w, k)] = (f64_bits(min(rs, key=_at_key)[2]) if "first:y" in aggs else None,
                        f64_bits(max(rs, key=_at_key)[2]) if "last:y" in aggs else None)
    assert got == want
