/* sort.c - sorting short arrays (sort.h). */
#include "slash/sort.h"

#include <string.h>

#define BUCKET_BITS 8
#define BUCKETS (1u << BUCKET_BITS)

#define SHORT 24 /* below this, insertion sort: a counting pass's 256 counters cost more */

static void insertion(uint64_t *a, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        const uint64_t x = a[i];
        uint32_t j = i;
        for (; j > 0 && a[j - 1] > x; j--)
            a[j] = a[j - 1];
        a[j] = x;
    }
}

void slash_sort_u64(uint64_t *a, uint32_t n, uint64_t *tmp)
{
    if (n < SHORT) {
        insertion(a, n);
        return;
    }
    uint64_t lo = a[0], hi = a[0];
    for (uint32_t i = 1; i < n; i++) {
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    const uint64_t span = hi - lo;
    if (!span)
        return; /* all equal */
    const int bits = 64 - __builtin_clzll(span);
    uint32_t start[BUCKETS + 1];
    if (bits <= 3 * BUCKET_BITS) {
        /* a narrow span (bucket keys): least significant digit first, a
         * stable counting pass a digit of x - lo, back and forth */
        uint64_t *src = a, *dst = tmp;
        for (int d = 0; d < bits; d += BUCKET_BITS) {
            memset(start, 0, sizeof start);
            for (uint32_t i = 0; i < n; i++)
                start[((src[i] - lo) >> d & (BUCKETS - 1)) + 1]++;
            for (uint32_t b = 1; b <= BUCKETS; b++)
                start[b] += start[b - 1];
            for (uint32_t i = 0; i < n; i++)
                dst[start[(src[i] - lo) >> d & (BUCKETS - 1)]++] = src[i];
            uint64_t *t = src;
            src = dst, dst = t;
        }
        if (src != a)
            memcpy(a, src, n * sizeof *a);
        return;
    }
    /* a wide span (hashes): the top BUCKET_BITS bits of x - lo, then an
     * insertion pass, which moves only values of one bucket */
    const unsigned shift = (unsigned)bits - BUCKET_BITS;
    memset(start, 0, sizeof start);
    for (uint32_t i = 0; i < n; i++)
        start[((a[i] - lo) >> shift) + 1]++;
    for (uint32_t b = 1; b <= BUCKETS; b++)
        start[b] += start[b - 1];
    for (uint32_t i = 0; i < n; i++)
        tmp[start[(a[i] - lo) >> shift]++] = a[i];
    memcpy(a, tmp, n * sizeof *a);
    insertion(a, n);
}
