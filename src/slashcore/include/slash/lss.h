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

typedef struct slash_lss {
    uint8_t *base;     /* start of the reservation; record at address a is base + a */
    size_t reserved;   /* virtual bytes reserved */
    uint64_t begin;
    uint64_t read_only;
    uint64_t tail;
    uint64_t released; /* pages below this address were given back */
} slash_lss;

/* Reserves `reserve` virtual bytes (0 = default). Fails with SLASH_ENOMEM.
 * The caller owns the log and calls slash_lss_destroy(). */
slash_status slash_lss_init(slash_lss *l, size_t reserve);

/* Unmaps; safe on a zeroed or destroyed log. */
void slash_lss_destroy(slash_lss *l);

/* Pointer to the record at address a (no bounds check: a comes from the log). */
static inline void *slash_lss_ptr(const slash_lss *l, uint64_t a) { return l->base + a; }

/* Appends `size` bytes (a multiple of 8) at the tail and returns their
 * address in *addr; the bytes are zero the first time a page is used. Fails
 * with SLASH_ENOMEM when the reservation is full. */
static inline slash_status slash_lss_append(slash_lss *l, uint32_t size, uint64_t *addr)
{
    if (l->tail + size > l->reserved)
        return slash_fail(SLASH_ENOMEM, "log reservation of %zu bytes is full", l->reserved);
    *addr = l->tail;
    l->tail += size;
    return SLASH_OK;
}

/* Moves begin up to a (begin <= a <= read_only) and gives whole pages below
 * it back to the system. */
void slash_lss_truncate(slash_lss *l, uint64_t a);

/* Bytes of memory the log holds: the pages spanned by [begin, tail). */
size_t slash_lss_memory(const slash_lss *l);

#ifdef __cplusplus
}
#endif
#endif
