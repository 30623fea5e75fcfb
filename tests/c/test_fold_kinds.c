/* test_fold_kinds.c - every aggregate kind folds exactly as one update per
 * row would, on each path of the batch update: the run path (int64 keys,
 * no selection), the general loop (a selection, byte-string keys), and the
 * hand-over from one to the other when a partition outgrows the cache; and
 * so do the sets of aggregates each pending-delta shape of the fold is
 * compiled for, with and without the batch's hint that a column is all
 * ones (a validity without nulls: an int64 sum then shares a count's
 * pending delta, first/last take a constant).
 *
 * The reference is independent of the store: a dense table of partials per
 * (slice, key) updated row by row, in batch order, with slash_crdt_update /
 * slash_crdt_update_at, whose results are compared bit for bit with the
 * store's emitted columns (float sums included: both add in row order).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slash/crdt.h"
#include "slash/hll.h"
#include "slash/ssb.h"
#include "unit.h"

#define W 100 /* tumbling window, ms */
#define NWIN 8

#define MAXK 16

/* A set of aggregates; ones: bit j, aggregate j reads a column of ones
 * (else its kind's column), hinted as such to the fold when hint is set;
 * raw: bit j, sketch j reads the int64 (or where raw_f64 has bit j, the
 * double) values themselves, which the fold hashes (slash_ssb_batch.hash_raw);
 * specials: the double column holds NaNs (either sign, payloads), -0.0,
 * 0.0 and infinities (see make); SPECIALS_NO_NAN: the same but NaNs (so a
 * batch takes the fold's loops for doubles without a NaN), SPECIALS_NAN_LATE:
 * NaNs only in the second half of the rows (batches of both kinds meet on
 * the same records). */
enum { SPECIALS_NAN = 1, SPECIALS_NO_NAN = 2, SPECIALS_NAN_LATE = 3 };
typedef struct kindset {
    int n;
    slash_agg_kind k[MAXK];
    uint32_t ones;
    int hint;
    uint32_t raw, raw_f64;
    int specials;
} kindset;

/* every kind, and the validity slots of a nullable column */
static const kindset EVERY = {
    14,
    {SLASH_AGG_COUNT, SLASH_AGG_SUM_F64, SLASH_AGG_MIN_I64, SLASH_AGG_MAX_F64, SLASH_AGG_AVG_I64,
     SLASH_AGG_FIRST_I64, SLASH_AGG_LAST_F64, SLASH_AGG_HLL + 8, SLASH_AGG_QUANTILE + 9000,
     SLASH_AGG_COUNT_DISTINCT, SLASH_AGG_SUM_I64, SLASH_AGG_SUM_I64, SLASH_AGG_FIRST_I64,
     SLASH_AGG_LAST_I64},
    1u << 11 | 1u << 12 | 1u << 13, 1, 0, 0, 0};

static kindset KINDSET; /* the set under test */
#define NK (KINDSET.n)
#define KINDS (KINDSET.k)

typedef struct cols {
    size_t n;
    int64_t *keys, *times, *vi, *one;
    double *vf;
    uint64_t *h;
    uint8_t *skip;
    int32_t *offs;
    char *kdata;
} cols;

/* The doubles of a set with specials: NaNs of both signs and with a
 * payload, both zeros, both infinities and the extremes of the finite ones. */
static double special(uint64_t r)
{
    static const uint64_t nans[] = {UINT64_C(0x7ff8000000000000), UINT64_C(0xfff8000000000000),
                                    UINT64_C(0x7ff0000000000001), UINT64_C(0xfff4000000000abc),
                                    UINT64_C(0x7fffffffffffffff), UINT64_C(0xffffffffffffffff)};
    double d;
    switch (r % 8) {
    case 0: memcpy(&d, &nans[(r >> 3) % 6], 8); return d;
    case 1: return -0.0;
    case 2: return 0.0;
    case 3: return INFINITY;
    case 4: return -INFINITY;
    case 5: return DBL_MAX;
    case 6: return -DBL_MAX;
    default: return DBL_MIN;
    }
}

/* n rows over nkeys keys and NWIN windows; times sorted (runs) or not.
 * Values repeat (ties for first/last, duplicates for the sets). With
 * specials (KINDSET), a quarter of the doubles are special(), and the keys
 * = 0 mod 5 hold only NaNs (a min of nothing else), those = 1 mod 5 only
 * zeros of either sign. */
static cols make(size_t n, int64_t nkeys, int sorted, uint64_t seed)
{
    cols c = {.n = n};
    c.keys = malloc(n * 8), c.times = malloc(n * 8), c.vi = malloc(n * 8), c.one = malloc(n * 8);
    c.vf = malloc(n * 8), c.h = malloc(n * 8), c.skip = calloc(n, 1);
    c.offs = malloc((n + 1) * 4), c.kdata = malloc(n * 24 + 1);
    int32_t o = 0;
    for (size_t i = 0; i < n; i++) {
        c.keys[i] = (int64_t)(unit_rng(&seed) % (uint64_t)nkeys);
        c.times[i] = sorted ? (int64_t)(i * (NWIN * W) / n) : (int64_t)(unit_rng(&seed) % (NWIN * W));
        c.vi[i] = (int64_t)(unit_rng(&seed) % 500) - 250;
        c.one[i] = 1;
        c.vf[i] = (double)c.vi[i] / 8.0 + 0.1;
        if (KINDSET.specials) {
            const uint64_t r = unit_rng(&seed);
            const int nan = KINDSET.specials == SPECIALS_NAN ||
                            (KINDSET.specials == SPECIALS_NAN_LATE && i >= n / 2);
            if (c.keys[i] % 5 == 0) /* case 0: a NaN; else one of the others */
                c.vf[i] = special(nan ? (r >> 8) / 8 * 8 : 1 + (r >> 8) % 7);
            else if (c.keys[i] % 5 == 1)
                c.vf[i] = r & 1 ? -0.0 : 0.0;
            else if (r % 4 == 0)
                c.vf[i] = special(nan || (r >> 2) % 8 ? r >> 2 : 1 + (r >> 5) % 7);
        }
        c.h[i] = slash_hll_hash_i64(c.vi[i] % 300);
        c.offs[i] = o;
        o += sprintf(c.kdata + o, "key-%lld", (long long)c.keys[i]);
    }
    c.offs[n] = o;
    return c;
}

static void cols_free(cols *c)
{
    free(c->keys), free(c->times), free(c->vi), free(c->one), free(c->vf), free(c->h), free(c->skip);
    free(c->offs), free(c->kdata);
}

static const void *input(const cols *c, int j)
{
    slash_agg_kind k = KINDS[j];
    if (k == SLASH_AGG_COUNT)
        return NULL;
    if (KINDSET.ones >> j & 1u)
        return c->one;
    if (KINDSET.raw >> j & 1u)
        return KINDSET.raw_f64 >> j & 1u ? (const void *)c->vf : (const void *)c->vi;
    if (slash_agg_hll_p(k) || k == SLASH_AGG_COUNT_DISTINCT)
        return c->h;
    return slash_crdt_input_is_f64(k) ? (const void *)c->vf : (const void *)c->vi;
}

static slash_ssb *open_kinds(slash_key_type kt)
{
    slash_ssb_config cfg = {0};
    CHECK_OK(slash_window_init(&cfg.window, SLASH_WINDOW_TUMBLING, W, 0));
    cfg.key_type = kt;
    cfg.partitions = 1;
    cfg.naggs = NK;
    for (int j = 0; j < NK; j++)
        cfg.aggs[j] = KINDS[j];
    cfg.log_reserve = (size_t)1 << 32;
    slash_ssb *s = NULL;
    CHECK_OK(slash_ssb_open(&cfg, &s));
    return s;
}

/* Feeds rows [lo, hi) of c (byte keys: "key-N"; with_skip: a selection of
 * every row, which takes the general loop; all_ones: the batch's "ones"
 * hold no zero, hinted as such where the set says so). */
static void feed(slash_ssb *s, slash_key_type kt, const cols *c, size_t lo, size_t hi, int with_skip,
                 int all_ones)
{
    slash_ssb_batch b = {0};
    b.n = hi - lo;
    b.times = c->times + lo;
    for (int j = 0; j < NK; j++) {
        const uint8_t *v = input(c, j);
        b.values[j] = v ? v + lo * 8 : NULL;
    }
    if (kt == SLASH_KEY_INT64) {
        b.keys = c->keys + lo;
    } else {
        b.key_offsets = c->offs + lo;
        b.key_data = (const uint8_t *)c->kdata;
    }
    if (with_skip)
        b.skip = c->skip + lo;
    if (KINDSET.hint && all_ones)
        b.ones = KINDSET.ones;
    b.hash_raw = KINDSET.raw, b.raw_f64 = KINDSET.raw_f64;
    CHECK_OK(slash_ssb_update(s, &b));
}

/* Checks the store's emitted rows against the row-by-row reference. */
static void check_against_reference(slash_ssb *s, slash_key_type kt, const cols *c, int64_t nkeys)
{
    size_t psize[MAXK], off[MAXK], rec = 0;
    for (int j = 0; j < NK; j++)
        off[j] = rec, psize[j] = slash_crdt_size(KINDS[j]), rec += psize[j];
    uint8_t *ref = malloc((size_t)NWIN * (size_t)nkeys * rec);
    uint8_t *seen = calloc((size_t)NWIN * (size_t)nkeys, 1);
    for (size_t g = 0; g < (size_t)NWIN * (size_t)nkeys; g++)
        for (int j = 0; j < NK; j++)
            slash_crdt_zero(KINDS[j], ref + g * rec + off[j]);
    for (size_t i = 0; i < c->n; i++) {
        size_t g = (size_t)(c->times[i] / W) * (size_t)nkeys + (size_t)c->keys[i];
        seen[g] = 1;
        for (int j = 0; j < NK; j++) {
            const uint8_t *v = input(c, j);
            const void *vi = v ? v + i * 8 : NULL;
            uint64_t h;
            if (KINDSET.raw >> j & 1u) { /* the reference hashes them itself */
                h = KINDSET.raw_f64 >> j & 1u ? slash_hll_hash_f64(c->vf[i]) : slash_hll_hash_i64(c->vi[i]);
                vi = &h;
            }
            if (slash_crdt_needs_time(KINDS[j]))
                slash_crdt_update_at(KINDS[j], ref + g * rec + off[j], vi, c->times[i]);
            else
                slash_crdt_update(KINDS[j], ref + g * rec + off[j], vi);
        }
    }
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(s, INT64_MAX, &r));
    size_t groups = 0;
    for (size_t g = 0; g < (size_t)NWIN * (size_t)nkeys; g++)
        groups += seen[g];
    CHECK(r && r->rows == groups);
    size_t bad = 0;
    for (size_t i = 0; r && i < r->rows; i++) {
        int64_t key;
        if (kt == SLASH_KEY_INT64) {
            key = r->keys[i];
        } else {
            char k[80] = {0};
            memcpy(k, r->key_data + r->key_offsets[i], (size_t)(r->key_offsets[i + 1] - r->key_offsets[i]));
            key = atoll(k + 4);
        }
        size_t g = (size_t)(r->window_start[i] / W) * (size_t)nkeys + (size_t)key;
        for (int j = 0; j < NK; j++) {
            uint64_t want;
            slash_crdt_result(KINDS[j], ref + g * rec + off[j], &want);
            if (memcmp(&want, (const uint8_t *)r->columns[j] + i * 8, 8) != 0 && bad++ < 5)
                fprintf(stderr, "  window %lld key %lld aggregate %d differs\n",
                        (long long)r->window_start[i], (long long)key, j);
        }
    }
    CHECK(bad == 0);
    slash_ssb_result_free(r);
    free(ref), free(seen);
}

static void check_path(slash_key_type kt, int with_skip, size_t n, int64_t nkeys, int sorted,
                       size_t batch)
{
    cols c = make(n, nkeys, sorted, 0x5eed + n + (uint64_t)nkeys);
    /* the "ones" (a validity) of every other batch hold zeros (nulls), so
     * what a hinted batch leaves behind, times included, meets them */
    uint64_t seed = 99;
    for (size_t i = 0; i < n; i++)
        c.one[i] = (i / batch) % 2 && unit_rng(&seed) % 3 == 0 ? 0 : 1;
    slash_ssb *s = open_kinds(kt);
    for (size_t lo = 0; s && lo < n; lo += batch)
        feed(s, kt, &c, lo, lo + batch < n ? lo + batch : n, with_skip, (lo / batch) % 2 == 0);
    if (s)
        check_against_reference(s, kt, &c, nkeys);
    slash_ssb_close(s);
    cols_free(&c);
}

static void check_set(const kindset *ks, slash_key_type kt, int with_skip, size_t n, int64_t nkeys,
                      int sorted, size_t batch)
{
    KINDSET = *ks;
    check_path(kt, with_skip, n, nkeys, sorted, batch);
}

TEST(every_kind_on_the_run_path_sorted_times) { check_set(&EVERY, SLASH_KEY_INT64, 0, 60000, 37, 1, 7000); }
TEST(every_kind_on_the_run_path_shuffled_times) { check_set(&EVERY, SLASH_KEY_INT64, 0, 60000, 37, 0, 7000); }
TEST(every_kind_on_the_general_loop_with_a_selection) { check_set(&EVERY, SLASH_KEY_INT64, 1, 60000, 37, 0, 7000); }
TEST(every_kind_with_byte_string_keys) { check_set(&EVERY, SLASH_KEY_BYTES, 0, 60000, 37, 1, 7000); }
/* 8 windows x 200 keys of ~17 KiB records: the partition outgrows the
 * cache inside a batch, and the general loop takes over with prefetching */
TEST(every_kind_across_the_hand_over_to_the_prefetching_loop) { check_set(&EVERY, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); }

/* Each pending-delta shape (a count alone; a count and one int64 sum; any
 * other), each reached with and without hinted ones, on the run path, the
 * general loop and byte-string keys. */
static void check_shapes(const kindset *ks)
{
    kindset k = *ks;
    for (k.hint = 0; k.hint <= 1; k.hint++) {
        check_set(&k, SLASH_KEY_INT64, 0, 30000, 37, 1, 7000);
        check_set(&k, SLASH_KEY_INT64, 0, 30000, 37, 0, 7000);
        check_set(&k, SLASH_KEY_INT64, 1, 30000, 37, 0, 7000);
        check_set(&k, SLASH_KEY_BYTES, 0, 30000, 37, 1, 7000);
    }
}

/* sum:x over a nullable column: count, the sum, the validity */
TEST(a_count_and_an_int_sum_with_a_validity_of_ones)
{
    kindset k = {3, {SLASH_AGG_COUNT, SLASH_AGG_SUM_I64, SLASH_AGG_SUM_I64}, 1u << 2, 0, 0, 0, 0};
    check_shapes(&k);
}
/* the validity slot before the count, and no count at all */
TEST(a_validity_of_ones_before_the_count_and_without_one)
{
    kindset k = {3, {SLASH_AGG_SUM_I64, SLASH_AGG_SUM_I64, SLASH_AGG_COUNT}, 1u << 0, 0, 0, 0, 0};
    check_shapes(&k);
    kindset alone = {2, {SLASH_AGG_SUM_I64, SLASH_AGG_SUM_I64}, 1u << 1, 0, 0, 0, 0};
    check_shapes(&alone);
}
/* min:x or max:x over a nullable column: a count, its validity, the
 * extreme pending per cache slot */
TEST(a_count_a_validity_of_ones_and_a_pending_min_or_max)
{
    kindset k = {3, {SLASH_AGG_COUNT, SLASH_AGG_MIN_I64, SLASH_AGG_SUM_I64}, 1u << 2, 0, 0, 0, 0};
    check_shapes(&k);
    kindset mx = {3, {SLASH_AGG_MAX_I64, SLASH_AGG_SUM_I64, SLASH_AGG_COUNT}, 1u << 1, 0, 0, 0, 0};
    check_shapes(&mx);
    kindset both = {4, {SLASH_AGG_MAX_I64, SLASH_AGG_MIN_I64, SLASH_AGG_SUM_I64, SLASH_AGG_SUM_F64},
                    0, 0, 0, 0, 0};
    check_shapes(&both); /* no count: the shape of any number of deltas */
}
/* min:x or max:x of doubles, pending per cache slot as the image of their
 * order (NaN above +inf, -0.0 below 0.0): alone with a count, both (the
 * shape of any number of deltas), beside an in-place aggregate and a
 * validity of ones, with NaNs, zeros and infinities; bit for bit the row by
 * row update's, NaN-only and zero-only groups included */
TEST(a_pending_double_min_or_max_over_nans_zeros_and_infinities)
{
    kindset mn = {2, {SLASH_AGG_COUNT, SLASH_AGG_MIN_F64}, 0, 0, 0, 0, 1};
    check_shapes(&mn);
    kindset mx = {2, {SLASH_AGG_MAX_F64, SLASH_AGG_COUNT}, 0, 0, 0, 0, 1};
    check_shapes(&mx);
    kindset both = {4, {SLASH_AGG_COUNT, SLASH_AGG_MIN_F64, SLASH_AGG_MAX_F64, SLASH_AGG_MIN_I64},
                    0, 0, 0, 0, 1};
    check_shapes(&both);
    kindset placed = {4, {SLASH_AGG_MAX_F64, SLASH_AGG_COUNT, SLASH_AGG_AVG_F64, SLASH_AGG_SUM_I64},
                      1u << 3, 0, 0, 0, 1};
    check_shapes(&placed);
    kindset alone = {1, {SLASH_AGG_MIN_F64}, 0, 0, 0, 0, 1};
    check_shapes(&alone);
    check_set(&mn, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); /* the hand-over too */
    check_set(&mx, SLASH_KEY_INT64, 0, 100000, 200, 0, 100000);
}
/* The same of batches without a NaN (whose doubles the fold orders without
 * testing for one), alone and followed by batches with NaNs on the same
 * records: zeros of either sign, infinities and the extreme finite ones */
TEST(a_pending_double_min_or_max_of_batches_without_a_nan)
{
    for (int sp = SPECIALS_NO_NAN; sp <= SPECIALS_NAN_LATE; sp++) {
        kindset mn = {2, {SLASH_AGG_COUNT, SLASH_AGG_MIN_F64}, 0, 0, 0, 0, sp};
        check_shapes(&mn);
        kindset mx = {2, {SLASH_AGG_MAX_F64, SLASH_AGG_COUNT}, 0, 0, 0, 0, sp};
        check_shapes(&mx);
        kindset placed = {4, {SLASH_AGG_MAX_F64, SLASH_AGG_COUNT, SLASH_AGG_AVG_F64, SLASH_AGG_SUM_I64},
                          1u << 3, 0, 0, 0, sp};
        check_shapes(&placed);
        check_set(&mx, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); /* the hand-over too */
    }
}
/* first:x and last:x of doubles and of int64s, in place: alone, with a
 * count and the validity's pending time, beside pending min/max and another
 * in-place aggregate, over NaNs, zeros and infinities tied on time, and the
 * most aggregates a store takes */
TEST(first_and_last_over_nans_zeros_and_ties)
{
    kindset f = {3, {SLASH_AGG_COUNT, SLASH_AGG_FIRST_F64, SLASH_AGG_FIRST_I64}, 1u << 2, 0, 0, 0, 1};
    check_shapes(&f);
    kindset l = {3, {SLASH_AGG_LAST_F64, SLASH_AGG_LAST_I64, SLASH_AGG_COUNT}, 1u << 1, 0, 0, 0, 1};
    check_shapes(&l);
    kindset alone = {1, {SLASH_AGG_FIRST_F64}, 0, 0, 0, 0, 1};
    check_shapes(&alone);
    kindset ints = {2, {SLASH_AGG_LAST_I64, SLASH_AGG_FIRST_I64}, 0, 0, 0, 0, 1};
    check_shapes(&ints);
    kindset mixed = {6, {SLASH_AGG_FIRST_F64, SLASH_AGG_MIN_F64, SLASH_AGG_LAST_F64, SLASH_AGG_COUNT,
                         SLASH_AGG_SUM_F64, SLASH_AGG_MAX_I64}, 0, 0, 0, 0, 1};
    check_shapes(&mixed);
    check_set(&l, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); /* the hand-over too */
    /* the most aggregates a store takes, nearly all first/last */
    kindset full = {MAXK, {SLASH_AGG_COUNT}, 0, 0, 0, 0, 1};
    for (int j = 1; j < MAXK; j++)
        full.k[j] = (slash_agg_kind)(SLASH_AGG_FIRST_I64 + j % 4);
    check_shapes(&full);
}
/* first:x and last:x over a nullable column: the validity chosen by time */
TEST(first_and_last_of_a_validity_of_ones)
{
    kindset k = {5, {SLASH_AGG_COUNT, SLASH_AGG_FIRST_I64, SLASH_AGG_FIRST_I64, SLASH_AGG_LAST_I64,
                     SLASH_AGG_LAST_I64}, 1u << 2 | 1u << 4, 0, 0, 0, 0};
    check_shapes(&k);
}
/* first:x or last:x alone over a nullable column: a count and the
 * validity's pending time, the value in place */
TEST(first_or_last_alone_with_a_validity_of_ones)
{
    kindset f = {3, {SLASH_AGG_COUNT, SLASH_AGG_FIRST_I64, SLASH_AGG_FIRST_I64}, 1u << 2, 0, 0, 0, 0};
    check_shapes(&f);
    kindset l = {3, {SLASH_AGG_LAST_F64, SLASH_AGG_LAST_I64, SLASH_AGG_COUNT}, 1u << 1, 0, 0, 0, 0};
    check_shapes(&l);
    check_set(&l, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); /* the hand-over too */
}
/* first:x or last:x with a count, pending per cache slot as the pair
 * (time, value): of doubles over NaNs, zeros and infinities tied on time,
 * of int64s, without a validity and with one, and with a validity chosen
 * the other way (first's beside last's: not a pair, in place) */
TEST(first_or_last_with_a_count_pending_as_a_pair)
{
    kindset f = {2, {SLASH_AGG_COUNT, SLASH_AGG_FIRST_F64}, 0, 0, 0, 0, 1};
    check_shapes(&f);
    kindset l = {2, {SLASH_AGG_LAST_F64, SLASH_AGG_COUNT}, 0, 0, 0, 0, 1};
    check_shapes(&l);
    kindset fi = {2, {SLASH_AGG_FIRST_I64, SLASH_AGG_COUNT}, 0, 0, 0, 0, 0};
    check_shapes(&fi);
    kindset li = {3, {SLASH_AGG_COUNT, SLASH_AGG_LAST_I64, SLASH_AGG_LAST_I64}, 1u << 1, 0, 0, 0, 0};
    check_shapes(&li);
    kindset fv = {3, {SLASH_AGG_FIRST_I64, SLASH_AGG_COUNT, SLASH_AGG_FIRST_F64}, 1u << 0, 0, 0, 0, 1};
    check_shapes(&fv);
    kindset other = {3, {SLASH_AGG_COUNT, SLASH_AGG_FIRST_F64, SLASH_AGG_LAST_I64}, 1u << 2, 0, 0, 0, 1};
    check_shapes(&other);
    check_set(&f, SLASH_KEY_INT64, 0, 100000, 200, 0, 100000); /* the hand-over too */
    check_set(&li, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000);
}
/* The pair of doubles in batches without a NaN, alone and followed by
 * batches with NaNs on the same records: zeros and infinities tied on time */
TEST(first_or_last_of_doubles_pending_as_a_pair_in_batches_without_a_nan)
{
    for (int sp = SPECIALS_NO_NAN; sp <= SPECIALS_NAN_LATE; sp++) {
        kindset f = {2, {SLASH_AGG_COUNT, SLASH_AGG_FIRST_F64}, 0, 0, 0, 0, sp};
        check_shapes(&f);
        kindset l = {2, {SLASH_AGG_LAST_F64, SLASH_AGG_COUNT}, 0, 0, 0, 0, sp};
        check_shapes(&l);
        kindset fv = {3, {SLASH_AGG_FIRST_I64, SLASH_AGG_COUNT, SLASH_AGG_FIRST_F64}, 1u << 0, 0, 0, 0, sp};
        check_shapes(&fv);
        check_set(&l, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); /* the hand-over too */
    }
}
/* two int64 sums and two validities: the shape of any number of deltas */
TEST(two_int_sums_and_two_validities_of_ones)
{
    kindset k = {5, {SLASH_AGG_SUM_I64, SLASH_AGG_SUM_I64, SLASH_AGG_COUNT, SLASH_AGG_SUM_I64,
                     SLASH_AGG_SUM_I64}, 1u << 1 | 1u << 4, 0, 0, 0, 0};
    check_shapes(&k);
}

/* approx_count_distinct and count_distinct over a column's own int64 and
 * double values, hashed in the fold */
TEST(sketches_of_raw_values_hashed_in_the_fold)
{
    kindset k = {5, {SLASH_AGG_COUNT, SLASH_AGG_HLL + 8, SLASH_AGG_HLL + 10, SLASH_AGG_COUNT_DISTINCT,
                     SLASH_AGG_COUNT_DISTINCT}, 0, 0, 0xf << 1, 1u << 2 | 1u << 4, 0};
    check_shapes(&k);
    check_set(&k, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); /* the hand-over too */
}

/* approx_count_distinct as the only in-place aggregate beside a count,
 * updated row by row on the run path: over int64 and double values hashed
 * in the fold, and over hashes */
TEST(a_count_and_one_sketch_updated_on_the_run_path)
{
    kindset ri = {2, {SLASH_AGG_COUNT, SLASH_AGG_HLL + 14}, 0, 0, 1u << 1, 0, 0};
    check_shapes(&ri);
    kindset rf = {2, {SLASH_AGG_HLL + 4, SLASH_AGG_COUNT}, 0, 0, 1u << 0, 1u << 0, 1};
    check_shapes(&rf);
    kindset hs = {2, {SLASH_AGG_COUNT, SLASH_AGG_HLL + 9}, 0, 0, 0, 0, 0};
    check_shapes(&hs);
    check_set(&ri, SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); /* the hand-over too */
}

/* count_distinct and percentile_approx buffered a cache slot and added
 * many at a time: alone beside a count (the run path's loop of one
 * buffer), two of them beside an in-place aggregate and first/last (the
 * general loop of any number), over hashes and over int64 and double
 * values hashed at the flush, doubles with NaNs, zeros and infinities; with
 * 3 keys and batches of 60,000 rows the buffers fill many times a call,
 * with 37 keys and 7,000 rows they are flushed part full (a few into a
 * large set take the search path) */
TEST(count_distinct_and_percentile_buffered_a_cache_slot)
{
    const kindset sets[] = {
        {2, {SLASH_AGG_COUNT, SLASH_AGG_COUNT_DISTINCT}, 0, 0, 1u << 1, 0, 0},
        {2, {SLASH_AGG_COUNT_DISTINCT, SLASH_AGG_COUNT}, 0, 0, 1u << 0, 1u << 0, 1},
        {2, {SLASH_AGG_COUNT, SLASH_AGG_COUNT_DISTINCT}, 0, 0, 0, 0, 0},
        {2, {SLASH_AGG_COUNT, SLASH_AGG_QUANTILE + 9900}, 0, 0, 0, 0, 1},
        {1, {SLASH_AGG_QUANTILE + 5000}, 0, 0, 0, 0, 1},
        {5, {SLASH_AGG_QUANTILE + 100, SLASH_AGG_COUNT, SLASH_AGG_COUNT_DISTINCT, SLASH_AGG_FIRST_F64,
             SLASH_AGG_AVG_I64}, 0, 0, 1u << 2, 0, 1},
        {4, {SLASH_AGG_COUNT, SLASH_AGG_LAST_I64, SLASH_AGG_COUNT_DISTINCT, SLASH_AGG_MIN_F64},
         0, 0, 0, 0, 1},
    };
    for (size_t q = 0; q < sizeof sets / sizeof sets[0]; q++) {
        check_shapes(&sets[q]);
        check_set(&sets[q], SLASH_KEY_INT64, 0, 60000, 3, 1, 60000);
        check_set(&sets[q], SLASH_KEY_INT64, 0, 60000, 3, 0, 60000);
        check_set(&sets[q], SLASH_KEY_INT64, 1, 60000, 3, 1, 60000);
        check_set(&sets[q], SLASH_KEY_BYTES, 0, 60000, 3, 0, 60000);
        check_set(&sets[q], SLASH_KEY_INT64, 0, 100000, 200, 1, 100000); /* the hand-over too */
    }
}

int main(void)
{
    RUN(count_distinct_and_percentile_buffered_a_cache_slot);
    RUN(every_kind_on_the_run_path_sorted_times);
    RUN(every_kind_on_the_run_path_shuffled_times);
    RUN(every_kind_on_the_general_loop_with_a_selection);
    RUN(every_kind_with_byte_string_keys);
    RUN(every_kind_across_the_hand_over_to_the_prefetching_loop);
    RUN(a_count_and_an_int_sum_with_a_validity_of_ones);
    RUN(a_validity_of_ones_before_the_count_and_without_one);
    RUN(a_count_a_validity_of_ones_and_a_pending_min_or_max);
    RUN(a_pending_double_min_or_max_over_nans_zeros_and_infinities);
    RUN(a_pending_double_min_or_max_of_batches_without_a_nan);
    RUN(first_and_last_over_nans_zeros_and_ties);
    RUN(first_and_last_of_a_validity_of_ones);
    RUN(first_or_last_alone_with_a_validity_of_ones);
    RUN(first_or_last_with_a_count_pending_as_a_pair);
    RUN(first_or_last_of_doubles_pending_as_a_pair_in_batches_without_a_nan);
    RUN(two_int_sums_and_two_validities_of_ones);
    RUN(sketches_of_raw_values_hashed_in_the_fold);
    RUN(a_count_and_one_sketch_updated_on_the_run_path);
    return UNIT_DONE();
}
