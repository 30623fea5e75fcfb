"""Reading Spark's plans from Python: Catalyst nodes and Scala collections
through py4j, as :mod:`slash.spark.dataframe` and
:mod:`slash.spark.broadcast_scan` walk them. Read-only: nothing here
changes a plan or runs a job."""
from __future__ import annotations

import functools
from typing import Any, Dict, List, TypeVar

V = TypeVar("V")


def name_of(obj: Any) -> str:
    """A JVM object's class name, a Scala object's without its ``$``."""
    return obj.getClass().getSimpleName().rstrip("$")


def children(node: Any) -> List[Any]:
    ch = node.children()
    return [ch.apply(i) for i in range(ch.size())]


def seq(s: Any) -> List[Any]:
    """A Scala Seq or a Java array (py4j) as a list."""
    from py4j.java_collections import JavaArray  # optional dependency (pyspark's)

    if isinstance(s, JavaArray):
        return list(s)
    return [s.apply(i) for i in range(s.size())]


def conjuncts(expr: Any) -> List[Any]:
    """The operands of a condition's top-level ANDs."""
    if name_of(expr) == "And":
        return conjuncts(expr.left()) + conjuncts(expr.right())
    return [expr]


def output_names(plan: Any) -> Dict[int, str]:
    """A plan node's output columns: expression id -> name."""
    return {a.exprId().id(): a.name() for a in seq(plan.output())}


def follow_aliases(project: Any, by_id: Dict[int, V]) -> None:
    """Adds to ``by_id`` the aliases a Project node makes of the columns it
    holds (a rename keeps what the column stands for)."""
    for e in seq(project.projectList()):
        if name_of(e) == "Alias" and name_of(e.child()) == "AttributeReference":
            src = by_id.get(e.child().exprId().id())
            if src is not None:
                by_id[e.exprId().id()] = src


def shape(plan: Any, depth: int = 4) -> str:
    """The plan's top nodes, e.g. 'Aggregate <- Join <- ...' (for the log)."""
    names, node = [], plan
    while node is not None and len(names) < depth:
        names.append(name_of(node))
        ch = children(node)
        node = ch[0] if len(ch) == 1 else None
        if len(ch) > 1:
            names.append(f"({len(ch)} inputs)")
    return " <- ".join(names)


def executed_nodes(df: Any) -> List[Any]:
    """The nodes of ``df``'s executed plan (an adaptive plan's current one), top down."""
    out, todo = [], [df._jdf.queryExecution().executedPlan()]
    while todo:
        n = todo.pop(0)
        if name_of(n) == "AdaptiveSparkPlanExec":
            todo.insert(0, n.executedPlan())
            continue
        out.append(n)
        todo += children(n)
    return out


def frame_of(df: Any, plan: Any) -> Any:
    """A DataFrame of the logical ``plan`` (a node of ``df``'s plan), in
    ``df``'s session: what a subtree of a plan computes on its own."""
    from pyspark.sql import DataFrame  # optional dependency

    spark = df.sparkSession
    cls = functools.reduce(getattr, df._jdf.getClass().getName().split("."), spark._jvm)
    return DataFrame(cls.ofRows(spark._jsparkSession, plan), spark)
