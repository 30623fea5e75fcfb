/* test_window.c - window assignment: floor division for negative times,
 * slice lengths, first/last windows of a slice, bad parameters. */
#include "slash/window.h"
#include "unit.h"

TEST(floor_division)
{
    CHECK(slash_floor_div(7, 5) == 1);
    CHECK(slash_floor_div(-1, 5) == -1);
    CHECK(slash_floor_div(-5, 5) == -1);
    CHECK(slash_floor_div(-6, 5) == -2);
    CHECK(slash_floor_div(0, 5) == 0);
}

TEST(tumbling)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 10, 0));
    CHECK(w.slice == 10 && w.slide == 10);
    CHECK(slash_window_slice_start(&w, 19) == 10);
    CHECK(slash_window_slice_start(&w, -1) == -10);
    CHECK(slash_window_slice_start(&w, -10) == -10);
    CHECK(slash_window_slice_last_end(&w, -10) == 0);
    CHECK(slash_window_slice_first_start(&w, 10) == 10);
}

TEST(sliding_slices)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_SLIDING, 60, 10));
    CHECK(w.slice == 10);
    /* slice [20,30) is in windows starting -30..20 */
    CHECK(slash_window_slice_first_start(&w, 20) == -30);
    CHECK(slash_window_slice_last_end(&w, 20) == 80);
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_SLIDING, 10, 4));
    CHECK(w.slice == 2);
    /* slice [6,8): windows [0,10) and [4,14) */
    CHECK(slash_window_slice_first_start(&w, 6) == 0);
    CHECK(slash_window_slice_last_end(&w, 6) == 14);
    /* slice [-2,0): windows [-8,2) and [-4,6)... and [-12,-2)? no: it ends at -2 */
    CHECK(slash_window_slice_first_start(&w, -2) == -8);
    CHECK(slash_window_slice_last_end(&w, -2) == 6);
}

TEST(bad_parameters)
{
    slash_window w;
    CHECK_ST(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 0, 0), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "size") != NULL);
    CHECK_ST(slash_window_init(&w, SLASH_WINDOW_TUMBLING, -5, 0), SLASH_EINVAL);
    CHECK_ST(slash_window_init(&w, SLASH_WINDOW_SLIDING, 10, 0), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "slide") != NULL);
    CHECK_ST(slash_window_init(&w, SLASH_WINDOW_SLIDING, 10, 20), SLASH_EINVAL);
    CHECK_ST(slash_window_init(&w, SLASH_WINDOW_SESSION, 0, 0), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "gap") != NULL);
    CHECK_ST(slash_window_init(&w, (slash_window_kind)9, 10, 10), SLASH_EINVAL);
}

/* Times at both ends of int64: a tumbling window past an end is clipped
 * there, and its clipped start still names its own slice (the end of the
 * slice at INT64_MIN is its true end, not INT64_MIN + size). */
TEST(tumbling_clipped_at_both_ends)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 10000, 0));
    int64_t lo = slash_window_slice_start(&w, INT64_MIN + 1);
    CHECK(lo == INT64_MIN);
    CHECK(slash_window_slice_end(&w, lo) == -9223372036854770000LL);
    CHECK(slash_window_slice_last_end(&w, lo) == -9223372036854770000LL);
    /* the next slice starts where the clipped one ends */
    CHECK(slash_window_slice_start(&w, -9223372036854770000LL) == -9223372036854770000LL);
    CHECK(slash_window_slice_start(&w, -9223372036854770001LL) == INT64_MIN);
    int64_t hi = slash_window_slice_start(&w, INT64_MAX);
    CHECK(hi == 9223372036854770000LL);
    CHECK(slash_window_slice_end(&w, hi) == INT64_MAX);
    CHECK(slash_window_slice_fits(&w, lo) && slash_window_slice_fits(&w, hi));
    /* a day in ns at pandas' Timestamp.min (INT64_MIN + 1) */
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 86400000000000LL, 0));
    lo = slash_window_slice_start(&w, INT64_MIN + 1);
    CHECK(lo == INT64_MIN);
    CHECK(slash_window_slice_end(&w, lo) == -106751LL * 86400000000000LL);
}

/* Sliding windows past an end would share a clipped bound: such slices do not
 * fit; the ones whose every window is in range do, and their bounds are exact. */
TEST(sliding_fits_only_inside_the_range)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_SLIDING, 10000, 5000));
    CHECK(!slash_window_slice_fits(&w, slash_window_slice_start(&w, INT64_MIN + 1)));
    CHECK(!slash_window_slice_fits(&w, slash_window_slice_start(&w, INT64_MAX)));
    int64_t a = slash_window_slice_start(&w, -9223372036854770000LL);
    CHECK(slash_window_slice_fits(&w, a));
    CHECK(slash_window_slice_first_start(&w, a) == -9223372036854775000LL);
    a = slash_window_slice_start(&w, 9223372036854765000LL);
    CHECK(slash_window_slice_fits(&w, a));
    CHECK(slash_window_slice_last_end(&w, a) == 9223372036854775000LL);
    CHECK(!slash_window_slice_fits(&w, slash_window_slice_start(&w, 9223372036854770000LL)));
}

int main(void)
{
    RUN(floor_division);
    RUN(tumbling);
    RUN(sliding_slices);
    RUN(bad_parameters);
    RUN(tumbling_clipped_at_both_ends);
    RUN(sliding_fits_only_inside_the_range);
    return UNIT_DONE();
}
