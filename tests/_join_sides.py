"""Shared by the tests of a window join under live operations (test_live_scale_join.py,
test_join_rebalance.py): the two inputs as Spark writes them (part files that each
span the whole time range, sorted within a file, several row groups, i.e. units,
each), their sources, the pairs of a result as a comparable multiset, and the two
references: DuckDB's join over the same files and the static run's answer."""
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slash.query import JoinQuery
from slash.runner import run
from slash.sources import FileSource

SPAN_MS = 120_000
FILES, ROWS, GROUP_ROWS, KEYS = 3, 8_000, 1_000, 600
TOTAL = 2 * FILES * ROWS  # records of both inputs


def write_sides(d, seeds):
    """Under directory ``d``: ``left/`` (columns t, k, a) and ``right/`` (t, k, b),
    FILES part files each, drawn with ``seeds`` = (left's, right's); returns
    {"left": dir, "right": dir}."""
    out = {}
    for s, seed, col in (("left", seeds[0], "a"), ("right", seeds[1], "b")):
        (d / s).mkdir()
        rng = np.random.default_rng(seed)
        for f in range(FILES):
            t = np.sort(rng.integers(0, SPAN_MS, ROWS)).astype(np.int64)
            pq.write_table(pa.table({"t": t, "k": rng.integers(0, KEYS, ROWS),
                                     col: rng.integers(0, 10**6, ROWS)}),
                           str(d / s / f"part-{f}.parquet"), row_group_size=GROUP_ROWS)
        out[s] = str(d / s)
    return out


def srcs(sides):
    return FileSource(sides["left"], time="t"), FileSource(sides["right"], time="t")


def pairs(result):
    cols = ["window_start", "window_end", "k", "left_a", "right_b"]
    return sorted(tuple(r[c] for c in cols) for r in result.to_pylist())


_static = {}


def static(sides, window):
    """The join on ``window`` by k, run once per inputs and window with 2 executors and no
    live operation."""
    at = (sides["left"], sides["right"], window)
    if at not in _static:
        _static[at] = run(JoinQuery(time="t", window=window, on="k"), srcs(sides), executors=2)
    return _static[at]


def duck_tumbling(sides, size_ms):
    """DuckDB's equi-join on k within tumbling windows of ``size_ms``, as :func:`pairs` rows."""
    return sorted(tuple(r) for r in duckdb.sql(
        f"select l.t // {size_ms} * {size_ms}, l.t // {size_ms} * {size_ms} + {size_ms}, l.k, "
        f"l.a, r.b from read_parquet('{sides['left']}/*.parquet') l "
        f"join read_parquet('{sides['right']}/*.parquet') r "
        f"on l.k = r.k and l.t // {size_ms} = r.t // {size_ms}").fetchall())
