"""A DataFrame that is a Parquet scan joined to a table Spark broadcasts
(a star schema's fact and dimension: ``events.join(broadcast(campaigns),
"ad_id")``), read as a scan.

Spark's own plan for it reads the files, ships the small side to every task
and probes it per row; the join adds no shuffle. Slash does the same
without the rows passing through the JVM: the large side is a scan
(:func:`slash.spark.dataframe.file_scan`: its files, its filters), the
small side is computed by Spark once and collected as Arrow, and the
executors join each batch they read to it
(:class:`slash.sources.joined.JoinedFileSource`).

Taken only where that keeps Spark's answer: an inner join on one column of
each side compared with ``=`` (Catalyst's EqualTo of two columns, no cast,
no float normalisation), the side Spark broadcasts holding each key once
(a repeated key would repeat the scan's row), every column the query reads
coming from one side or the other (not computed above the join), and the
time column from the scan. Anything else raises
:class:`~slash.spark.dataframe.NotAScan` saying why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from slash.sources.joined import Lookup
from slash.spark.catalyst import (conjuncts, executed_nodes, follow_aliases, frame_of, name_of,
                                  output_names, seq, shape)
from slash.spark.dataframe import NotAScan, ScanInput, file_scan

#: Arrow bytes of the broadcast side above which it is not copied into every
#: Slash task (Spark's own broadcast of it is bounded by
#: spark.sql.autoBroadcastJoinThreshold or the user's hint)
MAX_BROADCAST_BYTES = 256 << 20


@dataclass(frozen=True)
class BroadcastScan:
    """The large side as a scan, the small side's rows, and where each of
    the query's columns comes from (the DataFrame's name -> the joined
    source's column: a file column, or an added one, named ``NAME#broadcast``)."""

    scan: ScanInput
    lookup: Lookup
    columns: Dict[str, str]


class NotAJoin(NotAScan):
    """The plan has no join at its top: the scan's own reason stands."""


def _build_side(df: Any) -> str:
    """'left' or 'right': the side Spark's plan broadcasts."""
    for n in executed_nodes(df):
        kind = name_of(n)
        if kind == "BroadcastHashJoinExec":
            return "right" if name_of(n.buildSide()) == "BuildRight" else "left"
        if kind.endswith("JoinExec"):
            raise NotAScan(f"Spark joins it by a {kind[:-4]}, broadcasting neither side (both are "
                           "too large for spark.sql.autoBroadcastJoinThreshold and no hint asks)")
    raise NotAScan("Spark's executed plan has no broadcast join")


def broadcast_scan(df: Any, columns: Sequence[str], time: str) -> BroadcastScan:
    """``df`` as a scan joined to its broadcast side, for a query that reads
    ``columns`` with time column ``time``; :class:`NotAScan` says why not."""
    plan = df._jdf.queryExecution().optimizedPlan()
    projects: List[Any] = []
    node = plan
    while name_of(node) == "Project":
        projects.append(node)
        node = node.child()
    if name_of(node) != "Join":
        raise NotAJoin(f"its plan is {shape(plan)}, neither a file scan under filters and "
                       "projections nor one joined to a broadcast table")
    kind = name_of(node.joinType())
    if kind != "Inner":
        raise NotAScan(f"its join is {kind}: Slash joins a scan to a broadcast table as an inner "
                       "join only")
    cond = node.condition()
    parts = conjuncts(cond.get()) if cond.isDefined() else []
    if len(parts) != 1 or name_of(parts[0]) != "EqualTo" or \
            any(name_of(x) != "AttributeReference" for x in (parts[0].left(), parts[0].right())):
        said = cond.get().sql() if cond.isDefined() else "none"
        raise NotAScan(f"its join condition ({said}) is not one column of each side compared "
                       "with =")
    large, small = (node.left(), node.right()) if _build_side(df) == "right" \
        else (node.right(), node.left())
    large_ids, small_ids = output_names(large), output_names(small)
    a, b = parts[0].left(), parts[0].right()
    if a.exprId().id() not in large_ids:
        a, b = b, a
    if a.exprId().id() not in large_ids or b.exprId().id() not in small_ids:
        raise NotAScan(f"its join condition ({parts[0].sql()}) does not compare a column of each side")
    on, key = large_ids[a.exprId().id()], small_ids[b.exprId().id()]
    # the query's columns, through the projections above the join: (side, the side's name)
    side: Dict[int, Tuple[str, str]] = {i: ("large", n) for i, n in large_ids.items()}
    side.update((i, ("small", n)) for i, n in small_ids.items())
    for p in reversed(projects):
        follow_aliases(p, side)
    out = {x.name(): x for x in seq(plan.output())}
    from_large: Dict[str, str] = {}
    from_small: Dict[str, str] = {}
    for c in columns:
        x = out.get(c)
        got = side.get(x.exprId().id()) if x is not None else None
        if got is None:
            raise NotAScan(f"column {c!r} is computed by Spark above the join")
        (from_large if got[0] == "large" else from_small)[c] = got[1]
    if time not in from_large:
        raise NotAScan(f"time column {time!r} comes from the broadcast side")
    scan = file_scan(frame_of(df, large), list(dict.fromkeys([*from_large.values(), on])),
                     null_free=[on])
    # (a key that repeats is refused by the joined source, which the caller turns into NotAScan)
    table = _collect(frame_of(df, small), [key, *from_small.values()])
    # the added columns under names no file column has (the result gets the DataFrame's back)
    added = {c: f"{c}#broadcast" for c in from_small}
    lookup = Lookup(table, scan.columns[on], "c0",
                    tuple((f"c{i + 1}", added[c]) for i, c in enumerate(from_small)))
    mapping = {c: scan.columns[f] for c, f in from_large.items()}
    mapping.update(added)
    return BroadcastScan(scan, lookup, mapping)


def _collect(frame: Any, names: Sequence[str]) -> Any:
    """``frame``'s columns ``names`` as an Arrow table with columns c0, c1, ..."""
    from pyspark.sql import functions as F  # optional dependency

    picked = frame.select(*(F.col(f"`{n}`").alias(f"c{i}") for i, n in enumerate(names)))
    table = picked.toArrow()
    if table.nbytes > MAX_BROADCAST_BYTES:
        raise NotAScan(f"its broadcast side holds {table.nbytes >> 20} MiB, more than Slash copies "
                       f"into every executor ({MAX_BROADCAST_BYTES >> 20} MiB)")
    return table
