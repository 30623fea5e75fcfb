"""Error messages tell the truth: each failure carries its own detail, never
one left behind by an earlier, unrelated failure on the same thread."""
from __future__ import annotations

import threading

import pytest

import slash
from slash import errors


def _connected_pair(token):
    """A consumer channel whose producer (a thread here) connects and sends nothing."""
    lst = slash.Listener("shm", token=token)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "prod", slash.Channel.connect("shm", lst.address, token=token, timeout=30)))
    t.start()
    ch = lst.accept(buffer_size=1024, credits=4, timeout=30)
    t.join(30)
    return lst, ch, box["prod"]


def test_try_poll_timeout_does_not_repeat_an_earlier_bad_buffer_size(token):
    lst, ch, prod = _connected_pair(token)
    try:
        with pytest.raises(errors.InvalidArgument, match="multiple of 64") as first:
            lst.accept(buffer_size=1000, credits=4, timeout=0)
        with pytest.raises(errors.Timeout) as second:
            ch.poll(timeout=0)
        assert "multiple of 64" not in str(second.value)
        assert "buffer_size" not in str(second.value)
        assert str(second.value) != str(first.value)
        assert "try-poll" in str(second.value)
    finally:
        prod.close()
        ch.close()
        lst.close()


def test_timed_poll_names_its_own_timeout_after_an_earlier_failure(token):
    lst, ch, prod = _connected_pair(token)
    try:
        with pytest.raises(errors.InvalidArgument, match="credits"):
            lst.accept(buffer_size=1024, credits=0, timeout=0)
        with pytest.raises(errors.Timeout, match="no buffer within 20 ms"):
            ch.poll(timeout=0.02)
    finally:
        prod.close()
        ch.close()
        lst.close()


def test_repeating_a_failure_repeats_its_own_detail(token):
    """The detail is consumed when the exception is built, yet each failing call
    records it afresh: the same mistake twice reads the same both times."""
    with slash.Listener("shm", token=token) as lst:
        msgs = []
        for _ in range(2):
            with pytest.raises(errors.InvalidArgument) as e:
                lst.accept(buffer_size=1000, credits=4, timeout=0)
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1]
        assert "multiple of 64" in msgs[0]


def test_spark_errors_live_in_slash_errors_as_the_docs_say():
    from slash import errors
    from slash.spark import _env

    for name in ("TaskFailed", "NotEnoughSlots", "SparkUnavailable", "SinkFailed"):
        assert issubclass(getattr(errors, name), errors.SlashError), name
    assert _env.TaskFailed is errors.TaskFailed and _env.NotEnoughSlots is errors.NotEnoughSlots
