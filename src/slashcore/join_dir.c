/* join_dir.c - the window directory of a join partition: for tumbling
 * windows, the addresses of the partition's groups listed by window end, so
 * an emit visits only the groups of the windows it closes and drops their
 * lists whole (expiry by the watermark in bulk), instead of walking every
 * record of the partition's log at every emit. An interval join's state
 * holds two or three buckets of small groups and emits at nearly every
 * epoch, so that walk was most of its emit (docs/joins.md, 2026-12-07).
 *
 * Invariants: every live tumbling group of a partition has exactly one
 * entry, in the list of its window end (the group store adds it when it
 * appends the group: join.c append_group, and compaction rebuilds the
 * directory with the log); an entry may outlive its group (freed, or
 * truncated away with a shipped delta: below the log's begin), so a reader
 * takes an entry only when join_dir_group finds a live group there, whose
 * end is the list's. Log addresses only grow within one log, so a stale
 * entry never names another record, and a list's entries are in address
 * order: those below the log's begin, a prefix, are pruned whenever the
 * partition is trimmed (a store that only ships its deltas never emits). Session stores keep no directory (a
 * session's end moves as it grows); their emit walks the log.
 */
#include "join_impl.h"

#include <stdlib.h>

#include "buf.h"

#define JOIN_DIR_FIRST 16 /* entries of a new window list */

/* The list of window end `end`, created empty if there is none, in *out. */
static slash_status find_or_add(join_dir *d, int64_t end, join_dir_win **out)
{
    if (d->last < d->n && d->wins[d->last].end == end) {
        *out = &d->wins[d->last];
        return SLASH_OK;
    }
    for (uint32_t i = 0; i < d->n; i++)
        if (d->wins[i].end == end) {
            d->last = i;
            *out = &d->wins[i];
            return SLASH_OK;
        }
    slash_status st = slash_buf_grow((void **)&d->wins, &d->cap, (size_t)d->n + 1, sizeof *d->wins, 4,
                                     "join window directory");
    if (st != SLASH_OK)
        return st;
    join_dir_win *w = &d->wins[d->n];
    memset(w, 0, sizeof *w);
    w->end = end;
    d->last = d->n++;
    *out = w;
    return SLASH_OK;
}

slash_status join_dir_reserve(join_dir *d, int64_t end, join_dir_win **out)
{
    join_dir_win *w;
    slash_status st = find_or_add(d, end, &w);
    if (st == SLASH_OK)
        st = slash_buf_grow((void **)&w->addr, &w->cap, w->n + 1, sizeof *w->addr, JOIN_DIR_FIRST,
                            "join window directory's groups");
    if (st != SLASH_OK)
        return st;
    *out = w;
    return SLASH_OK;
}

void join_dir_drop_closed(join_dir *d, const slash_window *win, int64_t up_to)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < d->n; i++) {
        if (slash_window_closed(win, d->wins[i].end, up_to))
            free(d->wins[i].addr);
        else
            d->wins[k++] = d->wins[i];
    }
    d->n = k;
    d->last = 0;
}

void join_dir_prune(join_dir *d, uint64_t begin)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < d->n; i++) {
        join_dir_win *w = &d->wins[i];
        size_t lo = 0, hi = w->n; /* first entry at or above begin: entries grow */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (w->addr[mid] < begin)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == w->n) {
            free(w->addr);
            continue;
        }
        if (lo)
            memmove(w->addr, w->addr + lo, (w->n - lo) * sizeof *w->addr);
        w->n -= lo;
        d->wins[k++] = *w;
    }
    d->n = k;
    d->last = 0;
}

void join_dir_free(join_dir *d)
{
    for (uint32_t i = 0; i < d->n; i++)
        free(d->wins[i].addr);
    free(d->wins);
    memset(d, 0, sizeof *d);
}

size_t join_dir_bytes(const join_dir *d)
{
    size_t b = d->cap * sizeof *d->wins;
    for (uint32_t i = 0; i < d->n; i++)
        b += d->wins[i].cap * sizeof(uint64_t);
    return b;
}
