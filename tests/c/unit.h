/* unit.h - a minimal test harness for the C core's tests.
 *
 * TEST(name) defines a test; RUN(name) runs it in the main function; CHECK
 * and CHECK_OK record failures without aborting the test; UNIT_DONE() prints
 * "N passed, N failed" and returns the exit code (non-zero on any failure).
 */
#ifndef SLASH_UNIT_H
#define SLASH_UNIT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "slash/status.h"

static int unit_passed, unit_failed, unit_current_failed;

/* splitmix64: the tests' seeded pseudo-random stream (state *s). */
static inline uint64_t unit_rng(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define TEST(name) static void name(void)

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            unit_current_failed = 1;                                                 \
        }                                                                            \
    } while (0)

#define CHECK_ST(expr, want)                                                          \
    do {                                                                              \
        slash_status st_ = (expr);                                                    \
        if (st_ != (want)) {                                                          \
            fprintf(stderr, "  %s:%d: %s returned %s (%s), expected %s\n", __FILE__,  \
                    __LINE__, #expr, slash_strerror(st_), slash_last_error(),          \
                    slash_strerror(want));                                            \
            unit_current_failed = 1;                                                  \
        }                                                                             \
    } while (0)

#define CHECK_OK(expr) CHECK_ST(expr, SLASH_OK)

#define RUN(name)                                                  \
    do {                                                           \
        unit_current_failed = 0;                                   \
        name();                                                    \
        if (unit_current_failed) {                                 \
            unit_failed++;                                         \
            fprintf(stderr, "FAIL %s\n", #name);                   \
        } else {                                                   \
            unit_passed++;                                         \
            fprintf(stderr, "ok   %s\n", #name);                   \
        }                                                          \
    } while (0)

#define UNIT_DONE()                                                      \
    (printf("%d passed, %d failed\n", unit_passed, unit_failed),         \
     unit_failed ? 1 : 0)

#endif
