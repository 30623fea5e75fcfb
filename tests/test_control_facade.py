"""The one control facade (slash.control.RunControl): operations are
registered by the features that implement them, and an operation nobody
registered is refused with the reason of the compatibility table
(slash.run.compat) or with what the run was started without."""
from __future__ import annotations

import pyarrow as pa
import pytest

from slash import control
from slash.control import ControlServer, RunControl
from slash.errors import NotSupported
from slash.query import JoinQuery, Query
from slash.run import compat

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])
AGG = Query(time="t", window="tumbling:1s", key="k")
JOIN = JoinQuery(time="t", window="tumbling:1s", on=["k"])


def _reason(entry, kind, *features):
    with pytest.raises(NotSupported) as got:
        compat.check(entry, kind, features)
    return str(got.value)


def test_a_join_refuses_update_with_the_tables_reason():
    ctl = RunControl(JOIN, SCHEMA, 2, features=("live_scale",))
    assert not ctl.offers("update")
    with pytest.raises(NotSupported) as got:
        ctl.update({"filter": "v > 1"})
    assert _reason("run", "join", "update") in str(got.value)


def test_a_checkpointed_run_offers_update_and_records_each_agreed_version():
    """Every checkpoint of a run records the versions agreed so far, and a
    group started again installs them (slash.run.recovery.checkpointed, slash.run.recovery.live)."""
    ctl = RunControl(AGG, SCHEMA, 2, features=("checkpoint", "live_scale"))
    assert ctl.offers("update")
    r = ctl.submit({"filter": "v > 1"})
    assert r.query.filters[0].column == "v" and r.args == {"filter": "v > 1"}


def test_a_resumed_run_agrees_its_manifests_versions_again_from_the_same_starts():
    first = RunControl(AGG, SCHEMA, 2, features=("checkpoint",))
    first.updates.record.append({"from_ticks": 4000, "args": {"filter": "v > 1"}})
    first.updates.record.append({"from_ticks": 9000, "args": {"filter": "k != 3"}})
    again = RunControl(AGG, SCHEMA, 2, features=("checkpoint",))
    again.updates.restore(first.updates.record)
    versions = again.updates.versions()
    assert [start for start, _ in versions] == [4000, 9000]
    assert [str(f) for f in versions[-1][1].filters] == [str(f) for f in again.query.filters]
    assert {f.column for f in again.query.filters} == {"v", "k"}  # the second adds to the first
    assert again.updates.record == first.updates.record  # the next manifest records them again


def test_a_control_the_user_made_loses_an_operation_the_table_refuses_with_what_it_declares(
        monkeypatch):
    monkeypatch.setitem(compat.COMBINATIONS, ("run", "join", frozenset({"checkpoint",
                                                                        "rebalance"})), "why")
    ctl = RunControl(JOIN, SCHEMA, 2)
    assert ctl.offers("rebalance")
    ctl.declare("checkpoint")
    assert not ctl.offers("rebalance")
    with pytest.raises(NotSupported, match="rebalance.*: why"):
        ctl.call("rebalance", {})


def test_a_checkpointed_join_offers_rebalance_live_and_in_a_live_group():
    assert RunControl(JOIN, SCHEMA, 2, features=("checkpoint",)).offers("rebalance")
    assert RunControl(JOIN, SCHEMA, 2, features=("checkpoint", "live_scale")).offers("rebalance")


def test_a_spark_stream_with_checkpoints_offers_update():
    """The table allows update with checkpoint= in slash.spark.stream (each
    checkpoint records the versions agreed): the facade registers it."""
    ctl = RunControl(AGG, SCHEMA, 2, bounded=False, kind="stream", entry="spark.stream",
                     features=("checkpoint",))
    assert ctl.offers("update")
    r = ctl.submit({"filter": "v > 1"})
    assert r.query.filters[0].column == "v"


def test_a_fixed_group_refuses_scale_out_naming_what_it_was_started_without():
    ctl = RunControl(AGG, SCHEMA, 2)
    with pytest.raises(NotSupported, match="scale-out") as got:
        ctl.call("scale-out", 1)
    assert "max_executors=" in str(got.value) and "checkpoint=" in str(got.value)


def test_a_scaler_registers_the_scale_operations_and_its_status():
    ctl = RunControl(AGG, SCHEMA, 2, features=("live_scale",))
    asked = []
    ctl.provide("scale-out", lambda k: asked.append(k) or {"executors": 2 + k})
    ctl.provide("elastic-status", lambda: {"active_ranks": [0, 1], "standby_ranks": [2]})
    assert ctl.call("scale-out", 1) == {"executors": 3} and asked == [1]
    st = ctl.status()
    assert st["active_ranks"] == [0, 1] and st["standby_ranks"] == [2]
    assert ctl.active_ranks() == [0, 1]


def test_a_registered_rebalance_replaces_the_live_one():
    ctl = RunControl(AGG, SCHEMA, 2, features=("checkpoint",))
    ctl.provide("rebalance", lambda a: {"moves": {"3": 1}, "map_version": 1, "asked": a})
    got = ctl.rebalance({"from_rank": 0, "to_rank": 1})
    assert got["asked"] == {"from_rank": 0, "to_rank": 1}


def test_no_refusal_of_any_entry_says_not_yet():
    """Every operation of OPERATIONS that a run of any entry point and kind
    does not offer is refused with a reason; none says "not yet"."""
    for entry in compat.ENTRIES:
        for kind, query in (("aggregation", AGG), ("join", JOIN)):
            for features in ((), ("checkpoint",), ("live_scale",)):
                ctl = RunControl(query, SCHEMA, 2, entry=entry, features=())
                try:
                    ctl.declare(*features)
                except NotSupported:
                    continue
                for name in control.OPERATIONS:
                    if ctl.offers(name) or name == "status":
                        continue
                    why = ctl.refusal(name)
                    assert len(why) > 60, why
                    assert "not yet" not in why and "cannot be combined" not in why, why


def test_the_socket_answers_a_refused_operation_with_its_reason(tmp_path):
    ctl = RunControl(JOIN, SCHEMA, 2, features=("live_scale",))
    with ControlServer(ctl, str(tmp_path / "j.sock")) as srv:
        st = control.request(srv.path, "status")
        assert st["query"]["join_on"] == ["k"] and st["logic"] == [] and st["logic_version"] == 0
        with pytest.raises(NotSupported, match="window join has no filters"):
            control.request(srv.path, "update", {"filter": "v > 1"})


def test_a_scale_asked_while_the_live_group_starts_waits_for_its_scaler():
    """The socket is served before the group's scaler registers scale-out:
    a request in between waits for it instead of being told the run does
    not offer it."""
    import threading
    import time

    ctl = RunControl(AGG, SCHEMA, 2, features=("live_scale",))
    threading.Timer(0.3, lambda: ctl.provide("scale-out", lambda k: {"to": 1 + k})).start()
    t0 = time.monotonic()
    assert ctl.call("scale-out", 1) == {"to": 2}
    assert time.monotonic() - t0 >= 0.25


def test_a_scale_of_a_fixed_group_is_refused_at_once_and_a_closed_run_stops_the_wait():
    import threading
    import time

    fixed = RunControl(AGG, SCHEMA, 2)
    t0 = time.monotonic()
    with pytest.raises(NotSupported, match="does not offer it"):
        fixed.call("scale-out", 1)
    assert time.monotonic() - t0 < 0.1
    live = RunControl(AGG, SCHEMA, 2, features=("live_scale",))
    threading.Timer(0.3, live.close).start()
    with pytest.raises(NotSupported):
        live.call("scale-in", 1)
    assert time.monotonic() - t0 < 10
