"""What the latency controller (:mod:`slash.control.controller`) is told
and what it answers: its settings (:class:`ControllerConfig`, the target a
duration parsed by :func:`parse_duration_ms`), the reconfiguration it picks
(:class:`Decision`, one of :data:`ACTIONS`), and how a running stream
applies one (:class:`Actuator`: action names to the stream's operations)."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Sequence

from slash.errors import InvalidArgument

#: the controller's warnings keep the logger users configure
log = logging.getLogger("slash.control.controller")

#: the actions a decision can name
ACTIONS = ("scale_out", "scale_in", "rebalance", "epoch")


def parse_duration_ms(value: Any, what: str = "latency_target") -> float:
    """``"500ms"``, ``"2s"``, ``0.5`` (seconds) -> milliseconds."""
    if isinstance(value, bool):
        raise InvalidArgument(f"{what} must be a duration like '500ms' or '2s', got {value!r}")
    if isinstance(value, (int, float)):
        ms = float(value) * 1000.0
    elif isinstance(value, str):
        s = value.strip().lower()
        try:
            if s.endswith("ms"):
                ms = float(s[:-2])
            elif s.endswith("s"):
                ms = float(s[:-1]) * 1000.0
            else:
                raise ValueError(s)
        except ValueError:
            raise InvalidArgument(f"{what} must be a duration like '500ms' or '2s', got {value!r}") from None
    else:
        raise InvalidArgument(f"{what} must be a duration like '500ms' or '2s', got {value!r}")
    if not (ms > 0 and math.isfinite(ms)):
        raise InvalidArgument(f"{what} must be > 0, got {value!r}")
    return ms


@dataclass(frozen=True)
class ControllerConfig:
    """How the controller judges and how fast it acts (defaults suit a
    stream whose metrics arrive every 0.5 s).

    Against oscillation (hysteresis and cool-down): a condition must hold for
    ``sustain`` consecutive ticks (``release_sustain`` for releasing, which is
    slower on purpose), the up and down thresholds are apart (late: lag or p99
    over the target; release: lag under ``low_water`` x target and the load
    fitting one executor fewer at ``fit`` < 1 utilisation, so the count after a
    release is not saturated), and after any decision nothing happens for
    ``cooldown`` seconds from the first tick after it was applied (the change
    must show in the signals first; a restart that took longer than the
    cool-down would otherwise leave its own backlog to be judged as a load).
    """

    latency_target: Any  # "500ms", "2s" or seconds
    min_executors: int = 1
    max_executors: int = 4
    sustain: int = 3             # ticks a "too slow" condition must hold
    release_sustain: int = 10    # ticks a "room to spare" condition must hold
    cooldown: float = 8.0        # seconds after a decision with no other
    low_water: float = 0.5       # input lag under low_water x target: room to spare
    busy: float = 0.85           # CPU load of a saturated executor
    fit: float = 0.6             # predicted utilisation that one executor fewer must stay under
    merge_share: float = 0.2     # merge seconds per second of a hot leader
    min_epoch_ms: float = 5.0
    max_epoch_ms: float = 1000.0
    headroom: float = 0.8        # a setting chosen by the model must predict p99 under headroom x target
    surge: float = 1.5           # demand over executors x measured capacity that scales out at once

    def __post_init__(self) -> None:
        target = parse_duration_ms(self.latency_target)
        object.__setattr__(self, "latency_target", target / 1000.0)
        for name in ("min_executors", "max_executors", "sustain", "release_sustain"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
        if self.max_executors < self.min_executors:
            raise InvalidArgument(f"max_executors ({self.max_executors}) is below min_executors "
                                  f"({self.min_executors})")
        for name in ("cooldown", "low_water", "busy", "fit", "merge_share", "min_epoch_ms",
                     "max_epoch_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise InvalidArgument(f"{name} must be > 0, got {v!r}")
        if not self.headroom <= 1:
            raise InvalidArgument(f"headroom must be in (0, 1] (a fraction of the target), got {self.headroom}")
        if not self.low_water < 1:
            raise InvalidArgument(f"low_water must be below 1 (a fraction of the target), got {self.low_water}")
        if isinstance(self.surge, bool) or not isinstance(self.surge, (int, float)) \
                or not self.surge > 1:
            raise InvalidArgument(f"surge must be above 1 (demand over what the executors read at "
                                  f"most: at or below 1 is no overload), got {self.surge!r}")

    @property
    def target_ms(self) -> float:
        return float(self.latency_target) * 1000.0


@dataclass(frozen=True)
class Decision:
    """One reconfiguration: ``action`` in :data:`ACTIONS`, its arguments,
    the bottleneck it answers and the measured reason, in words."""

    time: float
    action: str
    args: Dict[str, Any]
    bottleneck: str
    reason: str

    def as_dict(self) -> Dict[str, Any]:
        return {"time": self.time, "action": self.action, "args": dict(self.args),
                "bottleneck": self.bottleneck, "reason": self.reason}


class Actuator:
    """Maps a decision to the operation a running stream offers:
    ``ops = {"scale_out": f(k), "scale_in": f(k), "rebalance": f(from_rank,
    to_rank), "epoch": f(epoch_ms)}``; an action the stream does not offer is
    logged and reported as not applied."""

    def __init__(self, ops: Mapping[str, Callable[..., Any]]) -> None:
        unknown = set(ops) - set(ACTIONS)
        if unknown:
            raise InvalidArgument(f"unknown controller actions {sorted(unknown)}; known: {list(ACTIONS)}")
        self.ops = dict(ops)

    def apply(self, d: Decision) -> bool:
        op = self.ops.get(d.action)
        if op is None:
            log.warning("controller: this stream cannot %s; decision skipped (%s)", d.action, d.reason)
            return False
        op(**d.args)
        return True


def decisions_as_dicts(ds: Sequence[Decision]) -> List[Dict[str, Any]]:
    return [d.as_dict() for d in ds]
