/* test_pq_read.c - the Parquet column chunk reader (pq_read.h) on chunks
 * written here byte by byte: page headers in Thrift's compact protocol, RLE /
 * bit-packed runs, snappy streams. The writer is independent of the reader
 * (it follows the Parquet format's text); tests/test_pq_read.py checks the
 * reader against pyarrow on files pyarrow writes. */
#include <stdlib.h>
#include <string.h>

#include "slash/pq_read.h"
#include "unit.h"

typedef struct {
    uint8_t b[1 << 16];
    size_t n;
} buf;

static void put(buf *o, const void *p, size_t n)
{
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void byte(buf *o, uint8_t x) { o->b[o->n++] = x; }
static void varint(buf *o, uint64_t v)
{
    while (v >= 0x80) {
        byte(o, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    byte(o, (uint8_t)v);
}
static void zz(buf *o, int64_t v) { varint(o, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }
/* a compact-protocol field header with a delta from the last id */
static void field(buf *o, int delta, int type) { byte(o, (uint8_t)(delta << 4 | type)); }

enum { I32 = 5, STRUCT = 12, BINARY = 8, TRUE_ = 1, FALSE_ = 2 };

/* PageHeader { 1: type, 2: usize, 3: csize, [4: crc,] 5/7/8: sub-header }.
 * kind 0 data v1, 2 dictionary, 3 data v2. For v2, def_len and compressed. */
static int64_t v2_nulls; /* num_nulls the next v2 header states */

static void header(buf *o, int kind, int64_t usize, int64_t csize, int64_t nvalues, int enc,
                   int64_t def_len, int compressed, int with_stats)
{
    field(o, 1, I32), zz(o, kind);
    field(o, 1, I32), zz(o, usize);
    field(o, 1, I32), zz(o, csize);
    field(o, 1, I32), zz(o, 12345); /* crc: skipped */
    int id = kind == 0 ? 5 : kind == 2 ? 7 : 8;
    field(o, id - 4, STRUCT);
    field(o, 1, I32), zz(o, nvalues);
    if (kind == 0) {
        field(o, 1, I32), zz(o, enc);
        field(o, 1, I32), zz(o, 3); /* definition levels: RLE */
        field(o, 1, I32), zz(o, 3);
        if (with_stats) { /* Statistics { 1: max binary, 2: min binary } */
            field(o, 1, STRUCT);
            field(o, 1, BINARY), varint(o, 3), put(o, "abc", 3);
            field(o, 1, BINARY), varint(o, 0);
            byte(o, 0);
        }
    } else if (kind == 2) {
        field(o, 1, I32), zz(o, enc);
    } else {
        field(o, 1, I32), zz(o, v2_nulls); /* num_nulls */
        field(o, 1, I32), zz(o, nvalues);
        field(o, 1, I32), zz(o, enc);
        field(o, 1, I32), zz(o, def_len);
        field(o, 1, I32), zz(o, 0);
        field(o, 1, compressed ? TRUE_ : FALSE_);
    }
    byte(o, 0); /* end of the sub-header */
    byte(o, 0); /* end of the PageHeader */
}

/* snappy with literals only: a valid stream any decoder must accept */
static void snappy_literal(buf *o, const uint8_t *p, size_t n)
{
    varint(o, n);
    while (n) {
        size_t k = n > 60 ? 60 : n;
        byte(o, (uint8_t)((k - 1) << 2));
        put(o, p, k);
        p += k;
        n -= k;
    }
}

/* a bit-packed run of n (multiple of 8) values of width bw */
static void bitpacked(buf *o, const uint32_t *v, size_t n, int bw)
{
    varint(o, (n / 8) << 1 | 1);
    uint64_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        acc |= (uint64_t)v[i] << bits;
        bits += bw;
        while (bits >= 8) {
            byte(o, (uint8_t)acc);
            acc >>= 8;
            bits -= 8;
        }
    }
    if (bits)
        byte(o, (uint8_t)acc);
}
static void rle_run(buf *o, uint32_t v, size_t n, int bw)
{
    varint(o, n << 1);
    for (int i = 0; i < (bw + 7) / 8; i++)
        byte(o, (uint8_t)(v >> (8 * i)));
}

TEST(plain_int64_required_v1)
{
    int64_t vals[100], out[100], nulls = -1;
    for (int i = 0; i < 100; i++)
        vals[i] = (int64_t)i * 1000003 - 7;
    static buf c;
    c.n = 0;
    header(&c, 0, sizeof vals, sizeof vals, 100, 0, 0, 0, 1);
    put(&c, vals, sizeof vals);
    slash_pq_reader *r;
    CHECK_OK(slash_pq_reader_new(&r));
    slash_pq_chunk ch = {SLASH_PQ_INT64, SLASH_PQ_UNCOMPRESSED, 0, 100};
    CHECK_OK(slash_pq_decode(r, c.b, c.n, &ch, out, 8, NULL, &nulls));
    CHECK(memcmp(out, vals, sizeof vals) == 0);
    CHECK(nulls == 0);
    slash_pq_reader_free(r);
}

/* a dictionary of negative INT32s, indices of width 3 in RLE and bit-packed
 * runs, over two pages; read as 8-byte (sign-extended) and 4-byte values */
TEST(dictionary_int32_runs_two_pages)
{
    int32_t dict[5] = {-5, 7, -2147483647 - 1, 2147483647, 0};
    uint32_t idx[40];
    for (int i = 0; i < 40; i++)
        idx[i] = (uint32_t)(i * 7 % 5);
    static buf c, pg;
    c.n = 0;
    header(&c, 2, sizeof dict, sizeof dict, 5, 0, 0, 0, 0);
    put(&c, dict, sizeof dict);
    for (int page = 0; page < 2; page++) {
        pg.n = 0;
        byte(&pg, 3);
        bitpacked(&pg, idx, 16, 3);
        rle_run(&pg, 4, 4, 3);
        bitpacked(&pg, idx + 20, 8, 3);
        header(&c, 0, (int64_t)pg.n, (int64_t)pg.n, 28, 8, 0, 0, 0);
        put(&c, pg.b, pg.n);
    }
    int64_t want[56];
    for (int page = 0; page < 2; page++)
        for (int i = 0; i < 28; i++)
            want[page * 28 + i] = dict[i < 16 ? idx[i] : i < 20 ? 4 : idx[20 + i - 20]];
    slash_pq_reader *r;
    CHECK_OK(slash_pq_reader_new(&r));
    slash_pq_chunk ch = {SLASH_PQ_INT32, SLASH_PQ_UNCOMPRESSED, 0, 56};
    int64_t out[56], nulls;
    CHECK_OK(slash_pq_decode(r, c.b, c.n, &ch, out, 8, NULL, &nulls));
    CHECK(memcmp(out, want, sizeof want) == 0);
    int32_t out4[56];
    CHECK_OK(slash_pq_decode(r, c.b, c.n, &ch, out4, 4, NULL, &nulls));
    for (int i = 0; i < 56; i++)
        CHECK(out4[i] == want[i]);
    ch.physical = SLASH_PQ_INT64; /* an INT64 chunk cannot go into 4 bytes */
    CHECK_ST(slash_pq_decode(r, c.b, c.n, &ch, out4, 4, NULL, &nulls), SLASH_EINVAL);
    slash_pq_reader_free(r);
}

/* an optional column in a v2 page: levels uncompressed, values snappy */
TEST(optional_v2_snappy_nulls_and_bitmap)
{
    int64_t present[7] = {10, 20, 30, 40, 50, 60, -70};
    uint32_t lev[16] = {1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1};
    static buf c, levels, vals;
    c.n = levels.n = vals.n = 0;
    bitpacked(&levels, lev, 16, 1);
    rle_run(&levels, 0, 3, 1); /* 3 more nulls: 19 values */
    snappy_literal(&vals, (const uint8_t *)present, sizeof present);
    v2_nulls = 12;
    header(&c, 3, (int64_t)(levels.n + sizeof present), (int64_t)(levels.n + vals.n), 19, 0,
           (int64_t)levels.n, 1, 0);
    put(&c, levels.b, levels.n);
    put(&c, vals.b, vals.n);
    slash_pq_reader *r;
    CHECK_OK(slash_pq_reader_new(&r));
    slash_pq_chunk ch = {SLASH_PQ_INT64, SLASH_PQ_SNAPPY, 1, 19};
    int64_t out[19], nulls;
    uint8_t valid[3] = {0xff, 0xff, 0xff};
    CHECK_OK(slash_pq_decode(r, c.b, c.n, &ch, out, 8, valid, &nulls));
    CHECK(nulls == 12);
    int j = 0;
    for (int i = 0; i < 19; i++) {
        int is = i < 16 && lev[i];
        CHECK(((valid[i / 8] >> (i % 8)) & 1) == is);
        CHECK(out[i] == (is ? present[j++] : 0));
    }
    CHECK(valid[2] >> 3 == 0); /* bits past the values cleared */
    c.n = 0; /* the same page whose header states another null count: refused */
    v2_nulls = 11;
    header(&c, 3, (int64_t)(levels.n + sizeof present), (int64_t)(levels.n + vals.n), 19, 0,
           (int64_t)levels.n, 1, 0);
    put(&c, levels.b, levels.n);
    put(&c, vals.b, vals.n);
    CHECK_ST(slash_pq_decode(r, c.b, c.n, &ch, out, 8, valid, &nulls), SLASH_EPROTO);
    slash_pq_reader_free(r);
}

TEST(snappy_copies_overlapping_and_far)
{
    /* "abcd" literal, copy-1 (len 8 off 4: overlapping), copy-2 (len 12 off 12) */
    const uint8_t s[] = {24, 3 << 2, 'a', 'b', 'c', 'd', 0x01 | (4 << 2), 4, 0x02 | (11 << 2), 12, 0};
    uint8_t out[24];
    size_t n;
    CHECK_OK(slash_pq_snappy(s, sizeof s, out, sizeof out, &n));
    CHECK(n == 24 && memcmp(out, "abcdabcdabcdabcdabcdabcd", 24) == 0);
    CHECK_ST(slash_pq_snappy(s, sizeof s, out, 23, &n), SLASH_EPROTO); /* longer than room */
    const uint8_t far[] = {8, 0x02 | (7 << 2), 9, 0}; /* a copy before the start */
    CHECK_ST(slash_pq_snappy(far, sizeof far, out, sizeof out, &n), SLASH_EPROTO);
}

TEST(refusals_fall_back)
{
    static buf c;
    int64_t out[8], nulls;
    slash_pq_reader *r;
    CHECK_OK(slash_pq_reader_new(&r));
    slash_pq_chunk ch = {SLASH_PQ_INT64, SLASH_PQ_UNCOMPRESSED, 0, 8};
    c.n = 0; /* DELTA_BINARY_PACKED (5): not decoded here */
    header(&c, 0, 8, 8, 8, 5, 0, 0, 0);
    put(&c, "\0\0\0\0\0\0\0\0", 8);
    CHECK_ST(slash_pq_decode(r, c.b, c.n, &ch, out, 8, NULL, &nulls), SLASH_ENOTSUP);
    c.n = 0; /* dictionary indices without a dictionary page */
    header(&c, 0, 2, 2, 8, 8, 0, 0, 0);
    byte(&c, 1), rle_run(&c, 0, 8, 1);
    CHECK_ST(slash_pq_decode(r, c.b, c.n, &ch, out, 8, NULL, &nulls), SLASH_EPROTO);
    ch.codec = 2; /* GZIP */
    CHECK_ST(slash_pq_decode(r, c.b, c.n, &ch, out, 8, NULL, &nulls), SLASH_ENOTSUP);
    slash_pq_reader_free(r);
}

/* every prefix and thousands of byte flips of a valid chunk: an answer or an
 * error, never a read outside the input (run under ASan by test.sh) */
TEST(truncated_and_flipped_chunks_never_crash)
{
    static buf c, pg;
    c.n = 0;
    int64_t dict[300];
    for (int i = 0; i < 300; i++)
        dict[i] = i * 11;
    uint32_t idx[64];
    for (int i = 0; i < 64; i++)
        idx[i] = (uint32_t)(i * 37 % 300);
    static buf z;
    z.n = 0;
    snappy_literal(&z, (const uint8_t *)dict, sizeof dict);
    header(&c, 2, sizeof dict, (int64_t)z.n, 300, 2, 0, 0, 0);
    put(&c, z.b, z.n);
    pg.n = 0;
    uint32_t lev[72];
    for (int i = 0; i < 72; i++)
        lev[i] = i % 9 != 0;
    put(&pg, "\0\0\0\0", 4);
    bitpacked(&pg, lev, 72, 1);
    uint32_t ln = (uint32_t)(pg.n - 4);
    memcpy(pg.b, &ln, 4);
    byte(&pg, 9);
    bitpacked(&pg, idx, 64, 9);
    z.n = 0;
    snappy_literal(&z, pg.b, pg.n);
    header(&c, 0, (int64_t)pg.n, (int64_t)z.n, 72, 8, 0, 0, 1);
    put(&c, z.b, z.n);
    slash_pq_reader *r;
    CHECK_OK(slash_pq_reader_new(&r));
    slash_pq_chunk ch = {SLASH_PQ_INT64, SLASH_PQ_SNAPPY, 1, 72};
    int64_t out[72], nulls;
    uint8_t valid[9];
    CHECK_OK(slash_pq_decode(r, c.b, c.n, &ch, out, 8, valid, &nulls));
    CHECK(nulls == 8);
    for (size_t cut = 0; cut < c.n; cut++) {
        uint8_t *t = malloc(cut ? cut : 1); /* exactly cut bytes: ASan sees any overread */
        memcpy(t, c.b, cut);
        CHECK(slash_pq_decode(r, t, cut, &ch, out, 8, valid, &nulls) != SLASH_OK);
        free(t);
    }
    uint64_t seed = 31;
    uint8_t *t = malloc(c.n);
    for (int k = 0; k < 20000; k++) {
        memcpy(t, c.b, c.n);
        for (int f = 0; f < 1 + k % 3; f++)
            t[unit_rng(&seed) % c.n] ^= (uint8_t)(1u << (unit_rng(&seed) % 8));
        slash_status st = slash_pq_decode(r, t, c.n, &ch, out, 8, valid, &nulls);
        CHECK(st == SLASH_OK || st == SLASH_EPROTO || st == SLASH_ENOTSUP);
    }
    free(t);
    slash_pq_reader_free(r);
}

int main(void)
{
    RUN(plain_int64_required_v1);
    RUN(dictionary_int32_runs_two_pages);
    RUN(optional_v2_snappy_nulls_and_bitmap);
    RUN(snappy_copies_overlapping_and_far);
    RUN(refusals_fall_back);
    RUN(truncated_and_flipped_chunks_never_crash);
    return UNIT_DONE();
}
