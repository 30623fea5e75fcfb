/* backoff.c - poll, then yield, then sleep briefly (see backoff.h).
 *
 * Invariant: one round sleeps at most SLASH_BACKOFF_MAX_SLEEP_US, and never
 * past the caller's deadline; spinning and yielding rounds do not sleep. */
#define _GNU_SOURCE
#include "slash/backoff.h"

#include <sched.h>
#include <time.h>

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void slash_backoff_wait_until(slash_backoff *b, uint64_t deadline)
{
    uint32_t r = b->rounds++;
    b->last_sleep = 0;
    if (r < SLASH_BACKOFF_SPINS) {
        cpu_relax();
        return;
    }
    if (r < SLASH_BACKOFF_SPINS + SLASH_BACKOFF_YIELDS) {
        sched_yield();
        return;
    }
    uint32_t k = r - SLASH_BACKOFF_SPINS - SLASH_BACKOFF_YIELDS;
    uint64_t ns = (k < 10 ? (1ull << k) : SLASH_BACKOFF_MAX_SLEEP_US) * 1000ull;
    if (ns > SLASH_BACKOFF_MAX_SLEEP_US * 1000ull)
        ns = SLASH_BACKOFF_MAX_SLEEP_US * 1000ull;
    if (deadline != UINT64_MAX) {
        uint64_t now = slash_now_ns();
        if (now >= deadline)
            return; /* due now: the caller acts at once */
        if (deadline - now < ns)
            ns = deadline - now;
    }
    b->sleeps++;
    b->last_sleep = ns;
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

void slash_backoff_wait(slash_backoff *b) { slash_backoff_wait_until(b, UINT64_MAX); }

uint64_t slash_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t slash_deadline(int timeout_ms)
{
    if (timeout_ms < 0)
        return UINT64_MAX;
    return slash_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

bool slash_deadline_passed(uint64_t deadline)
{
    return deadline != UINT64_MAX && slash_now_ns() >= deadline;
}
