/* test_gen.c - tests of the workload generators' core: the counter-based
 * RNG, the java.util.Random port, the bounded zipf sampler (against its exact
 * pmf), event times, and the YSB / NEXMark / CM fillers (determinism, chunk
 * independence, invariants). Kept to well under a second, also under ASan.
 */
#include <math.h>
#include <stdlib.h>

#include "slash/gen.h"
#include "slash/gen_cm.h"
#include "slash/gen_jrandom.h"
#include "slash/gen_nexmark.h"
#include "slash/gen_ysb.h"
#include "unit.h"

TEST(splitmix_reference) {
    /* splitmix64 from state 0: the reference implementation's first outputs */
    slash_gen_rng r = {0};
    CHECK(slash_gen_next(&r) == UINT64_C(0xe220a8397b1dcdaf));
    CHECK(slash_gen_next(&r) == UINT64_C(0x6e789e6aa1b965f4));
    CHECK(slash_gen_at(0, 0) == UINT64_C(0xe220a8397b1dcdaf));
    CHECK(slash_gen_stream(1, 1) != slash_gen_stream(2, 1));
    CHECK(slash_gen_stream(1, 1) != slash_gen_stream(1, 2));
    CHECK(slash_gen_below(UINT64_MAX, 10) == 9);
    CHECK(slash_gen_below(0, 10) == 0);
    CHECK(slash_gen_unit(UINT64_MAX) < 1.0);
}

TEST(java_random_matches_jdk) {
    /* values printed by OpenJDK 17 for new Random(seed): nextInt(), nextInt(100),
     * nextInt(13), nextInt(4), nextInt(10000), nextLong(), nextDouble() bits,
     * nextInt(1000000007) */
    static const struct {
        uint64_t seed;
        int32_t i, i100, i13, i4, i10000;
        int64_t l;
        uint64_t dbits;
        int32_t ibig;
    } want[] = {
        {0, -1155484576, 48, 10, 2, 3515, INT64_C(5700976833288827063),
         UINT64_C(4593095635380350600), 678332847},
        {42, -1170105035, 63, 9, 0, 9970, INT64_C(-1068554554583376509),
         UINT64_C(4604549709834685269), 196118093},
        {1234567, 1042961893, 36, 12, 1, 7348, INT64_C(5409774537867922883),
         UINT64_C(4606686854595494550), 711765944},
        {0x7fffffffffffULL, -992383821, 49, 8, 0, 3780, INT64_C(1859348155906896794),
         UINT64_C(4606275290075495646), 195154548},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        slash_jrand r;
        slash_jrand_seed(&r, want[k].seed);
        CHECK(slash_jrand_next(&r, 32) == want[k].i);
        CHECK(slash_jrand_int(&r, 100) == want[k].i100);
        CHECK(slash_jrand_int(&r, 13) == want[k].i13);
        CHECK(slash_jrand_int(&r, 4) == want[k].i4);
        CHECK(slash_jrand_int(&r, 10000) == want[k].i10000);
        CHECK(slash_jrand_long(&r) == want[k].l);
        double d = slash_jrand_double(&r);
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        CHECK(bits == want[k].dbits);
        CHECK(slash_jrand_int(&r, 1000000007) == want[k].ibig);
    }
}

TEST(keys_init_rejects_bad_arguments) {
    slash_gen_keys k;
    CHECK_ST(slash_gen_keys_init(&k, 0, SLASH_GEN_UNIFORM, 0), SLASH_EINVAL);
    CHECK_ST(slash_gen_keys_init(&k, 10, SLASH_GEN_ZIPF, 0.0), SLASH_EINVAL);
    CHECK_ST(slash_gen_keys_init(&k, 10, SLASH_GEN_ZIPF, -1.0), SLASH_EINVAL);
    CHECK_ST(slash_gen_keys_init(&k, 10, SLASH_GEN_ZIPF, NAN), SLASH_EINVAL);
    CHECK_ST(slash_gen_keys_init(&k, 10, (slash_gen_dist)7, 1.0), SLASH_EINVAL);
    CHECK_ST(slash_gen_keys_init(&k, (UINT64_C(1) << 62) + 1, SLASH_GEN_UNIFORM, 0), SLASH_EINVAL);
    CHECK_OK(slash_gen_keys_init(&k, 1, SLASH_GEN_ZIPF, 1.0));
    CHECK(slash_gen_keys_draw(&k, 12345) == 0);
}

/* Pearson chi-square of `draws` keys from k (n keys) against its pmf. */
static double chi2_of(const slash_gen_keys *k, size_t draws, uint64_t stream) {
    size_t n = (size_t)k->n;
    double *obs = calloc(n, sizeof *obs);
    int64_t *keys = malloc(draws * sizeof *keys);
    slash_gen_keys_fill(k, stream, 0, draws, keys);
    int out_of_range = 0;
    for (size_t j = 0; j < draws; j++) {
        if (keys[j] < 0 || (uint64_t)keys[j] >= n) out_of_range = 1;
        else obs[keys[j]] += 1;
    }
    double chi2 = out_of_range ? INFINITY : 0.0;
    for (size_t key = 0; key < n; key++) {
        double e = slash_gen_keys_pmf(k, key) * (double)draws;
        chi2 += (obs[key] - e) * (obs[key] - e) / e;
    }
    free(obs);
    free(keys);
    return chi2;
}

TEST(zipf_matches_exact_pmf) {
    /* 20 keys, 19 degrees of freedom: P(chi2 > 50) is about 1e-4 */
    const double exps[] = {0.2, 0.8, 1.0, 1.5, 2.0, 3.5};
    for (size_t e = 0; e < sizeof exps / sizeof exps[0]; e++) {
        slash_gen_keys k;
        CHECK_OK(slash_gen_keys_init(&k, 20, SLASH_GEN_ZIPF, exps[e]));
        double chi2 = chi2_of(&k, 200000, slash_gen_stream(7, 1));
        if (!(chi2 < 50.0)) fprintf(stderr, "  zipf s=%g chi2=%g\n", exps[e], chi2);
        CHECK(chi2 < 50.0);
    }
    slash_gen_keys u;
    CHECK_OK(slash_gen_keys_init(&u, 20, SLASH_GEN_UNIFORM, 0));
    CHECK(chi2_of(&u, 200000, slash_gen_stream(7, 1)) < 50.0);
}

TEST(zipf_pmf_is_normalised_and_falls) {
    slash_gen_keys k;
    CHECK_OK(slash_gen_keys_init(&k, 1000, SLASH_GEN_ZIPF, 1.0));
    double sum = 0;
    for (uint64_t key = 0; key < 1000; key++) sum += slash_gen_keys_pmf(&k, key);
    CHECK(fabs(sum - 1.0) < 1e-9);
    CHECK(slash_gen_keys_pmf(&k, 0) > slash_gen_keys_pmf(&k, 1));
    CHECK(slash_gen_keys_pmf(&k, 1000) == 0.0);
    /* huge ranges: O(1) init and samples stay in range */
    CHECK_OK(slash_gen_keys_init(&k, UINT64_C(100000000), SLASH_GEN_ZIPF, 0.2));
    int64_t keys[1000];
    slash_gen_keys_fill(&k, 99, 0, 1000, keys);
    int ok = 1;
    for (int j = 0; j < 1000; j++) ok &= keys[j] >= 0 && keys[j] < 100000000;
    CHECK(ok);
}

TEST(keys_chunks_equal_one_fill) {
    slash_gen_keys k;
    CHECK_OK(slash_gen_keys_init(&k, 1000, SLASH_GEN_ZIPF, 1.2));
    int64_t a[300], b[300];
    slash_gen_keys_fill(&k, 5, 1000, 300, a);
    slash_gen_keys_fill(&k, 5, 1000, 17, b);
    slash_gen_keys_fill(&k, 5, 1017, 283, b + 17);
    CHECK(memcmp(a, b, sizeof a) == 0);
    slash_gen_keys_fill(&k, 6, 1000, 300, b);
    CHECK(memcmp(a, b, sizeof a) != 0);
}

TEST(times_are_floor_of_rate) {
    const uint64_t rates[] = {1, 3, 7, 1000, 1001, 999983, UINT64_C(10000000)};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        int64_t t[500];
        uint64_t start = 123456789 % (rates[r] * 3 + 1);
        slash_gen_times_fill(42, rates[r], start, 500, t);
        int ok = 1;
        for (uint64_t j = 0; j < 500; j++) {
            uint64_t i = start + j;
            ok &= t[j] == 42 + (int64_t)((i * 1000) / rates[r]);
            ok &= t[j] == slash_gen_time_at(42, rates[r], i);
        }
        CHECK(ok);
    }
    CHECK_ST(slash_gen_times_check(0, 0, 1), SLASH_EINVAL);
    CHECK_ST(slash_gen_times_check(INT64_MAX - 10, 1, 1000), SLASH_EINVAL);
    CHECK_ST(slash_gen_times_check(-1, 1, 1), SLASH_EINVAL);
    CHECK_OK(slash_gen_times_check(0, 1, 1000));
}

static slash_gen_ysb_config ysb_cfg(uint64_t seed) {
    slash_gen_ysb_config c = {.seed = seed, .campaigns = 100, .ads_per_campaign = 10,
                              .dist = SLASH_GEN_UNIFORM, .rate = 1000000, .base_ms = 0};
    return c;
}

TEST(ysb_deterministic_chunked_and_consistent) {
    enum { N = 2000 };
    slash_gen_ysb g;
    slash_gen_ysb_config c = ysb_cfg(1);
    CHECK_OK(slash_gen_ysb_init(&g, &c));
    static int64_t key[N], key2[N], t[N], adix[N];
    static uint8_t ad[16 * N], ad2[16 * N], user[16 * N];
    static int8_t ev[N], adt[N];
    static uint32_t ip[N];
    slash_gen_ysb_columns out = {key, t, user, NULL, ad, adix, adt, ev, ip};
    CHECK_OK(slash_gen_ysb_fill(&g, 500, N, &out));
    /* chunked, and without the key column: same ad ids */
    slash_gen_ysb_columns a = {key2, NULL, NULL, NULL, ad2, NULL, NULL, NULL, NULL};
    slash_gen_ysb_columns b = {NULL, NULL, NULL, NULL, ad2 + 16 * 700, NULL, NULL, NULL, NULL};
    CHECK_OK(slash_gen_ysb_fill(&g, 500, 700, &a));
    CHECK_OK(slash_gen_ysb_fill(&g, 1200, N - 700, &b));
    CHECK(memcmp(key, key2, 700 * sizeof key[0]) == 0);
    CHECK(memcmp(ad, ad2, sizeof ad) == 0);
    /* the ad map sends each event's ad back to its campaign (the key) */
    static uint8_t map_ad[16 * 1000];
    static int64_t map_ix[1000], map_c[1000];
    CHECK_OK(slash_gen_ysb_ads(&g, 0, 1000, map_ad, map_ix, map_c));
    int ok = 1, types = 1;
    int counts[3] = {0, 0, 0};
    for (int j = 0; j < N; j++) {
        ok &= key[j] >= 0 && key[j] < 100 && adix[j] >= 0 && adix[j] < 1000;
        ok &= map_c[adix[j]] == key[j] && map_ix[adix[j]] == adix[j];
        ok &= memcmp(map_ad + 16 * adix[j], ad + 16 * j, 16) == 0;
        types &= ev[j] >= 0 && ev[j] < 3 && adt[j] >= 0 && adt[j] < 5;
        if (ev[j] >= 0 && ev[j] < 3) counts[ev[j]]++;
        ok &= (user[16 * j + 6] >> 4) == 4; /* UUID version 4 */
    }
    CHECK(ok);
    CHECK(types);
    for (int e = 0; e < 3; e++) CHECK(counts[e] > N / 3 - 150 && counts[e] < N / 3 + 150);
    CHECK_ST(slash_gen_ysb_ads(&g, 990, 11, NULL, NULL, map_c), SLASH_EINVAL);
    /* another seed, other bytes */
    slash_gen_ysb g2;
    c = ysb_cfg(2);
    CHECK_OK(slash_gen_ysb_init(&g2, &c));
    CHECK_OK(slash_gen_ysb_fill(&g2, 500, 700, &a));
    CHECK(memcmp(key, key2, 700 * sizeof key[0]) != 0);
    c.campaigns = 0;
    CHECK_ST(slash_gen_ysb_init(&g2, &c), SLASH_EINVAL);
    c = ysb_cfg(2);
    c.rate = 0;
    CHECK_ST(slash_gen_ysb_init(&g2, &c), SLASH_EINVAL);
}

TEST(nexmark_counts_and_ids) {
    /* kinds by event id: 1 person, 3 auctions, 46 bids in every 50 events */
    for (uint64_t events = 0; events < 260; events++) {
        uint64_t p = 0, a = 0, b = 0;
        for (uint64_t e = 0; e < events; e++) {
            uint64_t r = e % 50;
            if (r == 0) p++;
            else if (r < 4) a++;
            else b++;
        }
        CHECK(slash_gen_nexmark_count(SLASH_GEN_NEXMARK_PERSON, events) == p);
        CHECK(slash_gen_nexmark_count(SLASH_GEN_NEXMARK_AUCTION, events) == a);
        CHECK(slash_gen_nexmark_count(SLASH_GEN_NEXMARK_BID, events) == b);
    }
    CHECK(slash_gen_nexmark_event_of(SLASH_GEN_NEXMARK_AUCTION, 4) == 52);
    CHECK(slash_gen_nexmark_event_of(SLASH_GEN_NEXMARK_BID, 46) == 54);

    slash_gen_nexmark g;
    slash_gen_nexmark_config c = {.seed = 0, .beam_seeds = 0, .rate = 10000, .base_ms = 0,
                                  .hot_auction_ratio = 2, .hot_bidders_ratio = 4,
                                  .hot_sellers_ratio = 4, .num_active_people = 1000,
                                  .num_in_flight_auctions = 100};
    CHECK_OK(slash_gen_nexmark_init(&g, &c));
    enum { NB = 4600 };
    static int64_t auction[NB], bidder[NB], price[NB], dt[NB], auction2[NB];
    static int32_t choff[NB + 1];
    static char chdata[NB * SLASH_GEN_NEXMARK_CHANNEL_MAX];
    slash_gen_nexmark_bids out = {auction, bidder, price, {choff, chdata}, {NULL, NULL}, dt};
    CHECK_OK(slash_gen_nexmark_bids_fill(&g, 0, NB, &out));
    slash_gen_nexmark_bids out2 = {auction2, NULL, NULL, {NULL, NULL}, {NULL, NULL}, NULL};
    CHECK_OK(slash_gen_nexmark_bids_fill(&g, 0, 1000, &out2));
    CHECK_OK(slash_gen_nexmark_bids_fill(&g, 1000, NB - 1000, &(slash_gen_nexmark_bids){
                                                                  auction2 + 1000, NULL, NULL,
                                                                  {NULL, NULL}, {NULL, NULL}, NULL}));
    CHECK(memcmp(auction, auction2, sizeof auction) == 0);
    int ok = 1, hot = 0;
    for (int j = 0; j < NB; j++) {
        int64_t e = (int64_t)slash_gen_nexmark_event_of(SLASH_GEN_NEXMARK_BID, (uint64_t)j);
        int64_t last_auction = (e / 50) * 3 + 2 + 1000;
        ok &= auction[j] >= 1000 && auction[j] <= last_auction + 10;
        ok &= bidder[j] >= 1000 && bidder[j] <= e / 50 + 1000 + 10;
        ok &= price[j] >= 100 && price[j] <= 100000000;
        ok &= dt[j] == (e * 100) / 1000; /* 10,000 events/s: 100 us apart */
        hot += auction[j] == ((last_auction - 1000) / 100) * 100 + 1000;
        ok &= choff[j + 1] > choff[j];
    }
    CHECK(ok);
    if (!(hot > NB / 2 - 200 && hot < NB / 2 + 300)) fprintf(stderr, "  hot=%d of %d\n", hot, NB);
    CHECK(hot > NB / 2 - 200 && hot < NB / 2 + 300); /* ~half, plus random hits */
    c.rate = 0;
    CHECK_ST(slash_gen_nexmark_init(&g, &c), SLASH_EINVAL);
}

TEST(cm_shape) {
    slash_gen_cm g;
    slash_gen_cm_config c = {.seed = 3, .jobs = 240, .dist = SLASH_GEN_ZIPF, .exponent = 1.42,
                             .machines = 12500, .rate = 25, .base_ms = 0};
    CHECK_OK(slash_gen_cm_init(&g, &c));
    enum { N = 3000 };
    static int64_t ts[N], job[N], task[N], mach[N];
    static int32_t ev[N], user[N], cat[N], pri[N], con[N];
    static float cpu[N], ram[N], disk[N];
    slash_gen_cm_columns out = {ts, job, task, mach, ev, user, cat, pri, cpu, ram, disk, con};
    CHECK_OK(slash_gen_cm_fill(&g, 0, N, &out));
    int ok = 1;
    for (int j = 0; j < N; j++) {
        ok &= ev[j] >= 0 && ev[j] <= 5 && cat[j] >= 0 && cat[j] <= 3;
        ok &= cpu[j] >= 0 && cpu[j] <= 0.5f && ram[j] >= 0 && ram[j] <= 0.5f;
        ok &= job[j] >= 515042954 && job[j] <= 6251707408;
        ok &= task[j] >= 0 && task[j] < 20001;
        ok &= (ev[j] == 0) ? mach[j] == -1 : 1;
        ok &= ts[j] == (int64_t)j * 40;
        /* per-job attributes agree across events of the job */
        for (int k = 0; k < j && k < 50; k++)
            if (job[k] == job[j]) ok &= cpu[k] == cpu[j] && user[k] == user[j] && pri[k] == pri[j];
    }
    CHECK(ok);
    c.machines = 0;
    CHECK_ST(slash_gen_cm_init(&g, &c), SLASH_EINVAL);
}

int main(void) {
    RUN(splitmix_reference);
    RUN(java_random_matches_jdk);
    RUN(keys_init_rejects_bad_arguments);
    RUN(zipf_matches_exact_pmf);
    RUN(zipf_pmf_is_normalised_and_falls);
    RUN(keys_chunks_equal_one_fill);
    RUN(times_are_floor_of_rate);
    RUN(ysb_deterministic_chunked_and_consistent);
    RUN(nexmark_counts_and_ids);
    RUN(cm_shape);
    return UNIT_DONE();
}
