/* buf.c - checked, geometric growth of heap arrays (buf.h). */
#include "buf.h"

#include <stdint.h>
#include <stdlib.h>

/* The largest byte count an array may have: object sizes and pointer
 * differences must fit in a ptrdiff_t. */
#define BUF_MAX_BYTES ((size_t)PTRDIFF_MAX)

slash_status slash_buf_next_cap(size_t cap, size_t need, size_t first, size_t elem,
                                const char *what, size_t *out)
{
    if (need <= cap) {
        *out = cap;
        return SLASH_OK;
    }
    const size_t max = elem ? BUF_MAX_BYTES / elem : BUF_MAX_BYTES;
    if (need > max)
        return slash_fail(SLASH_ETOOBIG, "%s: %zu elements of %zu bytes exceed the largest array",
                          what, need, elem);
    size_t n = cap ? cap : (first ? first : 1);
    while (n < need)
        n = n > max / 2 ? need : n * 2;
    *out = n > max ? need : n; /* a first beyond the limit */
    return SLASH_OK;
}

slash_status slash_buf_resize(void **p, size_t n, size_t elem, const char *what)
{
    if (elem && n > BUF_MAX_BYTES / elem)
        return slash_fail(SLASH_ETOOBIG, "%s: %zu elements of %zu bytes exceed the largest array",
                          what, n, elem);
    size_t bytes = n * elem;
    void *q = realloc(*p, bytes ? bytes : 1);
    if (!q)
        return slash_fail(SLASH_ENOMEM, "%s: out of memory for %zu bytes", what, bytes);
    *p = q;
    return SLASH_OK;
}

slash_status slash_buf_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first,
                            const char *what)
{
    if (need <= *cap)
        return SLASH_OK;
    size_t n;
    slash_status st = slash_buf_next_cap(*cap, need, first, elem, what, &n);
    if (st == SLASH_OK && (st = slash_buf_resize(p, n, elem, what)) == SLASH_OK)
        *cap = n;
    return st;
}
