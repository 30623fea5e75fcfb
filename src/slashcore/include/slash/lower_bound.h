/* lower_bound.h - the index of the first element >= x in a sorted array,
 * found without branches on the data: each step halves the range with a
 * conditional move, so searching random values (hashes, bucket keys) costs
 * no mispredicted branch per step. One definition for every element type:
 * SLASH_DEFINE_LOWER_BOUND(name, T) defines
 *     static inline uint32_t name(const T *a, uint32_t n, T x);
 */
#ifndef SLASH_LOWER_BOUND_H
#define SLASH_LOWER_BOUND_H

#include <stdint.h>

#define SLASH_DEFINE_LOWER_BOUND(name, T)                                    \
    static inline uint32_t name(const T *a, uint32_t n, T x)                \
    {                                                                        \
        if (!n)                                                              \
            return 0;                                                        \
        const T *base = a;                                                   \
        while (n > 1) {                                                      \
            const uint32_t half = n / 2;                                     \
            base = base[half] < x ? base + half : base;                      \
            n -= half;                                                       \
        }                                                                    \
        return (uint32_t)(base - a) + (*base < x);                           \
    }

#endif
