/* checkpoint_impl.h - what the checkpoint format's sources share, private to
 * the core: little-endian helpers and the blob header (checkpoint.h), used by
 * checkpoint.c (aggregate partitions, META blobs, images) and
 * checkpoint_join.c (join partitions). Invariant: every blob is header |
 * payload | CRC32C of both; ckpt_header_check verifies all of that before a
 * reader looks at the payload.
 */
#ifndef SLASH_CHECKPOINT_IMPL_H
#define SLASH_CHECKPOINT_IMPL_H

#include <stdint.h>
#include <string.h>

#include "slash/checkpoint.h"

static inline void ckpt_put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static inline void ckpt_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ckpt_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t ckpt_get_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t ckpt_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static inline uint64_t ckpt_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

typedef struct ckpt_header {
    uint16_t version, kind;
    uint64_t fp;
    uint32_t partition, partitions;
    uint64_t records, payload;
    int64_t watermark;
} ckpt_header;

/* FNV-1a step over the 8 bytes of v (fingerprints). */
static inline uint64_t ckpt_fnv(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        h = (h ^ ((v >> (8 * i)) & 0xff)) * UINT64_C(0x100000001b3);
    return h;
}

/* Checks everything of a blob but its payload's records (length, magic,
 * version, kind, payload length, CRC, fingerprint); fills *h. */
slash_status ckpt_header_check(const void *data, size_t len, unsigned kind, uint64_t fp,
                               ckpt_header *h);

/* Writes the header into buf (which holds SLASH_CKPT_HEADER + payload + 4
 * bytes, the payload already in place) and the CRC trailer; hands buf out. */
slash_status ckpt_seal(uint8_t *buf, const ckpt_header *h, size_t payload, uint8_t **out,
                       size_t *len);

#endif
