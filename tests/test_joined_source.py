"""JoinedFileSource: files inner-joined, as they are read, to a small table
with a unique key. Its rows are DuckDB's inner join of the same data (nulls
and keys without a match dropped), whatever the split; a window aggregate
over it is DuckDB's aggregate of the join; a table whose key repeats or
whose column would shadow a file's is refused naming the column."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

duckdb = pytest.importorskip("duckdb")

from slash.errors import SchemaError  # noqa: E402
from slash.sources import FileSource  # noqa: E402
from slash.sources.joined import JoinedFileSource, Lookup  # noqa: E402
from slash.query import Query  # noqa: E402
from slash.runner import run  # noqa: E402
from slash.sources import Watermark  # noqa: E402

N = 6000


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    """Three files of events over 300 s: an int ad id (nulls, ids 0..59) and
    a string user (nulls), several row groups each."""
    rng = np.random.default_rng(3)
    d = tmp_path_factory.mktemp("joined")
    tables = []
    for i in range(3):
        n = N // 3
        ad = pa.array(rng.integers(0, 60, n), mask=rng.random(n) < 0.03)
        users = np.array([f"u{x}" for x in rng.integers(0, 40, n)], dtype=object)
        users[rng.random(n) < 0.03] = None
        t = pa.table({"ts": pa.array(np.sort(rng.integers(0, 300_000, n)), pa.int64()),
                      "ad_id": ad, "user": pa.array(list(users), pa.string()),
                      "price": rng.random(n)})
        pq.write_table(t, d / f"part-{i}.parquet", row_group_size=500)
        tables.append(t)
    return str(d), pa.concat_tables(tables)


def campaigns():
    """Ads 0..49 (50..59 match nothing), a null key (matches nothing), a
    campaign and a bid with a null."""
    ids = list(range(50)) + [None]
    return pa.table({"ad": pa.array(ids, pa.int64()),
                     "campaign": pa.array([None if i is None else f"c{i % 7}" for i in ids]),
                     "bid": pa.array([None if i in (None, 4) else i * 0.5 for i in ids])})


def lookup(table=None):
    return Lookup(table if table is not None else campaigns(), "ad_id", "ad",
                  (("campaign", "campaign"), ("bid", "bid")))


def rows_of(table):
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_rows_are_duckdbs_inner_join_whatever_the_split(events, n):
    path, table = events
    src = JoinedFileSource(path, lookup())
    cols = ["ts", "user", "price", "campaign", "bid"]
    got = [b for r in range(n) for b in src.read(r, n, cols, time="ts")
           if not isinstance(b, Watermark)]
    camp = campaigns()  # noqa: F841 (read by DuckDB)
    want = duckdb.sql("select e.ts, e.user, e.price, c.campaign, c.bid from 'table' e "
                      "join camp c on e.ad_id = c.ad").fetch_arrow_table()
    assert rows_of(pa.Table.from_batches(got)) == rows_of(want)
    assert 0 < sum(b.num_rows for b in got) < table.num_rows


def test_a_window_aggregate_over_the_join_is_duckdbs(events):
    path, table = events  # noqa: F841 (read by DuckDB)
    q = Query(time="ts", window="tumbling:10s", key="campaign",
              aggregates=["count", "sum:price", "max:bid"], filters=["user != 'u3'"])
    got = run(q, JoinedFileSource(path, lookup()), executors=2)
    camp = campaigns()  # noqa: F841
    want = duckdb.sql(
        "select (e.ts // 10000) * 10000 as w, c.campaign, count(*) as n, sum(e.price) as s, "
        "max(c.bid) as m from 'table' e join camp c on e.ad_id = c.ad where e.user != 'u3' "
        "group by all").fetchall()
    ws = got.column("window_start").cast(pa.int64()).to_pylist()
    mine = sorted(zip(ws, got.column("campaign").to_pylist(), got.column("count").to_pylist(),
                      [round(x, 6) for x in got.column("sum_price").to_pylist()],
                      got.column("max_bid").to_pylist()), key=repr)
    assert mine == sorted(((w, c, n, round(s, 6), m) for w, c, n, s, m in want), key=repr)


def test_a_join_on_a_string_column_drops_null_and_unmatched_users(events):
    path, table = events  # noqa: F841
    tiers = pa.table({"name": [f"u{i}" for i in range(0, 40, 3)], "tier": list(range(0, 40, 3))})
    src = JoinedFileSource(path, Lookup(tiers, "user", "name", (("tier", "tier"),)))
    got = pa.Table.from_batches([b for b in src.read(0, 1, ["user", "tier"])])
    want = duckdb.sql("select e.user, t.tier from 'table' e join tiers t on e.user = t.name").fetch_arrow_table()
    assert rows_of(got) == rows_of(want)


def test_a_table_whose_key_repeats_is_refused_naming_the_column(events):
    path, _ = events
    t = campaigns()
    twice = pa.concat_tables([t, t.slice(3, 1)])
    with pytest.raises(SchemaError, match="'ad'"):
        JoinedFileSource(path, lookup(twice))


def test_an_added_column_that_would_shadow_a_files_column_is_refused(events):
    path, _ = events
    with pytest.raises(SchemaError, match="price"):
        JoinedFileSource(path, Lookup(campaigns(), "ad_id", "ad", (("bid", "price"),)))


def test_a_missing_join_column_is_named(events):
    path, _ = events
    with pytest.raises(SchemaError, match="'adid'"):
        JoinedFileSource(path, Lookup(campaigns(), "adid", "ad", (("bid", "bid"),)))


def test_its_fingerprint_names_the_joined_rows_not_only_the_files(events):
    path, _ = events
    t = campaigns()
    other = t.set_column(1, "campaign", pa.array([f"x{i}" for i in range(t.num_rows)]))
    a, b = JoinedFileSource(path, lookup()), JoinedFileSource(path, lookup(other))
    assert a.describe() == JoinedFileSource(path, lookup()).describe()
    assert a.describe() != b.describe() and a.describe().startswith(FileSource(path).describe())
