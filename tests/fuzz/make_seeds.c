/* make_seeds.c - writes the seed corpora of the fuzz targets: valid inputs
 * made with the real stores, so the fuzzer starts from deep paths.
 *
 *   fuzz_make_seeds <corpus dir>   writes <dir>/fuzz_merge_delta/seed_*,
 *                                  <dir>/fuzz_sync_msg/seed_*,
 *                                  <dir>/fuzz_ckpt_read/seed_* (dirs must exist)
 *
 * A merge seed is [config byte][partition 0's delta of a store with a few
 * records]. A sync seed is [config byte][group byte] and framed messages
 * (fuzz_sync_msg.c): a DELTA of partition 0 in two fragments, a ROWS message
 * and an EPOCH, from rank 1 of 2, as exec.c lays them out.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "slash/checkpoint.h"
#include "slash/join.h"
#include "slash/ssb.h"

typedef struct wire {
    uint32_t type, part;
    uint64_t epoch, offset, total;
    int64_t watermark;
    uint64_t frag;
} wire; /* exec.c's sync_msg */

static const int64_t T[6] = {1, 20, 120, 121, 300, 301}, K[6] = {4, 5, 4, 9, 5, 4};
static const int64_t V[6] = {10, 20, 30, 40, 50, 60};
static const int32_t OFF[7] = {0, 2, 4, 6, 7, 9, 11};
static const uint8_t KD[11] = "k4k5k4xk5k4";

static const fuzz_rows ROWS = {.n = 6, .t = T, .k = K, .v = V, .off = OFF, .kd = KD};

/* partition 0's delta after one update, copied to *out */
static size_t make_delta(const slash_exec_config *c, uint8_t *out, size_t cap)
{
    const void *a = NULL;
    size_t len = 0;
    if (c->kind == SLASH_EXEC_JOIN) {
        slash_join *s = fuzz_filled_join(&c->join, &ROWS);
        if (slash_join_begin_epoch(s) != SLASH_OK || slash_join_delta(s, 0, &a, &len) != SLASH_OK)
            abort();
        len = len < cap ? len : cap;
        memcpy(out, a, len);
        slash_join_close(s);
        return len;
    }
    slash_ssb *s = fuzz_filled_ssb(&c->state, &ROWS);
    if (slash_ssb_begin_epoch(s) != SLASH_OK || slash_ssb_delta(s, 0, &a, &len) != SLASH_OK)
        abort();
    len = len < cap ? len : cap;
    memcpy(out, a, len);
    slash_ssb_close(s);
    return len;
}

/* [config byte][mode byte][blob]: partition 0 of a store (an aggregate's, or
 * a join's for a join config) with a few records (half its windows emitted),
 * or (mode 4) a META blob (fuzz_ckpt_read.c). */
static size_t make_ckpt(const slash_exec_config *c, uint8_t cb, uint8_t mode, uint8_t *out, size_t cap)
{
    uint8_t *blob = NULL;
    size_t len = 0;
    const bool join = c->kind == SLASH_EXEC_JOIN;
    if (mode & 4) {
        static slash_ckpt_meta_info m;
        m.id = 3, m.pushes = 17, m.rank = 1, m.size = 2;
        m.partitions = join ? c->join.partitions : c->state.partitions;
        m.published = 250, m.fired = 200, m.max_seen = 301, m.advanced = INT64_MIN, m.epoch = 5;
        m.vclock[0] = 200, m.vclock[1] = 250;
        uint64_t fp = join ? slash_ckpt_join_fingerprint(&c->join) : slash_ckpt_fingerprint(&c->state);
        if (slash_ckpt_write_meta(&m, fp, &blob, &len) != SLASH_OK)
            abort();
    } else if (join) {
        slash_join *s = fuzz_filled_join(&c->join, &ROWS);
        slash_join_result *r;
        if (slash_join_emit(s, 150, &r) != SLASH_OK)
            abort();
        slash_join_result_free(r);
        if (slash_ckpt_write_join_partition(s, 0, &blob, &len) != SLASH_OK)
            abort();
        slash_join_close(s);
    } else {
        slash_ssb *s = fuzz_filled_ssb(&c->state, &ROWS);
        slash_ssb_result *r;
        if (slash_ssb_emit(s, 150, &r) != SLASH_OK)
            abort();
        slash_ssb_result_free(r);
        if (slash_ckpt_write_partition(s, 0, &blob, &len) != SLASH_OK)
            abort();
        slash_ssb_close(s);
    }
    if (len + 2 > cap)
        abort();
    out[0] = cb, out[1] = mode;
    memcpy(out + 2, blob, len);
    free(blob);
    return len + 2;
}

static void write_file(const char *dir, const char *target, uint8_t c, const uint8_t *d, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s/seed_%02x", dir, target, c);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(d, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        exit(1);
    }
}

static size_t frame(uint8_t *p, const wire *h, const uint8_t *payload, size_t n)
{
    p[0] = 1;
    size_t len = sizeof *h + n;
    p[1] = (uint8_t)len, p[2] = (uint8_t)(len >> 8);
    memcpy(p + 3, h, sizeof *h);
    memcpy(p + 3 + sizeof *h, payload, n);
    return 3 + len;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
        return 2;
    }
    /* configs: aggregate/join x int/bytes keys x windows, 2 partitions, varied columns */
    static const uint8_t configs[] = {0x10, 0x12, 0x14, 0x18, 0x5a, 0xd0, 0x11, 0x13, 0x19, 0x5b};
    static uint8_t buf[1 << 16], delta[1 << 15];
    for (size_t i = 0; i < sizeof configs; i++) {
        uint8_t cb = configs[i];
        slash_exec_config c = fuzz_config(cb);
        size_t dl = make_delta(&c, delta, 4096);
        buf[0] = cb;
        memcpy(buf + 1, delta, dl);
        write_file(argv[1], "fuzz_merge_delta", cb, buf, 1 + dl);

        size_t at = 0;
        buf[at++] = cb;
        buf[at++] = 0; /* a group of 2: rank 0 leads partition 0 */
        size_t half = dl / 2;
        wire h = {.type = 1, .part = 0, .epoch = 1, .offset = 0, .total = dl, .frag = half};
        at += frame(buf + at, &h, delta, half);
        h.offset = half, h.frag = dl - half;
        at += frame(buf + at, &h, delta + half, dl - half);
        /* rows: [time][key][8-byte value per column that travels], side 0 */
        uint8_t rows[256];
        size_t rl = 0;
        uint32_t ncols = c.kind == SLASH_EXEC_JOIN ? c.join.ncols[0] : c.state.naggs;
        for (int k = 0; k < 3; k++) {
            memcpy(rows + rl, &T[k], 8), rl += 8;
            if ((cb & 2) == 0) {
                memcpy(rows + rl, &K[k], 8), rl += 8;
            } else {
                rows[rl++] = 2;
                memcpy(rows + rl, KD + OFF[k], 2), rl += 2;
            }
            for (uint32_t j = 0; j < ncols; j++)
                if (c.kind == SLASH_EXEC_JOIN || slash_crdt_needs_input(c.state.aggs[j]))
                    memcpy(rows + rl, &V[k], 8), rl += 8;
        }
        { /* checkpoints: aggregate and join partitions, META blobs */
            static const uint8_t modes[3] = {0, 3, 4};
            for (int k = 0; k < 3; k++) {
                size_t cl = make_ckpt(&c, cb, modes[k], buf, sizeof buf);
                write_file(argv[1], "fuzz_ckpt_read", (uint8_t)(i * 3 + (size_t)k), buf, cl);
            }
        }
        wire r = {.type = 3, .part = 0, .epoch = 1, .offset = 3, .frag = rl};
        at += frame(buf + at, &r, rows, rl);
        wire e = {.type = 2, .epoch = 1, .watermark = 250};
        at += frame(buf + at, &e, NULL, 0);
        write_file(argv[1], "fuzz_sync_msg", cb, buf, at);
    }
    return 0;
}
