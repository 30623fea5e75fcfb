"""Fired windows written to a topic (:class:`KafkaSink`): at least once,
or exactly once as a write-ahead sink tied to checkpoints.

Invariants (exactly once): a checkpoint's windows go to the topic only
after its manifest committed, in one Kafka transaction whose records carry
the checkpoint id (header ``slash-cut``); the ids the topic holds committed
ascend, so the highest one says what a recovery still has to deliver, and
``init_transactions`` on the same transactional id fences a dead attempt's
producer before anything is written again.
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pyarrow as pa

from slash.errors import InvalidArgument, InvalidState, SystemFailure, Timeout, UnknownName
from slash.kafka.client import confluent, connect, consumer_config

_CUT_HEADER = "slash-cut"


def _json_ready(table: pa.Table) -> pa.Table:
    """Timestamps as int64 ms since the epoch, dates and other non-JSON types as strings."""
    cols = []
    for f, col in zip(table.schema, table.columns):
        t = f.type
        if pa.types.is_timestamp(t):
            col = col.cast(pa.timestamp("ms", tz=t.tz)).cast(pa.int64())
        elif pa.types.is_date(t) or pa.types.is_decimal(t) or pa.types.is_binary(t):
            col = col.cast(pa.string())
        cols.append(col)
    return pa.Table.from_arrays(cols, names=table.column_names)


class KafkaSink:
    """Fired windows written to a topic: one record per result row, its value
    a JSON object of the row (window bounds as ms since the epoch when they
    are timestamps), its key the group key (``key``: the key column(s); one
    column's value as text, several as a JSON array).

    **At least once** (no ``transactional_id``): :meth:`write` (or calling
    the sink, e.g. as ``slash.spark.stream``'s callable ``sink``) produces
    the rows and waits until the broker acknowledged every one (idempotent
    producer: no duplicate from retries); an error raises SystemFailure.
    A failure and a retry may write a window again.

    **Exactly once** (``transactional_id``): the two-phase scheme of a
    write-ahead sink tied to checkpoints. The windows a checkpoint covers are
    durable in it before it commits (the pre-commit); when the checkpoint's
    manifest commits, :meth:`deliver` writes them in one Kafka transaction
    whose records carry the checkpoint id (header ``slash-cut``) and commits
    it. On recovery, :meth:`recover` fences the dead attempt's producer
    (``init_transactions`` on the same transactional id aborts what it left
    open), reads which checkpoint the topic last committed (read_committed),
    and delivers the committed checkpoints after it, in order. A reader with
    ``isolation.level=read_committed`` sees every window once.
    """

    def __init__(self, bootstrap: str, topic: str, *, key: Union[str, Sequence[str]],
                 transactional_id: Optional[str] = None,
                 config: Optional[Mapping[str, Any]] = None, connect_timeout: float = 10.0,
                 timeout: float = 60.0) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.key = [key] if isinstance(key, str) else list(key)
        if not self.key:
            raise InvalidArgument("KafkaSink needs the key column(s) of the windows it writes")
        self.transactional_id, self.timeout = transactional_id, float(timeout)
        c, self.partitions = connect(bootstrap, topic, None, connect_timeout)
        c.close()
        conf: Dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                "acks": "all", "linger.ms": 5,
                                "socket.connection.setup.timeout.ms": 5000}
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf["transaction.timeout.ms"] = 60_000
        conf.update(config or {})
        self._conf = conf
        self._producer: Any = None
        self._errors: List[str] = []

    def _p(self) -> Any:
        if self._producer is None:
            ck = confluent()
            self._producer = ck.Producer(dict(self._conf, error_cb=lambda e: self._errors.append(str(e))))
            if self.transactional_id is not None:
                self._producer.init_transactions(self.timeout)  # fences and aborts a leftover
        return self._producer

    def _produce(self, table: pa.Table, headers: Optional[List[Tuple[str, bytes]]]) -> int:
        for c in self.key:
            if c not in table.column_names:
                raise UnknownName(f"KafkaSink key column {c!r} is not in the windows "
                                  f"(columns: {', '.join(table.column_names)})")
        p = self._p()
        failed: List[str] = []

        def done(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        rows = _json_ready(table).to_pylist()
        for r in rows:
            k = [r[c] for c in self.key]
            key = (k[0] if isinstance(k[0], str) else json.dumps(k[0])) if len(k) == 1 \
                else json.dumps(k)
            while True:
                try:
                    p.produce(self.topic, json.dumps(r).encode(), key.encode(),
                              headers=headers, on_delivery=done)
                    break
                except BufferError:  # the local queue is full: let it drain
                    p.poll(0.05)
        left = p.flush(self.timeout)
        if left or failed:
            raise SystemFailure(f"KafkaSink {self.topic!r}: {left} record(s) not acknowledged "
                                f"within {self.timeout:g} s"
                                + (f"; {failed[0]}" if failed else "")
                                + (f"; {self._errors[-1]}" if self._errors else ""))
        return len(rows)

    def write(self, table: pa.Table) -> int:
        """At least once: the rows of ``table``, acknowledged; returns how many."""
        if self.transactional_id is not None:
            raise InvalidState("a transactional KafkaSink writes by deliver(checkpoint_id, ...)")
        return self._produce(table, None)

    __call__ = write

    def deliver(self, checkpoint_id: int, table: pa.Table) -> int:
        """The windows checkpoint ``checkpoint_id`` covers, in one committed
        transaction (after its manifest committed)."""
        if self.transactional_id is None:
            raise InvalidState("deliver() needs a KafkaSink with a transactional_id")
        p = self._p()
        p.begin_transaction()
        try:
            n = self._produce(table, [(_CUT_HEADER, str(int(checkpoint_id)).encode())])
        except BaseException:
            p.abort_transaction(self.timeout)
            raise
        p.commit_transaction(self.timeout)
        return n

    def delivered(self) -> Optional[int]:
        """The highest checkpoint id whose windows the topic holds committed, or None."""
        ck = confluent()
        c = ck.Consumer(consumer_config(self.bootstrap, {"isolation.level": "read_committed"}))
        best: Optional[int] = None
        try:
            for part in self.partitions:
                lo, hi = c.get_watermark_offsets(ck.TopicPartition(self.topic, part),
                                                 timeout=self.timeout)
                if hi <= lo:
                    continue
                c.assign([ck.TopicPartition(self.topic, part, lo)])
                done, last = False, time.monotonic()
                while not done:
                    got = c.consume(num_messages=10_000, timeout=0.2)
                    for m in got:
                        if m.error() is not None:
                            if m.error().code() == ck.KafkaError._PARTITION_EOF:
                                done = True
                            continue
                        for h, v in m.headers() or []:
                            if h == _CUT_HEADER:
                                best = max(best or 0, int(v))
                        if m.offset() >= hi - 1:
                            done = True
                    if got:
                        last = time.monotonic()
                    elif c.position([ck.TopicPartition(self.topic, part)])[0].offset >= hi:
                        done = True
                    elif time.monotonic() - last > self.timeout:
                        raise Timeout(f"KafkaSink {self.topic!r}: partition {part} gave no record "
                                      f"for {self.timeout:g} s")
                c.unassign()
        finally:
            c.close()
        return best

    def recover(self, committed: Mapping[int, pa.Table]) -> List[int]:
        """After a failure: fences the dead producer (its open transaction is
        aborted), then delivers each committed checkpoint's windows
        (``committed``: checkpoint id -> windows) that the topic lacks, in
        id order. Returns the ids delivered."""
        if self.transactional_id is None:
            raise InvalidState("recover() needs a KafkaSink with a transactional_id")
        self._p()
        have = self.delivered()
        out = []
        for cid in sorted(committed):
            if have is None or cid > have:
                self.deliver(cid, committed[cid])
                out.append(cid)
        return out

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)
            self._producer = None
