/* test_buf.c - the core's one growable-array helper (buf.h): contents kept
 * across growth, geometric growth from the first capacity, no reallocation
 * when the array holds enough, and a size whose bytes overflow refused
 * before any allocation with the array left as it was. */
#include "buf.h"
#include "unit.h"

#include <stdint.h>
#include <stdlib.h>

/* Under AddressSanitizer an allocation beyond its limit aborts unless the
 * allocator may return NULL, as the C library's does: the out-of-memory
 * test needs the NULL. (The same flag set in ASAN_OPTIONS still wins.) */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

TEST(growth_keeps_the_contents_and_doubles_from_the_first_capacity)
{
    int64_t *a = NULL;
    size_t cap = 0;
    CHECK_OK(slash_buf_grow((void **)&a, &cap, 3, sizeof *a, 16, "test"));
    CHECK(cap == 16);
    for (int64_t i = 0; i < 16; i++)
        a[i] = i * 7;
    CHECK_OK(slash_buf_grow((void **)&a, &cap, 17, sizeof *a, 16, "test"));
    CHECK(cap == 32);
    CHECK_OK(slash_buf_grow((void **)&a, &cap, 100, sizeof *a, 16, "test"));
    CHECK(cap == 128); /* 32 -> 64 -> 128 */
    int same = 1;
    for (int64_t i = 0; i < 16; i++)
        same &= a[i] == i * 7;
    CHECK(same);
    free(a);
}

TEST(an_array_that_holds_enough_is_not_reallocated)
{
    uint8_t *a = NULL;
    size_t cap = 0;
    CHECK_OK(slash_buf_grow((void **)&a, &cap, 100, 1, 4096, "test"));
    uint8_t *before = a;
    CHECK_OK(slash_buf_grow((void **)&a, &cap, 4096, 1, 4096, "test"));
    CHECK(a == before && cap == 4096);
    CHECK_OK(slash_buf_grow((void **)&a, &cap, 0, 1, 4096, "test"));
    CHECK(a == before && cap == 4096);
    free(a);
}

TEST(a_first_capacity_of_zero_starts_at_one_element)
{
    size_t cap;
    CHECK_OK(slash_buf_next_cap(0, 5, 0, 8, "test", &cap));
    CHECK(cap == 8); /* 1 -> 2 -> 4 -> 8 */
}

TEST(appends_of_one_element_cost_logarithmically_many_reallocations)
{
    uint32_t *a = NULL;
    size_t cap = 0;
    int grown = 0;
    for (size_t n = 1; n <= 100000; n++) {
        size_t before = cap;
        CHECK_OK(slash_buf_grow((void **)&a, &cap, n, sizeof *a, 4, "test"));
        grown += cap != before;
        a[n - 1] = (uint32_t)n;
    }
    CHECK(grown == 16); /* 4 .. 131072, doubling */
    CHECK(a[99999] == 100000 && a[0] == 1);
    free(a);
}

TEST(doubling_past_the_byte_limit_gives_exactly_what_is_needed)
{
    size_t max = (size_t)PTRDIFF_MAX / 8, cap;
    CHECK_OK(slash_buf_next_cap(max / 2 + 1, max - 1, 16, 8, "test", &cap));
    CHECK(cap == max - 1);
    CHECK_OK(slash_buf_next_cap(0, 10, max + 5, 8, "test", &cap)); /* a first beyond it */
    CHECK(cap == 10);
}

TEST(a_size_whose_bytes_overflow_is_refused_and_the_array_kept)
{
    int64_t *a = NULL;
    size_t cap = 0;
    CHECK_OK(slash_buf_grow((void **)&a, &cap, 4, sizeof *a, 4, "test"));
    a[3] = 42;
    int64_t *before = a;
    /* SIZE_MAX / 8 + 1 elements of 8 bytes wrap to 0 bytes in size_t */
    CHECK_ST(slash_buf_grow((void **)&a, &cap, SIZE_MAX / 8 + 1, 8, 4, "the test's column"),
             SLASH_ETOOBIG);
    CHECK(strstr(slash_last_error(), "the test's column") != NULL);
    CHECK(a == before && cap == 4 && a[3] == 42);
    CHECK_ST(slash_buf_grow((void **)&a, &cap, (size_t)PTRDIFF_MAX / 8 + 1, 8, 4, "test"),
             SLASH_ETOOBIG); /* no wrap, but more than an object may hold */
    CHECK(a == before && cap == 4);
    CHECK_ST(slash_buf_resize((void **)&a, SIZE_MAX / 2, 4, "test"), SLASH_ETOOBIG);
    CHECK(a == before && a[3] == 42);
    size_t out = 77;
    CHECK_ST(slash_buf_next_cap(4, SIZE_MAX, 4, 2, "test", &out), SLASH_ETOOBIG);
    CHECK(out == 77);
    free(a);
}

TEST(an_allocation_that_fails_is_out_of_memory_and_keeps_the_array)
{
    /* within the byte limit but beyond any address space this test has */
    uint8_t *a = NULL;
    size_t cap = 0;
    CHECK_OK(slash_buf_grow((void **)&a, &cap, 10, 1, 16, "test"));
    a[9] = 9;
    uint8_t *before = a;
    CHECK_ST(slash_buf_grow((void **)&a, &cap, (size_t)PTRDIFF_MAX - 4096, 1, 16, "the test's bytes"),
             SLASH_ENOMEM);
    CHECK(strstr(slash_last_error(), "the test's bytes") != NULL);
    CHECK(a == before && cap == 16 && a[9] == 9);
    free(a);
}

TEST(arrays_sharing_one_capacity_resize_to_it)
{
    int64_t *x = NULL, *y = NULL;
    size_t cap;
    CHECK_OK(slash_buf_next_cap(0, 300, 256, 8, "test", &cap));
    CHECK(cap == 512);
    CHECK_OK(slash_buf_resize((void **)&x, cap, 8, "test"));
    CHECK_OK(slash_buf_resize((void **)&y, cap + 1, 8, "test"));
    x[cap - 1] = 1, y[cap] = 2;
    CHECK(x[cap - 1] + y[cap] == 3);
    free(x);
    free(y);
}

int main(void)
{
    RUN(growth_keeps_the_contents_and_doubles_from_the_first_capacity);
    RUN(an_array_that_holds_enough_is_not_reallocated);
    RUN(a_first_capacity_of_zero_starts_at_one_element);
    RUN(appends_of_one_element_cost_logarithmically_many_reallocations);
    RUN(doubling_past_the_byte_limit_gives_exactly_what_is_needed);
    RUN(a_size_whose_bytes_overflow_is_refused_and_the_array_kept);
    RUN(an_allocation_that_fails_is_out_of_memory_and_keeps_the_array);
    RUN(arrays_sharing_one_capacity_resize_to_it);
    return UNIT_DONE();
}
