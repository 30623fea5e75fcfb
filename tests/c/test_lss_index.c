/* test_lss_index.c - the log (append, truncate, memory) and the bucket
 * index (find, claim, overflow buckets, entries below begin are empty). */
#include "slash/hash_index.h"
#include "slash/lss.h"
#include "unit.h"

TEST(log_boundaries)
{
    slash_lss l;
    CHECK_OK(slash_lss_init(&l, (size_t)1 << 30));
    CHECK(l.begin == SLASH_LSS_FIRST && l.read_only == l.begin && l.tail == l.begin);
    uint64_t a = 0, b = 0;
    CHECK_OK(slash_lss_append(&l, 48, &a));
    CHECK_OK(slash_lss_append(&l, 48, &b));
    CHECK(a == SLASH_LSS_FIRST && b == a + 48 && l.tail == b + 48);
    memset(slash_lss_ptr(&l, a), 0xab, 96);
    CHECK(slash_lss_memory(&l) >= 96);
    /* grow over many pages, then give the front back */
    for (int i = 0; i < 100000; i++)
        CHECK_OK(slash_lss_append(&l, 64, &a));
    memset(slash_lss_ptr(&l, SLASH_LSS_FIRST), 1, l.tail - SLASH_LSS_FIRST);
    size_t before = slash_lss_memory(&l);
    l.read_only = l.tail - 64;
    slash_lss_truncate(&l, l.tail - 64);
    CHECK(l.begin == l.tail - 64);
    CHECK(slash_lss_memory(&l) < before);
    CHECK(*(uint8_t *)slash_lss_ptr(&l, l.begin) == 1);
    slash_lss_destroy(&l);
    slash_lss_destroy(&l); /* safe twice */
}

TEST(log_full)
{
    slash_lss l;
    CHECK_OK(slash_lss_init(&l, 4096));
    uint64_t a;
    CHECK_ST(slash_lss_append(&l, 8192, &a), SLASH_ENOMEM);
    slash_lss_destroy(&l);
}

TEST(emptied_log_reuses_its_memory_and_addresses_keep_growing)
{
    slash_lss l;
    CHECK_OK(slash_lss_init(&l, (size_t)1 << 30));
    uint64_t a = 0, first = 0;
    CHECK_OK(slash_lss_append(&l, 64, &first));
    uint8_t *start = slash_lss_ptr(&l, first);
    for (int i = 0; i < 1000; i++)
        CHECK_OK(slash_lss_append(&l, 64, &a));
    uint64_t old_tail = l.tail;
    slash_lss_truncate(&l, l.tail); /* everything shipped: empty */
    CHECK(l.begin == old_tail && slash_lss_memory(&l) == 0);
    CHECK_OK(slash_lss_append(&l, 64, &a));
    CHECK(a == old_tail);                    /* addresses never go back ... */
    CHECK(slash_lss_ptr(&l, a) == start);    /* ... but the memory does */
    CHECK(slash_lss_addr(&l, start) == a);
    memset(slash_lss_ptr(&l, a), 7, 64);
    /* a log that is not empty keeps its span contiguous: no rewind */
    uint64_t b;
    CHECK_OK(slash_lss_append(&l, 64, &b));
    slash_lss_truncate(&l, b);
    CHECK(l.begin == b && (uint8_t *)slash_lss_ptr(&l, b) == start + 64);
    /* filling half the reservation's bytes asks for compaction, however often it rewound */
    CHECK(!slash_lss_crowded(&l));
    slash_lss_destroy(&l);

    CHECK_OK(slash_lss_init(&l, (size_t)1 << 20));
    for (int round = 0; round < 64; round++) { /* 64 x 256 KiB through a 1 MiB reservation */
        for (int i = 0; i < 4096; i++)
            CHECK_OK(slash_lss_append(&l, 64, &a));
        memset(slash_lss_ptr(&l, l.begin), round, l.tail - l.begin);
        slash_lss_truncate(&l, l.tail);
    }
    CHECK(l.tail > ((uint64_t)1 << 20) && !slash_lss_crowded(&l));
    slash_lss_destroy(&l);
}

TEST(index_claim_find_overflow)
{
    slash_hidx h;
    CHECK_OK(slash_hidx_init(&h, 3));
    CHECK(slash_hidx_buckets(&h) == 4);
    /* 40 distinct tags in bucket 1: needs overflow buckets */
    for (uint64_t t = 0; t < 40; t++) {
        uint64_t hash = (t << SLASH_HIDX_TAG_SHIFT) | 1;
        CHECK(slash_hidx_find(&h, hash, 64) == NULL);
        slash_hidx_entry *e;
        CHECK_OK(slash_hidx_claim(&h, hash, 64, &e));
        e->word = slash_hidx_make(64 + t * 8, hash);
    }
    CHECK(h.pool_used > 1);
    for (uint64_t t = 0; t < 40; t++) {
        uint64_t hash = (t << SLASH_HIDX_TAG_SHIFT) | 1;
        slash_hidx_entry *e = slash_hidx_find(&h, hash, 64);
        CHECK(e && slash_hidx_addr(e->word) == 64 + t * 8);
        /* claiming again returns the same entry */
        slash_hidx_entry *e2;
        CHECK_OK(slash_hidx_claim(&h, hash, 64, &e2));
        CHECK(e2 == slash_hidx_find(&h, hash, 64));
    }
    /* raising begin empties entries below it, and they are reused */
    uint64_t hash0 = 1;
    CHECK(slash_hidx_find(&h, hash0, 64 + 8) == NULL);
    uint64_t used = h.pool_used;
    slash_hidx_entry *e;
    CHECK_OK(slash_hidx_claim(&h, (UINT64_C(99) << SLASH_HIDX_TAG_SHIFT) | 1, 64 + 40 * 8, &e));
    CHECK(h.pool_used == used);
    CHECK(slash_hidx_memory(&h) >= 4 * 64);
    slash_hidx_destroy(&h);
}

int main(void)
{
    RUN(log_boundaries);
    RUN(log_full);
    RUN(emptied_log_reuses_its_memory_and_addresses_keep_growing);
    RUN(index_claim_find_overflow);
    return UNIT_DONE();
}
