"""slash.spark.stream rescaled by checkpoint (issue 17, under Spark): a
barrier stage cannot grow, so StreamHandle.rescale(n) checkpoints at an epoch
boundary and starts the next barrier job with n executors from it. The
directory sink must hold each window exactly once, equal to DuckDB over the
generated records; a stream stopped with 2 executors resumes with 1."""
import os
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
pytest.importorskip("duckdb")

from slash.spark import RateSource, stream  # noqa: E402

from test_spark_recovery import (QUERY, duckdb_windows, read_sink, sink_windows,  # noqa: E402
                                 wait_for_checkpoints)

pytestmark = pytest.mark.slow

SRC = RateSource(rate=20_000, records=160_000, keys=20, batch=2_000, seed=5)


def test_rescale_two_to_one_to_two_keeps_each_window_exactly_once(spark, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **QUERY)
    wait_for_checkpoints(h, 1)
    down = h.scale_in(1)
    assert (down["from"], down["to"]) == (2, 1) and h.executors == 1
    wait_for_checkpoints(h, len(h.metrics["checkpoints"]) + 1)
    up = h.rescale(2)
    assert (up["from"], up["to"]) == (1, 2)
    m = h.wait(180)
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 1), (1, 2)]
    assert m["recoveries"] == []  # a rescale is no failure
    assert all(r["seconds_to_resume"] > 0 for r in m["rescales"])
    assert sink_windows(read_sink(out)) == duckdb_windows(h.base_ms, src=SRC)
    assert os.listdir(os.path.join(out, "_pending")) == []


def test_a_stream_stopped_with_two_executors_resumes_with_one(spark, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **QUERY)
    deadline = time.monotonic() + 60
    while read_sink(out) is None:
        assert time.monotonic() < deadline and h.running
        time.sleep(0.05)
    h.stop()
    h2 = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches",
                **dict(QUERY, executors=1))
    m = h2.wait(180)
    assert m["resumed_from"] is not None and m["executors"] == 1
    assert sink_windows(read_sink(out)) == duckdb_windows(h.base_ms, src=SRC)
