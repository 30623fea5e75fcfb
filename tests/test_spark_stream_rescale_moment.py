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

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from slash.errors import InvalidState  # noqa: E402
from slash.spark import DirectorySource, session, stream  # noqa: E402
from slash.spark._stream_ckpt import DriverCheckpoints  # noqa: E402
from slash.spark.stream_handle import StreamHandle  # noqa: E402

from test_spark_recovery import _write_file, read_sink  # noqa: E402
from test_spark_stream_directory_rescale import duckdb_closed_windows, sink_windows  # noqa: E402

pytestmark = pytest.mark.slow

FILES = 4
QUERY = dict(time="event_time", window="tumbling:1s", key="key", aggs=["count", "max:event_time"])
#: generous: the tests wait for events, this only bounds a broken build's hang
PATIENCE = 300.0


@pytest.fixture(scope="module")
def spark():
    s = session("local[3]", "slash-test-spark-stream-rescale-moment")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def parts():
    """Each file 2 s of event time after the previous (sorted within), 7 keys."""
    rng = np.random.default_rng(23)
    out = []
    for i in range(FILES):
        t = np.sort(rng.integers(i * 2000, (i + 1) * 2000, 2000))
        out.append(pa.table({"event_time": t, "key": rng.integers(0, 7, 2000)}))
    return out


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
