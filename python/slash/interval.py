"""Interval joins and sliding-window joins on the windowed join state.

An interval join pairs a left row l and a right row r of equal keys with
``l.ts BETWEEN r.ts + lo AND r.ts + hi`` (bounds inclusive; Flink's
``l.ts BETWEEN r.ts - a AND r.ts + b`` is ``lo = -a``, ``hi = +b``). It runs
on the tumbling-window join state unchanged (rows per (bucket, key), epoch
deltas, checkpoints, hand-overs): with a bucket width ``W = max(hi - lo, 1 ms)``
and a shift ``X = max(0, -lo)``,

- a left row is stored once, at ``l.ts + X``;
- a right row is stored at ``r.ts + lo + X`` and, when that falls in another
  bucket, also at ``r.ts + hi + X``: the left times it can meet,
  ``[r.ts + lo + X, r.ts + hi + X]``, span at most two buckets since
  ``W >= hi - lo``, and it has one copy in each;

so every matching pair meets in exactly one (bucket, key) group: the left
row's only one. The candidates of a group are filtered to the interval on
their original times when the results are finalized. The shift keeps every
stored time at or after its row's event time, so a copy is late exactly when
its row is (the watermark passed its time).

State expires by the watermark: a (bucket, key) group, with its rows, is
emitted and dropped once the watermark passes the bucket's end. A left row
at t is therefore kept until the watermark reaches at most
``t + X + W`` (the earliest it could be dropped, ``t - lo``, when no right
row in the interval can still come, plus at most one bucket), a right row at
t until at most ``t + hi + X + W``.

A sliding-window join (windows ``[k*slide + offset, ... + size)``) emits a
pair once for each window both rows fall in: windows ``w`` with
``max(l.ts, r.ts) - size < w <= min(l.ts, r.ts)``. Those pairs are the
interval join's with ``lo = -size``, ``hi = +size``, each repeated once per
such window (none when ``|l.ts - r.ts| >= size``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from slash.errors import InvalidArgument
from slash.window import Sliding, Tumbling, parse_duration

TS = "__ts"
#: bucket width in interval widths (module docstring)
BUCKET_SPANS = 1


def parse_signed(text: Union[str, int], what: str) -> int:
    """A signed duration in ms: ``"-5s"``, ``"+10s"``, ``"0s"`` or an int of ms."""
    if isinstance(text, bool):
        raise InvalidArgument(f"{what}: expected a signed duration such as '-5s', got {text!r}")
    if isinstance(text, int):
        return text
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(f"{what}: expected a signed duration such as '-5s', got {text!r}")
    s = text.strip()
    sign = -1 if s.startswith("-") else 1
    return sign * parse_duration(s.lstrip("+-").strip() or s, what)


def parse_interval(spec: Any) -> Tuple[int, int]:
    """(lo, hi) ms from ``"-5s,+10s"`` or a pair; lo <= hi."""
    if isinstance(spec, str):
        parts = spec.split(",")
        if len(parts) != 2:
            raise InvalidArgument(f"interval: expected 'LOWER,UPPER' such as '-5s,+10s', got {spec!r}")
    elif isinstance(spec, Sequence) and len(spec) == 2:
        parts = list(spec)
    else:
        raise InvalidArgument(f"interval: expected (lower, upper) such as ('-5s', '+10s'), got {spec!r}")
    lo, hi = (parse_signed(p, f"interval {'lower' if i == 0 else 'upper'} bound")
              for i, p in enumerate(parts))
    if lo > hi:
        raise InvalidArgument(f"interval: the lower bound {parts[0]!r} ({lo} ms) is above the upper "
                              f"bound {parts[1]!r} ({hi} ms): no pair could match")
    return lo, hi


@dataclass(frozen=True)
class IntervalPlan:
    """How a join on time ranges runs on the tumbling join state: the
    candidate interval ``[lo, hi]`` (ms, of l.ts - r.ts), the bucket width
    and shift (module docstring), and for a sliding-window join its window."""

    lo: int
    hi: int
    sliding: Optional[Sliding] = None

    @staticmethod
    def for_interval(spec: Any) -> "IntervalPlan":
        lo, hi = parse_interval(spec)
        return IntervalPlan(lo, hi)

    @staticmethod
    def for_sliding(w: Sliding) -> "IntervalPlan":
        return IntervalPlan(-w.size_ms, w.size_ms, w)

    @property
    def bucket_ms(self) -> int:
        return BUCKET_SPANS * max(self.hi - self.lo, 1)

    @property
    def shift_ms(self) -> int:
        return max(0, -self.lo)

    @property
    def lead_ms(self) -> int:
        """How far a stored time leads its row's event time, at most (a right
        row's last copy): the executor's watermark holds back by it."""
        return self.shift_ms + max(0, self.hi)

    @property
    def window(self) -> Tumbling:
        """The tumbling window of the state's buckets."""
        return Tumbling(self.bucket_ms)

    def stored_times(self, side: str, ticks: np.ndarray, tpm: int) -> Tuple[np.ndarray, np.ndarray]:
        """(row index, stored time) of every copy of a side's rows (int64
        ticks, ``tpm`` ticks per ms): one per left row, one or two per right
        row; the first len(ticks) copies are the rows in order."""
        x = self.shift_ms * tpm
        idx = np.arange(len(ticks), dtype=np.int64)
        if side == "left":
            return idx, ticks + x
        w = self.bucket_ms * tpm
        first = ticks + (self.lo * tpm + x)
        last = ticks + (self.hi * tpm + x)
        two = np.flatnonzero(np.floor_divide(first, w) != np.floor_divide(last, w))
        return np.concatenate([idx, two]), np.concatenate([first, last[two]])

    def matches(self, left_ts: np.ndarray, right_ts: np.ndarray, tpm: int) -> np.ndarray:
        """Bool per candidate pair: is l.ts - r.ts in [lo, hi]?"""
        d = left_ts - right_ts
        return (d >= self.lo * tpm) & (d <= self.hi * tpm)

    def windows(self, left_ts: np.ndarray, right_ts: np.ndarray,
                tpm: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sliding joins: (pair index, window start, window end) in ticks, one
        row per window a pair's both rows fall in."""
        w = self.sliding
        assert w is not None
        size, slide, off = w.size_ms * tpm, w.slide_ms * tpm, w.offset_ms * tpm
        hi = np.minimum(left_ts, right_ts)
        lo = np.maximum(left_ts, right_ts) - size  # windows start above it
        k0 = np.floor_divide(lo - off, slide) + 1
        k1 = np.floor_divide(hi - off, slide)
        n = np.maximum(k1 - k0 + 1, 0)
        pair = np.repeat(np.arange(len(n), dtype=np.int64), n)
        first = np.repeat(np.cumsum(n) - n, n)
        k = np.repeat(k0, n) + (np.arange(len(pair), dtype=np.int64) - first)
        start = k * slide + off
        return pair, start, start + size


def take_rows(batch: pa.RecordBatch, idx: np.ndarray) -> pa.RecordBatch:
    """Rows ``idx`` of a batch (repeats allowed)."""
    return batch.take(pa.array(idx, pa.int64()))


__all__ = ["IntervalPlan", "parse_interval", "parse_signed", "TS"]
