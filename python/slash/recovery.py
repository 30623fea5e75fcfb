"""The recovery driver: a :func:`slash.runner.run` that survives executor failures.

With ``run(..., checkpoint=DIR)`` the run is cut into checkpoints:

* Rank 0's worker asks its executor for checkpoint c (``request_checkpoint``)
  every ``checkpoint_every``; the core cuts it at a safe point aligned on
  every executor. Each worker, when its executor hands it the image
  (``take_checkpoint``), writes into ``DIR/chk-c/`` its meta, the leader
  stores of the partitions it leads, and ``rank-<r>.json`` (its source
  position at the cut, its push count, records read), plus the windows it
  fired before the cut as a result segment ``DIR/results/rank-<r>.chk-c.arrow``;
  then it reports ``("ckpt", rank, c, ...)`` to the parent.
  The files are written by a background thread of the worker (see
  :class:`slash.run.ckpt.Writer`: one write in flight per rank), so the push loop goes on
  while they are fsynced; the report is sent once they are durable.
* The parent commits c (writes its manifest, last and atomically: see
  :mod:`slash.checkpoint`) once every rank reported it.
* When an executor process dies (killed, crashed) or a peer's link breaks,
  the parent tears the whole group down and starts it again from the newest
  complete checkpoint: each executor restores the stores and meta, its
  source resumes at the recorded position, and the input after the cut is
  replayed. Executors are deterministic given their input, so the windows
  fired after the cut fire again identically; the windows fired before it
  come from the committed segments. Each window is in the result exactly
  once. After ``max_restarts`` restarts the run fails, naming the last cause.
* A run started again with the same directory (after the parent itself
  died) resumes from the newest complete checkpoint too. A finished run
  leaves ``_FINISHED.json`` and ``result.parquet``: running the same query
  with that directory again returns the stored result without running.

The position of a source at a cut comes from the cut's push count: each
worker maps the number of push calls it has made to the source position
after the item of that push. A FileSource's is also recorded as the work the
rank has left in global terms (``work``), so a checkpoint resumes with
another executor count (:func:`resplit`); :class:`CheckpointedRun` rescales a
running group that way.

The test kill hook ``SLASH_TEST_KILL`` (tests/test_recovery.py) is read by
:mod:`slash.run.faults`.
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from slash._ipc import from_ipc, to_ipc
from slash.checkpoint import Checkpoint, CheckpointStore
from slash.control import MoveRequests, MoveWaiters, rebalance_spec
from slash.ckpt_worker import AskSchedule, LateRows, serve_driver, write_image
from slash.errors import InvalidArgument, InvalidState, NotSupported, SystemFailure, Timeout
from slash.executor import Executor, GroupConfig
from slash.launcher import ProcessGroup
from slash.metrics import Reporter
from slash.query import JoinQuery, Query
from slash.recovery_join import execute_join_split_checkpointed
from slash.run import compat
from slash.run.ckpt import SharedLink, Writer, commit
from slash.run.failure import Failed, Reported, failed, reported, restartable
from slash.run.faults import kill_after_cuts, kill_in_write, kill_point
from slash.run.gc import no_cyclic_gc
from slash.run.group import connect
from slash.run.inputs import source_nullable
from slash.run.pacing import RatePacer
from slash.run.output import concat_as_first
from slash.run.plan import PROGRESS_S, AttemptPlan, CheckpointEvery
from slash.run.protocol import (Address, CheckpointNow, CheckpointWritten, Epoch, Error, Finished,
                                 Metrics, Move, Progress, Resumed)
from slash.sources import (FileSource, GeneratorSource, Position, TableSource, Work, input_stamp,
                           read_from)

log = logging.getLogger(__name__)



_PART_FILE = re.compile(r"part-(\d+)(?:\.r(\d+))?\.bin")


def part_name(partition: int, rank: int) -> str:
    """The file of partition ``partition`` in rank ``rank``'s image:
    ``part-<p>.r<rank>.bin``. A partition is in two images when the cut was
    taken during its hand-over (the old leader still owes it, the new one
    holds the deltas merged since the move); each image's copy is kept and a
    restore merges them. (Older checkpoints, and the join and Spark paths,
    write one ``part-<p>.bin``; :func:`read_partitions` reads both.)"""
    return f"part-{partition}.r{rank}.bin"


def read_partitions(ck: Checkpoint, wanted: Callable[[int], bool]) -> Dict[int, List[bytes]]:
    """Every stored image of each partition ``wanted(p)`` accepts, as listed
    in the checkpoint's manifest: partition -> blobs (one per image holding it)."""
    out: Dict[int, List[bytes]] = {}
    for name in sorted(ck.files()):
        m = _PART_FILE.fullmatch(name)
        if m is None:
            continue
        p = int(m.group(1))
        if wanted(p):
            out.setdefault(p, []).append(ck.read(name))
    return out


def checkpoint_leaders(ck: Checkpoint, n: int, partitions: int) -> Optional[List[int]]:
    """The leader map to restore checkpoint ``ck`` with in a group of ``n``:
    the newest map (highest version) a rank recorded at the cut when ``n`` is
    the checkpoint's executor count, else None (the default map of the new
    group, partition mod n). Any map agreed by every executor is correct,
    since every image of a partition is merged into its leader; the newest
    one keeps the moves already made."""
    if ck.executors != n:
        return None
    best: Optional[Dict[str, Any]] = None
    for r in range(n):
        got = ck.rank_info(r).get("leader_map")
        if got is not None and (best is None or got["version"] > best["version"]):
            best = got
    if best is None or len(best["leaders"]) != partitions or \
            not all(0 <= int(x) < n for x in best["leaders"]):
        return None
    return [int(x) for x in best["leaders"]]




def _source_time(source: Any, query: Query) -> Optional[str]:
    """The time column to pass to ``read`` (as runner's bounded reads do)."""
    if not getattr(source, "bounded", True):
        return None
    try:
        params = inspect.signature(source.read).parameters
    except (TypeError, ValueError):
        return None
    return query.time if "time" in params else None


def execute_split_checkpointed(query: Query, source: Any, rank: int, addresses: List[str],
                               listener: Any, group: GroupConfig, token: str, plan: AttemptPlan,
                               link: Any) -> Tuple[pa.Table, Dict[str, Any]]:
    """One executor's run with checkpoints (see the module doc): restores
    from ``plan.resume_id`` if given, then reads, pushes and cuts. Returns
    the windows this executor fired in this attempt and its metrics."""

    n = len(addresses)
    store = plan.store()
    link = SharedLink(link)  # the writer thread reports over it too
    writer = Writer(rank)
    schema = source.schema
    bounded = bool(getattr(source, "bounded", True))
    nullable = source_nullable(source, [*query.key, *query.value_columns])
    state = query.state_config(schema, plan.partitions, nullable)
    ex = Executor(listener, rank, addresses, state, group, token=token, bounded=bounded)
    start: Optional[Position] = None
    base_pushes = 0
    records = 0
    time_col = _source_time(source, query)
    # a FileSource's share of this attempt in global terms ([[unit, batches read], ...])
    work: Optional[Work] = None
    try:
        if plan.resume_id is not None:
            ck = store.load(plan.resume_id)
            old_n = ck.executors
            metas = [ck.read(f"rank-{r}.meta") for r in range(old_n)]
            leaders = checkpoint_leaders(ck, n, plan.partitions)
            lead = leaders if leaders is not None else [p % n for p in range(plan.partitions)]
            ex.restore(metas, read_partitions(ck, lambda p: lead[p] == rank), leaders)
            if old_n == n:  # each rank resumes its own split where it was
                info = ck.rank_info(rank)
                start, base_pushes, records = info["position"], info["pushes"], info["records"]
                if isinstance(source, FileSource):
                    work, start = _left_of(source, info, rank, n, time_col), None
            else:  # another executor count: what every rank left, dealt to n ranks
                infos = [ck.rank_info(r) for r in range(old_n)]
                work = resplit(source, infos, old_n, n, time_col, store.dir)[rank]
                base_pushes = 0  # the core counts push calls afresh in a group of another size
                records = sum(int(i["records"]) for i in infos) if rank == 0 else 0
        elif isinstance(source, FileSource):
            work = source.work(rank, n, time_col)
        link.put(Resumed(rank, records))
        # push calls, counted as the core counts them (a restored executor
        # goes on from the checkpoint's count): push count -> source position after it
        pushes = base_pushes
        pos_after: Dict[int, Optional[Position]] = {pushes: start}
        out: List[pa.RecordBatch] = []
        pending: List[pa.RecordBatch] = []  # fired since the last cut
        asks = AskSchedule(ex, plan.every, plan.next_id, base_pushes)  # rank 0's
        last_progress = time.monotonic()
        kill_at = kill_point(rank, plan.attempt)
        result_schema = ex.result_schema()
        live = _LiveReport(ex, plan, link) if plan.live_every or plan.realtime else None

        def after_call() -> None:
            nonlocal pending
            while True:
                img = ex.take_checkpoint()
                if img is None:
                    break
                # the windows fired before the cut go with it; those the service thread
                # fired since (peers' later epochs) go with the next cut (split_at_cut)
                pending, after = ex.results_at_cut(img, pending + _results(ex, live),
                                                 take=False)
                info = {"rank": rank, "position": pos_after[img.pushes],
                        "pushes": img.pushes, "records": records_at[img.pushes],
                        "windows": sum(b.num_rows for b in pending)}
                version, leaders_now = ex.leader_map()  # the map this rank followed at the cut
                info["leader_map"] = {"version": version, "leaders": leaders_now}
                if work is not None:  # what is left of this rank's input, in global terms
                    info["work"] = FileSource.remaining(work, pos_after[img.pushes])
                # the executor call holding the cut (alignment + the core's image), in the loop
                cut_s = time.monotonic() - call_t[0]
                writer.submit(write_image, store, link, rank, img, pending, result_schema, info,
                              lambda p: part_name(p, rank),
                              kill_in_write(store, plan, kill_at, rank, pushes),
                              {"cut_seconds": cut_s}, None,
                              late_rows.at_cut(img.pushes) if late_rows is not None else None)
                out.extend(pending)
                pending = after
                for k in [k for k in pos_after if k < img.pushes]:  # older cuts are not needed
                    del pos_after[k]
                    records_at.pop(k, None)
                asks.cut(img.id)
            got = _results(ex, live)
            pending.extend(got)

        records_at: Dict[int, int] = {pushes: records}
        call_t = [time.monotonic()]  # when the executor call that may cut began
        moves = MoveRequests(link.put, rank)  # rank 0: the parent's rebalance requests
        throttle = RatePacer(plan.rate / n) if plan.rate else None
        late_rows = LateRows() if plan.want_late else None
        with no_cyclic_gc():
            items = (source.read_work(work, query.input_columns, time=time_col)
                     if work is not None else
                     read_from(source, rank, n, query.input_columns, time_col, start))
            for pos, item in items:
                call_t[0] = time.monotonic()
                if isinstance(item, (pa.RecordBatch, pa.Table)):
                    if live is not None and plan.realtime:
                        live.pace(query, item, after_call)
                    b, skip = query.prepare_selected(item)
                    if late_rows is not None:
                        late_rows.add(pushes + 1, ex.push_batch(b, skip=skip, return_late=True))
                    else:
                        ex.push_batch(b, skip=skip)
                    pushes += 1
                    records += item.num_rows
                    pos_after[pushes] = pos
                    records_at[pushes] = records
                    if throttle is not None:  # cuts and results are served while it waits
                        throttle.after(item.num_rows, lambda s: (ex.poll(s), after_call()))
                else:  # a Watermark
                    wm = query.watermark_ticks(getattr(item, "value", None), schema)
                    if wm is not None:
                        ex.advance_watermark(wm)
                after_call()
                serve_driver(link, ex, asks, moves)
                if live is not None:
                    live.report()
                if rank == 0:
                    asks.step(pushes)
                if kill_at is not None and not kill_at[2] and pushes >= kill_at[0]:
                    kill_after_cuts(ex, store, plan, kill_at, rank, pushes, after_call)
                if time.monotonic() - last_progress >= PROGRESS_S:
                    last_progress = time.monotonic()
                    link.put(Progress(rank, records))
            moves.fail_all(InvalidState("rebalance: rank 0 has read all of its input; "
                                        "leadership no longer moves"))
            ex.finish()
            after_call()
            if live is not None:
                live.report(final=True)
            writer.drain()  # every checkpoint this rank took is durable and reported
        out.extend(pending)
        m = dict(ex.metrics)
        m["records_read"] = records
        if late_rows is not None:  # every late row of this attempt (the worker sends them)
            m["late_rows"] = late_rows.found()
        return pa.Table.from_batches(out, schema=result_schema), m
    finally:
        writer.close()
        ex.close()


def _results(ex: Executor, live: Optional["_LiveReport"]) -> List[pa.RecordBatch]:
    got = ex.results()
    if live is not None and got:
        live.fired(got)
    return got


class _LiveReport:
    """A checkpointed rank's live metrics (``("metrics", rank, snapshot)``
    every ``plan.live_every`` s, :class:`slash.metrics.Reporter`'s snapshot)
    and, with ``plan.realtime``, the pacing of its input by event time and
    the windows it fired since the last report: ``snapshot["windows"]`` =
    ``[[window_end_ms, emit_ms, rows], ...]`` (wall clock, so emit - end is
    the window's latency)."""

    def __init__(self, ex: Executor, plan: "AttemptPlan", link: Any) -> None:
        self.ex, self.plan, self.link = ex, plan, link
        self.reporter = Reporter(plan.live_every or 0.5)
        self.windows: List[List[int]] = []
        self.behind: Optional[int] = None  # records due by the wall clock, not yet read (estimate)
        self.lag = 0.0  # seconds the latest batch was read after its latest event time

    def fired(self, batches: List[pa.RecordBatch]) -> None:
        if not self.plan.realtime:
            return

        now = int(time.time() * 1000)
        tpm = self.ex.state.ticks_per_ms
        for b in batches:
            if not b.num_rows:
                continue
            vc = pc.value_counts(b.column("window_end"))
            for end, rows in zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()):
                self.windows.append([end // tpm, now, rows])

    def pace(self, query: Query, item: Any, serve: Callable[[], None]) -> None:
        """Waits (serving the channels and firing what is due) until the
        wall clock reaches the batch's latest event time."""
        if not item.num_rows:
            return
        mm = pc.min_max(query.time_ticks(item.column(query.time), item.schema))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if hi is None:
            return
        tps = self.ex.state.ticks_per_ms * 1000.0
        due = hi / tps
        # how far the reader is behind the clock, in records at this batch's rate
        span = max((hi - lo) / tps, 0.001)
        self.lag = max(0.0, time.time() - due)
        self.behind = int(self.lag * item.num_rows / span)
        while True:
            ahead = due - time.time()
            if ahead <= 0:
                return
            self.ex.poll(min(ahead, 0.01))
            serve()
            self.report()

    def report(self, final: bool = False) -> None:
        if not (self.plan.live_every and (self.reporter.due() or final)):
            return

        snap = Reporter.snapshot(self.ex)
        snap["windows"], self.windows = self.windows, []
        if self.behind is not None:
            snap["records_behind"] = self.behind
            snap["input_lag_ms"] = round(self.lag * 1000.0, 1)
        self.link.put(Metrics(self.ex.rank, snap))



def _left_of(source: FileSource, info: Dict[str, Any], rank: int, n: int,
             time_col: Optional[str]) -> Work:
    """What rank of a group of n had left of a FileSource at a cut, in
    global terms: its ``work`` (recorded since rescaling exists), else its
    position in its own split of n (checkpoints written before)."""
    if "work" in info:
        return [[int(g), int(k)] for g, k in info["work"]]
    pos = info.get("position")
    return FileSource.remaining(source.work(rank, n, time_col),
                                pos if isinstance(pos, (list, tuple)) else None)


def check_resplittable(source: Any, ck_n: int, n: int, directory: str) -> None:
    """Raises NotSupported, naming the reason, unless ``source``'s positions
    at a cut of ck_n executors can be dealt to n."""
    if ck_n == n or isinstance(source, FileSource):
        return
    if isinstance(source, (tuple, list)):  # a join: each input must re-split
        for side, s in zip(("left", "right"), source):
            if not isinstance(s, FileSource):
                raise NotSupported(f"checkpoint directory {directory!r} was cut with {ck_n} "
                                   f"executors and this run has {n}: the join's {side} input is "
                                   f"not a FileSource ({_why_not_resplit(s)}). Resume with "
                                   f"executors={ck_n}, or join files (FileSource), whose "
                                   f"positions re-split to any executor count")
        return
    raise NotSupported(f"checkpoint directory {directory!r} was cut with {ck_n} executors and this "
                       f"run has {n}: {_why_not_resplit(source)}. Resume with executors={ck_n}, "
                       f"or read files (FileSource), whose positions re-split to any executor "
                       f"count")


def _why_not_resplit(source: Any) -> str:
    """Why ``source``'s positions cannot be dealt to another executor count."""
    return {GeneratorSource: "a GeneratorSource's make(rank, n) decides each executor's input, "
                             "and input made for one split cannot be dealt to another",
            TableSource: "a TableSource's slices depend on the executor count"}.get(
        type(source), f"a {type(source).__name__} records no position in global terms")


def resplit(source: Any, infos: List[Dict[str, Any]], ck_n: int, n: int,
            time_col: Optional[str], directory: str) -> List[Work]:
    """Every rank's work left at a cut of ck_n executors (``infos``: their
    rank-<r>.json), dealt to n ranks (:meth:`FileSource.resplit`): every rank
    of the new group computes the same lists. Units read whole are in none,
    a unit read in part resumes after its batches read, so no record is
    read twice or skipped. The watermark stays correct: the core restores
    every rank of another group size at the cut's group watermark (the
    smallest rank watermark), below every record any rank had left."""
    check_resplittable(source, ck_n, n, directory)
    lefts = [_left_of(source, infos[r], r, ck_n, time_col) for r in range(ck_n)]
    return source.resplit(lefts, n, time_col)


def _worker(query: Query, source: Any, rank: int, n: int, group: GroupConfig, token: str,
            plan: AttemptPlan, link: Any) -> None:
    """One executor process of a checkpointed run (see :mod:`slash.launcher`)."""
    try:
        lst = Executor.listen(group.transport, token=token)
        link.put(Address(rank, lst.address))
        addresses = link.get(timeout=group.timeout)
        if isinstance(query, JoinQuery):  # a join's worker: slash.recovery_join
            result, m = execute_join_split_checkpointed(query, source[0], source[1], rank,
                                                        addresses, lst, group, token, plan, link)
        else:
            result, m = execute_split_checkpointed(query, source, rank, addresses, lst, group,
                                                   token, plan, link)
        lst.close()
        plain = {k: v for k, v in m.items() if isinstance(v, (int, float, str, type(None)))}
        link.put(Finished(rank, result, plain, m.get("late_rows")))
    except BaseException as e:  # the parent raises or recovers, naming the rank
        link.put(Error.of(rank, e))



def fingerprint(query: Query, source: Any) -> str:
    """What identifies a run in its checkpoint directory: the query and its input
    (a join's: both inputs)."""
    if isinstance(source, tuple):
        return " and ".join(fingerprint(query, s) for s in source)
    if isinstance(source, FileSource):
        src = f"files {sorted(source.paths)} ({source.rows} rows)"
    elif isinstance(source, TableSource):
        src = f"table of {source.rows} rows {source.schema.names}"
    elif isinstance(source, GeneratorSource):
        mk = source.make
        src = (f"generator {getattr(mk, '__module__', '?')}."
               f"{getattr(mk, '__qualname__', type(mk).__name__)} {source.schema.names}")
    else:
        src = type(source).__name__
    return f"{query!r} over {src}"


class CheckpointedRun:
    """Operations on a running checkpointed run (:func:`slash.runner.run`
    with ``checkpoint=`` and ``control=CheckpointedRun()``), for a control
    plane (e.g. a control socket behind ``slash ctl``). Thread-safe: call its
    methods from any thread while ``run`` runs in another.

    :meth:`rescale` changes the executor count by checkpoint and restart: the
    group takes a checkpoint at its next cut, stops, and starts again with
    the new count from that checkpoint. The output stays exactly-once (the
    result equals the failure-free run's) because that is exactly the path
    of a recovery: windows fired before the cut are in the committed
    segments, the ones after it fire again in the new group. Records read
    after the cut by the old group are read again by the new one.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._want: Optional[int] = None  # a requested executor count not yet applied
        self._asked_at: Optional[float] = None
        self._result: Optional[Dict[str, Any]] = None
        self._seq = 0  # rescales completed
        self._state = "new"  # new, running, ended
        self._source: Any = None
        self._partitions = 0
        self._dir = ""
        self.executors: Optional[int] = None  #: the current group's executor count
        self.rescales: List[Dict[str, Any]] = []  #: one entry per completed rescale
        #: called with (rank, snapshot) for each live metrics report (``live_every``)
        self.on_metrics: Optional[Callable[[int, Dict[str, Any]], None]] = None
        #: called with a line of text on each recovery (a mark on the live page)
        self.on_event: Optional[Callable[[str], None]] = None
        #: (epoch_ms, epoch_bytes) set by :meth:`set_epoch` (0: unchanged), else None
        self.epoch: Optional[Tuple[int, int]] = None
        self._epoch_seq = 0
        self._moves = MoveWaiters()
        self._move_queue: List[Tuple[int, Dict[str, Any]]] = []  # (id, spec) not sent yet
        #: each rank's latest live metrics snapshot (with ``live_every``)
        self.per: Dict[int, Dict[str, Any]] = {}

    def rebalance(self, moves: Any = None, from_rank: Optional[int] = None,
                  to_rank: Optional[int] = None, timeout: Optional[float] = 60.0
                  ) -> Dict[str, Any]:
        """Moves partition leadership in the running group (live, no restart):
        ``moves`` ({partition: rank} or ``"P:R,P:R"``) explicitly, else half
        the partitions of ``from_rank`` to ``to_rank``, each chosen from the
        live metrics when not given (the most merge time / delta bytes
        received, the least; needs ``live_every``). Sent to rank 0 by the
        driver's loop; returns ``{"moves": {p: r}, "map_version": v}`` once
        rank 0 accepted them (they take effect at each executor's next epoch
        end). Raises InvalidArgument for a bad partition or rank,
        InvalidState when the run is not running or rank 0 has read all of
        its input, Timeout after ``timeout`` s."""
        with self._cond:
            if isinstance(self._source, (tuple, list)):
                compat.check("run", "join", ["checkpoint", "rebalance"])
            if self._state != "running":
                raise InvalidState(f"rebalance: the run is {self._state}, not running")
            n = self.executors or 0
            per = dict(self.per)
        args = {"moves": moves, "from_rank": from_rank, "to_rank": to_rank}
        spec = rebalance_spec(args, per, n)
        rid, ev = self._moves.new()
        with self._cond:
            self._move_queue.append((rid, spec))
        return self._moves.wait(rid, ev, timeout if timeout is not None else 1e9)

    def _take_moves(self) -> List[Tuple[int, Dict[str, Any]]]:
        with self._cond:
            got, self._move_queue = self._move_queue, []
            return got

    def set_epoch(self, epoch_ms: Optional[int] = None, epoch_bytes: Optional[int] = None) -> None:
        """Changes every executor's epoch length (``Executor.set_epoch``),
        sent over their links by the driver's loop within ~50 ms; a group
        started later (a rescale, a recovery) starts with it."""
        if epoch_ms is None and epoch_bytes is None:
            raise InvalidArgument("set_epoch: give epoch_ms or epoch_bytes")
        for name, v in (("epoch_ms", epoch_ms), ("epoch_bytes", epoch_bytes)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InvalidArgument(f"{name} must be an int >= 1, got {v!r}")
        with self._cond:
            if self._state == "ended":
                raise InvalidState("set_epoch: the run has ended")
            self.epoch = (epoch_ms or 0, epoch_bytes or 0)
            self._epoch_seq += 1

    def rescale(self, n: int, timeout: Optional[float] = 120.0) -> Dict[str, Any]:
        """Restarts the running group with ``n`` executors from a checkpoint
        cut after this call; returns when the new group has restored and
        resumed reading: ``{"from": old n, "to": n, "checkpoint": id,
        "seconds_to_cut": request to the checkpoint's commit,
        "seconds_to_resume": request to every new executor resumed}``.

        Raises InvalidArgument for an n outside 1..partitions (the partition
        count stays fixed), NotSupported when the source cannot be re-split
        (a generator or a table: see :func:`check_resplittable`),
        InvalidState when the run is not running or ended before a cut
        (a group whose input is running out takes no further checkpoint),
        and Timeout after ``timeout`` seconds (the request stays queued).
        ``n`` equal to the current count returns at once with ``to == from``.
        One rescale at a time: a second call while one is pending replaces
        its target count.
        """
        with self._cond:
            if self._state != "running":
                raise InvalidState(f"rescale({n!r}): the run is {self._state}, not running")
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self._partitions:
                raise InvalidArgument(f"rescale needs an executor count in 1..{self._partitions} "
                                      f"(the run's key partitions), got {n!r}")
            cur = self.executors
            assert cur is not None
            if n == cur:
                return {"from": cur, "to": n, "checkpoint": None, "seconds_to_cut": 0.0,
                        "seconds_to_resume": 0.0}
            check_resplittable(self._source, cur, n, self._dir)
            self._want, self._asked_at = n, time.monotonic()
            seq = self._seq
            if not self._cond.wait_for(lambda: self._seq > seq or self._state != "running",
                                       timeout):
                raise Timeout(f"rescale to {n} executors did not complete within {timeout} s")
            if self._seq > seq:
                return dict(self.rescales[-1])
            raise InvalidState(f"rescale to {n} executors: the run ended before a checkpoint "
                               "could be cut (its input ran out)")

    def scale_out(self, k: int = 1, timeout: Optional[float] = 120.0) -> Dict[str, Any]:
        """:meth:`rescale` to the current count plus ``k``."""
        return self.rescale((self.executors or 0) + k, timeout)

    def scale_in(self, k: int = 1, timeout: Optional[float] = 120.0) -> Dict[str, Any]:
        """:meth:`rescale` to the current count minus ``k``."""
        return self.rescale((self.executors or 0) - k, timeout)

    # -- the driver's side --------------------------------------------------------
    def _start(self, source: Any, n: int, partitions: int, directory: str) -> None:
        with self._cond:
            self._source, self.executors, self._partitions, self._dir = source, n, partitions, directory
            self._state = "running"

    def _pending(self) -> Tuple[Optional[int], Optional[float]]:
        with self._cond:
            return self._want, self._asked_at

    def _done(self, entry: Dict[str, Any]) -> None:
        with self._cond:
            self.rescales.append(entry)
            self.executors = entry["to"]
            self._want = self._asked_at = None
            self._seq += 1
            self._cond.notify_all()

    def _end(self) -> None:
        with self._cond:
            self._state = "ended"
            self._cond.notify_all()
        self._moves.close()


#: The former name of :class:`CheckpointedRun` (documented in docs/recovery.md
#: before the rename; :class:`slash.control.RunControl` is the control
#: socket's side of a run, another class)
RunControl = CheckpointedRun


class _Rescale(Exception):
    """An attempt stopped for a rescale, at committed checkpoint ``ckpt``."""

    def __init__(self, n: int, ckpt: int, asked_at: float, cut_at: float) -> None:
        super().__init__(f"rescale to {n}")
        self.n, self.ckpt, self.asked_at, self.cut_at = n, ckpt, asked_at, cut_at


def run_checkpointed(query: Query, source: Any, n: int, group: GroupConfig, token: str, *,
                     directory: str, every: Any, keep: int, max_restarts: int, timeout: float,
                     finalize: Callable[[pa.Table], pa.Table],
                     metrics: Dict[str, Any], control: Optional[CheckpointedRun] = None,
                     live_every: Optional[float] = None, realtime: bool = False,
                     rate: Optional[float] = None,
                     late: Optional[List[pa.Table]] = None) -> pa.Table:
    """The parent's side (see the module doc); returns the finalized result.
    ``metrics`` receives records_in, per_executor, checkpoints, recoveries,
    records_replayed, resumed_from and rescales. A run resumed from a
    checkpoint takes its key partition count from the checkpoint's manifest
    and may have another executor count (a FileSource's positions are
    re-split; other sources refuse). ``control``: see :class:`CheckpointedRun`.
    ``live_every``: executors report live metrics every so many seconds to
    ``control.on_metrics``; ``realtime``: see :class:`_LiveReport`; ``rate``:
    records/s over the group (every attempt's ranks share it); ``late``: a
    list that receives the input rows found late (``late_output=``): those
    of the cuts committed before the last attempt's start, and that attempt's."""
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise InvalidArgument(f"max_restarts must be an int >= 0, got {max_restarts!r}")

    policy = CheckpointEvery.parse(every)
    partitions = group.partitions_for(n)
    store = CheckpointStore(directory, fingerprint=fingerprint(query, source), executors=n,
                            partitions=partitions, keep=keep, inputs=input_stamp(source))
    stored = store.finished()
    if stored is not None:
        log.info("checkpoint directory %r holds this query's finished run: returning its result "
                 "without running again", store.dir)
        metrics.update(checkpoints=[], recoveries=[], records_replayed=0, finished_before=True,
                       rescales=[])
        stored_late(store, late)
        return from_ipc(stored)
    shape = store.newest_shape()
    if shape is not None:  # resuming: the checkpoint's partition count, any executor count
        ck_n, ck_parts = shape
        if group.partitions is not None and group.partitions != ck_parts:
            raise InvalidArgument(f"checkpoint directory {store.dir!r} holds checkpoints with "
                                  f"{ck_parts} key partitions; this run asks for "
                                  f"{group.partitions} (the count stays fixed: leave it unset)")
        group = dataclasses.replace(group, partitions=ck_parts)
        partitions = store.partitions = group.partitions_for(n)
        check_resplittable(source, ck_n, n, store.dir)
        if ck_n != n:
            log.info("resuming checkpoints of %d executors with %d: re-splitting the input", ck_n, n)
    # fixed for the life of the checkpoints: a rescaled group keeps it (not 4 x its own n)
    group = dataclasses.replace(group, partitions=partitions)
    checkpoints: List[Dict[str, Any]] = []
    recoveries: List[Dict[str, Any]] = []
    rescales: List[Dict[str, Any]] = []
    replayed = 0
    restarts = 0
    attempt = 0
    failed_at: Optional[float] = None
    first = store.latest()
    metrics["resumed_from"] = first.id if first is not None else None
    if control is not None:
        control._start(source, n, partitions, store.dir)
    try:
        while True:
            ck = first if attempt == 0 else store.latest()
            store.executors = n
            plan = AttemptPlan(store.dir, store.fingerprint, n, partitions, keep, policy,
                         ck.id if ck is not None else None, (ck.id + 1) if ck is not None else 1,
                         attempt, live_every, realtime, rate, late is not None)
            if control is not None and control.epoch is not None:  # a restart keeps a tuned epoch
                ms, nbytes = control.epoch
                group = dataclasses.replace(group, epoch_ms=ms or group.epoch_ms,
                                            epoch_bytes=nbytes or group.epoch_bytes)
            if ck is not None:
                log.info("starting %d executors from checkpoint %s (attempt %d)", n, ck.path,
                         attempt)
            late_now: List[pa.Table] = []  # the late rows this attempt found
            try:
                tables, per_exec, prog = _attempt(query, source, n, group, token, plan, store,
                                                  timeout, checkpoints, recoveries, failed_at,
                                                  control, rescales, late_now)
                break
            except _Rescale as r:
                _void_moves(control)
                log.info("rescale: %d -> %d executors from checkpoint %d", n, r.n, r.ckpt)
                rescales.append({"from": n, "to": r.n, "checkpoint": r.ckpt,
                                 "seconds_to_cut": round(r.cut_at - r.asked_at, 3),
                                 "_asked_at": r.asked_at})
                n = r.n
                attempt += 1
                failed_at = None
                continue
            except Failed as f:
                _void_moves(control)
                last, lost = restartable(f, store, restarts, max_restarts)
                replayed += lost
                restarts += 1
                attempt += 1
                failed_at = time.monotonic()
                recoveries.append({"cause": f.cause, "rank": f.rank,
                                   "from_checkpoint": last.id if last is not None else None,
                                   "records_replayed": lost})
                log.warning("executor rank %s failed (%s): restarting all %d executors from %s "
                            "(restart %d of at most %d)", f.rank, f.cause, n,
                            f"checkpoint {last.id}" if last is not None else "the beginning",
                            restarts, max_restarts)
                if control is not None and control.on_event is not None:
                    control.on_event(f"recovery {restarts}: rank {f.rank} failed ({f.cause}); from "
                                     + (f"checkpoint {last.id}" if last is not None else "the beginning"))
    finally:
        if control is not None:
            control._end()
    # the committed windows of cuts before this attempt, plus everything it fired
    base = [from_ipc(ck.read_segment(rel)) for rel in sorted(ck.segments())] if ck else []
    result = finalize(pa.concat_tables([t.cast(tables[0].schema) if t.schema != tables[0].schema
                                        else t for t in base] + tables))
    store.finish(to_ipc(result), {"checkpoints": len(checkpoints), "recoveries": len(recoveries)},
                 all_late(ck, late_now, late))
    metrics.update(per_executor=per_exec, checkpoints=checkpoints, recoveries=recoveries,
                   records_replayed=replayed, finished_before=False,
                   rescales=[{k: v for k, v in r.items() if not k.startswith("_")}
                             for r in rescales], executors_final=n)
    return result



def _void_moves(control: Optional[CheckpointedRun]) -> None:
    """A group stopped (rescale, failure): moves asked of it are void."""
    if control is not None:
        control._take_moves()
        control._moves.fail_pending("the group restarted from a checkpoint before rank 0 "
                                    "accepted the moves")
        control.per.clear()


def _attempt(query: Query, source: Any, n: int, group: GroupConfig, token: str, plan: AttemptPlan,
             store: CheckpointStore, timeout: float, checkpoints: List[Dict[str, Any]],
             recoveries: List[Dict[str, Any]], failed_at: Optional[float],
             control: Optional[CheckpointedRun] = None,
             rescales: Optional[List[Dict[str, Any]]] = None,
             late: Optional[List[pa.Table]] = None
             ) -> Tuple[List[pa.Table], List[Dict[str, Any]], Dict[int, int]]:
    """One group of n executors from plan's checkpoint to the end; raises
    Failed, or _Rescale once a checkpoint asked for by ``control`` commits.
    ``late`` receives the late rows each rank found in this attempt (its Finished report's)."""
    t0 = time.monotonic()
    rescale_asked: Optional[Tuple[int, float, int]] = None  # (n, asked at, commits before)
    pending_resume = rescales[-1] if rescales and "seconds_to_resume" not in rescales[-1] else None
    progress: Dict[int, int] = {}
    reports: Dict[int, Dict[int, Tuple[Any, ...]]] = {}
    resumed: set = set()
    # the group starts with control's epoch (set in run_checkpointed); later changes are sent
    epoch_sent = control._epoch_seq if control is not None else 0

    def fail(rank: Optional[int], cause: str, err: BaseException) -> Failed:
        err._slash_progress = dict(progress)  # type: ignore[attr-defined]
        return Failed(rank, cause, err)

    pg = ProcessGroup(n, _worker, lambda r: (query, source, r, n, group, token, plan))
    if True:
        with pg:
            try:
                connect(pg, n, t0 + group.timeout)
                parts: List[Optional[pa.Table]] = [None] * n
                per_exec: List[Dict[str, Any]] = [{} for _ in range(n)]
                done = 0
                while done < n:
                    left = max(0.0, t0 + timeout - time.monotonic())
                    if control is not None:
                        if control._epoch_seq != epoch_sent:
                            epoch_sent = control._epoch_seq
                            finished = _finished_ranks(parts)
                            for r in range(n):
                                if r not in finished:
                                    pg.send(r, Epoch(*control.epoch))
                        for rid, spec in control._take_moves():
                            if 0 in _finished_ranks(parts):
                                control._moves.answer(rid, {"error": [
                                    "InvalidState", "rebalance: rank 0 has read all of its input; "
                                    "leadership no longer moves"]})
                            else:
                                pg.send(0, Move(rid, spec))
                        want, asked_at = control._pending()
                        if want is not None and want != n and rescale_asked is None and \
                                0 not in _finished_ranks(parts):
                            pg.send(0, CheckpointNow())
                            rescale_asked = (want, asked_at or time.monotonic(), len(checkpoints))
                        try:
                            rep = pg.recv(timeout=min(left, 0.05))
                        except Timeout:
                            if left > 0.05:
                                continue
                            raise
                    else:
                        rep = pg.recv(timeout=left)
                    if isinstance(rep, Error):
                        raise reported(rep)
                    if isinstance(rep, Resumed):
                        resumed.add(rep.rank)
                        progress[rep.rank] = rep.records
                        if len(resumed) == n and pending_resume is not None and control is not None:
                            pending_resume["seconds_to_resume"] = round(
                                time.monotonic() - pending_resume["_asked_at"], 3)
                            control._done({k: v for k, v in pending_resume.items()
                                           if not k.startswith("_")})
                            pending_resume = None
                        if len(resumed) == n and failed_at is not None and recoveries:
                            recoveries[-1]["seconds_to_resume"] = round(
                                time.monotonic() - failed_at, 3)
                    elif isinstance(rep, Progress):
                        progress[rep.rank] = rep.records
                    elif isinstance(rep, Metrics):
                        if control is not None:
                            control.per[rep.rank] = rep.snapshot
                            if control.on_metrics is not None:
                                control.on_metrics(rep.rank, rep.snapshot)
                    elif rep[0] == "ctl-moved":  # ExecutorControl's answer to a Move
                        if control is not None:
                            control._moves.answer(rep[2], rep[3])
                    elif isinstance(rep, CheckpointWritten):
                        cid = rep.ckpt_id
                        reports.setdefault(cid, {})[rep.rank] = (rep.files, rep.segments, rep.stats)
                        if len(reports[cid]) == n:
                            commit(store, cid, reports.pop(cid), checkpoints)
                            if rescale_asked is not None and len(checkpoints) > rescale_asked[2]:
                                raise _Rescale(rescale_asked[0], cid, rescale_asked[1],
                                               time.monotonic())
                    elif isinstance(rep, Finished):
                        parts[rep.rank] = rep.result
                        per_exec[rep.rank] = rep.metrics
                        if late is not None and rep.late is not None:
                            late.append(rep.late)
                        done += 1
            except (SystemFailure, Reported) as e:
                raise failed(e, pg, fail) from None
    return [t for t in parts if t is not None], per_exec, progress


def stored_late(store: CheckpointStore, late: Optional[List[pa.Table]]) -> None:
    """A finished run returned again: its stored late rows into ``late``
    (when the caller wants them)."""
    if late is None:
        return
    kept = store.finished_late()
    if kept is None:
        log.warning("the finished run in %r ran without late_output=: its late rows were not "
                    "kept", store.dir)
    else:
        late.append(from_ipc(kept))


def all_late(ck: Optional[Checkpoint], late_now: List[pa.Table],
             late: Optional[List[pa.Table]]) -> Optional[bytes]:
    """A run that finished from checkpoint ``ck``: fills ``late`` (when the
    caller wants the late rows) with those of ``ck``'s late segments (every
    committed cut's up to ``ck``) and ``late_now`` (every rank's of the last
    attempt, which started from ``ck``);
    returns them as IPC to store with the finished run (None without ``late``)."""
    if late is None:
        return None
    if ck is not None:
        late.extend(from_ipc(ck.read_segment(rel)) for rel in sorted(ck.late_segments()))
    late.extend(late_now)
    return to_ipc(concat_as_first(late) if late else pa.table({}))


def _finished_ranks(parts: List[Optional[pa.Table]]) -> set:
    """Ranks that have sent their result (they can take no checkpoint)."""
    return {r for r, t in enumerate(parts) if t is not None}



