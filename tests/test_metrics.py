"""Live metrics (slash.metrics): the counters executors report while running
equal the ground truth (records pushed, windows' emit time - end), and the
HTTP endpoint serves them in Prometheus' text format, parsed back with
prometheus_client's own parser."""
import json
import os
import secrets
import time
import urllib.error
import urllib.request

import numpy as np
import pyarrow as pa
import pytest

from slash.errors import InvalidArgument
from slash.executor import Executor, GroupConfig
from slash.metrics import LATENCY_BUCKETS, LiveMetrics, MetricsServer, Reporter
from slash.query import Query
from slash.runner import run
from slash.state import StateConfig

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(r.read().decode()) for s in f.samples}


def test_an_executor_snapshot_counts_the_records_pushed_and_its_watermark():
    token = secrets.token_hex(8)
    lst = Executor.listen("shm", token=token)
    try:
        with Executor(lst, 0, [lst.address], StateConfig(window="tumbling:1s"), token=token) as ex:
            for i in range(5):
                ex.push(np.arange(1000, dtype=np.int64), np.full(1000, 100 * i, dtype=np.int64))
            ex.end_epoch()  # publishes the watermark
            snap = Reporter.snapshot(ex)
    finally:
        lst.close()
    assert snap["records_in"] == 5000
    assert snap["bytes_in"] > 0
    assert snap["watermark_ms"] == 400  # max event time seen (lateness 0), published
    assert snap["epochs"] >= 1
    assert 0 < snap["cpu_seconds"] <= time.process_time()


def test_a_reporter_is_due_once_per_interval():
    r = Reporter(0.2)
    assert not r.due()
    time.sleep(0.25)
    assert r.due() and not r.due()


def test_run_reports_records_equal_to_the_rows_of_the_input():
    n = 300_000
    t = pa.table({"t": np.arange(n, dtype=np.int64) * 3, "k": np.arange(n) % 11})
    live = LiveMetrics(2, kind="run")
    run(Query(time="t", window="tumbling:10s", key="k", aggregates=["count"]), t, executors=2, live=live)
    s = live.snapshot()
    assert s["totals"]["records_in"] == n
    assert sorted(s["per_executor"]) == ["0", "1"]
    assert sum(p["records_in"] for p in s["per_executor"].values()) == n
    assert s["totals"]["epochs"] >= 2 and s["totals"]["cpu_seconds"] > 0


def test_snapshots_carry_the_leader_map_every_partition_led_once():
    t = pa.table({"t": np.arange(10_000, dtype=np.int64), "k": np.arange(10_000) % 7})
    live = LiveMetrics(2, kind="run")
    run(Query(time="t", window="tumbling:1s", key="k", aggregates=["count"]), t, executors=2, live=live,
        group=GroupConfig(partitions=12))
    per = live.snapshot()["per_executor"]
    assert [per[r]["led_partitions"] for r in ("0", "1")] == [6, 6]
    assert all(per[r]["map_version"] == 0 and per[r]["held_partitions"] == 0 for r in per)


def test_window_latency_is_emit_time_minus_window_end_in_the_histogram():
    live = LiveMetrics(1)
    lats_ms = [3, 40, 40, 700, 12_000]
    for i, lat in enumerate(lats_ms):
        live.observe_window(i * 1000, (i + 1) * 1000, lat, rows=2)
    s = live.snapshot()["window_latency"]
    assert s["count"] == 5 and s["rows"] == 10
    assert s["p50_ms"] == pytest.approx(float(np.percentile(lats_ms, 50)))
    assert s["p99_ms"] == pytest.approx(float(np.percentile(lats_ms, 99)))
    assert s["max_ms"] == 12_000
    with MetricsServer(live) as srv:
        got = scrape(srv.url)
    assert got[("slash_window_latency_seconds_count", ())] == 5
    assert got[("slash_window_latency_seconds_sum", ())] == pytest.approx(sum(lats_ms) / 1000)
    for ub in LATENCY_BUCKETS:
        want = sum(1 for x in lats_ms if x / 1000 <= ub)
        assert got[("slash_window_latency_seconds_bucket", (("le", str(ub)),))] == want


def test_the_endpoint_serves_each_executors_counters_in_prometheus_format():
    live = LiveMetrics(2)
    base = {"epochs": 3, "merge_seconds": 0.5, "sync_seconds": 0.1, "credit_stalls": 2, "late_records": 7,
            "rows_emitted": 9, "delta_bytes_sent": 100, "delta_bytes_received": 50, "bytes_in": 800,
            "watermark_ms": 5000, "group_watermark_ms": 4000, "watermark_lag_ms": 1000, "cpu_seconds": 1.5}
    live.update_executor(0, {**base, "rank": 0, "records_in": 100, "time": 10.0})
    live.update_executor(1, {**base, "rank": 1, "records_in": 40, "time": 10.0})
    live.update_executor(1, {**base, "rank": 1, "records_in": 90, "time": 12.0})
    with MetricsServer(live, port=0) as srv:
        assert srv.url.startswith("http://127.0.0.1:") and srv.url.endswith("/metrics")
        got = scrape(srv.url)
        js = json.loads(urllib.request.urlopen(srv.json_url, timeout=10).read())
    assert got[("slash_records_total", (("executor", "0"),))] == 100
    assert got[("slash_records_total", (("executor", "1"),))] == 90
    assert got[("slash_late_records_total", (("executor", "1"),))] == 7
    assert got[("slash_delta_bytes_total", (("direction", "sent"), ("executor", "0")))] == 100
    assert got[("slash_watermark_lag_seconds", (("executor", "0"),))] == 1.0
    assert got[("slash_watermark_seconds", (("executor", "0"),))] == 5.0
    assert got[("slash_input_records_per_second", (("executor", "1"),))] == 25.0  # (90-40)/2 s
    assert got[("slash_executors", ())] == 2
    assert js["per_executor"]["1"]["records_per_s"] == 25.0 and js["totals"]["records_in"] == 190


def test_a_server_bound_beyond_loopback_asks_for_its_token():
    live = LiveMetrics(1)
    with MetricsServer(live, bind="0.0.0.0", token="s3cret") as srv:
        assert srv.token == "s3cret" and srv.url.endswith("?token=s3cret")
        bare = srv.url.split("?")[0]
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bare, timeout=10)
        assert e.value.code == 403
        assert urllib.request.urlopen(srv.url, timeout=10).status == 200
        req = urllib.request.Request(bare, headers={"Authorization": "Bearer s3cret"})
        assert urllib.request.urlopen(req, timeout=10).status == 200


def test_a_bad_metrics_port_is_refused_naming_it():
    with pytest.raises(InvalidArgument, match="metrics port"):
        MetricsServer(LiveMetrics(1), port=70000)


def test_the_live_page_is_served_self_contained():
    with MetricsServer(LiveMetrics(1)) as srv:
        page = urllib.request.urlopen(srv.ui_url, timeout=10).read().decode()
    assert "<svg" in page and "api/metrics" in page
    assert "http://" not in page.replace('"http://www.w3.org/2000/svg"', "")  # nothing from elsewhere


def test_slash_run_serves_its_metrics_while_it_runs(tmp_path):
    import re
    import subprocess
    import sys

    import pyarrow.parquet as pq

    n = 600_000  # paced at 200 k records/s: the run lasts ~3 s however fast the reader is
    pq.write_table(pa.table({"t": np.arange(n, dtype=np.int64), "k": np.arange(n) % 101}),
                   tmp_path / "in.parquet", row_group_size=1 << 16)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.Popen([sys.executable, "-m", "slash", "run", "--input", str(tmp_path / "in.parquet"),
                          "--time", "t", "--window", "tumbling:1s", "--key", "k", "--agg", "count",
                          "--executors", "2", "--output", str(tmp_path / "out.parquet"),
                          "--rate", "200000", "--metrics-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    line = p.stderr.readline()
    url = re.search(r"Prometheus endpoint (http://127\.0\.0\.1:\d+/metrics)", line)
    assert url, line
    seen = []
    while p.poll() is None:
        try:
            got = scrape(url.group(1))
        except OSError:  # the run ended (and closed the server) between poll() and the scrape
            break
        seen.append(sum(v for (name, _), v in got.items() if name == "slash_records_total"))
        time.sleep(0.1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert seen == sorted(seen)  # counters only grow
    assert max(seen) > 0, "no executor reported while the run was going"
    assert max(seen) <= n


def test_a_join_run_reports_the_rows_of_both_sides():
    from slash.query import JoinQuery

    left = pa.table({"t": np.arange(0, 40_000, 2, dtype=np.int64), "id": np.arange(20_000) % 50})
    right = pa.table({"t": np.arange(1, 30_001, 2, dtype=np.int64), "id": np.arange(15_000) % 50})
    live = LiveMetrics(2, kind="run")
    run(JoinQuery(time="t", window="tumbling:1s", on=["id"]), (left, right), executors=2, live=live)
    assert live.snapshot()["totals"]["records_in"] == 35_000


def test_a_rate_sources_due_records_count_each_ranks_records_with_event_time_up_to_now():
    from slash.spark.stream import RateSource
    from slash.workloads import ysb_batches

    src = RateSource(rate=7_000, records=5_000, batch=300, keys=3)
    t = pa.Table.from_batches(list(ysb_batches(src.records, keys=3, rate=src.rate, base_ms=1_000,
                                               columns=["event_time"]))).column("event_time").to_numpy()
    rank_of = (np.arange(len(t)) // src.batch) % 3
    for now in [0, 999, 1_000, 1_001, 1_042, 1_333, 1_700, 5_000]:
        for r in range(3):
            want = int(np.count_nonzero((t <= now) & (rank_of == r)))
            assert src.due_records(r, 3, 1_000, now) == want, (now, r)


def test_the_endpoint_serves_each_executors_malformed_values():
    live = LiveMetrics(2)
    live.update_executor(0, {"rank": 0, "records_in": 10, "malformed_records": 3, "time": 1.0})
    live.update_executor(1, {"rank": 1, "records_in": 10, "malformed_records": 0, "time": 1.0})
    with MetricsServer(live, port=0) as srv:
        got = scrape(srv.url)
    assert got[("slash_malformed_records_total", (("executor", "0"),))] == 3
    assert got[("slash_malformed_records_total", (("executor", "1"),))] == 0


def _snap(t, records):
    return {"time": t, "epochs": 1, "records_in": records, "bytes_in": 8 * records,
            "cpu_seconds": 0.0, "watermark_ms": 0}


@pytest.mark.parametrize("keep, shown", [(False, []), (True, ["0", "1"])])
def test_a_smaller_group_drops_the_snapshots_of_the_ranks_it_lost_or_all(keep, shown):
    live = LiveMetrics(3)
    for r in range(3):
        live.update_executor(r, _snap(1.0, 10 * r))
    live.set_executors(2, keep=keep)
    got = live.snapshot()
    assert got["executors"] == 2
    assert sorted(got["per_executor"]) == shown
