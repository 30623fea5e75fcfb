/* mem.c - huge-page-first anonymous or memfd-backed mappings (see mem.h). */
#define _GNU_SOURCE
#include "slash/mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE (2u * 1024 * 1024)

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool slash_mem_hugepages_enabled(void)
{
    const char *e = getenv("SLASH_HUGEPAGES");
    return !(e && (e[0] == '0' || e[0] == 'n' || e[0] == 'N' || e[0] == 'f'));
}

static slash_status map_anon(size_t len, slash_mem *m)
{
    if (slash_mem_hugepages_enabled() && len >= HUGE_PAGE) {
        size_t hl = round_up(len, HUGE_PAGE);
        void *p = mmap(NULL, hl, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (p != MAP_FAILED) {
            m->addr = p, m->len = hl, m->hugepages = true;
            return SLASH_OK;
        }
    }
    size_t pl = round_up(len, (size_t)sysconf(_SC_PAGESIZE));
    void *p = mmap(NULL, pl, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return slash_fail(SLASH_ENOMEM, "mmap(%zu bytes): %s", pl, strerror(errno));
    m->addr = p, m->len = pl, m->hugepages = false;
    return SLASH_OK;
}

static slash_status map_fd(int fd, size_t len, bool huge, slash_mem *m)
{
    if (ftruncate(fd, (off_t)len) != 0)
        return slash_fail(SLASH_ESYS, "ftruncate(memfd, %zu): %s", len, strerror(errno));
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return slash_fail(SLASH_ENOMEM, "mmap(memfd, %zu): %s", len, strerror(errno));
    m->addr = p, m->len = len, m->fd = fd, m->hugepages = huge;
    return SLASH_OK;
}

static slash_status map_shared(size_t len, slash_mem *m)
{
    if (slash_mem_hugepages_enabled() && len >= HUGE_PAGE) {
        int fd = memfd_create("slash-region", MFD_CLOEXEC | MFD_HUGETLB);
        if (fd >= 0) {
            if (map_fd(fd, round_up(len, HUGE_PAGE), true, m) == SLASH_OK) {
                /* touch to be sure the huge pages really exist */
                if (madvise(m->addr, m->len, MADV_WILLNEED) == 0)
                    return SLASH_OK;
                slash_mem_unmap(m);
            } else {
                close(fd);
            }
            m->fd = -1;
        }
    }
    int fd = memfd_create("slash-region", MFD_CLOEXEC);
    if (fd < 0)
        return slash_fail(SLASH_ESYS, "memfd_create: %s", strerror(errno));
    slash_status st = map_fd(fd, round_up(len, (size_t)sysconf(_SC_PAGESIZE)), false, m);
    if (st != SLASH_OK) {
        close(fd);
        m->fd = -1;
    }
    return st;
}

slash_status slash_mem_map(size_t len, bool shareable, slash_mem *m)
{
    memset(m, 0, sizeof *m);
    m->fd = -1;
    if (len == 0)
        return slash_fail(SLASH_EINVAL, "cannot map a region of 0 bytes");
    return shareable ? map_shared(len, m) : map_anon(len, m);
}

slash_status slash_mem_attach_fd(int fd, size_t len, slash_mem *m)
{
    memset(m, 0, sizeof *m);
    m->fd = -1;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return slash_fail(SLASH_ESYS, "mmap(received memfd, %zu): %s", len, strerror(errno));
    }
    m->addr = p, m->len = len, m->fd = fd, m->hugepages = false;
    return SLASH_OK;
}

void slash_mem_unmap(slash_mem *m)
{
    if (m->addr)
        munmap(m->addr, m->len);
    if (m->fd >= 0)
        close(m->fd);
    m->addr = NULL;
    m->len = 0;
    m->fd = -1;
}
