/* checkpoint.h - the on-disk format of a Slash checkpoint, and the image an
 * executor hands out when it took one (exec.h: slash_exec_request_checkpoint).
 *
 * A checkpoint of a group is, per executor, one META blob (the executor's
 * position: checkpoint id, push calls before the cut, watermarks, vector
 * clock, epoch counter, kept metrics) and one PARTITION blob per key
 * partition it leads (the live records of that partition of its leader
 * store). Every blob is self-contained and little-endian:
 *
 *   header (64 bytes):
 *     "SLCK" | u16 version | u16 kind (1 partition, 2 meta, 3 join partition) |
 *     u64 config fingerprint | u32 partition (meta: rank) | u32 partitions |
 *     u64 records | u64 payload bytes | i64 emitted watermark (meta: 0) |
 *     16 reserved bytes (0)
 *   payload
 *   u32 CRC32C of header + payload
 *
 * A partition payload holds each live (window, key) record as
 *   i64 window start (slice start, or session start) | [i64 session end] |
 *   key (int64: 8 bytes; byte keys: u8 length + bytes) | partials
 * (the CRDT partial of every aggregate, 8 or 16 bytes each, as crdt.h lays
 * them out: an average keeps its sum and count, so validity is preserved).
 * A join partition payload (kind 3, version 2 on) holds each live
 * (window or session, key) set of the join store as
 *   i64 window start | i64 window end | key (as above) |
 *   u64 left rows | u64 right rows | the left rows | the right rows
 * (each row the side's columns, 8 bytes each, in config order); the header's
 * record count is the number of sets. Its fingerprint
 * (slash_ckpt_join_fingerprint) hashes the window, key type, partitions and
 * both sides' column types.
 *
 * Versions: 2 added the join partition kind; the layouts of kinds 1 and 2
 * are those of version 1, so a version 1 blob is read as before. A blob of
 * a version outside [SLASH_CKPT_VERSION_MIN, SLASH_CKPT_VERSION] is refused
 * with both numbers named.
 *
 * The fingerprint hashes what decides the meaning of the records: aggregate
 * kinds, key type, window kind/size/slide, partitions. A reader checks the
 * length, magic, version, kind, fingerprint, CRC and then every record (key
 * length, slice alignment, session bounds, the key's partition) before it
 * changes the store, so a bad blob is refused whole with a detail naming
 * what is wrong (SLASH_EINVAL).
 */
#ifndef SLASH_CHECKPOINT_H
#define SLASH_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "slash/group.h"
#include "slash/join.h"
#include "slash/ssb.h"
#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_CKPT_VERSION 2     /* written */
#define SLASH_CKPT_VERSION_MIN 1 /* oldest read */
#define SLASH_CKPT_HEADER 64
#define SLASH_CKPT_KIND_PARTITION 1
#define SLASH_CKPT_KIND_META 2
#define SLASH_CKPT_KIND_JOIN_PARTITION 3

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start): the
 * SSE4.2 instruction where the CPU has it, else slash_crc32c_sw. */
uint32_t slash_crc32c(uint32_t crc, const void *p, size_t n);
/* The same by table (slicing-by-8), on any CPU. */
uint32_t slash_crc32c_sw(uint32_t crc, const void *p, size_t n);

/* Fingerprint of a store config: equal for configs whose records mean the
 * same (log_reserve is ignored). */
uint64_t slash_ckpt_fingerprint(const slash_ssb_config *cfg);

/* Serializes the live records of partition `part` of s into a new blob
 * (malloc'd, the caller frees it). Only without a sealed delta
 * (SLASH_ESTATE otherwise); SLASH_ERANGE for a bad partition. */
slash_status slash_ckpt_write_partition(const slash_ssb *s, uint32_t part, uint8_t **out,
                                        size_t *len);

/* Checks a partition blob in full against s's config and `part`, then merges
 * its records into s (which must not hold a sealed delta) and raises s's
 * emitted watermark to the blob's. SLASH_EINVAL naming what is wrong for a
 * bad blob (nothing is changed then), SLASH_ENOMEM. */
slash_status slash_ckpt_read_partition(slash_ssb *s, uint32_t part, const void *data, size_t len);

/* Fingerprint of a join store config (window, key type, partitions, both
 * sides' columns; log_reserve is ignored). */
uint64_t slash_ckpt_join_fingerprint(const slash_join_config *cfg);

/* Serializes the live sets of partition `part` of join store s into a new
 * blob (malloc'd). Only without a sealed delta (SLASH_ESTATE otherwise);
 * SLASH_ERANGE for a bad partition. */
slash_status slash_ckpt_write_join_partition(const slash_join *s, uint32_t part, uint8_t **out,
                                             size_t *len);

/* Checks a join partition blob in full against s's config and `part`
 * (window bounds, key lengths, the key's partition, row counts against the
 * payload), then appends its rows to s's sets (sets of closed windows are
 * dropped as late, as in a merge) and raises s's emitted watermark to the
 * blob's. SLASH_EINVAL naming what is wrong (nothing changed then),
 * SLASH_ESTATE with a sealed delta, SLASH_ENOMEM (a prefix may be applied). */
slash_status slash_ckpt_read_join_partition(slash_join *s, uint32_t part, const void *data,
                                            size_t len);

/* What an executor's META blob holds. */
typedef struct slash_ckpt_meta_info {
    uint64_t id;          /* checkpoint id */
    uint64_t pushes;      /* push calls completed before the cut */
    uint32_t rank, size, partitions;
    int64_t published;    /* the executor's published watermark */
    int64_t fired;        /* windows ending at or before it were fired */
    int64_t max_seen;     /* newest event time seen */
    int64_t advanced;     /* watermark promised by slash_exec_advance */
    uint64_t epoch;       /* epochs ended */
    uint64_t records_in, late_records;
    int64_t vclock[SLASH_GROUP_MAX]; /* size entries: every rank's watermark */
} slash_ckpt_meta_info;

/* Serializes m under fingerprint fp into a new blob (malloc'd). */
slash_status slash_ckpt_write_meta(const slash_ckpt_meta_info *m, uint64_t fp, uint8_t **out,
                                   size_t *len);

/* Checks a META blob (as a partition blob is checked; fp: the expected
 * fingerprint) and fills *m. SLASH_EINVAL naming what is wrong. */
slash_status slash_ckpt_read_meta(const void *data, size_t len, uint64_t fp,
                                  slash_ckpt_meta_info *m);

/* A completed checkpoint of one executor (slash_exec_take_checkpoint). */
typedef struct slash_ckpt slash_ckpt;

uint64_t slash_ckpt_id(const slash_ckpt *ck);
uint64_t slash_ckpt_pushes(const slash_ckpt *ck);
uint32_t slash_ckpt_rank(const slash_ckpt *ck);
/* The META blob, owned by ck. */
void slash_ckpt_meta(const slash_ckpt *ck, const void **ptr, size_t *len);
/* Number of partition blobs (one per partition the executor led). */
uint32_t slash_ckpt_parts(const slash_ckpt *ck);
/* Partition blob i (< slash_ckpt_parts), owned by ck. SLASH_ERANGE for a bad i. */
slash_status slash_ckpt_part(const slash_ckpt *ck, uint32_t i, uint32_t *partition,
                             const void **ptr, size_t *len);
/* Frees the image; NULL is fine. */
void slash_ckpt_free(slash_ckpt *ck);

/* Builds an image (used by the executor): takes ownership of meta; parts are
 * added with slash_ckpt_add_part, which takes ownership of data. */
slash_status slash_ckpt_new(uint64_t id, uint64_t pushes, uint32_t rank, uint8_t *meta,
                            size_t meta_len, uint32_t max_parts, slash_ckpt **out);
void slash_ckpt_add_part(slash_ckpt *ck, uint32_t partition, uint8_t *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
