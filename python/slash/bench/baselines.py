"""Baselines for ``slash bench channel``: the same bytes moved without Slash.

Each baseline is a link (see :mod:`slash.bench._harness`) with a consumer
end, opened in the measuring process, and a producer end, opened in a child
process from the consumer's ``address``:

* :class:`ShmRing` (for ``shm``): a plain shared-memory ring of ``slots``
  slots of ``slot_size`` bytes in a file under /dev/shm, with a head counter
  (written by the producer) and a tail counter (written by the consumer) on
  separate cache lines. The producer copies the payload into the slot and
  then publishes head; the consumer copies it out and then publishes tail.
  Same copies, same slot count and size as the channel; no footer, no
  credits message. It relies on x86-64 store ordering (TSO): on a weakly
  ordered CPU it would need fences, and :func:`shm_ring_ordering_ok` says so.
* :class:`TcpStream` (for ``ofi:*``): one TCP connection on 127.0.0.1 (or the
  given host), ``sendall`` of each buffer and ``recv_into`` of exactly its
  size with MSG_WAITALL; TCP_NODELAY so small buffers are not held back.
"""
from __future__ import annotations

import mmap
import os
import platform
import secrets
import socket
from typing import Callable, Optional, Tuple

from slash.bench._harness import HEADER, Backoff

_HEAD, _CLOSED, _TAIL = 0, 1, 8  # int64 indexes: head and closed on line 0, tail on line 1
_HDR_BYTES = 128


def shm_ring_ordering_ok() -> bool:
    """True on CPUs whose store order makes the counter protocol safe without fences."""
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


class ShmRing:
    """Consumer end of the shared-memory ring baseline; ``address`` names it for the producer."""

    def __init__(self, slot_size: int, slots: int, payload: int,
                 watch: Optional[Callable[[], None]] = None) -> None:
        if not 0 < payload <= slot_size or slots <= 0:
            raise ValueError(f"bad ring geometry: payload {payload}, slot {slot_size}, slots {slots}")
        self.slot_size, self.slots, self.payload = slot_size, slots, payload
        self.path = f"/dev/shm/slash-bench-ring-{os.getpid()}-{secrets.token_hex(4)}"
        size = _HDR_BYTES + slot_size * slots
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.buf = memoryview(self.mm)
        self.ctr = self.buf[:_HDR_BYTES].cast("q")
        self.tail = 0
        self.watch = watch  # called now and then while waiting: raises if the producer died

    @property
    def address(self) -> str:
        return f"{self.path}?slot={self.slot_size}&slots={self.slots}&payload={self.payload}"

    def recv_into(self, dst: memoryview) -> int:
        """Copies the next buffer into dst; returns its size, or 0 once the producer closed."""
        ctr, t = self.ctr, self.tail
        if ctr[_HEAD] == t:
            b = Backoff()
            while ctr[_HEAD] == t:
                if ctr[_CLOSED] and ctr[_HEAD] == t:
                    return 0
                b.wait()
                if self.watch is not None and b.n % 1024 == 0:
                    self.watch()
        off = _HDR_BYTES + (t % self.slots) * self.slot_size
        n = self.payload
        dst[:n] = self.buf[off:off + n]
        self.tail = t + 1
        ctr[_TAIL] = t + 1
        return n

    def close(self) -> None:
        if self.mm is None:
            return
        self.ctr.release()
        self.buf.release()
        self.mm.close()
        self.mm = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class ShmRingProducer:
    """Producer end: attaches the ring named by a :attr:`ShmRing.address`."""

    def __init__(self, address: str) -> None:
        path, _, query = address.partition("?")
        geo = dict(kv.split("=", 1) for kv in query.split("&"))
        self.slot_size, self.slots, self.payload = int(geo["slot"]), int(geo["slots"]), int(geo["payload"])
        fd = os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        self.buf = memoryview(self.mm)
        self.ctr = self.buf[:_HDR_BYTES].cast("q")
        self.head = 0

    def putter(self, src: memoryview) -> Callable[[int, int], None]:
        """The ``put(now, seq)`` for the producer loop: copy src into the next slot, publish."""
        ctr, buf, slots, size, n = self.ctr, self.buf, self.slots, self.slot_size, self.payload
        body = src[HEADER.size:n]
        pack = HEADER.pack_into

        def put(now: int, seq: int) -> None:
            h = self.head
            if h - ctr[_TAIL] >= slots:
                b = Backoff()
                while h - ctr[_TAIL] >= slots:
                    b.wait()
            off = _HDR_BYTES + (h % slots) * size
            pack(buf, off, now, seq)
            buf[off + HEADER.size:off + n] = body
            self.head = ctr[_HEAD] = h + 1

        return put

    def close(self) -> None:
        if self.mm is None:
            return
        self.ctr[_CLOSED] = 1
        self.ctr.release()
        self.buf.release()
        self.mm.close()
        self.mm = None


class TcpStream:
    """Consumer end of the TCP baseline: listens on host:0 and accepts one producer."""

    def __init__(self, payload: int, host: str = "127.0.0.1") -> None:
        self.payload = payload
        self.server = socket.create_server((host, 0))
        self.conn: Optional[socket.socket] = None

    @property
    def address(self) -> str:
        host, port = self.server.getsockname()[:2]
        return f"{host}:{port}?payload={self.payload}"

    def accept(self, timeout: float) -> None:
        self.server.settimeout(timeout)
        self.conn, _ = self.server.accept()
        self.conn.settimeout(None)

    def recv_into(self, dst: memoryview) -> int:
        """Reads exactly one buffer into dst; 0 at end of stream."""
        n = self.payload
        got = self.conn.recv_into(dst, n, socket.MSG_WAITALL)
        while 0 < got < n:  # a signal can cut MSG_WAITALL short
            r = self.conn.recv_into(dst[got:n], n - got, socket.MSG_WAITALL)
            if r == 0:
                raise ConnectionError(f"TCP stream ended inside a buffer ({got} of {n} bytes)")
            got += r
        return got

    def close(self) -> None:
        for s in (self.conn, self.server):
            if s is not None:
                s.close()
        self.conn = None


class TcpStreamProducer:
    def __init__(self, address: str, timeout: float = 30.0) -> None:
        hostport, _, query = address.partition("?")
        self.payload = int(query.split("=", 1)[1])
        host, port = _split_hostport(hostport)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def putter(self, src: memoryview) -> Callable[[int, int], None]:
        sendall, pack, whole = self.sock.sendall, HEADER.pack_into, src[:self.payload]

        def put(now: int, seq: int) -> None:
            pack(src, 0, now, seq)
            sendall(whole)

        return put

    def close(self) -> None:
        self.sock.close()


def _split_hostport(s: str) -> Tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)
