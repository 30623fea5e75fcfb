"""A rank's input read at a fixed rate (``rate=`` of :func:`slash.runner.run`,
``slash run --rate``): a replay of files as a stream.

Invariant: after :meth:`RatePacer.after` returns, the records read since the
pacer was made are no more than ``rate`` x the seconds since then (give or
take one batch), and the executor was served (``wait``) the whole time, so
peers' epochs, results and checkpoint cuts go on while a rank waits.

A restart from a checkpoint makes a new pacer where the cut's position
resumes: the rows after the cut are paced from the restart on, at the same
rate, with no burst to make up the time the failure cost.
"""
from __future__ import annotations

import time
from typing import Callable

#: the longest single wait between two checks of the clock (s)
_STEP_S = 0.01


class RatePacer:
    """Paces one reader at ``rate`` records/s (see the module doc).

    >>> p = RatePacer(1000.0)
    >>> p.after(50, time.sleep)   # 50 records are due 50 ms after the start
    >>> time.monotonic() - p.t0 >= 0.05
    True
    """

    def __init__(self, rate: float) -> None:
        self.rate = float(rate)
        self.t0 = time.monotonic()
        self.rows = 0

    def after(self, rows: int, wait: Callable[[float], object],
              stop: Callable[[], bool] = lambda: False) -> None:
        """Counts ``rows`` just read and waits, ``wait(seconds)`` at a time
        (the caller serves its executor in it), until they are due, or until
        ``stop()`` (new work came: the caller reopens its reader)."""
        self.rows += rows
        while not stop():
            ahead = self.rows / self.rate - (time.monotonic() - self.t0)
            if ahead <= 0:
                return
            wait(min(ahead, _STEP_S))
