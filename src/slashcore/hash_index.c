/* hash_index.c - allocation and insertion of the bucket index (hash_index.h).
 * Invariant: overflow links only ever point at pool entries in [1, pool_used),
 * and a bucket's overflow chain is only extended, never shortened, so entry
 * pointers stay valid until the pool is reallocated by the next claim. */
#include "slash/hash_index.h"

#include <stdlib.h>
#include <string.h>

/* Zeroed, 64-byte aligned memory. calloc, not aligned_alloc + memset: for
 * large sizes calloc takes fresh zero pages and skips writing them twice.
 * The original pointer is kept just below the aligned block. */
static void *zalloc_aligned(size_t bytes)
{
    uint8_t *raw = calloc(1, bytes + 64 + sizeof(void *));
    if (!raw)
        return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    ((void **)a)[-1] = raw;
    return (void *)a;
}

static void free_aligned(void *p)
{
    if (p)
        free(((void **)p)[-1]);
}

slash_status slash_hidx_init(slash_hidx *h, uint64_t nbuckets)
{
    memset(h, 0, sizeof *h);
    uint64_t n = 1;
    while (n < nbuckets)
        n <<= 1;
    h->buckets = zalloc_aligned(n * sizeof(slash_hidx_bucket));
    if (!h->buckets)
        return slash_fail(SLASH_ENOMEM, "hash index of %llu buckets", (unsigned long long)n);
    h->mask = n - 1;
    h->pool_used = 1;
    return SLASH_OK;
}

void slash_hidx_destroy(slash_hidx *h)
{
    free_aligned(h->buckets);
    free_aligned(h->pool);
    memset(h, 0, sizeof *h);
}

static slash_status pool_take(slash_hidx *h, uint64_t *idx)
{
    if (h->pool_used >= h->pool_cap) {
        uint64_t cap = h->pool_cap ? h->pool_cap * 2 : 64;
        slash_hidx_bucket *p = zalloc_aligned(cap * sizeof *p);
        if (!p)
            return slash_fail(SLASH_ENOMEM, "hash index overflow pool of %llu buckets",
                              (unsigned long long)cap);
        if (h->pool)
            memcpy(p, h->pool, h->pool_used * sizeof *p);
        free_aligned(h->pool);
        h->pool = p;
        h->pool_cap = cap;
    }
    *idx = h->pool_used++;
    return SLASH_OK;
}

slash_status slash_hidx_claim(slash_hidx *h, uint64_t hash, uint64_t begin,
                              slash_hidx_entry **out)
{
    slash_hidx_entry *e = slash_hidx_find(h, hash, begin);
    if (e) {
        *out = e;
        return SLASH_OK;
    }
    /* walk by index, not pointer: pool_take may move the pool */
    slash_hidx_bucket *b = slash_hidx_bucket_of(h, hash);
    uint64_t cur = 0; /* 0: main bucket, else pool index */
    for (;;) {
        for (int i = 0; i < SLASH_HIDX_SLOTS; i++) {
            if (slash_hidx_addr(b->entry[i].word) < begin) {
                *out = &b->entry[i];
                return SLASH_OK;
            }
        }
        if (!b->overflow)
            break;
        cur = b->overflow;
        b = &h->pool[cur];
    }
    uint64_t idx = 0;
    slash_status st = pool_take(h, &idx);
    if (st != SLASH_OK)
        return st;
    b = cur ? &h->pool[cur] : slash_hidx_bucket_of(h, hash);
    b->overflow = idx;
    *out = &h->pool[idx].entry[0];
    return SLASH_OK;
}

size_t slash_hidx_memory(const slash_hidx *h)
{
    return (size_t)(slash_hidx_buckets(h) + h->pool_cap) * sizeof(slash_hidx_bucket);
}
