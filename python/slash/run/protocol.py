"""The messages between a driver and its ranks, one typed record each.

A message is a tuple whose first items name its kind (``("progress", rank,
records)``, ``("scale", "commit", sid, ...)``): that is what goes over a
rank's link (pickled), what tests compare with, and what readers not yet
converted still index. Each kind here is a :class:`Message` subclass with
named fields: a sender writes ``Progress(rank, records)``, a reader
``isinstance(msg, Progress)`` and ``msg.records``. A record pickles as its
own class, so the reader on the other side of a link gets the record back.

Rank to driver:
  :class:`Address`, :class:`Resumed`, :class:`Progress`, :class:`Metrics`, :class:`Windows`,
  :class:`CheckpointWritten`, :class:`Finished`, :class:`Error`,
  :class:`ScaleAck`, :class:`ScaleIdle`, :class:`ControlAck`,
  :class:`InputDone`, :class:`Moved`.
Driver to rank:
  :class:`CheckpointNow`, :class:`Epoch`, :class:`Move`,
  :class:`ScalePrepare`, :class:`ScaleCommit`, :class:`ScaleFinish`,
  :class:`ControlPrepare`, :class:`ControlCommit`.

A Spark stream's tasks and driver (:mod:`slash.spark.stream`):
  :class:`StreamRows`, :class:`StreamWatermark`, :class:`WindowLatencies`,
  :class:`LateRecords`, :class:`StreamDone`, :class:`ResumeAsk`,
  :class:`StreamCheckpoint`, :class:`StopAt`, :class:`Stopped`,
  :class:`StreamFinal`, and back :class:`Resume`, :class:`ResumeError`,
  :class:`Stop`, :class:`StopAfter`, :class:`Exit` (plus :class:`Metrics`
  and the control rounds'). A Spark batch task's result travels as a
  plain tuple of its own (:mod:`slash.spark._tasks`); every Spark task's
  failure as an :class:`Error`, as a local rank's does.
"""
from __future__ import annotations

import pickle
import traceback
from operator import itemgetter
from typing import Any, ClassVar, Dict, List, Optional, Tuple

from slash.errors import SlashError, SystemFailure


class Message(tuple):
    """A driver<->rank message: ``KIND + fields`` as a tuple, its fields by
    name. A subclass declares ``kind=`` (a tag, or a tuple of tags) and its
    fields as annotations, in order."""

    __slots__ = ()
    KIND: ClassVar[Tuple[str, ...]] = ()
    FIELDS: ClassVar[Tuple[str, ...]] = ()

    def __init_subclass__(cls, kind: Any = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if kind is None:
            raise TypeError(f"{cls.__name__}: a message needs kind=")
        cls.KIND = (kind,) if isinstance(kind, str) else tuple(kind)
        cls.FIELDS = tuple(n for n in cls.__dict__.get("__annotations__", {})
                           if not n.isupper())
        for i, name in enumerate(cls.FIELDS):
            setattr(cls, name, property(itemgetter(len(cls.KIND) + i)))

    def __new__(cls, *fields: Any) -> Any:
        if len(fields) != len(cls.FIELDS):
            raise TypeError(f"{cls.__name__} takes {len(cls.FIELDS)} fields "
                            f"({', '.join(cls.FIELDS)}), got {len(fields)}")
        return tuple.__new__(cls, cls.KIND + fields)

    def __getnewargs__(self) -> Tuple[Any, ...]:  # pickled as its fields; the kind is the class
        return tuple(self)[len(self.KIND):]

    @property
    def kind(self) -> str:
        return self[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.FIELDS)})"


# ---- rank to driver ------------------------------------------------------------------------------
class Address(Message, kind="addr"):
    """A rank's listener address, before the group connects."""
    rank: int
    address: str


class Resumed(Message, kind="resumed"):
    """A rank restored its checkpoint (or started) and has read ``records``."""
    rank: int
    records: int


class Progress(Message, kind="progress"):
    """Records a rank has read so far (every :data:`slash.run.plan.PROGRESS_S`)."""
    rank: int
    records: int


class Metrics(Message, kind="metrics"):
    """A rank's live metrics snapshot (:class:`slash.metrics.Reporter`)."""
    rank: int
    snapshot: Dict[str, Any]


class Windows(Message, kind="windows"):
    """Windows a realtime rank fired (end, emit, rows each), after its
    watermark ``mark``: when the driver learns a window is whole."""
    rank: int
    mark: Optional[int]
    windows: List[Tuple[int, int, int]]


class CheckpointWritten(Message, kind="ckpt"):
    """A rank's part of checkpoint ``ckpt_id`` is durable: its files and result
    segments (name -> entry) and its write statistics."""
    rank: int
    ckpt_id: int
    files: Dict[str, Dict[str, int]]
    segments: Dict[str, Dict[str, int]]
    stats: Dict[str, Any]


class Finished(Message, kind="ok"):
    """A rank's end: the windows it fired, its metrics, its late records (or None)."""
    rank: int
    result: Any
    metrics: Dict[str, Any]
    late: Any


class Error(Message, kind="error"):
    """A rank failed: the exception when it is a SlashError (else None), its
    text and traceback (:func:`slash.run.failure.reported` raises it)."""
    rank: int
    error: Optional[BaseException]
    text: str
    traceback: str

    @classmethod
    def of(cls, rank: int, e: BaseException) -> "Error":
        """The report of ``e``, caught in rank ``rank`` (call it in the ``except`` block).
        A SlashError travels whole, its attributes with it, and its ``__cause__`` too
        (which pickling drops: it goes as ``CAUSE``; a cause that does not pickle as a
        SystemFailure naming its type and text)."""
        if isinstance(e, SlashError) and e.__cause__ is not None:
            setattr(e, cls.CAUSE, _portable(e.__cause__))
        return cls(rank, e if isinstance(e, SlashError) else None, f"{type(e).__name__}: {e}",
                   traceback.format_exc())

    #: the attribute of a reported SlashError that carries its cause over a link
    CAUSE: ClassVar[str] = "slash_reported_cause"


class ScaleAck(Message, kind="scale-ack"):
    """A rank's answer to a :class:`ScalePrepare`: what it has left and its watermark."""
    rank: int
    sid: int
    report: Dict[str, Any]


class ScaleIdle(Message, kind="scale-idle"):
    """A rank has nothing to read since scale commit ``sid``."""
    rank: int
    sid: int


class ControlAck(Message, kind="ctl-ack"):
    """A rank's answer to a :class:`ControlPrepare`: the highest event time it
    has pushed (ticks; None: none yet), from which the update's switch
    point is chosen."""
    rank: int
    rid: int
    max_seen: Optional[int]


class InputDone(Message, kind="ctl-input-done"):
    """A control-serving rank has read all of its input (its highest event
    time, ticks): no later record of it can follow an update."""
    rank: int
    max_seen: Optional[int]


class Moved(Message, kind="ctl-moved"):
    """Rank 0's answer to a :class:`Move`: what request ``moves_id`` did (a
    dict), or the error that refused it."""
    rank: int
    moves_id: int
    result: Any


# ---- driver to rank ------------------------------------------------------------------------------
class CheckpointNow(Message, kind="checkpoint_now"):
    """To rank 0: ask the core for a checkpoint now (a rescale's cut)."""


class Epoch(Message, kind="epoch"):
    """An epoch length from the next epoch end (0: unchanged)."""
    epoch_ms: int
    epoch_bytes: int


class Move(Message, kind="move"):
    """To rank 0: move partition leadership (``spec``, answered under ``moves_id``)."""
    moves_id: int
    spec: Dict[str, Any]


class ScalePrepare(Message, kind=("scale", "prepare")):
    """Every rank: pause, report what is left (:class:`ScaleAck`); ``joining`` become active."""
    sid: int
    joining: List[int]


class ScaleCommit(Message, kind=("scale", "commit")):
    """Every rank: its new ``work``, the new ``active`` ranks; rank 0 spreads
    leadership under ``moves_id`` (None: no move)."""
    sid: int
    work: Any
    active: List[int]
    moves_id: Optional[int]


class ScaleFinish(Message, kind=("scale", "finish")):
    """Every rank is idle: the stream is over."""


class ControlPrepare(Message, kind=("ctl", "prepare")):
    """Every rank: pause after the current push and answer with a
    :class:`ControlAck` (an update is being agreed)."""
    rid: int


class ControlCommit(Message, kind=("ctl", "commit")):
    """Every rank: install logic ``version`` (``query``) for records from
    ``start`` (ticks) and go on; ``query`` None: the request failed, go on
    unchanged."""
    rid: int
    start: int
    version: Optional[int]
    query: Any


# ---- a Spark stream's barrier task to its driver (slash.spark.stream) ------------------------------
class StreamRows(Message, kind="rows"):
    """Windows a task fired (Arrow IPC, None: none) and its group watermark."""
    rank: int
    watermark: int
    ipc: Optional[bytes]


class StreamWatermark(Message, kind="watermark"):
    """A task's group watermark (the windows before it went out with a checkpoint)."""
    rank: int
    watermark: int


class WindowLatencies(Message, kind="latency"):
    """Each window a task fired: (start, end, latency ms, rows)."""
    rank: int
    windows: List[Tuple[int, int, int, int]]


class LateRecords(Message, kind="late"):
    """Records a task did not apply as late, and per window (start, end, count)."""
    rank: int
    count: int
    windows: List[Tuple[int, int, int]]


class StreamDone(Message, kind="done"):
    """A task's stream ended (its source ran out, or stop())."""
    rank: int


class ResumeAsk(Message, kind="resume?"):
    """A task of barrier job ``group`` asks where to start; ``process``: (host, pid)."""
    rank: int
    process: Tuple[str, int]
    group: int


class StreamCheckpoint(Message, kind="stream-ckpt"):
    """A task wrote its part of checkpoint ``ckpt_id``: its ``files``, its
    windows as a result segment (``segments``, for a transactional sink), the
    sink parts pending under it (``sink``: pending name -> final name), or
    its windows as Arrow IPC (``rows``), the windows' (start, end, rows) and
    its bytes and seconds (``stats``)."""
    rank: int
    group: int
    ckpt_id: int
    files: Dict[str, Dict[str, int]]
    segments: Dict[str, Dict[str, int]]
    sink: Dict[str, str]
    rows: Optional[bytes]
    windows: List[Tuple[int, int, int]]
    stats: Dict[str, Any]


class StopAt(Message, kind="stop_at"):
    """Rank 0, after stop(): ``ckpt_id`` is the stream's last checkpoint."""
    rank: int
    group: int
    ckpt_id: int


class Stopped(Message, kind="stopped"):
    """A task took the last checkpoint and waits for :class:`Exit`."""
    rank: int
    group: int


class StreamFinal(Message, kind="final"):
    """A task's windows after its source ran out (no checkpoint covers them)."""
    rank: int
    group: int
    sink: Dict[str, str]
    rows: Optional[bytes]
    windows: List[Tuple[int, int, int]]


# ---- a Spark stream's driver to its tasks --------------------------------------------------------
class Resume(Message, kind="resume"):
    """Where every task of a barrier job starts: checkpoint ``ckpt_id`` (None:
    none), the stream's base time, the next checkpoint id and the logic
    versions agreed so far ((start, query) for versions 1, 2, ...)."""
    ckpt_id: Optional[int]
    base_ms: int
    next_id: int
    versions: List[Tuple[int, Any]]


class ResumeError(Message, kind="resume_error"):
    """The newest checkpoint cannot be read: the stream fails with ``reason``."""
    reason: str


class Stop(Message, kind="stop"):
    """stop(): take a last checkpoint (or, without checkpoints, finish)."""


class StopAfter(Message, kind="stop_after"):
    """Stop once checkpoint ``ckpt_id`` is taken (answering with :class:`Stopped`)."""
    ckpt_id: int


class Exit(Message, kind="exit"):
    """Every task took the last checkpoint: leave without finishing."""


def _portable(e: BaseException) -> BaseException:
    """``e`` if it pickles, else a SystemFailure naming its type and text."""
    try:
        pickle.dumps(e)
        return e
    except Exception:
        return SystemFailure(f"{type(e).__name__}: {e}")
