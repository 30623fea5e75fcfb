"""The Spark stream's driver side as handlers on the driver's table
(slash.run.driver.Dispatch): what the rendezvous thread feeds the handle
decides which windows reach the sink and what the metrics count. No Spark:
the messages are fed as the rendezvous thread would."""
from __future__ import annotations

import logging

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from slash._ipc import to_ipc  # noqa: E402
from slash.run.protocol import LateRecords, StreamDone, StreamRows, StreamWatermark  # noqa: E402
from slash.spark.stream import StreamHandle  # noqa: E402


def fired(*windows: tuple) -> bytes:
    """Rows of the given (start, end) windows, one row each, as a task sends them."""
    return to_ipc(pa.table({"window_start": [s for s, _ in windows],
                            "window_end": [e for _, e in windows],
                            "key": list(range(len(windows))), "count": [1] * len(windows)}))


def queued(h: StreamHandle) -> list:
    return [(t.column("window_start")[0].as_py(), t.column("window_end")[0].as_py())
            for t in h._queue]


def test_a_window_waits_for_every_ranks_watermark_to_pass_its_end():
    h = StreamHandle(2, lambda t: None)
    h._on_message(0, StreamRows(0, 2500, fired((0, 1000), (1000, 2000))))
    assert queued(h) == []  # rank 1 has said nothing yet
    h._on_message(1, StreamRows(1, 1500, None))
    assert queued(h) == [(0, 1000)]
    h._on_message(1, StreamRows(1, 2000, None))
    assert queued(h) == [(0, 1000)]  # a window ends before the watermark, not at it
    h._on_message(1, StreamWatermark(1, 2100))  # a checkpointed task's: noted, rows come later
    h._on_message(0, StreamRows(0, 2600, None))
    assert queued(h) == [(0, 1000), (1000, 2000)]


def test_every_rank_done_hands_over_the_windows_still_open():
    h = StreamHandle(2, lambda t: None)
    h._on_message(0, StreamRows(0, 100, fired((0, 1000))))
    h._on_message(0, StreamDone(0))
    assert queued(h) == []
    h._on_message(1, StreamDone(1))
    assert queued(h) == [(0, 1000)]


def test_late_records_are_counted_per_window_and_warned_about(caplog):
    h = StreamHandle(2, lambda t: None, lateness_ms=5)
    with caplog.at_level(logging.WARNING, logger="slash.spark.stream"):
        h._on_message(0, LateRecords(0, 3, [(0, 1000, 3)]))
        h._on_message(1, LateRecords(1, 2, [(0, 1000, 1), (1000, 2000, 1)]))
    m = h.metrics
    assert m["late_records"] == 5
    assert m["late_records_by_window"] == {(0, 1000): 4, (1000, 2000): 1}
    # the first warning at once, the next not before the interval has passed
    assert [r.getMessage() for r in caplog.records] == [
        "slash.spark.stream: 3 late record(s) not applied (older than the watermark minus "
        "lateness=5 ms); raise lateness= or see late_output="]
