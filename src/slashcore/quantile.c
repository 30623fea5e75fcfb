/* quantile.c - the log-linear bucket sketch behind percentile_approx
 * (quantile.h). Invariant: keys ascending and distinct in [0, n), unused
 * slots zero, so two sketches of one multiset are equal byte for byte. */
#include "slash/quantile.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "slash/crdt.h"
#include "slash/lower_bound.h"
#include "slash/sort.h"

#define SHIFT (52 - SLASH_QS_SUB_BITS)

/* The order-preserving unsigned image of a canonical double. */
static inline uint64_t ordered(double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    return u >> 63 ? ~u : u | (UINT64_C(1) << 63);
}

static inline double unordered(uint64_t u)
{
    u = u >> 63 ? u & ~(UINT64_C(1) << 63) : ~u;
    double v;
    memcpy(&v, &u, 8);
    return v;
}

static inline double canonical(double v)
{
    if (isnan(v))
        return NAN;
    return v == 0.0 ? 0.0 : v;
}

static inline int32_t fine_key(double v) { return (int32_t)(ordered(canonical(v)) >> SHIFT); }

void slash_qs_zero(slash_qsketch *s)
{
    memset(s, 0, sizeof *s);
    s->min = NAN;       /* the top of min's order */
    s->max = -INFINITY; /* the bottom of max's order */
}

/* Raises the level by one: keys halve, equal neighbours fuse. */
static void collapse(slash_qsketch *s)
{
    uint32_t w = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        int32_t k = s->key[i] >> 1;
        if (w && s->key[w - 1] == k) {
            uint64_t c = (uint64_t)s->cnt[w - 1] + s->cnt[i];
            s->cnt[w - 1] = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
        } else {
            s->key[w] = k, s->cnt[w] = s->cnt[i], w++;
        }
    }
    for (uint32_t i = w; i < s->n; i++)
        s->key[i] = 0, s->cnt[i] = 0;
    s->n = w;
    s->level++;
}

SLASH_DEFINE_LOWER_BOUND(first_at_least, int32_t)

/* Adds c values in fine bucket k0 (at level 0). */
static void add_fine(slash_qsketch *s, int32_t k0, uint32_t c)
{
    for (;;) {
        int32_t k = k0 >> s->level;
        uint32_t i = first_at_least(s->key, s->n, k);
        if (i < s->n && s->key[i] == k) {
            uint64_t sum = (uint64_t)s->cnt[i] + c;
            s->cnt[i] = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
            return;
        }
        if (s->n < SLASH_QS_BUCKETS) {
            memmove(&s->key[i + 1], &s->key[i], (s->n - i) * sizeof s->key[0]);
            memmove(&s->cnt[i + 1], &s->cnt[i], (s->n - i) * sizeof s->cnt[0]);
            s->key[i] = k, s->cnt[i] = c, s->n++;
            return;
        }
        collapse(s); /* no room: a coarser level, then again */
    }
}

static void add_extremes(slash_qsketch *s, double mn, double mx, uint64_t count)
{
    slash_crdt_update(SLASH_AGG_MIN_F64, &s->min, &mn);
    slash_crdt_update(SLASH_AGG_MAX_F64, &s->max, &mx);
    uint64_t c = s->count + count;
    s->count = c < s->count ? UINT64_MAX : c;
}

void slash_qs_add(slash_qsketch *s, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    if (bits == SLASH_QS_NULL_BITS)
        return;
    add_fine(s, fine_key(v), 1);
    v = canonical(v);
    add_extremes(s, v, v, 1);
}

/* Appends c values in bucket k to the ascending run (key, cnt, *n). */
static inline void push(int32_t *key, uint32_t *cnt, uint32_t *n, int32_t k, uint32_t c)
{
    if (*n && key[*n - 1] == k) {
        uint64_t sum = (uint64_t)cnt[*n - 1] + c;
        cnt[*n - 1] = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
    } else {
        key[*n] = k, cnt[*n] = c, ++*n;
    }
}

/* Merges the ascending bucket run (skey, scnt)[0..sn) of level slevel into
 * dst's buckets (its count and extremes aside): a linear merge at the
 * larger level, then collapses while too many; one pass over at most
 * 2 x SLASH_QS_BUCKETS. */
static void merge_buckets(slash_qsketch *dst, const int32_t *skey, const uint32_t *scnt, uint32_t sn,
                          uint32_t slevel)
{
    int32_t key[2 * SLASH_QS_BUCKETS];
    uint32_t cnt[2 * SLASH_QS_BUCKETS];
    const uint32_t level = dst->level > slevel ? dst->level : slevel;
    const uint32_t sd = level - dst->level, ss = level - slevel;
    uint32_t n = 0, i = 0, j = 0;
    while (i < dst->n || j < sn) {
        int32_t a = i < dst->n ? dst->key[i] >> sd : INT32_MAX;
        int32_t b = j < sn ? skey[j] >> ss : INT32_MAX;
        if (i < dst->n && (j >= sn || a <= b))
            push(key, cnt, &n, a, dst->cnt[i++]);
        else
            push(key, cnt, &n, b, scnt[j++]);
    }
    uint32_t lvl = level;
    while (n > SLASH_QS_BUCKETS) { /* collapse the run in place */
        uint32_t w = 0;
        for (uint32_t r = 0; r < n; r++)
            push(key, cnt, &w, key[r] >> 1, cnt[r]);
        n = w;
        lvl++;
    }
    memcpy(dst->key, key, n * sizeof key[0]);
    memcpy(dst->cnt, cnt, n * sizeof cnt[0]);
    for (uint32_t r = n; r < dst->n; r++) /* fewer than before (collapsed): unused slots zero */
        dst->key[r] = 0, dst->cnt[r] = 0;
    dst->n = n;
    dst->level = lvl;
}

void slash_qs_merge(slash_qsketch *dst, const slash_qsketch *src)
{
    if (!src->n)
        return;
    merge_buckets(dst, src->key, src->cnt, src->n, src->level);
    add_extremes(dst, src->min, src->max, src->count);
}

/* Adds the ascending run of fine buckets (key, cnt)[0..m) to s when every
 * one of them (at s's level) is a bucket s holds already, as once a sketch
 * has seen most of its values: counts added in place, nothing moved.
 * Whether it did (else s is unchanged). */
static bool add_present(slash_qsketch *s, const int32_t *key, const uint32_t *cnt, uint32_t m)
{
    uint32_t at[SLASH_QS_BATCH];
    for (uint32_t j = 0, i = 0; j < m; j++) {
        const int32_t k = key[j] >> s->level;
        while (i < s->n && s->key[i] < k)
            i++;
        if (i == s->n || s->key[i] != k)
            return false;
        at[j] = i;
    }
    for (uint32_t j = 0; j < m; j++) {
        const uint64_t sum = (uint64_t)s->cnt[at[j]] + cnt[j];
        s->cnt[at[j]] = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
    }
    return true;
}

void slash_qs_add_many(slash_qsketch *s, const double *v, uint32_t m)
{
    while (m) {
        const uint32_t c = m < SLASH_QS_BATCH ? m : SLASH_QS_BATCH;
        if (c < SLASH_SORTED_ADD_MIN || (uint64_t)c * 8 < s->n) { /* a few, or a few into many: a search each */
            for (uint32_t r = 0; r < c; r++)
                slash_qs_add(s, v[r]);
        } else {
            uint64_t fine[SLASH_QS_BATCH], tmp[SLASH_QS_BATCH];
            /* the extremes by the order-preserving image, whose order is
             * min/max's over canonical doubles (NaN on top) */
            uint64_t lo = UINT64_MAX, hi = 0;
            uint32_t k = 0;
            for (uint32_t r = 0; r < c; r++) {
                uint64_t bits;
                memcpy(&bits, &v[r], 8);
                if (bits == SLASH_QS_NULL_BITS)
                    continue;
                const uint64_t u = ordered(canonical(v[r]));
                fine[k++] = u >> SHIFT; /* fine_key's */
                lo = u < lo ? u : lo;
                hi = u > hi ? u : hi;
            }
            const double mn = unordered(lo), mx = unordered(hi);
            if (k) {
                slash_sort_u64(fine, k, tmp);
                int32_t key[SLASH_QS_BATCH];
                uint32_t cnt[SLASH_QS_BATCH], runs = 0;
                for (uint32_t r = 0; r < k; r++)
                    push(key, cnt, &runs, (int32_t)fine[r], 1);
                if (!add_present(s, key, cnt, runs))
                    merge_buckets(s, key, cnt, runs, 0);
                add_extremes(s, mn, mx, k);
            }
        }
        v += c, m -= c;
    }
}

double slash_qs_quantile(const slash_qsketch *s, uint32_t q_scaled)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < s->n; i++)
        total += s->cnt[i];
    if (!total)
        return NAN;
    if (q_scaled > SLASH_QS_Q_SCALE)
        q_scaled = SLASH_QS_Q_SCALE;
    /* rank = max(1, ceil(q total)), in integers: q has 4 decimals */
    uint64_t rank = ((uint64_t)q_scaled * total + SLASH_QS_Q_SCALE - 1) / SLASH_QS_Q_SCALE;
    if (rank <= 1) /* the smallest value, kept exactly */
        return s->min;
    if (rank == total)
        return s->max;
    uint64_t seen = 0;
    uint32_t i = 0;
    while (seen + s->cnt[i] < rank)
        seen += s->cnt[i++];
    const unsigned sh = SHIFT + s->level;
    uint64_t lo_u = (uint64_t)(uint32_t)s->key[i] << sh;
    uint64_t hi_u = lo_u | ((UINT64_C(1) << sh) - 1);
    double lo = unordered(lo_u), hi = unordered(hi_u), mid;
    if (isnan(lo) || isnan(hi) || isinf(lo) || isinf(hi))
        mid = isnan(lo) || isinf(lo) ? hi : lo;
    else if (lo == 0.0) /* the bucket of zero (and of the tiniest denormals): zero, exactly */
        mid = 0.0;
    else
        mid = lo + (hi - lo) / 2;
    /* within the exact extremes (Spark's order: NaN above every number) */
    if (slash_f64_below(mid, s->min))
        mid = s->min;
    if (slash_f64_below(s->max, mid))
        mid = s->max;
    return mid;
}
