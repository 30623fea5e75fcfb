"""Restart with another executor count and rescale by checkpoint (issues 16 and 17).

A checkpoint cut by 2 executors resumes with 1, 3 or 4: the result equals
the failure-free run's (itself checked against DuckDB), row for row. A
running group rescaled through CheckpointedRun (2 -> 3 -> 1) gives the same
result. Sources that cannot be re-split refuse, naming why."""
import threading
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.errors import NotSupported, SystemFailure
from slash.executor import GroupConfig
from slash.run.recovery.checkpointed import CheckpointedRun
from slash.runner import run
from slash.sources import FileSource

from test_recovery import ROWS, _assert_same, _gen, _query, make, needs_core


class SlowFiles(FileSource):
    """A FileSource paced ``pace`` s a batch (so a rescale lands mid-run)."""

    pace = 0.15

    def read_work(self, *a, **kw):
        for item in super().read_work(*a, **kw):
            time.sleep(self.pace)
            yield item


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("input")
    for r in range(2):
        batches = list(make(r, 2, pace=0))
        for j in range(0, len(batches), 5):  # 5 files of 5 row groups per rank
            pq.write_table(pa.Table.from_batches(batches[j:j + 5]),
                           str(d / f"part-{r}-{j:02d}.parquet"), row_group_size=ROWS)
    return str(d)


_ref = {}


def reference(kind, files):
    if kind not in _ref:
        _ref[kind] = run(_query(kind), FileSource(files), executors=2)
    return _ref[kind]


def _checkpointed(kind, source, d, n, **kw):
    m = {}
    got = run(_query(kind), source, executors=n, checkpoint=str(d), metrics=m,
              checkpoint_every="4 batches", group=GroupConfig(epoch_ms=10), **kw)
    return got, m


def _cut_with_two(kind, source, d, monkeypatch):
    """Two executors take checkpoints, then one dies and the run gives up:
    the directory holds checkpoints of 2 executors."""
    monkeypatch.setenv("SLASH_TEST_KILL", "1:9:0:2")  # rank 1, push 9, after 2 cuts
    with pytest.raises(SystemFailure):
        _checkpointed(kind, source, d, 2, max_restarts=0)
    monkeypatch.delenv("SLASH_TEST_KILL")


@needs_core
@pytest.mark.parametrize("kind,n", [("tumbling", 1), ("tumbling", 3), ("sliding", 3),
                                    ("session", 4), ("sliding", 1)])
def test_checkpoint_of_two_executors_resumes_with_another_count(kind, n, files, tmp_path,
                                                                 monkeypatch):
    _cut_with_two(kind, FileSource(files), tmp_path, monkeypatch)
    got, m = _checkpointed(kind, FileSource(files), tmp_path, n)
    assert m["resumed_from"] is not None  # restored, not a fresh start
    assert m["executors"] == n
    _assert_same(got, reference(kind, files))
    assert m["records_in"] == FileSource(files).rows  # every record read once in all


@needs_core
def test_resumed_with_another_count_tumbling_equals_duckdb(files, tmp_path, monkeypatch):
    _cut_with_two("tumbling", FileSource(files), tmp_path, monkeypatch)
    got, _ = _checkpointed("tumbling", FileSource(files), tmp_path, 3)
    want = duckdb.sql(f"select (t // 10000) * 10000 as ws, k, count(*) as c, sum(v) as s "
                      f"from read_parquet('{files}/*.parquet') group by all order by ws, k").fetchall()
    ws = got.column("window_start").cast(pa.int64()).to_pylist()
    assert list(zip(ws, got.column("k").to_pylist(), got.column("count").to_pylist(),
                    [int(x) for x in got.column("sum_v").to_pylist()])) == \
        [(a, b, c, int(d)) for a, b, c, d in want]


@needs_core
def test_a_generator_source_refuses_another_executor_count_naming_why(tmp_path, monkeypatch):
    _cut_with_two("tumbling", _gen(), tmp_path, monkeypatch)
    with pytest.raises(NotSupported, match=r"cut with 2 executors.*make\(rank, n\).*executors=2"):
        _checkpointed("tumbling", _gen(), tmp_path, 3)


@needs_core
def test_rescale_of_a_running_group_two_to_three_to_one_gives_the_failure_free_output(
        files, tmp_path):
    control = CheckpointedRun()
    out = {}

    def go():
        try:
            out["got"] = _checkpointed("session", SlowFiles(files), tmp_path, 2, control=control)
        except BaseException as e:  # noqa: BLE001 -- re-raised below
            out["error"] = e

    t = threading.Thread(target=go)
    t.start()
    deadline = time.monotonic() + 30
    while control.executors is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    first = control.scale_out(1, timeout=60)
    second = control.rescale(1, timeout=60)
    t.join(120)
    if "error" in out:
        raise out["error"]
    got, m = out["got"]
    assert (first["from"], first["to"], second["from"], second["to"]) == (2, 3, 3, 1)
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 3), (3, 1)]
    assert m["rescales"][0]["checkpoint"] < m["rescales"][1]["checkpoint"]
    assert m["executors"] == 1 and not m["recoveries"]
    _assert_same(got, reference("session", files))


@needs_core
def test_rescale_of_a_generator_run_is_refused_before_anything_stops(tmp_path):
    control = CheckpointedRun()
    out = {}
    t = threading.Thread(target=lambda: out.update(
        got=_checkpointed("tumbling", _gen(), tmp_path, 2, control=control)))
    t.start()
    while control.executors is None and t.is_alive():
        time.sleep(0.01)
    with pytest.raises(NotSupported, match="GeneratorSource"):
        control.rescale(3)
    t.join(60)
    assert not out["got"][1]["rescales"]


@needs_core
def test_an_executor_killed_after_a_rescale_recovers_with_the_new_count(files, tmp_path,
                                                                        monkeypatch):
    # attempt 1 is the rescaled group of 3: its rank 2 dies at its 3rd push
    monkeypatch.setenv("SLASH_TEST_KILL", "2:3:1")
    control = CheckpointedRun()
    out = {}
    t = threading.Thread(target=lambda: out.update(
        got=_checkpointed("tumbling", SlowFiles(files), tmp_path, 2, control=control)))
    t.start()
    while control.executors is None and t.is_alive():
        time.sleep(0.01)
    time.sleep(0.3)
    control.rescale(3, timeout=60)
    t.join(120)
    got, m = out["got"]
    assert [(r["from"], r["to"]) for r in m["rescales"]] == [(2, 3)]
    [rec] = m["recoveries"]
    assert rec["rank"] == 2 and m["executors"] == 3
    _assert_same(got, reference("tumbling", files))


def test_the_former_name_run_control_says_where_it_went():
    import slash.run.recovery.checkpointed

    with pytest.raises(AttributeError, match="renamed slash.run.recovery.checkpointed.CheckpointedRun"):
        slash.run.recovery.checkpointed.RunControl
