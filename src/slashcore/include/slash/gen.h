/* gen.h - counter-based randomness and key distributions for the workload
 * generators (YSB, NEXMark, cluster monitoring, read-only count).
 *
 * Invariant: every generated value is a pure function of (seed, field, event
 * index). Field f of event i is derived from the word
 *     slash_gen_at(slash_gen_stream(seed, f), i) = mix64(K_f + (i + 1) * gamma)
 * (the splitmix64 output for index i of a stream keyed by K_f), so any range
 * of events can be generated on its own, in any chunking, on any executor,
 * with identical bytes. A value that needs several random words (a rejection
 * sampler) continues a private splitmix64 sequence started at that word.
 *
 * Keys are drawn from [0, n): uniform (Lemire's multiply-high reduction; the
 * bias is below n / 2^64) or bounded zipf with P(k) proportional to
 * 1 / (k + 1)^s for any s > 0, by rejection-inversion (Hoermann and
 * Derflinger 1996, as in Apache Commons' RejectionInversionZipfSampler): O(1)
 * time and memory per sample for any n. Key 0 is the most frequent.
 *
 * Event times are in milliseconds: event i happens at base_ms + floor(i *
 * 1000 / rate), rate being events per second of event time (non-decreasing).
 */
#ifndef SLASH_GEN_H
#define SLASH_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_GEN_GAMMA 0x9e3779b97f4a7c15ULL

/* The splitmix64 finaliser: a bijection of 64-bit words with full avalanche. */
static inline uint64_t slash_gen_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Returns the stream key K_f of field `field` under `seed`. */
static inline uint64_t slash_gen_stream(uint64_t seed, uint64_t field) {
    return slash_gen_mix64(slash_gen_mix64(seed ^ 0x243f6a8885a308d3ULL) +
                           (field + 1) * 0xd1b54a32d192ed03ULL);
}

/* Returns the random word of event `i` in the stream keyed by `stream`. */
static inline uint64_t slash_gen_at(uint64_t stream, uint64_t i) {
    return slash_gen_mix64(stream + (i + 1) * SLASH_GEN_GAMMA);
}

/* Maps a uniform 64-bit word to [0, n) (multiply-high; n >= 1). */
static inline uint64_t slash_gen_below(uint64_t x, uint64_t n) {
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

/* Maps a uniform 64-bit word to a double in [0, 1) with 53 random bits. */
static inline double slash_gen_unit(uint64_t x) {
    return (double)(x >> 11) * 0x1.0p-53;
}

/* A private splitmix64 sequence, for values that need several words. */
typedef struct slash_gen_rng {
    uint64_t s;
} slash_gen_rng;

static inline uint64_t slash_gen_next(slash_gen_rng *r) {
    r->s += SLASH_GEN_GAMMA;
    return slash_gen_mix64(r->s);
}

typedef enum slash_gen_dist {
    SLASH_GEN_UNIFORM = 0,
    SLASH_GEN_ZIPF = 1,
} slash_gen_dist;

/* A key distribution over [0, n). Plain data: copy it freely; no cleanup. */
typedef struct slash_gen_keys {
    uint64_t n;
    slash_gen_dist dist;
    double exponent;        /* zipf s (> 0); 0 for uniform */
    /* rejection-inversion constants (zipf only) */
    double h_integral_x1;   /* H(1.5) - 1 */
    double h_integral_n;    /* H(n + 0.5) */
    double s;               /* squeeze: 2 - H^-1(H(2.5) - h(2)) */
} slash_gen_keys;

/* Initialises `k` for n keys. Fails with SLASH_EINVAL when n == 0, when n
 * exceeds 2^62 (zipf ranks are computed in doubles), or when the zipf
 * exponent is not a finite number in (0, 100]. */
slash_status slash_gen_keys_init(slash_gen_keys *k, uint64_t n, slash_gen_dist dist,
                                 double exponent);

/* Returns the key drawn by the random word x (pure; cannot fail). */
uint64_t slash_gen_keys_draw(const slash_gen_keys *k, uint64_t x);

/* Writes the keys of events [start, start + n) of stream `stream` into out
 * (caller-owned, n elements). Cannot fail. */
void slash_gen_keys_fill(const slash_gen_keys *k, uint64_t stream, uint64_t start, size_t n,
                         int64_t *out);

/* Returns the exact probability of key `key` under k (for tests and
 * goodness-of-fit checks; O(n) for zipf on first principles, so use small n). */
double slash_gen_keys_pmf(const slash_gen_keys *k, uint64_t key);

/* Checks a time base for events [0, end): rate >= 1 event per second, and no
 * time up to event `end` overflows int64 milliseconds. SLASH_EINVAL if not. */
slash_status slash_gen_times_check(int64_t base_ms, uint64_t rate, uint64_t end);

/* Checks an event range [start, start + n) of a generator named `what`: it
 * stays below 2^62 events and its times fit (slash_gen_times_check).
 * SLASH_EINVAL with the detail otherwise. */
slash_status slash_gen_range_check(const char *what, uint64_t start, size_t n, int64_t base_ms,
                                   uint64_t rate);

/* Writes the times of events [start, start + n): base_ms + floor(i * 1000 /
 * rate). Caller-owned out of n elements; call slash_gen_times_check first. */
void slash_gen_times_fill(int64_t base_ms, uint64_t rate, uint64_t start, size_t n,
                          int64_t *out);

/* Returns the time of event i under the same rule. */
int64_t slash_gen_time_at(int64_t base_ms, uint64_t rate, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif
