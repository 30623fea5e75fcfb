/* mix.h - murmur3's 64-bit finalizer: a bijection of 64-bit words with full
 * avalanche, the core's one integer mixer (index hashes, sketch hashes). A
 * fixed function: its values may be stored and shipped to peers. */
#ifndef SLASH_MIX_H
#define SLASH_MIX_H

#include <stdint.h>

static inline uint64_t slash_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

#endif
