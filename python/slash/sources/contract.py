"""The source contract: what a source says of itself, so that nothing
outside a source asks which one it is (after bytewax's
``build_part(step_id, for_part, resume_state)`` / ``snapshot()`` and Flink's
``SourceReader`` with its splits and ``snapshotState``).

A source (:class:`Source`) has a ``schema`` and reads its share of ``n``
readers (``read(rank, n, columns, ...)``: record batches and
:class:`slash.sources.units.Watermark` promises). It declares:

* ``bounded``: whether its input ends (else it is a stream);
* ``source_watermarks``: whether an executor's watermark moves by its
  Watermark promises alone (a bounded source's always do);
* :meth:`Source.describe`: what identifies its input in a checkpoint's
  fingerprint (a source without one is named by its type).

A source whose input is cut into parts in global terms
(:class:`Resplittable`) also deals them to N readers (``work(rank, n,
time)``), reads a part from a resume state (``read_work(work, ...)``, items
with the position after each), says what is left after a position
(``remaining(work, position)``: its snapshot) and re-deals every reader's
remaining parts to another N (``resplit(lefts, n, time)``). Its
``global_units`` says more: it is read as such work from the start, so a
live group re-deals its units without a restart and a checkpoint resumes
each unit where it was (:class:`slash.sources.files.FileSource` and the
sources built on it). A source that cannot re-deal says why in
``resplit_refusal``.

A source a Spark stream reads (:class:`StreamSource`) also reads its share
as the stream's task asks (:meth:`StreamSource.stream_items` with a
:class:`StreamRead`), says its schema, what lateness its watermark carries,
what it requires of the query, and its backlog.

The registry (:func:`register`, :func:`registered`) lists every source kind
by name; a new source is one module that registers its class.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple,
                    Type, TypeVar, runtime_checkable)

import pyarrow as pa


C = TypeVar("C", bound=type)

#: every registered source kind: name -> class
_REGISTRY: Dict[str, type] = {}


@runtime_checkable
class Source(Protocol):
    """Any source: its schema, and each reader's share of its input."""

    schema: pa.Schema

    def read(self, rank: int, n: int, columns: Optional[List[str]] = None,
             *args: Any, **kw: Any) -> Iterator[Any]:
        ...


@runtime_checkable
class Resplittable(Source, Protocol):
    """A source whose parts are in global terms: dealt, read from a resume
    state, snapshotted and re-dealt to another reader count."""

    def work(self, rank: int, n: int, time: Optional[str] = None) -> Any:
        ...

    def read_work(self, work: Any, columns: Optional[List[str]] = None,
                  *args: Any, **kw: Any) -> Iterator[Any]:
        ...

    @staticmethod
    def remaining(work: Any, pos: Any) -> Any:
        ...

    def resplit(self, left: Sequence[Any], n: int, time: Optional[str] = None) -> List[Any]:
        ...


@dataclass(frozen=True)
class StreamRead:
    """What a Spark stream's task gives its source to read its share of n
    ranks (:meth:`StreamSource.stream_items`)."""

    query: Any  #: the stream's query (its time column, lateness, watermark_ticks)
    schema: pa.Schema  #: the source's schema the query was checked against
    base_ms: int  #: wall clock (ms) the stream started at: a generator's first event time
    #: serves the executor for up to the seconds given while the input is quiet; True: stop
    wait: Callable[[float], bool]
    skip: int = 0  #: items of ``work`` to pass over first (a checkpoint that recorded a count)
    work: Any = None  #: where to start (a checkpoint's position or its resplit); None: afresh


class StreamSource:
    """An unbounded source a Spark stream reads (its defaults here): it
    yields ``(batch, None, left)`` per batch and ``(None, watermark, left)``
    per promise, ``left`` being the rank's work left after the item in
    global terms (JSON-able), so a checkpoint's positions re-deal to any
    executor count (``work``/``resplit``)."""

    #: a stream: it does not end by itself
    bounded = False
    schema: Optional[pa.Schema]

    def stream_items(self, rank: int, n: int, read: StreamRead
                     ) -> Iterator[Tuple[Optional[pa.RecordBatch], Optional[int], Any]]:
        """Rank's share of n, read as ``read`` says."""
        raise NotImplementedError(f"{type(self).__name__}.stream_items")

    def resolve_schema(self) -> pa.Schema:
        """The schema the stream's query is checked against."""
        assert self.schema is not None
        return self.schema

    def stream_lateness(self, lateness: Any) -> Any:
        """The stream's lateness, given ``lateness=`` (None: not given)."""
        return lateness

    def check_stream(self, query: Any, schema: pa.Schema) -> None:
        """Raises what the source cannot read for ``query`` (nothing here)."""

    def records_behind(self, rank: int, n: int, base_ms: int, now_ms: int, pushed_before: int,
                       read: int) -> Optional[int]:
        """Rank's records due but not read yet at ``now_ms``, having read
        ``read`` rows after ``pushed_before`` batches it resumed after; None:
        the source does not know."""
        return None


def register(name: str) -> Callable[[C], C]:
    """Class decorator: registers a source kind under ``name`` (its ``kind``)."""
    def add(cls: C) -> C:
        if _REGISTRY.get(name, cls) is not cls:
            raise ValueError(f"source kind {name!r} is registered twice "
                             f"({_REGISTRY[name].__qualname__}, {cls.__qualname__})")
        _REGISTRY[name] = cls
        cls.kind = name  # type: ignore[attr-defined]
        return cls
    return add


def registered() -> Dict[str, type]:
    """Every registered source kind, name -> class (the source modules
    register theirs as they are imported)."""
    return dict(_REGISTRY)


def describe(source: Any) -> str:
    """What identifies ``source``'s input in a checkpoint's fingerprint:
    its :meth:`Source.describe`, else its type's name."""
    d = getattr(source, "describe", None)
    return d() if callable(d) else type(source).__name__


def resplittable(source: Any) -> bool:
    """Whether ``source``'s positions at a cut can be dealt to another reader count."""
    return global_units(source) or all(callable(getattr(source, m, None))
                                       for m in ("resplit", "work", "remaining", "read_work"))


def global_units(source: Any) -> bool:
    """Whether ``source`` is read as work in global terms from the start
    (see the module doc): a live group re-deals its units without a restart."""
    return bool(getattr(source, "global_units", False))


def why_not_resplit(source: Any) -> str:
    """Why ``source``'s positions cannot be dealt to another reader count."""
    return getattr(source, "resplit_refusal", None) or \
        f"a {type(source).__name__} records no position in global terms"


def source_type(kind: str) -> Type[Any]:
    """The class registered as ``kind``; KeyError names the known kinds."""
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise KeyError(f"no source kind {kind!r}; known: {sorted(_REGISTRY)}") from None
