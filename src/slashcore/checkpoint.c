/* checkpoint.c - the checkpoint blob format (checkpoint.h): CRC32C, the
 * config fingerprint, writing and checking aggregate partition and META
 * blobs, and the image an executor hands out (join partitions:
 * checkpoint_join.c).
 *
 * Invariants: a writer emits only live (not FREED) records of an unsealed
 * store, so each (window, key) appears once per partition blob; a reader
 * validates the whole blob (header, CRC, every record) before it touches the
 * store. Restoring into an empty partition is a bulk load (ssb_part_bulk_*:
 * the index sized once for the header's record count, records decoded
 * straight into the log, then linked without lookups; a (window, key) given
 * twice, or overlapping sessions of a key, refuse the blob and leave the
 * partition empty); into a partition that already holds records it goes
 * through slash_ssb_merge_delta, the path a peer's delta takes. Integers are
 * little-endian on the wire.
 */
#include "slash/checkpoint.h"

#include "checkpoint_impl.h"
#include "ssb_impl.h"

#include <stdalign.h>
#include <stdlib.h>

/* ---- CRC32C, table-driven (reflected polynomial 0x82F63B78) ------------- */

static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    __atomic_store_n(&crc_ready, 1, __ATOMIC_RELEASE);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CRC_HW 1
/* The SSE4.2 crc32 instruction computes the same reflected CRC32C update as
 * the table (without the inversions), 8 bytes an instruction. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
static int crc_hw_ok = -1; /* -1: not probed yet */
#endif

uint32_t slash_crc32c(uint32_t crc, const void *data, size_t n)
{
#ifdef CRC_HW
    int hw = __atomic_load_n(&crc_hw_ok, __ATOMIC_RELAXED);
    if (hw < 0) {
        __builtin_cpu_init();
        hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        __atomic_store_n(&crc_hw_ok, hw, __ATOMIC_RELAXED);
    }
    if (hw)
        return ~crc_hw(~crc, data, n);
#endif
    return slash_crc32c_sw(crc, data, n);
}

uint32_t slash_crc32c_sw(uint32_t crc, const void *data, size_t n)
{
    if (!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE))
        crc_init(); /* idempotent: racing threads write the same table */
    const uint8_t *p = data;
    crc = ~crc;
    while (n >= 8) { /* slicing-by-8 */
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
              crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8, n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#define put_u16 ckpt_put_u16
#define put_u32 ckpt_put_u32
#define put_u64 ckpt_put_u64
#define get_u16 ckpt_get_u16
#define get_u32 ckpt_get_u32
#define get_u64 ckpt_get_u64

/* ---- fingerprint ----------------------------------------------------------- */

#define fnv ckpt_fnv

uint64_t slash_ckpt_fingerprint(const slash_ssb_config *cfg)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    h = fnv(h, (uint64_t)cfg->window.kind);
    h = fnv(h, (uint64_t)cfg->window.size);
    h = fnv(h, (uint64_t)(cfg->window.kind == SLASH_WINDOW_SLIDING ? cfg->window.slide : 0));
    h = fnv(h, (uint64_t)cfg->key_type);
    h = fnv(h, cfg->partitions);
    h = fnv(h, cfg->naggs);
    for (uint32_t j = 0; j < cfg->naggs && j < SLASH_SSB_MAX_AGGS; j++)
        h = fnv(h, (uint64_t)cfg->aggs[j]);
    return h;
}

/* ---- header -------------------------------------------------------------- */

static void header_put(uint8_t *p, const ckpt_header *h)
{
    memset(p, 0, SLASH_CKPT_HEADER);
    memcpy(p, "SLCK", 4);
    put_u16(p + 4, h->version);
    put_u16(p + 6, h->kind);
    put_u64(p + 8, h->fp);
    put_u32(p + 16, h->partition);
    put_u32(p + 20, h->partitions);
    put_u64(p + 24, h->records);
    put_u64(p + 32, h->payload);
    put_u64(p + 40, (uint64_t)h->watermark);
}

static const char *kind_name(unsigned k)
{
    return k == SLASH_CKPT_KIND_PARTITION        ? "partition"
           : k == SLASH_CKPT_KIND_META           ? "meta"
           : k == SLASH_CKPT_KIND_JOIN_PARTITION ? "join partition"
                                                 : "unknown";
}

slash_status ckpt_header_check(const void *data, size_t len, unsigned kind, uint64_t fp,
                                 ckpt_header *h)
{
    const uint8_t *p = data;
    if (!p || len < SLASH_CKPT_HEADER + 4)
        return slash_fail(SLASH_EINVAL, "checkpoint %s blob: truncated (%zu bytes, a header "
                          "alone takes %d)", kind_name(kind), len, SLASH_CKPT_HEADER + 4);
    if (memcmp(p, "SLCK", 4) != 0)
        return slash_fail(SLASH_EINVAL, "checkpoint %s blob: bad magic (not a Slash checkpoint)",
                          kind_name(kind));
    h->version = get_u16(p + 4);
    h->kind = get_u16(p + 6);
    h->fp = get_u64(p + 8);
    h->partition = get_u32(p + 16);
    h->partitions = get_u32(p + 20);
    h->records = get_u64(p + 24);
    h->payload = get_u64(p + 32);
    h->watermark = (int64_t)get_u64(p + 40);
    if (h->version < SLASH_CKPT_VERSION_MIN || h->version > SLASH_CKPT_VERSION)
        return slash_fail(SLASH_EINVAL, "checkpoint %s blob: format version %u, this build reads "
                          "versions %u to %u", kind_name(kind), h->version, SLASH_CKPT_VERSION_MIN,
                          SLASH_CKPT_VERSION);
    if (h->kind == SLASH_CKPT_KIND_JOIN_PARTITION && h->version < 2)
        return slash_fail(SLASH_EINVAL, "checkpoint %s blob: a join partition in a version %u "
                          "blob (joins came with version 2)", kind_name(kind), h->version);
    if (h->kind != kind)
        return slash_fail(SLASH_EINVAL, "checkpoint blob: a %s blob where a %s blob was expected",
                          kind_name(h->kind), kind_name(kind));
    if (h->payload != len - SLASH_CKPT_HEADER - 4)
        return slash_fail(SLASH_EINVAL, "checkpoint %s blob: truncated or padded (header says "
                          "%llu payload bytes, %zu present)", kind_name(kind),
                          (unsigned long long)h->payload, len - SLASH_CKPT_HEADER - 4);
    for (size_t i = 48; i < SLASH_CKPT_HEADER; i++)
        if (p[i] != 0)
            return slash_fail(SLASH_EINVAL, "checkpoint %s blob: header byte %zu is %u where "
                              "every writer puts 0", kind_name(kind), i, p[i]);
    uint32_t want = get_u32(p + len - 4);
    uint32_t got = slash_crc32c(0, p, len - 4);
    if (want != got)
        return slash_fail(SLASH_EINVAL, "checkpoint %s blob: checksum mismatch (stored %08x, "
                          "computed %08x): the blob is corrupt", kind_name(kind), want, got);
    if (h->fp != fp)
        return slash_fail(SLASH_EINVAL, "checkpoint %s blob: config fingerprint %016llx differs "
                          "from this executor's %016llx (other aggregates, key type, window or "
                          "partitions)", kind_name(kind), (unsigned long long)h->fp,
                          (unsigned long long)fp);
    return SLASH_OK;
}

slash_status ckpt_seal(uint8_t *buf, const ckpt_header *h, size_t payload, uint8_t **out,
                              size_t *len)
{
    header_put(buf, h);
    size_t n = SLASH_CKPT_HEADER + payload;
    put_u32(buf + n, slash_crc32c(0, buf, n));
    *out = buf;
    *len = n + 4;
    return SLASH_OK;
}

/* ---- partition blobs ------------------------------------------------------- */

static size_t rec_wire_size(const slash_ssb *s, const slash_rec *r)
{
    return 8 + (s->session ? 8 : 0) +
           (s->cfg.key_type == SLASH_KEY_INT64 ? 8 : 1 + (size_t)r->key_len) + s->agg_bytes;
}

slash_status slash_ckpt_write_partition(const slash_ssb *s, uint32_t part, uint8_t **out,
                                        size_t *len)
{
    *out = NULL, *len = 0;
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "checkpoint: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "checkpoint: the store holds a sealed delta");
    const ssb_part *p = &s->parts[part];
    const slash_lss *l = &p->log;
    size_t payload = 0;
    uint64_t records = 0;
    for (uint64_t a = l->begin; a < l->tail;) {
        slash_rec *r = slash_lss_ptr(l, a);
        a += r->size;
        if (r->flags & SLASH_REC_FREED)
            continue;
        payload += rec_wire_size(s, r);
        records++;
    }
    uint8_t *buf = malloc(SLASH_CKPT_HEADER + payload + 4);
    if (!buf)
        return slash_fail(SLASH_ENOMEM, "checkpoint: %zu bytes for partition %u", payload, part);
    uint8_t *w = buf + SLASH_CKPT_HEADER;
    for (uint64_t a = l->begin; a < l->tail;) {
        slash_rec *r = slash_lss_ptr(l, a);
        a += r->size;
        if (r->flags & SLASH_REC_FREED)
            continue;
        put_u64(w, (uint64_t)r->win), w += 8;
        if (s->session)
            put_u64(w, (uint64_t)*ssb_rec_session_end(r)), w += 8;
        if (s->cfg.key_type == SLASH_KEY_BYTES)
            *w++ = r->key_len;
        memcpy(w, ssb_rec_key(s, r), r->key_len), w += r->key_len;
        memcpy(w, ssb_rec_partials(s, r), s->agg_bytes), w += s->agg_bytes;
    }
    ckpt_header h = {.version = SLASH_CKPT_VERSION, .kind = SLASH_CKPT_KIND_PARTITION,
                     .fp = slash_ckpt_fingerprint(&s->cfg), .partition = part,
                     .partitions = s->cfg.partitions, .records = records, .payload = payload,
                     .watermark = s->watermark};
    return ckpt_seal(buf, &h, payload, out, len);
}

/* Decodes the record at payload offset *off into the store record r (a
 * buffer of s->rec_max bytes), checking it; advances *off. r->prev gets the record's
 * index hash (ssb_part_bulk_link takes it from there; a merge ignores prev).
 * *aligned caches the last window found to be a slice start (blobs hold runs
 * of records of one window; the check is a 64-bit division). */
static slash_status decode_rec(const slash_ssb *s, uint32_t part, const uint8_t *p, size_t n,
                               size_t *off, uint64_t i, slash_rec *r, int64_t *aligned)
{
    size_t o = *off;
    size_t fixed = 8 + (s->session ? 8 : 0);
    if (n - o < fixed + 1)
        goto trunc;
    memset(r, 0, sizeof *r);
    r->win = (int64_t)get_u64(p + o), o += 8;
    int64_t end = 0;
    if (s->session)
        end = (int64_t)get_u64(p + o), o += 8;
    uint32_t klen = 8;
    if (s->cfg.key_type == SLASH_KEY_BYTES) {
        klen = p[o++];
        if (klen > SLASH_SSB_KEY_MAX)
            return slash_fail(SLASH_EINVAL, "checkpoint partition %u: record %llu has a %u-byte "
                              "key (at most %d)", part, (unsigned long long)i, klen, SLASH_SSB_KEY_MAX);
    }
    if (n - o < klen + (size_t)s->agg_bytes)
        goto trunc;
    r->size = ssb_rec_size(s, klen);
    r->key_len = (uint8_t)klen;
    r->schema = s->schema;
    r->magic = SLASH_REC_MAGIC;
    if (s->session) {
        if (end <= r->win && end != INT64_MAX) /* a session at INT64_MAX is clipped there */
            return slash_fail(SLASH_EINVAL, "checkpoint partition %u: record %llu is an empty "
                              "session [%lld, %lld)", part, (unsigned long long)i,
                              (long long)r->win, (long long)end);
        *ssb_rec_session_end(r) = end;
    } else if (r->win != *aligned) {
        if (r->win % s->cfg.window.slice != 0 && r->win != INT64_MIN) /* INT64_MIN: clipped */
            return slash_fail(SLASH_EINVAL, "checkpoint partition %u: record %llu: window %lld is "
                              "not a slice start", part, (unsigned long long)i, (long long)r->win);
        *aligned = r->win;
    }
    uint8_t *k = ssb_rec_key(s, r);
    memset(k, 0, ssb_round8(klen));
    memcpy(k, p + o, klen), o += klen;
    memcpy(ssb_rec_partials(s, r), p + o, s->agg_bytes), o += s->agg_bytes;
    uint64_t kh = ssb_rec_key_hash(s, r);
    if (ssb_part_of(s, kh) != part)
        return slash_fail(SLASH_EINVAL, "checkpoint partition %u: record %llu has a key of "
                          "another partition", part, (unsigned long long)i);
    r->prev = ssb_hash_win(s, kh, r->win);
    *off = o;
    return SLASH_OK;
trunc:
    return slash_fail(SLASH_EINVAL, "checkpoint partition %u: record %llu is truncated", part,
                      (unsigned long long)i);
}

/* Restores the payload of `records` records into the empty partition
 * `part` in one pass: the index is sized once for the record count, each
 * record is checked and decoded onto the log's tail (sequential writes),
 * and then all are linked into the index without the upsert's lookups
 * (keys are unique within a blob; ssb_part_bulk_link refuses a blob where
 * they are not). On any failure the partition is emptied again, so a bad
 * blob changes nothing, as with the two-pass merge. Records whose windows
 * are closed at the store's watermark are dropped as late, as a merge drops
 * them. */
static slash_status bulk_load(slash_ssb *s, uint32_t part, const uint8_t *p, size_t n,
                              uint64_t records)
{
    ssb_part *dst = &s->parts[part];
    const uint64_t first = dst->log.tail, late0 = s->late;
    slash_status st = ssb_part_bulk_reserve(s, dst, records);
    if (st != SLASH_OK)
        return st;
    slash_rec *r = (slash_rec *)s->scratch;
    size_t off = 0;
    int64_t aligned = 0;
    for (uint64_t i = 0; i < records && st == SLASH_OK; i++) {
        if ((st = decode_rec(s, part, p, n, &off, i, r, &aligned)) != SLASH_OK)
            break;
        bool late = s->session
                        ? slash_window_closed(&s->cfg.window, *ssb_rec_session_end(r), s->watermark)
                        : slash_window_slice_last_end(&s->cfg.window, r->win) <= s->watermark;
        if (late) {
            s->late++;
            continue;
        }
        uint64_t addr;
        if ((st = slash_lss_append(&dst->log, r->size, &addr)) == SLASH_OK)
            memcpy(slash_lss_ptr(&dst->log, addr), r, r->size);
    }
    if (st == SLASH_OK && off != n)
        st = slash_fail(SLASH_EINVAL, "checkpoint partition %u: %zu bytes after the last of "
                        "%llu records", part, n - off, (unsigned long long)records);
    if (st == SLASH_OK)
        st = ssb_part_bulk_link(s, dst, first);
    if (st != SLASH_OK) {
        ssb_part_bulk_abort(s, dst, first);
        s->late = late0;
    }
    return st;
}

slash_status slash_ckpt_read_partition(slash_ssb *s, uint32_t part, const void *data, size_t len)
{
    ckpt_header h;
    slash_status st = ckpt_header_check(data, len, SLASH_CKPT_KIND_PARTITION,
                                   slash_ckpt_fingerprint(&s->cfg), &h);
    if (st != SLASH_OK)
        return st;
    if (h.partition != part)
        return slash_fail(SLASH_EINVAL, "checkpoint: the blob holds partition %u, not %u",
                          h.partition, part);
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_EINVAL, "checkpoint: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "checkpoint: restore into a store with a sealed delta");
    const uint8_t *p = (const uint8_t *)data + SLASH_CKPT_HEADER;
    size_t n = (size_t)h.payload;
    /* a record takes at least 17 bytes on the wire: refuse a count the payload cannot hold */
    if (h.records > n / 17 + 1)
        return slash_fail(SLASH_EINVAL, "checkpoint partition %u: %llu records cannot fit in %zu "
                          "bytes", part, (unsigned long long)h.records, n);
    ssb_part *dst = &s->parts[part];
    if (dst->live == 0 && dst->log.begin == dst->log.tail) {
        st = bulk_load(s, part, p, n, h.records);
    } else { /* the partition holds records: merge, as a peer's delta is merged */
        uint8_t *one = s->scratch;
        size_t off = 0, region = 0;
        int64_t aligned = 0;
        for (uint64_t i = 0; i < h.records; i++) { /* pass 1: check, and size the region */
            if ((st = decode_rec(s, part, p, n, &off, i, (slash_rec *)one, &aligned)) != SLASH_OK)
                return st;
            region += ((slash_rec *)one)->size;
        }
        if (off != n)
            return slash_fail(SLASH_EINVAL, "checkpoint partition %u: %zu bytes after the last of "
                              "%llu records", part, n - off, (unsigned long long)h.records);
        uint8_t *buf = malloc(region ? region : 8);
        if (!buf)
            return slash_fail(SLASH_ENOMEM, "checkpoint: %zu bytes restoring partition %u",
                              region, part);
        off = 0;
        size_t at = 0;
        for (uint64_t i = 0; i < h.records; i++) { /* pass 2: build the store records */
            slash_rec *r = (slash_rec *)(buf + at);
            (void)decode_rec(s, part, p, n, &off, i, r, &aligned);
            at += r->size;
        }
        st = slash_ssb_merge_delta(s, buf, region);
        free(buf);
    }
    if (st != SLASH_OK)
        return st;
    if (h.watermark > s->watermark)
        s->watermark = h.watermark;
    return SLASH_OK;
}

/* ---- META blobs ------------------------------------------------------------- */

#define META_FIXED 88

slash_status slash_ckpt_write_meta(const slash_ckpt_meta_info *m, uint64_t fp, uint8_t **out,
                                   size_t *len)
{
    *out = NULL, *len = 0;
    if (m->size < 1 || m->size > SLASH_GROUP_MAX || m->rank >= m->size)
        return slash_fail(SLASH_EINVAL, "checkpoint meta: rank %u of %u", m->rank, m->size);
    size_t payload = META_FIXED + 8 * (size_t)m->size;
    uint8_t *buf = malloc(SLASH_CKPT_HEADER + payload + 4);
    if (!buf)
        return slash_fail(SLASH_ENOMEM, "checkpoint meta");
    uint8_t *w = buf + SLASH_CKPT_HEADER;
    put_u64(w, m->id);
    put_u64(w + 8, m->pushes);
    put_u32(w + 16, m->rank);
    put_u32(w + 20, m->size);
    put_u32(w + 24, m->partitions);
    put_u32(w + 28, 0);
    put_u64(w + 32, (uint64_t)m->published);
    put_u64(w + 40, (uint64_t)m->fired);
    put_u64(w + 48, (uint64_t)m->max_seen);
    put_u64(w + 56, (uint64_t)m->advanced);
    put_u64(w + 64, m->epoch);
    put_u64(w + 72, m->records_in);
    put_u64(w + 80, m->late_records);
    for (uint32_t r = 0; r < m->size; r++)
        put_u64(w + META_FIXED + 8 * r, (uint64_t)m->vclock[r]);
    ckpt_header h = {.version = SLASH_CKPT_VERSION, .kind = SLASH_CKPT_KIND_META, .fp = fp,
                     .partition = m->rank, .partitions = m->partitions, .payload = payload};
    return ckpt_seal(buf, &h, payload, out, len);
}

slash_status slash_ckpt_read_meta(const void *data, size_t len, uint64_t fp,
                                  slash_ckpt_meta_info *m)
{
    ckpt_header h;
    slash_status st = ckpt_header_check(data, len, SLASH_CKPT_KIND_META, fp, &h);
    if (st != SLASH_OK)
        return st;
    const uint8_t *p = (const uint8_t *)data + SLASH_CKPT_HEADER;
    if (h.payload < META_FIXED)
        return slash_fail(SLASH_EINVAL, "checkpoint meta blob: truncated payload (%llu bytes)",
                          (unsigned long long)h.payload);
    memset(m, 0, sizeof *m);
    m->id = get_u64(p);
    m->pushes = get_u64(p + 8);
    m->rank = get_u32(p + 16);
    m->size = get_u32(p + 20);
    m->partitions = get_u32(p + 24);
    m->published = (int64_t)get_u64(p + 32);
    m->fired = (int64_t)get_u64(p + 40);
    m->max_seen = (int64_t)get_u64(p + 48);
    m->advanced = (int64_t)get_u64(p + 56);
    m->epoch = get_u64(p + 64);
    m->records_in = get_u64(p + 72);
    m->late_records = get_u64(p + 80);
    if (m->size < 1 || m->size > SLASH_GROUP_MAX || m->rank >= m->size ||
        h.payload != META_FIXED + 8 * (uint64_t)m->size || m->rank != h.partition ||
        m->partitions != h.partitions || get_u32(p + 28) != 0 || h.records != 0 ||
        h.watermark != 0) /* what a META blob leaves 0: one blob, one reading */
        return slash_fail(SLASH_EINVAL, "checkpoint meta blob: inconsistent (rank %u of %u, "
                          "%llu payload bytes)", m->rank, m->size, (unsigned long long)h.payload);
    for (uint32_t r = 0; r < m->size; r++)
        m->vclock[r] = (int64_t)get_u64(p + META_FIXED + 8 * r);
    return SLASH_OK;
}

/* ---- images ------------------------------------------------------------------ */

typedef struct ckpt_part {
    uint32_t partition;
    uint8_t *data;
    size_t len;
} ckpt_part;

struct slash_ckpt {
    uint64_t id, pushes;
    uint32_t rank, nparts, cap;
    uint8_t *meta;
    size_t meta_len;
    ckpt_part *parts;
};

slash_status slash_ckpt_new(uint64_t id, uint64_t pushes, uint32_t rank, uint8_t *meta,
                            size_t meta_len, uint32_t max_parts, slash_ckpt **out)
{
    slash_ckpt *ck = calloc(1, sizeof *ck);
    if (ck)
        ck->parts = calloc(max_parts ? max_parts : 1, sizeof *ck->parts);
    if (!ck || !ck->parts) {
        free(ck);
        free(meta);
        *out = NULL;
        return slash_fail(SLASH_ENOMEM, "checkpoint image");
    }
    ck->id = id, ck->pushes = pushes, ck->rank = rank;
    ck->meta = meta, ck->meta_len = meta_len, ck->cap = max_parts;
    *out = ck;
    return SLASH_OK;
}

void slash_ckpt_add_part(slash_ckpt *ck, uint32_t partition, uint8_t *data, size_t len)
{
    assert(ck->nparts < ck->cap);
    ck->parts[ck->nparts++] = (ckpt_part){partition, data, len};
}

uint64_t slash_ckpt_id(const slash_ckpt *ck) { return ck->id; }
uint64_t slash_ckpt_pushes(const slash_ckpt *ck) { return ck->pushes; }
uint32_t slash_ckpt_rank(const slash_ckpt *ck) { return ck->rank; }

void slash_ckpt_meta(const slash_ckpt *ck, const void **ptr, size_t *len)
{
    *ptr = ck->meta;
    *len = ck->meta_len;
}

uint32_t slash_ckpt_parts(const slash_ckpt *ck) { return ck->nparts; }

slash_status slash_ckpt_part(const slash_ckpt *ck, uint32_t i, uint32_t *partition,
                             const void **ptr, size_t *len)
{
    if (i >= ck->nparts)
        return slash_fail(SLASH_ERANGE, "checkpoint image: part %u of %u", i, ck->nparts);
    *partition = ck->parts[i].partition;
    *ptr = ck->parts[i].data;
    *len = ck->parts[i].len;
    return SLASH_OK;
}

void slash_ckpt_free(slash_ckpt *ck)
{
    if (!ck)
        return;
    for (uint32_t i = 0; i < ck->nparts; i++)
        free(ck->parts[i].data);
    free(ck->parts);
    free(ck->meta);
    free(ck);
}
