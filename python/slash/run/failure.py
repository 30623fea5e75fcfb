"""How a driver tells a failed attempt from a finished one, and what it does
about it: a rank's error report as an exception (:func:`reported`), the
failure of one attempt (:class:`Failed`, made by :func:`failed` from what
the driver loop caught), and whether a restart can cure it
(:class:`RestartPolicy`)."""
from __future__ import annotations

import copy
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from slash.errors import (CheckpointCorrupt, InvalidArgument, NoSpaceLeft, PeerDisconnected,
                          SystemFailure, Timeout, UsageError)
from slash.run.launcher import ProcessGroup
from slash.run.protocol import Error

log = logging.getLogger(__name__)


class Failed(Exception):
    """One attempt failed: ``rank`` (None if unknown) and ``cause``."""

    def __init__(self, rank: Optional[int], cause: str, error: BaseException) -> None:
        super().__init__(cause)
        self.rank, self.cause, self.error = rank, cause, error


def failed(e: BaseException, pg: ProcessGroup,
           fail: Callable[[Optional[int], str, BaseException], Failed]) -> Failed:
    """The Failed a driver loop raises for ``e``: a SystemFailure of its own
    (a process died, or a deadline passed: the rank it names, else the first
    dead one) or an executor's Reported error (a peer's broken link is
    blamed on a dead process if there is one)."""
    if not isinstance(e, Reported):
        dead = _died(pg)
        m = re.search(r"rank (\d+)", str(e))
        return fail(int(m.group(1)) if m else (min(dead) if dead else None), str(e), e)
    err = e.error
    if isinstance(err, SystemFailure) and not isinstance(err, CheckpointCorrupt):
        time.sleep(0.2)  # a peer's broken link: is a process dead? that is the cause
        dead = _died(pg)
        if dead:
            k = min(dead)
            return fail(k, f"executor rank {k} died ({dead[k]})", err)
    return fail(e.rank, str(err), err)


def _died(pg: ProcessGroup, grace: float = 2.0) -> Dict[int, str]:
    """The ranks whose process died (killed, crashed) rather than exiting
    after its report: a rank that reported its peer's broken link exits with
    code 0 and is not the cause. A killed process's exit can be known a
    moment after its peers' (a fork server reaps it), so while only clean
    exits are known and other ranks run, this waits up to ``grace`` s for a
    death; then (every rank exited cleanly) the clean exits are returned."""
    deadline = time.monotonic() + grace
    while True:
        dead = pg.exited()
        died = {k: how for k, how in dead.items() if how != "exit code 0"}
        if died or len(dead) == pg.n or time.monotonic() > deadline:
            return died or dead
        time.sleep(0.02)


class Reported(Exception):
    def __init__(self, rank: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.rank, self.error = rank, error


#: how long the driver waits, after a rank reports that a peer went away, for
#: that peer's own error (the cause, which it reports in the same instant)
CAUSE_GRACE_S = 3.0


def first_cause(rep: Error, pg: Any = None) -> Error:
    """The report to raise for ``rep``. A rank whose peer closed its channel
    fails because that peer failed: with the group ``pg``, the peer's own
    error (its type, so its exit code) is awaited for :data:`CAUSE_GRACE_S`
    and returned instead, whichever arrives first; a rank that died (killed,
    crashed) in the meantime is the cause, and its SystemFailure is raised."""
    if pg is None or not isinstance(rep.error, PeerDisconnected):
        return rep
    deadline = time.monotonic() + CAUSE_GRACE_S
    while time.monotonic() < deadline:
        try:
            other = pg.recv(timeout=max(0.0, deadline - time.monotonic()))
        except Timeout:
            break
        except SystemFailure as e:
            if any(how != "exit code 0" for how in pg.exited().values()):
                raise e from None
            break  # every rank has reported: no cause beyond this report
        if isinstance(other, Error) and not isinstance(other.error, PeerDisconnected):
            return other
    return rep


def reported(rep: Error) -> Reported:
    """An executor's :class:`slash.run.protocol.Error` report as an exception
    (the one way a driver turns a rank's report into one): a SlashError keeps
    its type, its attributes (a TaskFailed's rank and reason, a SinkFailed's
    window, ...) and its cause, its message prefixed with the rank; any other
    error is a SystemFailure naming its type and text."""
    log.debug("executor %d failed:\n%s", rep.rank, rep.traceback)
    err = rep.error
    if err is None:
        return Reported(rep.rank, SystemFailure(f"executor rank {rep.rank} failed: {rep.text}"))
    cause = vars(err).pop(Error.CAUSE, None)
    out = copy.copy(err)  # the type and attributes, never the constructor's signature
    out.args = (f"executor rank {rep.rank}: {err}",)
    out.__cause__ = cause
    return Reported(rep.rank, out)


def curable(error: BaseException) -> bool:
    """Whether a restart can cure ``error``: a SystemFailure (a process died, a
    link broke, a deadline passed), but not a usage error, a corrupt
    checkpoint or a full disk (it stays full on a restart)."""
    return (isinstance(error, SystemFailure)
            and not isinstance(error, (UsageError, CheckpointCorrupt, NoSpaceLeft)))


def gave_up(f: Failed, restarts: int, max_restarts: int) -> BaseException:
    """The error a run ends with once ``max_restarts`` restarts did not cure it."""
    return SystemFailure(f"run failed after {restarts} restart(s) (max_restarts="
                         f"{max_restarts}); last failure: {f.cause}")


@dataclass(frozen=True)
class RestartPolicy:
    """What a failure allows (Flink's restart strategy): at most
    ``max_restarts`` restarts, of failures ``curable`` says a restart can cure;
    past them the run ends with ``gave_up(failure, restarts, max_restarts)``."""

    max_restarts: int
    curable: Callable[[BaseException], bool] = curable
    gave_up: Callable[[Failed, int, int], BaseException] = gave_up

    def __post_init__(self) -> None:
        m = self.max_restarts
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise InvalidArgument(f"max_restarts must be an int >= 0, got {m!r}")

    def check(self, f: Failed, restarts: int) -> None:
        """Returns if failure ``f``, after ``restarts`` restarts, may restart;
        else raises the error the run ends with."""
        if not self.curable(f.error):
            raise f.error
        if restarts >= self.max_restarts:
            raise self.gave_up(f, restarts, self.max_restarts) from f.error
