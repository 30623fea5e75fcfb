/* join_emit.c - emit of finished join windows: every left x right pair of
 * each (window or session, key) group closed at the emit time (its end at or
 * before it; a session's strictly before, since a row at its end still joins
 * it: slash_window_closed), as columns. A partition left out (held while its
 * leadership moves) keeps its own emitted watermark (join_part_wm) until a
 * later emit catches it up with the store's.
 *
 * A tumbling store finds its finished groups in the window lists its
 * emit closes (join_dir.c), a session store by a walk of the log.
 * Three passes, so a failure changes nothing: count the pairs (and key
 * bytes) of finished groups; allocate every result column once; fill them;
 * only then free the emitted groups with their chunks and trim the logs.
 * Within a group the pairs are laid out left-major: left row i meets right
 * rows 0..R-1 in rows [i*R, (i+1)*R) of the group's block, so each right
 * column is written once from the chunks and then copied block by block.
 * With the config's band set, a group gives only its pairs inside the band
 * (join_band.c), counted and written with one scratch array of right rows
 * sized in pass 1 for the largest finished group.
 */
#include "join_impl.h"

#include "buf.h"

#include <stdlib.h>

void slash_join_result_free(slash_join_result *r)
{
    if (!r)
        return;
    free(r->window_start);
    free(r->window_end);
    free(r->keys);
    free(r->key_offsets);
    free(r->key_data);
    for (int side = 0; side < 2; side++)
        for (uint32_t c = 0; c < SLASH_JOIN_MAX_COLS; c++)
            free(r->columns[side][c]);
    free(r);
}

static inline bool finished(const slash_join *s, const join_group *g, int64_t up_to)
{
    return g->h.kind == JOIN_GROUP && !(g->h.flags & JOIN_FREED) &&
           slash_window_closed(&s->cfg.window, g->end, up_to);
}

/* The finished groups of one partition, one by one: a tumbling store's from
 * the window lists closed at up_to (join_dir.c), a session store's from a
 * walk of the log. */
typedef struct fin_iter {
    const join_part *p;
    uint64_t a; /* sessions: the next record */
    uint32_t w; /* tumbling: the list, and the entry in it */
    size_t i;
} fin_iter;

static inline fin_iter fin_start(const join_part *p)
{
    return (fin_iter){p, p->log.begin, 0, 0};
}

static join_group *fin_next(const slash_join *s, fin_iter *it, int64_t up_to)
{
    const join_part *p = it->p;
    if (s->session) {
        while (it->a < p->log.tail) {
            join_group *g = join_ptr(p, it->a);
            it->a += g->h.size;
            if (finished(s, g, up_to))
                return g;
        }
        return NULL;
    }
    for (; it->w < p->dir.n; it->w++, it->i = 0) {
        const join_dir_win *w = &p->dir.wins[it->w];
        if (!slash_window_closed(&s->cfg.window, w->end, up_to))
            continue;
        while (it->i < w->n) {
            join_group *g = join_dir_group(p, w, it->i++);
            if (g)
                return g;
        }
    }
    return NULL;
}

/* The band's scratch: a group's right rows, sorted by time; grown to the
 * largest finished group the walk meets (each emit frees it). */
typedef struct band_buf {
    join_band_row *rows;
    size_t cap;
} band_buf;

static slash_status band_fit(band_buf *b, size_t n)
{
    return slash_buf_grow((void **)&b->rows, &b->cap, n, sizeof *b->rows, 64,
                          "emit: band of right rows");
}

/* Pass 1: pairs and key bytes of the finished groups (of the partitions
 * not skipped); under a band (`band`, NULL without one), those inside it,
 * the scratch grown to the largest group's right rows on the way. */
static slash_status count_pairs(const slash_join *s, int64_t up_to, const uint8_t *skip,
                                band_buf *band, size_t *rows, size_t *kbytes)
{
    size_t n = 0, kb = 0;
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        if (skip && skip[i])
            continue;
        fin_iter it = fin_start(&s->parts[i]);
        for (join_group *g; (g = fin_next(s, &it, up_to));) {
            const join_part *p = it.p;
            size_t pairs, gk;
            if (band) {
                if (g->rows[0]) {
                    slash_status st = band_fit(band, g->rows[1]);
                    if (st != SLASH_OK)
                        return st;
                }
                pairs = join_band_pairs(s, p, g, band->rows);
            } else if (__builtin_mul_overflow((size_t)g->rows[0], (size_t)g->rows[1], &pairs))
                pairs = SIZE_MAX;
            if (pairs == SIZE_MAX || __builtin_add_overflow(n, pairs, &n) ||
                __builtin_mul_overflow(pairs, (size_t)g->key_len, &gk) ||
                __builtin_add_overflow(kb, gk, &kb))
                return slash_fail(SLASH_ETOOBIG, "emit: the joined pairs up to %lld do not fit "
                                  "in memory", (long long)up_to);
        }
    }
    if (n > SIZE_MAX / 8 - 1)
        return slash_fail(SLASH_ETOOBIG, "emit: %zu joined pairs do not fit in memory", n);
    *rows = n;
    *kbytes = kb;
    return SLASH_OK;
}

static slash_status alloc_result(const slash_join *s, size_t rows, size_t kbytes,
                                 slash_join_result **out)
{
    slash_join_result *r = calloc(1, sizeof *r);
    if (!r)
        return slash_fail(SLASH_ENOMEM, "emit result");
    size_t bytes = (rows ? rows : 1) * 8;
    bool ok = (r->window_start = malloc(bytes)) && (r->window_end = malloc(bytes));
    if (s->cfg.key_type == SLASH_KEY_INT64)
        ok = ok && (r->keys = malloc(bytes));
    else
        ok = ok && (r->key_offsets = malloc(bytes + 8)) && (r->key_data = malloc(kbytes ? kbytes : 1));
    for (int side = 0; side < 2; side++) {
        r->ncols[side] = s->cfg.ncols[side];
        for (uint32_t c = 0; c < r->ncols[side]; c++)
            ok = ok && (r->columns[side][c] = malloc(bytes));
    }
    if (!ok) {
        slash_join_result_free(r);
        return slash_fail(SLASH_ENOMEM, "emit result of %zu rows", rows);
    }
    if (r->key_offsets)
        r->key_offsets[0] = 0;
    *out = r;
    return SLASH_OK;
}

/* Pass 2: writes the L x R pairs of g at row r->rows. */
static void fill_group(const slash_join *s, const join_part *p, join_group *g, slash_join_result *r)
{
    const size_t L = g->rows[0], R = g->rows[1], n = L * R, o = r->rows;
    if (!n)
        return;
    for (size_t i = 0; i < n; i++) {
        r->window_start[o + i] = g->win;
        r->window_end[o + i] = g->end;
    }
    const uint8_t *key = join_group_key(g);
    if (r->keys) {
        int64_t k;
        memcpy(&k, key, 8);
        for (size_t i = 0; i < n; i++)
            r->keys[o + i] = k;
    } else {
        for (size_t i = 0; i < n; i++) {
            if (g->key_len) /* an empty key may leave key_data NULL: no NULL + 0 */
                memcpy(r->key_data + r->key_data_len, key, g->key_len);
            r->key_data_len += g->key_len;
            r->key_offsets[o + i + 1] = (int64_t)r->key_data_len;
        }
    }
    /* right columns: block 0 from the chunks, then copies */
    const uint32_t rc = s->cfg.ncols[1], lc = s->cfg.ncols[0];
    size_t j = 0;
    for (uint64_t a = g->head[1]; a;) {
        join_chunk *c = join_ptr(p, a);
        const uint8_t *row = join_chunk_rows(c);
        for (uint32_t k = 0; k < c->rows; k++, j++, row += s->row_bytes[1])
            for (uint32_t col = 0; col < rc; col++)
                memcpy((uint8_t *)r->columns[1][col] + (o + j) * 8, row + col * 8, 8);
        a = c->h.link;
    }
    for (uint32_t col = 0; col < rc; col++) {
        uint8_t *base = (uint8_t *)r->columns[1][col] + o * 8;
        for (size_t i = 1; i < L; i++)
            memcpy(base + i * R * 8, base, R * 8);
    }
    /* left columns: each left row's values repeated R times */
    size_t i = 0;
    for (uint64_t a = g->head[0]; a;) {
        join_chunk *c = join_ptr(p, a);
        const uint8_t *row = join_chunk_rows(c);
        for (uint32_t k = 0; k < c->rows; k++, i++, row += s->row_bytes[0])
            for (uint32_t col = 0; col < lc; col++) {
                uint64_t v;
                memcpy(&v, row + col * 8, 8);
                uint64_t *dst = (uint64_t *)r->columns[0][col] + o + i * R;
                for (size_t q = 0; q < R; q++)
                    dst[q] = v;
            }
        a = c->h.link;
    }
    r->rows += n;
}

slash_status slash_join_emit(slash_join *s, int64_t up_to, slash_join_result **out)
{
    return slash_join_emit_parts(s, up_to, NULL, out);
}

slash_status slash_join_emit_parts(slash_join *s, int64_t up_to, const uint8_t *skip,
                                   slash_join_result **out)
{
    *out = NULL;
    slash_status sealed = epoch_log_emit_ok(s->sealed, s->epoch);
    if (sealed != SLASH_OK)
        return sealed;
    size_t rows = 0, kbytes = 0;
    slash_join_result *r = NULL;
    band_buf buf = {NULL, 0};
    band_buf *band = s->cfg.band ? &buf : NULL;
    slash_status st = count_pairs(s, up_to, skip, band, &rows, &kbytes);
    if (st == SLASH_OK)
        st = alloc_result(s, rows, kbytes, &r);
    if (st != SLASH_OK) {
        free(buf.rows);
        return st;
    }
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        join_part *p = &s->parts[i];
        if (skip && skip[i]) { /* held: keeps the watermark it had */
            if (!p->own_wm)
                p->own_wm = true, p->wm = s->watermark;
            continue;
        }
        fin_iter it = fin_start(p);
        for (join_group *g; (g = fin_next(s, &it, up_to));) {
            if (band) {
                join_band_pairs(s, p, g, band->rows); /* sorts g's right rows into it */
                join_band_fill(s, p, g, band->rows, r);
            } else {
                fill_group(s, p, g, r);
            }
            join_free_group(p, g);
        }
        join_dir_drop_closed(&p->dir, &s->cfg.window, up_to); /* all their groups are out */
    }
    free(buf.rows);
    /* the pairs are out and their state is freed: a compaction that fails
     * for want of memory leaves the store correct, only larger, so it does
     * not fail the emit (the next trim tries again) */
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        join_part *p = &s->parts[i];
        if (skip && skip[i])
            continue;
        (void)join_part_trim(s, p);
        if (p->own_wm && up_to > p->wm)
            p->wm = up_to;
    }
    if (up_to > s->watermark)
        s->watermark = up_to;
    for (uint32_t i = 0; i < s->cfg.partitions; i++) /* caught up with the store again */
        if (s->parts[i].own_wm && s->parts[i].wm == s->watermark)
            s->parts[i].own_wm = false;
    *out = r;
    return SLASH_OK;
}
