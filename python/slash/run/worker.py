"""The one worker entry: the body of every executor process of a group.

:func:`worker` (what :class:`slash.run.launcher.ProcessGroup` starts) sends its
listener address, receives every rank's, runs :func:`run_rank` and reports
:class:`~slash.run.protocol.Finished` (or the :class:`Error` that stopped
it) to the driver. :func:`run_rank` builds the rank's loop
(:class:`slash.run.rank.RankLoop`) from a :class:`RankSpec` - the same for a
plain run, a checkpointed one, a live-scalable one or both, or a Spark
stream's task (:mod:`slash.run.stream`) - with the features the spec asks
for, as bytewax builds one ``Worker`` from every entry point's settings. A window join runs the same loop with a join's
push over its two inputs merged by time (:mod:`slash.run.recovery.join`,
:mod:`slash.run.live.join`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from slash.run.rank_ckpt import LateRows
from slash.control.logic import ExecutorControl, LogicPlan
from slash.control.moves import MoveRequests
from slash.errors import InvalidArgument
from slash.executor import Executor, GroupConfig
from slash.run.live.join import (SIDES, JoinScaleAgent, JoinScaling, LiveJoinPositions,
                             live_join_items, restored_held)
from slash.run.live.scale import ScaleAgent
from slash.metrics import Reporter
from slash.query import JoinQuery
from slash.run.recovery.join import execute_join_split_checkpointed, join_split_items
from slash.run.ckpt import SharedLink, live_gen
from slash.run.elastic import Pacer, elastic_items
from slash.run.plan import AttemptPlan
from slash.run.protocol import Address, Error, Finished, Resumed
from slash.run.checkpointing import Checkpointing, LivePositions, SplitPositions, restore
from slash.run.features import (Control, FiredWindows, Moves, ProgressReport, Realtime, Report,
                                Scaling)
from slash.run.rank import JoinPush, RankLoop, open_executor, source_time, split_items
from slash.run.resume import left_of, resplit, resumed_counts
from slash.run.stream import StreamPlan, run_stream
from slash.sources import Work, global_units


@dataclasses.dataclass
class RankSpec:
    """What every rank of a group runs: the query over its source (a join's:
    ``(left, right)``) and the features it is run with."""
    query: Any
    source: Any
    group: GroupConfig
    token: str
    #: keep the late rows (``late_output=``; a checkpointed run: ``plan.want_late``)
    want_late: bool = False
    #: live metrics every so many seconds (a checkpointed run: ``plan.live_every``)
    report_every: Optional[float] = None
    #: the control protocol's rank side (updates, rebalance; always with ``active``)
    control: bool = False
    #: records/s: a fixed split's own, a live group's over its active ranks
    #: (a checkpointed run: ``plan.rate`` over the group)
    rate: Optional[float] = None
    #: a live-scalable group: the ranks active at the start
    active: Optional[List[int]] = None
    #: ... and each rank's work in global terms (None: the first split over ``active``)
    works: Optional[List[Work]] = None
    #: the input paced by its event times (wall-clock times)
    realtime: bool = False
    #: a checkpointed group's attempt (:mod:`slash.run.recovery.checkpointed`, :mod:`slash.run.recovery.live`)
    plan: Optional[AttemptPlan] = None
    #: a Spark stream's task (:mod:`slash.run.stream`; its link: the rendezvous connection)
    stream: Optional[StreamPlan] = None


def worker(spec: RankSpec, rank: int, link: Any) -> None:
    """One executor process of a group (see :mod:`slash.run.launcher`)."""
    try:
        lst = Executor.listen(spec.group.transport, token=spec.token)
        link.put(Address(rank, lst.address))
        addresses = link.get(timeout=spec.group.timeout)
        result, m = run_rank(spec, rank, addresses, lst, link)
        lst.close()
        plain = {k: v for k, v in m.items() if isinstance(v, (int, float, str, type(None)))}
        link.put(Finished(rank, result, plain, m.get("late_rows")))
    except BaseException as e:  # the parent raises or recovers, naming the rank
        link.put(Error.of(rank, e))


def run_rank(spec: RankSpec, rank: int, addresses: List[str], listener: Any,
             link: Any) -> Tuple[pa.Table, Dict[str, Any]]:
    """Rank ``rank``'s whole run as ``spec`` says; returns the windows it
    fired (in this attempt) and its metrics. ``link``: its driver's (None: a
    Spark batch task or a benchmark, which take no messages)."""
    if spec.stream is not None:
        return run_stream(spec.stream, rank, addresses, listener, link)
    if isinstance(spec.query, JoinQuery):
        return _run_join(spec, rank, addresses, listener, link)
    query, source, plan, n = spec.query, spec.source, spec.plan, len(addresses)
    active = spec.active
    send: Optional[Callable[[Any], None]] = None
    raw = link  # the control and scale requests' pauses read its connection
    if plan is not None:  # the writer thread reports over it too
        link = SharedLink(link)
    if link is not None:
        send = link.put
    listens = plan is not None or spec.control or active is not None
    ex = open_executor(query, source, rank, addresses, listener, spec.group, spec.token,
                       plan.partitions if plan is not None else spec.group.partitions_for(n))
    with RankLoop(query, source, ex, link if listens else None) as loop:
        ctl = agent = pacer = None
        if spec.control or active is not None:
            ctl = ExecutorControl(send, raw.connection, rank, LogicPlan(query), spec.group.timeout)
        realtime = spec.realtime or (plan is not None and plan.realtime)
        report_every = spec.report_every or (plan.live_every if plan is not None else None)
        if active is not None:
            work = (spec.works[rank] if spec.works is not None else
                    source.work(rank, len(active), query.time) if rank in active else [])
            agent = ScaleAgent(rank, n, work, active, send, raw.connection, spec.group.timeout)
            pacer = Pacer() if realtime else None
        ckpt = None
        if plan is not None:
            ckpt = _resume(spec, loop, n, link, agent)
            if plan.versions:  # agreed before this attempt: the replay follows them too
                if ctl is None:
                    raise InvalidArgument("a checkpointed attempt with logic versions needs the "
                                          "control protocol (RankSpec.control)")
                for v, (start, version_query) in enumerate(plan.versions, 1):
                    ctl.install(ex, start, v, version_query)
            send(Resumed(rank, ckpt.base_records))
        else:
            loop.late = LateRows() if spec.want_late else None
        loop.use(Control(ctl) if ctl is not None else Moves(MoveRequests(send, rank))
                 if plan is not None else None,
                 Scaling(agent, ctl, restored=plan is not None and plan.resume_id is not None)
                 if agent is not None else None,
                 ckpt,
                 ProgressReport(send) if plan is not None else None,
                 Realtime(Pacer()) if realtime and agent is None else None,
                 Report(Reporter(report_every), send) if report_every else None,
                 FiredWindows(send) if report_every and plan is None and
                 (not loop.bounded or pacer is not None) else None)
        if pacer is not None:
            loop.status.append(pacer.snapshot)
        if agent is not None:
            items = elastic_items(loop, agent, spec.rate, pacer)
        elif plan is not None:
            items = split_items(loop, n, ckpt.positions.start, ckpt.positions.work,
                                plan.rate / n if plan.rate else None, fixed=ctl is None,
                                positions=True)
        else:
            items = split_items(loop, n, rate=spec.rate, fixed=ctl is None)
        result = loop.run(items)
        return result, loop.metrics()


def _resume(spec: RankSpec, loop: RankLoop, n: int, link: Any, agent: Any) -> Checkpointing:
    """The restore step of a checkpointed rank: its executor restored from
    the plan's checkpoint, and where its input resumes (its own split's
    position, or work in global terms)."""
    query, source, plan, rank, active = spec.query, spec.source, spec.plan, loop.rank, spec.active
    assert plan is not None
    spread = None if active is None else \
        [sorted(active)[p % len(active)] for p in range(plan.partitions)]
    ck = restore(loop.ex, plan, n, spread)
    base, records = resumed_counts(ck, rank, n)
    if active is not None:  # a live group: positions are the agent's, in global terms
        return Checkpointing(plan, link, LivePositions(agent), base, records)
    time_col = source_time(source, query)
    start: Any = None
    work: Optional[Work] = None  # a FileSource's share of this attempt in global terms
    if ck is not None and ck.executors == n:  # each rank resumes its own split where it was
        info = ck.rank_info(rank)
        start = info["position"]
        if global_units(source):
            work, start = left_of(source, info, rank, n, time_col), None
    elif ck is not None:  # another executor count: what every rank left, dealt to n ranks
        infos = [ck.rank_info(r) for r in range(ck.executors)]
        work = resplit(source, infos, ck.executors, n, time_col, plan.directory)[rank]
    elif global_units(source):
        work = source.work(rank, n, time_col)
    return Checkpointing(plan, link, SplitPositions(start, work, type(source).remaining
                                                    if work is not None else None),
                         base, records)


def _run_join(spec: RankSpec, rank: int, addresses: List[str], listener: Any,
              link: Any) -> Tuple[pa.Table, Dict[str, Any]]:
    """A window join's rank: the rank loop with a join's push over both
    inputs merged by time (checkpointed: :mod:`slash.run.recovery.join`'s, which
    the Spark tasks run too), and for a live-scalable join the agent's
    feature and input (:class:`slash.run.live.join.JoinScaling`), with
    checkpoints too when the spec has a plan (:class:`LiveJoinPositions`)."""
    query, (left, right), group, token = spec.query, spec.source, spec.group, spec.token
    plan, act = spec.plan, spec.active
    if plan is not None and act is None:
        return execute_join_split_checkpointed(query, left, right, rank, addresses, listener,
                                               group, token, plan, link,
                                               control=spec.control)
    n = len(addresses)
    if act is None:
        ex = open_executor(query, spec.source, rank, addresses, listener, group, token,
                           group.partitions_for(n))
        with RankLoop(query, spec.source, ex) as loop:
            loop.use(JoinPush(), Report(Reporter(spec.report_every), link.put)
                     if spec.report_every else None)
            result = loop.run(join_split_items(loop, n, rate=spec.rate))
            return result, loop.metrics()
    raw = link  # the control and scale requests' pauses read its connection
    if plan is not None:  # the writer thread reports over it too
        link = SharedLink(link)
    ctl = ExecutorControl(link.put, raw.connection, rank, LogicPlan(query), group.timeout)
    works = spec.works[rank] if spec.works is not None else \
        {s: src.work(rank, len(act), query.time) if rank in act else []
         for s, src in zip(SIDES, spec.source)}
    ex = open_executor(query, spec.source, rank, addresses, listener, group, token,
                       plan.partitions if plan is not None else group.partitions_for(n))
    with RankLoop(query, spec.source, ex, link) as loop:
        ckpt, held = None, None
        if plan is not None:  # restored with the cut's leader map, or spread over the active
            ck = restore(ex, plan, n, [sorted(act)[p % len(act)] for p in range(plan.partitions)])
            base, records = resumed_counts(ck, rank, n)
            if ck is not None:
                held = restored_held(ck, live_gen(ck), works)
        agent = JoinScaleAgent(rank, n, works, act, link.put, raw.connection, group.timeout, held)
        if plan is not None:
            ckpt = Checkpointing(plan, link, LiveJoinPositions(agent), base, records)
            link.put(Resumed(rank, records))
        push = JoinPush()
        scaling = JoinScaling(agent, ctl, restored=plan is not None and plan.resume_id is not None)
        loop.use(push, Control(ctl), scaling, ckpt,
                 ProgressReport(link.put) if plan is not None else None,
                 Report(Reporter(spec.report_every), link.put) if spec.report_every else None)
        result = loop.run(live_join_items(loop, scaling, push, spec.rate))
        return result, loop.metrics()
