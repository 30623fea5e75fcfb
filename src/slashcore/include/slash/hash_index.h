/* hash_index.h - the hash index of one key partition, in the manner of FASTER:
 * a power-of-two array of 64-byte buckets, each with 7 entries and a link to
 * an overflow bucket. An entry is one 8-byte word: the log address of the
 * newest record of a hash chain (48 bits), a 14-bit tag taken from the hash,
 * and a tentative bit (reserved for concurrent inserts; one thread owns a
 * partition today). Records whose hashes share bucket and tag form a chain
 * through their `prev` addresses, newest first, so chain addresses strictly
 * decrease. An entry or link whose address is below the log's `begin` is
 * empty: truncating the log empties the index without touching it.
 * The index never compares keys; the store walks the chain and compares them.
 */
#ifndef SLASH_HASH_INDEX_H
#define SLASH_HASH_INDEX_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_HIDX_SLOTS 7
#define SLASH_HIDX_ADDR_MASK ((UINT64_C(1) << 48) - 1)
#define SLASH_HIDX_TAG_SHIFT 48
#define SLASH_HIDX_TAG_MASK UINT64_C(0x3fff)
#define SLASH_HIDX_TENTATIVE (UINT64_C(1) << 62)

/* One entry: a union so the word can be swapped atomically as a whole. */
typedef union slash_hidx_entry {
    uint64_t word;
} slash_hidx_entry;
static_assert(sizeof(slash_hidx_entry) == 8, "an index entry is one atomic word");

typedef struct slash_hidx_bucket {
    slash_hidx_entry entry[SLASH_HIDX_SLOTS];
    uint64_t overflow; /* index into the overflow pool, 0 = none */
} slash_hidx_bucket;
static_assert(sizeof(slash_hidx_bucket) == 64, "a bucket is one cache line");

typedef struct slash_hidx {
    slash_hidx_bucket *buckets;
    uint64_t mask;             /* number of buckets - 1 */
    slash_hidx_bucket *pool;   /* overflow buckets; pool[0] is unused */
    uint64_t pool_used, pool_cap;
} slash_hidx;

static inline uint64_t slash_hidx_addr(uint64_t word) { return word & SLASH_HIDX_ADDR_MASK; }
static inline uint64_t slash_hidx_tag(uint64_t hash)
{
    return (hash >> SLASH_HIDX_TAG_SHIFT) & SLASH_HIDX_TAG_MASK;
}
static inline uint64_t slash_hidx_make(uint64_t addr, uint64_t hash)
{
    return addr | (slash_hidx_tag(hash) << SLASH_HIDX_TAG_SHIFT);
}

/* Allocates nbuckets (rounded up to a power of two, at least 1) zeroed
 * buckets. Fails with SLASH_ENOMEM. The caller owns it: slash_hidx_destroy(). */
slash_status slash_hidx_init(slash_hidx *h, uint64_t nbuckets);

/* The same, for an index about to be filled at once (an imported partition):
 * its pages are faulted in now, small (a huge-page fault may compact memory
 * first); slash_hidx_advise_huge() once it is filled lets khugepaged merge
 * them into huge pages later. */
slash_status slash_hidx_init_prefaulted(slash_hidx *h, uint64_t nbuckets);
void slash_hidx_advise_huge(slash_hidx *h);

/* Frees; safe on a zeroed or destroyed index. */
void slash_hidx_destroy(slash_hidx *h);

static inline slash_hidx_bucket *slash_hidx_bucket_of(const slash_hidx *h, uint64_t hash)
{
    return &h->buckets[hash & h->mask];
}

/* Returns the entry whose tag matches hash and whose address is >= begin, or
 * NULL. The pointer is valid until the next slash_hidx_claim(). */
static inline slash_hidx_entry *slash_hidx_find(const slash_hidx *h, uint64_t hash,
                                                uint64_t begin)
{
    uint64_t tag = slash_hidx_tag(hash);
    slash_hidx_bucket *b = slash_hidx_bucket_of(h, hash);
    for (;;) {
        for (int i = 0; i < SLASH_HIDX_SLOTS; i++) {
            uint64_t w = b->entry[i].word;
            if (slash_hidx_addr(w) >= begin && ((w >> SLASH_HIDX_TAG_SHIFT) & SLASH_HIDX_TAG_MASK) == tag)
                return &b->entry[i];
        }
        if (!b->overflow)
            return NULL;
        b = &h->pool[b->overflow];
    }
}

/* Makes the record at addr the head of hash's chain in entry e (from
 * slash_hidx_claim() for hash) and returns the address the record must link
 * to: the old head when it is live and of the same tag, else 0 (end). */
static inline uint64_t slash_hidx_push(slash_hidx_entry *e, uint64_t addr, uint64_t hash,
                                       uint64_t begin)
{
    uint64_t head = slash_hidx_addr(e->word);
    int same_tag = head >= begin &&
                   ((e->word >> SLASH_HIDX_TAG_SHIFT) & SLASH_HIDX_TAG_MASK) == slash_hidx_tag(hash);
    e->word = slash_hidx_make(addr, hash);
    return same_tag ? head : 0;
}

/* Returns in *out the entry for hash's tag: the existing one, or a free one
 * (its old word is left for the caller to overwrite with slash_hidx_make()).
 * May allocate an overflow bucket; fails only with SLASH_ENOMEM. */
slash_status slash_hidx_claim(slash_hidx *h, uint64_t hash, uint64_t begin,
                              slash_hidx_entry **out);

/* Number of buckets in the main array. */
static inline uint64_t slash_hidx_buckets(const slash_hidx *h) { return h->mask + 1; }

/* Bytes of memory held by the index (main array plus overflow pool). */
size_t slash_hidx_memory(const slash_hidx *h);

#ifdef __cplusplus
}
#endif
#endif
