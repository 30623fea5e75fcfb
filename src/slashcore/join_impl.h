/* join_impl.h - the record format and internals of the join state store,
 * private to the join's own sources in the core.
 *
 * The log of a partition holds two kinds of 8-byte-aligned records, both
 * opening with the same 16-byte header so a region can be walked record by
 * record:
 *   GROUP  one (window or session, key): bounds [win, end), the key, and
 *          per side the head of a list of chunks and a row count;
 *   CHUNK  up to `cap` rows of one side (row_bytes[side] bytes each) of one
 *          group; `group` is the chunk's address minus its group's address,
 *          so a peer finds the group inside a shipped region.
 * A group's append-set of side s is the multiset of the rows of every chunk
 * on its list. Chunk capacities double (INITIAL_ROWS up to max_rows[s]), so
 * a set costs O(log n + n/max) records and at most about half of its last
 * chunk is slack.
 *
 * Local fields, ignored by peers and changeable while a span is shipped:
 * `link` (group: next older group of its hash chain; chunk: next chunk of its
 * list), and head and rows of a group. Everything else of a sealed
 * record is immutable until reset.
 *
 * Invariants: a live group is reachable from the index and its chunks are
 * live and on its lists; every chunk of a group in the mutable span (at or
 * above read_only) is in the mutable span; without a sealed delta each
 * tumbling (window, key) has at most one live group; live session groups of
 * one key neither overlap nor touch in the mutable span; a chunk's `group` always names
 * its group (rewritten when a session is fused into another).
 */
#ifndef SLASH_JOIN_IMPL_H
#define SLASH_JOIN_IMPL_H

#include <assert.h>
#include <stdbool.h>
#include <string.h>

#include "slash/hash_index.h"
#include "slash/join.h"
#include "slash/lss.h"
#include "ssb_impl.h" /* the key hashes (ssb_hash_i64, ssb_hash_bytes, ssb_mix) */

#define JOIN_MAGIC 0x4A
#define JOIN_GROUP 1
#define JOIN_CHUNK_LEFT 2  /* JOIN_CHUNK_LEFT + side */
#define JOIN_FREED 0x01    /* emitted, fused away or merged; skipped everywhere */
#define JOIN_INITIAL_ROWS 1
#define JOIN_CHUNK_BYTES ((uint32_t)64 << 10) /* rows per chunk stop doubling here */
#define JOIN_MAX_ROWS_NOCOLS ((uint32_t)1 << 20) /* a side without columns */

typedef struct join_rec {
    uint64_t link;  /* local: see above */
    uint32_t size;  /* bytes of the whole record */
    uint8_t kind;   /* JOIN_GROUP or JOIN_CHUNK_LEFT + side */
    uint8_t flags;  /* JOIN_FREED */
    uint8_t schema; /* fingerprint of the store config; peers must match */
    uint8_t magic;  /* JOIN_MAGIC */
} join_rec;
static_assert(sizeof(join_rec) == 16, "record header is shipped to peers");
static_assert(offsetof(join_rec, size) == offsetof(epoch_log_head, size) &&
              offsetof(join_rec, flags) == offsetof(epoch_log_head, flags) &&
              JOIN_FREED == EPOCH_LOG_FREED, "a record begins with epoch_log_head");

typedef struct join_group {
    join_rec h;
    int64_t win;      /* window start, or session start */
    int64_t end;      /* window end, or session end (last row + gap) */
    uint64_t head[2]; /* local: first chunk of each side (takes new rows), 0 = none */
    uint64_t rows[2]; /* local: rows of each side */
    uint32_t key_len; /* key bytes (8 for int64 keys); the key follows, zero-padded */
    uint32_t pad;
} join_group;
static_assert(sizeof(join_group) == 72, "group record is shipped to peers");

typedef struct join_chunk {
    join_rec h;
    int64_t group; /* this chunk's address minus its group's address */
    uint32_t rows; /* rows filled */
    uint32_t cap;  /* rows of room; the rows follow */
} join_chunk;
static_assert(sizeof(join_chunk) == 32, "chunk record is shipped to peers");

/* join_dir.c: a partition's tumbling groups listed by window end. */
typedef struct join_dir_win {
    int64_t end;    /* window end of every group listed */
    uint64_t *addr; /* group addresses in the partition's log (some may be stale) */
    size_t n, cap;
} join_dir_win;

typedef struct join_dir {
    join_dir_win *wins; /* one per window end, unordered */
    uint32_t n;
    size_t cap;         /* wins allocated (slash_buf_grow) */
    uint32_t last;      /* the list the last reserve found */
} join_dir;

typedef struct join_part {
    slash_lss log;
    slash_hidx index;
    join_dir dir;         /* tumbling stores only */
    uint64_t groups;      /* live groups */
    uint64_t chunks;      /* live chunks */
    uint64_t rows[2];     /* live rows per side */
    uint64_t freed_bytes; /* bytes of FREED records in [begin, tail) */
    /* A partition whose emitted watermark differs from the store's (held
     * from an emit, or handed over from another leader: join_move.c):
     * own_wm, and wm is it; otherwise the store's watermark is the
     * partition's. Rows of windows closed at it are late. */
    bool own_wm;
    int64_t wm;
} join_part;

struct slash_join {
    slash_join_config cfg;
    bool session;
    bool sealed;
    uint8_t schema;
    uint32_t row_bytes[2];
    uint32_t max_rows[2]; /* rows per chunk at most */
    join_part *parts;
    uint64_t epoch;
    uint64_t late;
    int64_t watermark;
};

/* The emitted watermark of partition p: windows closed at it were emitted. */
static inline int64_t join_part_wm(const slash_join *s, const join_part *p)
{
    return p->own_wm ? p->wm : s->watermark;
}

static inline uint32_t join_round8(uint32_t x) { return (x + 7u) & ~7u; }

static inline void *join_ptr(const join_part *p, uint64_t a) { return slash_lss_ptr(&p->log, a); }

static inline uint64_t join_addr(const join_part *p, const void *r)
{
    return slash_lss_addr(&p->log, r);
}

/* The live group a directory entry of list w names, or NULL when the entry
 * is stale (below the log's begin, or the group freed). */
static inline join_group *join_dir_group(const join_part *p, const join_dir_win *w, size_t i)
{
    uint64_t a = w->addr[i];
    if (a < p->log.begin || a >= p->log.tail)
        return NULL;
    join_group *g = join_ptr(p, a);
    return (g->h.flags & JOIN_FREED) ? NULL : g;
}

static inline uint8_t *join_group_key(join_group *g) { return (uint8_t *)(g + 1); }

static inline uint32_t join_group_size(uint32_t key_len)
{
    return (uint32_t)sizeof(join_group) + join_round8(key_len);
}

static inline uint8_t *join_chunk_rows(join_chunk *c) { return (uint8_t *)(c + 1); }

/* Bytes of a chunk of `cap` rows of side `side` (64-bit: also used to
 * validate peers' records). */
static inline uint64_t join_chunk_size(const slash_join *s, int side, uint64_t cap)
{
    return sizeof(join_chunk) + cap * s->row_bytes[side];
}

static inline uint64_t join_key_hash(const slash_join *s, const uint8_t *key, uint32_t key_len)
{
    if (s->cfg.key_type == SLASH_KEY_INT64) {
        int64_t k;
        memcpy(&k, key, 8);
        return ssb_hash_i64(k);
    }
    return ssb_hash_bytes(key, key_len);
}

/* Index hash of a group: the key hash alone for sessions (all sessions of a
 * key share a chain), else mixed with the window start. */
static inline uint64_t join_hash_win(const slash_join *s, uint64_t kh, int64_t win)
{
    return s->session ? kh : kh ^ ((uint64_t)win * UINT64_C(0x9e3779b97f4a7c15));
}

static inline uint32_t join_part_of(const slash_join *s, uint64_t kh)
{
    if (s->cfg.partitions == 1)
        return 0;
    return (uint32_t)(((ssb_mix(kh + 0x632be59bd9b4e019ULL) >> 32) * s->cfg.partitions) >> 32);
}

/* Finds the mutable group of (win, key) (tumbling) or fuses every mutable
 * session of key overlapping or touching [win, end) (g.win <= end and
 * win <= g.end) into one that covers it (session),
 * creating the group when there is none. Returns it, or NULL with *st set
 * (SLASH_ENOMEM). */
join_group *join_upsert(slash_join *s, join_part *p, uint64_t kh, int64_t win, int64_t end,
                        const uint8_t *key, uint32_t key_len, slash_status *st);

/* Returns room for one more row of `side` in g (its head chunk, or a new
 * one), counted as filled, or NULL with *st set. */
uint8_t *join_row_slot(slash_join *s, join_part *p, join_group *g, int side, slash_status *st);

/* Appends n rows of `side` (contiguous, any alignment) to g. */
slash_status join_append_rows(slash_join *s, join_part *p, join_group *g, int side,
                              const uint8_t *src, uint64_t n);

/* join_dir.c. reserve: the list of window end `end` (created when new)
 * with room for one more address, or SLASH_ENOMEM; push fills it.
 * drop_closed frees the lists of windows closed at up_to; prune drops the
 * entries below the log's begin; bytes: memory. */
slash_status join_dir_reserve(join_dir *d, int64_t end, join_dir_win **out);
static inline void join_dir_push(join_dir_win *w, uint64_t addr) { w->addr[w->n++] = addr; }
void join_dir_drop_closed(join_dir *d, const slash_window *win, int64_t up_to);
void join_dir_prune(join_dir *d, uint64_t begin); /* drops entries below begin, empty lists */
void join_dir_free(join_dir *d);
size_t join_dir_bytes(const join_dir *d);

/* Marks a live group and all its chunks FREED. */
void join_free_group(join_part *p, join_group *g);

/* join_band.c: an emit under the config's band (slash_join_config.band).
 * A right row of a group as the band sees it: its band time and its row. */
typedef struct join_band_row {
    int64_t t;
    const uint8_t *row;
} join_band_row;

/* Pairs of g inside the band, with g's right rows sorted by band time into
 * `right` (room for g->rows[1]). */
size_t join_band_pairs(const slash_join *s, const join_part *p, const join_group *g,
                       join_band_row *right);

/* Writes the pairs of g inside the band at row r->rows, left-major (each
 * left row's matches in band-time order); `right` holds what
 * join_band_pairs left there for g. */
void join_band_fill(const slash_join *s, const join_part *p, join_group *g,
                    const join_band_row *right, slash_join_result *r);

/* join_epoch.c: validates a region in merge_delta's format in full
 * (SLASH_EPROTO naming the offset), and merges a validated one (rows of
 * windows closed at their partition's emitted watermark are late). */
slash_status join_check_region(const slash_join *s, const uint8_t *p, size_t len);
slash_status join_merge_region(slash_join *s, const uint8_t *p, size_t len);

/* Partition setup/teardown; trim advances begin over the FREED prefix and
 * compacts when most of the log is freed (only without a sealed delta). */
slash_status join_part_init(slash_join *s, join_part *p);
void join_part_destroy(join_part *p);
slash_status join_part_trim(slash_join *s, join_part *p);

#endif
