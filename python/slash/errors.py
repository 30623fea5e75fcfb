"""Exceptions raised by Slash.

Two families, so callers can tell whose fault a failure is:

* :class:`UsageError` (also a ``ValueError``): the caller passed something
  wrong: a bad argument, an oversized buffer, an unknown transport, bad input
  data or schema.
* :class:`SystemFailure`: the system or a peer failed: a peer disconnected or
  refused our token, a provider or system call failed, a deadline passed.

Every exception carries the core's status name in ``status`` and the detail
the core recorded (which call, which peer, which column) in its message.
"""
from __future__ import annotations

import errno
import os


class SlashError(Exception):
    """Base class of every error raised by Slash."""

    status: str = "error"


# --- errors the caller caused -------------------------------------------
class UsageError(SlashError, ValueError):
    """The caller passed something invalid."""


class InvalidArgument(UsageError):
    status = "invalid argument"


class BufferTooLarge(UsageError):
    status = "buffer too large"


class OutOfRange(UsageError):
    status = "offset or length outside registered region"


class NotSupported(UsageError):
    status = "not supported in this build"


class UnknownName(UsageError):
    """An unknown transport, provider, column or other name."""

    status = "not found"


class InvalidState(UsageError):
    status = "invalid in current state"


class CheckpointCorrupt(InvalidArgument):
    """A checkpoint blob is truncated, corrupt (magic, version, checksum) or
    belongs to another configuration (fingerprint, partition count). The
    message carries the core's detail; callers add the file name."""

    status = "corrupt checkpoint"


class SchemaError(UsageError):
    """Input data has a wrong type, a missing column, nulls, or mismatched lengths."""

    status = "bad input"


# --- errors of the system or the peer ------------------------------------
class SystemFailure(SlashError):
    """The system, the fabric or a peer failed."""


class OutOfMemory(SystemFailure, MemoryError):
    status = "out of memory"


class SystemCallError(SystemFailure, OSError):
    status = "system call failed"


class NoSpaceLeft(SystemCallError):
    """A write failed because the file system is full (ENOSPC, EDQUOT). A
    restart would fail the same way, so a checkpointed run stops with it."""

    status = "no space left"


def write_error(path: str, e: OSError, what: str = "write") -> SystemCallError:
    """The error for a failed write of ``path``: :class:`NoSpaceLeft` naming
    the directory for a full disk (pyarrow's errors carry the errno only in
    their text), else :class:`SystemCallError` naming the path."""
    text = str(e)
    if (getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in text
            or "Disk quota exceeded" in text):
        d = os.path.dirname(os.path.abspath(path)) or "."
        return NoSpaceLeft(f"cannot {what} {path!r}: no space left on {d!r}")
    return SystemCallError(f"cannot {what} {path!r}: {e.strerror or text}")


class ResourceLimit(SystemFailure):
    """A limit of the system is lower than a run needs, e.g. RLIMIT_NOFILE
    for a large group's mesh (:mod:`slash.open_files`). Raised before anything
    starts; the message names the limit, the need and the remedy."""

    status = "resource limit"


class ProviderError(SystemFailure):
    status = "fabric provider error"


class AuthenticationError(SystemFailure):
    status = "authentication failed"


class PeerDisconnected(SystemFailure, ConnectionError):
    status = "peer disconnected"


class Timeout(SystemFailure, TimeoutError):
    status = "timed out"


class ProtocolError(SystemFailure):
    status = "protocol violation"


class SinkFailed(SlashError):
    """A stream's sink callback raised, so the stream stopped. ``window`` is
    the (window_start, window_end) it raised on; the sink's own exception is
    ``__cause__``. Neither family: the failing code is the caller's callback."""

    status = "sink failed"
    window: "tuple[int, int] | None" = None


# -- Spark: raised by slash.spark (kept here with the others, so one import
# catches every Slash error; slash.spark re-exports them) -------------------
class SparkUnavailable(NotSupported):
    """pyspark (or pandas, which its Arrow UDFs import) or Java is missing."""

    status = "spark unavailable"


class NotEnoughSlots(InvalidArgument):
    """The cluster has fewer concurrent task slots than the executors asked for."""

    status = "not enough task slots"


class TaskFailed(SystemFailure):
    """A Slash barrier task failed; ``rank`` says which executor (None if unknown)."""

    status = "spark task failed"

    def __init__(self, message: str, rank: "int | None" = None, reason: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.reason = reason

    def __reduce__(self):  # picklable with its rank and reason
        return (type(self), (str(self), self.rank, self.reason))


class EndOfStream(SlashError, EOFError):
    """The producer closed the channel; no more buffers will arrive."""

    status = "end of stream"


__all__ = [name for name in dir() if name[0].isupper()] + ["write_error"]
