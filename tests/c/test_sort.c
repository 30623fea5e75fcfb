/* test_sort.c - slash_sort_u64 sorts as qsort does: random values, values
 * crowded into one bucket beside a few far off, repeats, the extremes 0 and
 * 2^64 - 1, narrow spans (sorted a byte at a time) and wide ones, and every length up to 300. */
#include <stdlib.h>

#include "slash/sort.h"
#include "unit.h"

static int cmp(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

TEST(sorts_as_qsort_does)
{
    static uint64_t a[300], want[300], tmp[300];
    uint64_t rng = 5;
    for (int round = 0; round < 3000; round++) {
        const uint32_t n = (uint32_t)(round % 301);
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t r = unit_rng(&rng);
            switch (round % 6) {
            case 0: a[i] = r; break;                                  /* spread */
            case 1: a[i] = r % 3; break;                              /* repeats */
            case 2: a[i] = r % 50 ? 1000 + r % 7 : r; break;          /* crowded, a few far off */
            case 3: a[i] = r % 2 ? UINT64_MAX - r % 4 : r % 4; break; /* the extremes */
            case 4: a[i] = UINT64_C(5000000000) + r % (1u << 21); break; /* a span of 21 bits */
            default: a[i] = (r >> 40) << 20; break;                   /* low bits zero */
            }
            want[i] = a[i];
        }
        qsort(want, n, sizeof want[0], cmp);
        slash_sort_u64(a, n, tmp);
        CHECK(memcmp(a, want, n * sizeof a[0]) == 0);
    }
}

int main(void)
{
    RUN(sorts_as_qsort_does);
    return UNIT_DONE();
}
