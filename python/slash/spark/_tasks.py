"""Pieces every Slash barrier task shares: forming the executor group with
``BarrierTaskContext.allGather``, reading a Spark partition as a Slash source,
writing results straight to storage, and carrying "which rank failed, why"
from a task back to the driver: over the task's driver link as the run
layer's Error record (:func:`report_error`, read as a local rank's report is),
else through Spark's error text (a task killed before it could report).
"""
from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.compute import pc
from slash.errors import PeerDisconnected, ProtocolError, Timeout
from slash.executor import Executor
from slash.run.protocol import Error
from slash.spark._env import TaskFailed, conf_get

log = logging.getLogger(__name__)

_MARK = "[slash-task rank="
_MARK_RE = re.compile(r"\[slash-task rank=(\d+)\] ([^\n]*)")


class RankError(RuntimeError):
    """Raised inside a task; its text survives Spark's wrapping and names the rank."""


@contextmanager
def rank_errors(rank: int) -> Iterator[None]:
    try:
        yield
    except RankError:
        raise
    except BaseException as e:
        raise RankError(f"{_MARK}{rank}] {type(e).__name__}: {e}") from e


def raise_task_failure(exc: BaseException, what: str, reported: Optional[Error] = None) -> NoReturn:
    """Turns the exception Spark raised for a failed barrier job into
    TaskFailed naming the failed rank and its reason: the root cause the
    tasks ``reported`` to the driver if any, else the first one in Spark's text."""
    if reported is not None:
        raise TaskFailed(f"{what}: Slash executor rank {reported.rank} failed: {reported.text}",
                         reported.rank, reported.text) from None
    text = str(exc)
    m = _MARK_RE.search(text)
    if m:
        rank, why = int(m.group(1)), m.group(2).strip()
        raise TaskFailed(f"{what}: Slash executor rank {rank} failed: {why}", rank, why) from None
    if "Barrier execution mode does not allow" in text:
        from slash.errors import InvalidArgument

        raise InvalidArgument(
            f"{what}: Spark refuses to run the input's last stage in barrier mode: an RDD in it "
            "has another partition count than the stage (a coalesce(), union() or partition "
            "pruning since the last shuffle). Repartition the DataFrame (df.repartition(n)) or "
            "cut its lineage (df.localCheckpoint()) before passing it") from None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    raise TaskFailed(f"{what}: the Spark barrier stage failed: {first[:500]}", None, first) from exc


def _no_delay(sock: socket.socket) -> None:
    # the links carry a few small messages each way; with Nagle's algorithm
    # and delayed ACKs every authenticated connect cost 40 ms
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _timeval(seconds: float) -> bytes:
    import struct

    return struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))


def link_connect(address: Tuple[str, int], token: str, timeout: float) -> Any:
    """A ``multiprocessing`` Connection to a :class:`LinkListener`,
    authenticated with ``token`` (HMAC challenge both ways), Nagle off."""
    from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

    s = socket.create_connection(tuple(address), timeout=timeout)
    try:
        _no_delay(s)
        s.settimeout(None)
        conn = Connection(s.detach())
    finally:
        s.close()
    try:
        answer_challenge(conn, token.encode())
        deliver_challenge(conn, token.encode())
    except BaseException:
        conn.close()
        raise
    return conn


class LinkListener:
    """The driver's end of :func:`link_connect`: ``accept()`` returns an
    authenticated Connection; a peer without the token raises
    ``AuthenticationError``; ``close()`` wakes a blocked ``accept()``."""

    handshake_timeout = 10.0  # seconds a connecting peer has to authenticate

    def __init__(self, host: str, token: str) -> None:
        self._key = token.encode()
        self._sock = socket.create_server((host, 0), backlog=128)
        self._sock.settimeout(0.2)  # accept() rechecks close() this often
        self.address: Tuple[str, int] = (host, self._sock.getsockname()[1])
        self._closed = False

    def accept(self) -> Any:
        from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

        while True:
            if self._closed:
                raise OSError("link listener is closed")
            try:
                s, _ = self._sock.accept()
                break
            except socket.timeout:
                continue
        s.settimeout(None)
        _no_delay(s)
        # a peer that connects and then says nothing must not hold the
        # accepting thread: the kernel times the handshake's reads out
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(self.handshake_timeout))
        conn = Connection(s.detach())
        try:
            deliver_challenge(conn, self._key)
            answer_challenge(conn, self._key)
        except BaseException:
            conn.close()
            raise
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(0))
        finally:
            sock.close()
        return conn

    def close(self) -> None:
        self._closed = True
        self._sock.close()


class Rendezvous:
    """The driver's side of forming a group: an authenticated listener (HMAC
    with the query's token) to which each task sends (stage id, rank,
    listener address); once all N ranks arrived (a retried task replaces its
    rank), each gets the address list. Spark's ``allGather`` does the same
    but polls once a second, which costs every query about a second.

    The connections stay open afterwards: tasks report errors on them (so the
    driver can name the rank that failed first, not a peer that only saw it
    leave), and streams send results and receive "stop". ``on_message(rank,
    message)`` runs in a driver thread for every message.
    """

    def __init__(self, host: str, n: int, token: str,
                 on_message: Optional[Callable[[int, Any], None]] = None) -> None:
        self.n = n
        self._on_message = on_message
        self._lst = LinkListener(host, token)
        self.address: Tuple[str, int] = self._lst.address
        self._pending: Dict[int, Dict[int, Tuple[Any, str]]] = {}
        self._members: Dict[Any, int] = {}  # connection -> rank
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # one sender at a time on a connection
        self._close_lock = threading.Lock()  # links end in the reader, accept or close()
        self._joining: List[Any] = []  # sent to the group, also to ranks joining later
        self.errors: List[Error] = []  # the tasks' error reports, in arrival order
        self.lost: List[int] = []  # ranks whose link dropped, in order (a killed task's first)
        self._closed = False
        self.started_ms: Optional[int] = None  # wall clock when the group formed
        self._threads = [threading.Thread(target=self._accept, name="slash-rendezvous", daemon=True),
                         threading.Thread(target=self._read, name="slash-task-link", daemon=True)]
        for t in self._threads:
            t.start()

    @property
    def connected(self) -> int:
        """How many ranks of the formed group have their link open now."""
        with self._lock:
            return len(self._members)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._lst.accept()
                stage, rank, addr = conn.recv()
            except Exception as e:  # closed, or a peer without the token
                if not self._closed:
                    log.debug("rendezvous: dropped a connection: %s", e)
                continue
            with self._lock:
                group = self._pending.setdefault(stage, {})
                old = group.pop(rank, None)
                group[rank] = (conn, addr)
                complete = len(group) == self.n
                if complete:
                    del self._pending[stage]
            if old is not None:
                self._close_link(old[0])
            if complete:
                self._form(group)

    def _form(self, group: Dict[int, Tuple[Any, str]]) -> None:
        """A complete group: every rank gets the address list, then the ranks
        become members all at once (so a message a member sends is read only
        once every rank can be answered), then the messages sent to the group
        before it formed (:meth:`send_all` with ``joining=True``)."""
        addresses = [group[r][1] for r in range(self.n)]
        self.started_ms = int(time.time() * 1000)
        joined: Dict[Any, int] = {}
        with self._send_lock:  # no message overtakes the address list on a link
            for r in range(self.n):
                c = group[r][0]
                try:
                    c.send((addresses, self.started_ms))
                except OSError:
                    self._close_link(c)
                    continue
                joined[c] = r
            with self._lock:
                self._members.update(joined)
                early = list(self._joining)
            for msg in early:
                for c in joined:
                    try:
                        c.send(msg)
                    except OSError:
                        pass

    def _read(self) -> None:
        from multiprocessing.connection import wait

        while not self._closed:
            with self._lock:
                conns = list(self._members)
            if not conns:
                time.sleep(0.02)
                continue
            try:
                ready = wait(conns, timeout=0.1)
            except (OSError, ValueError):  # a link closed meanwhile (close())
                continue
            for c in ready:
                rank = self._members.get(c)
                if rank is None:  # closed by close() meanwhile
                    continue
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    with self._lock:
                        self._members.pop(c, None)
                    self.lost.append(rank)
                    self._close_link(c)
                    continue
                if isinstance(msg, Error):
                    self.errors.append(msg)
                if self._on_message is not None:
                    try:
                        self._on_message(rank, msg)
                    except Exception:
                        log.exception("slash.spark: handling a message from rank %d failed", rank)

    def send_all(self, msg: Any, joining: bool = False) -> None:
        """Sends ``msg`` to every rank whose link is open; ``joining``: also
        to every rank of a group that forms later, until :meth:`forget_joining`
        (a "stop" asked before the tasks joined must reach them)."""
        with self._lock:
            conns = list(self._members)
            if joining:  # under the lock that _form adds members with: each rank gets it once
                self._joining.append(msg)
        with self._send_lock:
            for c in conns:
                try:
                    c.send(msg)
                except OSError:
                    pass

    def forget_joining(self) -> None:
        """Groups that form from now on get none of the messages sent so far
        with ``joining=True`` (the driver moves on to another group)."""
        with self._lock:
            self._joining.clear()

    def send_to(self, rank: int, msg: Any) -> None:
        """Sends ``msg`` to rank's task of the newest group (best effort)."""
        with self._lock:
            conns = [c for c, r in self._members.items() if r == rank]
        if conns:
            with self._send_lock:
                try:
                    conns[-1].send(msg)
                except OSError:
                    pass

    def silent_loss(self) -> Optional[int]:
        """The first rank whose link dropped without an error report (its
        process was killed), or None."""
        told = {e.rank for e in self.errors}
        return next((r for r in self.lost if r not in told), None)

    def root_cause(self, wait: float = 2.0) -> Optional[Error]:
        """The first error a task reported that is not only a consequence of
        another's (a peer gone, a timeout); waits up to ``wait`` s for one."""
        deadline = time.monotonic() + wait
        while not self.errors and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # the others' reports arrive together
        for e in self.errors:
            if not isinstance(e.error, _CONSEQUENCES):
                return e
        return self.errors[0] if self.errors else None

    def _close_link(self, c: Any) -> None:
        """Closes a task link once, whichever thread sees it end first: the
        reader (EOF), the accept thread (a replaced or failed link) or
        close(). multiprocessing's Connection.close is not safe to race: two
        threads closing it at once both close the descriptor (EBADF, or
        worse, a descriptor reused meanwhile)."""
        with self._close_lock:
            c.close()

    def close(self) -> None:
        self._closed = True
        self._lst.close()
        with self._lock:
            conns = list(self._members)
            self._members.clear()
            conns += [c for group in self._pending.values() for c, _ in group.values()]
            self._pending.clear()
        for c in conns:
            self._close_link(c)


#: what a task fails of when a peer failed first (its link gone, a wait for it timed out)
_CONSEQUENCES = (PeerDisconnected, Timeout, ProtocolError)


def report_error(conn: Any, rank: int, e: BaseException) -> None:
    """Best effort, in the ``except`` block: tells the driver why this task
    fails, as a local rank does (:meth:`slash.run.protocol.Error.of`: a
    SlashError travels whole). An error that does not pickle goes as its
    type and text."""
    if conn is None:
        return
    rep = Error.of(rank, e)
    try:
        conn.send(rep)
    except Exception:
        try:
            conn.send(Error(rank, None, rep.text, rep.traceback))
        except Exception:
            pass


def driver_host(spark: Any) -> str:
    return (conf_get(spark, "spark.driver.host") or conf_get(spark, "spark.driver.bindAddress")
            or "127.0.0.1")


def barrier_stage(spark: Any, n: int, task: Callable[[Iterator[Any]], Iterator[Any]]) -> Any:
    """N barrier tasks that read nothing from Spark: ``task(partition)`` runs
    once per partition id 0..N-1 and yields plain rows (dicts). An RDD, not
    ``spark.range(N).mapInArrow``: no SQL planning and no Arrow stream for a
    trigger row, 60 ms less per query here. Its lineage has no shuffle."""
    return spark.sparkContext.parallelize(range(n), n).barrier().mapPartitions(task)


def join_group(transport: str, token: str, rendezvous: Optional[Tuple[str, int]] = None,
               timeout: float = 120.0) -> Tuple[int, List[str], Any, Any, Optional[int]]:
    """In a barrier task: this task's rank, every executor's listener address
    (rank order), this executor's listener, the connection to the driver and
    the wall clock (ms) when the group formed (both None without
    ``rendezvous``: then the addresses go through allGather)."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    lst = Executor.listen(transport, token=token)
    conn = None
    started_ms = None
    try:
        if rendezvous is None:
            addresses = ctx.allGather(lst.address)
        else:
            conn = link_connect(tuple(rendezvous), token, timeout)
            conn.send((ctx.stageId(), rank, lst.address))
            if not conn.poll(timeout):
                raise Timeout(f"rank {rank}: the other executors did not join within {timeout} s")
            addresses, started_ms = conn.recv()
    except BaseException:
        lst.close()
        if conn is not None:
            conn.close()
        raise
    return rank, list(addresses), lst, conn, started_ms


class PartitionSource:
    """A Spark partition's Arrow batches as a one-shot Slash source.

    Bounded, with no promise about its order (a DataFrame's rows come in any
    order): the executor fires its windows at the end, so nothing is late.
    Spark timestamps arrive as timestamp[us, UTC] and stay so: windows are
    computed on microseconds, as Spark's own.
    """

    bounded = True

    def __init__(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch],
                 time_columns: Tuple[str, ...] = ()) -> None:
        self.schema = schema
        self._batches = batches
        self._time_columns = time_columns

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
        for b in self._batches:
            if not b.num_rows:
                continue
            if columns:
                b = b.select(columns)
            yield b


def spark_input_schema(df: Any) -> Tuple[pa.Schema, Tuple[str, ...]]:
    """The Arrow schema a query checks a Spark DataFrame against (as
    mapInArrow hands the rows over: timestamps as timestamp[us, UTC]), and
    its timestamp columns."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import TimestampNTZType, TimestampType

    ts = tuple(f.name for f in df.schema.fields if isinstance(f.dataType, (TimestampType, TimestampNTZType)))
    schema = to_arrow_schema(df.schema, timezone="UTC")
    for c in ts:  # mapInArrow hands TimestampNTZ over as timestamp[us] without a zone
        i = schema.get_field_index(c)
        f = schema.field(i)
        if pa.types.is_timestamp(f.type) and f.type.unit != "us":
            schema = schema.set(i, pa.field(c, pa.timestamp("us", f.type.tz), f.nullable))
    return schema, ts


def open_fs(root: str) -> Tuple[Any, str]:
    """A pyarrow filesystem and path for a local directory or a URI (hdfs://, s3://, ...)."""
    from pyarrow import fs

    if "://" in root:
        return fs.FileSystem.from_uri(root)
    return fs.LocalFileSystem(), os.path.abspath(root)


def as_micros(table: pa.Table) -> pa.Table:
    """``table`` with nanosecond timestamps as microseconds, floored (a
    time before 1970 too: -1 ns is -1 us, not 0), as Spark has no
    nanosecond timestamps and a window bound must not move past its
    records."""
    cols, changed = [], False
    for i, f in enumerate(table.schema):
        col = table.column(i)
        if pa.types.is_timestamp(f.type) and f.type.unit == "ns":
            col = pa.chunked_array([_floor_us(c, f.type.tz) for c in col.chunks],
                                   pa.timestamp("us", f.type.tz))
            f, changed = f.with_type(col.type), True
        cols.append((f, col))
    if not changed:
        return table
    return pa.Table.from_arrays([c for _, c in cols], schema=pa.schema([f for f, _ in cols],
                                                                       metadata=table.schema.metadata))


def _floor_us(chunk: pa.Array, tz: Optional[str]) -> pa.Array:
    ns = pc.fill_null(chunk.view(pa.int64()), 0).to_numpy(zero_copy_only=False)
    mask = chunk.is_null().to_numpy(zero_copy_only=False) if chunk.null_count else None
    return pa.array(np.floor_divide(ns, 1000), pa.int64(), mask=mask).view(pa.timestamp("us", tz))


def write_table(table: pa.Table, directory: str, name: str) -> str:
    """Writes ``table`` as ``directory/name`` atomically (temp file, then
    rename), nanosecond timestamps floored to microseconds (:func:`as_micros`)."""
    table = as_micros(table)
    fsys, d = open_fs(directory)
    fsys.create_dir(d, recursive=True)
    final = f"{d}/{name}"
    tmp = f"{d}/_tmp-{uuid.uuid4().hex}-{name}"
    try:
        # lz4 without dictionaries: 1.6x snappy's write rate on 8-byte keys
        # timestamps as microseconds: Spark reads no nanosecond timestamps
        pq.write_table(table, tmp, filesystem=fsys, compression="lz4", use_dictionary=False,
                       coerce_timestamps="us", allow_truncated_timestamps=True)
        fsys.move(tmp, final)
    except BaseException:
        try:
            fsys.delete_file(tmp)
        except Exception:
            pass
        raise
    return final

