"""The one driver loop (slash.run.driver): what a feature registered gets,
in what order, and how the loop ends. A scripted group stands in for the
processes: it answers recv() from a list and records what was sent."""
from __future__ import annotations

import time
from typing import Any, List, Optional

import pytest

from slash.errors import InvalidArgument, SchemaError, SystemFailure, Timeout
from slash.run.driver import Committer, Dispatch, Driver
from slash.run.failure import Reported
from slash.run.protocol import Address, CheckpointWritten, Error, Finished, Metrics, Progress, Resumed
from slash.run.supervisor import Rescale, RescaleCut


class ScriptedGroup:
    """A ProcessGroup's driver side, whose ranks say ``script`` in order
    (a None: a quiet moment, recv times out)."""

    def __init__(self, n: int, script: List[Any]) -> None:
        self.n, self.script = n, list(script)
        self.sent: List[Any] = []
        self.broadcasts: List[Any] = []

    def recv(self, timeout: Optional[float] = None) -> Any:
        if not self.script:
            time.sleep(min(timeout or 0.0, 0.01))
            raise Timeout("no message")
        msg = self.script.pop(0)
        if msg is None:
            raise Timeout("quiet")
        return msg

    def send(self, rank: int, msg: Any) -> None:
        self.sent.append((rank, msg))

    def broadcast(self, msg: Any) -> None:
        self.broadcasts.append(msg)

    def exited(self) -> dict:
        return {}


def finished(rank: int) -> Finished:
    return Finished(rank, f"result-{rank}", {"records_read": rank}, None)


def driver(n: int, script: List[Any], deadline_s: float = 5.0) -> Driver:
    return Driver(ScriptedGroup(n, script), n, time.monotonic() + deadline_s, deadline_s)


def test_start_sends_every_rank_the_addresses_in_rank_order():
    d = driver(2, [Address(1, "b"), Address(0, "a")])
    d.start(5.0)
    assert d.pg.broadcasts == [["a", "b"]]


def test_start_names_how_many_ranks_started_when_the_others_do_not():
    d = driver(3, [Address(0, "a")])
    with pytest.raises(SystemFailure, match="only 1 of 3 executors started within 0.05 s"):
        d.start(0.05)


def test_run_returns_every_ranks_result_and_metrics_once_all_finished():
    got = driver(2, [finished(1), Progress(0, 7), finished(0)]).run()
    assert got.parts == ["result-0", "result-1"] and got.per_exec[1] == {"records_read": 1}
    assert got.progress == {0: 7}


def test_a_handler_gets_each_report_of_its_type_with_what_reports_kept_of_it():
    seen = []
    d = driver(2, [Resumed(0, 3), Metrics(1, {"x": 1}), Resumed(1, 4), finished(0), finished(1)])
    d.on(Resumed, lambda rep, kept: seen.append((rep.rank, kept)))
    d.on(Metrics, lambda rep, kept: seen.append(("metrics", rep.snapshot)))
    d.run()
    assert seen == [(0, False), ("metrics", {"x": 1}), (1, True)]  # True: every rank resumed


def test_a_report_of_no_registered_type_goes_to_the_claims_until_one_takes_it():
    taken = []
    d = driver(1, [("ctl-ack", 0, 9, None), ("other", 0), finished(0)])
    d.claim(lambda rep: rep[0] == "ctl-ack" and not taken.append(("first", rep[0])))
    d.claim(lambda rep: taken.append(("second", rep[0])) or True)
    d.run()
    assert taken == [("first", "ctl-ack"), ("second", "other")]


def test_turns_run_in_order_before_each_receive_and_a_true_one_takes_the_go():
    calls = []
    d = driver(1, [None, finished(0)])
    d.every_turn(lambda: calls.append("scale") or True, tick=0.01)
    d.every_turn(lambda: calls.append("update"), tick=0.5)
    d.run()
    assert calls == ["scale", "scale"] and d.tick == 0.01


def test_quiet_moments_come_round_as_turns_until_the_deadline():
    turns = []
    d = driver(1, [], deadline_s=0.3)
    d.every_turn(lambda: turns.append(1), tick=0.02)
    with pytest.raises(SystemFailure, match="query did not finish within 0.3 s"):
        d.run()
    assert len(turns) >= 3


def test_a_ranks_error_is_raised_with_its_own_type_and_the_rank():
    err = SchemaError("column 'price' is string")
    d = driver(2, [finished(1), Error(0, err, "SchemaError: ...", "tb")])
    with pytest.raises(Reported) as e:
        d.run()
    assert e.value.rank == 0 and isinstance(e.value.error, SchemaError)
    assert "executor rank 0" in str(e.value.error) and "'price'" in str(e.value.error)


class FakeStore:
    """A CheckpointStore's commit: records what each manifest would say."""

    def __init__(self) -> None:
        self.manifests: List[Any] = []

    def commit(self, cid: int, files: dict, segs: dict, meta: dict) -> Any:
        self.manifests.append((cid, files, segs, meta))
        return cid


def written(rank: int, cid: int, gens: List[int], seg: str) -> CheckpointWritten:
    return CheckpointWritten(rank, cid, {f"f{rank}": {"bytes": 1}}, {seg: {"bytes": 1}},
                             {"bytes": 10, "seconds": 0.0, "gens": gens})


def test_a_cut_commits_once_every_rank_wrote_its_image():
    store, checkpoints = FakeStore(), []
    d = driver(2, [written(0, 1, [0], "s0"), written(1, 1, [0], "s1"), finished(0), finished(1)])
    Committer(d, store, checkpoints, RescaleCut())
    d.run()
    assert [m[0] for m in store.manifests] == [1] and checkpoints[0]["bytes"] == 20
    assert store.manifests[0][3] == {"bytes": 20}  # not a live group: no generation recorded


def test_a_live_cut_that_straddles_a_scale_is_dropped_and_its_windows_go_with_the_next():
    store, checkpoints, dropped = FakeStore(), [], []
    d = driver(2, [written(0, 1, [0], "a"), written(1, 1, [1], "b"),  # no common generation
                   written(0, 2, [1], "c"), written(1, 2, [1, 2], "d"), finished(0), finished(1)])
    Committer(d, store, checkpoints, RescaleCut(), live=True, dropped=dropped)
    d.run()
    assert dropped == [1] and [m[0] for m in store.manifests] == [2]
    cid, _, segs, meta = store.manifests[0]
    assert set(segs) == {"a", "b", "c", "d"} and meta["live_gen"] == 1


def test_the_cut_a_rescale_asked_for_ends_the_attempt_once_it_commits():
    store, cut = FakeStore(), RescaleCut()
    d = driver(1, [written(0, 1, [0], "a"), written(0, 2, [0], "b"), finished(0)])
    Committer(d, store, [], cut)
    d.every_turn(lambda: cut.ask(d.send, 3, time.monotonic(), len(store.manifests)), tick=1.0)
    with pytest.raises(Rescale) as r:
        d.run()
    assert r.value.count == 3 and r.value.ckpt == 1


def test_a_committer_hands_each_committed_checkpoint_to_the_sink():
    got = []
    d = driver(1, [written(0, 1, [0], "a"), written(0, 2, [0], "b"), finished(0)])
    Committer(d, FakeStore(), [], RescaleCut(), committed=got.append)
    d.run()
    assert got == [1, 2]


def test_a_usage_error_in_start_is_raised_as_reported():
    d = driver(1, [Error(0, InvalidArgument("bad"), "InvalidArgument: bad", "tb")])
    with pytest.raises(Reported) as e:
        d.start(1.0)
    assert isinstance(e.value.error, InvalidArgument)


def test_a_dispatch_fed_without_a_loop_hands_each_report_to_its_handlers_in_order():
    """A Spark stream's handle feeds the table from its rendezvous thread."""
    seen = []
    d = Dispatch()
    d.on(Progress, lambda rep, kept: seen.append(("first", rep.records, kept)))
    d.on(Progress, lambda rep, kept: seen.append(("second", rep.records, kept)))
    d.handle(Progress(0, 7))
    assert seen == [("first", 7, None), ("second", 7, None)]


def test_a_dispatch_gives_a_report_of_no_handled_type_to_the_claims_until_one_takes_it():
    taken = []

    def claim(name: str, takes: bool):
        def take(rep: Any) -> bool:
            taken.append((name, rep.rank))
            return takes
        return take

    d = Dispatch()
    d.on(Progress, lambda rep, kept: taken.append("handler"))
    d.claim(claim("declines", False))
    d.claim(claim("takes", True))
    d.claim(claim("never asked", True))
    d.handle(Metrics(1, {}))
    assert taken == [("declines", 1), ("takes", 1)]


def test_a_dispatch_leaves_a_ranks_error_to_its_feeder():
    """Only Driver's loop ends on an Error; a table fed by a stream's
    rendezvous hands it on (the barrier job's own failure is raised)."""
    got = []
    d = Dispatch()
    d.on(Error, lambda rep, kept: got.append(rep.text))
    d.handle(Error(0, None, "boom", ""))
    assert got == ["boom"]
