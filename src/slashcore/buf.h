/* buf.h - the core's one way of growing a heap array (private to the core).
 *
 * An array is a pointer and a capacity counted in elements of a fixed size.
 * slash_buf_grow() makes room for at least `need` elements; the contents up
 * to the old capacity are kept (realloc), the rest is uninitialised.
 * Invariants:
 * - size arithmetic is checked: a capacity whose bytes (elements x element
 *   size) do not fit in a ptrdiff_t is refused with SLASH_ETOOBIG before
 *   any allocation, never wrapped into a small block;
 * - growth is geometric: from `first` elements (an empty array) the
 *   capacity doubles until it holds `need`, so n appends of one element
 *   cost O(n) copies; where doubling would pass the byte limit the
 *   capacity is exactly `need`;
 * - on any failure (SLASH_ETOOBIG, or SLASH_ENOMEM when realloc fails)
 *   the array and its capacity are left as they were: the old block stays
 *   valid and owned by the caller, who frees it as usual.
 * Arrays that share one capacity (the columns of a result) take it from
 * slash_buf_next_cap() once and are each resized with slash_buf_resize().
 */
#ifndef SLASH_BUF_H
#define SLASH_BUF_H

#include <stddef.h>

#include "slash/status.h"

/* The capacity (elements) an array of *cap elements of elem bytes grows to
 * so it holds need: *cap if it does already, else the doubling of *cap
 * (of first, at least 1, when *cap is 0) that reaches need, or need itself
 * where doubling would pass the byte limit. Writes it to *out; fails with
 * SLASH_ETOOBIG (detail naming what) when need elements exceed the limit. */
slash_status slash_buf_next_cap(size_t cap, size_t need, size_t first, size_t elem,
                                const char *what, size_t *out);

/* Resizes the array *p to exactly n elements of elem bytes (n > 0). Fails
 * with SLASH_ETOOBIG when the bytes overflow, SLASH_ENOMEM when realloc
 * does; *p is unchanged then. The caller owns *p (free()). */
slash_status slash_buf_resize(void **p, size_t n, size_t elem, const char *what);

/* Grows the array *p of capacity *cap (elements of elem bytes) to hold at
 * least need elements, by the policy of slash_buf_next_cap (from first).
 * SLASH_OK without a call to realloc when it does already; on failure
 * (SLASH_ETOOBIG, SLASH_ENOMEM, detail naming what) *p and *cap are
 * unchanged. The caller owns *p (free()). */
slash_status slash_buf_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first,
                            const char *what);

#endif
