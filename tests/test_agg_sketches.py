"""The sketches (approx_count_distinct, percentile_approx, count_distinct)
are CRDTs whose merge is exact: any split, grouping and order of merges (by
hypothesis over the real delta path; for the idempotent ones also any
repetition), any split of the input over executor processes, either mode,
either transport, a worker killed and restored from a checkpoint, and
leadership moves give exactly the answer of one sequential store (hashes and
buckets are fixed functions of the values, the same in every process).
Their accuracy against DuckDB: test_agg_approx_distinct.py,
test_agg_percentile.py, test_agg_count_distinct.py."""
from __future__ import annotations

import functools

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slash
from slash import StateBackend, StateConfig
from slash.query import Query
from slash.runner import run

from _state_reference import split_and_merge, vw_store
from test_agg_approx_distinct import make_file

APPROX = ["approx_count_distinct:user", "approx_count_distinct:page:0.02", "approx_count_distinct:score"]
PERCENTILE = ["percentile_approx:user:0.5", "percentile_approx:score:0.99", "percentile_approx:score:0"]
DISTINCT = ["count_distinct:page", "count_distinct:user"]


@pytest.mark.parametrize("aggs,window", [(APPROX, "sliding:4s/2s"), (PERCENTILE, "sliding:4s/2s"),
                                         (DISTINCT, "sliding:40ms/20ms")])  # under its bound
def test_answer_is_the_same_for_any_executor_count_mode_and_transport(tmp_path, aggs, window):
    """Sketches of any split merge to the sequential sketch, and each process
    hashes alike: the answers are equal, not only close."""
    path = make_file(tmp_path, rows=30000)
    q = Query(time="ts", window=window, key="k", aggregates=aggs)
    base = run(q, [path], executors=1)
    assert run(q, [path], executors=3).equals(base)
    assert run(q, [path], executors=2, mode="repartition").equals(base)
    if slash.have_ofi():
        assert run(q, [path], executors=2, transport="ofi:tcp").equals(base)


@pytest.mark.parametrize("sketches", [["approx_count_distinct:v:0.02"], ["percentile_approx:v:0.9"],
                                      ["count_distinct:v"]])
def test_killed_worker_gives_the_answer_of_the_failure_free_run(tmp_path, monkeypatch, sketches):
    import test_recovery as rec
    from slash.executor import GroupConfig
    from slash.sources import GeneratorSource
    q = Query(time="t", window="sliding:10s/5s", key="k",
              aggregates=["count", *sketches])
    gen = functools.partial(GeneratorSource, rec.make, rec.SCHEMA)
    want = run(q, gen(), executors=2)
    monkeypatch.setenv("SLASH_TEST_KILL", "1:9:0:2")  # at push 9 or later, after 2 cuts
    m = {}
    got = run(q, gen(), executors=2, checkpoint=str(tmp_path / "ck"), metrics=m,
              checkpoint_every="4 batches", group=GroupConfig(epoch_ms=10))
    assert len(m["recoveries"]) == 1 and m["recoveries"][0]["from_checkpoint"] is not None
    assert got.equals(want)


@pytest.mark.parametrize("transport", ["shm", pytest.param("ofi:tcp", marks=pytest.mark.skipif(
    not slash.have_ofi(), reason="this build has no libfabric (ofi:tcp)"))])
@pytest.mark.parametrize("sketches", [["approx_count_distinct:x", "approx_count_distinct:y:0.02"],
                                      ["percentile_approx:x:0.5", "percentile_approx:y:0.99"],
                                      ["count_distinct:x", "count_distinct:y"]])
def test_moves_at_random_points_give_the_answer_of_one_store(monkeypatch, transport, sketches):
    import test_leader_moves as lm
    from test_executor import stream
    aggs = ["count", *sketches]
    monkeypatch.setattr(lm, "AGGS", aggs)
    table = stream(5, n=12000, nkeys=200, span_ms=30000)
    got, metrics, maps = lm.run(table, 3, "sliding:3s/1s", seed=5, plan=lm.random_moves(3),
                                transport=transport)
    assert sum(m["moves"] for m in metrics) > 0
    single = StateBackend(StateConfig(window="sliding:3s/1s", aggregates=aggs,
                                      value_types={"x": "int64", "y": "float64"}))
    single.update(table.column("key"), table.column("time"),
                  {"x": table.column("x"), "y": table.column("y")})
    key = lambda r: (r["window_start"], r["key"])  # noqa: E731
    assert sorted(pa.Table.from_batches(got).to_pylist(), key=key) == \
        sorted(single.emit(2**62).to_pylist(), key=key)
    single.close()




def _sketch_config(aggregates, dtype: str) -> StateConfig:
    return StateConfig(window="sliding:20ms/10ms", aggregates=aggregates,
                       value_types={"v": dtype, "w": dtype}, partitions=2)


# (store maker, value strategy, may a delta be merged twice): HyperLogLog
# registers merge by max (idempotent); quantile sketches add counts (not)
# over magnitudes of 30 binades of both signs, so they collapse to coarser levels
SKETCHES = {
    "hll": (vw_store(_sketch_config(["approx_count_distinct:v", "approx_count_distinct:w:0.2"],
                                    "int64"), pa.int64()),
            st.one_of(st.none(), st.integers(0, 3000)), True),
    "quantile": (vw_store(_sketch_config(["percentile_approx:v:0.5", "percentile_approx:w:0.9"],
                                         "float64"), pa.float64()),
                 st.one_of(st.none(), st.floats(-1e9, 1e9, allow_nan=False, allow_subnormal=False)),
                 False),
    # exact sets (their overflow, the absorbing top: tests/c/test_distinct.c)
    "distinct": (vw_store(_sketch_config(["count_distinct:v", "count_distinct:w"], "int64"), pa.int64()),
                 st.one_of(st.none(), st.integers(0, 3000)), True),
}


@pytest.mark.parametrize("sketch", list(SKETCHES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), nparts=st.integers(1, 4), rnd=st.randoms())
def test_merging_parts_in_any_order_and_grouping_equals_one_store(sketch, data, nparts, rnd):
    make, value, repeat = SKETCHES[sketch]
    recs = data.draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), value), max_size=300))
    got, want = split_and_merge(make, recs, nparts, rnd, repeat=repeat)
    assert got == want
