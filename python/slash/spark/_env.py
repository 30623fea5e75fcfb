"""What a Slash query needs from Spark before it launches: pyspark and Java
present, enough task slots for one barrier stage, a place for results, and
the errors that name what is missing.

A barrier stage that asks for more slots than the cluster has does not fail
fast: Spark re-checks it for minutes (``spark.scheduler.barrier.
maxConcurrentTasksCheck.*``) and then fails with a message about barrier
mode. So the slots are counted here first, the way the scheduler counts them.
"""
from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from typing import Any, List, Optional

from slash.errors import (InvalidArgument, NotEnoughSlots, NotSupported,  # noqa: F401
                          SparkUnavailable, SystemFailure, TaskFailed)

log = logging.getLogger(__name__)


def require_pyspark() -> Any:
    """Imports pyspark (and pandas, which ``mapInArrow`` needs) or raises SparkUnavailable."""
    try:
        import pyspark  # an optional dependency (slash-stream[spark])
    except ImportError as e:
        raise SparkUnavailable(f"pyspark is not installed ({e}); pip install 'slash-stream[spark]' "
                               "or pip install pyspark pandas") from None
    try:
        import pandas  # noqa: F401  (optional: pyspark's mapInArrow imports it)
    except ImportError:
        raise SparkUnavailable("pandas is not installed; pyspark's mapInArrow needs it: "
                               "pip install pandas") from None
    return pyspark


def require_java() -> str:
    """The java executable Spark will start, or SparkUnavailable."""
    home = os.environ.get("JAVA_HOME")
    exe = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not exe or not os.access(exe, os.X_OK):
        where = f"JAVA_HOME={home!r} has no bin/java" if home else "java is not on PATH"
        raise SparkUnavailable(f"Spark needs Java 17 or 21, but {where} "
                               "(Debian: apt-get install openjdk-17-jre-headless)")
    return exe


def task_slots(spark: Any) -> int:
    """Tasks the cluster can run at once now (what a barrier stage may ask for)."""
    jsc = spark.sparkContext._jsc.sc()
    try:
        rp = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(rp))
    except Exception as e:  # an older or locked-down gateway: count cores ourselves
        log.debug("maxNumConcurrentTasks unavailable (%s); estimating from the master URL", e)
    master = spark.sparkContext.master
    m = re.match(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master)
    if m:
        return os.cpu_count() or 1 if m.group(1) == "*" else int(m.group(1))
    if master == "local":
        return 1
    return int(spark.sparkContext.defaultParallelism)


def check_slots(spark: Any, executors: int, wait: float = 30.0) -> int:
    """Waits up to ``wait`` seconds for ``executors`` slots (workers register
    after the session starts); raises NotEnoughSlots naming both numbers."""
    deadline = time.monotonic() + wait
    while True:
        slots = task_slots(spark)
        if slots >= executors:
            return slots
        if time.monotonic() >= deadline or spark.sparkContext.master.startswith("local"):
            break
        time.sleep(0.25)
    cpus = spark.sparkContext.getConf().get("spark.task.cpus", "1")
    raise NotEnoughSlots(
        f"{executors} Slash executors need {executors} concurrent Spark task slots, but the cluster "
        f"({spark.sparkContext.master}) has {slots} (spark.task.cpus={cpus}); a barrier stage "
        f"cannot start with fewer. Pass executors<={max(slots, 1)} or add cores/workers.")


def default_executors(spark: Any) -> int:
    return max(1, task_slots(spark))


# ---- where results go ---------------------------------------------------------
_tmp_lock = threading.Lock()
_tmp_root: List[str] = []


def _cleanup_tmp() -> None:
    for d in _tmp_root:
        shutil.rmtree(d, ignore_errors=True)


def conf_get(spark: Any, key: str, default: Optional[str] = None) -> Optional[str]:
    """One Spark setting: one gateway call (``sparkContext.getConf()`` copies
    every setting over the gateway, 25 ms a query here)."""
    try:
        return spark.conf.get(key, default)
    except Exception:  # a key the runtime conf refuses to show
        return spark.sparkContext.getConf().get(key, default)


def result_root(spark: Any, result_dir: Optional[str]) -> str:
    """The directory under which each query writes its result files: the
    caller's (``result_dir`` or the ``spark.slash.resultDir`` conf), else one
    temporary directory per driver process, removed at exit. Executors write
    there, so on a cluster of several hosts it must be shared storage."""
    d = result_dir or conf_get(spark, "spark.slash.resultDir")
    if d:
        if "://" not in d:
            os.makedirs(d, exist_ok=True)
        return d
    with _tmp_lock:
        if not _tmp_root:
            _tmp_root.append(tempfile.mkdtemp(prefix="slash-spark-"))
            atexit.register(_cleanup_tmp)
        return _tmp_root[0]

