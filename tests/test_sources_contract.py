"""The source contract (slash.sources.contract): every source kind is in
the registry under its name; what identifies a source in a checkpoint's
fingerprint, whether its positions re-deal to another executor count and
why not are the source's own answers, so nothing outside a source asks
which one it is; a new kind is one registered class."""
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import slash.kafka  # noqa: F401  (registers the Kafka kinds)
import slash.sources.streams  # noqa: F401  (registers the Spark stream's kinds)
from slash.errors import NotSupported
from slash.run.recovery.checkpointed import fingerprint
from slash.run.resume import check_resplittable
from slash.sources import (BatchSource, FileSource, GeneratorSource, TableSource, describe,
                           global_units, register, registered, resplittable, source_type,
                           why_not_resplit)
from slash.query import Query

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.int64())])


def _make(rank, n):
    yield pa.record_batch({"t": [rank], "k": [n]}, schema=SCHEMA)


def _batch(i):
    return pa.record_batch({"t": [i], "k": [i]}, schema=SCHEMA)


@pytest.fixture
def files(tmp_path):
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"t": [1, 2, 3], "k": [0, 1, 0]}), p)
    return FileSource(str(p))


def test_every_source_kind_is_registered_under_its_name():
    kinds = registered()
    assert {"files", "batches", "table", "generator", "kafka", "kafka-stream", "rate",
            "directory"} <= set(kinds)
    assert all(cls.kind == name for name, cls in kinds.items())
    assert source_type("files") is FileSource and source_type("table") is TableSource


def test_an_unknown_kind_is_refused_naming_the_known_ones():
    with pytest.raises(KeyError, match="'files'"):
        source_type("no-such-source")


def test_a_new_source_kind_is_one_registered_class_and_a_name_is_taken_once():
    @register("test-contract-kind")
    class Counted:
        schema = SCHEMA

        def read(self, rank, n, columns=None):
            yield pa.record_batch({"t": [rank], "k": [n]}, schema=SCHEMA)

    assert registered()["test-contract-kind"] is Counted
    assert describe(Counted()) == "Counted"  # no describe(): named by its type
    assert not resplittable(Counted()) and not global_units(Counted())
    assert why_not_resplit(Counted()) == "a Counted records no position in global terms"
    with pytest.raises(ValueError, match="registered twice"):
        register("test-contract-kind")(type("Other", (), {}))


def test_a_checkpoint_fingerprint_names_each_source_as_before(files):
    q = Query(time="t", window="tumbling:10ms", key="k", aggregates=["count"])
    table = pa.table({"t": [1], "k": [2]})
    assert fingerprint(q, files) == f"{q!r} over files {sorted(files.paths)} (3 rows)"
    assert fingerprint(q, TableSource(table)) == f"{q!r} over table of 1 rows ['t', 'k']"
    assert fingerprint(q, GeneratorSource(_make, SCHEMA)) == \
        f"{q!r} over generator {__name__}._make ['t', 'k']"


def test_files_and_generated_batches_are_read_in_global_units(files):
    for src in (files, BatchSource(_batch, 4, SCHEMA, 1)):
        assert global_units(src) and resplittable(src)


@pytest.mark.parametrize("src, why", [
    (TableSource(pa.table({"t": [1], "k": [2]})), "slices depend on the executor count"),
    (GeneratorSource(_make, SCHEMA), "make(rank, n) decides each executor's input")])
def test_a_source_that_cannot_re_deal_says_why(src, why):
    assert not global_units(src) and not resplittable(src)
    with pytest.raises(NotSupported, match=re.escape(why)):
        check_resplittable(src, 2, 3, "/ck")
    check_resplittable(src, 2, 2, "/ck")  # the same count resumes each rank's own split
