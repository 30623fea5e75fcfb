/* join.c - the join state store: opening, groups found or fused through the
 * hash index, append-set chunks, index growth, compaction and the batch
 * update loop (record format and invariants: join_impl.h).
 *
 * Growth: a partition's index doubles when it holds more than JOIN_LOAD live
 * groups per bucket, rebuilt by one scan of the log; the log grows page by
 * page and a set grows by chunks of doubling capacity. Nothing is sized in
 * advance and memory stays proportional to live rows. Compaction copies each
 * live group followed by its rows, packed into as few chunks as fit, so a
 * compacted set is contiguous.
 */
#include "join_impl.h"

#include <stdlib.h>

#define JOIN_LOAD 4 /* live groups per bucket before doubling */
#define JOIN_INITIAL_BUCKETS 256
#define JOIN_PREFETCH_MIN ((size_t)1 << 20) /* prefetch when the partitions together exceed this
                                              (about a core's L2) */

/* ---- chunks ------------------------------------------------------------- */

static join_chunk *new_chunk(slash_join *s, join_part *p, join_group *g, int side, uint32_t cap,
                             slash_status *st)
{
    uint64_t addr = 0;
    uint64_t gaddr = join_addr(p, g);
    if ((*st = slash_lss_append(&p->log, (uint32_t)join_chunk_size(s, side, cap), &addr)) != SLASH_OK)
        return NULL;
    join_chunk *c = join_ptr(p, addr);
    c->h.link = g->head[side];
    c->h.size = (uint32_t)join_chunk_size(s, side, cap);
    c->h.kind = (uint8_t)(JOIN_CHUNK_LEFT + side);
    c->h.flags = 0;
    c->h.schema = s->schema;
    c->h.magic = JOIN_MAGIC;
    c->group = (int64_t)(addr - gaddr);
    c->rows = 0;
    c->cap = cap;
    g->head[side] = addr;
    p->chunks++;
    return c;
}

/* The head chunk of g's side when it has room, else a new one with room for
 * at least min(want, max_rows) rows and at least double the old head. */
static join_chunk *room(slash_join *s, join_part *p, join_group *g, int side, uint64_t want,
                        slash_status *st)
{
    join_chunk *h = g->head[side] ? join_ptr(p, g->head[side]) : NULL;
    if (h && h->rows < h->cap)
        return h;
    uint64_t cap = h ? (uint64_t)h->cap * 2 : JOIN_INITIAL_ROWS;
    if (want > cap)
        cap = want;
    if (cap > s->max_rows[side])
        cap = s->max_rows[side];
    return new_chunk(s, p, g, side, (uint32_t)cap, st);
}

uint8_t *join_row_slot(slash_join *s, join_part *p, join_group *g, int side, slash_status *st)
{
    join_chunk *c = room(s, p, g, side, 1, st);
    if (!c)
        return NULL;
    uint8_t *slot = join_chunk_rows(c) + (size_t)c->rows * s->row_bytes[side];
    c->rows++;
    g->rows[side]++;
    p->rows[side]++;
    return slot;
}

slash_status join_append_rows(slash_join *s, join_part *p, join_group *g, int side,
                              const uint8_t *src, uint64_t n)
{
    const uint32_t rb = s->row_bytes[side];
    while (n) {
        slash_status st;
        join_chunk *c = room(s, p, g, side, n, &st);
        if (!c)
            return st;
        uint64_t k = c->cap - c->rows;
        if (k > n)
            k = n;
        memcpy(join_chunk_rows(c) + (size_t)c->rows * rb, src, (size_t)(k * rb));
        c->rows += (uint32_t)k;
        g->rows[side] += k;
        p->rows[side] += k;
        src += k * rb;
        n -= k;
    }
    return SLASH_OK;
}

void join_free_group(join_part *p, join_group *g)
{
    for (int side = 0; side < 2; side++) {
        for (uint64_t a = g->head[side]; a;) {
            join_chunk *c = join_ptr(p, a);
            a = c->h.link;
            c->h.flags |= JOIN_FREED;
            p->chunks--;
            p->freed_bytes += c->h.size;
        }
        p->rows[side] -= g->rows[side];
        g->head[side] = g->rows[side] = 0;
    }
    g->h.flags |= JOIN_FREED;
    p->groups--;
    p->freed_bytes += g->h.size;
}

/* ---- groups and the index -------------------------------------------------- */

static inline bool key_eq(const slash_join *s, join_group *g, const uint8_t *key, uint32_t key_len)
{
    if (s->cfg.key_type == SLASH_KEY_INT64) {
        uint64_t a, b;
        memcpy(&a, join_group_key(g), 8);
        memcpy(&b, key, 8);
        return a == b;
    }
    return g->key_len == key_len && memcmp(join_group_key(g), key, key_len) == 0;
}

static inline uint64_t group_hash(const slash_join *s, join_group *g)
{
    return join_hash_win(s, join_key_hash(s, join_group_key(g), g->key_len), g->win);
}

/* Rebuilds p's index with nbuckets buckets from a scan of its log. */
static slash_status rebuild_index(slash_join *s, join_part *p, uint64_t nbuckets)
{
    slash_hidx fresh;
    slash_status st = slash_hidx_init(&fresh, nbuckets);
    if (st != SLASH_OK)
        return st;
    const slash_lss *l = &p->log;
    for (uint64_t a = l->begin; a < l->tail;) {
        join_group *g = join_ptr(p, a);
        a += g->h.size;
        if (g->h.kind != JOIN_GROUP || (g->h.flags & JOIN_FREED))
            continue;
        uint64_t hash = group_hash(s, g);
        slash_hidx_entry *e;
        if ((st = slash_hidx_claim(&fresh, hash, l->begin, &e)) != SLASH_OK) {
            slash_hidx_destroy(&fresh);
            return st;
        }
        g->h.link = slash_hidx_push(e, join_addr(p, g), hash, l->begin);
    }
    slash_hidx_destroy(&p->index);
    p->index = fresh;
    return SLASH_OK;
}

/* Appends an empty group and links it at the head of its chain. */
static join_group *append_group(slash_join *s, join_part *p, uint64_t hash, int64_t win,
                                int64_t end, const uint8_t *key, uint32_t key_len, slash_status *st)
{
    slash_hidx_entry *e;
    uint64_t addr = 0;
    uint32_t size = join_group_size(key_len);
    join_dir_win *dw = NULL;
    if (!s->session && (*st = join_dir_reserve(&p->dir, end, &dw)) != SLASH_OK)
        return NULL;
    if ((*st = slash_lss_append(&p->log, size, &addr)) != SLASH_OK)
        return NULL;
    if ((*st = slash_hidx_claim(&p->index, hash, p->log.begin, &e)) != SLASH_OK) {
        p->log.tail -= size;
        return NULL;
    }
    join_group *g = join_ptr(p, addr);
    memset(g, 0, size);
    g->h.size = size;
    g->h.kind = JOIN_GROUP;
    g->h.schema = s->schema;
    g->h.magic = JOIN_MAGIC;
    g->win = win;
    g->end = end;
    g->key_len = key_len;
    memcpy(join_group_key(g), key, key_len);
    g->h.link = slash_hidx_push(e, addr, hash, p->log.begin);
    if (dw)
        join_dir_push(dw, addr);
    p->groups++;
    if (p->groups > slash_hidx_buckets(&p->index) * JOIN_LOAD &&
        (*st = rebuild_index(s, p, slash_hidx_buckets(&p->index) * 2)) != SLASH_OK)
        return NULL;
    return g;
}

/* Moves every row of `gone` into `keep` (their sessions overlap or touch): gone's
 * chunks are renamed to keep and its list is put in front of keep's (one walk
 * of gone's list, which the caller picks as the smaller); gone is freed. */
static void fuse(join_part *p, join_group *keep, join_group *gone)
{
    uint64_t kaddr = join_addr(p, keep);
    if (gone->win < keep->win)
        keep->win = gone->win;
    if (gone->end > keep->end)
        keep->end = gone->end;
    for (int side = 0; side < 2; side++) {
        if (!gone->head[side])
            continue;
        join_chunk *last = NULL; /* gone's oldest chunk: it links on to keep's list */
        for (uint64_t a = gone->head[side]; a; a = last->h.link) {
            last = join_ptr(p, a);
            last->group = (int64_t)(a - kaddr);
        }
        last->h.link = keep->head[side];
        keep->head[side] = gone->head[side];
        keep->rows[side] += gone->rows[side];
        gone->head[side] = gone->rows[side] = 0;
    }
    gone->h.flags |= JOIN_FREED;
    p->groups--;
    p->freed_bytes += gone->h.size;
}

join_group *join_upsert(slash_join *s, join_part *p, uint64_t kh, int64_t win, int64_t end,
                        const uint8_t *key, uint32_t key_len, slash_status *st)
{
    const uint64_t begin = p->log.begin;
    const uint64_t hash = join_hash_win(s, kh, win);
    join_group *target = NULL;
    slash_hidx_entry *e = slash_hidx_find(&p->index, hash, begin);
    uint64_t a = e ? slash_hidx_addr(e->word) : 0;
    uint64_t *link = NULL; /* the link that points at a; NULL: the entry */
    while (e && a >= begin) {
        join_group *g = join_ptr(p, a);
        if (g->h.flags & JOIN_FREED) { /* unlink it (local words only) */
            a = g->h.link;
            if (link)
                *link = a;
            else
                e->word = a >= begin ? slash_hidx_make(a, hash) : 0;
            continue;
        }
        bool sealed = a < p->log.read_only;
        link = &g->h.link;
        a = g->h.link;
        if (!key_eq(s, g, key, key_len))
            continue;
        if (!s->session) {
            if (g->win != win)
                continue;
            if (!sealed)
                return g;
            break; /* sealed: start an empty set at the tail */
        }
        if (sealed || !(g->win <= end && win <= g->end))
            continue; /* neither overlaps nor touches [win, end) */
        if (!target) {
            target = g;
        } else if (g->rows[0] + g->rows[1] > target->rows[0] + target->rows[1]) {
            fuse(p, g, target); /* rename the smaller set's chunks */
            target = g;
        } else {
            fuse(p, target, g);
        }
    }
    if (target) {
        if (win < target->win)
            target->win = win;
        if (end > target->end)
            target->end = end;
        return target;
    }
    return append_group(s, p, hash, win, end, key, key_len, st);
}

/* ---- partitions ------------------------------------------------------------- */

slash_status join_part_init(slash_join *s, join_part *p)
{
    memset(p, 0, sizeof *p);
    slash_status st = slash_lss_init(&p->log, s->cfg.log_reserve ? s->cfg.log_reserve
                                                             : slash_lss_default_reserve(s->cfg.partitions));
    if (st != SLASH_OK)
        return st;
    if ((st = slash_hidx_init(&p->index, JOIN_INITIAL_BUCKETS)) != SLASH_OK) {
        slash_lss_destroy(&p->log);
        return st;
    }
    return SLASH_OK;
}

void join_part_destroy(join_part *p)
{
    join_dir_free(&p->dir);
    slash_lss_destroy(&p->log);
    slash_hidx_destroy(&p->index);
}

/* Copies every live group of p, each followed by its rows packed into as
 * few chunks as fit, into a fresh log, and rebuilds the index (and a
 * tumbling store's window directory) over it. */
static slash_status compact(slash_join *s, join_part *p)
{
    join_part np;
    memset(&np, 0, sizeof np);
    slash_status st = slash_lss_init(&np.log, slash_lss_next_reserve(&p->log));
    if (st != SLASH_OK)
        return st;
    for (uint64_t a = p->log.begin; a < p->log.tail && st == SLASH_OK;) {
        join_group *g = join_ptr(p, a);
        a += g->h.size;
        if (g->h.kind != JOIN_GROUP || (g->h.flags & JOIN_FREED))
            continue;
        uint64_t to = 0;
        join_dir_win *dw = NULL;
        if ((!s->session && (st = join_dir_reserve(&np.dir, g->end, &dw)) != SLASH_OK) ||
            (st = slash_lss_append(&np.log, g->h.size, &to)) != SLASH_OK)
            break;
        if (dw)
            join_dir_push(dw, to);
        join_group *ng = join_ptr(&np, to);
        memcpy(ng, g, g->h.size);
        memset(ng->head, 0, sizeof ng->head + sizeof ng->rows);
        np.groups++;
        for (int side = 0; side < 2 && st == SLASH_OK; side++)
            for (uint64_t c = g->head[side]; c && st == SLASH_OK;) {
                join_chunk *ch = join_ptr(p, c);
                st = join_append_rows(s, &np, ng, side, join_chunk_rows(ch), ch->rows);
                c = ch->h.link;
            }
    }
    if (st != SLASH_OK) {
        join_dir_free(&np.dir);
        slash_lss_destroy(&np.log);
        return st;
    }
    np.log.read_only = np.log.begin;
    uint64_t nb = slash_hidx_buckets(&p->index);
    while (nb > JOIN_INITIAL_BUCKETS && np.groups < nb / 2 * JOIN_LOAD / 2)
        nb /= 2;
    np.index = p->index; /* rebuild_index replaces it */
    if ((st = rebuild_index(s, &np, nb)) != SLASH_OK) {
        join_dir_free(&np.dir);
        slash_lss_destroy(&np.log);
        return st;
    }
    join_dir_free(&p->dir);
    slash_lss_destroy(&p->log);
    np.own_wm = p->own_wm, np.wm = p->wm;
    *p = np;
    return SLASH_OK;
}

slash_status join_part_trim(slash_join *s, join_part *p)
{
    slash_status st = epoch_log_trim(&p->log, &p->freed_bytes) ? compact(s, p) : SLASH_OK;
    join_dir_prune(&p->dir, p->log.begin);
    return st;
}

/* ---- open / close / stats ---------------------------------------------------- */

slash_status slash_join_open(const slash_join_config *cfg, slash_join **out)
{
    *out = NULL;
    const slash_window *w = &cfg->window;
    if ((w->kind != SLASH_WINDOW_TUMBLING && w->kind != SLASH_WINDOW_SESSION) || w->size <= 0)
        return slash_fail(SLASH_EINVAL, "window: a join needs a tumbling or session window "
                          "initialised by slash_window_init (size > 0 ms)");
    if (cfg->key_type != SLASH_KEY_INT64 && cfg->key_type != SLASH_KEY_BYTES)
        return slash_fail(SLASH_EINVAL, "key_type: unknown key type %d", (int)cfg->key_type);
    if (cfg->partitions < 1 || cfg->partitions > SLASH_MAX_PARTITIONS)
        return slash_fail(SLASH_EINVAL, "partitions must be in 1..%u, got %u", SLASH_MAX_PARTITIONS,
                          cfg->partitions);
    uint64_t fp = ssb_mix(UINT64_C(0x6a6f696e) + (uint64_t)w->kind * 31 + (uint64_t)w->size * 131 +
                          (uint64_t)cfg->key_type);
    for (int side = 0; side < 2; side++) {
        const char *name = side ? "right" : "left";
        if (cfg->ncols[side] > SLASH_JOIN_MAX_COLS)
            return slash_fail(SLASH_EINVAL, "%s side: at most %d columns, got %u", name,
                              SLASH_JOIN_MAX_COLS, cfg->ncols[side]);
        for (uint32_t c = 0; c < cfg->ncols[side]; c++) {
            if (cfg->cols[side][c] != SLASH_JOIN_I64 && cfg->cols[side][c] != SLASH_JOIN_F64)
                return slash_fail(SLASH_EINVAL, "%s column %u: unknown type %d", name, c,
                                  (int)cfg->cols[side][c]);
            fp = ssb_mix(fp ^ ((uint64_t)cfg->cols[side][c] << (c % 8 * 8)));
        }
        fp = ssb_mix(fp + cfg->ncols[side] * (side ? 977u : 7u));
    }
    if (cfg->band) {
        for (int side = 0; side < 2; side++)
            if (cfg->band_col[side] >= cfg->ncols[side] ||
                cfg->cols[side][cfg->band_col[side]] != SLASH_JOIN_I64)
                return slash_fail(SLASH_EINVAL, "band: %s column %u is not an int64 column of "
                                  "that side", side ? "right" : "left", cfg->band_col[side]);
        if (cfg->band_lo > cfg->band_hi)
            return slash_fail(SLASH_EINVAL, "band: lower bound %lld above the upper %lld",
                              (long long)cfg->band_lo, (long long)cfg->band_hi);
    }
    slash_join *s = calloc(1, sizeof *s);
    if (!s)
        return slash_fail(SLASH_ENOMEM, "join store");
    s->cfg = *cfg;
    s->session = w->kind == SLASH_WINDOW_SESSION;
    s->schema = (uint8_t)(fp | 1);
    s->watermark = INT64_MIN;
    for (int side = 0; side < 2; side++) {
        s->row_bytes[side] = cfg->ncols[side] * 8;
        s->max_rows[side] = s->row_bytes[side] ? JOIN_CHUNK_BYTES / s->row_bytes[side]
                                               : JOIN_MAX_ROWS_NOCOLS;
    }
    s->parts = calloc(cfg->partitions, sizeof *s->parts);
    if (!s->parts) {
        free(s);
        return slash_fail(SLASH_ENOMEM, "join store partitions");
    }
    for (uint32_t i = 0; i < cfg->partitions; i++) {
        slash_status st = join_part_init(s, &s->parts[i]);
        if (st != SLASH_OK) {
            s->cfg.partitions = i;
            slash_join_close(s);
            return st;
        }
    }
    *out = s;
    return SLASH_OK;
}

void slash_join_close(slash_join *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->cfg.partitions; i++)
        join_part_destroy(&s->parts[i]);
    free(s->parts);
    free(s);
}

void slash_join_get_stats(const slash_join *s, slash_join_stats *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        const join_part *p = &s->parts[i];
        out->groups += p->groups;
        out->chunks += p->chunks;
        out->rows[0] += p->rows[0];
        out->rows[1] += p->rows[1];
        out->log_bytes += p->log.tail - p->log.begin;
        out->index_bytes += slash_hidx_memory(&p->index) + join_dir_bytes(&p->dir);
        out->memory_bytes += slash_lss_memory(&p->log);
    }
    out->memory_bytes += out->index_bytes + sizeof *s + s->cfg.partitions * sizeof(join_part);
    out->late = s->late;
    out->epoch = s->epoch;
    out->sealed = s->sealed;
}

int64_t slash_join_watermark(const slash_join *s) { return s->watermark; }

/* ---- batch update -------------------------------------------------------------- */

static inline void batch_key(const slash_join_batch *b, size_t i, int64_t *lo, int64_t *hi)
{
    if (b->key_offsets_64) {
        *lo = ((const int64_t *)b->key_offsets)[i];
        *hi = ((const int64_t *)b->key_offsets)[i + 1];
    } else {
        *lo = ((const int32_t *)b->key_offsets)[i];
        *hi = ((const int32_t *)b->key_offsets)[i + 1];
    }
}

static slash_status check_batch(const slash_join *s, const slash_join_batch *b)
{
    if (b->side != SLASH_JOIN_LEFT && b->side != SLASH_JOIN_RIGHT)
        return slash_fail(SLASH_EINVAL, "batch: side must be LEFT or RIGHT, got %d", (int)b->side);
    if (b->n == 0)
        return SLASH_OK;
    const char *name = b->side ? "right" : "left";
    if (!b->times)
        return slash_fail(SLASH_EINVAL, "batch (%s): the times column is missing", name);
    const int64_t earliest = INT64_MIN + s->cfg.window.size; /* a window start must fit */
    if (!s->session)
        for (size_t i = 0; i < b->n; i++)
            if (b->times[i] < earliest)
                return slash_fail(SLASH_EINVAL, "batch (%s): time %lld at row %zu is before the "
                                  "first window", name, (long long)b->times[i], i);
    for (uint32_t c = 0; c < s->cfg.ncols[b->side]; c++)
        if (!b->columns[c])
            return slash_fail(SLASH_EINVAL, "batch (%s): column %u is missing", name, c);
    if (s->cfg.key_type == SLASH_KEY_INT64)
        return b->keys ? SLASH_OK
                       : slash_fail(SLASH_EINVAL, "batch (%s): the int64 keys column is missing", name);
    if (!b->key_offsets || !b->key_data)
        return slash_fail(SLASH_EINVAL, "batch (%s): the byte-string keys column is missing", name);
    for (size_t i = 0; i < b->n; i++) {
        int64_t lo, hi;
        batch_key(b, i, &lo, &hi);
        if (lo < 0 || hi < lo)
            return slash_fail(SLASH_EINVAL, "batch (%s): key offsets decrease at row %zu", name, i);
        if (hi - lo > SLASH_JOIN_KEY_MAX)
            return slash_fail(SLASH_EINVAL, "batch (%s): key at row %zu is %lld bytes, the limit "
                              "is %d", name, i, (long long)(hi - lo), SLASH_JOIN_KEY_MAX);
    }
    return SLASH_OK;
}

static inline size_t part_bytes(const join_part *p)
{
    return (size_t)(p->log.tail - p->log.begin) + slash_hidx_memory(&p->index);
}

/* In chunks of JOIN_CHUNK records: hash each record and (once the state no
 * longer fits in cache) prefetch its bucket, then the group at the head of
 * its chain (one find per row, the head kept for the next pass), then that
 * group's first chunk of this side, and only then upsert and append: the
 * three dependent cache misses of a row overlap with those of the rows
 * around it. Prefetches are hints; a group that is not at the head of its
 * chain is simply found by the upsert. The heads are read before any upsert
 * of the chunk, so no append or index rebuild has moved them. */
#define JOIN_CHUNK 32
#define JOIN_PREFETCH_EVERY 64 /* chunks between two looks at the state's size */

slash_status slash_join_update(slash_join *s, const slash_join_batch *b)
{
    slash_status st = check_batch(s, b);
    if (st != SLASH_OK)
        return st;
    const int side = b->side;
    const uint32_t ncols = s->cfg.ncols[side];
    const int64_t size = s->cfg.window.size;
    uint64_t kh[JOIN_CHUNK];
    int64_t win[JOIN_CHUNK], end[JOIN_CHUNK];
    const uint8_t *key[JOIN_CHUNK];
    uint32_t key_len[JOIN_CHUNK];
    const join_group *head[JOIN_CHUNK]; /* prefetching: the group at the head of each row's chain */
    bool prefetch = false;
    for (size_t base = 0; base < b->n; base += JOIN_CHUNK) {
        size_t m = b->n - base < JOIN_CHUNK ? b->n - base : JOIN_CHUNK;
        if (base % (JOIN_CHUNK * JOIN_PREFETCH_EVERY) == 0) { /* a sum over every partition */
            size_t held = 0;
            for (uint32_t q = 0; q < s->cfg.partitions; q++)
                held += part_bytes(&s->parts[q]);
            prefetch = held > JOIN_PREFETCH_MIN;
        }
        for (size_t j = 0; j < m; j++) {
            size_t i = base + j;
            int64_t t = b->times[i];
            win[j] = s->session ? t : slash_floor_div(t, size) * size;
            end[j] = win[j] > INT64_MAX - size ? INT64_MAX : win[j] + size;
            if (s->cfg.key_type == SLASH_KEY_INT64) {
                key[j] = (const uint8_t *)&b->keys[i], key_len[j] = 8;
            } else {
                int64_t lo, hi;
                batch_key(b, i, &lo, &hi);
                key[j] = b->key_data + lo, key_len[j] = (uint32_t)(hi - lo);
            }
            kh[j] = join_key_hash(s, key[j], key_len[j]);
            if (prefetch) {
                const join_part *p = &s->parts[join_part_of(s, kh[j])];
                __builtin_prefetch(slash_hidx_bucket_of(&p->index, join_hash_win(s, kh[j], win[j])), 0, 0);
            }
        }
        if (prefetch) {
            for (size_t j = 0; j < m; j++) {
                const join_part *p = &s->parts[join_part_of(s, kh[j])];
                slash_hidx_entry *e = slash_hidx_find(&p->index, join_hash_win(s, kh[j], win[j]),
                                                      p->log.begin);
                head[j] = e ? join_ptr(p, slash_hidx_addr(e->word)) : NULL;
                if (head[j])
                    __builtin_prefetch(head[j], 0, 0);
            }
            for (size_t j = 0; j < m; j++) /* the chain heads found above: no second find */
                if (head[j] && head[j]->head[side])
                    __builtin_prefetch(join_ptr(&s->parts[join_part_of(s, kh[j])],
                                                head[j]->head[side]), 1, 0);
        }
        for (size_t j = 0; j < m; j++) {
            join_part *p = &s->parts[join_part_of(s, kh[j])];
            if (slash_window_closed(&s->cfg.window, end[j], join_part_wm(s, p))) {
                s->late++;
                continue;
            }
            join_group *g = join_upsert(s, p, kh[j], win[j], end[j], key[j], key_len[j], &st);
            uint8_t *slot = g ? join_row_slot(s, p, g, side, &st) : NULL;
            if (!slot)
                return st;
            for (uint32_t c = 0; c < ncols; c++)
                memcpy(slot + c * 8, (const uint8_t *)b->columns[c] + (base + j) * 8, 8);
        }
    }
    return SLASH_OK;
}
