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
 * ship without copying.
 *
 * Address space is reserved lazily and grows: an idle log holds no mapping at
 * all (base points at a static empty block; nothing is ever read through it),
 * the first append reserves `hint` bytes, and an append that finds the
 * reservation full extends it in place (a fixed, non-replacing mapping right
 * after it; never a move, so pointers into the log stay valid across appends)
 * when the address space there is free. Compaction into a fresh log (the
 * store's own, at an epoch boundary) sizes it from the live data
 * (slash_lss_next_reserve), so a partition outgrowing its first reservation
 * moves to a bigger one there. The default hint is a per-store budget of
 * address space split among its partitions (slash_lss_default_reserve): 64 GiB
 * for one partition, 1 GiB each for 4,096. The first 2 MiB of a reservation
 * use normal pages (a small log costs a few KiB, not a huge page), and so
 * does all of a log marked small_pages (one filled at once, as an imported
 * partition: its pages are faulted in ahead with slash_lss_prefault).
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
#define SLASH_LSS_DEFAULT_RESERVE ((size_t)64 << 30) /* virtual bytes of a one-partition log */
#define SLASH_LSS_MAX_RESERVE ((size_t)64 << 30) /* largest reservation growth asks for */
#define SLASH_LSS_STORE_BUDGET ((size_t)4 << 40) /* default address space per store */
#define SLASH_LSS_MIN_RESERVE ((size_t)64 << 20) /* smallest default reservation */
#define SLASH_LSS_KEEP ((uint64_t)32 << 20) /* faulted bytes an emptied log keeps for reuse */
#define SLASH_LSS_ADDR_LIMIT ((uint64_t)1 << 46) /* addresses fit the index's 48 bits with room */

typedef struct slash_lss {
    uint8_t *base;     /* start of the reservation; record at address a is base + a - shift */
    size_t reserved;   /* virtual bytes reserved (0 until the first append) */
    size_t hint;       /* bytes the first reservation asks for */
    uint64_t begin;
    uint64_t read_only;
    uint64_t tail;
    uint64_t released; /* pages below base + released were given back */
    uint64_t shift;    /* address minus offset in the reservation */
    int small_pages;   /* set before the first append: no huge-page advice (a huge
                        * page fault may compact memory first: slow to fault in) */
} slash_lss;

/* Sets up an empty log that will reserve `reserve` virtual bytes at its first
 * append (0 = SLASH_LSS_DEFAULT_RESERVE). Maps nothing, so it cannot fail
 * today; it returns a status for callers written against a reserving init.
 * The caller owns the log and calls slash_lss_destroy(). */
slash_status slash_lss_init(slash_lss *l, size_t reserve);

/* Default reservation of one partition's log in a store of `partitions`:
 * SLASH_LSS_STORE_BUDGET / partitions, within [SLASH_LSS_MIN_RESERVE,
 * SLASH_LSS_DEFAULT_RESERVE]. Cannot fail. */
size_t slash_lss_default_reserve(uint32_t partitions);

/* Reservation for a fresh log that will receive l's live records (compaction):
 * l's reservation (or hint), doubled until it is at least four times the live
 * bytes, capped at SLASH_LSS_MAX_RESERVE. Cannot fail. */
size_t slash_lss_next_reserve(const slash_lss *l);

/* The append slow path: reserves the log's first mapping, or extends the
 * reservation in place so `size` more bytes fit. SLASH_ENOMEM (with a detail)
 * when the address space after the reservation is taken or the kernel refuses;
 * the log is unchanged then. */
slash_status slash_lss_grow(slash_lss *l, uint32_t size);

/* Best effort: faults in the `bytes` bytes after the tail now, in one call,
 * so appends of about that much data find their pages ready (reserving
 * first if needed). Never fails: a kernel that cannot do it leaves the
 * pages to be faulted on first use. */
void slash_lss_prefault(slash_lss *l, uint32_t bytes);

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
 * reservation is used, or addresses near the index's limit. A log with no
 * reservation yet is never crowded. */
static inline int slash_lss_crowded(const slash_lss *l)
{
    return (l->reserved && slash_lss_extent(l) > l->reserved / 2) || l->tail > SLASH_LSS_ADDR_LIMIT;
}

/* Appends `size` bytes (a multiple of 8) at the tail and returns their
 * address in *addr; the bytes are zero the first time a page is used. The
 * first append reserves; a full reservation is extended in place (see above).
 * Never moves the log. Fails with SLASH_ENOMEM when it cannot grow. */
static inline slash_status slash_lss_append(slash_lss *l, uint32_t size, uint64_t *addr)
{
    if (__builtin_expect(slash_lss_extent(l) + size > l->reserved, 0)) {
        slash_status st = slash_lss_grow(l, size);
        if (st != SLASH_OK)
            return st;
    }
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
