"""The open files a group of executors needs, counted from the code and
checked before anything starts.

A group is a full mesh (``slash_group_join``, src/slashcore/group.c): each
of N executors holds one channel in from every peer and one channel out to
every peer, N(N-1) channels in all, and keeps their file descriptors open
for the life of the group. Over ``shm`` (src/slashcore/transport_shm.c,
channel.c, mem.c) a region is a memfd that stays open while it is mapped,
and a peer's region arrives as a memfd (SCM_RIGHTS) that stays open too:

==========================  ====================================================  ===
channel in  (``accept``)    the Unix socket, the ring's memfd, the credit          4
                            cells' memfd, the producer's credit word (received)
channel out (``connect``)   the Unix socket, the consumer's ring (received),       3
                            the credit word's memfd
==========================  ====================================================  ===

so :data:`SHM_PER_PEER` = 7 per peer. Over ``ofi:*`` a region is
registered memory (no descriptor) and what an endpoint holds is the
provider's (libfabric): over ``ofi:tcp`` (libfabric 1.17) 9 sockets per
endpoint, its connection and the provider's signalling socket pairs, so
:data:`OFI_PER_PEER` = 18 (both counts are what tests/test_open_files.py
measures); over ``ofi:verbs`` 4 per endpoint (an rdma_cm descriptor, an
epoll set and two sockets, measured 2026-12-07 in the soft-RoCE guest of
scripts/rxe-guest.sh), within the 18. Each process also holds its own (the interpreter, numpy's and
pyarrow's libraries, the listener and its transport, the pipe to the
launcher): :data:`OWN`.

A group of 64 over shm needs 7 x 63 + 1 + 64 = 506 descriptors in each
executor process, a group of 128 needs 954: a soft RLIMIT_NOFILE of 1024
holds at most 138. Executors on threads of one process hold all the
meshes in that one process: 64 of them need 64 x 442 = 28,288, past a hard
limit of 20,000, so :func:`slash.run.run_plan.runs_in_process` starts
processes for a group whose threads would not fit.
:func:`reserve` raises the soft limit up to what is needed (never past the
hard one, which only root raises) and refuses at once, naming the limit and
its remedy, what does not fit: without it an executor of a group too large
failed in ``memfd_create`` and its peers waited out the group's timeout.

>>> executor_fds(128, "shm")
954
"""
from __future__ import annotations

import logging
import os
import resource
from typing import Tuple

from slash.errors import ResourceLimit
from slash.limits import MAX_EXECUTORS

log = logging.getLogger(__name__)

#: descriptors per peer over shm (the table above)
SHM_PER_PEER = 7
#: descriptors per peer over ofi (measured over ofi:tcp, libfabric 1.17; the
#: provider's, not ours: another provider or version may keep fewer)
OFI_PER_PEER = 18
#: a process's own descriptors beside the mesh (an executor process with
#: numpy and pyarrow loaded, its listener and pipe: measured 20-30; the rest
#: is headroom)
OWN = 64
#: what the launching process keeps per process it starts: its end of the
#: duplex pipe, the process's sentinel, and while starting the child's end
LAUNCHER_PER_PROCESS = 3


def per_peer(transport: str) -> int:
    """Descriptors an executor holds per peer over ``transport``."""
    return SHM_PER_PEER if transport == "shm" else OFI_PER_PEER


def mesh_fds(n: int, transport: str) -> int:
    """Descriptors one executor of a group of ``n`` holds for the group:
    its listener and its channels to and from the ``n - 1`` others."""
    return 1 + per_peer(transport) * max(0, n - 1)


def executor_fds(n: int, transport: str) -> int:
    """Descriptors one executor process of a group of ``n`` holds open over
    ``transport``: its own (:data:`OWN`) and the mesh's."""
    return OWN + mesh_fds(n, transport)


def process_fds(n: int, transport: str, in_process: bool) -> int:
    """Descriptors a process of a group of ``n`` holds: one executor's, or
    (``in_process``) all ``n`` executors' meshes in one process."""
    return OWN + (n if in_process else 1) * mesh_fds(n, transport)


def fits_in_one_process(n: int, transport: str = "shm") -> bool:
    """Whether ``n`` executors on threads of this process would fit under its
    hard RLIMIT_NOFILE (the soft one is raised as needed)."""
    _, hard = limits()
    return hard == resource.RLIM_INFINITY or open_now() + process_fds(n, transport, True) <= hard


def limits() -> Tuple[int, int]:
    """This process's (soft, hard) RLIMIT_NOFILE; ``resource.RLIM_INFINITY`` as a large int."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard


def largest_group(transport: str, allowed: int, in_process: bool = False) -> int:
    """The largest group whose executors fit in ``allowed`` descriptors per
    process (``in_process``: all of them in one process); 0 if none does."""
    best = 0
    for n in range(1, MAX_EXECUTORS + 1):
        if process_fds(n, transport, in_process) > allowed:
            break
        best = n
    return best


def reserve(need: int, what: str, transport: str = "shm", n: int = 0,
            in_process: bool = False) -> None:
    """Makes this process's soft RLIMIT_NOFILE at least ``need``, raising it
    up to the hard limit when it is lower. Raises
    :class:`slash.errors.ResourceLimit`, naming the limits, what ``what``
    needs and the remedy, when the hard limit is lower than ``need``.
    ``transport``, ``n`` (the group's size) and ``in_process`` let the error
    say how large a group fits."""
    soft, hard = limits()
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard != resource.RLIM_INFINITY and need > hard:
        fits = largest_group(transport, hard, in_process) if n else 0
        fewer = (f", or run at most {fits} executors (--executors {fits})"
                 if n and 1 <= fits < n else "")
        raise ResourceLimit(
            f"{what} needs {need} open files per process, but RLIMIT_NOFILE allows "
            f"{hard} (soft {soft}, hard {hard}): raise the hard limit (`ulimit -Hn {need}` "
            f"then `ulimit -n {need}` in the shell that starts it, as root or within "
            f"/etc/security/limits.conf's nofile; LimitNOFILE={need} in a systemd unit; "
            f"--ulimit nofile={need}:{need} for a container){fewer}")
    # up to the hard limit, not just to `need`: a process that opens more
    # later (a rescale, a join's second input) finds it already raised
    new = hard if hard != resource.RLIM_INFINITY else need
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (OSError, ValueError) as e:  # above fs.nr_open, or a sandbox's refusal
        raise ResourceLimit(f"{what} needs {need} open files per process, but raising the soft "
                            f"RLIMIT_NOFILE from {soft} to {new} failed ({e}): raise it "
                            f"before starting (`ulimit -n {need}`)") from None
    log.info("raised the soft open-file limit from %d to %s for %s (needs %d)", soft,
             "unlimited" if new == resource.RLIM_INFINITY else new, what, need)


def open_now() -> int:
    """Descriptors this process holds open now (counted in /proc/self/fd;
    0 where there is no /proc)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own
    except OSError:
        return 0


def reserve_group(n: int, transport: str, in_process: bool = False) -> None:
    """Before a launcher starts a group of ``n`` executors over
    ``transport``: raises this process's soft limit to what it and each
    executor need (the executors start with this process's limits) or
    raises :class:`slash.errors.ResourceLimit` at once. ``in_process``: the
    executors run on threads of this process, which then holds all their
    descriptors."""
    what = f"a group of {n} executors over {transport}"
    if in_process:
        reserve(open_now() + process_fds(n, transport, True), f"{what} in one process",
                transport, n, in_process=True)
        return
    reserve(executor_fds(n, transport), what, transport, n)
    reserve(open_now() + LAUNCHER_PER_PROCESS * n + OWN, f"the launcher of {what}")
