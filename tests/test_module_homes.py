"""The modules split for one concept each keep their public names where
users import them from, as the same objects.

``slash.query``, ``slash.sources``, ``slash.state``, ``slash.spark.stream``,
``slash.kafka`` and ``slash.bench.kafka`` were each split into modules of
one concern; every public name they held stays importable from them and is
the object its new home defines (not a copy that could drift).
"""
from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import List, Tuple

import pytest

#: (where users import it from, the name, the module that defines it now)
HOMES: List[Tuple[str, str, str]] = [
    *[("slash.query", n, "slash.agg_query") for n in ("Query", "check_time_zone")],
    ("slash.query", "Filter", "slash.filters"),
    ("slash.query", "one_batch", "slash.columns"),
    *[("slash.query", n, "slash.join_query") for n in ("JoinQuery", "MAX_STRING_BYTES",
                                                       "payload_words")],
    *[("slash.sources", n, "slash.sources.units") for n in ("Watermark", "Unit", "ALL_NULL",
                                                            "promises", "Position", "Work")],
    *[("slash.sources", n, "slash.sources.files") for n in ("FileSource", "BatchSource")],
    *[("slash.sources", n, "slash.sources.memory") for n in ("TableSource", "GeneratorSource")],
    *[("slash.sources", n, "slash.sources") for n in ("Source", "watermarks_from_source",
                                                      "read_from", "output_overlaps_input",
                                                      "input_stamp", "as_source")],
    *[("slash.state", n, "slash.state_config") for n in (
        "AGGREGATE_KINDS", "AT_TIME_KINDS", "COUNT_KINDS", "SKETCH_ANY_TYPE", "COUNT_DISTINCT_MAX",
        "PARAM_KINDS", "FLOAT_KINDS", "QUANTILE_SCALE", "DEFAULT_RSD", "VALUE_TYPES", "KEY_TYPES",
        "TIME_UNITS", "NULL_KEY_INT", "NULL_KEY_BYTES", "Aggregate", "CoreSlot", "core_slots",
        "value_columns", "StateConfig", "core_args")],
    *[("slash.state", n, "slash.state_columns") for n in ("as_numeric", "hash_column",
                                                          "prepare_columns", "aggregate_columns",
                                                          "result_batch")],
    ("slash.state", "StateBackend", "slash.state"),
    *[("slash.spark.stream", n, "slash.sources.streams") for n in ("RateSource",
                                                                   "DirectorySource")],
    *[("slash.spark.stream_sources", n, "slash.sources.streams") for n in ("RateSource",
                                                                           "DirectorySource")],
    *[("slash.spark.stream", n, "slash.spark.stream_handle") for n in ("StreamHandle", "Sink")],
    ("slash.spark.stream", "late_windows", "slash.spark._stream_task"),
    ("slash.spark.stream", "stream", "slash.spark.stream"),
    *[("slash.kafka", n, "slash.kafka.decode") for n in ("BATCH_RECORDS", "TS_TYPE")],
    *[("slash.kafka", n, "slash.kafka.source") for n in ("KafkaSource", "UNIT_RECORDS")],
    ("slash.kafka", "KafkaStream", "slash.kafka.stream"),
    ("slash.kafka", "KafkaSink", "slash.kafka.sink"),
    ("slash.executor", "GroupConfig", "slash.group"),
    ("slash", "GroupConfig", "slash.group"),
    *[("slash.control.controller", n, "slash.control.decisions") for n in (
        "ACTIONS", "Actuator", "ControllerConfig", "Decision", "decisions_as_dicts",
        "parse_duration_ms")],
    ("slash.control.controller", "Controller", "slash.control.controller"),
    *[("slash.bench.kafka", n, "slash.bench._kafka_topic") for n in (
        "WINDOW_MS", "SCHEMA", "SQL", "ANSWER_COLUMNS", "CLOSER", "Topic", "ysb_json", "fill_topic",
        "end_offsets", "topic_values", "reference", "comparable", "paced_values", "TRICKLE_RATE",
        "produce_paced")],
    *[("slash.bench.kafka", n, "slash.bench._kafka_measure") for n in ("tree_cpu", "SideRun",
                                                                       "measured", "Side")],
    *[("slash.bench.kafka", n, "slash.bench._kafka_slash") for n in ("side_slash_run",
                                                                     "side_slash_spark")],
    *[("slash.bench.kafka", n, "slash.bench._kafka_spark") for n in ("spark_kafka_jars",
                                                                     "side_spark")],
    *[("slash.bench.kafka", n, "slash.bench._kafka_flink") for n in (
        "FLINK_KAFKA_POM", "flink_kafka_jars", "flink_job", "flink_config", "side_flink")],
    *[("slash.bench.kafka", n, "slash.bench._kafka_sweep") for n in (
        "latency_run", "SUSTAINED_P99_MS", "FEED_SHARE", "sustains", "judged_p99", "fed_short",
        "sweep_rates")],
    *[("slash.bench.kafka", n, "slash.bench.kafka") for n in ("NAME", "HELP", "SIDES",
                                                              "add_arguments", "run", "markdown",
                                                              "summary")],
]


@pytest.mark.parametrize("where, name, home", HOMES, ids=[f"{w}.{n}" for w, n, _ in HOMES])
def test_a_public_name_stays_importable_where_it_was_as_its_homes_object(where, name, home):
    got = getattr(importlib.import_module(where), name)
    assert got is getattr(importlib.import_module(home), name)


@pytest.mark.parametrize("where", sorted({w for w, _, _ in HOMES}))
def test_a_split_module_lists_its_public_names(where):
    mod = importlib.import_module(where)
    assert {n for w, n, _ in HOMES if w == where} <= set(mod.__all__)


def test_an_all_null_bound_unpickles_as_the_one_all_null():
    from slash.sources import ALL_NULL

    assert pickle.loads(pickle.dumps([ALL_NULL, None]))[0] is ALL_NULL


@pytest.mark.parametrize("home", sorted({h for _, _, h in HOMES}))
def test_each_module_of_the_split_holds_at_most_800_lines(home):
    path = Path(importlib.import_module(home).__file__)
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 800, f"{home} has {lines} lines"


def test_a_file_source_still_logs_under_slash_sources(tmp_path, caplog):
    import logging

    import pyarrow as pa
    import pyarrow.parquet as pq

    from slash.sources import FileSource

    pq.write_table(pa.table({"t": [1, 2, 3]}), tmp_path / "a.parquet")
    caplog.set_level(logging.DEBUG, logger="slash.sources")
    FileSource(str(tmp_path))
    assert any(r.name == "slash.sources" and "1 files" in r.getMessage() for r in caplog.records)


def test_a_stream_handle_still_warns_under_slash_spark_stream(caplog):
    import logging

    from slash.spark.stream import StreamHandle

    caplog.set_level(logging.WARNING, logger="slash.spark.stream")
    StreamHandle(1, lambda t: None)._warn_late(5)
    assert [r.name for r in caplog.records
            if "5 late record(s) not applied" in r.getMessage()] == ["slash.spark.stream"]


def test_a_kafka_decoder_still_warns_under_slash_kafka(caplog):
    import logging

    import pyarrow as pa

    from slash.kafka.decode import Decoder

    d = Decoder("events", "json", pa.schema([("t", pa.int64())]), None, None)
    caplog.set_level(logging.WARNING, logger="slash.kafka")
    d.report([{"offset": 7, "error": "not JSON"}], 3, 7)
    assert [r.name for r in caplog.records
            if "1 malformed value(s) skipped, the first at offset 7" in r.getMessage()] == \
        ["slash.kafka"]


#: modules moved into a package: (the old name, a public name it held, its new home)
MOVED = [("slash.file_source", "FileSource", "slash.sources.files"),
         ("slash.file_source", "BatchSource", "slash.sources.files"),
         ("slash.source_units", "Watermark", "slash.sources.units"),
         ("slash.memory_sources", "TableSource", "slash.sources.memory"),
         ("slash.memory_sources", "GeneratorSource", "slash.sources.memory"),
         ("slash.parquet_chunks", "ChunkReader", "slash.sources.parquet_chunks"),
         ("slash.kafka_source", "KafkaSource", "slash.kafka.source"),
         ("slash.kafka_stream", "KafkaStream", "slash.kafka.stream"),
         ("slash.kafka_sink", "KafkaSink", "slash.kafka.sink"),
         ("slash.kafka_decode", "Decoder", "slash.kafka.decode"),
         ("slash.kafka_reader", "open_reader", "slash.kafka.reader"),
         ("slash.kafka_client", "consumer_config", "slash.kafka.client"),
         ("slash.controller", "ControllerConfig", "slash.control.controller"),
         ("slash.latency_model", "LatencyModel", "slash.control.latency_model"),
         ("slash.control_logic", "LogicUpdates", "slash.control.logic"),
         ("slash.control_moves", "LiveMoves", "slash.control.moves"),
         ("slash.control_socket", "ControlServer", "slash.control.server"),
         ("slash.worker", "run_rank", "slash.run.worker"),
         ("slash.launcher", "ProcessGroup", "slash.run.launcher"),
         ("slash.ckpt_worker", "AskSchedule", "slash.run.rank_ckpt"),
         ("slash.recovery", "run_checkpointed", "slash.run.recovery.checkpointed"),
         ("slash.recovery", "CheckpointedRun", "slash.run.recovery.checkpointed"),
         ("slash.recovery_join", "merged", "slash.run.recovery.join"),
         ("slash.live_ckpt", "run_live_checkpointed", "slash.run.recovery.live"),
         ("slash.live_scale", "LiveScaler", "slash.run.live.scale"),
         ("slash.live_scale", "deal_work", "slash.run.live.scale"),
         ("slash.live_join", "LiveJoinPositions", "slash.run.live.join"),
         ("slash.cli_run", "add_arguments", "slash.cli.run"),
         ("slash.doctor", "collect", "slash.cli.doctor"),
         ("slash.autotune", "run_autotuned", "slash.control.autotune")]


@pytest.mark.parametrize("old, name, home", MOVED, ids=[f"{o}.{n}" for o, n, _ in MOVED])
def test_a_moved_module_still_imports_its_names_and_warns_where_they_went(old, name, home):
    import sys
    import warnings

    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    assert getattr(mod, name) is getattr(importlib.import_module(home), name)
    assert any(issubclass(w.category, DeprecationWarning) and home in str(w.message)
               for w in caught)
