/* lss.h - the log-structured store (LSS) of one key partition: an append-only
 * region of variable-size, 8-byte-aligned records addressed by their offset.
 *
 * Boundaries, always in this order:   LSS_FIRST <= begin <= read_only <= tail
 *   begin:     everything below is dead and its pages are given back;
 *   read_only: records at or above it are updated in place (the mutable tail);
 *              records in [begin, read_only) are sealed: they form the epoch
 *              delta being shipped, and an update to one of them appends a new
 *              record at the tail instead (read-copy-update, starting from the
 *              CRDT zero value because the sealed partial is shipped);
 *   tail:      next append.
 * When no delta is sealed, read_only == begin. The region is one contiguous
 * virtual reservation (MAP_NORESERVE) touched page by page as the tail grows,
 * so [begin, read_only) is always one (address, length) span a channel can
 * ship without copying, and the store grows without a preset capacity.
 * Address 0 means "none"; the first record is at LSS_FIRST.
 *
 * Addresses only grow (the hash index treats every address below begin as
 * empty), but memory is reused: when a truncation leaves the log empty
 * (begin == tail, as after each epoch of a store whose whole content was
 * shipped), the next record goes to the start of the reservation again, on
 * pages already faulted in (up to SLASH_LSS_KEEP bytes of them; those beyond
 * are given back). Record a lives at base + a - shift; shift changes only
 * while the log is empty, so a live span stays contiguous. Reused pages are
 * not zeroed: stores initialise every field of a record they append.
 */
#ifndef SLASH_LSS_H
#define SLASH_LSS_H

#include <stddef.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_LSS_FIRST 64u
#define SLASH_LSS_DEFAULT_RESERVE ((size_t)64 << 30) /* virtual bytes per partition */
#define SLASH_LSS_KEEP ((uint64_t)32 << 20) /* faulted bytes an emptied log keeps for reuse */
#define SLASH_LSS_ADDR_LIMIT ((uint64_t)1 << 46) /* addresses fit the index's 48 bits with room */

typedef struct slash_lss {
    uint8_t *base;     /* start of the reservation; record at address a is base + a - shift */
    size_t reserved;   /* virtual bytes reserved */
    uint64_t begin;
    uint64_t read_only;
    uint64_t tail;
    uint64_t released; /* pages below base + released were given back */
    uint64_t shift;    /* address minus offset in the reservation */
} slash_lss;

/* Reserves `reserve` virtual bytes (0 = default). Fails with SLASH_ENOMEM.
 * The caller owns the log and calls slash_lss_destroy(). */
slash_status slash_lss_init(slash_lss *l, size_t reserve);

/* Unmaps; safe on a zeroed or destroyed log. */
void slash_lss_destroy(slash_lss *l);

/* Pointer to the record at address a (no bounds check: a comes from the log). */
static inline void *slash_lss_ptr(const slash_lss *l, uint64_t a) { return l->base + (a - l->shift); }

/* Address of the record at p (p points into the live span). */
static inline uint64_t slash_lss_addr(const slash_lss *l, const void *p)
{
    return (uint64_t)((const uint8_t *)p - l->base) + l->shift;
}

/* Bytes of the reservation in use up to the tail. */
static inline uint64_t slash_lss_extent(const slash_lss *l) { return l->tail - l->shift; }

/* True when the log should be compacted into a fresh one: half the
 * reservation is used, or addresses near the index's limit. */
static inline int slash_lss_crowded(const slash_lss *l)
{
    return slash_lss_extent(l) > l->reserved / 2 || l->tail > SLASH_LSS_ADDR_LIMIT;
}

/* Appends `size` bytes (a multiple of 8) at the tail and returns their
 * address in *addr; the bytes are zero the first time a page is used. Fails
 * with SLASH_ENOMEM when the reservation is full. */
static inline slash_status slash_lss_append(slash_lss *l, uint32_t size, uint64_t *addr)
{
    if (slash_lss_extent(l) + size > l->reserved)
        return slash_fail(SLASH_ENOMEM, "log reservation of %zu bytes is full", l->reserved);
    *addr = l->tail;
    l->tail += size;
    return SLASH_OK;
}

/* Moves begin up to a (begin <= a <= read_only) and gives whole pages below
 * it back to the system; or, when the log is left empty, rewinds it onto
 * the start of the reservation (see above). */
void slash_lss_truncate(slash_lss *l, uint64_t a);

/* Bytes of memory the log holds: the pages spanned by [begin, tail). */
size_t slash_lss_memory(const slash_lss *l);

#ifdef __cplusplus
}
#endif
#endif
