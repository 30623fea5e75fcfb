"""`slash bench channel`: short runs over each transport, the baselines, and the measuring loops.

No timing assertions beyond "more than zero": these machines are shared.
"""
import math
import multiprocessing as mp
import threading
from array import array

import pytest

import slash
from slash import errors
from slash.bench import baselines
from slash.bench._harness import HEADER, Measurement, SequenceError, consume, produce
from slash.bench.channel import (ChannelBenchConfig, _Child, _ProducerJob, parse_size, run_once,
                                 run_sweep)

TRANSPORTS = ["shm", pytest.param("ofi:tcp", marks=pytest.mark.skipif(
    not slash.have_ofi(), reason="this build has no ofi transport (apt-get install libfabric-dev)"))]
FIELDS = ("throughput_gbps", "baseline_gbps", "ratio", "p50_us", "p99_us",
          "transport", "buffer_size", "credits", "seconds")


@pytest.fixture(autouse=True)
def no_leftover_children():
    yield
    left = mp.active_children()
    for p in left:
        p.kill()
    assert not left, f"producer processes left running: {left}"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("api", ["send", "reserve"])
def test_short_run(transport, api):
    r = run_once(ChannelBenchConfig(transport, 16384, 4, seconds=0.4, api=api))
    for key in FIELDS:
        assert key in r, key
    assert (r["transport"], r["buffer_size"], r["credits"], r["seconds"], r["api"]) == \
        (transport, 16384, 4, 0.4, api)
    assert r["baseline"] == ("shm-ring" if transport == "shm" else "tcp-socket")
    assert r["throughput_gbps"] > 0 and r["baseline_gbps"] > 0
    assert r["ratio"] == pytest.approx(r["throughput_gbps"] / r["baseline_gbps"])
    assert r["ratio_runs"] == [pytest.approx(r["ratio"])]  # one repeat: one channel/baseline pair
    assert 0 < r["payload_bytes"] < r["buffer_size"]
    assert r["buffers"] > 0 and r["latency_samples"] > 0
    assert 0 < r["p50_us"] <= r["p99_us"]
    assert r["python_bound"] == (r["python_floor_ns"] >= 0.5 * r["per_buffer_ns"])
    assert bool(r["note"]) == r["python_bound"]


def test_unknown_transport_is_a_usage_error():
    with pytest.raises(errors.UsageError, match="carrier-pigeon"):
        run_once(ChannelBenchConfig("carrier-pigeon", seconds=0.1))


def test_bad_geometry_is_a_usage_error_and_stops_the_producer():
    with pytest.raises(errors.InvalidArgument, match="1000"):
        run_once(ChannelBenchConfig("shm", 1000, 4, seconds=0.1))


@pytest.mark.parametrize("kwargs", [dict(seconds=0), dict(api="mmap"), dict(sample_every=0),
                                    dict(repeat=0)])
def test_config_validates(kwargs):
    with pytest.raises(errors.InvalidArgument):
        ChannelBenchConfig(**kwargs)


def test_sweep_writes_plot_and_all_points(tmp_path):
    png = tmp_path / "sweep.png"
    lines = []
    r = run_sweep(ChannelBenchConfig("shm", seconds=0.2), [4096, 65536], [2, 8], str(png), lines.append)
    assert [(p["buffer_size"], p["credits"]) for p in r["runs"]] == [(4096, 2), (4096, 8), (65536, 2),
                                                                    (65536, 8)]
    assert all(p["throughput_gbps"] > 0 for p in r["runs"])
    assert len(lines) == 4 and lines[0].startswith("[1/4] channel shm 4096 B x 2 credits")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parse_size():
    assert [parse_size(s) for s in ("4096", "4K", "64KiB", "1M", "2mb")] == \
        [4096, 4096, 65536, 1 << 20, 2 << 20]
    with pytest.raises(Exception, match="not a size"):
        parse_size("4 parsecs")


# --- the measuring loops and the baselines, in one process ------------------------
def _feed(seqs, payload=64):
    """A recv_into that delivers buffers with the given sequence numbers, then end of stream."""
    it = iter(seqs)

    def recv_into(dst):
        seq = next(it, None)
        if seq is None:
            return 0
        HEADER.pack_into(dst, 0, 0, seq)
        return payload

    return recv_into


def test_consume_counts_after_first_buffer():
    m = consume(_feed(range(10, 30)), memoryview(bytearray(64)), sample_every=1)
    assert (m.buffers, m.nbytes, len(m.latencies_ns)) == (19, 19 * 64, 19)


@pytest.mark.parametrize("seqs", [[0, 1, 2, 4, 5], [0, 1, 1, 2], [0, 2, 1, 3]])
def test_consume_detects_loss_duplicates_reordering(seqs):
    with pytest.raises(SequenceError):
        consume(_feed(seqs), memoryview(bytearray(64)), sample_every=1)


def test_measurement_percentiles():
    m = Measurement(100, 10**9, 10**9, array("q", [i * 1000 for i in range(1, 101)]))
    assert m.gbps == 1.0
    assert (m.percentile_us(50), m.percentile_us(99)) == (51.0, 99.0)
    assert math.isnan(Measurement(0, 0, 0, array("q")).percentile_us(50))


def _roundtrip(consumer, link, n):
    """A thread puts n buffers through the producer link; returns (header, body ok) per buffer received."""
    payload = consumer.payload
    src = memoryview(bytearray(range(256)) * (payload // 256 + 1))[:payload]

    def producer():
        put = link.putter(src)
        for seq in range(n):
            put(seq, seq)
        link.close()

    t = threading.Thread(target=producer)
    t.start()
    got, dst = [], memoryview(bytearray(payload))
    try:
        while consumer.recv_into(dst):
            got.append((HEADER.unpack_from(dst), bytes(dst[HEADER.size:]) == bytes(src[HEADER.size:])))
    finally:
        t.join(30)
    return got


def test_shm_ring_is_fifo_exactly_once_with_wraparound():
    ring = baselines.ShmRing(slot_size=256, slots=3, payload=200)
    try:
        got = _roundtrip(ring, baselines.ShmRingProducer(ring.address), 1000)
    finally:
        ring.close()
    assert got == [((i, i), True) for i in range(1000)]


def test_tcp_stream_is_fifo_exactly_once():
    stream = baselines.TcpStream(payload=1000)
    try:
        link = baselines.TcpStreamProducer(stream.address)  # the listen backlog takes it before accept
        stream.accept(10)
        got = _roundtrip(stream, link, 500)
    finally:
        stream.close()
    assert got == [((i, i), True) for i in range(500)]


def test_produce_stops_at_deadline():
    calls = []
    n = produce(lambda now, seq: calls.append(seq), 0.05)
    assert n == len(calls) > 0 and calls == list(range(n))


def test_producer_that_dies_is_reported_not_waited_for():
    ring = baselines.ShmRing(slot_size=256, slots=2, payload=100)
    try:
        missing = ring.address.replace(ring.path, ring.path + "-missing")
        child = _Child(_ProducerJob("shm-ring", missing, seconds=0.1))
        try:
            ring.watch = child.check
            with pytest.raises(FileNotFoundError):
                consume(ring.recv_into, memoryview(bytearray(100)), sample_every=1)
        finally:
            child.close()
    finally:
        ring.close()
