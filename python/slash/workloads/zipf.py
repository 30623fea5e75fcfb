"""Key distributions for any workload's key: uniform, or a bounded zipf over
[0, n) with P(k) proportional to 1 / (k + 1)^s for any s > 0.

NumPy's own ``zipf`` needs s > 1 and is unbounded, so it cannot sweep the
skews of the Slash paper (0.2 to 2.0) over a fixed key range. The sampler here
is rejection-inversion (Hoermann and Derflinger), O(1) per key for any n, in
the C core; key 0 is the hottest. Keys are a pure function of (seed, index).

>>> from slash.workloads import zipf
>>> k = zipf.keys(5, n=1000, skew="zipf:1.0", seed=7)
>>> k.dtype, len(k), bool((k >= 0).all() and (k < 1000).all())
(dtype('int64'), 5, True)
"""
from __future__ import annotations

import numpy as np

from slash import _core
from slash.errors import InvalidArgument
from slash.workloads._common import MAX_EVENTS, check_int, parse_skew

__all__ = ["keys", "pmf", "parse_skew"]


def keys(count: int, *, n: int, skew: str = "uniform", seed: int = 0, start: int = 0) -> np.ndarray:
    """The int64 keys of events [start, start + count) over [0, n)."""
    count = check_int("count", count, 0)
    n = check_int("n", n, 1, 1 << 62)
    seed = check_int("seed", seed, 0, (1 << 64) - 1)
    start = check_int("start", start, 0, MAX_EVENTS - count)
    dist, exponent = parse_skew(skew)
    return _core.KeyGenerator(n, dist, exponent, seed).fill(start, count)


def pmf(n: int, skew: str) -> np.ndarray:
    """The exact probabilities of keys 0..n-1 (float64, sums to 1); n up to 10^7."""
    n = check_int("n", n, 1, 10_000_000)
    dist, exponent = parse_skew(skew)
    if dist == "uniform":
        return np.full(n, 1.0 / n)
    w = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    if not np.isfinite(w).all():
        raise InvalidArgument(f"skew {skew!r} underflows over {n} keys")
    return w / w[::-1].sum()
