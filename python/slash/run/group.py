"""A local process group's rendezvous, as the checkpointed drivers run it."""
from __future__ import annotations

import time
from typing import Dict

from slash.launcher import ProcessGroup
from slash.run.failure import reported
from slash.run.protocol import Error


def connect(pg: ProcessGroup, n: int, deadline: float) -> None:
    """Every rank's :class:`~slash.run.protocol.Address` by ``deadline``
    (time.monotonic), then the list of them to every rank. A rank's
    :class:`~slash.run.protocol.Error` is raised as
    :class:`~slash.run.failure.Reported`; a deadline passed, as the
    launcher's Timeout."""
    got: Dict[int, str] = {}
    while len(got) < n:
        rep = pg.recv(timeout=max(0.0, deadline - time.monotonic()))
        if isinstance(rep, Error):
            raise reported(rep)
        got[rep.rank] = rep.address
    pg.broadcast([got[r] for r in range(n)])
