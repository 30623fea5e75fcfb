/* test_lss_index.c - the log (append, truncate, memory, prefault) and the
 * bucket index (find, claim, overflow buckets, entries below begin are
 * empty). */
#define _GNU_SOURCE
#include "slash/hash_index.h"
#include "slash/lss.h"
#include "unit.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

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

TEST(idle_log_reserves_nothing_until_its_first_append)
{
    slash_lss l;
    CHECK_OK(slash_lss_init(&l, (size_t)1 << 30));
    CHECK(l.reserved == 0);
    CHECK(slash_lss_memory(&l) == 0 && !slash_lss_crowded(&l));
    slash_lss_truncate(&l, l.begin); /* nothing to do, no system call on the empty block */
    uint64_t a;
    CHECK_OK(slash_lss_append(&l, 64, &a));
    CHECK(l.reserved == (size_t)1 << 30);
    slash_lss_destroy(&l);
}

/* Resident pages of [p, p + len) (mincore), p page-aligned. */
static size_t resident_pages(const void *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page, k = 0;
    unsigned char *v = malloc(n);
    CHECK(v && mincore((void *)p, len, v) == 0);
    for (size_t i = 0; i < n; i++)
        k += v[i] & 1;
    free(v);
    return k;
}

TEST(prefault_reserves_and_faults_in_the_pages_appends_will_use)
{
    slash_lss l;
    CHECK_OK(slash_lss_init(&l, (size_t)1 << 30));
    l.small_pages = 1;
    const uint32_t bytes = 1 << 20;
    slash_lss_prefault(&l, bytes);
    CHECK(l.reserved == (size_t)1 << 30 && l.tail == SLASH_LSS_FIRST); /* nothing appended */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
#ifdef MADV_POPULATE_WRITE
    errno = 0;
    if (madvise(l.base, page, MADV_POPULATE_WRITE) == 0) /* the kernel can populate */
        CHECK(resident_pages(l.base, bytes) >= bytes / page);
#endif
    uint64_t a = 0;
    for (uint32_t i = 0; i < bytes / 64 - 1; i++) {
        CHECK_OK(slash_lss_append(&l, 64, &a));
        const uint64_t *w = slash_lss_ptr(&l, a);
        CHECK(w[0] == 0 && w[7] == 0); /* zero on first use, as without prefault */
    }
    slash_lss_prefault(&l, 0); /* nothing to do */
    slash_lss_destroy(&l);
}

TEST(full_log_grows_in_place_keeping_its_records)
{
    slash_lss l;
    CHECK_OK(slash_lss_init(&l, 4096));
    uint64_t a, b;
    CHECK_OK(slash_lss_append(&l, 1024, &a));
    memset(slash_lss_ptr(&l, a), 0x5a, 1024);
    uint8_t *before = slash_lss_ptr(&l, a);
    size_t reserved = l.reserved;
    /* the space after a fresh mapping may be taken: make sure it is free */
    slash_status st = slash_lss_append(&l, 8192, &b);
    if (st == SLASH_OK) {
        CHECK(l.reserved > reserved && l.reserved >= 64 + 1024 + 8192);
        CHECK(slash_lss_ptr(&l, a) == before); /* never moved */
        CHECK(b == a + 1024);
        memset(slash_lss_ptr(&l, b), 0x33, 8192); /* the new pages are usable */
        uint8_t *p = slash_lss_ptr(&l, a);
        CHECK(p[0] == 0x5a && p[1023] == 0x5a);
    } else {
        CHECK(st == SLASH_ENOMEM && l.reserved == reserved && l.tail == a + 1024);
    }
    slash_lss_destroy(&l);
}

TEST(full_log_that_cannot_grow_in_place_fails_cleanly)
{
    slash_lss l;
    CHECK_OK(slash_lss_init(&l, 4096));
    uint64_t a;
    CHECK_OK(slash_lss_append(&l, 64, &a));
    size_t page = 4096;
    void *blocker = mmap(l.base + l.reserved, page, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (blocker == l.base + l.reserved) {
        uint64_t tail = l.tail;
        CHECK_ST(slash_lss_append(&l, 8192, &a), SLASH_ENOMEM);
        CHECK(strstr(slash_last_error(), "cannot grow in place") != NULL);
        CHECK(l.tail == tail && l.reserved == 4096);
        CHECK_OK(slash_lss_append(&l, 64, &a)); /* what still fits does */
        munmap(blocker, page);
    } else if (blocker != MAP_FAILED) {
        munmap(blocker, page);
    }
    slash_lss_destroy(&l);
}

TEST(default_reservation_splits_a_store_budget)
{
    CHECK(slash_lss_default_reserve(1) == SLASH_LSS_DEFAULT_RESERVE);
    CHECK(slash_lss_default_reserve(64) == SLASH_LSS_DEFAULT_RESERVE);
    CHECK(slash_lss_default_reserve(4096) == (size_t)1 << 30);
    CHECK((size_t)4096 * 2 * slash_lss_default_reserve(4096) <= (size_t)8 << 40);
    CHECK(slash_lss_default_reserve(1u << 31) == SLASH_LSS_MIN_RESERVE);
}

TEST(compaction_target_grows_with_live_data)
{
    slash_lss l;
    CHECK_OK(slash_lss_init(&l, (size_t)1 << 20));
    CHECK(slash_lss_next_reserve(&l) == (size_t)1 << 20);
    uint64_t a;
    for (int i = 0; i < 8192; i++) /* 512 KiB live: more than a quarter of 1 MiB */
        CHECK_OK(slash_lss_append(&l, 64, &a));
    CHECK(slash_lss_next_reserve(&l) >= 4 * (l.tail - l.begin));
    CHECK(slash_lss_next_reserve(&l) <= SLASH_LSS_MAX_RESERVE);
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
    RUN(idle_log_reserves_nothing_until_its_first_append);
    RUN(prefault_reserves_and_faults_in_the_pages_appends_will_use);
    RUN(full_log_grows_in_place_keeping_its_records);
    RUN(full_log_that_cannot_grow_in_place_fails_cleanly);
    RUN(default_reservation_splits_a_store_budget);
    RUN(compaction_target_grows_with_live_data);
    RUN(emptied_log_reuses_its_memory_and_addresses_keep_growing);
    RUN(index_claim_find_overflow);
    return UNIT_DONE();
}
