/* window.h - window assignment over int64 event time in milliseconds.
 *
 * Three kinds, all aligned at time 0, start inclusive, end exclusive:
 *  - tumbling(size):       windows [k*size, (k+1)*size) for every integer k;
 *  - sliding(size, slide): windows [k*slide, k*slide + size);
 *  - session(gap):         per key, an event at t covers [t, t + gap); covers
 *                          that overlap or touch merge into one session
 *                          [first event, last event + gap): an event at t
 *                          joins the session [s, e) when s - gap <= t <= e,
 *                          so events exactly one gap apart share a session
 *                          (as Spark's session_window and Flink's session
 *                          windows have it). t + gap saturates at INT64_MAX.
 * Tumbling and sliding state is kept per *slice* of length gcd(size, slide)
 * (= size for tumbling), so one record updates exactly one slice; a window is
 * the merge of the size/slice slices it spans. Every division here is floor
 * division, so negative times land in the slice that contains them.
 */
#ifndef SLASH_WINDOW_H
#define SLASH_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum slash_window_kind {
    SLASH_WINDOW_TUMBLING = 1,
    SLASH_WINDOW_SLIDING = 2,
    SLASH_WINDOW_SESSION = 3
} slash_window_kind;

typedef struct slash_window {
    slash_window_kind kind;
    int64_t size;  /* window length (tumbling, sliding); session: the gap */
    int64_t slide; /* start-to-start distance (sliding; = size for tumbling) */
    int64_t slice; /* derived by slash_window_init: gcd(size, slide) */
} slash_window;

/* Fills *w for a kind and its lengths in ms (slide is ignored for tumbling
 * and session). Fails with SLASH_EINVAL naming the parameter when a length is
 * <= 0 or slide > size. */
slash_status slash_window_init(slash_window *w, slash_window_kind kind, int64_t size,
                               int64_t slide);

/* True when a window ending at `end` is finished at watermark wm (no record
 * older than wm is still to come; INT64_MAX: the input is over): a tumbling
 * or sliding window when end <= wm; a session only when end < wm, because a
 * record at exactly `end` still joins it, or when wm is INT64_MAX (a session
 * whose end saturated there must close too). The same test tells whether a
 * record whose own window or cover ends at `end` is late. */
static inline bool slash_window_closed(const slash_window *w, int64_t end, int64_t wm)
{
    if (w->kind == SLASH_WINDOW_SESSION)
        return end < wm || wm == INT64_MAX;
    return end <= wm;
}

/* floor(a / b) for b > 0, correct for negative a. */
static inline int64_t slash_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return q - ((a % b != 0) & (a < 0));
}

/* a + b and a * b saturated at INT64_MIN / INT64_MAX: window bounds of times
 * at the ends of the int64 range clamp there instead of overflowing (found by
 * fuzzing: a record time near INT64_MAX overflowed its slice's end). */
static inline int64_t slash_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static inline int64_t slash_sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
    return r;
}

/* Start of the slice holding t (tumbling: the window start). */
static inline int64_t slash_window_slice_start(const slash_window *w, int64_t t)
{
    return slash_sat_mul(slash_floor_div(t, w->slice), w->slice);
}

/* End of the slice starting at a. */
static inline int64_t slash_window_slice_end(const slash_window *w, int64_t a)
{
    return slash_sat_add(a, w->slice);
}

/* End of the last window that contains the slice starting at a: the slice's
 * state may be freed once every window ending at or before that is emitted. */
static inline int64_t slash_window_slice_last_end(const slash_window *w, int64_t a)
{
    return slash_sat_add(slash_sat_mul(slash_floor_div(a, w->slide), w->slide), w->size);
}

/* Start of the first (earliest) window containing the slice starting at a. */
static inline int64_t slash_window_slice_first_start(const slash_window *w, int64_t a)
{
    /* smallest multiple of slide s with s + size >= a + slice */
    int64_t x = slash_sat_add(slash_sat_add(a, w->slice), -w->size);
    return slash_sat_mul(slash_floor_div(slash_sat_add(x, -1), w->slide) + 1, w->slide);
}

#ifdef __cplusplus
}
#endif
#endif
