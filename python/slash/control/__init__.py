"""The control facade of a running stream: one :class:`RunControl` per run,
whose operations are registered by the features that implement them.

A run's control answers ``status`` itself; every other operation is a name a
feature registers with :meth:`RunControl.provide`. An operation nobody
registered is refused with the reason the compatibility table gives
(:mod:`slash.run.compat`: why the query or the entry point forbids it), or,
where the table allows it, with what the run would have to be started with.
The control socket (:mod:`slash.control.server`) and ``slash ctl`` reach the
operations by name (:data:`OPERATIONS`, :func:`register`); adding one is a
handler plus :func:`register` and, for ``slash ctl``, an argument spec::

    register(Operation("scale-out", lambda ctl, a: ctl.call("scale-out", int(a["k"])),
                       "add executors", cli_args=[(("k",), {"type": int})]))

The map: every entry point, the control it builds, and who registers what
(``status`` is everywhere; "the table" is :mod:`slash.run.compat`).

* ``runner.run(control=)`` / ``slash run --control``, no checkpoint
  (``runner._control_for``): update (:class:`slash.control.logic.LogicUpdates`,
  rounds advanced by the runner's loop), rebalance
  (:class:`slash.control.moves.LiveMoves`: rank 0 moves leadership live).
  With ``max_executors=``: scale-out, scale-in, elastic-status
  (``slash.run.live.scale.LiveScaler``, registered in ``runner._run_group``).
* the same for a window join with ``max_executors=``: rebalance (LiveMoves),
  scale-out, scale-in, elastic-status (``slash.run.live.join.JoinLiveScaler``);
  update refused by the table (a join has no filters to change).
* ``checkpoint=`` with ``control=`` (or ``realtime=`` without a target;
  ``autotune.serve_checkpointed``): rebalance, scale-out, scale-in (by
  restart from a checkpoint cut) and epoch, all through
  ``slash.run.recovery.checkpointed.CheckpointedRun``; update (LogicUpdates, rounds served
  by the checkpointed group's driver loop, the versions recorded in every
  checkpoint and installed by every restarted group).
* ``checkpoint=`` with ``max_executors=`` (``live_ckpt.run_live_checkpointed``):
  rebalance (LiveMoves); scale-out, scale-in, elastic-status through
  ``live_ckpt.ElasticCheckpointed`` (live within the group, by restart
  beyond it); update as with ``checkpoint=`` alone.
* ``latency_target=``, restart path (``autotune.run_autotuned``):
  controller-status, scale-out, scale-in and epoch by hand (told to the
  controller: ``autotune.provide_by_hand``), rebalance through
  ``CheckpointedRun``; update as with ``checkpoint=`` alone.
* ``latency_target=``, live path (``autotune._run_live_tuned``): the
  ``runner.run`` control with ``max_executors=`` above, its scale operations
  and epoch by hand (``provide_by_hand``), and controller-status.
* ``slash.spark.stream`` (``StreamHandle``, no socket): update (the handle
  advances the rounds itself), rebalance (LiveMoves, to rank 0's task),
  scale-out and scale-in (``StreamHandle.rescale``: the barrier stage
  restarted from a checkpoint); ``StreamHandle.status/update/rebalance``
  delegate to it.
* ``slash.spark.window_aggregate`` / ``window_join``: no control (one bounded
  pass; the table says why each operation's feature is refused there).
* ``slash ctl``: the client (:func:`slash.control.server.request`) of the
  operations of :data:`OPERATIONS`.

The executors' end: ``slash.run.worker`` (local ranks) and ``slash.spark.stream``'s
tasks build :class:`slash.control.logic.ExecutorControl` (update rounds, and
rank 0's :class:`slash.control.moves.MoveRequests`), served between batches by
the rank loop's ``Control`` feature (``slash.run.rank``).
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

import pyarrow as pa

from slash import errors
from slash.control.logic import (ExecutorControl, LogicPlan, LogicUpdates, UpdateRound,
                                 ticks_to_ms, updated_query)
from slash.control.moves import (REQUEST_TIMEOUT, LiveMoves, MoveRequests, MoveWaiters,
                                 leadership, parse_moves, rebalance_spec)
from slash.control.server import (ControlServer, default_dir, default_socket, find_socket,
                                  request, running_sockets, wait_for_socket)
from slash.errors import InvalidArgument, NotSupported
from slash.query import JoinQuery
from slash.run import compat
from slash.run.protocol import ControlAck, InputDone, Metrics, Moved
from slash.state import TIME_UNITS

__all__ = ["RunControl", "Operation", "OPERATIONS", "register", "add_ctl_arguments", "run_ctl",
           # the parts, importable from here as before they had modules of their own
           "ExecutorControl", "LogicPlan", "LogicUpdates", "UpdateRound", "updated_query",
           "LiveMoves", "MoveRequests", "MoveWaiters", "leadership", "parse_moves",
           "rebalance_spec", "ControlServer", "default_dir", "default_socket", "find_socket",
           "request", "running_sockets", "wait_for_socket", "REQUEST_TIMEOUT"]

#: operation -> the features of the compatibility table (slash.run.compat) that offer it
OP_FEATURES: Dict[str, Tuple[str, ...]] = {
    "update": ("update",), "rebalance": ("rebalance",),
    "scale-out": ("live_scale", "rescale"), "scale-in": ("live_scale", "rescale")}

_FIXED_GROUP = ("the group's size is fixed for this run: a live scale activates standby "
                "processes, which a run provisions with max_executors=, and a rescale restarts "
                "the group from a checkpoint cut, which needs checkpoint=")
#: how long a request waits for an operation the run declared but whose group is still starting
STARTING_S = 60.0
#: operation -> why a run the table allows it for does not offer it: what it was started without
NOT_STARTED_WITH: Dict[str, str] = {
    "scale-out": _FIXED_GROUP, "scale-in": _FIXED_GROUP,
    "epoch": ("every rank takes its epoch length when it starts (epoch_ms=); a run whose driver "
              "restarts or paces its ranks (checkpoint=, latency_target=) tells them a new one"),
}


class RunControl:
    """The driver's view of a running stream, shared by the control server's
    threads and the driver's loop.

    The driver calls :meth:`attach` with how to send to rank r, hands every
    :class:`~slash.run.protocol.Metrics`, :class:`~slash.run.protocol.ControlAck`,
    :class:`~slash.run.protocol.InputDone` or :class:`~slash.run.protocol.Moved`
    report to :meth:`on_message`, and
    calls :meth:`service` from its loop at least every ``tick`` seconds.

    ``entry`` and ``features`` place the run in the compatibility table
    (:mod:`slash.run.compat`; the query's kind comes from ``query``):
    the features every such run has register their operations here at once
    (``update``: :class:`LogicUpdates`; ``rebalance``: :class:`LiveMoves`),
    the others when the driver has them (:meth:`provide`: scalers, the
    checkpointed run, the latency controller). ``kind`` names the run in
    ``status`` ("run", "stream")."""

    tick = 0.05
    #: a rank that has not reported for this long (several report intervals of
    #: 0.5 s) while the run goes on is shown as stalled (stopped, or stuck)
    stall_after = 3.0

    def __init__(self, query: Any, schema: pa.Schema, executors: int, *,
                 bounded: bool = True, kind: str = "run", entry: str = "run",
                 features: Iterable[str] = ()) -> None:
        self.query = query
        self.schema = schema
        self.executors = executors
        self.bounded = bounded
        self.kind = kind
        self.entry = entry
        self.query_kind = "join" if isinstance(query, JoinQuery) else "aggregation"
        self.features: FrozenSet[str] = frozenset()
        self.started = time.time()
        self.plan = LogicPlan(query)
        self.ticks_per_ms = 1
        try:
            self.ticks_per_ms = TIME_UNITS[query.tick_unit(schema)]
        except (AttributeError, KeyError):
            pass
        self._lock = threading.Lock()
        self._per: Dict[int, Dict[str, Any]] = {}
        self._heard: Dict[int, float] = {}  # rank -> monotonic time of its latest report
        self._input_done: Dict[int, Optional[int]] = {}
        self._send: Optional[Callable[[int, Any], None]] = None
        self._ops: Dict[str, Callable[..., Any]] = {}
        self._provided = threading.Condition()  # an operation registered, or the run closed
        self.finished = False
        self.updates: Optional[LogicUpdates] = None
        self.moves = LiveMoves(self)
        self._moves = self.moves.waiters  # a group restart fails what rank 0 did not answer
        self.declare(*features)

    # -- the features' side
    def declare(self, *features: str) -> None:
        """The run has ``features`` (names of :data:`slash.run.compat.FEATURES`):
        an operation of the built-in features that the table refuses in their
        company is withdrawn (a run that adopts a control made by its user
        declares what it adds, e.g. ``checkpoint``)."""
        self.features = self.features | frozenset(features)
        if self._allowed("update"):
            if self.updates is None:
                self.updates = LogicUpdates(self)
                self.provide("update", self.updates.update)
        elif self.updates is not None:
            self.updates.close()
            self.updates = None
            self._ops.pop("update", None)
        if self._allowed("rebalance"):
            self._ops.setdefault("rebalance", self.moves.rebalance)
        elif self._ops.get("rebalance") == self.moves.rebalance:
            del self._ops["rebalance"]

    def _allowed(self, feature: str) -> bool:
        return self._table_refusal(feature) is None

    def _table_refusal(self, feature: str) -> Optional[str]:
        """Why the compatibility table refuses ``feature`` in this run: its
        cell, or a combination of it with a feature the run has; None if not."""
        try:
            compat.check(self.entry, self.query_kind, [feature])
            for (entry, kind, combo) in compat.COMBINATIONS:
                if (entry, kind) == (self.entry, self.query_kind) and feature in combo \
                        and combo <= self.features | {feature}:
                    compat.check(entry, kind, combo)
        except NotSupported as e:
            return str(e)
        return None

    def provide(self, name: str, fn: Callable[..., Any]) -> None:
        """Registers ``fn`` as operation ``name`` of this run (a later
        registration replaces an earlier one: a checkpointed run's
        ``rebalance`` replaces the live one)."""
        with self._provided:
            self._ops[name] = fn
            self._provided.notify_all()

    def provide_resize(self, size: Callable[[], int],
                       resize: Callable[[int], Dict[str, Any]]) -> None:
        """Registers scale-out K / scale-in K as ``resize(size() +/- K)``: a
        scaler that takes the executor count to reach (a restart from a
        checkpoint cut, or a live scale told to the latency controller)."""
        self.provide("scale-out", lambda k: resize(size() + int(k)))
        self.provide("scale-in", lambda k: resize(size() - int(k)))

    def offers(self, name: str) -> bool:
        return name in self._ops

    def call(self, name: str, *args: Any, **kw: Any) -> Any:
        """Runs operation ``name``; NotSupported saying why when the run does
        not offer it (:meth:`refusal`)."""
        fn = self._ops.get(name)
        if fn is None and self._coming(name):
            with self._provided:  # the group is starting: its driver registers it then
                self._provided.wait_for(lambda: name in self._ops or self.finished,
                                        STARTING_S)
            fn = self._ops.get(name)
        if fn is None:
            raise NotSupported(self.refusal(name))
        return fn(*args, **kw)

    def _coming(self, name: str) -> bool:
        """A feature this run declared offers operation ``name``, whose
        driver registers it once the group is started (a request that
        arrives on the socket before that waits for it)."""
        return not self.finished and any(f in self.features for f in OP_FEATURES.get(name, ()))

    def refusal(self, name: str) -> str:
        """Why this run does not offer operation ``name``: the compatibility
        table's reason, or what the run was started without."""
        reasons = []
        for feature in OP_FEATURES.get(name, ()):
            why = self._table_refusal(feature)
            if why is None:  # the table allows it: the run was started without it
                reasons = []
                break
            reasons.append(why)
        if reasons:  # the table's words, as the run's own refusal at its start gives them
            return "; ".join(reasons)
        why = NOT_STARTED_WITH.get(name, "no feature of this run offers it")
        return f"{name}: this {self.kind} does not offer it: {why}"

    def perform(self, name: str, args: Dict[str, Any]) -> Any:
        """A request of the control socket: operation ``name`` of
        :data:`OPERATIONS` with its JSON ``args``."""
        op = OPERATIONS.get(name)
        if op is None:
            raise errors.UnknownName(f"unknown operation {name!r}; known: {sorted(OPERATIONS)}")
        return op.handler(self, args)

    # -- the driver's side
    def attach(self, send: Callable[[int, Any], None]) -> None:
        """The executors are running: ``send(rank, msg)`` reaches rank's link."""
        self._send = send

    @property
    def attached(self) -> bool:
        return self._send is not None

    def send(self, rank: int, msg: Any) -> None:
        assert self._send is not None, "send before attach"
        self._send(rank, msg)

    def on_message(self, msg: Tuple[Any, ...]) -> bool:
        """Takes a control or metrics message of an executor; False if it is neither."""
        if isinstance(msg, Metrics):
            with self._lock:
                self._per[msg.rank] = dict(msg.snapshot)
                self._heard[msg.rank] = time.monotonic()
            return True
        if isinstance(msg, InputDone):
            with self._lock:
                self._input_done[msg.rank] = msg.max_seen
            if self.updates is not None:
                self.updates.on_input_done(msg.rank, msg.max_seen)
            return True
        if isinstance(msg, Moved):
            self.moves.waiters.answer(msg.moves_id, msg.result)
            return True
        if isinstance(msg, ControlAck):
            if self.updates is not None:
                self.updates.on_ack(msg.rank, msg.rid, msg.max_seen)
            return True
        return False

    def service(self) -> None:
        """Advances the current update agreement, if the run offers updates."""
        if self.updates is not None:
            self.updates.service()

    @property
    def agreeing(self) -> bool:
        """An update is being agreed: a live scale waits (one agreement at a time)."""
        return self.updates is not None and self.updates.agreeing

    def reports(self) -> Dict[int, Dict[str, Any]]:
        """rank -> its latest metrics report."""
        with self._lock:
            return dict(self._per)

    def finished_ranks(self) -> Dict[int, Optional[int]]:
        """rank -> highest event time, of the ranks that read all of their input."""
        with self._lock:
            return dict(self._input_done)

    def active_ranks(self) -> Optional[List[int]]:
        """A live group's active ranks (its scaler's); None when all are."""
        if "elastic-status" not in self._ops:
            return None
        return self._ops["elastic-status"]()["active_ranks"]

    def new_group(self, why: str) -> None:
        """The group was replaced (restarted from a checkpoint): what its ranks
        reported is forgotten, and an update they were asked about fails with
        :class:`InvalidState` (``why``) without a commit."""
        if self.updates is not None:
            self.updates.new_group(why)
        with self._lock:
            self._per.clear()
            self._input_done.clear()

    def regroup(self, executors: int, why: str) -> None:
        """The group restarted with ``executors`` ranks (a rescale)."""
        self.executors = executors
        self.new_group(why)

    def close(self) -> None:
        """The run ended: requests waiting or arriving now fail."""
        with self._provided:
            self.finished = True
            self._provided.notify_all()
        if self.updates is not None:
            self.updates.close()
        self.moves.waiters.close()

    def _ms(self, ticks: Optional[int]) -> Optional[int]:
        return ticks_to_ms(ticks, self.ticks_per_ms)

    # -- the operations (control server threads, StreamHandle)
    def _updates(self) -> LogicUpdates:
        if self.updates is None:
            raise NotSupported(self.refusal("update"))
        return self.updates

    def submit(self, args: Dict[str, Any]) -> UpdateRound:
        """Checks an update and queues it for :meth:`service` (see
        :meth:`LogicUpdates.submit`)."""
        return self._updates().submit(args)

    @staticmethod
    def outcome(r: UpdateRound) -> Dict[str, Any]:
        return LogicUpdates.outcome(r)

    def update(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """The ``update`` operation."""
        return self.call("update", args)

    def rebalance(self, args: Dict[str, Any], timeout: float = REQUEST_TIMEOUT) -> Dict[str, Any]:
        """The ``rebalance`` operation: live through rank 0
        (:class:`LiveMoves`, returning once rank 0 accepted the moves, Timeout
        after ``timeout`` s), or what the run registered instead."""
        fn = self._ops.get("rebalance")
        if fn is not None and fn == self.moves.rebalance:
            return self.moves.rebalance(args, timeout)
        return self.call("rebalance", args)

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
                **(self._ops["elastic-status"]() if "elastic-status" in self._ops else {}),
                # a run with latency_target= (slash.control.autotune): its controller's decisions
                **({"controller": self._ops["controller-status"]()}
                   if "controller-status" in self._ops else {}),
                **leadership(per), **self._logic_status(), "per_executor": per}

    def _logic_status(self) -> Dict[str, Any]:
        q = self.plan.current
        if self.query_kind == "join":  # a join's logic has one version, without filters
            return {"logic_version": 0, "logic": [],
                    "query": {"time": q.time, "window": repr(q.window), "join_on": list(q.on),
                              "lateness_ms": q.lateness, "bounded": True}}
        return {"logic_version": self.plan.version, "logic": self.plan.describe(self._ms),
                "query": {"time": q.time, "window": repr(q.window), "key": list(q.key),
                          "aggregates": [a.name for a in q.aggregates],
                          "filters": [f"{f.column} {f.op} {f.value!r}" for f in q.filters],
                          "lateness_ms": q.lateness, "bounded": self.bounded}}


# ---- operations ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Operation:
    """A control operation: ``handler(ctl, args) -> JSON-able result``;
    ``cli_args``: (names, argparse kwargs) pairs for ``slash ctl NAME``,
    whose parsed values (by ``dest``) become ``args``; ``summary`` turns a
    result into the line ``slash ctl`` prints."""

    name: str
    handler: Callable[["RunControl", Dict[str, Any]], Dict[str, Any]]
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


def _scale_op(name: str, verb: str) -> Operation:
    """scale-out / scale-in: registered by a run's scaler (live within a group
    started with max_executors=, by restart from a checkpoint cut beyond it
    or with checkpoint=); any other run refuses saying why (RunControl.refusal)."""
    return Operation(name, lambda ctl, a: ctl.call(name, _int_arg(a, "k")),
                     f"{verb} K executors (live in a group started with --max-executors; else a "
                     "restart from a checkpoint cut)",
                     cli_args=[(("k",), {"type": int, "metavar": "K"})],
                     summary=lambda r: f"{r['executors']} executors"
                     + (f" ({r['path']} path)" if r.get("path") else ""))


register(_scale_op("scale-out", "add"))
register(_scale_op("scale-in", "release"))
register(Operation("epoch", lambda ctl, a: ctl.call("epoch", _int_arg(a, "ms")),
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


