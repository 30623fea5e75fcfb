/* exec_repartition.c - the repartition baseline of an executor (exec.h):
 * with SLASH_EXEC_REPARTITION every on-time record goes as a row to the
 * leader of its key's partition, which folds it into its store; nothing is
 * aggregated locally. Routing (GroupConfig.own_rows="auto", exec.c) sends
 * the other partitions' records the same way when local aggregation does not
 * pay. exec.c calls exec_route_rows on a push, exec_flush_all_rows at an
 * epoch end and exec_apply_rows on a received ROWS message (exec_impl.h).
 *
 * Wire format of a ROWS message's payload, per row:
 * [int64 time][key: int64 | uint8 length + bytes][8-byte value per input
 * column the query reads]; the header's `part` holds a join's side, its
 * `offset` the row count. A row takes at least 9 bytes, so a count the
 * payload cannot hold is refused before anything is decoded.
 *
 * Invariants: a record goes to the leader of its partition under the
 * executor's current leader map (as deltas do), so a checkpoint holds each
 * partition at one executor; rows of one message are of one side.
 */
#include "buf.h"
#include "exec_impl.h"
#include "ssb_impl.h" /* the key hash, so repartitioning spreads keys like the store */

#include <stdlib.h>
#include <string.h>

static inline uint32_t owner_of(const slash_exec *ex, const slash_ssb_batch *b, size_t i)
{
    uint64_t h = exec_key_type(ex) == SLASH_KEY_INT64
                     ? ssb_hash_i64(b->keys[i])
                     : ssb_hash_bytes(b->key_data + key_start_at(b, i), key_bytes_at(b, i));
    /* both modes: the leader of the key's partition, so a checkpoint holds each
     * partition at one executor and a restore with another N can move it */
    return slash_leadermap_leader(&ex->mv.map, ssb_part_of_n(ex->parts, h));
}

/* Value columns a row carries: aggregates, the inputs they read; joins, the
 * side's columns. present[j] says whether column j travels. */
uint32_t exec_row_columns(const slash_exec *ex, uint32_t side, bool present[EXEC_MAX_COLS])
{
    uint32_t n = ex->cfg.kind == SLASH_EXEC_JOIN ? ex->cfg.join.ncols[side ? 1 : 0] : ex->cfg.state.naggs;
    for (uint32_t j = 0; j < EXEC_MAX_COLS; j++)
        present[j] = j < n && (ex->cfg.kind == SLASH_EXEC_JOIN ||
                               slash_crdt_needs_input(ex->cfg.state.aggs[j]));
    return n;
}

static slash_status flush_rows(slash_exec *ex, uint32_t r)
{
    rowbuf *rb = &ex->out_rows[r];
    if (!rb->len)
        return SLASH_OK;
    sync_msg h = {.type = SYNC_ROWS, .part = rb->side, .epoch = ex->epoch + 1, .offset = rb->rows,
                  .frag = rb->len};
    slash_status st = exec_ship(ex, r, &h, rb->buf, rb->len);
    ex->m.delta_bytes_sent += rb->len;
    ex->m.records_shipped += rb->rows;
    rb->len = 0;
    rb->rows = 0;
    return st;
}

slash_status exec_flush_all_rows(slash_exec *ex)
{
    slash_status st = SLASH_OK;
    for (uint32_t r = 0; r < ex->n && st == SLASH_OK; r++)
        if (r != ex->rank)
            st = flush_rows(ex, r);
    return st;
}

/* Appends record i (times and keys as in kv, columns in values) to the rows
 * bound for owner r. */
static slash_status append_row(slash_exec *ex, uint32_t r, const slash_ssb_batch *kv,
                               const void *const *values, uint32_t side, size_t i)
{
    rowbuf *rb = &ex->out_rows[r];
    bool present[EXEC_MAX_COLS];
    uint32_t n = exec_row_columns(ex, side, present);
    size_t kl = exec_key_type(ex) == SLASH_KEY_INT64 ? 8 : 1 + key_bytes_at(kv, i);
    size_t w = 8 + kl;
    for (uint32_t j = 0; j < n; j++)
        w += present[j] ? 8 : 0;
    if (rb->len + w > rb->cap || (rb->rows && rb->side != side)) {
        slash_status st = flush_rows(ex, r);
        if (st != SLASH_OK)
            return st;
    }
    rb->side = side;
    uint8_t *p = rb->buf + rb->len;
    memcpy(p, &kv->times[i], 8);
    p += 8;
    if (exec_key_type(ex) == SLASH_KEY_INT64) {
        memcpy(p, &kv->keys[i], 8);
        p += 8;
    } else {
        *p++ = (uint8_t)(kl - 1);
        if (kl > 1)
            memcpy(p, kv->key_data + key_start_at(kv, i), kl - 1);
        p += kl - 1;
    }
    for (uint32_t j = 0; j < n; j++)
        if (present[j]) {
            memcpy(p, (const uint8_t *)values[j] + i * 8, 8);
            p += 8;
        }
    rb->len += w;
    rb->rows++;
    return SLASH_OK;
}

/* Decodes rows received from rank r and folds them into the leader store. */
slash_status exec_apply_rows(slash_exec *ex, uint32_t r, const uint8_t *p, size_t len,
                               uint64_t rows, uint32_t side)
{
    columns *d = &ex->dec;
    bool present[EXEC_MAX_COLS];
    uint32_t ncols = exec_row_columns(ex, side, present);
    slash_key_type kt = exec_key_type(ex);
    if (rows > len / 9) /* a row takes >= 9 bytes: refuse a count the payload cannot hold */
        goto bad;
    if ((size_t)rows + 1 > d->cap) { /* offs holds rows + 1 entries; the columns share cap */
        static const char what[] = "exec: decoding rows";
        size_t cap;
        slash_status st = slash_buf_next_cap(d->cap, (size_t)rows + 1, 256, 8, what, &cap);
        if (st == SLASH_OK && (st = slash_buf_resize((void **)&d->times, cap, 8, what)) == SLASH_OK &&
            (st = slash_buf_resize((void **)&d->keys, cap, 8, what)) == SLASH_OK)
            st = slash_buf_resize((void **)&d->offs, cap, 8, what);
        for (uint32_t j = 0; j < EXEC_MAX_COLS && st == SLASH_OK; j++)
            st = slash_buf_resize((void **)&d->vals[j], cap, 8, what);
        if (st != SLASH_OK)
            return st;
        d->cap = cap;
    }
    slash_status gst = slash_buf_grow((void **)&d->data, &d->data_cap, len ? len : 1, 1, 4096,
                                      "exec: decoding rows");
    if (gst != SLASH_OK)
        return gst;
    const uint8_t *end = p + len;
    size_t kd = 0;
    d->offs[0] = 0;
    for (uint64_t k = 0; k < rows; k++) {
        if (end - p < 8)
            goto bad;
        memcpy(&d->times[k], p, 8);
        p += 8;
        if (kt == SLASH_KEY_INT64) {
            if (end - p < 8)
                goto bad;
            memcpy(&d->keys[k], p, 8);
            p += 8;
        } else {
            if (end - p < 1 || end - p - 1 < *p ||
                *p > (ex->cfg.kind == SLASH_EXEC_JOIN ? SLASH_JOIN_KEY_MAX : SLASH_SSB_KEY_MAX))
                goto bad;
            size_t kl = *p++;
            if (kl)
                memcpy(d->data + kd, p, kl);
            p += kl;
            kd += kl;
            d->offs[k + 1] = (int64_t)kd;
        }
        for (uint32_t j = 0; j < ncols; j++)
            if (present[j]) {
                if (end - p < 8)
                    goto bad;
                memcpy(&d->vals[j][k], p, 8);
                p += 8;
            }
    }
    if (p != end)
        goto bad;
    const int64_t *keys = kt == SLASH_KEY_INT64 ? d->keys : NULL;
    const int64_t *offs = kt == SLASH_KEY_INT64 ? NULL : d->offs;
    const uint8_t *data = kt == SLASH_KEY_INT64 ? NULL : d->data;
    if (ex->cfg.kind == SLASH_EXEC_JOIN) {
        slash_join_batch jb = {.side = side ? SLASH_JOIN_RIGHT : SLASH_JOIN_LEFT, .n = (size_t)rows,
                               .times = d->times, .keys = keys, .key_offsets = offs,
                               .key_offsets_64 = 1, .key_data = data};
        for (uint32_t j = 0; j < ncols; j++)
            jb.columns[j] = d->vals[j];
        return slash_join_update(ex->leader, &jb);
    }
    slash_ssb_batch nb = {.n = (size_t)rows, .times = d->times, .keys = keys, .key_offsets = offs,
                          .key_offsets_64 = 1, .key_data = data};
    for (uint32_t j = 0; j < ncols; j++)
        if (present[j])
            nb.values[j] = d->vals[j];
    return slash_ssb_update(ex->leader, &nb);
bad:
    return slash_fail(SLASH_EPROTO, "exec: malformed records from rank %u", r);
}

/* Marks the on-time records of (kv, values) for their owners: the own ones
 * get skip[i] = 0 (returned count), the others go out as rows. */
#define ROUTE_CHUNK 64

/* route_rows for int64 keys, where every row has the same width: in chunks,
 * the selected on-time rows are gathered without branches, then each is
 * written to its owner's buffer, or for an own row to a sink that is
 * dropped: a select, not a branch, since the owner of a random key is a coin
 * toss that mispredicted every other row. */
static slash_status route_rows_i64(slash_exec *ex, const slash_ssb_batch *kv,
                                   const void *const *values, uint32_t side, uint8_t *skip,
                                   size_t *keep)
{
    bool present[EXEC_MAX_COLS];
    const uint32_t nv = exec_row_columns(ex, side, present);
    const uint8_t *cols[EXEC_MAX_COLS];
    uint32_t nc = 0;
    for (uint32_t j = 0; j < nv; j++)
        if (present[j])
            cols[nc++] = values[j];
    const size_t w = 16 + 8 * (size_t)nc;
    size_t chunk = ROUTE_CHUNK; /* rows that fit in every peer's empty buffer */
    for (uint32_t r = 0; r < ex->n; r++)
        if (r != ex->rank && ex->out_rows[r].cap / w < chunk)
            chunk = ex->out_rows[r].cap / w;
    uint8_t scratch[16 + 8 * EXEC_MAX_COLS];
    rowbuf sink = {.buf = scratch, .cap = sizeof scratch};
    const int64_t pub = ex->published;
    const int64_t *times = kv->times, *keys = kv->keys;
    const uint8_t *sel = kv->skip;
    size_t idx[ROUTE_CHUNK], kept = 0;
    for (size_t base = 0; base < kv->n; base += chunk) {
        size_t lim = kv->n - base < chunk ? kv->n - base : chunk, m = 0;
        for (size_t j = 0; j < lim; j++) {
            size_t i = base + j;
            skip[i] = 1;
            idx[m] = i;
            m += (size_t)!((sel ? sel[i] != 0 : 0) | (times[i] < pub));
        }
        if (!m)
            continue;
        for (uint32_t r = 0; r < ex->n; r++) {
            rowbuf *rb = &ex->out_rows[r];
            if (r == ex->rank)
                continue;
            if (rb->len + m * w > rb->cap || (rb->rows && rb->side != side)) {
                slash_status st = flush_rows(ex, r);
                if (st != SLASH_OK)
                    return st;
            }
            rb->side = side;
        }
        for (size_t t = 0; t < m; t++) {
            size_t i = idx[t];
            uint32_t o = owner_of(ex, kv, i);
            size_t mine = o == ex->rank;
            rowbuf *rb = mine ? &sink : &ex->out_rows[o];
            uint8_t *p = rb->buf + rb->len;
            memcpy(p, &times[i], 8);
            memcpy(p + 8, &keys[i], 8);
            for (uint32_t j = 0; j < nc; j++)
                memcpy(p + 16 + 8 * j, cols[j] + i * 8, 8);
            rb->len += w;
            rb->rows++;
            sink.len = 0;
            skip[i] = (uint8_t)(mine ^ 1);
            kept += mine;
        }
    }
    *keep = kept;
    return SLASH_OK;
}

slash_status exec_route_rows(slash_exec *ex, const slash_ssb_batch *kv, const void *const *values,
                               uint32_t side, uint8_t *skip, size_t *keep)
{
    if (exec_key_type(ex) == SLASH_KEY_INT64)
        return route_rows_i64(ex, kv, values, side, skip, keep);
    *keep = 0;
    slash_status st = SLASH_OK;
    for (size_t i = 0; i < kv->n && st == SLASH_OK; i++) {
        skip[i] = 1;
        if ((kv->skip && kv->skip[i]) || kv->times[i] < ex->published)
            continue;
        uint32_t o = owner_of(ex, kv, i);
        if (o == ex->rank) {
            skip[i] = 0;
            (*keep)++;
        } else {
            st = append_row(ex, o, kv, values, side, i);
        }
    }
    return st;
}
