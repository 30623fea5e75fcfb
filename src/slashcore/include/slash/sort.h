/* sort.h - sorting the short arrays a fold buffers (the value hashes of
 * count_distinct, the bucket keys of percentile_approx) before they are
 * merged into a sorted sketch in one pass. */
#ifndef SLASH_SORT_H
#define SLASH_SORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sorts a[0..n) ascending; tmp holds n elements of scratch. A bottom-up
 * merge sort over runs of 8 sorted by insertion, whose merges choose by
 * conditional moves (buffered hashes are random: a branch on their order
 * would mispredict half the time). */
void slash_sort_u64(uint64_t *a, uint32_t n, uint64_t *tmp);

#ifdef __cplusplus
}
#endif
#endif
