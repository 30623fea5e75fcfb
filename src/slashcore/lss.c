/* lss.c - reservation, truncation and accounting of the log (see lss.h).
 * Invariant: pages of the reservation below `released` are MADV_DONTNEED'd
 * and hold no record that is still reachable (released <= begin - shift). */
#define _GNU_SOURCE
#include "slash/lss.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LSS_RELEASE_GRAIN ((uint64_t)2 << 20)

slash_status slash_lss_init(slash_lss *l, size_t reserve)
{
    memset(l, 0, sizeof *l);
    if (reserve == 0)
        reserve = SLASH_LSS_DEFAULT_RESERVE;
    void *p = mmap(NULL, reserve, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return slash_fail(SLASH_ENOMEM, "reserving %zu bytes for the log: %s", reserve,
                          strerror(errno));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, reserve, MADV_HUGEPAGE); /* best effort: fewer TLB misses */
#endif
    l->base = p;
    l->reserved = reserve;
    l->begin = l->read_only = l->tail = l->released = SLASH_LSS_FIRST;
    return SLASH_OK;
}

void slash_lss_destroy(slash_lss *l)
{
    if (l->base)
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
