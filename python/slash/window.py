"""Window specifications: the one parser of ``"tumbling:10s"``-style strings.

Durations are integers with a unit: ``ms``, ``s``, ``m``, ``h``, ``d``
(``"250ms"``, ``"10s"``, ``"1m"``, ``"1d"``), or Spark's spellings
(``"10 seconds"``, ``"1 hour"``, ``"1 day"``, ``"7 days"``, ``"500 milliseconds"``).
Window sizes are kept in milliseconds; the state runs them in the time
column's own unit (see :class:`slash.state.StateConfig`). Windows are
aligned at the Unix epoch (time 0) on the time column's own values (an
instant's UTC microseconds, a TimestampNTZ's wall clock), start inclusive,
end exclusive, as Spark's ``window()`` aligns them. A tumbling or sliding
window may be moved by an offset, Spark's ``startTime``:
``"tumbling:1d+-8h"`` (``window(t, '1 day', '1 day', '-8 hours')``) or
``"sliding:10s/5s+2s"``: windows ``[k*slide + offset, k*slide + offset + size)``;
as in Spark, ``|offset|`` must be below the slide. (A ``-`` inside a
duration adds a negative part, ``"1d-8h"`` is 16 hours, so the offset follows
a ``+``.)

>>> parse_window("sliding:60s/10s")
Sliding(size_ms=60000, slide_ms=10000, offset_ms=0)
>>> parse_window("session:5s").gap_ms
5000
>>> parse_window("tumbling:1 day")
Tumbling(size_ms=86400000, offset_ms=0)
>>> parse_window("tumbling:1d+-8h").offset_ms
-28800000
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple, Union

from slash.errors import InvalidArgument

_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
# Spark's interval spellings ("10 seconds", "1 day") and a few common short forms
_WORDS = {"millisecond": "ms", "milliseconds": "ms", "msec": "ms", "msecs": "ms",
          "sec": "s", "secs": "s", "second": "s", "seconds": "s",
          "min": "m", "mins": "m", "minute": "m", "minutes": "m",
          "hour": "h", "hours": "h", "hr": "h", "hrs": "h",
          "day": "d", "days": "d", "week": "w", "weeks": "w"}
_PART = re.compile(r"(-?\d+)\s*([a-z]+)")


def parse_duration(text: str, what: str = "duration") -> int:
    """Parses a duration into milliseconds: ``"10s"`` (10000), ``"1d"``,
    ``"10 seconds"``, ``"1 day"``, or a sum of parts as Spark writes them
    (``"1 hour 30 minutes"``). Raises InvalidArgument naming `what`."""
    parts = _PART.findall(text.strip().lower()) if isinstance(text, str) else []
    rest = _PART.sub("", text.strip().lower()).replace("interval", "").strip() \
        if isinstance(text, str) else "?"
    if not parts or rest:
        raise InvalidArgument(f"{what}: expected an integer with a unit ms, s, m, h or d "
                              f"(e.g. '10s', '1d') or Spark's spelling ('10 seconds', '1 day'), "
                              f"got {text!r}")
    total = 0
    for num, unit in parts:
        u = _WORDS.get(unit, unit)
        if u not in _MS:
            raise InvalidArgument(f"{what}: unknown unit {unit!r} in {text!r} (units: ms, s, m, h, "
                                  "d or Spark's 'milliseconds', 'seconds', 'minutes', 'hours', "
                                  "'days', 'weeks')")
        total += int(num) * _MS[u]
    return total


def _positive(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int of milliseconds, got {value!r}")
    if value <= 0:
        raise InvalidArgument(f"{what} must be > 0 ms, got {value}")


def _check_offset(offset_ms: int, slide_ms: int) -> None:
    if isinstance(offset_ms, bool) or not isinstance(offset_ms, int):
        raise InvalidArgument(f"window offset must be an int of milliseconds, got {offset_ms!r}")
    if abs(offset_ms) >= slide_ms:
        raise InvalidArgument(f"window offset (start time) {offset_ms} ms must be smaller in "
                              f"absolute value than the window slide ({slide_ms} ms), as "
                              "Spark's window() requires: an offset of a whole slide or more "
                              "gives the same windows as its remainder")


@dataclass(frozen=True)
class Tumbling:
    """Windows ``[k*size + offset, (k+1)*size + offset)`` for every integer k
    (aligned at 0 when the offset is 0)."""

    size_ms: int
    offset_ms: int = 0
    kind = "tumbling"

    def __post_init__(self) -> None:
        _positive(self.size_ms, "window size")
        _check_offset(self.offset_ms, self.size_ms)


#: the most sliding windows one record may fall in (size / slide) unless a
#: Sliding window allows more (``max_windows=``): each is a row to emit per key
MAX_WINDOWS_PER_RECORD = 10_000


@dataclass(frozen=True)
class Sliding:
    """Windows ``[k*slide + offset, k*slide + offset + size)``: each event is
    in size/slide windows.

    State is kept per slice of gcd(size, slide) ms, so one event updates one slice.
    ``max_windows`` bounds size/slide (default :data:`MAX_WINDOWS_PER_RECORD`):
    every window is emitted per key, so ``sliding:1d/1ms`` (86.4 M windows a
    record) is refused unless allowed.
    """

    size_ms: int
    slide_ms: int
    offset_ms: int = 0
    max_windows: int = field(default=MAX_WINDOWS_PER_RECORD, repr=False, compare=False)
    kind = "sliding"

    def __post_init__(self) -> None:
        _positive(self.size_ms, "window size")
        _positive(self.slide_ms, "window slide")
        if self.slide_ms > self.size_ms:
            raise InvalidArgument(f"window slide ({self.slide_ms} ms) must not exceed "
                                  f"window size ({self.size_ms} ms)")
        per = -(-self.size_ms // self.slide_ms)
        if per > self.max_windows:
            raise InvalidArgument(f"sliding window {self.size_ms} ms / {self.slide_ms} ms puts "
                                  f"each record in {per:,} windows, more than max_windows="
                                  f"{self.max_windows:,} (each is a result row per key): use "
                                  "a longer slide, or Sliding(size_ms, slide_ms, max_windows=N)")


@dataclass(frozen=True)
class Session:
    """Per key, events at most ``gap`` apart form one session window
    ``[first event, last event + gap)``; an event bridging two sessions merges them.

    An event at ``t`` joins the session ``[s, e)`` when ``s - gap <= t <= e``:
    sessions that touch (one's end is the next one's start) merge, as Spark's
    ``session_window`` and Flink's session windows have it. A session is
    emitted once the watermark is strictly past its end.

    >>> Session(gap_ms=5000).gap_ms
    5000
    """

    gap_ms: int
    kind = "session"

    def __post_init__(self) -> None:
        _positive(self.gap_ms, "session gap")


Window = Union[Tumbling, Sliding, Session]

_INT64_MAX = 2**63 - 1


def window_ticks(w: Window, ticks_per_ms: int) -> Tuple[int, int]:
    """(size, slide) of ``w`` in ticks of ``ticks_per_ms`` per ms (a session:
    its gap twice); refuses a length that does not fit in int64 ticks, naming
    it, so no executor computes with an overflowed length.

    >>> window_ticks(Tumbling(86_400_000), 1_000_000)
    (86400000000000, 86400000000000)
    """
    if isinstance(w, Sliding):
        size, slide = w.size_ms, w.slide_ms
    else:
        size = slide = w.size_ms if isinstance(w, Tumbling) else w.gap_ms
    for what, ms in (("window size" if not isinstance(w, Session) else "session gap", size),
                     ("window slide", slide)):
        if ms * ticks_per_ms > _INT64_MAX:
            raise InvalidArgument(f"{what} {ms} ms is {ms * ticks_per_ms} time units of the time "
                                  f"column, more than int64 holds ({_INT64_MAX})")
    return size * ticks_per_ms, slide * ticks_per_ms


def parse_window(spec: Union[str, Window]) -> Window:
    """``"tumbling:10s"``, ``"sliding:60s/10s"`` or ``"session:10s"`` to a
    Window; ``"tumbling:1d+-8h"``, ``"sliding:10s/5s+2s"``: with an offset.

    A Window passes through unchanged.
    """
    if isinstance(spec, (Tumbling, Sliding, Session)):
        return spec
    if not isinstance(spec, str):
        raise InvalidArgument(f"window must be a spec string or a Window, got {spec!r}")
    kind, _, rest = spec.partition(":")
    kind = kind.strip().lower()
    rest, plus, offset = rest.partition("+")
    off = parse_duration(offset, "window offset (start time)") if plus else 0
    if kind == "tumbling":
        return Tumbling(parse_duration(rest, "window size"), off)
    if kind == "sliding":
        size, slash, slide = rest.partition("/")
        if not slash:
            raise InvalidArgument(f"sliding window spec must be 'sliding:SIZE/SLIDE', got {spec!r}")
        return Sliding(parse_duration(size, "window size"), parse_duration(slide, "window slide"),
                       off)
    if kind == "session":
        if plus:
            raise InvalidArgument(f"a session window has no offset (start time): it starts at "
                                  f"its first event; got {spec!r}")
        return Session(parse_duration(rest, "session gap"))
    raise InvalidArgument(f"window kind must be tumbling, sliding or session, got {spec!r}")


def state_window(spec: Union[str, Window]) -> Window:
    """``spec`` as a state takes it: windows aligned at 0. A state keeps its
    windows at multiples of the slide; an offset is applied by the query
    (:class:`slash.query.Query` shifts each time by it on the way in and each
    bound back on the way out), so a state given one refuses it rather than
    align its windows elsewhere than asked."""
    w = parse_window(spec)
    if getattr(w, "offset_ms", 0):
        raise InvalidArgument(f"window {w!r}: a state aligns its windows at 0; a window offset "
                              "(start time) belongs to a Query, which shifts the times the "
                              "state sees by it")
    return w


def with_start_time(window: Union[str, Window], start_time: Optional[str]) -> Window:
    """``window`` moved by Spark's ``startTime`` (``"-8 hours"``, ``"5s"``),
    as ``window(t, size, slide, startTime)`` moves it; None: unchanged.

    >>> with_start_time("tumbling:1 day", "-8 hours").offset_ms
    -28800000
    """
    w = parse_window(window)
    if start_time is None:
        return w
    if isinstance(w, Session):
        raise InvalidArgument("start_time: a session window has no start time (Spark's "
                              "session_window takes none): it starts at its first event")
    if w.offset_ms:
        raise InvalidArgument(f"start_time={start_time!r} and the window's own offset "
                              f"({w.offset_ms} ms) both move the windows: give one")
    return replace(w, offset_ms=parse_duration(start_time, "start_time"))


__all__ = ["Tumbling", "Sliding", "Session", "Window", "parse_window", "parse_duration",
           "state_window", "with_start_time", "window_ticks",
           "MAX_WINDOWS_PER_RECORD"]
