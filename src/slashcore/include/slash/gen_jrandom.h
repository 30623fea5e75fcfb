/* gen_jrandom.h - a port of java.util.Random (the 48-bit LCG of the JDK), so
 * the NEXMark generator draws the same numbers as Apache Beam's Java one.
 *
 * Invariant: for the same seed, every function returns exactly what the JDK
 * method of the same name returns (setSeed, next(bits), nextInt(bound),
 * nextLong(), nextDouble()), including nextInt's rejection loop, whose
 * termination test relies on Java's 32-bit overflow.
 */
#ifndef SLASH_GEN_JRANDOM_H
#define SLASH_GEN_JRANDOM_H

#include <stdint.h>

typedef struct slash_jrand {
    uint64_t s;
} slash_jrand;

#define SLASH_JRAND_MULT UINT64_C(0x5DEECE66D)
#define SLASH_JRAND_MASK ((UINT64_C(1) << 48) - 1)

/* new Random(seed) */
static inline void slash_jrand_seed(slash_jrand *r, uint64_t seed) {
    r->s = (seed ^ SLASH_JRAND_MULT) & SLASH_JRAND_MASK;
}

/* Random.next(bits), 1 <= bits <= 32 */
static inline int32_t slash_jrand_next(slash_jrand *r, int bits) {
    r->s = (r->s * SLASH_JRAND_MULT + 0xB) & SLASH_JRAND_MASK;
    return (int32_t)(uint32_t)(r->s >> (48 - bits));
}

/* Random.nextInt(bound), bound >= 1 */
static inline int32_t slash_jrand_int(slash_jrand *r, int32_t bound) {
    int32_t x = slash_jrand_next(r, 31);
    int32_t m = bound - 1;
    if ((bound & m) == 0) return (int32_t)(((int64_t)bound * x) >> 31);
    /* Java: for (u = r; u - (r = u % bound) + m < 0; u = next(31)); in int arithmetic */
    for (int32_t u = x;; u = slash_jrand_next(r, 31)) {
        x = u % bound;
        if ((int64_t)u - x + m <= INT32_MAX) break;
    }
    return x;
}

/* Random.nextLong() */
static inline int64_t slash_jrand_long(slash_jrand *r) {
    int64_t hi = slash_jrand_next(r, 32);
    int64_t lo = slash_jrand_next(r, 32);
    return (int64_t)((uint64_t)hi << 32) + lo;
}

/* Random.nextDouble() */
static inline double slash_jrand_double(slash_jrand *r) {
    int64_t hi = slash_jrand_next(r, 26);
    int64_t lo = slash_jrand_next(r, 27);
    return (double)((hi << 27) + lo) * 0x1.0p-53;
}

#endif
