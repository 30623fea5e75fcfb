/* ssb_impl.h - the record format and internals of the state backend, private
 * to the core (ssb.c, ssb_epoch.c, ssb_emit.c).
 *
 * A record in the log, 8-byte aligned, self-describing so a peer can merge it:
 *   slash_rec header (24 bytes)
 *   [int64 session end]            session windows only
 *   key (key_len bytes, zero-padded to a multiple of 8)
 *   partials, one per aggregate, in config order (8 or 16 bytes each, 2^p
 *   for a sketch; at most SLASH_SSB_PARTIALS_MAX in all)
 * `prev` is local chain metadata: peers ignore it and it may change while a
 * sealed span is being shipped. Every other byte of a sealed record is
 * immutable until reset. Invariants: a live (not FREED) record is reachable
 * from the index; chain addresses strictly decrease; without a sealed delta
 * each (window, key) has at most one live record and all live records are in
 * the mutable span; live session records of one key neither overlap nor
 * touch (one's end equal to another's start) in the mutable span.
 */
#ifndef SLASH_SSB_IMPL_H
#define SLASH_SSB_IMPL_H

#include <assert.h>
#include <stdbool.h>
#include <string.h>

#include "epoch_log.h"
#include "slash/hash_index.h"
#include "slash/lss.h"
#include "slash/mix.h"
#include "slash/ssb.h"

#define SLASH_REC_MAGIC 0xA5
#define SLASH_REC_FREED 0x01 /* emitted or merged away; skipped everywhere */

typedef struct slash_rec {
    uint64_t prev;    /* local: next older record of the hash chain, < begin = end */
    uint32_t size;    /* bytes of the whole record */
    uint8_t key_len;  /* key bytes (8 for int64 keys) */
    uint8_t flags;    /* SLASH_REC_FREED */
    uint8_t schema;   /* fingerprint of the store config; peers must match */
    uint8_t magic;    /* SLASH_REC_MAGIC */
    int64_t win;      /* slice start, or session start */
} slash_rec;
static_assert(sizeof(slash_rec) == 24, "record header is shipped to peers");
static_assert(offsetof(slash_rec, size) == offsetof(epoch_log_head, size) &&
              offsetof(slash_rec, flags) == offsetof(epoch_log_head, flags) &&
              SLASH_REC_FREED == EPOCH_LOG_FREED, "a record begins with epoch_log_head");

#define SSB_SCRATCH_RECS 32

typedef struct ssb_part {
    slash_lss log;
    slash_hidx index;
    uint64_t live;        /* live records in this partition */
    uint64_t freed_bytes; /* bytes of FREED records in [begin, tail) */
    /* A partition whose emitted watermark differs from the store's (held
     * from an emit, or handed over from another leader): own_wm, and wm is
     * it; otherwise the store's watermark is the partition's. */
    bool own_wm;
    int64_t wm;
    /* A lower bound of the earliest emit time at which an emit touches a
     * live record here (ssb_rec_due; INT64_MAX: no live record), so an emit
     * before it skips the partition's scan. Lowered as records become live
     * (append_rec, ssb_part_bulk_link), set exact by each emit's scan; never
     * above any live record's due. */
    int64_t due;
} ssb_part;

struct slash_ssb {
    slash_ssb_config cfg;
    bool session;
    bool sealed;
    uint8_t schema;
    uint32_t key_off;             /* key offset in a record */
    uint32_t agg_bytes;           /* bytes of all partials */
    uint32_t agg_off[SLASH_SSB_MAX_AGGS];
    uint8_t *zero;                /* the partials' zero values (agg_bytes, 8-aligned) */
    /* SSB_SCRATCH_RECS records of the largest size (a byte key of
     * SLASH_SSB_KEY_MAX bytes), 8-aligned: where a record read from an
     * unaligned region or a checkpoint blob is copied to */
    uint8_t *scratch;
    uint32_t rec_max;
    ssb_part *parts;
    uint64_t epoch;
    uint64_t late;
    int64_t watermark;
};

static inline uint64_t ssb_mix(uint64_t x) { return slash_mix64(x); }

static inline uint64_t ssb_hash_i64(int64_t k) { return ssb_mix((uint64_t)k ^ UINT64_C(0x243f6a8885a308d3)); }

static inline uint64_t ssb_hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = UINT64_C(0x9e3779b97f4a7c15) ^ (n * UINT64_C(0x100000001b3));
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * UINT64_C(0xbf58476d1ce4e5b9);
        h ^= h >> 31;
        p += 8, n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h = (h ^ w) * UINT64_C(0x94d049bb133111eb);
    }
    return ssb_mix(h);
}

/* Index hash of (window, key): key hash alone for sessions (all sessions of
 * a key share a chain), else mixed with the slice start. */
static inline uint64_t ssb_hash_win(const slash_ssb *s, uint64_t kh, int64_t win)
{
    return s->session ? kh : kh ^ ((uint64_t)win * UINT64_C(0x9e3779b97f4a7c15));
}

/* The partition of a key hash among `parts` (the executor uses it too, to
 * find the partitions it leads). */
static inline uint32_t ssb_part_of_n(uint32_t parts, uint64_t kh)
{
    if (parts == 1)
        return 0;
    return (uint32_t)(((ssb_mix(kh + 0x632be59bd9b4e019ULL) >> 32) * parts) >> 32);
}

static inline uint32_t ssb_part_of(const slash_ssb *s, uint64_t kh)
{
    return ssb_part_of_n(s->cfg.partitions, kh);
}

/* The emitted watermark of partition p: windows closed at it were emitted. */
static inline int64_t ssb_part_wm(const slash_ssb *s, const ssb_part *p)
{
    return p->own_wm ? p->wm : s->watermark;
}

static inline uint32_t ssb_round8(uint32_t x) { return (x + 7u) & ~7u; }

static inline uint32_t ssb_rec_size(const slash_ssb *s, uint32_t key_len)
{
    return s->key_off + ssb_round8(key_len) + s->agg_bytes;
}

static inline uint8_t *ssb_rec_key(const slash_ssb *s, slash_rec *r) { return (uint8_t *)r + s->key_off; }

static inline uint8_t *ssb_rec_partials(const slash_ssb *s, slash_rec *r)
{
    return (uint8_t *)r + s->key_off + ssb_round8(r->key_len);
}

static inline int64_t *ssb_rec_session_end(slash_rec *r) { return (int64_t *)(r + 1); }

static inline uint64_t ssb_rec_key_hash(const slash_ssb *s, slash_rec *r)
{
    if (s->cfg.key_type == SLASH_KEY_INT64) {
        int64_t k;
        memcpy(&k, ssb_rec_key(s, r), 8);
        return ssb_hash_i64(k);
    }
    return ssb_hash_bytes(ssb_rec_key(s, r), r->key_len);
}

/* End of the window state held by a record (session end or slice end). */
static inline int64_t ssb_rec_end(const slash_ssb *s, slash_rec *r)
{
    return s->session ? *ssb_rec_session_end(r) : slash_window_slice_end(&s->cfg.window, r->win);
}

/* The earliest emit time at which an emit touches record r, or a lower
 * bound of it: its window closes (slash_window_closed) at end <= up_to for
 * slices, end < up_to for sessions (or up_to == INT64_MAX, which saturating
 * end + 1 never exceeds). A sliding slice is touched once its first window
 * ends, which is at or after the slice's own end: the cheap bound taken here
 * (the emit's scan computes it exactly). */
static inline int64_t ssb_rec_due(const slash_ssb *s, slash_rec *r)
{
    return s->session ? slash_sat_add(*ssb_rec_session_end(r), 1)
                      : slash_window_slice_end(&s->cfg.window, r->win);
}

static inline void ssb_part_lower_due(ssb_part *p, int64_t due)
{
    if (due < p->due)
        p->due = due;
}

/* Finds or creates the mutable record of (win, key) in a non-session
 * partition and returns its partials, or NULL with *st set (SLASH_ENOMEM). */
uint8_t *ssb_upsert(slash_ssb *s, ssb_part *p, uint64_t hash, int64_t win, const uint8_t *key,
                    uint32_t key_len, slash_status *st);

/* Merges the session [start, end) of key into the partition, fusing every
 * mutable session of the key it overlaps or touches (r.start <= end and
 * start <= r.end); returns the partials to update. */
uint8_t *ssb_upsert_session(slash_ssb *s, ssb_part *p, uint64_t kh, int64_t start, int64_t end,
                            const uint8_t *key, uint32_t key_len, slash_status *st);

/* Merges partials src into dst (both laid out as s's config). */
void ssb_merge_partials(const slash_ssb *s, uint8_t *dst, const uint8_t *src);

/* Checks that a region (a delta, a hand-over fragment) from elsewhere holds
 * whole records of this store's schema (SLASH_EPROTO naming the offset). */
slash_status ssb_check_region(const slash_ssb *s, const uint8_t *p, size_t len);

/* Marks a live record FREED. */
void ssb_free_rec(ssb_part *p, slash_rec *r);

/* Partition setup/teardown and log compaction (copies live records into a
 * fresh log and rebuilds the index; only without a sealed delta). */
slash_status ssb_part_init(slash_ssb *s, ssb_part *p);
void ssb_part_destroy(ssb_part *p);
slash_status ssb_part_compact(slash_ssb *s, ssb_part *p);

/* Advances begin over the FREED prefix of the log; compacts when most of
 * the log is freed. Only without a sealed delta. */
slash_status ssb_part_trim(slash_ssb *s, ssb_part *p);

/* Bulk loading of an empty, unsealed partition (checkpoint restore):
 * _reserve sizes p's index once for `records` live records; the caller then
 * appends complete records to the log from address `from` on, each with its
 * index hash (ssb_hash_win of its key hash and window) in `prev`,
 * and _link links every record in [from, tail) as its chain's head, without
 * lookups, counting them live. _link refuses (SLASH_EINVAL) a (window, key)
 * met twice, or two overlapping or touching sessions of a key (found only
 * among the records of a bucket whose tags match, so cheaply), and
 * SLASH_ENOMEM; after a failure the caller calls _abort, which empties the
 * partition again (log back to `from`, a fresh index). */
slash_status ssb_part_bulk_reserve(slash_ssb *s, ssb_part *p, uint64_t records);
slash_status ssb_part_bulk_link(slash_ssb *s, ssb_part *p, uint64_t from);
void ssb_part_bulk_abort(slash_ssb *s, ssb_part *p, uint64_t from);

#endif
