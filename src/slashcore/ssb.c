/* ssb.c - the state backend's store: opening, the upsert of (window, key)
 * records through the hash index, index growth, compaction, and the batch
 * update loop (ssb.h; record format and invariants in ssb_impl.h).
 *
 * Growth: a partition's index doubles when it holds more than
 * SSB_LOAD live records per bucket, rebuilt by one scan of the log (which
 * re-creates the chains newest first); the log grows page by page. So
 * nothing is sized in advance and memory stays proportional to live records.
 */
#include "ssb_impl.h"

#include <stdlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define SSB_LOAD 4                /* live records per bucket before doubling */
#define SSB_INITIAL_BUCKETS 1024
#define SSB_PREFETCH_MIN ((size_t)4 << 20) /* prefetch when a partition exceeds this */
/* ... or when all partitions together exceed this: a state spread over many
 * partitions (100 k keys in 256 partitions, ~60 KiB each) no more fits in a
 * core's L2 than one large partition does */
#define SSB_PREFETCH_STATE ((size_t)2 << 20)
#define SSB_CHUNK 32

/* ---- records ------------------------------------------------------------ */

void ssb_merge_partials(const slash_ssb *s, uint8_t *dst, const uint8_t *src)
{
    for (uint32_t j = 0; j < s->cfg.naggs; j++)
        slash_crdt_merge(s->cfg.aggs[j], dst + s->agg_off[j], src + s->agg_off[j]);
}

void ssb_free_rec(ssb_part *p, slash_rec *r)
{
    r->flags |= SLASH_REC_FREED;
    p->live--;
    p->freed_bytes += r->size;
}

static inline bool key_eq(const slash_ssb *s, slash_rec *r, const uint8_t *key, uint32_t key_len)
{
    if (s->cfg.key_type == SLASH_KEY_INT64) {
        uint64_t a, b;
        memcpy(&a, ssb_rec_key(s, r), 8);
        memcpy(&b, key, 8);
        return a == b;
    }
    return r->key_len == key_len && memcmp(ssb_rec_key(s, r), key, key_len) == 0;
}

/* Makes the record at addr the head of hash's chain in entry e (claimed
 * for hash): it links to the old head when that is of the same tag. */
static inline void link_head(slash_hidx_entry *e, slash_rec *r, uint64_t addr, uint64_t hash,
                             uint64_t begin)
{
    uint64_t head = slash_hidx_addr(e->word);
    bool same_tag = head >= begin &&
                    ((e->word >> SLASH_HIDX_TAG_SHIFT) & SLASH_HIDX_TAG_MASK) == slash_hidx_tag(hash);
    r->prev = same_tag ? head : 0;
    e->word = slash_hidx_make(addr, hash);
}

/* Appends a fresh record with zero partials; links it at the head of its
 * chain. Returns the record or NULL with *st set. */
static slash_rec *append_rec(slash_ssb *s, ssb_part *p, uint64_t hash, int64_t win, int64_t end,
                             const uint8_t *key, uint32_t key_len, slash_status *st)
{
    slash_hidx_entry *e;
    uint64_t addr = 0;
    uint32_t size = ssb_rec_size(s, key_len);
    if ((*st = slash_lss_append(&p->log, size, &addr)) != SLASH_OK)
        return NULL;
    if ((*st = slash_hidx_claim(&p->index, hash, p->log.begin, &e)) != SLASH_OK) {
        p->log.tail -= size;
        return NULL;
    }
    slash_rec *r = slash_lss_ptr(&p->log, addr);
    r->size = size;
    r->key_len = (uint8_t)key_len;
    r->flags = 0;
    r->schema = s->schema;
    r->magic = SLASH_REC_MAGIC;
    r->win = win;
    if (s->session)
        *ssb_rec_session_end(r) = end;
    uint8_t *k = ssb_rec_key(s, r);
    memset(k, 0, ssb_round8(key_len));
    memcpy(k, key, key_len);
    memcpy(ssb_rec_partials(s, r), s->zero, s->agg_bytes);
    link_head(e, r, addr, hash, p->log.begin);
    p->live++;
    ssb_part_lower_due(p, ssb_rec_due(s, r));
    return r;
}

/* Rebuilds the index of p with nbuckets buckets from a scan of its log, in
 * chunks: hash the next records and prefetch their buckets, then link them
 * (each link is a random access into an index larger than the cache). */
static slash_status rebuild_index(slash_ssb *s, ssb_part *p, uint64_t nbuckets)
{
    slash_hidx fresh;
    slash_status st = slash_hidx_init(&fresh, nbuckets);
    if (st != SLASH_OK)
        return st;
    slash_lss *l = &p->log;
    uint64_t addr[SSB_CHUNK], hash[SSB_CHUNK];
    for (uint64_t a = l->begin; a < l->tail;) {
        int m = 0;
        while (m < SSB_CHUNK && a < l->tail) {
            slash_rec *r = slash_lss_ptr(l, a);
            if (!(r->flags & SLASH_REC_FREED)) {
                addr[m] = a;
                hash[m] = ssb_hash_win(s, ssb_rec_key_hash(s, r), r->win);
                __builtin_prefetch(slash_hidx_bucket_of(&fresh, hash[m]), 1, 0);
                m++;
            }
            a += r->size;
        }
        for (int j = 0; j < m; j++) {
            slash_hidx_entry *e;
            if ((st = slash_hidx_claim(&fresh, hash[j], l->begin, &e)) != SLASH_OK) {
                slash_hidx_destroy(&fresh);
                return st;
            }
            link_head(e, slash_lss_ptr(l, addr[j]), addr[j], hash[j], l->begin);
        }
    }
    slash_hidx_destroy(&p->index);
    p->index = fresh;
    return SLASH_OK;
}

static inline slash_status maybe_grow(slash_ssb *s, ssb_part *p)
{
    uint64_t nb = slash_hidx_buckets(&p->index);
    if (p->live <= nb * SSB_LOAD)
        return SLASH_OK;
    return rebuild_index(s, p, nb * 2);
}

/* Unlinks the FREED record r from its chain (link: the prev field pointing
 * at r, or NULL when entry e does) and returns the next address to visit.
 * Only the local `prev` words change, so this is safe in a sealed span. */
static inline uint64_t unlink_freed(slash_hidx_entry *e, uint64_t *link, slash_rec *r,
                                    uint64_t hash, uint64_t begin)
{
    uint64_t next = r->prev;
    if (link)
        *link = next;
    else
        e->word = next >= begin ? slash_hidx_make(next, hash) : 0;
    return next;
}

uint8_t *ssb_upsert(slash_ssb *s, ssb_part *p, uint64_t hash, int64_t win, const uint8_t *key,
                    uint32_t key_len, slash_status *st)
{
    const uint64_t begin = p->log.begin;
    slash_hidx_entry *e = slash_hidx_find(&p->index, hash, begin);
    if (e) {
        uint64_t a = slash_hidx_addr(e->word);
        uint64_t *link = NULL; /* prev field that points at a; NULL: the entry */
        while (a >= begin) {
            slash_rec *r = slash_lss_ptr(&p->log, a);
            if (r->flags & SLASH_REC_FREED) {
                a = unlink_freed(e, link, r, hash, begin);
                continue;
            }
            if (r->win == win && key_eq(s, r, key, key_len)) {
                if (a >= p->log.read_only)
                    return ssb_rec_partials(s, r);
                break; /* sealed: start a new record from zero at the tail */
            }
            link = &r->prev;
            a = r->prev;
        }
    }
    slash_rec *r = append_rec(s, p, hash, win, 0, key, key_len, st);
    if (!r)
        return NULL;
    if ((*st = maybe_grow(s, p)) != SLASH_OK)
        return NULL;
    return ssb_rec_partials(s, r);
}

uint8_t *ssb_upsert_session(slash_ssb *s, ssb_part *p, uint64_t kh, int64_t start, int64_t end,
                            const uint8_t *key, uint32_t key_len, slash_status *st)
{
    const uint64_t begin = p->log.begin;
    slash_rec *target = NULL;
    slash_hidx_entry *e = slash_hidx_find(&p->index, kh, begin);
    if (e) {
        uint64_t a = slash_hidx_addr(e->word);
        uint64_t *link = NULL; /* prev field that points at a; NULL: the entry */
        while (a >= begin) {
            slash_rec *r = slash_lss_ptr(&p->log, a);
            if (r->flags & SLASH_REC_FREED) {
                a = unlink_freed(e, link, r, kh, begin);
                continue;
            }
            bool sealed = a < p->log.read_only;
            link = &r->prev;
            a = r->prev;
            if (sealed || !key_eq(s, r, key, key_len))
                continue;
            int64_t *rend = ssb_rec_session_end(r);
            if (!(r->win <= end && start <= *rend))
                continue; /* neither overlaps nor touches the new cover */
            if (!target) {
                target = r;
                continue;
            }
            /* the new cover bridges r and target: fuse r into target */
            int64_t *tend = ssb_rec_session_end(target);
            if (r->win < target->win)
                target->win = r->win;
            if (*rend > *tend)
                *tend = *rend;
            ssb_merge_partials(s, ssb_rec_partials(s, target), ssb_rec_partials(s, r));
            ssb_free_rec(p, r);
        }
    }
    if (target) {
        int64_t *tend = ssb_rec_session_end(target);
        if (start < target->win)
            target->win = start;
        if (end > *tend)
            *tend = end;
        return ssb_rec_partials(s, target);
    }
    target = append_rec(s, p, kh, start, end, key, key_len, st);
    if (!target)
        return NULL;
    if ((*st = maybe_grow(s, p)) != SLASH_OK)
        return NULL;
    return ssb_rec_partials(s, target);
}

/* ---- partitions ----------------------------------------------------------- */

slash_status ssb_part_init(slash_ssb *s, ssb_part *p)
{
    memset(p, 0, sizeof *p);
    p->due = INT64_MAX; /* no live record */
    slash_status st = slash_lss_init(&p->log, s->cfg.log_reserve ? s->cfg.log_reserve
                                                             : slash_lss_default_reserve(s->cfg.partitions));
    if (st != SLASH_OK)
        return st;
    /* many partitions share the keys: start each index smaller (it grows) */
    uint64_t nb = SSB_INITIAL_BUCKETS;
    while (nb > 64 && nb * s->cfg.partitions > ((uint64_t)16 << 10))
        nb /= 2;
    if ((st = slash_hidx_init(&p->index, nb)) != SLASH_OK) {
        slash_lss_destroy(&p->log);
        return st;
    }
    return SLASH_OK;
}

void ssb_part_destroy(ssb_part *p)
{
    slash_lss_destroy(&p->log);
    slash_hidx_destroy(&p->index);
}

slash_status ssb_part_compact(slash_ssb *s, ssb_part *p)
{
    slash_lss fresh;
    slash_status st = slash_lss_init(&fresh, slash_lss_next_reserve(&p->log));
    if (st != SLASH_OK)
        return st;
    for (uint64_t a = p->log.begin; a < p->log.tail;) {
        slash_rec *r = slash_lss_ptr(&p->log, a);
        if (!(r->flags & SLASH_REC_FREED)) {
            uint64_t to = 0;
            if ((st = slash_lss_append(&fresh, r->size, &to)) != SLASH_OK) {
                slash_lss_destroy(&fresh);
                return st;
            }
            memcpy(slash_lss_ptr(&fresh, to), r, r->size);
        }
        a += r->size;
    }
    fresh.read_only = fresh.begin;
    slash_lss old = p->log;
    p->log = fresh;
    uint64_t nb = slash_hidx_buckets(&p->index);
    while (nb > SSB_INITIAL_BUCKETS && p->live < nb / 2 * SSB_LOAD / 2)
        nb /= 2;
    if ((st = rebuild_index(s, p, nb)) != SLASH_OK) {
        p->log = old;
        slash_lss_destroy(&fresh);
        return st;
    }
    slash_lss_destroy(&old);
    p->freed_bytes = 0;
    return SLASH_OK;
}

/* ---- bulk loading (checkpoint restore into an empty partition) ----------- */

slash_status ssb_part_bulk_reserve(slash_ssb *s, ssb_part *p, uint64_t records)
{
    (void)s;
    uint64_t nb = slash_hidx_buckets(&p->index);
    uint64_t want = nb;
    while (want * SSB_LOAD < records && want < ((uint64_t)1 << 40))
        want *= 2;
    if (want == nb)
        return SLASH_OK;
    slash_hidx fresh;
    /* a log filled at once (an import) gets an index faulted in at once too */
    slash_status st = p->log.small_pages ? slash_hidx_init_prefaulted(&fresh, want)
                                         : slash_hidx_init(&fresh, want);
    if (st != SLASH_OK)
        return st;
    slash_hidx_destroy(&p->index);
    p->index = fresh;
    return SLASH_OK;
}

/* A record already in r's chain with r's (window, key), or for sessions a
 * session of r's key that overlaps or touches r's; NULL if none. */
static slash_rec *bulk_clash(slash_ssb *s, ssb_part *p, slash_rec *r, uint64_t a)
{
    const uint64_t begin = p->log.begin;
    for (; a >= begin && a; ) {
        slash_rec *o = slash_lss_ptr(&p->log, a);
        if (key_eq(s, o, ssb_rec_key(s, r), r->key_len)) {
            if (s->session ? (o->win <= *ssb_rec_session_end(r) && r->win <= *ssb_rec_session_end(o))
                           : o->win == r->win)
                return o;
        }
        a = o->prev;
    }
    return NULL;
}

#define SSB_BULK_AHEAD 24 /* records whose buckets are prefetched ahead of their link */

slash_status ssb_part_bulk_link(slash_ssb *s, ssb_part *p, uint64_t from)
{
    slash_lss *l = &p->log;
    /* a cursor `ahead` records in front prefetches the buckets the linking
     * cursor will claim, so each claim finds its bucket in cache */
    uint64_t ahead = from;
    for (int k = 0; k < SSB_BULK_AHEAD && ahead < l->tail; k++) {
        slash_rec *r = slash_lss_ptr(l, ahead);
        __builtin_prefetch(slash_hidx_bucket_of(&p->index, r->prev), 1, 0);
        ahead += r->size;
    }
    for (uint64_t a = from; a < l->tail;) {
        if (ahead < l->tail) {
            slash_rec *f = slash_lss_ptr(l, ahead);
            __builtin_prefetch(slash_hidx_bucket_of(&p->index, f->prev), 1, 0);
            ahead += f->size;
        }
        slash_rec *r = slash_lss_ptr(l, a);
        uint64_t hash = r->prev; /* the caller's index hash; link_head overwrites it */
        slash_hidx_entry *e;
        slash_status st = slash_hidx_claim(&p->index, hash, l->begin, &e);
        if (st != SLASH_OK)
            return st;
        link_head(e, r, a, hash, l->begin);
        if (r->prev && bulk_clash(s, p, r, r->prev))
            return slash_fail(SLASH_EINVAL, s->session
                              ? "checkpoint: two overlapping sessions of one key"
                              : "checkpoint: one (window, key) twice");
        p->live++;
        ssb_part_lower_due(p, ssb_rec_due(s, r));
        a += r->size;
    }
    return SLASH_OK;
}

void ssb_part_bulk_abort(slash_ssb *s, ssb_part *p, uint64_t from)
{
    p->log.tail = from;
    p->log.read_only = p->log.begin;
    p->live = 0;
    p->due = INT64_MAX;
    (void)s;
    /* the entries may point at addresses >= begin again: clear them in place
     * (no allocation, so this cannot fail) */
    slash_hidx *h = &p->index;
    memset(h->buckets, 0, slash_hidx_buckets(h) * sizeof(slash_hidx_bucket));
    if (h->pool)
        memset(h->pool, 0, h->pool_used * sizeof(slash_hidx_bucket));
    h->pool_used = 1;
}

slash_status ssb_part_trim(slash_ssb *s, ssb_part *p)
{
    return epoch_log_trim(&p->log, &p->freed_bytes) ? ssb_part_compact(s, p) : SLASH_OK;
}

/* ---- open / close / stats ------------------------------------------------ */

slash_status slash_ssb_open(const slash_ssb_config *cfg, slash_ssb **out)
{
    *out = NULL;
    const slash_window *w = &cfg->window;
    if (w->kind < SLASH_WINDOW_TUMBLING || w->kind > SLASH_WINDOW_SESSION || w->size <= 0 ||
        w->slide <= 0 || w->slice <= 0 || w->size % w->slice || w->slide % w->slice)
        return slash_fail(SLASH_EINVAL, "window: not initialised by slash_window_init "
                          "(size must be > 0 ms)");
    if (cfg->key_type != SLASH_KEY_INT64 && cfg->key_type != SLASH_KEY_BYTES)
        return slash_fail(SLASH_EINVAL, "key_type: unknown key type %d", (int)cfg->key_type);
    if (cfg->partitions < 1 || cfg->partitions > SLASH_MAX_PARTITIONS)
        return slash_fail(SLASH_EINVAL, "partitions must be in 1..%u, got %u", SLASH_MAX_PARTITIONS,
                          cfg->partitions);
    if (cfg->naggs > SLASH_SSB_MAX_AGGS)
        return slash_fail(SLASH_EINVAL, "at most %d aggregates, got %u", SLASH_SSB_MAX_AGGS,
                          cfg->naggs);
    slash_ssb *s = calloc(1, sizeof *s);
    if (!s)
        return slash_fail(SLASH_ENOMEM, "state backend");
    s->cfg = *cfg;
    s->session = w->kind == SLASH_WINDOW_SESSION;
    s->key_off = (uint32_t)sizeof(slash_rec) + (s->session ? 8u : 0u);
    uint64_t fp = ssb_mix((uint64_t)w->kind * 31 + (uint64_t)w->size * 131 +
                          (uint64_t)w->slide * 7 + (uint64_t)cfg->key_type);
    size_t total = 0;
    for (uint32_t j = 0; j < cfg->naggs; j++) {
        size_t sz = slash_crdt_size(cfg->aggs[j]);
        if (!sz) {
            free(s);
            return slash_fail(SLASH_EINVAL, "aggregate %u: unknown kind %d", j, (int)cfg->aggs[j]);
        }
        s->agg_off[j] = (uint32_t)total;
        total += sz;
        fp = ssb_mix(fp ^ ((uint64_t)cfg->aggs[j] << (j % 8 * 8)));
    }
    if (total > SLASH_SSB_PARTIALS_MAX) {
        free(s);
        return slash_fail(SLASH_EINVAL, "aggregates: their partial states take %zu bytes a "
                          "record, at most %d", total, SLASH_SSB_PARTIALS_MAX);
    }
    s->agg_bytes = (uint32_t)total;
    s->rec_max = ssb_rec_size(s, SLASH_SSB_KEY_MAX);
    s->zero = calloc(1, total ? total : 8);
    s->scratch = aligned_alloc(8, (size_t)SSB_SCRATCH_RECS * s->rec_max);
    if (!s->zero || !s->scratch) {
        free(s->zero), free(s->scratch), free(s);
        return slash_fail(SLASH_ENOMEM, "state backend");
    }
    for (uint32_t j = 0; j < cfg->naggs; j++)
        slash_crdt_zero(cfg->aggs[j], s->zero + s->agg_off[j]);
    s->schema = (uint8_t)(fp | 1);
    s->watermark = INT64_MIN;
    s->parts = calloc(cfg->partitions, sizeof *s->parts);
    if (!s->parts) {
        free(s->zero), free(s->scratch), free(s);
        return slash_fail(SLASH_ENOMEM, "state backend partitions");
    }
    for (uint32_t i = 0; i < cfg->partitions; i++) {
        slash_status st = ssb_part_init(s, &s->parts[i]);
        if (st != SLASH_OK) {
            s->cfg.partitions = i;
            slash_ssb_close(s);
            return st;
        }
    }
    *out = s;
    return SLASH_OK;
}

void slash_ssb_close(slash_ssb *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->cfg.partitions; i++)
        ssb_part_destroy(&s->parts[i]);
    free(s->parts);
    free(s->zero);
    free(s->scratch);
    free(s);
}

void slash_ssb_get_stats(const slash_ssb *s, slash_ssb_stats *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        const ssb_part *p = &s->parts[i];
        out->records += p->live;
        out->log_bytes += p->log.tail - p->log.begin;
        out->index_bytes += slash_hidx_memory(&p->index);
        out->memory_bytes += slash_lss_memory(&p->log);
    }
    out->memory_bytes += out->index_bytes + sizeof *s + s->cfg.partitions * sizeof(ssb_part);
    out->late = s->late;
    out->epoch = s->epoch;
    out->record_bytes = ssb_rec_size(s, s->cfg.key_type == SLASH_KEY_INT64 ? 8 : 0);
    out->sealed = s->sealed;
}

int64_t slash_ssb_watermark(const slash_ssb *s) { return s->watermark; }

/* ---- batch update ----------------------------------------------------------- */

static inline void apply(const slash_ssb *s, uint8_t *part, const slash_ssb_batch *b, size_t i)
{
    for (uint32_t j = 0; j < s->cfg.naggs; j++) {
        const uint8_t *v = b->values[j] ? (const uint8_t *)b->values[j] + i * 8 : NULL;
        if (slash_crdt_needs_time(s->cfg.aggs[j]))
            slash_crdt_update_at(s->cfg.aggs[j], part + s->agg_off[j], v, b->times[i]);
        else
            slash_crdt_update(s->cfg.aggs[j], part + s->agg_off[j], v);
    }
}

/* How one update call folds its aggregates. The additive ones (count, int64
 * sum: an int64 partial that grows by 1 or by the input value) pile up as
 * pending deltas per cache slot and reach their records when the slot
 * changes hands or the call ends: a record's partials sit in its
 * partition's log, one page per partition, and updating them in place cost
 * a TLB miss per record (18 ns a record at 256 partitions, 8 ns at one).
 * Additive aggregates that grow by 1 a record (a count, and an int64 sum
 * over a column of ones: the validity of a column without nulls in this
 * batch, slash_ssb_batch.ones) share one pending delta, the first, which is
 * flushed into each of them: a nullable column costs a count nothing more
 * a record while it holds no null. first/last of int64 ones (the validity
 * that first/last of a nullable column keep beside the value) pend too:
 * every row offers (t, 1), so the rows of a call come down to (their
 * earliest or latest t, 1), kept per cache slot as the largest of an
 * order-preserving image of t (a max, so the slot's zero is its identity)
 * and applied with the kind's own update when flushed (a flush always
 * follows a row). So do min and max, as the image of the values (the
 * rows of a call come down to their smallest or largest); a double's image
 * is its bits in min/max's total order (slash_f64_below: one NaN above
 * +inf, -0.0 below 0.0; see f64_order), so the result is the in-place
 * update's, bit for bit. The others are applied in place, one
 * aggregate at a time over a chunk of rows whose records were already found
 * (apply_chunk), so the kind's switch is taken once a chunk instead of once
 * a record. Offsets and value columns are read once into locals, so the
 * per-record loops reload nothing through pointers a partial's store may
 * alias. */
typedef struct fold_plan {
    uint32_t n;    /* pending deltas a cache slot (see PEND), the times' last */
    bool counted;  /* delta 0 grows by 1 a record (the counts'); the rest by v[j][i] */
    const int64_t *v[SLASH_SSB_MAX_AGGS]; /* delta j's input (NULL for the counts') */
    uint32_t nflush;                      /* additive aggregates */
    uint32_t off[SLASH_SSB_MAX_AGGS];     /* their partials' offsets */
    uint32_t from[SLASH_SSB_MAX_AGGS];    /* the delta each takes */
    uint32_t ntime; /* extremes (first/last of ones, min/max): deltas n - ntime .. n - 1 */
    uint64_t xmask[SLASH_SSB_MAX_AGGS];   /* each one's image: x ^ xmask (see time_image) */
    const int64_t *src[SLASH_SSB_MAX_AGGS]; /* its column x (min/max), NULL: the time t */
    bool f64[SLASH_SSB_MAX_AGGS];         /* x holds doubles: the image is of f64_order(x) */
    uint32_t toff[SLASH_SSB_MAX_AGGS];    /* its partial's offset */
    slash_agg_kind tkind[SLASH_SSB_MAX_AGGS];
    bool count_only;                      /* the one pending delta is the counts' */
    /* the double column of a lone min/max (PEND_COUNT_F64) or of the pair
     * (PEND_COUNT_PAIR_F64) holds no NaN in this batch (f64_no_nan): its
     * values are ordered by f64_order_num */
    bool f64_num;
    /* first/last of values pending as one pair (time, value) a cache slot,
     * deltas 1 and 2 beside the counts' (pair_of): the image of each,
     * x ^ pair_mask (time_image), kept at their lexicographic largest,
     * which is the kind's (time, value) extreme (a double by f64_order) */
    bool pair, pair_f64;
    slash_agg_kind pair_kind;
    uint32_t pair_off;
    const int64_t *pair_src;
    uint64_t pair_mask;
    bool pair_valid;                      /* and the validity's first/last of ones, */
    slash_agg_kind valid_kind;            /* updated with the pair's time */
    uint32_t valid_off;
    uint32_t nplace;                      /* aggregates applied in place */
    uint32_t place[SLASH_SSB_MAX_AGGS];   /* their indexes in the config */
    /* count_distinct and percentile_approx, buffered a cache slot: each row
     * appends its value (a hash, a value to hash, a double) to the slot's
     * buffer of each, which is added to the record many at a time
     * (slash_distinct_add_many, slash_qs_add_many: sorted, one merge pass)
     * when it fills and when the slot is flushed, instead of a search of
     * the sorted 8 KiB state and a move a row. The state after a flush is
     * the row-by-row one byte for byte (a function of the values added). */
    uint32_t nbuf;
    uint32_t buf_cap;                     /* values in a buffer: SSB_BUF_SLOT / nbuf */
    uint32_t buf_off[SLASH_SSB_MAX_AGGS];
    bool buf_qs[SLASH_SSB_MAX_AGGS];      /* a quantile sketch's (else a distinct set's) */
    enum buf_input { BUF_AS_IS, BUF_HASH_I64, BUF_HASH_F64 } buf_in[SLASH_SSB_MAX_AGGS];
    const uint64_t *buf_src[SLASH_SSB_MAX_AGGS]; /* the column, as 8-byte words */
    uint64_t *bufv;   /* the slots' buffers: SSB_BUF_SLOT values a slot */
    uint32_t *fill;   /* the values in each slot's buffers (the same in each) */
} fold_plan;

/* Values buffered a cache slot, shared by its buffered aggregates: 2 MiB
 * for the SSB_FAST slots of an update call that has any */
#define SSB_BUF_SLOT 512

/* The pending image of time t of a first (xmask 2^63 - 1: a larger image
 * is an earlier t) or last (2^63: a later t) of ones; 0 is the identity.
 * The same of an int64 min (2^63 - 1) or max (2^63). */
static inline uint64_t time_image(int64_t t, uint64_t xmask) { return (uint64_t)t ^ xmask; }

/* The two xmasks: of the least value kept (a first, an int64 min) and of the
 * greatest (a last, a max). Literals, not shifts: clang refuses a shift's
 * result as a macro argument's truth value (RUN_ROWS_VARIANT). */
#define IMAGE_MASK_LEAST UINT64_C(0x7fffffffffffffff)
#define IMAGE_MASK_GREATEST UINT64_C(0x8000000000000000)

#define F64_SIGN (UINT64_C(1) << 63)
#define F64_INF_BITS UINT64_C(0x7ff0000000000000)
#define F64_NAN_BITS UINT64_C(0x7ff8000000000000) /* the quiet NaN min/max keep */

/* The bits x of a double as an int64 whose order is slash_f64_below's: a
 * NaN (any sign or payload) becomes the one quiet NaN, above +inf; a
 * negative double's magnitude bits are flipped, so -0.0 (-1) is below 0.0
 * (0) and -inf the least. Its images (time_image) are never 0: a negative
 * NaN's or a payload NaN's would be, and NaNs are made the one NaN first. */
static inline int64_t f64_order(uint64_t x)
{
    x = (x & ~F64_SIGN) > F64_INF_BITS ? F64_NAN_BITS : x;
    return (int64_t)(x ^ ((uint64_t)((int64_t)x >> 63) >> 1));
}

/* f64_order of a double that is not a NaN, without the NaN's test: only
 * the flip of a negative double's magnitude bits. Of a NaN it would be
 * wrong (a negative NaN's below -inf), so it is used only on a column
 * f64_no_nan has passed. */
static inline int64_t f64_order_num(uint64_t x)
{
    return (int64_t)(x ^ ((uint64_t)((int64_t)x >> 63) >> 1));
}

/* Whether none of the n doubles at v is a NaN: one pass before a loop that
 * orders them by f64_order_num instead of f64_order. SSE2 (every x86-64)
 * compares two vectors with one unordered compare, true where either lane
 * is a NaN: about 1 instruction a value. */
static bool f64_no_nan(const double *v, size_t n)
{
    size_t i = 0;
#ifdef __SSE2__
    __m128d any = _mm_setzero_pd(), any2 = _mm_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        any = _mm_or_pd(any, _mm_cmpunord_pd(_mm_loadu_pd(v + i), _mm_loadu_pd(v + i + 2)));
        any2 = _mm_or_pd(any2, _mm_cmpunord_pd(_mm_loadu_pd(v + i + 4), _mm_loadu_pd(v + i + 6)));
    }
    if (_mm_movemask_pd(_mm_or_pd(any, any2)))
        return false;
#endif
    bool nan = false;
    for (; i < n; i++)
        nan |= v[i] != v[i];
    return !nan;
}

/* time_image(f64_order_num(x), xmask) in fewer operations, xmask a
 * constant: of a max (IMAGE_MASK_GREATEST) x ^ (x's sign spread | the sign
 * bit), of a min x ^ ((~x's sign spread) >> 1). */
static inline uint64_t f64_num_image(uint64_t x, uint64_t xmask)
{
    if (xmask == IMAGE_MASK_GREATEST)
        return x ^ ((uint64_t)((int64_t)x >> 63) | F64_SIGN);
    if (xmask == IMAGE_MASK_LEAST)
        return x ^ ((uint64_t)(~(int64_t)x >> 63) >> 1);
    return time_image(f64_order_num(x), xmask);
}

/* The double's bits back from f64_order's int64 (flipping is its own inverse). */
static inline uint64_t f64_from_order(int64_t o) { return (uint64_t)o ^ ((uint64_t)(o >> 63) >> 1); }

static inline bool is_first(slash_agg_kind k)
{
    return k == SLASH_AGG_FIRST_I64 || k == SLASH_AGG_FIRST_F64;
}

/* Turns a plan of a count and one first/last of values in place (with, or
 * without, its validity's first/last of ones, the same way) into a pending
 * pair: the rows of a cache slot come down to their extreme (time, value),
 * applied with the kind's own update when the slot is flushed, so a row
 * updates no record. The validity's extreme time is the pair's (every row
 * offers (t, 1) to it and (t, v) to the pair), so it takes no delta of its
 * own. Other plans are left as they are. */
static void pair_of(const slash_ssb *s, const slash_ssb_batch *b, fold_plan *pl)
{
    pl->pair = false;
    if (!pl->counted || pl->nplace != 1 || pl->n != 1 + pl->ntime || pl->ntime > 1 || pl->nbuf)
        return; /* (beside buffered sketches: the run path's general loop, in place) */
    const uint32_t j = pl->place[0];
    const slash_agg_kind k = s->cfg.aggs[j];
    if (!slash_crdt_needs_time(k)) /* first/last */
        return;
    if (pl->ntime && (pl->src[0] || is_first(pl->tkind[0]) != is_first(k)))
        return; /* an int64 min/max, or a validity's extreme the other way */
    pl->pair_valid = pl->ntime == 1;
    if (pl->pair_valid)
        pl->valid_kind = pl->tkind[0], pl->valid_off = pl->toff[0];
    pl->pair = true;
    pl->pair_kind = k;
    pl->pair_f64 = k == SLASH_AGG_FIRST_F64 || k == SLASH_AGG_LAST_F64;
    pl->pair_off = s->agg_off[j];
    pl->pair_src = b->values[j];
    pl->pair_mask = is_first(k) ? IMAGE_MASK_LEAST : IMAGE_MASK_GREATEST;
    pl->ntime = pl->nplace = 0;
    pl->v[1] = pl->v[2] = NULL;
    pl->n = 3;
    pl->count_only = false;
}

static void plan_init(const slash_ssb *s, const slash_ssb_batch *b, fold_plan *pl)
{
    pl->n = pl->nflush = pl->nplace = pl->ntime = pl->nbuf = 0;
    pl->counted = false;
    pl->bufv = NULL, pl->fill = NULL;
    uint32_t timed[SLASH_SSB_MAX_AGGS];
    for (uint32_t j = 0; j < s->cfg.naggs; j++) {
        const slash_agg_kind k = s->cfg.aggs[j];
        if (((k == SLASH_AGG_FIRST_I64 || k == SLASH_AGG_LAST_I64) && (b->ones >> j & 1u)) ||
            k == SLASH_AGG_MIN_I64 || k == SLASH_AGG_MAX_I64 || k == SLASH_AGG_MIN_F64 ||
            k == SLASH_AGG_MAX_F64) {
            timed[pl->ntime++] = j; /* after the additive ones (below) */
            continue;
        }
        const bool ones = k == SLASH_AGG_COUNT || (k == SLASH_AGG_SUM_I64 && (b->ones >> j & 1u));
        if (ones && !pl->counted) { /* the counts' delta goes first */
            for (uint32_t q = pl->n; q > 0; q--)
                pl->v[q] = pl->v[q - 1];
            for (uint32_t f = 0; f < pl->nflush; f++)
                pl->from[f]++;
            pl->v[0] = NULL;
            pl->n++;
            pl->counted = true;
        }
        if (ones) {
            pl->off[pl->nflush] = s->agg_off[j], pl->from[pl->nflush++] = 0;
        } else if (k == SLASH_AGG_SUM_I64) {
            pl->off[pl->nflush] = s->agg_off[j], pl->from[pl->nflush++] = pl->n;
            pl->v[pl->n++] = b->values[j];
        } else if (k == SLASH_AGG_COUNT_DISTINCT || slash_agg_quantile(k, &(uint32_t){0})) {
            const uint32_t q = pl->nbuf++;
            pl->buf_off[q] = s->agg_off[j];
            pl->buf_qs[q] = k != SLASH_AGG_COUNT_DISTINCT;
            pl->buf_in[q] = !(b->hash_raw >> j & 1u) ? BUF_AS_IS
                            : b->raw_f64 >> j & 1u   ? BUF_HASH_F64 : BUF_HASH_I64;
            pl->buf_src[q] = b->values[j];
        } else {
            pl->place[pl->nplace++] = j;
        }
    }
    pl->buf_cap = pl->nbuf ? SSB_BUF_SLOT / pl->nbuf : 0;
    for (uint32_t q = 0; q < pl->ntime; q++) {
        const uint32_t j = timed[q];
        pl->tkind[q] = s->cfg.aggs[j];
        pl->toff[q] = s->agg_off[j];
        const slash_agg_kind k = s->cfg.aggs[j];
        const bool least = k == SLASH_AGG_FIRST_I64 || k == SLASH_AGG_MIN_I64 || k == SLASH_AGG_MIN_F64;
        pl->xmask[q] = least ? IMAGE_MASK_LEAST : IMAGE_MASK_GREATEST;
        pl->f64[q] = k == SLASH_AGG_MIN_F64 || k == SLASH_AGG_MAX_F64;
        pl->src[q] = k == SLASH_AGG_FIRST_I64 || k == SLASH_AGG_LAST_I64 ? NULL : b->values[j];
        pl->v[pl->n++] = NULL;
    }
    pl->count_only = pl->n == 1 && pl->counted;
    pair_of(s, b, pl);
    pl->f64_num = false;
    if (pl->pair && pl->pair_f64)
        pl->f64_num = f64_no_nan((const double *)pl->pair_src, b->n);
    else if (pl->n == 2 && pl->counted && pl->ntime == 1 && pl->f64[0])
        pl->f64_num = f64_no_nan((const double *)pl->src[0], b->n);
}

/* Slots of the direct-mapped record caches of an update call (fast_entry,
 * fast_bytes), and of their pending deltas */
#define SSB_FAST 1024

/* Pending delta j of the cache slot whose deltas start at acc: the deltas
 * are laid out by delta, then slot (delta j of slot q at j * SSB_FAST + q),
 * so a slot's j-th is at a constant displacement from its first and the
 * loops address it without a multiply by the number of deltas. */
#define PEND(acc, j) ((acc)[(size_t)(j) * SSB_FAST])

/* Adds record i (at time t) to the n pending deltas at acc. */
static inline void add_pending(const fold_plan *a, int64_t *acc, size_t i, int64_t t)
{
    uint32_t j = 0;
    if (a->counted)
        PEND(acc, 0) = slash_wrap_add(PEND(acc, 0), 1), j = 1;
    const uint32_t sums = a->n - a->ntime;
    for (; j < sums; j++)
        PEND(acc, j) = slash_wrap_add(PEND(acc, j), a->v[j][i]);
    for (uint32_t q = 0; q < a->ntime; q++) {
        int64_t v = a->src[q] ? a->src[q][i] : t;
        v = a->f64[q] ? f64_order((uint64_t)v) : v;
        const uint64_t x = time_image(v, a->xmask[q]);
        const uint64_t y = (uint64_t)PEND(acc, sums + q);
        PEND(acc, sums + q) = (int64_t)(x > y ? x : y);
    }
}

/* The shapes of the pending deltas a loop is compiled for (add_pending_row) */
enum pend_shape {
    PEND_COUNT,      /* count_only */
    PEND_COUNT_SUM,  /* the counts' delta and one int64 sum's */
    PEND_COUNT_TIME, /* the counts' delta and the time of a first/last of ones */
    PEND_COUNT_MINMAX, /* the counts' delta and one int64 min or max (of its column) */
    PEND_COUNT_F64,  /* the counts' delta and one double min or max */
    PEND_COUNT_F64_NUM, /* the same, its column without a NaN (pl->f64_num) */
    PEND_COUNT_PAIR, /* the counts' delta and an int64 first/last's pair (pl->pair) */
    PEND_COUNT_PAIR_F64, /* the same of doubles */
    PEND_COUNT_PAIR_F64_NUM, /* the same, the column without a NaN (pl->f64_num) */
    PEND_ANY
};

static inline enum pend_shape pend_shape_of(const fold_plan *pl)
{
    if (pl->count_only)
        return PEND_COUNT;
    if (pl->pair)
        return !pl->pair_f64 ? PEND_COUNT_PAIR
               : pl->f64_num ? PEND_COUNT_PAIR_F64_NUM : PEND_COUNT_PAIR_F64;
    if (pl->n == 2 && pl->counted)
        return !pl->ntime ? PEND_COUNT_SUM
               : pl->f64[0] ? (pl->f64_num ? PEND_COUNT_F64_NUM : PEND_COUNT_F64)
                                            : pl->src[0] ? PEND_COUNT_MINMAX : PEND_COUNT_TIME;
    return PEND_ANY;
}

/* Adds record i (at time t) to the pending deltas at acc (its cache
 * slot's); shape: pend_shape_of(pl), sum: pl->v[1] for PEND_COUNT_SUM,
 * xmask: pl->xmask[0] for PEND_COUNT_TIME, _MINMAX and _F64 (whose column
 * is sum: pl->src[0], NULL for the time t), passed from locals (the build
 * may not assume strict aliasing, so a load through pl would repeat after
 * every store). */
static inline void add_pending_row(const fold_plan *a, enum pend_shape shape, const int64_t *sum,
                                   uint64_t xmask, int64_t *acc, size_t i, int64_t t)
{
    if (shape == PEND_COUNT) {
        PEND(acc, 0) = slash_wrap_add(PEND(acc, 0), 1);
    } else if (shape == PEND_COUNT_SUM) {
        PEND(acc, 0) = slash_wrap_add(PEND(acc, 0), 1);
        PEND(acc, 1) = slash_wrap_add(PEND(acc, 1), sum[i]);
    } else if (shape == PEND_COUNT_TIME) {
        PEND(acc, 0) = slash_wrap_add(PEND(acc, 0), 1);
        const uint64_t x = time_image(sum ? sum[i] : t, xmask), y = (uint64_t)PEND(acc, 1);
        PEND(acc, 1) = (int64_t)(x > y ? x : y);
    } else if (shape == PEND_COUNT_MINMAX) {
        PEND(acc, 0) = slash_wrap_add(PEND(acc, 0), 1);
        const uint64_t x = time_image(sum[i], xmask), y = (uint64_t)PEND(acc, 1);
        PEND(acc, 1) = (int64_t)(x > y ? x : y);
    } else if (shape == PEND_COUNT_F64 || shape == PEND_COUNT_F64_NUM) {
        PEND(acc, 0) = slash_wrap_add(PEND(acc, 0), 1);
        const uint64_t x = shape == PEND_COUNT_F64 ? time_image(f64_order((uint64_t)sum[i]), xmask)
                                                   : f64_num_image((uint64_t)sum[i], xmask);
        const uint64_t y = (uint64_t)PEND(acc, 1);
        PEND(acc, 1) = (int64_t)(x > y ? x : y);
    } else if (shape == PEND_COUNT_PAIR || shape == PEND_COUNT_PAIR_F64 ||
               shape == PEND_COUNT_PAIR_F64_NUM) {
        PEND(acc, 0) = slash_wrap_add(PEND(acc, 0), 1);
        /* the lexicographic larger of the images (time, value), as one
         * 128-bit compare (a subtract with borrow) and conditional moves:
         * in time order a last takes nearly every row, and ties of time
         * (then the value decides) are common. A first takes nearly none:
         * a row whose time's image is below the pending one's cannot win,
         * and for a first (xmask a constant in its loop) that branch, which
         * the predictor learns, skips the value (for a last it only costs) */
        const uint64_t tx = time_image(t, xmask);
        if (xmask != IMAGE_MASK_LEAST || tx >= (uint64_t)PEND(acc, 1)) {
            const int64_t v = shape == PEND_COUNT_PAIR_F64     ? f64_order((uint64_t)sum[i])
                              : shape == PEND_COUNT_PAIR_F64_NUM ? f64_order_num((uint64_t)sum[i])
                                                                 : sum[i];
            const unsigned __int128 x = (unsigned __int128)tx << 64 | time_image(v, xmask);
            const unsigned __int128 y = (unsigned __int128)(uint64_t)PEND(acc, 1) << 64 | (uint64_t)PEND(acc, 2);
            const unsigned __int128 z = x > y ? x : y;
            PEND(acc, 1) = (int64_t)(uint64_t)(z >> 64);
            PEND(acc, 2) = (int64_t)(uint64_t)z;
        }
    } else {
        add_pending(a, acc, i, t);
    }
}

/* Adds the m values buffered at bv (a cache slot's: buffer q at
 * bv + q * buf_cap) to the buffered aggregates' partials at part. */
static __attribute__((noinline)) void flush_buffers(const fold_plan *a, uint8_t *part, uint64_t *bv,
                                                    uint32_t m)
{
    for (uint32_t q = 0; q < a->nbuf; q++) {
        uint64_t *v = bv + (size_t)q * a->buf_cap;
        if (a->buf_in[q] == BUF_HASH_I64)
            for (uint32_t r = 0; r < m; r++)
                v[r] = slash_hll_hash_i64((int64_t)v[r]);
        else if (a->buf_in[q] == BUF_HASH_F64)
            for (uint32_t r = 0; r < m; r++) {
                double d;
                memcpy(&d, &v[r], 8);
                v[r] = slash_hll_hash_f64(d);
            }
        if (a->buf_qs[q])
            slash_qs_add_many((slash_qsketch *)(part + a->buf_off[q]), (const double *)v, m);
        else
            slash_distinct_add_many((slash_distinct *)(part + a->buf_off[q]), v, m);
    }
}

/* Appends row i's values to the buffers of cache slot `slot` (whose record's
 * partials are at part), adding them to the record when full. */
static inline void buffer_row(const fold_plan *a, uint8_t *part, size_t slot, size_t i)
{
    uint64_t *bv = a->bufv + slot * SSB_BUF_SLOT;
    uint32_t k = a->fill[slot];
    for (uint32_t q = 0; q < a->nbuf; q++)
        bv[(size_t)q * a->buf_cap + k] = a->buf_src[q][i];
    if (++k == a->buf_cap) {
        flush_buffers(a, part, bv, k);
        k = 0;
    }
    a->fill[slot] = k;
}

/* Applies the pending deltas at acc (cache slot `slot`'s) to the record's
 * partials, and its buffered values, and clears them. */
static inline void flush_pending(const fold_plan *a, uint8_t *part, int64_t *acc, size_t slot)
{
    if (a->nbuf && a->fill[slot]) {
        flush_buffers(a, part, a->bufv + slot * SSB_BUF_SLOT, a->fill[slot]);
        a->fill[slot] = 0;
    }
    for (uint32_t f = 0; f < a->nflush; f++) {
        int64_t *p = (int64_t *)(part + a->off[f]);
        *p = slash_wrap_add(*p, PEND(acc, a->from[f]));
    }
    static const int64_t one = 1;
    if (a->pair && PEND(acc, 0)) { /* PEND(acc, 0): the rows pended (the counts' delta) */
        const int64_t t = (int64_t)((uint64_t)PEND(acc, 1) ^ a->pair_mask);
        int64_t v = (int64_t)((uint64_t)PEND(acc, 2) ^ a->pair_mask);
        v = a->pair_f64 ? (int64_t)f64_from_order(v) : v;
        slash_crdt_update_at(a->pair_kind, part + a->pair_off, &v, t);
        if (a->pair_valid)
            slash_crdt_update_at(a->valid_kind, part + a->valid_off, &one, t);
    }
    for (uint32_t q = 0; q < a->ntime; q++) {
        int64_t x = (int64_t)((uint64_t)PEND(acc, a->n - a->ntime + q) ^ a->xmask[q]);
        x = a->f64[q] ? (int64_t)f64_from_order(x) : x; /* a double's bits */
        if (a->src[q])
            slash_crdt_update(a->tkind[q], part + a->toff[q], &x);
        else
            slash_crdt_update_at(a->tkind[q], part + a->toff[q], &one, x);
    }
    for (uint32_t j = 0; j < a->n; j++)
        PEND(acc, j) = 0;
}

/* Each of the m rows rows[r] updates the partial at recs[r] + off with
 * update(KIND, partial, value, time), KIND a constant: the loop compiles
 * to the kind's own code, without a switch per row. */
#define FOLD_ROWS(KIND, VALUES, UPDATE)                                              \
    for (size_t r = 0; r < m; r++)                                                   \
        UPDATE(KIND, recs[r] + off, (VALUES) + rows[r], b->times[rows[r]])
#define UPDATE_V(k, p, v, t) slash_crdt_update(k, p, v)
#define UPDATE_AT(k, p, v, t) slash_crdt_update_at(k, p, v, t)

/* Applies the in-place aggregates of the plan for the m rows rows[r], whose
 * partials start at recs[r]; rows in order, so a record sees its rows in
 * batch order (a float sum adds in the same order as row by row). */
static void apply_chunk(const slash_ssb *s, const fold_plan *pl, const slash_ssb_batch *b,
                        const size_t *rows, uint8_t *const *recs, size_t m)
{
    for (uint32_t q = 0; q < pl->nplace; q++) {
        const uint32_t j = pl->place[q];
        const slash_agg_kind k = s->cfg.aggs[j];
        const uint32_t off = s->agg_off[j];
        const int64_t *vi = b->values[j];
        const double *vf = b->values[j];
        const unsigned prec = slash_agg_hll_p(k);
        uint32_t qs;
        const bool raw = b->hash_raw >> j & 1u, raw_f = b->raw_f64 >> j & 1u;
        if (prec) {
            const uint64_t *h = b->values[j];
            if (raw && raw_f)
                for (size_t r = 0; r < m; r++)
                    slash_hll_add(recs[r] + off, prec, slash_hll_hash_f64(vf[rows[r]]));
            else if (raw)
                for (size_t r = 0; r < m; r++)
                    slash_hll_add(recs[r] + off, prec, slash_hll_hash_i64(vi[rows[r]]));
            else
                for (size_t r = 0; r < m; r++)
                    slash_hll_add(recs[r] + off, prec, h[rows[r]]);
            continue;
        }
        if (slash_agg_quantile(k, &qs)) {
            for (size_t r = 0; r < m; r++)
                slash_qs_add((slash_qsketch *)(recs[r] + off), vf[rows[r]]);
            continue;
        }
        switch (k) {
        case SLASH_AGG_HLL:
        case SLASH_AGG_QUANTILE:
        case SLASH_AGG_COUNT:
        case SLASH_AGG_SUM_I64:
        case SLASH_AGG_MIN_I64:
        case SLASH_AGG_MAX_I64:
        case SLASH_AGG_MIN_F64:
        case SLASH_AGG_MAX_F64: break; /* pending deltas and extremes (plan_init) */
        case SLASH_AGG_SUM_F64: FOLD_ROWS(SLASH_AGG_SUM_F64, vf, UPDATE_V); break;
        case SLASH_AGG_AVG_I64: FOLD_ROWS(SLASH_AGG_AVG_I64, vi, UPDATE_V); break;
        case SLASH_AGG_AVG_F64: FOLD_ROWS(SLASH_AGG_AVG_F64, vf, UPDATE_V); break;
        case SLASH_AGG_FIRST_I64: FOLD_ROWS(SLASH_AGG_FIRST_I64, vi, UPDATE_AT); break;
        case SLASH_AGG_FIRST_F64: FOLD_ROWS(SLASH_AGG_FIRST_F64, vf, UPDATE_AT); break;
        case SLASH_AGG_LAST_I64: FOLD_ROWS(SLASH_AGG_LAST_I64, vi, UPDATE_AT); break;
        case SLASH_AGG_LAST_F64: FOLD_ROWS(SLASH_AGG_LAST_F64, vf, UPDATE_AT); break;
        case SLASH_AGG_COUNT_DISTINCT: {
            const uint64_t *h = b->values[j];
            if (raw && raw_f)
                for (size_t r = 0; r < m; r++)
                    slash_distinct_add((slash_distinct *)(recs[r] + off), slash_hll_hash_f64(vf[rows[r]]));
            else if (raw)
                for (size_t r = 0; r < m; r++)
                    slash_distinct_add((slash_distinct *)(recs[r] + off), slash_hll_hash_i64(vi[rows[r]]));
            else
                for (size_t r = 0; r < m; r++)
                    slash_distinct_add((slash_distinct *)(recs[r] + off), h[rows[r]]);
            break;
        }
        }
    }
}

static inline void batch_span(const slash_ssb_batch *b, size_t i, int64_t *lo, int64_t *hi)
{
    if (b->key_offsets_64) {
        *lo = ((const int64_t *)b->key_offsets)[i];
        *hi = ((const int64_t *)b->key_offsets)[i + 1];
    } else {
        *lo = ((const int32_t *)b->key_offsets)[i];
        *hi = ((const int32_t *)b->key_offsets)[i + 1];
    }
}

static inline void batch_key(const slash_ssb_batch *b, size_t i, const uint8_t **k, uint32_t *len)
{
    int64_t lo, hi;
    batch_span(b, i, &lo, &hi);
    *k = b->key_data + lo;
    *len = (uint32_t)(hi - lo);
}

/* Whether every key span is 0..SLASH_SSB_KEY_MAX bytes from a first offset
 * >= 0: one pass without branches that vectorises (an offset going down
 * makes its span huge as an unsigned number, so one compare covers both). */
static bool offsets_ok(const slash_ssb_batch *b)
{
    uint64_t bad = 0;
    if (b->key_offsets_64) {
        const int64_t *o = b->key_offsets;
        bad = (uint64_t)(o[0] < 0);
        for (size_t i = 0; i < b->n; i++)
            bad |= (uint64_t)o[i + 1] - (uint64_t)o[i] > SLASH_SSB_KEY_MAX;
    } else {
        const int32_t *o = b->key_offsets;
        bad = (uint64_t)(o[0] < 0);
        for (size_t i = 0; i < b->n; i++)
            bad |= (uint32_t)o[i + 1] - (uint32_t)o[i] > SLASH_SSB_KEY_MAX;
    }
    return !bad;
}

/* Whether kind k reads hashes of its column (the sketches) */
static inline bool hashes_input(slash_agg_kind k)
{
    return slash_agg_hll_p(k) || k == SLASH_AGG_COUNT_DISTINCT;
}

slash_status slash_ssb_batch_hash_raw(const slash_ssb_batch *b, uint32_t naggs,
                                      slash_ssb_batch *out, uint64_t **hashes)
{
    *out = *b;
    *hashes = NULL;
    const uint32_t raw = b->hash_raw & (naggs >= 32 ? UINT32_MAX : (UINT32_C(1) << naggs) - 1);
    if (!raw || !b->n)
        return SLASH_OK;
    uint64_t *h = malloc((size_t)__builtin_popcount(raw) * b->n * sizeof *h);
    if (!h)
        return slash_fail(SLASH_ENOMEM, "batch: hashing a sketch's column");
    uint64_t *next = h;
    for (uint32_t j = 0; j < naggs; j++) {
        if (!(raw >> j & 1u))
            continue;
        slash_hll_hash_column(b->values[j], (int)(b->raw_f64 >> j & 1u), NULL, b->n, next);
        out->values[j] = next;
        next += b->n;
    }
    out->hash_raw = out->raw_f64 = 0;
    *hashes = h;
    return SLASH_OK;
}

static slash_status check_batch(const slash_ssb *s, const slash_ssb_batch *b)
{
    if (b->n == 0)
        return SLASH_OK;
    if (!b->times)
        return slash_fail(SLASH_EINVAL, "batch: the times column is missing");
    for (uint32_t j = 0; j < s->cfg.naggs; j++)
        if (slash_crdt_needs_input(s->cfg.aggs[j]) && !b->values[j])
            return slash_fail(SLASH_EINVAL, "batch: the value column of aggregate %u is missing", j);
    uint32_t not_sketch = b->hash_raw;
    for (uint32_t j = 0; j < s->cfg.naggs; j++)
        if (hashes_input(s->cfg.aggs[j]))
            not_sketch &= ~(UINT32_C(1) << j);
    if (not_sketch)
        return slash_fail(SLASH_EINVAL, "batch: aggregate %d is not a sketch, so its values "
                          "cannot be hashed (hash_raw)", __builtin_ctz(not_sketch));
    if (s->cfg.key_type == SLASH_KEY_INT64) {
        if (!b->keys)
            return slash_fail(SLASH_EINVAL, "batch: the int64 keys column is missing");
        return SLASH_OK;
    }
    if (!b->key_offsets || !b->key_data)
        return slash_fail(SLASH_EINVAL, "batch: the byte-string keys column is missing");
    if (offsets_ok(b))
        return SLASH_OK;
    for (size_t i = 0; i < b->n; i++) { /* find and name the first bad row */
        int64_t lo, hi;
        batch_span(b, i, &lo, &hi);
        if (lo < 0 || hi < lo)
            return slash_fail(SLASH_EINVAL, "batch: key offsets decrease at row %zu", i);
        if (hi - lo > SLASH_SSB_KEY_MAX)
            return slash_fail(SLASH_EINVAL, "batch: key at row %zu is %lld bytes, the limit is %d",
                              i, (long long)(hi - lo), SLASH_SSB_KEY_MAX);
    }
    return SLASH_OK;
}

/* Per-record window bookkeeping: caches the current slice so a run of
 * records in one slice costs no division. */
typedef struct slice_cache {
    int64_t lo, hi; /* current slice [lo, hi) (lo clipped at INT64_MIN) */
    bool late;
    bool fits; /* slash_window_slice_fits: its windows lie within the int64 range */
} slice_cache;

static inline bool slice_of(const slash_ssb *s, slice_cache *c, int64_t t)
{
    if (t < c->lo || t >= c->hi) {
        const slash_window *w = &s->cfg.window;
        c->lo = slash_window_slice_start(w, t);
        c->hi = slash_window_slice_end(w, c->lo);
        c->late = slash_window_slice_last_end(w, c->lo) <= s->watermark;
        c->fits = slash_window_slice_fits(w, c->lo);
    }
    return !c->late;
}

static slash_status update_session(slash_ssb *s, const slash_ssb_batch *b)
{
    const int64_t gap = s->cfg.window.size;
    for (size_t i = 0; i < b->n; i++) {
        if (b->skip && b->skip[i])
            continue;
        int64_t t = b->times[i];
        int64_t end = t > INT64_MAX - gap ? INT64_MAX : t + gap;
        if (slash_window_closed(&s->cfg.window, end, s->watermark)) {
            s->late++;
            continue;
        }
        const uint8_t *k;
        uint32_t klen;
        uint64_t kh;
        if (s->cfg.key_type == SLASH_KEY_INT64) {
            k = (const uint8_t *)&b->keys[i], klen = 8;
            kh = ssb_hash_i64(b->keys[i]);
        } else {
            batch_key(b, i, &k, &klen);
            kh = ssb_hash_bytes(k, klen);
        }
        slash_status st;
        uint8_t *part = ssb_upsert_session(s, &s->parts[ssb_part_of(s, kh)], kh, t, end, k, klen, &st);
        if (!part)
            return st;
        apply(s, part, b, i);
    }
    return SLASH_OK;
}

static inline size_t part_bytes(const ssb_part *p)
{
    return (size_t)(p->log.tail - p->log.begin) + slash_hidx_memory(&p->index);
}

/* A direct-mapped cache of recently updated int64-key records, local to one
 * update call: records neither move nor get sealed during a call, so a hit
 * skips the index. */
typedef struct fast_entry {
    int64_t key, win;
    uint8_t *partials;
} fast_entry;

/* The cache slot of (key, slice): two multiplies, no full mix; a poor
 * spread only costs hits, never correctness (the entry holds key and win). */
static inline size_t fast_slot(int64_t key, int64_t win)
{
    uint64_t x = (uint64_t)key * UINT64_C(0x9e3779b97f4a7c15) ^
                 (uint64_t)win * UINT64_C(0xc2b2ae3d27d4eb4f);
    return (size_t)(x >> 54); /* SSB_FAST = 2^10 slots */
}

/* The same for byte-string keys. A key is seen as its length, its first
 * and its last 8 bytes (words a and z, overlapping for keys of 8..15 bytes,
 * z = 0 below 8), which alone determine a key of up to 16 bytes; longer
 * keys also compare the bytes in between with the entry's key, which points
 * at the bytes of the first row that filled it (valid for the whole call).
 * So a hit costs neither the key's hash nor the index probe nor the chain
 * walk through the log, and short keys are compared without a memory access. */
typedef struct fast_bytes {
    uint64_t a, z;
    int64_t win;
    const uint8_t *key;
    uint8_t *partials;
    uint32_t len;
} fast_bytes;

/* The n < 8 bytes at p as a little-endian word (zero above), reading
 * nothing past p + n (the key may end its buffer): overlapping loads, whose
 * shared bytes are equal, so OR-ing them is exact. */
static inline uint64_t load_short(const uint8_t *p, uint32_t n)
{
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
        return (uint64_t)lo | (uint64_t)hi << ((n - 4) * 8);
    }
    if (n == 0)
        return 0;
    return (uint64_t)p[0] | (uint64_t)p[n / 2] << (n / 2 * 8) | (uint64_t)p[n - 1] << ((n - 1) * 8);
}

/* Words a and z of the key of len bytes at k (see fast_bytes). */
static inline void key_words(const uint8_t *k, uint32_t len, uint64_t *a, uint64_t *z)
{
    if (len >= 8) {
        memcpy(a, k, 8);
        memcpy(z, k + len - 8, 8);
    } else {
        *a = load_short(k, len);
        *z = 0;
    }
}

/* The cache slot of (key words, length, slice): a poor spread only costs
 * hits, never correctness (a hit compares the whole key). */
static inline size_t fast_bytes_slot(uint64_t a, uint64_t z, uint32_t len, int64_t win)
{
    uint64_t x = a * UINT64_C(0x9e3779b97f4a7c15) + z * UINT64_C(0xbf58476d1ce4e5b9) +
                 ((uint64_t)win ^ len) * UINT64_C(0xc2b2ae3d27d4eb4f);
    x ^= x >> 29;
    x *= UINT64_C(0x94d049bb133111eb);
    return (size_t)(x >> 54); /* SSB_FAST = 2^10 slots */
}

/* Whether entry f holds the key (k, len, a, z) of slice win. */
static inline bool fast_bytes_hit(const fast_bytes *f, const uint8_t *k, uint32_t len, uint64_t a,
                                  uint64_t z, int64_t win)
{
    if (!f->partials || f->a != a || f->z != z || f->len != len || f->win != win)
        return false;
    uint64_t x, y, acc = 0;
    for (uint32_t o = 8; o + 8 < len; o += 8) { /* the bytes between a and z */
        memcpy(&x, f->key + o, 8);
        memcpy(&y, k + o, 8);
        acc |= x ^ y;
    }
    return acc == 0;
}

/* Whether int64 cache entry f holds the record of (key, win). */
static inline bool fast_i64_hit(const fast_entry *f, int64_t key, int64_t win)
{
    return f->partials && f->key == key && f->win == win;
}

/* A miss of int64 cache entry f (whose pending deltas are at acc): the
 * entry's pending deltas go to its old record, and the record of (key, win)
 * is found or made and takes the entry; returns its partials. Not inlined:
 * rare, and the loops keep their registers. hashed: pidx
 * and hash (the key's partition and index hash) are given, else computed
 * here. *part: the partition upserted into. NULL with *st set on an error. */
static __attribute__((noinline)) uint8_t *
fast_i64_miss(slash_ssb *s, const fold_plan *pl, fast_entry *f, int64_t *acc, const int64_t *keyp,
              int64_t win, bool hashed, uint32_t pidx, uint64_t hash, ssb_part **part,
              slash_status *st)
{
    const int64_t key = *keyp; /* keyp: the batch's, so the caller keeps key in a register */
    if (f->partials) /* f is slot fast_slot(key, win)'s, recomputed here: not an argument */
        flush_pending(pl, f->partials, acc, fast_slot(key, win));
    if (!hashed) {
        const uint64_t kh = ssb_hash_i64(key);
        pidx = ssb_part_of(s, kh);
        hash = ssb_hash_win(s, kh, win);
    }
    *part = &s->parts[pidx];
    uint8_t *rec = ssb_upsert(s, *part, hash, win, (const uint8_t *)keyp, 8, st);
    f->key = key, f->win = win, f->partials = rec;
    return rec;
}

/* Rows of the run path between two apply_chunk calls */
#define SSB_RUN_CHUNK 256

/* The run path's buffer of rows resolved but not yet applied in place. */
typedef struct run_chunk {
    size_t m;
    size_t rows[SSB_RUN_CHUNK];
    uint8_t *recs[SSB_RUN_CHUNK];
} run_chunk;

/* A sketch the run path updates in place row by row instead of a chunk at
 * a time (an HLL's register max does not depend on the order of rows, and
 * needs no switch): how it reads its column (HLL_NONE: no such sketch), its
 * precision, its partial's offset and its column. */
enum hll_input { HLL_NONE, HLL_RAW_I64, HLL_RAW_F64, HLL_HASHES };
typedef struct run_hll {
    enum hll_input in;
    unsigned p;
    uint32_t off;
    const void *col;
} run_hll;

#define NO_HLL ((run_hll){HLL_NONE, 0, 0, NULL})

/* The run_hll of a plan whose only in-place aggregate is an HLL beside the
 * counts' delta alone; in HLL_NONE otherwise. */
static run_hll run_hll_of(const slash_ssb *s, const slash_ssb_batch *b, const fold_plan *pl)
{
    run_hll h = {HLL_NONE, 0, 0, NULL};
    if (!pl->count_only || pl->nplace != 1 || pl->nbuf)
        return h;
    const uint32_t j = pl->place[0];
    if (!(h.p = slash_agg_hll_p(s->cfg.aggs[j])))
        return h;
    h.off = s->agg_off[j];
    h.col = b->values[j];
    h.in = !(b->hash_raw >> j & 1u) ? HLL_HASHES : b->raw_f64 >> j & 1u ? HLL_RAW_F64 : HLL_RAW_I64;
    return h;
}

/* The work of row i on the run path, whose record's partials are at rec
 * and pending deltas at pend (cache slot `slot`); returns the chunk's new
 * row count (see run_rows for the constants). */
static inline __attribute__((always_inline)) size_t
run_row(slash_ssb *s, const slash_ssb_batch *b, const fold_plan *pl, int64_t *pend, uint8_t *rec,
        size_t slot, size_t i, int64_t t, run_chunk *ch, size_t m, const enum pend_shape shape,
        const int64_t *sum, const uint64_t xmask, const bool in_place, const run_hll hl,
        const uint32_t nbuf, uint64_t *const bufv, uint32_t *const fill, const uint64_t *const bsrc)
{
    add_pending_row(pl, shape, sum, xmask, pend, i, t);
    if (nbuf == 1) { /* buffer_row, its constants in registers */
        uint64_t *const bv = bufv + slot * SSB_BUF_SLOT;
        uint32_t k = fill[slot];
        bv[k] = bsrc[i];
        if (++k == SSB_BUF_SLOT) {
            flush_buffers(pl, rec, bv, k);
            k = 0;
        }
        fill[slot] = k;
    } else if (nbuf) {
        buffer_row(pl, rec, slot, i);
    }
    if (hl.in != HLL_NONE) {
        const uint64_t h = hl.in == HLL_RAW_I64   ? slash_hll_hash_i64(((const int64_t *)hl.col)[i])
                           : hl.in == HLL_RAW_F64 ? slash_hll_hash_f64(((const double *)hl.col)[i])
                                                  : ((const uint64_t *)hl.col)[i];
        slash_hll_add(rec + hl.off, hl.p, h);
    }
    if (in_place) {
        ch->rows[m] = i, ch->recs[m] = rec;
        if (++m == SSB_RUN_CHUNK) {
            apply_chunk(s, pl, b, ch->rows, ch->recs, m);
            m = 0;
        }
    }
    return m;
}

/* Folds row i and the rows after it that are in the live slice [lo, lo +
 * width) while their records are in the cache; returns the first row not
 * done: n, out of the slice, or a miss. Inlined into a function of its own
 * per variant (RUN_ROWS_VARIANT), with no call in its loop (but a full
 * chunk's or buffer's, rare), so the loop's invariants stay in registers a
 * call would clobber (inlined beside the miss's call, they were reloaded
 * from the stack a row). */
static inline __attribute__((always_inline)) size_t
run_hits(slash_ssb *s, const slash_ssb_batch *b, const fold_plan *pl, const fast_entry *fast,
         int64_t *acc, run_chunk *ch, size_t i, int64_t lo, uint64_t width,
         const enum pend_shape shape, const int64_t *sum, const uint64_t xmask,
         const bool in_place, const run_hll hl, const uint32_t nbuf)
{
    /* the batch's columns in locals: see add_pending_row */
    const size_t n = b->n;
    uint64_t *const bufv = pl->bufv;
    uint32_t *const fill = pl->fill;
    const uint64_t *const bsrc = nbuf == 1 ? pl->buf_src[0] : NULL;
    const int64_t *const times = b->times, *const keys = b->keys;
    size_t m = in_place ? ch->m : 0; /* (a register less for the loops without a chunk) */
    int64_t t = times[i]; /* loaded once a row: for the range check and the row */
    do {
        const int64_t key = keys[i];
        const size_t slot = fast_slot(key, lo);
        const fast_entry *f = &fast[slot];
        if (__builtin_expect(!fast_i64_hit(f, key, lo), 0))
            break;
        m = run_row(s, b, pl, acc + slot, f->partials, slot, i, t, ch, m, shape, sum,
                    xmask, in_place, hl, nbuf, bufv, fill, bsrc);
        if (++i >= n)
            break;
        t = times[i];
    } while ((uint64_t)t - (uint64_t)lo < width);
    if (in_place)
        ch->m = m;
    return i;
}

/* Folds row i and the rows after it whose times are in the live slice
 * [lo, hi); returns the next row. *stop: a partition outgrew the cache (the
 * rows before the returned one are done) or an error (*st set; the row
 * returned is not done). hits: the variant's run_hits; the rest as there.
 * Row i is a miss or the first of the run. */
static inline __attribute__((always_inline)) size_t
run_rows(slash_ssb *s, const slash_ssb_batch *b, const fold_plan *pl, fast_entry *fast,
         int64_t *acc, run_chunk *ch, size_t i, int64_t lo, int64_t hi,
         const enum pend_shape shape, const int64_t *sum, const uint64_t xmask,
         const bool in_place, const run_hll hl, const uint32_t nbuf,
         size_t (*hits)(slash_ssb *, const slash_ssb_batch *, const fold_plan *, const fast_entry *,
                        int64_t *, run_chunk *, size_t, int64_t, uint64_t, const int64_t *,
                        uint64_t, run_hll),
         bool *stop, slash_status *st)
{
    const size_t n = b->n;
    const int64_t *const times = b->times, *const keys = b->keys;
    const uint64_t width = (uint64_t)hi - (uint64_t)lo; /* t in [lo, hi): t - lo < width */
    const size_t first = i; /* in the slice by slice_of even where t - lo == width: a time of
                             * INT64_MAX in the slice clipped to end there */
    for (;;) {
        i = hits(s, b, pl, fast, acc, ch, i, lo, width, sum, xmask, hl);
        if (i >= n || (i != first && (uint64_t)times[i] - (uint64_t)lo >= width))
            return i;
        /* row i misses */
        const size_t slot = fast_slot(keys[i], lo);
        int64_t *pend = acc + slot;
        ssb_part *p;
        uint8_t *rec = fast_i64_miss(s, pl, &fast[slot], pend, &keys[i], lo, false, 0, 0, &p, st);
        if (!rec) {
            *stop = true;
            return i;
        }
        if (part_bytes(p) > SSB_PREFETCH_MIN) {
            /* this row is done, the rest goes to the general loop */
            *stop = true;
            add_pending_row(pl, shape, sum, xmask, pend, i, times[i]);
            if (nbuf)
                buffer_row(pl, rec, slot, i);
            if (in_place || hl.in != HLL_NONE)
                ch->rows[ch->m] = i, ch->recs[ch->m++] = rec;
            return i + 1;
        }
        /* the record is now in the cache: row i is a hit */
    }
}

/* One loop of run_rows a function, and its run_hits another: the shape
 * and the constants of each (its pending shape, in-place chunk,
 * sketch input and precision, an extreme's image mask: 0 for any), so each
 * loop gets the registers to itself (inlined into one function, every
 * loop's invariants were spilled to the stack and reloaded a row). The
 * calls cost once a run of rows of one slice and once a miss. */
#define RUN_ROWS_VARIANT(name, SHAPE, IN_PLACE, HLL_IN, HLL_P, XMASK, NBUF)               \
    static __attribute__((noinline)) size_t name##_hits(                                          \
        slash_ssb *s, const slash_ssb_batch *b, const fold_plan *pl, const fast_entry *fast,      \
        int64_t *acc, run_chunk *ch, size_t i, int64_t lo, uint64_t width, const int64_t *sum,    \
        uint64_t xmask, run_hll hl)                                                               \
    {                                                                                             \
        hl.in = HLL_IN;                                                                           \
        hl.p = HLL_P ? HLL_P : hl.p;                                                              \
        xmask = XMASK ? XMASK : xmask;                                                            \
        return run_hits(s, b, pl, fast, acc, ch, i, lo, width, SHAPE, sum, xmask, IN_PLACE, hl,   \
                        NBUF);                                                                    \
    }                                                                                             \
    static __attribute__((noinline)) size_t name(                                                 \
        slash_ssb *s, const slash_ssb_batch *b, const fold_plan *pl, fast_entry *fast,            \
        int64_t *acc, run_chunk *ch, size_t i, int64_t lo, int64_t hi, const int64_t *sum,        \
        uint64_t xmask, run_hll hl, bool *stop, slash_status *st)                                 \
    {                                                                                             \
        hl.in = HLL_IN;                                                                           \
        hl.p = HLL_P ? HLL_P : hl.p;                                                              \
        xmask = XMASK ? XMASK : xmask;                                                            \
        return run_rows(s, b, pl, fast, acc, ch, i, lo, hi, SHAPE, sum, xmask, IN_PLACE, hl,      \
                        NBUF, name##_hits, stop, st);                                             \
    }
RUN_ROWS_VARIANT(rows_count, PEND_COUNT, false, HLL_NONE, 0, 0, 0)
RUN_ROWS_VARIANT(rows_count_placed, PEND_COUNT, true, HLL_NONE, 0, 0, 0)
RUN_ROWS_VARIANT(rows_count_sum, PEND_COUNT_SUM, false, HLL_NONE, 0, 0, 0)
RUN_ROWS_VARIANT(rows_count_time_placed, PEND_COUNT_TIME, true, HLL_NONE, 0, 0, 0)
RUN_ROWS_VARIANT(rows_count_time, PEND_COUNT_TIME, false, HLL_NONE, 0, 0, 0)
RUN_ROWS_VARIANT(rows_count_min, PEND_COUNT_MINMAX, false, HLL_NONE, 0, IMAGE_MASK_LEAST, 0)
RUN_ROWS_VARIANT(rows_count_max, PEND_COUNT_MINMAX, false, HLL_NONE, 0, IMAGE_MASK_GREATEST, 0)
RUN_ROWS_VARIANT(rows_count_f64_min, PEND_COUNT_F64, false, HLL_NONE, 0, IMAGE_MASK_LEAST, 0)
RUN_ROWS_VARIANT(rows_count_f64_max, PEND_COUNT_F64, false, HLL_NONE, 0, IMAGE_MASK_GREATEST, 0)
RUN_ROWS_VARIANT(rows_count_num_min, PEND_COUNT_F64_NUM, false, HLL_NONE, 0, IMAGE_MASK_LEAST, 0)
RUN_ROWS_VARIANT(rows_count_num_max, PEND_COUNT_F64_NUM, false, HLL_NONE, 0, IMAGE_MASK_GREATEST, 0)
RUN_ROWS_VARIANT(rows_count_first, PEND_COUNT_PAIR, false, HLL_NONE, 0, IMAGE_MASK_LEAST, 0)
RUN_ROWS_VARIANT(rows_count_last, PEND_COUNT_PAIR, false, HLL_NONE, 0, IMAGE_MASK_GREATEST, 0)
RUN_ROWS_VARIANT(rows_count_first_f64, PEND_COUNT_PAIR_F64, false, HLL_NONE, 0, IMAGE_MASK_LEAST, 0)
RUN_ROWS_VARIANT(rows_count_last_f64, PEND_COUNT_PAIR_F64, false, HLL_NONE, 0, IMAGE_MASK_GREATEST, 0)
RUN_ROWS_VARIANT(rows_count_first_num, PEND_COUNT_PAIR_F64_NUM, false, HLL_NONE, 0, IMAGE_MASK_LEAST, 0)
RUN_ROWS_VARIANT(rows_count_last_num, PEND_COUNT_PAIR_F64_NUM, false, HLL_NONE, 0, IMAGE_MASK_GREATEST,
                 0)
RUN_ROWS_VARIANT(rows_count_hll9_i64, PEND_COUNT, false, HLL_RAW_I64, 9, 0, 0) /* the default rsd */
RUN_ROWS_VARIANT(rows_count_hll9_f64, PEND_COUNT, false, HLL_RAW_F64, 9, 0, 0)
RUN_ROWS_VARIANT(rows_count_hll_i64, PEND_COUNT, false, HLL_RAW_I64, 0, 0, 0)
RUN_ROWS_VARIANT(rows_count_hll_f64, PEND_COUNT, false, HLL_RAW_F64, 0, 0, 0)
RUN_ROWS_VARIANT(rows_count_hll_hashes, PEND_COUNT, false, HLL_HASHES, 0, 0, 0)
RUN_ROWS_VARIANT(rows_count_buf, PEND_COUNT, false, HLL_NONE, 0, 0, 1) /* one buffered sketch */
RUN_ROWS_VARIANT(rows_any, PEND_ANY, pl->nplace != 0, HLL_NONE, 0, 0, pl->nbuf)

/* Every row with an int64 key (no selection) while no partition has
 * outgrown the cache (nothing to prefetch): times come in runs of one slice
 * (sorted, or nearly, in most inputs), so a record costs a range check, one
 * cache-slot lookup and its pending deltas, without the chunk arrays of the
 * general loop; in-place aggregates are applied a chunk of rows at a time.
 * Shares fast[] and acc[] with the general loop (the same slots), so it may
 * stop anywhere: returns the rows done, all of them or those up to a
 * partition outgrowing the cache or an error (*st set); the general loop
 * does the rest. */
static __attribute__((noinline)) size_t runs_i64(slash_ssb *s, const slash_ssb_batch *b, const fold_plan *pl,
                       fast_entry *fast, int64_t *acc, slash_status *st)
{
    slice_cache c = {1, 0, false, true}; /* empty: lo > hi */
    run_chunk ch;
    ch.m = 0;
    size_t i = 0;
    bool stop = false;
    const enum pend_shape shape = pend_shape_of(pl);
    const run_hll hl = run_hll_of(s, b, pl);
    while (i < b->n && !stop) {
        const bool live = slice_of(s, &c, b->times[i]);
        if (!c.fits)
            break; /* the general loop reports it */
        /* the run: row i (in the slice by slice_of, even at a saturated
         * end: a time of INT64_MAX is in the slice clipped to end there)
         * and the rows after it inside [lo, hi) */
        const int64_t lo = c.lo, hi = c.hi;
        if (!live) {
            const size_t first = i;
            for (; i < b->n && (i == first || (b->times[i] >= lo && b->times[i] < hi)); i++)
                s->late++;
            continue;
        }
        size_t (*rows)(slash_ssb *, const slash_ssb_batch *, const fold_plan *, fast_entry *,
                       int64_t *, run_chunk *, size_t, int64_t, int64_t, const int64_t *, uint64_t,
                       run_hll, bool *, slash_status *) = rows_any;
        const int64_t *sum = NULL;
        uint64_t xmask = 0;
        if (pl->nbuf) /* count_distinct, percentile_approx */
            rows = shape == PEND_COUNT && !pl->nplace && pl->nbuf == 1 ? rows_count_buf : rows_any;
        else if (hl.in == HLL_RAW_I64) /* a count and approx_count_distinct */
            rows = hl.p == 9 ? rows_count_hll9_i64 : rows_count_hll_i64;
        else if (hl.in == HLL_RAW_F64)
            rows = hl.p == 9 ? rows_count_hll9_f64 : rows_count_hll_f64;
        else if (hl.in == HLL_HASHES)
            rows = rows_count_hll_hashes;
        else if (shape == PEND_COUNT)
            rows = pl->nplace ? rows_count_placed : rows_count;
        else if (shape == PEND_COUNT_SUM && !pl->nplace)
            rows = rows_count_sum, sum = pl->v[1];
        else if (shape == PEND_COUNT_TIME) /* first/last of a nullable column */
            rows = pl->nplace ? rows_count_time_placed : rows_count_time, sum = pl->src[0],
            xmask = pl->xmask[0];
        else if (shape == PEND_COUNT_MINMAX) /* int64 min/max; beside others, the general extreme */
            rows = pl->nplace ? rows_count_time_placed
                   : pl->xmask[0] >> 63 ? rows_count_max : rows_count_min,
            sum = pl->src[0], xmask = pl->xmask[0];
        else if (shape == PEND_COUNT_F64 && !pl->nplace) /* double min/max */
            rows = pl->xmask[0] >> 63 ? rows_count_f64_max : rows_count_f64_min, sum = pl->src[0],
            xmask = pl->xmask[0];
        else if (shape == PEND_COUNT_F64_NUM && !pl->nplace) /* the same without a NaN */
            rows = pl->xmask[0] >> 63 ? rows_count_num_max : rows_count_num_min, sum = pl->src[0],
            xmask = pl->xmask[0];
        else if (shape == PEND_COUNT_PAIR || shape == PEND_COUNT_PAIR_F64 ||
                 shape == PEND_COUNT_PAIR_F64_NUM) /* first/last */
            rows = pl->pair_mask >> 63
                       ? (shape == PEND_COUNT_PAIR       ? rows_count_last
                          : shape == PEND_COUNT_PAIR_F64 ? rows_count_last_f64 : rows_count_last_num)
                       : (shape == PEND_COUNT_PAIR       ? rows_count_first
                          : shape == PEND_COUNT_PAIR_F64 ? rows_count_first_f64 : rows_count_first_num),
            sum = pl->pair_src, xmask = pl->pair_mask;
        i = rows(s, b, pl, fast, acc, &ch, i, lo, hi, sum, xmask, hl, &stop, st);
    }
    apply_chunk(s, pl, b, ch.rows, ch.recs, ch.m);
    return i;
}

/* Tumbling and sliding windows: in chunks, first hash every record and
 * prefetch its bucket (when the partition no longer fits in cache), then
 * prefetch chain heads, then upsert and apply. Keys look in a
 * direct-mapped cache first; while nothing is prefetched, a record is hashed
 * only when the cache misses (at low cardinality nearly never). */
static slash_status update_slices(slash_ssb *s, const slash_ssb_batch *b)
{
    slice_cache c = {1, 0, false, true}; /* empty: lo > hi */
    uint64_t hash[SSB_CHUNK];
    int64_t win[SSB_CHUNK];
    bool late[SSB_CHUNK]; /* not win == INT64_MIN: a slice clipped there is a live one */
    uint32_t pidx[SSB_CHUNK];
    size_t rows[SSB_CHUNK];
    size_t slot[SSB_CHUNK]; /* the rows' cache slots, when prefetching */
    size_t live_rows[SSB_CHUNK]; /* the chunk's rows not late, and their partials */
    uint8_t *recs[SSB_CHUNK];
    const bool i64 = s->cfg.key_type == SLASH_KEY_INT64;
    fold_plan pl;
    plan_init(s, b, &pl);
    const enum pend_shape shape = pend_shape_of(&pl); /* in locals: see add_pending_row */
    const bool extreme = shape == PEND_COUNT_TIME || shape == PEND_COUNT_MINMAX ||
                         shape == PEND_COUNT_F64 || shape == PEND_COUNT_F64_NUM;
    const int64_t *const sum = shape == PEND_COUNT_SUM ? pl.v[1] : extreme ? pl.src[0]
                               : pl.pair ? pl.pair_src : NULL;
    const uint64_t xmask = extreme ? pl.xmask[0] : pl.pair ? pl.pair_mask : 0;
    fast_entry *fast = i64 ? calloc(SSB_FAST, sizeof *fast) : NULL;
    fast_bytes *fastb = i64 ? NULL : calloc(SSB_FAST, sizeof *fastb);
    /* the pending deltas of the additive aggregates, pl.n per cache slot */
    int64_t *acc = calloc((size_t)SSB_FAST * (pl.n ? pl.n : 1), sizeof *acc);
    if (pl.nbuf) { /* the buffered values; a slot's are written before read */
        pl.bufv = malloc((size_t)SSB_FAST * SSB_BUF_SLOT * sizeof *pl.bufv);
        pl.fill = calloc(SSB_FAST, sizeof *pl.fill);
    }
    if ((i64 ? !fast : !fastb) || !acc || (pl.nbuf && (!pl.bufv || !pl.fill))) {
        free(fast);
        free(fastb);
        free(acc);
        free(pl.bufv);
        free(pl.fill);
        return slash_fail(SLASH_ENOMEM, "update cache");
    }
    slash_status st = SLASH_OK;
    /* prefetch once a partition outgrows the cache: checked here for all,
     * then after each upsert for the partition it grew (only upserts grow
     * one; checking every partition every few chunks cost more than the
     * records' own updates at 256 partitions) */
    size_t state = 0; /* all partitions' bytes; grown by the upserts' appends below */
    bool prefetch = false;
    for (uint32_t q = 0; q < s->cfg.partitions && !prefetch; q++) {
        prefetch = part_bytes(&s->parts[q]) > SSB_PREFETCH_MIN;
        state += part_bytes(&s->parts[q]);
    }
    prefetch = prefetch || state > SSB_PREFETCH_STATE;
    size_t start = 0;
    if (i64 && !b->skip && !prefetch) {
        start = runs_i64(s, b, &pl, fast, acc, &st);
        if (st != SLASH_OK)
            goto out;
        prefetch = start < b->n; /* it stopped early only for that (or a range error) */
    }
    for (size_t base = start; base < b->n; base += SSB_CHUNK) {
        size_t lim = b->n - base < SSB_CHUNK ? b->n - base : SSB_CHUNK, m = 0;
        /* the chunk's selected rows, gathered without branches (a random
         * selection mispredicts a branch per row) */
        if (b->skip) {
            for (size_t j = 0; j < lim; j++) {
                rows[m] = base + j;
                m += !b->skip[base + j];
            }
        } else {
            for (size_t j = 0; j < lim; j++)
                rows[j] = base + j;
            m = lim;
        }
        const bool hashed = prefetch; /* else hashed on a cache miss */
        for (size_t j = 0; j < m; j++) {
            size_t i = rows[j];
            late[j] = !slice_of(s, &c, b->times[i]);
            if (!c.fits) {
                st = slash_fail(SLASH_ERANGE, "record time %lld: a sliding window of size %lld "
                                "and slide %lld holding it would start before or end after the "
                                "int64 time range", (long long)b->times[i],
                                (long long)s->cfg.window.size, (long long)s->cfg.window.slide);
                goto out;
            }
            if (late[j])
                continue;
            win[j] = c.lo;
            if (!hashed)
                continue;
            uint64_t kh;
            if (i64) {
                kh = ssb_hash_i64(b->keys[i]);
            } else {
                const uint8_t *k;
                uint32_t klen;
                batch_key(b, i, &k, &klen);
                kh = ssb_hash_bytes(k, klen);
            }
            pidx[j] = ssb_part_of(s, kh);
            hash[j] = ssb_hash_win(s, kh, c.lo);
            if (prefetch)
                __builtin_prefetch(slash_hidx_bucket_of(&s->parts[pidx[j]].index, hash[j]), 0, 0);
        }
        if (prefetch) {
            for (size_t j = 0; j < m; j++) {
                if (late[j])
                    continue;
                ssb_part *p = &s->parts[pidx[j]];
                slash_hidx_entry *e = slash_hidx_find(&p->index, hash[j], p->log.begin);
                if (e)
                    __builtin_prefetch(slash_lss_ptr(&p->log, slash_hidx_addr(e->word)), 1, 0);
                /* and the record whose pending deltas a miss of the row's cache
                 * slot flushes: at many keys nearly every row misses, and that
                 * record was last touched about SSB_FAST rows ago */
                const size_t i = rows[j];
                const uint8_t *old;
                if (i64) {
                    old = fast[slot[j] = fast_slot(b->keys[i], win[j])].partials;
                } else {
                    const uint8_t *k;
                    uint32_t klen;
                    uint64_t ka, kz;
                    batch_key(b, i, &k, &klen);
                    key_words(k, klen, &ka, &kz);
                    old = fastb[slot[j] = fast_bytes_slot(ka, kz, klen, win[j])].partials;
                }
                if (old)
                    __builtin_prefetch(old, 1, 0);
            }
        }
        size_t nlive = 0;
        for (size_t j = 0; j < m; j++) {
            size_t i = rows[j];
            if (late[j]) {
                s->late++;
                continue;
            }
            uint8_t *part;
            size_t sl;
            ssb_part *grown = NULL; /* the partition upserted into, on a miss */
            if (i64) {
                const int64_t key = b->keys[i];
                sl = fast_slot(key, win[j]);
                fast_entry *f = &fast[sl];
                part = f->partials;
                if (!fast_i64_hit(f, key, win[j]))
                    part = fast_i64_miss(s, &pl, f, acc + sl, &b->keys[i], win[j], hashed,
                                         pidx[j], hash[j], &grown, &st);
            } else {
                const uint8_t *k;
                uint32_t klen;
                batch_key(b, i, &k, &klen);
                uint64_t ka, kz;
                key_words(k, klen, &ka, &kz);
                sl = fast_bytes_slot(ka, kz, klen, win[j]);
                fast_bytes *f = &fastb[sl];
                if (fast_bytes_hit(f, k, klen, ka, kz, win[j])) {
                    part = f->partials;
                } else {
                    if (f->partials)
                        flush_pending(&pl, f->partials, acc + sl, sl);
                    if (!hashed) {
                        uint64_t kh = ssb_hash_bytes(k, klen);
                        pidx[j] = ssb_part_of(s, kh);
                        hash[j] = ssb_hash_win(s, kh, win[j]);
                    }
                    grown = &s->parts[pidx[j]];
                    const uint64_t tail = grown->log.tail;
                    part = ssb_upsert(s, grown, hash[j], win[j], k, klen, &st);
                    state += grown->log.tail - tail;
                    f->a = ka, f->z = kz, f->win = win[j], f->key = k, f->len = klen;
                    f->partials = part;
                }
            }
            if (!part) {
                apply_chunk(s, &pl, b, live_rows, recs, nlive);
                goto out;
            }
            prefetch = prefetch || (grown && (part_bytes(grown) > SSB_PREFETCH_MIN ||
                                              state > SSB_PREFETCH_STATE));
            add_pending_row(&pl, shape, sum, xmask, acc + sl, i, b->times[i]);
            if (pl.nbuf)
                buffer_row(&pl, part, sl, i);
            live_rows[nlive] = i, recs[nlive++] = part;
        }
        apply_chunk(s, &pl, b, live_rows, recs, nlive);
    }
out:
    for (size_t q = 0; q < SSB_FAST; q++) {
        uint8_t *part = i64 ? fast[q].partials : fastb[q].partials;
        if (part)
            flush_pending(&pl, part, acc + q, q);
    }
    free(acc);
    free(fast);
    free(fastb);
    free(pl.bufv);
    free(pl.fill);
    return st;
}

slash_status slash_ssb_update(slash_ssb *s, const slash_ssb_batch *b)
{
    slash_status st = check_batch(s, b);
    if (st != SLASH_OK || b->n == 0)
        return st;
    if (!s->session)
        return update_slices(s, b);
    slash_ssb_batch hb; /* a session's records take their values one by one */
    uint64_t *hashes;
    if ((st = slash_ssb_batch_hash_raw(b, s->cfg.naggs, &hb, &hashes)) != SLASH_OK)
        return st;
    st = update_session(s, &hb);
    free(hashes);
    return st;
}
