"""A rank's error report, sent over its link (pickled, as every report is),
becomes on the driver the exception the rank raised: its type, attributes
and cause kept, its message naming the rank (slash.run.failure.reported)."""
from __future__ import annotations

import pickle
import threading

from slash.errors import NoSpaceLeft, SinkFailed, SystemFailure, TaskFailed
from slash.run.failure import reported
from slash.run.protocol import Error


def _over_a_link(rank, raise_it):
    """The report a rank sends for what ``raise_it`` raises, as the driver reads it."""
    try:
        raise_it()
    except BaseException as e:
        rep = Error.of(rank, e)
    return pickle.loads(pickle.dumps(rep))


def test_a_reported_error_keeps_its_type_and_attributes_and_names_the_rank():
    def fail():
        raise TaskFailed("the barrier stage failed", 3, "killed")
    err = reported(_over_a_link(2, fail)).error
    assert type(err) is TaskFailed
    assert (err.rank, err.reason) == (3, "killed")
    assert str(err) == "executor rank 2: the barrier stage failed"


def test_a_reported_error_keeps_its_cause():
    def fail():
        try:
            raise ValueError("the sink's own error")
        except ValueError as cause:
            e = SinkFailed("the sink raised")
            e.window = (1000, 2000)
            raise e from cause
    err = reported(_over_a_link(0, fail)).error
    assert type(err) is SinkFailed and err.window == (1000, 2000)
    assert type(err.__cause__) is ValueError and str(err.__cause__) == "the sink's own error"
    assert not hasattr(err, Error.CAUSE)


def test_a_cause_that_does_not_pickle_travels_as_a_system_failure_naming_it():
    class Holder(Exception):
        def __init__(self) -> None:
            super().__init__("holds a lock")
            self.lock = threading.Lock()

    def fail():
        raise NoSpaceLeft("cannot write 'x': no space left on '/d'") from Holder()
    err = reported(_over_a_link(1, fail)).error
    assert type(err) is NoSpaceLeft and "no space left on '/d'" in str(err)
    assert type(err.__cause__) is SystemFailure and "Holder: holds a lock" in str(err.__cause__)


def test_an_error_not_of_slash_is_a_system_failure_naming_its_type_and_text():
    def fail():
        raise KeyError("column")
    got = reported(_over_a_link(4, fail))
    assert got.rank == 4 and type(got.error) is SystemFailure
    assert str(got.error) == "executor rank 4 failed: KeyError: 'column'"


def test_an_error_whose_constructor_takes_other_arguments_is_rebuilt_without_calling_it():
    class Positional(SystemFailure):
        def __init__(self, path: str, code: int) -> None:
            super().__init__(path, code)
            self.path, self.code = path, code

    rep = Error(0, Positional("/d", 28), "Positional", "")
    err = reported(rep).error
    assert type(err) is Positional and (err.path, err.code) == ("/d", 28)
    assert str(err).startswith("executor rank 0: ")

