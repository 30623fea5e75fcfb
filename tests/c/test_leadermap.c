/* test_leadermap.c - the versioned leader map (leadermap.h) and moving a
 * partition's state between stores (ssb export/drop/import): the default
 * map is p mod n, versions apply in order only, a bad move changes nothing,
 * and a partition imported with the watermark its old store emitted it to
 * still emits the windows the new store's own watermark already passed; an
 * import fragment by fragment, with records merged into the partition
 * between fragments, emits what one store that saw every update emits; a
 * bad fragment or a record of another partition is refused. */
#include "slash/leadermap.h"
#include "slash/ssb.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

TEST(default_map_is_partition_mod_n)
{
    slash_leadermap m;
    CHECK_OK(slash_leadermap_init(&m, 10, 3));
    for (uint32_t p = 0; p < 10; p++)
        CHECK(slash_leadermap_leader(&m, p) == p % 3);
    CHECK(m.version == 0);
    CHECK(slash_leadermap_count(&m, 0) == 4 && slash_leadermap_count(&m, 2) == 3);
    slash_leadermap_free(&m);
    slash_leadermap_free(&m); /* twice is fine */
}

TEST(fewer_partitions_than_ranks_is_refused)
{
    slash_leadermap m;
    CHECK_ST(slash_leadermap_init(&m, 2, 3), SLASH_EINVAL);
    CHECK_ST(slash_leadermap_init(&m, 2, 0), SLASH_EINVAL);
}

TEST(moves_apply_in_version_order_and_bad_ones_change_nothing)
{
    slash_leadermap m;
    CHECK_OK(slash_leadermap_init(&m, 8, 2));
    uint32_t parts[2] = {1, 3}, ranks[2] = {0, 0};
    CHECK_ST(slash_leadermap_apply(&m, 2, parts, ranks, 2), SLASH_ESTATE); /* skips version 1 */
    CHECK_OK(slash_leadermap_apply(&m, 1, parts, ranks, 2));
    CHECK(m.version == 1 && slash_leadermap_leader(&m, 1) == 0 && slash_leadermap_leader(&m, 3) == 0);
    CHECK(slash_leadermap_count(&m, 0) == 6);
    uint32_t dup[2] = {5, 5}, bad_rank[2] = {1, 2}, bad_part[1] = {8};
    CHECK_ST(slash_leadermap_apply(&m, 2, dup, ranks, 2), SLASH_EINVAL);
    CHECK_ST(slash_leadermap_apply(&m, 2, parts, bad_rank, 2), SLASH_EINVAL);
    CHECK_ST(slash_leadermap_apply(&m, 2, bad_part, ranks, 1), SLASH_EINVAL);
    CHECK(m.version == 1 && slash_leadermap_leader(&m, 5) == 1 && slash_leadermap_leader(&m, 1) == 0);
    uint32_t all[8] = {1, 1, 1, 1, 1, 1, 1, 1}, wrong[8] = {0, 0, 0, 0, 0, 0, 0, 2};
    CHECK_ST(slash_leadermap_set(&m, 0, wrong), SLASH_EINVAL);
    CHECK(slash_leadermap_leader(&m, 0) == 0);
    CHECK_OK(slash_leadermap_set(&m, 0, all));
    CHECK(slash_leadermap_count(&m, 1) == 8 && m.version == 0);
    slash_leadermap_free(&m);
}

static slash_ssb *count_store(uint32_t parts)
{
    slash_ssb_config c;
    memset(&c, 0, sizeof c);
    CHECK_OK(slash_window_init(&c.window, SLASH_WINDOW_TUMBLING, 10, 10));
    c.key_type = SLASH_KEY_INT64;
    c.partitions = parts;
    c.naggs = 1;
    c.aggs[0] = SLASH_AGG_COUNT;
    slash_ssb *s = NULL;
    CHECK_OK(slash_ssb_open(&c, &s));
    return s;
}

static uint64_t total_count(const slash_ssb_result *r)
{
    uint64_t t = 0;
    for (size_t i = 0; r && i < r->rows; i++)
        t += ((const uint64_t *)r->columns[0])[i];
    return t;
}

/* One partition, so every key lands in partition 0. */
TEST(a_handed_over_partition_emits_windows_past_the_new_stores_watermark)
{
    slash_ssb *old = count_store(1), *neu = count_store(1);
    int64_t t[3] = {5, 15, 25}, k[3] = {7, 7, 7};
    slash_ssb_batch b = {.n = 3, .times = t, .keys = k};
    CHECK_OK(slash_ssb_update(old, &b));
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(old, 10, &r)); /* [0, 10) emitted by the old leader */
    CHECK(r && r->rows == 1);
    slash_ssb_result_free(r);
    CHECK_OK(slash_ssb_emit(neu, 30, &r)); /* the new store already passed 30 */
    slash_ssb_result_free(r);
    uint8_t *buf = NULL;
    size_t len = 0;
    int64_t emitted = 0;
    CHECK_OK(slash_ssb_export_partition(old, 0, &buf, &len, &emitted));
    CHECK(emitted == 10 && len > 0);
    CHECK_OK(slash_ssb_drop_partition(old, 0));
    CHECK_OK(slash_ssb_emit(old, INT64_MAX, &r));
    CHECK(r && r->rows == 0); /* dropped: nothing left at the old leader */
    slash_ssb_result_free(r);
    CHECK_OK(slash_ssb_import_partition(neu, 0, emitted, buf, len));
    CHECK_OK(slash_ssb_emit(neu, 30, &r)); /* [10, 20) and [20, 30): not late, not lost */
    CHECK(r && r->rows == 2 && total_count(r) == 2);
    slash_ssb_result_free(r);
    free(buf);
    slash_ssb_close(old);
    slash_ssb_close(neu);
}

TEST(emit_parts_holds_a_partition_back_until_released)
{
    slash_ssb *s = count_store(1);
    int64_t t[2] = {1, 2}, k[2] = {3, 4};
    slash_ssb_batch b = {.n = 2, .times = t, .keys = k};
    CHECK_OK(slash_ssb_update(s, &b));
    uint8_t hold = 1;
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit_parts(s, 100, &hold, &r));
    CHECK(r && r->rows == 0);
    slash_ssb_result_free(r);
    CHECK_OK(slash_ssb_emit_parts(s, 100, NULL, &r));
    CHECK(r && r->rows == 2);
    slash_ssb_result_free(r);
    slash_ssb_close(s);
}

/* The counts of a result in a dense array, cell (window start / 10) * KEYS
 * + key (0: no row), checking each (window, key) comes once. */
enum { KEYS = 600, STARTS = 10 };
static void count_rows(const slash_ssb_result *r, uint64_t *cells)
{
    for (size_t i = 0; r && i < r->rows; i++) {
        int64_t w = r->window_start[i] / 10, k = r->keys[i];
        CHECK(w >= 0 && w < STARTS && k >= 0 && k < KEYS);
        CHECK(cells[w * KEYS + k] == 0); /* each (window, key) once */
        cells[w * KEYS + k] = ((const uint64_t *)r->columns[0])[i];
    }
}

static void push_keys(slash_ssb *s, int64_t t, int64_t k0, int64_t k1)
{
    int64_t ts[KEYS], ks[KEYS];
    size_t n = 0;
    for (int64_t k = k0; k < k1; k++)
        ts[n] = t, ks[n++] = k;
    slash_ssb_batch b = {.n = n, .times = ts, .keys = ks};
    CHECK_OK(slash_ssb_update(s, &b));
}

/* One partition, small fragments: the old store's log (with the records of
 * the window it emitted FREED in it) goes over in ~40 pieces cut at record
 * boundaries; the new store merges updates of the same partition before
 * the import and between its fragments (new-map deltas), and emits at the
 * end exactly the windows a store that saw every update emits after 10. */
TEST(an_import_in_fragments_merges_with_updates_made_meanwhile)
{
    slash_ssb *old = count_store(1), *neu = count_store(1), *ref = count_store(1);
    for (int64_t t = 5; t < 40; t += 10) { /* windows [0,10) .. [30,40): every key */
        push_keys(old, t, 0, KEYS);
        push_keys(ref, t, 0, KEYS);
    }
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(old, 10, &r)); /* [0, 10) emitted by the old store */
    slash_ssb_result_free(r);
    CHECK_OK(slash_ssb_emit(ref, 10, &r));
    slash_ssb_result_free(r);
    push_keys(neu, 35, 0, KEYS / 2); /* a new-map delta before the hand-over */
    push_keys(ref, 35, 0, KEYS / 2);
    const void *span;
    size_t len;
    int64_t emitted;
    CHECK_OK(slash_ssb_partition_span(old, 0, &span, &len, &emitted));
    CHECK(emitted == 10 && len > 0);
    slash_ssb_import *im = NULL;
    CHECK_OK(slash_ssb_import_begin(neu, 0, emitted, len, &im));
    const uint8_t *p = span;
    size_t off = 0, frags = 0;
    while (off < len) {
        size_t f = slash_ssb_span_prefix(p + off, len - off, len / 40 + 64);
        CHECK(f > 0);
        uint8_t *copy = malloc(f); /* as from a channel buffer */
        memcpy(copy, p + off, f);
        CHECK_OK(slash_ssb_import_add(neu, im, copy, f));
        free(copy);
        off += f;
        if (++frags % 8 == 0) { /* meanwhile, more of the partition's updates */
            push_keys(neu, 25, (int64_t)frags, (int64_t)frags + 50);
            push_keys(ref, 25, (int64_t)frags, (int64_t)frags + 50);
        }
    }
    CHECK(frags >= 30);
    CHECK_OK(slash_ssb_import_end(neu, im));
    uint64_t *got = calloc(STARTS * KEYS, 8), *want = calloc(STARTS * KEYS, 8);
    CHECK_OK(slash_ssb_emit(neu, 100, &r));
    count_rows(r, got);
    size_t rows = r->rows;
    slash_ssb_result_free(r);
    CHECK_OK(slash_ssb_emit(ref, 100, &r));
    count_rows(r, want);
    CHECK(rows == r->rows && rows == 3 * KEYS);
    slash_ssb_result_free(r);
    CHECK(memcmp(got, want, STARTS * KEYS * 8) == 0);
    free(got);
    free(want);
    slash_ssb_close(old);
    slash_ssb_close(neu);
    slash_ssb_close(ref);
}

/* A fragment that is not whole records, or a record whose key belongs to
 * another partition, fails the import; the store keeps what it had. */
TEST(a_bad_import_fragment_is_refused_and_changes_nothing)
{
    slash_ssb *old = count_store(2), *neu = count_store(2);
    push_keys(old, 5, 0, 100);
    push_keys(neu, 5, 0, 100);
    const void *span;
    size_t len;
    int64_t emitted;
    CHECK_OK(slash_ssb_partition_span(old, 0, &span, &len, &emitted));
    CHECK(len > 16);
    slash_ssb_import *im = NULL;
    CHECK_OK(slash_ssb_import_begin(neu, 0, emitted, len, &im));
    CHECK_ST(slash_ssb_import_add(neu, im, span, len - 8), SLASH_EPROTO); /* cut record */
    slash_ssb_import_abort(im);
    CHECK_OK(slash_ssb_import_begin(neu, 1, emitted, len, &im)); /* partition 0's records */
    CHECK_ST(slash_ssb_import_add(neu, im, span, len), SLASH_EPROTO);
    slash_ssb_import_abort(im);
    slash_ssb_import_abort(NULL);
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(neu, 100, &r));
    CHECK(r && r->rows == 100 && total_count(r) == 100);
    slash_ssb_result_free(r);
    slash_ssb_close(old);
    slash_ssb_close(neu);
}

int main(void)
{
    RUN(default_map_is_partition_mod_n);
    RUN(fewer_partitions_than_ranks_is_refused);
    RUN(moves_apply_in_version_order_and_bad_ones_change_nothing);
    RUN(a_handed_over_partition_emits_windows_past_the_new_stores_watermark);
    RUN(emit_parts_holds_a_partition_back_until_released);
    RUN(an_import_in_fragments_merges_with_updates_made_meanwhile);
    RUN(a_bad_import_fragment_is_refused_and_changes_nothing);
    return UNIT_DONE();
}
