/* ssb_epoch.c - epoch deltas of the state backend (ssb.h): sealing the
 * changed span of each partition, handing it out, merging a peer's span and
 * dropping a shipped one.
 *
 * Why one contiguous span suffices: every record changed since the last
 * reset lives in [begin, tail), because a reset truncates the log up to the
 * sealed boundary and an update to a sealed record appends a fresh one. So at
 * begin_epoch the delta is exactly [begin, read_only := tail).
 */
#include "ssb_impl.h"

#include <stdalign.h>

slash_status slash_ssb_begin_epoch(slash_ssb *s)
{
    return epoch_log_begin(&s->sealed, &s->epoch, EPOCH_LOGS(s));
}

slash_status slash_ssb_delta(const slash_ssb *s, uint32_t part, const void **addr, size_t *len)
{
    return epoch_log_delta(s->sealed, EPOCH_LOGS(s), part, addr, len);
}

slash_status slash_ssb_reset_delta(slash_ssb *s)
{
    if (!s->sealed)
        return slash_fail(SLASH_ESTATE, "reset_delta: no epoch is sealed");
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        ssb_part *p = &s->parts[i];
        slash_lss *l = &p->log;
        for (uint64_t a = l->begin; a < l->read_only;) {
            slash_rec *r = slash_lss_ptr(l, a);
            if (r->flags & SLASH_REC_FREED)
                p->freed_bytes -= r->size;
            else
                p->live--;
            a += r->size;
        }
        slash_lss_truncate(l, l->read_only);
    }
    s->sealed = false;
    for (uint32_t i = 0; i < s->cfg.partitions; i++) {
        slash_status st = ssb_part_trim(s, &s->parts[i]);
        if (st != SLASH_OK)
            return st;
    }
    return SLASH_OK;
}

slash_status ssb_check_region(const slash_ssb *s, const uint8_t *p, size_t len)
{
    size_t off = 0;
    while (off < len) {
        slash_rec h;
        if (len - off < sizeof h)
            return slash_fail(SLASH_EPROTO, "delta: truncated record header at offset %zu", off);
        memcpy(&h, p + off, sizeof h);
        if (h.magic != SLASH_REC_MAGIC)
            return slash_fail(SLASH_EPROTO, "delta: no record at offset %zu (bad magic)", off);
        if (h.schema != s->schema)
            return slash_fail(SLASH_EPROTO, "delta: record at offset %zu comes from a store "
                              "with another window, key type or aggregates", off);
        if (h.flags & ~SLASH_REC_FREED)
            return slash_fail(SLASH_EPROTO, "delta: unknown flags 0x%x at offset %zu", h.flags, off);
        if (s->cfg.key_type == SLASH_KEY_INT64 ? h.key_len != 8 : h.key_len > SLASH_SSB_KEY_MAX)
            return slash_fail(SLASH_EPROTO, "delta: bad key length %u at offset %zu", h.key_len, off);
        if (h.size != ssb_rec_size(s, h.key_len) || h.size > len - off)
            return slash_fail(SLASH_EPROTO, "delta: bad record size %u at offset %zu", h.size, off);
        if (s->session) {
            int64_t end;
            memcpy(&end, p + off + sizeof h, 8);
            if (end <= h.win && end != INT64_MAX) /* a session at INT64_MAX is clipped there */
                return slash_fail(SLASH_EPROTO, "delta: empty session at offset %zu", off);
        } else if (h.win % s->cfg.window.slice != 0 && h.win != INT64_MIN) { /* INT64_MIN: clipped */
            return slash_fail(SLASH_EPROTO, "delta: window %lld at offset %zu is not a slice start",
                              (long long)h.win, off);
        }
        off += h.size;
    }
    return SLASH_OK;
}

/* Session windows: one record at a time (a merge may fuse sessions). */
static slash_status merge_sessions(slash_ssb *s, const uint8_t *p, size_t len)
{
    slash_status st = SLASH_OK;
    uint8_t *buf = s->scratch;
    slash_rec *r = (slash_rec *)buf;
    for (size_t off = 0; off < len; off += r->size) {
        memcpy(buf, p + off, sizeof(slash_rec));
        memcpy(buf, p + off, r->size); /* aligned copy: the region may be unaligned */
        if (r->flags & SLASH_REC_FREED)
            continue;
        int64_t end = *ssb_rec_session_end(r);
        uint64_t kh = ssb_rec_key_hash(s, r);
        ssb_part *part = &s->parts[ssb_part_of(s, kh)];
        if (slash_window_closed(&s->cfg.window, end, ssb_part_wm(s, part))) {
            s->late++;
            continue;
        }
        uint8_t *dst = ssb_upsert_session(s, part, kh, r->win, end,
                                          ssb_rec_key(s, r), r->key_len, &st);
        if (!dst)
            return st;
        ssb_merge_partials(s, dst, ssb_rec_partials(s, r));
    }
    return SLASH_OK;
}

/* Slices: in chunks, as update_slices does, so the index and record misses of
 * a chunk overlap: hash every record and prefetch its bucket, then prefetch
 * the chain heads, then upsert and merge. A merge of a large delta into a
 * large store is otherwise one cache miss after another. Records are read in
 * place when the region is 8-byte aligned, else copied out first. */
static slash_status merge_slices(slash_ssb *s, const uint8_t *p, size_t len)
{
    enum { CHUNK = SSB_SCRATCH_RECS };
    const bool aligned = ((uintptr_t)p & 7) == 0;
    slash_rec *recs[CHUNK];
    uint64_t hash[CHUNK];
    uint32_t pidx[CHUNK];
    slash_status st = SLASH_OK;
    size_t off = 0;
    while (off < len) {
        size_t m = 0;
        while (m < CHUNK && off < len) {
            slash_rec *r;
            if (aligned) {
                r = (slash_rec *)(uintptr_t)(p + off);
            } else {
                r = (slash_rec *)(s->scratch + m * s->rec_max); /* an unaligned region */
                memcpy(r, p + off, sizeof(slash_rec));
                memcpy(r, p + off, r->size);
            }
            off += r->size;
            if (r->flags & SLASH_REC_FREED)
                continue;
            uint64_t kh = ssb_rec_key_hash(s, r);
            pidx[m] = ssb_part_of(s, kh);
            if (slash_window_slice_last_end(&s->cfg.window, r->win) <=
                ssb_part_wm(s, &s->parts[pidx[m]])) {
                s->late++;
                continue;
            }
            hash[m] = ssb_hash_win(s, kh, r->win);
            __builtin_prefetch(slash_hidx_bucket_of(&s->parts[pidx[m]].index, hash[m]), 0, 0);
            recs[m++] = r;
        }
        for (size_t j = 0; j < m; j++) {
            ssb_part *part = &s->parts[pidx[j]];
            slash_hidx_entry *e = slash_hidx_find(&part->index, hash[j], part->log.begin);
            if (e)
                __builtin_prefetch(slash_lss_ptr(&part->log, slash_hidx_addr(e->word)), 1, 0);
        }
        for (size_t j = 0; j < m; j++) {
            slash_rec *r = recs[j];
            uint8_t *dst = ssb_upsert(s, &s->parts[pidx[j]], hash[j], r->win, ssb_rec_key(s, r),
                                      r->key_len, &st);
            if (!dst)
                return st;
            ssb_merge_partials(s, dst, ssb_rec_partials(s, r));
        }
    }
    return SLASH_OK;
}

slash_status slash_ssb_merge_delta(slash_ssb *s, const void *region, size_t len)
{
    const uint8_t *p = region;
    if (len && !p)
        return slash_fail(SLASH_EINVAL, "merge_delta: NULL region of %zu bytes", len);
    slash_status st = ssb_check_region(s, p, len);
    if (st != SLASH_OK)
        return st;
    return s->session ? merge_sessions(s, p, len) : merge_slices(s, p, len);
}
