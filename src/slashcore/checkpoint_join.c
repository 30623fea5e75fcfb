/* checkpoint_join.c - join partition blobs of the checkpoint format
 * (checkpoint.h, kind 3): the live (window or session, key) sets of one
 * partition of a join store, each with both sides' rows.
 *
 * Invariants: a writer emits only live groups of an unsealed store, each
 * with every row on its chunk lists (g->rows[side] of them), so a set
 * appears once per blob; a reader validates the whole blob (header, CRC,
 * every set's window, key and row counts, the key's partition) before it
 * touches the store, then appends each set's rows through join_upsert and
 * join_append_rows, the store's own paths (a set given twice is a multiset
 * union, as a merge of two deltas is, and overlapping sessions fuse). Rows
 * are copied as the store holds them: 8-byte columns, little-endian hosts.
 */
#include "checkpoint_impl.h"
#include "join_impl.h"

#include <stdlib.h>

/* A side without columns bounds its rows per set (a count is the only thing
 * that costs no payload bytes). */
#define JOIN_CKPT_MAX_EMPTY_ROWS ((uint64_t)1 << 32)

uint64_t slash_ckpt_join_fingerprint(const slash_join_config *cfg)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    h = ckpt_fnv(h, UINT64_C(0x4e494f4a)); /* "JOIN": never equal to an aggregate's */
    h = ckpt_fnv(h, (uint64_t)cfg->window.kind);
    h = ckpt_fnv(h, (uint64_t)cfg->window.size);
    h = ckpt_fnv(h, (uint64_t)cfg->key_type);
    h = ckpt_fnv(h, cfg->partitions);
    for (int side = 0; side < 2; side++) {
        h = ckpt_fnv(h, cfg->ncols[side]);
        for (uint32_t c = 0; c < cfg->ncols[side] && c < SLASH_JOIN_MAX_COLS; c++)
            h = ckpt_fnv(h, (uint64_t)cfg->cols[side][c]);
    }
    return h;
}

static size_t key_wire(const slash_join *s, const join_group *g)
{
    return s->cfg.key_type == SLASH_KEY_INT64 ? 8 : 1 + (size_t)g->key_len;
}

slash_status slash_ckpt_write_join_partition(const slash_join *s, uint32_t part, uint8_t **out,
                                             size_t *len)
{
    *out = NULL, *len = 0;
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "checkpoint: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "checkpoint: the join store holds a sealed delta");
    const join_part *p = &s->parts[part];
    const slash_lss *l = &p->log;
    size_t payload = 0;
    uint64_t groups = 0;
    for (uint64_t a = l->begin; a < l->tail;) {
        join_group *g = join_ptr(p, a);
        a += g->h.size;
        if (g->h.kind != JOIN_GROUP || (g->h.flags & JOIN_FREED))
            continue;
        payload += 16 + key_wire(s, g) + 16 + (size_t)g->rows[0] * s->row_bytes[0] +
                   (size_t)g->rows[1] * s->row_bytes[1];
        groups++;
    }
    uint8_t *buf = malloc(SLASH_CKPT_HEADER + payload + 4);
    if (!buf)
        return slash_fail(SLASH_ENOMEM, "checkpoint: %zu bytes for join partition %u", payload,
                          part);
    uint8_t *w = buf + SLASH_CKPT_HEADER;
    for (uint64_t a = l->begin; a < l->tail;) {
        join_group *g = join_ptr(p, a);
        a += g->h.size;
        if (g->h.kind != JOIN_GROUP || (g->h.flags & JOIN_FREED))
            continue;
        ckpt_put_u64(w, (uint64_t)g->win), w += 8;
        ckpt_put_u64(w, (uint64_t)g->end), w += 8;
        if (s->cfg.key_type == SLASH_KEY_BYTES)
            *w++ = (uint8_t)g->key_len;
        memcpy(w, join_group_key(g), g->key_len), w += g->key_len;
        ckpt_put_u64(w, g->rows[0]), w += 8;
        ckpt_put_u64(w, g->rows[1]), w += 8;
        for (int side = 0; side < 2; side++)
            for (uint64_t c = g->head[side]; c;) {
                join_chunk *ch = join_ptr(p, c);
                size_t n = (size_t)ch->rows * s->row_bytes[side];
                memcpy(w, join_chunk_rows(ch), n), w += n;
                c = ch->h.link;
            }
    }
    assert((size_t)(w - buf) == SLASH_CKPT_HEADER + payload);
    ckpt_header h = {.version = SLASH_CKPT_VERSION, .kind = SLASH_CKPT_KIND_JOIN_PARTITION,
                     .fp = slash_ckpt_join_fingerprint(&s->cfg), .partition = part,
                     .partitions = s->cfg.partitions, .records = groups, .payload = payload,
                     .watermark = s->watermark};
    return ckpt_seal(buf, &h, payload, out, len);
}

/* One set of a join partition payload, decoded (pointers into the blob). */
typedef struct wire_set {
    int64_t win, end;
    const uint8_t *key;
    uint32_t key_len;
    uint64_t rows[2];
    const uint8_t *data[2];
} wire_set;

/* Decodes and checks the set at payload offset *off; advances *off. */
static slash_status decode_set(const slash_join *s, uint32_t part, const uint8_t *p, size_t n,
                               size_t *off, uint64_t i, wire_set *g)
{
    size_t o = *off;
    if (n - o < 17)
        goto trunc;
    g->win = (int64_t)ckpt_get_u64(p + o), o += 8;
    g->end = (int64_t)ckpt_get_u64(p + o), o += 8;
    g->key_len = 8;
    if (s->cfg.key_type == SLASH_KEY_BYTES) {
        g->key_len = p[o++];
        if (g->key_len > SLASH_JOIN_KEY_MAX)
            return slash_fail(SLASH_EINVAL, "checkpoint join partition %u: set %llu has a %u-byte "
                              "key (at most %d)", part, (unsigned long long)i, g->key_len,
                              SLASH_JOIN_KEY_MAX);
    }
    if (n - o < (size_t)g->key_len + 16)
        goto trunc;
    g->key = p + o, o += g->key_len;
    const int64_t size = s->cfg.window.size;
    if (s->session ? g->end <= g->win && g->end != INT64_MAX /* clipped at INT64_MAX */
                   : (g->win % size != 0 ||
                      g->end != (g->win > INT64_MAX - size ? INT64_MAX : g->win + size)))
        return slash_fail(SLASH_EINVAL, "checkpoint join partition %u: set %llu has a bad window "
                          "[%lld, %lld)", part, (unsigned long long)i, (long long)g->win,
                          (long long)g->end);
    if (join_part_of(s, join_key_hash(s, g->key, g->key_len)) != part)
        return slash_fail(SLASH_EINVAL, "checkpoint join partition %u: set %llu has a key of "
                          "another partition", part, (unsigned long long)i);
    g->rows[0] = ckpt_get_u64(p + o), o += 8;
    g->rows[1] = ckpt_get_u64(p + o), o += 8;
    for (int side = 0; side < 2; side++) {
        uint32_t rb = s->row_bytes[side];
        if (rb ? g->rows[side] > (n - o) / rb : g->rows[side] > JOIN_CKPT_MAX_EMPTY_ROWS)
            return slash_fail(SLASH_EINVAL, "checkpoint join partition %u: set %llu claims %llu "
                              "%s rows, more than the blob holds", part, (unsigned long long)i,
                              (unsigned long long)g->rows[side], side ? "right" : "left");
        g->data[side] = p + o;
        o += (size_t)g->rows[side] * rb;
    }
    *off = o;
    return SLASH_OK;
trunc:
    return slash_fail(SLASH_EINVAL, "checkpoint join partition %u: set %llu is truncated", part,
                      (unsigned long long)i);
}

slash_status slash_ckpt_read_join_partition(slash_join *s, uint32_t part, const void *data,
                                            size_t len)
{
    ckpt_header h;
    slash_status st = ckpt_header_check(data, len, SLASH_CKPT_KIND_JOIN_PARTITION,
                                        slash_ckpt_join_fingerprint(&s->cfg), &h);
    if (st != SLASH_OK)
        return st;
    if (h.partition != part)
        return slash_fail(SLASH_EINVAL, "checkpoint: the blob holds join partition %u, not %u",
                          h.partition, part);
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_EINVAL, "checkpoint: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "checkpoint: restore into a join store with a sealed delta");
    const uint8_t *p = (const uint8_t *)data + SLASH_CKPT_HEADER;
    size_t n = (size_t)h.payload;
    /* a set takes at least 33 bytes on the wire: refuse a count the payload cannot hold */
    if (h.records > n / 33 + 1)
        return slash_fail(SLASH_EINVAL, "checkpoint join partition %u: %llu sets cannot fit in "
                          "%zu bytes", part, (unsigned long long)h.records, n);
    wire_set g;
    size_t off = 0;
    for (uint64_t i = 0; i < h.records; i++) /* pass 1: check everything */
        if ((st = decode_set(s, part, p, n, &off, i, &g)) != SLASH_OK)
            return st;
    if (off != n)
        return slash_fail(SLASH_EINVAL, "checkpoint join partition %u: %zu bytes after the last "
                          "of %llu sets", part, n - off, (unsigned long long)h.records);
    join_part *jp = &s->parts[part];
    off = 0;
    for (uint64_t i = 0; i < h.records; i++) { /* pass 2: apply */
        (void)decode_set(s, part, p, n, &off, i, &g);
        if (!g.rows[0] && !g.rows[1]) /* nothing to join: a merge makes no set of it either */
            continue;
        if (slash_window_closed(&s->cfg.window, g.end, join_part_wm(s, jp))) {
            s->late += g.rows[0] + g.rows[1];
            continue;
        }
        uint64_t kh = join_key_hash(s, g.key, g.key_len);
        join_group *dst = join_upsert(s, jp, kh, g.win, g.end, g.key, g.key_len, &st);
        if (!dst)
            return st;
        for (int side = 0; side < 2; side++)
            if (g.rows[side] &&
                (st = join_append_rows(s, jp, dst, side, g.data[side], g.rows[side])) != SLASH_OK)
                return st;
    }
    if (h.watermark > s->watermark)
        s->watermark = h.watermark;
    return SLASH_OK;
}
