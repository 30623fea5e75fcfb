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

/* Window bounds are computed in 128 bits and clamped to int64 once, so a
 * window reaching past an end of the int64 range is clipped there (its start
 * to INT64_MIN, its end to INT64_MAX) and every time in the range is in a
 * window. A clipped slice start still identifies its slice: floor division of
 * it by the slice (or the slide, a multiple of it) gives the true slice's
 * index, which is what the functions below compute from. Tumbling windows and
 * sessions clip unambiguously (one window per end of the range); clipped
 * sliding windows would share a start or an end, so their records are refused
 * (slash_window_slice_fits). */
__extension__ typedef __int128 slash_i128;

static inline int64_t slash_clamp128(slash_i128 x)
{
    return x > INT64_MAX ? INT64_MAX : x < INT64_MIN ? INT64_MIN : (int64_t)x;
}

/* floor(a / b) for b > 0 in 128 bits. */
static inline slash_i128 slash_floor_div128(slash_i128 a, slash_i128 b)
{
    slash_i128 q = a / b;
    return q - ((a % b != 0) & (a < 0));
}

/* Start of the slice holding t (tumbling: the window start), clipped. */
static inline int64_t slash_window_slice_start(const slash_window *w, int64_t t)
{
    return slash_clamp128((slash_i128)slash_floor_div(t, w->slice) * w->slice);
}

/* End of the slice starting at a (a clipped start: its true slice's end). */
static inline int64_t slash_window_slice_end(const slash_window *w, int64_t a)
{
    return slash_clamp128(((slash_i128)slash_floor_div(a, w->slice) + 1) * w->slice);
}

/* End of the last window that contains the slice starting at a: the slice's
 * state may be freed once every window ending at or before that is emitted. */
static inline int64_t slash_window_slice_last_end(const slash_window *w, int64_t a)
{
    return slash_clamp128((slash_i128)slash_floor_div(a, w->slide) * w->slide + w->size);
}

/* Start of the first (earliest) window containing the slice starting at a, in
 * 128 bits: the smallest multiple s of slide with s + size >= slice end. */
static inline slash_i128 slash_window_slice_first_start128(const slash_window *w, int64_t a)
{
    slash_i128 x = ((slash_i128)slash_floor_div(a, w->slice) + 1) * w->slice - w->size;
    return (slash_floor_div128(x - 1, w->slide) + 1) * w->slide;
}

static inline int64_t slash_window_slice_first_start(const slash_window *w, int64_t a)
{
    return slash_clamp128(slash_window_slice_first_start128(w, a));
}

/* Whether every window containing the slice starting at a lies within the
 * int64 range: always for tumbling windows (clipped, see above); for sliding
 * windows the first must start at or after INT64_MIN and the last end at or
 * before INT64_MAX. */
static inline bool slash_window_slice_fits(const slash_window *w, int64_t a)
{
    if (w->kind != SLASH_WINDOW_SLIDING)
        return true;
    slash_i128 last_end = (slash_i128)slash_floor_div(a, w->slide) * w->slide + w->size;
    return slash_window_slice_first_start128(w, a) >= INT64_MIN && last_end <= INT64_MAX;
}

#ifdef __cplusplus
}
#endif
#endif
