/* crdt.h - the partial states (CRDTs) one record of the state backend holds,
 * one per output column.
 *
 * Every kind has a zero value, an update with one input value, and a merge of
 * two partials. Merges are commutative and associative (exactly for the
 * integer kinds; for float sums up to rounding), and the zero value is the
 * identity of merge, so a partial may restart from zero after it was shipped.
 * Integer sums wrap modulo 2^64 instead of overflowing (no undefined
 * behaviour). min/max of float64 treat NaN as missing. The byte layout of a
 * partial is part of the record format shipped to peers, hence the asserts.
 */
#ifndef SLASH_CRDT_H
#define SLASH_CRDT_H

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "slash/distinct.h"
#include "slash/hll.h"
#include "slash/quantile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum slash_agg_kind {
    SLASH_AGG_COUNT = 1,   /* int64 count of records */
    SLASH_AGG_SUM_I64 = 2, /* int64 sum of an int64 column */
    SLASH_AGG_SUM_F64 = 3, /* float64 sum of a float64 column */
    SLASH_AGG_MIN_I64 = 4,
    SLASH_AGG_MIN_F64 = 5,
    SLASH_AGG_MAX_I64 = 6,
    SLASH_AGG_MAX_F64 = 7,
    SLASH_AGG_AVG_I64 = 8, /* int64 sum + count; result sum / count as float64 */
    SLASH_AGG_AVG_F64 = 9, /* float64 sum + count */
    /* the value at the earliest (first) or latest (last) event time; among
     * records of one time, first keeps the smallest value and last the
     * largest (min/max's order for doubles), so the pair (time, value) is a
     * lexicographic min or max: a merge that is also idempotent */
    SLASH_AGG_FIRST_I64 = 10,
    SLASH_AGG_FIRST_F64 = 11,
    SLASH_AGG_LAST_I64 = 12,
    SLASH_AGG_LAST_F64 = 13,
    /* count_distinct: an exact set of at most SLASH_DISTINCT_MAX value
     * hashes (distinct.h); input a column of hashes (0 = null), result the
     * count, or -1 past the bound */
    SLASH_AGG_COUNT_DISTINCT = 14,
    /* approx_count_distinct: a HyperLogLog sketch (hll.h) of precision p is
     * kind SLASH_AGG_HLL + p, p in SLASH_HLL_P_MIN..SLASH_HLL_P_MAX; its
     * input is a column of hashes (slash_hll_hash_*, 0 = null), its result
     * the rounded estimate */
    SLASH_AGG_HLL = 0x100,
    /* percentile_approx: a quantile sketch (quantile.h) answering quantile
     * q = j / SLASH_QS_Q_SCALE is kind SLASH_AGG_QUANTILE + j, j in
     * 0..SLASH_QS_Q_SCALE; its input is a float64 column, its result the
     * float64 quantile */
    SLASH_AGG_QUANTILE = 0x1000
} slash_agg_kind;

#define SLASH_AGG_KIND_MAX 14

/* Whether k is a quantile kind; *q gets its quantile in 1/SLASH_QS_Q_SCALE. */
static inline int slash_agg_quantile(slash_agg_kind k, uint32_t *q)
{
    if ((unsigned)k < SLASH_AGG_QUANTILE || (unsigned)k > SLASH_AGG_QUANTILE + SLASH_QS_Q_SCALE)
        return 0;
    *q = (unsigned)k - SLASH_AGG_QUANTILE;
    return 1;
}

/* The precision of an HLL kind, 0 for any other kind. */
static inline unsigned slash_agg_hll_p(slash_agg_kind k)
{
    unsigned p = (unsigned)k - SLASH_AGG_HLL;
    return (unsigned)k > SLASH_AGG_HLL && p >= SLASH_HLL_P_MIN && p <= SLASH_HLL_P_MAX ? p : 0;
}

typedef struct slash_avg_i64 {
    int64_t sum;
    int64_t count;
} slash_avg_i64;
static_assert(sizeof(slash_avg_i64) == 16, "avg partial is shipped to peers");

typedef struct slash_avg_f64 {
    double sum;
    int64_t count;
} slash_avg_f64;
static_assert(sizeof(slash_avg_f64) == 16, "avg partial is shipped to peers");

/* first/last: the event time of the value kept, and the value (int64 or
 * double bits). Zero: time INT64_MAX (first) or INT64_MIN (last) with the
 * value at the top (first) or bottom (last) of the order. */
typedef struct slash_at_value {
    int64_t time;
    union {
        int64_t i;
        double f;
    } v;
} slash_at_value;
static_assert(sizeof(slash_at_value) == 16, "first/last partial is shipped to peers");

/* Bytes of the partial state of a kind (8 or 16; 2^p for an HLL of
 * precision p), 0 for an unknown kind. */
size_t slash_crdt_size(slash_agg_kind k);

/* True when the kind reads a float64 input column (false: int64, hashes or none). */
int slash_crdt_input_is_f64(slash_agg_kind k);

/* True when the kind needs an input column (every kind but count). */
int slash_crdt_needs_input(slash_agg_kind k);

/* True when the emitted result column is float64 (else int64). */
int slash_crdt_result_is_f64(slash_agg_kind k);

/* Writes the zero value of kind k at p (slash_crdt_size(k) bytes). */
void slash_crdt_zero(slash_agg_kind k, void *p);

/* Merges partial src into dst (both of kind k). */
void slash_crdt_merge(slash_agg_kind k, void *dst, const void *src);

/* Writes the final value of partial p into *out (int64 or double, per
 * slash_crdt_result_is_f64). */
void slash_crdt_result(slash_agg_kind k, const void *p, void *out);

static inline int64_t slash_wrap_add(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

/* min/max of doubles order values as Spark does: NaN (any payload, kept as
 * one quiet NaN) above every number, and -0.0 below 0.0 (Spark's ordering
 * holds the two equal; a total order makes the merge commutative, not only
 * equal up to sign). The min's zero is that NaN (the order's top), the max's
 * -inf (its bottom): merge(zero, x) == x. A min is NaN only when every value
 * is NaN; any NaN makes the max NaN. */
static inline int slash_f64_below(double a, double b)
{
    if (isnan(b)) return !isnan(a);
    if (isnan(a)) return 0;
    if (a == b) return signbit(a) && !signbit(b); /* -0.0 < 0.0 */
    return a < b;
}

static inline double slash_f64_canonical(double v) { return isnan(v) ? (double)NAN : v; }

/* True for the kinds whose update reads the record's event time (first, last). */
static inline int slash_crdt_needs_time(slash_agg_kind k)
{
    return k >= SLASH_AGG_FIRST_I64 && k <= SLASH_AGG_LAST_F64;
}

/* Whether (t, v) comes before partial a in first's order (earlier time, then
 * smaller value); last's order is the reverse. For int64 values without
 * branches: in time order nearly every record of a key is later than its
 * partial, but records of one time (a tie, then the value decides) come
 * often enough that a branch on the time mispredicted. */
static inline int slash_at_before(int f64, int64_t t, const void *v, const slash_at_value *a)
{
    if (f64) {
        if (t != a->time)
            return t < a->time;
        return slash_f64_below(*(const double *)v, a->v.f);
    }
    return (t < a->time) | ((t == a->time) & (*(const int64_t *)v < a->v.i));
}

static inline int slash_at_after(int f64, int64_t t, const void *v, const slash_at_value *a)
{
    if (f64) {
        if (t != a->time)
            return t > a->time;
        return slash_f64_below(a->v.f, *(const double *)v);
    }
    return (t > a->time) | ((t == a->time) & (*(const int64_t *)v > a->v.i));
}

static inline void slash_at_set(int f64, slash_at_value *a, int64_t t, const void *v)
{
    a->time = t;
    if (f64)
        a->v.f = slash_f64_canonical(*(const double *)v);
    else
        a->v.i = *(const int64_t *)v;
}

/* Updates a first/last partial p with value v at event time t (int64
 * values: by conditional moves, see slash_at_before). */
static inline void slash_crdt_update_at(slash_agg_kind k, void *p, const void *v, int64_t t)
{
    slash_at_value *a = p;
    int f64 = k == SLASH_AGG_FIRST_F64 || k == SLASH_AGG_LAST_F64;
    int first = k == SLASH_AGG_FIRST_I64 || k == SLASH_AGG_FIRST_F64;
    int take = first ? slash_at_before(f64, t, v, a) : slash_at_after(f64, t, v, a);
    if (f64) {
        if (take)
            slash_at_set(f64, a, t, v);
        return;
    }
    const int64_t vi = *(const int64_t *)v;
    a->time = take ? t : a->time;
    a->v.i = take ? vi : a->v.i;
}

/* Updates partial p of kind k with input value v (v points at an int64 or a
 * double as the kind reads; ignored by count). Inline: this is the hot loop.
 * The kinds that read the event time (slash_crdt_needs_time) are updated
 * with slash_crdt_update_at instead; here they take no change. */
static inline void slash_crdt_update(slash_agg_kind k, void *p, const void *v)
{
    if ((unsigned)k > SLASH_AGG_HLL) {
        unsigned prec = slash_agg_hll_p(k);
        uint32_t q;
        if (prec)
            slash_hll_add(p, prec, *(const uint64_t *)v);
        else if (slash_agg_quantile(k, &q))
            slash_qs_add(p, *(const double *)v);
        return;
    }
    switch (k) {
    case SLASH_AGG_HLL:
    case SLASH_AGG_QUANTILE: break;
    case SLASH_AGG_FIRST_I64:
    case SLASH_AGG_FIRST_F64:
    case SLASH_AGG_LAST_I64:
    case SLASH_AGG_LAST_F64: break;
    case SLASH_AGG_COUNT_DISTINCT: slash_distinct_add(p, *(const uint64_t *)v); break;
    case SLASH_AGG_COUNT: *(int64_t *)p = slash_wrap_add(*(int64_t *)p, 1); break;
    case SLASH_AGG_SUM_I64: *(int64_t *)p = slash_wrap_add(*(int64_t *)p, *(const int64_t *)v); break;
    case SLASH_AGG_SUM_F64: *(double *)p += *(const double *)v; break;
    case SLASH_AGG_MIN_I64:
        if (*(const int64_t *)v < *(int64_t *)p) *(int64_t *)p = *(const int64_t *)v;
        break;
    case SLASH_AGG_MAX_I64:
        if (*(const int64_t *)v > *(int64_t *)p) *(int64_t *)p = *(const int64_t *)v;
        break;
    case SLASH_AGG_MIN_F64:
        if (slash_f64_below(*(const double *)v, *(double *)p)) *(double *)p = *(const double *)v;
        break;
    case SLASH_AGG_MAX_F64:
        if (slash_f64_below(*(double *)p, *(const double *)v))
            *(double *)p = slash_f64_canonical(*(const double *)v);
        break;
    case SLASH_AGG_AVG_I64: {
        slash_avg_i64 *a = p;
        a->sum = slash_wrap_add(a->sum, *(const int64_t *)v);
        a->count = slash_wrap_add(a->count, 1);
        break;
    }
    case SLASH_AGG_AVG_F64: {
        slash_avg_f64 *a = p;
        a->sum += *(const double *)v;
        a->count = slash_wrap_add(a->count, 1);
        break;
    }
    }
}

#ifdef __cplusplus
}
#endif
#endif
