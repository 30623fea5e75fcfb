/* exec_store.h - the one interface through which an executor drives its state
 * stores, private to the core: the aggregation store (slash_ssb) and the join
 * store (slash_join) have the same life cycle (update, seal an epoch, ship
 * per-partition deltas, merge, reset, emit, hand a partition over to a new
 * leader), so exec.c and exec_moves.c are written once against this table
 * and each store adds a thin adapter (exec_store.c).
 */
#ifndef SLASH_EXEC_STORE_H
#define SLASH_EXEC_STORE_H

#include "slash/exec.h"

typedef struct exec_store_ops {
    slash_status (*open)(const slash_exec_config *cfg, void **out);
    void (*close)(void *s);
    slash_status (*update)(void *s, const void *batch);
    slash_status (*begin_epoch)(void *s);
    slash_status (*delta)(const void *s, uint32_t part, const void **addr, size_t *len);
    slash_status (*merge_delta)(void *s, const void *region, size_t len);
    slash_status (*reset_delta)(void *s);
    /* *out is a result owned by the caller (NULL-safe free), *rows its size;
     * skip: NULL, or per partition 1 to leave it out (it keeps its own
     * emitted watermark: a partition held while its leadership moves) */
    slash_status (*emit)(void *s, int64_t up_to, const uint8_t *skip, void **out, size_t *rows);
    void (*result_free)(void *r);
    /* Hand-over of one partition (exec_moves.c; the stores' *_partition_span,
     * *_span_prefix, *_drop_partition and *_import_* say the contracts): the
     * old leader ships the span in fragments of whole records and drops the
     * partition; the new leader imports the fragments in order and, at the
     * last one (end), holds the union of the span and what it merged into
     * the partition meanwhile, with the old leader's emitted watermark. */
    slash_status (*span)(const void *s, uint32_t part, const void **addr, size_t *len,
                         int64_t *emitted);
    size_t (*span_prefix)(const void *span, size_t len, size_t max);
    slash_status (*drop)(void *s, uint32_t part);
    slash_status (*import_begin)(void *s, uint32_t part, int64_t emitted, uint64_t bytes,
                                 void **im);
    slash_status (*import_add)(void *s, void *im, const void *region, size_t len);
    slash_status (*import_end)(void *s, void *im);
    void (*import_abort)(void *im); /* NULL-safe */
} exec_store_ops;

extern const exec_store_ops exec_store_aggregate;
extern const exec_store_ops exec_store_join;

#endif
