"""``slash bench channel``: ring-channel throughput and latency against a baseline.

One producer process (spawned) and one consumer process (this one). The
producer connects to the consumer's :class:`slash.Listener` with a random
token and, for ``--seconds``, fills every buffer to its payload capacity
(``buffer_size`` minus the channel footer): a 16-byte header (a
``time.monotonic_ns()`` stamp and a sequence number) and a copy of a source
buffer. With ``--api send`` (default) it calls ``send()``, one copy into the
slot in C; with ``--api reserve`` it writes into the slot from ``reserve()``
and ``commit()``\\ s it, the same single copy plus the cost of a new view object
per buffer in Python (measured slower from Python, hence not the default).
The consumer copies each buffer out with ``recv_into`` and reports:

* ``throughput_gbps``: payload bytes / seconds at the consumer, from the
  first buffer to end of stream (GB = 10^9 bytes);
* ``p50_us``, ``p99_us``: stamp-to-receipt time of every ``--sample-every``-th
  buffer (both processes read the same CLOCK_MONOTONIC), under full load, so
  it includes the queueing in a ring that back-pressure keeps full;
* ``baseline_gbps`` (and its latencies): the same payload moved in the same
  run by the same loops without Slash, a plain shared-memory ring with the
  same slot size and count for ``shm``, a raw TCP stream on 127.0.0.1 for
  ``ofi:*`` (see :mod:`slash.bench.baselines`); ``ratio`` = throughput /
  baseline;
* ``python_floor_ns`` and ``python_bound``: the interpreter's own cost per
  buffer in these loops, measured on a trivial link; when it is at least half
  the measured time per buffer, Python, not the channel, sets the number
  (small buffers), and ``note`` says so.

``--sweep`` repeats this over buffer sizes and credit counts, writes a PNG of
throughput and latency against buffer size, and returns every point.

>>> from slash.bench.channel import ChannelBenchConfig, run_once
>>> r = run_once(ChannelBenchConfig("shm", 65536, 8, seconds=0.2))  # doctest: +SKIP
>>> sorted(k for k in r if k.endswith("gbps"))  # doctest: +SKIP
['baseline_gbps', 'throughput_gbps']
"""
from __future__ import annotations

import argparse
import functools
import logging
import multiprocessing as mp
import os
import re
import secrets
import statistics
import sys
import time
from array import array
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

import slash
from slash.bench import baselines
from slash.bench._harness import HEADER, Measurement, consume, produce, python_floor_ns
from slash.bench.plot import plot_channel_sweep
from slash.errors import InvalidArgument, SystemFailure, Timeout

log = logging.getLogger(__name__)

NAME = "channel"
HELP = ("ring-channel throughput (GB/s) and latency (p50/p99 us) against a plain shared-memory "
        "ring (shm) or a raw TCP socket (ofi:*), measured in the same run")

APIS = ("reserve", "send")
SWEEP_SIZES = (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20)
SWEEP_CREDITS = (2, 4, 8, 16, 32, 64)
ACCEPT_TIMEOUT_S = 60.0   # spawning a child on a loaded 2-core machine can take seconds
RECV_TIMEOUT_S = 30.0
PYTHON_BOUND = 0.5        # floor / per-buffer time at or above which a run is called Python-bound


@dataclass(frozen=True)
class ChannelBenchConfig:
    """One run of the benchmark. The transport, buffer size and credits are checked by the core.

    ``sample_every``: one latency sample per this many buffers; ``repeat``:
    channel and baseline alternate this many times and the medians are kept.
    """

    transport: str = "shm"
    buffer_size: int = 65536
    credits: int = 8
    seconds: float = 2.0
    api: str = "send"
    sample_every: int = 8
    repeat: int = 1

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise InvalidArgument(f"--seconds must be > 0, got {self.seconds}")
        if self.api not in APIS:
            raise InvalidArgument(f"--api must be one of {', '.join(APIS)}, got {self.api!r}")
        if self.sample_every < 1:
            raise InvalidArgument(f"--sample-every must be >= 1, got {self.sample_every}")
        if self.repeat < 1:
            raise InvalidArgument(f"--repeat must be >= 1, got {self.repeat}")

    @property
    def baseline(self) -> str:
        return "shm-ring" if self.transport == "shm" else "tcp-socket"


# --- producer side (runs in the spawned child) --------------------------------
@dataclass(frozen=True)
class _ProducerJob:
    link: str        # "channel", "shm-ring" or "tcp-socket"
    address: str
    seconds: float
    transport: str = ""
    token: str = ""
    api: str = "send"


def _source(n: int) -> memoryview:
    pattern = bytes(range(1, 256))
    return memoryview(bytearray((pattern * (n // len(pattern) + 1))[:n]))


def _produce_channel(job: _ProducerJob) -> Dict[str, Any]:
    with slash.Transport(job.transport) as tp:
        ch = slash.Channel.connect(tp, job.address, token=job.token, timeout=ACCEPT_TIMEOUT_S)
        with ch:
            n = ch.payload_max
            src = _source(n)
            pack, body = HEADER.pack_into, src[HEADER.size:n]
            if job.api == "reserve":
                reserve, commit = ch.reserve, ch.commit

                def put(now: int, seq: int) -> None:
                    slot = memoryview(reserve(RECV_TIMEOUT_S)).cast("B")
                    pack(slot, 0, now, seq)
                    slot[HEADER.size:n] = body
                    commit(n)
            else:
                send, whole = ch.send, src[:n]

                def put(now: int, seq: int) -> None:
                    pack(src, 0, now, seq)
                    send(whole, RECV_TIMEOUT_S)

            count = produce(put, job.seconds)
            ch.send_eof(RECV_TIMEOUT_S)
            stats = ch.stats
    return {"buffers": count, "credit_stalls": stats["credit_stalls"], "hugepages": stats["hugepages"]}


def _produce_baseline(job: _ProducerJob) -> Dict[str, Any]:
    cls = baselines.ShmRingProducer if job.link == "shm-ring" else baselines.TcpStreamProducer
    link = cls(job.address)
    try:
        count = produce(link.putter(_source(link.payload)), job.seconds)
    finally:
        link.close()
    return {"buffers": count}


def _producer_main(job: _ProducerJob, conn: Any) -> None:
    """Child entry point: runs the producer and sends ("ok", report) or ("error", exc) back."""
    try:
        report = _produce_channel(job) if job.link == "channel" else _produce_baseline(job)
        conn.send(("ok", report))
    except BaseException as e:  # the parent re-raises it; a child traceback would only confuse
        try:
            conn.send(("error", e))
        except Exception:
            conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))
    finally:
        conn.close()


# --- consumer side (this process) -----------------------------------------------
class _Child:
    """The spawned producer and the pipe it reports on."""

    def __init__(self, job: _ProducerJob) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child_conn = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_producer_main, args=(job, child_conn), daemon=True,
                                name=f"slash-bench-{job.link}")
        self.proc.start()
        child_conn.close()
        self.link = job.link
        self._msg: Optional[Tuple[str, Any]] = None

    def check(self) -> bool:
        """True once the child reported success; raises its error, or SystemFailure if it died mute.

        The report is kept for :meth:`result`, so checking never loses it.
        """
        if self._msg is None and self.conn.poll():
            self._msg = self.conn.recv()
        if self._msg is not None:
            status, value = self._msg
            if status == "error":
                raise value
            return True
        if not self.proc.is_alive():
            if self.conn.poll():  # it reported just before exiting
                return self.check()
            raise SystemFailure(f"{self.link} producer exited with code {self.proc.exitcode}")
        return False

    def result(self, timeout: float) -> Dict[str, Any]:
        if self._msg is None:
            if not self.conn.poll(timeout):
                raise SystemFailure(f"{self.link} producer did not report within {timeout:.0f} s")
            self._msg = self.conn.recv()
        status, value = self._msg
        if status == "error":
            raise value
        self.proc.join(timeout)
        return value

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(5)
        self.conn.close()


def _accept_watching(accept: Callable[[float], Any], child: _Child) -> Any:
    """Calls accept(timeout) in short slices, checking the child in between."""
    deadline = time.monotonic() + ACCEPT_TIMEOUT_S
    while True:
        try:
            return accept(0.25)
        except (Timeout, TimeoutError) as e:  # socket.timeout is a TimeoutError
            if child.check():
                raise SystemFailure(f"the {child.link} producer finished without connecting") from e
            if time.monotonic() > deadline:
                raise Timeout(f"no {child.link} producer connected within {ACCEPT_TIMEOUT_S:.0f} s") from e


def _measure_channel(cfg: ChannelBenchConfig) -> Tuple[Measurement, Dict[str, Any]]:
    token = secrets.token_hex(16)
    with slash.Transport(cfg.transport) as tp, slash.Listener(tp, token=token) as lst:
        child = _Child(_ProducerJob("channel", lst.address, cfg.seconds, cfg.transport, token, cfg.api))
        try:
            ch = _accept_watching(
                lambda t: lst.accept(buffer_size=cfg.buffer_size, credits=cfg.credits, timeout=t), child)
            with ch:
                payload = ch.payload_max
                m = consume(functools.partial(ch.recv_into, timeout=RECV_TIMEOUT_S),
                            memoryview(bytearray(payload)), cfg.sample_every)
                stats = ch.stats
            report = child.result(RECV_TIMEOUT_S)
        finally:
            child.close()
    return m, {"payload_bytes": payload, "credit_stalls": report["credit_stalls"],
               "hugepages": bool(stats["hugepages"] or report["hugepages"]),
               "polls": stats["polls"], "empty_polls": stats["empty_polls"]}


def _measure_baseline(cfg: ChannelBenchConfig, payload: int) -> Measurement:
    dst = memoryview(bytearray(payload))
    if cfg.baseline == "shm-ring":
        ring = baselines.ShmRing(cfg.buffer_size, cfg.credits, payload)
        try:
            child = _Child(_ProducerJob("shm-ring", ring.address, cfg.seconds))
            try:
                ring.watch = child.check
                m = consume(ring.recv_into, dst, cfg.sample_every)
                child.result(RECV_TIMEOUT_S)
            finally:
                child.close()
        finally:
            ring.close()
        return m
    stream = baselines.TcpStream(payload)
    try:
        child = _Child(_ProducerJob("tcp-socket", stream.address, cfg.seconds))
        try:
            _accept_watching(stream.accept, child)
            m = consume(stream.recv_into, dst, cfg.sample_every)
            child.result(RECV_TIMEOUT_S)
        finally:
            child.close()
    finally:
        stream.close()
    return m


def _pooled(ms: List[Measurement]) -> Measurement:
    lat = array("q")
    for m in ms:
        lat.extend(m.latencies_ns)
    mid = sorted(ms, key=lambda m: m.gbps)[len(ms) // 2]
    return Measurement(mid.buffers, mid.nbytes, mid.elapsed_ns, lat)


def run_once(cfg: ChannelBenchConfig) -> Dict[str, Any]:
    """Measures the channel and its baseline side by side; returns the result dict.

    Raises a :class:`slash.errors.UsageError` for an unknown transport or a
    bad geometry (before any process starts, for the transport).
    """
    with slash.Transport(cfg.transport):  # an unknown transport fails here, before any spawn
        pass
    chans: List[Measurement] = []
    bases: List[Measurement] = []
    info: Dict[str, Any] = {}
    for i in range(cfg.repeat):
        log.info("channel %s run %d/%d: buffer %d B, %d credits, %.2f s", cfg.transport, i + 1,
                 cfg.repeat, cfg.buffer_size, cfg.credits, cfg.seconds)
        m, info = _measure_channel(cfg)
        chans.append(m)
        log.info("baseline %s run %d/%d", cfg.baseline, i + 1, cfg.repeat)
        bases.append(_measure_baseline(cfg, info["payload_bytes"]))
    ch, base = _pooled(chans), _pooled(bases)
    if ch.buffers == 0 or base.buffers == 0:
        raise SystemFailure(f"no buffers measured (channel {ch.buffers}, baseline {base.buffers}); "
                            f"--seconds {cfg.seconds} is too short for this machine")
    tput = statistics.median(m.gbps for m in chans)
    btput = statistics.median(m.gbps for m in bases)
    floor = python_floor_ns(info["payload_bytes"])
    per_buffer = ch.per_buffer_ns
    bound = floor >= PYTHON_BOUND * per_buffer
    note = (f"Python-bound: the interpreter's own cost per buffer in these loops ({floor:.0f} ns) is "
            f"{100 * floor / per_buffer:.0f}% of the measured {per_buffer:.0f} ns, so this number (and "
            f"the baseline's) mostly measures Python; a C micro-benchmark measures the channel itself"
            if bound else "")
    return {
        "bench": NAME, "transport": cfg.transport, "buffer_size": cfg.buffer_size,
        "payload_bytes": info["payload_bytes"], "credits": cfg.credits, "seconds": cfg.seconds,
        "api": cfg.api, "repeat": cfg.repeat,
        "throughput_gbps": tput, "baseline": cfg.baseline, "baseline_gbps": btput,
        "ratio": tput / btput if btput > 0 else None,
        "throughput_runs_gbps": [m.gbps for m in chans], "baseline_runs_gbps": [m.gbps for m in bases],
        "ratio_runs": [c.gbps / b.gbps if b.gbps > 0 else None for c, b in zip(chans, bases)],
        "p50_us": ch.percentile_us(50), "p99_us": ch.percentile_us(99),
        "baseline_p50_us": base.percentile_us(50), "baseline_p99_us": base.percentile_us(99),
        "buffers": ch.buffers, "baseline_buffers": base.buffers,
        "latency_samples": len(ch.latencies_ns), "per_buffer_ns": per_buffer,
        "baseline_per_buffer_ns": base.per_buffer_ns, "python_floor_ns": floor,
        "python_bound": bound, "note": note, "credit_stalls": info["credit_stalls"],
        "hugepages": info["hugepages"], "polls": info["polls"], "empty_polls": info["empty_polls"],
        "cpus": os.cpu_count(), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run_sweep(base: ChannelBenchConfig, sizes: List[int], credits: List[int], plot_path: str,
              progress: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Runs every (buffer size, credits) point, plots them to plot_path, returns all points."""
    points: List[Dict[str, Any]] = []
    total = len(sizes) * len(credits)
    for size in sizes:
        for c in credits:
            r = run_once(replace(base, buffer_size=size, credits=c))
            points.append(r)
            if progress is not None:
                progress(f"[{len(points)}/{total}] {summary(r)}")
    plot_channel_sweep(points, plot_path)
    return {"bench": NAME, "sweep": True, "transport": base.transport, "seconds": base.seconds,
            "api": base.api, "sizes": sizes, "credit_counts": credits, "plot": plot_path,
            "runs": points, "config": asdict(base)}


# --- command line ---------------------------------------------------------------
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20}


def parse_size(text: str) -> int:
    """``65536``, ``64K``, ``64KiB``, ``1M`` -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 4096, 64K, 1M)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _size_list(text: str) -> List[int]:
    return [parse_size(t) for t in text.split(",") if t.strip()]


def _int_list(text: str) -> List[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", default="shm", help="shm (default), ofi:tcp or ofi:verbs")
    parser.add_argument("--buffer-size", type=parse_size, default=65536, metavar="BYTES",
                        help="slot size including the channel footer: a multiple of 64 (default 64K)")
    parser.add_argument("--credits", type=int, default=8, metavar="N", help="slots in the ring (default 8)")
    parser.add_argument("--seconds", type=float, default=2.0, metavar="S",
                        help="how long each producer sends (default 2; per point with --sweep)")
    parser.add_argument("--api", choices=APIS, default="send",
                        help="producer calls send() (default) or writes in place with reserve()/commit()")
    parser.add_argument("--sample-every", type=int, default=8, metavar="K",
                        help="one latency sample per K buffers (default 8)")
    parser.add_argument("--repeat", type=int, default=1, metavar="R",
                        help="alternate channel and baseline R times and keep the medians (default 1)")
    parser.add_argument("--sweep", action="store_true",
                        help="run every buffer size x credits point and plot throughput and latency")
    parser.add_argument("--sweep-sizes", type=_size_list, default=list(SWEEP_SIZES), metavar="LIST",
                        help="buffer sizes for --sweep (default 1K,4K,16K,64K,256K,1M)")
    parser.add_argument("--sweep-credits", type=_int_list, default=list(SWEEP_CREDITS), metavar="LIST",
                        help="credit counts for --sweep (default 2,4,8,16,32,64)")
    parser.add_argument("--plot", metavar="PNG", help="where --sweep writes its plot (default: the "
                        "--json path with .png, else channel-sweep-TRANSPORT.png)")


def _plot_path(args: argparse.Namespace) -> str:
    if args.plot:
        return args.plot
    json_path = getattr(args, "json", None)
    if json_path and json_path != "-":
        return os.path.splitext(json_path)[0] + ".png"
    return f"channel-sweep-{args.transport.replace(':', '-')}.png"


def _progress(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> Dict[str, Any]:
    cfg = ChannelBenchConfig(args.transport, args.buffer_size, args.credits, args.seconds, args.api,
                             args.sample_every, args.repeat)
    if not args.sweep:
        return run_once(cfg)
    return run_sweep(cfg, args.sweep_sizes, args.sweep_credits, _plot_path(args), _progress)


def summary(r: Dict[str, Any]) -> str:
    """One line per run for the CLI."""
    flag = " [python-bound]" if r.get("python_bound") else ""
    ratio = "n/a" if r.get("ratio") is None else f"{r['ratio']:.2f}"
    return (f"channel {r['transport']} {r['buffer_size']} B x {r['credits']} credits: "
            f"{r['throughput_gbps']:.3f} GB/s vs {r['baseline']} {r['baseline_gbps']:.3f} GB/s "
            f"(ratio {ratio}), p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us{flag}")
