"""Any DataFrame to Slash's fast path without Python in the data path: the
Spark tasks that compute the DataFrame's rows write them as Arrow IPC files
(``io.slash.spark.ArrowExport`` in ``slash-spark.jar``, built by Maven from
``spark_integration/``), which a :class:`slash.file_source.FileSource` then
reads, as it reads any Arrow file.

One Spark job over ``df.queryExecution().toRdd()``: a task per partition of
the DataFrame (any number of them; no shuffle, no repartition), each writing
its partition's rows from Spark's own row memory into one ``.arrow`` file
(record batches of up to ``batch_rows`` rows) in a directory local to its
executor. A JVM task that writes the rows costs a fraction of handing them
to Python through ``mapInArrow`` (bench/jvm_export.py measures both).

    from slash.spark import jvm_export
    with jvm_export.export_columns(spark, df, ["ts", "key", "price"]) as got:
        window_aggregate(spark, got.files, time="ts", window="tumbling:10s",
                         key="key", aggs=["count", "sum:price"])
    # the directory is gone here

The jar ships in the wheel (``slash/jars/slash-spark.jar``, :func:`jar_path`)
and :func:`slash.spark.session` puts it on ``spark.jars``. A SparkSession
made without it gets it added when first needed (:func:`load`: the driver's
class loader and ``SparkContext.addJar`` for the executors); where that is
not possible (no jar in the installed package, a class loader that takes no
jars) :func:`available` is False and a caller takes ``mapInArrow`` instead.

Where the files go (:func:`export_root`): ``directory=``, else the
``spark.slash.exportDir`` setting, else ``/dev/shm`` under a local master,
else the first of ``spark.local.dir``, else the temporary directory. Each
executor writes on its own host: on a cluster of several hosts the
directory must be shared storage the readers see (as
:func:`slash.spark._env.result_root` is), and each file's ``host`` says
where it was written.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

from slash.errors import InvalidArgument, NotSupported, SchemaError, UnknownName
from slash.spark._env import conf_get

log = logging.getLogger(__name__)

#: the class whose static ``export(Dataset, dir, batchRows)`` runs the job
CLASS = "io.slash.spark.ArrowExport"
#: the jar's file name in the package (``slash/jars/``)
JAR_NAME = "slash-spark.jar"
#: rows per record batch: a FileSource unit, as a Parquet row group of 1 Mi rows is
BATCH_ROWS = 1 << 20
#: the Spark setting naming where the files go (see the module docstring)
EXPORT_DIR_CONF = "spark.slash.exportDir"


def jar_path() -> Optional[str]:
    """The installed package's ``slash-spark.jar``, or None when the package
    was built without it (no Maven or JDK at build time)."""
    p = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jars", JAR_NAME)
    return p if os.path.isfile(p) else None


def available(spark: Any) -> bool:
    """Whether the session's driver can load :data:`CLASS` (the jar is on its
    class path): only then does :func:`export_columns` run."""
    jvm = spark.sparkContext._jvm
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(CLASS, False, loader)
        return True
    except Exception:  # py4j's Py4JJavaError: ClassNotFoundException
        return False


def load(spark: Any) -> bool:
    """Makes :data:`CLASS` loadable in a running session that was started
    without the jar: the jar is added to the driver's class loader (Spark's
    ``MutableURLClassLoader``, the parent of a local executor's) and, with
    ``SparkContext.addJar``, to every executor's. Returns :func:`available`;
    False (with the reason at DEBUG) when the package has no jar or the
    driver's class loader takes none."""
    if available(spark):
        return True
    jar = jar_path()
    if jar is None:
        log.debug("jvm_export: the installed package has no %s", JAR_NAME)
        return False
    jvm = spark.sparkContext._jvm
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        url = jvm.java.io.File(jar).toURI().toURL()
        loader.addURL(url)  # MutableURLClassLoader: public addURL
        spark.sparkContext._jsc.addJar(jar)
    except Exception as e:
        log.debug("jvm_export: could not add %s to the running session: %s", jar, e)
        return False
    return available(spark)


#: the Spark setting that turns the export off ("false"): a DataFrame that is
#: no scan then reaches Slash's executors through mapInArrow (or, for a join,
#: Spark's Parquet writer)
ENABLED_CONF = "spark.slash.jvmExport"


def wanted(spark: Any) -> bool:
    """Whether slash.spark exports a DataFrame that is no scan: the setting
    allows it and the session can load the exporter (:func:`load`)."""
    if (conf_get(spark, ENABLED_CONF) or "true").strip().lower() == "false":
        return False
    return load(spark)


def export_root(spark: Any, directory: Optional[str] = None) -> str:
    """The directory under which each export makes its own (see the module docstring)."""
    d = directory or conf_get(spark, EXPORT_DIR_CONF)
    if d:
        return d
    master = spark.sparkContext.master
    if master.startswith("local") and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    local = conf_get(spark, "spark.local.dir")
    if local:
        return local.split(",")[0].strip()
    return tempfile.gettempdir()


@dataclass(frozen=True)
class ExportedFile:
    """One partition's Arrow IPC file."""

    partition: int
    rows: int
    batches: int
    bytes: int
    host: str  # the executor's host that wrote it
    path: str


@dataclass
class ExportResult:
    """What :func:`export_columns` wrote: a directory of one Arrow IPC file
    per partition of the DataFrame. A context manager: leaving it (or
    :meth:`cleanup`) removes the directory."""

    directory: str
    parts: List[ExportedFile] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def files(self) -> List[str]:
        """Every partition's file, in partition order (a FileSource skips those without rows)."""
        return [p.path for p in self.parts]

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    def cleanup(self) -> None:
        """Removes the directory and its files (on this host; safe to call twice)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "ExportResult":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def export_columns(spark: Any, df: Any, columns: Sequence[str], *, directory: Optional[str] = None,
                   batch_rows: int = BATCH_ROWS) -> ExportResult:
    """Writes ``columns`` of ``df`` (in that order; nothing else is computed
    into the files) as Arrow IPC files, one per partition of ``df``, in a new
    directory under :func:`export_root`, and returns them.

    Types: boolean, tinyint, smallint, int, bigint, float, double, date
    (date32), timestamp (``timestamp[us, tz=UTC]``: the instants, whatever the
    session time zone), timestamp_ntz (``timestamp[us]``), string, binary;
    nulls kept. Raises UnknownName for a column ``df`` lacks, SchemaError for
    a column of another type (both name it), NotSupported when the jar is not
    loadable (:func:`load`), and Spark's own error when the job fails (the
    directory is removed then)."""
    from pyspark.sql import functions as F

    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidArgument(f"batch_rows must be an int >= 1, got {batch_rows!r}")
    names = [columns] if isinstance(columns, str) else list(columns)
    if not names:
        raise InvalidArgument("export_columns needs at least one column")
    have = df.columns
    for c in names:
        if c not in have:
            raise UnknownName(f"the DataFrame has no column {c!r} (it has {', '.join(have)})")
    if not load(spark):
        raise NotSupported(f"{CLASS} is not on the session's class path and {JAR_NAME} could not be "
                           "added (build the package with Maven and a JDK, or start the session "
                           "with slash.spark.session())")
    root = export_root(spark, directory)
    out = ExportResult(os.path.join(root, f"slash-export-{secrets.token_hex(6)}"))
    selected = df.select(*[F.col(_quoted(c)) for c in names])
    exporter = spark.sparkContext._jvm.io.slash.spark.ArrowExport
    sc = spark.sparkContext
    sc.setJobDescription(f"slash: Arrow export of {len(names)} columns")
    t0 = time.perf_counter()
    try:
        text = exporter.export(selected._jdf, out.directory, batch_rows)
    except Exception as e:
        out.cleanup()
        _raise_refusal(e)
        raise
    finally:
        sc.setJobDescription(None)
    out.seconds = time.perf_counter() - t0
    out.parts = [ExportedFile(**p) for p in json.loads(text)]
    log.info("jvm_export: %d rows of %d partitions as Arrow files in %s in %.2f s", out.rows,
             len(out.parts), out.directory, out.seconds)
    return out


def _raise_refusal(exc: BaseException) -> None:
    """A column the export refuses (Java's IllegalArgumentException, thrown
    before the job starts, which pyspark raises as its own) as a SchemaError
    naming it; anything else returns."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if _REFUSAL in text:
        raise SchemaError(text[text.index("column '"):] if "column '" in text else text) from None


#: what io.slash.spark.ArrowExport says of a column whose type it does not take
_REFUSAL = "which the Arrow export does not take"
