/* distinct.c - bounded exact distinct sets (distinct.h). Invariant: h[0..n)
 * strictly ascending, h[n..] zero; an overflowed set has n == 0. */
#include "slash/distinct.h"

#include <string.h>

#include "slash/lower_bound.h"

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

void slash_distinct_merge(slash_distinct *dst, const slash_distinct *src)
{
    if (dst->overflow)
        return;
    if (src->overflow) {
        overflow(dst);
        return;
    }
    uint64_t out[2 * SLASH_DISTINCT_MAX];
    uint32_t n = 0, i = 0, j = 0;
    while (i < dst->n || j < src->n) {
        uint64_t v;
        if (j >= src->n || (i < dst->n && dst->h[i] < src->h[j]))
            v = dst->h[i++];
        else if (i >= dst->n || src->h[j] < dst->h[i])
            v = src->h[j++];
        else
            v = dst->h[i++], j++;
        out[n++] = v;
    }
    if (n > SLASH_DISTINCT_MAX) {
        overflow(dst);
        return;
    }
    memcpy(dst->h, out, n * sizeof out[0]);
    dst->n = n;
}

int64_t slash_distinct_count(const slash_distinct *s) { return s->overflow ? -1 : (int64_t)s->n; }
