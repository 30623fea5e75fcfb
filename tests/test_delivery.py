"""The driver's side of exactly-once output (slash.run.delivery): which
result segments each committed checkpoint hands a transactional sink, and
a finished stream's last windows, checked against the finished marker's size
and crc32 before they are handed over."""
import json
import os

import pyarrow as pa
import pytest

from slash._ipc import to_ipc
from slash.errors import CheckpointCorrupt, InvalidState
from slash.run.delivery import Delivery, rows_minus


class Manifest:
    """A committed checkpoint as Delivery reads it: its id and the result
    segments its manifest lists (``cut id -> windows``)."""

    def __init__(self, ckpt_id, by_cut):
        self.id = ckpt_id
        self._segs = {f"results/rank-0.chk-{c}.arrow": to_ipc(t) for c, t in by_cut.items()}

    def segments(self):
        return list(self._segs)

    def read_segment(self, rel):
        return self._segs[rel]


class RecordingSink:
    """A transactional sink that keeps what each transaction carried."""
    transactional_id = "t"

    def __init__(self, have=None):
        self.sent, self.have = {}, have

    def deliver(self, cid, table):
        self.sent[cid] = sorted(table.column("w").to_pylist())
        return table.num_rows

    def recover(self, cuts):
        got = [c for c in sorted(cuts) if self.have is None or c > self.have]
        for c in got:
            self.deliver(c, cuts[c])
        return got


def windows(*ws):
    return pa.table({"w": pa.array(ws, pa.int64())})


def test_a_commit_delivers_the_segments_of_a_dropped_cut_its_manifest_carries():
    sink = RecordingSink()
    d = Delivery(sink, lambda t: t)
    d.recover(None)
    d.committed(Manifest(2, {1: windows(10), 2: windows(20)}))
    # cut 3 straddled a live scale: not committed, its segment carried into cut 4's manifest
    d.committed(Manifest(4, {1: windows(10), 2: windows(20), 3: windows(30), 4: windows(40)}))
    assert sink.sent == {2: [10, 20], 4: [30, 40]}


def test_a_resumed_run_delivers_only_the_cuts_after_its_starting_checkpoint():
    sink = RecordingSink(have=1)
    d = Delivery(sink, lambda t: t)
    assert d.recover(Manifest(2, {1: windows(10), 2: windows(20)})) == [2]
    d.committed(Manifest(3, {1: windows(10), 2: windows(20), 3: windows(30)}))
    assert sink.sent == {2: [20], 3: [30]}


def test_the_end_delivers_what_no_checkpoint_covers_once():
    sink = RecordingSink(have=2)
    d = Delivery(sink, lambda t: t)
    ck = Manifest(2, {1: windows(10), 2: windows(20, 20)})
    assert d.finished(windows(10, 20, 20, 20, 50), ck) == [3]
    assert sink.sent == {3: [20, 50]}


def test_rows_minus_is_a_multiset_difference():
    t = pa.table({"k": ["a", "b", "a", "a"], "c": [1, 2, 1, 1]})
    assert rows_minus(t, pa.table({"k": ["a", "a"], "c": [1, 1]})).to_pylist() == \
        [{"k": "b", "c": 2}, {"k": "a", "c": 1}]


def finished_stream(tmp_path, final_table):
    """A stream directory that ran to its end, its last windows in
    _STREAM_FINAL.arrow named (size, crc32) by the finished marker, and the
    driver side that finds it at the next start with a transactional sink."""
    from slash.checkpoint import write_durably
    from slash.run.plan import CheckpointEvery, CheckpointPlan
    from slash.spark._stream_ckpt import FINAL, FINISHED, DriverCheckpoints

    plan = CheckpointPlan(str(tmp_path / "ck"), "q", 2, 4, 2, CheckpointEvery.parse("1s"))
    store = plan.store()
    size, crc = write_durably(os.path.join(store.dir, FINAL), to_ipc(final_table))
    marker = {"query": "q", "checkpoints": 0, "final": {"id": 1, "size": size, "crc32": crc}}
    write_durably(os.path.join(store.dir, FINISHED), json.dumps(marker).encode())
    sink = RecordingSink()
    d = DriverCheckpoints(plan, None, lambda r, m: None, lambda m: None, lambda t, label: None,
                          lambda w, now: None, delivery=Delivery(sink, lambda t: t))
    return d, sink, os.path.join(store.dir, FINAL)


def test_a_finished_streams_last_windows_are_delivered_at_the_next_start_then_it_is_refused(
        tmp_path):
    d, sink, _ = finished_stream(tmp_path, windows(10, 20))
    with pytest.raises(InvalidState, match="ran to its end"):
        d.check_start()
    assert sink.sent == {1: [10, 20]}


def test_a_truncated_final_windows_file_is_refused_naming_it_and_delivers_nothing(tmp_path):
    d, sink, path = finished_stream(tmp_path, windows(10, 20))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 8)
    with pytest.raises(CheckpointCorrupt, match=r"_STREAM_FINAL\.arrow.*the finished marker says"):
        d.check_start()
    assert sink.sent == {}


def test_a_final_windows_file_of_the_right_size_but_other_bytes_fails_its_crc32(tmp_path):
    d, sink, path = finished_stream(tmp_path, windows(10, 20))
    data = bytearray(open(path, "rb").read())
    data[-9] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(CheckpointCorrupt, match=r"_STREAM_FINAL\.arrow.*crc32"):
        d.check_start()
    assert sink.sent == {}
