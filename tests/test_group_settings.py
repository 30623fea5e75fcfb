"""One source of truth per setting: a call given both ``group=`` and its own
``transport=`` / ``mode=`` / ``lateness=`` uses the group, and refuses a
setting that disagrees with it instead of dropping either silently."""
import pyarrow as pa
import pytest

from slash import errors
from slash.executor import GroupConfig
from slash.query import Query
from slash.runner import run


def test_without_a_group_the_calls_settings_make_one():
    g = GroupConfig.for_call(None, transport="ofi:tcp", mode="repartition", lateness="2s")
    assert (g.transport, g.mode, g.lateness_ms) == ("ofi:tcp", "repartition", 2000)


def test_with_a_group_settings_that_agree_or_say_nothing_are_accepted():
    g = GroupConfig(transport="ofi:tcp", mode="repartition", lateness="2s")
    assert GroupConfig.for_call(g, transport="ofi:tcp", mode="repartition", lateness=2000) is g
    assert GroupConfig.for_call(g, transport=None, mode=None, lateness=None) is g
    assert GroupConfig.for_call(g, transport="shm", mode="slash", lateness=0) is g  # the defaults


@pytest.mark.parametrize("kwargs, word", [
    (dict(transport="ofi:verbs"), "transport"),
    (dict(mode="repartition"), "mode"),
    (dict(lateness="5s"), "lateness"),
])
def test_a_setting_that_disagrees_with_the_group_is_refused_naming_both(kwargs, word):
    g = GroupConfig(transport="ofi:tcp", lateness="2s")
    with pytest.raises(errors.InvalidArgument, match=word):
        GroupConfig.for_call(g, **kwargs)


def test_runner_run_refuses_a_lateness_that_disagrees_with_its_group():
    q = Query(time="t", window="tumbling:10s", key="k", lateness="3s")
    t = pa.table({"t": [1, 2], "k": [1, 1]})
    with pytest.raises(errors.InvalidArgument, match="lateness"):
        run(q, t, executors=1, group=GroupConfig(lateness="1s"))
