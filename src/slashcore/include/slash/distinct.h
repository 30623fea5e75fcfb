/* distinct.h - an exact distinct count of bounded memory: the partial state
 * of count_distinct.
 *
 * A set of up to SLASH_DISTINCT_MAX value hashes (slash_hll_hash_*: 0 is a
 * null and is not added), kept sorted with unused slots zero, so a set has
 * one byte layout. Merge is union: commutative, associative, idempotent.
 * A set that would exceed the bound becomes the overflowed set (no hashes,
 * the flag set), which absorbs every merge: the top of the semilattice, so
 * the laws hold past the bound too; its result is -1 and the caller reports
 * the bound. Exact up to 64-bit hash collisions (at most 2^-45 for a full
 * set).
 */
#ifndef SLASH_DISTINCT_H
#define SLASH_DISTINCT_H

#include <assert.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_DISTINCT_MAX 1023

typedef struct slash_distinct {
    uint32_t n;        /* hashes held */
    uint32_t overflow; /* 1: more than SLASH_DISTINCT_MAX distinct values were seen */
    uint64_t h[SLASH_DISTINCT_MAX];
} slash_distinct;
static_assert(sizeof(slash_distinct) == 8192, "a distinct set is shipped to peers");

/* Adds hash h (0: nothing). */
void slash_distinct_add(slash_distinct *s, uint64_t h);

/* dst = dst union src. */
void slash_distinct_merge(slash_distinct *dst, const slash_distinct *src);

/* Adds the m hashes h[0..m) (in any order; 0 is a null and adds nothing):
 * the set is the one m calls of slash_distinct_add leave, byte for byte
 * (a set is a function of the hashes added), made by sorting them and one
 * merge pass a SLASH_DISTINCT_BATCH of them instead of a search and a move
 * each (fewer than SLASH_SORTED_ADD_MIN of them, or fewer than 1/8 of
 * the entries held: a search each). Reorders h (its scratch). */
#define SLASH_DISTINCT_BATCH 512
void slash_distinct_add_many(slash_distinct *s, uint64_t *h, uint32_t m);

/* The number of distinct values, -1 when the set overflowed. */
int64_t slash_distinct_count(const slash_distinct *s);

#ifdef __cplusplus
}
#endif
#endif
