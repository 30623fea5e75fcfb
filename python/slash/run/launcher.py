"""One launcher for groups of local executor processes.

:class:`ProcessGroup` starts N processes with the "spawn" method (each starts
clean: no inherited threads or locks; :func:`use_forkserver` forks them from a
warm server instead), gives each a duplex pipe to the parent
(a :class:`Link`), and reads their messages with
:func:`multiprocessing.connection.wait` on the pipes *and* the processes'
sentinels. So a process that dies -- killed by a signal, crashed in C, or
exited without sending its result -- is noticed at once, not after a timeout,
and the error names its rank and exit code or signal.

Convention: a message is a tuple whose first item is its kind; a process's
last message has kind ``"ok"`` or ``"error"`` (after it, the process may
exit). Any other exit is a failure of the run.

>>> def hello(rank, link):
...     link.put(("ok", rank, rank * 10))
>>> # with ProcessGroup(2, hello, lambda r: (r,)) as g:   # (spawn needs an importable target)
>>> #     sorted(g.recv()[2] for _ in range(2))   -> [0, 10]
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from multiprocessing import forkserver
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from slash.errors import SystemFailure, Timeout
from slash.open_files import reserve_group

log = logging.getLogger(__name__)

FINAL_KINDS = ("ok", "error")

#: How ProcessGroup starts processes: "spawn" (the default) or "forkserver"
#: (see :func:`use_forkserver`).
_START_METHOD = "spawn"


def use_forkserver(preload: Sequence[str]) -> None:
    """Starts processes of later groups by forking them from a server process
    that has imported ``preload`` once, and starts that server now, in the
    background (its imports overlap with the caller's work until the first
    group needs it).

    A spawned executor spends 0.5-1 s importing numpy, pyarrow and slash
    (and pandas, which pyarrow imports at its first conversion) before it
    reads a record; a forked one starts with all of it loaded, so N
    executors cost one import instead of N. Each process still starts
    clean of the caller's state (the server is a fresh interpreter that only
    imported modules). For one-shot programs such as the ``slash run``
    command: the server keeps the environment and working directory it was
    started with, so a long-lived caller that changes them between runs
    should keep the default "spawn"."""
    global _START_METHOD
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    forkserver.ensure_running()
    _START_METHOD = "forkserver"


def describe_exit(exitcode: Optional[int]) -> str:
    """``exit code 3`` or ``killed by signal SIGKILL`` for a process's exit code."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


#: the longest single wait of :meth:`ProcessGroup.recv` (it loops to its deadline)
_WAIT_SLICE_S = 3600.0


class Link:
    """A worker's end of its pipe to the parent: ``put`` a message, ``get``
    one (raises :class:`slash.errors.Timeout` after ``timeout`` seconds, and
    :class:`slash.errors.SystemFailure` if the parent went away)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @property
    def connection(self) -> Connection:
        """The pipe itself, for a rank paused on a request (a control or a
        scale round) that waits for the driver's answer on it directly."""
        return self._conn

    def put(self, msg: Any) -> None:
        self._conn.send(msg)

    def poll(self, timeout: float = 0.0) -> bool:
        """True when a message from the launching process is waiting."""
        return self._conn.poll(timeout)

    def get(self, timeout: Optional[float] = None) -> Any:
        if not self._conn.poll(timeout):
            raise Timeout(f"no message from the launching process within {timeout} s")
        try:
            return self._conn.recv()
        except EOFError:
            raise SystemFailure("the launching process went away") from None


def _entry(target: Callable[..., None], args: Tuple[Any, ...], conn: Connection) -> None:
    try:
        target(*args, Link(conn))
    except (BrokenPipeError, ConnectionResetError):
        # the launching process went away (stopped by SIGINT or SIGTERM):
        # nobody is left to report to, and nothing to print
        log.debug("the launching process went away")
    finally:
        conn.close()
    # The final message is sent and the target has closed what it opened: a
    # normal exit would now tear down the interpreter (every module, Arrow's
    # and numpy's thread pools), 0.2-0.3 s the parent waits for in close().
    # Exit at once instead, after flushing what was logged or printed.
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(0)


class _InProcess:
    """A rank run on a thread of this process, seen as ProcessGroup sees a
    process: ``start``, a ``sentinel`` that becomes readable when it ends,
    ``exitcode`` (0, or 1 if the target raised), ``join``, ``is_alive``.
    Its arguments are copied through pickle as a spawned process gets them,
    so it shares no object with the caller."""

    def __init__(self, target: Callable[..., None], args: Tuple[Any, ...], conn: Connection,
                 name: str) -> None:
        self._args = pickle.loads(pickle.dumps(args))
        self._target, self._conn = target, conn
        self._r, self._w = os.pipe()
        self.sentinel = self._r
        self.exitcode: Optional[int] = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        code = 1
        try:
            self._target(*self._args, Link(self._conn))
            code = 0
        except BaseException:  # the target reports its own errors; this is its exit code
            log.debug("in-process rank failed", exc_info=True)
        finally:
            self._conn.close()
            self.exitcode = code
            os.close(self._w)  # the sentinel: readable (EOF) from now on

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: Optional[float] = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def kill(self) -> None:
        log.warning("an in-process rank is still running and cannot be killed; it is left "
                    "to finish on its daemon thread")

    def close(self) -> None:
        if self._r >= 0 and not self._thread.is_alive():
            os.close(self._r)
            self._r = -1


class ProcessGroup:
    """N spawned processes running ``target(*args_of(rank), link)``.

    Use as a context manager: leaving it joins the processes briefly and
    kills any still running, so nothing outlives a failed run.
    ``name`` names a process in errors (``"executor rank 2 died ..."``).
    ``in_process``: each rank runs on a thread of this process instead
    (same messages, same failure reports; for a group too small to be worth
    a process start: a crash in C then takes the caller with it).
    ``transport``: the processes form a group over it (a mesh: each holds
    descriptors per peer): before anything starts, the open-file limit is
    raised to what the group needs, or :class:`slash.errors.ResourceLimit`
    says at once why it cannot be (:func:`slash.open_files.reserve_group`).
    """

    def __init__(self, n: int, target: Callable[..., None],
                 args_of: Callable[[int], Sequence[Any]], name: str = "executor",
                 in_process: bool = False, transport: Optional[str] = None) -> None:
        if n < 1:
            raise ValueError(f"a process group needs at least one process, got {n}")
        if transport is not None:
            reserve_group(n, transport, in_process)
        ctx = mp.get_context(_START_METHOD)
        self.n = n
        self.name = name
        self._conns: List[Connection] = []
        self._procs: List[Any] = []
        self._final: List[bool] = [False] * n
        self._open: List[bool] = [True] * n
        child_ends = []
        for r in range(n):
            parent, child = ctx.Pipe(duplex=True)
            self._conns.append(parent)
            if in_process:
                self._procs.append(_InProcess(target, tuple(args_of(r)), child, f"{name}-{r}"))
                continue
            child_ends.append(child)
            self._procs.append(ctx.Process(target=_entry, daemon=True, name=f"{name}-{r}",
                                           args=(target, tuple(args_of(r)), child)))
        try:
            for p in self._procs:
                p.start()
        finally:
            for c in child_ends:  # the parent keeps only its ends: EOF when a child exits
                c.close()

    def __enter__(self) -> "ProcessGroup":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        # after a failure the others may be waiting on the dead one: no grace
        self.close(5.0 if exc_type is None else 0.2)

    def send(self, rank: int, msg: Any) -> None:
        """Sends ``msg`` to process ``rank`` (its :meth:`Link.get`)."""
        try:
            self._conns[rank].send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._raise_dead(rank)

    def broadcast(self, msg: Any) -> None:
        for r in range(self.n):
            self.send(r, msg)

    def recv(self, timeout: Optional[float] = None) -> Any:
        """The next message from any process. Raises :class:`SystemFailure`
        naming the rank as soon as a process has exited without its final
        message, and :class:`slash.errors.Timeout` after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            live = [r for r in range(self.n) if self._open[r]]
            if not live:
                raise SystemFailure(f"every {self.name} has already reported")
            waits: Dict[Any, int] = {}
            for r in live:
                waits[self._conns[r]] = r
                waits[self._procs[r].sentinel] = r
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # in slices: a poll takes at most ~24 days (its timeout is an int of ms)
            ready = wait(list(waits), None if left is None else min(left, _WAIT_SLICE_S))
            if not ready:
                if left is not None and left > _WAIT_SLICE_S:
                    continue
                raise Timeout(f"no message from any {self.name} within {timeout} s")
            # pipes first: a process that sent its result and exited is not dead
            for obj in sorted(ready, key=lambda o: not isinstance(o, Connection)):
                r = waits[obj]
                if not self._open[r]:
                    continue
                conn = self._conns[r]
                if conn.poll(0):
                    try:
                        msg = conn.recv()
                    except (EOFError, ConnectionResetError):
                        # the process closed its end (a socketpair whose peer exited with
                        # bytes it never read resets instead of ending): it is gone
                        self._open[r] = False
                        self._raise_if_unfinished(r)
                        continue
                    if isinstance(msg, tuple) and msg and msg[0] in FINAL_KINDS:
                        self._final[r] = True
                    return msg
                if not isinstance(obj, Connection) or self._procs[r].exitcode is not None:
                    self._open[r] = False
                    self._raise_if_unfinished(r)

    def _raise_if_unfinished(self, rank: int) -> None:
        if not self._final[rank]:
            self._raise_dead(rank)

    def _raise_dead(self, rank: int) -> None:
        p = self._procs[rank]
        p.join(1.0)  # the pipe closes a moment before the exit code is known
        raise SystemFailure(f"{self.name} rank {rank} died ({describe_exit(p.exitcode)}) "
                            f"before reporting its result")

    def exited(self) -> Dict[int, str]:
        """Ranks whose process has exited so far, with how (``killed by signal SIGKILL``)."""
        return {r: describe_exit(p.exitcode) for r, p in enumerate(self._procs)
                if p.exitcode is not None}

    def close(self, grace: float = 5.0) -> None:
        """Waits up to ``grace`` s in all for the processes, then kills the rest."""
        deadline = time.monotonic() + grace
        for p in self._procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for r, p in enumerate(self._procs):
            if p.is_alive():
                log.debug("killing %s rank %d", self.name, r)
                p.kill()
                p.join(5)
        for c in self._conns:
            c.close()
        for p in self._procs:
            if isinstance(p, _InProcess):
                p.close()
