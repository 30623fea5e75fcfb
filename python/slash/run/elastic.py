"""A live-scalable rank's input (:mod:`slash.run.live.scale`): the batches of the
work its agent holds, reread when a scale commit deals it new work, paced
by event time when the run is realtime."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple


from slash.compute import pc
from slash.query import Query
from slash.run.pacing import RatePacer


class Pacer:
    """A live-scalable rank's input replayed at its own pace (``realtime``:
    event times are wall-clock times): each batch is pushed no earlier than
    its latest event time; ``lag_s`` / ``behind`` tell how far the reader is
    behind the clock (the latency controller's "falling behind" signal,
    reported as ``input_lag_ms`` / ``records_behind``); ``waited_s`` the
    seconds it spent waiting for the clock so far (``input_wait_s``: a report
    interval with none read as fast as it could, see
    :attr:`slash.control.controller.Controller.capacity`)."""

    def __init__(self) -> None:
        self.lag_s = 0.0
        self.behind: Optional[int] = None
        self.waited_s = 0.0

    def pace(self, query: Query, item: Any, wait: Callable[[float], bool],
             changed: Callable[[], bool]) -> None:
        if not getattr(item, "num_rows", 0):
            return
        ticks = query.time_ticks(item.column(query.time), item.schema)
        mm = pc.min_max(ticks)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if hi is None:
            return
        due = query.ticks_to_ms(hi, item.schema) / 1000.0
        span = max((query.ticks_to_ms(hi, item.schema) - query.ticks_to_ms(lo, item.schema))
                   / 1000.0, 0.001)
        self.lag_s = max(0.0, time.time() - due)
        self.behind = int(self.lag_s * item.num_rows / span)
        if due <= time.time():
            return
        t0 = time.monotonic()
        try:
            while not changed():
                ahead = due - time.time()
                if ahead <= 0:
                    return
                wait(min(ahead, 0.01))
        finally:
            self.waited_s += time.monotonic() - t0

    def snapshot(self) -> Dict[str, Any]:
        if self.behind is None:
            return {}
        return {"records_behind": self.behind, "input_lag_ms": round(self.lag_s * 1000.0, 1),
                "input_wait_s": round(self.waited_s, 4)}


def elastic_items(loop: Any, agent: Any, rate: Optional[float],
                  pacer: Optional[Pacer] = None) -> Iterator[Tuple[Any, Any]]:
    """A live-scalable rank's (position, batch or Watermark) items for its
    :class:`slash.run.rank.RankLoop` (:mod:`slash.run.live.scale`): it reads
    ``agent.work`` from ``agent.pos``, reopens its reader when a scale commit
    gave it new work (or an update more columns), and with nothing to read
    (a standby, or its work done) serves the executor until new work or the
    driver's finish comes. ``rate``: records/s over all active ranks (each
    reads its share of it)."""
    query, source = loop.query, loop.source
    cols = loop.columns()
    while True:
        if agent.work:
            throttle = RatePacer(rate / max(1, len(agent.active))) if rate else None
            stop = False
            first = agent.promise()
            if first is not None:  # what its (new) work allows at once: a joining rank does not
                yield agent.pos, first  # wait for its first unit's end to let the group move on
            for pos, item in source.read_work(agent.work, cols, time=query.time, start=agent.pos):
                if pacer is not None:
                    # served while it waits: a scale request is answered within ~10 ms
                    pacer.pace(query, item, lambda t: (loop.wait(t), loop.serve())[0],
                               lambda: agent.changed)
                    loop.serve()
                    if agent.changed:  # new work came while it waited: reread from agent.pos
                        stop = True
                        break
                agent.pos = pos
                yield pos, item  # the loop serves the driver's messages after it
                if throttle is not None:
                    throttle.after(getattr(item, "num_rows", 0),
                                   lambda s: (loop.wait(s), loop.serve()), lambda: agent.changed)
                if agent.changed or loop.columns() != cols:
                    stop = True
                    break
            if stop:
                agent.changed = False
                cols = loop.columns()
                continue
            agent.work, agent.pos = [], None  # read to its end
        if not wait_for_work(loop, agent):
            return


def wait_for_work(loop: Any, agent: Any) -> bool:
    """A live rank with nothing to read (a standby, or its work done): tells
    the driver once and serves the executor until a scale commit gives it
    new work (True: read it) or the driver's finish comes (False)."""
    agent.idle()
    while not agent.changed and not agent.finish:
        loop.wait(0.02)
        loop.serve()
    if agent.finish and not agent.changed:
        return False
    agent.changed = False
    return True
