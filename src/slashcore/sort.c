/* sort.c - sorting short arrays (sort.h). */
#include "slash/sort.h"

#include <string.h>

#define RUN 8

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

/* Merges the ascending runs a[0..na) and b[0..nb) into out. */
static void merge(const uint64_t *a, uint32_t na, const uint64_t *b, uint32_t nb, uint64_t *out)
{
    uint32_t i = 0, j = 0, w = 0;
    while (i < na && j < nb) {
        const uint64_t x = a[i], y = b[j];
        const int take_b = y < x;
        out[w++] = take_b ? y : x;
        j += (uint32_t)take_b;
        i += (uint32_t)!take_b;
    }
    while (i < na)
        out[w++] = a[i++];
    while (j < nb)
        out[w++] = b[j++];
}

void slash_sort_u64(uint64_t *a, uint32_t n, uint64_t *tmp)
{
    for (uint32_t lo = 0; lo < n; lo += RUN)
        insertion(a + lo, n - lo < RUN ? n - lo : RUN);
    uint64_t *src = a, *dst = tmp;
    for (uint32_t width = RUN; width < n; width *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * width) {
            const uint32_t mid = lo + width < n ? lo + width : n;
            const uint32_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            merge(src + lo, mid - lo, src + mid, hi - mid, dst + lo);
        }
        uint64_t *t = src;
        src = dst, dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof *a);
}
