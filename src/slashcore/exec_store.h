/* exec_store.h - the one interface through which an executor drives its state
 * stores, private to the core: the aggregation store (slash_ssb) and the join
 * store (slash_join) have the same life cycle (update, seal an epoch, ship
 * per-partition deltas, merge, reset, emit), so exec.c is written once
 * against this table and each store adds a thin adapter (exec_store.c).
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
    /* *out is a result owned by the caller (NULL-safe free), *rows its size */
    slash_status (*emit)(void *s, int64_t up_to, void **out, size_t *rows);
    void (*result_free)(void *r);
} exec_store_ops;

extern const exec_store_ops exec_store_aggregate;
extern const exec_store_ops exec_store_join;

#endif
