/* test_checkpoint_join.c - checkpoints of joins (checkpoint.h, kind 3, and
 * exec.h for JOIN executors): a join store written and read back, partition
 * by partition, emits exactly the pairs the original emits (tumbling and
 * session windows, int and string keys, a partly emitted store keeps its
 * emitted watermark); every truncation and every single bit flip of a blob
 * is refused with a detail and leaves the store empty; an aggregate blob is
 * refused by the join reader and a join blob by the aggregate reader; and a
 * join executor checkpointed mid-input and restored into groups of 1, 2 and
 * 3 executors gives the uninterrupted run's pairs, each once. */
#define _GNU_SOURCE
#include "slash/checkpoint.h"
#include "slash/exec.h"
#include "blob_faults.h"
#include "unit.h"

#include <pthread.h>
#include <stdlib.h>

#define NJ 3000 /* rows per side */
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

static slash_join_config jconfig(slash_window_kind kind, slash_key_type kt, uint32_t parts)
{
    slash_join_config c;
    memset(&c, 0, sizeof c);
    slash_window_init(&c.window, kind, kind == SLASH_WINDOW_SESSION ? 150 : 500, 0);
    c.key_type = kt;
    c.partitions = parts;
    c.ncols[0] = 2;
    c.cols[0][0] = SLASH_JOIN_I64;
    c.cols[0][1] = SLASH_JOIN_F64;
    c.ncols[1] = 1;
    c.cols[1][0] = SLASH_JOIN_I64;
    c.log_reserve = (size_t)1 << 24;
    return c;
}

static slash_join_batch jbatch(const slash_join_config *c, int side, size_t from, size_t n)
{
    slash_join_batch b;
    memset(&b, 0, sizeof b);
    b.side = side ? SLASH_JOIN_RIGHT : SLASH_JOIN_LEFT;
    b.n = n;
    b.times = jt[side] + from;
    if (c->key_type == SLASH_KEY_INT64) {
        b.keys = jk[side] + from;
    } else {
        b.key_offsets = joffs[side] + from;
        b.key_offsets_64 = 1;
        b.key_data = jkd[side];
    }
    b.columns[0] = jv[side] + from;
    if (side == 0)
        b.columns[1] = jf[side] + from;
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

static uint64_t emit_all(slash_join *s, size_t *rows)
{
    slash_join_result *r;
    CHECK_OK(slash_join_emit(s, INT64_MAX, &r));
    uint64_t d = digest(r, rows);
    slash_join_result_free(r);
    return d;
}

/* A join store with both sides' input, its windows up to `emitted` fired. */
static slash_join *filled(const slash_join_config *c, size_t n, int64_t emitted)
{
    slash_join *s;
    CHECK_OK(slash_join_open(c, &s));
    for (int side = 0; side < 2; side++) {
        slash_join_batch b = jbatch(c, side, 0, n);
        CHECK_OK(slash_join_update(s, &b));
    }
    slash_join_result *r;
    CHECK_OK(slash_join_emit(s, emitted, &r));
    slash_join_result_free(r);
    return s;
}

static void round_trip(slash_window_kind kind, slash_key_type kt)
{
    make_input(kind * 7 + kt);
    slash_join_config c = jconfig(kind, kt, 4);
    slash_join *s = filled(&c, NJ, 4000), *t;
    CHECK_OK(slash_join_open(&c, &t));
    for (uint32_t p = 0; p < c.partitions; p++) {
        uint8_t *blob;
        size_t len;
        CHECK_OK(slash_ckpt_write_join_partition(s, p, &blob, &len));
        CHECK_OK(slash_ckpt_read_join_partition(t, p, blob, len));
        free(blob);
    }
    CHECK(slash_join_watermark(t) == slash_join_watermark(s) && slash_join_watermark(s) == 4000);
    slash_join_stats a, b;
    slash_join_get_stats(s, &a);
    slash_join_get_stats(t, &b);
    CHECK(a.groups == b.groups && a.groups > 0);
    CHECK(a.rows[0] == b.rows[0] && a.rows[1] == b.rows[1]);
    size_t ra = 0, rb = 0;
    CHECK(emit_all(s, &ra) == emit_all(t, &rb));
    CHECK(ra == rb && ra > 1000);
    slash_join_close(s);
    slash_join_close(t);
}

TEST(join_round_trip_tumbling_int_keys) { round_trip(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64); }
TEST(join_round_trip_tumbling_string_keys) { round_trip(SLASH_WINDOW_TUMBLING, SLASH_KEY_BYTES); }
TEST(join_round_trip_session_int_keys) { round_trip(SLASH_WINDOW_SESSION, SLASH_KEY_INT64); }
TEST(join_round_trip_session_string_keys) { round_trip(SLASH_WINDOW_SESSION, SLASH_KEY_BYTES); }

/* The blob of partition 1 of a small session join with string keys. */
static void small_blob(slash_join_config *c, uint8_t **blob, size_t *len)
{
    make_input(5);
    *c = jconfig(SLASH_WINDOW_SESSION, SLASH_KEY_BYTES, 2);
    slash_join *s = filled(c, 60, INT64_MIN);
    CHECK_OK(slash_ckpt_write_join_partition(s, 1, blob, len));
    slash_join_close(s);
}

static bool refused_and_empty(const slash_join_config *c, uint32_t part, const uint8_t *p,
                              size_t len)
{
    slash_join *t;
    if (slash_join_open(c, &t) != SLASH_OK)
        return false;
    slash_status st = slash_ckpt_read_join_partition(t, part, p, len);
    slash_join_stats s;
    slash_join_get_stats(t, &s);
    bool ok = st == SLASH_EINVAL && s.groups == 0 && s.rows[0] + s.rows[1] == 0 &&
              strstr(slash_last_error(), "checkpoint");
    slash_join_close(t);
    return ok;
}

/* blob_faults_check over refused_and_empty for partition 1; ctx: the config */
static bool partition_1_refused(const void *ctx, const uint8_t *p, size_t len)
{
    return refused_and_empty(ctx, 1, p, len);
}

TEST(every_truncation_of_a_join_blob_is_refused)
{
    slash_join_config c;
    uint8_t *blob;
    size_t len;
    small_blob(&c, &blob, &len);
    CHECK(len > 300);
    CHECK(blob_faults_truncations(blob, len, partition_1_refused, &c) == 0);
    free(blob);
}

TEST(every_bit_flip_of_a_join_blob_is_refused)
{
    slash_join_config c;
    uint8_t *blob;
    size_t len;
    small_blob(&c, &blob, &len);
    CHECK(blob_faults_bit_flips(blob, len, partition_1_refused, &c) == 0);
    free(blob);
}

TEST(join_blob_refuses_other_columns_partition_and_kind)
{
    slash_join_config c;
    uint8_t *blob;
    size_t len;
    small_blob(&c, &blob, &len);
    slash_join_config other = c;
    other.cols[1][0] = SLASH_JOIN_F64; /* same row size, other meaning */
    CHECK(refused_and_empty(&other, 1, blob, len));
    CHECK(strstr(slash_last_error(), "fingerprint") != NULL);
    CHECK(refused_and_empty(&c, 0, blob, len));
    CHECK(strstr(slash_last_error(), "partition 1, not 0") != NULL);
    /* a join blob is no aggregate partition, and an aggregate blob no join partition */
    slash_ssb_config ac;
    memset(&ac, 0, sizeof ac);
    slash_window_init(&ac.window, SLASH_WINDOW_SESSION, 20, 0);
    ac.key_type = SLASH_KEY_BYTES;
    ac.partitions = 2;
    ac.naggs = 1;
    ac.aggs[0] = SLASH_AGG_COUNT;
    slash_ssb *a;
    CHECK_OK(slash_ssb_open(&ac, &a));
    CHECK_ST(slash_ckpt_read_partition(a, 1, blob, len), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "join partition blob where a partition blob") != NULL);
    uint8_t *ablob;
    size_t alen;
    CHECK_OK(slash_ckpt_write_partition(a, 1, &ablob, &alen));
    CHECK(refused_and_empty(&c, 1, ablob, alen));
    free(ablob);
    slash_ssb_close(a);
    /* a version outside what this build reads */
    blob[4] = SLASH_CKPT_VERSION + 1;
    CHECK(refused_and_empty(&c, 1, blob, len));
    CHECK(strstr(slash_last_error(), "format version") != NULL);
    free(blob);
}

/* ---- executors: checkpoint a one-executor join, restore into 1, 2, 3 ---------- */

#define TOKEN "ckptjoin"
#define B 100 /* rows per batch and side */
#define CUT (NJ / 2)

typedef struct rank_ctx {
    int rank, n;
    slash_listener *l;
    const char **addrs;
    const slash_join_config *cfg;
    slash_ckpt *ck;        /* restore from it (NULL: run from the start) */
    size_t from;           /* first row to push */
    size_t stop;           /* push rows before it; request checkpoint 1 before the last push */
    bool checkpoint;
    slash_ckpt *taken;     /* out: the checkpoint image */
    uint64_t pre, post;    /* out: digests of the pairs taken before / after the cut */
    size_t rows_pre, rows_post;
    slash_status st;
    char err[512];
} rank_ctx;

static uint64_t take_all(slash_exec *ex, size_t *rows)
{
    uint64_t d = 0;
    slash_join_result *r;
    for (slash_exec_take_join(ex, &r); r; slash_exec_take_join(ex, &r)) {
        d += digest(r, rows);
        slash_join_result_free(r);
    }
    return d;
}

static slash_status restore(slash_exec *ex, const slash_ckpt *ck, int rank, int n)
{
    const void *p;
    size_t len;
    slash_ckpt_meta(ck, &p, &len);
    slash_status st = slash_exec_restore_meta(ex, p, len);
    for (uint32_t i = 0; i < slash_ckpt_parts(ck) && st == SLASH_OK; i++) {
        uint32_t part;
        if ((st = slash_ckpt_part(ck, i, &part, &p, &len)) != SLASH_OK)
            break;
        if (part % (uint32_t)n == (uint32_t)rank)
            st = slash_exec_restore_partition(ex, part, p, len);
    }
    return st;
}

static void *rank_main(void *arg)
{
    rank_ctx *c = arg;
    slash_channel_config cc = {.buffer_size = 8192, .credits = 8};
    slash_group *g;
    slash_status st = slash_group_join(c->l, (uint32_t)c->rank, (uint32_t)c->n, c->addrs, TOKEN,
                                       &cc, 30000, &g);
    slash_exec *ex = NULL;
    if (st == SLASH_OK) {
        slash_exec_config ec;
        memset(&ec, 0, sizeof ec);
        ec.kind = SLASH_EXEC_JOIN;
        ec.join = *c->cfg;
        ec.lateness_ms = 500; /* a side's batch covers 340 ms ahead of the other's */
        ec.epoch_bytes = 8 * 1024;
        ec.timeout_ms = 30000;
        st = slash_exec_open(g, &ec, &ex);
    }
    if (st == SLASH_OK && c->ck)
        st = restore(ex, c->ck, c->rank, c->n);
    uint64_t *d = &c->pre;
    size_t *rows = &c->rows_pre;
    size_t k = 0; /* batch number among the group's: batch k is pushed by rank k % n */
    for (size_t lo = c->from; lo < c->stop && st == SLASH_OK; lo += B)
        for (int side = 0; side < 2 && st == SLASH_OK; side++, k++) {
            if ((int)(k % (size_t)c->n) != c->rank)
                continue;
            if (c->checkpoint && lo + B >= c->stop && side == 1)
                st = slash_exec_request_checkpoint(ex, 1);
            slash_join_batch b = jbatch(c->cfg, side, lo, B);
            size_t late = 0;
            if (st == SLASH_OK)
                st = slash_exec_push_join(ex, &b, NULL, &late);
            if (st == SLASH_OK && late)
                st = slash_fail(SLASH_ESTATE, "%zu late rows", late);
            *d += take_all(ex, rows);
        }
    if (st == SLASH_OK && c->checkpoint) { /* the crash right after the cut */
        st = slash_exec_take_checkpoint(ex, &c->taken);
        if (st == SLASH_OK && !c->taken)
            st = slash_fail(SLASH_ESTATE, "no checkpoint image");
    } else if (st == SLASH_OK) {
        st = slash_exec_finish(ex);
        c->post += take_all(ex, &c->rows_post);
    }
    if (st != SLASH_OK)
        snprintf(c->err, sizeof c->err, "rank %d/%d: %s (%s)", c->rank, c->n, slash_strerror(st),
                 slash_last_error());
    c->st = st;
    slash_exec_close(ex);
    return NULL;
}

/* Runs a group of n ranks over rows [from, stop), restored from ck if given.
 * Returns the digest of every pair fired, and their count. */
static uint64_t run_group(int n, const slash_join_config *cfg, slash_ckpt *ck, size_t from,
                          size_t stop, bool checkpoint, slash_ckpt **taken, size_t *rows)
{
    static slash_transport *tp;
    if (!tp)
        CHECK_OK(slash_transport_open("shm", &tp));
    rank_ctx ctx[3];
    const char *addrs[3];
    pthread_t th[3];
    for (int q = 0; q < n; q++) {
        memset(&ctx[q], 0, sizeof ctx[q]);
        ctx[q].rank = q, ctx[q].n = n, ctx[q].addrs = addrs, ctx[q].cfg = cfg, ctx[q].ck = ck;
        ctx[q].from = from, ctx[q].stop = stop, ctx[q].checkpoint = checkpoint;
        CHECK_OK(slash_listen(tp, NULL, TOKEN, &ctx[q].l));
        addrs[q] = slash_listener_addr(ctx[q].l);
    }
    for (int q = 0; q < n; q++)
        pthread_create(&th[q], NULL, rank_main, &ctx[q]);
    uint64_t d = 0;
    for (int q = 0; q < n; q++) {
        pthread_join(th[q], NULL);
        if (ctx[q].st != SLASH_OK)
            fprintf(stderr, "  %s\n", ctx[q].err);
        CHECK(ctx[q].st == SLASH_OK);
        d += ctx[q].pre + ctx[q].post;
        *rows += ctx[q].rows_pre + ctx[q].rows_post;
        slash_listener_close(ctx[q].l);
        if (taken)
            *taken = ctx[q].taken;
    }
    return d;
}

static void restore_into(slash_window_kind kind, slash_key_type kt)
{
    make_input(kind * 11 + kt + 300);
    slash_join_config c = jconfig(kind, kt, 6);
    size_t want_rows = 0;
    uint64_t want = run_group(1, &c, NULL, 0, NJ, false, NULL, &want_rows);
    CHECK(want_rows > 1000);
    size_t pre_rows = 0;
    slash_ckpt *ck = NULL;
    uint64_t pre = run_group(1, &c, NULL, 0, CUT, true, &ck, &pre_rows);
    CHECK(ck != NULL && slash_ckpt_parts(ck) == 6);
    CHECK(pre_rows > 0 && pre_rows < want_rows); /* windows fired before the cut */
    for (int n = 1; n <= 3; n++) {
        size_t rows = pre_rows;
        uint64_t got = pre + run_group(n, &c, ck, CUT, NJ, false, NULL, &rows);
        if (rows != want_rows || got != want)
            fprintf(stderr, "  restored into %d: %zu pairs, want %zu\n", n, rows, want_rows);
        CHECK(rows == want_rows && got == want);
    }
    slash_ckpt_free(ck);
}

TEST(join_executor_restores_into_1_2_3_tumbling) { restore_into(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64); }
TEST(join_executor_restores_into_1_2_3_session_string_keys)
{
    restore_into(SLASH_WINDOW_SESSION, SLASH_KEY_BYTES);
}

int main(void)
{
    RUN(join_round_trip_tumbling_int_keys);
    RUN(join_round_trip_tumbling_string_keys);
    RUN(join_round_trip_session_int_keys);
    RUN(join_round_trip_session_string_keys);
    RUN(every_truncation_of_a_join_blob_is_refused);
    RUN(every_bit_flip_of_a_join_blob_is_refused);
    RUN(join_blob_refuses_other_columns_partition_and_kind);
    RUN(join_executor_restores_into_1_2_3_tumbling);
    RUN(join_executor_restores_into_1_2_3_session_string_keys);
    return UNIT_DONE();
}
