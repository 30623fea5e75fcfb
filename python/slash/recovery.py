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
after the item of that push.

Test hook (documented, used by tests/test_recovery.py only): the environment
variable ``SLASH_TEST_KILL="RANK:PUSHES[:ATTEMPT[:CUTS]],..."`` makes the
worker of rank RANK SIGKILL itself right after a push call that brings its
push count (counted from the start of the run, as the core counts them) to
PUSHES or more, in attempt ATTEMPT (default 0; attempt k is the k-th
restart), once CUTS checkpoints of that attempt are committed (default 0;
the worker polls its executor until they are, for at most 10 s). A fifth
field ``:w`` moves the kill into the next checkpoint write after that
point: after the worker wrote its meta and half of its partitions' files,
before its ``rank-<r>.json`` and its report (so that checkpoint never
commits).
"""
from __future__ import annotations

import logging
import os
import re
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import pyarrow as pa

from slash._ipc import from_ipc, to_ipc
from slash.checkpoint import Checkpoint, CheckpointStore
from slash.errors import (CheckpointCorrupt, InvalidArgument, SlashError, SystemFailure,
                          UsageError)
from slash.executor import Executor, GroupConfig
from slash.launcher import ProcessGroup
from slash.query import JoinQuery, Query
from slash.sources import FileSource, GeneratorSource, Position, TableSource, read_from
from slash.window import parse_duration

log = logging.getLogger(__name__)

_PROGRESS_S = 0.05  # how often a worker tells the parent how many records it has read


@dataclass(frozen=True)
class CheckpointEvery:
    """When rank 0 asks for the next checkpoint: every ``seconds`` of wall
    time, every ``epochs`` epochs of its executor, or every ``batches`` of
    its push calls (deterministic: for tests)."""

    seconds: Optional[float] = None
    epochs: Optional[int] = None
    batches: Optional[int] = None

    @classmethod
    def parse(cls, spec: Union[str, int, float, "CheckpointEvery"]) -> "CheckpointEvery":
        """``"10s"`` / ``"500ms"`` / ``10`` (seconds), ``"5 epochs"``, ``"100 batches"``.

        >>> CheckpointEvery.parse("5 epochs").epochs
        5
        >>> CheckpointEvery.parse("2s").seconds
        2.0
        """
        if isinstance(spec, CheckpointEvery):
            return spec
        if isinstance(spec, bool):
            raise InvalidArgument(f"checkpoint_every must be a duration, 'N epochs' or "
                                  f"'N batches', got {spec!r}")
        if isinstance(spec, (int, float)):
            if spec <= 0:
                raise InvalidArgument(f"checkpoint_every must be positive, got {spec!r}")
            return cls(seconds=float(spec))
        if isinstance(spec, str):
            m = re.fullmatch(r"\s*(\d+)\s*(epochs?|batches|batch)\s*", spec)
            if m:
                k = int(m.group(1))
                if k < 1:
                    raise InvalidArgument(f"checkpoint_every {spec!r}: the count must be >= 1")
                return cls(epochs=k) if m.group(2).startswith("epoch") else cls(batches=k)
            try:
                ms = parse_duration(spec)
            except (UsageError, ValueError) as e:
                raise InvalidArgument(f"checkpoint_every {spec!r} is not a duration like '10s', "
                                      f"'N epochs' or 'N batches': {e}") from None
            if ms <= 0:
                raise InvalidArgument(f"checkpoint_every must be positive, got {spec!r}")
            return cls(seconds=ms / 1000.0)
        raise InvalidArgument(f"checkpoint_every must be a duration, 'N epochs' or 'N batches', "
                              f"got {type(spec).__name__}")


@dataclass(frozen=True)
class CheckpointPlan:
    """Where and how often a group of executors checkpoints (pickled into
    every worker or Spark task)."""

    directory: str
    fingerprint: str
    executors: int
    partitions: int
    keep: int
    every: CheckpointEvery

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.directory, fingerprint=self.fingerprint,
                               executors=self.executors, partitions=self.partitions, keep=self.keep)


@dataclass(frozen=True)
class _Plan(CheckpointPlan):
    """What a worker of one attempt of :func:`run_checkpointed` needs: the
    plan, and where this attempt resumes."""

    resume_id: Optional[int]
    next_id: int
    attempt: int


def _kill_point(rank: int, attempt: int) -> Optional[Tuple[int, int, bool]]:
    """(pushes, cuts, in_write) after which this worker kills itself (test
    hook), or None."""
    spec = os.environ.get("SLASH_TEST_KILL")
    if not spec:
        return None
    for part in spec.split(","):
        fields = part.split(":")
        in_write = len(fields) > 4 and fields[4] == "w"
        f = [int(x) for x in fields[:4]]
        if f[0] == rank and (f[2] if len(f) > 2 else 0) == attempt:
            return f[1], (f[3] if len(f) > 3 else 0), in_write
    return None


def _committed_since(store: CheckpointStore, first_id: int) -> int:
    """Committed checkpoints with an id >= first_id (for the test hook)."""
    return sum(1 for i in store._ids() if i >= first_id and store._has_manifest(i))


def _source_time(source: Any, query: Query) -> Optional[str]:
    """The time column to pass to ``read`` (as runner's bounded reads do)."""
    import inspect

    if not getattr(source, "bounded", True):
        return None
    try:
        params = inspect.signature(source.read).parameters
    except (TypeError, ValueError):
        return None
    return query.time if "time" in params else None


def execute_split_checkpointed(query: Query, source: Any, rank: int, addresses: List[str],
                               listener: Any, group: GroupConfig, token: str, plan: _Plan,
                               link: Any) -> Tuple[pa.Table, Dict[str, Any]]:
    """One executor's run with checkpoints (see the module doc): restores
    from ``plan.resume_id`` if given, then reads, pushes and cuts. Returns
    the windows this executor fired in this attempt and its metrics."""
    from slash.runner import _no_cyclic_gc, source_nullable

    n = len(addresses)
    store = plan.store()
    schema = source.schema
    bounded = bool(getattr(source, "bounded", True))
    nullable = source_nullable(source, [*query.key, *query.value_columns])
    state = query.state_config(schema, plan.partitions, nullable)
    ex = Executor(listener, rank, addresses, state, group, token=token, bounded=bounded)
    start: Optional[Position] = None
    base_pushes = 0
    records = 0
    try:
        if plan.resume_id is not None:
            ck = store.load(plan.resume_id)
            metas = [ck.read(f"rank-{r}.meta") for r in range(n)]
            parts = {p: ck.read(f"part-{p}.bin") for p in range(plan.partitions) if p % n == rank}
            ex.restore(metas, parts)
            info = ck.rank_info(rank)
            start, base_pushes, records = info["position"], info["pushes"], info["records"]
        link.put(("resumed", rank, records))
        every = plan.every
        # push calls, counted as the core counts them (a restored executor
        # goes on from the checkpoint's count): push count -> source position after it
        pushes = base_pushes
        pos_after: Dict[int, Optional[Position]] = {pushes: start}
        out: List[pa.RecordBatch] = []
        pending: List[pa.RecordBatch] = []  # fired since the last cut
        next_id = plan.next_id
        asked: Optional[int] = None  # the id rank 0 asked for and has not cut yet
        last_ask_t, last_ask_epochs, last_ask_pushes = time.monotonic(), 0, base_pushes
        last_progress = time.monotonic()
        kill_at = _kill_point(rank, plan.attempt)
        result_schema = ex.result_schema()

        def after_call() -> None:
            nonlocal pending, asked
            while True:
                img = ex.take_checkpoint()
                if img is None:
                    break
                pending += ex.results()  # every window fired before the cut, nothing after
                t0 = time.monotonic()
                files = {f"rank-{rank}.meta": store.write(img.id, f"rank-{rank}.meta", img.meta)}
                for i, (p, data) in enumerate(img.parts.items()):
                    if i == len(img.parts) // 2 and kill_at is not None and kill_at[2] and \
                            pushes >= kill_at[0] and \
                            _committed_since(store, plan.next_id) >= kill_at[1]:
                        log.warning("test hook SLASH_TEST_KILL: rank %d kills itself while "
                                    "writing checkpoint %d", rank, img.id)
                        os.kill(os.getpid(), signal.SIGKILL)
                    files[f"part-{p}.bin"] = store.write(img.id, f"part-{p}.bin", data)
                seg, entry = store.write_segment(
                    rank, img.id, to_ipc(pa.Table.from_batches(pending, result_schema)))
                cut_records = records_at[img.pushes]
                info = {"rank": rank, "position": pos_after[img.pushes],
                        "pushes": img.pushes, "records": cut_records,
                        "windows": sum(b.num_rows for b in pending)}
                files[f"rank-{rank}.json"] = store.write(img.id, f"rank-{rank}.json",
                                                         _json(info))
                size = sum(f["size"] for f in files.values()) + entry["size"]
                link.put(("ckpt", rank, img.id, files, {seg: entry},
                          {"bytes": size, "seconds": time.monotonic() - t0}))
                out.extend(pending)
                pending = []
                for k in [k for k in pos_after if k < img.pushes]:  # older cuts are not needed
                    del pos_after[k]
                    records_at.pop(k, None)
                if asked == img.id:
                    asked = None
            got = ex.results()
            pending.extend(got)

        records_at: Dict[int, int] = {pushes: records}
        with _no_cyclic_gc():
            for pos, item in read_from(source, rank, n, query.input_columns,
                                       _source_time(source, query), start):
                if isinstance(item, (pa.RecordBatch, pa.Table)):
                    b, skip = query.prepare_selected(item)
                    ex.push_batch(b, skip=skip)
                    pushes += 1
                    records += item.num_rows
                    pos_after[pushes] = pos
                    records_at[pushes] = records
                else:  # a Watermark
                    wm = query.watermark_ticks(getattr(item, "value", None), schema)
                    if wm is not None:
                        ex.advance_watermark(wm)
                after_call()
                if rank == 0:
                    now = time.monotonic()
                    due = ((every.seconds is not None and now - last_ask_t >= every.seconds) or
                           (every.batches is not None and pushes - last_ask_pushes >= every.batches))
                    if not due and every.epochs is not None:
                        e = ex.metrics["epochs"]
                        due = e - last_ask_epochs >= every.epochs
                    if asked is not None:  # not cut yet; given up if a peer was finishing
                        due = due and ((every.seconds is not None and
                                        now - last_ask_t >= 2 * every.seconds) or
                                       (every.batches is not None and
                                        pushes - last_ask_pushes >= 2 * every.batches))
                    if due:
                        asked = next_id
                        next_id += 1
                        ex.request_checkpoint(asked)
                        last_ask_t, last_ask_pushes = now, pushes
                        if every.epochs is not None:
                            last_ask_epochs = ex.metrics["epochs"]
                if kill_at is not None and not kill_at[2] and pushes >= kill_at[0]:
                    waited = time.monotonic()  # the hook waits (polling) for CUTS commits, <= 10 s
                    while _committed_since(store, plan.next_id) < kill_at[1] and \
                            time.monotonic() - waited < 10:
                        ex.poll(0.01)
                        after_call()
                    log.warning("test hook SLASH_TEST_KILL: rank %d kills itself after %d pushes",
                                rank, pushes)
                    os.kill(os.getpid(), signal.SIGKILL)
                if time.monotonic() - last_progress >= _PROGRESS_S:
                    last_progress = time.monotonic()
                    link.put(("progress", rank, records))
            ex.finish()
            after_call()
        out.extend(pending)
        m = dict(ex.metrics)
        m["records_read"] = records
        return pa.Table.from_batches(out, schema=result_schema), m
    finally:
        ex.close()


def _json(obj: Any) -> bytes:
    import json

    return json.dumps(obj, sort_keys=True).encode()


def _worker(query: Query, source: Any, rank: int, n: int, group: GroupConfig, token: str,
            plan: _Plan, link: Any) -> None:
    """One executor process of a checkpointed run (see :mod:`slash.launcher`)."""
    try:
        lst = Executor.listen(group.transport, token=token)
        link.put(("addr", rank, lst.address))
        addresses = link.get(timeout=group.timeout)
        if isinstance(query, JoinQuery):  # a join's worker: slash.recovery_join
            from slash.recovery_join import execute_join_split_checkpointed
            result, m = execute_join_split_checkpointed(query, source[0], source[1], rank,
                                                        addresses, lst, group, token, plan, link)
        else:
            result, m = execute_split_checkpointed(query, source, rank, addresses, lst, group,
                                                   token, plan, link)
        lst.close()
        plain = {k: v for k, v in m.items() if isinstance(v, (int, float, str, type(None)))}
        link.put(("ok", rank, result, plain, None))
    except BaseException as e:  # the parent raises or recovers, naming the rank
        link.put(("error", rank, e if isinstance(e, SlashError) else None,
                  f"{type(e).__name__}: {e}", traceback.format_exc()))


class _Failed(Exception):
    """One attempt failed: ``rank`` (None if unknown) and ``cause``."""

    def __init__(self, rank: Optional[int], cause: str, error: BaseException) -> None:
        super().__init__(cause)
        self.rank, self.cause, self.error = rank, cause, error


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


def run_checkpointed(query: Query, source: Any, n: int, group: GroupConfig, token: str, *,
                     directory: str, every: Any, keep: int, max_restarts: int, timeout: float,
                     finalize: Callable[[pa.Table], pa.Table],
                     metrics: Dict[str, Any]) -> pa.Table:
    """The parent's side (see the module doc); returns the finalized result.
    ``metrics`` receives records_in, per_executor, checkpoints, recoveries,
    records_replayed and resumed_from."""
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise InvalidArgument(f"max_restarts must be an int >= 0, got {max_restarts!r}")
    policy = CheckpointEvery.parse(every)
    partitions = group.partitions_for(n)
    store = CheckpointStore(directory, fingerprint=fingerprint(query, source), executors=n,
                            partitions=partitions, keep=keep)
    stored = store.finished()
    if stored is not None:
        log.info("checkpoint directory %r holds this query's finished run: returning its result "
                 "without running again", store.dir)
        metrics.update(checkpoints=[], recoveries=[], records_replayed=0, finished_before=True)
        return from_ipc(stored)
    checkpoints: List[Dict[str, Any]] = []
    recoveries: List[Dict[str, Any]] = []
    replayed = 0
    restarts = 0
    failed_at: Optional[float] = None
    first = store.latest()
    metrics["resumed_from"] = first.id if first is not None else None
    while True:
        ck = first if restarts == 0 else store.latest()
        plan = _Plan(store.dir, store.fingerprint, n, partitions, keep, policy,
                     ck.id if ck is not None else None, (ck.id + 1) if ck is not None else 1,
                     restarts)
        if ck is not None:
            log.info("starting from checkpoint %s (attempt %d)", ck.path, restarts)
        try:
            tables, per_exec, prog = _attempt(query, source, n, group, token, plan, store, timeout,
                                              checkpoints, recoveries, failed_at)
            break
        except _Failed as f:
            if isinstance(f.error, (UsageError, CheckpointCorrupt)) or not isinstance(
                    f.error, SystemFailure):
                raise f.error
            last = store.latest(verify=False)
            lost = _replayed(f.error, last)
            replayed += lost
            if restarts >= max_restarts:
                raise SystemFailure(f"run failed after {restarts} restart(s) (max_restarts="
                                    f"{max_restarts}); last failure: {f.cause}") from f.error
            restarts += 1
            failed_at = time.monotonic()
            recoveries.append({"cause": f.cause, "rank": f.rank,
                               "from_checkpoint": last.id if last is not None else None,
                               "records_replayed": lost})
            log.warning("executor rank %s failed (%s): restarting all %d executors from %s "
                        "(restart %d of at most %d)", f.rank, f.cause, n,
                        f"checkpoint {last.id}" if last is not None else "the beginning",
                        restarts, max_restarts)
    # the committed windows of cuts before this attempt, plus everything it fired
    base = [from_ipc(ck.read_segment(rel)) for rel in sorted(ck.segments())] if ck else []
    result = finalize(pa.concat_tables([t.cast(tables[0].schema) if t.schema != tables[0].schema
                                        else t for t in base] + tables))
    store.finish(to_ipc(result),
                 {"checkpoints": len(checkpoints), "recoveries": len(recoveries)})
    metrics.update(per_executor=per_exec, checkpoints=checkpoints, recoveries=recoveries,
                   records_replayed=replayed, finished_before=False)
    return result


def _replayed(error: BaseException, last: Optional[Checkpoint]) -> int:
    """Records the failed attempt had read past checkpoint ``last`` (as last
    reported: a lower bound); carried on the _Failed's progress."""
    prog: Dict[int, int] = getattr(error, "_slash_progress", {})
    cut: Dict[int, int] = {}
    if last is not None:
        for r in prog:
            try:
                cut[r] = int(last.rank_info(r)["records"])
            except (CheckpointCorrupt, KeyError):
                cut[r] = 0
    return sum(max(0, v - cut.get(r, 0)) for r, v in prog.items())


def _attempt(query: Query, source: Any, n: int, group: GroupConfig, token: str, plan: _Plan,
             store: CheckpointStore, timeout: float, checkpoints: List[Dict[str, Any]],
             recoveries: List[Dict[str, Any]], failed_at: Optional[float]
             ) -> Tuple[List[pa.Table], List[Dict[str, Any]], Dict[int, int]]:
    """One group of n executors from plan's checkpoint to the end; raises _Failed."""
    t0 = time.monotonic()
    progress: Dict[int, int] = {}
    reports: Dict[int, Dict[int, Tuple[Any, ...]]] = {}
    resumed: set = set()

    def fail(rank: Optional[int], cause: str, err: BaseException) -> _Failed:
        err._slash_progress = dict(progress)  # type: ignore[attr-defined]
        return _Failed(rank, cause, err)

    pg = ProcessGroup(n, _worker, lambda r: (query, source, r, n, group, token, plan))
    if True:
        with pg:
            try:
                got: Dict[int, str] = {}
                while len(got) < n:
                    rep = pg.recv(timeout=max(0.0, t0 + group.timeout - time.monotonic()))
                    if rep[0] == "error":
                        raise _reported(rep)
                    got[rep[1]] = rep[2]
                pg.broadcast([got[r] for r in range(n)])
                parts: List[Optional[pa.Table]] = [None] * n
                per_exec: List[Dict[str, Any]] = [{} for _ in range(n)]
                done = 0
                while done < n:
                    rep = pg.recv(timeout=max(0.0, t0 + timeout - time.monotonic()))
                    kind = rep[0]
                    if kind == "error":
                        raise _reported(rep)
                    if kind == "resumed":
                        resumed.add(rep[1])
                        progress[rep[1]] = rep[2]
                        if len(resumed) == n and failed_at is not None and recoveries:
                            recoveries[-1]["seconds_to_resume"] = round(
                                time.monotonic() - failed_at, 3)
                    elif kind == "progress":
                        progress[rep[1]] = rep[2]
                    elif kind == "ckpt":
                        _, rank, cid, files, segs, stats = rep
                        reports.setdefault(cid, {})[rank] = (files, segs, stats)
                        if len(reports[cid]) == n:
                            _commit(store, cid, reports.pop(cid), checkpoints)
                    elif kind == "ok":
                        parts[rep[1]] = rep[2]
                        per_exec[rep[1]] = rep[3]
                        done += 1
            except SystemFailure as e:  # a process died, or a deadline passed
                dead = pg.exited()
                m = re.search(r"rank (\d+)", str(e))
                rank = int(m.group(1)) if m else (min(dead) if dead else None)
                raise fail(rank, str(e), e) from None
            except _Reported as r:
                err = r.error
                if isinstance(err, SystemFailure) and not isinstance(err, CheckpointCorrupt):
                    time.sleep(0.2)  # a peer's broken link: is a process dead? that is the cause
                    dead = {k: v for k, v in pg.exited().items()}
                    if dead:
                        k = min(dead)
                        raise fail(k, f"executor rank {k} died ({dead[k]})", err) from None
                raise fail(r.rank, str(err), err) from None
    return [t for t in parts if t is not None], per_exec, progress


class _Reported(Exception):
    def __init__(self, rank: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.rank, self.error = rank, error


def _reported(rep: Tuple[Any, ...]) -> _Reported:
    """An executor's ("error", rank, exc, text, traceback) report as an exception."""
    _, rank, exc, text, tb = rep
    log.debug("executor %d failed:\n%s", rank, tb)
    if exc is not None:
        return _Reported(rank, type(exc)(f"executor rank {rank}: {exc}"))
    return _Reported(rank, SystemFailure(f"executor rank {rank} failed: {text}"))


def _commit(store: CheckpointStore, cid: int, reports: Dict[int, Tuple[Any, ...]],
            checkpoints: List[Dict[str, Any]]) -> None:
    files: Dict[str, Dict[str, int]] = {}
    segs: Dict[str, Dict[str, int]] = {}
    size, secs = 0, 0.0
    for rank in sorted(reports):
        f, s, stats = reports[rank]
        files.update(f)
        segs.update(s)
        size += stats["bytes"]
        secs = max(secs, stats["seconds"])
    t = time.monotonic()
    store.commit(cid, files, segs, {"bytes": size})
    checkpoints.append({"id": cid, "bytes": size,
                        "seconds": round(secs + time.monotonic() - t, 4)})
    log.info("checkpoint %d committed: %d bytes", cid, size)
