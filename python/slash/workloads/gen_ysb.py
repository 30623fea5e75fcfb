"""The Yahoo Streaming Benchmark stream, as the Slash paper ran it (section
8.1.2): 78-byte ad events with an 8-byte key and an 8-byte event time.

Columns (fixed widths sum to :data:`RECORD_BYTES` = 78):

==============  ===================  =============================================
key             int64                the campaign id, drawn from [0, keys)
event_time      int64                milliseconds: base_ms + floor(i * 1000 / rate)
user_id         fixed_size_binary16  random UUID (v4)
page_id         fixed_size_binary16  random UUID (v4)
ad_id           fixed_size_binary16  UUID of the event's ad
ad_index        int64                the ad's number a; campaign = a // ads_per_campaign
ad_type         dictionary<int8>     banner, modal, sponsored-search, mail, mobile
event_type      dictionary<int8>     view, click, purchase (uniform)
ip_address      uint32               random IPv4 address
==============  ===================  =============================================

The original benchmark has 100 campaigns of 10 ads and looks the campaign up
from the ad (:func:`ysb_ads` gives that table); the paper draws the key from
10 million campaigns. The query: keep ``event_type == 'view'``, project
(key or ad_id, event_time), count per campaign per 10 s tumbling window.

>>> from slash.workloads import gen_ysb as ysb
>>> t = ysb.ysb(1000, keys=100, seed=1)
>>> t.num_rows, t.schema.field("key").type
(1000, DataType(int64))
"""
from __future__ import annotations

from typing import Iterator, Optional, Sequence

import pyarrow as pa

from slash import _core
from slash.workloads._common import (DEFAULT_BATCH, check_columns, check_int, check_stream, chunks,
                                     concat, dictionary_array, parse_skew, to_batch, uuid_array)

__all__ = ["COLUMNS", "RECORD_BYTES", "EVENT_TYPES", "AD_TYPES", "ysb", "ysb_batches", "ysb_ads"]

COLUMNS = tuple(_core.YSB_COLUMNS)
RECORD_BYTES: int = _core.YSB_RECORD_BYTES
EVENT_TYPES = ("view", "click", "purchase")
AD_TYPES = ("banner", "modal", "sponsored-search", "mail", "mobile")

_CONVERT = {
    "user_id": uuid_array, "page_id": uuid_array, "ad_id": uuid_array,
    "ad_type": lambda c: dictionary_array(c, AD_TYPES),
    "event_type": lambda c: dictionary_array(c, EVENT_TYPES),
}


def _generator(keys: int, ads_per_campaign: int, seed: int, skew: str, rate: int,
               base_ms: int) -> "_core.YsbGenerator":
    """seed, rate and base_ms are already checked."""
    keys = check_int("keys", keys, 1, 1 << 62)
    ads_per_campaign = check_int("ads_per_campaign", ads_per_campaign, 1, (1 << 32) - 1)
    dist, exponent = parse_skew(skew)
    return _core.YsbGenerator(seed, keys, ads_per_campaign, dist, exponent, rate, base_ms)


def ysb_batches(records: int, *, keys: int = 100, ads_per_campaign: int = 10, seed: int = 0,
                skew: str = "uniform", rate: int = 1_000_000, base_ms: int = 0, start: int = 0,
                batch_size: int = DEFAULT_BATCH,
                columns: Optional[Sequence[str]] = None) -> Iterator[pa.RecordBatch]:
    """Events [start, start + records) as RecordBatches of up to batch_size rows.

    Any split of the range gives the same rows: event i depends only on
    (seed, i). ``columns`` picks a subset (``("key", "event_time")`` is the
    fast path the state backend needs).

    >>> [b.num_rows for b in ysb_batches(5, batch_size=2, columns=["key"])]
    [2, 2, 1]
    """
    records, start, batch_size, seed, rate, base_ms = check_stream(records, start, batch_size,
                                                                   seed, rate, base_ms)
    g = _generator(keys, ads_per_campaign, seed, skew, rate, base_ms)
    cols = check_columns("columns", columns, COLUMNS)
    for first, n in chunks(start, records, batch_size):
        yield to_batch(g.fill(first, n, cols), cols, _CONVERT)


def ysb(records: int, **kwargs) -> pa.Table:
    """Events as one Table; keyword arguments as in :func:`ysb_batches`.

    >>> ysb(3, keys=10_000_000, seed=2, columns=["key", "event_time"]).num_columns
    2
    """
    return concat(ysb_batches(records, **kwargs))


def ysb_ads(*, keys: int = 100, ads_per_campaign: int = 10, seed: int = 0) -> pa.Table:
    """The ad -> campaign table (ad_id, ad_index, campaign_id) of every ad.

    Joining the events on ad_id (or ad_index) gives back their key column.

    >>> ysb_ads(keys=100).num_rows
    1000
    """
    g = _generator(keys, ads_per_campaign, check_int("seed", seed, 0, (1 << 64) - 1), "uniform",
                   1, 0)
    total = int(keys) * int(ads_per_campaign)
    check_int("keys * ads_per_campaign (ads in the table)", total, 1, 1 << 24)
    d = g.ads(0, total)
    return pa.table({"ad_id": uuid_array(d["ad_id"]), "ad_index": d["ad_index"],
                     "campaign_id": d["campaign_id"]})
