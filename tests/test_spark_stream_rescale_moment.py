"""A rescale of a checkpointed slash.spark.stream asked at any moment of its
life: before its tasks joined the group, while a checkpoint is being cut,
during another rescale. Each ask is applied (the next barrier job runs with
the new executor count) or refused with a reason (InvalidState saying why),
never lost: rescale() returns or raises, and the sink holds every window the
files close exactly once, equal to DuckDB over all the files.

The moments are events of the stream (the driver about to handle its k-th
message from the tasks, a checkpoint reported by one rank and not yet
committed), not wall-clock delays, so the tests mean the same at any
machine speed."""
import os
import tempfile
import threading
import time
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from slash.errors import InvalidState  # noqa: E402
from slash.spark import DirectorySource, RateSource, stream  # noqa: E402
from _spark import own_session  # noqa: E402
from slash.spark._stream_ckpt import DriverCheckpoints  # noqa: E402
from slash.spark.stream_handle import StreamHandle  # noqa: E402

from test_spark_recovery import _write_file, read_sink  # noqa: E402
from test_spark_stream_directory_rescale import (duckdb_closed_windows, parts,  # noqa: E402,F401
                                                 sink_windows)

pytestmark = pytest.mark.slow

QUERY = dict(time="event_time", window="tumbling:1s", key="key", aggs=["count", "max:event_time"])
#: generous: the tests wait for events, this only bounds a broken build's hang
PATIENCE = 300.0


@pytest.fixture(scope="module")
def spark():
    """A local[3] session of the module's own: barrier stages of 3 executors."""
    s = own_session("local[3]", "slash-test-spark-stream-rescale-moment")
    yield s
    s.stop()


def _directory(root, parts):
    src = os.path.join(root, "in")
    os.makedirs(src)
    for i, p in enumerate(parts):
        _write_file(src, f"f{i}.parquet", p)
    return src


def _published_all(h, out, want):
    """Waits until the sink holds every window the files close, then stops the
    stream; its final metrics."""
    deadline = time.monotonic() + PATIENCE
    try:
        while len(sink_windows(read_sink(out))) < len(want):
            assert h.running, "the stream ended before publishing every closed window"
            assert time.monotonic() < deadline, "the sink did not get every closed window"
            time.sleep(0.05)
    finally:
        m = h.stop(PATIENCE)
    return m


def _applied_or_refused(ask):
    """Runs ``ask()`` (a rescale); ('applied', its answer) or ('refused', the
    InvalidState's text)."""
    try:
        return "applied", ask()
    except InvalidState as e:
        return "refused", str(e)


def test_a_scale_out_asked_right_after_the_start_is_applied(spark, tmp_path, parts):
    src, out = _directory(str(tmp_path), parts), str(tmp_path / "out")
    h = stream(spark, DirectorySource(src), sink=out, executors=2, checkpoint=str(tmp_path / "ck"),
               checkpoint_every="200ms", **QUERY)
    time.sleep(0.3)
    up = h.scale_out(1, timeout=PATIENCE)
    assert (up["from"], up["to"]) == (2, 3) and h.executors == 3
    m = _published_all(h, out, duckdb_closed_windows(parts))
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 3)]
    assert m["recoveries"] == [] and m["late_records"] == 0
    assert sink_windows(read_sink(out)) == duckdb_closed_windows(parts)


@contextmanager
def asked_at_messages(asks):
    """While inside: the stream started next runs ``ask(handle)`` in a thread
    of its own when its driver is about to handle its k-th message from the
    tasks, for each (k, ask) in ``asks``, and handles that message only once
    the ask was taken (the rescale registered, or refused). Yields the
    outcomes, (k, 'applied' or 'refused', answer or reason), as they come."""
    outcomes, seen, handle = [], [0], []
    orig = StreamHandle._on_message

    def on_message(self, rank, msg):
        seen[0] += 1
        for k, ask in asks:
            if k == seen[0]:
                before = len(self.metrics.get("rescales", ()))
                t = threading.Thread(target=lambda: outcomes.append(
                    (k, *_applied_or_refused(lambda: ask(self)))), daemon=True)
                t.start()
                while t.is_alive() and len(self.metrics.get("rescales", ())) == before:
                    time.sleep(0.005)
        orig(self, rank, msg)

    StreamHandle._on_message = on_message
    try:
        yield outcomes
    finally:
        StreamHandle._on_message = orig


def test_a_scale_out_asked_while_a_checkpoint_is_cut_is_applied(spark, tmp_path, parts):
    """Asked when the first rank reported its part of a checkpoint, before the
    driver committed it (the others still cutting theirs)."""
    src, out = _directory(str(tmp_path), parts), str(tmp_path / "out")
    handle, outcome, asked, orig = [], [], [], DriverCheckpoints._written

    def written(self, msg, ctx):
        if not asked:  # the group's first report of its first checkpoint
            asked.append((msg.ckpt_id, self.committed, len(self.reports.get(msg.ckpt_id, ()))))
            while not handle:  # the report may come before stream() returned
                time.sleep(0.005)
            h = handle[0]
            t = threading.Thread(target=lambda: outcome.append(
                _applied_or_refused(lambda: h.scale_out(1, timeout=PATIENCE))), daemon=True)
            t.start()
            while t.is_alive() and not h.metrics["rescales"]:
                time.sleep(0.005)
        orig(self, msg, ctx)

    DriverCheckpoints._written = written
    try:
        h = stream(spark, DirectorySource(src), sink=out, executors=2,
                   checkpoint=str(tmp_path / "ck"), checkpoint_every="200ms", **QUERY)
        handle.append(h)
        deadline = time.monotonic() + PATIENCE
        while not outcome:
            assert time.monotonic() < deadline and h.running
            time.sleep(0.05)
    finally:
        DriverCheckpoints._written = orig
    assert asked == [(1, None, 0)]  # checkpoint 1 cut by one rank, not committed
    assert outcome[0][0] == "applied", outcome
    assert (outcome[0][1]["from"], outcome[0][1]["to"]) == (2, 3) and h.executors == 3
    m = _published_all(h, out, duckdb_closed_windows(parts))
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 3)]
    assert m["recoveries"] == [] and m["late_records"] == 0
    assert sink_windows(read_sink(out)) == duckdb_closed_windows(parts)


def test_a_rescale_asked_during_another_is_refused_with_the_reason(spark, tmp_path, parts):
    src, out = _directory(str(tmp_path), parts), str(tmp_path / "out")
    with asked_at_messages([(1, lambda h: h.rescale(3, timeout=PATIENCE)),
                            (2, lambda h: h.rescale(1, timeout=PATIENCE))]) as outcomes:
        h = stream(spark, DirectorySource(src), sink=out, executors=2,
                   checkpoint=str(tmp_path / "ck"), checkpoint_every="200ms", **QUERY)
        deadline = time.monotonic() + PATIENCE
        while len(outcomes) < 2:
            assert time.monotonic() < deadline and h.running
            time.sleep(0.05)
    got = dict((k, (what, answer)) for k, what, answer in outcomes)
    assert got[2] == ("refused", "rescale(): another rescale is in progress")
    assert got[1][0] == "applied" and (got[1][1]["from"], got[1][1]["to"]) == (2, 3)
    m = _published_all(h, out, duckdb_closed_windows(parts))
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 3)]
    assert sink_windows(read_sink(out)) == duckdb_closed_windows(parts)


#: what a refused rescale says (nothing else may refuse one here: the source never ends)
REFUSALS = ("rescale(): another rescale is in progress",)


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(first=st.integers(0, 40), to=st.sampled_from([1, 3]),
       second=st.one_of(st.none(), st.tuples(st.integers(0, 30), st.sampled_from([1, 2, 3]))))
def test_a_rescale_asked_at_any_moment_is_applied_or_refused_and_the_answer_is_duckdbs(
        spark, parts, first, to, second):
    """``first``: the driver's message before which the rescale to ``to`` is
    asked (0: right after stream() returned, before the tasks joined);
    ``second``: another rescale asked that many messages later, to a count."""
    with tempfile.TemporaryDirectory() as root:
        src, out = _directory(root, parts), os.path.join(root, "out")
        asks = [] if first == 0 else [(first, lambda h: h.rescale(to, timeout=PATIENCE))]
        if second is not None:
            asks.append((first + 1 + second[0],
                         lambda h, n=second[1]: h.rescale(n, timeout=PATIENCE)))
        with asked_at_messages(asks) as outcomes:
            h = stream(spark, DirectorySource(src), sink=out, executors=2,
                       checkpoint=os.path.join(root, "ck"), checkpoint_every="200ms", **QUERY)
            if first == 0:
                outcomes.append((0, *_applied_or_refused(lambda: h.rescale(to, timeout=PATIENCE))))
            deadline = time.monotonic() + PATIENCE
            while len(outcomes) < len(asks) + (first == 0):
                assert time.monotonic() < deadline and h.running, outcomes
                time.sleep(0.05)
        want = duckdb_closed_windows(parts)
        m = _published_all(h, out, want)
        applied = []
        for _, what, answer in sorted(outcomes):
            if what == "refused":
                assert answer in REFUSALS
            elif answer["from"] != answer["to"]:
                applied.append((answer["from"], answer["to"]))
        assert [(r["from"], r["to"]) for r in m["rescales"]] == applied
        assert m["recoveries"] == [] and m["late_records"] == 0
        assert sink_windows(read_sink(out)) == want


def test_a_stop_asked_before_the_tasks_joined_ends_the_stream(spark, tmp_path):
    """An unbounded source, stopped right after stream() returned: the stop
    reaches the tasks as they join (it is not lost to a group not formed yet)."""
    h = stream(spark, RateSource(rate=1_000, keys=5, batch=100), sink=str(tmp_path / "out"),
               executors=2, **dict(QUERY, aggs=["count"]))
    m = h.stop(PATIENCE)
    assert not h.running and m["running"] is False


def test_a_stop_during_a_rescale_ends_the_stream_and_the_rescale_says_so(spark, tmp_path, parts):
    src, out = _directory(str(tmp_path), parts), str(tmp_path / "out")
    with asked_at_messages([(1, lambda h: h.rescale(3, timeout=PATIENCE))]) as outcomes:
        h = stream(spark, DirectorySource(src), sink=out, executors=2,
                   checkpoint=str(tmp_path / "ck"), checkpoint_every="200ms", **QUERY)
        deadline = time.monotonic() + PATIENCE
        while not h.metrics["rescales"] and not outcomes:  # the rescale was asked
            assert time.monotonic() < deadline and h.running
            time.sleep(0.01)
        h.stop(PATIENCE)
        while not outcomes:  # rescale() returned or raised
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert not h.running
    what, answer = outcomes[0][1:]
    assert what == "applied" or answer.endswith("the stream ended before the new group "
                                                "started: stop() was called"), outcomes
