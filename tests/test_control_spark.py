"""StreamHandle.update of a running slash.spark.stream: every task switches
its filter at the T the driver agreed, checked against DuckDB over the same
(regenerated) events split at T."""
import time

import duckdb
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pandas")

from slash.errors import NotSupported, SchemaError  # noqa: E402
from slash.spark import RateSource, session, stream  # noqa: E402
from slash.workloads import ysb_batches  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    s = session("local[2]", "slash-test-control")
    yield s
    s.stop()


def test_a_stream_update_switches_every_task_to_the_new_filter_at_T(spark):
    got = []
    src = RateSource(rate=20_000, records=80_000, keys=20, batch=1_000, seed=9)
    h = stream(spark, src, time="event_time", window="tumbling:500ms", key="key", aggs=["count"],
               filter="event_type == 'view'", sink=got.append, executors=2)
    deadline = time.monotonic() + 120
    while not got and time.monotonic() < deadline:  # a first window has fired
        time.sleep(0.05)
    assert got, "no window within 120 s"
    with pytest.raises(SchemaError, match="'colour'"):
        h.update(filter="colour == 'red'")
    with pytest.raises(NotSupported, match="aggregate"):
        h.update(aggregate="count:key")
    upd = h.update(filter="key < 10")
    h.wait(120)
    T = upd["effective_from_ms"]
    assert upd["version"] == 1 and T % 500 == 0 and T > upd["max_event_time_seen_ms"]
    records = pa.Table.from_batches(list(ysb_batches(80_000, keys=20, seed=9, rate=20_000,
                                                     base_ms=h.base_ms,
                                                     columns=["key", "event_time", "event_type"])))
    assert records.column("event_time")[-1].as_py() > T, "the change should fall inside the stream"
    con = duckdb.connect()
    con.register("r", records.set_column(2, "event_type",
                                         records.column("event_type").cast(pa.string())))
    want = con.execute(f"""select event_time // 500 * 500 ws, key, count(*) from r
                           where event_type = 'view' and (event_time < {T} or key < 10)
                           group by all order by ws, key""").fetchall()
    allrows = pa.concat_tables(got).sort_by([("window_start", "ascending"), ("key", "ascending")])
    assert [(r["window_start"], r["key"], r["count"]) for r in allrows.to_pylist()] == \
        [tuple(x) for x in want]
