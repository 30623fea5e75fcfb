"""The one supervisor of checkpointed groups (slash.run.supervisor): its
restart loop, driven by attempts that fail, rescale or finish on cue, over a
real checkpoint directory (no processes: the group runs are tested by
test_recovery*.py, test_live_scale_ckpt.py and the Spark stream's tests)."""
from __future__ import annotations

import pyarrow as pa
import pytest

from slash._ipc import to_ipc
from slash.checkpoint import CheckpointStore
from slash.errors import (CheckpointCorrupt, InvalidArgument, NoSpaceLeft, SystemFailure,
                          UsageError)
from slash.run.failure import Failed, RestartPolicy
from slash.run.protocol import CheckpointNow, CheckpointWritten, Finished, Progress, Resumed
from slash.run.supervisor import Reports, Rescale, RescaleCut, Supervisor, newest_shape


def _store(tmp_path, partitions=4):
    return CheckpointStore(str(tmp_path / "ck"), fingerprint="q", executors=2,
                           partitions=partitions, keep=2)


def _commit(store, cid, records=(10, 20)):
    files = {f"rank-{r}.json": store.write(cid, f"rank-{r}.json", f'{{"records": {n}}}'.encode())
             for r, n in enumerate(records)}
    store.commit(cid, files, {})


def _script(outcomes):
    """An attempt that, at each call, raises or returns the next outcome,
    recording the checkpoint it was started from."""
    started = []

    def attempt(ck):
        started.append(ck.id if ck is not None else None)
        out = outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out
    return attempt, started


def _died(rank=1):
    return Failed(rank, f"executor rank {rank} died", SystemFailure(f"rank {rank} died"))


def _never(*a):
    raise AssertionError("not expected")


def test_a_curable_failure_restarts_from_the_newest_checkpoint(tmp_path):
    store = _store(tmp_path)
    sup = Supervisor(RestartPolicy(3), store)
    failures = []

    def attempt(ck):
        if not failures:
            _commit(store, 1)
            raise _died()
        return "done"
    got = sup.run(attempt, rescaled=_never, failed=lambda f, rec, last: failures.append(last.id))
    assert got == "done" and failures == [1]
    assert sup.start.id == 1 and sup.restarts == 1
    assert sup.recoveries == [{"cause": "executor rank 1 died", "rank": 1,
                               "from_checkpoint": 1, "records_replayed": 0}]


def test_records_read_past_the_cut_count_as_replayed(tmp_path):
    store = _store(tmp_path)
    _commit(store, 1, records=(10, 20))
    sup = Supervisor(RestartPolicy(1), store)
    got = Reports(2)
    got.take(Progress(0, 15))
    got.take(Progress(1, 20))
    attempt, _ = _script([got.fail(0, "rank 0 died", SystemFailure("rank 0 died")), "done"])
    sup.run(attempt, rescaled=_never, failed=lambda *a: None)
    assert sup.replayed == 5 and sup.recoveries[0]["records_replayed"] == 5


def test_past_max_restarts_the_run_fails_naming_the_count_and_the_last_cause(tmp_path):
    sup = Supervisor(RestartPolicy(1), _store(tmp_path))
    attempt, started = _script([_died(0), _died(1), "never reached"])
    with pytest.raises(SystemFailure, match=r"after 1 restart\(s\) \(max_restarts=1\); last "
                                            r"failure: executor rank 1 died") as e:
        sup.run(attempt, rescaled=_never, failed=lambda *a: None)
    assert isinstance(e.value.__cause__, SystemFailure)
    assert started == [None, None]


def test_a_run_that_gives_up_leaves_no_interrupted_checkpoint_behind(tmp_path):
    store = _store(tmp_path)
    _commit(store, 1)
    store.write(2, "rank-0.meta", b"half a cut")  # the cut the failure interrupted
    sup = Supervisor(RestartPolicy(0), store)
    attempt, _ = _script([_died()])
    with pytest.raises(SystemFailure, match="max_restarts=0"):
        sup.run(attempt, rescaled=_never, failed=_never)
    assert sorted(p.name for p in (tmp_path / "ck").glob("chk-*")) == ["chk-000000000001"]


@pytest.mark.parametrize("error", [UsageError("bad column"), CheckpointCorrupt("torn"),
                                   NoSpaceLeft("disk full"), KeyError("a bug")])
def test_an_error_a_restart_cannot_cure_ends_the_run_as_it_is(tmp_path, error):
    sup = Supervisor(RestartPolicy(5), _store(tmp_path))
    attempt, started = _script([Failed(0, str(error), error)])
    with pytest.raises(type(error)) as e:
        sup.run(attempt, rescaled=_never, failed=_never)
    assert e.value is error and started == [None] and sup.recoveries == []


def test_a_rescale_starts_the_next_attempt_from_its_cut_without_counting_a_restart(tmp_path):
    store = _store(tmp_path)
    sup = Supervisor(RestartPolicy(0), store)
    sizes = [2]

    def attempt(ck):
        if sizes[-1] == 2:
            _commit(store, 3)
            raise Rescale(5, 3, asked_at=0.0)
        return ("ran with", sizes[-1], ck.id)
    got = sup.run(attempt, rescaled=lambda r: sizes.append(r.count), failed=_never)
    assert got == ("ran with", 5, 3)
    assert sup.restarts == 0 and sup.recoveries == [] and sup.attempt == 1


def test_a_policy_can_say_which_errors_are_final_and_what_giving_up_raises(tmp_path):
    policy = RestartPolicy(1, curable=lambda e: "transient" in str(e),
                           gave_up=lambda f, n, m: RuntimeError(f"gave up after {n}/{m}"))
    sup = Supervisor(policy)  # no store: the attempts find their checkpoint themselves
    attempt, started = _script([Failed(0, "x", SystemFailure("transient")),
                                Failed(0, "x", SystemFailure("transient"))])
    with pytest.raises(RuntimeError, match="gave up after 1/1"):
        sup.run(attempt, rescaled=_never, failed=lambda *a: None)
    assert started == [None, None]
    sup = Supervisor(policy)
    attempt, _ = _script([Failed(0, "x", SystemFailure("for good"))])
    with pytest.raises(SystemFailure, match="for good"):
        sup.run(attempt, rescaled=_never, failed=_never)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_max_restarts_must_be_a_non_negative_int(bad):
    with pytest.raises(InvalidArgument, match="max_restarts must be an int >= 0"):
        RestartPolicy(bad)


def test_a_finished_directory_returns_its_stored_result_and_late_rows(tmp_path):
    store = _store(tmp_path)
    result, late_rows = pa.table({"x": [1, 2]}), pa.table({"t": [7]})
    store.finish(to_ipc(result), {}, to_ipc(late_rows))
    late = []
    assert Supervisor(RestartPolicy(0), _store(tmp_path)).finished_before(late).equals(result)
    assert len(late) == 1 and late[0].equals(late_rows)
    assert Supervisor(RestartPolicy(0), _store(tmp_path / "other")).finished_before([]) is None


def test_the_result_is_the_cuts_committed_windows_plus_the_last_attempts(tmp_path):
    store = _store(tmp_path)
    rel, entry = store.write_segment(0, 1, to_ipc(pa.table({"w": [1]})))
    store.commit(1, {}, {rel: entry})
    sup = Supervisor(RestartPolicy(0), store)
    sup.run(lambda ck: None, rescaled=_never, failed=_never)  # the last attempt, from chk 1
    late = []
    got = sup.finish([pa.table({"w": [2, 3]})], lambda t: t.sort_by("w"), 1,
                     [pa.table({"t": [9]})], late)
    assert got.column("w").to_pylist() == [1, 2, 3]
    assert store.finished() is not None and [t.num_rows for t in late] == [1]


def test_a_checkpoint_of_another_partition_count_is_refused_naming_both(tmp_path):
    store = _store(tmp_path)
    _commit(store, 1)
    assert newest_shape(_store(tmp_path), None) == (2, 4)
    with pytest.raises(InvalidArgument, match="holds checkpoints with 4 key partitions; this "
                                              "stream asks for 8"):
        newest_shape(_store(tmp_path), 8, "stream")


def test_a_rescale_cut_is_asked_once_and_ends_the_attempt_at_the_first_commit_after_it():
    sent = []
    cut = RescaleCut()
    cut.committed(1, 1)  # nothing asked: a commit goes on
    cut.ask(lambda r, m: sent.append((r, m)), 4, 10.0, committed=1)
    cut.ask(lambda r, m: sent.append((r, m)), 4, 11.0, committed=1)
    assert sent == [(0, CheckpointNow())]
    cut.committed(1, 1)  # the commit counted before the ask
    with pytest.raises(Rescale) as e:
        cut.committed(2, 2)
    assert (e.value.count, e.value.ckpt, e.value.asked_at) == (4, 2, 10.0)
    cut.again()
    cut.ask(lambda r, m: sent.append((r, m)), 4, 12.0, committed=2)
    assert len(sent) == 2


def test_reports_hand_over_a_cut_once_every_rank_wrote_it_and_count_finished_ranks():
    got = Reports(2)
    assert got.take(Resumed(0, 5)) is False and got.take(Resumed(1, 6)) is True
    assert got.take(CheckpointWritten(0, 7, ["a"], {"s": 1}, {})) is None
    assert got.take(CheckpointWritten(1, 7, ["b"], {}, {})) == {0: (["a"], {"s": 1}, {}),
                                                                1: (["b"], {}, {})}
    t = pa.table({"w": [1]})
    assert got.running and got.take(Finished(1, t, {"m": 1}, None)) is True
    assert got.finished(1) and not got.finished(0) and got.running
    assert got.take(("ctl-moved", 0, 1, {})) is None
    assert got.tables() == [t] and got.per_exec == [{}, {"m": 1}]


def test_the_first_checkpoint_is_read_once_the_store_has_the_checkpoints_partition_count(tmp_path):
    _commit(_store(tmp_path, partitions=4), 1)
    store = _store(tmp_path, partitions=8)  # a run that did not know the directory's count yet
    sup = Supervisor(RestartPolicy(0), store)
    store.partitions = newest_shape(store, None)[1]
    assert sup.first.id == 1
    attempt, started = _script(["done"])
    assert sup.run(attempt, rescaled=_never, failed=_never) == "done" and started == [1]
