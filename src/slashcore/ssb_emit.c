/* ssb_emit.c - scan and emit of finished windows (ssb.h).
 *
 * Tumbling windows (one slice per window) are emitted straight from their
 * records. Sliding windows are assembled first: each slice record is merged
 * into every not-yet-emitted window ending at or before the emit time that
 * contains it, in a scratch partition keyed by (window start, key); a slice
 * is freed once the last window containing it is emitted. Sessions are
 * emitted when their end (last event + gap) is strictly before the emit time
 * (or the emit time is INT64_MAX): a record at exactly the end still joins
 * the session, since sessions that touch merge.
 * Emitting raises the watermark, and later records for emitted windows are
 * counted as late. A partition whose `due` (ssb_impl.h: a lower bound of the
 * earliest emit time touching one of its live records) is after the emit
 * time is not scanned; its watermark rises all the same.
 */
#include "buf.h"
#include "ssb_impl.h"

#include <stdlib.h>

void slash_ssb_result_free(slash_ssb_result *r)
{
    if (!r)
        return;
    free(r->window_start);
    free(r->window_end);
    free(r->keys);
    free(r->key_offsets);
    free(r->key_data);
    for (uint32_t j = 0; j < SLASH_SSB_MAX_AGGS; j++)
        free(r->columns[j]);
    free(r);
}

static slash_status result_reserve(const slash_ssb *s, slash_ssb_result *res, size_t rows)
{
    if (rows <= res->cap)
        return SLASH_OK;
    static const char what[] = "emit result"; /* the columns share one capacity */
    size_t cap;
    slash_status st;
    if ((st = slash_buf_next_cap(res->cap, rows, 256, 8, what, &cap)) ||
        (st = slash_buf_resize((void **)&res->window_start, cap, 8, what)) ||
        (st = slash_buf_resize((void **)&res->window_end, cap, 8, what)))
        return st;
    if (s->cfg.key_type == SLASH_KEY_INT64) {
        if ((st = slash_buf_resize((void **)&res->keys, cap, 8, what)))
            return st;
    } else if ((st = slash_buf_resize((void **)&res->key_offsets, cap + 1, 8, what))) {
        return st;
    }
    for (uint32_t j = 0; j < s->cfg.naggs; j++)
        if ((st = slash_buf_resize(&res->columns[j], cap, 8, what)))
            return st;
    res->cap = cap;
    return SLASH_OK;
}

/* Appends one row: (start, end, key of r, results of partials). */
static slash_status result_add(const slash_ssb *s, slash_ssb_result *res, int64_t start,
                               int64_t end, slash_rec *r, const uint8_t *partials)
{
    slash_status st = result_reserve(s, res, res->rows + 1);
    if (st != SLASH_OK)
        return st;
    size_t i = res->rows;
    res->window_start[i] = start;
    res->window_end[i] = end;
    const uint8_t *key = ssb_rec_key((slash_ssb *)s, r);
    if (s->cfg.key_type == SLASH_KEY_INT64) {
        memcpy(&res->keys[i], key, 8);
    } else {
        if ((st = slash_buf_grow((void **)&res->key_data, &res->key_data_cap,
                                 res->key_data_len + r->key_len, 1, 4096, "emit result keys")))
            return st;
        if (r->key_len) /* an empty key may leave key_data NULL: no NULL + 0 */
            memcpy(res->key_data + res->key_data_len, key, r->key_len);
        res->key_offsets[i] = (int64_t)res->key_data_len;
        res->key_data_len += r->key_len;
        res->key_offsets[i + 1] = (int64_t)res->key_data_len;
    }
    for (uint32_t j = 0; j < s->cfg.naggs; j++)
        slash_crdt_result(s->cfg.aggs[j], partials + s->agg_off[j], (uint8_t *)res->columns[j] + i * 8);
    res->rows++;
    return SLASH_OK;
}

/* Tumbling windows and sessions: every live record whose window is closed
 * at up_to (slash_window_closed: end <= up_to; a session's end < up_to) is a
 * finished window. Sets p->due to the earliest due of what stays. */
static slash_status emit_direct(slash_ssb *s, ssb_part *p, int64_t up_to, slash_ssb_result *res)
{
    const slash_window *w = &s->cfg.window;
    slash_lss *l = &p->log;
    size_t rows = 0; /* count first: one allocation of the result columns */
    for (uint64_t a = l->begin; a < l->tail;) {
        slash_rec *r = slash_lss_ptr(l, a);
        a += r->size;
        rows += !(r->flags & SLASH_REC_FREED) && slash_window_closed(w, ssb_rec_end(s, r), up_to);
    }
    slash_status st0 = result_reserve(s, res, res->rows + rows);
    if (st0 != SLASH_OK)
        return st0;
    int64_t due = INT64_MAX;
    for (uint64_t a = l->begin; a < l->tail;) {
        slash_rec *r = slash_lss_ptr(l, a);
        a += r->size;
        if (r->flags & SLASH_REC_FREED)
            continue;
        int64_t end = ssb_rec_end(s, r);
        if (!slash_window_closed(w, end, up_to)) {
            int64_t d = ssb_rec_due(s, r);
            due = d < due ? d : due;
            continue;
        }
        slash_status st = result_add(s, res, r->win, end, r, ssb_rec_partials(s, r));
        if (st != SLASH_OK)
            return st; /* p->due stays as low as it was */
        ssb_free_rec(p, r);
    }
    p->due = due;
    return SLASH_OK;
}

/* Sliding windows: merge slices into (window start, key) records of the
 * scratch partition, then emit those. Sets p->due to the earliest end of a
 * window not emitted yet of what stays: a slice's first window end, or the
 * first window end after up_to (window starts are multiples of slide). */
static slash_status emit_sliding(slash_ssb *s, ssb_part *p, int64_t up_to, ssb_part *scratch)
{
    const slash_window *w = &s->cfg.window;
    slash_lss *l = &p->log;
    if (up_to < INT64_MIN + w->size)
        return SLASH_OK; /* no window ends that early */
    const int64_t last_start = up_to - w->size;
    /* the first window end after up_to: start the next multiple of slide after last_start */
    const int64_t next_end =
        slash_sat_add(slash_sat_mul(slash_floor_div(last_start, w->slide) + 1, w->slide), w->size);
    int64_t due = INT64_MAX;
    for (uint64_t a = l->begin; a < l->tail;) {
        slash_rec *r = slash_lss_ptr(l, a);
        a += r->size;
        if (r->flags & SLASH_REC_FREED)
            continue;
        int64_t first = slash_window_slice_first_start(w, r->win);
        if (first > last_start) {
            int64_t d = slash_sat_add(first, w->size); /* no window containing this slice ends by up_to */
            due = d < due ? d : due;
            continue;
        }
        uint64_t kh = ssb_rec_key_hash(s, r);
        for (int64_t ws = first; ws <= r->win && ws <= last_start; ws += w->slide) {
            if (ws + w->size <= ssb_part_wm(s, p))
                continue; /* emitted before */
            slash_status st;
            uint8_t *dst = ssb_upsert(s, scratch, ssb_hash_win(s, kh, ws), ws, ssb_rec_key(s, r),
                                      r->key_len, &st);
            if (!dst)
                return st;
            ssb_merge_partials(s, dst, ssb_rec_partials(s, r));
        }
        if (slash_window_slice_last_end(w, r->win) <= up_to)
            ssb_free_rec(p, r);
        else
            due = next_end < due ? next_end : due;
    }
    p->due = due;
    return SLASH_OK;
}

static slash_status emit_scratch(slash_ssb *s, ssb_part *scratch, slash_ssb_result *res)
{
    slash_lss *l = &scratch->log;
    for (uint64_t a = l->begin; a < l->tail;) {
        slash_rec *r = slash_lss_ptr(l, a);
        a += r->size;
        slash_status st = result_add(s, res, r->win, slash_sat_add(r->win, s->cfg.window.size), r,
                                     ssb_rec_partials(s, r));
        if (st != SLASH_OK)
            return st;
    }
    return SLASH_OK;
}

slash_status slash_ssb_emit(slash_ssb *s, int64_t up_to, slash_ssb_result **out)
{
    return slash_ssb_emit_parts(s, up_to, NULL, out);
}

slash_status slash_ssb_emit_parts(slash_ssb *s, int64_t up_to, const uint8_t *skip,
                                  slash_ssb_result **out)
{
    *out = NULL;
    slash_status sealed = epoch_log_emit_ok(s->sealed, s->epoch);
    if (sealed != SLASH_OK)
        return sealed;
    slash_ssb_result *res = calloc(1, sizeof *res);
    if (!res)
        return slash_fail(SLASH_ENOMEM, "emit result");
    res->naggs = s->cfg.naggs;
    slash_status st = SLASH_OK;
    const slash_window *w = &s->cfg.window;
    bool sliding = w->kind == SLASH_WINDOW_SLIDING && w->slice != w->size;
    for (uint32_t i = 0; i < s->cfg.partitions && st == SLASH_OK; i++) {
        ssb_part *p = &s->parts[i];
        if (skip && skip[i]) { /* held: keeps the watermark it had */
            if (!p->own_wm)
                p->own_wm = true, p->wm = s->watermark;
            continue;
        }
        if (up_to < p->due) {
            /* nothing here closes by up_to (ssb_part.due): no scan; the
             * watermark rises as if it had been scanned */
        } else if (sliding) {
            ssb_part scratch;
            if ((st = ssb_part_init(s, &scratch)) != SLASH_OK)
                break;
            st = emit_sliding(s, p, up_to, &scratch);
            if (st == SLASH_OK)
                st = emit_scratch(s, &scratch, res);
            ssb_part_destroy(&scratch);
        } else {
            st = emit_direct(s, p, up_to, res);
        }
        if (st == SLASH_OK)
            st = ssb_part_trim(s, p);
        if (p->own_wm && up_to > p->wm)
            p->wm = up_to;
    }
    if (st != SLASH_OK) {
        slash_ssb_result_free(res);
        return st;
    }
    if (res->key_offsets == NULL && s->cfg.key_type == SLASH_KEY_BYTES) {
        res->key_offsets = calloc(1, 8);
        if (!res->key_offsets) {
            slash_ssb_result_free(res);
            return slash_fail(SLASH_ENOMEM, "emit result");
        }
    }
    if (up_to > s->watermark)
        s->watermark = up_to;
    for (uint32_t i = 0; i < s->cfg.partitions; i++) /* caught up with the store again */
        if (s->parts[i].own_wm && s->parts[i].wm == s->watermark)
            s->parts[i].own_wm = false;
    *out = res;
    return SLASH_OK;
}

/* ---- moving a partition between stores ----------------------------------- */

slash_status slash_ssb_export_partition(const slash_ssb *s, uint32_t part, uint8_t **out,
                                        size_t *len, int64_t *emitted)
{
    *out = NULL, *len = 0;
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "export: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "export: the store holds a sealed delta");
    const ssb_part *p = &s->parts[part];
    const slash_lss *l = &p->log;
    size_t bytes = 0;
    for (uint64_t a = l->begin; a < l->tail;) {
        slash_rec *r = slash_lss_ptr(l, a);
        a += r->size;
        bytes += (r->flags & SLASH_REC_FREED) ? 0 : r->size;
    }
    uint8_t *buf = malloc(bytes ? bytes : 8);
    if (!buf)
        return slash_fail(SLASH_ENOMEM, "export: %zu bytes for partition %u", bytes, part);
    size_t at = 0;
    for (uint64_t a = l->begin; a < l->tail;) {
        slash_rec *r = slash_lss_ptr(l, a);
        a += r->size;
        if (r->flags & SLASH_REC_FREED)
            continue;
        memcpy(buf + at, r, r->size);
        ((slash_rec *)(buf + at))->prev = 0; /* local chain metadata stays here */
        at += r->size;
    }
    *out = buf, *len = bytes;
    *emitted = ssb_part_wm(s, p);
    return SLASH_OK;
}

slash_status slash_ssb_drop_partition(slash_ssb *s, uint32_t part)
{
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "drop: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "drop: the store holds a sealed delta");
    ssb_part fresh;
    slash_status st = ssb_part_init(s, &fresh);
    if (st != SLASH_OK)
        return st;
    ssb_part_destroy(&s->parts[part]);
    s->parts[part] = fresh;
    return SLASH_OK;
}

slash_status slash_ssb_partition_span(const slash_ssb *s, uint32_t part, const void **addr,
                                      size_t *len, int64_t *emitted)
{
    *addr = NULL, *len = 0;
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "span: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "span: the store holds a sealed delta");
    const ssb_part *p = &s->parts[part];
    const slash_lss *l = &p->log;
    *len = (size_t)(l->tail - l->begin);
    *addr = *len ? slash_lss_ptr(l, l->begin) : NULL;
    *emitted = ssb_part_wm(s, p);
    return SLASH_OK;
}

size_t slash_ssb_span_prefix(const void *span, size_t len, size_t max)
{
    const uint8_t *b = span;
    size_t at = 0;
    while (at < len) {
        const slash_rec *r = (const slash_rec *)(uintptr_t)(b + at);
        if (r->size == 0 || r->size > max - at)
            break;
        at += r->size;
    }
    return at;
}

/* A partition being imported: built apart from the store (so nothing merged
 * into the store meanwhile can clash with its bulk links), swapped in whole
 * by slash_ssb_import_end. */
struct slash_ssb_import {
    uint32_t part;
    int64_t emitted;
    uint64_t late; /* records dropped as late, counted into the store's at the end */
    ssb_part p;
};

#define SSB_IMPORT_MAX_HINT ((uint64_t)1 << 26) /* records an index is sized for at most (a bigger one grows later) */
#define SSB_IMPORT_PREFAULT ((uint64_t)256 << 20) /* log bytes faulted in ahead at most */

slash_status slash_ssb_import_begin(slash_ssb *s, uint32_t part, int64_t emitted,
                                    uint64_t bytes, slash_ssb_import **out)
{
    *out = NULL;
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "import: partition %u of %u", part, s->cfg.partitions);
    slash_ssb_import *im = calloc(1, sizeof *im);
    if (!im)
        return slash_fail(SLASH_ENOMEM, "import: partition %u", part);
    im->part = part, im->emitted = emitted;
    slash_status st = ssb_part_init(s, &im->p);
    if (st != SLASH_OK) {
        free(im);
        return st;
    }
    /* the log's pages are small, faulted in a fragment at a time by
     * import_add: a huge-page fault may compact memory first, which took 2-4x
     * the import's own CPU in `slash bench elastic` (a log compacted later
     * gets huge pages again). Not all at begin: the old leader's first
     * fragments wait meanwhile, with its caller (ship blocks on a full
     * ring), while spread over the fragments it overlaps with the shipping.
     * The index is faulted in at once (it is written at random), small. */
    im->p.log.small_pages = 1;
    /* at most this many records: every one takes at least an empty key's size */
    uint64_t records = bytes / ssb_rec_size(s, s->cfg.key_type == SLASH_KEY_INT64 ? 8 : 0);
    st = ssb_part_bulk_reserve(s, &im->p, records < SSB_IMPORT_MAX_HINT ? records
                                                                        : SSB_IMPORT_MAX_HINT);
    if (st != SLASH_OK) {
        ssb_part_destroy(&im->p);
        free(im);
        return st;
    }
    *out = im;
    return SLASH_OK;
}

slash_status slash_ssb_import_add(slash_ssb *s, slash_ssb_import *im, const void *region,
                                  size_t len)
{
    const uint8_t *b = region;
    if (len && !b)
        return slash_fail(SLASH_EINVAL, "import: NULL region of %zu bytes", len);
    slash_status st = ssb_check_region(s, b, len);
    if (st != SLASH_OK)
        return st;
    slash_lss *l = &im->p.log;
    const uint64_t first = l->tail;
    slash_lss_prefault(l, (uint32_t)(len < SSB_IMPORT_PREFAULT ? len : SSB_IMPORT_PREFAULT));
    for (size_t off = 0; off < len;) {
        slash_rec h;
        memcpy(&h, b + off, sizeof h);
        const size_t at = off;
        off += h.size;
        if (h.flags & SLASH_REC_FREED)
            continue;
        uint64_t addr;
        if ((st = slash_lss_append(l, h.size, &addr)) != SLASH_OK)
            break;
        slash_rec *r = slash_lss_ptr(l, addr);
        memcpy(r, b + at, h.size);
        uint64_t kh = ssb_rec_key_hash(s, r);
        if (ssb_part_of(s, kh) != im->part) {
            st = slash_fail(SLASH_EPROTO, "import: a record at offset %zu has a key of another "
                            "partition than %u", at, im->part);
            break;
        }
        /* windows closed at `emitted` were emitted by the old store: late */
        bool closed = s->session
                          ? slash_window_closed(&s->cfg.window, *ssb_rec_session_end(r), im->emitted)
                          : slash_window_slice_last_end(&s->cfg.window, r->win) <= im->emitted;
        if (closed) {
            l->tail = addr; /* the last append: take it back */
            im->late++;
            continue;
        }
        r->prev = ssb_hash_win(s, kh, r->win);
    }
    if (st == SLASH_OK)
        st = ssb_part_bulk_link(s, &im->p, first);
    return st;
}

slash_status slash_ssb_import_end(slash_ssb *s, slash_ssb_import *im)
{
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "import: the store holds a sealed delta");
    ssb_part *dst = &s->parts[im->part];
    ssb_part old = *dst;
    *dst = im->p;
    dst->own_wm = true, dst->wm = im->emitted; /* windows closed at it were emitted elsewhere */
    slash_status st = SLASH_OK;
    if (old.live) { /* what was merged here meanwhile (new-map deltas): merge it in */
        const slash_lss *l = &old.log;
        st = slash_ssb_merge_delta(s, slash_lss_ptr(l, l->begin), (size_t)(l->tail - l->begin));
    }
    if (st != SLASH_OK) {
        im->p = *dst;
        *dst = old;
        return st;
    }
    ssb_part_destroy(&old);
    slash_hidx_advise_huge(&dst->index); /* filled: khugepaged may merge its pages now */
    s->late += im->late;
    free(im);
    return SLASH_OK;
}

void slash_ssb_import_abort(slash_ssb_import *im)
{
    if (!im)
        return;
    ssb_part_destroy(&im->p);
    free(im);
}

slash_status slash_ssb_import_partition(slash_ssb *s, uint32_t part, int64_t emitted,
                                        const void *region, size_t len)
{
    slash_ssb_import *im;
    slash_status st = slash_ssb_import_begin(s, part, emitted, len, &im);
    if (st != SLASH_OK)
        return st;
    if ((st = slash_ssb_import_add(s, im, region, len)) == SLASH_OK &&
        (st = slash_ssb_import_end(s, im)) == SLASH_OK)
        return SLASH_OK;
    slash_ssb_import_abort(im);
    return st;
}
