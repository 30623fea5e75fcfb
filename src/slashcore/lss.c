/* lss.c - lazy, growing reservation, truncation and accounting of the log
 * (see lss.h).
 * Invariants: pages of the reservation below `released` are MADV_DONTNEED'd
 * and hold no record that is still reachable (released <= begin - shift);
 * reserved == 0 exactly when base points at the static empty block, and then
 * the log is empty (begin == tail) and no system call touches base. */
#define _GNU_SOURCE
#include "slash/lss.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LSS_RELEASE_GRAIN ((uint64_t)2 << 20)

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* base of a log with no reservation: ptr(begin) of an empty log is one past
 * its end, a valid pointer that is never dereferenced */
static uint8_t lss_unreserved[SLASH_LSS_FIRST];

static size_t round_to(size_t x, size_t a) { return (x + a - 1) / a * a; }

slash_status slash_lss_init(slash_lss *l, size_t reserve)
{
    memset(l, 0, sizeof *l);
    l->base = lss_unreserved;
    l->hint = reserve ? reserve : SLASH_LSS_DEFAULT_RESERVE;
    l->begin = l->read_only = l->tail = l->released = SLASH_LSS_FIRST;
    return SLASH_OK;
}

size_t slash_lss_default_reserve(uint32_t partitions)
{
    size_t r = SLASH_LSS_STORE_BUDGET / (partitions ? partitions : 1);
    if (r < SLASH_LSS_MIN_RESERVE)
        r = SLASH_LSS_MIN_RESERVE;
    return r > SLASH_LSS_DEFAULT_RESERVE ? SLASH_LSS_DEFAULT_RESERVE : r;
}

size_t slash_lss_next_reserve(const slash_lss *l)
{
    size_t r = l->reserved ? l->reserved : l->hint;
    uint64_t live = l->tail - l->begin;
    while (r < SLASH_LSS_MAX_RESERVE && r / 4 < live)
        r *= 2;
    return r;
}

static void advise_huge(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* best effort: fewer TLB misses */
#else
    (void)p, (void)len;
#endif
}

slash_status slash_lss_grow(slash_lss *l, uint32_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t need = round_to((size_t)slash_lss_extent(l) + size, page);
    if (!l->reserved) {
        size_t want = l->hint > need ? round_to(l->hint, page) : need;
        void *p = mmap(NULL, want, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return slash_fail(SLASH_ENOMEM, "reserving %zu bytes of address space for the log: %s",
                              want, strerror(errno));
        /* small logs (most partitions of a many-partition store) stay on 4 KiB
         * pages: a huge page at the first record would cost 2 MiB each */
        if (want > LSS_RELEASE_GRAIN && !l->small_pages)
            advise_huge((uint8_t *)p + LSS_RELEASE_GRAIN, want - LSS_RELEASE_GRAIN);
        l->base = p;
        l->reserved = want;
        return SLASH_OK;
    }
    size_t total = l->reserved * 2 > need ? l->reserved * 2 : need;
    size_t more = total - l->reserved;
    uint8_t *at = l->base + l->reserved;
    void *p = mmap(at, more, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == at) {
        if (!l->small_pages)
            advise_huge(p, more);
        l->reserved = total;
        return SLASH_OK;
    }
    int err = p == MAP_FAILED ? errno : EEXIST;
    if (p != MAP_FAILED)
        munmap(p, more); /* a kernel without MAP_FIXED_NOREPLACE put it elsewhere */
    return slash_fail(SLASH_ENOMEM,
                      "the log's reservation of %zu bytes is full and cannot grow in place "
                      "(%s); give the store a larger log_reserve or more partitions",
                      l->reserved, strerror(err));
}

void slash_lss_prefault(slash_lss *l, uint32_t bytes)
{
    if (bytes == 0 || (slash_lss_extent(l) + bytes > l->reserved && slash_lss_grow(l, bytes) != SLASH_OK))
        return;
#ifdef MADV_POPULATE_WRITE
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = (uintptr_t)l->base + (uintptr_t)slash_lss_extent(l);
    uintptr_t lo = from & ~(uintptr_t)(page - 1);
    (void)madvise((void *)lo, (size_t)(from + bytes - lo), MADV_POPULATE_WRITE);
#endif
}

void slash_lss_destroy(slash_lss *l)
{
    if (l->reserved)
        munmap(l->base, l->reserved);
    memset(l, 0, sizeof *l);
}

void slash_lss_truncate(slash_lss *l, uint64_t a)
{
    if (a <= l->begin)
        return;
    l->begin = a;
    uint64_t used = a - l->shift; /* offset of begin in the reservation */
    if (a == l->tail && l->tail <= SLASH_LSS_ADDR_LIMIT) {
        /* empty: reuse the faulted pages from the start, keep at most KEEP */
        uint64_t end = (used + LSS_RELEASE_GRAIN - 1) & ~(LSS_RELEASE_GRAIN - 1);
        uint64_t keep = SLASH_LSS_KEEP & ~(LSS_RELEASE_GRAIN - 1);
        uint64_t from = l->released > keep ? l->released : keep;
        if (end > from && end <= l->reserved)
            (void)madvise(l->base + from, end - from, MADV_DONTNEED);
        l->shift = a - SLASH_LSS_FIRST;
        l->released = 0;
        return;
    }
    uint64_t upto = used & ~(LSS_RELEASE_GRAIN - 1);
    if (upto > l->released) {
        uint64_t from = l->released & ~(LSS_RELEASE_GRAIN - 1);
        (void)madvise(l->base + from, upto - from, MADV_DONTNEED);
        l->released = upto;
    }
}

size_t slash_lss_memory(const slash_lss *l)
{
    if (l->tail == l->begin)
        return 0;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t lo = (l->begin - l->shift) & ~(page - 1);
    uint64_t hi = (l->tail - l->shift + page - 1) & ~(page - 1);
    return (size_t)(hi - lo);
}
