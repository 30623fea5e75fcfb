/* hll.c - HyperLogLog hashes, merge and estimate (hll.h).
 * Invariant: every hash function is a pure function of the value's bytes
 * with fixed constants, so sketches of any process or machine merge. */
#include "slash/hll.h"
#include "slash/mix.h"

#include <math.h>
#include <string.h>

#define fmix64 slash_mix64

static inline uint64_t nonzero(uint64_t h) { return h ? h : 1; }

uint64_t slash_hll_hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = UINT64_C(0x3c6ef372fe94f82b) ^ ((uint64_t)n * UINT64_C(0x9e3779b97f4a7c15));
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = fmix64(h ^ w) * UINT64_C(0x9e3779b97f4a7c15);
        p += 8, n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h = fmix64(h ^ w ^ ((uint64_t)n << 59)) * UINT64_C(0x9e3779b97f4a7c15);
    }
    return nonzero(fmix64(h));
}

void slash_hll_hash_column(const void *values, int is_f64, const uint8_t *valid, size_t n,
                           uint64_t *out)
{
    if (is_f64) {
        const double *v = values;
        for (size_t i = 0; i < n; i++)
            out[i] = !valid || valid[i] ? slash_hll_hash_f64(v[i]) : 0;
    } else {
        const int64_t *v = values;
        for (size_t i = 0; i < n; i++)
            out[i] = !valid || valid[i] ? slash_hll_hash_i64(v[i]) : 0;
    }
}

void slash_hll_hash_strings(const int64_t *offsets, const uint8_t *data, const uint8_t *valid,
                            size_t n, uint64_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = !valid || valid[i]
                     ? slash_hll_hash_bytes(data + offsets[i], (size_t)(offsets[i + 1] - offsets[i]))
                     : 0;
}

void slash_hll_merge(uint8_t *dst, const uint8_t *src, unsigned p)
{
    size_t m = (size_t)1 << p;
    for (size_t i = 0; i < m; i++) /* vectorises to a byte-wise max */
        dst[i] = dst[i] > src[i] ? dst[i] : src[i];
}

/* Ertl 2017, Algorithm 6 (sigma and tau of the improved raw estimator) */
static double sigma(double x)
{
    if (x == 1.0)
        return INFINITY;
    double y = 1.0, z = x, zp;
    do {
        x *= x;
        zp = z;
        z += x * y;
        y += y;
    } while (z != zp);
    return z;
}

static double tau(double x)
{
    if (x == 0.0 || x == 1.0)
        return 0.0;
    double y = 1.0, z = 1.0 - x, zp;
    do {
        x = sqrt(x);
        zp = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
    } while (z != zp);
    return z / 3.0;
}

double slash_hll_estimate(const uint8_t *reg, unsigned p)
{
    const unsigned q = 64 - p;
    const size_t m = (size_t)1 << p;
    uint32_t c[66] = {0};
    for (size_t i = 0; i < m; i++)
        c[reg[i] <= q + 1 ? reg[i] : q + 1]++;
    if (c[0] == m)
        return 0.0;
    const double md = (double)m;
    double z = md * tau(1.0 - (double)c[q + 1] / md);
    for (unsigned k = q; k >= 1; k--)
        z = 0.5 * (z + (double)c[k]);
    z += md * sigma((double)c[0] / md);
    return md * md / (2.0 * log(2.0)) / z;
}

unsigned slash_hll_precision(double rsd)
{
    if (!(rsd > 0.0 && rsd < 1.0))
        return 0;
    return (unsigned)ceil(2.0 * log2(1.106 / rsd));
}
