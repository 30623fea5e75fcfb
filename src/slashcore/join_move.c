/* join_move.c - moving one partition of a join store to another store with
 * the same config: the hand-over of a leadership move (exec_moves.c).
 *
 * The old store ships the partition's log in place (slash_join_partition_span,
 * cut into fragments of whole records by slash_join_span_prefix); it is a
 * region in merge_delta's format: every live chunk names its group by an
 * offset relative to itself, and everything live of a partition lies in
 * [begin, tail) of its log (a trim only passes FREED records), so the span is
 * self-contained. A chunk's group may sit in another fragment, so the new
 * store reassembles the fragments (slash_join_import_*) and merges the whole
 * span at the end.
 *
 * Invariants: the merge is a union (a CRDT merge, as for epoch deltas): the
 * import builds the partition apart, from the span and then from what the
 * partition held already (new-map deltas merged while the span travelled),
 * both judged late against the watermark the old store emitted the
 * partition to, and swaps it in only when both merged, so a failed end
 * leaves the store as it was. The imported partition keeps that watermark
 * as its own (join_part_wm): windows closed at it were emitted by the old
 * store and are never emitted here; later ones are emitted here once.
 */
#include "join_impl.h"

#include <stdlib.h>

slash_status slash_join_partition_span(const slash_join *s, uint32_t part, const void **addr,
                                       size_t *len, int64_t *emitted)
{
    *addr = NULL, *len = 0;
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "span: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "span: the join store holds a sealed delta");
    const join_part *p = &s->parts[part];
    const slash_lss *l = &p->log;
    *len = (size_t)(l->tail - l->begin);
    *addr = *len ? slash_lss_ptr(l, l->begin) : NULL;
    *emitted = join_part_wm(s, p);
    return SLASH_OK;
}

size_t slash_join_span_prefix(const void *span, size_t len, size_t max)
{
    const uint8_t *b = span;
    size_t at = 0;
    while (at < len) {
        join_rec h;
        if (len - at < sizeof h)
            break;
        memcpy(&h, b + at, sizeof h);
        if (h.size == 0 || h.size > max - at || h.size > len - at)
            break;
        at += h.size;
    }
    return at;
}

slash_status slash_join_drop_partition(slash_join *s, uint32_t part)
{
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "drop: partition %u of %u", part, s->cfg.partitions);
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "drop: the join store holds a sealed delta");
    join_part fresh;
    slash_status st = join_part_init(s, &fresh);
    if (st != SLASH_OK)
        return st;
    join_part_destroy(&s->parts[part]);
    s->parts[part] = fresh;
    return SLASH_OK;
}

/* A partition's span being reassembled. */
struct slash_join_import {
    uint32_t part;
    int64_t emitted;
    uint8_t *buf;
    size_t len, total;
};

slash_status slash_join_import_begin(slash_join *s, uint32_t part, int64_t emitted,
                                     uint64_t bytes, slash_join_import **out)
{
    *out = NULL;
    if (part >= s->cfg.partitions)
        return slash_fail(SLASH_ERANGE, "import: partition %u of %u", part, s->cfg.partitions);
    if (bytes > SIZE_MAX / 2)
        return slash_fail(SLASH_ENOMEM, "import: a %llu-byte span of partition %u",
                          (unsigned long long)bytes, part);
    slash_join_import *im = calloc(1, sizeof *im);
    if (!im || !(im->buf = malloc(bytes ? (size_t)bytes : 8))) {
        free(im);
        return slash_fail(SLASH_ENOMEM, "import: %llu bytes for partition %u",
                          (unsigned long long)bytes, part);
    }
    im->part = part, im->emitted = emitted, im->total = (size_t)bytes;
    *out = im;
    return SLASH_OK;
}

slash_status slash_join_import_add(slash_join *s, slash_join_import *im, const void *region,
                                   size_t len)
{
    (void)s;
    if (len && !region)
        return slash_fail(SLASH_EINVAL, "import: NULL region of %zu bytes", len);
    if (len > im->total - im->len)
        return slash_fail(SLASH_EPROTO, "import: fragments of partition %u exceed its %zu-byte "
                          "span", im->part, im->total);
    if (len)
        memcpy(im->buf + im->len, region, len);
    im->len += len;
    return SLASH_OK;
}

/* Every live group of a validated region has a key of partition `part`. */
static slash_status check_part(const slash_join *s, const uint8_t *b, size_t len, uint32_t part)
{
    for (size_t off = 0; off < len;) {
        join_group g;
        memcpy(&g.h, b + off, sizeof g.h);
        if (g.h.kind == JOIN_GROUP && !(g.h.flags & JOIN_FREED)) {
            memcpy(&g, b + off, sizeof g);
            if (join_part_of(s, join_key_hash(s, b + off + sizeof g, g.key_len)) != part)
                return slash_fail(SLASH_EPROTO, "import: a group at offset %zu has a key of "
                                  "another partition than %u", off, part);
        }
        off += g.h.size;
    }
    return SLASH_OK;
}

slash_status slash_join_import_end(slash_join *s, slash_join_import *im)
{
    if (s->sealed)
        return slash_fail(SLASH_ESTATE, "import: the join store holds a sealed delta");
    if (im->len != im->total)
        return slash_fail(SLASH_EPROTO, "import: partition %u got %zu of its %zu-byte span",
                          im->part, im->len, im->total);
    slash_status st = join_check_region(s, im->buf, im->len);
    if (st == SLASH_OK)
        st = check_part(s, im->buf, im->len, im->part);
    if (st != SLASH_OK)
        return st;
    join_part fresh;
    if ((st = join_part_init(s, &fresh)) != SLASH_OK)
        return st;
    fresh.own_wm = true, fresh.wm = im->emitted; /* windows closed at it were emitted elsewhere */
    join_part *dst = &s->parts[im->part];
    join_part old = *dst;
    const uint64_t late = s->late;
    *dst = fresh;
    st = join_merge_region(s, im->buf, im->len);
    if (st == SLASH_OK && old.groups) /* what was merged here meanwhile: merge it in */
        st = join_merge_region(s, slash_lss_ptr(&old.log, old.log.begin),
                               (size_t)(old.log.tail - old.log.begin));
    if (st != SLASH_OK) {
        join_part_destroy(dst);
        *dst = old;
        s->late = late;
        return st;
    }
    join_part_destroy(&old);
    free(im->buf);
    free(im);
    return SLASH_OK;
}

void slash_join_import_abort(slash_join_import *im)
{
    if (!im)
        return;
    free(im->buf);
    free(im);
}
