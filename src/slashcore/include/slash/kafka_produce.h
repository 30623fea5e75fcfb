/* kafka_produce.h - a paced Kafka producer: records made from templates,
 * each stamped with the wall clock when it is produced, fed at a rate.
 *
 * Two layers. The stamp (slash_kprod_format, pure C, always compiled): a
 * record is a template's head, the wall clock in ms as decimal digits, then
 * its tail (head "{\"t\":" and tail "}" give {"t":1700000000123}). The
 * producer (slash_kprod_*, needs librdkafka, SLASH_HAVE_RDKAFKA; otherwise
 * every call returns SLASH_ENOTSUP) sends template k % T as record k to
 * partition k % P (round-robin, so each partition's stamps never decrease),
 * `rate` records a second in ticks of a few ms (records due but not yet
 * sent carry over: the rate holds over any span longer than a tick), at a
 * trickle rate until slash_kprod_set_full switches it to the full rate.
 * slash_kprod_run blocks its caller and takes no lock the Python
 * interpreter holds; slash_kprod_set_full and slash_kprod_set_end may be
 * called from another thread while it runs (they only store an atomic).
 */
#ifndef SLASH_KAFKA_PRODUCE_H
#define SLASH_KAFKA_PRODUCE_H

#include <stddef.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest decimal stamp: an int64 with its sign. */
#define SLASH_KPROD_STAMP_MAX 20

/* Writes head, then ms in decimal, then tail to out (room for head_len +
 * tail_len + SLASH_KPROD_STAMP_MAX bytes; no terminating NUL). Returns the
 * bytes written. */
size_t slash_kprod_format(const char *head, size_t head_len, const char *tail, size_t tail_len,
                          int64_t ms, char *out);

/* What a run produced: the counts the caller's pacing is judged by. */
typedef struct slash_kprod_counts {
    int64_t events;       /* records produced (handed to the client) */
    int64_t first_ms;     /* wall clock when the run began */
    int64_t last_ms;      /* wall clock when it stopped producing */
    int64_t full_events;  /* records produced at the full rate */
    int64_t full_from_ms; /* wall clock when the full rate began (last_ms if it never did) */
} slash_kprod_counts;

typedef struct slash_kprod slash_kprod;

/* A producer to topic over partitions 0 .. partitions-1 with the n settings
 * keys[i] = values[i] (librdkafka's names), sending the n_templates templates
 * (head i: heads[i], head_lens[i] bytes; tail i likewise; copied). Fails
 * (SLASH_EINVAL) on a setting librdkafka refuses or no template. The caller
 * owns *out (slash_kprod_free). */
slash_status slash_kprod_new(const char *topic, int32_t partitions, const char *const *keys,
                             const char *const *values, size_t n, const char *const *heads,
                             const size_t *head_lens, const char *const *tails,
                             const size_t *tail_lens, size_t n_templates, slash_kprod **out);
/* Frees p without waiting for its records (NULL: nothing). */
void slash_kprod_free(slash_kprod *p);

/* From now on the full rate (full != 0) or the trickle (any thread). */
void slash_kprod_set_full(slash_kprod *p, int full);
/* The run stops at wall clock end_ms (any thread; INT64_MAX: not known yet). */
void slash_kprod_set_end(slash_kprod *p, int64_t end_ms);

/* Produces until the end set (or limit_ms after the start): rate records a
 * second at the full rate, trickle before it, every tick_us microseconds.
 * What was due up to the stop is sent when the run sees it, however late (a
 * full client queue then leaves the rest owed); last_ms is the stop.
 * Fills *out (also on failure, with what was produced). Fails when the
 * client refuses a record for another reason than a full queue (which is
 * waited out), or a record was not delivered (the broker's error). */
slash_status slash_kprod_run(slash_kprod *p, double rate, double trickle, int64_t tick_us,
                             int64_t limit_ms, slash_kprod_counts *out);

/* Waits up to timeout_ms for every record produced to be acknowledged.
 * SLASH_ETIMEDOUT names how many were not, and the client's last error
 * (an unreachable broker says so); SLASH_EPEER a record the broker refused. */
slash_status slash_kprod_flush(slash_kprod *p, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
