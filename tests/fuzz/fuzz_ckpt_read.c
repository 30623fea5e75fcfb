/* fuzz_ckpt_read.c - libFuzzer target: reading checkpoint blobs
 * (checkpoint.h: slash_ckpt_read_partition, slash_ckpt_read_meta) from
 * arbitrary bytes.
 *
 * Input: [config byte (fuzz_common.h: bit 0 a join, else an aggregate)]
 * [mode byte][blob]. Mode bit 0 rewrites the blob's CRC trailer and bit 1 its
 * fingerprint to the config's, so mutations reach the record parser behind
 * the checksum; bit 2 reads the blob as a META blob instead. The partition
 * read (an aggregate partition, or for a join config a join partition,
 * slash_ckpt_read_join_partition) is the one the header names (modulo the
 * config's partitions). A blob the reader accepts must write back and read
 * again into a fresh store, and both stores emit everything. A META blob of
 * an older format version must read back the same from what this version
 * writes. Errors are fine; a crash, a leak, a hang or an
 * ASan/UBSan report is a finding.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "slash/checkpoint.h"
#include "slash/join.h"
#include "slash/ssb.h"

static void drain(slash_ssb *s)
{
    slash_ssb_result *r = NULL;
    if (slash_ssb_emit(s, INT64_MAX, &r) == SLASH_OK)
        slash_ssb_result_free(r);
}

static void drain_join(slash_join *s)
{
    slash_join_result *r = NULL;
    if (slash_join_emit(s, INT64_MAX, &r) == SLASH_OK)
        slash_join_result_free(r);
}

/* A join partition blob: accepted ones must round-trip. */
static void join_partition(const slash_join_config *jc, const uint8_t *blob, size_t n)
{
    uint32_t part = 0;
    if (n >= 20)
        part = ((uint32_t)blob[16] | (uint32_t)blob[17] << 8 | (uint32_t)blob[18] << 16 |
                (uint32_t)blob[19] << 24) % jc->partitions;
    slash_join *s = NULL, *t = NULL;
    if (slash_join_open(jc, &s) != SLASH_OK || slash_join_open(jc, &t) != SLASH_OK)
        abort();
    if (slash_ckpt_read_join_partition(s, part, blob, n) == SLASH_OK) {
        uint8_t *again;
        size_t len;
        if (slash_ckpt_write_join_partition(s, part, &again, &len) != SLASH_OK ||
            slash_ckpt_read_join_partition(t, part, again, len) != SLASH_OK)
            abort(); /* what was accepted must round-trip */
        free(again);
    }
    drain_join(s);
    drain_join(t);
    slash_join_close(s);
    slash_join_close(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    slash_exec_config c = fuzz_config(data[0]);
    const bool join = c.kind == SLASH_EXEC_JOIN;
    uint8_t mode = data[1];
    size_t n = size - 2;
    /* a copy of exactly n bytes, so ASan sees any read past the blob */
    uint8_t *blob = malloc(n ? n : 1);
    if (!blob)
        abort();
    memcpy(blob, data + 2, n);
    uint64_t fp = join ? slash_ckpt_join_fingerprint(&c.join) : slash_ckpt_fingerprint(&c.state);
    if ((mode & 2) && n >= 16)
        for (int i = 0; i < 8; i++)
            blob[8 + i] = (uint8_t)(fp >> (8 * i));
    if ((mode & 1) && n >= 4) {
        uint32_t crc = slash_crc32c(0, blob, n - 4);
        for (int i = 0; i < 4; i++)
            blob[n - 4 + i] = (uint8_t)(crc >> (8 * i));
    }
    if (mode & 4) {
        slash_ckpt_meta_info *m = calloc(1, sizeof *m);
        if (!m)
            abort();
        slash_ckpt_meta_info *m2 = calloc(1, sizeof *m2);
        if (!m2)
            abort();
        if (slash_ckpt_read_meta(blob, n, fp, m) == SLASH_OK) {
            uint8_t *again;
            size_t len;
            if (slash_ckpt_write_meta(m, fp, &again, &len) != SLASH_OK || len != n)
                abort();
            if (blob[4] == SLASH_CKPT_VERSION && blob[5] == 0) {
                if (memcmp(again, blob, n) != 0)
                    abort(); /* an accepted META of this version writes back byte for byte */
            } else if (slash_ckpt_read_meta(again, len, fp, m2) != SLASH_OK ||
                       memcmp(m, m2, sizeof *m) != 0) {
                abort(); /* an older version's META reads back the same in this one */
            }
            free(again);
        }
        free(m2);
        free(m);
        free(blob);
        return 0;
    }
    if (join) {
        join_partition(&c.join, blob, n);
        free(blob);
        return 0;
    }
    if (join) {
        join_partition(&c.join, blob, n);
        free(blob);
        return 0;
    }
    uint32_t part = 0;
    if (n >= 20)
        part = ((uint32_t)blob[16] | (uint32_t)blob[17] << 8 | (uint32_t)blob[18] << 16 |
                (uint32_t)blob[19] << 24) % c.state.partitions;
    slash_ssb *s = NULL, *t = NULL;
    if (slash_ssb_open(&c.state, &s) != SLASH_OK || slash_ssb_open(&c.state, &t) != SLASH_OK)
        abort();
    if (slash_ckpt_read_partition(s, part, blob, n) == SLASH_OK) {
        uint8_t *again;
        size_t len;
        if (slash_ckpt_write_partition(s, part, &again, &len) != SLASH_OK ||
            slash_ckpt_read_partition(t, part, again, len) != SLASH_OK)
            abort(); /* what was accepted must round-trip */
        free(again);
    }
    drain(s);
    drain(t);
    slash_ssb_close(s);
    slash_ssb_close(t);
    free(blob);
    return 0;
}
