"""The latency-driven controller (As-Stream): from the live metrics of a
running stream it finds the bottleneck and picks one reconfiguration at a
time, with a reason, so that windows come out within ``latency_target``.

The policy is pure: :meth:`Controller.observe` takes one
:class:`LiveMetrics` snapshot (``LiveMetrics.snapshot()``) and returns the
:class:`Decision` to apply now, or ``None``. Applying it is the caller's
business (an :class:`Actuator` maps action names to the operations the
running stream offers), so the same policy drives ``slash run`` and
``slash.spark.stream``, and its rules are tested on recorded signals.

Signals, per tick (one snapshot, about every 0.5-1 s):

* window latency p99 of each new point of the metrics history (one a
  second: the windows handed out in that second, emit time - window end);
* per executor: CPU load (CPU seconds per wall second), records/s, records
  behind its source (where the source knows), merge time per second, credit
  stalls per second; the group's mean epoch duration.

Bottlenecks, checked in this order when p99 is over the target
(As-Stream's "bottleneck level", from the measured cost of each stage):

1. ``input``: an executor is saturated (CPU load >= ``busy``) or its
   backlog grows: add executors (``scale_out``; as many as the load says
   the target needs, at most ``max_executors``). At ``max_executors`` the
   controller lengthens epochs instead (fewer, larger deltas cost less CPU).
2. ``merge``: one leader's merge time per second is more than twice the
   median and above ``merge_share``: move its hot partitions
   (``rebalance``).
3. ``epoch``: nobody is busy but the epochs are long for the target
   (> target / 4): halve the epoch length (down to ``min_epoch_ms``).
4. ``credit``: senders wait for channel credits: add an executor.

Conditions are sampled once per new point of the metrics history (one a
second, whether windows came out in it or not; "ticks" below). A tick is
"late" when the latest p99 (a history point at most 2 s old)
is over the target or an executor reads its input behind the clock by more
than the target (windows stop coming out when the input falls behind, so
the input lag is what shows it then). It has "room" when the latest p99 is
within the target, every executor reads its input within ``low_water`` x
target of the clock (or, on a source that does not report its lag, p99 is
under ``low_water`` x target) and no backlog grows.

The capacity of one executor is measured, not assumed: the records/s an
executor read over a report interval in which its paced reader never waited
for the clock, and at whose end it is behind the clock by more than the
target (it read as fast as it could), is a sample of its capacity on this
machine as loaded now. An interval in which it caught up and then waited
(or that began before its first paced batch, as after a restart) is none:
its rate is the input's, not the executor's; nor is one that overlaps a
decision being applied (a live scale pauses the input, a rescale restarts
the group: time in the rate without reading). The controller keeps the
median of the recent samples
(:attr:`Controller.capacity`). The utilisation of ``k`` executors is the
demand (records/s read plus the backlog's growth) over ``k`` x capacity,
and where no capacity was measured yet, their summed CPU load over ``k``.

When for ``release_sustain`` ticks the input was read within
``low_water`` x target of the clock, no backlog grew and the measured load
fitted one executor fewer with margin (predicted utilisation < ``fit``, by
both measures where both are known), it releases one (``scale_in``, not
below ``min_executors``). The window latency is not asked: a stream's
latency floor is its epoch length plus its merges, which the executor count
does not lower, and starved executors on a shared machine can run over the
target with the input on time and little to do. When epochs were changed
and the latency has room, it moves them back toward the configured length
(a shortened one only where the model predicts the longer one within
``headroom`` x target).

Near the target (p99 over ``headroom`` x target for ``sustain`` ticks,
whether under the target or not, the input on time), the controller asks its model for the
longest shorter epoch predicted within ``headroom`` x target, counting the
merges the extra boundaries add to the utilisation (the busiest leader's
merge time per second, scaled by current / new length) and taking none that
would bring it to ``fit``. A decision not taken for want of a setting is
logged with the term that limits the shortest epoch (or its merge cost).

Epoch length and executor count are chosen together from a latency model
fitted online (:mod:`slash.control.latency_model`: p99 as a fixed term, a share of
the epoch length and a queueing term in the utilisation): a scale-out asks
for at least the executors that keep the predicted p99 under ``headroom`` x
target, and an epoch change takes the longest shorter epoch predicted within
it (and none when the epoch term cannot matter). Releases follow the
measured load only: a model fitted on a restart's transient would hold them
back. Observations are taken outside the cool-down of a decision, and
only of windows that ended after the input last read behind the clock (a
drain's windows carry the backlog's latency, not the settings'). Each decision's reason ends with
the fitted law and the term that limits the latency at its new setting.

The demand of a tick is also taken from each executor's last two reports
(records/s read plus the growth of its records behind the clock between
them, summed over executors; none for a report interval that overlaps a
decision being applied): on any tick where it is at least ``surge`` x
the executors' measured capacity (:attr:`Controller.overload`), late yet
or not, between history points too, the controller scales out at once, to
the executors the demand needs at ``fit``, without waiting for late ticks
(a burst of a few seconds is mostly over by then; its backlog grows by the
excess from its first second). Without a capacity estimate, or with an overload
under ``surge``, the rules above wait their ticks.

Against oscillation: hysteresis and a cool-down, set by
:class:`slash.control.decisions.ControllerConfig` (its doc says how). The
controller never touches what the query computes: every action it takes is
one the stream applies at an epoch boundary with output equal to the
untuned run.
"""
from __future__ import annotations

import logging
import math
import statistics
from typing import Any, Callable, Dict, List, Mapping, Optional

from slash.control.decisions import (ACTIONS, Actuator, ControllerConfig, Decision,
                                     decisions_as_dicts, parse_duration_ms)
from slash.control.latency_model import LatencyModel, choose
from slash.control.signals import SignalReader, Signals
from slash.errors import InvalidArgument

log = logging.getLogger(__name__)

#: the settings, decisions and actuator, defined in slash.control.decisions, import from here too
__all__ = ["ACTIONS", "Actuator", "Controller", "ControllerConfig", "Decision",
           "decisions_as_dicts", "parse_duration_ms"]


class Controller:
    """The policy: feed it snapshots in time order, apply what it returns.

    ``epoch_ms`` is the stream's configured epoch length (the controller
    keeps track of its own changes to it); ``executors`` the current count
    (updated by :meth:`applied`).
    """

    def __init__(self, config: ControllerConfig, *, executors: int, epoch_ms: float) -> None:
        if not config.min_executors <= executors <= config.max_executors:
            raise InvalidArgument(f"the stream starts with {executors} executors, outside "
                                  f"min_executors..max_executors = {config.min_executors}.."
                                  f"{config.max_executors}")
        self.config = config
        self.executors = executors
        self.epoch_ms = float(epoch_ms)
        self.base_epoch_ms = float(epoch_ms)
        self.decisions: List[Decision] = []
        self.signals = SignalReader(config.target_ms)  # what each tick sees
        self._over = 0
        self._under = 0
        #: consecutive judged ticks late (p99 or lag over the target), not reset by a
        #: decision: what a run's timeline shows of the controller's judgement
        self.late_streak = 0
        #: consecutive judged ticks that counted toward a release (:meth:`_fits_fewer`), and the
        #: input's largest lag behind the clock on the last tick (ms; None: no source reports
        #: one): what a run's timeline shows of why an executor was or was not released
        self.release_streak = 0
        self.lag_ms: Optional[float] = None
        self.backlog_growing = False  # the records behind the clock grew on the last tick
        self._tight = 0  # consecutive ticks p99 was over headroom x target, input on time
        self._declined: Dict[str, float] = {}  # kind -> time a decision declined was last logged
        self._quiet_until = 0.0
        self._last_action: Optional[str] = None  # the last decision's, for the cool-down
        self._deciding: Optional[float] = None  # time of the decision applied since the last tick
        self.model = LatencyModel()  # p99 against epoch length and utilisation, fitted online
        self._behind_at = float("-inf")  # the last tick the input was behind the clock
        #: the latest judged tick's demand over the executors' measured capacity (demand /
        #: (executors x capacity)), None without a demand pair or a capacity estimate
        self.overload: Optional[float] = None

    @property
    def capacity(self) -> Optional[float]:
        """Records/s one executor reads at most on this machine now
        (:attr:`SignalReader.capacity`), or None before any was measured."""
        return self.signals.capacity

    @property
    def capacity_samples(self) -> int:
        """How many samples :attr:`capacity` rests on (at most the last 20)."""
        return self.signals.capacity_samples

    # -- the policy -------------------------------------------------------------
    def observe(self, snap: Mapping[str, Any]) -> Optional[Decision]:
        """One tick: the decision to apply now, or None."""
        t = float(snap["time"])
        if self._deciding is not None:  # applied between the last tick and this one
            self.signals.note_reconfiguration(self._deciding, t)
            self._deciding = None
            self._quiet_until = max(self._quiet_until, t + self.config.cooldown)
        s = self.signals.read(snap, self.executors)
        c = self.config
        if not s.per:
            return None
        cap = self.capacity
        self.overload = (s.demand_per_s / (self.executors * cap)
                         if cap is not None and s.demand_per_s is not None else None)
        quiet = s.time < self._quiet_until
        # an overload well beyond the measured capacity needs no late ticks, nor a history
        # point: the backlog grows by the excess whatever the latency says yet. Also in the
        # cool-down of a release or an epoch change (neither added capacity whose effect
        # must show first, and a burst of a few seconds would be over by its end); a
        # scale-out's cool-down holds (its new executors must show)
        d: Optional[Decision] = None
        if not (quiet and self._last_action == "scale_out"):
            d = self._surge(s)
        if not s.fresh:  # the other rules: a sample per history point (one a second)
            return self._decided(d, s)
        self._observe_model(s)
        late, room = self._judge(s)
        self._over = self._over + 1 if late else 0
        self.late_streak = self.late_streak + 1 if late else 0
        self.lag_ms = s.lag_ms
        self.backlog_growing = s.backlog_growing
        self._under = self._under + 1 if room else 0
        fits = self._fits_fewer(s)  # None: a tick that neither counts toward a release nor resets
        self.release_streak = (self.release_streak + 1 if fits
                               else self.release_streak if fits is None else 0)
        self._tight = self._tight + 1 if self._near_target(s) else 0
        if quiet:
            return self._decided(d, s)
        if d is None and self._over >= c.sustain:
            d = self._too_slow(s)
        if d is None and self.release_streak >= c.release_sustain:
            d = self._release(s)
        if d is None and self._under >= c.release_sustain:
            d = self._room_to_spare(s)
        if d is None and self._tight >= c.sustain:
            d = self._tight_epoch(s)
        return self._decided(d, s)

    def _decided(self, d: Optional[Decision], s: Signals) -> Optional[Decision]:
        """Records decision ``d`` (None: none) taken on tick ``s``: its
        explanation, the cool-down, the counters reset, the log."""
        if d is not None:
            d = self._explained(d, s)
            self._quiet_until = s.time + self.config.cooldown
            self._deciding = s.time
            self._last_action = d.action
            self._over = self._under = self.release_streak = self._tight = 0
            self.decisions.append(d)
            log.info("controller: %s %s (%s: %s)", d.action, d.args, d.bottleneck, d.reason)
        return d

    # -- the latency model (As-Stream) ------------------------------------------
    def _u(self, s: Signals, k: int) -> float:
        """Utilisation of ``k`` executors by the load now: by the measured
        capacity where known, else by the summed CPU load."""
        pred = self._utilisation(s, k)
        return pred.get("capacity", pred["cpu"])

    def _drain_latency(self, s: Signals) -> bool:
        """Whether the windows behind this tick's p99 ended while the input
        was behind the clock: handed out in the last second with this
        latency, they are the backlog's (a drain's), not the settings'."""
        fresh = self.signals.fresh
        return bool(fresh) and (s.time - self._behind_at) * 1000.0 <= fresh[-1] + 1000.0

    def _observe_model(self, s: Signals) -> None:
        """One observation per new p99 of a stream reading on time, whose
        windows ended after the input last was behind the clock."""
        if (s.lag_ms is not None and s.lag_ms > self.config.target_ms) or s.backlog_growing:
            self._behind_at = s.time
            return  # behind the clock: latency grows with time, not with the settings
        if not self.signals.fresh or s.p99_ms is None or s.time < self._quiet_until:
            return  # nothing new, or the transient of a reconfiguration (its cool-down)
        if self._drain_latency(s):
            return
        self.model.add(s.epoch_ms or self.epoch_ms, self._u(s, self.executors), self.signals.fresh[-1])

    def _epochs_down(self) -> List[float]:
        """The epoch lengths the controller may set below the current one."""
        out, e = [], self.epoch_ms / 2
        while e >= self.config.min_epoch_ms:
            out.append(e)
            e /= 2
        return out

    def _explained(self, d: Decision, s: Signals) -> Decision:
        """The decision with the model's view appended: the fitted law and
        which term limits the latency at the setting it leads to."""
        fit = self.model.fit()
        if fit is None:
            return d
        k, e = self.executors, self.epoch_ms
        if d.action == "scale_out":
            k += int(d.args["k"])
        elif d.action == "scale_in":
            k -= int(d.args["k"])
        elif d.action == "epoch":
            e = float(d.args["epoch_ms"])
        u = self._u(s, k)
        term, value = fit.limiting(e, u)
        why = (f"{d.reason}; model {fit.describe()}: predicts {fit.predict(e, u):.0f} ms at "
               f"{k} executor(s), epoch {e:.0f} ms, utilisation {u:.2f}; limited by {term} "
               f"({value:.0f} ms)")
        return Decision(d.time, d.action, d.args, d.bottleneck, why)

    def _judge(self, s: Signals) -> tuple:
        """(late, room) for this tick (see the module doc)."""
        target = self.config.target_ms
        lag = s.lag_ms
        late = (s.p99_ms is not None and s.p99_ms > target) or (lag is not None and lag > target)
        if late or s.backlog_growing:
            return late, False
        if lag is not None:
            return False, lag <= self.config.low_water * target and (s.p99_ms is None
                                                                     or s.p99_ms <= target)
        return False, s.p99_ms is not None and s.p99_ms < self.config.low_water * target

    def _demand(self, s: Signals) -> float:
        """Records/s due now: what the executors read plus the backlog's growth."""
        return sum(e.records_per_s for e in s.per.values()) + s.backlog_per_s

    def _utilisation(self, s: Signals, k: int) -> Dict[str, float]:
        """The predicted utilisation of ``k`` executors by the load now:
        ``capacity`` (demand over k x the measured capacity of one) where
        that was measured, ``cpu`` (summed CPU load over k) always."""
        got = {"cpu": sum(e.cpu_load for e in s.per.values()) / k}
        cap = self.capacity
        if cap is not None:
            got["capacity"] = self._demand(s) / (k * cap)
        return got

    def _late_terms(self, s: Signals) -> str:
        """The latency side of a late tick, in words."""
        return ((f"p99 {s.p99_ms:.0f} ms" if s.p99_ms is not None else "no window out")
                + f" against target {self.config.target_ms:.0f} ms, late for {self._over} ticks")

    def _surge(self, s: Signals) -> Optional[Decision]:
        """A tick whose demand is at least ``surge`` x what the executors
        read at most (:attr:`overload`): executors for the demand at ``fit``
        at once, without waiting for late ticks (a burst of a few seconds is
        mostly over by then; the backlog grows by the excess from its
        start)."""
        c = self.config
        cap, demand = self.capacity, s.demand_per_s
        if self.overload is None or self.overload < c.surge or self.executors >= c.max_executors \
                or cap is None or demand is None:
            return None
        read = sum(e.records_per_s for e in s.per.values())
        why = (f"{self._late_terms(s)}"
               + (f"; input read {s.lag_ms:.0f} ms behind the clock" if s.lag_ms is not None else "")
               + f"; demand {demand:.0f} rec/s (read {read:.0f}, backlog {demand - read:+.0f} a "
               f"second) is {self.overload:.2f} x {self.executors} executor(s) x one executor's "
               f"measured capacity {cap:.0f} rec/s, at or over surge {c.surge:.2f}: scaled for "
               f"the demand at fit {c.fit:.2f} on this tick")
        return self._scale_out(s, self._executors_for(demand), why)

    def _executors_for(self, demand: float) -> int:
        """Executors that read ``demand`` records/s at ``fit`` utilisation of
        the measured capacity (known: the caller checked)."""
        return math.ceil(demand / (self.config.fit * float(self.capacity or 0.0)))

    def _scale_out(self, s: Signals, need: int, why: str) -> Decision:
        """Scale out to ``need`` executors, or to what the fitted model
        wants for its queueing term if more; at least one more, at most
        ``max_executors``."""
        c = self.config
        fit = self.model.fit()
        if fit is not None and fit.queueing_known:  # executors for the queueing term too
            more = range(self.executors + 1, c.max_executors + 1)
            got = choose(fit, target_ms=c.headroom * c.target_ms, epochs=[self.epoch_ms],
                         executors=more, utilisation={k: self._u(s, k) for k in more},
                         fit_limit=c.fit)
            if got is not None and got[0] > need:
                need = got[0]
                why += f"; the model wants {need} for the queueing term"
        k = max(1, min(need - self.executors, c.max_executors - self.executors))
        return Decision(s.time, "scale_out", {"k": k}, "input", why)

    def _too_slow(self, s: Signals) -> Optional[Decision]:
        c = self.config
        loads = {r: e.cpu_load for r, e in s.per.items()}
        hot = max(loads.values())
        mean = sum(loads.values()) / len(loads)
        p99 = self._late_terms(s)
        # reading behind the clock by more than the target: the input is the bottleneck,
        # whatever the CPU load says (on a shared machine a starved executor shows little)
        lagging = s.lag_ms is not None and s.lag_ms > c.target_ms
        if hot >= c.busy or s.backlog_growing or lagging:
            why = (f"{p99}; executor load max {hot:.2f}, mean {mean:.2f}"
                   + ("; backlog growing" if s.backlog_growing else "")
                   + (f"; input read {s.lag_ms:.0f} ms behind the clock" if lagging else ""))
            if self.executors < c.max_executors:
                cap = self.capacity
                if cap is not None:  # as many as the demand needs at the measured capacity
                    demand = self._demand(s)
                    need = self._executors_for(demand)
                    why += (f"; demand {demand:.0f} rec/s, one executor's measured capacity "
                            f"{cap:.0f} rec/s")
                else:
                    need = (math.ceil(self.executors * max(mean, hot) / c.fit)
                            if not (s.backlog_growing or lagging) else 0)
                return self._scale_out(s, need, why)
            # longer epochs only help executors busy with their own work: one starved by
            # other processes on the machine (late, little CPU load) gains nothing from them
            if hot >= c.busy and self.epoch_ms * 2 <= min(c.max_epoch_ms, c.target_ms / 2):
                return Decision(s.time, "epoch", {"epoch_ms": self.epoch_ms * 2}, "input",
                                why + f"; at max_executors {c.max_executors}: longer epochs cost less CPU")
            return None
        merges = {r: e.merge_per_s for r, e in s.per.items()}
        if len(merges) > 1:
            r_hot = max(merges, key=lambda r: merges[r])
            med = statistics.median(merges.values())
            if merges[r_hot] > c.merge_share and merges[r_hot] > 2 * med:
                idle = min(loads, key=lambda r: loads[r])
                return Decision(s.time, "rebalance", {"from_rank": r_hot, "to_rank": idle}, "merge",
                                f"{p99}; leader {r_hot} merges {merges[r_hot]:.2f} s/s, median {med:.2f}")
        if self.epoch_ms > c.target_ms / 4 and self.epoch_ms / 2 >= c.min_epoch_ms:
            if self._drain_latency(s):
                # the late windows are a backlog's being drained: shorter epochs would not
                # make them earlier, and their merges would slow the drain
                self._decline(s, "epoch", f"{p99}; the late windows ended while the input was "
                                          "behind the clock: a backlog drains, the epoch is not what costs")
                return None
            e: Optional[float] = self.epoch_ms / 2
            fit = self.model.fit()
            if fit is not None:  # the longest shorter epoch the model predicts within the target
                got, why_not = self._shorter_epoch(s, fit, float("inf"))
                if got is not None:
                    e = got
                elif fit.per_epoch * self.epoch_ms / 2 < c.target_ms / 20:
                    # shorter epochs would not help: the model's other terms dominate
                    self._decline(s, "epoch", f"{p99}; no shorter epoch: {why_not}")
                    e = None
            if e is not None:
                return Decision(s.time, "epoch", {"epoch_ms": e}, "epoch",
                                f"{p99}; epochs of {self.epoch_ms:.0f} ms are long for the target, "
                                f"load max {hot:.2f}")
        stalls = sum(e.stalls_per_s for e in s.per.values())
        if stalls > 0 and self.executors < c.max_executors:
            return Decision(s.time, "scale_out", {"k": 1}, "credit",
                            f"{p99}; {stalls:.0f} credit stalls/s")
        return None

    def _reads_on_time(self, s: Signals, share: float) -> bool:
        """No backlog grows and every executor reads its input within ``share``
        x target of the clock (a source that does not report its lag: p99
        within the target, the only sign that the input keeps up)."""
        if s.backlog_growing:
            return False
        if s.lag_ms is not None:
            return s.lag_ms <= share * self.config.target_ms
        return s.p99_ms is not None and s.p99_ms <= self.config.target_ms

    def _fits_fewer(self, s: Signals) -> Optional[bool]:
        """True: this tick counts toward a release: the input is read within
        ``low_water`` x target of the clock and the measured load would fit
        one executor fewer under ``fit`` utilisation (by the measured
        capacity and by the CPU load, where each is known). The window
        latency is not asked: over the target with the input on time and
        the executors under ``fit``, it is not the executor count that
        costs (two starved executors on a shared machine run over the
        target with room to spare). None: the load fits and the input is
        read within the target but not within ``low_water`` of it, a
        transient such as a checkpoint's cut (every 5 s, it broke every
        streak of 6 ticks on a loaded machine): neither for nor against.
        Likewise a tick whose CPU load alone would not fit, where the
        demand fits the measured capacity with margin and the input is read
        on time: the CPU of a checkpoint's cut, every 5 s, took two
        executors reading 0.15 M rec/s each from 0.35 to 0.6-0.75 of one
        executor (CI, 2026-12-07) and no streak of 6 ticks ever formed."""
        c = self.config
        if self.executors <= c.min_executors:
            return False
        util = self._utilisation(s, self.executors - 1)
        if util.get("capacity", 0.0) >= c.fit:
            return False  # the demand would not fit the measured capacity of one fewer
        if not self._reads_on_time(s, 1.0):
            return False
        if util["cpu"] >= c.fit:
            return None if "capacity" in util else False
        return True if self._reads_on_time(s, c.low_water) else None

    def _near_target(self, s: Signals) -> bool:
        """p99 over ``headroom`` x target (under the target or not: a p99
        that sits at the target crosses it now and then), the input read
        within the target of the clock: the model is asked whether a shorter
        epoch would keep it under ``headroom`` x target."""
        c = self.config
        return (s.p99_ms is not None and s.p99_ms > c.headroom * c.target_ms
                and self._reads_on_time(s, 1.0))

    def _epoch_cost(self, s: Signals) -> Callable[[float], float]:
        """The utilisation epochs of ``e`` ms add over the current length:
        the busiest leader's merge time per second, counted as per boundary
        (the number of boundaries a second grows as current / e)."""
        m = max((x.merge_per_s for x in s.per.values()), default=0.0)
        cur = self.epoch_ms
        return lambda e: m * max(0.0, cur / e - 1.0)

    def _shorter_epoch(self, s: Signals, fit: Any, limit: float) -> tuple:
        """(the longest epoch below the current one that the fitted model
        predicts within ``headroom`` x target, with the merges it adds and
        the utilisation under ``limit``, or None; why none, in words: the
        term that limits the shortest one, or its merge cost)."""
        c = self.config
        downs = self._epochs_down()
        if not downs:
            return None, f"epochs of {self.epoch_ms:.0f} ms are the shortest allowed"
        u0, cost = self._u(s, self.executors), self._epoch_cost(s)
        got = choose(fit, target_ms=c.headroom * c.target_ms, epochs=downs,
                     executors=[self.executors], utilisation={self.executors: u0},
                     fit_limit=limit, epoch_cost=cost)
        if got is not None:
            return got[1], ""
        allowed = [e for e in downs if u0 + cost(e) < limit]
        if not allowed:
            e = downs[0]
            return None, (f"the merge cost: epochs of {e:.0f} ms would add {cost(e):.2f} to the "
                          f"utilisation {u0:.2f}, not under fit {limit:.2f}")
        e = min(allowed)
        term, value = fit.limiting(e, u0 + cost(e))
        return None, (f"model {fit.describe()}: predicts {fit.predict(e, u0 + cost(e)):.0f} ms "
                      f"at epoch {e:.0f} ms, over {c.headroom * c.target_ms:.0f} ms; limited "
                      f"by {term} ({value:.0f} ms)")

    def _decline(self, s: Signals, kind: str, why: str) -> None:
        """Logs a decision not taken, once per ``cooldown`` of each kind."""
        if s.time - self._declined.get(kind, float("-inf")) >= self.config.cooldown:
            self._declined[kind] = s.time
            log.info("controller: no %s change (%s)", kind, why)

    def _tight_epoch(self, s: Signals) -> Optional[Decision]:
        """p99 near the target for ``sustain`` ticks, the input on time: the
        longest shorter epoch the fitted model predicts within ``headroom``
        x target, if the merges it adds keep the utilisation under
        ``fit``."""
        c = self.config
        p99 = (f"p99 {s.p99_ms:.0f} ms over {c.headroom:.2f} x target {c.target_ms:.0f} ms "
               f"for {self._tight} ticks")
        fit = self.model.fit()
        if fit is None:
            self._tight = 0
            self._decline(s, "epoch", f"{p99}; no model fitted yet ({len(self.model)} points)")
            return None
        e, why_not = self._shorter_epoch(s, fit, c.fit)
        if e is None:
            self._tight = 0  # asked again after another sustain ticks
            self._decline(s, "epoch", f"{p99}; no shorter epoch: {why_not}")
            return None
        return Decision(s.time, "epoch", {"epoch_ms": e}, "epoch",
                        f"{p99}; the model predicts epochs of {e:.0f} ms within it, the merges "
                        f"they add {self._epoch_cost(s)(e):.2f} of an executor")

    def _release(self, s: Signals) -> Optional[Decision]:
        """One executor fewer: the load fitted ``executors - 1`` with margin
        for ``release_sustain`` ticks (:meth:`_fits_fewer`)."""
        c = self.config
        if self.executors <= c.min_executors:
            return None
        k = self.executors - 1
        pred = self._utilisation(s, k)
        cap = self.capacity
        measured = (f"demand {self._demand(s):.0f} rec/s is {pred['capacity']:.2f} of "
                    f"{k} x one executor's measured capacity {cap:.0f} rec/s, "
                    if cap is not None else "")
        p99 = (f"p99 {s.p99_ms:.0f} ms" if s.p99_ms is not None else "no window out") + \
            f" (target {c.target_ms:.0f} ms)"
        on_time = (f"input read at most {s.lag_ms:.0f} ms behind the clock"
                   if s.lag_ms is not None else "p99 within the target")
        return Decision(s.time, "scale_in", {"k": 1}, "none",
                        f"{p99}, {on_time} for {self.release_streak} ticks; the load fits {k} "
                        f"executor(s) with margin: {measured}CPU load {pred['cpu'] * k:.2f} is "
                        f"{pred['cpu']:.2f} each (< fit {c.fit:.2f})")

    def _room_to_spare(self, s: Signals) -> Optional[Decision]:
        """Latency room for ``release_sustain`` ticks: epochs moved back
        toward the configured length (a shorter one back up only where the
        fitted model predicts the longer one within ``headroom`` x target,
        so that it does not undo a shortening the model chose)."""
        c = self.config
        p99 = ((f"p99 {s.p99_ms:.0f} ms" if s.p99_ms is not None else "no window out")
               + f" within target {c.target_ms:.0f} ms"
               + (f", input read at most {s.lag_ms:.0f} ms behind the clock"
                  if s.lag_ms is not None else "")
               + f" for {self._under} ticks")
        if self.epoch_ms < self.base_epoch_ms and self.epoch_ms * 2 <= c.target_ms / 4:
            e = min(self.base_epoch_ms, self.epoch_ms * 2)
            fit = self.model.fit()
            if fit is not None and fit.predict(e, self._u(s, self.executors)) > \
                    c.headroom * c.target_ms:
                return None
            return Decision(s.time, "epoch", {"epoch_ms": e}, "none",
                            f"{p99}; epochs back toward {self.base_epoch_ms:.0f} ms (throughput)")
        if self.epoch_ms > self.base_epoch_ms:
            return Decision(s.time, "epoch", {"epoch_ms": max(self.base_epoch_ms, self.epoch_ms / 2)},
                            "none", f"{p99}; epochs back toward {self.base_epoch_ms:.0f} ms (latency)")
        return None

    def applied(self, d: Decision, ok: bool = True) -> None:
        """Tells the policy what came of a decision (``ok=False``: the
        stream could not apply it; the state stays as it was)."""
        if not ok:
            return
        if d.action == "scale_out":
            self.executors += int(d.args["k"])
        elif d.action == "scale_in":
            self.executors -= int(d.args["k"])
        elif d.action == "epoch":
            self.epoch_ms = float(d.args["epoch_ms"])
