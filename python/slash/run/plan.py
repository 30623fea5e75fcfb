"""What a checkpointed group is told to do: how often to checkpoint
(:class:`CheckpointEvery`), where (:class:`CheckpointPlan`, pickled into
every worker or Spark task), and where one attempt of the recovery driver
resumes (:class:`AttemptPlan`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from slash.checkpoint import CheckpointStore
from slash.errors import InvalidArgument, UsageError
from slash.window import parse_duration

PROGRESS_S = 0.05  # how often a worker tells the parent how many records it has read


@dataclass(frozen=True)
class CheckpointEvery:
    """When rank 0 asks for the next checkpoint: every ``seconds`` of wall
    time, every ``epochs`` epochs of its executor, or every ``batches`` of
    its push calls (deterministic: for tests)."""

    seconds: Optional[float] = None
    epochs: Optional[int] = None
    batches: Optional[int] = None

    @classmethod
    def parse(cls, spec: Union[str, int, float, "CheckpointEvery"]) -> "CheckpointEvery":
        """``"10s"`` / ``"500ms"`` / ``10`` (seconds), ``"5 epochs"``, ``"100 batches"``.

        >>> CheckpointEvery.parse("5 epochs").epochs
        5
        >>> CheckpointEvery.parse("2s").seconds
        2.0
        """
        if isinstance(spec, CheckpointEvery):
            return spec
        if isinstance(spec, bool):
            raise InvalidArgument(f"checkpoint_every must be a duration, 'N epochs' or "
                                  f"'N batches', got {spec!r}")
        if isinstance(spec, (int, float)):
            if spec <= 0:
                raise InvalidArgument(f"checkpoint_every must be positive, got {spec!r}")
            return cls(seconds=float(spec))
        if isinstance(spec, str):
            m = re.fullmatch(r"\s*(\d+)\s*(epochs?|batches|batch)\s*", spec)
            if m:
                k = int(m.group(1))
                if k < 1:
                    raise InvalidArgument(f"checkpoint_every {spec!r}: the count must be >= 1")
                return cls(epochs=k) if m.group(2).startswith("epoch") else cls(batches=k)
            try:
                ms = parse_duration(spec)
            except (UsageError, ValueError) as e:
                raise InvalidArgument(f"checkpoint_every {spec!r} is not a duration like '10s', "
                                      f"'N epochs' or 'N batches': {e}") from None
            if ms <= 0:
                raise InvalidArgument(f"checkpoint_every must be positive, got {spec!r}")
            return cls(seconds=ms / 1000.0)
        raise InvalidArgument(f"checkpoint_every must be a duration, 'N epochs' or 'N batches', "
                              f"got {type(spec).__name__}")


@dataclass(frozen=True)
class CheckpointPlan:
    """Where and how often a group of executors checkpoints (pickled into
    every worker or Spark task)."""

    directory: str
    fingerprint: str
    executors: int
    partitions: int
    keep: int
    every: CheckpointEvery

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.directory, fingerprint=self.fingerprint,
                               executors=self.executors, partitions=self.partitions, keep=self.keep)


@dataclass(frozen=True)
class AttemptPlan(CheckpointPlan):
    """What a worker of one attempt of :func:`slash.run.recovery.checkpointed.run_checkpointed` needs: the
    plan, and where this attempt resumes."""

    resume_id: Optional[int]
    next_id: int
    attempt: int
    # live metrics (slash.runner.run with live= or latency_target=): report every
    # live_every s; realtime: event times are wall-clock times, each batch is read no
    # earlier than its latest time and fired windows carry their emit time
    live_every: Optional[float] = None
    realtime: bool = False
    # rate=: records/s over the whole group, each rank reading its 1/n share (a restart
    # paces the rows after the cut from the restart on: slash.run.pacing)
    rate: Optional[float] = None
    # late_output=: each rank keeps the rows it finds late, per cut (ckpt_worker.LateRows)
    want_late: bool = False
    # update: the logic versions agreed so far, (start in ticks, query) for versions 1, 2,
    # ...: every one agreed before this attempt, also after the cut it resumes from, which
    # each rank installs before reading, so the replay follows the logic the run without the
    # restart followed (slash.control.logic.LogicUpdates keeps them)
    versions: Tuple[Tuple[int, Any], ...] = ()
