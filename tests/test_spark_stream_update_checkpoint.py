"""StreamHandle.update on a slash.spark.stream with checkpoint=: every
checkpoint records the logic versions agreed so far and every restart (a
killed task, a rescale, the stream started again on its directory)
re-applies them, so the windows in the sink are those of the updated query
with no restart: DuckDB's, each record filtered by the version its event
time falls in (views before T, clicks from T on), each window once."""
import os
import signal

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")

from slash.spark import RateSource, stream  # noqa: E402
from slash.workloads import ysb_batches  # noqa: E402

from test_spark_recovery import QUERY, read_sink, sink_windows, wait_for_checkpoints  # noqa: E402

pytestmark = pytest.mark.slow

SRC = RateSource(rate=20_000, records=160_000, keys=20, batch=2_000, seed=7)


def duckdb_updated_windows(base_ms, switch_ms):
    """{(window_start, key): (count, max event_time)} over 500 ms windows of
    the views before ``switch_ms`` and the clicks from it on, by DuckDB."""
    records = pa.Table.from_batches(list(ysb_batches(SRC.records, keys=SRC.keys, seed=SRC.seed,
                                                     rate=SRC.rate, base_ms=base_ms,
                                                     columns=list(SRC.columns))))
    con = duckdb.connect()
    con.register("r", records)
    rows = con.execute(f"""SELECT event_time - event_time % 500 AS ws, key, count(*), max(event_time)
                           FROM r WHERE CASE WHEN event_time < {switch_ms}
                                             THEN CAST(event_type AS VARCHAR) = 'view'
                                             ELSE CAST(event_type AS VARCHAR) = 'click' END
                           GROUP BY ALL""").fetchall()
    return {(ws, k): (c, mx) for ws, k, c, mx in rows}


@pytest.mark.parametrize("event", ["kill", "rescale"])
def test_an_update_is_reapplied_by_a_restart_from_a_checkpoint(spark, tmp_path, event):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **QUERY)
    wait_for_checkpoints(h, 1)
    u = h.update(filter="event_type == 'click'")
    assert u["version"] == 1
    if event == "kill":
        os.kill(h.task_pids()[1], signal.SIGKILL)
    else:
        assert h.scale_in(1)["to"] == 1
    m = h.wait(180)
    assert len(m["recoveries"]) == (1 if event == "kill" else 0)
    assert sink_windows(read_sink(out)) == duckdb_updated_windows(h.base_ms,
                                                                  u["effective_from_ms"])


def test_a_stream_started_again_on_its_directory_keeps_the_updates_agreed_before(spark, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    h = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **QUERY)
    wait_for_checkpoints(h, 1)
    u = h.update(filter="event_type == 'click'")
    h.stop()
    h2 = stream(spark, SRC, sink=out, checkpoint=ck, checkpoint_every="2 batches", **QUERY)
    m = h2.wait(180)
    assert m["resumed_from"] is not None
    assert sink_windows(read_sink(out)) == duckdb_updated_windows(h.base_ms,
                                                                  u["effective_from_ms"])


def test_an_update_asked_of_a_group_that_restarted_fails_without_a_commit():
    """The group died while agreeing T: the round fails with InvalidState and
    no rank (of the new group) gets a commit it was never asked for."""
    from slash.control import RunControl
    from slash.errors import InvalidState
    from slash.query import Query
    from slash.run.protocol import ControlAck

    schema = pa.schema([("t", pa.int64()), ("k", pa.int64())])
    ctl = RunControl(Query(time="t", window="tumbling:1s", key="k"), schema, 2, bounded=False)
    sent = []
    ctl.attach(lambda rank, msg: sent.append((rank, msg)))
    r = ctl.submit({"filter": "k < 3"})
    ctl.service()  # the prepare goes out to both ranks
    ctl.on_message(ControlAck(0, r.rid, 500))  # rank 1 dies before answering
    ctl.new_group("restarted")
    ctl.service()
    assert r.done.is_set() and [type(m).__name__ for _, m in sent] == ["ControlPrepare"] * 2
    with pytest.raises(InvalidState, match="restarted"):
        ctl.outcome(r)
    assert ctl.plan.version == 0
