"""Cost of emitting a hot key's interval-join buckets with the join state's
band (join_band.c: only the pairs inside the interval, each group's right
rows sorted once) against emitting every left x right candidate of a
(bucket, key) group and filtering them in NumPy, as an interval join did
before the band. One key holds every row: ROWS a side at uniform times over
600 s, interval [-5 s, +10 s] (slash.interval's buckets and copies).

The two variants alternate in each repetition, in one process (JoinBackend
update, then emit timed; the candidates' filter timed with the emit); both
must give the same number of pairs. Usage:
    PYTHONPATH=python python3 bench/join_band.py [ROWS] [REPS]
"""
import sys
import time

import numpy as np

from slash.interval import IntervalPlan
from slash.join import JoinBackend, JoinConfig

PLAN = IntervalPlan.for_interval(("-5s", "+10s"))
SPAN_MS = 600_000


def side(rng: np.random.Generator, name: str, n: int):
    """(keys, stored times, event times) of a side's copies (slash.interval)."""
    ts = np.sort(rng.integers(0, SPAN_MS, n))
    idx, stored = PLAN.stored_times(name, ts, 1)
    return np.zeros(len(idx), np.int64), stored, ts[idx]


def emit(left, right, band: bool):
    """(seconds, pairs) of the emit of every bucket."""
    cfg = JoinConfig(window=PLAN.window, left_columns={"__ts": "int64", "v": "int64"},
                     right_columns={"__ts": "int64", "w": "int64"},
                     band=("__ts", PLAN.lo, PLAN.hi) if band else None)
    with JoinBackend(cfg) as jb:
        jb.update_left(left[0], left[1], {"__ts": left[2], "v": left[2]})
        jb.update_right(right[0], right[1], {"__ts": right[2], "w": right[2]})
        t = time.perf_counter()
        out = jb.emit(1 << 40)
        if not band:
            lt, rt = out.column("left___ts").to_numpy(), out.column("right___ts").to_numpy()
            out = out.filter(PLAN.matches(lt, rt, 1))
        return time.perf_counter() - t, out.num_rows


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rng = np.random.default_rng(3)
    left, right = side(rng, "left", rows), side(rng, "right", rows)
    for r in range(reps):
        got = {}
        for band in (False, True):
            s, pairs = emit(left, right, band)
            got[band] = pairs
            print(f"rep {r} {'band      ' if band else 'candidates'}: {s:.3f} s, {pairs} pairs",
                  flush=True)
        assert got[False] == got[True], got


if __name__ == "__main__":
    main()
