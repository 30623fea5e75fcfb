/* ssb.h - the Slash state backend (SSB) of one executor, after Slash §7.2.1:
 * per key partition a hash index over a log-structured store whose records
 * hold CRDT partial window states keyed by (window slice or session, key).
 *
 * Life of a store: slash_ssb_update() folds batches of columns into the
 * partials (all in C, one pass, no per-record callbacks). For the distributed
 * protocol, slash_ssb_begin_epoch() seals every partition's changed span,
 * slash_ssb_delta() hands it out as one contiguous (address, length) region,
 * slash_ssb_merge_delta() folds such a region from a peer with the same
 * config into this store, and slash_ssb_reset_delta() drops the shipped
 * records (they restart from the CRDT zero value). slash_ssb_emit() returns
 * and frees every window closed at a time (slash_window_closed). One thread at a time
 * may use a store.
 */
#ifndef SLASH_SSB_H
#define SLASH_SSB_H

#include <stddef.h>
#include <stdint.h>

#include "slash/crdt.h"
#include "slash/status.h"
#include "slash/window.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_SSB_MAX_AGGS 16
/* key partitions of one store (and of a join store, and of an executor group) */
#define SLASH_MAX_PARTITIONS 4096
#define SLASH_SSB_KEY_MAX 64 /* bytes of a byte-string key */
/* bytes of all partials of one record (a sketch's registers count) */
#define SLASH_SSB_PARTIALS_MAX (64 << 10)

typedef enum slash_key_type {
    SLASH_KEY_INT64 = 1,
    SLASH_KEY_BYTES = 2 /* 0..64 bytes, stored and compared in full */
} slash_key_type;

typedef struct slash_ssb_config {
    slash_window window; /* from slash_window_init() */
    slash_key_type key_type;
    uint32_t partitions; /* key partitions, >= 1 */
    uint32_t naggs;      /* 0..SLASH_SSB_MAX_AGGS output columns */
    slash_agg_kind aggs[SLASH_SSB_MAX_AGGS];
    size_t log_reserve;  /* virtual bytes per partition log, 0 = default */
} slash_ssb_config;

/* One batch of n records, as columns. Nothing is copied or kept. */
typedef struct slash_ssb_batch {
    size_t n;
    const int64_t *times;    /* event time, ms */
    const int64_t *keys;     /* SLASH_KEY_INT64 */
    const void *key_offsets; /* SLASH_KEY_BYTES: n + 1 offsets into key_data */
    int key_offsets_64;      /* offsets are int64 (else int32), as in Arrow */
    const uint8_t *key_data;
    const void *values[SLASH_SSB_MAX_AGGS]; /* per aggregate: int64 or double column
                                               (slash_crdt_input_is_f64), NULL for count */
    const uint8_t *skip;     /* optional selection (a filter's): rows with skip[i] != 0 are
                                not part of the batch; NULL = every row */
    uint32_t ones;           /* bit j: values[j] is 1 on every row (the validity of a column
                                without nulls in this batch); values[j] still holds the ones.
                                Only a hint to the fold, which then counts an int64 sum with a
                                count's pending delta and updates first/last by a constant; a
                                path that copies rows may drop it */
    uint32_t hash_raw;       /* bit j (a sketch's: approx_count_distinct, count_distinct):
                                values[j] holds the column's own values, none null, which the
                                fold hashes (slash_hll_hash_i64, or _f64 where raw_f64 has bit
                                j) instead of reading hashes. Every consumer of a batch honours
                                it or first lowers it (slash_ssb_batch_hash_raw) */
    uint32_t raw_f64;
} slash_ssb_batch;

/* *out = b with its hash_raw columns replaced by their hashes, in a buffer
 * returned at *hashes (free() it after the last use of out; NULL when b
 * has none). For the paths that ship or copy a batch's rows elsewhere. */
slash_status slash_ssb_batch_hash_raw(const slash_ssb_batch *b, uint32_t naggs,
                                      slash_ssb_batch *out, uint64_t **hashes);

/* Rows of an emit, as columns owned by the result (free with
 * slash_ssb_result_free). Aggregate column j holds int64 or double values as
 * slash_crdt_result_is_f64(aggs[j]) says. */
typedef struct slash_ssb_result {
    size_t rows;
    int64_t *window_start;
    int64_t *window_end;
    int64_t *keys;          /* SLASH_KEY_INT64 */
    int64_t *key_offsets;   /* SLASH_KEY_BYTES: rows + 1 offsets into key_data */
    uint8_t *key_data;
    size_t key_data_len;
    void *columns[SLASH_SSB_MAX_AGGS];
    size_t cap, key_data_cap;
    uint32_t naggs;
} slash_ssb_result;

typedef struct slash_ssb_stats {
    uint64_t records;      /* live records (window slice or session, key) */
    uint64_t late;         /* records dropped because their windows were emitted */
    uint64_t epoch;        /* number of begin_epoch calls */
    size_t memory_bytes;   /* log pages in use + index */
    size_t log_bytes;      /* bytes of records in the logs, freed ones included */
    size_t index_bytes;
    size_t record_bytes;   /* bytes of one record (byte keys: with an empty key) */
    int sealed;            /* a delta is sealed and not yet reset */
} slash_ssb_stats;

typedef struct slash_ssb slash_ssb;

/* Opens an empty store. Fails with SLASH_EINVAL naming the bad field, or
 * SLASH_ENOMEM. The caller owns it and calls slash_ssb_close(). */
slash_status slash_ssb_open(const slash_ssb_config *cfg, slash_ssb **out);

/* Frees everything; safe with NULL. */
void slash_ssb_close(slash_ssb *s);

/* Folds one batch into the partials. Records whose every window was already
 * emitted are counted as late and dropped. Fails with SLASH_EINVAL on a
 * missing column or a key longer than SLASH_SSB_KEY_MAX (nothing of the batch
 * is applied then), or SLASH_ENOMEM (a prefix of the batch is applied). */
slash_status slash_ssb_update(slash_ssb *s, const slash_ssb_batch *b);

/* Seals the changed span of every partition as the epoch's delta. Fails with
 * SLASH_ESTATE when the previous delta was not reset. */
slash_status slash_ssb_begin_epoch(slash_ssb *s);

/* Returns the sealed delta of partition `part` as one region owned by the
 * store, valid until slash_ssb_reset_delta() or close. Fails with
 * SLASH_ESTATE when no delta is sealed, SLASH_ERANGE for a bad partition. */
slash_status slash_ssb_delta(const slash_ssb *s, uint32_t part, const void **addr,
                             size_t *len);

/* Merges a region produced by slash_ssb_delta() of a store with the same
 * config. The region is validated in full first: a malformed region fails
 * with SLASH_EPROTO and changes nothing. Any alignment is accepted. */
slash_status slash_ssb_merge_delta(slash_ssb *s, const void *region, size_t len);

/* Drops the records of the sealed delta (their partials restart from zero)
 * and unseals. Fails with SLASH_ESTATE when no delta is sealed. */
slash_status slash_ssb_reset_delta(slash_ssb *s);

/* Emits every (window, key) result of windows closed at up_to (ending at or
 * before it; a session only when it ends strictly before up_to, or up_to is
 * INT64_MAX, as a record at its end would still join it: see
 * slash_window_closed) that was not emitted before, frees their state, and
 * raises the watermark to up_to. *out is a new result owned by the caller. Fails with
 * SLASH_ESTATE while a delta is sealed, SLASH_ENOMEM. */
slash_status slash_ssb_emit(slash_ssb *s, int64_t up_to, slash_ssb_result **out);

/* As slash_ssb_emit, leaving out every partition i with skip[i] != 0 (skip:
 * NULL, or one byte per partition): a left-out partition keeps its own
 * emitted watermark, so its windows are emitted by a later call. */
slash_status slash_ssb_emit_parts(slash_ssb *s, int64_t up_to, const uint8_t *skip,
                                  slash_ssb_result **out);

/* Moving a partition to another store with the same config (a leader hand-
 * over). export copies the live records of `part` into a new region (malloc'd,
 * the caller frees it; merge_delta's format) and gives the partition's
 * emitted watermark; only without a sealed delta (SLASH_ESTATE), SLASH_ERANGE
 * for a bad partition. drop empties the partition. import merges such a
 * region into `part` and sets the partition's emitted watermark to `emitted`
 * (windows closed at it were emitted by the old store; later ones were not),
 * failing as merge_delta does with nothing changed. */
slash_status slash_ssb_export_partition(const slash_ssb *s, uint32_t part, uint8_t **out,
                                        size_t *len, int64_t *emitted);
slash_status slash_ssb_drop_partition(slash_ssb *s, uint32_t part);
slash_status slash_ssb_import_partition(slash_ssb *s, uint32_t part, int64_t emitted,
                                        const void *region, size_t len);

/* Moving a partition without copying it first, fragment by fragment.
 *
 * span gives the partition's log in place: [*addr, *addr + *len) holds its
 * records (FREED ones included, which an import skips), valid until the
 * partition next changes (an update, merge, emit or drop of it); *emitted as
 * export. SLASH_ERANGE, SLASH_ESTATE as export. span_prefix is the length of
 * the longest prefix of a span (or of a suffix of one starting at a record)
 * made of whole records and at most `max` bytes long: a fragment boundary.
 *
 * An import builds the partition apart from the store: begin (its index
 * sized for a span of about `bytes` bytes; SLASH_ERANGE, SLASH_ENOMEM), then add for each
 * fragment of whole records in order (checked as merge_delta checks a
 * region, SLASH_EPROTO, and each record must belong to `part`; records of
 * windows closed at `emitted` are dropped as late), then end, which puts it
 * in place of `part` (with emitted watermark `emitted`) and merges into it
 * what `part` held (records merged there meanwhile, e.g. new-map deltas);
 * end frees the import. After a failed add or end the store is unchanged
 * and the import only good for abort, which frees it (NULL-safe). The store
 * may be updated, merged into and emitted from between the calls. */
typedef struct slash_ssb_import slash_ssb_import;
slash_status slash_ssb_partition_span(const slash_ssb *s, uint32_t part, const void **addr,
                                      size_t *len, int64_t *emitted);
size_t slash_ssb_span_prefix(const void *span, size_t len, size_t max);
slash_status slash_ssb_import_begin(slash_ssb *s, uint32_t part, int64_t emitted,
                                    uint64_t bytes, slash_ssb_import **out);
slash_status slash_ssb_import_add(slash_ssb *s, slash_ssb_import *im, const void *region,
                                  size_t len);
slash_status slash_ssb_import_end(slash_ssb *s, slash_ssb_import *im);
void slash_ssb_import_abort(slash_ssb_import *im);

/* Frees a result; safe with NULL. */
void slash_ssb_result_free(slash_ssb_result *r);

/* Fills *out with counters and memory use. */
void slash_ssb_get_stats(const slash_ssb *s, slash_ssb_stats *out);

/* Emitted watermark: every window closed at it was emitted (INT64_MIN
 * before the first emit). */
int64_t slash_ssb_watermark(const slash_ssb *s);

#ifdef __cplusplus
}
#endif
#endif
