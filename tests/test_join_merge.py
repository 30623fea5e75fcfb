"""The order a join executor pushes its two inputs' rows in
(:func:`slash.run.recovery.join.merged`)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from slash.query import JoinQuery
from slash.run.recovery.join import Side, exact_merge, merged
from slash.sources import FileSource

QUERY = JoinQuery(time="ts", on="id", interval=("-1s", "+1s"))


def batches(times, rows):
    """Batches of ``rows`` rows of key 1 at ``times``."""
    return [pa.record_batch({"id": [1] * len(times[i:i + rows]), "ts": times[i:i + rows]})
            for i in range(0, len(times), rows)]


def sides(rows):
    left, right = list(range(0, 40, 2)), list(range(1, 40, 2))  # interleaved in time
    return {"left": Side(enumerate(batches(left, rows))),
            "right": Side(enumerate(batches(right, rows)))}


def steps(exact):
    return [(s, b.column("ts").to_pylist()) for s, b in merged(QUERY, sides(5), exact)]


def test_merge_of_bounded_sides_pushes_each_batch_whole_earliest_first():
    got = steps(exact=False)
    assert [s for s, _ in got] == ["left", "right"] * 4
    assert got[0] == ("left", [0, 2, 4, 6, 8]) and got[1] == ("right", [1, 3, 5, 7, 9])


def test_exact_merge_never_pushes_a_row_after_a_later_row_of_the_other_side():
    got = steps(exact=True)
    assert len(got) == 40  # the sides alternate row by row
    order = [t for _, ts in got for t in ts]
    assert order == sorted(order)


def test_both_merges_push_every_row_once():
    for exact in (False, True):
        got = sorted((s, t) for s, ts in steps(exact) for t in ts)
        assert got == sorted([("left", t) for t in range(0, 40, 2)]
                             + [("right", t) for t in range(1, 40, 2)])


class Stream:
    """An unbounded input: its executor's watermark follows the largest time pushed."""
    bounded = False


class PromisingStream(Stream):
    source_watermarks = True


def test_only_sides_whose_watermarks_come_from_the_source_skip_the_exact_merge(tmp_path):
    pq.write_table(pa.table({"id": [1], "ts": [0]}), tmp_path / "a.parquet")
    files = FileSource(str(tmp_path / "a.parquet"))
    assert not exact_merge(files, files)
    assert not exact_merge(files, PromisingStream())
    assert exact_merge(files, Stream())


def test_a_paced_run_keeps_the_exact_merge(tmp_path):
    pq.write_table(pa.table({"id": [1], "ts": [0]}), tmp_path / "a.parquet")
    files = FileSource(str(tmp_path / "a.parquet"))
    assert exact_merge(files, files, paced=True)
