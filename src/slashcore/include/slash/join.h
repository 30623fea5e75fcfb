/* join.h - the windowed join state of one executor: per key partition a hash
 * index over a log-structured store whose records hold, per (window or
 * session, key), an append-set CRDT of each side's records (Slash §5.3,
 * §7.2.1). The API has the shape of the state backend's (slash_ssb) so an
 * executor can drive either store through one interface.
 *
 * The partial state of a (window, key) is a pair of multisets of rows, one
 * per side (LEFT, RIGHT). Update appends a row to its side; merge is multiset
 * union (append), so it is commutative and associative as a multiset and the
 * empty set is its zero: a shipped partial restarts empty. Results are a
 * multiset too: emit returns every left x right pair of a finished
 * (window, key) in no particular order (compare sorted).
 *
 * Windows: tumbling, where a row at t belongs to
 * [floor(t/size)*size, +size); and session with gap g, where per key a row at
 * t covers [t, t+g) over the union of BOTH sides' rows, covers that overlap
 * or touch fuse into one session [first row, last row + g) (rows exactly g
 * apart share a session, as in Spark and Flink), and a row that bridges two
 * sessions fuses them with all their rows. Sliding windows are
 * refused (a row would belong to several windows' sets).
 *
 * A row is the side's fixed set of 8-byte columns (int64 or float64), copied
 * from the batch's columns in C. A string or binary payload value travels as
 * several int64 columns holding its length and bytes packed to a declared
 * width (slash.query.JoinQuery, string_bytes), so deltas, checkpoints,
 * hand-overs and repartitioned rows carry it as any other column and the
 * store's memory counts its bytes. One thread at a time may use a store.
 */
#ifndef SLASH_JOIN_H
#define SLASH_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "slash/ssb.h"
#include "slash/status.h"
#include "slash/window.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_JOIN_MAX_COLS 64 /* columns per side */
/* Bytes of a byte-string join key: a group record keeps its key's length, and
 * the repartitioned-row and checkpoint formats one byte of it, so join keys
 * may be longer than the state backend's SLASH_SSB_KEY_MAX. */
#define SLASH_JOIN_KEY_MAX 255

typedef enum slash_join_side {
    SLASH_JOIN_LEFT = 0,
    SLASH_JOIN_RIGHT = 1
} slash_join_side;

typedef enum slash_join_col_type {
    SLASH_JOIN_I64 = 1,
    SLASH_JOIN_F64 = 2
} slash_join_col_type;

typedef struct slash_join_config {
    slash_window window;     /* tumbling or session, from slash_window_init() */
    slash_key_type key_type; /* int64, or bytes of at most SLASH_JOIN_KEY_MAX */
    uint32_t partitions;     /* key partitions, 1..SLASH_MAX_PARTITIONS */
    uint32_t ncols[2];       /* columns per side, 0..SLASH_JOIN_MAX_COLS */
    slash_join_col_type cols[2][SLASH_JOIN_MAX_COLS];
    size_t log_reserve;      /* virtual bytes per partition log, 0 = default */
    /* With band set, an emit gives only the pairs whose int64 columns
     * band_col[LEFT] of the left row and band_col[RIGHT] of the right row
     * differ by band_lo..band_hi (inclusive): an interval join's event times
     * (join_band.c). It changes nothing but an emit's output; peers may
     * differ in it. */
    int band;
    uint32_t band_col[2];
    int64_t band_lo, band_hi;
} slash_join_config;

/* One batch of n rows of one side, as columns. Nothing is copied or kept
 * beyond the call. Keys as in slash_ssb_batch. */
typedef struct slash_join_batch {
    slash_join_side side;
    size_t n;
    const int64_t *times;    /* event time, ms */
    const int64_t *keys;     /* SLASH_KEY_INT64 */
    const void *key_offsets; /* SLASH_KEY_BYTES: n + 1 offsets into key_data */
    int key_offsets_64;      /* offsets are int64 (else int32), as in Arrow */
    const uint8_t *key_data;
    const void *columns[SLASH_JOIN_MAX_COLS]; /* ncols[side] columns of n 8-byte values */
} slash_join_batch;

/* Joined rows of an emit, as columns owned by the result (free with
 * slash_join_result_free): window, key, then ncols[LEFT] left and
 * ncols[RIGHT] right columns of 8-byte values typed as the config says. */
typedef struct slash_join_result {
    size_t rows;
    int64_t *window_start;
    int64_t *window_end;
    int64_t *keys;        /* SLASH_KEY_INT64 */
    int64_t *key_offsets; /* SLASH_KEY_BYTES: rows + 1 offsets into key_data */
    uint8_t *key_data;
    size_t key_data_len;
    void *columns[2][SLASH_JOIN_MAX_COLS];
    uint32_t ncols[2];
} slash_join_result;

typedef struct slash_join_stats {
    uint64_t groups;      /* live (window or session, key) sets */
    uint64_t rows[2];     /* live rows per side */
    uint64_t chunks;      /* live row chunks */
    uint64_t late;        /* rows dropped because their windows were emitted */
    uint64_t epoch;       /* number of begin_epoch calls */
    size_t memory_bytes;  /* log pages in use + index */
    size_t log_bytes;     /* bytes of records in the logs, freed ones included */
    size_t index_bytes;
    int sealed;           /* a delta is sealed and not yet reset */
} slash_join_stats;

typedef struct slash_join slash_join;

/* Opens an empty store. Fails with SLASH_EINVAL naming the bad field (a
 * sliding window, a bad column type or count), or SLASH_ENOMEM. The caller
 * owns it and calls slash_join_close(). */
slash_status slash_join_open(const slash_join_config *cfg, slash_join **out);

/* Frees everything; safe with NULL. */
void slash_join_close(slash_join *s);

/* Appends one side's batch to the sets. Rows whose window was already
 * emitted are counted as late and dropped. Fails with SLASH_EINVAL on a bad
 * side, a missing column or a key longer than SLASH_JOIN_KEY_MAX (nothing of
 * the batch is applied then), or SLASH_ENOMEM (a prefix is applied). */
slash_status slash_join_update(slash_join *s, const slash_join_batch *b);

/* Seals the changed span of every partition as the epoch's delta. Fails with
 * SLASH_ESTATE when the previous delta was not reset. */
slash_status slash_join_begin_epoch(slash_join *s);

/* Returns the sealed delta of partition `part` as one region owned by the
 * store, valid until slash_join_reset_delta() or close. Fails with
 * SLASH_ESTATE when no delta is sealed, SLASH_ERANGE for a bad partition. */
slash_status slash_join_delta(const slash_join *s, uint32_t part, const void **addr,
                              size_t *len);

/* Merges (appends) a region produced by slash_join_delta() of a store with
 * the same config. The region is validated in full first: a malformed one
 * fails with SLASH_EPROTO and changes nothing. Any alignment is accepted.
 * SLASH_ENOMEM may leave a prefix merged. */
slash_status slash_join_merge_delta(slash_join *s, const void *region, size_t len);

/* Drops the records of the sealed delta (their sets restart empty) and
 * unseals. Fails with SLASH_ESTATE when no delta is sealed. */
slash_status slash_join_reset_delta(slash_join *s);

/* Emits every left x right pair of each (window, key) whose window is
 * closed at up_to (ends at or before it; a session only when it ends strictly
 * before up_to or up_to is INT64_MAX: slash_window_closed) and was not
 * emitted before, frees those sets, and raises
 * the watermark to up_to. *out is a new result owned by the caller. Fails
 * with SLASH_ESTATE while a delta is sealed, SLASH_ETOOBIG when the pairs
 * would not fit in memory, SLASH_ENOMEM; on failure nothing is freed. */
slash_status slash_join_emit(slash_join *s, int64_t up_to, slash_join_result **out);

/* As slash_join_emit, leaving out every partition i with skip[i] != 0 (skip:
 * NULL, or one byte per partition): a left-out partition keeps its own
 * emitted watermark (rows of windows closed at it are late, later ones are
 * kept), so its windows are emitted by a later call. */
slash_status slash_join_emit_parts(slash_join *s, int64_t up_to, const uint8_t *skip,
                                   slash_join_result **out);

/* Moving a partition to another store with the same config (a leader hand-
 * over, exec_moves.c).
 *
 * span gives the partition's log in place: [*addr, *addr + *len) holds its
 * records (FREED ones included, which an import skips), a region in
 * merge_delta's format, valid until the partition next changes (an update,
 * merge, emit or drop of it); *emitted is the partition's emitted watermark.
 * SLASH_ERANGE for a bad partition, SLASH_ESTATE with a sealed delta.
 * span_prefix is the length of the longest prefix of a span (or of a suffix
 * of one starting at a record) made of whole records and at most `max` bytes
 * long: a fragment boundary. drop empties the partition.
 *
 * An import reassembles the span from its fragments, in order: begin
 * (`bytes`: the whole span's length; SLASH_ERANGE, SLASH_ENOMEM), add for
 * each fragment (SLASH_EPROTO when they overflow `bytes`), then end, which
 * validates the whole span as merge_delta does and that every live group's
 * key belongs to `part` (SLASH_EPROTO, the store unchanged), sets the
 * partition's emitted watermark to `emitted` (windows closed at it were
 * emitted by the old store) and MERGES the span's rows into `part`: rows the
 * partition already holds (e.g. new-map deltas merged meanwhile) stay, each
 * (window or session, key) set becomes the union, overlapping sessions fuse;
 * rows of windows closed at `emitted` are dropped as late. end frees the
 * import; after a failed add or end it is only good for abort, which frees
 * it (NULL-safe). The store may be updated, merged into and emitted from
 * between the calls. */
typedef struct slash_join_import slash_join_import;
slash_status slash_join_partition_span(const slash_join *s, uint32_t part, const void **addr,
                                       size_t *len, int64_t *emitted);
size_t slash_join_span_prefix(const void *span, size_t len, size_t max);
slash_status slash_join_drop_partition(slash_join *s, uint32_t part);
slash_status slash_join_import_begin(slash_join *s, uint32_t part, int64_t emitted,
                                     uint64_t bytes, slash_join_import **out);
slash_status slash_join_import_add(slash_join *s, slash_join_import *im, const void *region,
                                   size_t len);
slash_status slash_join_import_end(slash_join *s, slash_join_import *im);
void slash_join_import_abort(slash_join_import *im);

/* Frees a result; safe with NULL. */
void slash_join_result_free(slash_join_result *r);

/* Fills *out with counters and memory use. */
void slash_join_get_stats(const slash_join *s, slash_join_stats *out);

/* Emitted watermark (INT64_MIN before the first emit). */
int64_t slash_join_watermark(const slash_join *s);

#ifdef __cplusplus
}
#endif
#endif
