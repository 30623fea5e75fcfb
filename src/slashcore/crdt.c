/* crdt.c - zero values, merges and results of the partial states (crdt.h).
 * Invariant: merge(zero, x) == x for every kind, so freed or reset records
 * are indistinguishable from absent ones. */
#include "slash/crdt.h"

#include <math.h>
#include <string.h>

size_t slash_crdt_size(slash_agg_kind k)
{
    unsigned p = slash_agg_hll_p(k);
    uint32_t q;
    if (p)
        return (size_t)1 << p;
    if (slash_agg_quantile(k, &q))
        return sizeof(slash_qsketch);
    switch (k) {
    case SLASH_AGG_HLL:
    case SLASH_AGG_QUANTILE: return 0;
    case SLASH_AGG_COUNT:
    case SLASH_AGG_SUM_I64:
    case SLASH_AGG_SUM_F64:
    case SLASH_AGG_MIN_I64:
    case SLASH_AGG_MIN_F64:
    case SLASH_AGG_MAX_I64:
    case SLASH_AGG_MAX_F64: return 8;
    case SLASH_AGG_AVG_I64:
    case SLASH_AGG_AVG_F64:
    case SLASH_AGG_FIRST_I64:
    case SLASH_AGG_FIRST_F64:
    case SLASH_AGG_LAST_I64:
    case SLASH_AGG_LAST_F64: return 16;
    case SLASH_AGG_COUNT_DISTINCT: return sizeof(slash_distinct);
    }
    return 0;
}

int slash_crdt_input_is_f64(slash_agg_kind k)
{
    uint32_t q;
    return slash_agg_quantile(k, &q) || k == SLASH_AGG_SUM_F64 || k == SLASH_AGG_MIN_F64 || k == SLASH_AGG_MAX_F64 ||
           k == SLASH_AGG_AVG_F64 || k == SLASH_AGG_FIRST_F64 || k == SLASH_AGG_LAST_F64;
}

int slash_crdt_needs_input(slash_agg_kind k) { return k != SLASH_AGG_COUNT; }

int slash_crdt_result_is_f64(slash_agg_kind k)
{
    return slash_crdt_input_is_f64(k) || k == SLASH_AGG_AVG_I64;
}

void slash_crdt_zero(slash_agg_kind k, void *p)
{
    uint32_t q;
    if (slash_agg_quantile(k, &q)) {
        slash_qs_zero(p);
        return;
    }
    switch (k) {
    case SLASH_AGG_MIN_I64: *(int64_t *)p = INT64_MAX; break;
    case SLASH_AGG_MAX_I64: *(int64_t *)p = INT64_MIN; break;
    case SLASH_AGG_MIN_F64: *(double *)p = NAN; break; /* the top of min's order (crdt.h) */
    case SLASH_AGG_MAX_F64: *(double *)p = -INFINITY; break;
    case SLASH_AGG_FIRST_I64: *(slash_at_value *)p = (slash_at_value){INT64_MAX, {.i = INT64_MAX}}; break;
    case SLASH_AGG_FIRST_F64: *(slash_at_value *)p = (slash_at_value){INT64_MAX, {.f = NAN}}; break;
    case SLASH_AGG_LAST_I64: *(slash_at_value *)p = (slash_at_value){INT64_MIN, {.i = INT64_MIN}}; break;
    case SLASH_AGG_LAST_F64: *(slash_at_value *)p = (slash_at_value){INT64_MIN, {.f = -INFINITY}}; break;
    default: memset(p, 0, slash_crdt_size(k)); break;
    }
}

void slash_crdt_merge(slash_agg_kind k, void *dst, const void *src)
{
    unsigned p = slash_agg_hll_p(k);
    uint32_t q;
    if (p) {
        slash_hll_merge(dst, src, p);
        return;
    }
    if (slash_agg_quantile(k, &q)) {
        slash_qs_merge(dst, src);
        return;
    }
    switch (k) {
    case SLASH_AGG_HLL:
    case SLASH_AGG_QUANTILE: break;
    case SLASH_AGG_COUNT:
    case SLASH_AGG_SUM_I64:
        *(int64_t *)dst = slash_wrap_add(*(int64_t *)dst, *(const int64_t *)src);
        break;
    case SLASH_AGG_SUM_F64: *(double *)dst += *(const double *)src; break;
    case SLASH_AGG_MIN_I64:
    case SLASH_AGG_MAX_I64:
    case SLASH_AGG_MIN_F64:
    case SLASH_AGG_MAX_F64:
        /* merging with a partial is updating with its value */
        slash_crdt_update(k, dst, src);
        break;
    case SLASH_AGG_FIRST_I64:
    case SLASH_AGG_FIRST_F64:
    case SLASH_AGG_LAST_I64:
    case SLASH_AGG_LAST_F64: {
        /* merging with a partial is updating with its (time, value) */
        const slash_at_value *s = src;
        slash_crdt_update_at(k, dst, &s->v, s->time);
        break;
    }
    case SLASH_AGG_COUNT_DISTINCT: slash_distinct_merge(dst, src); break;
    case SLASH_AGG_AVG_I64: {
        slash_avg_i64 *d = dst;
        const slash_avg_i64 *s = src;
        d->sum = slash_wrap_add(d->sum, s->sum);
        d->count = slash_wrap_add(d->count, s->count);
        break;
    }
    case SLASH_AGG_AVG_F64: {
        slash_avg_f64 *d = dst;
        const slash_avg_f64 *s = src;
        d->sum += s->sum;
        d->count = slash_wrap_add(d->count, s->count);
        break;
    }
    }
}

void slash_crdt_result(slash_agg_kind k, const void *p, void *out)
{
    unsigned prec = slash_agg_hll_p(k);
    uint32_t q;
    if (prec) {
        *(int64_t *)out = llround(slash_hll_estimate(p, prec));
        return;
    }
    if (slash_agg_quantile(k, &q)) {
        *(double *)out = slash_qs_quantile(p, q);
        return;
    }
    switch (k) {
    case SLASH_AGG_AVG_I64: {
        const slash_avg_i64 *a = p;
        *(double *)out = a->count ? (double)a->sum / (double)a->count : NAN;
        break;
    }
    case SLASH_AGG_AVG_F64: {
        const slash_avg_f64 *a = p;
        *(double *)out = a->count ? a->sum / (double)a->count : NAN;
        break;
    }
    case SLASH_AGG_FIRST_I64:
    case SLASH_AGG_FIRST_F64:
    case SLASH_AGG_LAST_I64:
    case SLASH_AGG_LAST_F64: memcpy(out, &((const slash_at_value *)p)->v, 8); break;
    case SLASH_AGG_COUNT_DISTINCT: *(int64_t *)out = slash_distinct_count(p); break;
    default: memcpy(out, p, 8); break;
    }
}
