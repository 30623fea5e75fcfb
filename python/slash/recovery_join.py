"""The join side of the recovery driver (:mod:`slash.recovery`): one join
executor's run with checkpoints.

A join executor reads both of its inputs merged by event time
(:func:`slash.runner._time_ordered`) and pushes one side's batch at a time.
Its position at a cut is its push count: the merged sequence of side batches
is a deterministic function of the two sources, so a restarted executor
reads them again from the start and drops the first ``pushes`` side batches
without pushing them (the items before the cut), then pushes the rest. The
leader stores it restores hold both sides' buffered rows of every window and
key of the partitions it leads (the core's join partition blobs), so the
pairs fired after the cut are fired again identically and those fired before
it come from the committed result segments, as for aggregations.

Everything else - when rank 0 asks for a cut, what a worker writes into
``DIR/chk-<c>/``, the report to the parent, the test hook
``SLASH_TEST_KILL`` - is the aggregate worker's (see :mod:`slash.recovery`).
"""
from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa

from slash._ipc import to_ipc
from slash.executor import Executor, GroupConfig
from slash.query import JoinQuery

log = logging.getLogger(__name__)


def execute_join_split_checkpointed(query: JoinQuery, left: Any, right: Any, rank: int,
                                    addresses: List[str], listener: Any, group: GroupConfig,
                                    token: str, plan: Any, link: Any,
                                    batch_rows: int = 8192) -> Tuple[pa.Table, Dict[str, Any]]:
    """One join executor's run with checkpoints: restores from
    ``plan.resume_id`` if given, drops the side batches before the cut, then
    pushes and cuts. Returns the pairs this executor fired in this attempt
    and its metrics."""
    from slash.recovery import _PROGRESS_S, _committed_since, _json, _kill_after_cuts, _kill_point
    from slash.runner import _no_cyclic_gc, _time_ordered

    n = len(addresses)
    store = plan.store()
    cfg = query.join_config(left.schema, right.schema, plan.partitions)
    bounded = bool(getattr(left, "bounded", True)) and bool(getattr(right, "bounded", True))
    ex = Executor(listener, rank, addresses, cfg, group, token=token, bounded=bounded)
    base_pushes = 0
    records = 0
    try:
        if plan.resume_id is not None:
            ck = store.load(plan.resume_id)
            metas = [ck.read(f"rank-{r}.meta") for r in range(n)]
            parts = {p: ck.read(f"part-{p}.bin") for p in range(plan.partitions) if p % n == rank}
            ex.restore(metas, parts)
            info = ck.rank_info(rank)
            base_pushes, records = int(info["pushes"]), int(info["records"])
        link.put(("resumed", rank, records))
        every = plan.every
        schemas = {"left": left.schema, "right": right.schema}
        result_schema = ex.result_schema()
        pushes = 0  # side batches consumed, the dropped ones before the cut included
        records_at: Dict[int, int] = {base_pushes: records}
        out: List[pa.RecordBatch] = []
        pending: List[pa.RecordBatch] = []  # fired since the last cut
        next_id = plan.next_id
        asked: Optional[int] = None
        last_ask_t, last_ask_epochs, last_ask_pushes = time.monotonic(), 0, base_pushes
        last_progress = time.monotonic()
        kill_at = _kill_point(rank, plan.attempt)
        dropped = 0

        def after_call() -> None:
            nonlocal pending, asked
            while True:
                img = ex.take_checkpoint()
                if img is None:
                    break
                pending += ex.results()  # every pair fired before the cut, nothing after
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
                info = {"rank": rank, "position": None, "pushes": img.pushes,
                        "records": records_at[img.pushes],
                        "windows": sum(b.num_rows for b in pending)}
                files[f"rank-{rank}.json"] = store.write(img.id, f"rank-{rank}.json", _json(info))
                size = sum(f["size"] for f in files.values()) + entry["size"]
                link.put(("ckpt", rank, img.id, files, {seg: entry},
                          {"bytes": size, "seconds": time.monotonic() - t0}))
                out.extend(pending)
                pending = []
                for k in [k for k in records_at if k < img.pushes]:  # older cuts are not needed
                    del records_at[k]
                if asked == img.id:
                    asked = None
            pending.extend(ex.results())

        with _no_cyclic_gc():
            for side, batch in _time_ordered(query, left, right, rank, n, batch_rows):
                if pushes < base_pushes:  # pushed before the cut: its rows are in the stores
                    pushes += 1
                    continue
                b, gone = query.prepare_counted(side, batch, schemas[side])
                dropped += gone
                ex.push_side_batch(side, b)
                pushes += 1
                records += batch.num_rows
                records_at[pushes] = records
                after_call()
                if rank == 0:
                    now = time.monotonic()
                    due = ((every.seconds is not None and now - last_ask_t >= every.seconds) or
                           (every.batches is not None and pushes - last_ask_pushes >= every.batches))
                    if not due and every.epochs is not None:
                        due = ex.metrics["epochs"] - last_ask_epochs >= every.epochs
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
                    _kill_after_cuts(ex, store, plan, kill_at, rank, pushes, after_call)
                if time.monotonic() - last_progress >= _PROGRESS_S:
                    last_progress = time.monotonic()
                    link.put(("progress", rank, records))
            ex.finish()
            after_call()
        out.extend(pending)
        m = dict(ex.metrics)
        m["records_read"] = records
        m["null_time_records"] = dropped
        return pa.Table.from_batches(out, schema=result_schema), m
    finally:
        ex.close()
