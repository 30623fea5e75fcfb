"""One Spark stream task: a Slash executor kept running inside a barrier
task over its share of an unbounded source (:func:`stream_task`). The task
joins its group through the driver's rendezvous and runs the rank the one
worker entry builds (:func:`slash.run.worker.run_rank` with the stream's
:class:`slash.run.stream.StreamPlan`: the one rank loop, see
:mod:`slash.run.stream`)."""
from __future__ import annotations

import dataclasses

from slash.run.stream import DONE, NEVER, StreamPlan, late_windows  # noqa: F401 (re-exported)
from slash.sources import malformed_records
from slash.spark._tasks import join_group, rank_errors, report_error
from slash.run.worker import RankSpec, run_rank


def stream_task(plan: StreamPlan):
    def task(batches):
        for _ in batches:
            pass
        from pyspark import BarrierTaskContext
        rank = BarrierTaskContext.get().partitionId()
        with rank_errors(rank):
            rank, addresses, lst, conn, start_ms = join_group(
                plan.group.transport, plan.token, plan.rendezvous, plan.group.timeout)
            spec = RankSpec(plan.query, plan.source, plan.group, plan.token,
                            stream=dataclasses.replace(plan, start_ms=start_ms))
            try:
                _, m = run_rank(spec, rank, addresses, lst, conn)
            except BaseException as e:
                report_error(conn, rank, e)
                raise
            finally:
                lst.close()
                conn.close()
            yield {"rank": rank, "records_in": int(m["records_in"]),
                   "late_records": int(m["late_records"]),
                   "malformed_records": malformed_records(plan.source)}
    return task
