/* test_hll.c - HyperLogLog sketches: the merge is commutative, associative
 * and idempotent with zero as identity, a merge of parts equals the sketch
 * of the whole, the estimate stays within the stated error over the whole
 * range of cardinalities, and hashes are the same in every process. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "slash/crdt.h"
#include "slash/hll.h"
#include "unit.h"

#define P 9
#define M (1u << P)

/* a sketch of n values drawn from [0, range) */
static void sketch(uint8_t *reg, uint64_t *rng, int n, int64_t range)
{
    memset(reg, 0, M);
    for (int i = 0; i < n; i++)
        slash_hll_add(reg, P, slash_hll_hash_i64((int64_t)(unit_rng(rng) % (uint64_t)range)));
}

/* A register takes the largest rank of its hashes: 1 + the leading zeros
 * of the bits below the index, 64 - p + 1 when they are all zero; at every
 * precision, for a hash with its highest low bit at every position and
 * none, into a register holding less, as much and more; and the null 0
 * changes nothing. The definition, written out with its own branches. */
TEST(a_register_keeps_the_largest_rank_at_every_precision)
{
    static uint8_t reg[1u << SLASH_HLL_P_MAX];
    for (unsigned p = SLASH_HLL_P_MIN; p <= SLASH_HLL_P_MAX; p++) {
        const size_t m = (size_t)1 << p;
        for (int bit = -1; bit < (int)(64 - p); bit++) {
            const uint64_t idx = (uint64_t)(bit + 7) % m;
            const uint64_t low = bit < 0 ? 0 : UINT64_C(1) << bit;
            const uint64_t h = idx << (64 - p) | low | (bit > 2 ? low >> 3 : 0);
            const uint8_t rank = (uint8_t)(bit < 0 ? 64 - p + 1 : 64 - p - (unsigned)bit);
            for (int held = -1; held <= 1; held++) {
                memset(reg, 0, m);
                const int before = (int)rank + held;
                reg[idx] = (uint8_t)(before < 0 ? 0 : before);
                slash_hll_add(reg, p, h);
                CHECK(reg[idx] == (held < 0 ? rank : (uint8_t)before));
                slash_hll_add(reg, p, 0);
                CHECK(reg[idx] == (held < 0 ? rank : (uint8_t)before));
                size_t others = 0;
                for (size_t r = 0; r < m; r++)
                    others += r != idx && reg[r];
                CHECK(others == 0);
            }
        }
    }
}

TEST(merge_is_commutative_associative_idempotent)
{
    uint64_t rng = 1;
    static uint8_t a[M], b[M], c[M], x[M], y[M], z[M], zero[M];
    for (int round = 0; round < 200; round++) {
        sketch(a, &rng, (int)(unit_rng(&rng) % 300), 500);
        sketch(b, &rng, (int)(unit_rng(&rng) % 300), 500);
        sketch(c, &rng, (int)(unit_rng(&rng) % 300), 500);
        memcpy(x, a, M), slash_hll_merge(x, b, P);
        memcpy(y, b, M), slash_hll_merge(y, a, P);
        CHECK(memcmp(x, y, M) == 0);
        slash_hll_merge(x, c, P);
        memcpy(y, b, M), slash_hll_merge(y, c, P);
        memcpy(z, a, M), slash_hll_merge(z, y, P);
        CHECK(memcmp(x, z, M) == 0);
        memcpy(y, a, M), slash_hll_merge(y, a, P);
        CHECK(memcmp(y, a, M) == 0);
        memset(zero, 0, M);
        memcpy(y, a, M), slash_hll_merge(y, zero, P);
        CHECK(memcmp(y, a, M) == 0);
    }
}

TEST(merged_parts_equal_the_sketch_of_the_whole)
{
    static uint8_t whole[M], left[M], right[M];
    memset(whole, 0, M), memset(left, 0, M), memset(right, 0, M);
    uint64_t rng = 9;
    for (int i = 0; i < 5000; i++) {
        uint64_t h = slash_hll_hash_i64((int64_t)(unit_rng(&rng) % 3000));
        slash_hll_add(whole, P, h);
        slash_hll_add(unit_rng(&rng) & 1 ? left : right, P, h);
    }
    slash_hll_merge(left, right, P);
    CHECK(memcmp(left, whole, M) == 0);
}

/* Over many independent sketches, the relative error of the estimate has a
 * mean near 0 (unbiased) and a standard deviation within 10 % of the stated
 * 1.04 / sqrt(m), at every cardinality from far below m to far above it
 * (below m collisions of registers are what errs, as in linear counting). */
TEST(estimate_error_is_the_stated_one_at_every_cardinality)
{
    static const int ns[] = {10, 100, 400, 2000, 20000, 200000};
    static uint8_t reg[M];
    const double stated = 1.04 / sqrt((double)M);
    uint64_t rng = 77;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int runs = ns[k] >= 20000 ? 60 : 300;
        double sum = 0, sq = 0;
        for (int r = 0; r < runs; r++) {
            memset(reg, 0, M);
            uint64_t base = unit_rng(&rng);
            for (int i = 0; i < ns[k]; i++) /* n distinct values, each added twice */
                for (int rep = 0; rep < 2; rep++)
                    slash_hll_add(reg, P, slash_hll_hash_i64((int64_t)(base + (uint64_t)i)));
            double e = slash_hll_estimate(reg, P) / ns[k] - 1.0;
            sum += e, sq += e * e;
        }
        double mean = sum / runs, sd = sqrt(sq / runs - mean * mean);
        CHECK(fabs(mean) < 3 * stated / sqrt((double)runs) + 0.005);
        CHECK(sd < 1.1 * stated);
        fprintf(stderr, "  n=%d: mean error %+.4f, sd %.4f (stated %.4f)\n", ns[k], mean, sd, stated);
    }
    memset(reg, 0, M);
    CHECK(slash_hll_estimate(reg, P) == 0.0);
    slash_hll_add(reg, P, 0); /* a null */
    CHECK(slash_hll_estimate(reg, P) == 0.0);
}

TEST(hashes_are_fixed_functions_of_the_value)
{
    /* pinned: a sketch written by one process is read by another */
    CHECK(slash_hll_hash_i64(42) == slash_hll_hash_i64(42));
    CHECK(slash_hll_hash_i64(0) != 0 && slash_hll_hash_bytes((const uint8_t *)"", 0) != 0);
    CHECK(slash_hll_hash_f64(-0.0) == slash_hll_hash_f64(0.0));
    CHECK(slash_hll_hash_f64(NAN) == slash_hll_hash_f64(-nan("5")));
    CHECK(slash_hll_hash_bytes((const uint8_t *)"abcdefghi", 9) !=
          slash_hll_hash_bytes((const uint8_t *)"abcdefgh", 8));
    CHECK(slash_hll_hash_i64(42) == UINT64_C(0xcb1311de759a757c));
    /* doubles: zeros, a NaN with a payload and of either sign, the ends */
    static const uint64_t payload_nan = UINT64_C(0x7ff0000000000001);
    double pn;
    memcpy(&pn, &payload_nan, 8);
    const double d[] = {0.0, -0.0, 1.5, -2.25, INFINITY, -INFINITY, NAN, -NAN, pn, DBL_MIN,
                        -DBL_MAX, 5e-324};
    const uint64_t want[] = {
        UINT64_C(0xa5d5c4fa2aa7018b), UINT64_C(0xa5d5c4fa2aa7018b), UINT64_C(0xe5d4898eb44fb609),
        UINT64_C(0xdfb16735f7ed8094), UINT64_C(0x63df7100b53a2bbf), UINT64_C(0x20e8a2a2522d4877),
        UINT64_C(0x2616c92388b3d0db), UINT64_C(0x2616c92388b3d0db), UINT64_C(0x2616c92388b3d0db),
        UINT64_C(0xc9ba74e8d303af58), UINT64_C(0xf67f57c48e91fadb), UINT64_C(0x8182650fee540b8e)};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        CHECK(slash_hll_hash_f64(d[i]) == want[i]);
}

TEST(precision_from_relative_error_as_spark)
{
    CHECK(slash_hll_precision(0.05) == 9);
    CHECK(slash_hll_precision(0.02) == 12);
    CHECK(slash_hll_precision(0.01) == 14);
    CHECK(slash_hll_precision(0.39) == 4);
    CHECK(slash_hll_precision(0.0) == 0 && slash_hll_precision(1.5) == 0);
}

TEST(hll_kinds_in_the_crdt_table)
{
    slash_agg_kind k = (slash_agg_kind)(SLASH_AGG_HLL + P);
    CHECK(slash_agg_hll_p(k) == P);
    CHECK(slash_crdt_size(k) == M);
    CHECK(slash_crdt_size((slash_agg_kind)(SLASH_AGG_HLL + 3)) == 0);
    CHECK(slash_crdt_size((slash_agg_kind)(SLASH_AGG_HLL + 15)) == 0);
    CHECK(slash_crdt_size(SLASH_AGG_HLL) == 0);
    static uint8_t reg[M];
    slash_crdt_zero(k, reg);
    for (int64_t v = 0; v < 50; v++) {
        uint64_t h = slash_hll_hash_i64(v);
        slash_crdt_update(k, reg, &h);
    }
    int64_t est;
    slash_crdt_result(k, reg, &est);
    CHECK(est >= 43 && est <= 57); /* within 3 stated standard errors */
}

int main(void)
{
    RUN(a_register_keeps_the_largest_rank_at_every_precision);
    RUN(merge_is_commutative_associative_idempotent);
    RUN(merged_parts_equal_the_sketch_of_the_whole);
    RUN(estimate_error_is_the_stated_one_at_every_cardinality);
    RUN(hashes_are_fixed_functions_of_the_value);
    RUN(precision_from_relative_error_as_spark);
    RUN(hll_kinds_in_the_crdt_table);
    return UNIT_DONE();
}
