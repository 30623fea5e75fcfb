/* mem.h - page-aligned memory for registered regions.
 *
 * slash_mem_map() returns zeroed, page-aligned memory. It tries 2 MiB huge
 * pages first and falls back quietly to normal pages; `hugepages` says which
 * one it got. With `shareable`, the memory is backed by a memfd whose file
 * descriptor can be handed to another process (the shm transport does so).
 * Invariant: len is rounded up to the page size used, and munmap/close happen
 * exactly once in slash_mem_unmap().
 */
#ifndef SLASH_MEM_H
#define SLASH_MEM_H

#include <stdbool.h>
#include <stddef.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct slash_mem {
    void *addr;     /* start of the mapping */
    size_t len;     /* mapped length (rounded up) */
    int fd;         /* memfd when shareable, else -1 */
    bool hugepages; /* backed by huge pages */
} slash_mem;

/* Maps at least len bytes (len > 0). Fails with SLASH_EINVAL for len == 0,
 * SLASH_ENOMEM or SLASH_ESYS otherwise. On failure *m is left zeroed with
 * fd = -1. The caller owns the mapping and must call slash_mem_unmap(). */
slash_status slash_mem_map(size_t len, bool shareable, slash_mem *m);

/* Maps a memfd received from another process (len bytes, read-write, shared).
 * Takes ownership of fd. */
slash_status slash_mem_attach_fd(int fd, size_t len, slash_mem *m);

/* Unmaps and closes; safe on a zeroed or already-unmapped slash_mem. */
void slash_mem_unmap(slash_mem *m);

/* Environment override: SLASH_HUGEPAGES=0 disables the huge-page attempt. */
bool slash_mem_hugepages_enabled(void);

#ifdef __cplusplus
}
#endif
#endif
