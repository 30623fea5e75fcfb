"""One SparkSession per test process (an xdist worker), shared by the modules
that ask for the ``spark`` fixture (tests/conftest.py): a new SparkContext per
module cost its first job the Python workers' start and imports again.

Invariants: Spark keeps at most one SparkContext per process, so a module that
needs another master (or a static conf) stops the shared session first
(:func:`own_session`), and the next module asking for it gets a new one; the
shared session is ``slash.spark.session("local[2]")`` as a module would have
made it, and :func:`leave_as_found` hands it to the next module with the
runtime confs, temporary views, cache and streams it had before, and no job
running (a session with a job still running is stopped instead)."""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, Optional

log = logging.getLogger(__name__)

#: the master every sharing module runs on
SHARED_MASTER = "local[2]"
#: how long a job a module's stream started may take to end after the module (it was told to stop)
JOBS_END_S = 60.0

_shared: Optional[Any] = None


def _stopped(spark: Any) -> bool:
    return spark.sparkContext._jsc is None


def shared() -> Any:
    """The process's shared local[2] session, started if there is none or
    something stopped it."""
    global _shared
    if _shared is None or _stopped(_shared):
        from slash.spark import session
        log.info("starting the shared SparkSession (%s)", SHARED_MASTER)
        _shared = session(SHARED_MASTER, "slash-tests-shared")
    return _shared


def is_shared(spark: Any) -> bool:
    """Whether spark is the shared session (or another on its SparkContext)."""
    return _shared is not None and not _stopped(_shared) and spark.sparkContext is _shared.sparkContext


def stop_shared() -> None:
    """Stops the shared session if it runs (getOrCreate would hand its
    SparkContext, with its master, to whoever asks next)."""
    global _shared
    if _shared is not None and not _stopped(_shared):
        log.info("stopping the shared SparkSession")
        _shared.stop()
    _shared = None


def own_session(master: str, app: str, conf: Optional[Dict[str, Any]] = None) -> Any:
    """A session of the module's own (another master or a static conf), after
    the shared one was stopped; the module stops it."""
    from slash.spark import session
    stop_shared()
    return session(master, app, conf)


def runtime_confs(spark: Any) -> Dict[str, str]:
    """The confs set on the session, to restore after a module."""
    return dict(spark.conf.getAll)


def _jobs_ended(spark: Any) -> bool:
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + JOBS_END_S
    while tracker.getActiveJobsIds():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def leave_as_found(spark: Any, confs: Dict[str, str]) -> None:
    """After a module: its streaming queries stopped, its temporary views
    dropped, the cache cleared, and the runtime confs it set back to confs;
    the shared session stopped instead if a job of its still runs."""
    if _stopped(spark):
        return
    for q in spark.streams.active:
        q.stop()
    if not _jobs_ended(spark):
        log.warning("a job still ran %.0f s after its module: the shared SparkSession is stopped", JOBS_END_S)
        stop_shared()
        return
    for t in spark.catalog.listTables():
        if t.isTemporary:
            spark.catalog.dropTempView(t.name)
    spark.catalog.clearCache()
    now = runtime_confs(spark)
    for k, v in now.items():
        if k not in confs:
            spark.conf.unset(k)
        elif v != confs[k]:
            spark.conf.set(k, confs[k])
    for k in confs.keys() - now.keys():
        spark.conf.set(k, confs[k])
