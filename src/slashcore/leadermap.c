/* leadermap.c - the versioned partition -> rank map (leadermap.h).
 * Invariants: leader[p] < n for every p; the version only grows, by one per
 * applied move list; a failed call changes nothing.
 */
#include "slash/leadermap.h"

#include <stdlib.h>
#include <string.h>

slash_status slash_leadermap_init(slash_leadermap *m, uint32_t parts, uint32_t n)
{
    memset(m, 0, sizeof *m);
    if (n == 0 || parts < n)
        return slash_fail(SLASH_EINVAL, "leader map: %u partitions cannot be led by %u executors",
                          parts, n);
    m->leader = malloc((size_t)parts * sizeof *m->leader);
    if (!m->leader)
        return slash_fail(SLASH_ENOMEM, "leader map: out of memory for %u partitions", parts);
    for (uint32_t p = 0; p < parts; p++)
        m->leader[p] = p % n;
    m->parts = parts, m->n = n;
    return SLASH_OK;
}

void slash_leadermap_free(slash_leadermap *m)
{
    free(m->leader);
    m->leader = NULL;
    m->parts = 0;
}

uint32_t slash_leadermap_count(const slash_leadermap *m, uint32_t r)
{
    uint32_t c = 0;
    for (uint32_t p = 0; p < m->parts; p++)
        c += m->leader[p] == r;
    return c;
}

slash_status slash_leadermap_check(const slash_leadermap *m, const uint32_t *parts,
                                   const uint32_t *ranks, uint32_t k)
{
    for (uint32_t i = 0; i < k; i++) {
        if (parts[i] >= m->parts)
            return slash_fail(SLASH_EINVAL, "move %u: partition %u, but there are %u partitions", i,
                              parts[i], m->parts);
        if (ranks[i] >= m->n)
            return slash_fail(SLASH_EINVAL, "move %u: rank %u, but the group has %u executors", i,
                              ranks[i], m->n);
        for (uint32_t j = 0; j < i; j++) /* k is small (at most the partitions, once each) */
            if (parts[j] == parts[i])
                return slash_fail(SLASH_EINVAL, "moves %u and %u both move partition %u", j, i,
                                  parts[i]);
    }
    return SLASH_OK;
}

slash_status slash_leadermap_apply(slash_leadermap *m, uint64_t version, const uint32_t *parts,
                                   const uint32_t *ranks, uint32_t k)
{
    if (version != m->version + 1)
        return slash_fail(SLASH_ESTATE, "leader map: version %llu cannot follow %llu",
                          (unsigned long long)version, (unsigned long long)m->version);
    slash_status st = slash_leadermap_check(m, parts, ranks, k);
    if (st != SLASH_OK)
        return st;
    for (uint32_t i = 0; i < k; i++)
        m->leader[parts[i]] = ranks[i];
    m->version = version;
    return SLASH_OK;
}

slash_status slash_leadermap_set(slash_leadermap *m, uint64_t version, const uint32_t *leaders)
{
    for (uint32_t p = 0; p < m->parts; p++)
        if (leaders[p] >= m->n)
            return slash_fail(SLASH_EINVAL, "leader map: partition %u led by rank %u of %u", p,
                              leaders[p], m->n);
    memcpy(m->leader, leaders, (size_t)m->parts * sizeof *m->leader);
    m->version = version;
    return SLASH_OK;
}
