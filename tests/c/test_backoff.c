/* test_backoff.c - the waiting policy of backoff.c: spinning and yielding
 * rounds never sleep, a sleeping round grows to SLASH_BACKOFF_MAX_SLEEP_US
 * and no further, and slash_backoff_wait_until never sleeps past the
 * caller's deadline (so an idle executor acts at its own next deadline, not
 * up to a ceiling later). Counted through the waiter's own record of its
 * sleeps, not by wall-clock timing. */
#define _GNU_SOURCE
#include "slash/backoff.h"
#include "unit.h"

#define BUSY_ROUNDS (SLASH_BACKOFF_SPINS + SLASH_BACKOFF_YIELDS)

TEST(spinning_and_yielding_rounds_never_sleep)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    for (int i = 0; i < BUSY_ROUNDS; i++)
        slash_backoff_wait(&b);
    CHECK(b.rounds == BUSY_ROUNDS);
    CHECK(b.sleeps == 0);
    CHECK(b.last_sleep == 0);
    slash_backoff_wait(&b);
    CHECK(b.sleeps == 1);
    CHECK(b.last_sleep == 1000); /* the first sleep: 1 us */
}

TEST(a_sleep_grows_to_the_ceiling_and_no_further)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    b.rounds = BUSY_ROUNDS;
    uint64_t longest = 0;
    for (int i = 0; i < 16; i++) {
        slash_backoff_wait(&b);
        CHECK(b.last_sleep > 0);
        CHECK(b.last_sleep <= SLASH_BACKOFF_MAX_SLEEP_US * 1000ull);
        CHECK(b.last_sleep >= longest); /* never shrinks while idle */
        longest = b.last_sleep;
    }
    CHECK(longest == SLASH_BACKOFF_MAX_SLEEP_US * 1000ull);
    CHECK(b.sleeps == 16);
}

TEST(wait_until_never_sleeps_past_the_deadline)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    b.rounds = BUSY_ROUNDS + 20; /* at the ceiling */
    uint64_t deadline = slash_now_ns() + 200000; /* 200 us: below the ceiling */
    slash_backoff_wait_until(&b, deadline);
    CHECK(b.sleeps == 1);
    CHECK(b.last_sleep > 0);
    CHECK(b.last_sleep <= 200000);
}

TEST(wait_until_does_not_sleep_once_the_deadline_passed)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    b.rounds = BUSY_ROUNDS + 20;
    slash_backoff_wait_until(&b, slash_now_ns());
    slash_backoff_wait_until(&b, 1); /* long past */
    CHECK(b.sleeps == 0);
    CHECK(b.last_sleep == 0);
    CHECK(b.rounds == BUSY_ROUNDS + 22);
}

TEST(wait_until_without_a_deadline_sleeps_the_ceiling)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    b.rounds = BUSY_ROUNDS + 20;
    slash_backoff_wait_until(&b, UINT64_MAX);
    CHECK(b.sleeps == 1);
    CHECK(b.last_sleep == SLASH_BACKOFF_MAX_SLEEP_US * 1000ull);
}

TEST(reset_forgets_the_sleeps)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    b.rounds = BUSY_ROUNDS;
    slash_backoff_wait(&b);
    CHECK(b.sleeps == 1);
    slash_backoff_reset(&b);
    CHECK(b.rounds == 0 && b.sleeps == 0 && b.last_sleep == 0);
}

int main(void)
{
    RUN(spinning_and_yielding_rounds_never_sleep);
    RUN(a_sleep_grows_to_the_ceiling_and_no_further);
    RUN(wait_until_never_sleeps_past_the_deadline);
    RUN(wait_until_does_not_sleep_once_the_deadline_passed);
    RUN(wait_until_without_a_deadline_sleeps_the_ceiling);
    RUN(reset_forgets_the_sleeps);
    return UNIT_DONE();
}
