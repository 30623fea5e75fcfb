"""The ring channel's guarantees, on every transport: FIFO, exactly once, no
torn reads, back-pressure without loss or overwrite, dead peers reported in
bounded time, wrong tokens refused on both sides, bad arguments rejected."""
from __future__ import annotations

import multiprocessing as mp
import os
import time
import zlib

import numpy as np
import pyarrow as pa
import pytest

import slash
from slash import errors

import channel_peers as peers

# the peers start clean ("spawn": no fabric state inherited through fork), or, with
# SLASH_TEST_PEER_START=forkserver, forked from a server that imported channel_peers
# (and slash) once and never opened a fabric: scripts/verbs-tests.sh's choice, where
# each spawned peer's Python start costs 10-30 s of the guest's software CPU
CTX = mp.get_context(os.environ.get("SLASH_TEST_PEER_START", "spawn"))
if CTX.get_start_method() == "forkserver":
    CTX.set_forkserver_preload(["channel_peers"])
# a spawned peer's start, until it announces its address: a Python start with
# slash imported took over a minute in the soft-RoCE guest's software CPU
START_TIMEOUT = 180


def start(target, *args):
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p


def check_payload(buf, seq):
    got_seq, crc = peers.HEADER.unpack_from(buf)
    assert got_seq == seq
    assert zlib.crc32(memoryview(buf)[peers.HEADER.size:]) == crc


def test_fifo_exactly_once_over_random_sizes_and_many_ring_laps(transport, token):
    # a million buffers through 16 credits on shm; the remote transports take
    # 200,000 (12,500 laps of the ring, every slot's lap flag flipped that
    # often): a buffer costs them ~10x what it costs shm (each poll drives the
    # provider), and a million cost ofi:tcp 90-130 s of CI time, proving no more
    # SLASH_TEST_BUFFERS caps it where a buffer costs far more (the soft-RoCE
    # guest's software CPU, scripts/rxe-guest.sh)
    n = 1_000_000 if transport == "shm" else 200_000
    n = min(n, int(os.environ.get("SLASH_TEST_BUFFERS", n)))
    lo, hi = 16, 2000
    with slash.Listener(transport, token=token) as lst:
        p = start(peers.produce, transport, lst.address, token, n, lo, hi)
        ch = lst.accept(buffer_size=2048, credits=16, timeout=60)
        buf = bytearray(2048)
        seq = 0
        while True:
            k = ch.recv_into(buf, timeout=60)
            if k == 0:
                break
            assert k == peers.size_for(seq, lo, hi)
            assert int.from_bytes(buf[:8], "little") == seq
            seq += 1
        assert seq == n
        assert ch.stats["buffers"] == n
        p.join(30)
        assert p.exitcode == 0


def test_no_torn_reads_checksummed_payloads(transport, token):
    n = min(3000, int(os.environ.get("SLASH_TEST_BUFFERS", 3000)))
    with slash.Listener(transport, token=token) as lst:
        p = start(peers.produce, transport, lst.address, token, n, 1024, 65536 - 16)
        ch = lst.accept(buffer_size=65536, credits=4, timeout=60)
        for seq in range(n):
            with ch.poll(timeout=60) as msg:
                assert len(msg) == peers.size_for(seq, 1024, 65536 - 16)
                check_payload(msg, seq)
        assert ch.poll(timeout=60) is None
        p.join(30)
        assert p.exitcode == 0


def test_slow_consumer_blocks_producer_without_loss(transport, token):
    q, result = CTX.Queue(), CTX.Queue()
    n = 40
    c = start(peers.consume_slowly, transport, token, q, n, 0.01, result)
    addr = q.get(timeout=START_TIMEOUT)
    ch = slash.Channel.connect(transport, addr, token=token, timeout=30)
    for seq in range(n):
        ch.send(peers.payload(seq, 100), timeout=30)
    assert ch.stats["credit_stalls"] > 0
    assert ch.stats["credits"] == 4  # ring memory fixed at connect: bounded
    ch.send_eof()
    assert result.get(timeout=30) == list(range(n))
    ch.close()
    c.join(30)
    assert c.exitcode == 0


def test_full_ring_times_out_instead_of_overwriting(transport, token):
    q = CTX.Queue()
    c = start(peers.consume_then_die, transport, token, q, 2, 3.0)
    ch = slash.Channel.connect(transport, q.get(timeout=START_TIMEOUT), token=token, timeout=30)
    ch.send(b"a")
    ch.send(b"b")
    with pytest.raises(errors.Timeout):
        ch.send(b"c", timeout=0.2)
    c.join(30)
    ch.close()


def test_producer_killed_consumer_gets_error_quickly(transport, token):
    with slash.Listener(transport, token=token) as lst:
        p = start(peers.produce, transport, lst.address, token, 500, 16, 200, True)
        ch = lst.accept(buffer_size=1024, credits=8, timeout=60)
        for seq in range(500):  # everything sent before the kill arrives
            check_payload(ch.recv(timeout=30), seq)
        t0 = time.monotonic()
        with pytest.raises(errors.PeerDisconnected):
            ch.recv(timeout=30)
        assert time.monotonic() - t0 < 10
        p.join(30)
        assert p.exitcode == -9


def test_consumer_killed_producer_gets_error_quickly(transport, token):
    q = CTX.Queue()
    c = start(peers.consume_then_die, transport, token, q, 4, 0.5)
    ch = slash.Channel.connect(transport, q.get(timeout=START_TIMEOUT), token=token, timeout=30)
    t0 = time.monotonic()
    with pytest.raises(errors.PeerDisconnected):
        for _ in range(100):
            ch.send(b"x" * 100, timeout=30)
    assert time.monotonic() - t0 < 10
    c.join(30)
    assert c.exitcode == -9
    ch.close()


def test_wrong_token_refused_on_both_sides(transport, token):
    result = CTX.Queue()
    with slash.Listener(transport, token=token) as lst:
        p = start(peers.produce_with_wrong_token, transport, lst.address, token, result)
        with pytest.raises(errors.AuthenticationError, match="token"):
            lst.accept(timeout=START_TIMEOUT)  # the peer is still starting
        assert result.get(timeout=30).startswith("AuthenticationError")
        p.join(30)


def test_zero_and_oversized_buffers_rejected(transport, token):
    q, result = CTX.Queue(), CTX.Queue()
    c = start(peers.consume_all, transport, token, q, result)
    prod = slash.Channel.connect(transport, q.get(timeout=START_TIMEOUT), token=token, timeout=30)
    with pytest.raises(errors.InvalidArgument, match="zero-length"):
        prod.send(b"")
    with pytest.raises(errors.BufferTooLarge, match="1009 bytes"):
        prod.send(b"x" * 1009)
    prod.send(b"y" * 1008)
    prod.close()
    assert result.get(timeout=30) == [b"y" * 1008]  # nothing else slipped through
    c.join(30)
    assert c.exitcode == 0


def test_arrow_and_numpy_buffers_are_sent_as_is(token):
    values = pa.array(np.arange(100, dtype=np.int64))
    arrow_buf = values.buffers()[1]
    q, result = CTX.Queue(), CTX.Queue()
    c = start(peers.consume_all, "shm", token, q, result)
    prod = slash.Channel.connect("shm", q.get(timeout=START_TIMEOUT), token=token, timeout=30)
    prod.send(arrow_buf)
    prod.send(np.arange(10, dtype=np.float64))
    view = prod.reserve()  # fill the slot in place: no staging copy at all
    view[:5] = b"hello"
    prod.commit(5)
    prod.close()
    got = result.get(timeout=30)
    assert got == [arrow_buf.to_pybytes(), np.arange(10, dtype=np.float64).tobytes(), b"hello"]
    c.join(30)


def test_received_message_is_a_zero_copy_view(token):
    q = CTX.Queue()
    with slash.Listener("shm", token=token) as lst:
        p = start(peers.produce, "shm", lst.address, token, 1, 64, 64)
        ch = lst.accept(timeout=START_TIMEOUT)
        msg = ch.poll(timeout=30)
        arrow = pa.py_buffer(msg)
        arr = np.frombuffer(msg, dtype=np.uint8)
        assert arrow.address == arr.ctypes.data  # both view the ring slot itself
        assert arrow.to_pybytes() == msg.tobytes()
        with pytest.raises(BufferError):
            msg.release()  # views still alive
        del arrow, arr
        msg.release()
        assert ch.poll(timeout=30) is None
        p.join(30)


def test_unknown_transport_and_missing_ofi_are_clear():
    with pytest.raises(errors.UnknownName, match="carrier-pigeon"):
        slash.Transport("carrier-pigeon")
    if not slash.have_ofi():
        with pytest.raises(errors.NotSupported, match="libfabric-dev"):
            slash.Transport("ofi:tcp")
    else:
        with pytest.raises(errors.UnknownName, match="nosuchprov"):
            slash.Transport("ofi:nosuchprov")


def test_bad_channel_geometry_is_rejected(token):
    with slash.Listener("shm", token=token) as lst:
        with pytest.raises(errors.InvalidArgument, match="multiple of 64"):
            lst.accept(buffer_size=1000, credits=4, timeout=0)
        with pytest.raises(errors.InvalidArgument, match="credits"):
            lst.accept(buffer_size=1024, credits=0, timeout=0)


def test_wrong_end_is_a_clear_error(token):
    with slash.Listener("shm", token=token) as lst:
        p = start(peers.produce, "shm", lst.address, token, 0, 16, 16)
        ch = lst.accept(timeout=START_TIMEOUT)
        with pytest.raises(errors.InvalidState, match="consumer end"):
            ch.send(b"x")
        assert ch.recv(timeout=30) is None
        p.join(30)


def test_close_is_idempotent_and_children_close_with_parent(token):
    tp = slash.Transport("shm")
    lst = slash.Listener(tp, token=token)
    tp.close()
    assert lst.closed and tp.closed
    tp.close()
    lst.close()
