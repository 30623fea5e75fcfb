/* exec_store.c - adapters from slash_ssb and slash_join to exec_store_ops
 * (their epoch life cycle, emit and partition hand-over). They only convert
 * pointer types; every check stays in the stores. */
#include "exec_store.h"

#include "slash/join.h"
#include "slash/ssb.h"

static slash_status agg_open(const slash_exec_config *cfg, void **out)
{
    return slash_ssb_open(&cfg->state, (slash_ssb **)out);
}
static void agg_close(void *s) { slash_ssb_close(s); }
static slash_status agg_update(void *s, const void *b) { return slash_ssb_update(s, b); }
static slash_status agg_begin(void *s) { return slash_ssb_begin_epoch(s); }
static slash_status agg_delta(const void *s, uint32_t p, const void **a, size_t *n)
{
    return slash_ssb_delta(s, p, a, n);
}
static slash_status agg_merge(void *s, const void *r, size_t n) { return slash_ssb_merge_delta(s, r, n); }
static slash_status agg_reset(void *s) { return slash_ssb_reset_delta(s); }
static slash_status agg_emit(void *s, int64_t up_to, const uint8_t *skip, void **out, size_t *rows)
{
    slash_ssb_result *r = NULL;
    slash_status st = slash_ssb_emit_parts(s, up_to, skip, &r);
    *out = r;
    *rows = r ? r->rows : 0;
    return st;
}
static void agg_free(void *r) { slash_ssb_result_free(r); }
static slash_status agg_span(const void *s, uint32_t p, const void **a, size_t *n, int64_t *e)
{
    return slash_ssb_partition_span(s, p, a, n, e);
}
static slash_status agg_drop(void *s, uint32_t p) { return slash_ssb_drop_partition(s, p); }
static slash_status agg_import_begin(void *s, uint32_t p, int64_t e, uint64_t bytes, void **im)
{
    return slash_ssb_import_begin(s, p, e, bytes, (slash_ssb_import **)im);
}
static slash_status agg_import_add(void *s, void *im, const void *r, size_t n)
{
    return slash_ssb_import_add(s, im, r, n);
}
static slash_status agg_import_end(void *s, void *im) { return slash_ssb_import_end(s, im); }
static void agg_import_abort(void *im) { slash_ssb_import_abort(im); }

const exec_store_ops exec_store_aggregate = {
    agg_open, agg_close, agg_update, agg_begin, agg_delta, agg_merge, agg_reset, agg_emit, agg_free,
    agg_span, slash_ssb_span_prefix, agg_drop, agg_import_begin, agg_import_add, agg_import_end,
    agg_import_abort,
};

static slash_status join_open(const slash_exec_config *cfg, void **out)
{
    return slash_join_open(&cfg->join, (slash_join **)out);
}
static void join_close(void *s) { slash_join_close(s); }
static slash_status join_update(void *s, const void *b) { return slash_join_update(s, b); }
static slash_status join_begin(void *s) { return slash_join_begin_epoch(s); }
static slash_status join_delta(const void *s, uint32_t p, const void **a, size_t *n)
{
    return slash_join_delta(s, p, a, n);
}
static slash_status join_merge(void *s, const void *r, size_t n) { return slash_join_merge_delta(s, r, n); }
static slash_status join_reset(void *s) { return slash_join_reset_delta(s); }
static slash_status join_emit(void *s, int64_t up_to, const uint8_t *skip, void **out, size_t *rows)
{
    slash_join_result *r = NULL;
    slash_status st = slash_join_emit_parts(s, up_to, skip, &r);
    *out = r;
    *rows = r ? r->rows : 0;
    return st;
}
static void join_free(void *r) { slash_join_result_free(r); }
static slash_status join_span(const void *s, uint32_t p, const void **a, size_t *n, int64_t *e)
{
    return slash_join_partition_span(s, p, a, n, e);
}
static slash_status join_drop(void *s, uint32_t p) { return slash_join_drop_partition(s, p); }
static slash_status join_import_begin(void *s, uint32_t p, int64_t e, uint64_t bytes, void **im)
{
    return slash_join_import_begin(s, p, e, bytes, (slash_join_import **)im);
}
static slash_status join_import_add(void *s, void *im, const void *r, size_t n)
{
    return slash_join_import_add(s, im, r, n);
}
static slash_status join_import_end(void *s, void *im) { return slash_join_import_end(s, im); }
static void join_import_abort(void *im) { slash_join_import_abort(im); }

const exec_store_ops exec_store_join = {
    join_open, join_close, join_update, join_begin, join_delta, join_merge, join_reset, join_emit,
    join_free, join_span, slash_join_span_prefix, join_drop, join_import_begin, join_import_add,
    join_import_end, join_import_abort,
};
