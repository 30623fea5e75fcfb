"""Streams: Slash executors kept running in one Spark barrier stage over an
unbounded source (:mod:`slash.sources.streams`, or a
:class:`slash.kafka.KafkaStream`), each window going to the sink (a Parquet
directory written by the tasks, or a callable on the driver, once per
window, whole, in event-time order) as soon as it fires. What a user sees
(sinks, lateness and ``late_output=``, ``checkpoint=``, rescaling) is in
docs/spark.md ("Streams"); checkpoints in docs/recovery.md ("Spark streams").

Where it lives: a task's loop in :mod:`slash.spark._stream_task`, the
driver's handle in :mod:`slash.spark.stream_handle` (the tasks' reports
dispatched by handlers, the barrier jobs under the one supervisor), its
live controls in :mod:`slash.spark.stream_controls`, checkpoints in
:mod:`slash.spark._stream_ckpt`. This module checks a stream's arguments
into a :class:`~slash.spark.stream_handle.StreamSetup` and starts the handle.

>>> # h = stream(spark, RateSource(rate=50_000), time="event_time", window="tumbling:1s",
>>> #            key="key", aggs=["count"], sink=lambda t: print(t.num_rows),
>>> #            lateness="2s", late_output="late/")
>>> # ...; m = h.stop(); print(m["latency_ms"], m["late_records"])
"""
from __future__ import annotations

import dataclasses
import logging
import os
import secrets
from typing import Any, Optional, Sequence, Tuple, Union

import pyarrow as pa

from slash.checkpoint import CheckpointStore
from slash.errors import InvalidArgument, NotSupported
from slash.executor import GroupConfig
from slash.kafka import KafkaStream
from slash.run.delivery import Delivery
from slash.run.failure import RestartPolicy
from slash.run.plan import CheckpointEvery, CheckpointPlan
from slash.run.supervisor import newest_shape
from slash.sources import StreamSource
from slash.sources.streams import DirectorySource, RateSource
from slash.spark import _env
from slash.spark._stream_task import late_windows
from slash.spark.batch import group_for, make_query, one_start_time, session_time_zone
from slash.spark.stream_handle import Sink, StreamHandle, StreamSetup

log = logging.getLogger(__name__)

__all__ = ["DirectorySource", "RateSource", "Sink", "StreamHandle", "late_windows", "stream"]


def stream(spark: Any, source: Union[RateSource, DirectorySource, KafkaStream, str], *,
           time: str, window: str,
           key: Union[str, Sequence[str]], aggs: Sequence[str] = ("count",),
           filter: Union[None, str, Sequence[str]] = None, lateness: Union[None, int, str] = None,
           sink: Sink, late_output: Optional[str] = None, executors: Optional[int] = None,
           transport: str = "shm", group: Optional[GroupConfig] = None,
           slots_wait: float = 30.0, metrics_port: Optional[int] = None, ui: bool = False,
           ui_bind: str = "127.0.0.1", ui_token: Optional[str] = None,
           checkpoint: Optional[str] = None, checkpoint_every: Union[str, int, float] = "10s",
           max_restarts: int = 3, checkpoint_keep: int = 2, start_time: Optional[str] = None,
           startTime: Optional[str] = None) -> StreamHandle:
    """Starts a streaming aggregation; returns at once with its handle.
    ``start_time`` (or Spark's ``startTime``): moves tumbling and sliding
    windows as for :func:`slash.spark.window_aggregate`.

    The query spellings are those of :func:`slash.spark.window_aggregate`.
    ``source``: a RateSource, a DirectorySource, a
    :class:`slash.kafka.KafkaStream` or a directory path. A KafkaStream is
    read by each task directly (its share of the partitions, no record
    through the JVM or the driver); its watermarks are the source's (per
    partition, with its idle rule; ``lateness`` is the source's), its
    positions are offsets per partition, and a checkpoint's are re-dealt with
    their offsets to another executor count (docs/kafka.md). ``sink``:
    a directory for Parquet parts (written by the tasks), a callable taking
    one window's rows (called on the driver, in event-time order, in a thread
    of its own; see :class:`StreamHandle` for a sink that raises; a
    :class:`slash.kafka.KafkaSink` without ``transactional_id`` is one: at
    least once), or, with ``checkpoint``, a KafkaSink with a
    ``transactional_id``: each committed checkpoint's windows in one Kafka
    transaction, exactly once (:mod:`slash.run.delivery`).
    ``late_output``: a directory where each task writes the records it could
    not apply (older than its watermark minus ``lateness``), as read from the
    source, as ``late-rank{r}-{seq}.parquet``. The stage holds ``executors``
    task slots until stopped.

    ``metrics_port``: serve the live metrics over HTTP on the driver (0: a
    free port; ``handle.metrics_url`` is the Prometheus endpoint,
    ``handle.ui_url`` the live page); ``ui=True`` serves them on a free port
    without naming one. ``ui_bind``: the address (loopback by default; any
    other needs ``ui_token``, made if not given, which the URLs carry). The
    server stops when :meth:`StreamHandle.wait`/``stop`` returns.

    ``checkpoint``: a directory every Spark worker and the driver see; the
    stream takes aligned checkpoints there every ``checkpoint_every``
    (``"10s"``, ``"N epochs"``, ``"N batches"``), restarts its barrier job
    from the newest one when a task fails (at most ``max_restarts`` times),
    and resumes from it when started again with the same directory. Output
    becomes exactly-once and waits for the checkpoint covering it: see
    docs/recovery.md. A DirectorySource resumes after the files (and row
    groups) read before the cut, with any executor count (its positions are
    in global terms: :meth:`DirectorySource.work`): keep them in place,
    unchanged. A KafkaStream seeks to the offsets the checkpoint recorded,
    with any executor count (the topic must keep those records).
    """
    _env.require_pyspark()
    import pyspark.sql.functions  # noqa: F401

    source = _stream_source(source)
    query = make_query(time, window, key, aggs, filter, source.stream_lateness(lateness),
                       session_time_zone(spark), one_start_time(start_time, startTime))
    schema = _checked_schema(query, source)
    delivery, sink_dir, late_dir = _outputs(sink, checkpoint, late_output)
    RestartPolicy(max_restarts)  # checked before anything starts
    every = CheckpointEvery.parse(checkpoint_every) if checkpoint is not None else None
    n, group = group_for(spark, query, executors, transport, group, slots_wait)
    ck_plan = None
    if every is not None:
        group, ck_plan = _checkpoint_plan(os.fspath(checkpoint),  # type: ignore[arg-type]
                                          f"stream {query!r} over {source!r}", group, n,
                                          checkpoint_keep, every)
    setup = StreamSetup(spark, query, schema, source, group, token=secrets.token_hex(16),
                        sink_dir=sink_dir, delivery=delivery, checkpoint=ck_plan,
                        slots_wait=slots_wait,
                        max_restarts=max_restarts, metrics_port=metrics_port, ui=ui,
                        ui_bind=ui_bind, ui_token=ui_token)
    handle = StreamHandle(n, None if delivery is not None else sink, group.lateness_ms, late_dir,
                          setup=setup)
    handle.start()
    return handle


def _stream_source(source: Any) -> StreamSource:
    """``source`` as a stream source: a directory path is a DirectorySource."""
    if isinstance(source, (str, os.PathLike)):
        source = DirectorySource(os.fspath(source))
    if not isinstance(source, StreamSource):
        raise InvalidArgument(f"stream source must be a RateSource, a DirectorySource, a "
                              f"KafkaStream or a directory, got {type(source).__name__}")
    return source


def _checked_schema(query: Any, source: StreamSource) -> pa.Schema:
    """The stream's schema, once the query fits a stream and the source."""
    if query.top:
        raise InvalidArgument(f"top:{query.top[0]}:{query.top[1]} ranks every key of a window, and "
                              "a stream appends a window's rows as each leader fires its keys: no "
                              "appended part could say which keys rank first (run it over bounded "
                              "inputs: slash.spark.window_aggregate)")
    schema = source.resolve_schema()
    query.check(schema)
    source.check_stream(query, schema)
    return schema


def _outputs(sink: Any, checkpoint: Optional[str], late_output: Any
             ) -> Tuple[Optional[Delivery], Optional[str], Optional[str]]:
    """(the exactly-once delivery, the sink's directory, the late rows'
    directory), each None when not asked for; the directories made."""
    delivery, sink_dir = _sink(sink, checkpoint)
    if late_output is not None and not isinstance(late_output, (str, os.PathLike)):
        raise InvalidArgument(f"late_output must be a directory, got {type(late_output).__name__}")
    late_dir = None if late_output is None else os.fspath(late_output)
    for d in (sink_dir, late_dir):
        if d is not None and "://" not in d:
            os.makedirs(d, exist_ok=True)
    return delivery, sink_dir, late_dir


def _sink(sink: Any, checkpoint: Optional[str]) -> Tuple[Optional[Delivery], Optional[str]]:
    """(the transactional sink's delivery, the directory sink's path) of ``sink``."""
    if getattr(sink, "transactional_id", None) is not None:  # exactly once, by checkpoint
        if checkpoint is None:
            raise InvalidArgument(
                "a sink with a transactional_id delivers each checkpoint's windows in one "
                "transaction when the checkpoint commits: give checkpoint=, or a KafkaSink "
                "without transactional_id (written at least once, as each window fires)")
        return Delivery(sink, lambda t: t), None  # the tasks' segments are finalized windows
    if not (callable(sink) or isinstance(sink, (str, os.PathLike))):
        raise InvalidArgument(f"sink must be a directory, a callable or a transactional "
                              f"KafkaSink, got {type(sink).__name__}")
    return None, None if callable(sink) else os.fspath(sink)


def _checkpoint_plan(checkpoint: str, fp: str, group: GroupConfig, n: int, keep: int,
                     every: CheckpointEvery) -> Tuple[GroupConfig, CheckpointPlan]:
    """The group (its key partition count fixed for the life of the
    checkpoints: a resumed stream takes the checkpoint's, any executor
    count, and a rescaled group keeps it) and the checkpoint plan."""
    if "://" in checkpoint:
        raise NotSupported(f"checkpoint={checkpoint!r}: a mounted directory every worker sees, "
                           "not a URI")
    ck_dir = os.path.abspath(checkpoint)
    parts = group.partitions_for(n)
    shape = newest_shape(CheckpointStore(ck_dir, fingerprint=fp, executors=n, partitions=parts,
                                         keep=keep), group.partitions, "stream")
    if shape is not None:
        parts = shape[1]
    group = dataclasses.replace(group, partitions=parts)
    group.partitions_for(n)
    return group, CheckpointPlan(ck_dir, fp, n, parts, keep, every)
