/* test_crdt.c - CRDT partials: zero is the identity of merge, merge is
 * commutative and associative, and merging partials of a split equals
 * updating with the whole input. */
#include <math.h>
#include <stdalign.h>
#include <stdlib.h>

#include "slash/crdt.h"
#include "unit.h"

static const slash_agg_kind KINDS[] = {SLASH_AGG_COUNT,   SLASH_AGG_SUM_I64, SLASH_AGG_SUM_F64,
                                       SLASH_AGG_MIN_I64, SLASH_AGG_MIN_F64, SLASH_AGG_MAX_I64,
                                       SLASH_AGG_MAX_F64, SLASH_AGG_AVG_I64, SLASH_AGG_AVG_F64};
#define NKINDS (sizeof KINDS / sizeof KINDS[0])

/* fills p with a partial of k updated with n random small integer values */
static void random_partial(slash_agg_kind k, void *p, int n)
{
    slash_crdt_zero(k, p);
    for (int i = 0; i < n; i++) {
        int64_t vi = rand() % 2001 - 1000;
        double vf = (double)vi;
        slash_crdt_update(k, p, slash_crdt_input_is_f64(k) ? (const void *)&vf : (const void *)&vi);
    }
}

TEST(zero_is_identity)
{
    for (size_t i = 0; i < NKINDS; i++) {
        uint8_t a[16], z[16], b[16];
        random_partial(KINDS[i], a, 5);
        memcpy(b, a, 16);
        slash_crdt_zero(KINDS[i], z);
        slash_crdt_merge(KINDS[i], b, z);
        CHECK(memcmp(a, b, slash_crdt_size(KINDS[i])) == 0);
        slash_crdt_merge(KINDS[i], z, a);
        CHECK(memcmp(a, z, slash_crdt_size(KINDS[i])) == 0);
    }
}

TEST(commutative_associative)
{
    srand(42);
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < NKINDS; i++) {
            slash_agg_kind k = KINDS[i];
            size_t sz = slash_crdt_size(k);
            uint8_t a[16], b[16], c[16], x[16], y[16];
            random_partial(k, a, rand() % 4);
            random_partial(k, b, rand() % 4);
            random_partial(k, c, rand() % 4);
            memcpy(x, a, sz), slash_crdt_merge(k, x, b);
            memcpy(y, b, sz), slash_crdt_merge(k, y, a);
            CHECK(memcmp(x, y, sz) == 0);
            /* (a+b)+c == a+(b+c) */
            slash_crdt_merge(k, x, c);
            memcpy(y, b, sz), slash_crdt_merge(k, y, c);
            uint8_t z[16];
            memcpy(z, a, sz), slash_crdt_merge(k, z, y);
            CHECK(memcmp(x, z, sz) == 0);
        }
    }
}

TEST(split_equals_whole)
{
    int64_t vals[] = {5, -3, 12, 7, 7, -20, 1};
    uint8_t whole[16], left[16], right[16];
    for (size_t i = 0; i < NKINDS; i++) {
        slash_agg_kind k = KINDS[i];
        slash_crdt_zero(k, whole), slash_crdt_zero(k, left), slash_crdt_zero(k, right);
        for (int j = 0; j < 7; j++) {
            double f = (double)vals[j];
            const void *v = slash_crdt_input_is_f64(k) ? (const void *)&f : (const void *)&vals[j];
            slash_crdt_update(k, whole, v);
            slash_crdt_update(k, j < 3 ? left : right, v);
        }
        slash_crdt_merge(k, left, right);
        CHECK(memcmp(left, whole, slash_crdt_size(k)) == 0);
    }
    int64_t out;
    slash_crdt_result(SLASH_AGG_MIN_I64, whole, &out);
    (void)out;
}

TEST(results)
{
    uint8_t p[16];
    int64_t v = 3, w = 4, r;
    double d;
    slash_crdt_zero(SLASH_AGG_AVG_I64, p);
    slash_crdt_result(SLASH_AGG_AVG_I64, p, &d);
    CHECK(isnan(d));
    slash_crdt_update(SLASH_AGG_AVG_I64, p, &v);
    slash_crdt_update(SLASH_AGG_AVG_I64, p, &w);
    slash_crdt_result(SLASH_AGG_AVG_I64, p, &d);
    CHECK(d == 3.5);
    slash_crdt_zero(SLASH_AGG_MAX_I64, p);
    slash_crdt_update(SLASH_AGG_MAX_I64, p, &v);
    slash_crdt_result(SLASH_AGG_MAX_I64, p, &r);
    CHECK(r == 3);
    int64_t big = INT64_MAX;
    slash_crdt_zero(SLASH_AGG_SUM_I64, p);
    slash_crdt_update(SLASH_AGG_SUM_I64, p, &big);
    slash_crdt_update(SLASH_AGG_SUM_I64, p, &v); /* wraps, no UB */
    slash_crdt_result(SLASH_AGG_SUM_I64, p, &r);
    CHECK(r == INT64_MIN + 2);
    CHECK(slash_crdt_result_is_f64(SLASH_AGG_AVG_I64) && !slash_crdt_result_is_f64(SLASH_AGG_SUM_I64));
    CHECK(slash_crdt_size((slash_agg_kind)77) == 0);
}

/* a double from a small set that holds what Spark orders specially: NaNs of
 * two payloads and signs, -0.0 and 0.0, the infinities */
static double special(void)
{
    static const double base[] = {1.0, -1.0, 0.0, -0.0, INFINITY, -INFINITY};
    int r = rand() % 8;
    if (r == 6) return NAN;
    if (r == 7) return -nan("7");
    return base[r];
}

static void special_partial(slash_agg_kind k, double *p, int n)
{
    uint8_t buf[16]; /* as large as any fixed-size partial: the kind is not known to the compiler */
    slash_crdt_zero(k, buf);
    for (int i = 0; i < n; i++) {
        double v = special();
        slash_crdt_update(k, buf, &v);
    }
    memcpy(p, buf, sizeof *p);
}

/* Checks on partials a, b, c of kind k (at most 16 bytes) that merge is
 * commutative and associative bit for bit, idempotent, and has zero as its
 * identity. */
static void check_semilattice(slash_agg_kind k, const void *a, const void *b, const void *c)
{
    size_t sz = slash_crdt_size(k);
    alignas(8) uint8_t x[16], y[16], z[16];
    memcpy(x, a, sz), slash_crdt_merge(k, x, b);
    memcpy(y, b, sz), slash_crdt_merge(k, y, a);
    CHECK(memcmp(x, y, sz) == 0); /* commutative */
    slash_crdt_merge(k, x, c);
    memcpy(y, b, sz), slash_crdt_merge(k, y, c);
    memcpy(z, a, sz), slash_crdt_merge(k, z, y);
    CHECK(memcmp(x, z, sz) == 0); /* associative */
    memcpy(y, a, sz), slash_crdt_merge(k, y, a);
    CHECK(memcmp(a, y, sz) == 0); /* idempotent */
    slash_crdt_zero(k, z);
    memcpy(y, a, sz), slash_crdt_merge(k, y, z);
    CHECK(memcmp(a, y, sz) == 0); /* zero is the identity */
}

TEST(float_min_max_merge_laws_with_nan_and_signed_zero)
{
    srand(7);
    static const slash_agg_kind FK[] = {SLASH_AGG_MIN_F64, SLASH_AGG_MAX_F64};
    for (int round = 0; round < 2000; round++) {
        for (size_t i = 0; i < 2; i++) {
            slash_agg_kind k = FK[i];
            double a, b, c;
            special_partial(k, &a, rand() % 4);
            special_partial(k, &b, rand() % 4);
            special_partial(k, &c, rand() % 4);
            check_semilattice(k, &a, &b, &c);
        }
    }
}

TEST(float_min_max_order_nan_above_every_number)
{
    double mn, mx, v[] = {1.0, NAN, 3.0};
    slash_crdt_zero(SLASH_AGG_MIN_F64, &mn), slash_crdt_zero(SLASH_AGG_MAX_F64, &mx);
    for (int i = 0; i < 3; i++)
        slash_crdt_update(SLASH_AGG_MIN_F64, &mn, &v[i]), slash_crdt_update(SLASH_AGG_MAX_F64, &mx, &v[i]);
    CHECK(mn == 1.0);
    CHECK(isnan(mx));
    double only = -nan("3");
    slash_crdt_zero(SLASH_AGG_MIN_F64, &mn), slash_crdt_zero(SLASH_AGG_MAX_F64, &mx);
    slash_crdt_update(SLASH_AGG_MIN_F64, &mn, &only), slash_crdt_update(SLASH_AGG_MAX_F64, &mx, &only);
    CHECK(isnan(mn) && isnan(mx));
    double inf = INFINITY;
    slash_crdt_zero(SLASH_AGG_MIN_F64, &mn);
    slash_crdt_update(SLASH_AGG_MIN_F64, &mn, &inf);
    CHECK(mn == INFINITY); /* a real +inf is not the empty min */
    double zeros[] = {0.0, -0.0};
    slash_crdt_zero(SLASH_AGG_MIN_F64, &mn), slash_crdt_zero(SLASH_AGG_MAX_F64, &mx);
    for (int i = 0; i < 2; i++)
        slash_crdt_update(SLASH_AGG_MIN_F64, &mn, &zeros[i]), slash_crdt_update(SLASH_AGG_MAX_F64, &mx, &zeros[i]);
    CHECK(mn == 0.0 && signbit(mn));
    CHECK(mx == 0.0 && !signbit(mx));
}

static const slash_agg_kind AT_KINDS[] = {SLASH_AGG_FIRST_I64, SLASH_AGG_FIRST_F64, SLASH_AGG_LAST_I64,
                                          SLASH_AGG_LAST_F64};

/* a first/last partial of n records with times and values from small sets,
 * so ties of time (and of value) are frequent */
static void at_partial(slash_agg_kind k, slash_at_value *p, int n)
{
    slash_crdt_zero(k, p);
    for (int i = 0; i < n; i++) {
        int64_t t = rand() % 4, vi = rand() % 5 - 2;
        double vf = rand() % 7 == 0 ? special() : (double)vi;
        slash_crdt_update_at(k, p, slash_crdt_input_is_f64(k) ? (const void *)&vf : (const void *)&vi, t);
    }
}

TEST(first_last_merge_laws_with_ties)
{
    srand(11);
    for (int round = 0; round < 3000; round++) {
        for (size_t i = 0; i < 4; i++) {
            slash_agg_kind k = AT_KINDS[i];
            slash_at_value a, b, c;
            at_partial(k, &a, rand() % 4);
            at_partial(k, &b, rand() % 4);
            at_partial(k, &c, rand() % 4);
            check_semilattice(k, &a, &b, &c);
        }
    }
}

TEST(first_last_take_the_value_at_the_earliest_and_latest_time)
{
    int64_t t[] = {5, 2, 9, 2, 9}, v[] = {50, 21, 90, 20, 91};
    slash_at_value f, l;
    slash_crdt_zero(SLASH_AGG_FIRST_I64, &f), slash_crdt_zero(SLASH_AGG_LAST_I64, &l);
    for (int i = 0; i < 5; i++) {
        slash_crdt_update_at(SLASH_AGG_FIRST_I64, &f, &v[i], t[i]);
        slash_crdt_update_at(SLASH_AGG_LAST_I64, &l, &v[i], t[i]);
    }
    int64_t rf, rl;
    slash_crdt_result(SLASH_AGG_FIRST_I64, &f, &rf), slash_crdt_result(SLASH_AGG_LAST_I64, &l, &rl);
    CHECK(rf == 20); /* time 2: the smaller of 21 and 20 */
    CHECK(rl == 91); /* time 9: the larger of 90 and 91 */
    double d[] = {1.0, NAN}, rd;
    slash_at_value lf;
    slash_crdt_zero(SLASH_AGG_LAST_F64, &lf);
    slash_crdt_update_at(SLASH_AGG_LAST_F64, &lf, &d[0], INT64_MIN); /* a real record at the zero's time */
    slash_crdt_result(SLASH_AGG_LAST_F64, &lf, &rd);
    CHECK(rd == 1.0);
    slash_crdt_update_at(SLASH_AGG_LAST_F64, &lf, &d[1], INT64_MIN);
    slash_crdt_result(SLASH_AGG_LAST_F64, &lf, &rd);
    CHECK(isnan(rd)); /* NaN orders above every number */
    CHECK(slash_crdt_needs_time(SLASH_AGG_FIRST_I64) && !slash_crdt_needs_time(SLASH_AGG_MIN_I64));
}

int main(void)
{
    RUN(first_last_merge_laws_with_ties);
    RUN(first_last_take_the_value_at_the_earliest_and_latest_time);
    RUN(zero_is_identity);
    RUN(commutative_associative);
    RUN(split_equals_whole);
    RUN(results);
    RUN(float_min_max_merge_laws_with_nan_and_signed_zero);
    RUN(float_min_max_order_nan_above_every_number);
    return UNIT_DONE();
}
