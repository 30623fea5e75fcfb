/* test_quantile.c - the quantile sketch: merge is commutative and
 * associative byte for byte (collapses included) with zero as identity, a
 * merge of parts equals the sketch of the whole, and every quantile lies
 * within the stated relative error of the exact value at rank ceil(q n). */
#include <math.h>
#include <stdlib.h>

#include "slash/crdt.h"
#include "slash/quantile.h"
#include "unit.h"

/* a value of a random magnitude over `decades` decades, either sign */
static double value(uint64_t *rng, int decades)
{
    double u = (double)(unit_rng(rng) >> 11) / 9007199254740992.0;
    double v = pow(10.0, u * decades - decades / 2.0);
    return unit_rng(rng) & 1 ? v : -v;
}

static void fill(slash_qsketch *s, uint64_t *rng, int n, int decades)
{
    slash_qs_zero(s);
    for (int i = 0; i < n; i++)
        slash_qs_add(s, value(rng, decades));
}

TEST(merge_is_commutative_and_associative_through_collapses)
{
    static slash_qsketch a, b, c, x, y, z, zero;
    uint64_t rng = 3;
    for (int round = 0; round < 100; round++) {
        int decades = 1 + (int)(unit_rng(&rng) % 30); /* up to level 3 */
        fill(&a, &rng, (int)(unit_rng(&rng) % 3000), decades);
        fill(&b, &rng, (int)(unit_rng(&rng) % 3000), decades);
        fill(&c, &rng, (int)(unit_rng(&rng) % 300), decades + 5);
        x = a, slash_qs_merge(&x, &b);
        y = b, slash_qs_merge(&y, &a);
        CHECK(memcmp(&x, &y, sizeof x) == 0);
        slash_qs_merge(&x, &c);
        y = b, slash_qs_merge(&y, &c);
        z = a, slash_qs_merge(&z, &y);
        CHECK(memcmp(&x, &z, sizeof x) == 0);
        slash_qs_zero(&zero);
        y = a, slash_qs_merge(&y, &zero);
        CHECK(memcmp(&y, &a, sizeof a) == 0);
        y = zero, slash_qs_merge(&y, &a);
        CHECK(memcmp(&y, &a, sizeof a) == 0);
    }
}

TEST(merged_parts_equal_the_sketch_of_the_whole)
{
    static slash_qsketch whole, part[3];
    uint64_t rng = 8;
    slash_qs_zero(&whole);
    for (int i = 0; i < 3; i++)
        slash_qs_zero(&part[i]);
    for (int i = 0; i < 20000; i++) {
        double v = value(&rng, 25);
        slash_qs_add(&whole, v);
        slash_qs_add(&part[unit_rng(&rng) % 3], v);
    }
    CHECK(whole.level > 0); /* the test covers collapses */
    slash_qs_merge(&part[2], &part[0]);
    slash_qs_merge(&part[2], &part[1]);
    CHECK(memcmp(&part[2], &whole, sizeof whole) == 0);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* every quantile within 2^(L - 7) of the exact value at rank ceil(q n) */
TEST(quantiles_within_the_stated_relative_error)
{
    static double vals[50000];
    static slash_qsketch s;
    static const int decades[] = {1, 2, 4, 9, 18};
    uint64_t rng = 5;
    for (size_t d = 0; d < sizeof decades / sizeof decades[0]; d++) {
        int n = 1000 + (int)(unit_rng(&rng) % 49000);
        slash_qs_zero(&s);
        for (int i = 0; i < n; i++) {
            vals[i] = fabs(value(&rng, decades[d])) * (i % 5 ? 1 : -1);
            slash_qs_add(&s, vals[i]);
        }
        qsort(vals, (size_t)n, sizeof vals[0], cmp);
        double bound = ldexp(1.0, (int)s.level - 7);
        for (uint32_t q = 0; q <= SLASH_QS_Q_SCALE; q += 125) {
            uint64_t rank = ((uint64_t)q * (uint64_t)n + SLASH_QS_Q_SCALE - 1) / SLASH_QS_Q_SCALE;
            double exact = vals[rank ? rank - 1 : 0];
            double got = slash_qs_quantile(&s, q);
            CHECK(fabs(got - exact) <= bound * fabs(exact));
            if (q == 0 || q == SLASH_QS_Q_SCALE)
                CHECK(got == exact); /* the extremes are exact */
        }
        fprintf(stderr, "  %d decades, n=%d: level %u, bound %.4f\n", decades[d], n, s.level, bound);
    }
}

TEST(nulls_are_skipped_and_nan_orders_above_every_number)
{
    static slash_qsketch s;
    slash_qs_zero(&s);
    CHECK(isnan(slash_qs_quantile(&s, 5000)));
    uint64_t null_bits = SLASH_QS_NULL_BITS;
    double null;
    memcpy(&null, &null_bits, 8);
    slash_qs_add(&s, null);
    CHECK(s.count == 0 && s.n == 0);
    slash_qs_add(&s, 1.0), slash_qs_add(&s, NAN), slash_qs_add(&s, 2.0);
    CHECK(slash_qs_quantile(&s, 0) == 1.0);
    CHECK(isnan(slash_qs_quantile(&s, SLASH_QS_Q_SCALE)));
    double mid = slash_qs_quantile(&s, 5000); /* rank 2 of 3: 2.0 */
    CHECK(fabs(mid - 2.0) <= 2.0 / 128);
}

/* the bound |answer - x| <= 2^(L-7) |x| at x = 0: zero exactly (the
 * bucket of zero also holds the tiniest denormals, whose midpoint is not 0) */
TEST(a_quantile_that_is_zero_is_answered_zero)
{
    static slash_qsketch s;
    slash_qs_zero(&s);
    static const double v[] = {-3.0, -0.0, 0.0, 0.0, 2.0};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        slash_qs_add(&s, v[i]);
    for (uint32_t q = 4001; q <= 8000; q += 333) /* ranks 3 and 4 of 5 */
        CHECK(slash_qs_quantile(&s, q) == 0.0);
}

TEST(quantile_kinds_in_the_crdt_table)
{
    slash_agg_kind k = (slash_agg_kind)(SLASH_AGG_QUANTILE + 9900);
    uint32_t q = 0;
    CHECK(slash_agg_quantile(k, &q) && q == 9900);
    CHECK(slash_crdt_size(k) == sizeof(slash_qsketch));
    CHECK(slash_crdt_input_is_f64(k) && slash_crdt_result_is_f64(k));
    CHECK(slash_crdt_size((slash_agg_kind)(SLASH_AGG_QUANTILE + SLASH_QS_Q_SCALE + 1)) == 0);
    static slash_qsketch s;
    slash_crdt_zero(k, &s);
    for (int i = 1; i <= 100; i++) {
        double v = i;
        slash_crdt_update(k, &s, &v);
    }
    double out;
    slash_crdt_result(k, &s, &out);
    CHECK(fabs(out - 99.0) <= 99.0 / 128);
}

/* Adding values many at a time (their bucket keys sorted, one merge pass)
 * leaves the sketch one add at a time leaves, byte for byte: batches of
 * every size (a few into a large sketch take the search path), nulls, NaNs
 * of either sign, both zeros, infinities, collapses to higher levels inside
 * a batch, and bucket counts saturating at 2^32 - 1. */
TEST(adding_many_equals_adding_one_at_a_time_byte_for_byte)
{
    static slash_qsketch one, many;
    static double v[3 * SLASH_QS_BATCH];
    uint64_t null_bits = SLASH_QS_NULL_BITS, nnan_bits = UINT64_C(0xfff8000000000001);
    double null, nnan;
    memcpy(&null, &null_bits, 8), memcpy(&nnan, &nnan_bits, 8);
    const double special[] = {null, NAN, nnan, -0.0, 0.0, INFINITY, -INFINITY, 5e-324};
    uint64_t rng = 17;
    for (int round = 0; round < 300; round++) {
        slash_qs_zero(&one);
        if (round % 10 == 0) { /* counts near saturation */
            slash_qs_add(&one, 1.0), slash_qs_add(&one, 2.0);
            one.cnt[0] = one.cnt[1] = UINT32_MAX - 3;
        }
        many = one;
        const int decades = round % 3 == 0 ? 300 : round % 3 == 1 ? 2 : 12; /* 300: collapses */
        for (int batches = 0; batches < 10; batches++) {
            const uint32_t m = (uint32_t)(unit_rng(&rng) % (round % 2 ? 9 : 3 * SLASH_QS_BATCH));
            for (uint32_t i = 0; i < m; i++) {
                const uint64_t r = unit_rng(&rng);
                v[i] = r % 11 == 0 ? special[(r >> 8) % 8] : round % 10 == 0 && r % 3 ? (double)(1 + r % 2)
                                                                                     : value(&rng, decades);
            }
            for (uint32_t i = 0; i < m; i++)
                slash_qs_add(&one, v[i]);
            slash_qs_add_many(&many, v, m);
            CHECK(memcmp(&one, &many, sizeof one) == 0);
        }
    }
}

int main(void)
{
    RUN(adding_many_equals_adding_one_at_a_time_byte_for_byte);
    RUN(merge_is_commutative_and_associative_through_collapses);
    RUN(merged_parts_equal_the_sketch_of_the_whole);
    RUN(quantiles_within_the_stated_relative_error);
    RUN(nulls_are_skipped_and_nan_orders_above_every_number);
    RUN(a_quantile_that_is_zero_is_answered_zero);
    RUN(quantile_kinds_in_the_crdt_table);
    return UNIT_DONE();
}
