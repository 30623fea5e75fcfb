# gen.pxi - the workload generators (slash/gen*.h): seeded, counter-based
# column fillers. Each class validates nothing beyond what the core checks
# (slash.workloads validates the user's arguments first); fill methods
# allocate NumPy columns, run the C filler without the GIL and return the
# columns by name. Byte columns are flat uint8 arrays; string columns are
# (int32 offsets, uint8 data) pairs in Arrow layout.
import numpy as _np

_GEN_DISTS = {"uniform": SLASH_GEN_UNIFORM, "zipf": SLASH_GEN_ZIPF}


cdef slash_gen_dist _gen_dist(str dist) except *:
    if dist not in _GEN_DISTS:
        raise _errors.InvalidArgument(f"key distribution must be 'uniform' or 'zipf', got {dist!r}")
    return _GEN_DISTS[dist]


cdef inline void *_addr(object arr):
    """Data pointer of a NumPy array, or NULL for None."""
    if arr is None:
        return NULL
    return <void *><size_t>arr.ctypes.data


cdef object _col(dict out, str name, object want, size_t n, object dtype, size_t width=1,
                 dict into=None):
    """The array column `name` is filled into: a slice of the caller's array
    from `into` (checked: C-contiguous, dtype, at least n * width elements),
    else a new one; None when the column is not wanted."""
    if name not in want:
        return None
    if into is not None and name in into:
        a = into[name]
        if (not isinstance(a, _np.ndarray) or a.dtype != _np.dtype(dtype) or a.ndim != 1
                or not a.flags.c_contiguous or not a.flags.writeable or a.size < n * width):
            raise _errors.InvalidArgument(
                f"out[{name!r}] must be a writable contiguous 1-d {_np.dtype(dtype)} array of at "
                f"least {n * width} elements")
        a = a[:n * width]
    else:
        a = _np.empty(n * width, dtype=dtype)
    out[name] = a
    return a


cdef class KeyGenerator:
    """Keys over [0, n) of one stream: uniform or bounded zipf (key 0 the hottest)."""
    cdef slash_gen_keys k
    cdef uint64_t stream

    def __init__(self, uint64_t n, str dist="uniform", double exponent=0.0, uint64_t seed=0,
                 uint64_t field=1):
        check(slash_gen_keys_init(&self.k, n, _gen_dist(dist), exponent))
        self.stream = slash_gen_stream(seed, field)

    def fill(self, uint64_t start, size_t n, out=None):
        """int64 keys of events [start, start + n), into `out` (an int64 array) if given."""
        check(slash_gen_range_check(b"keys", start, n, 0, 1000))
        out = _col({}, "key", ("key",), n, _np.int64, 1, None if out is None else {"key": out})
        cdef int64_t *p = <int64_t *>_addr(out)
        with nogil:
            slash_gen_keys_fill(&self.k, self.stream, start, n, p)
        return out

    def pmf(self, keys):
        """Exact probabilities of the given keys (O(n) each for zipf: small n only)."""
        return _np.array([slash_gen_keys_pmf(&self.k, <uint64_t>int(x)) for x in keys],
                         dtype=_np.float64)


def gen_times(int64_t base_ms, uint64_t rate, uint64_t start, size_t n, out=None):
    """int64 times in ms of events [start, start + n): base_ms + floor(i * 1000 / rate),
    into `out` (an int64 array) if given."""
    check(slash_gen_range_check(b"times", start, n, base_ms, rate))
    out = _col({}, "time", ("time",), n, _np.int64, 1, None if out is None else {"time": out})
    cdef int64_t *p = <int64_t *>_addr(out)
    with nogil:
        slash_gen_times_fill(base_ms, rate, start, n, p)
    return out


YSB_COLUMNS = ("key", "event_time", "user_id", "page_id", "ad_id", "ad_index", "ad_type",
               "event_type", "ip_address")
YSB_RECORD_BYTES = SLASH_GEN_YSB_RECORD_BYTES


cdef class YsbGenerator:
    """The YSB event generator (slash/gen_ysb.h)."""
    cdef slash_gen_ysb g

    def __init__(self, uint64_t seed, uint64_t campaigns, uint32_t ads_per_campaign, str dist,
                 double exponent, uint64_t rate, int64_t base_ms):
        cdef slash_gen_ysb_config c
        c.seed = seed
        c.campaigns = campaigns
        c.ads_per_campaign = ads_per_campaign
        c.dist = _gen_dist(dist)
        c.exponent = exponent
        c.rate = rate
        c.base_ms = base_ms
        check(slash_gen_ysb_init(&self.g, &c))

    def fill(self, uint64_t start, size_t n, columns=YSB_COLUMNS, dict into=None):
        """Columns of events [start, start + n) by name (UUIDs: n * 16 uint8),
        written into the caller's arrays in `into` where given (reused buffers)."""
        cdef dict out = {}
        cdef slash_gen_ysb_columns o
        o.key = <int64_t *>_addr(_col(out, "key", columns, n, _np.int64, 1, into))
        o.event_time = <int64_t *>_addr(_col(out, "event_time", columns, n, _np.int64, 1, into))
        o.user_id = <uint8_t *>_addr(_col(out, "user_id", columns, n, _np.uint8, 16, into))
        o.page_id = <uint8_t *>_addr(_col(out, "page_id", columns, n, _np.uint8, 16, into))
        o.ad_id = <uint8_t *>_addr(_col(out, "ad_id", columns, n, _np.uint8, 16, into))
        o.ad_index = <int64_t *>_addr(_col(out, "ad_index", columns, n, _np.int64, 1, into))
        o.ad_type = <int8_t *>_addr(_col(out, "ad_type", columns, n, _np.int8, 1, into))
        o.event_type = <int8_t *>_addr(_col(out, "event_type", columns, n, _np.int8, 1, into))
        o.ip_address = <uint32_t *>_addr(_col(out, "ip_address", columns, n, _np.uint32, 1, into))
        cdef slash_status st
        with nogil:
            st = slash_gen_ysb_fill(&self.g, start, n, &o)
        check(st)
        return out

    def ads(self, uint64_t first, size_t n):
        """The ad -> campaign map for ads [first, first + n)."""
        ad_id = _np.empty(16 * n, dtype=_np.uint8)
        ad_index = _np.empty(n, dtype=_np.int64)
        campaign = _np.empty(n, dtype=_np.int64)
        check(slash_gen_ysb_ads(&self.g, first, n, <uint8_t *>_addr(ad_id),
                                <int64_t *>_addr(ad_index), <int64_t *>_addr(campaign)))
        return {"ad_id": ad_id, "ad_index": ad_index, "campaign_id": campaign}


CM_COLUMNS = ("timestamp", "job_id", "task_id", "machine_id", "event_type", "user_id",
              "category", "priority", "cpu", "ram", "disk", "constraints")
CM_RECORD_BYTES = SLASH_GEN_CM_RECORD_BYTES


cdef class CmGenerator:
    """The synthetic cluster-monitoring generator (slash/gen_cm.h)."""
    cdef slash_gen_cm g

    def __init__(self, uint64_t seed, uint64_t jobs, str dist, double exponent,
                 uint64_t machines, uint64_t rate, int64_t base_ms):
        cdef slash_gen_cm_config c
        c.seed = seed
        c.jobs = jobs
        c.dist = _gen_dist(dist)
        c.exponent = exponent
        c.machines = machines
        c.rate = rate
        c.base_ms = base_ms
        check(slash_gen_cm_init(&self.g, &c))

    def fill(self, uint64_t start, size_t n, columns=CM_COLUMNS, dict into=None):
        """Columns of events [start, start + n) by name, into `into`'s arrays where given."""
        cdef dict out = {}
        cdef slash_gen_cm_columns o
        o.timestamp = <int64_t *>_addr(_col(out, "timestamp", columns, n, _np.int64, 1, into))
        o.job_id = <int64_t *>_addr(_col(out, "job_id", columns, n, _np.int64, 1, into))
        o.task_id = <int64_t *>_addr(_col(out, "task_id", columns, n, _np.int64, 1, into))
        o.machine_id = <int64_t *>_addr(_col(out, "machine_id", columns, n, _np.int64, 1, into))
        o.event_type = <int32_t *>_addr(_col(out, "event_type", columns, n, _np.int32, 1, into))
        o.user_id = <int32_t *>_addr(_col(out, "user_id", columns, n, _np.int32, 1, into))
        o.category = <int32_t *>_addr(_col(out, "category", columns, n, _np.int32, 1, into))
        o.priority = <int32_t *>_addr(_col(out, "priority", columns, n, _np.int32, 1, into))
        o.cpu = <float *>_addr(_col(out, "cpu", columns, n, _np.float32, 1, into))
        o.ram = <float *>_addr(_col(out, "ram", columns, n, _np.float32, 1, into))
        o.disk = <float *>_addr(_col(out, "disk", columns, n, _np.float32, 1, into))
        o.constraints = <int32_t *>_addr(_col(out, "constraints", columns, n, _np.int32, 1, into))
        cdef slash_status st
        with nogil:
            st = slash_gen_cm_fill(&self.g, start, n, &o)
        check(st)
        return out


NEXMARK_PERSON_COLUMNS = ("id", "name", "email", "credit_card", "city", "state", "date_time")
NEXMARK_AUCTION_COLUMNS = ("id", "item_name", "description", "initial_bid", "reserve",
                           "date_time", "expires", "seller", "category")
NEXMARK_BID_COLUMNS = ("auction", "bidder", "price", "channel", "url", "date_time")
NEXMARK_RECORD_BYTES = {"person": SLASH_GEN_NEXMARK_PERSON_BYTES,
                        "auction": SLASH_GEN_NEXMARK_AUCTION_BYTES,
                        "bid": SLASH_GEN_NEXMARK_BID_BYTES}
_NEXMARK_KINDS = {"person": SLASH_GEN_NEXMARK_PERSON, "auction": SLASH_GEN_NEXMARK_AUCTION,
                  "bid": SLASH_GEN_NEXMARK_BID}


cdef slash_gen_strcol _strcol(dict out, str name, object want, size_t n, size_t width):
    cdef slash_gen_strcol c
    c.offsets = NULL
    c.data = NULL
    if name in want:
        offsets = _np.empty(n + 1, dtype=_np.int32)
        offsets[0] = 0
        data = _np.empty(max(n * width, 1), dtype=_np.uint8)
        out[name] = (offsets, data)
        c.offsets = <int32_t *>_addr(offsets)
        c.data = <char *>_addr(data)
    return c


def nexmark_count(str kind, uint64_t events):
    """How many persons/auctions/bids are among events [0, events)."""
    return slash_gen_nexmark_count(_NEXMARK_KINDS[kind], events)


def nexmark_event_ids(str kind, uint64_t first, size_t n):
    """Event ids of persons/auctions/bids [first, first + n)."""
    cdef int k = _NEXMARK_KINDS[kind]
    return _np.fromiter((slash_gen_nexmark_event_of(k, first + j) for j in range(n)),
                        dtype=_np.int64, count=n)


cdef class NexmarkGenerator:
    """The NEXMark generator (slash/gen_nexmark.h)."""
    cdef slash_gen_nexmark g

    def __init__(self, uint64_t seed, bint beam_seeds, uint64_t rate, int64_t base_ms,
                 uint32_t hot_auction_ratio, uint32_t hot_bidders_ratio,
                 uint32_t hot_sellers_ratio, uint32_t num_active_people,
                 uint32_t num_in_flight_auctions):
        cdef slash_gen_nexmark_config c
        c.seed = seed
        c.beam_seeds = beam_seeds
        c.rate = rate
        c.base_ms = base_ms
        c.hot_auction_ratio = hot_auction_ratio
        c.hot_bidders_ratio = hot_bidders_ratio
        c.hot_sellers_ratio = hot_sellers_ratio
        c.num_active_people = num_active_people
        c.num_in_flight_auctions = num_in_flight_auctions
        check(slash_gen_nexmark_init(&self.g, &c))

    def persons(self, uint64_t first, size_t n, columns=NEXMARK_PERSON_COLUMNS):
        cdef dict out = {}
        cdef slash_gen_nexmark_persons o
        o.id = <int64_t *>_addr(_col(out, "id", columns, n, _np.int64))
        o.name = _strcol(out, "name", columns, n, SLASH_GEN_NEXMARK_NAME_MAX)
        o.email = _strcol(out, "email", columns, n, SLASH_GEN_NEXMARK_EMAIL_MAX)
        o.credit_card = _strcol(out, "credit_card", columns, n, SLASH_GEN_NEXMARK_CARD_MAX)
        o.city = _strcol(out, "city", columns, n, SLASH_GEN_NEXMARK_CITY_MAX)
        o.state = _strcol(out, "state", columns, n, SLASH_GEN_NEXMARK_STATE_MAX)
        o.date_time = <int64_t *>_addr(_col(out, "date_time", columns, n, _np.int64))
        cdef slash_status st
        with nogil:
            st = slash_gen_nexmark_persons_fill(&self.g, first, n, &o)
        check(st)
        return out

    def auctions(self, uint64_t first, size_t n, columns=NEXMARK_AUCTION_COLUMNS):
        cdef dict out = {}
        cdef slash_gen_nexmark_auctions o
        o.id = <int64_t *>_addr(_col(out, "id", columns, n, _np.int64))
        o.item_name = _strcol(out, "item_name", columns, n, SLASH_GEN_NEXMARK_ITEM_MAX)
        o.description = _strcol(out, "description", columns, n, SLASH_GEN_NEXMARK_DESC_MAX)
        o.initial_bid = <int64_t *>_addr(_col(out, "initial_bid", columns, n, _np.int64))
        o.reserve = <int64_t *>_addr(_col(out, "reserve", columns, n, _np.int64))
        o.date_time = <int64_t *>_addr(_col(out, "date_time", columns, n, _np.int64))
        o.expires = <int64_t *>_addr(_col(out, "expires", columns, n, _np.int64))
        o.seller = <int64_t *>_addr(_col(out, "seller", columns, n, _np.int64))
        o.category = <int64_t *>_addr(_col(out, "category", columns, n, _np.int64))
        cdef slash_status st
        with nogil:
            st = slash_gen_nexmark_auctions_fill(&self.g, first, n, &o)
        check(st)
        return out

    def bids(self, uint64_t first, size_t n, columns=NEXMARK_BID_COLUMNS):
        cdef dict out = {}
        cdef slash_gen_nexmark_bids o
        o.auction = <int64_t *>_addr(_col(out, "auction", columns, n, _np.int64))
        o.bidder = <int64_t *>_addr(_col(out, "bidder", columns, n, _np.int64))
        o.price = <int64_t *>_addr(_col(out, "price", columns, n, _np.int64))
        o.channel = _strcol(out, "channel", columns, n, SLASH_GEN_NEXMARK_CHANNEL_MAX)
        o.url = _strcol(out, "url", columns, n, SLASH_GEN_NEXMARK_URL_MAX)
        o.date_time = <int64_t *>_addr(_col(out, "date_time", columns, n, _np.int64))
        cdef slash_status st
        with nogil:
            st = slash_gen_nexmark_bids_fill(&self.g, first, n, &o)
        check(st)
        return out
