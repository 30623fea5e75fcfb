"""Tests of slash.workloads: determinism and chunk independence, record sizes,
NEXMark proportions and hot ratios, YSB event types and the ad -> campaign
map, goodness of fit of the key distributions, the CM sample loader and the
synthetic CM shape, Parquet output, and argument errors."""
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import slash.workloads as w
from slash.errors import InvalidArgument
from slash.workloads import gen_cm, gen_nexmark, gen_ro, gen_ysb, zipf

scipy_stats = pytest.importorskip("scipy.stats", reason="goodness-of-fit tests need scipy")

# name -> (callable(size, **kw) -> Table, size) for the shared determinism tests
GENERATORS = {
    "ysb": (w.ysb, 3000),
    "ysb-zipf": (lambda n, **kw: w.ysb(n, keys=10_000_000, skew="zipf:0.8", **kw), 3000),
    "ro": (w.ro, 3000),
    "cm": (w.cm, 3000),
    "nexmark-persons": (w.persons, 5000),
    "nexmark-auctions": (w.auctions, 5000),
    "nexmark-bids": (w.bids, 5000),
}
START = {"ysb": "start", "ysb-zipf": "start", "ro": "start", "cm": "start"}


@pytest.mark.parametrize("name", list(GENERATORS))
def test_same_seed_same_bytes_other_seed_other_bytes(name):
    gen, n = GENERATORS[name]
    a, b, c = gen(n, seed=11), gen(n, seed=11), gen(n, seed=12)
    assert a.num_rows > 0
    assert a.equals(b)
    differ = [f for f in a.column_names
              if not a.column(f).equals(c.column(f))]
    assert differ, "another seed must change the data"


@pytest.mark.parametrize("name", list(GENERATORS))
def test_two_chunks_equal_one(name):
    gen, n = GENERATORS[name]
    whole = gen(n, seed=5)
    if name in START:
        cut = 1234
        parts = pa.concat_tables([gen(cut, seed=5, start=0), gen(n - cut, seed=5, start=cut)])
    else:
        cut = 1250  # NEXMark splits by event id: records of [0, cut) and [cut, n)
        parts = pa.concat_tables([gen(cut, seed=5), gen(n - cut, seed=5, first_event=cut)])
    assert parts.equals(whole)
    odd = gen(n, seed=5, batch_size=97)
    assert odd.equals(whole)


def _row_bytes(schema):
    total = 0
    for f in schema:
        t = f.type
        if pa.types.is_dictionary(t):
            t = t.index_type
        if pa.types.is_fixed_size_binary(t):
            total += t.byte_width
        else:
            total += t.bit_width // 8
    return total


def test_record_sizes_as_in_the_paper():
    assert _row_bytes(w.ysb(1).schema) == gen_ysb.RECORD_BYTES == 78
    assert _row_bytes(w.cm(1).schema) == gen_cm.RECORD_BYTES == 64
    assert _row_bytes(w.ro(1).schema) == gen_ro.RECORD_BYTES == 16
    bid = w.bids(50, columns=["auction", "bidder", "price", "date_time"])
    assert _row_bytes(bid.schema) == gen_nexmark.RECORD_BYTES["bid"] == 32
    assert gen_nexmark.RECORD_BYTES == {"person": 206, "auction": 269, "bid": 32}
    # the 8-byte key and 8-byte time come first in YSB and RO
    assert w.ysb(1).column_names[:2] == ["key", "event_time"]
    assert w.ro(1).column_names == ["key", "event_time"]


def test_nexmark_proportions_and_ids():
    events = 50 * 40 + 17
    t = w.nexmark(events)
    assert [t[k].num_rows for k in ("person", "auction", "bid")] == [41, 120 + 3, 40 * 46 + 13]
    # exactly 1 : 3 : 46 in every 50 consecutive events, by event id
    for k in range(40):
        ids = np.arange(50 * k, 50 * k + 50)
        kinds = np.where(ids % 50 == 0, 0, np.where(ids % 50 < 4, 1, 2))
        assert np.bincount(kinds, minlength=3).tolist() == [1, 3, 46]
    assert gen_nexmark.event_ids("bid", 0, 47).tolist()[-2:] == [49, 54]
    assert t["person"].column("id").to_pylist() == list(range(1000, 1041))
    assert t["auction"].column("id").to_pylist() == list(range(1000, 1123))
    # deterministic event time: 10,000 events/s -> 100 us apart
    bid_ids = gen_nexmark.event_ids("bid", 0, t["bid"].num_rows)
    assert np.array_equal(t["bid"].column("date_time").to_numpy(), bid_ids * 100 // 1000)
    a = t["auction"]
    assert (a.column("reserve").to_numpy() >= a.column("initial_bid").to_numpy()).all()
    assert (a.column("expires").to_numpy() > a.column("date_time").to_numpy()).all()
    assert set(a.column("category").to_pylist()) <= set(range(10, 15))
    p = t["person"]
    assert all(len(c) == 19 for c in p.column("credit_card").to_pylist())
    assert all("@" in e and e.endswith(".com") for e in p.column("email").to_pylist())


def test_nexmark_hot_ratios():
    events = 100_000
    b = w.bids(events, seed=3)
    a = w.auctions(events, seed=3)
    e = gen_nexmark.event_ids("bid", 0, b.num_rows)
    last_auction = (e // 50) * 3 + 2
    last_person = e // 50
    hot_auction = (last_auction // 100) * 100 + 1000
    hot_bidder = (last_person // 100) * 100 + 1 + 1000
    auction, bidder = b.column("auction").to_numpy(), b.column("bidder").to_numpy()
    # hot with probability 1 - 1/ratio, plus the cold draws that hit the hot id
    assert abs((auction == hot_auction).mean() - 0.5) < 0.02
    assert abs((bidder == hot_bidder).mean() - 0.75) < 0.02
    assert (auction >= 1000).all() and (auction <= last_auction + 1000 + 10).all()
    assert (bidder >= 1000).all() and (bidder <= last_person + 1000 + 10).all()
    ea = gen_nexmark.event_ids("auction", 0, a.num_rows)
    hot_seller = ((ea // 50) // 100) * 100 + 1000
    assert abs((a.column("seller").to_numpy() == hot_seller).mean() - 0.75) < 0.03
    # other ratios are honoured too
    b1 = w.bids(20_000, hot_auction_ratio=1, columns=["auction"])
    e1 = gen_nexmark.event_ids("bid", 0, b1.num_rows)
    assert ((b1.column("auction").to_numpy() == ((e1 // 50) * 3 + 2) // 100 * 100 + 1000).mean()
            < 0.05)


def test_nexmark_beam_seeds_ignore_seed():
    a = w.bids(2000, beam_seeds=True, seed=1)
    assert a.equals(w.bids(2000, beam_seeds=True, seed=2))
    assert not a.equals(w.bids(2000, seed=1))


def test_ysb_event_types_and_ad_map():
    t = w.ysb(30_000, keys=100, seed=9)
    ev = t.column("event_type").combine_chunks()
    assert ev.dictionary.to_pylist() == ["view", "click", "purchase"]
    counts = np.bincount(ev.indices.to_numpy(), minlength=3)
    assert scipy_stats.chisquare(counts).pvalue > 1e-3
    assert set(t.column("ad_type").combine_chunks().dictionary.to_pylist()) == set(gen_ysb.AD_TYPES)
    ads = w.ysb_ads(keys=100, seed=9)
    assert ads.num_rows == 1000
    assert ads.column("ad_id").combine_chunks().unique().__len__() == 1000
    # every event's ad belongs to its campaign (the key), by index and by UUID
    key, ad_index = t.column("key").to_numpy(), t.column("ad_index").to_numpy()
    campaign = ads.column("campaign_id").to_numpy()
    assert np.array_equal(campaign[ad_index], key)
    duckdb = pytest.importorskip("duckdb", reason="the join check uses duckdb")
    con = duckdb.connect()
    con.register("ev", t.select(["key", "ad_id"]))
    con.register("ads", ads)
    bad, joined = con.execute("SELECT count(*) FILTER (WHERE ev.key <> ads.campaign_id), count(*) "
                              "FROM ev JOIN ads USING (ad_id)").fetchone()
    assert (bad, joined) == (0, t.num_rows)
    # 10 ads per campaign are all used
    assert len(np.unique(ad_index)) == 1000


def _binned_chisquare(observed, expected, min_expected=5.0):
    """Chi-square with consecutive keys merged until each bin expects >= 5."""
    obs_b, exp_b, o, e = [], [], 0.0, 0.0
    for ob, ex in zip(observed, expected):
        o += ob
        e += ex
        if e >= min_expected:
            obs_b.append(o)
            exp_b.append(e)
            o = e = 0.0
    if e > 0:
        obs_b[-1] += o
        exp_b[-1] += e
    return scipy_stats.chisquare(obs_b, exp_b)


def test_uniform_keys_fit():
    n, draws = 1000, 200_000
    k = w.ro(draws, keys=n, seed=21).column("key").to_numpy()
    assert k.min() >= 0 and k.max() < n
    assert scipy_stats.chisquare(np.bincount(k, minlength=n)).pvalue > 1e-3


@pytest.mark.parametrize("s", [0.2, 0.8, 1.0, 1.5, 2.0])
def test_zipf_keys_fit_the_exact_bounded_pmf(s):
    n, draws = 1000, 200_000
    k = zipf.keys(draws, n=n, skew=f"zipf:{s}", seed=int(s * 10))
    assert k.min() >= 0 and k.max() < n
    pmf = zipf.pmf(n, f"zipf:{s}")
    assert abs(pmf.sum() - 1) < 1e-12
    obs = np.bincount(k, minlength=n)
    assert _binned_chisquare(obs, pmf * draws).pvalue > 1e-3
    # the same test rejects a neighbouring exponent: it has the power to fail
    other = zipf.pmf(n, f"zipf:{s + 0.1}")
    assert _binned_chisquare(obs, other * draws).pvalue < 1e-6


def test_zipf_on_any_workload_key_and_large_ranges():
    k = w.ysb(20_000, keys=100_000_000, skew="zipf:1.2", seed=4).column("key").to_numpy()
    assert k.min() >= 0 and k.max() < 100_000_000
    assert (k == 0).mean() > 0.1  # key 0 is the hottest
    j = w.cm(20_000, skew="uniform", jobs=240).column("job_id").to_numpy()
    assert len(np.unique(j)) == 240


def _sample_path():
    """$SLASH_DATA_DIR / the places find_sample() knows, else ../shared/data beside this repo."""
    found = gen_cm.find_sample()
    if found is not None:
        return found
    beside = Path(__file__).resolve().parents[2] / "shared" / "data" / gen_cm.SAMPLE_FILE
    return beside if beside.is_file() else None


@pytest.fixture(scope="module")
def sample():
    if _sample_path() is None:
        pytest.skip(f"{gen_cm.SAMPLE_FILE} not found: set SLASH_DATA_DIR or keep ../shared/data")
    return w.cm_sample(_sample_path())


def test_cm_sample_loads_with_types(sample):
    # the README says 16,384 rows; the file holds 16,385 (its last line has no newline)
    assert sample.num_rows == gen_cm.SAMPLE_ROWS == 16_385
    assert sample.column_names == list(gen_cm.COLUMNS)
    assert sample.schema == w.cm(1).schema
    ts = sample.column("timestamp").to_numpy()
    assert ts.min() == 1000 and ts.max() == 647_000 and (np.diff(ts) >= 0).all()
    assert sample.column("event_type").to_pylist()[:2] == [1, 4]
    assert sample.column("job_id").to_pylist()[0] == 5285926325


def test_cm_sample_via_env(tmp_path, monkeypatch, sample):
    monkeypatch.setenv("SLASH_DATA_DIR", str(_sample_path().parent))
    assert w.cm_sample().num_rows == sample.num_rows
    with pytest.raises(FileNotFoundError, match="SLASH_DATA_DIR"):
        w.cm_sample(tmp_path / "missing.txt")


def test_synthetic_cm_shaped_like_sample(sample):
    syn = w.cm(sample.num_rows, seed=1)
    assert syn.schema == sample.schema

    def col(t, c):
        return t.column(c).to_numpy()

    assert set(np.unique(col(syn, "event_type"))) <= set(np.unique(col(sample, "event_type")))
    for c in ("cpu", "ram", "disk"):
        assert col(syn, c).min() >= 0 and col(syn, c).max() <= col(sample, c).max()
    for c in ("user_id", "category", "priority", "constraints"):
        assert set(np.unique(col(syn, c))) <= set(np.unique(col(sample, c)))
    lo, hi = col(sample, "job_id").min(), col(sample, "job_id").max()
    assert col(syn, "job_id").min() >= lo and col(syn, "job_id").max() <= hi
    # share of events without a machine, and events per second, close to the sample's
    assert abs((col(syn, "machine_id") == -1).mean() - (col(sample, "machine_id") == -1).mean()) < 0.03
    assert (np.diff(col(syn, "timestamp")) >= 0).all()
    span_s = lambda t: (col(t, "timestamp").max() - col(t, "timestamp").min()) / 1000  # noqa: E731
    assert 0.7 < span_s(syn) / span_s(sample) < 1.3
    # job popularity (zipf fitted by maximum likelihood): the top 5 jobs hold a similar share
    def top5(t):
        counts = np.unique(col(t, "job_id"), return_counts=True)[1]
        return np.sort(counts)[-5:].sum() / t.num_rows

    assert abs(top5(syn) - top5(sample)) < 0.1


def test_parquet_round_trip(tmp_path):
    p = w.write_parquet(tmp_path / "ysb.parquet", "ysb", records=5000, row_group_size=1024,
                        seed=3, keys=1000)
    f = pq.ParquetFile(p)
    assert f.metadata.num_row_groups == 5
    back = f.read()
    want = w.ysb(5000, seed=3, keys=1000)
    assert back.column("key").equals(want.column("key"))
    assert back.column("ad_id").equals(want.column("ad_id"))
    assert back.column("event_type").to_pylist() == want.column("event_type").to_pylist()
    q = w.write_parquet(tmp_path / "bids.parquet", "nexmark-bids", records=500)
    assert pq.read_table(q).equals(w.bids(500))


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generated_columns_are_declared_non_null(name):
    make, size = GENERATORS[name]
    t = make(size)
    assert t.num_rows > 0
    assert all(not f.nullable for f in t.schema), t.schema
    assert all(c.null_count == 0 for c in t.columns)


def test_parquet_of_a_generator_stores_required_columns(tmp_path):
    # required columns: a reader decodes no definition levels
    p = w.write_parquet(tmp_path / "ysb.parquet", "ysb", records=2000, row_group_size=1024)
    f = pq.ParquetFile(p)
    assert {f.schema.column(i).max_definition_level for i in range(len(f.schema))} == {0}


@pytest.mark.parametrize("call, param", [
    (lambda: w.ysb(-1), "records"),
    (lambda: w.ysb(10, keys=0), "keys"),
    (lambda: w.ysb(10, skew="zipf:0"), "skew"),
    (lambda: w.ysb(10, skew="pareto"), "skew"),
    (lambda: w.ysb(10, batch_size=0), "batch_size"),
    (lambda: w.ysb(10, columns=["key", "nope"]), "columns"),
    (lambda: w.ysb(10, seed=-1), "seed"),
    (lambda: w.ysb(10, rate=0), "rate"),
    (lambda: w.ro(10, keys=1.5), "keys"),
    (lambda: w.cm(10, jobs=0), "jobs"),
    (lambda: w.cm(10, machines=0), "machines"),
    (lambda: w.bids(10, rate=2_000_000), "rate"),
    (lambda: w.bids(10, hot_auction_ratio=0), "hot_auction_ratio"),
    (lambda: w.bids(10, beam_seeds=1), "beam_seeds"),
    (lambda: w.write_parquet("/tmp/x.parquet", "tpch", records=1), "workload"),
    (lambda: zipf.keys(10, n=0), "n"),
    (lambda: w.ysb_ads(keys=10_000_000), "keys * ads_per_campaign"),
])
def test_bad_arguments_name_the_parameter(call, param):
    with pytest.raises(InvalidArgument, match=param.replace("*", r"\*")):
        call()


def test_empty_and_subset():
    assert w.ysb(0).num_rows == 0
    assert w.ysb(0).schema == w.ysb(1).schema
    t = w.ysb(10, columns=["event_time", "key"])
    assert t.column_names == ["key", "event_time"]
    assert t.column("key").equals(w.ysb(10).column("key"))


def test_fill_into_caller_buffers():
    from slash import _core
    g = _core.YsbGenerator(1, 10_000_000, 10, "uniform", 0.0, 1_000_000, 0)
    key, t = np.zeros(4096, np.int64), np.zeros(4096, np.int64)
    got = g.fill(100, 1000, ("key", "event_time"), into={"key": key, "event_time": t})
    assert np.shares_memory(got["key"], key) and got["key"].size == 1000
    want = w.ysb(1000, keys=10_000_000, seed=1, start=100, columns=["key", "event_time"])
    assert np.array_equal(key[:1000], want.column("key").to_numpy())
    assert np.array_equal(t[:1000], want.column("event_time").to_numpy())
    with pytest.raises(InvalidArgument, match="out\\['key'\\]"):
        g.fill(0, 10, ("key",), into={"key": np.zeros(10, np.int32)})
    with pytest.raises(InvalidArgument, match="out\\['key'\\]"):
        g.fill(0, 10, ("key",), into={"key": np.zeros(5, np.int64)})
