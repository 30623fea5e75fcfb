/* blob_faults.h - the checkpoint tests' fault loops over a serialised blob:
 * every truncation (each prefix, in a buffer of exactly its length, so ASan
 * sees any overread) and every single bit flip. Each damaged copy goes to a
 * caller's check that says whether it was refused cleanly; the loops return
 * how many were not. The blob is restored after each flip. */
#ifndef SLASH_TEST_BLOB_FAULTS_H
#define SLASH_TEST_BLOB_FAULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* true when the reader refused (p, len) as it should; ctx is the caller's */
typedef bool (*blob_faults_check)(const void *ctx, const uint8_t *p, size_t len);

/* Every prefix of blob shorter than len: how many check did not accept as refused. */
static inline size_t blob_faults_truncations(const uint8_t *blob, size_t len,
                                             blob_faults_check refused, const void *ctx)
{
    size_t bad = 0;
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n ? n : 1); /* exactly n bytes: ASan sees any overread */
        if (!cut)
            abort();
        memcpy(cut, blob, n);
        bad += !refused(ctx, cut, n);
        free(cut);
    }
    return bad;
}

/* Every single bit of blob flipped in place (and flipped back): how many
 * check did not accept as refused. */
static inline size_t blob_faults_bit_flips(uint8_t *blob, size_t len, blob_faults_check refused,
                                           const void *ctx)
{
    size_t bad = 0;
    for (size_t bit = 0; bit < len * 8; bit++) {
        blob[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        bad += !refused(ctx, blob, len);
        blob[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    return bad;
}

#endif
