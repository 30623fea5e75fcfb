"""The window-latency model the controller fits online (As-Stream's cost
model, reduced to what a running stream measures).

A window's p99 latency (emit time minus window end) is modelled as three
terms, each non-negative::

    p99 ~ fixed + per_epoch * epoch_ms + queueing * u / (1 - u)

* ``fixed``: what no setting lowers (merges, hand-over, the driver's tick);
* ``epoch``: a window fires at the first epoch boundary after its end, and
  its partials travel with the next delta: a share of the epoch length;
* ``queueing``: records wait behind the executor's backlog, growing as the
  utilisation ``u`` (demand over the group's capacity) nears 1.

:meth:`LatencyModel.add` records one observation (epoch length, utilisation,
measured p99) of a stream in a steady state (``u`` below
:data:`MAX_UTILISATION`: a saturated stream's latency grows with time, not
with the settings). :meth:`LatencyModel.fit` solves least squares over the
recent observations with all three coefficients kept non-negative, pulled
gently toward a prior (``per_epoch`` 1, the others 0) so that a stream that
never changed its epoch length still gets a usable model (:data:`PRIOR_WEIGHT`:
worth a hundredth of an observation, so the data decide wherever they can). :meth:`LatencyModel.predict` gives the
total and each term, so a decision can say which term limits it.

The model is pure (no clock, no I/O): tests feed it a known law and check
what it recovers.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

#: the model's terms, in the order of its coefficients
TERMS = ("fixed", "epoch", "queueing")
#: observations above this utilisation are not a steady state and are not fitted
MAX_UTILISATION = 0.95
#: the span of utilisation the observations must cover before the queueing term is
#: believed where it matters (a prediction at another utilisation): over a narrow span
#: its slope is the machine's jitter
MIN_U_SPAN = 0.2
#: the prior the fit is pulled toward when observations do not tell a coefficient
PRIOR = (0.0, 1.0, 0.0)
#: the prior's weight per coefficient, in observations (of the term's typical size): small,
#: so that it only decides between terms the observations cannot tell apart (an epoch length
#: that never changed is indistinguishable from the fixed term); the fixed term's is the
#: smallest, so that what the data cannot place goes to it rather than to a term a setting
#: would be chosen by
PRIOR_WEIGHT = (0.001, 0.01, 0.01)


def queueing(u: float) -> float:
    """u / (1 - u), capped at the steady-state bound."""
    u = min(max(u, 0.0), MAX_UTILISATION)
    return u / (1.0 - u)


@dataclass(frozen=True)
class Fit:
    """Fitted coefficients (ms, ms per epoch ms, ms per unit of u/(1-u)) and
    how many observations they rest on."""

    fixed: float
    per_epoch: float
    queueing: float
    points: int
    rms_ms: float  # root-mean-square residual over the observations
    u_span: float = 0.0  # max - min utilisation observed

    @property
    def queueing_known(self) -> bool:
        """Whether the observations span enough utilisation (:data:`MIN_U_SPAN`)
        for the queueing term to be extrapolated."""
        return self.u_span >= MIN_U_SPAN

    def terms(self, epoch_ms: float, u: float) -> Dict[str, float]:
        return {"fixed": self.fixed, "epoch": self.per_epoch * epoch_ms,
                "queueing": self.queueing * queueing(u)}

    def predict(self, epoch_ms: float, u: float) -> float:
        return sum(self.terms(epoch_ms, u).values())

    def limiting(self, epoch_ms: float, u: float) -> Tuple[str, float]:
        """The largest term at (epoch_ms, u) and its value in ms."""
        t = self.terms(epoch_ms, u)
        name = max(TERMS, key=lambda k: t[k])
        return name, t[name]

    def describe(self) -> str:
        return (f"p99 ~ {self.fixed:.0f} ms + {self.per_epoch:.2f} x epoch + "
                f"{self.queueing:.0f} ms x u/(1-u) over {self.points} points "
                f"(rms {self.rms_ms:.0f} ms)")


class LatencyModel:
    """Observations of (epoch length, utilisation, p99) and their fit."""

    def __init__(self, keep: int = 60, min_points: int = 6) -> None:
        self.keep = keep
        self.min_points = min_points
        self._obs: List[Tuple[float, float, float]] = []

    def __len__(self) -> int:
        return len(self._obs)

    def add(self, epoch_ms: float, u: float, p99_ms: float) -> bool:
        """Records one steady-state observation; False (not recorded) when
        ``u`` is at or above :data:`MAX_UTILISATION` or a value is not finite."""
        vals = (epoch_ms, u, p99_ms)
        if not all(np.isfinite(v) for v in vals) or epoch_ms <= 0 or p99_ms < 0 or u < 0:
            return False
        if u >= MAX_UTILISATION:
            return False
        self._obs = (self._obs + [(float(epoch_ms), float(u), float(p99_ms))])[-self.keep:]
        return True

    def fit(self) -> Optional[Fit]:
        """The non-negative least-squares fit, or None below ``min_points``."""
        n = len(self._obs)
        if n < self.min_points:
            return None
        obs = np.array(self._obs)
        x = np.column_stack([np.ones(n), obs[:, 0], [queueing(u) for u in obs[:, 1]]])
        y = obs[:, 2]
        # the prior as extra rows: a coefficient's deviation counted in ms of the
        # term's typical size, weighted as PRIOR_WEIGHT observations
        scale = np.maximum(np.abs(x).mean(axis=0), 1e-9)
        w = np.sqrt(np.array(PRIOR_WEIGHT)) * scale
        xa = np.vstack([x, np.diag(w)])
        ya = np.concatenate([y, w * np.array(PRIOR)])
        best: Optional[Tuple[float, np.ndarray]] = None
        # non-negativity: the best unconstrained solution over each subset of free
        # coefficients (the others at 0) whose coefficients are all >= 0
        for k in range(len(TERMS), 0, -1):
            for free in itertools.combinations(range(len(TERMS)), k):
                cols = list(free)
                sol, *_ = np.linalg.lstsq(xa[:, cols], ya, rcond=None)
                if (sol < 0).any():
                    continue
                beta = np.zeros(len(TERMS))
                beta[cols] = sol
                err = float(((xa @ beta - ya) ** 2).sum())
                if best is None or err < best[0]:
                    best = (err, beta)
        beta = best[1] if best is not None else np.array(PRIOR)
        rms = float(np.sqrt(((x @ beta - y) ** 2).mean()))
        return Fit(fixed=float(beta[0]), per_epoch=float(beta[1]), queueing=float(beta[2]),
                   points=n, rms_ms=rms, u_span=float(obs[:, 1].max() - obs[:, 1].min()))


def choose(fit: Fit, *, target_ms: float, epochs: Sequence[float], executors: Sequence[int],
           utilisation: "Dict[int, float]", fit_limit: float,
           epoch_cost: Callable[[float], float] = lambda e: 0.0) -> Optional[Tuple[int, float]]:
    """The cheapest (executors, epoch_ms) the model predicts within
    ``target_ms``: fewest executors first, then the longest epoch (epochs
    cost CPU per boundary); only settings whose utilisation is under
    ``fit_limit``. ``epoch_cost(e)``: the utilisation epochs of ``e`` ms add
    to ``utilisation`` (more merges a second than at the current length),
    counted in both the limit and the prediction. None when no setting is
    predicted within the target."""
    for k in sorted(executors):
        u0 = utilisation.get(k)
        if u0 is None:
            continue
        for e in sorted(epochs, reverse=True):
            u = u0 + epoch_cost(e)
            if u < fit_limit and fit.predict(e, u) <= target_ms:
                return k, e
    return None
