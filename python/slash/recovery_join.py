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

Everything else - when rank 0 asks for a cut and what a worker writes into
``DIR/chk-<c>/`` and reports to the parent (:mod:`slash.ckpt_worker`), the
test hook ``SLASH_TEST_KILL`` (:mod:`slash.recovery`) - is the aggregate
worker's.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Tuple

import pyarrow as pa

from slash.ckpt_worker import AskSchedule, write_image
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
    from slash.recovery import _PROGRESS_S, _kill_after_cuts, _kill_in_write, _kill_point
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
        schemas = {"left": left.schema, "right": right.schema}
        result_schema = ex.result_schema()
        pushes = 0  # side batches consumed, the dropped ones before the cut included
        records_at: Dict[int, int] = {base_pushes: records}
        out: List[pa.RecordBatch] = []
        pending: List[pa.RecordBatch] = []  # fired since the last cut
        asks = AskSchedule(ex, plan.every, plan.next_id, base_pushes)  # rank 0's
        last_progress = time.monotonic()
        kill_at = _kill_point(rank, plan.attempt)
        dropped = 0

        def after_call() -> None:
            nonlocal pending
            while True:
                img = ex.take_checkpoint()
                if img is None:
                    break
                pending += ex.results()  # every pair fired before the cut, nothing after
                info = {"rank": rank, "position": None, "pushes": img.pushes,
                        "records": records_at[img.pushes],
                        "windows": sum(b.num_rows for b in pending)}
                write_image(store, link, rank, img, pending, result_schema, info,
                            lambda p: f"part-{p}.bin",
                            _kill_in_write(store, plan, kill_at, rank, pushes))
                out.extend(pending)
                pending = []
                for k in [k for k in records_at if k < img.pushes]:  # older cuts are not needed
                    del records_at[k]
                asks.cut(img.id)
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
                    asks.step(pushes)
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
