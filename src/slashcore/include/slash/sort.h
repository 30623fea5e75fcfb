/* sort.h - sorting the short arrays a fold buffers (the value hashes of
 * count_distinct, the bucket keys of percentile_approx) before they are
 * merged into a sorted sketch in one pass. */
#ifndef SLASH_SORT_H
#define SLASH_SORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sorts a[0..n) ascending; tmp holds n elements of scratch. Values of a
 * span (max - min) of at most 24 bits (bucket keys) by a counting pass a
 * byte of it, least significant first; wider ones (hashes) by a counting
 * pass into 256 buckets of the span's top bits, then an insertion pass,
 * which moves only values of one bucket: about 20 instructions a value
 * when they spread over the span. Wide values crowded into one bucket take
 * insertion sort's n^2 / 4 moves: meant for short arrays. Fewer than 24
 * values (a slot flushed after a few rows) by insertion alone. */
void slash_sort_u64(uint64_t *a, uint32_t n, uint64_t *tmp);

/* The fewest values slash_distinct_add_many and slash_qs_add_many add by
 * sorting and one merge pass: fewer (a slot flushed after a few rows of
 * small batches) take a search each, whose cost does not grow with the
 * state as a pass over it does. */
#define SLASH_SORTED_ADD_MIN 64

#ifdef __cplusplus
}
#endif
#endif
