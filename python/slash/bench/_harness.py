"""Shared measuring loops for the link benchmarks (private: not a benchmark).

A *link* moves fixed-size buffers from a producer process to a consumer
process: a Slash channel, or a baseline (a shared-memory ring, a TCP socket).
Every link is driven by the same two loops, so the per-buffer interpreter
cost is the same on both sides of a comparison:

* :func:`produce` calls ``put(now_ns, seq)`` until the deadline; ``put``
  writes a 16-byte header (CLOCK_MONOTONIC stamp, sequence number) and the
  rest of the payload, and publishes the buffer;
* :func:`consume` calls ``recv_into(dst) -> nbytes`` (0 at end of stream)
  and starts its clock at the first buffer, so start-up is not measured.
  Every ``sample_every``-th buffer it checks the sequence number (a loss,
  duplicate or reordering is an error) and records ``now - stamp`` as one
  latency sample. Producer and consumer run on one host and share the clock.
"""
from __future__ import annotations

import os
import struct
import time
from array import array
from dataclasses import dataclass, field
from typing import Callable, Dict

#: stamp (time.monotonic_ns at publish) and sequence number, at the start of every buffer
HEADER = struct.Struct("<qq")


@dataclass
class Measurement:
    """What the consumer saw: payload bytes and buffers after the first one, over elapsed_ns."""

    buffers: int
    nbytes: int
    elapsed_ns: int
    latencies_ns: array = field(repr=False)

    @property
    def gbps(self) -> float:
        """Payload throughput in GB/s (10^9 bytes per second)."""
        return self.nbytes / self.elapsed_ns if self.elapsed_ns > 0 else 0.0

    @property
    def per_buffer_ns(self) -> float:
        return self.elapsed_ns / self.buffers if self.buffers else float("nan")

    def percentile_us(self, q: float) -> float:
        """Nearest-rank percentile of the latency samples, in microseconds (nan if none)."""
        if not len(self.latencies_ns):
            return float("nan")
        s = sorted(self.latencies_ns)
        return s[min(len(s) - 1, max(0, round(q / 100.0 * (len(s) - 1))))] / 1000.0

    def summary(self) -> Dict[str, float]:
        return {"gbps": self.gbps, "p50_us": self.percentile_us(50), "p99_us": self.percentile_us(99),
                "buffers": self.buffers, "latency_samples": len(self.latencies_ns),
                "per_buffer_ns": self.per_buffer_ns}


class SequenceError(RuntimeError):
    """A buffer arrived out of order, twice, or not at all."""


def produce(put: Callable[[int, int], None], seconds: float) -> int:
    """Publishes buffers through ``put(now_ns, seq)`` for ``seconds``; returns how many."""
    mono = time.monotonic_ns
    deadline = mono() + int(seconds * 1e9)
    seq = 0
    while True:
        now = mono()
        if now >= deadline:
            return seq
        put(now, seq)
        seq += 1


def consume(recv_into: Callable[[memoryview], int], dst: memoryview, sample_every: int) -> Measurement:
    """Receives until end of stream; see the module docstring for what is measured."""
    mono = time.monotonic_ns
    unpack = HEADER.unpack_from
    lat = array("q")
    n = recv_into(dst)
    t0 = mono()
    if not n:
        return Measurement(0, 0, 0, lat)
    first = unpack(dst)[1]
    count = nbytes = 0
    while True:
        n = recv_into(dst)
        if not n:
            break
        count += 1
        nbytes += n
        if count % sample_every == 0:
            now = mono()
            stamp, seq = unpack(dst)
            if seq != first + count:
                raise SequenceError(f"buffer {first + count} expected, {seq} received")
            lat.append(now - stamp)
    return Measurement(count, nbytes, mono() - t0, lat)


def python_floor_ns(payload: int, seconds: float = 0.02) -> float:
    """Interpreter cost of one buffer in :func:`produce` / :func:`consume` with a trivial link.

    Runs both loops against a local 64-byte buffer with calls as simple as a
    link's (a stamp, a short copy, a counter), one after the other, and returns
    the larger per-buffer time: the floor under any link driven from Python.
    """
    slot = bytearray(max(64, HEADER.size))
    view = memoryview(slot)
    src = memoryview(bytes(len(slot)))
    pack = HEADER.pack_into

    def put(now: int, seq: int) -> None:
        pack(view, 0, now, seq)
        view[16:] = src[16:]

    t = time.perf_counter_ns()
    sent = produce(put, seconds)
    put_ns = (time.perf_counter_ns() - t) / max(1, sent)

    left = [sent]
    pack(view, 0, 0, 0)

    def recv_into(dst: memoryview) -> int:
        if left[0] <= 0:
            return 0
        left[0] -= 1
        dst[16:] = src[16:]
        pack(dst, 0, time.monotonic_ns(), sent - left[0])
        return payload

    t = time.perf_counter_ns()
    consume(recv_into, view, 8)
    recv_ns = (time.perf_counter_ns() - t) / max(1, sent)
    return max(put_ns, recv_ns)


class Backoff:
    """Waiting without pinning a core: spin, then yield, then sleep briefly (2 shared cores).

    ``wait()`` raises TimeoutError once it has slept for ``stall_s`` seconds in
    a row, so a peer that vanished cannot hang a benchmark.
    """

    __slots__ = ("n", "since", "stall_s")
    SPIN, YIELD, SLEEP_S = 64, 256, 20e-6

    def __init__(self, stall_s: float = 60.0) -> None:
        self.n = 0
        self.since = 0.0
        self.stall_s = stall_s

    def wait(self) -> None:
        self.n += 1
        if self.n <= self.SPIN:
            return
        if self.n <= self.YIELD:
            os.sched_yield()
            return
        now = time.monotonic()
        if not self.since:
            self.since = now
        elif now - self.since > self.stall_s:
            raise TimeoutError(f"the peer made no progress for {self.stall_s:.0f} s")
        time.sleep(self.SLEEP_S)
