/* join_epoch.c - epoch deltas of the join store: sealing the changed span of
 * each partition, handing it out, merging (appending) a peer's span and
 * dropping a shipped one.
 *
 * Why one contiguous span suffices: a reset truncates the log up to the
 * sealed boundary, and a row for a sealed group starts a fresh group (with
 * its own chunks) at the tail; so every group changed since the last reset,
 * and every chunk of it, lives in [begin, tail), and at begin_epoch the delta
 * is exactly [begin, read_only := tail). A region is self-describing: each
 * chunk names its group by a relative offset, and each group carries its
 * window bounds and key, so a peer appends the rows of each live chunk to
 * its own group of the same (window or session, key).
 */
#include "join_impl.h"

#include <stdalign.h>
#include <stdlib.h>

slash_status slash_join_begin_epoch(slash_join *s)
{
    return epoch_log_begin(&s->sealed, &s->epoch, EPOCH_LOGS(s));
}

slash_status slash_join_delta(const slash_join *s, uint32_t part, const void **addr, size_t *len)
{
    return epoch_log_delta(s->sealed, EPOCH_LOGS(s), part, addr, len);
}

slash_status slash_join_reset_delta(slash_join *s)
{
    if (!s->sealed)
        return slash_fail(SLASH_ESTATE, "reset_delta: no epoch is sealed");
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        join_part *p = &s->parts[i];
        slash_lss *l = &p->log;
        for (uint64_t a = l->begin; a < l->read_only;) {
            join_rec *r = join_ptr(p, a);
            a += r->size;
            if (r->flags & JOIN_FREED) {
                p->freed_bytes -= r->size;
            } else if (r->kind == JOIN_GROUP) {
                join_group *g = (join_group *)r;
                p->groups--;
                p->rows[0] -= g->rows[0];
                p->rows[1] -= g->rows[1];
            } else {
                p->chunks--;
            }
        }
        slash_lss_truncate(l, l->read_only);
    }
    s->sealed = false;
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        slash_status st = join_part_trim(s, &s->parts[i]);
        if (st != SLASH_OK)
            return st;
    }
    return SLASH_OK;
}

/* ---- merging a peer's region ---------------------------------------------- */

/* Record starts are 8-byte aligned: bit off/8 of a region's map is set when
 * a live group record starts at offset off. */
static inline bool map_has(const uint64_t *map, size_t off)
{
    return (map[off / 8 / 64] >> (off / 8 % 64)) & 1;
}

static slash_status check_group(const slash_join *s, const join_group *g, size_t off)
{
    uint32_t kmax = s->cfg.key_type == SLASH_KEY_INT64 ? 8 : SLASH_JOIN_KEY_MAX;
    if (g->key_len > kmax || (s->cfg.key_type == SLASH_KEY_INT64 && g->key_len != 8))
        return slash_fail(SLASH_EPROTO, "delta: bad key length %u at offset %zu", g->key_len, off);
    if (g->h.size != join_group_size(g->key_len))
        return slash_fail(SLASH_EPROTO, "delta: bad group size %u at offset %zu", g->h.size, off);
    const int64_t size = s->cfg.window.size;
    if (s->session ? g->end <= g->win && g->end != INT64_MAX /* clipped at INT64_MAX */
                   : (g->win % size != 0 ||
                      g->end != (g->win > INT64_MAX - size ? INT64_MAX : g->win + size)))
        return slash_fail(SLASH_EPROTO, "delta: bad window [%lld, %lld) at offset %zu",
                          (long long)g->win, (long long)g->end, off);
    return SLASH_OK;
}

/* Validates the whole region: headers, sizes, group bounds, and that every
 * live chunk names a live group of the region (checked in a bitmap of the
 * live groups' offsets, one bit per 8 bytes). Fails with SLASH_EPROTO. */
slash_status join_check_region(const slash_join *s, const uint8_t *p, size_t len)
{
    uint64_t *map = calloc(len / 8 / 64 + 1, sizeof *map);
    if (!map)
        return slash_fail(SLASH_ENOMEM, "merge_delta: group map");
    slash_status st = SLASH_OK;
    for (size_t off = 0; off < len && st == SLASH_OK;) {
        join_rec h;
        if (len - off < sizeof h) {
            st = slash_fail(SLASH_EPROTO, "delta: truncated record header at offset %zu", off);
            break;
        }
        memcpy(&h, p + off, sizeof h);
        if (h.magic != JOIN_MAGIC)
            st = slash_fail(SLASH_EPROTO, "delta: no join record at offset %zu (bad magic)", off);
        else if (h.schema != s->schema)
            st = slash_fail(SLASH_EPROTO, "delta: record at offset %zu comes from a store with "
                            "another window, key type or columns", off);
        else if (h.flags & ~JOIN_FREED)
            st = slash_fail(SLASH_EPROTO, "delta: unknown flags 0x%x at offset %zu", h.flags, off);
        else if (h.size % 8 || h.size == 0 || h.size > len - off)
            st = slash_fail(SLASH_EPROTO, "delta: bad record size %u at offset %zu", h.size, off);
        else if (h.kind == JOIN_GROUP) {
            join_group g;
            if (h.size < sizeof g) {
                st = slash_fail(SLASH_EPROTO, "delta: short group at offset %zu", off);
                break;
            }
            memcpy(&g, p + off, sizeof g);
            if ((st = check_group(s, &g, off)) == SLASH_OK && !(h.flags & JOIN_FREED))
                map[off / 8 / 64] |= UINT64_C(1) << (off / 8 % 64);
        } else if (h.kind == JOIN_CHUNK_LEFT || h.kind == JOIN_CHUNK_LEFT + 1) {
            join_chunk c;
            if (h.size < sizeof c) {
                st = slash_fail(SLASH_EPROTO, "delta: short chunk at offset %zu", off);
                break;
            }
            memcpy(&c, p + off, sizeof c);
            if (c.rows > c.cap || h.size != join_chunk_size(s, h.kind - JOIN_CHUNK_LEFT, c.cap))
                st = slash_fail(SLASH_EPROTO, "delta: bad chunk of %u/%u rows in %u bytes at "
                                "offset %zu", c.rows, c.cap, h.size, off);
        } else {
            st = slash_fail(SLASH_EPROTO, "delta: unknown record kind %u at offset %zu", h.kind, off);
        }
        off += h.size;
    }
    /* every live chunk names a live group: record sizes are now known good */
    for (size_t off = 0; off < len && st == SLASH_OK;) {
        join_chunk c;
        memcpy(&c.h, p + off, sizeof c.h);
        if (c.h.kind != JOIN_GROUP && !(c.h.flags & JOIN_FREED)) {
            memcpy(&c, p + off, sizeof c);
            /* off - group, computed without overflow */
            bool ok = c.group > 0 ? (uint64_t)c.group <= off
                                  : c.group < 0 && (uint64_t)-(c.group + 1) < len - off - 1;
            size_t goff = ok ? (size_t)((uint64_t)off - (uint64_t)c.group) : 0;
            if (!ok || goff % 8 || !map_has(map, goff))
                st = slash_fail(SLASH_EPROTO, "delta: chunk at offset %zu names no live group "
                                "(relative offset %lld)", off, (long long)c.group);
        }
        off += c.h.size;
    }
    free(map);
    return st;
}

/* One live chunk of a region on its way into the store: its group's window
 * and key (pointing into the region), the key's hash and its partition. */
typedef struct merge_item {
    const uint8_t *rows;
    const uint8_t *key;
    int64_t win, end;
    uint64_t kh;
    uint32_t nrows, key_len;
    int side;
    join_part *part;
} merge_item;

#define MERGE_AHEAD 16 /* chunks whose index buckets are prefetched ahead of their upsert */

slash_status slash_join_merge_delta(slash_join *s, const void *region, size_t len)
{
    const uint8_t *p = region;
    if (len && !p)
        return slash_fail(SLASH_EINVAL, "merge_delta: NULL region of %zu bytes", len);
    slash_status st = join_check_region(s, p, len);
    if (st != SLASH_OK)
        return st;
    return join_merge_region(s, p, len);
}

slash_status join_merge_region(slash_join *s, const uint8_t *p, size_t len)
{
    slash_status st = SLASH_OK;
    merge_item q[MERGE_AHEAD];
    size_t off = 0;
    while (off < len && st == SLASH_OK) {
        /* gather up to MERGE_AHEAD live chunks, prefetching each one's bucket */
        size_t m = 0;
        for (; off < len && m < MERGE_AHEAD; ) {
            join_chunk c;
            memcpy(&c.h, p + off, sizeof c.h);
            size_t here = off;
            off += c.h.size;
            if (c.h.kind == JOIN_GROUP || (c.h.flags & JOIN_FREED))
                continue;
            memcpy(&c, p + here, sizeof c);
            const uint8_t *gp = p + (size_t)((uint64_t)here - (uint64_t)c.group);
            join_group g;
            memcpy(&g, gp, sizeof g);
            const uint8_t *key = gp + sizeof g;
            uint64_t kh = join_key_hash(s, key, g.key_len);
            join_part *part = &s->parts[join_part_of(s, kh)];
            if (slash_window_closed(&s->cfg.window, g.end, join_part_wm(s, part))) {
                s->late += c.rows;
                continue;
            }
            merge_item *it = &q[m++];
            it->rows = p + here + sizeof c;
            it->key = key;
            it->key_len = g.key_len;
            it->win = g.win;
            it->end = g.end;
            it->nrows = c.rows;
            it->side = c.h.kind - JOIN_CHUNK_LEFT;
            it->kh = kh;
            it->part = part;
            __builtin_prefetch(slash_hidx_bucket_of(&it->part->index,
                                                    join_hash_win(s, it->kh, it->win)), 0, 0);
        }
        for (size_t j = 0; j < m && st == SLASH_OK; j++) {
            merge_item *it = &q[j];
            join_group *dst = join_upsert(s, it->part, it->kh, it->win, it->end, it->key,
                                          it->key_len, &st);
            if (dst)
                st = join_append_rows(s, it->part, dst, it->side, it->rows, it->nrows);
        }
    }
    return st;
}
