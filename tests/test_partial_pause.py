"""Only moved partitions pause (issue 17, Trisk's partial pause): while a
partition's hand-over is held back, the windows of every partition that does
not move keep firing; the moved one fires nothing past the move until its
state arrives, then catches up, and the output equals a sequential count.

The hold is structural, not timed: a group of 3 over shm with 3 partitions
(partition p led by rank p). Rank 2 pushes its records far ahead in event
time once and then stays idle without a call (its thread neither pushes
nor polls, as when it is blocked reading its source; only its service
thread serves its channels), so it ends no epoch and never sends its MAP
marker (an executor that polls would: an adopted version ends its epoch);
rank 0 (the old leader of the moved partition 0) may hand the
partition over only once every peer's marker is in, so partition 0 stays
held at its new leader (rank 1) for as long as rank 2 is idle, while ranks
0 and 1 keep driving the group watermark. Waits poll for a condition under
a deadline; no sleep decides the outcome.
"""
from __future__ import annotations

import collections
import time
from typing import Callable, Dict, List, Set, Tuple

import pyarrow as pa

import slash

from test_checkpoint_exec import in_threads, open_group

KEYS = 30
WINDOW_MS = 1000
FAR = 20_500  # rank 2's records: far ahead of everything ranks 0 and 1 push


def windows(first: int, last: int, rank: int) -> pa.Table:
    """Every key once per 100 ms of windows first..last-1, times offset by rank
    so no two ranks push the same record."""
    keys, times = [], []
    for w in range(first, last):
        for t in range(w * WINDOW_MS + rank, (w + 1) * WINDOW_MS, 100):
            for k in range(KEYS):
                keys.append(k)
                times.append(t)
    return pa.table({"key": pa.array(keys, pa.int64()), "time": pa.array(times, pa.int64())})


Rows = Dict[Tuple[int, int], int]  # (window_end, key) -> count


def take(ex: slash.Executor, into: Rows) -> None:
    for b in ex.results():
        d = b.to_pydict()
        for we, k, c in zip(d["window_end"], d["key"], d["count"]):
            assert (we, k) not in into, f"window ending {we} of key {k} emitted twice"
            into[(we, k)] = c


def wait_for(exs: List[slash.Executor], rows: List[Rows], cond: Callable[[], bool], what: str,
             idle: Set[int] = frozenset()) -> None:
    """Polls every executor but those of the ``idle`` ranks (whose windows,
    fired by their service threads, are only taken) until cond() holds."""
    deadline = time.monotonic() + 60
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for r, (ex, got) in enumerate(zip(exs, rows)):
            if r not in idle:
                ex.poll(0.01)
            take(ex, got)


def progress(rows: Rows, keys: Set[int]) -> int:
    """The latest window end emitted for any of `keys` (0 when none)."""
    return max((we for (we, k) in rows if k in keys), default=0)


def test_windows_of_partitions_that_do_not_move_keep_firing_while_a_hand_over_is_held():
    state = slash.StateConfig(window="tumbling:1s", aggregates=["count"])
    exs = open_group(3, state, partitions=3, lateness="200ms", epoch_bytes=1 << 30, epoch_ms=60_000)
    rows: List[Rows] = [{}, {}, {}]
    pushed: List[pa.Table] = []

    def push(r: int, t: pa.Table) -> None:
        assert exs[r].push_batch(t) == 0
        exs[r].end_epoch()
        pushed.append(t)

    try:
        far = pa.table({"key": pa.array(range(KEYS), pa.int64()),
                        "time": pa.array([FAR] * KEYS, pa.int64())})
        push(2, far)
        # Before the move: windows 0..4 everywhere; every partition fires to 4 s.
        push(0, windows(0, 5, 0))
        push(1, windows(0, 5, 1))
        wait_for(exs, rows, lambda: all(progress(g, set(range(KEYS))) >= 4000 for g in rows),
                 "every rank to fire windows up to 4 s")
        part = {k: r for r, g in enumerate(rows) for (_, k) in g}  # a rank leads one partition
        assert set(part) == set(range(KEYS)) and len(set(part.values())) == 3
        keys_of = collections.defaultdict(set)
        for k, r in part.items():
            keys_of[r].add(k)
        before = progress(rows[0], keys_of[0])
        assert before == 4000

        exs[0].move_partitions({0: 1})
        # After the move: windows 5..9 from ranks 0 and 1; rank 2 stays idle.
        push(0, windows(5, 10, 0))
        push(1, windows(5, 10, 1))
        wait_for(exs, rows, lambda: progress(rows[1], keys_of[1]) >= 9000 and
                 progress(rows[2], keys_of[2]) >= 9000,
                 "the partitions that do not move to fire up to 9 s", idle={2})
        m = [ex.metrics for ex in exs]
        assert m[1]["held_partitions"] == 1 and m[1]["moves"] == 0, m[1]
        assert m[0]["moves_out"] == 0, "rank 0 handed over without rank 2's marker"
        moved_keys = keys_of[0]
        assert progress(rows[0], moved_keys) == before, "the old leader fired a moved window"
        assert progress(rows[1], moved_keys) == 0, "the new leader fired before the hand-over"

        # Rank 2 ends an epoch: its marker lets rank 0 hand partition 0 over,
        # and rank 1 fires the held windows 5..9 at once.
        exs[2].end_epoch()
        wait_for(exs, rows, lambda: progress(rows[1], moved_keys) >= 9000,
                 "the moved partition to catch up after its hand-over")
        m = [ex.metrics for ex in exs]
        assert m[1]["moves"] == 1 and m[1]["held_partitions"] == 0 and m[1]["move_pause_ns"] > 0
        assert m[1]["moved_bytes"] == m[0]["moved_bytes_out"] > 0

        in_threads([ex.finish for ex in exs])  # finish waits for every executor
        for ex, g in zip(exs, rows):
            take(ex, g)
    finally:
        for ex in exs:
            ex.close()

    want: Rows = collections.Counter()
    for t in pushed:
        for k, ts in zip(t.column("key").to_pylist(), t.column("time").to_pylist()):
            want[((ts // WINDOW_MS + 1) * WINDOW_MS, k)] += 1
    got: Rows = {}
    for g in rows:
        for key, c in g.items():
            assert key not in got, f"{key} emitted by two leaders"
            got[key] = c
    assert got == dict(want)
