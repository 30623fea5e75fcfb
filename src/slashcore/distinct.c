/* distinct.c - bounded exact distinct sets (distinct.h). Invariant: h[0..n)
 * strictly ascending, h[n..] zero; an overflowed set has n == 0. */
#include "slash/distinct.h"

#include <string.h>

#include "slash/lower_bound.h"
#include "slash/sort.h"

SLASH_DEFINE_LOWER_BOUND(first_at_least, uint64_t)

static void overflow(slash_distinct *s)
{
    memset(s, 0, sizeof *s);
    s->overflow = 1;
}

void slash_distinct_add(slash_distinct *s, uint64_t h)
{
    if (!h || s->overflow)
        return;
    const uint32_t lo = first_at_least(s->h, s->n, h);
    if (lo < s->n && s->h[lo] == h)
        return;
    if (s->n == SLASH_DISTINCT_MAX) {
        overflow(s);
        return;
    }
    memmove(&s->h[lo + 1], &s->h[lo], (s->n - lo) * sizeof s->h[0]);
    s->h[lo] = h;
    s->n++;
}

/* Merges the ascending run h[0..m) of distinct nonzero hashes into dst
 * (not overflowed): the union, or overflow past the bound. A pass of
 * compares counts the new hashes (none, once a set holds most of its
 * values: then nothing is written), then a merge from the top writes each
 * place from the first new hash's up, in place. */
static void merge_run(slash_distinct *dst, const uint64_t *h, uint32_t m)
{
    uint32_t fresh = 0, i = 0, j = 0;
    while (i < dst->n && j < m) { /* without a branch on the (random) hashes */
        const uint64_t a = dst->h[i], b = h[j];
        i += a <= b;
        j += b <= a;
        fresh += b < a;
    }
    fresh += m - j;
    if (!fresh)
        return;
    if (dst->n + fresh > SLASH_DISTINCT_MAX) {
        overflow(dst);
        return;
    }
    i = dst->n, j = m;
    uint32_t w = dst->n + fresh; /* the places above w are written */
    while (j > 0) {
        if (i > 0 && dst->h[i - 1] > h[j - 1]) {
            dst->h[--w] = dst->h[--i];
        } else {
            if (i > 0 && dst->h[i - 1] == h[j - 1])
                i--; /* held already: the one written is the same */
            dst->h[--w] = h[--j];
        }
    }
    dst->n += fresh;
}

void slash_distinct_merge(slash_distinct *dst, const slash_distinct *src)
{
    if (dst->overflow)
        return;
    if (src->overflow) {
        overflow(dst);
        return;
    }
    merge_run(dst, src->h, src->n);
}

void slash_distinct_add_many(slash_distinct *s, uint64_t *h, uint32_t m)
{
    while (m && !s->overflow) {
        const uint32_t c = m < SLASH_DISTINCT_BATCH ? m : SLASH_DISTINCT_BATCH;
        if (c < SLASH_SORTED_ADD_MIN || (uint64_t)c * 8 < s->n) { /* a few, or a few into many: a search each */
            for (uint32_t r = 0; r < c; r++)
                slash_distinct_add(s, h[r]);
        } else {
            uint64_t tmp[SLASH_DISTINCT_BATCH];
            slash_sort_u64(h, c, tmp);
            uint32_t k = 0; /* the run without zeros (nulls) and repeats */
            for (uint32_t r = 0; r < c; r++) {
                h[k] = h[r];
                k += h[r] && (k == 0 || h[k - 1] != h[r]);
            }
            merge_run(s, h, k);
        }
        h += c, m -= c;
    }
}

int64_t slash_distinct_count(const slash_distinct *s) { return s->overflow ? -1 : (int64_t)s->n; }
