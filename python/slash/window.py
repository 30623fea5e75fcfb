"""Window specifications: the one parser of ``"tumbling:10s"``-style strings.

Durations are integers with a unit: ``ms``, ``s``, ``m``, ``h`` (``"250ms"``,
``"10s"``, ``"1m"``). Event times are int64 milliseconds. All windows are
aligned at time 0, start inclusive, end exclusive.

>>> parse_window("sliding:60s/10s")
Sliding(size_ms=60000, slide_ms=10000)
>>> parse_window("session:5s").gap_ms
5000
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from slash.errors import InvalidArgument

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_DURATION = re.compile(r"^\s*(-?\d+)\s*(ms|s|m|h)\s*$")


def parse_duration(text: str, what: str = "duration") -> int:
    """Parses ``"10s"`` into milliseconds (10000). Raises InvalidArgument naming `what`."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if not m:
        raise InvalidArgument(f"{what}: expected an integer with a unit ms, s, m or h "
                              f"(e.g. '10s'), got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def _positive(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int of milliseconds, got {value!r}")
    if value <= 0:
        raise InvalidArgument(f"{what} must be > 0 ms, got {value}")


@dataclass(frozen=True)
class Tumbling:
    """Windows ``[k*size, (k+1)*size)`` for every integer k (aligned at 0)."""

    size_ms: int
    kind = "tumbling"

    def __post_init__(self) -> None:
        _positive(self.size_ms, "window size")


@dataclass(frozen=True)
class Sliding:
    """Windows ``[k*slide, k*slide + size)``: each event is in size/slide windows.

    State is kept per slice of gcd(size, slide) ms, so one event updates one slice.
    """

    size_ms: int
    slide_ms: int
    kind = "sliding"

    def __post_init__(self) -> None:
        _positive(self.size_ms, "window size")
        _positive(self.slide_ms, "window slide")
        if self.slide_ms > self.size_ms:
            raise InvalidArgument(f"window slide ({self.slide_ms} ms) must not exceed "
                                  f"window size ({self.size_ms} ms)")


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


def parse_window(spec: Union[str, Window]) -> Window:
    """``"tumbling:10s"``, ``"sliding:60s/10s"`` or ``"session:10s"`` to a Window.

    A Window passes through unchanged.
    """
    if isinstance(spec, (Tumbling, Sliding, Session)):
        return spec
    if not isinstance(spec, str):
        raise InvalidArgument(f"window must be a spec string or a Window, got {spec!r}")
    kind, _, rest = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "tumbling":
        return Tumbling(parse_duration(rest, "window size"))
    if kind == "sliding":
        size, slash, slide = rest.partition("/")
        if not slash:
            raise InvalidArgument(f"sliding window spec must be 'sliding:SIZE/SLIDE', got {spec!r}")
        return Sliding(parse_duration(size, "window size"), parse_duration(slide, "window slide"))
    if kind == "session":
        return Session(parse_duration(rest, "session gap"))
    raise InvalidArgument(f"window kind must be tumbling, sliding or session, got {spec!r}")


__all__ = ["Tumbling", "Sliding", "Session", "Window", "parse_window", "parse_duration"]
