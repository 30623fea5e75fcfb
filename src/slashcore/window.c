/* window.c - validation of window parameters and the derived slice length
 * (see window.h for the alignment and end-exclusive rules). */
#include "slash/window.h"

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

slash_status slash_window_init(slash_window *w, slash_window_kind kind, int64_t size,
                               int64_t slide)
{
    switch (kind) {
    case SLASH_WINDOW_TUMBLING:
        slide = size;
        break;
    case SLASH_WINDOW_SLIDING:
        if (slide <= 0)
            return slash_fail(SLASH_EINVAL, "window slide must be > 0 ms, got %lld",
                              (long long)slide);
        if (size > 0 && slide > size)
            return slash_fail(SLASH_EINVAL,
                              "window slide (%lld ms) must not exceed window size (%lld ms)",
                              (long long)slide, (long long)size);
        break;
    case SLASH_WINDOW_SESSION:
        if (size <= 0)
            return slash_fail(SLASH_EINVAL, "session gap must be > 0 ms, got %lld",
                              (long long)size);
        slide = size;
        break;
    default:
        return slash_fail(SLASH_EINVAL, "unknown window kind %d", (int)kind);
    }
    if (size <= 0)
        return slash_fail(SLASH_EINVAL, "window size must be > 0 ms, got %lld", (long long)size);
    w->kind = kind;
    w->size = size;
    w->slide = slide;
    w->slice = kind == SLASH_WINDOW_SESSION ? size : gcd64(size, slide);
    return SLASH_OK;
}
