"""The windows a checkpoint driver hands out with an image are exactly those
fired before the image's cut (Executor.results_at_cut / split_at_cut).

Between the executor call that cut and the driver's results(), the service
thread serves peers' later epochs and fires every window they close up to
this rank's own published watermark. Those windows are not fired in the
image; a group restored from it fires them again. A driver that gave them
to the checkpoint (the old ``pending += ex.results()`` after
take_checkpoint) wrote each such (window, key) twice into a resumed run's
output: the duplicate rows of the beyond-M restart scenario
(slash.run.recovery.live), one leader's share of a window.

Executors run as threads of this process over shm, as in
test_checkpoint_exec."""
from __future__ import annotations

import threading
import time
from typing import List

import pyarrow as pa

import slash
from slash.executor import checkpoint_fired, split_at_cut

from _state_reference import AGGS, VALUE_TYPES, assert_same, duckdb_reference
from test_checkpoint_exec import batches, finish_all, in_threads, open_group, restore_group
from test_executor import stream

WINDOW = "tumbling:10s"


def keys_of(got: List[pa.RecordBatch]) -> List[tuple]:
    return [(ws, k) for b in got
            for ws, k in zip(b.column("window_start").to_pylist(), b.column("key").to_pylist())]


def test_windows_fired_after_the_cut_before_results_are_taken_go_with_the_next_cut_not_the_image():
    state = slash.StateConfig(window=WINDOW, aggregates=AGGS, value_types=VALUE_TYPES)
    table = stream(3, n=12000, span_ms=60000)
    t = table.column("time").to_numpy()
    owner = (table.column("key").to_numpy() + t) % 2  # rank 0 or 1, no pattern in time
    mine0, mine1 = owner == 0, owner == 1
    # rank 0 runs ahead (to 45 s), rank 1 lags (to 15 s): the cut fires at rank 1's mark
    pre0 = table.filter(pa.array(mine0 & (t < 45000)))
    pre1 = table.filter(pa.array(mine1 & (t < 15000)))
    post1 = table.filter(pa.array(mine1 & (t >= 15000) & (t < 50000)))  # after rank 1's cut
    exs = open_group(2, state)
    ex0, ex1 = exs
    held = [[], []]  # results taken before the images, as a driver holds them
    ready1, cut1 = threading.Event(), threading.Event()
    images = {}

    def rank0():
        for b in batches(pre0):
            ex0.push_batch(b)
            held[0] += ex0.results()
        ex0.end_epoch()
        while not ready1.is_set():
            ex0.poll(0.01)
            held[0] += ex0.results()
        ex0.request_checkpoint(1)
        while not cut1.is_set():  # rank 0 cuts inside one of these calls ...
            ex0.poll(0.01)
            held[0] += ex0.results()

    def rank1():
        for b in batches(pre1):
            ex1.push_batch(b)
            held[1] += ex1.results()
        ex1.end_epoch()
        ready1.set()
        while (img := ex1.take_checkpoint()) is None:
            ex1.poll(0.01)
            held[1] += ex1.results()
        images[1] = img
        cut1.set()
        before, after = ex1.results_at_cut(img, held[1])
        held[1] = before
        for b in batches(post1):  # rank 1's later epochs: they close windows on rank 0
            ex1.push_batch(b)
        ex1.end_epoch()

    in_threads([rank0, rank1])
    # ... and takes its image only now: meanwhile its service thread fired what rank 1's
    # later epochs closed (up to rank 0's own watermark)
    deadline = time.monotonic() + 20
    fired = checkpoint_fired(images[1].meta)
    while time.monotonic() < deadline and ex0.metrics["rows_emitted"] <= sum(
            b.num_rows for b in held[0]):
        time.sleep(0.01)
    images[0] = ex0.take_checkpoint()
    assert images[0] is not None and checkpoint_fired(images[0].meta) == fired
    everything = held[0] + ex0.results()
    before0, after0 = split_at_cut(everything, images[0].meta, session=False)
    assert after0, "the service thread fired no window after the cut: the case is not exercised"
    assert all(ws + 10000 <= fired for ws, _ in keys_of(before0))
    assert all(ws + 10000 > fired for ws, _ in keys_of(after0))
    assert sorted(keys_of(before0 + after0)) == sorted(keys_of(everything))
    for ex in exs:
        ex.close()

    # the beyond-M restart: a group of 3 from the images, the input left re-dealt
    rest = pa.concat_tables([table.filter(pa.array(mine0 & (t >= 45000))),
                             table.filter(pa.array(mine1 & (t >= 15000)))]).sort_by("time")
    exs = restore_group(images, 3, state)
    todo = [batches(rest.slice(i * (rest.num_rows // 3 + 1), rest.num_rows // 3 + 1))
            for i in range(3)]
    resumed = finish_all(exs, todo)
    for ex in exs:
        ex.close()
    # the windows fired after the cut are fired again by the restored group: given to the
    # checkpoint they would be in the output twice
    assert set(keys_of(after0)) <= set(keys_of(resumed))
    got = pa.Table.from_batches(before0 + held[1] + resumed)
    keys = keys_of(got.to_batches())
    assert len(keys) == len(set(keys)), "a (window, key) was emitted twice"
    assert_same(got, duckdb_reference(table, slash.parse_window(WINDOW)))
