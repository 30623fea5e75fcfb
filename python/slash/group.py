"""What a group of executors is configured with (:class:`GroupConfig`): its
transport, key partitions, epochs, lateness and sync channels, checked when
made; every entry point (``slash.runner.run``, ``slash run``, the Spark
calls) takes one as ``group=``. Also importable from :mod:`slash.executor`
and ``slash``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from slash.errors import InvalidArgument
from slash.limits import MAX_PARTITIONS
from slash.window import parse_duration

#: Key partitions of a group unless GroupConfig.partitions says otherwise: fixed,
#: not tied to the number of executors, so leadership can move (docs/elastic.md).
DEFAULT_PARTITIONS = 256


@dataclass(frozen=True)
class GroupConfig:
    """How executors sync: transport, key partitions, epochs, lateness, channels.

    ``partitions``: key partitions P (>= N; default 256, or N when N is
    larger: a count fixed for the life of a stream, whatever N does). ``lateness``:
    allowed out-of-orderness (ms or a duration like ``"2s"``); a record older
    than its executor's published watermark (max event time seen minus the
    lateness) is late: counted, optionally returned, never applied.
    ``epoch_bytes`` / ``epoch_ms``: an epoch also ends after this much input
    or time (and whenever a window can close). ``buffer_size`` / ``credits``:
    the geometry of each sync channel's ring. ``timeout``: longest wait for a
    peer (seconds) before failing. ``own_rows`` (slash mode, aggregates and joins):
    where an executor folds the records of the partitions it leads:
    ``"local"`` (its local store, merged into the leader store at the epoch's
    end), ``"leader"`` (straight into the leader store: no second upsert, one
    more hash per record) or ``"auto"`` (measured in the local store: under 3
    records per (window, key) group, ``"leader"``; under 1.5, where a local
    partial reduces nothing, the other partitions' records also go straight to
    their leaders as rows, as in the repartition mode: ``epochs_routed`` in
    the metrics; re-measured every 8 routed epochs).

    ``transport``: ``"shm"`` (one host), ``"ofi:tcp"``, ``"ofi:verbs"`` (an
    RDMA device; the executors listen on its address), or either ofi spec
    with the device or address to use after ``@``: ``"ofi:verbs@mlx5_0"``,
    ``"ofi:verbs@10.0.0.5"`` (``slash doctor`` lists the devices).

    A call that takes ``group=`` beside its own ``transport=``, ``mode=``
    or ``lateness=`` (``slash.runner.run``, ``slash.spark.window_aggregate``,
    ``stream``) uses the group; a setting given to the call too must agree
    with it, else InvalidArgument (:meth:`for_call`).

    >>> GroupConfig(lateness="2s").lateness_ms
    2000
    """

    transport: str = "shm"
    partitions: Optional[int] = None
    lateness: Union[int, str] = 0
    epoch_bytes: int = 16 << 20
    epoch_ms: int = 200
    buffer_size: int = 256 << 10
    credits: int = 8
    timeout: float = 120.0
    mode: str = "slash"
    own_rows: str = "auto"
    isolation: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in ("slash", "repartition"):
            raise InvalidArgument(f"mode must be 'slash' or 'repartition', got {self.mode!r}")
        if self.isolation not in ("auto", "process"):
            raise InvalidArgument(f"isolation must be 'auto' or 'process', got {self.isolation!r}")
        if self.own_rows not in ("auto", "local", "leader"):
            raise InvalidArgument(f"own_rows must be 'auto', 'local' or 'leader', got {self.own_rows!r}")
        if not isinstance(self.transport, str) or not self.transport:
            raise InvalidArgument(f"transport must be 'shm' or 'ofi:PROVIDER[@DEVICE|ADDRESS]', "
                                  f"got {self.transport!r}")
        if self.partitions is not None and (isinstance(self.partitions, bool) or
                                            not isinstance(self.partitions, int) or
                                            not 1 <= self.partitions <= MAX_PARTITIONS):
            raise InvalidArgument(f"partitions must be an int in 1..{MAX_PARTITIONS}, got "
                                  f"{self.partitions!r}")
        for name in ("epoch_bytes", "epoch_ms", "buffer_size", "credits"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidArgument(f"{name} must be an int >= 0, got {v!r}")
        if self.buffer_size < 1024 or self.credits < 1:
            raise InvalidArgument("buffer_size must be >= 1024 and credits >= 1")
        if not self.timeout or self.timeout <= 0:
            raise InvalidArgument(f"timeout must be > 0 seconds, got {self.timeout!r}")
        self.lateness_ms  # validates

    @property
    def lateness_ms(self) -> int:
        if isinstance(self.lateness, bool):
            raise InvalidArgument(f"lateness must be ms or a duration like '2s', got {self.lateness!r}")
        if isinstance(self.lateness, int):
            if self.lateness < 0:
                raise InvalidArgument(f"lateness must be >= 0, got {self.lateness}")
            return self.lateness
        return parse_duration(self.lateness, "lateness") if self.lateness not in ("0", "") else 0

    @classmethod
    def for_call(cls, group: Optional["GroupConfig"], *, transport: Optional[str] = None,
                 mode: Optional[str] = None, lateness: Union[None, int, str] = None) -> "GroupConfig":
        """The group of a call that takes ``group=`` beside its own
        ``transport=``, ``mode=`` and ``lateness=`` (one source of truth per
        setting). Without a group, one is made from those (defaults: shm,
        slash, 0). With a group, it is the truth: a setting also given to the
        call must agree with it (None and the default say nothing), else
        InvalidArgument names both values.

        >>> GroupConfig.for_call(None, transport="ofi:tcp").transport
        'ofi:tcp'
        >>> GroupConfig.for_call(GroupConfig(lateness="2s"), lateness=2000).lateness_ms
        2000
        """
        if group is None:
            return cls(transport=transport or "shm", mode=mode or "slash",
                       lateness=0 if lateness is None else lateness)
        if not isinstance(group, GroupConfig):
            raise InvalidArgument(f"group must be a GroupConfig, got {type(group).__name__}")
        if transport not in (None, "shm", group.transport):
            raise InvalidArgument(f"transport={transport!r} disagrees with group.transport="
                                  f"{group.transport!r}; set it in one place")
        if mode not in (None, "slash", group.mode):
            raise InvalidArgument(f"mode={mode!r} disagrees with group.mode={group.mode!r}; set it "
                                  "in one place")
        if lateness not in (None, 0, "0", ""):
            ms = GroupConfig(lateness=lateness).lateness_ms
            if ms != group.lateness_ms:
                raise InvalidArgument(f"lateness={lateness!r} ({ms} ms) disagrees with "
                                      f"group.lateness ({group.lateness_ms} ms); set it in one place")
        return group

    def partitions_for(self, n: int) -> int:
        """The key partition count of a group of ``n`` executors: ``partitions``,
        or DEFAULT_PARTITIONS (at least ``n``)."""
        p = self.partitions if self.partitions is not None else min(max(DEFAULT_PARTITIONS, n),
                                                                    MAX_PARTITIONS)
        if p < n:
            raise InvalidArgument(f"partitions ({p}) must be at least the number of executors ({n})")
        return p
