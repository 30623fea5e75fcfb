/* epoch_log.h - the epoch protocol both stores (ssb: aggregates, join: rows)
 * follow over their partitions' logs, in one place.
 *
 * An epoch: begin_epoch seals every partition's log ([begin, tail) becomes the
 * delta: epoch_log_begin), delta hands one partition's sealed span out
 * (epoch_log_delta), and reset_delta does the store's own accounting of the
 * shipped records, then drops them and the freed records after them from the
 * log's front (epoch_log_trim). While a delta is sealed the store refuses to
 * emit (epoch_log_emit_ok), since emitting frees records the delta ships.
 *
 * Invariant: every record of a store's log begins with epoch_log_head's layout
 * (slash_rec and join_rec assert it in their impl headers), so the trim walks
 * either store's records; EPOCH_LOG_FREED is the "emitted or merged away"
 * flag of both. Internal to the core: not installed, not in the bindings.
 */
#ifndef SLASH_EPOCH_LOG_H
#define SLASH_EPOCH_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slash/lss.h"
#include "slash/status.h"

#define EPOCH_LOG_FREED 0x01

typedef struct epoch_log_head {
    uint64_t link;  /* the store's own chain word */
    uint32_t size;  /* bytes of the whole record */
    uint8_t tag;    /* the store's own (key length, record kind) */
    uint8_t flags;  /* EPOCH_LOG_FREED */
    uint8_t schema; /* fingerprint of the store config */
    uint8_t magic;  /* the store's record magic */
} epoch_log_head;

/* A store's partition logs: partition i's is at `first` + i * `stride` bytes
 * (the `log` field of each element of the store's parts array). */
typedef struct epoch_logs {
    slash_lss *first;
    size_t stride;
    uint32_t n;
} epoch_logs;

#define EPOCH_LOGS(s) \
    ((epoch_logs){(slash_lss *)&(s)->parts[0].log, sizeof (s)->parts[0], (s)->cfg.partitions})

static inline slash_lss *epoch_logs_at(epoch_logs ls, uint32_t i)
{
    return (slash_lss *)(void *)((uint8_t *)ls.first + (size_t)i * ls.stride);
}

/* begin_epoch: refuses when the last delta was not reset, else seals every
 * log (its [begin, tail) is the epoch's delta), marks the store sealed and
 * counts the epoch. */
static inline slash_status epoch_log_begin(bool *sealed, uint64_t *epoch, epoch_logs ls)
{
    if (*sealed)
        return slash_fail(SLASH_ESTATE, "begin_epoch: the delta of epoch %llu was not reset",
                          (unsigned long long)*epoch);
    for (uint32_t i = 0; i < ls.n; i++) {
        slash_lss *l = epoch_logs_at(ls, i);
        l->read_only = l->tail;
    }
    *sealed = true;
    ++*epoch;
    return SLASH_OK;
}

/* delta: partition `part`'s sealed delta as one span of its log. */
static inline slash_status epoch_log_delta(bool sealed, epoch_logs ls, uint32_t part,
                                           const void **addr, size_t *len)
{
    if (!sealed)
        return slash_fail(SLASH_ESTATE, "delta: no epoch is sealed (call begin_epoch first)");
    if (part >= ls.n)
        return slash_fail(SLASH_ERANGE, "delta: partition %u of %u", part, ls.n);
    const slash_lss *l = epoch_logs_at(ls, part);
    *addr = slash_lss_ptr(l, l->begin);
    *len = (size_t)(l->read_only - l->begin);
    return SLASH_OK;
}

/* emit's check: the store must not hold a sealed delta. */
static inline slash_status epoch_log_emit_ok(bool sealed, uint64_t epoch)
{
    return sealed ? slash_fail(SLASH_ESTATE, "emit: the delta of epoch %llu is sealed; reset it "
                               "first", (unsigned long long)epoch)
                  : SLASH_OK;
}

/* After reset_delta's accounting: drops the freed records at the log's front
 * (their bytes leave *freed_bytes), unseals the log, and says whether it is
 * due for compaction (over half of 4+ MiB freed, or the log crowded). */
static inline bool epoch_log_trim(slash_lss *l, uint64_t *freed_bytes)
{
    uint64_t a = l->begin;
    while (a < l->tail) {
        const epoch_log_head *r = slash_lss_ptr(l, a);
        if (!(r->flags & EPOCH_LOG_FREED))
            break;
        *freed_bytes -= r->size;
        a += r->size;
    }
    slash_lss_truncate(l, a);
    l->read_only = l->begin;
    uint64_t used = l->tail - l->begin;
    return (*freed_bytes > used / 2 && used > ((uint64_t)4 << 20)) || slash_lss_crowded(l);
}

#endif
