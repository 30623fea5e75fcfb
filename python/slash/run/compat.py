"""What combines with what: one table of entry point x query kind x feature.

Each cell is either supported or a refusal whose reason says why the
semantics of the query (or of the entry point's input) forbid it. The
refusals :func:`slash.runner.run` raises come from here (:func:`check`), and
``docs/compatibility.md`` is generated from the same table (:func:`markdown`;
``python -m slash.run.compat > docs/compatibility.md``), so the two cannot
drift apart (tests/test_compat.py compares them).

A feature is supported in a cell when it works with every other feature the
cell's row supports, except the combinations :data:`COMBINATIONS` lists,
each with its reason.
"""
from __future__ import annotations

import sys
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

from slash.errors import InvalidArgument, NotSupported

#: entry points: name -> how users call it
ENTRIES: Dict[str, str] = {
    "run": "`slash.runner.run` / `slash run`",
    "spark.window_aggregate": "`slash.spark.window_aggregate`",
    "spark.window_join": "`slash.spark.window_join`",
    "spark.stream": "`slash.spark.stream`",
}

KINDS = ("aggregation", "join")

#: features: name -> how users ask for it
FEATURES: Dict[str, str] = {
    "checkpoint": "checkpoint (`checkpoint=`)",
    "live_scale": "live scale within `max_executors`",
    "rescale": "rescale beyond it (by restart from a checkpoint)",
    "rebalance": "rebalance (move partition leadership)",
    "update": "update (change filters / aggregates while running)",
    "late_output": "late output (`late_output=`)",
    "rate": "rate / realtime pacing (`rate=`, `realtime=`)",
    "latency_target": "latency target (`latency_target=`)",
    "sink": "Kafka sink (`sink=`: exactly once with a checkpoint, else at least once)",
}

SUPPORTED = None  # a cell's value when the feature works there

# reasons shared by several cells
_BATCH = ("a Spark batch job reads a bounded DataFrame once in one barrier stage of a fixed "
          "size, chosen by Spark's task slots; {what}")
_JOIN_UPDATE = ("a window join has no filters or aggregates to change: update changes a window "
                "aggregation's filters from a window boundary on")
_JOIN_LATENCY = ("the latency controller steers by what each rank reports while it runs: the "
                 "windows it fired with their emit times, and how far its input, paced by "
                 "event time (realtime=True), lags the clock; a join's ranks neither pace "
                 "their two merged inputs by event time nor report fired windows")
_JOIN_LATE = ("late_output= writes the late rows of one input as one table; a join's late rows "
              "come from two inputs with different columns (they are counted in late_records "
              "and warned about)")

#: (entry, kind, feature) -> None (supported) or the reason it is refused
TABLE: Dict[Tuple[str, str, str], Optional[str]] = {}


def _row(entry: str, kind: str, **cells: Optional[str]) -> None:
    assert set(cells) == set(FEATURES), set(FEATURES) ^ set(cells)
    for feature, reason in cells.items():
        TABLE[(entry, kind, feature)] = reason


_row("run", "aggregation", checkpoint=SUPPORTED, live_scale=SUPPORTED, rescale=SUPPORTED,
     rebalance=SUPPORTED, update=SUPPORTED, late_output=SUPPORTED, rate=SUPPORTED,
     latency_target=SUPPORTED, sink=SUPPORTED)
_row("run", "join", checkpoint=SUPPORTED, live_scale=SUPPORTED, rescale=SUPPORTED,
     rebalance=SUPPORTED, update=_JOIN_UPDATE, late_output=_JOIN_LATE, rate=SUPPORTED,
     latency_target=_JOIN_LATENCY, sink=SUPPORTED)
for _kind, _entry in (("aggregation", "spark.window_aggregate"), ("join", "spark.window_join")):
    _row(_entry, _kind, checkpoint=SUPPORTED,
         live_scale=_BATCH.format(what="its group does not change while the stage runs"),
         rescale=_BATCH.format(what="a retried stage resumes its checkpoint with the executor "
                                    "count Spark gives it"),
         rebalance=_BATCH.format(what="it has no control socket while it runs"),
         update=_BATCH.format(what="the query is fixed for that one pass"),
         late_output=_BATCH.format(what="every record of a bounded input is applied whatever "
                                        "its layout, so none is late"),
         rate=_BATCH.format(what="it reads as fast as it can; pacing belongs to a stream"),
         latency_target=_BATCH.format(what="a bounded input has no window latency to steer"),
         sink=_BATCH.format(what="its result is a DataFrame, which Spark's own writers "
                                 "(`df.write`, Spark's Kafka sink) take where it should go"))
_row("spark.stream", "aggregation", checkpoint=SUPPORTED,
     live_scale=("a Spark stream runs as one barrier stage whose tasks hold their slots; its "
                 "group changes size by restarting the stage from a checkpoint (rescale)"),
     rescale=SUPPORTED, rebalance=SUPPORTED, update=SUPPORTED, late_output=SUPPORTED,
     rate=SUPPORTED, sink=SUPPORTED,
     latency_target=("the latency controller scales a group by checkpoint and restart or live "
                     "within provisioned processes; a Spark stream's slots are Spark's, so its "
                     "executor count is set by scale_out/scale_in (rescale), not by a target"))
for _entry, _kind, _other in (
        ("spark.stream", "join", "a join over Spark is slash.spark.window_join (a batch job)"),
        ("spark.window_aggregate", "join", "a join over Spark is slash.spark.window_join"),
        ("spark.window_join", "aggregation",
         "an aggregation over Spark is slash.spark.window_aggregate")):
    _row(_entry, _kind, **{f: f"{ENTRIES[_entry].strip('`')} runs one kind of query; {_other}"
                           for f in FEATURES})

#: (entry, kind, features) -> why that combination of supported features is refused
COMBINATIONS: Dict[Tuple[str, str, FrozenSet[str]], str] = {}


def reason(entry: str, kind: str, feature: str) -> Optional[str]:
    """None if ``feature`` is supported at ``entry`` for ``kind``, else why not."""
    key = (entry, kind, feature)
    if key not in TABLE:
        raise InvalidArgument(f"no compatibility cell for entry {entry!r}, kind {kind!r}, "
                              f"feature {feature!r}")
    return TABLE[key]


def check(entry: str, kind: str, features: Iterable[str]) -> None:
    """Raises :class:`NotSupported` with the table's reason when a feature in
    ``features`` is refused at ``entry`` for ``kind``, or a combination of
    them is (:data:`COMBINATIONS`)."""
    wanted = frozenset(features)
    for feature in FEATURES:  # in the table's order: the same message every time
        if feature in wanted:
            why = reason(entry, kind, feature)
            if why is not None:
                raise NotSupported(f"{FEATURES[feature]} with {_a(kind)} in {_plain(entry)}: "
                                   f"{why}")
    for (e, k, combo), why in COMBINATIONS.items():
        if e == entry and k == kind and combo <= wanted:
            names = " with ".join(FEATURES[f] for f in FEATURES if f in combo)
            raise NotSupported(f"{names} in {_a(kind)} ({_plain(entry)}): {why}")


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _plain(entry: str) -> str:
    return ENTRIES[entry].replace("`", "")


def markdown() -> str:
    """docs/compatibility.md: the table, then the refused combinations."""
    out: List[str] = [
        "# What combines with what",
        "",
        "Generated from `python/slash/run/compat.py` (`python -m slash.run.compat > "
        "docs/compatibility.md`); the refusals the code raises come from the same table. "
        "\"yes\": supported, and combines with every other \"yes\" of its row except the "
        "combinations listed below; \"no (n)\": refused, for reason n.",
        "",
    ]
    reasons: List[str] = []
    header = ["entry point", "query"] + [FEATURES[f] for f in FEATURES]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    for entry in ENTRIES:
        for kind in KINDS:
            row = [ENTRIES[entry], kind]
            for feature in FEATURES:
                why = TABLE[(entry, kind, feature)]
                if why is None:
                    row.append("yes")
                    continue
                if why not in reasons:
                    reasons.append(why)
                row.append(f"no ({reasons.index(why) + 1})")
            out.append("| " + " | ".join(row) + " |")
    out += ["", "## Why a cell says no", ""]
    out += [f"{i}. {why}" for i, why in enumerate(reasons, 1)]
    out += ["", "## Combinations refused", ""]
    for (entry, kind, combo), why in COMBINATIONS.items():
        names = " + ".join(FEATURES[f] for f in FEATURES if f in combo)
        out.append(f"- {ENTRIES[entry]}, {kind}: {names}. {why}")
    if not COMBINATIONS:
        out.append("None: in every row, each \"yes\" combines with every other \"yes\".")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
