"""What Slash reads of a Spark DataFrame, decided by the DataFrame's plan.

* **A file scan** (:func:`file_scan`): the optimized logical plan is a
  Parquet relation under ``Filter`` and ``Project`` nodes only (a
  ``spark.read.parquet``, a table, a view of either, filtered and
  projected). Slash reads the files Spark's own scan would read, after
  Spark's partition pruning (a Hive layout's partition filters, whatever
  their form), and applies the Filter conjuncts over data columns itself, as
  :class:`slash.query.Filter` predicates: no row passes through the JVM.
  A conjunct Slash cannot express with Spark's meaning, a column computed
  by Spark, or a type Spark reads otherwise than pyarrow makes the
  DataFrame no scan, and the reason says which.
* **A union of file scans** (``df1.union(df2)``, ``unionByName``): each
  input a file scan as above, reading the query's columns from file columns
  of the same names; Slash reads all their files as one scan, each file's
  rows under its input's filters. Inputs that compute a column, cast one (a
  union of columns of different types) or read it from file columns of
  different names are no scan, and the reason says which.
* **Anything else** (a join's output, a union, a UDF's output, a cached or
  in-memory DataFrame): the rows Spark computes, with the query's filters
  (:func:`spark_filter`) and column selection applied in Spark before any
  row is handed over (:func:`general_input`), only the columns the query
  names looked at.

Invariant: either way the answer is that of Spark's own query on the same
DataFrame; a conjunct is translated only when Slash's predicate keeps
exactly the rows Spark's keeps (nulls never pass either; a float column's
NaN is larger than any number in Spark, so ``>``, ``>=`` and ``!=`` on a
float column are left to Spark).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import unquote, urlparse

from slash.errors import NotSupported, SchemaError
from slash.filters import Filter
from slash.sources import FileSource
from slash.sources.union import KEEPS, UnionFileSource, keeps_filter
from slash.spark import jvm_export
from slash.spark.catalyst import (children, conjuncts, executed_nodes, follow_aliases, frame_of,
                                  name_of, output_names, seq, shape)
from slash.state_config import Aggregate

log = logging.getLogger(__name__)

#: Catalyst comparison classes -> Slash's operator, and the operator with the sides swapped
_COMPARISONS = {"EqualTo": "==", "LessThan": "<", "LessThanOrEqual": "<=", "GreaterThan": ">",
                "GreaterThanOrEqual": ">="}
_SWAPPED = {"==": "==", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
#: operators a NaN in a float column passes in Spark (NaN is the largest value) but not in Arrow
_NAN_PASSES = {">", ">=", "!="}
#: the file indexes whose listing is exactly the files under their root paths
#: (a streaming sink's MetadataLogFileIndex lists only committed files: no)
_PLAIN_INDEXES = {"InMemoryFileIndex", "CatalogFileIndex", "PrunedInMemoryFileIndex"}
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def spark_filter(f: Filter) -> Any:
    """A Slash filter as a Spark Column with the same rows kept."""
    from pyspark.sql import functions as F  # optional dependency

    c = F.col(f.column)
    if f.op == "in":
        return c.isin(list(f.values))
    return {"==": c == f.value, "!=": c != f.value, "<": c < f.value, "<=": c <= f.value,
            ">": c > f.value, ">=": c >= f.value}[f.op]


@dataclass(frozen=True)
class ScanInput:
    """A DataFrame that is a Parquet scan: the files Spark would read (after
    partition pruning), the directory their Hive partitions are relative to
    (None: no partitions), and the plan's filters over data columns."""

    files: Tuple[str, ...]
    base: Optional[str]
    filters: Tuple[Filter, ...]
    pruned_by_spark: int = 0  # conjuncts over partition columns only: decided per file by Spark
    columns: Dict[str, str] = field(default_factory=dict)  # DataFrame column -> file column
    inputs: int = 1  # the scans read: more than one for a union of scans
    #: a union whose inputs filter differently: each input's files and the
    #: filters of its own (beyond ``filters``), else empty
    parts: Tuple[Tuple[Tuple[str, ...], Tuple[Filter, ...]], ...] = ()

    def source(self, columns: Sequence[str], dictionary: Sequence[str] = ()) -> FileSource:
        """The files as the FileSource of ``columns`` (the files' names: the
        files need agree on these alone, as the inputs of a union written
        apart do), ``dictionary`` as FileSource takes it (with the string
        columns only the union's inputs filter on); NotAScan when they do not
        read as one table."""
        try:
            if not self.parts:
                return FileSource(list(self.files), base=self.base, columns=list(columns),
                                  dictionary=dictionary)
            columns = [c for c in columns if c != KEEPS]  # (the union's own column)
            own = [f.column for _, fs in self.parts for f in fs if f.column not in columns]
            return UnionFileSource(self.parts, base=self.base,
                                   columns=list(dict.fromkeys([*columns, *own])),
                                   dictionary=[c for c in dict.fromkeys([*dictionary, *own])
                                               if c != KEEPS])
        except SchemaError as e:
            raise NotAScan(f"its files do not read as one table: {e}") from None

    @property
    def selection(self) -> Tuple[Filter, ...]:
        """The filters a query over :meth:`source` adds to its own: for a
        union whose inputs filter differently, the one that folds only the
        rows their filters keep (:func:`slash.sources.union.keeps_filter`)."""
        return (keeps_filter(),) if self.parts else ()

    @property
    def what(self) -> str:
        """The scan as a log line names it."""
        if self.inputs == 1:
            return "a Parquet scan"
        own = sum(len(fs) for _, fs in self.parts)
        return (f"a union of {self.inputs} Parquet scans" +
                (f" ({own} filter(s) of its inputs' own applied to their files)" if own else ""))

    @property
    def renamed(self) -> bool:
        return any(k != v for k, v in self.columns.items())


class NotAScan(Exception):
    """Why a DataFrame's plan is not a file scan Slash reads itself."""


def _local_path(uri: str) -> str:
    if uri.startswith("file:"):
        return unquote(urlparse(uri).path)
    if "://" in uri or ":" in uri.split("/", 1)[0]:
        raise NotAScan(f"its files are on {uri.split(':', 1)[0]}:, not a local file system")
    return uri


class _Attrs:
    """The relation's columns by expression id, and the aliases of them that
    Project nodes make (a rename keeps the file column)."""

    def __init__(self, relation: Any) -> None:
        self.by_id: Dict[int, str] = output_names(relation)

    def add_project(self, project: Any) -> None:
        follow_aliases(project, self.by_id)

    def column(self, attr: Any) -> Optional[str]:
        if name_of(attr) != "AttributeReference":
            return None
        return self.by_id.get(attr.exprId().id())


def _literal(lit: Any) -> Tuple[bool, Any]:
    """(ok, the Python value of a Catalyst literal), for the types a filter
    takes with Spark's meaning; a null literal is not taken."""
    if name_of(lit) != "Literal" or lit.value() is None:
        return False, None
    t = name_of(lit.dataType())
    v = lit.value()
    if t == "StringType":
        return True, v.toString()
    if t in ("ByteType", "ShortType", "IntegerType", "LongType"):
        return True, int(v)
    if t in ("FloatType", "DoubleType"):
        x = float(v)
        return x == x, x  # a NaN literal: Spark's NaN = NaN holds, Arrow's does not
    if t == "BooleanType":
        return True, bool(v)
    if t == "DateType":
        return True, _dt.date(1970, 1, 1) + _dt.timedelta(days=int(v))
    if t == "TimestampType":
        return True, _EPOCH + _dt.timedelta(microseconds=int(v))
    if t == "TimestampNTZType":
        return True, (_EPOCH + _dt.timedelta(microseconds=int(v))).replace(tzinfo=None)
    return False, None


def _is_float(schema: Any, column: str) -> bool:
    return name_of(schema.apply(column).dataType()) in ("FloatType", "DoubleType")


def _translate(expr: Any, attrs: _Attrs, schema: Any) -> Optional[Filter]:
    """A conjunct as a Slash filter keeping the same rows, or None."""
    kind = name_of(expr)
    if kind == "Not" and name_of(expr.child()) == "EqualTo":
        f = _translate(expr.child(), attrs, schema)
        return None if f is None or _is_float(schema, f.column) else Filter(f.column, "!=", f.value)
    if kind in _COMPARISONS:
        op = _COMPARISONS[kind]
        col, (ok, value) = attrs.column(expr.left()), _literal(expr.right())
        if col is None:
            col, (ok, value), op = attrs.column(expr.right()), _literal(expr.left()), _SWAPPED[op]
        if col is None or not ok or (op in _NAN_PASSES and _is_float(schema, col)):
            return None
        return Filter(col, op, value)
    if kind in ("In", "InSet"):
        col = attrs.column(expr.child() if kind == "InSet" else expr.value())
        if col is None:
            return None
        if kind == "In":
            lits = [_literal(e) for e in seq(expr.list())]
            if not lits or not all(ok for ok, _ in lits):
                return None
            return Filter(col, "in", tuple(v for _, v in lits))
        return None  # InSet holds Catalyst's internal values: left to Spark
    return None


def _references(expr: Any) -> List[int]:
    refs = expr.references().toSeq()
    return [refs.apply(i).exprId().id() for i in range(refs.size())]


def _scan_node(df: Any) -> Any:
    """The FileSourceScanExec of ``df``'s executed plan."""
    for n in executed_nodes(df):
        if name_of(n) == "FileSourceScanExec":
            return n
    raise NotAScan("Spark's executed plan has no file scan")


def file_scan(df: Any, columns: Sequence[str], null_free: Sequence[str] = ()) -> ScanInput:
    """``df`` as the Parquet files and filters Slash reads itself, for a
    query that reads ``columns`` (names of ``df``). Raises :class:`NotAScan`
    saying why when the plan is not a Parquet scan under Filter and Project
    nodes that Slash can take with Spark's meaning, nor a union of such
    scans (:func:`_union_scan`). ``null_free``: columns
    whose nulls the caller drops itself (a join key: null matches nothing),
    so that the plan's IsNotNull on them needs no predicate of its own."""
    plan = df._jdf.queryExecution().optimizedPlan()
    if name_of(plan) == "Union":
        return _union_scan(df, plan, columns, null_free)
    projects, filters = [], []
    node = plan
    while name_of(node) in ("Project", "Filter"):
        (projects if name_of(node) == "Project" else filters).append(node)
        node = node.child()
    if name_of(node) != "LogicalRelation":
        raise NotAScan(f"its plan is {shape(plan)}, not a file scan under filters and projections")
    rel = node.relation()
    if name_of(rel) != "HadoopFsRelation":
        raise NotAScan(f"it reads a {name_of(rel)}, not files")
    fmt = name_of(rel.fileFormat())
    if fmt != "ParquetFileFormat":
        raise NotAScan(f"its files are {fmt.replace('FileFormat', '')}, not Parquet")
    if not rel.bucketSpec().isEmpty():
        raise NotAScan("it is a bucketed table")
    index = name_of(rel.location())
    if index not in _PLAIN_INDEXES:
        raise NotAScan(f"its files are listed by a {index}")
    attrs = _Attrs(node)
    for p in reversed(projects):  # bottom-up: an alias of an alias is still the file's column
        attrs.add_project(p)
    out = {a.name(): a for a in seq(plan.output())}
    mapping: Dict[str, str] = {}
    for c in columns:
        a = out.get(c)
        src = attrs.column(a) if a is not None else None
        if src is None:
            raise NotAScan(f"column {c!r} is computed by Spark, not read from the files")
        mapping[c] = src
    part_names = set(rel.partitionSchema().fieldNames())
    part_ids = {i for i, n in attrs.by_id.items() if n in part_names}
    rel_schema = node.schema()
    slash_filters: List[Filter] = []
    not_null: List[Any] = []  # IsNotNull conjuncts: implied when a predicate covers the column
    pruned = 0
    for f in filters:
        for e in conjuncts(f.condition()):
            refs = _references(e)
            if refs and all(r in part_ids for r in refs):
                pruned += 1  # Spark's partition pruning decides it per file
                continue
            if name_of(e) == "IsNotNull":
                not_null.append(e)  # every translated predicate drops nulls
                continue
            t = _translate(e, attrs, rel_schema)
            if t is None:
                raise NotAScan(f"Slash cannot keep the rows of Spark's condition {e.sql()} with its "
                               "meaning")
            slash_filters.append(t)
    covered = {f.column for f in slash_filters} | {mapping.get(c, c) for c in null_free}
    for e in not_null:  # a bare IsNotNull (the user's isNotNull()) must be covered by a predicate
        if attrs.column(e.child()) not in covered:
            raise NotAScan(f"Slash cannot keep the rows of Spark's condition {e.sql()}")
    scan = _scan_node(df)
    files: List[str] = []
    for d in seq(scan.selectedPartitions().partitionDirectories()):
        for fs in seq(d.files()):
            files.append(_local_path(fs.getPath().toString()))
    roots = [_local_path(p.toString()) for p in seq(rel.location().rootPaths())]
    base = None
    if part_names:
        if len(roots) != 1 or not os.path.isdir(roots[0]):
            raise NotAScan("its partitioned files have more than one root directory")
        base = roots[0]
    return ScanInput(tuple(files), base, tuple(slash_filters), pruned, mapping)


def _union_scan(df: Any, plan: Any, columns: Sequence[str], null_free: Sequence[str]) -> ScanInput:
    """A Union (``df1.union(df2)``, ``unionByName``: Spark pushes the filters
    and projections above it into its inputs) whose every input is a file
    scan (:func:`file_scan`, each with its own pruning and filters) reading
    each of the query's columns from a file column of the same name: the
    files of all of them, read as one scan (Spark's union keeps every row of
    every input: a file two inputs read is read twice). The filters every
    input has are the scan's; those of some inputs only go with their files
    (``parts``: :class:`slash.sources.union.UnionFileSource` applies them)."""
    out = [a.name() for a in seq(plan.output())]
    wanted = list(dict.fromkeys([*columns, *null_free]))
    for c in wanted:
        if out.count(c) != 1:
            raise NotAScan(f"its union has {out.count(c)} columns named {c!r}")
    branches: List[ScanInput] = []
    for i, child in enumerate(children(plan)):
        names = [a.name() for a in seq(child.output())]
        mine = {c: names[out.index(c)] for c in wanted}  # a union matches columns by position
        if any(names.count(n) != 1 for n in mine.values()):
            raise NotAScan(f"input {i + 1} of its union names a column twice")
        try:
            got = file_scan(frame_of(df, child), [mine[c] for c in columns],
                            [mine[c] for c in null_free])
        except NotAScan as e:
            raise NotAScan(f"input {i + 1} of its union is no scan Slash reads itself: {e}") from None
        branches.append(dataclasses.replace(got, columns={c: got.columns[mine[c]] for c in columns}))
    first = branches[0]
    for b in branches[1:]:
        if b.columns != first.columns:
            c = next(c for c in columns if b.columns[c] != first.columns[c])
            raise NotAScan(f"the inputs of its union read column {c!r} from file columns named "
                           f"differently ({first.columns[c]!r}, {b.columns[c]!r})")
    bases = {b.base for b in branches if b.base is not None}
    if len(bases) > 1:
        raise NotAScan(f"the inputs of its union are Hive layouts under {len(bases)} directories")
    # each input's files and all of its filters (an input that is a union itself: its own inputs)
    parts = [(files, b.filters + own) for b in branches
             for files, own in (b.parts or ((b.files, ()),))]
    common = [f for f in parts[0][1] if all(f in fs for _, fs in parts[1:])]
    own = tuple((files, tuple(f for f in fs if f not in common)) for files, fs in parts)
    return ScanInput(tuple(f for b in branches for f in b.files), bases.pop() if bases else None,
                     tuple(common), sum(b.pruned_by_spark for b in branches), first.columns,
                     sum(b.inputs for b in branches),
                     own if any(fs for _, fs in own) else ())


def _said(filters: Sequence[Filter]) -> str:
    return " and ".join(f"{f.column} {f.op} {f.value!r}" for f in filters) or "none"


def check_columns(df: Any, columns: Sequence[str]) -> None:
    """SchemaError naming a column the query reads that ``df`` lacks."""
    have = set(df.columns)
    missing = [c for c in columns if c not in have]
    if missing:
        raise SchemaError(f"column {missing[0]!r} is missing from the DataFrame (it has {df.columns})")


@dataclass(frozen=True)
class StructKey:
    """A struct key column as flat key columns ``NAME__FIELD`` (one per
    field) and ``NAME__null`` (true where the struct itself is null: Spark
    groups a null struct apart from a struct of nulls)."""

    name: str
    fields: Tuple[str, ...]

    @property
    def flat(self) -> Tuple[str, ...]:
        return tuple(f"{self.name}__{f}" for f in self.fields) + (f"{self.name}__null",)


def struct_keys(df: Any, key: Sequence[str]) -> List[StructKey]:
    """The key columns of ``df`` that are structs (Spark groups by a
    struct's value: Slash by its fields and whether it is null)."""
    from pyspark.sql.types import StructType  # optional dependency

    have = set(df.columns)  # a missing one is named by check_columns
    return [StructKey(k, tuple(df.schema[k].dataType.fieldNames())) for k in key
            if k in have and isinstance(df.schema[k].dataType, StructType)]


def flat_key(key: Sequence[str], structs: Sequence[StructKey]) -> List[str]:
    """The query's key with each struct column replaced by its flat columns."""
    by = {s.name: s for s in structs}
    return [c for k in key for c in (by[k].flat if k in by else (k,))]


def flatten_structs(df: Any, structs: Sequence[StructKey]) -> Any:
    from pyspark.sql import functions as F  # optional dependency

    for s in structs:
        for f, flat in zip(s.fields, s.flat):
            df = df.withColumn(flat, F.col(s.name)[f])
        df = df.withColumn(s.flat[-1], F.col(s.name).isNull()).drop(s.name)
    return df


def rebuild_structs(result: Any, structs: Sequence[StructKey], key: Sequence[str]) -> Any:
    """A result's flat struct key columns as the struct columns again, in
    the key's place (a null struct where ``NAME__null`` is true)."""
    from pyspark.sql import functions as F  # optional dependency

    if not structs:
        return result
    by = {s.name: s for s in structs}
    flat = {c for s in structs for c in s.flat}

    def col(name: str) -> Any:
        return F.col(f"`{name}`")

    cols: List[Any] = []
    for c in result.columns:
        if c in flat:
            continue
        if c == "window_end":
            cols.append(col(c))
            for k in key:
                if k in by:
                    s = by[k]
                    value = F.struct(*(col(x).alias(f) for f, x in zip(s.fields, s.flat)))
                    cols.append(F.when(col(s.flat[-1]), F.lit(None)).otherwise(value).alias(k))
                else:
                    cols.append(col(k))
            continue
        if c in key:
            continue
        cols.append(col(c))
    return result.select(*cols)


def general_input(df: Any, time: str, columns: Sequence[str], filters: Sequence[Filter]) -> Any:
    """The DataFrame whose rows go to the general path: the query's filters
    applied by Spark (before the transfer, pushed into its scan where it
    can), only ``columns`` kept, and a string time column cast to a
    timestamp in the session time zone, as Spark's ``window()`` casts it."""
    from pyspark.sql import functions as F  # optional dependency
    from pyspark.sql.types import StringType

    for f in filters:
        df = df.where(spark_filter(f))
    df = df.select(*columns)
    if isinstance(df.schema[time].dataType, StringType):
        df = df.withColumn(time, F.col(time).cast("timestamp"))
    return df


def join_input(spark: Any, df: Any, side: str, columns: Sequence[str], time: str,
               directory: str) -> Tuple[Any, Optional[str]]:
    """One side of a join given as a DataFrame, as a FileSource: the files
    of a Parquet scan without data filters (the join carries no filter;
    Spark's partition pruning applies), else the rows Spark computes written
    as Parquet under ``directory`` (removed by the caller), only ``columns``
    kept and a string time column cast as Spark's ``window()`` casts it:
    as Arrow files by the Spark tasks computing them when the session has
    the exporter (:mod:`slash.spark.jvm_export`), else as Parquet under
    ``directory``. Returns (source, the directory the caller removes after
    the join, None for the scan's own files); says at WARNING level which
    way and why."""

    check_columns(df, columns)
    if type(df.schema[time].dataType).__name__ == "StringType":
        why = f"time column {time!r} is a string, which Spark casts to a timestamp first"
    else:
        try:
            scan = file_scan(df, columns)
            if scan.filters or scan.parts:
                raise NotAScan("its plan filters rows, which a join's own read does not")
            if not scan.files:
                raise NotAScan("Spark's partition pruning leaves no file to read")
            if scan.renamed:
                raise NotAScan("it renames columns of its files, which a join's own read does not")
            src = scan.source(columns)
            log.warning("slash.spark.window_join: the %s DataFrame is %s of %d file(s), read by the "
                        "Slash executors themselves", side, scan.what, len(scan.files))
            return src, None
        except NotAScan as e:
            why = str(e)

    frame = general_input(df, time, columns, ())
    if jvm_export.wanted(spark):
        try:
            out = jvm_export.export_columns(spark, frame, frame.columns)
        except (SchemaError, NotSupported) as e:
            log.info("slash.spark.window_join: the JVM export does not take the %s DataFrame (%s)",
                     side, e)
        else:
            log.warning("slash.spark.window_join: the %s DataFrame is no scan Slash reads itself (%s): "
                        "written as Arrow files by the Spark tasks computing it", side, why)
            return FileSource(out.files), out.directory
    log.warning("slash.spark.window_join: the %s DataFrame is written as Parquet by Spark first (%s)",
                side, why)
    frame.write.parquet(directory)
    return FileSource(directory), directory


def renamed_query(query: Any, columns: Dict[str, str]) -> Tuple[Any, Dict[str, str]]:
    """``query`` over the files' column names (``columns``: the DataFrame's
    name -> the file's, for every column it reads), and the result's column
    names to give back (the files' query's output name -> the DataFrame's)."""
    def f(c: Optional[str]) -> Optional[str]:
        return None if c is None else columns.get(c, c)

    aggs = tuple(Aggregate(a.kind, f(a.column), a.param) for a in query.aggregates)
    filters = tuple(Filter(f(x.column), x.op, x.value) for x in query.filters)
    names = {a.name: b.name for a, b in zip(query.aggregates, aggs)}
    top = None if query.top is None else (query.top[0], names.get(query.top[1], query.top[1]))
    files = dataclasses.replace(query, time=f(query.time), key=tuple(f(k) for k in query.key),
                                aggregates=aggs, filters=filters, top=top)
    back = {f(k): k for k in query.key}
    back.update((b.name, a.name) for a, b in zip(query.aggregates, files.aggregates))
    return files, back


def renamed_back(result: Any, back: Dict[str, str]) -> Any:
    """The result's columns under the DataFrame's names (all at once: a swap
    of two names holds)."""
    from pyspark.sql import functions as F  # optional dependency

    return result.select(*(F.col(f"`{c}`").alias(back.get(c, c)) for c in result.columns))
