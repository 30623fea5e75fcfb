"""The control plane of a running stream: a control socket, its operations,
and ``update(...)`` of the running query's logic.

A ``slash run`` (or :func:`slash.runner.run` with ``control=``) listens on a
Unix domain socket (mode 0600, in a 0700 directory; a peer of another user is
refused by its credentials too). The protocol is JSON lines: each request is
one line ``{"op": NAME, "args": {...}}``, each answer one line
``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": {"type":
"SchemaError", "message": "..."}}``; one connection may carry many requests.

Operations are looked up by name in a registry (:data:`OPERATIONS`); adding
one is a handler plus :func:`register` (and, for ``slash ctl``, an argument
spec)::

    def _scale_out(ctl: RunControl, args: Dict[str, Any]) -> Dict[str, Any]:
        return ctl.call_hook("scale-out", int(args["k"]))
    register(Operation("scale-out", _scale_out, "add executors",
                       cli_args=[(("k",), {"type": int})]))

``update``: the driver asks every executor for the highest event time it has
seen (each pauses its pushes, serving its channels, until the answer comes),
takes T = the first window boundary (a multiple of the slide) strictly after
the highest of them, and tells every executor "version v from T". Records
with time >= T follow the new logic, records < T the old, on every executor
alike (docs/control.md states the rule and what windows straddling T do).

>>> from slash.query import Query
>>> plan = LogicPlan(Query(time="t", window="tumbling:10s", key="k"))
>>> plan.switch_point(None, 12_345), plan.switch_point(None, 20_000)
(20000, 30000)
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import socket
import stat
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slash import errors
from slash.errors import (InvalidArgument, InvalidState, NotSupported, SlashError,
                          SystemFailure, Timeout)
from slash.live_scale import spread_moves
from slash.query import Filter, one_batch
from slash.state import TIME_UNITS
from slash.window import Session, parse_duration

log = logging.getLogger(__name__)

#: how long a control request waits for the running stream to act on it
REQUEST_TIMEOUT = 60.0
_NO_TIME = -(1 << 63)
_MAX_LINE = 1 << 20


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
            self.starts = [_NO_TIME]

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
            t = _NO_TIME + 1
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
        return [{"version": v, "from_time_ms": None if s <= _NO_TIME + 1 else to_ms(s),
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
        mm = pc.min_max(ticks)
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
            return q0._project(batch), None, hi
        if int_key:
            return q0._project(batch), skip, hi
        # a dropped row's non-integer key may be too long to encode: drop the rows first
        return q0._project(batch.filter(pa.array(~skip))), None, hi

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


# ---- the executor's side -------------------------------------------------------------------------
def parse_moves(spec: Any) -> Dict[int, int]:
    """``"P:R,P:R"`` or a mapping -> {partition: rank} (ints >= 0).

    >>> parse_moves("3:1, 7:0")
    {3: 1, 7: 0}
    """
    if isinstance(spec, str):
        out: Dict[int, int] = {}
        for item in spec.split(","):
            if not item.strip():
                continue
            p, sep, r = item.partition(":")
            try:
                if not sep:
                    raise ValueError(item)
                out[int(p)] = int(r)
            except ValueError:
                raise InvalidArgument(f"moves: {item.strip()!r} is not PARTITION:RANK "
                                      f"(e.g. --moves 3:1,7:0)") from None
        spec = out
    if not isinstance(spec, dict) or not spec:
        raise InvalidArgument(f"moves must map partition -> rank, e.g. '3:1,7:0', got {spec!r}")
    moves = {}
    for p, r in spec.items():
        try:
            p, r = int(p), int(r)
        except (TypeError, ValueError):
            raise InvalidArgument(f"moves: {p!r}:{r!r} is not PARTITION:RANK") from None
        if p < 0 or r < 0:
            raise InvalidArgument(f"moves: partition and rank must be >= 0, got {p}:{r}")
        moves[p] = r
    return moves


def _load(snap: Dict[str, Any]) -> Tuple[float, int]:
    """How loaded a leader is: (merge seconds, delta bytes received)."""
    return float(snap.get("merge_seconds") or 0.0), int(snap.get("delta_bytes_received") or 0)


def rebalance_spec(args: Dict[str, Any], per: Dict[int, Dict[str, Any]], n: int,
                   candidates: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """What rank 0 is asked to move for ``rebalance``: ``{"moves": {p: r}}``
    for explicit moves (``args["moves"]``), else ``{"from_rank": f,
    "to_rank": t}``: given in ``args``, or chosen from the executors' latest
    metrics ``per`` (rank -> snapshot): from the leader with the most merge
    time (then delta bytes received) to the least loaded one, among
    ``candidates`` if given (a live group's active ranks: a standby is
    always the least loaded). Rank 0 moves half of the partitions ``f``
    leads (see :class:`MoveRequests`)."""
    if args.get("moves") not in (None, "", {}):
        moves = parse_moves(args["moves"])
        bad = sorted(r for r in moves.values() if r >= n)
        if bad:
            raise InvalidArgument(f"moves: rank {bad[0]} is not in 0..{n - 1} (the run has {n} "
                                  f"executors)")
        return {"moves": moves}
    f, t = args.get("from_rank"), args.get("to_rank")
    if n < 2:
        raise InvalidArgument("rebalance needs at least 2 executors")
    if f is None or t is None:
        # candidates: the ranks an automatic choice may name (a live group's active ones)
        pool = list(range(n)) if candidates is None else list(candidates)
        have = {r: per[r] for r in pool if r in per}
        if len(have) < len(pool):
            raise InvalidState(f"rebalance: metrics from {len(have)} of {len(pool)} executors so "
                               "far; retry in a moment or give --moves")
        if len(have) < 2:
            raise InvalidArgument("rebalance needs at least 2 active executors")
        order = sorted(have, key=lambda r: _load(have[r]))
        f = order[-1] if f is None else f
        t = next(r for r in order if r != f) if t is None else t
    for name, v in (("from_rank", f), ("to_rank", t)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
            raise InvalidArgument(f"rebalance: {name} must be a rank in 0..{n - 1}, got {v!r}")
    if f == t:
        raise InvalidArgument(f"rebalance: from_rank and to_rank are both {f}")
    return {"from_rank": f, "to_rank": t}


class MoveRequests:
    """Rank 0's side of ``rebalance``: the driver's ``("move", id, spec)``
    requests (spec from :func:`rebalance_spec`), applied in order with
    ``Executor.move_partitions`` at the push loop's next chance. A request
    made while the previous move is still being agreed waits (it is tried
    again at every call of :meth:`apply`). ``{"from_rank": f, "to_rank": t}``
    moves every other partition ``f`` leads by the current map (half of
    them, at least one). Each request is answered ``("ctl-moved", 0, id,
    {"moves": {p: r}, "map_version": v})`` once rank 0 accepted it (it takes
    effect at each executor's next epoch end), or ``{"error": [type,
    message]}``."""

    def __init__(self, send: Callable[[Any], None], rank: int = 0) -> None:
        self.send = send
        self.rank = rank
        self.pending: List[Tuple[int, Dict[str, Any]]] = []
        # the map version the last accepted move makes: a request chosen from the map (a
        # spread, from_rank/to_rank) waits until this executor follows it, so it is not
        # chosen from the map before that move (e.g. a rebalance right after a scale's spread)
        self._expect = 0

    def add(self, msg: Tuple[Any, ...]) -> None:
        self.pending.append((msg[1], msg[2]))

    def _answer(self, rid: int, result: Dict[str, Any]) -> None:
        self.send(("ctl-moved", self.rank, rid, result))

    def fail_all(self, err: SlashError) -> None:
        for rid, _ in self.pending:
            self._answer(rid, {"error": [type(err).__name__, str(err)]})
        self.pending = []

    def apply(self, ex: Any) -> None:
        while self.pending:
            rid, spec = self.pending[0]
            version, leaders = ex.leader_map()
            if "moves" not in spec and version < self._expect:
                return  # the previous move is not in this executor's map yet: try again later
            if "moves" in spec:
                moves = {int(p): int(r) for p, r in spec["moves"].items()}
            elif "spread" in spec:  # a live scale: the active ranks lead every partition evenly
                moves = spread_moves(leaders, spec["spread"])
                if not moves:
                    self.pending.pop(0)
                    self._answer(rid, {"moves": {}, "map_version": version})
                    continue
            else:
                f, t = spec["from_rank"], spec["to_rank"]
                led = [p for p, r in enumerate(leaders) if r == f]
                moves = {p: t for p in led[::2]}
            if not moves:
                self.pending.pop(0)
                self._answer(rid, {"error": ["InvalidState", f"rank {spec['from_rank']} leads no "
                                             "partition: nothing to move"]})
                continue
            try:
                ex.move_partitions(moves)
            except InvalidState as e:
                if "finished" in str(e):
                    self.fail_all(InvalidState(f"rebalance: an executor finished its input; "
                                               f"leadership no longer moves ({e})"))
                return  # the previous move is being agreed: try again later
            except SlashError as e:
                self.pending.pop(0)
                self._answer(rid, {"error": [type(e).__name__, str(e)]})
                continue
            self.pending.pop(0)
            # the core adopts a new version only if some partition changes leader
            changes = any(p >= len(leaders) or leaders[p] != r for p, r in moves.items())
            if changes:
                self._expect = version + 1
            log.info("executor %d: moving %d partition(s) for rebalance request %d: %s", self.rank,
                     len(moves), rid, moves)
            self._answer(rid, {"moves": {str(p): r for p, r in moves.items()},
                               "map_version": version + changes})


class ExecutorControl:
    """One executor's end of the control protocol, over its connection to
    the driver (``send(msg)``; ``conn.poll(t)``/``conn.recv()``).

    Between batches the rank loop (:class:`slash.run.rank.Control`) hands it
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
        if isinstance(msg, tuple) and msg and msg[0] == "ctl":
            raise SystemFailure(f"executor rank {self.rank}: expected the commit of a control "
                                f"request, got {msg!r:.80}")
        self._other(msg)

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

    def _other(self, msg: Any) -> bool:
        if isinstance(msg, tuple) and msg and msg[0] == "move":
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
        if not (isinstance(msg, tuple) and msg and msg[0] == "ctl"):
            return self._other(msg)
        if msg[1] != "prepare":
            raise SystemFailure(f"executor rank {self.rank}: control message {msg[1]!r} out of turn")
        rid = msg[2]
        t0 = time.monotonic()
        self.send(("ctl-ack", self.rank, rid, self.max_seen))
        got = self.await_commit(ex, "ctl", rid, t0 + self.timeout, self._commit_expected)
        _, _, _, start, version, query = got
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
        self.send(("ctl-input-done", self.rank, self.max_seen))

    def status(self) -> Dict[str, Any]:
        return {"logic_version": self.plan.version, "max_event_time": self.max_seen,
                "paused_seconds": self.paused_seconds}


# ---- the driver's side ------------------------------------------------------------------------------
@dataclass
class _Round:
    """One agreement of the group (an update): prepare, every ack, commit."""

    rid: int
    query: Any
    done: threading.Event = field(default_factory=threading.Event)
    acks: Dict[int, Optional[int]] = field(default_factory=dict)
    sent: bool = False
    result: Optional[Dict[str, Any]] = None
    error: Optional[BaseException] = None
    t0: float = 0.0


class RunControl:
    """The driver's view of a running stream, shared by the control server's
    threads and the runner's loop.

    The runner calls :meth:`attach` with how to send to rank r, hands every
    ``("metrics" | "ctl-*", rank, ...)`` message to :meth:`on_message`, and
    calls :meth:`service` from its loop at least every ``tick`` seconds.
    Other operations reach the runner through :meth:`set_hook` /
    :meth:`call_hook`, so an operation added later needs no change here."""

    tick = 0.05
    #: a rank that has not reported for this long (several report intervals of
    #: 0.5 s) while the run goes on is shown as stalled (stopped, or stuck)
    stall_after = 3.0

    def __init__(self, query: Any, schema: pa.Schema, executors: int, *,
                 bounded: bool = True, kind: str = "run") -> None:
        self.query = query
        self.schema = schema
        self.executors = executors
        self.bounded = bounded
        self.kind = kind
        self.started = time.time()
        self.plan = LogicPlan(query)
        self.ticks_per_ms = 1
        try:
            self.ticks_per_ms = TIME_UNITS[query.tick_unit(schema)]
        except (AttributeError, KeyError):
            pass
        self._lock = threading.Lock()
        self._service_lock = threading.Lock()
        self._per: Dict[int, Dict[str, Any]] = {}
        self._heard: Dict[int, float] = {}  # rank -> monotonic time of its latest report
        self._input_done: Dict[int, Optional[int]] = {}
        self._rounds: "queue.Queue[_Round]" = queue.Queue()
        self._active: Optional[_Round] = None
        self._rid = 0
        self._send: Optional[Callable[[int, Any], None]] = None
        self._hooks: Dict[str, Callable[..., Any]] = {}
        self.finished = False
        self._moves = MoveWaiters()

    # -- the runner's side
    def attach(self, send: Callable[[int, Any], None]) -> None:
        """The executors are running: ``send(rank, msg)`` reaches rank's link."""
        self._send = send

    def set_hook(self, name: str, fn: Callable[..., Any]) -> None:
        """Lets an operation named ``name`` call ``fn`` in the runner."""
        self._hooks[name] = fn

    def call_hook(self, name: str, *args: Any, **kw: Any) -> Any:
        fn = self._hooks.get(name)
        if fn is None:
            raise NotSupported(f"{name}: this {self.kind} does not support it")
        return fn(*args, **kw)

    def on_message(self, msg: Tuple[Any, ...]) -> bool:
        """Takes a control or metrics message of an executor; False if it is neither."""
        kind, rank = msg[0], msg[1]
        if kind == "metrics":
            with self._lock:
                self._per[rank] = dict(msg[2])
                self._heard[rank] = time.monotonic()
            return True
        if kind == "ctl-input-done":
            with self._lock:
                self._input_done[rank] = msg[2]
                r = self._active
                if r is not None and rank not in r.acks:
                    r.acks[rank] = msg[2]
            return True
        if kind == "ctl-moved":
            self._moves.answer(msg[2], msg[3])
            return True
        if kind == "ctl-ack":
            with self._lock:
                r = self._active
                if r is not None and r.rid == msg[2]:
                    r.acks[rank] = msg[3]
            return True
        return False

    def service(self) -> None:
        """Advances the current agreement; starts the next one if none runs.
        Safe to call from several threads (one advances at a time)."""
        with self._service_lock:
            self._service()

    def _service(self) -> None:
        with self._lock:
            r = self._active
            if r is None:
                try:
                    r = self._rounds.get_nowait()
                except queue.Empty:
                    return
                self._active = r
                r.t0 = time.monotonic()
                r.acks.update(self._input_done)
        if not r.sent:
            if len(r.acks) == self.executors:
                self._finish(r, InvalidState("update: every executor has already read all of "
                                             "its input; no record is left to follow new logic"))
                return
            r.sent = True
            for rank in range(self.executors):
                if rank not in r.acks:
                    self._send(rank, ("ctl", "prepare", r.rid))
            return
        if len(r.acks) < self.executors:
            if time.monotonic() - r.t0 > REQUEST_TIMEOUT:
                self._finish(r, Timeout(f"update: executors {sorted(set(range(self.executors)) - set(r.acks))} "
                                        f"did not answer within {REQUEST_TIMEOUT} s"))
            return
        seen = [t for t in r.acks.values() if t is not None]
        m = max(seen) if seen else None
        start = self.plan.switch_point(m, self.plan.slide_ticks(self.ticks_per_ms))
        version = self.plan.add(start, r.query)
        for rank in range(self.executors):
            if rank not in self._input_done:
                self._send(rank, ("ctl", "commit", r.rid, start, version, r.query))
        pause = time.monotonic() - r.t0
        self.query = r.query
        log.warning("control: logic version %d from event time %s (highest seen %s); "
                    "agreed in %.1f ms", version, self._ms(start), self._ms(m), 1000 * pause)
        self._finish(r, None, {"version": version, "effective_from_ms": self._ms(start),
                               "effective_from_ticks": start, "max_event_time_seen_ms": self._ms(m),
                               "agreed_ms": round(1000 * pause, 3),
                               "filters": self.plan.describe(self._ms)[-1]["filters"],
                               "lateness_ms": r.query.lateness})

    def _finish(self, r: _Round, err: Optional[BaseException],
                result: Optional[Dict[str, Any]] = None) -> None:
        with self._lock:
            self._active = None
        if err is not None and r.sent:
            # every executor sent a prepare waits (or will) for its commit: let them go on
            # unchanged (a pipe keeps order, so a late one reads the prepare first)
            for rank in range(self.executors):
                if rank not in self._input_done:
                    self._send(rank, ("ctl", "commit", r.rid, self.plan.starts[-1], None, None))
        r.error, r.result = err, result
        r.done.set()

    def new_group(self, why: str) -> None:
        """The group was replaced (restarted from a checkpoint): what its ranks
        reported is forgotten, and an update they were asked about fails with
        :class:`InvalidState` (``why``) without a commit (no rank of the new
        group was asked; one agreed before is the new group's already)."""
        with self._service_lock, self._lock:
            r, self._active = self._active, None
            self._per.clear()
            self._input_done.clear()
        if r is not None:
            r.error = InvalidState(why)
            r.done.set()

    def close(self) -> None:
        """The run ended: requests waiting or arriving now fail."""
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
        self._moves.close()

    def _ms(self, ticks: Optional[int]) -> Optional[int]:
        if ticks is None or ticks <= _NO_TIME + 1:
            return None
        return ticks // self.ticks_per_ms

    # -- the operations' side (control server threads)
    def submit(self, args: Dict[str, Any]) -> _Round:
        """Checks an update and queues it for :meth:`service`; wait on the
        returned round's ``done`` (then read ``result`` or ``error``)."""
        if self.finished:
            raise InvalidState("update: the run has ended")
        q = updated_query(self.plan.current, self.schema, args, bounded=self.bounded)
        with self._lock:
            self._rid += 1
            r = _Round(self._rid, q)
        self._rounds.put(r)
        return r

    @staticmethod
    def outcome(r: _Round) -> Dict[str, Any]:
        if r.error is not None:
            raise r.error
        assert r.result is not None
        return r.result

    def update(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """The ``update`` operation: agreed by the group through the runner's
        loop (:meth:`service`); returns the version, T and the filters."""
        r = self.submit(args)
        if not r.done.wait(REQUEST_TIMEOUT + 5):
            raise Timeout(f"update: not agreed within {REQUEST_TIMEOUT} s")
        return self.outcome(r)

    def rebalance(self, args: Dict[str, Any], timeout: float = REQUEST_TIMEOUT) -> Dict[str, Any]:
        """The ``rebalance`` operation (see :func:`rebalance_spec`): a run
        that offers it another way (a checkpointed one) sets the
        ``"rebalance"`` hook; otherwise the request goes to rank 0 over its
        link and this returns once rank 0 accepted the moves (Timeout after
        ``timeout`` s)."""
        if "rebalance" in self._hooks:
            return self.call_hook("rebalance", args)
        if self.finished:
            raise InvalidState("rebalance: the run has ended")
        if self._send is None:
            raise InvalidState("rebalance: the executors are not running yet")
        with self._lock:
            per = dict(self._per)
            done = 0 in self._input_done
        if done:
            raise InvalidState("rebalance: rank 0 has read all of its input; leadership no "
                               "longer moves")
        active = (self._hooks["elastic-status"]()["active_ranks"]
                  if "elastic-status" in self._hooks else None)
        spec = rebalance_spec(args, per, self.executors, active)
        rid, ev = self._moves.new()
        self._send(0, ("move", rid, spec))
        return self._moves.wait(rid, ev, timeout)

    def status(self) -> Dict[str, Any]:
        with self._lock:
            per = {str(r): dict(s) for r, s in sorted(self._per.items())}
            done = sorted(self._input_done)
            heard = dict(self._heard)
        now = time.monotonic()
        stalled = []
        for r, p in per.items():
            if int(r) in heard:
                p["silent_s"] = round(now - heard[int(r)], 3)
                p["stalled"] = (not self.finished and int(r) not in done
                                and p["silent_s"] > self.stall_after)
                if p["stalled"]:
                    stalled.append(int(r))
        q = self.plan.current
        wm = [p.get("group_watermark_ms") for p in per.values()]
        seen = [p.get("max_event_time_ms") for p in per.values() if p.get("max_event_time_ms")
                is not None]
        return {"kind": self.kind, "pid": os.getpid(), "started": self.started,
                "uptime_s": round(time.time() - self.started, 3),
                "executors": self.executors, "reporting": len(per),
                "epoch": max((p.get("epochs", 0) for p in per.values()), default=0),
                "watermark_ms": min(wm) if wm and None not in wm else None,
                "records": sum(int(p.get("records_in", 0) or 0) for p in per.values()),
                "max_event_time_ms": max(seen) if seen else None,
                "input_done": done, "finished": self.finished, "stalled": stalled,
                **(self._hooks["elastic-status"]() if "elastic-status" in self._hooks else {}),
                # a run with latency_target= over a live group (slash.autotune): its decisions
                **({"controller": self._hooks["controller-status"]()}
                   if "controller-status" in self._hooks else {}),
                **leadership(per),
                "logic_version": self.plan.version, "logic": self.plan.describe(self._ms),
                "query": {"time": q.time, "window": repr(q.window), "key": list(q.key),
                          "aggregates": [a.name for a in q.aggregates],
                          "filters": [f"{f.column} {f.op} {f.value!r}" for f in q.filters],
                          "lateness_ms": q.lateness, "bounded": self.bounded},
                "per_executor": per}


def leadership(per: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """For ``status``: the leader map version (the highest an executor
    reported; 0 is partition mod N, and a group restarted from a checkpoint
    starts again at 0 with the checkpoint's map) and how many partitions
    each rank leads."""
    versions = [p["map_version"] for p in per.values() if p.get("map_version") is not None]
    return {"leader_map_version": max(versions) if versions else None,
            "led_partitions": {r: p.get("led_partitions") for r, p in per.items()}}


class MoveWaiters:
    """The driver's rebalance requests waiting for rank 0's answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rid = 0
        self._waiting: Dict[int, Tuple[threading.Event, List[Any]]] = {}
        self.closed = False

    def new(self) -> Tuple[int, threading.Event]:
        with self._lock:
            if self.closed:
                raise InvalidState("rebalance: the run has ended")
            self._rid += 1
            ev = threading.Event()
            self._waiting[self._rid] = (ev, [])
            return self._rid, ev

    def answer(self, rid: int, result: Dict[str, Any]) -> None:
        with self._lock:
            got = self._waiting.get(rid)
        if got is not None:
            got[1].append(result)
            got[0].set()

    def wait(self, rid: int, ev: threading.Event, timeout: float) -> Dict[str, Any]:
        ok = ev.wait(timeout)
        with self._lock:
            _, box = self._waiting.pop(rid)
        if not ok:
            raise Timeout(f"rebalance: rank 0 did not accept the moves within {timeout} s")
        result = box[0]
        if "error" in result:
            kind, message = result["error"]
            raise getattr(errors, kind, SystemFailure)(message)
        return result

    def close(self, why: str = "the run ended before rank 0 accepted the moves") -> None:
        with self._lock:
            self.closed = True
            waiting = list(self._waiting.values())
        for ev, box in waiting:
            box.append({"error": ["InvalidState", f"rebalance: {why}"]})
            ev.set()

    def fail_pending(self, why: str) -> None:
        """Answers every waiting request with InvalidState (a group restarted)."""
        with self._lock:
            waiting = list(self._waiting.values())
        for ev, box in waiting:
            if not box:
                box.append({"error": ["InvalidState", f"rebalance: {why}"]})
                ev.set()


# ---- operations ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Operation:
    """A control operation: ``handler(ctl, args) -> JSON-able result``;
    ``cli_args``: (names, argparse kwargs) pairs for ``slash ctl NAME``,
    whose parsed values (by ``dest``) become ``args``; ``summary`` turns a
    result into the line ``slash ctl`` prints."""

    name: str
    handler: Callable[[RunControl, Dict[str, Any]], Dict[str, Any]]
    help: str
    cli_args: Sequence[Tuple[Tuple[str, ...], Dict[str, Any]]] = ()
    summary: Optional[Callable[[Dict[str, Any]], str]] = None


#: name -> Operation; :func:`register` adds to it
OPERATIONS: Dict[str, Operation] = {}


def register(op: Operation) -> Operation:
    """Adds an operation (a name may be registered once)."""
    if op.name in OPERATIONS:
        raise InvalidArgument(f"control operation {op.name!r} is already registered")
    OPERATIONS[op.name] = op
    return op


def _status_summary(r: Dict[str, Any]) -> str:
    lines = [f"{r['kind']} pid {r['pid']}: {r['executors']} executors ({r['reporting']} reporting), "
             f"epoch {r['epoch']}, watermark {r['watermark_ms']} ms, {r['records']:,} records, "
             f"highest event time {r['max_event_time_ms']} ms, logic version {r['logic_version']}"]
    for rank in r.get("stalled") or []:
        lines.append(f"  STALLED: rank {rank} has not reported for "
                     f"{r['per_executor'][str(rank)]['silent_s']:.1f} s (stopped or stuck)")
    if r.get("active_ranks") is not None:
        lines.append(f"  active ranks {r['active_ranks']}, standby ranks {r['standby_ranks']} "
                     f"(live scaling up to {r['max_executors']})")
        for sc in r.get("scales") or []:  # which path each scale took (live, or restart)
            lines.append(f"  scale {sc['from']} -> {sc['to']}: {sc.get('path', 'live')}")
    if r.get("led_partitions"):
        lines.append(f"  leader map version {r.get('leader_map_version')}: partitions led per rank "
                     + ", ".join(f"{k}: {v}" for k, v in r["led_partitions"].items()))
    for v in r["logic"]:
        frm = "the start" if v["from_time_ms"] is None else f"{v['from_time_ms']} ms"
        lines.append(f"  v{v['version']} from {frm}: filters {v['filters'] or 'none'}")
    return "\n".join(lines)


def _update_summary(r: Dict[str, Any]) -> str:
    return (f"logic version {r['version']} from event time {r['effective_from_ms']} ms (highest "
            f"seen {r['max_event_time_seen_ms']} ms; agreed in {r['agreed_ms']} ms): filters "
            f"{r['filters'] or 'none'}, lateness {r['lateness_ms']} ms")


def _update_args(args: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in args.items() if v not in (None, [], False)}


register(Operation("status", lambda ctl, a: ctl.status(),
                   "executors, epoch, watermark, records and the query's logic version",
                   summary=_status_summary))
register(Operation(
    "update", lambda ctl, a: ctl.update(_update_args(a)),
    "change the running query's logic from the next window boundary on",
    cli_args=[(("--filter",), {"action": "append", "metavar": "'COL OP VALUE'",
                               "help": "replace the filters on COL with this one, or add it "
                                       "(repeatable)"}),
              (("--drop-filter",), {"action": "append", "metavar": "COL",
                                    "help": "remove the filters on COL"}),
              (("--clear-filters",), {"action": "store_true", "help": "remove every filter first"}),
              (("--aggregate",), {"action": "append", "metavar": "AGG",
                                  "help": "add an aggregate (refused: see docs/control.md)"}),
              (("--lateness",), {"metavar": "DUR", "help": "change the lateness (refused for "
                                                            "bounded inputs)"})],
    summary=_update_summary))


def _int_arg(args: Dict[str, Any], name: str) -> int:
    v = args.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
    return v


# scale-out/scale-in/epoch reach a run that offers them through hooks (a run with
# max_executors=: slash.live_scale, live; with latency_target=: slash.autotune, by
# restart); any other run answers NotSupported
register(Operation("scale-out", lambda ctl, a: ctl.call_hook("scale-out", _int_arg(a, "k")),
                   "add K executors (live in a group started with --max-executors; else a "
                   "restart from a checkpoint cut)",
                   cli_args=[(("k",), {"type": int, "metavar": "K"})],
                   summary=lambda r: f"{r['executors']} executors"
                   + (f" ({r['path']} path)" if r.get("path") else "")))
register(Operation("scale-in", lambda ctl, a: ctl.call_hook("scale-in", _int_arg(a, "k")),
                   "release K executors (live in a group started with --max-executors; else a "
                   "restart from a checkpoint cut)",
                   cli_args=[(("k",), {"type": int, "metavar": "K"})],
                   summary=lambda r: f"{r['executors']} executors"
                   + (f" ({r['path']} path)" if r.get("path") else "")))
register(Operation("epoch", lambda ctl, a: ctl.call_hook("epoch", _int_arg(a, "ms")),
                   "set every executor's epoch length (ms), in force by the next epoch end",
                   cli_args=[(("ms",), {"type": int, "metavar": "MS"})],
                   summary=lambda r: f"epochs of {r['epoch_ms']} ms"))


def _rebalance_summary(r: Dict[str, Any]) -> str:
    moves = r.get("moves") or {}
    return (f"moving {len(moves)} partition(s) at the next epoch ends (leader map version "
            f"{r.get('map_version')}): " + ", ".join(f"{p}->{q}" for p, q in moves.items()))


register(Operation("rebalance", lambda ctl, a: ctl.rebalance(
                       {k: v for k, v in a.items() if v is not None}),
                   "move partition leadership: --moves P:R,... or, without, half the partitions "
                   "of the busiest leader to the least loaded one",
                   cli_args=[(("--moves",), {"metavar": "P:R,P:R",
                                             "help": "move partition P to rank R (explicit)"}),
                             (("--from-rank",), {"type": int, "dest": "from_rank",
                                                 "help": "automatic: move from this rank"}),
                             (("--to-rank",), {"type": int, "dest": "to_rank",
                                               "help": "automatic: move to this rank"})],
                   summary=_rebalance_summary))


# ---- the server ----------------------------------------------------------------------------------
def default_dir() -> str:
    """Where control sockets live by default: ``$XDG_RUNTIME_DIR/slash`` or
    ``<tmp>/slash-<uid>``, a directory only its owner may enter."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        return os.path.join(base, "slash")
    return os.path.join(tempfile.gettempdir(), f"slash-{os.getuid()}")


def _private_dir(d: str) -> None:
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise InvalidArgument(f"control directory {d!r} is not a directory of this user")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)


def default_socket() -> str:
    return os.path.join(default_dir(), f"run-{os.getpid()}.sock")


def _peer_uid(conn: socket.socket) -> Optional[int]:
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    return struct.unpack("3i", raw)[1]


class ControlServer:
    """Serves the operations of :data:`OPERATIONS` for ``ctl`` on a Unix
    socket at ``path`` (default :func:`default_socket`): mode 0600, stale
    sockets of ended runs replaced, a live one refused. A daemon thread
    accepts; each connection gets a thread. ``close()`` removes the socket."""

    def __init__(self, ctl: RunControl, path: Optional[str] = None) -> None:
        self.ctl = ctl
        self.path = os.path.abspath(path) if path else default_socket()
        d = os.path.dirname(self.path)
        if path is None:
            _private_dir(d)
        elif not os.path.isdir(d):
            raise InvalidArgument(f"control socket {path!r}: directory {d!r} does not exist")
        if len(self.path.encode()) > 107:
            raise InvalidArgument(f"control socket path {self.path!r} is longer than a Unix socket "
                                  "allows (107 bytes)")
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None:  # only a socket nobody answers on is stale: anything else is the user's
            if not stat.S_ISSOCK(st.st_mode):
                raise InvalidArgument(f"control socket path {self.path!r} exists and is not a "
                                      "socket; it is left alone: give another --control path")
            if _alive(self.path):
                raise InvalidState(f"control socket {self.path!r} belongs to a running stream")
            os.unlink(self.path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # no moment with the socket open to others
        try:
            self._sock.bind(self.path)
        except OSError as e:
            self._sock.close()
            raise errors.SystemCallError(f"control socket {self.path!r}: {e.strerror}") from None
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self._ino = os.lstat(self.path).st_ino  # close() removes this socket, not a successor
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="slash-control", daemon=True)
        self._thread.start()
        log.info("control socket %s (slash ctl --socket %s status)", self.path, self.path)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self._closed.is_set():  # close()'s wake-up call
                conn.close()
                return
            uid = _peer_uid(conn)
            if uid is not None and uid != os.getuid():
                log.warning("control: refused a connection of uid %d", uid)
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="slash-control-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            for line in f:
                reply = self.handle_line(line)
                try:
                    f.write(json.dumps(reply, default=str).encode() + b"\n")
                    f.flush()
                except OSError:
                    return

    def handle_line(self, line: bytes) -> Dict[str, Any]:
        """One request line to its answer (never raises)."""
        try:
            if len(line) > _MAX_LINE:
                raise InvalidArgument(f"request longer than {_MAX_LINE} bytes")
            try:
                req = json.loads(line)
            except ValueError as e:
                raise InvalidArgument(f"request is not JSON: {e}") from None
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise InvalidArgument('a request is {"op": NAME, "args": {...}}')
            op = OPERATIONS.get(req["op"])
            if op is None:
                raise errors.UnknownName(f"unknown operation {req['op']!r}; known: "
                                         f"{sorted(OPERATIONS)}")
            args = req.get("args") or {}
            if not isinstance(args, dict):
                raise InvalidArgument("args must be a JSON object")
            return {"ok": True, "result": op.handler(self.ctl, args)}
        except SlashError as e:
            return {"ok": False, "error": {"type": type(e).__name__, "message": str(e)}}
        except Exception as e:  # a bug in a handler must not kill the server
            log.exception("control request failed")
            return {"ok": False, "error": {"type": "SystemFailure",
                                           "message": f"{type(e).__name__}: {e}"}}

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:  # wakes the accept at once (else its 0.2 s timeout: every run's end waited for it)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                wake.connect(self.path)
        except OSError:
            pass
        self._thread.join(2.0)
        self._sock.close()
        try:
            if os.lstat(self.path).st_ino == self._ino:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> "ControlServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- the client --------------------------------------------------------------------------------
def _alive(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def running_sockets(directory: Optional[str] = None) -> List[str]:
    """The control sockets in ``directory`` (default :func:`default_dir`) a stream answers on."""
    d = directory or default_dir()
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return []
    return [p for p in (os.path.join(d, n) for n in names if n.endswith(".sock")) if _alive(p)]


def find_socket(path: Optional[str] = None) -> str:
    """``path``, or the one running stream's socket in :func:`default_dir`;
    :class:`InvalidState` naming the path when no stream answers there."""
    if path is not None:
        if not os.path.exists(path):
            raise InvalidState(f"no stream is running at {path!r} (no such socket)")
        return path
    found = running_sockets()
    if not found:
        raise InvalidState(f"no stream is running: no live control socket in {default_dir()!r} "
                           "(start one with `slash run`, or give --socket PATH)")
    if len(found) > 1:
        raise InvalidState(f"{len(found)} streams are running ({', '.join(found)}): choose one "
                           "with --socket PATH")
    return found[0]


def request(path: Optional[str], op: str, args: Optional[Dict[str, Any]] = None,
            timeout: float = REQUEST_TIMEOUT + 10) -> Dict[str, Any]:
    """Sends one request to the stream at ``path`` (see :func:`find_socket`)
    and returns its result; an error of the stream is raised as the
    :mod:`slash.errors` class it names."""
    p = find_socket(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(p)
        except (ConnectionRefusedError, FileNotFoundError):
            raise InvalidState(f"no stream is running at {p!r} (the socket is left from a run "
                               "that ended)") from None
        except PermissionError:
            raise InvalidState(f"control socket {p!r}: permission denied (another user's "
                               "stream?)") from None
        s.sendall(json.dumps({"op": op, "args": args or {}}).encode() + b"\n")
        with s.makefile("rb") as f:
            line = f.readline()
    except socket.timeout:
        raise Timeout(f"no answer from the stream at {p!r} within {timeout} s") from None
    finally:
        s.close()
    if not line:
        raise SystemFailure(f"the stream at {p!r} closed the connection without an answer")
    reply = json.loads(line)
    if reply.get("ok"):
        return reply["result"]
    err = reply.get("error") or {}
    cls = getattr(errors, str(err.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, SlashError)):
        cls = SystemFailure
    raise cls(err.get("message", "the stream refused the request"))


# ---- slash ctl ---------------------------------------------------------------------------------
def add_ctl_arguments(p: Any) -> None:
    """``slash ctl [--socket PATH] [--json] OP [op args]``: one subcommand per operation."""
    p.add_argument("--socket", metavar="PATH",
                   help=f"the stream's control socket (default: the one running stream's in "
                        f"{default_dir()})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    sub = p.add_subparsers(dest="ctl_op", metavar="OPERATION")
    for op in OPERATIONS.values():
        sp = sub.add_parser(op.name, help=op.help, description=op.help)
        for names, kw in op.cli_args:
            sp.add_argument(*names, **kw)
        sp.set_defaults(ctl_operation=op, ctl_dests=[_dest(names, kw) for names, kw in op.cli_args])


def _dest(names: Tuple[str, ...], kw: Dict[str, Any]) -> str:
    if "dest" in kw:
        return kw["dest"]
    long = [n for n in names if n.startswith("--")]
    return (long[0] if long else names[0]).lstrip("-").replace("-", "_")


def run_ctl(ns: Any) -> str:
    """Runs a parsed ``slash ctl`` command; returns what to print."""
    op: Optional[Operation] = getattr(ns, "ctl_operation", None)
    if op is None:
        raise InvalidArgument(f"slash ctl needs an operation: one of {sorted(OPERATIONS)}")
    args = {d: getattr(ns, d) for d in ns.ctl_dests}
    result = request(ns.socket, op.name, args)
    if ns.json or op.summary is None:
        return json.dumps(result, indent=2, default=str)
    return op.summary(result)


def wait_for_socket(path: str, timeout: float = 60.0) -> None:
    """Waits until a stream answers at ``path`` (tests, scripts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and _alive(path):
            return
        time.sleep(0.05)
    raise Timeout(f"no stream answered at {path!r} within {timeout} s")
