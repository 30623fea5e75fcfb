/* gen_nexmark.c - the NEXMark generator (semantics in slash/gen_nexmark.h).
 *
 * Each event is a pure function of its event id: the id fixes its kind and
 * its own person/auction id, and seeds a port of java.util.Random from which
 * the event draws its values in the order Beam's generator does. So any range
 * of any table can be generated alone and chunks concatenate exactly.
 */
#include "slash/gen_nexmark.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "slash/gen.h"
#include "slash/gen_jrandom.h"

#define PROP SLASH_GEN_NEXMARK_PROPORTION
#define PERSON_PROP 1
#define AUCTION_PROP SLASH_GEN_NEXMARK_AUCTIONS
#define BID_PROP SLASH_GEN_NEXMARK_BIDS
#define FIRST_ID SLASH_GEN_NEXMARK_FIRST_ID
#define HOT_BLOCK 100 /* Beam's HOT_{AUCTION,BIDDER,SELLER}_RATIO: the hot id's block */
#define ID_LEAD 10    /* Beam's PERSON_ID_LEAD / AUCTION_ID_LEAD */
#define FIRST_CATEGORY 10
#define NUM_CATEGORIES 5
#define MAX_EVENT_ID (UINT64_C(1) << 53)

_Static_assert(PERSON_PROP + AUCTION_PROP + BID_PROP == PROP, "1 : 3 : 46 of 50 events");
_Static_assert(8 * 4 == SLASH_GEN_NEXMARK_BID_BYTES,
               "a bid is auction, bidder, price, date_time: 32 bytes as in the paper");

/* Beam's LongGenerator.nextLong: [0, n) */
static int64_t next_long(slash_jrand *r, int64_t n) {
    if (n < INT32_MAX) return slash_jrand_int(r, (int32_t)n);
    int64_t v = slash_jrand_long(r) % n;
    return v < 0 ? -v : v;
}

/* Beam's PriceGenerator.nextPrice: Math.round(10^(6u) * 100) */
static int64_t next_price(slash_jrand *r) {
    return (int64_t)floor(pow(10.0, slash_jrand_double(r) * 6.0) * 100.0 + 0.5);
}

/* Beam's StringsGenerator.nextString: 3..max-1 chars of [a-z ], trimmed.
 * Writes at most max - 1 bytes to dst (NULL to only advance the stream);
 * returns the length. */
static size_t next_string(slash_jrand *r, int max, char *dst) {
    int len = 3 + slash_jrand_int(r, max - 3);
    char buf[128];
    for (int j = 0; j < len; j++)
        buf[j] = slash_jrand_int(r, 13) == 0 ? ' ' : (char)('a' + slash_jrand_int(r, 26));
    int a = 0, b = len;
    while (a < b && buf[a] == ' ') a++;
    while (b > a && buf[b - 1] == ' ') b--;
    if (dst) memcpy(dst, buf + a, (size_t)(b - a));
    return (size_t)(b - a);
}

/* ---- ids and times --------------------------------------------------------- */
static int64_t last_person(int64_t e) {
    int64_t epoch = e / PROP, off = e % PROP;
    if (off >= PERSON_PROP) off = PERSON_PROP - 1;
    return epoch * PERSON_PROP + off;
}

static int64_t last_auction(int64_t e) {
    int64_t epoch = e / PROP, off = e % PROP;
    if (off < PERSON_PROP) {
        epoch--;
        off = AUCTION_PROP - 1;
    } else if (off >= PERSON_PROP + AUCTION_PROP) {
        off = AUCTION_PROP - 1;
    } else {
        off -= PERSON_PROP;
    }
    return epoch * AUCTION_PROP + off;
}

static int64_t next_person(const slash_gen_nexmark *g, int64_t e, slash_jrand *r) {
    int64_t people = last_person(e) + 1;
    int64_t active = people < (int64_t)g->cfg.num_active_people ? people
                                                                 : (int64_t)g->cfg.num_active_people;
    return people - active + next_long(r, active + ID_LEAD);
}

static int64_t next_auction(const slash_gen_nexmark *g, int64_t e, slash_jrand *r) {
    int64_t max = last_auction(e);
    int64_t min = max - (int64_t)g->cfg.num_in_flight_auctions;
    if (min < 0) min = 0;
    return min + next_long(r, max - min + 1 + ID_LEAD);
}

static int64_t time_of(const slash_gen_nexmark *g, int64_t e) {
    return g->cfg.base_ms + (int64_t)(((__int128)e * g->delay_us) / 1000);
}

static void event_rng(const slash_gen_nexmark *g, uint64_t e, slash_jrand *r) {
    slash_jrand_seed(r, g->cfg.beam_seeds ? e : slash_gen_at(g->stream, e));
}

uint64_t slash_gen_nexmark_event_of(int kind, uint64_t k) {
    switch (kind) {
    case SLASH_GEN_NEXMARK_PERSON: return PROP * k;
    case SLASH_GEN_NEXMARK_AUCTION: return PROP * (k / AUCTION_PROP) + PERSON_PROP + k % AUCTION_PROP;
    default: return PROP * (k / BID_PROP) + PERSON_PROP + AUCTION_PROP + k % BID_PROP;
    }
}

uint64_t slash_gen_nexmark_count(int kind, uint64_t events) {
    uint64_t full = events / PROP, rest = events % PROP;
    switch (kind) {
    case SLASH_GEN_NEXMARK_PERSON: return full * PERSON_PROP + (rest > 0 ? 1 : 0);
    case SLASH_GEN_NEXMARK_AUCTION: {
        uint64_t in_rest = rest > PERSON_PROP ? rest - PERSON_PROP : 0;
        return full * AUCTION_PROP + (in_rest < AUCTION_PROP ? in_rest : AUCTION_PROP);
    }
    default: {
        uint64_t in_rest = rest > PERSON_PROP + AUCTION_PROP ? rest - PERSON_PROP - AUCTION_PROP : 0;
        return full * BID_PROP + in_rest;
    }
    }
}

slash_status slash_gen_nexmark_init(slash_gen_nexmark *g, const slash_gen_nexmark_config *c) {
    if (!g || !c) return slash_fail(SLASH_EINVAL, "nexmark: NULL generator or config");
    if (c->rate < 1 || c->rate > 1000000)
        return slash_fail(SLASH_EINVAL, "nexmark: rate must be 1..1000000 events/s (the "
                                        "inter-event delay is whole microseconds), got %llu",
                          (unsigned long long)c->rate);
    if (c->base_ms < 0) return slash_fail(SLASH_EINVAL, "nexmark: base time must be >= 0 ms");
    if (c->hot_auction_ratio < 1 || c->hot_bidders_ratio < 1 || c->hot_sellers_ratio < 1 ||
        c->hot_auction_ratio > INT32_MAX || c->hot_bidders_ratio > INT32_MAX ||
        c->hot_sellers_ratio > INT32_MAX)
        return slash_fail(SLASH_EINVAL, "nexmark: hot ratios must be >= 1 (1 = no hot ids)");
    if (c->num_active_people < 1 || c->num_active_people > INT32_MAX / 2)
        return slash_fail(SLASH_EINVAL, "nexmark: num_active_people must be 1..2^30");
    if (c->num_in_flight_auctions < 1 || c->num_in_flight_auctions > INT32_MAX / 2)
        return slash_fail(SLASH_EINVAL, "nexmark: num_in_flight_auctions must be 1..2^30");
    g->cfg = *c;
    g->stream = slash_gen_stream(c->seed, 0x4e45584d /* "NEXM" */);
    g->delay_us = (int64_t)((1000000 + c->rate / 2) / c->rate); /* Beam's rateToPeriodUs */
    return SLASH_OK;
}

static slash_status check_range(const slash_gen_nexmark *g, int kind, uint64_t first, size_t n,
                                const char *what) {
    if (n == 0) return SLASH_OK;
    uint64_t last = first + (uint64_t)n - 1;
    if (first >= MAX_EVENT_ID || (uint64_t)n > MAX_EVENT_ID ||
        slash_gen_nexmark_event_of(kind, last) >= MAX_EVENT_ID)
        return slash_fail(SLASH_EINVAL, "nexmark %s: range [%llu, +%zu) passes event id 2^53",
                          what, (unsigned long long)first, n);
    __int128 t = (__int128)g->cfg.base_ms +
                 ((__int128)slash_gen_nexmark_event_of(kind, last) * g->delay_us) / 1000;
    if (t > INT64_MAX) return slash_fail(SLASH_EINVAL, "nexmark %s: event time overflows", what);
    return SLASH_OK;
}

/* Appends s (len bytes) as row j of a string column. */
static void put_str(const slash_gen_strcol *c, size_t j, const char *s, size_t len) {
    if (!c->offsets) return;
    if (j == 0) c->offsets[0] = 0;
    memcpy(c->data + c->offsets[j], s, len);
    c->offsets[j + 1] = c->offsets[j] + (int32_t)len;
}

static const char *const FIRST_NAMES[] = {"Peter", "Paul",  "Luke",  "John",   "Saul",  "Vicky",
                                          "Kate",  "Julie", "Sarah", "Deiter", "Walter"};
static const char *const LAST_NAMES[] = {"Shultz", "Abrams", "Spencer", "White", "Bartels",
                                         "Walton", "Smith",  "Jones",   "Noris"};
static const char *const US_CITIES[] = {"Phoenix", "Los Angeles", "San Francisco", "Boise",
                                        "Portland", "Bend", "Redmond", "Seattle", "Kent",
                                        "Cheyenne"};
static const char *const US_STATES[] = {"AZ", "CA", "ID", "OR", "WA", "WY"};
static const char *const HOT_CHANNELS[] = {"Google", "Facebook", "Baidu", "Apple"};
static const char *const HOT_URLS[] = {"https://www.nexmark.com/google/item.htm?query=1",
                                       "https://www.nexmark.com/facebook/item.htm?query=1",
                                       "https://www.nexmark.com/baidu/item.htm?query=1",
                                       "https://www.nexmark.com/apple/item.htm?query=1"};
#define NELEM(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

slash_status slash_gen_nexmark_persons_fill(const slash_gen_nexmark *g, uint64_t first, size_t n,
                                            const slash_gen_nexmark_persons *out) {
    if (!g || !out) return slash_fail(SLASH_EINVAL, "nexmark persons: NULL argument");
    slash_status st = check_range(g, SLASH_GEN_NEXMARK_PERSON, first, n, "persons");
    if (st != SLASH_OK) return st;
    char buf[128];
    for (size_t j = 0; j < n; j++) {
        int64_t e = (int64_t)slash_gen_nexmark_event_of(SLASH_GEN_NEXMARK_PERSON, first + j);
        slash_jrand r;
        event_rng(g, (uint64_t)e, &r);
        if (out->id) out->id[j] = last_person(e) + FIRST_ID;
        const char *fn = FIRST_NAMES[slash_jrand_int(&r, NELEM(FIRST_NAMES))];
        const char *ln = LAST_NAMES[slash_jrand_int(&r, NELEM(LAST_NAMES))];
        int len = snprintf(buf, sizeof buf, "%s %s", fn, ln);
        put_str(&out->name, j, buf, (size_t)len);
        size_t a = next_string(&r, 7, buf);
        buf[a++] = '@';
        a += next_string(&r, 5, buf + a);
        memcpy(buf + a, ".com", 4);
        put_str(&out->email, j, buf, a + 4);
        len = 0;
        for (int k = 0; k < 4; k++)
            len += snprintf(buf + len, sizeof buf - (size_t)len, k ? " %04d" : "%04d",
                            (int)slash_jrand_int(&r, 10000));
        put_str(&out->credit_card, j, buf, (size_t)len);
        const char *city = US_CITIES[slash_jrand_int(&r, NELEM(US_CITIES))];
        put_str(&out->city, j, city, strlen(city));
        const char *state = US_STATES[slash_jrand_int(&r, NELEM(US_STATES))];
        put_str(&out->state, j, state, strlen(state));
        if (out->date_time) out->date_time[j] = time_of(g, e);
    }
    return SLASH_OK;
}

slash_status slash_gen_nexmark_auctions_fill(const slash_gen_nexmark *g, uint64_t first, size_t n,
                                             const slash_gen_nexmark_auctions *out) {
    if (!g || !out) return slash_fail(SLASH_EINVAL, "nexmark auctions: NULL argument");
    slash_status st = check_range(g, SLASH_GEN_NEXMARK_AUCTION, first, n, "auctions");
    if (st != SLASH_OK) return st;
    /* events until num_in_flight_auctions more auctions exist (Beam's nextAuctionLengthMs) */
    const int64_t ahead = ((int64_t)g->cfg.num_in_flight_auctions * PROP) / AUCTION_PROP;
    char buf[128];
    for (size_t j = 0; j < n; j++) {
        int64_t e = (int64_t)slash_gen_nexmark_event_of(SLASH_GEN_NEXMARK_AUCTION, first + j);
        slash_jrand r;
        event_rng(g, (uint64_t)e, &r);
        int64_t ts = time_of(g, e);
        if (out->id) out->id[j] = last_auction(e) + FIRST_ID;
        int64_t seller;
        if (slash_jrand_int(&r, (int32_t)g->cfg.hot_sellers_ratio) > 0)
            seller = (last_person(e) / HOT_BLOCK) * HOT_BLOCK;
        else
            seller = next_person(g, e, &r);
        if (out->seller) out->seller[j] = seller + FIRST_ID;
        int64_t category = FIRST_CATEGORY + slash_jrand_int(&r, NUM_CATEGORIES);
        if (out->category) out->category[j] = category;
        int64_t initial = next_price(&r);
        if (out->initial_bid) out->initial_bid[j] = initial;
        int64_t horizon = time_of(g, e + ahead) - ts;
        int64_t length = 1 + next_long(&r, horizon * 2 > 1 ? horizon * 2 : 1);
        if (out->expires) out->expires[j] = ts + length;
        size_t len = next_string(&r, 20, buf);
        put_str(&out->item_name, j, buf, len);
        len = next_string(&r, 100, buf);
        put_str(&out->description, j, buf, len);
        int64_t reserve = initial + next_price(&r);
        if (out->reserve) out->reserve[j] = reserve;
        if (out->date_time) out->date_time[j] = ts;
    }
    return SLASH_OK;
}

slash_status slash_gen_nexmark_bids_fill(const slash_gen_nexmark *g, uint64_t first, size_t n,
                                         const slash_gen_nexmark_bids *out) {
    if (!g || !out) return slash_fail(SLASH_EINVAL, "nexmark bids: NULL argument");
    slash_status st = check_range(g, SLASH_GEN_NEXMARK_BID, first, n, "bids");
    if (st != SLASH_OK) return st;
    const int strings = out->channel.offsets || out->url.offsets;
    char buf[SLASH_GEN_NEXMARK_URL_MAX + 1];
    for (size_t j = 0; j < n; j++) {
        int64_t e = (int64_t)slash_gen_nexmark_event_of(SLASH_GEN_NEXMARK_BID, first + j);
        slash_jrand r;
        event_rng(g, (uint64_t)e, &r);
        int64_t auction;
        if (slash_jrand_int(&r, (int32_t)g->cfg.hot_auction_ratio) > 0)
            auction = (last_auction(e) / HOT_BLOCK) * HOT_BLOCK;
        else
            auction = next_auction(g, e, &r);
        int64_t bidder;
        if (slash_jrand_int(&r, (int32_t)g->cfg.hot_bidders_ratio) > 0)
            bidder = (last_person(e) / HOT_BLOCK) * HOT_BLOCK + 1;
        else
            bidder = next_person(g, e, &r);
        int64_t price = next_price(&r);
        if (out->auction) out->auction[j] = auction + FIRST_ID;
        if (out->bidder) out->bidder[j] = bidder + FIRST_ID;
        if (out->price) out->price[j] = price;
        if (out->date_time) out->date_time[j] = time_of(g, e);
        if (!strings) continue;
        if (slash_jrand_int(&r, 2) > 0) {
            int32_t h = slash_jrand_int(&r, NELEM(HOT_CHANNELS));
            put_str(&out->channel, j, HOT_CHANNELS[h], strlen(HOT_CHANNELS[h]));
            put_str(&out->url, j, HOT_URLS[h], strlen(HOT_URLS[h]));
        } else {
            int32_t c = slash_jrand_int(&r, 10000);
            int len = snprintf(buf, sizeof buf, "channel-%d", (int)c);
            put_str(&out->channel, j, buf, (size_t)len);
            len = snprintf(buf, sizeof buf, "https://www.nexmark.com/item.htm?query=1&channel_id=%d",
                           (int)c);
            put_str(&out->url, j, buf, (size_t)len);
        }
    }
    return SLASH_OK;
}
