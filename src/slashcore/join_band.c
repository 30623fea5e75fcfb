/* join_band.c - an emit's pairs under a band: an interval join's (slash.interval)
 * rows sit in (bucket, key) groups whose left x right candidates are about
 * twice its pairs, and a hot key's group holds thousands of rows a side. With
 * the config's band set, a finished group gives only the pairs with
 * band_lo <= l[band_col[LEFT]] - r[band_col[RIGHT]] <= band_hi: its right rows
 * sorted by band time once, then per left row the matching run found by two
 * binary searches, so a group costs O((L + R) log R + its pairs), not L x R.
 *
 * Invariants: the pairs given are exactly the L x R pairs inside the band, each
 * once; nothing here allocates (the caller gives room for the right rows, so
 * a fill cannot fail after the count); the store is not changed.
 */
#include "join_impl.h"

#include <stdlib.h>

static int cmp_band(const void *a, const void *b)
{
    int64_t x = ((const join_band_row *)a)->t, y = ((const join_band_row *)b)->t;
    return (x > y) - (x < y);
}

#define BAND_INSERTION_MAX 16 /* right rows a group sorts by insertion, not qsort */

/* Sorts a group's right rows by band time. Rows mostly arrive in time order
 * and most groups of an interval join hold one or two of them, so a run
 * already in order costs one pass and a small group an insertion sort: the
 * library's qsort (a merge sort with an indirect compare) was a tenth of an
 * emit's instructions for groups of one or two rows (callgrind, 2026-12-07). */
static void sort_band(join_band_row *right, size_t n)
{
    size_t i = 1;
    while (i < n && right[i - 1].t <= right[i].t)
        i++;
    if (i >= n)
        return;
    if (n > BAND_INSERTION_MAX) {
        qsort(right, n, sizeof *right, cmp_band);
        return;
    }
    for (; i < n; i++) {
        join_band_row x = right[i];
        size_t j = i;
        while (j > 0 && right[j - 1].t > x.t) {
            right[j] = right[j - 1];
            j--;
        }
        right[j] = x;
    }
}

static inline int64_t band_time(const uint8_t *row, uint32_t col)
{
    int64_t t;
    memcpy(&t, row + (size_t)col * 8, 8);
    return t;
}

/* First index in right[0..n) whose time is >= t. */
static size_t lower(const join_band_row *right, size_t n, int64_t t)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (right[mid].t < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Saturating a - b. */
static inline int64_t sat_sub(int64_t a, int64_t b)
{
    int64_t d;
    if (!__builtin_sub_overflow(a, b, &d))
        return d;
    return b > 0 ? INT64_MIN : INT64_MAX;
}

/* The run [*from, *to) of sorted right rows a left row at band time t meets:
 * r.t in [t - hi, t - lo]. */
static inline void run_of(const slash_join *s, const join_band_row *right, size_t n, int64_t t,
                          size_t *from, size_t *to)
{
    int64_t lo_t = sat_sub(t, s->cfg.band_hi), hi_t = sat_sub(t, s->cfg.band_lo);
    *from = lower(right, n, lo_t);
    *to = hi_t == INT64_MAX ? n : lower(right, n, hi_t + 1);
    if (*to < *from)
        *to = *from;
}

size_t join_band_pairs(const slash_join *s, const join_part *p, const join_group *g,
                       join_band_row *right)
{
    const size_t R = g->rows[1];
    if (!R || !g->rows[0])
        return 0;
    size_t j = 0;
    for (uint64_t a = g->head[1]; a;) {
        const join_chunk *c = join_ptr(p, a);
        const uint8_t *row = join_chunk_rows((join_chunk *)c);
        for (uint32_t k = 0; k < c->rows; k++, j++, row += s->row_bytes[1]) {
            right[j].t = band_time(row, s->cfg.band_col[1]);
            right[j].row = row;
        }
        a = c->h.link;
    }
    sort_band(right, R);
    size_t n = 0;
    for (uint64_t a = g->head[0]; a;) {
        const join_chunk *c = join_ptr(p, a);
        const uint8_t *row = join_chunk_rows((join_chunk *)c);
        for (uint32_t k = 0; k < c->rows; k++, row += s->row_bytes[0]) {
            size_t from, to;
            run_of(s, right, R, band_time(row, s->cfg.band_col[0]), &from, &to);
            n += to - from;
        }
        a = c->h.link;
    }
    return n;
}

void join_band_fill(const slash_join *s, const join_part *p, join_group *g,
                    const join_band_row *right, slash_join_result *r)
{
    const size_t R = g->rows[1];
    if (!R || !g->rows[0])
        return;
    const uint32_t lc = s->cfg.ncols[0], rc = s->cfg.ncols[1];
    const uint8_t *key = join_group_key(g);
    int64_t k64 = 0;
    if (r->keys)
        memcpy(&k64, key, 8);
    size_t o = r->rows;
    for (uint64_t a = g->head[0]; a;) {
        join_chunk *c = join_ptr(p, a);
        const uint8_t *lrow = join_chunk_rows(c);
        for (uint32_t k = 0; k < c->rows; k++, lrow += s->row_bytes[0]) {
            size_t from, to;
            run_of(s, right, R, band_time(lrow, s->cfg.band_col[0]), &from, &to);
            for (size_t q = from; q < to; q++, o++) {
                r->window_start[o] = g->win;
                r->window_end[o] = g->end;
                if (r->keys) {
                    r->keys[o] = k64;
                } else {
                    if (g->key_len)
                        memcpy(r->key_data + r->key_data_len, key, g->key_len);
                    r->key_data_len += g->key_len;
                    r->key_offsets[o + 1] = (int64_t)r->key_data_len;
                }
                for (uint32_t col = 0; col < lc; col++)
                    memcpy((uint8_t *)r->columns[0][col] + o * 8, lrow + col * 8, 8);
                for (uint32_t col = 0; col < rc; col++)
                    memcpy((uint8_t *)r->columns[1][col] + o * 8, right[q].row + col * 8, 8);
            }
        }
        a = c->h.link;
    }
    r->rows = o;
}
