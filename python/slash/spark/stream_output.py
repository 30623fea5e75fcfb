"""A running Spark stream's windows on their way to the sink, as methods of
its handle (:class:`slash.spark.stream_handle.StreamHandle` mixes them in):
the rows the tasks fire are held until every rank's group watermark passed
their window's end (:meth:`StreamOutput._take`), then handed to the sink
whole, one table per window in event-time order, by the delivery thread
(:meth:`StreamOutput._deliver`, never under the handle's lock); with
``checkpoint=`` a window goes out only with the checkpoint that covers it
(:meth:`StreamOutput._committed`). The late records and the windows'
latencies are counted here too.

Invariant: a window reaches the sink once, whole; after the sink raised,
the windows it did not take are kept in order (``undelivered()``).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Union

import numpy as np
import pyarrow as pa

from slash._ipc import from_ipc
from slash.errors import SinkFailed
from slash.metrics import LiveMetrics
from slash.run.protocol import LateRecords, StreamRows, WindowLatencies
from slash.spark._stream_ckpt import add_metadata
from slash.spark._stream_task import DONE

#: the stream's warnings keep the logger users configure
log = logging.getLogger("slash.spark.stream")


class StreamOutput:
    """The windows' way from the tasks to the sink (see the module doc). The
    state it shares with the rest of the handle is the handle's, declared here."""

    _cond: threading.Condition
    _lock: threading.Lock
    live: LiveMetrics
    _sink: Union[str, Callable[[pa.Table], None]]
    _lateness_ms: int
    _late_output: Optional[str]
    _gw: List[int]
    _pending: List[pa.Table]  # rows of windows not yet complete
    _queue: Deque[pa.Table]  # whole windows for the sink, oldest first
    _undelivered: List[pa.Table]
    _latencies: List[Tuple[int, int, int, int]]
    _emitted: List[Tuple[int, int]]
    _rows: int
    _late_live: int
    _late_final: Optional[int]
    _late_by_window: Dict[Tuple[int, int], int]
    _freeze: Optional[int]
    _stage_over: bool
    _stopping: bool
    _sink_error: Optional[SinkFailed]
    _send_stop: Callable[[], None]  # the handle's: asks the current group to stop
    _output_after_rescale: Callable[[], None]  # the handle's: a rescale's first output

    def _passed(self, rank: int, watermark: int) -> None:
        with self._cond:
            self._gw[rank] = max(self._gw[rank], watermark)

    def _rows_fired(self, msg: StreamRows, _: Any) -> None:
        with self._cond:
            if msg.ipc is not None:
                self._pending.append(from_ipc(msg.ipc))
            self._gw[msg.rank] = max(self._gw[msg.rank], msg.watermark)
            self._take()

    def _latencies_seen(self, msg: WindowLatencies, _: Any) -> None:
        with self._cond:
            for s, e, lat, rows in msg.windows:
                self._latencies.append((s, e, lat, rows))
                self._rows += rows
                self.live.observe_window(s, e, lat, rows)

    def _late_seen(self, msg: LateRecords, _: Any) -> None:
        with self._cond:
            self._late_live += msg.count
            for s, e, c in msg.windows:
                self._late_by_window[(s, e)] = self._late_by_window.get((s, e), 0) + c

    def _late_records(self) -> int:
        return self._late_final if self._late_final is not None else self._late_live

    def _warn_late(self, count: int, final: bool = False) -> None:
        where = (f"the late rows are in {self._late_output}" if self._late_output is not None
                 else "or see late_output=")
        log.warning("slash.spark.stream: %s%s late record(s) not applied (older than the watermark "
                    "minus lateness=%d ms); raise lateness= %s", "in all, " if final else "",
                    f"{count:,}", self._lateness_ms, where)

    def _committed(self, tables: List[pa.Table], label: str) -> None:
        """With checkpoint=: the windows a committed checkpoint (or the final
        flush) covers, whole, go to the sink labelled with its id."""
        with self._cond:
            self._pending.extend(tables)
            self._take(DONE, label)
            self._output_after_rescale()

    def _observe(self, wins: List[Tuple[int, int, int]], now_ms: int) -> None:
        """With checkpoint= and a directory sink: windows made visible at ``now_ms``."""
        with self._cond:
            if wins:
                self._output_after_rescale()
            for s, e, rows in wins:
                self._latencies.append((s, e, now_ms - e, rows))
                self._rows += rows
                self.live.observe_window(s, e, now_ms - e, rows)

    def _take(self, upto: Optional[int] = None, label: Optional[str] = None) -> None:
        """With the lock held: moves every complete window (all ranks passed
        its end) from the pending rows to the sink's queue, oldest first, one
        table per window; after a sink failure, to the undelivered list.
        ``label``: the checkpoint id the windows carry in their metadata."""
        if not self._pending:
            return
        if upto is None:
            upto = min(self._gw)
            if self._freeze is not None:  # a rebalance in progress (see rebalance())
                upto = min(upto, self._freeze)
        table = pa.concat_tables(self._pending)
        we = table.column("window_end").to_numpy()
        ready = we < upto if upto != DONE else np.ones(len(we), bool)
        if not ready.any():
            return
        out = table.filter(pa.array(ready))
        rest = table.filter(pa.array(~ready))
        self._pending = [rest] if rest.num_rows else []
        out = out.sort_by([("window_end", "ascending"), ("window_start", "ascending")])
        ws, wend = out.column("window_start").to_numpy(), out.column("window_end").to_numpy()
        cut = np.flatnonzero((np.diff(ws) != 0) | (np.diff(wend) != 0)) + 1
        # after a sink failure, or once the delivery thread ended, nothing takes the queue
        dest = self._undelivered if self._sink_error is not None or self._stage_over else self._queue
        if label is not None:
            out = add_metadata(out, label)
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(ws)]):
            dest.append(out.slice(int(lo), int(hi - lo)))
        self._cond.notify_all()

    def _deliver(self) -> None:
        """The delivery thread: hands each queued window to the sink, outside
        the lock, until the stage is over and the queue empty, or the sink
        raised (then the stream is asked to stop)."""
        while True:
            with self._cond:
                while not self._queue and not self._stage_over:
                    self._cond.wait()
                if not self._queue:
                    return
                w = self._queue.popleft()
            s, e = int(w.column("window_start")[0].as_py()), int(w.column("window_end")[0].as_py())
            now = int(time.time() * 1000)  # the emit time: when the sink gets the window
            try:
                self._sink(w)  # type: ignore[operator]
            except BaseException as exc:  # noqa: BLE001 -- any failure of the user's sink stops the stream
                err = SinkFailed(f"slash.spark.stream: the sink raised on window [{s}, {e}): "
                                 f"{type(exc).__name__}: {exc}; the stream stopped, and the windows the "
                                 "sink did not accept are in StreamHandle.undelivered()")
                err.window = (s, e)
                err.__cause__ = exc
                with self._cond:
                    self._sink_error = err
                    self._undelivered = [w, *self._queue, *self._undelivered]
                    self._queue.clear()
                log.error("%s", err)
                self._stopping = True
                self._send_stop()
                return
            self.live.observe_window(s, e, now - e, w.num_rows)
            with self._cond:
                self._latencies.append((s, e, now - e, w.num_rows))
                self._emitted.append((s, e))
                self._rows += w.num_rows

    @property
    def emitted_windows(self) -> List[Tuple[int, int]]:
        """(window_start, window_end) in the order the callback got them."""
        with self._lock:
            return list(self._emitted)

    def undelivered(self) -> List[pa.Table]:
        """After the sink raised: the windows it did not accept, one table per
        window in event-time order (the one it raised on first); complete
        once :meth:`stop` or :meth:`wait` returned or raised. Otherwise empty,
        unless a rank's last rows reached the driver only after the stage's end
        (then logged as a warning)."""
        with self._lock:
            return list(self._undelivered)
