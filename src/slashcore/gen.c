/* gen.c - key distributions (uniform, bounded zipf) and event-time columns
 * shared by the workload generators.
 *
 * Invariants: every function here is pure in its arguments (no global state,
 * thread-safe); a key drawn for event i depends only on (stream, i), so
 * chunked fills concatenate to the same column as one fill.
 *
 * The zipf sampler is rejection-inversion (W. Hoermann, G. Derflinger,
 * "Rejection-inversion to generate variates from monotone discrete
 * distributions", 1996), in the form used by Apache Commons RNG: ranks
 * 1..n with P(k) ~ k^-s, any s > 0. H is the integral of h(x) = x^-s,
 * written with log1p/expm1 helpers so s -> 1 stays accurate; s == 1 exactly
 * takes a log/exp path. Expected iterations per sample are below 1.3.
 */
#include "slash/gen.h"

#include <math.h>

/* log1p(x) / x, continuous at 0 */
static double helper1(double x) {
    return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

/* expm1(x) / x, continuous at 0 */
static double helper2(double x) {
    return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

/* H(x) = (x^(1-s) - 1) / (1 - s), and log(x) when s == 1 */
static double h_integral(double x, double s) {
    double lx = log(x);
    if (s == 1.0) return lx;
    return helper2((1.0 - s) * lx) * lx;
}

/* h(x) = x^-s */
static double h_density(double x, double s) {
    if (s == 1.0) return 1.0 / x;
    return exp(-s * log(x));
}

/* the inverse of H */
static double h_integral_inverse(double x, double s) {
    if (s == 1.0) return exp(x);
    double t = x * (1.0 - s);
    if (t < -1.0) t = -1.0; /* numerical guard, as in Commons RNG */
    return exp(helper1(t) * x);
}

slash_status slash_gen_keys_init(slash_gen_keys *k, uint64_t n, slash_gen_dist dist,
                                 double exponent) {
    if (!k) return slash_fail(SLASH_EINVAL, "gen keys: NULL distribution");
    if (n == 0) return slash_fail(SLASH_EINVAL, "gen keys: the key range must hold at least 1 key");
    if (n > (UINT64_C(1) << 62))
        return slash_fail(SLASH_EINVAL, "gen keys: at most 2^62 keys, got %llu",
                          (unsigned long long)n);
    k->n = n;
    k->dist = dist;
    k->exponent = 0.0;
    k->h_integral_x1 = k->h_integral_n = k->s = 0.0;
    if (dist == SLASH_GEN_UNIFORM) return SLASH_OK;
    if (dist != SLASH_GEN_ZIPF) return slash_fail(SLASH_EINVAL, "gen keys: unknown distribution %d", (int)dist);
    if (!(exponent > 0.0 && exponent <= 100.0))
        return slash_fail(SLASH_EINVAL, "gen keys: zipf exponent must be in (0, 100], got %g", exponent);
    k->exponent = exponent;
    k->h_integral_x1 = h_integral(1.5, exponent) - 1.0;
    k->h_integral_n = h_integral((double)n + 0.5, exponent);
    k->s = 2.0 - h_integral_inverse(h_integral(2.5, exponent) - h_density(2.0, exponent), exponent);
    return SLASH_OK;
}

static uint64_t zipf_draw(const slash_gen_keys *k, uint64_t x) {
    const double e = k->exponent, nd = (double)k->n;
    slash_gen_rng r = {x};
    uint64_t w = x;
    for (;;) {
        /* u is uniform in (H(1.5) - 1, H(n + 0.5)] */
        double u = k->h_integral_n + slash_gen_unit(w) * (k->h_integral_x1 - k->h_integral_n);
        double xr = h_integral_inverse(u, e);
        double kr = floor(xr + 0.5);
        if (kr < 1.0) kr = 1.0;
        else if (kr > nd) kr = nd;
        if (kr - xr <= k->s || u >= h_integral(kr + 0.5, e) - h_density(kr, e))
            return (uint64_t)kr - 1;
        w = slash_gen_next(&r);
    }
}

uint64_t slash_gen_keys_draw(const slash_gen_keys *k, uint64_t x) {
    if (k->dist == SLASH_GEN_UNIFORM) return slash_gen_below(x, k->n);
    return zipf_draw(k, x);
}

void slash_gen_keys_fill(const slash_gen_keys *k, uint64_t stream, uint64_t start, size_t n,
                         int64_t *out) {
    if (k->dist == SLASH_GEN_UNIFORM) {
        const uint64_t keys = k->n;
        for (size_t j = 0; j < n; j++)
            out[j] = (int64_t)slash_gen_below(slash_gen_at(stream, start + j), keys);
        return;
    }
    for (size_t j = 0; j < n; j++) out[j] = (int64_t)zipf_draw(k, slash_gen_at(stream, start + j));
}

double slash_gen_keys_pmf(const slash_gen_keys *k, uint64_t key) {
    if (key >= k->n) return 0.0;
    if (k->dist == SLASH_GEN_UNIFORM) return 1.0 / (double)k->n;
    /* sum the smallest terms first for accuracy */
    double z = 0.0;
    for (uint64_t r = k->n; r >= 1; r--) z += pow((double)r, -k->exponent);
    return pow((double)(key + 1), -k->exponent) / z;
}

slash_status slash_gen_times_check(int64_t base_ms, uint64_t rate, uint64_t end) {
    if (rate == 0) return slash_fail(SLASH_EINVAL, "gen times: rate must be >= 1 event per second");
    __int128 last = (__int128)base_ms + ((__int128)end * 1000) / rate;
    if (last > INT64_MAX || base_ms < 0)
        return slash_fail(SLASH_EINVAL,
                          "gen times: base %lld ms with %llu events at %llu/s leaves int64 "
                          "milliseconds (base must be >= 0)",
                          (long long)base_ms, (unsigned long long)end, (unsigned long long)rate);
    return SLASH_OK;
}

slash_status slash_gen_range_check(const char *what, uint64_t start, size_t n, int64_t base_ms,
                                   uint64_t rate) {
    if (start > (UINT64_C(1) << 62) || n > (UINT64_C(1) << 62) - start)
        return slash_fail(SLASH_EINVAL, "%s: event range [%llu, +%zu) passes 2^62", what,
                          (unsigned long long)start, n);
    return slash_gen_times_check(base_ms, rate, start + n);
}

int64_t slash_gen_time_at(int64_t base_ms, uint64_t rate, uint64_t i) {
    return base_ms + (int64_t)(((unsigned __int128)i * 1000) / rate);
}

void slash_gen_times_fill(int64_t base_ms, uint64_t rate, uint64_t start, size_t n,
                          int64_t *out) {
    /* t advances by 1000 / rate per event, carrying the remainder exactly */
    unsigned __int128 num = (unsigned __int128)start * 1000;
    int64_t t = base_ms + (int64_t)(num / rate);
    uint64_t r = (uint64_t)(num % rate);
    const int64_t q = (int64_t)(1000 / rate);
    const uint64_t rr = 1000 % rate;
    for (size_t j = 0; j < n; j++) {
        out[j] = t;
        t += q;
        r += rr;
        if (r >= rate) {
            r -= rate;
            t++;
        }
    }
}
