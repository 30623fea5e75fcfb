"""Live metrics of a running slash.spark.stream, checked from outside: the
handle's counters against the records pushed and the windows the sink got, a
real Prometheus server (Debian's ``prometheus``) scraping the endpoint during
the stream, and the live page in headless Chromium showing changing values."""
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

import _slash_run

pytest.importorskip("pyspark")
pytest.importorskip("pandas")
pytest.importorskip("prometheus_client")

from slash.spark import RateSource, stream  # noqa: E402

pytestmark = pytest.mark.slow

# the page's screenshot goes to the test's tmp directory; SLASH_UI_SCREENSHOT names a file to
# write instead (the docs' bench/results/ui.png is refreshed that way, never by a test run)
SCREENSHOT = os.environ.get("SLASH_UI_SCREENSHOT")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


wait_until = functools.partial(_slash_run.wait_until, every=0.2)


def test_live_counters_equal_records_pushed_and_latency_equals_emit_time_minus_window_end(spark):
    n = 60_000
    calls = []  # (window_start, window_end, wall ms when the sink got it)

    def sink(t):
        calls.append((t.column("window_start")[0].as_py(), t.column("window_end")[0].as_py(),
                       time.time() * 1000))

    # 6 s of stream (was 2 s): its first snapshot came after its end at load 25
    h = stream(spark, RateSource(rate=10_000, records=n, keys=10, batch=1_000), time="event_time",
               window="tumbling:500ms", key="key", aggs=["count"], sink=sink, executors=2)
    mid = wait_until(lambda: (lambda s: s if s["per_executor"] else None)(h.metrics_snapshot()), 60,
                     "a first executor snapshot")
    assert mid["totals"]["records_in"] < n  # reported while running, not only at the end
    m = h.wait(120)
    s = h.metrics_snapshot()
    assert s["totals"]["records_in"] == n == m["records_in"]
    assert sorted(s["per_executor"]) == ["0", "1"]
    assert s["totals"]["late_records"] == 0 and s["totals"]["epochs"] > 0
    assert all(p["records_behind"] >= 0 for p in mid["per_executor"].values())
    assert all(p["records_behind"] == 0 for p in s["per_executor"].values())  # all read at the end
    assert s["window_latency"]["count"] == len(calls) == m["windows"]
    for (ws, we, called), (s2, e2, lat, _) in zip(calls, m["window_latencies"]):
        assert (ws, we) == (s2, e2)
        assert 0 <= called - (e2 + lat) < 5  # emit time (ms resolution) right before the sink ran
    assert s["window_latency"]["max_ms"] == pytest.approx(max(x[2] for x in m["window_latencies"]))


def prometheus_query(base, q):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="no prometheus binary (apt-get install prometheus; test.sh does)")
def test_prometheus_scrapes_the_stream_and_its_api_returns_the_records_pushed(spark, tmp_path):
    n = 150_000
    got = []
    metrics_port, port = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: slash\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    base = f"http://127.0.0.1:{port}"
    h = None
    try:
        wait_until(lambda: _ready(base), 30, "prometheus to be ready")
        # its first scrape of the (not yet listening) target: Prometheus applies new targets only
        # every 5 s, so the stream starts once it is scraping
        wait_until(lambda: prometheus_query(base, 'up{job="slash"}'), 30, "prometheus's first scrape")
        h = stream(spark, RateSource(rate=30_000, records=n, keys=10, batch=1_000), time="event_time",
                   window="tumbling:500ms", key="key", aggs=["count"], sink=got.append, executors=2,
                   metrics_port=metrics_port)
        assert h.metrics_url == f"http://127.0.0.1:{metrics_port}/metrics"
        # the final snapshots reached the driver, then Prometheus scraped them
        wait_until(lambda: h.metrics_snapshot()["totals"].get("records_in") == n, 90, "every record")
        res = wait_until(lambda: (lambda r: r if r and float(r[0]["value"][1]) == n else None)(
            prometheus_query(base, 'sum(slash_records_total{job="slash"})')), 30,
            "prometheus to scrape the final count")
        assert float(res[0]["value"][1]) == n
        series = prometheus_query(base, "slash_records_total")
        assert sorted(s["metric"]["executor"] for s in series) == ["0", "1"]
        # scraped during the stream too, not only at its end
        raw = prometheus_query(base, 'slash_records_total{executor="0"}[5m]')  # every sample scraped
        values = [float(v) for _, v in raw[0]["values"]]
        assert values == sorted(values) and values[0] < values[-1], values
        # every window the sink got, in the latency histogram Prometheus scraped
        wait_until(lambda: float(prometheus_query(base, "slash_window_latency_seconds_count")[0]["value"][1])
                   == len(got) and not h.running, 30, "the last windows' latencies")
        m = h.wait(60)
        assert m["windows"] == len(got) > 0
    finally:
        prom.terminate()
        try:
            prom.wait(20)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait(5)
        if h is not None and h.running:
            h.stop()
    assert prom.returncode == 0, (tmp_path / "prometheus.log").read_text()[-2000:]


def _ready(base):
    try:
        with urllib.request.urlopen(base + "/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _dump_dom(url, tmp_path):
    out = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chrome'}",
                          "--virtual-time-budget=3000", "--dump-dom", url],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _cell(dom, id_):
    m = re.search(rf'id="{id_}"[^>]*>([^<]*)<', dom)
    assert m, f"no element {id_} in the page"
    return m.group(1)


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary (apt-get install chromium; test.sh does)")
def test_the_live_page_in_headless_chromium_shows_changing_values_during_a_stream(spark, tmp_path):
    h = stream(spark, RateSource(rate=20_000, keys=10, batch=1_000), time="event_time",
               window="tumbling:500ms", key="key", aggs=["count"], sink=lambda t: None, executors=2,
               ui=True)
    try:
        assert h.ui_url.startswith("http://127.0.0.1:")
        wait_until(lambda: len(h.metrics_snapshot()["history"]) >= 2, 60, "the stream to report")
        first = _dump_dom(h.ui_url, tmp_path)
        time.sleep(1.5)
        second = _dump_dom(h.ui_url, tmp_path)
        shot = os.path.abspath(SCREENSHOT) if SCREENSHOT else str(tmp_path / "ui.png")
        subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        f"--user-data-dir={tmp_path / 'chrome'}", "--virtual-time-budget=3000",
                        "--window-size=1000,760", f"--screenshot={shot}", h.ui_url],
                       capture_output=True, timeout=90, check=True)
    finally:
        h.stop()
    r1, r2 = (int(re.search(r'id="records" data-value="(\d+)"', d).group(1)) for d in (first, second))
    assert 0 < r1 < r2, (r1, r2)  # the records count shown grew between the two loads
    assert _cell(first, "status").startswith("live")
    for d in (first, second):
        assert 'id="exec-0"' in d and 'id="exec-1"' in d and "<path" in d
    assert os.path.getsize(shot) > 10_000
