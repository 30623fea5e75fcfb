/* kafka_fetch.h - reading Kafka records into one buffer per batch.
 *
 * Two layers. The batch layout (slash_kbatch_*, pure C, always compiled):
 * records described by slash_krec are ordered by partition (stable, so each
 * partition's records keep their offset order) and copied into caller-owned
 * memory: the values joined into ONE buffer (with a separator byte, '\n' for
 * JSON lines, or none for raw bytes), their start positions, and arrays of
 * partition, offset and timestamp; keys likewise if asked. The fetcher
 * (slash_kfetch_*, needs librdkafka, SLASH_HAVE_RDKAFKA; otherwise every
 * call returns SLASH_ENOTSUP) is a consumer assigned partitions directly
 * (no group, no commits) that polls a batch of messages, reports end-of-log
 * and error events as data, and lays the records out with the above; no
 * per-record object is made on the way.
 */
#ifndef SLASH_KAFKA_FETCH_H
#define SLASH_KAFKA_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One record as the layout sees it (value NULL: a null value; key NULL: none). */
typedef struct slash_krec {
    const void *value;
    size_t value_len;
    const void *key;
    size_t key_len;
    int64_t offset;
    int64_t timestamp;
    int32_t partition;
    uint32_t index; /* the record's place in the poll (set by slash_kbatch_order) */
} slash_krec;

/* Orders recs[0..n) by partition, stably (each record's index: its place before). */
void slash_kbatch_order(slash_krec *recs, size_t n);

/* Bytes the values (keys if keys != 0) of recs take when joined: sep != 0 puts
 * one separator byte after each value but the last. */
size_t slash_kbatch_bytes(const slash_krec *recs, size_t n, int keys, int sep);

/* The layout of recs[0..n) into caller-owned memory:
 *   values   slash_kbatch_bytes(recs, n, 0, sep) bytes: the values joined with
 *            sep (sep '\n': a '\n' or '\r' inside a value becomes ' ', so each
 *            value is one line; sep 0: the bytes as they are)
 *   starts   n + 1: value i is values[starts[i] .. starts[i+1] - (sep ? 1 : 0))
 *            (the last has no separator: starts[n] = total bytes + (sep ? 1 : 0))
 *   partition, offset, timestamp   n each
 *   nulls    n: 1 where the value is null (it takes no bytes), else 0
 *   keys, key_starts, key_nulls   as values, starts and nulls, without separator
 *            (keys NULL: not laid out)
 * Returns the count of null values. */
size_t slash_kbatch_fill(const slash_krec *recs, size_t n, int sep, char *values,
                         int64_t *starts, int32_t *partition, int64_t *offset,
                         int64_t *timestamp, uint8_t *nulls, char *keys, int64_t *key_starts,
                         uint8_t *key_nulls);

/* An event of a poll that is not a record. */
typedef enum slash_kevent_kind {
    SLASH_KEVENT_EOF = 1,   /* partition read to its end: offset is the end offset */
    SLASH_KEVENT_ERROR = 2  /* a broker or client error (fatal: the consumer is unusable) */
} slash_kevent_kind;

typedef struct slash_kevent {
    int kind;
    int32_t partition; /* -1 if the error names none */
    int64_t offset;
    int code;          /* librdkafka's error code */
    int fatal;
    char message[256];
} slash_kevent;

typedef struct slash_kfetch slash_kfetch;

/* Whether the fetcher is compiled in (librdkafka found at build time). */
int slash_kfetch_available(void);
/* librdkafka's version string ("" if not compiled in). */
const char *slash_kfetch_version(void);

/* A consumer of topic with the n settings keys[i] = values[i] (librdkafka's names). */
slash_status slash_kfetch_new(const char *topic, const char *const *keys,
                              const char *const *values, size_t n, slash_kfetch **out);
/* Closes the consumer and frees f (NULL: nothing). */
void slash_kfetch_free(slash_kfetch *f);

/* Assigns partitions[i] from offsets[i] (incremental: added to those assigned). */
slash_status slash_kfetch_assign(slash_kfetch *f, const int32_t *partitions,
                                 const int64_t *offsets, size_t n, int incremental);
slash_status slash_kfetch_unassign(slash_kfetch *f);

/* Polls up to max messages (waiting up to timeout_ms for the first): the
 * records are held (ordered by partition) until slash_kfetch_fill, the events
 * are read with slash_kfetch_event. Says how many records and the bytes their
 * values and keys take (values joined with sep; key_bytes NULL: keys are not
 * read, and not summed). */
slash_status slash_kfetch_poll(slash_kfetch *f, size_t max, int timeout_ms, int sep,
                               size_t *records, size_t *value_bytes, size_t *key_bytes);
size_t slash_kfetch_events(const slash_kfetch *f);
const slash_kevent *slash_kfetch_event(const slash_kfetch *f, size_t i);
/* slash_kbatch_fill of the records polled, then releases them; returns the null count. */
size_t slash_kfetch_fill(slash_kfetch *f, int sep, char *values, int64_t *starts,
                         int32_t *partition, int64_t *offset, int64_t *timestamp,
                         uint8_t *nulls, char *keys, int64_t *key_starts, uint8_t *key_nulls);

/* The low and high watermark offsets of a partition (asks the broker). */
slash_status slash_kfetch_watermarks(slash_kfetch *f, int32_t partition, int timeout_ms,
                                     int64_t *low, int64_t *high);
/* The consumer's next offset in a partition (-1001 if none yet). */
slash_status slash_kfetch_position(slash_kfetch *f, int32_t partition, int64_t *offset);
/* The topic's partitions now (sorted); *n is how many there are (up to cap written). */
slash_status slash_kfetch_partitions(slash_kfetch *f, int timeout_ms, int32_t *out, size_t cap,
                                     size_t *n);

#ifdef __cplusplus
}
#endif
#endif
