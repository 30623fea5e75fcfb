"""Live metrics of a running stream or ``slash run``: what each executor is
doing now, and how late each window's result is.

Three parts, kept cheap enough to stay on:

* :class:`Reporter`, in each executor process: every ``interval`` seconds
  (0.5 by default; one ``time.monotonic()`` comparison per batch otherwise)
  it turns the executor's cumulative counters (:attr:`Executor.metrics`, one
  call into the core) plus the process's CPU time into a small dict, which
  the caller sends to the driver over the link it already has (a stream
  task's connection, a ``slash run`` worker's pipe).
* :class:`LiveMetrics`, on the driver: the latest snapshot of each executor,
  rates between two snapshots (records/s, CPU load, mean epoch duration), the
  per-window latency (emit wall clock - window end) as a histogram with
  p50/p95/p99, and a short history for the page. Thread-safe.
* :class:`MetricsServer`: one HTTP server (a daemon thread) serving
  ``/metrics`` in Prometheus' text format (``prometheus_client``; names and
  units after its conventions: base units, ``_total`` for counters),
  ``/api/metrics`` as JSON and ``/`` the live page (``slash/ui/live.html``,
  package data). Loopback by default; bound elsewhere it asks for a token
  (``?token=`` or ``Authorization: Bearer``).

Snapshots carry cumulative counters, so a lost or late snapshot loses
nothing but resolution; the driver keeps the latest per executor.

>>> live = LiveMetrics(executors=1)
>>> live.observe_window(0, 1000, 1250, rows=3)
>>> live.snapshot()["window_latency"]["count"]
1
"""
from __future__ import annotations

import bisect
import hmac
import ipaddress
import json
import logging
import os
import secrets
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple

import numpy as np

from slash.errors import InvalidArgument, NotSupported

log = logging.getLogger(__name__)

_NEVER = -(1 << 63)
#: upper bounds (seconds) of the window latency histogram's buckets
LATENCY_BUCKETS: Tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                                      30.0, 60.0)
#: the counters of an executor snapshot, as (snapshot key, Prometheus name, help, scale)
_COUNTERS: Tuple[Tuple[str, str, str, float], ...] = (
    ("records_in", "slash_records_total", "Records applied by the executor.", 1.0),
    ("bytes_in", "slash_input_bytes_total", "Bytes of input applied by the executor.", 1.0),
    ("epochs", "slash_epochs_total", "Epochs the executor ended.", 1.0),
    ("merge_seconds", "slash_merge_seconds_total", "Time the executor spent merging deltas.", 1.0),
    ("sync_seconds", "slash_sync_seconds_total", "Time the executor spent syncing with peers.", 1.0),
    ("credit_stalls", "slash_credit_stalls_total", "Sends that waited for a channel credit.", 1.0),
    ("late_records", "slash_late_records_total", "Records older than the watermark, not applied.", 1.0),
    ("malformed_records", "slash_malformed_records_total",
     "Input values that did not parse (a Kafka topic's), skipped.", 1.0),
    ("rows_emitted", "slash_rows_emitted_total", "Result rows the executor fired.", 1.0),
    ("cpu_seconds", "slash_cpu_seconds_total", "CPU time of the executor's process.", 1.0),
)


# ---- in the executor -------------------------------------------------------------
class Reporter:
    """Decides when an executor reports and builds its snapshot.

    ``due()`` is the per-batch check (one clock read); ``snapshot(ex)`` the
    report: the executor's counters, its watermarks in ms, the process's CPU
    time (``time.process_time``) and the wall clock of the snapshot.
    """

    def __init__(self, interval: float = 0.5) -> None:
        if not interval > 0:
            raise InvalidArgument(f"metrics report interval must be > 0 s, got {interval!r}")
        self.interval = interval
        self._next = time.monotonic() + interval

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        return True

    @staticmethod
    def snapshot(ex: Any) -> Dict[str, Any]:
        m = ex.metrics
        tpm = ex.state.ticks_per_ms
        snap = {k: m.get(k, 0) for k in ("rank", "records_in", "bytes_in", "epochs", "merge_seconds",
                                         "sync_seconds", "credit_stalls", "late_records",
                                         "rows_emitted", "delta_bytes_sent", "delta_bytes_received",
                                         "watermark_lag_ms", "epochs_routed", "led_partitions",
                                         "map_version", "moves", "moves_out", "held_partitions")}
        for k in ("watermark", "group_watermark"):
            snap[k + "_ms"] = None if m[k] == _NEVER or m[k] >= (1 << 63) - 1 else m[k] // tpm
        snap["cpu_seconds"] = time.process_time()
        snap["time"] = time.time()
        return snap


# ---- on the driver ---------------------------------------------------------------
class _Histogram:
    """Window latencies: fixed buckets for Prometheus plus the recent raw
    values (up to ``keep``) for exact percentiles."""

    def __init__(self, keep: int = 100_000) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0
        self.raw: Deque[float] = deque(maxlen=keep)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1
        self.raw.append(seconds)

    def percentiles(self) -> Dict[str, Optional[float]]:
        if not self.raw:
            return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None}
        a = np.fromiter(self.raw, dtype=np.float64) * 1000.0
        p50, p95, p99 = np.percentile(a, [50, 95, 99])
        return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "max_ms": float(a.max())}


class LiveMetrics:
    """The driver's registry: fed by executor snapshots
    (:meth:`update_executor`) and by the windows the driver hands out
    (:meth:`observe_window`); read by :meth:`snapshot` (JSON-able) and by
    the Prometheus collector."""

    #: seconds between two points of the history the page draws
    history_interval: float = 1.0
    #: seconds between two snapshots of an executor (its :class:`Reporter`'s interval)
    report_interval: float = 0.5

    def __init__(self, executors: int, kind: str = "stream", history: int = 600) -> None:
        self.executors = executors
        self.kind = kind
        self.started = time.time()
        self._lock = threading.Lock()
        self._exec: Dict[int, Dict[str, Any]] = {}
        self._rates: Dict[int, Dict[str, float]] = {}
        self._lat = _Histogram()
        self._windows = 0
        self._window_rows = 0
        self._lat_since: List[float] = []  # latencies since the last history point
        self._history: Deque[Dict[str, Any]] = deque(maxlen=history)
        self._last_point: Optional[Tuple[float, float]] = None  # (time, records total)
        self.events: List[Dict[str, Any]] = []
        # per-window latency of a ``slash run`` (see executor_windows)
        self._fired: Dict[int, float] = {}  # rank -> group watermark (ms) it has fired up to
        self._open_windows: Dict[Tuple[int, int], int] = {}  # (start, end) ms -> rows so far
        #: the recent windows emitted: (start ms, end ms, emit wall clock ms, latency ms, rows)
        self.windows: Deque[Tuple[int, int, float, float, int]] = deque(maxlen=100_000)
        #: windows a finishing run flushed before their end (not in the latency histogram)
        self.windows_flushed = 0

    def update_executor(self, rank: int, snap: Dict[str, Any]) -> None:
        """Takes an executor's snapshot (cumulative counters; see :class:`Reporter`)."""
        with self._lock:
            old = self._exec.get(rank)
            if old is not None and snap["time"] > old["time"]:
                dt = snap["time"] - old["time"]
                de = snap["epochs"] - old["epochs"]
                self._rates[rank] = {
                    "records_per_s": (snap["records_in"] - old["records_in"]) / dt,
                    "bytes_per_s": (snap["bytes_in"] - old["bytes_in"]) / dt,
                    "cpu_load": (snap["cpu_seconds"] - old["cpu_seconds"]) / dt,
                    "epoch_ms": dt * 1000.0 / de if de > 0 else None,
                    # the share of the interval its paced reader waited for the clock
                    # (None where the interval began before its first paced batch)
                    "input_wait": (snap["input_wait_s"] - old["input_wait_s"]) / dt
                    if "input_wait_s" in snap and "input_wait_s" in old else None}
            self._exec[rank] = dict(snap)
            self._maybe_point(time.time())

    def set_executors(self, n: int, keep: bool = False) -> None:
        """The group now has ``n`` executors (a rescale): the old group's
        snapshots are dropped (the new processes count from their restore);
        ``keep``: only those of ranks ``n`` and above (a stream's ranks below
        ``n`` go on showing their latest until the next job reports)."""
        with self._lock:
            self.executors = n
            for r in [r for r in self._exec if not keep or r >= n]:
                self._exec.pop(r, None)
            for r in [r for r in self._rates if not keep or r >= n]:
                self._rates.pop(r, None)

    def feed(self, rank: int, snap: Dict[str, Any]) -> None:
        """A checkpointed rank's report (``slash.run.recovery.checkpointed``): its snapshot,
        whose ``windows`` entry, if any, lists (window end ms, emit wall
        clock ms, rows) of the windows it fired; taken out of ``snap``."""
        windows = snap.pop("windows", None) or ()
        self.update_executor(rank, snap)
        for end, emit, rows in windows:
            self.observe_window(0, end, emit - end, rows)

    def observe_window(self, start_ms: int, end_ms: int, latency_ms: float, rows: int) -> None:
        """A window handed out ``latency_ms`` after its end (emit wall clock - end)."""
        with self._lock:
            self._observe_locked(latency_ms, rows)

    def executor_windows(self, rank: int, fired_ms: Optional[int],
                         windows: List[Tuple[int, int, int]], now_ms: Optional[float] = None) -> None:
        """Takes what executor ``rank`` of a ``slash run`` fired: ``windows``
        as (start ms, end ms, rows) of its part, ``fired_ms`` the group
        watermark up to which it has fired everything (None: it finished).
        A window is emitted once every executor has fired past its end (each
        leads a share of its keys); its latency is ``now_ms`` (default: the
        wall clock now) minus its end. Windows a finishing run flushes before
        their end are counted in :attr:`windows_flushed`, not observed."""
        now = time.time() * 1000.0 if now_ms is None else float(now_ms)
        with self._lock:
            self._fired[rank] = float("inf") if fired_ms is None else float(fired_ms)
            for s, e, rows in windows:
                self._open_windows[(s, e)] = self._open_windows.get((s, e), 0) + rows
            if len(self._fired) < self.executors:
                return
            low = min(self._fired.values())
            done = sorted(k for k in self._open_windows if k[1] <= low)
            for s, e in done:
                rows = self._open_windows.pop((s, e))
                if now < e:  # a finishing run flushed it before it ended
                    self.windows_flushed += 1
                    continue
                self._observe_locked(now - e, rows)
                self.windows.append((s, e, now, now - e, rows))

    def _observe_locked(self, latency_ms: float, rows: int) -> None:
        self._lat.observe(latency_ms / 1000.0)
        self._lat_since.append(float(latency_ms))
        self._windows += 1
        self._window_rows += rows

    def event(self, text: str) -> None:
        """A mark on the page's timeline (a start, an end, a recovery...)."""
        with self._lock:
            self.events.append({"t": time.time(), "text": text})

    def _totals(self) -> Dict[str, float]:
        tot: Dict[str, float] = {}
        for snap in self._exec.values():
            for k in ("records_in", "bytes_in", "epochs", "merge_seconds", "credit_stalls", "late_records",
                      "malformed_records", "rows_emitted", "delta_bytes_sent", "delta_bytes_received", "cpu_seconds"):
                tot[k] = tot.get(k, 0) + (snap.get(k) or 0)
        return tot

    def _maybe_point(self, now: float) -> None:
        if self._history and now - self._history[-1]["t"] < self.history_interval:
            return
        records = self._totals().get("records_in", 0)
        rate = None
        if self._last_point is not None and now > self._last_point[0]:
            rate = (records - self._last_point[1]) / (now - self._last_point[0])
        self._last_point = (now, records)
        lat = self._lat_since
        self._lat_since = []
        self._history.append({
            "t": now, "records": records, "records_per_s": rate,
            "latency_p50_ms": float(np.percentile(lat, 50)) if lat else None,
            "latency_p99_ms": float(np.percentile(lat, 99)) if lat else None,
            "epochs": self._totals().get("epochs", 0)})

    def snapshot(self) -> Dict[str, Any]:
        """Everything live, JSON-able: per executor (latest counters, rates,
        watermark and lag), totals, the window latency percentiles, the
        history and the events."""
        with self._lock:
            per = {}
            for r in sorted(self._exec):
                d = dict(self._exec[r])
                d.update(self._rates.get(r, {"records_per_s": None, "bytes_per_s": None,
                                             "cpu_load": None, "epoch_ms": None,
                                             "input_wait": None}))
                per[str(r)] = d
            tot = self._totals()
            tot["records_per_s"] = sum(p.get("records_per_s") or 0 for p in per.values())
            lat = {"count": self._lat.count, "rows": self._window_rows, "flushed": self.windows_flushed,
                   **self._lat.percentiles()}
            return {"kind": self.kind, "time": time.time(), "started": self.started,
                    "executors": self.executors, "per_executor": per, "totals": tot,
                    "window_latency": lat, "history": list(self._history), "events": list(self.events)}

    # -- Prometheus ---------------------------------------------------------------
    def collect(self) -> Iterator[Any]:
        """The Prometheus collector (``registry.register(live)``): every
        metric built from the latest snapshots at scrape time, so feeding the
        registry costs nothing more than a dict update."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily  # optional dependency

        with self._lock:
            execs = {r: dict(s) for r, s in self._exec.items()}
            rates = {r: dict(v) for r, v in self._rates.items()}
            buckets, lsum = list(self._lat.counts), self._lat.sum
        for key, name, doc, scale in _COUNTERS:
            c = CounterMetricFamily(name[:-len("_total")], doc, labels=["executor"])
            for r in sorted(execs):
                c.add_metric([str(r)], float(execs[r].get(key) or 0) * scale)
            yield c
        d = CounterMetricFamily("slash_delta_bytes", "Delta bytes shipped between executors at epoch ends.",
                                labels=["executor", "direction"])
        for r in sorted(execs):
            d.add_metric([str(r), "sent"], float(execs[r].get("delta_bytes_sent") or 0))
            d.add_metric([str(r), "received"], float(execs[r].get("delta_bytes_received") or 0))
        yield d
        wm = GaugeMetricFamily("slash_watermark_seconds", "The executor's watermark (event time, Unix s).",
                               labels=["executor"])
        lag = GaugeMetricFamily("slash_watermark_lag_seconds",
                                "How far the executor's watermark is ahead of the group's.",
                                labels=["executor"])
        rate = GaugeMetricFamily("slash_input_records_per_second",
                                 "Records applied per second between the last two reports.",
                                 labels=["executor"])
        behind = GaugeMetricFamily("slash_records_behind",
                                   "Records the source has due that the executor has not read yet.",
                                   labels=["executor"])
        ep = GaugeMetricFamily("slash_epoch_duration_seconds",
                               "Mean epoch duration between the last two reports.", labels=["executor"])
        for r in sorted(execs):
            s = execs[r]
            if s.get("watermark_ms") is not None:
                wm.add_metric([str(r)], s["watermark_ms"] / 1000.0)
            if s.get("watermark_lag_ms") is not None:
                lag.add_metric([str(r)], s["watermark_lag_ms"] / 1000.0)
            if s.get("records_behind") is not None:
                behind.add_metric([str(r)], s["records_behind"])
            if r in rates:
                rate.add_metric([str(r)], rates[r]["records_per_s"])
                if rates[r]["epoch_ms"] is not None:
                    ep.add_metric([str(r)], rates[r]["epoch_ms"] / 1000.0)
        yield from (wm, lag, behind, rate, ep)
        yield GaugeMetricFamily("slash_executors", "Executors in the group.", value=self.executors)
        cum, acc = [], 0
        for ub, c in zip([*(str(b) for b in LATENCY_BUCKETS), "+Inf"], buckets):
            acc += c
            cum.append((ub, acc))
        yield HistogramMetricFamily("slash_window_latency_seconds",
                                    "Emit wall clock minus window end, per window.",
                                    buckets=cum, sum_value=lsum)


# ---- the HTTP server -----------------------------------------------------------
def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _page() -> bytes:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ui", "live.html")
    with open(path, "rb") as f:
        return f.read()


class MetricsServer:
    """Serves a :class:`LiveMetrics` over HTTP on ``bind:port`` (port 0: a
    free one) from a daemon thread: ``/metrics`` (Prometheus text format),
    ``/api/metrics`` (JSON) and ``/`` (the live page). Bound to a
    non-loopback address, every request needs ``token`` (made if not given):
    ``?token=...`` or ``Authorization: Bearer ...``; the URLs carry it.
    """

    def __init__(self, live: LiveMetrics, port: int = 0, bind: str = "127.0.0.1",
                 token: Optional[str] = None) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # start-up: ~70 ms; ranks never need it
        from urllib.parse import parse_qs, urlparse

        try:
            from prometheus_client import CollectorRegistry  # optional dependency
            from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest  # optional dependency
        except ImportError:
            raise NotSupported("the metrics endpoint needs prometheus_client: "
                                    "pip install prometheus_client (or slash-stream[metrics])") from None
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InvalidArgument(f"metrics port must be an int in 0..65535 (0: any free port), got {port!r}")
        self.live = live
        self.token = None if _is_loopback(bind) else (token or secrets.token_urlsafe(16))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(live)  # type: ignore[arg-type]
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("metrics http: " + fmt, *args)

            def _authorized(self, query: Dict[str, List[str]]) -> bool:
                tok = server_self.token
                if tok is None:
                    return True
                given = query.get("token", [""])[0]
                auth = self.headers.get("Authorization", "")
                if auth.startswith("Bearer "):
                    given = auth[len("Bearer "):]
                return hmac.compare_digest(given.encode(), tok.encode())

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 -- http.server's name
                u = urlparse(self.path)
                if not self._authorized(parse_qs(u.query)):
                    self._send(403, "text/plain; charset=utf-8", b"token required\n")
                    return
                try:
                    if u.path == "/metrics":
                        self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
                    elif u.path == "/api/metrics":
                        self._send(200, "application/json",
                                   json.dumps(live.snapshot(), default=float).encode())
                    elif u.path in ("/", "/ui", "/index.html"):
                        self._send(200, "text/html; charset=utf-8", _page())
                    else:
                        self._send(404, "text/plain; charset=utf-8", b"not found\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        try:
            self._httpd = ThreadingHTTPServer((bind, port), Handler)
        except OSError as e:
            raise InvalidArgument(f"cannot serve metrics on {bind}:{port}: {e.strerror or e}") from None
        self._httpd.daemon_threads = True
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="slash-metrics-http", daemon=True)
        self._thread.start()
        shown = "127.0.0.1" if bind in ("", "0.0.0.0") else bind
        base = f"http://[{shown}]:{self.port}" if ":" in shown else f"http://{shown}:{self.port}"
        suffix = f"?token={self.token}" if self.token else ""
        self.url = f"{base}/metrics{suffix}"
        self.json_url = f"{base}/api/metrics{suffix}"
        self.ui_url = f"{base}/{suffix}"
        log.info("slash metrics: Prometheus endpoint %s, live page %s", self.url, self.ui_url)

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stops serving (idempotent)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(5)
        self._httpd.server_close()
