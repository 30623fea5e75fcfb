/* test_join_band.c - an emit under a band (join_band.c) against a brute-force
 * reference: the pairs of each finished (bucket, key) group whose band
 * columns differ by lo..hi, each once, with a hot key on half the rows, over
 * one store and over two stores merged through a delta, emitted in two steps;
 * and a band the store cannot honour refused at open. */
#include <stdio.h>
#include <stdlib.h>

#include "slash/join.h"
#include "unit.h"

#define W 100 /* bucket width */

typedef struct brow {
    int side;
    int64_t key, time, ts, id; /* time: where it is stored; ts: its band time */
} brow;

typedef struct pair {
    int64_t ws, key, lid, lts, rid, rts;
} pair;

static int cmp_pair(const void *a, const void *b) { return memcmp(a, b, sizeof(pair)); }

/* left columns (ts, id), right columns (id, ts): the band columns differ per side */
static slash_join *open_band(int64_t lo, int64_t hi)
{
    slash_join_config cfg = {0};
    if (slash_window_init(&cfg.window, SLASH_WINDOW_TUMBLING, W, 0) != SLASH_OK)
        return NULL;
    cfg.key_type = SLASH_KEY_INT64;
    cfg.partitions = 2;
    cfg.ncols[0] = cfg.ncols[1] = 2;
    cfg.cols[0][0] = cfg.cols[0][1] = cfg.cols[1][0] = cfg.cols[1][1] = SLASH_JOIN_I64;
    cfg.log_reserve = (size_t)1 << 28;
    cfg.band = 1;
    cfg.band_col[0] = 0, cfg.band_col[1] = 1;
    cfg.band_lo = lo, cfg.band_hi = hi;
    slash_join *s = NULL;
    if (slash_join_open(&cfg, &s) != SLASH_OK)
        fprintf(stderr, "open: %s\n", slash_last_error());
    return s;
}

static brow *gen(size_t n, uint64_t *seed)
{
    brow *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) {
        d[i].side = (int)(unit_rng(seed) & 1);
        d[i].key = unit_rng(seed) & 1 ? 7 : (int64_t)(unit_rng(seed) % 20); /* 7 is hot */
        d[i].time = (int64_t)(unit_rng(seed) % 1000);
        d[i].ts = d[i].time - (int64_t)(unit_rng(seed) % 60); /* band times off the stored */
        d[i].id = (int64_t)i;
    }
    return d;
}

static void apply(slash_join *s, const brow *d, size_t from, size_t to)
{
    size_t m = to - from;
    int64_t *t = malloc(m * 8 + 8), *k = malloc(m * 8 + 8), *a = malloc(m * 8 + 8),
            *b = malloc(m * 8 + 8);
    for (int side = 0; side < 2; side++) {
        size_t n = 0;
        for (size_t i = from; i < to; i++) {
            if (d[i].side != side)
                continue;
            t[n] = d[i].time, k[n] = d[i].key;
            a[n] = side ? d[i].id : d[i].ts; /* column 0 */
            b[n] = side ? d[i].ts : d[i].id; /* column 1 */
            n++;
        }
        slash_join_batch bt = {.side = side, .n = n, .times = t, .keys = k};
        bt.columns[0] = a, bt.columns[1] = b;
        CHECK_OK(slash_join_update(s, &bt));
    }
    free(t), free(k), free(a), free(b);
}

static size_t collect(slash_join *s, int64_t up_to, pair *out)
{
    slash_join_result *r = NULL;
    CHECK_OK(slash_join_emit(s, up_to, &r));
    size_t n = r ? r->rows : 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t *l0 = r->columns[0][0], *l1 = r->columns[0][1];
        const int64_t *r0 = r->columns[1][0], *r1 = r->columns[1][1];
        out[i] = (pair){r->window_start[i], r->keys[i], l1[i], l0[i], r0[i], r1[i]};
    }
    slash_join_result_free(r);
    return n;
}

static size_t reference(const brow *d, size_t n, int64_t lo, int64_t hi, pair *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            const brow *l = &d[i], *r = &d[j];
            if (l->side != 0 || r->side != 1 || l->key != r->key || l->time / W != r->time / W)
                continue;
            if (l->ts - r->ts < lo || l->ts - r->ts > hi)
                continue;
            out[m++] = (pair){l->time / W * W, l->key, l->id, l->ts, r->id, r->ts};
        }
    return m;
}

/* The band's pairs of rows d[0..n) (in one store, or half of them merged
 * from a peer's delta) equal the brute-force reference. */
static void check_rows(const brow *d, size_t n, int64_t lo, int64_t hi, int stores)
{
    pair *want = malloc(n * n * sizeof *want), *got = malloc(n * n * sizeof *got);
    size_t nw = reference(d, n, lo, hi, want);
    slash_join *s = open_band(lo, hi), *peer = stores > 1 ? open_band(lo, hi) : NULL;
    CHECK(s != NULL && (stores == 1 || peer != NULL));
    if (peer) {
        apply(s, d, 0, n / 2);
        apply(peer, d, n / 2, n);
        CHECK_OK(slash_join_begin_epoch(peer));
        for (uint32_t p = 0; p < 2; p++) {
            const void *addr;
            size_t len;
            CHECK_OK(slash_join_delta(peer, p, &addr, &len));
            CHECK_OK(slash_join_merge_delta(s, addr, len));
        }
        CHECK_OK(slash_join_reset_delta(peer));
    } else {
        apply(s, d, 0, n);
    }
    size_t ng = collect(s, 500, got); /* buckets [0, 500) first, then the rest */
    ng += collect(s, 1000, got + ng);
    qsort(want, nw, sizeof *want, cmp_pair);
    qsort(got, ng, sizeof *got, cmp_pair);
    CHECK(nw > 0);
    CHECK(ng == nw);
    CHECK(ng == nw && memcmp(got, want, nw * sizeof *want) == 0);
    slash_join_stats st;
    slash_join_get_stats(s, &st);
    CHECK(st.groups == 0 && st.rows[0] == 0 && st.rows[1] == 0);
    slash_join_close(s);
    slash_join_close(peer);
    free(want), free(got);
}

static void check_band(int64_t lo, int64_t hi, int stores)
{
    uint64_t seed = (uint64_t)lo * 31 + (uint64_t)hi + (uint64_t)stores;
    const size_t n = 1200;
    brow *d = gen(n, &seed);
    check_rows(d, n, lo, hi, stores);
    free(d);
}

/* One group (key 3, bucket 0) whose R right rows arrive in time order, in
 * reverse order, or all at one time, around the size where the band stops
 * sorting by insertion (join_band.c): each order gives every pair once. */
TEST(band_pairs_whatever_order_the_right_rows_arrive_in)
{
    const size_t sizes[] = {1, 2, 3, 16, 17, 40};
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
        for (int order = 0; order < 3; order++) {
            size_t R = sizes[z], n = R + 4;
            brow *d = malloc(n * sizeof *d);
            for (size_t i = 0; i < n; i++) {
                int64_t ts = order == 2 ? 50 : order == 0 ? (int64_t)i * 2 : 90 - (int64_t)i * 2;
                d[i] = (brow){.side = i < R, .key = 3, .time = 10, .ts = ts, .id = (int64_t)i};
            }
            for (size_t i = R; i < n; i++) /* the left rows, across the right rows' times */
                d[i].ts = (int64_t)(i - R) * 25 + 5;
            check_rows(d, n, -20, 20, 1);
            free(d);
        }
}

TEST(band_pairs_equal_brute_force) { check_band(-10, 25, 1); }
TEST(band_of_one_value) { check_band(0, 0, 1); }
TEST(band_wider_than_the_bucket_keeps_every_candidate) { check_band(-1000, 1000, 1); }
TEST(band_pairs_after_a_merged_delta) { check_band(-20, -5, 2); }
TEST(band_at_the_ends_of_int64_does_not_overflow) { check_band(INT64_MIN, INT64_MAX, 1); }

TEST(band_the_store_cannot_honour_is_refused)
{
    slash_join_config cfg = {0};
    CHECK_OK(slash_window_init(&cfg.window, SLASH_WINDOW_TUMBLING, W, 0));
    cfg.key_type = SLASH_KEY_INT64;
    cfg.partitions = 1;
    cfg.ncols[0] = cfg.ncols[1] = 1;
    cfg.cols[0][0] = SLASH_JOIN_I64;
    cfg.cols[1][0] = SLASH_JOIN_F64;
    cfg.band = 1;
    slash_join *s = NULL;
    CHECK_ST(slash_join_open(&cfg, &s), SLASH_EINVAL); /* a float64 band column */
    cfg.cols[1][0] = SLASH_JOIN_I64;
    cfg.band_col[0] = 1;
    CHECK_ST(slash_join_open(&cfg, &s), SLASH_EINVAL); /* no such column */
    cfg.band_col[0] = 0;
    cfg.band_lo = 5, cfg.band_hi = 4;
    CHECK_ST(slash_join_open(&cfg, &s), SLASH_EINVAL); /* lo above hi */
    cfg.band_hi = 5;
    CHECK_OK(slash_join_open(&cfg, &s));
    slash_join_close(s);
}

int main(void)
{
    RUN(band_pairs_equal_brute_force);
    RUN(band_pairs_whatever_order_the_right_rows_arrive_in);
    RUN(band_of_one_value);
    RUN(band_wider_than_the_bucket_keeps_every_candidate);
    RUN(band_pairs_after_a_merged_delta);
    RUN(band_at_the_ends_of_int64_does_not_overflow);
    RUN(band_the_store_cannot_honour_is_refused);
    return UNIT_DONE();
}
