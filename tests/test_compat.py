"""The compatibility table (slash.run.compat): the committed
docs/compatibility.md is the table's, and the refusals slash.runner.run
raises carry the table's reasons."""
import os

import pyarrow as pa
import pytest

from slash.errors import InvalidArgument, NotSupported
from slash.query import JoinQuery, Query
from slash.run import compat
from slash.runner import run

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "compatibility.md")


def test_committed_doc_is_the_generated_table():
    with open(DOC, encoding="utf-8") as f:
        assert f.read() == compat.markdown(), \
            "docs/compatibility.md is stale: python -m slash.run.compat > docs/compatibility.md"


def test_every_cell_of_every_entry_kind_and_feature_is_filled():
    for entry in compat.ENTRIES:
        for kind in compat.KINDS:
            for feature in compat.FEATURES:
                why = compat.reason(entry, kind, feature)
                assert why is None or (why and "yet" not in why.split())


def test_no_refusal_says_not_yet():
    reasons = [r for r in compat.TABLE.values() if r] + list(compat.COMBINATIONS.values())
    assert all("yet" not in r.split() for r in reasons)


def test_check_raises_the_cells_reason():
    with pytest.raises(NotSupported) as e:
        compat.check("run", "join", ["late_output"])
    assert compat.reason("run", "join", "late_output") in str(e.value)


def test_check_raises_a_refused_combination_only_when_all_of_it_is_asked(monkeypatch):
    monkeypatch.setitem(compat.COMBINATIONS, ("run", "aggregation",
                                              frozenset({"rebalance", "rate"})), "a reason")
    compat.check("run", "aggregation", ["rebalance"])
    compat.check("run", "aggregation", ["rate"])
    with pytest.raises(NotSupported, match="rebalance.*rate.*: a reason"):
        compat.check("run", "aggregation", ["rebalance", "rate", "checkpoint"])


def test_every_feature_of_a_window_aggregation_in_run_combines_with_every_other():
    compat.check("run", "aggregation", list(compat.FEATURES))


def test_every_feature_a_window_join_in_run_supports_combines_with_every_other():
    supported = [f for f in compat.FEATURES if compat.reason("run", "join", f) is None]
    assert {"checkpoint", "live_scale", "rescale", "rebalance"} <= set(supported)
    compat.check("run", "join", supported)


def test_unknown_cell_is_an_invalid_argument():
    with pytest.raises(InvalidArgument, match="'teleport'"):
        compat.reason("run", "aggregation", "teleport")


SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])


def _tables():
    t = pa.table({"t": [1, 2, 3], "k": [1, 1, 2], "v": [5, 6, 7]}, schema=SCHEMA)
    return t, t.rename_columns(["t", "k", "w"])


def test_run_refuses_a_join_with_late_output_with_the_tables_reason(tmp_path):
    left, right = _tables()
    with pytest.raises(NotSupported) as e:
        run(JoinQuery(time="t", window="tumbling:2s", on="k"), (left, right), executors=1,
            late_output=str(tmp_path / "late.parquet"))
    assert compat.reason("run", "join", "late_output") in str(e.value)


def test_run_refuses_a_join_with_a_latency_target_with_the_tables_reason():
    left, right = _tables()
    with pytest.raises(NotSupported) as e:
        run(JoinQuery(time="t", window="tumbling:2s", on="k"), (left, right), executors=1,
            latency_target="1s", realtime=True)
    assert compat.reason("run", "join", "latency_target") in str(e.value)


def test_rate_with_realtime_is_an_invalid_argument_naming_both():
    with pytest.raises(InvalidArgument, match="rate=.*realtime=True"):
        run(Query(time="t", window="tumbling:2s", key="k"), _tables()[0], executors=1,
            rate=100, realtime=True)
