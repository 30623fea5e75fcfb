/* fuzz_common.h - the store and executor configs the fuzz targets derive from
 * an input's first byte, shared with make_seeds.c so seeds and targets agree.
 *
 * Config byte c: bit 0 join (else aggregate), bit 1 byte-string keys (else
 * int64), bits 2-3 window (0, 3 tumbling 100; 1 sliding 100/25, a join:
 * tumbling; 2 session gap 50), bits 4-5 partitions - 1 (1..4), bits 6-7 the
 * aggregate set (see fuzz_config) or, for a join, the right side's column
 * count (1..4 left: 2 columns).
 *
 * fuzz_filled_ssb / fuzz_filled_join open a store of a config and fill it
 * with a few fixed rows (fuzz_rows), the starting state both the targets and
 * the seeds build on; they abort on any error (the derived configs are valid).
 */
#ifndef SLASH_FUZZ_COMMON_H
#define SLASH_FUZZ_COMMON_H

#include <stdlib.h>
#include <string.h>

#include "slash/exec.h"

static inline slash_exec_config fuzz_config(uint8_t c)
{
    slash_exec_config x;
    memset(&x, 0, sizeof x);
    x.kind = (c & 1) ? SLASH_EXEC_JOIN : SLASH_EXEC_AGGREGATE;
    slash_key_type kt = (c & 2) ? SLASH_KEY_BYTES : SLASH_KEY_INT64;
    uint32_t parts = 1 + ((c >> 4) & 3);
    slash_window w;
    switch ((c >> 2) & 3) {
    case 1:
        if (x.kind == SLASH_EXEC_JOIN)
            slash_window_init(&w, SLASH_WINDOW_TUMBLING, 100, 0);
        else
            slash_window_init(&w, SLASH_WINDOW_SLIDING, 100, 25);
        break;
    case 2:
        slash_window_init(&w, SLASH_WINDOW_SESSION, 50, 0);
        break;
    default:
        slash_window_init(&w, SLASH_WINDOW_TUMBLING, 100, 0);
    }
    uint32_t sel = (c >> 6) & 3;
    if (x.kind == SLASH_EXEC_JOIN) {
        x.join.window = w;
        x.join.key_type = kt;
        x.join.partitions = parts;
        x.join.ncols[0] = 2;
        x.join.cols[0][0] = SLASH_JOIN_I64;
        x.join.cols[0][1] = SLASH_JOIN_F64;
        x.join.ncols[1] = 1 + sel;
        for (uint32_t j = 0; j < x.join.ncols[1]; j++)
            x.join.cols[1][j] = j % 2 ? SLASH_JOIN_F64 : SLASH_JOIN_I64;
        x.join.log_reserve = (size_t)1 << 24;
    } else {
        x.state.window = w;
        x.state.key_type = kt;
        x.state.partitions = parts;
        static const slash_agg_kind sets[4][4] = {
            {SLASH_AGG_COUNT, SLASH_AGG_SUM_I64, SLASH_AGG_MIN_I64, SLASH_AGG_MAX_I64},
            {SLASH_AGG_SUM_F64, SLASH_AGG_AVG_F64, SLASH_AGG_COUNT, SLASH_AGG_MAX_F64},
            {SLASH_AGG_COUNT, 0, 0, 0},
            {SLASH_AGG_MIN_F64, SLASH_AGG_SUM_I64, SLASH_AGG_AVG_I64, SLASH_AGG_COUNT},
        };
        x.state.naggs = sel == 2 ? 1 : 4;
        for (uint32_t j = 0; j < x.state.naggs; j++)
            x.state.aggs[j] = sets[sel][j];
        x.state.log_reserve = (size_t)1 << 24;
    }
    x.mode = SLASH_EXEC_SLASH;
    x.lateness_ms = 10;
    x.timeout_ms = 1000;
    x.own_rows = SLASH_OWN_LOCAL;
    return x;
}

/* n rows: times t, int64 keys k or byte-string keys (n + 1 int32 offsets
 * off into kd), and v as every value column (read as int64 or double bits;
 * any bits will do). */
typedef struct fuzz_rows {
    size_t n;
    const int64_t *t, *k, *v;
    const int32_t *off;
    const uint8_t *kd;
} fuzz_rows;

/* An aggregate store of config c holding rows r. The caller closes it. */
static inline slash_ssb *fuzz_filled_ssb(const slash_ssb_config *c, const fuzz_rows *r)
{
    slash_ssb *s;
    if (slash_ssb_open(c, &s) != SLASH_OK)
        abort();
    slash_ssb_batch b = {.n = r->n, .times = r->t};
    if (c->key_type == SLASH_KEY_INT64)
        b.keys = r->k;
    else
        b.key_offsets = r->off, b.key_data = r->kd;
    for (uint32_t j = 0; j < c->naggs; j++)
        b.values[j] = r->v;
    if (slash_ssb_update(s, &b) != SLASH_OK)
        abort();
    return s;
}

/* A join store of config c holding rows r on each side. The caller closes it. */
static inline slash_join *fuzz_filled_join(const slash_join_config *c, const fuzz_rows *r)
{
    slash_join *s;
    if (slash_join_open(c, &s) != SLASH_OK)
        abort();
    for (int side = 0; side < 2; side++) {
        slash_join_batch b = {.side = side ? SLASH_JOIN_RIGHT : SLASH_JOIN_LEFT, .n = r->n,
                              .times = r->t};
        if (c->key_type == SLASH_KEY_INT64)
            b.keys = r->k;
        else
            b.key_offsets = r->off, b.key_data = r->kd;
        for (uint32_t j = 0; j < c->ncols[side]; j++)
            b.columns[j] = r->v;
        if (slash_join_update(s, &b) != SLASH_OK)
            abort();
    }
    return s;
}

#endif
