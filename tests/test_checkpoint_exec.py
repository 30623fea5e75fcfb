"""Checkpoints of executor groups (issue 16, part 1): a group checkpointed
mid-input, torn down, and restored into a new group (of the same or another
size, same partitions) that pushes the rest of the input gives exactly the
answer of DuckDB over the whole input, each (window, key) once; a corrupt or
foreign blob is refused with CheckpointCorrupt naming what is wrong.

Executors run as threads of this process over shm (push and poll release
the GIL), which keeps these tests fast."""
from __future__ import annotations

import secrets
import threading
from typing import Dict, List, Optional

import numpy as np
import pyarrow as pa
import pytest

import slash
from slash import errors
from slash.executor import CheckpointImage, checkpoint_fired
from slash.window import Session

from _state_reference import AGGS, VALUE_TYPES, assert_same, duckdb_reference
from test_executor import split, stream

BATCH = 500


def open_group(n: int, state: slash.StateConfig, **group_kw) -> List[slash.Executor]:
    """n executors of one group (over shm unless group_kw names another
    transport), joined from threads."""
    token = secrets.token_hex(8)
    gkw = dict(transport="shm", lateness="200ms", epoch_bytes=32 << 10, partitions=8, timeout=60)
    gkw.update(group_kw)
    listeners = [slash.Executor.listen(gkw["transport"], token=token) for _ in range(n)]
    addrs = [lst.address for lst in listeners]
    out: List[Optional[slash.Executor]] = [None] * n
    errs: List[BaseException] = []

    def join(r: int) -> None:
        try:
            out[r] = slash.Executor(listeners[r], r, addrs, state, slash.GroupConfig(**gkw),
                                    token=token)
        except BaseException as e:  # reported below
            errs.append(e)

    threads = [threading.Thread(target=join, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for lst in listeners:
        lst.close()
    assert not errs, errs
    return out  # type: ignore[return-value]


def in_threads(fns) -> None:
    errs: List[BaseException] = []

    def wrap(f):
        try:
            f()
        except BaseException as e:
            errs.append(e)

    threads = [threading.Thread(target=wrap, args=(f,)) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errs, errs


def run_until_checkpoint(exs, inputs, ckpt_id=1):
    """Every rank pushes its input batch by batch; rank 0 asks for a
    checkpoint once it pushed all of its own; a rank stops pushing when its
    image appears (the cut: after image.pushes push calls) and polls until
    every rank has one. Returns the images and the results the group fired
    before the cut (those fired after it, by ranks still serving, are
    dropped as a recovery driver would: the restored group fires them)."""
    images: Dict[int, CheckpointImage] = {}
    results: List[pa.RecordBatch] = []
    lock = threading.Lock()
    done = threading.Event()

    def rank_fn(r):
        def f():
            ex = exs[r]
            got = []
            img = None
            for b in inputs[r]:
                assert ex.push_batch(b) == 0
                got += ex.results()
                img = ex.take_checkpoint()
                if img is not None:
                    break
            if r == 0:
                ex.request_checkpoint(ckpt_id)
            while img is None:
                ex.poll(0.01)
                got += ex.results()
                img = ex.take_checkpoint()
            got += ex.results()
            with lock:
                images[r] = img
                results.extend(got)
                if len(images) == len(exs):
                    done.set()
            while not done.is_set():  # serve the others until everyone has its image
                ex.poll(0.01)
            results.extend(ex.results())
        return f

    in_threads([rank_fn(r) for r in range(len(exs))])
    fired = checkpoint_fired(images[0].meta)
    assert all(checkpoint_fired(img.meta) == fired for img in images.values())
    session = isinstance(slash.parse_window(exs[0].state.window), Session)
    before = [pre_cut(b, fired, session) for b in results]
    return images, [b for b in before if b.num_rows]


def pre_cut(batch: pa.RecordBatch, fired: int, session: bool) -> pa.RecordBatch:
    """The rows of windows closed at the cut's watermark (fired before it): a
    window ending at or before it, a session ending strictly before it."""
    end = batch.column(batch.schema.get_field_index("window_end")).to_numpy()
    return batch.filter(pa.array(end < fired if session else end <= fired))


def finish_all(exs, inputs):
    results: List[pa.RecordBatch] = []
    lock = threading.Lock()

    def rank_fn(r):
        def f():
            ex = exs[r]
            got = []
            for b in inputs[r]:
                assert ex.push_batch(b) == 0
                got += ex.results()
            ex.finish()
            got += ex.results()
            with lock:
                results.extend(got)
        return f

    in_threads([rank_fn(r) for r in range(len(exs))])
    return results


def restore_group(images, m, state, **group_kw):
    exs = open_group(m, state, **group_kw)
    metas = [images[r].meta for r in sorted(images)]
    parts = {p: b for img in images.values() for p, b in img.parts.items()}
    for ex in exs:
        ex.restore(metas, parts)
    return exs


def batches(table: pa.Table) -> List[pa.RecordBatch]:
    return table.to_batches(max_chunksize=BATCH)


def checkpoint_and_resume(table, n, m, window, *, string_keys=False, **group_kw):
    """Checkpoint a group of n mid-input, tear it down, restore a group of m
    from the images, push what each old rank had not pushed before the cut
    (re-split among the m), finish: the result must be DuckDB's over the
    whole input, every (window, key) once."""
    state = slash.StateConfig(window=window, aggregates=AGGS, value_types=VALUE_TYPES,
                              key_type="string" if string_keys else "int64")
    half = table.num_rows // 2
    inputs = [batches(t) for t in split(table.slice(0, half), n, "random", seed=1)]
    exs = open_group(n, state, **group_kw)
    images, before = run_until_checkpoint(exs, inputs)
    for ex in exs:
        ex.close()
    assert sorted(images) == list(range(n))
    assert all(img.id == 1 and img.rank == r for r, img in images.items())
    assert sorted(p for img in images.values() for p in img.parts) == list(range(8))
    assert all(img.pushes <= len(inputs[r]) for r, img in images.items())
    exs = restore_group(images, m, state, **group_kw)
    rest = [batches(t) for t in split(table.slice(half), m, "random", seed=2)]
    if m == n:  # each rank replays what it had not pushed (its watermark is its own)
        todo = [inputs[r][images[r].pushes:] + rest[r] for r in range(m)]
    else:  # every rank resumes at the group watermark of the cut; no old rank's input
        # is behind it, so the unpushed records, in time order, may go anywhere
        left = [b for r in range(n) for b in inputs[r][images[r].pushes:]] + batches(table.slice(half))
        tail = pa.Table.from_batches(left, schema=table.schema).sort_by("time")
        todo = [batches(t) for t in split(tail, m, "random", seed=2)]
    after = finish_all(exs, todo)
    for ex in exs:
        ex.close()
    schema = before[0].schema if before else after[0].schema
    got = pa.Table.from_batches(before + after, schema=schema)
    keys = list(zip(got.column("window_start").to_pylist(), got.column("key").to_pylist()))
    assert len(keys) == len(set(keys)), "a (window, key) was emitted twice"
    assert_same(got, duckdb_reference(table, slash.parse_window(window)))
    return images


@pytest.mark.parametrize("window", ["tumbling:5s", "sliding:10s/2s", "session:2s"])
def test_restored_group_continues_exactly_as_the_uninterrupted_run(window):
    checkpoint_and_resume(stream(seed=31, n=12000), 3, 3, window)


@pytest.mark.parametrize("n,m", [(2, 3), (3, 1)])
def test_restore_into_a_group_of_another_size(n, m):
    checkpoint_and_resume(stream(seed=37, n=12000), n, m, "sliding:10s/2s")


def test_string_keys_and_leader_own_rows():
    checkpoint_and_resume(stream(seed=41, n=10000, string_keys=True), 2, 2, "session:2s",
                          string_keys=True, own_rows="leader")


def test_repartition_mode():
    checkpoint_and_resume(stream(seed=43, n=10000), 3, 2, "tumbling:5s", mode="repartition")


def test_image_counts_the_push_calls_before_the_cut():
    state = slash.StateConfig(window="tumbling:5s", aggregates=["count"])
    table = stream(seed=47, n=3000)
    exs = open_group(2, state)
    inputs = [batches(table.slice(0, 2000)), []]  # rank 0: 4 batches of 500; rank 1: none
    images, _ = run_until_checkpoint(exs, inputs)
    for ex in exs:
        ex.close()
    assert images[0].pushes == 4 and images[1].pushes == 0


def corrupt_cases(images):
    meta = images[0].meta
    part = images[0].parts[0]
    flipped = bytearray(part)
    flipped[len(part) // 2] ^= 0x10
    return {
        "truncated meta": ([meta[:-3]], {}),
        "bad magic": ([b"XXXX" + meta[4:]], {}),
        "bit flip in a partition": ([images[r].meta for r in sorted(images)], {0: bytes(flipped)}),
        "truncated partition": ([images[r].meta for r in sorted(images)], {0: part[: len(part) - 1]}),
    }


@pytest.mark.parametrize("case", ["truncated meta", "bad magic", "bit flip in a partition",
                                  "truncated partition"])
def test_corrupt_blob_raises_checkpoint_corrupt(case):
    state = slash.StateConfig(window="tumbling:5s", aggregates=["count", "sum:x"])
    exs = open_group(1, state)
    images, _ = run_until_checkpoint(exs, [batches(stream(seed=53, n=2000))])
    exs[0].close()
    metas, parts = corrupt_cases(images)[case]
    (fresh,) = open_group(1, state)
    with pytest.raises(errors.CheckpointCorrupt) as info:
        fresh.restore(metas, parts)
    fresh.close()
    assert isinstance(info.value, errors.InvalidArgument)
    assert "checkpoint" in str(info.value)


def test_checkpoint_of_other_aggregates_is_refused():
    state = slash.StateConfig(window="tumbling:5s", aggregates=["count", "sum:x"])
    exs = open_group(1, state)
    images, _ = run_until_checkpoint(exs, [batches(stream(seed=59, n=2000))])
    exs[0].close()
    other = slash.StateConfig(window="tumbling:10s", aggregates=["count", "sum:x"])
    (fresh,) = open_group(1, other)
    with pytest.raises(errors.CheckpointCorrupt, match="fingerprint"):
        fresh.restore([images[0].meta], images[0].parts)
    fresh.close()
    (fresh,) = open_group(1, state, partitions=16)
    with pytest.raises(errors.CheckpointCorrupt, match="8 partitions, this executor 16"):
        fresh.restore([images[0].meta], images[0].parts)
    fresh.close()


def test_checkpoint_asked_while_a_peer_finishes_is_given_up_without_deadlock():
    state = slash.StateConfig(window="tumbling:5s", aggregates=AGGS, value_types=VALUE_TYPES)
    table = stream(seed=61, n=4000)
    exs = open_group(2, state)
    finishing = threading.Event()
    results: List[pa.RecordBatch] = []
    images = []

    def rank1():
        finishing.set()
        exs[1].finish()  # no input: it finishes at once and waits for rank 0
        results.extend(exs[1].results())
        images.append(exs[1].take_checkpoint())

    def rank0():
        for b in batches(table):
            exs[0].push_batch(b)
        finishing.wait()
        exs[0].request_checkpoint(1)
        for _ in range(20):
            exs[0].poll(0.01)
        exs[0].finish()
        results.extend(exs[0].results())
        images.append(exs[0].take_checkpoint())

    in_threads([rank0, rank1])
    for ex in exs:
        ex.close()
    assert images == [None, None]
    assert_same(pa.Table.from_batches(results), duckdb_reference(table, slash.parse_window("tumbling:5s")))


def test_request_after_finish_is_refused():
    state = slash.StateConfig(window="tumbling:5s", aggregates=["count"])
    (ex,) = open_group(1, state)
    ex.finish()
    with pytest.raises(errors.InvalidState, match="finished"):
        ex.request_checkpoint(1)
    ex.close()
