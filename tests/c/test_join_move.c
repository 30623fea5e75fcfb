/* test_join_move.c - the hand-over of join partitions (join.h:
 * slash_join_partition_span, _span_prefix, _drop_partition, _import_*), as a
 * leadership move uses it: an old store fires its windows up to W and ships
 * each partition in small fragments of whole records to a new store that
 * already holds other rows of the same (window or session, key) sets and
 * held those partitions (emit_parts) while its own watermark moved on; the
 * new store's pairs together with the old store's are exactly the pairs of
 * one store that saw every row (tumbling and session windows, int and
 * string keys), none doubled or lost; the old store is left empty. A span
 * imported as another partition, or cut short, is refused and changes
 * nothing; rows of windows the old store already fired are dropped as late.
 */
#include "slash/join.h"
#include "unit.h"

#include <stdlib.h>

#define NJ 3000 /* rows per side */
#define NPARTS 4
#define W_SPLIT 4000 /* the old store fires up to here */
static int64_t jt[2][NJ], jk[2][NJ], jv[2][NJ], joffs[2][NJ + 1];
static double jf[2][NJ];
static uint8_t jkd[2][NJ * 8];

static void make_input(uint64_t seed)
{
    uint64_t s = seed;
    for (int side = 0; side < 2; side++) {
        size_t kd = 0;
        joffs[side][0] = 0;
        for (int i = 0; i < NJ; i++) {
            jt[side][i] = i * 3 + (int64_t)(unit_rng(&s) % 40);
            jk[side][i] = (int64_t)(unit_rng(&s) % 61);
            jv[side][i] = (int64_t)(unit_rng(&s) % 100000) * 2 + side;
            jf[side][i] = (double)jv[side][i] / 8;
            kd += (size_t)snprintf((char *)jkd[side] + kd, 8, "k%lld", (long long)jk[side][i]);
            joffs[side][i + 1] = (int64_t)kd;
        }
    }
}

static slash_join_config jconfig(slash_window_kind kind, slash_key_type kt)
{
    slash_join_config c;
    memset(&c, 0, sizeof c);
    slash_window_init(&c.window, kind, kind == SLASH_WINDOW_SESSION ? 150 : 500, 0);
    c.key_type = kt;
    c.partitions = NPARTS;
    c.ncols[0] = 2;
    c.cols[0][0] = SLASH_JOIN_I64;
    c.cols[0][1] = SLASH_JOIN_F64;
    c.ncols[1] = 1;
    c.cols[1][0] = SLASH_JOIN_I64;
    c.log_reserve = (size_t)1 << 24;
    return c;
}

/* Row i of `side` alone, as a batch. */
static slash_join_batch jrow(const slash_join_config *c, int side, size_t i)
{
    slash_join_batch b;
    memset(&b, 0, sizeof b);
    b.side = side ? SLASH_JOIN_RIGHT : SLASH_JOIN_LEFT;
    b.n = 1;
    b.times = jt[side] + i;
    if (c->key_type == SLASH_KEY_INT64) {
        b.keys = jk[side] + i;
    } else {
        b.key_offsets = joffs[side] + i;
        b.key_offsets_64 = 1;
        b.key_data = jkd[side];
    }
    b.columns[0] = jv[side] + i;
    if (side == 0)
        b.columns[1] = jf[side] + i;
    return b;
}

/* A digest of a join result, independent of row order. */
static uint64_t digest(const slash_join_result *r, size_t *rows)
{
    uint64_t d = 0;
    for (size_t i = 0; i < r->rows; i++) {
        uint64_t h = (uint64_t)r->window_start[i] * 31 + (uint64_t)r->window_end[i];
        if (r->keys) {
            h = h * 1000003 + (uint64_t)r->keys[i];
        } else {
            for (int64_t k = r->key_offsets[i]; k < r->key_offsets[i + 1]; k++)
                h = h * 131 + r->key_data[k];
        }
        for (int side = 0; side < 2; side++)
            for (uint32_t j = 0; j < r->ncols[side]; j++) {
                uint64_t v;
                memcpy(&v, (uint8_t *)r->columns[side][j] + 8 * i, 8);
                h = (h ^ v) * 0x9E3779B97F4A7C15ull;
            }
        d += h ^ (h >> 29);
    }
    *rows += r->rows;
    return d;
}

static uint64_t emit_digest(slash_join *s, int64_t up_to, const uint8_t *skip, size_t *rows)
{
    slash_join_result *r = NULL;
    CHECK_OK(slash_join_emit_parts(s, up_to, skip, &r));
    uint64_t d = r ? digest(r, rows) : 0;
    slash_join_result_free(r);
    return d;
}

/* Ships partition p of `from` into `to` in fragments of whole records of at
 * most `max` bytes, then drops it from `from`. */
static void hand_over(slash_join *from, slash_join *to, uint32_t p, size_t max)
{
    const void *span;
    size_t len;
    int64_t emitted;
    CHECK_OK(slash_join_partition_span(from, p, &span, &len, &emitted));
    CHECK(emitted == W_SPLIT);
    slash_join_import *im;
    CHECK_OK(slash_join_import_begin(to, p, emitted, len, &im));
    size_t frags = 0;
    for (size_t off = 0; off < len;) {
        size_t frag = slash_join_span_prefix((const uint8_t *)span + off, len - off, max);
        CHECK(frag > 0);
        if (!frag)
            break;
        CHECK_OK(slash_join_import_add(to, im, (const uint8_t *)span + off, frag));
        off += frag, frags++;
    }
    CHECK(len < 2 * max || frags > 1); /* a chunk's group may lie in another fragment */
    CHECK_OK(slash_join_import_end(to, im));
    CHECK_OK(slash_join_drop_partition(from, p));
}

/* Row i of a side goes to the new store when odd and at or after the split
 * (a new-map delta: only windows the old store has not fired), else to the
 * old one; the reference store takes every row. */
static void moved_partitions_merge_into_held_ones(slash_window_kind kind, slash_key_type kt)
{
    make_input(kind * 7 + kt + 11);
    slash_join_config c = jconfig(kind, kt);
    slash_join *old, *neu, *ref;
    CHECK_OK(slash_join_open(&c, &old));
    CHECK_OK(slash_join_open(&c, &neu));
    CHECK_OK(slash_join_open(&c, &ref));
    size_t to_new = 0;
    for (size_t i = 0; i < NJ; i++)
        for (int side = 0; side < 2; side++) {
            slash_join_batch b = jrow(&c, side, i);
            bool later = (i & 1) && jt[side][i] >= W_SPLIT;
            to_new += later;
            CHECK_OK(slash_join_update(later ? neu : old, &b));
            CHECK_OK(slash_join_update(ref, &b));
        }
    CHECK(to_new > NJ / 2);
    uint8_t hold[NPARTS];
    memset(hold, 1, sizeof hold);
    size_t rows_old = 0, rows_new = 0, rows_ref = 0, none = 0;
    /* the new store holds every partition while its watermark moves past
     * W_SPLIT: it fires nothing of them */
    uint64_t d = emit_digest(neu, W_SPLIT + 2000, hold, &none);
    CHECK(none == 0 && d == 0);
    CHECK(slash_join_watermark(neu) == W_SPLIT + 2000);
    d = emit_digest(old, W_SPLIT, NULL, &rows_old);
    CHECK(rows_old > 1000);
    for (uint32_t p = 0; p < NPARTS; p++)
        hand_over(old, neu, p, 2048);
    d += emit_digest(neu, INT64_MAX, NULL, &rows_new);
    uint64_t dref = emit_digest(ref, INT64_MAX, NULL, &rows_ref);
    CHECK(rows_new > 1000);
    CHECK(rows_old + rows_new == rows_ref);
    CHECK(d == dref);
    slash_join_stats st;
    slash_join_get_stats(neu, &st);
    CHECK(st.late == 0 && st.groups == 0);
    slash_join_get_stats(old, &st); /* everything was handed over */
    CHECK(st.groups == 0 && st.rows[0] + st.rows[1] == 0);
    size_t left = 0;
    (void)emit_digest(old, INT64_MAX, NULL, &left);
    CHECK(left == 0);
    slash_join_close(old);
    slash_join_close(neu);
    slash_join_close(ref);
}

TEST(hand_over_merges_tumbling_int_keys)
{
    moved_partitions_merge_into_held_ones(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64);
}
TEST(hand_over_merges_tumbling_string_keys)
{
    moved_partitions_merge_into_held_ones(SLASH_WINDOW_TUMBLING, SLASH_KEY_BYTES);
}
TEST(hand_over_merges_session_int_keys)
{
    moved_partitions_merge_into_held_ones(SLASH_WINDOW_SESSION, SLASH_KEY_INT64);
}
TEST(hand_over_merges_session_string_keys)
{
    moved_partitions_merge_into_held_ones(SLASH_WINDOW_SESSION, SLASH_KEY_BYTES);
}

/* A store of every row of the input. */
static slash_join *all_rows(const slash_join_config *c)
{
    slash_join *s;
    CHECK_OK(slash_join_open(c, &s));
    for (size_t i = 0; i < NJ; i++)
        for (int side = 0; side < 2; side++) {
            slash_join_batch b = jrow(c, side, i);
            CHECK_OK(slash_join_update(s, &b));
        }
    return s;
}

TEST(a_span_imported_as_another_partition_or_cut_short_is_refused)
{
    make_input(3);
    slash_join_config c = jconfig(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64);
    slash_join *s = all_rows(&c), *t = all_rows(&c);
    slash_join_stats before, after;
    slash_join_get_stats(t, &before);
    const void *span;
    size_t len;
    int64_t emitted;
    CHECK_OK(slash_join_partition_span(s, 1, &span, &len, &emitted));
    CHECK(len > 64);
    slash_join_import *im;
    CHECK_OK(slash_join_import_begin(t, 2, emitted, len, &im));
    CHECK_OK(slash_join_import_add(t, im, span, len));
    CHECK_ST(slash_join_import_end(t, im), SLASH_EPROTO);
    CHECK(strstr(slash_last_error(), "another partition") != NULL);
    slash_join_import_abort(im);
    CHECK_OK(slash_join_import_begin(t, 1, emitted, len, &im));
    CHECK_OK(slash_join_import_add(t, im, span, len / 2));
    CHECK_ST(slash_join_import_add(t, im, span, len), SLASH_EPROTO); /* past the span */
    CHECK_ST(slash_join_import_end(t, im), SLASH_EPROTO);           /* cut short */
    slash_join_import_abort(im);
    slash_join_get_stats(t, &after);
    CHECK(after.groups == before.groups && after.rows[0] == before.rows[0] &&
          after.rows[1] == before.rows[1]);
    CHECK_ST(slash_join_partition_span(s, NPARTS, &span, &len, &emitted), SLASH_ERANGE);
    CHECK_ST(slash_join_import_begin(t, NPARTS, 0, 8, &im), SLASH_ERANGE);
    CHECK_ST(slash_join_drop_partition(t, NPARTS), SLASH_ERANGE);
    slash_join_close(s);
    slash_join_close(t);
}

TEST(rows_of_windows_the_old_store_fired_are_late_at_the_new_one)
{
    make_input(4);
    slash_join_config c = jconfig(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64);
    slash_join *old = all_rows(&c), *neu = all_rows(&c);
    size_t rows = 0;
    (void)emit_digest(old, W_SPLIT, NULL, &rows);
    slash_join_stats st;
    slash_join_get_stats(neu, &st);
    uint64_t held_before = st.rows[0] + st.rows[1];
    for (uint32_t p = 0; p < NPARTS; p++)
        hand_over(old, neu, p, 4096);
    /* the new store's own rows of windows ending by W_SPLIT: fired by the old */
    uint64_t early = 0;
    for (int side = 0; side < 2; side++)
        for (size_t i = 0; i < NJ; i++)
            early += jt[side][i] < W_SPLIT;
    slash_join_get_stats(neu, &st);
    CHECK(st.late == early);
    CHECK(st.rows[0] + st.rows[1] == 2 * (held_before - early));
    size_t none = 0;
    uint8_t skip[NPARTS] = {0};
    (void)emit_digest(neu, W_SPLIT, skip, &none);
    CHECK(none == 0); /* nothing closed at W_SPLIT is fired twice */
    slash_join_close(old);
    slash_join_close(neu);
}

int main(void)
{
    RUN(hand_over_merges_tumbling_int_keys);
    RUN(hand_over_merges_tumbling_string_keys);
    RUN(hand_over_merges_session_int_keys);
    RUN(hand_over_merges_session_string_keys);
    RUN(a_span_imported_as_another_partition_or_cut_short_is_refused);
    RUN(rows_of_windows_the_old_store_fired_are_late_at_the_new_one);
    return UNIT_DONE();
}
