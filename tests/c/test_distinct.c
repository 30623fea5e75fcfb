/* test_distinct.c - bounded exact distinct sets: the count is exact up to
 * the bound, one more distinct value overflows, and merge (union) is
 * commutative, associative and idempotent, overflow included. */
#include <stdlib.h>

#include "slash/distinct.h"
#include "slash/hll.h"
#include "unit.h"

static void fill(slash_distinct *s, uint64_t *rng, int n, uint64_t range)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < n; i++)
        slash_distinct_add(s, slash_hll_hash_i64((int64_t)(unit_rng(rng) % range)));
}

TEST(count_is_exact_up_to_the_bound_and_overflows_past_it)
{
    static slash_distinct s;
    memset(&s, 0, sizeof s);
    for (int64_t v = 0; v < SLASH_DISTINCT_MAX; v++) {
        slash_distinct_add(&s, slash_hll_hash_i64(v));
        slash_distinct_add(&s, slash_hll_hash_i64(v)); /* again: no change */
    }
    slash_distinct_add(&s, 0); /* a null */
    CHECK(slash_distinct_count(&s) == SLASH_DISTINCT_MAX);
    slash_distinct_add(&s, slash_hll_hash_i64(-1));
    CHECK(slash_distinct_count(&s) == -1);
}

TEST(union_is_commutative_associative_idempotent_overflow_included)
{
    static slash_distinct a, b, c, x, y, z;
    uint64_t rng = 4;
    for (int round = 0; round < 300; round++) {
        uint64_t range = round % 3 ? 900 : 3000; /* some unions overflow */
        fill(&a, &rng, (int)(unit_rng(&rng) % 700), range);
        fill(&b, &rng, (int)(unit_rng(&rng) % 700), range);
        fill(&c, &rng, (int)(unit_rng(&rng) % 700), range);
        x = a, slash_distinct_merge(&x, &b);
        y = b, slash_distinct_merge(&y, &a);
        CHECK(memcmp(&x, &y, sizeof x) == 0);
        slash_distinct_merge(&x, &c);
        y = b, slash_distinct_merge(&y, &c);
        z = a, slash_distinct_merge(&z, &y);
        CHECK(memcmp(&x, &z, sizeof x) == 0);
        y = a, slash_distinct_merge(&y, &a);
        CHECK(memcmp(&y, &a, sizeof a) == 0);
    }
}

/* Adding hashes many at a time (sorted, one merge pass) leaves the set one
 * add at a time leaves, byte for byte: batches of every size (a few into a
 * large set take the search path), nulls and repeats within a batch and
 * against the set, and overflow reached inside a batch. */
TEST(adding_many_equals_adding_one_at_a_time_byte_for_byte)
{
    static slash_distinct one, many;
    static uint64_t h[3 * SLASH_DISTINCT_BATCH], copy[3 * SLASH_DISTINCT_BATCH];
    uint64_t rng = 11;
    for (int round = 0; round < 400; round++) {
        memset(&one, 0, sizeof one), memset(&many, 0, sizeof many);
        const uint64_t range = round % 4 == 0 ? 1100 : 1000; /* some reach the bound */
        for (int batches = 0; batches < 12; batches++) {
            const uint32_t m = (uint32_t)(unit_rng(&rng) % (round % 2 ? 9 : 3 * SLASH_DISTINCT_BATCH));
            for (uint32_t i = 0; i < m; i++) {
                const uint64_t r = unit_rng(&rng);
                h[i] = r % 13 == 0 ? 0 : slash_hll_hash_i64((int64_t)(r % range));
                copy[i] = h[i];
            }
            for (uint32_t i = 0; i < m; i++)
                slash_distinct_add(&one, copy[i]);
            slash_distinct_add_many(&many, h, m);
            CHECK(memcmp(&one, &many, sizeof one) == 0);
        }
    }
}

int main(void)
{
    RUN(adding_many_equals_adding_one_at_a_time_byte_for_byte);
    RUN(count_is_exact_up_to_the_bound_and_overflows_past_it);
    RUN(union_is_commutative_associative_idempotent_overflow_included);
    return UNIT_DONE();
}
