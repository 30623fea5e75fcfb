"""``update`` of a running query's logic: versions switched at event times.

``update``: the driver asks every executor for the highest event time it has
seen (each pauses its pushes, serving its channels, until the answer comes),
takes T = the first window boundary (a multiple of the slide) strictly after
the highest of them, and tells every executor "version v from T". Records
with time >= T follow the new logic, records < T the old, on every executor
alike (docs/control.md states the rule and what windows straddling T do).

:class:`LogicPlan` holds the versions (driver and ranks alike),
:class:`ExecutorControl` is an executor's end of the protocol, and
:class:`LogicUpdates` the driver's: the feature that registers ``update``
with a run's control facade (:class:`slash.control.RunControl`).

>>> from slash.query import Query
>>> plan = LogicPlan(Query(time="t", window="tumbling:10s", key="k"))
>>> plan.switch_point(12_345, 10_000), plan.switch_point(20_000, 10_000)
(20000, 30000)
"""
from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from slash.columns import one_batch
from slash.compute import min_max, pc
from slash.control.moves import REQUEST_TIMEOUT, MoveRequests
from slash.errors import InvalidArgument, InvalidState, NotSupported, SystemFailure, Timeout
from slash.filters import Filter
from slash.run.protocol import ControlAck, ControlCommit, ControlPrepare, InputDone, Move
from slash.window import Session, parse_duration

log = logging.getLogger(__name__)

NO_TIME = -(1 << 63)  # before every event time (int64 ticks)


def ticks_to_ms(ticks: Optional[int], ticks_per_ms: int) -> Optional[int]:
    """An event time in ms for status answers; None for none (or the start)."""
    if ticks is None or ticks <= NO_TIME + 1:
        return None
    return ticks // ticks_per_ms


# ---- the logic of a running query: versions switched at event times ----------------------------
@dataclass
class LogicPlan:
    """The versions of a query's logic: version 0 from the start, version v
    for records with time >= ``starts[v]`` (ticks of the state's time unit).
    Every version has the same key, window and aggregates; filters differ.

    ``prepare(batch)`` is :meth:`slash.query.Query.prepare_selected` with
    each row filtered by the version its time falls in (a row whose time is
    null follows the newest version: it is in no window anyway)."""

    query: Any
    versions: List[Any] = field(default_factory=list)
    starts: List[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.versions:
            self.versions = [self.query]
            self.starts = [NO_TIME]

    @property
    def version(self) -> int:
        return len(self.versions) - 1

    @property
    def current(self) -> Any:
        return self.versions[-1]

    @property
    def input_columns(self) -> List[str]:
        """Every column some version reads (the union of their projections)."""
        cols: List[str] = []
        for q in self.versions:
            cols += q.input_columns
        return list(dict.fromkeys(cols))

    def slide_ticks(self, ticks_per_ms: int) -> Optional[int]:
        """The window boundary spacing in ticks; None for sessions (no boundaries)."""
        w = self.query.window
        if isinstance(w, Session):
            return None
        return (getattr(w, "slide_ms", None) or w.size_ms) * ticks_per_ms

    def switch_point(self, max_seen: Optional[int], slide: Optional[int]) -> int:
        """T for a change agreed when the highest event time seen is
        ``max_seen`` (None: nothing seen yet): the first multiple of ``slide``
        strictly after it (sessions, ``slide`` None: ``max_seen + 1``), and
        never before the previous version's start (changes keep their order)."""
        if max_seen is None:
            t = NO_TIME + 1
        elif slide is None:
            t = max_seen + 1
        else:
            t = (max_seen // slide + 1) * slide
        # past the last representable time: from the end of the range (int64 ticks)
        return max(min(t, (1 << 63) - 1), self.starts[-1])

    def add(self, start: int, query: Any) -> int:
        """Installs ``query`` from ``start`` on; returns its version number.
        A version starting where the newest one starts replaces it for every
        record (the older one never applied to any)."""
        if start < self.starts[-1]:
            raise InvalidArgument(f"version start {start} is before the newest one's "
                                  f"({self.starts[-1]})")
        self.versions.append(query)
        self.starts.append(start)
        return self.version

    def describe(self, to_ms: Callable[[int], int]) -> List[Dict[str, Any]]:
        return [{"version": v, "from_time_ms": None if s <= NO_TIME + 1 else to_ms(s),
                 "filters": [f"{f.column} {f.op} {f.value!r}" for f in q.filters],
                 "lateness_ms": q.lateness}
                for v, (s, q) in enumerate(zip(self.starts, self.versions))]

    def prepare(self, batch: Any) -> Tuple[pa.RecordBatch, Optional[np.ndarray], Optional[int]]:
        """(projected batch, skip or None, highest non-null time in ticks or None)."""
        batch = one_batch(batch)
        q0 = self.query
        ticks = q0.time_ticks(batch.column(q0.time), batch.schema)
        if not batch.num_rows:
            b, skip = self.current.prepare_selected(batch)
            return b, skip, None
        mm = min_max(ticks)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if len(self.versions) == 1 or (hi is not None and hi < self.starts[1]
                                       and not ticks.null_count):
            b, skip = self.versions[0].prepare_selected(batch)
            return b, skip, hi
        if lo is None or lo >= self.starts[-1]:  # every row (nulls too) follows the newest
            b, skip = self.current.prepare_selected(batch)
            return b, skip, hi
        skip = self._skip(batch, ticks, lo)
        key_t = batch.schema.field(q0.key[0]).type
        if pa.types.is_dictionary(key_t):
            key_t = key_t.value_type
        int_key = len(q0.key) == 1 and (pa.types.is_integer(key_t) or pa.types.is_boolean(key_t)
                                        or pa.types.is_timestamp(key_t) or pa.types.is_date(key_t))
        if not skip.any():
            return q0.project(batch), None, hi
        if int_key:
            return q0.project(batch), skip, hi
        # a dropped row's non-integer key may be too long to encode: drop the rows first
        return q0.project(batch.filter(pa.array(~skip))), None, hi

    def _skip(self, batch: pa.RecordBatch, ticks: pa.Array, lo: int) -> np.ndarray:
        """Per row: True when the version its time falls in drops it."""
        t = pc.fill_null(ticks, (1 << 63) - 1).to_numpy(zero_copy_only=False)
        skip = np.zeros(batch.num_rows, np.bool_)
        for v, q in enumerate(self.versions):
            start = self.starts[v]
            end = self.starts[v + 1] if v + 1 < len(self.versions) else None
            if end is not None and (end <= lo or end <= start):
                continue  # no row of this batch, or replaced by a later version at once
            sel = (t >= start) if end is None else ((t >= start) & (t < end))
            if not q.filters or not sel.any():
                continue
            s = q.filters[0].skip(batch)
            for f in q.filters[1:]:
                s = s | f.skip(batch)
            skip[sel] = s[sel]
        return skip

    def selected_rows(self, batch: Any, skip: Optional[np.ndarray]) -> pa.RecordBatch:
        """The source rows a :meth:`prepare` result holds, in its order (for
        a side output of late rows): all of them when it gave a ``skip``
        selection, else those the versions keep."""
        batch = one_batch(batch)
        if skip is not None or not batch.num_rows:
            return batch
        ticks = self.query.time_ticks(batch.column(self.query.time), batch.schema)
        lo = pc.min(ticks).as_py()
        keep = ~self._skip(batch, ticks, (1 << 63) - 1 if lo is None else lo)
        return batch if keep.all() else batch.filter(pa.array(keep))


def updated_query(query: Any, schema: pa.Schema, args: Dict[str, Any], *,
                  bounded: bool = True) -> Any:
    """The query ``update`` args make of ``query``, checked against ``schema``.

    ``filter`` (a string or a list): each replaces the filters on its column
    or adds one; ``drop_filter``: columns whose filters are removed;
    ``clear_filters``: remove all first. ``aggregate`` and ``lateness`` are
    refused, saying why (see docs/control.md)."""
    known = {"filter", "drop_filter", "clear_filters", "aggregate", "lateness"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise InvalidArgument(f"update: unknown argument(s) {unknown}; it takes {sorted(known)}")
    if args.get("aggregate"):
        raise NotSupported(
            "update: adding an aggregate to a running query is not supported: every executor's "
            "state holds a fixed row of aggregate slots per (window, key), and leaders merge "
            "deltas by that layout, so a window cannot carry a slot the others lack; run a "
            "second query, or restart from a checkpoint with the new aggregate")
    lateness = args.get("lateness")
    if lateness is not None:
        lateness = lateness if isinstance(lateness, int) and not isinstance(lateness, bool) \
            else parse_duration(str(lateness), "lateness")
        if lateness < 0:
            raise InvalidArgument(f"update: lateness must be >= 0 ms, got {lateness}")
        if bounded:
            raise NotSupported(
                "update: lateness does not apply to this run: every executor's watermark moves "
                "only by what its source promises (a bounded input's: what it has left to read; "
                "a Kafka stream's: its partitions' watermarks with its own lateness=), not by "
                "the group's lateness")
    filters = [] if args.get("clear_filters") else list(query.filters)
    drop = args.get("drop_filter") or []
    drop = [drop] if isinstance(drop, str) else list(drop)
    for col in drop:
        if col not in {f.column for f in filters}:
            raise InvalidArgument(f"update: drop_filter {col!r}: the query has no filter on it "
                                  f"(filters on {sorted({f.column for f in filters})})")
        filters = [f for f in filters if f.column != col]
    new = args.get("filter") or []
    new = [new] if isinstance(new, str) else list(new)
    parsed = [Filter.parse(s) for s in new]
    for f in parsed:
        f.check(schema)  # SchemaError naming the column
    changed = {f.column for f in parsed}
    filters = [f for f in filters if f.column not in changed] + parsed
    if not (new or drop or args.get("clear_filters") or lateness is not None):
        raise InvalidArgument("update: nothing to change (give filter=, drop_filter=, "
                              "clear_filters= or lateness=)")
    q = dataclasses.replace(query, filters=tuple(filters),
                            lateness=query.lateness if lateness is None else lateness)
    q.check(schema)
    return q


class ExecutorControl:
    """One executor's end of the control protocol, over its connection to
    the driver (``send(msg)``; ``conn.poll(t)``/``conn.recv()``).

    Between batches the rank loop (:class:`slash.run.features.Control`) hands it
    the driver's ``ctl`` messages (:meth:`handle`): a ``("ctl", "prepare",
    id)`` is answered with the highest event time this
    executor has pushed (``("ctl-ack", rank, id, ticks)``); the executor then
    serves its channels (``ex.poll``) without pushing until ``("ctl",
    "commit", id, T, version, query)`` comes, and installs the version.
    Any other message is handed to ``other`` (none is expected without it).
    Before ``finish()`` the loop calls :meth:`input_done`, which tells the
    driver this executor pushes nothing more (it counts as an answer to any
    later prepare)."""

    def __init__(self, send: Callable[[Any], None], conn: Any, rank: int, plan: LogicPlan,
                 timeout: float = REQUEST_TIMEOUT,
                 other: Optional[Callable[[Any], None]] = None) -> None:
        self.send = send
        self.conn = conn
        self.rank = rank
        self.plan = plan
        self.max_seen: Optional[int] = None
        self.timeout = timeout
        self.other = other
        self.paused_seconds = 0.0
        self._ex: Any = None
        self._lateness_at: List[Tuple[int, int]] = []  # (T, ms) not yet applied, oldest first
        self.moves = MoveRequests(send, rank)  # rank 0: rebalance requests

    def prepare(self, batch: Any) -> Tuple[pa.RecordBatch, Optional[np.ndarray]]:
        b, skip, hi = self.plan.prepare(batch)
        if hi is not None and (self.max_seen is None or hi > self.max_seen):
            self.max_seen = hi
            # a lateness change applies once this executor has seen a time >= its T
            while self._lateness_at and hi >= self._lateness_at[0][0]:
                _, ms = self._lateness_at.pop(0)
                self._ex.set_lateness(ms)
                log.info("executor %d: lateness %d ms from now on", self.rank, ms)
        return b, skip

    def _recv(self) -> Any:
        try:
            return self.conn.recv()
        except EOFError:
            raise SystemFailure("the driver went away") from None

    def _commit_expected(self, msg: Any) -> None:
        if isinstance(msg, (ControlPrepare, ControlCommit)):
            raise SystemFailure(f"executor rank {self.rank}: expected the commit of a control "
                                f"request, got {msg!r:.80}")
        self.other_message(msg)

    def await_commit(self, ex: Any, kind: str, rid: Any, deadline: float,
                     other: Callable[[Any], Any]) -> Tuple[Any, ...]:
        """Paused after answering request ``rid`` of ``kind`` ("ctl", "scale"):
        serves the channels (pushes nothing) until the driver's ``(kind,
        "commit", rid, ...)``, which it returns; any other message meanwhile
        goes to ``other`` (which may raise). Timeout past ``deadline``
        (time.monotonic)."""
        while True:
            while not self.conn.poll(0):
                if time.monotonic() > deadline:
                    what = "control" if kind == "ctl" else kind
                    raise Timeout(f"executor rank {self.rank}: no commit of {what} request {rid} "
                                  f"within {self.timeout} s")
                ex.poll(0.002)
            got = self._recv()
            if isinstance(got, tuple) and got[:3] == (kind, "commit", rid):
                return got
            other(got)

    def other_message(self, msg: Any) -> bool:
        """A driver message that is not this control's (a rank waiting for
        another commit, e.g. a scale's): a leadership move joins the rank's
        move requests, anything else goes to ``other`` (SystemFailure
        without one). Returns False: it is never the message waited for."""
        if isinstance(msg, Move):
            self.moves.add(msg)
            return False
        if self.other is None:
            raise SystemFailure(f"executor rank {self.rank}: unexpected message from the driver "
                                f"{msg!r:.80}")
        self.other(msg)
        return False

    def handle(self, msg: Any, ex: Any) -> bool:
        """Handles one message from the driver (a prepare pauses until its
        commit); True when a new version was installed."""
        self._ex = ex
        if not isinstance(msg, (ControlPrepare, ControlCommit)):
            return self.other_message(msg)
        if not isinstance(msg, ControlPrepare):
            raise SystemFailure(f"executor rank {self.rank}: control message {msg!r:.80} out of "
                                f"turn")
        rid = msg.rid
        t0 = time.monotonic()
        self.send(ControlAck(self.rank, rid, self.max_seen))
        got: ControlCommit = self.await_commit(ex, "ctl", rid, t0 + self.timeout,
                                               self._commit_expected)
        start, version, query = got.start, got.version, got.query
        if query is not None:
            self.install(ex, start, version, query)
        self.paused_seconds += time.monotonic() - t0
        log.info("executor %d: logic version %d from time %d (paused %.1f ms)", self.rank,
                 self.plan.version, start, 1000 * (time.monotonic() - t0))
        return query is not None

    def install(self, ex: Any, start: int, version: int, query: Any) -> None:
        """Installs logic ``version`` (``query``) for records with time >=
        ``start``: an agreed commit, or one a restart from a checkpoint
        re-applies; a lateness change applies to executor ``ex`` once it has
        seen a time >= ``start``."""
        self._ex = ex
        if query.lateness != self.plan.current.lateness:
            self._lateness_at.append((start, query.lateness))
        v = self.plan.add(start, query)
        if v != version:
            raise SystemFailure(f"executor rank {self.rank}: logic version {v} installed, "
                                f"the driver says {version}")

    def input_done(self) -> None:
        self.moves.fail_all(InvalidState("rebalance: rank 0 has read all of its input; "
                                         "leadership no longer moves"))
        self.send(InputDone(self.rank, self.max_seen))

    def status(self) -> Dict[str, Any]:
        return {"logic_version": self.plan.version, "max_event_time": self.max_seen,
                "paused_seconds": self.paused_seconds}




# ---- the driver's side ------------------------------------------------------------------------------
def recorded_logic(ck: Any) -> List[Dict[str, Any]]:
    """The logic versions checkpoint ``ck``'s manifest records
    (:meth:`LogicUpdates.manifest_info`; none for ``ck`` None)."""
    return list(ck.manifest.get("info", {}).get("logic", [])) if ck is not None else []


@dataclass
class UpdateRound:
    """One agreement of the group (an update): prepare, every ack, commit."""

    rid: int
    query: Any
    done: threading.Event = field(default_factory=threading.Event)
    acks: Dict[int, Optional[int]] = field(default_factory=dict)
    sent: bool = False
    result: Optional[Dict[str, Any]] = None
    error: Optional[BaseException] = None
    t0: float = 0.0
    args: Dict[str, Any] = field(default_factory=dict)  # the update as asked (a manifest keeps it)


class LogicUpdates:
    """The ``update`` feature on the driver: rounds queued by
    :meth:`submit` (control server threads, ``StreamHandle.update``) and
    advanced by :meth:`service` (the driver's loop). ``group`` is the run's
    control facade: its ``plan`` (:class:`LogicPlan`, shared), ``schema``,
    ``bounded``, ``ticks_per_ms``, ``executors``, ``send(rank, msg)`` and
    ``finished_ranks()`` (rank -> highest event time, of the ranks that
    read all of their input); a commit sets its ``query``."""

    def __init__(self, group: Any) -> None:
        self.group, self.plan = group, group.plan
        self.finished = False
        self._lock = threading.Lock()
        self._service_lock = threading.Lock()
        self._rounds: "queue.Queue[UpdateRound]" = queue.Queue()
        self._active: Optional[UpdateRound] = None
        self._rid = 0
        #: each agreed version's start and the update that made it ({"from_ticks", "args"}),
        #: versions 1, 2, ...: what a checkpoint's manifest records (:meth:`restore`)
        self.record: List[Dict[str, Any]] = []

    def _ms(self, ticks: Optional[int]) -> Optional[int]:
        return ticks_to_ms(ticks, self.group.ticks_per_ms)

    @property
    def agreeing(self) -> bool:
        """A round is under way (from its start to its commit or failure)."""
        return self._active is not None

    # -- the control server's side
    def submit(self, args: Dict[str, Any]) -> UpdateRound:
        """Checks an update and queues it for :meth:`service`; wait on the
        returned round's ``done`` (then read ``result`` or ``error``)."""
        if self.finished:
            raise InvalidState("update: the run has ended")
        q = updated_query(self.plan.current, self.group.schema, args, bounded=self.group.bounded)
        with self._lock:
            self._rid += 1
            r = UpdateRound(self._rid, q, args=dict(args))
        self._rounds.put(r)
        return r

    @staticmethod
    def outcome(r: UpdateRound) -> Dict[str, Any]:
        if r.error is not None:
            raise r.error
        assert r.result is not None
        return r.result

    def update(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """The ``update`` operation: agreed by the group through the driver's
        loop (:meth:`service`); returns the version, T and the filters."""
        r = self.submit(args)
        if not r.done.wait(REQUEST_TIMEOUT + 5):
            raise Timeout(f"update: not agreed within {REQUEST_TIMEOUT} s")
        return self.outcome(r)

    # -- the driver's loop
    def on_ack(self, rank: int, rid: int, max_seen: Optional[int]) -> None:
        with self._lock:
            r = self._active
            if r is not None and r.rid == rid:
                r.acks[rank] = max_seen

    def on_input_done(self, rank: int, max_seen: Optional[int]) -> None:
        """Rank read all of its input: it answers the current round too."""
        with self._lock:
            r = self._active
            if r is not None and rank not in r.acks:
                r.acks[rank] = max_seen

    def service(self) -> None:
        """Advances the current agreement; starts the next one if none runs.
        Safe to call from several threads (one advances at a time)."""
        with self._service_lock:
            self._service()

    def _service(self) -> None:
        g = self.group
        with self._lock:
            r = self._active
            if r is None:
                try:
                    r = self._rounds.get_nowait()
                except queue.Empty:
                    return
                self._active = r
                r.t0 = time.monotonic()
                r.acks.update(g.finished_ranks())
        n = g.executors
        if not r.sent:
            if len(r.acks) == n:
                self._finish(r, InvalidState("update: every executor has already read all of "
                                             "its input; no record is left to follow new logic"))
                return
            r.sent = True
            for rank in range(n):
                if rank not in r.acks:
                    g.send(rank, ControlPrepare(r.rid))
            return
        if len(r.acks) < n:
            if time.monotonic() - r.t0 > REQUEST_TIMEOUT:
                self._finish(r, Timeout(f"update: executors {sorted(set(range(n)) - set(r.acks))} "
                                        f"did not answer within {REQUEST_TIMEOUT} s"))
            return
        seen = [t for t in r.acks.values() if t is not None]
        m = max(seen) if seen else None
        start = self.plan.switch_point(m, self.plan.slide_ticks(self.group.ticks_per_ms))
        with self._lock:  # a version and its record together (versions_and_record)
            version = self.plan.add(start, r.query)
            self.record.append({"from_ticks": int(start), "args": r.args})
        done = g.finished_ranks()
        for rank in range(n):
            if rank not in done:
                g.send(rank, ControlCommit(r.rid, start, version, r.query))
        pause = time.monotonic() - r.t0
        g.query = r.query
        log.warning("control: logic version %d from event time %s (highest seen %s); "
                    "agreed in %.1f ms", version, self._ms(start), self._ms(m), 1000 * pause)
        self._finish(r, None, {"version": version, "effective_from_ms": self._ms(start),
                               "effective_from_ticks": start, "max_event_time_seen_ms": self._ms(m),
                               "agreed_ms": round(1000 * pause, 3),
                               "filters": self.plan.describe(self._ms)[-1]["filters"],
                               "lateness_ms": r.query.lateness})

    def _finish(self, r: UpdateRound, err: Optional[BaseException],
                result: Optional[Dict[str, Any]] = None) -> None:
        with self._lock:
            self._active = None
        if err is not None and r.sent:
            # every executor sent a prepare waits (or will) for its commit: let them go on
            # unchanged (a pipe keeps order, so a late one reads the prepare first)
            done = self.group.finished_ranks()
            for rank in range(self.group.executors):
                if rank not in done:
                    self.group.send(rank, ControlCommit(r.rid, self.plan.starts[-1], None,
                                                        None))
        r.error, r.result = err, result
        r.done.set()

    def versions(self) -> Tuple[Tuple[int, Any], ...]:
        """The versions agreed so far, (start, query) for versions 1, 2, ...:
        what the ranks of a group started after them install before reading."""
        return self.versions_and_record()[0]

    def versions_and_record(self) -> Tuple[Tuple[Tuple[int, Any], ...], List[Dict[str, Any]]]:
        """:meth:`versions` and :attr:`record` as of one moment (another
        thread may be agreeing the next version)."""
        with self._lock:
            return (tuple(zip(self.plan.starts[1:], self.plan.versions[1:])),
                    [dict(u) for u in self.record])

    def manifest_info(self) -> Dict[str, Any]:
        """What a checkpoint's manifest records of the logic (its ``info``):
        :attr:`record` as of one moment (:func:`recorded_logic` reads it back)."""
        return {"logic": self.versions_and_record()[1]}

    def restore(self, record: List[Dict[str, Any]]) -> None:
        """A run started again on a checkpoint directory: the versions its
        newest manifest records (:attr:`record`) agreed again, each from the
        same start with the same update (versions agreed after that commit
        published nothing and are not among them)."""
        for u in record:
            q = updated_query(self.plan.current, self.group.schema, dict(u["args"]),
                              bounded=self.group.bounded)
            with self._lock:
                self.plan.add(int(u["from_ticks"]), q)
                self.record.append({"from_ticks": int(u["from_ticks"]), "args": dict(u["args"])})
            self.group.query = q
        if record:
            log.info("control: %d logic version(s) agreed before restored from the checkpoint",
                     len(record))

    def new_group(self, why: str) -> None:
        """The group was replaced (restarted from a checkpoint): an update its
        ranks were asked about fails with :class:`InvalidState` (``why``)
        without a commit (no rank of the new group was asked; one agreed
        before is the new group's already)."""
        with self._service_lock, self._lock:
            r, self._active = self._active, None
        if r is not None:
            r.error = InvalidState(why)
            r.done.set()

    def close(self) -> None:
        """The run ended: rounds waiting or arriving now fail."""
        self.finished = True
        with self._lock:
            r, self._active = self._active, None
        pending = [r] if r is not None else []
        while True:
            try:
                pending.append(self._rounds.get_nowait())
            except queue.Empty:
                break
        for p in pending:
            p.error = InvalidState("the run ended before the request took effect")
            p.done.set()
