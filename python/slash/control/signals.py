"""What the latency controller (:mod:`slash.control.controller`) sees on a
tick: :class:`Signals`, derived by a :class:`SignalReader` from the run's
metrics snapshots (:class:`slash.metrics.LiveMetrics`), two at a time.

Besides each tick's rates, the reader keeps what spans ticks: the p99 of the
latest history point with windows (fresh for 2 s), the records behind the
clock over the last 3 s (a backlog grows only if every sample rose), each
executor's records due over its latest report interval (the demand), and
one executor's capacity, sampled where an executor read behind the clock
without waiting for it (the median of the last 20). A report interval that
overlaps a decision being applied (:meth:`SignalReader.note_reconfiguration`)
is neither a capacity nor a demand sample: its rate counts the pause.
The reader decides nothing.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional


@dataclass
class ExecSignal:
    """One executor on one tick: its rates over its latest report interval."""

    cpu_load: float
    records_per_s: float
    behind: Optional[float]
    merge_per_s: float
    stalls_per_s: float
    lag_ms: Optional[float] = None  # how far its reading is behind the wall clock (realtime inputs)
    input_wait: Optional[float] = None  # share of the interval its reader waited for the clock


@dataclass
class Signals:
    """What one tick sees (derived from two consecutive snapshots)."""

    time: float
    executors: int
    p99_ms: Optional[float]
    epoch_ms: Optional[float]
    per: Dict[int, ExecSignal] = field(default_factory=dict)
    backlog_growing: bool = False
    backlog_per_s: float = 0.0   # growth of the records behind the clock, summed over executors
    #: records/s due now from each executor's last two reports (what it read plus the growth
    #: of its records behind the clock), summed; None unless every executor has such a pair
    #: outside a reconfiguration
    demand_per_s: Optional[float] = None
    fresh: bool = False          # a new point of the metrics history since the last tick

    @property
    def lag_ms(self) -> Optional[float]:
        """How far the executor furthest behind reads behind the wall clock
        (ms); None when no executor's source reports it."""
        lags = [e.lag_ms for e in self.per.values() if e.lag_ms is not None]
        return max(lags) if lags else None


#: seconds a history point's p99 stands for the latency now
_P99_FRESH_S = 2.0
#: capacity samples kept (the median of them is the estimate)
_CAPACITY_SAMPLES = 20
#: decisions applied kept for :meth:`SignalReader.spans_reconfiguration`: a new report
#: interval can only overlap the latest few, since decisions are a cool-down apart and an
#: executor silent for 3 s (six report intervals) is reported stalled; 4 keeps every decision
#: of the last 24 s at the default cool-down (8 s), and an interval longer than that is no
#: capacity sample anyway (its executor waited or stalled)
_RECONFIGURATIONS_KEPT = 4
#: the share of a report interval an executor's reader may have waited for the clock for
#: its rate to be a capacity sample (a 10 ms wait at most in a 0.5 s interval)
_CAPACITY_MAX_WAIT = 0.02


class SignalReader:
    """Derives one :class:`Signals` a tick from consecutive snapshots
    (:meth:`read`); ``target_ms`` is the latency target (an executor read
    behind the clock by more than it is a capacity sample's premise)."""

    def __init__(self, target_ms: float) -> None:
        self.target_ms = target_ms
        self._prev: Optional[Mapping[str, Any]] = None
        self._last_point = float("-inf")  # time of the last history point read
        #: p99 of the history points new on the latest tick
        self.fresh: List[float] = []
        self._behind: List[tuple] = []  # (time, total records behind)
        self._p99: Optional[tuple] = None  # (history time, p99 ms) of the latest point with windows
        self._capacity: List[float] = []  # records/s of executors read while behind the clock
        self._reconfigured: List[tuple] = []  # (from, to): the group was being reconfigured
        self._due: Dict[int, tuple] = {}  # rank -> (report time, records/s due over its interval)

    @property
    def capacity(self) -> Optional[float]:
        """Records/s one executor reads at most on this machine now (the
        median of its recent samples), or None before any was measured."""
        return statistics.median(self._capacity) if self._capacity else None

    @property
    def capacity_samples(self) -> int:
        """How many samples :attr:`capacity` rests on (at most the last 20)."""
        return len(self._capacity)

    def note_reconfiguration(self, start: float, end: float) -> None:
        """A decision was being applied from ``start`` to ``end`` (the tick
        that saw it done)."""
        self._reconfigured = (self._reconfigured + [(start, end)])[-_RECONFIGURATIONS_KEPT:]

    def read(self, snap: Mapping[str, Any], executors: int) -> Signals:
        """The signals of the tick whose snapshot is ``snap`` (the group having
        ``executors`` executors), from it and the snapshot before."""
        t = float(snap["time"])
        prev = self._prev
        self._prev = snap
        per: Dict[int, ExecSignal] = {}
        reported: Dict[int, float] = {}  # rank -> time of the report this snapshot holds
        epochs = []
        new: List[int] = []  # the executors with a report new since the last tick
        paused = set()  # the executors whose report interval spans a reconfiguration
        for r, cur in (snap.get("per_executor") or {}).items():
            old = (prev.get("per_executor") or {}).get(r) if prev else None
            dt = (cur["time"] - old["time"]) if old else 0.0
            if old is None or dt > 0:
                new.append(int(r))
            if self.spans_reconfiguration(old, cur):
                paused.add(int(r))
            merge = stalls = 0.0
            if old and dt > 0:
                merge = max(0.0, (cur.get("merge_seconds", 0) - old.get("merge_seconds", 0)) / dt)
                stalls = max(0.0, (cur.get("credit_stalls", 0) - old.get("credit_stalls", 0)) / dt)
            per[int(r)] = ExecSignal(cpu_load=float(cur.get("cpu_load") or 0.0),
                                      records_per_s=float(cur.get("records_per_s") or 0.0),
                                      behind=cur.get("records_behind"), merge_per_s=merge,
                                      stalls_per_s=stalls,
                                      lag_ms=cur.get("input_lag_ms"), input_wait=cur.get("input_wait"))
            reported[int(r)] = float(cur["time"])
            if int(r) in paused:  # its rate counts the pause, its backlog the redistribution
                self._due.pop(int(r), None)
            elif old and dt > 0:
                self._due_sample(int(r), per[int(r)], old.get("records_behind"), dt,
                                 float(cur["time"]))
            if cur.get("epoch_ms"):
                epochs.append(float(cur["epoch_ms"]))
        self.fresh = []
        points = 0  # history points new since the last tick: one a second, with windows or not
        for point in snap.get("history") or ():
            if point["t"] > self._last_point:
                self._last_point = point["t"]
                points += 1
                if point.get("latency_p99_ms") is not None:
                    self.fresh.append(float(point["latency_p99_ms"]))
                    self._p99 = (float(point["t"]), float(point["latency_p99_ms"]))
        p99 = self._p99[1] if self._p99 is not None and t - self._p99[0] <= _P99_FRESH_S else None
        horizon = t - 3.0
        behind = [e.behind for e in per.values() if e.behind is not None]
        growing = False
        slope = 0.0
        if behind and (not self._behind or self._behind[-1][1] != float(sum(behind))):
            # a tick that saw no new report is no sample (equal values are not growth)
            self._behind.append((t, float(sum(behind))))
            self._behind = [x for x in self._behind if x[0] >= horizon]
            if len(self._behind) >= 3:
                vals = [x[1] for x in self._behind]
                growing = all(b > a for a, b in zip(vals, vals[1:]))
                span = self._behind[-1][0] - self._behind[0][0]
                slope = max(0.0, (vals[-1] - vals[0]) / span) if span > 0 else 0.0
        for r in new:  # an executor behind the clock that never waited for it read at capacity
            e = per[r]
            if e.lag_ms is not None and e.lag_ms > self.target_ms and e.records_per_s > 0 \
                    and e.input_wait is not None and e.input_wait <= _CAPACITY_MAX_WAIT \
                    and r not in paused:
                self._capacity = (self._capacity + [e.records_per_s])[-_CAPACITY_SAMPLES:]
        self._due = {r: v for r, v in self._due.items() if r in per}
        dues = [self._due.get(r) for r in per]
        demand = (sum(max(0.0, d[1]) for d in dues)  # type: ignore[index]
                  if per and all(d is not None and d[0] == reported[r]
                                 for r, d in zip(per, dues)) else None)
        return Signals(time=t, executors=executors, p99_ms=p99,
                       epoch_ms=statistics.median(epochs) if epochs else None, per=per,
                       backlog_growing=growing, backlog_per_s=slope,
                       fresh=points > 0, demand_per_s=demand)

    def _due_sample(self, r: int, e: ExecSignal, behind_before: Optional[float], dt: float,
                    at: float) -> None:
        """Executor ``r``'s records due per second over its latest report
        interval (``dt`` s ending at ``at``): what it read plus the growth of
        its records behind the clock; none where either report lacks the
        backlog (a source that does not report it)."""
        if e.behind is None or behind_before is None:
            self._due.pop(r, None)
            return
        self._due[r] = (at, e.records_per_s + (float(e.behind) - float(behind_before)) / dt)

    def spans_reconfiguration(self, old: Optional[Mapping[str, Any]],
                               cur: Mapping[str, Any]) -> bool:
        """Whether an executor's report interval (from ``old``, its report the
        last tick saw, to ``cur``) overlaps a decision being applied: a live
        scale pauses the input, a rescale restarts the group, and that time
        is in the interval's rate without any reading in it."""
        start = float(old["time"]) if old is not None else float("-inf")
        return any(a < float(cur["time"]) and start < b for a, b in self._reconfigured)
