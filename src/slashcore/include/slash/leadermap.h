/* leadermap.h - which executor leads each key partition: a partition -> rank
 * map with a version, agreed by every executor of a group.
 *
 * Version 0 is the default assignment, partition p led by rank p mod n. A
 * move (a list of (partition, new rank) pairs) makes version + 1; every
 * executor applies the same moves in the same version order, so two
 * executors at the same version have the same map. Lookups are one array
 * read. The map does not decide *when* a version takes effect; the executor
 * does (exec.c: at an epoch boundary, marked on every channel).
 */
#ifndef SLASH_LEADERMAP_H
#define SLASH_LEADERMAP_H

#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct slash_leadermap {
    uint64_t version;
    uint32_t parts, n;
    uint32_t *leader; /* parts entries, each < n */
} slash_leadermap;

/* Sets up the default map (version 0, p mod n) of `parts` partitions over n
 * ranks. SLASH_EINVAL when n == 0 or parts < n, SLASH_ENOMEM. */
slash_status slash_leadermap_init(slash_leadermap *m, uint32_t parts, uint32_t n);

/* Frees the map's array; safe on a zeroed map and twice. */
void slash_leadermap_free(slash_leadermap *m);

/* The rank leading partition p (p < m->parts). */
static inline uint32_t slash_leadermap_leader(const slash_leadermap *m, uint32_t p)
{
    return m->leader[p];
}

/* Partitions rank r leads. */
uint32_t slash_leadermap_count(const slash_leadermap *m, uint32_t r);

/* Checks k moves against m without applying them: every partition < parts
 * and named once, every rank < n. SLASH_EINVAL naming the bad entry. */
slash_status slash_leadermap_check(const slash_leadermap *m, const uint32_t *parts,
                                   const uint32_t *ranks, uint32_t k);

/* Applies k moves as version `version`, which must be m->version + 1
 * (SLASH_ESTATE otherwise); checked as slash_leadermap_check (nothing
 * changes on failure). */
slash_status slash_leadermap_apply(slash_leadermap *m, uint64_t version, const uint32_t *parts,
                                   const uint32_t *ranks, uint32_t k);

/* Replaces the whole map (a restore): leaders[p] < n for every p, and the
 * version. SLASH_EINVAL naming a bad entry (nothing changes). */
slash_status slash_leadermap_set(slash_leadermap *m, uint64_t version, const uint32_t *leaders);

#ifdef __cplusplus
}
#endif
#endif
