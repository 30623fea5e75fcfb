"""The one rank loop (slash.run.rank.RankLoop): features act through the
hooks they register, driver messages reach the feature registered for
their kind, and the loop's result is the plain run's."""
from __future__ import annotations

import secrets
from typing import Any, List

import duckdb
import pyarrow as pa
import pytest

from slash.errors import SystemFailure
from slash.executor import Executor, GroupConfig
from slash.query import Query
from slash.run.rank import RankLoop, open_executor, split_items
from slash.sources import TableSource

Q = Query(time="t", window="tumbling:1s", key="k", aggregates=["count", "sum:v"])
T = pa.table({"t": [i * 37 % 5000 for i in range(4000)], "k": [i % 7 for i in range(4000)],
              "v": [float(i % 11) for i in range(4000)]})


class Link:
    """A driver link holding the messages a driver sent."""

    def __init__(self, msgs: List[Any]) -> None:
        self.msgs = list(msgs)

    def poll(self, timeout: float = 0.0) -> bool:
        return bool(self.msgs)

    def get(self, timeout: float = None) -> Any:
        return self.msgs.pop(0)


class Counting:
    """A feature: counts pushes and takes the driver's ("probe", x) messages."""

    def __init__(self) -> None:
        self.pushes, self.probes, self.finished = 0, [], False

    def install(self, loop: RankLoop) -> None:
        loop.on_push.append(self.pushed)
        loop.handlers["probe"] = lambda msg: self.probes.append(msg[1])
        loop.after_finish.append(lambda: setattr(self, "finished", True))

    def pushed(self) -> None:
        self.pushes += 1


def _loop(link: Any) -> RankLoop:
    token = secrets.token_hex(8)
    lst = Executor.listen("shm", token=token)
    src = TableSource(T)
    ex = open_executor(Q, src, 0, [lst.address], lst, GroupConfig(), token, 4)
    loop = RankLoop(Q, src, ex, link)
    loop.closers.append(lst.close)
    return loop


def _rows(t: pa.Table) -> List[tuple]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


def test_the_loop_gives_a_registered_feature_its_hooks_and_its_messages():
    feat = Counting()
    with _loop(Link([("probe", 1), ("probe", 2)])) as loop:
        loop.use(feat)
        got = loop.run(split_items(loop, 1))
    assert feat.pushes == loop.pushes >= 1 and loop.records == T.num_rows
    assert feat.probes == [1, 2] and feat.finished
    out = Q.finalize(got, T.schema)
    ref = duckdb.sql("select (t // 1000) * 1000, (t // 1000) * 1000 + 1000, k, count(*), sum(v) "
                     "from T group by all").fetchall()
    assert _rows(out) == sorted(ref)


def test_a_driver_message_no_feature_registered_for_is_refused_naming_the_rank():
    with _loop(Link([("nobody-listens", 1)])) as loop:
        with pytest.raises(SystemFailure, match="executor rank 0: unexpected message"):
            loop.run(split_items(loop, 1))
