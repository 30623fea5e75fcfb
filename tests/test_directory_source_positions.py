"""A DirectorySource's positions are in global terms (the row groups of
each file a rank has not read, the last file it started): the work left by
N ranks at any point, dealt to M ranks by DirectorySource.resplit, reads
every row exactly once, files that arrive later included. The reference is
the set of row ids written."""
import itertools
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slash.errors import InvalidState
from slash.spark.stream import DirectorySource

ROWS = (30, 9, 3, 21)  # per file; 3 rows per row group, so 10, 3, 1 and 7 units


def _write(directory, i, rows, first_id):
    t = pa.table({"id": pa.array(range(first_id, first_id + rows), pa.int64()),
                  "event_time": pa.array(np.arange(rows) + 1000 * i, pa.int64()),
                  "key": pa.array(np.arange(rows) % 5, pa.int64())})
    tmp = os.path.join(directory, f"_f{i:03d}.parquet")
    pq.write_table(t, tmp, row_group_size=3)
    os.replace(tmp, os.path.join(directory, f"f{i:03d}.parquet"))


def _files(directory, sizes, first_file=0, first_id=0):
    for i, rows in enumerate(sizes, first_file):
        _write(directory, i, rows, first_id)
        first_id += rows
    return first_id


def _read(src, rank, n, work, pushes=None):
    """Ids of up to ``pushes`` batches (None: all there is), the work left
    after the last batch, and the watermarks given."""
    ids, left, marks, taken = [], work if work is not None else src.work(rank, n), [], 0
    if pushes == 0:
        return ids, left, marks
    for batch, wm, after in src.batches(rank, n, "event_time", 0, lambda s: True, work=work):
        if batch is not None:
            ids += batch.column("id").to_pylist()
            left, taken = after, taken + 1
            if taken == pushes:
                break
        else:
            marks.append(wm)
    return ids, left, marks


@pytest.mark.parametrize("n,m", [(2, 3), (3, 2), (2, 1), (1, 4)])
def test_work_left_by_n_ranks_dealt_to_m_reads_every_row_once(tmp_path, n, m):
    d = str(tmp_path)
    total = _files(d, ROWS)
    src = DirectorySource(d)
    for cut in itertools.product(range(0, 9, 4), repeat=n):  # batches each rank read
        before, lefts = [], []
        for r in range(n):
            ids, left, _ = _read(src, r, n, None, cut[r])
            before += ids
            lefts.append(left)
        dealt = src.resplit(lefts, m)
        after = [i for r in range(m) for i in _read(src, r, m, dealt[r])[0]]
        assert sorted(before + after) == list(range(total)), f"cut {cut}"


def test_files_that_arrive_after_a_resplit_are_dealt_to_the_new_ranks(tmp_path):
    d = str(tmp_path)
    first = _files(d, ROWS[:2])
    src = DirectorySource(d)
    ids0, left0, _ = _read(src, 0, 2, None, 2)
    ids1, left1, _ = _read(src, 1, 2, None, 5)
    dealt = src.resplit([left0, left1], 3)
    total = _files(d, ROWS[2:], first_file=2, first_id=first)
    after = [_read(src, r, 3, dealt[r])[0] for r in range(3)]
    assert sorted(ids0 + ids1 + sum(after, [])) == list(range(total))
    # each new rank takes its own split of the new files: all three read some
    assert all(any(i >= first for i in a) for a in after)


def test_a_resumed_rank_gives_the_watermark_of_the_last_file_read_before_anything_new(tmp_path):
    d = str(tmp_path)
    _files(d, ROWS[:2])
    src = DirectorySource(d)
    items = list(src.batches(0, 2, "event_time", 0, lambda s: True))
    assert [wm for b, wm, _ in items if b is None] == [ROWS[0] - 1, 1000 + ROWS[1] - 1]
    left = items[-1][2]  # after the last file's watermark
    assert left["after"] == "f001.parquet" and left["files"] == []
    again = list(src.batches(0, 2, "event_time", 0, lambda s: True, work=left))
    assert [(b, wm) for b, wm, _ in again] == [(None, 1000 + ROWS[1] - 1)]


def test_a_file_named_before_one_already_read_is_refused_naming_it(tmp_path):
    d = str(tmp_path)
    _write(d, 5, 6, 0)
    src = DirectorySource(d)
    polls = []

    def wait(seconds):
        if not polls:
            _write(d, 2, 6, 6)  # arrives late, named before f005
        polls.append(seconds)
        return len(polls) > 3

    with pytest.raises(InvalidState, match="f002.parquet.*f005.parquet"):
        list(src.batches(0, 1, "event_time", 0, wait))


def test_a_checkpoint_naming_a_file_that_is_gone_is_refused_naming_it(tmp_path):
    d = str(tmp_path)
    _files(d, ROWS[:2])
    src = DirectorySource(d)
    _, left, _ = _read(src, 0, 1, None, 1)
    os.unlink(os.path.join(d, "f000.parquet"))
    with pytest.raises(InvalidState, match="f000.parquet.*gone"):
        src.resplit([left], 2)
