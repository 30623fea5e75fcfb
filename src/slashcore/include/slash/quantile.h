/* quantile.h - a mergeable quantile sketch of fixed size: the partial state
 * of percentile_approx.
 *
 * Values (doubles; -0.0 as 0.0, every NaN as one NaN above +inf) fall into
 * log-linear buckets: the order-preserving 64-bit image of the double,
 * shifted right so that each binade has SLASH_QS_SUB buckets (relative width
 * 1/64). A sketch keeps at most SLASH_QS_BUCKETS buckets, sorted, with a
 * count each, at a resolution level L: a bucket at level L is 2^L buckets
 * of level 0. When one more bucket would not fit, L grows by one and
 * neighbouring buckets fuse (uniform collapse). So a sketch of the multiset
 * S is always (L(S), the counts of S at level L(S)), L(S) being the
 * smallest level at which S needs at most SLASH_QS_BUCKETS buckets: a
 * function of S alone. Hence merge (levels raised to the larger, counts
 * added, collapsed while too many) is commutative and associative exactly,
 * as the CRDT protocol needs; it is not idempotent (counts add). The zero
 * sketch (no bucket, level 0) is the identity.
 *
 * Also kept: the count, and the exact minimum and maximum (Spark's order of
 * doubles), which clamp an answer and answer ranks 1 and n exactly.
 *
 * A quantile q is answered at rank r = max(1, ceil(q n)) (the r-th smallest
 * value, as DuckDB's quantile_disc and Spark's percentile_approx define it):
 * the midpoint of the bucket holding it, clamped to [min, max]. Its error
 * relative to the exact r-th value x is at most 2^(L-7) |x| while a bucket
 * stays within one binade (L <= 6): 0.78 % at level 0. Level 0 holds 1020
 * buckets of 1/64 binade: values of one sign spanning 2^15.9 (a factor
 * 6e4) in magnitude, or of both signs 2^7.9 each; each level doubles the
 * span. Bucket counts saturate at 2^32 - 1.
 */
#ifndef SLASH_QUANTILE_H
#define SLASH_QUANTILE_H

#include <assert.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_QS_SUB_BITS 6 /* 64 buckets a binade at level 0 */
#define SLASH_QS_BUCKETS 1020
#define SLASH_QS_Q_SCALE 10000 /* quantiles are given in 1/10000 */

typedef struct slash_qsketch {
    uint32_t n;      /* buckets in use */
    uint32_t level;  /* resolution level L */
    uint64_t count;  /* values added (saturating) */
    double min, max; /* exact extremes; zero: NaN and -inf, as min/max's zeros */
    int32_t key[SLASH_QS_BUCKETS];     /* bucket keys at level L, ascending */
    uint32_t cnt[SLASH_QS_BUCKETS];    /* values in each */
} slash_qsketch;
static_assert(sizeof(slash_qsketch) == 8192, "a quantile sketch is shipped to peers");

/* Writes the zero sketch at s. */
void slash_qs_zero(slash_qsketch *s);

/* A double that stands for "no value" (a null): a signalling NaN whose
 * payload spells it; slash_qs_add skips it. Writers of a value column put
 * it where a value is null (and canonicalize their own NaNs). */
#define SLASH_QS_NULL_BITS UINT64_C(0x7ff4000000000bad)

/* Adds value v (a v with the bits SLASH_QS_NULL_BITS: nothing). */
void slash_qs_add(slash_qsketch *s, double v);

/* Adds the m values v[0..m) (nulls, SLASH_QS_NULL_BITS, add nothing): the
 * sketch m calls of slash_qs_add leave, byte for byte (a sketch is a
 * function of the multiset added), made by sorting their bucket keys and
 * one merge pass a SLASH_QS_BATCH of them instead of a search and a move
 * each (fewer than SLASH_SORTED_ADD_MIN of them, or fewer than 1/8 of
 * the entries held: a search each). */
#define SLASH_QS_BATCH 512
void slash_qs_add_many(slash_qsketch *s, const double *v, uint32_t m);

/* Merges src into dst. */
void slash_qs_merge(slash_qsketch *dst, const slash_qsketch *src);

/* The approximate q-quantile, q = q_scaled / SLASH_QS_Q_SCALE in [0, 1];
 * NaN for the zero sketch. */
double slash_qs_quantile(const slash_qsketch *s, uint32_t q_scaled);

#ifdef __cplusplus
}
#endif
#endif
