/* backoff.h - waiting that never pins a core forever.
 *
 * A waiter polls, then yields, then sleeps with a growing interval capped at
 * SLASH_BACKOFF_MAX_SLEEP_US (and, with slash_backoff_wait_until, at the
 * waiter's own next deadline), so more processes than cores still progress
 * and an idle waiter notices a peer's message within that ceiling.
 * Deadlines are absolute CLOCK_MONOTONIC nanoseconds; timeout_ms < 0 means
 * wait forever, 0 means poll once.
 */
#ifndef SLASH_BACKOFF_H
#define SLASH_BACKOFF_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_BACKOFF_SPINS 256
#define SLASH_BACKOFF_YIELDS 64
#define SLASH_BACKOFF_MAX_SLEEP_US 1000

typedef struct slash_backoff {
    uint32_t rounds;
    uint32_t sleeps;     /* rounds that slept since the reset */
    uint64_t last_sleep; /* ns the latest round slept (0: it did not) */
} slash_backoff;

static inline void slash_backoff_reset(slash_backoff *b)
{
    b->rounds = 0;
    b->sleeps = 0;
    b->last_sleep = 0;
}

/* Waits one round: a CPU pause, a sched_yield, or a short sleep, depending on
 * how long the caller has been waiting. Never fails. */
void slash_backoff_wait(slash_backoff *b);

/* As slash_backoff_wait, but a sleep never reaches past `deadline` (absolute
 * CLOCK_MONOTONIC ns; UINT64_MAX: no bound), and none is taken once it has
 * passed: a waiter that must act at a known time (its timeout, the next
 * epoch end) acts then, not up to SLASH_BACKOFF_MAX_SLEEP_US later. */
void slash_backoff_wait_until(slash_backoff *b, uint64_t deadline);

/* Monotonic clock in nanoseconds. */
uint64_t slash_now_ns(void);

/* Converts a relative timeout to an absolute deadline (UINT64_MAX = never). */
uint64_t slash_deadline(int timeout_ms);

/* True once the deadline has passed. */
bool slash_deadline_passed(uint64_t deadline);

#ifdef __cplusplus
}
#endif
#endif
