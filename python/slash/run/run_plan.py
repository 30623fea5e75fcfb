"""What one call of :func:`slash.runner.run` asks for, checked before any
executor starts: :class:`RunPlan`.

Every parameter of ``run`` is a field of the plan of the same name (and
meaning: ``run``'s docstring). ``__post_init__`` checks them all at once,
against the query, the source's schema and the compatibility table
(:mod:`slash.run.compat`), and derives what every driver needs: the source(s)
as :class:`slash.sources.Source`, the executor count, the group, whether the
ranks run on threads of this process, the run's token and start time.
:attr:`RunPlan.path` then names the one driver the run takes; the drivers take
the plan, not its options one by one.

Invariant: a plan that exists is one the engine can run; everything a user
can get wrong is raised here, naming the option, before a process starts.
"""
from __future__ import annotations

import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.errors import InvalidArgument, NotSupported
from slash.executor import GroupConfig
from slash.limits import MAX_EXECUTORS
from slash.open_files import fits_in_one_process
from slash.query import JoinQuery, Query
from slash.run import compat
from slash.sources import as_source, global_units, output_overlaps_input

log = logging.getLogger(__name__)

#: an input of at most this many rows, run with the default executor count,
#: runs on one executor (its reader decoding on a second thread): a second
#: executor's start and merge cost more than it saves below it (16 M rows of
#: a 2-column count: 1.43 s on one against 3.10 s with 2 processes, best of
#: 4, machine at load 15)
IN_PROCESS_ROWS = 16_000_000

#: the driver a plan takes (:attr:`RunPlan.path`)
PATHS = ("tuned", "live_checkpointed", "live", "checkpointed", "plain")


def runs_in_process(src: Any, executors: Optional[int], transport: str = "shm",
                    **settings: Any) -> bool:
    """Whether :func:`slash.runner.run` runs its executors on threads of the
    calling process rather than in processes of their own: an input of known
    size (files, tables), and none of ``settings`` (run's ``checkpoint``,
    ``max_executors``, ``latency_target``, ``realtime``; ``isolation``: the
    group asked for processes, :class:`GroupConfig`) given. Those need what
    only a process gives: a rank that can die and be restarted from a
    checkpoint alone, a standby that joins a running group, a pace of its
    own. Nothing else does: the executors' channels are the same rings (or
    endpoints), and the decode and the fold run without the GIL, so threads
    give the same answer without a process start, the executors' imports and
    a copy of each result through a pipe (60 M rows on 2 executors: 0.88 s
    against 1.22 s wall, quiet machine). A fault injected by the test hook
    SLASH_TEST_KILL kills a process, so it asks for processes too. So does a
    group whose mesh over ``transport`` would not fit in one process's open
    files (every executor's channels held by the one process,
    :func:`slash.open_files.fits_in_one_process`): 64 executors over shm
    need 28,288."""
    if any(v not in (None, False) for v in settings.values()):
        return False
    if os.environ.get("SLASH_TEST_KILL"):
        return False
    parts = src if isinstance(src, tuple) else (src,)
    rows = [getattr(p, "rows", None) for p in parts]
    if not all(isinstance(r, int) for r in rows):
        return False
    n = executor_count(src, executors, True)
    if not fits_in_one_process(n, transport):
        log.info("%d executors on threads of one process would pass its open-file limit: "
                 "each runs in a process of its own", n)
        return False
    return True


def executor_count(src: Any, executors: Optional[int], in_process: bool) -> int:
    """The executors :func:`slash.runner.run` starts: ``executors`` if given;
    else one for an input of at most :data:`IN_PROCESS_ROWS` rows run in this
    process, one per core otherwise."""
    if executors is not None:
        return executors
    if in_process:
        parts = src if isinstance(src, tuple) else (src,)
        if sum(getattr(p, "rows", 0) for p in parts) <= IN_PROCESS_ROWS:
            return 1
    return os.cpu_count() or 1


def check_output_path(path: str, what: str, src: Any = None) -> None:
    """Fails before any process starts if `path` cannot be written, naming it,
    or if writing it would overwrite or join an input of `src`, naming both."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    given = output_overlaps_input(path, src) if src is not None else None
    if given is not None:
        raise InvalidArgument(f"{what} {path!r} would overwrite or join the input {given!r} "
                              "(the same file, inside an input directory, or matched by an "
                              "input pattern): give an output outside the inputs")
    if os.path.isdir(path):
        raise InvalidArgument(f"{what} {path!r} is a directory; give a file name")
    if not os.path.isdir(d):
        raise InvalidArgument(f"{what} {path!r}: directory {d!r} does not exist")
    if not os.access(d, os.W_OK | os.X_OK):
        raise InvalidArgument(f"{what} {path!r}: directory {d!r} is not writable")


@dataclass
class RunPlan:
    """One run: the query, its source(s) and every option of
    :func:`slash.runner.run`, checked (see the module doc)."""

    query: Any
    source: Any
    executors: Optional[int] = None
    transport: str = "shm"
    mode: str = "slash"
    group: Optional[GroupConfig] = None
    output: Optional[str] = None
    timeout: float = 3600.0
    metrics: Optional[Dict[str, Any]] = None
    late_output: Optional[str] = None
    live: Optional[Any] = None
    checkpoint: Optional[str] = None
    checkpoint_every: Any = "10s"
    max_restarts: int = 3
    checkpoint_keep: int = 2
    control: Any = None
    rate: Optional[float] = None
    latency_target: Any = None
    min_executors: Optional[int] = None
    max_executors: Optional[int] = None
    realtime: bool = False
    sink: Any = None
    #: derived: the source as a Source, or the two of a join
    src: Any = field(init=False, repr=False)
    #: derived: the executors the run starts with
    n: int = field(init=False)
    #: derived: the ranks run on threads of this process (:func:`runs_in_process`)
    in_process: bool = field(init=False)
    token: str = field(init=False, repr=False)
    t0: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        q = self.query
        if isinstance(q, JoinQuery):
            if not (isinstance(self.source, (tuple, list)) and len(self.source) == 2):
                raise InvalidArgument("a join runs over two sources: source=(left, right)")
            self.src = (as_source(self.source[0]), as_source(self.source[1]))
            q.check(self.src[0].schema, self.src[1].schema)
        elif isinstance(q, Query):
            self.src = as_source(self.source)
            q.check(self.src.schema)
        else:
            raise InvalidArgument(f"query must be a slash.query.Query or JoinQuery, got "
                                  f"{type(q).__name__}")
        isolated = self.group is not None and self.group.isolation == "process"
        transport = self.group.transport if self.group is not None else self.transport
        self.in_process = runs_in_process(self.src, self.executors, transport,
                                          checkpoint=self.checkpoint,
                                          max_executors=self.max_executors,
                                          latency_target=self.latency_target,
                                          realtime=self.realtime, isolation=isolated)
        n = self.n = executor_count(self.src, self.executors, self.in_process)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_EXECUTORS:
            raise InvalidArgument(f"executors must be an int in 1..{MAX_EXECUTORS}, got "
                                  f"{self.executors!r}")
        self.group = GroupConfig.for_call(self.group, transport=self.transport, mode=self.mode,
                                          lateness=q.lateness)
        self.group.partitions_for(n)
        cores = os.cpu_count() or 1
        if n > cores:
            log.warning("%d executors on %d cores: executors share cores and wait on each "
                        "other; a run is fastest with at most one executor per core", n, cores)
        self._check_outputs()
        self._check_pacing()
        compat.check("run", "join" if self.is_join else "aggregation", self.features)
        if self.sink is not None:
            self._check_sink()
        if (self.is_join and self.control not in (None, False) and self.max_executors is None
                and self.checkpoint is None and all(global_units(s) for s in self.src)):
            # a join's control socket (status, rebalance, scale-in) is the live join's
            # (slash.run.live.join): its group of n, every rank active
            self.max_executors = n
        if self.max_executors is not None and self.path != "tuned":
            self._check_elastic()
            self.group.partitions_for(self.max_executors)
        self.token = secrets.token_hex(16)
        self.t0 = time.monotonic()

    @property
    def is_join(self) -> bool:
        return isinstance(self.query, JoinQuery)

    @property
    def features(self) -> List[str]:
        """The features of the compatibility table this run uses."""
        on = (("checkpoint", self.checkpoint is not None),
              ("live_scale", self.max_executors is not None and self.latency_target is None),
              ("late_output", self.late_output is not None),
              ("rate", self.rate is not None or self.realtime),
              ("latency_target", self.latency_target is not None),
              ("sink", self.sink is not None))
        return [f for f, yes in on if yes]

    @property
    def path(self) -> str:
        """The driver the run takes (one of :data:`PATHS`): ``tuned`` (a
        latency target, or a realtime run measured: :mod:`slash.control.autotune`),
        ``live_checkpointed`` (:mod:`slash.run.recovery.live`), ``live``
        (:mod:`slash.run.live.scale`), ``checkpointed`` (:mod:`slash.run.recovery.checkpointed`)
        or ``plain``."""
        if self.latency_target is not None or self.realtime:
            return "tuned"
        if self.max_executors is not None:
            return "live_checkpointed" if self.checkpoint is not None else "live"
        return "checkpointed" if self.checkpoint is not None else "plain"

    @property
    def want_late(self) -> bool:
        return self.late_output is not None

    def finalize(self, table: pa.Table) -> pa.Table:
        """The executors' gathered results as the query's answer."""
        if self.is_join:
            return self.query.finalize(table, self.src[0].schema, self.src[1].schema)
        return self.query.finalize(table, self.src.schema)

    def _check_outputs(self) -> None:
        if self.output:
            check_output_path(self.output, "output", self.src)
        if self.late_output is not None:
            check_output_path(self.late_output, "late_output", self.src)
            if self.output and os.path.realpath(self.output) == os.path.realpath(self.late_output):
                raise InvalidArgument(f"late_output {self.late_output!r} is the output: give two "
                                      f"files")

    def _check_pacing(self) -> None:
        rate = self.rate
        if rate is not None and (self.latency_target is not None or self.realtime):
            raise InvalidArgument("rate= and realtime=True (which latency_target= needs) both "
                                  "pace the input, at a fixed rate or at its event times: give "
                                  "one")
        if self.min_executors is not None and self.path != "tuned":
            raise InvalidArgument("min_executors bounds the controller: give latency_target= "
                                  "too")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                                 or not rate > 0):
            raise InvalidArgument(f"rate must be > 0 records/s, got {rate!r}")

    def _check_sink(self) -> None:
        """What ``sink=`` needs (see :func:`slash.runner.run`): with
        checkpoints every driver delivers through its supervisor, without them
        the run writes the result once at the end."""
        transactional = getattr(self.sink, "transactional_id", None) is not None
        if self.checkpoint is None:
            if transactional or not callable(getattr(self.sink, "write", None)):
                raise InvalidArgument(
                    "sink= without checkpoint= is written once at the end (at least once) with "
                    "sink.write(result): give a KafkaSink without transactional_id, or "
                    "checkpoint= for exactly once (a transaction per checkpoint)")
        elif not transactional or not callable(getattr(self.sink, "deliver", None)):
            raise InvalidArgument(
                "sink= with checkpoint= delivers each checkpoint's windows in one transaction "
                "when its manifest commits (exactly once): give a KafkaSink with a "
                "transactional_id")

    def _check_elastic(self) -> None:
        """What ``max_executors=`` without ``latency_target=`` needs:
        ``executors <= max_executors`` and inputs whose units are re-dealt in
        global terms (FileSources; a join's both sides)."""
        n, m = self.n, self.max_executors
        if isinstance(m, bool) or not isinstance(m, int) or not n <= m <= MAX_EXECUTORS:
            raise InvalidArgument(f"max_executors must be an int in {n}..{MAX_EXECUTORS} (at "
                                  f"least executors={n}), got {m!r}")
        sides: Tuple[Tuple[str, Any], ...] = (
            (("the left input", self.src[0]), ("the right input", self.src[1])) if self.is_join
            else (("the input", self.src),))
        for name, s in sides:
            if not global_units(s):
                raise NotSupported(f"max_executors=: live scaling re-deals {name}'s units in "
                                   f"global terms, which a FileSource or a BatchSource (batch "
                                   f"i = make(i)) offers; {name} is a {type(s).__name__}")
