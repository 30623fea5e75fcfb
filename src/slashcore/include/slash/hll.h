/* hll.h - HyperLogLog registers: the partial state of approx_count_distinct.
 *
 * A sketch of precision p is 2^p one-byte registers. A value enters as a
 * 64-bit hash (slash_hll_hash_*: stable across processes and machines, no
 * per-process seed, so sketches built anywhere merge); its top p bits pick a
 * register, which keeps the largest rank (1 + leading zeros of the other
 * 64 - p bits) seen. Merge is the register-wise max: commutative,
 * associative and idempotent, with the all-zero sketch as identity. The
 * hash 0 stands for "no value" (a null) and changes nothing; a value whose
 * hash is 0 is counted as hash 1.
 *
 * The estimate is Ertl's improved raw estimator ("New cardinality estimation
 * algorithms for HyperLogLog sketches", 2017), which is unbiased over the
 * whole range from 0 to beyond 2^p without HLL++'s empirical bias tables or
 * its switch to linear counting; relative standard error about 1.04 / 2^(p/2).
 */
#ifndef SLASH_HLL_H
#define SLASH_HLL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "slash/mix.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_HLL_P_MIN 4
#define SLASH_HLL_P_MAX 14 /* 16 KiB registers: Spark's rsd 0.01 */

/* The stable 64-bit hash of an 8-byte value: int64, or a double's bits with
 * -0.0 as 0.0 and every NaN as one NaN (so equal doubles hash equal, as
 * Spark's distinct counts them). Never 0. Inline: the fold hashes a
 * column's values as it adds them (slash_ssb_batch.hash_raw). */
static inline uint64_t slash_hll_hash_i64(int64_t v)
{
    const uint64_t h = slash_mix64((uint64_t)v ^ UINT64_C(0x6a09e667f3bcc909));
    return h ? h : 1;
}

static inline uint64_t slash_hll_hash_f64(double v)
{
    uint64_t bits;
    if (v != v)
        v = (double)NAN;
    else if (v == 0.0)
        v = 0.0; /* -0.0 counts as 0.0 */
    memcpy(&bits, &v, 8);
    const uint64_t h = slash_mix64(bits ^ UINT64_C(0xbb67ae8584caa73b));
    return h ? h : 1;
}

/* The stable hash of a byte string. Never 0. */
uint64_t slash_hll_hash_bytes(const uint8_t *p, size_t n);

/* Hashes n values into out: int64 or double (is_f64) values, or byte
 * strings given as int64 Arrow offsets into data. valid: optional, one byte
 * a row (0: null; NULL: all valid); a null hashes to 0. Nothing is kept. */
void slash_hll_hash_column(const void *values, int is_f64, const uint8_t *valid, size_t n,
                           uint64_t *out);
void slash_hll_hash_strings(const int64_t *offsets, const uint8_t *data, const uint8_t *valid,
                            size_t n, uint64_t *out);

/* Adds hash h to the 2^p registers at reg (h == 0: nothing). Inline: the
 * hot loop. Without a branch on the data: the rank is 1 + the leading
 * zeros of the 64 - p bits below the register's index, 64 - p + 1 when
 * all are zero; setting bit p - 1 (below them, h << p has its low p bits
 * zero) gives that case the same count without a test; and the register
 * takes the larger rank by a conditional move. */
static inline void slash_hll_add(uint8_t *reg, unsigned p, uint64_t h)
{
    if (!h)
        return;
    const uint8_t rank = (uint8_t)(__builtin_clzll(h << p | UINT64_C(1) << (p - 1)) + 1);
    uint8_t *r = &reg[h >> (64 - p)];
    *r = rank > *r ? rank : *r;
}

/* dst = register-wise max(dst, src), 2^p registers each. */
void slash_hll_merge(uint8_t *dst, const uint8_t *src, unsigned p);

/* The estimated number of distinct hashes added (0 for the zero sketch). */
double slash_hll_estimate(const uint8_t *reg, unsigned p);

/* The precision Spark derives from a relative standard deviation:
 * ceil(2 log2(1.106 / rsd)); 0 when rsd is not in (0, 1). */
unsigned slash_hll_precision(double rsd);

#ifdef __cplusplus
}
#endif
#endif
