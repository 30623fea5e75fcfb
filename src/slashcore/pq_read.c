/* pq_read.c - one Parquet column chunk of integers into a caller's buffer
 * (see pq_read.h for what is decoded and what is refused).
 *
 * A chunk is a run of pages, each a Thrift-compact PageHeader followed by
 * its (possibly snappy-compressed) body: at most one dictionary page first,
 * then data pages until the chunk's values are all read. Invariants:
 *   - every read of the input is bounds-checked against the end of the
 *     buffer it comes from (the chunk, a decompressed page, a run), and
 *     every write against the number of values the caller's buffer holds;
 *   - scratch sizes are bounded by the values of the chunk (a header that
 *     claims more than a legal page could need is refused, not allocated);
 *   - every loop consumes input or produces output, so no input hangs.
 */
#define _POSIX_C_SOURCE 200809L
#include "slash/pq_read.h"

#include "buf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "pq_read.c copies little-endian Parquet values as they are: a little-endian host only"
#endif

/* Parquet's PageType and Encoding numbers. */
enum { PAGE_DATA = 0, PAGE_INDEX = 1, PAGE_DICT = 2, PAGE_DATA_V2 = 3 };
enum { ENC_PLAIN = 0, ENC_PLAIN_DICT = 2, ENC_RLE = 3, ENC_RLE_DICT = 8 };

/* A legal page of n values needs at most this many bytes: levels as 1-value
 * runs (2 bytes each) plus indices as 1-value runs (6 bytes each) or plain
 * 8-byte values, plus the length prefixes. Claims above it are refused. */
#define PAGE_BOUND(n) (64 + 16 * (uint64_t)(n))

struct slash_pq_reader {
    uint8_t *page;  /* a decompressed page body */
    size_t page_cap;
    uint8_t *dict;  /* the dictionary, in the output's width */
    size_t dict_cap;
    int64_t dict_n; /* its entries; -1 when the chunk has none */
    uint8_t *vals;  /* a page's present values, before nulls are spread */
    size_t vals_cap;
    uint8_t *levels; /* a page's definition levels, one byte each */
    size_t levels_cap;
    uint8_t *file; /* the chunk's bytes as read from a file */
    size_t file_cap;
};

slash_status slash_pq_reader_new(slash_pq_reader **out)
{
    slash_pq_reader *r = calloc(1, sizeof *r);
    if (!r)
        return slash_fail(SLASH_ENOMEM, "pq reader: out of memory");
    *out = r;
    return SLASH_OK;
}

void slash_pq_reader_free(slash_pq_reader *r)
{
    if (!r)
        return;
    free(r->page);
    free(r->dict);
    free(r->vals);
    free(r->levels);
    free(r->file);
    free(r);
}

/* The reader's byte buffers (file, page, levels, values, dictionary) grow
 * by slash_buf_grow from this many bytes. */
#define PQ_BUF_FIRST 4096

static inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

static inline uint64_t load_le(const uint8_t *p, size_t n) /* n <= 8 */
{
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

/* ---- Thrift compact protocol: only what a PageHeader needs ------------------- */
typedef struct {
    const uint8_t *p, *end;
    bool bad;
} tc;

enum { TC_TRUE = 1, TC_FALSE = 2, TC_BYTE = 3, TC_I16 = 4, TC_I32 = 5, TC_I64 = 6,
       TC_DOUBLE = 7, TC_BINARY = 8, TC_LIST = 9, TC_SET = 10, TC_MAP = 11, TC_STRUCT = 12 };

static uint64_t tc_varint(tc *t)
{
    uint64_t v = 0;
    for (int s = 0; s < 64 && t->p < t->end; s += 7) {
        uint8_t b = *t->p++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return v;
    }
    t->bad = true;
    return 0;
}

static int64_t tc_zigzag(tc *t)
{
    uint64_t v = tc_varint(t);
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static void tc_skip_bytes(tc *t, uint64_t n)
{
    if (n > (uint64_t)(t->end - t->p)) {
        t->bad = true;
        t->p = t->end;
    } else {
        t->p += n;
    }
}

static void tc_skip(tc *t, int type, int depth, bool in_list);

/* Reads a field header: false at the struct's end (or on bad input). */
static bool tc_field(tc *t, int16_t *last, int16_t *id, int *type)
{
    if (t->bad || t->p >= t->end) {
        t->bad = true;
        return false;
    }
    uint8_t b = *t->p++;
    if (b == 0)
        return false;
    int delta = b >> 4;
    *type = b & 0x0f;
    *id = delta ? (int16_t)(*last + delta) : (int16_t)tc_zigzag(t);
    *last = *id;
    return !t->bad;
}

static void tc_skip_struct(tc *t, int depth)
{
    int16_t last = 0, id;
    int type;
    while (tc_field(t, &last, &id, &type))
        tc_skip(t, type, depth + 1, false);
}

static void tc_skip(tc *t, int type, int depth, bool in_list)
{
    if (depth > 16) {
        t->bad = true;
        return;
    }
    switch (type) {
    case TC_TRUE:
    case TC_FALSE:
        if (in_list)
            tc_skip_bytes(t, 1);
        break;
    case TC_BYTE:
        tc_skip_bytes(t, 1);
        break;
    case TC_I16:
    case TC_I32:
    case TC_I64:
        (void)tc_varint(t);
        break;
    case TC_DOUBLE:
        tc_skip_bytes(t, 8);
        break;
    case TC_BINARY:
        tc_skip_bytes(t, tc_varint(t));
        break;
    case TC_LIST:
    case TC_SET: {
        if (t->p >= t->end) {
            t->bad = true;
            break;
        }
        uint8_t h = *t->p++;
        uint64_t n = h >> 4;
        if (n == 15)
            n = tc_varint(t);
        if (n > (uint64_t)(t->end - t->p)) { /* every element takes a byte at least */
            t->bad = true;
            break;
        }
        for (uint64_t i = 0; i < n && !t->bad; i++)
            tc_skip(t, h & 0x0f, depth + 1, true);
        break;
    }
    case TC_MAP: {
        uint64_t n = tc_varint(t);
        if (n == 0)
            break;
        if (t->p >= t->end || n > (uint64_t)(t->end - t->p)) {
            t->bad = true;
            break;
        }
        uint8_t kv = *t->p++;
        for (uint64_t i = 0; i < n && !t->bad; i++) {
            tc_skip(t, kv >> 4, depth + 1, true);
            tc_skip(t, kv & 0x0f, depth + 1, true);
        }
        break;
    }
    case TC_STRUCT:
        tc_skip_struct(t, depth);
        break;
    default:
        t->bad = true;
    }
}

/* An i32 field's value; a field of another type is skipped, as Thrift's own
 * readers do, and reads as -1 (absent: a required field then fails). */
static int64_t tc_int(tc *t, int type)
{
    if (type != TC_I32) {
        tc_skip(t, type, 1, false);
        return -1;
    }
    int64_t v = tc_zigzag(t);
    if (v < INT32_MIN || v > INT32_MAX)
        t->bad = true;
    return v;
}

typedef struct {
    int64_t type, usize, csize;
    int64_t num_values, encoding, def_encoding;
    int64_t def_len, rep_len; /* v2 */
    int64_t num_nulls, num_rows; /* v2 */
    bool is_compressed;       /* v2; true unless the header says otherwise */
    bool has_sub;             /* the header of its type was present */
} page_header;

/* DataPageHeader (1), DictionaryPageHeader (2) or DataPageHeaderV2 (3). */
static void parse_sub(tc *t, int kind, page_header *h)
{
    int16_t last = 0, id;
    int type;
    h->has_sub = true;
    while (tc_field(t, &last, &id, &type)) {
        if (kind == 1 && id == 1)
            h->num_values = tc_int(t, type);
        else if (kind == 1 && id == 2)
            h->encoding = tc_int(t, type);
        else if (kind == 1 && id == 3)
            h->def_encoding = tc_int(t, type);
        else if (kind == 2 && id == 1)
            h->num_values = tc_int(t, type);
        else if (kind == 2 && id == 2)
            h->encoding = tc_int(t, type);
        else if (kind == 3 && id == 1)
            h->num_values = tc_int(t, type);
        else if (kind == 3 && id == 2)
            h->num_nulls = tc_int(t, type);
        else if (kind == 3 && id == 3)
            h->num_rows = tc_int(t, type);
        else if (kind == 3 && id == 4)
            h->encoding = tc_int(t, type);
        else if (kind == 3 && id == 5)
            h->def_len = tc_int(t, type);
        else if (kind == 3 && id == 6)
            h->rep_len = tc_int(t, type);
        else if (kind == 3 && id == 7 && (type == TC_TRUE || type == TC_FALSE))
            h->is_compressed = type == TC_TRUE;
        else
            tc_skip(t, type, 1, false);
    }
}

static bool parse_header(const uint8_t *p, size_t n, page_header *h, size_t *used)
{
    tc t = {p, p + n, false};
    memset(h, 0, sizeof *h);
    h->type = h->usize = h->csize = h->num_values = h->encoding = -1;
    h->def_encoding = ENC_RLE;
    h->is_compressed = true;
    int16_t last = 0, id;
    int type;
    while (tc_field(&t, &last, &id, &type)) {
        if (id == 1)
            h->type = tc_int(&t, type);
        else if (id == 2)
            h->usize = tc_int(&t, type);
        else if (id == 3)
            h->csize = tc_int(&t, type);
        else if ((id == 5 || id == 7 || id == 8) && type == TC_STRUCT &&
                 h->type == (id == 5 ? PAGE_DATA : id == 7 ? PAGE_DICT : PAGE_DATA_V2))
            parse_sub(&t, id == 5 ? 1 : id == 7 ? 2 : 3, h);
        else
            tc_skip(&t, type, 0, false);
    }
    *used = (size_t)(t.p - p);
    return !t.bad && h->usize >= 0 && h->csize >= 0;
}

/* ---- snappy (the raw format, no framing) --------------------------------------- */
slash_status slash_pq_snappy(const uint8_t *src, size_t n, uint8_t *dst, size_t dst_cap,
                             size_t *out_len)
{
    const uint8_t *p = src, *end = src + n;
    uint64_t ulen = 0;
    int s = 0;
    for (;; s += 7) {
        if (p >= end || s > 28)
            return slash_fail_static(SLASH_EPROTO, "snappy: bad length preamble");
        uint8_t b = *p++;
        ulen |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            break;
    }
    if (ulen > dst_cap)
        return slash_fail_static(SLASH_EPROTO, "snappy: stream longer than its page");
    uint8_t *o = dst, *oend = dst + ulen;
    while (p < end) {
        uint8_t tag = *p++;
        size_t len, off;
        if ((tag & 3) == 0) { /* literal */
            len = tag >> 2;
            if (len < 16 && end - p >= 16 && oend - o >= 16) { /* short: one 16-byte copy */
                memcpy(o, p, 16);
                o += len + 1;
                p += len + 1;
                continue;
            }
            if (len >= 60) {
                size_t nb = len - 59;
                if ((size_t)(end - p) < nb)
                    goto bad;
                len = (size_t)load_le(p, nb);
                p += nb;
            }
            len += 1;
            if (len > (size_t)(end - p) || len > (size_t)(oend - o))
                goto bad;
            memcpy(o, p, len);
            o += len;
            p += len;
            continue;
        }
        if ((tag & 3) == 1) {
            if (p >= end)
                goto bad;
            len = 4 + ((tag >> 2) & 7);
            off = ((size_t)(tag >> 5) << 8) | *p++;
        } else if ((tag & 3) == 2) {
            if (end - p < 2)
                goto bad;
            len = (size_t)(tag >> 2) + 1;
            off = (size_t)load_le(p, 2);
            p += 2;
        } else {
            if (end - p < 4)
                goto bad;
            len = (size_t)(tag >> 2) + 1;
            off = (size_t)load_le(p, 4);
            p += 4;
        }
        if (off == 0 || off > (size_t)(o - dst) || len > (size_t)(oend - o))
            goto bad;
        const uint8_t *from = o - off;
        if (off >= 8 && len <= 16 && oend - o >= 16) { /* short: two 8-byte copies */
            memcpy(o, from, 8);
            memcpy(o + 8, from + 8, 8);
            o += len;
        } else if (off >= len) {
            memcpy(o, from, len);
            o += len;
        } else if (off >= 8) { /* overlapping, but 8 bytes at a time are already written */
            while (len >= 8) {
                memcpy(o, from, 8);
                o += 8;
                from += 8;
                len -= 8;
            }
            while (len--)
                *o++ = *from++;
        } else {
            while (len--)
                *o++ = *from++;
        }
    }
    if (o != oend)
        goto bad;
    *out_len = (size_t)ulen;
    return SLASH_OK;
bad:
    return slash_fail_static(SLASH_EPROTO, "snappy: malformed stream");
}

/* ---- the RLE / bit-packed hybrid -------------------------------------------- */
/* Reads a run header; false when the run's data is missing. */
static bool run_header(const uint8_t **pp, const uint8_t *end, uint64_t *hdr)
{
    tc t = {*pp, end, false};
    *hdr = tc_varint(&t);
    *pp = t.p;
    return !t.bad;
}

/* One run of the hybrid: a bit-packed run (lit, its bytes at data[0, avail))
 * or a repeated value (value). */
typedef struct {
    const uint8_t *p, *end; /* the runs not read yet */
    int bw;                 /* bit width, 0..32 */
    bool lit;
    const uint8_t *data;
    size_t avail;
    uint64_t value;
} rle_runs;

/* The next run, cut to at most want values: *take gets its length (0 for an
 * empty run). False when the run's bytes are missing. */
static bool rle_next(rle_runs *it, uint64_t want, uint64_t *take)
{
    uint64_t hdr;
    if (!run_header(&it->p, it->end, &hdr))
        return false;
    size_t left = (size_t)(it->end - it->p);
    if (hdr & 1) {
        uint64_t groups = hdr >> 1;
        if (groups > ((uint64_t)1 << 40))
            return false;
        uint64_t bytes = groups * (uint64_t)it->bw;
        if (bytes > left) /* a run's groups are whole (the last one padded) */
            return false;
        *take = groups * 8 < want ? groups * 8 : want;
        it->lit = true;
        it->data = it->p;
        it->avail = left;
        it->p += bytes;
    } else {
        size_t vb = ((size_t)it->bw + 7) / 8;
        if (vb > left)
            return false;
        it->lit = false;
        it->value = load_le(it->p, vb);
        it->p += vb;
        *take = (hdr >> 1) < want ? (hdr >> 1) : want;
    }
    return true;
}

/* Groups of 8 values of width B (B bytes each) at p into dst, one function
 * per width so the shifts are constants. Each value is read with an 8-byte
 * load at its first byte: the caller makes sure those bytes exist. */
#define UNPACK8(B)                                                                      \
    static void unpack8_##B(const uint8_t *p, size_t groups, uint32_t *dst)              \
    {                                                                                   \
        const uint64_t mask = (B) == 32 ? 0xffffffffull : (1ull << (B)) - 1;            \
        for (size_t g = 0; g < groups; g++, p += (B), dst += 8)                         \
            for (int j = 0; j < 8; j++)                                                 \
                dst[j] = (uint32_t)((load_le64(p + (j * (B)) / 8) >> ((j * (B)) % 8)) & mask); \
    }
UNPACK8(1) UNPACK8(2) UNPACK8(3) UNPACK8(4) UNPACK8(5) UNPACK8(6) UNPACK8(7) UNPACK8(8)
UNPACK8(9) UNPACK8(10) UNPACK8(11) UNPACK8(12) UNPACK8(13) UNPACK8(14) UNPACK8(15) UNPACK8(16)
UNPACK8(17) UNPACK8(18) UNPACK8(19) UNPACK8(20) UNPACK8(21) UNPACK8(22) UNPACK8(23) UNPACK8(24)
UNPACK8(25) UNPACK8(26) UNPACK8(27) UNPACK8(28) UNPACK8(29) UNPACK8(30) UNPACK8(31) UNPACK8(32)
static void (*const unpack8[33])(const uint8_t *, size_t, uint32_t *) = {
    NULL, unpack8_1, unpack8_2, unpack8_3, unpack8_4, unpack8_5, unpack8_6, unpack8_7,
    unpack8_8, unpack8_9, unpack8_10, unpack8_11, unpack8_12, unpack8_13, unpack8_14,
    unpack8_15, unpack8_16, unpack8_17, unpack8_18, unpack8_19, unpack8_20, unpack8_21,
    unpack8_22, unpack8_23, unpack8_24, unpack8_25, unpack8_26, unpack8_27, unpack8_28,
    unpack8_29, unpack8_30, unpack8_31, unpack8_32};

/* Values j0 .. j0+k-1 of the current bit-packed run into dst (the run holds
 * them: rle_next checked its bytes). */
static void rle_unpack(const rle_runs *it, uint64_t j0, size_t k, uint32_t *dst)
{
    int bw = it->bw;
    if (bw == 0) {
        memset(dst, 0, k * sizeof *dst);
        return;
    }
    uint64_t mask = bw == 32 ? 0xffffffffull : (1ull << bw) - 1;
    const uint8_t *p = it->data;
    size_t avail = it->avail;
    if (j0 % 8 == 0) { /* whole groups whose every 8-byte load stays inside avail */
        size_t reach = 8 + (size_t)(7 * bw) / 8, g0 = (size_t)(j0 / 8);
        size_t safe = avail >= reach ? (avail - reach) / (size_t)bw + 1 : 0;
        size_t groups = safe > g0 ? safe - g0 : 0;
        if (groups > k / 8)
            groups = k / 8;
        unpack8[bw](p + g0 * (size_t)bw, groups, dst);
        j0 += 8 * groups;
        dst += 8 * groups;
        k -= 8 * groups;
    }
    for (size_t j = 0; j < k; j++) {
        uint64_t bit = (j0 + j) * (uint64_t)bw;
        size_t byte = (size_t)(bit >> 3);
        uint64_t x = byte + 8 <= avail ? load_le64(p + byte) : load_le(p + byte, avail - byte);
        dst[j] = (uint32_t)((x >> (bit & 7)) & mask);
    }
}

#define RLE_BLOCK 256 /* indices unpacked at a time, on the stack */

/* Definition levels (bit width bw, each <= maxv) into lev[0, count); *present
 * gets how many equal maxv. False on malformed input. */
static bool decode_levels(const uint8_t *p, const uint8_t *end, int bw, int maxv, uint8_t *lev,
                          int64_t count, int64_t *present)
{
    rle_runs it = {p, end, bw, false, NULL, 0, 0};
    uint32_t block[RLE_BLOCK];
    int64_t i = 0, got = 0;
    while (i < count) {
        uint64_t take;
        if (!rle_next(&it, (uint64_t)(count - i), &take))
            return false;
        if (!it.lit) {
            if (it.value > (uint64_t)maxv)
                return false;
            memset(lev + i, (int)it.value, (size_t)take);
            got += it.value == (uint64_t)maxv ? (int64_t)take : 0;
            i += (int64_t)take;
            continue;
        }
        for (uint64_t j = 0; j < take; j += RLE_BLOCK) {
            size_t k = take - j < RLE_BLOCK ? (size_t)(take - j) : RLE_BLOCK;
            rle_unpack(&it, j, k, block);
            for (size_t q = 0; q < k; q++) {
                if (block[q] > (uint32_t)maxv)
                    return false;
                lev[i + (int64_t)q] = (uint8_t)block[q];
                got += block[q] == (uint32_t)maxv;
            }
            i += (int64_t)k;
        }
    }
    *present = got;
    return true;
}

/* Dictionary indices (bit width bw) looked up in dict (dn entries of w bytes)
 * into out[0, count). False on malformed input or an index outside dict. */
static bool decode_dict(const uint8_t *p, const uint8_t *end, int bw, const uint8_t *dict,
                        int64_t dn, int w, uint8_t *out, int64_t count)
{
    rle_runs it = {p, end, bw, false, NULL, 0, 0};
    uint32_t block[RLE_BLOCK];
    int64_t i = 0;
    while (i < count) {
        uint64_t take;
        if (!rle_next(&it, (uint64_t)(count - i), &take))
            return false;
        if (take == 0)
            continue;
        if (!it.lit) {
            if (it.value >= (uint64_t)dn)
                return false;
            if (w == 8) {
                int64_t *o = (int64_t *)(void *)out + i, x;
                memcpy(&x, dict + it.value * 8, 8);
                for (uint64_t j = 0; j < take; j++)
                    o[j] = x;
            } else {
                int32_t *o = (int32_t *)(void *)out + i, x;
                memcpy(&x, dict + it.value * 4, 4);
                for (uint64_t j = 0; j < take; j++)
                    o[j] = x;
            }
            i += (int64_t)take;
            continue;
        }
        for (uint64_t j = 0; j < take; j += RLE_BLOCK) {
            size_t k = take - j < RLE_BLOCK ? (size_t)(take - j) : RLE_BLOCK;
            rle_unpack(&it, j, k, block);
            if (w == 8) {
                int64_t *o = (int64_t *)(void *)out + i;
                const int64_t *d = (const int64_t *)(const void *)dict;
                for (size_t q = 0; q < k; q++) {
                    if (__builtin_expect((uint64_t)block[q] >= (uint64_t)dn, 0))
                        return false;
                    o[q] = d[block[q]];
                }
            } else {
                int32_t *o = (int32_t *)(void *)out + i;
                const int32_t *d = (const int32_t *)(const void *)dict;
                for (size_t q = 0; q < k; q++) {
                    if (__builtin_expect((uint64_t)block[q] >= (uint64_t)dn, 0))
                        return false;
                    o[q] = d[block[q]];
                }
            }
            i += (int64_t)k;
        }
    }
    return true;
}

/* n PLAIN values of physical width pw at p (which holds avail bytes) into out,
 * each w bytes. False when the page is short. */
static bool decode_plain(const uint8_t *p, size_t avail, int pw, uint8_t *out, int w, int64_t n)
{
    if ((uint64_t)n * (uint64_t)pw > avail)
        return false;
    if (pw == w) {
        memcpy(out, p, (size_t)n * (size_t)w);
    } else { /* INT32 into 8-byte output: sign-extended */
        int64_t *o = (int64_t *)(void *)out;
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            o[i] = v;
        }
    }
    return true;
}

static void set_bits(uint8_t *bits, int64_t from, int64_t n)
{
    int64_t i = from, to = from + n;
    while (i < to && (i & 7))
        bits[i >> 3] |= (uint8_t)(1u << (i & 7)), i++;
    if (to - i >= 8) {
        memset(bits + (i >> 3), 0xff, (size_t)((to - i) >> 3));
        i += (to - i) & ~(int64_t)7;
    }
    while (i < to)
        bits[i >> 3] |= (uint8_t)(1u << (i & 7)), i++;
}

/* ---- a chunk ------------------------------------------------------------------ */
typedef struct {
    slash_pq_reader *r;
    const slash_pq_chunk *c;
    uint8_t *out;
    int w, pw;
    uint8_t *valid;
    int64_t done, nulls;
} chunk_state;

#define NOTSUP(...) slash_fail(SLASH_ENOTSUP, "parquet page: " __VA_ARGS__)
#define MALFORMED(...) slash_fail(SLASH_EPROTO, "parquet page: " __VA_ARGS__)

/* The values of a page whose n values (present of them not null) are coded
 * with encoding enc in v[0, vn), after its definition levels in lev. */
static slash_status page_values(chunk_state *s, const uint8_t *v, size_t vn, int64_t enc,
                                int64_t n, int64_t present, const uint8_t *lev)
{
    slash_pq_reader *r = s->r;
    int w = s->w;
    uint8_t *dst = s->out + (size_t)s->done * (size_t)w;
    if (present < n) {
        slash_status st = slash_buf_grow((void **)&r->vals, &r->vals_cap,
                                         (size_t)present * (size_t)w + 8, 1, PQ_BUF_FIRST, "pq reader");
        if (st != SLASH_OK)
            return st;
        dst = r->vals;
    }
    if (enc == ENC_PLAIN) {
        if (!decode_plain(v, vn, s->pw, dst, w, present))
            return MALFORMED("PLAIN values shorter than the page's values");
    } else if (enc == ENC_PLAIN_DICT || enc == ENC_RLE_DICT) {
        if (r->dict_n < 0)
            return MALFORMED("dictionary-coded values without a dictionary page");
        if (present > 0) {
            if (vn < 1)
                return MALFORMED("dictionary indices without a bit width");
            int bw = v[0];
            if (bw > 32)
                return MALFORMED("bit width %d of dictionary indices", bw);
            if (!decode_dict(v + 1, v + vn, bw, r->dict, r->dict_n, w, dst, present))
                return MALFORMED("dictionary indices malformed or outside the dictionary");
        }
    } else {
        return NOTSUP("encoding %lld of values", (long long)enc);
    }
    if (present < n) { /* spread the present values over the page's rows */
        uint8_t *o = s->out + (size_t)s->done * (size_t)w;
        const uint8_t *src = r->vals;
        for (int64_t i = 0; i < n; i++) {
            if (lev[i]) {
                memcpy(o, src, (size_t)w);
                src += w;
                if (s->valid)
                    s->valid[(s->done + i) >> 3] |= (uint8_t)(1u << ((s->done + i) & 7));
            } else {
                memset(o, 0, (size_t)w);
            }
            o += w;
        }
    } else if (s->valid && n) {
        set_bits(s->valid, s->done, n);
    }
    s->nulls += n - present;
    s->done += n;
    return SLASH_OK;
}

/* Levels of a page: with max_def 1, decodes n levels from l[0, ln) into the
 * reader's scratch and counts the present values; else all are present. */
static slash_status page_levels(chunk_state *s, const uint8_t *l, size_t ln, int64_t n,
                                int64_t *present, const uint8_t **lev)
{
    *lev = NULL;
    *present = n;
    if (s->c->max_def == 0)
        return SLASH_OK;
    slash_pq_reader *r = s->r;
    slash_status st;
    if ((st = slash_buf_grow((void **)&r->levels, &r->levels_cap, (size_t)n + 1,
                             1, PQ_BUF_FIRST, "pq reader")) != SLASH_OK)
        return st;
    if (!decode_levels(l, l + ln, 1, 1, r->levels, n, present))
        return MALFORMED("definition levels malformed");
    *lev = r->levels;
    return SLASH_OK;
}

/* The body of a page: decompressed into the reader's page scratch if the codec
 * says so (ulen bytes expected), else where it lies. */
static slash_status page_body(chunk_state *s, const uint8_t *b, size_t bn, int64_t ulen,
                              bool compressed, const uint8_t **out, size_t *out_n)
{
    if (s->c->codec == SLASH_PQ_UNCOMPRESSED || !compressed) {
        *out = b;
        *out_n = bn;
        return SLASH_OK;
    }
    slash_pq_reader *r = s->r;
    if (ulen < 0)
        return MALFORMED("negative uncompressed size");
    slash_status st;
    if ((st = slash_buf_grow((void **)&r->page, &r->page_cap, (size_t)ulen + 1,
                             1, PQ_BUF_FIRST, "pq reader")) != SLASH_OK)
        return st;
    size_t got;
    st = slash_pq_snappy(b, bn, r->page, (size_t)ulen, &got);
    if (st != SLASH_OK)
        return st;
    if (got != (size_t)ulen)
        return MALFORMED("snappy stream of %zu bytes, the header says %lld", got, (long long)ulen);
    *out = r->page;
    *out_n = got;
    return SLASH_OK;
}

static slash_status dict_page(chunk_state *s, const page_header *h, const uint8_t *b, size_t bn)
{
    slash_pq_reader *r = s->r;
    if (r->dict_n >= 0)
        return MALFORMED("a second dictionary page");
    if (s->done > 0)
        return MALFORMED("a dictionary page after data pages");
    if (!h->has_sub || h->num_values < 0)
        return MALFORMED("dictionary page without its header");
    if (h->encoding != ENC_PLAIN && h->encoding != ENC_PLAIN_DICT)
        return NOTSUP("dictionary encoding %lld", (long long)h->encoding);
    uint64_t limit = 8 * (uint64_t)(s->c->num_values > 1024 ? s->c->num_values : 1024) + 64;
    if ((uint64_t)h->usize > limit)
        return NOTSUP("dictionary of %lld bytes for %lld values", (long long)h->usize,
                      (long long)s->c->num_values);
    const uint8_t *v;
    size_t vn;
    slash_status st = page_body(s, b, bn, h->usize, true, &v, &vn);
    if (st != SLASH_OK)
        return st;
    if ((uint64_t)h->num_values * (uint64_t)s->pw > vn)
        return MALFORMED("dictionary page shorter than its values");
    if ((st = slash_buf_grow((void **)&r->dict, &r->dict_cap, (size_t)h->num_values * (size_t)s->w + 8,
                             1, PQ_BUF_FIRST, "pq reader")) != SLASH_OK)
        return st;
    decode_plain(v, vn, s->pw, r->dict, s->w, h->num_values);
    r->dict_n = h->num_values;
    return SLASH_OK;
}

static slash_status data_page(chunk_state *s, const page_header *h, const uint8_t *b, size_t bn)
{
    int64_t n = h->num_values;
    if (!h->has_sub || n < 0)
        return MALFORMED("data page without its header");
    if (n > s->c->num_values - s->done)
        return MALFORMED("pages hold more values than the row group's %lld",
                         (long long)s->c->num_values);
    if ((uint64_t)h->usize > PAGE_BOUND(n))
        return NOTSUP("page of %lld bytes for %lld values", (long long)h->usize, (long long)n);
    const uint8_t *lev = NULL, *v;
    size_t vn;
    int64_t present;
    slash_status st;
    if (h->type == PAGE_DATA) {
        st = page_body(s, b, bn, h->usize, true, &v, &vn);
        if (st != SLASH_OK)
            return st;
        if (s->c->max_def > 0) {
            if (h->def_encoding != ENC_RLE)
                return NOTSUP("definition level encoding %lld", (long long)h->def_encoding);
            if (vn < 4)
                return MALFORMED("definition levels without their length");
            uint64_t ln = load_le(v, 4);
            if (ln > vn - 4)
                return MALFORMED("definition levels longer than the page");
            st = page_levels(s, v + 4, (size_t)ln, n, &present, &lev);
            if (st != SLASH_OK)
                return st;
            v += 4 + ln;
            vn -= 4 + (size_t)ln;
        } else {
            present = n;
        }
    } else {
        if (h->rep_len != 0)
            return MALFORMED("repetition levels in a column without repetition");
        if (h->def_len < 0 || (uint64_t)h->def_len > bn || h->def_len > h->usize)
            return MALFORMED("definition levels longer than the page");
        if (s->c->max_def == 0 && h->def_len != 0)
            return MALFORMED("definition levels in a required column");
        st = page_levels(s, b, (size_t)h->def_len, n, &present, &lev);
        if (st != SLASH_OK)
            return st;
        if (h->num_nulls != n - present || h->num_rows != n) /* what the header says must hold */
            return MALFORMED("a v2 page of %lld values, %lld rows and %lld nulls whose levels "
                             "say %lld nulls", (long long)n, (long long)h->num_rows,
                             (long long)h->num_nulls, (long long)(n - present));
        st = page_body(s, b + h->def_len, bn - (size_t)h->def_len, h->usize - h->def_len,
                       h->is_compressed, &v, &vn);
        if (st != SLASH_OK)
            return st;
    }
    return page_values(s, v, vn, h->encoding, n, present, lev);
}

slash_status slash_pq_decode(slash_pq_reader *r, const uint8_t *data, size_t len,
                             const slash_pq_chunk *c, void *out, int out_width,
                             uint8_t *valid, int64_t *null_count)
{
    if (!r || !c || (!data && len) || (!out && c->num_values) || !null_count)
        return slash_fail(SLASH_EINVAL, "slash_pq_decode: NULL argument");
    if (c->physical != SLASH_PQ_INT32 && c->physical != SLASH_PQ_INT64)
        return NOTSUP("physical type %d", c->physical);
    if (c->codec != SLASH_PQ_UNCOMPRESSED && c->codec != SLASH_PQ_SNAPPY)
        return NOTSUP("codec %d", c->codec);
    if (c->max_def != 0 && c->max_def != 1)
        return NOTSUP("maximum definition level %d", c->max_def);
    int pw = c->physical == SLASH_PQ_INT32 ? 4 : 8;
    if ((out_width != 4 && out_width != 8) || out_width < pw)
        return slash_fail(SLASH_EINVAL, "slash_pq_decode: output width %d for %d-byte values",
                          out_width, pw);
    if (c->num_values < 0)
        return slash_fail(SLASH_EINVAL, "slash_pq_decode: %lld values", (long long)c->num_values);
    chunk_state s = {r, c, out, out_width, pw, c->max_def ? valid : NULL, 0, 0};
    r->dict_n = -1;
    if (s.valid)
        memset(s.valid, 0, (size_t)((c->num_values + 7) / 8));
    size_t pos = 0;
    while (s.done < c->num_values) {
        if (pos >= len)
            return MALFORMED("the chunk ends after %lld of its %lld values", (long long)s.done,
                             (long long)c->num_values);
        page_header h;
        size_t used;
        if (!parse_header(data + pos, len - pos, &h, &used))
            return MALFORMED("bad page header at byte %zu of the chunk", pos);
        pos += used;
        if ((uint64_t)h.csize > len - pos)
            return MALFORMED("page of %lld bytes past the chunk's end", (long long)h.csize);
        const uint8_t *b = data + pos;
        size_t bn = (size_t)h.csize;
        pos += bn;
        slash_status st;
        switch (h.type) {
        case PAGE_DICT:
            st = dict_page(&s, &h, b, bn);
            break;
        case PAGE_DATA:
        case PAGE_DATA_V2:
            st = data_page(&s, &h, b, bn);
            break;
        case PAGE_INDEX:
            st = SLASH_OK;
            break;
        default:
            st = NOTSUP("page type %lld", (long long)h.type);
        }
        if (st != SLASH_OK)
            return st;
    }
    if (pos != len) /* a writer's chunk is its pages, nothing after them */
        return MALFORMED("%zu bytes after the pages of the chunk's %lld values", len - pos,
                         (long long)c->num_values);
    *null_count = s.nulls;
    return SLASH_OK;
}

slash_status slash_pq_read_fd(slash_pq_reader *r, int fd, int64_t offset, int64_t len,
                              const slash_pq_chunk *c, void *out, int out_width,
                              uint8_t *valid, int64_t *null_count)
{
    if (!r || offset < 0 || len < 0)
        return slash_fail(SLASH_EINVAL, "slash_pq_read_fd: bad chunk place %lld+%lld",
                          (long long)offset, (long long)len);
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return slash_fail(SLASH_ESYS, "fstat: %s", strerror(errno));
    if (offset > (int64_t)sb.st_size || len > (int64_t)sb.st_size - offset)
        return MALFORMED("chunk at %lld+%lld past the file's %lld bytes", (long long)offset,
                         (long long)len, (long long)sb.st_size);
    slash_status st;
    if ((st = slash_buf_grow((void **)&r->file, &r->file_cap, (size_t)len + 1,
                             1, PQ_BUF_FIRST, "pq reader")) != SLASH_OK)
        return st;
    size_t got = 0;
    while (got < (size_t)len) {
        ssize_t k = pread(fd, r->file + got, (size_t)len - got, (off_t)(offset + (int64_t)got));
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return slash_fail(SLASH_ESYS, "pread: %s", strerror(errno));
        }
        if (k == 0)
            return MALFORMED("the file ends inside the chunk");
        got += (size_t)k;
    }
    return slash_pq_decode(r, r->file, (size_t)len, c, out, out_width, valid, null_count);
}
