/* hash_index.c - allocation and insertion of the bucket index (hash_index.h).
 * Invariant: overflow links only ever point at pool entries in [1, pool_used),
 * and a bucket's overflow chain is only extended, never shortened, so entry
 * pointers stay valid until the pool is reallocated by the next claim. */
#include "slash/hash_index.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Zeroed, 64-byte aligned memory, with its origin in the two words just
 * below the block: [-1] the pointer to release, [-2] the mapped length (0:
 * from calloc). Small blocks come from calloc (fresh zero pages, not written
 * twice). Blocks of HIDX_HUGE bytes or more are their own anonymous mapping
 * advised to use transparent huge pages: an index is probed at random, and
 * with 4 KiB pages every probe of a large one missed the TLB and every page
 * cost two faults (a read maps the zero page, the first write copies it).
 * A block about to be filled at once (prefault) instead takes small pages,
 * all faulted in by one madvise: a huge-page fault may compact memory first,
 * which made the first fragment of a 100 MB hand-over take 70-130 ms for a
 * 32 MB index in `slash bench elastic` (small pages: ~15 ms); it is advised
 * to use huge pages once filled (slash_hidx_advise_huge), for khugepaged. */
#define HIDX_HUGE ((size_t)4 << 20)
#define HIDX_HEAD 64 /* header room: keeps the block 64-byte aligned */

static void *zalloc_aligned(size_t bytes, bool prefault)
{
    if (bytes >= HIDX_HUGE) {
        size_t len = bytes + HIDX_HEAD;
        uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            if (prefault) {
#ifdef MADV_POPULATE_WRITE
                (void)madvise(m, len, MADV_POPULATE_WRITE); /* best effort */
#endif
            } else {
#ifdef MADV_HUGEPAGE
                (void)madvise(m, len, MADV_HUGEPAGE); /* best effort */
#endif
            }
            void **a = (void **)(m + HIDX_HEAD);
            a[-1] = m;
            a[-2] = (void *)(uintptr_t)len;
            return a;
        }
        /* no mapping: calloc may still find the memory */
    }
    uint8_t *raw = calloc(1, bytes + HIDX_HEAD + 2 * sizeof(void *));
    if (!raw)
        return NULL;
    uintptr_t a = ((uintptr_t)raw + 2 * sizeof(void *) + 63) & ~(uintptr_t)63;
    ((void **)a)[-1] = raw;
    ((void **)a)[-2] = NULL;
    return (void *)a;
}

static void free_aligned(void *p)
{
    if (!p)
        return;
    void **a = p;
    size_t len = (size_t)(uintptr_t)a[-2];
    if (len)
        munmap(a[-1], len);
    else
        free(a[-1]);
}

static slash_status hidx_init(slash_hidx *h, uint64_t nbuckets, bool prefault)
{
    memset(h, 0, sizeof *h);
    uint64_t n = 1;
    while (n < nbuckets)
        n <<= 1;
    h->buckets = zalloc_aligned(n * sizeof(slash_hidx_bucket), prefault);
    if (!h->buckets)
        return slash_fail(SLASH_ENOMEM, "hash index of %llu buckets", (unsigned long long)n);
    h->mask = n - 1;
    h->pool_used = 1;
    return SLASH_OK;
}

slash_status slash_hidx_init(slash_hidx *h, uint64_t nbuckets) { return hidx_init(h, nbuckets, false); }

slash_status slash_hidx_init_prefaulted(slash_hidx *h, uint64_t nbuckets)
{
    return hidx_init(h, nbuckets, true);
}

void slash_hidx_advise_huge(slash_hidx *h)
{
#ifdef MADV_HUGEPAGE
    void **a = (void **)h->buckets;
    size_t len = a ? (size_t)(uintptr_t)a[-2] : 0;
    if (len)
        (void)madvise(a[-1], len, MADV_HUGEPAGE); /* best effort */
#else
    (void)h;
#endif
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
        slash_hidx_bucket *p = zalloc_aligned(cap * sizeof *p, false);
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
