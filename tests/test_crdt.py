"""Property tests (hypothesis) of the CRDT partials through the real delta
path: merges are commutative and associative for every aggregate kind, and
for any split of the input into any number of parts, each updated over one
or more epochs, merging the parts' deltas gives exactly the single-store
result, for tumbling, sliding and session windows and both key types."""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slash import StateBackend, StateConfig

from _state_reference import AGGS, VALUE_TYPES, f64_bits, sort_rows, spark_order_key

WINDOWS = ["tumbling:20ms", "sliding:30ms/10ms", "sliding:25ms/10ms", "session:7ms"]

record = st.tuples(st.integers(-5, 5), st.integers(-60, 60), st.integers(-50, 50),
                   st.integers(-40, 40))
records = st.lists(record, max_size=80)


def config(window: str, key_type: str, partitions: int = 2) -> StateConfig:
    return StateConfig(window=window, aggregates=AGGS, key_type=key_type,
                       partitions=partitions, value_types=VALUE_TYPES)


def update(sb: StateBackend, recs, key_type: str) -> None:
    if not recs:
        return
    k, t, x, y = (list(c) for c in zip(*recs))
    keys = [f"key-{v}" for v in k] if key_type == "string" else np.array(k, np.int64)
    sb.update(keys, np.array(t, np.int64),
              {"x": np.array(x, np.int64), "y": np.array(y, np.float64) / 8})


def ship(src: StateBackend, dst: StateBackend) -> None:
    """One epoch exchange: seal src, merge every partition delta into dst, reset."""
    src.begin_epoch()
    for d in src.deltas():
        dst.merge_delta(d)
        d.release()
    src.reset_delta()


def result(sb: StateBackend) -> list:
    return sort_rows(sb.emit(2**62))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(WINDOWS), st.sampled_from(["int64", "string"]), records, records, records)
def test_merge_commutative_associative(window, key_type, a, b, c):
    cfg = config(window, key_type)
    parts = []
    for recs in (a, b, c):
        sb = StateBackend(cfg)
        update(sb, recs, key_type)
        parts.append(sb)

    def combine(order, grouped):
        """(p0 ⊕ p1) ⊕ p2 when grouped is False, p0 ⊕ (p1 ⊕ p2) when True."""
        leader = StateBackend(cfg)
        stores = []
        for i in order:
            s = StateBackend(cfg)
            update(s, (a, b, c)[i], key_type)
            stores.append(s)
        if grouped:
            ship(stores[2], stores[1])
            ship(stores[1], leader)
            ship(stores[0], leader)
        else:
            for s in stores:
                ship(s, leader)
        out = result(leader)
        for s in stores + [leader]:
            s.close()
        return out

    base = combine((0, 1, 2), False)
    assert combine((2, 0, 1), False) == base  # commutative
    assert combine((1, 2, 0), True) == base   # associative
    assert combine((0, 2, 1), True) == base
    for p in parts:
        p.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(WINDOWS), st.sampled_from(["int64", "string"]),
       st.lists(record, max_size=150), st.integers(1, 5), st.integers(1, 4), st.randoms())
def test_split_and_merge_equals_single_store(window, key_type, recs, nparts, epochs, rnd):
    cfg = config(window, key_type, partitions=rnd.choice([1, 2, 4]))
    single = StateBackend(cfg)
    update(single, recs, key_type)
    want = result(single)
    single.close()

    leader = StateBackend(cfg)
    split = [[] for _ in range(nparts)]
    for r in recs:
        split[rnd.randrange(nparts)].append(r)
    for part in split:
        helper = StateBackend(cfg)
        cuts = sorted(rnd.randrange(len(part) + 1) for _ in range(epochs - 1))
        bounds = [0] + cuts + [len(part)]
        for e in range(epochs):
            chunk = part[bounds[e]:bounds[e + 1]]
            half = len(chunk) // 2
            update(helper, chunk[:half], key_type)
            helper.begin_epoch()
            update(helper, chunk[half:], key_type)  # while the delta is sealed
            for d in helper.deltas():
                leader.merge_delta(bytes(d))
                d.release()  # views of the delta must go before reset_delta
            helper.reset_delta()
        ship(helper, leader)  # what arrived while the last delta was sealed
        assert helper.records == 0
        helper.close()
    got = result(leader)
    leader.close()
    assert got == want


# values Spark orders specially: NaN (two payloads, both signs), -0.0 and 0.0, the infinities
SPECIAL = st.sampled_from([float("nan"), -float("nan"), struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0],
                           -0.0, 0.0, float("inf"), -float("inf"), 1.5, -2.0, None])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 39), SPECIAL), max_size=60),
       st.integers(1, 4), st.randoms())
def test_float_min_max_order_nan_as_spark_through_any_merge(recs, nparts, rnd):
    """min/max of doubles give Spark's answer (NaN above every number: a NaN
    makes max NaN, min is NaN only when every value is) for any split of the
    input merged in any order, bit for bit: the merge stays commutative,
    associative and idempotent with NaN and signed zeros."""
    cfg = StateConfig(window="tumbling:20ms", aggregates=["min:y", "max:y", "count:y"],
                      value_types={"y": "float64"}, partitions=2)

    def store(part):
        sb = StateBackend(cfg)
        if part:
            k, t, y = zip(*part)
            sb.update(np.array(k, np.int64), np.array(t, np.int64), {"y": pa.array(y, pa.float64())})
        return sb

    leader = StateBackend(cfg)
    parts = [[] for _ in range(nparts)]
    for r in recs:
        parts[rnd.randrange(nparts)].append(r)
    stores = [store(p) for p in parts]
    rnd.shuffle(stores)
    for s in stores:
        ship(s, leader)
        s.close()
    again = store(recs)  # merging a store's delta twice changes nothing (idempotent)
    again.begin_epoch()
    for d in again.deltas():
        leader.merge_delta(bytes(d))
        leader.merge_delta(bytes(d))
        d.release()
    again.reset_delta()
    again.close()
    got = {(r["window_start"], r["key"]): (f64_bits(r["min_y"]), f64_bits(r["max_y"]))
           for r in leader.emit(2**62).to_pylist()}
    leader.close()
    want = {}
    for k in {r[0] for r in recs}:
        for w in {r[1] // 20 * 20 for r in recs if r[0] == k}:
            vals = [y for kk, t, y in recs if kk == k and t // 20 * 20 == w and y is not None]
            want[(w, k)] = ((f64_bits(min(vals, key=spark_order_key)), f64_bits(max(vals, key=spark_order_key)))
                            if vals else (None, None))
    assert got == want
