"""Producer and consumer bodies run in child processes by test_channel.py.

Kept in an importable module so the "spawn" start method can find them: the
children start clean, with no fabric state inherited through fork.
"""
from __future__ import annotations

import os
import signal
import struct
import time
import zlib

import slash

HEADER = struct.Struct("<QI")  # sequence number, crc32 of the rest


def payload(seq: int, size: int) -> bytes:
    body = (seq.to_bytes(8, "little") * (size // 8 + 1))[: size - HEADER.size]
    return HEADER.pack(seq, zlib.crc32(body)) + body


def size_for(seq: int, lo: int, hi: int) -> int:
    # deterministic pseudo-random sizes both sides can recompute
    x = (seq * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 29
    return lo + x % (hi - lo + 1)


def produce(spec, address, token, n, lo, hi, kill_after=False, result=None):
    ch = slash.Channel.connect(spec, address, token=token, timeout=30)
    for seq in range(n):
        ch.send(payload(seq, size_for(seq, lo, hi)), timeout=60)
    if result is not None:
        result.put(ch.stats)
    if kill_after:
        os.kill(os.getpid(), signal.SIGKILL)
    ch.send_eof()
    ch.close()


def produce_with_wrong_token(spec, address, token, result):
    try:
        slash.Channel.connect(spec, address, token=token + "-wrong", timeout=30)
        result.put("connected")
    except slash.errors.AuthenticationError as e:
        result.put(f"AuthenticationError: {e}")


def consume_then_die(spec, token, address_q, credits, hold_seconds):
    with slash.Listener(spec, token=token) as lst:
        address_q.put(lst.address)
        ch = lst.accept(buffer_size=1024, credits=credits, timeout=30)
        time.sleep(hold_seconds)
        os.kill(os.getpid(), signal.SIGKILL)
        ch.close()


def consume_slowly(spec, token, address_q, n, delay, result):
    with slash.Listener(spec, token=token) as lst:
        address_q.put(lst.address)
        ch = lst.accept(buffer_size=1024, credits=4, timeout=30)
        got = []
        for _ in range(n):
            time.sleep(delay)
            got.append(HEADER.unpack_from(ch.recv(timeout=30))[0])
        result.put(got)
        ch.recv(timeout=30)  # end of stream
        ch.close()


def consume_all(spec, token, address_q, result):
    """Receives every buffer until end of stream and returns them as bytes."""
    with slash.Listener(spec, token=token) as lst:
        address_q.put(lst.address)
        ch = lst.accept(buffer_size=1024, credits=4, timeout=30)
        result.put(list(ch))
        ch.close()
