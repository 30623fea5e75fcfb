/* channel.h - the credit-flow-controlled ring channel of Slash (paper §6).
 *
 * One producer, one consumer. The consumer owns a flat registered ring of
 * `credits` slots of `buffer_size` bytes; each slot ends in a 16-byte footer
 * (sequence number, payload length, flags, and a flag byte that is the last
 * byte of the slot and is written last). The producer starts with `credits`
 * credits, spends one per buffer, and writes payload then footer into the
 * consumer's slot with one-sided writes. The consumer polls the flag byte of
 * the next slot, hands the payload out in place, and on release returns the
 * credit by a one-sided write of its cumulative release count into the
 * producer's credit word.
 *
 * Invariants: FIFO; every buffer delivered exactly once (sequence numbers are
 * checked, a gap is SLASH_EPROTO); the producer never writes a slot whose
 * previous buffer is unreleased; memory is fixed at connect time (credits x
 * buffer_size per side); a full ring blocks the producer (back-pressure),
 * never drops. A dead peer turns any wait into SLASH_EPEER.
 *
 * Threading: each end is used by one thread at a time.
 */
#ifndef SLASH_CHANNEL_H
#define SLASH_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slash/status.h"
#include "slash/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_CHANNEL_FOOTER 16u
#define SLASH_CHANNEL_MIN_BUFFER 64u
#define SLASH_CHANNEL_MAX_BUFFER (64u * 1024 * 1024)
#define SLASH_CHANNEL_MAX_CREDITS 65536u

typedef struct slash_channel slash_channel;

typedef struct slash_channel_config {
    size_t buffer_size; /* bytes per slot, footer included; multiple of 64 */
    uint32_t credits;   /* slots in the ring = initial credits */
} slash_channel_config;

typedef struct slash_channel_stats {
    uint64_t buffers;       /* buffers sent (producer) or received (consumer) */
    uint64_t bytes;         /* payload bytes */
    uint64_t credit_stalls; /* producer: times it had to wait for a credit */
    uint64_t polls;         /* consumer: footer polls */
    uint64_t empty_polls;   /* consumer: polls that found nothing */
    size_t buffer_size;
    uint32_t credits;
    bool hugepages; /* the local ring / staging memory is on huge pages */
} slash_channel_stats;

/* Largest payload a slot of cfg holds. */
static inline size_t slash_channel_payload_max(size_t buffer_size)
{
    return buffer_size - SLASH_CHANNEL_FOOTER;
}

/* Checks a config: buffer_size in [64, 64 MiB] and a multiple of 64, credits
 * in [1, 65536]. SLASH_EINVAL with a detail naming the field. */
slash_status slash_channel_config_check(const slash_channel_config *cfg);

/* Consumer end: accepts one producer on l, sets up a ring after cfg, and
 * tells the producer the geometry. The caller owns the channel. */
slash_status slash_channel_accept(slash_listener *l, const slash_channel_config *cfg,
                                  int timeout_ms, slash_channel **out);

/* Producer end: connects to addr with token and learns the geometry. */
slash_status slash_channel_connect(slash_transport *tp, const char *addr, const char *token,
                                   int timeout_ms, slash_channel **out);

/* Closes either end; the producer end first sends end-of-stream if it has
 * not yet, so the consumer sees SLASH_EOF after the last buffer. */
void slash_channel_close(slash_channel *ch);

/* Closes either end of a channel whose consumer learns where the stream ends
 * from the buffers themselves (an executor's final epoch) and never polls
 * for end-of-stream: as slash_channel_close, but a remote producer waits only
 * until the consumer released every data buffer, not the end-of-stream it
 * sends now. A consumer that stopped reading (its process waits on this
 * close) then costs nothing instead of the drain timeout. */
void slash_channel_close_ended(slash_channel *ch);

/* --- producer --- */

/* Waits for a credit and returns the slot's payload area (*buf, capacity
 * *cap). SLASH_ETIMEDOUT at the deadline, SLASH_EPEER if the consumer died.
 * With timeout_ms == 0 it only tries, and a miss records a fixed detail (no formatting). */
slash_status slash_channel_reserve(slash_channel *ch, int timeout_ms, void **buf, size_t *cap);
/* Publishes the reserved slot with len payload bytes (1..cap). */
slash_status slash_channel_commit(slash_channel *ch, size_t len);
/* reserve + copy + commit. SLASH_EINVAL for len 0, SLASH_ETOOBIG above cap. */
slash_status slash_channel_send(slash_channel *ch, const void *data, size_t len, int timeout_ms);
/* Sends end-of-stream; later sends fail with SLASH_ESTATE. */
slash_status slash_channel_send_eof(slash_channel *ch, int timeout_ms);

/* --- consumer --- */

/* Waits for the next buffer and returns it in place: *buf is valid until
 * slash_channel_release(). *seq is its sequence number (0, 1, 2, ...).
 * With timeout_ms == 0 it only tries, and a miss records a fixed detail (no formatting).
 * SLASH_EOF after the producer's end-of-stream, SLASH_EPEER if it died. */
slash_status slash_channel_poll(slash_channel *ch, int timeout_ms, const void **buf, size_t *len,
                                uint64_t *seq);
/* Frees the buffer returned by the last poll and returns its credit. */
slash_status slash_channel_release(slash_channel *ch);
/* poll + copy into dst (cap bytes) + release. SLASH_ETOOBIG if cap is short
 * (the buffer stays unreleased, so nothing is lost). */
slash_status slash_channel_recv(slash_channel *ch, void *dst, size_t cap, size_t *len,
                                int timeout_ms);

/* --- both --- */
bool slash_channel_is_producer(const slash_channel *ch);
void slash_channel_get_stats(const slash_channel *ch, slash_channel_stats *out);
/* The endpoint under the channel (owned by the channel). */
slash_endpoint *slash_channel_endpoint(slash_channel *ch);

#ifdef __cplusplus
}
#endif
#endif
