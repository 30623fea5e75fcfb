/* test_exec_paths.c - executor paths that only ran from pytest against the -O3
 * extension, here under the sanitizer build: groups of executors as threads
 * over shm with string keys (slash and repartition modes), own_rows LEADER and
 * AUTO with records routed to their leaders (keys that hardly repeat), and a
 * join executor pair, each checked row for row against one sequential store
 * (aggregate or join); and a peer that sends
 * malformed or truncated sync messages (each wire-header field wrong in turn),
 * which must end in a clean SLASH_EPROTO/SLASH_EPEER naming the rank, never a
 * crash, a hang or a sanitizer report. */
#define _GNU_SOURCE
#include "slash/exec.h"
#include "unit.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define NREC 30000
#define MAXN 4
static const char *TOKEN = "exec-paths-token";

/* ---- the stream ------------------------------------------------------------ */

static int64_t times[NREC], keys[NREC], vals[NREC];
static int owner[NREC];
static int32_t str_off[NREC + 1];
static uint8_t str_data[NREC * 24];

/* nkeys distinct keys (few repeats when nkeys is large: routing turns on);
 * string keys are "k<key>" with lengths 2..21 */
static void make_stream(uint64_t seed, int n, int64_t nkeys)
{
    uint64_t s = seed;
    int32_t off = 0;
    for (int i = 0; i < NREC; i++) {
        times[i] = i / 3 + (int64_t)(unit_rng(&s) % 40);
        keys[i] = unit_rng(&s) % 5 == 0 ? 3 : (int64_t)(unit_rng(&s) % (uint64_t)nkeys) * 7919;
        vals[i] = (int64_t)(unit_rng(&s) % 1000) - 300;
        owner[i] = (int)(unit_rng(&s) % (uint64_t)n);
        str_off[i] = off;
        off += snprintf((char *)str_data + off, 24, "k%lld", (long long)keys[i]);
    }
    str_off[NREC] = off;
}

typedef struct row {
    int64_t ws, we, key, count, sum, min;
} row;

static int cmp_row(const void *a, const void *b)
{
    const row *x = a, *y = b;
    if (x->ws != y->ws)
        return x->ws < y->ws ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

static slash_exec_config config(uint32_t parts, bool strings, slash_exec_mode mode,
                                slash_exec_own own)
{
    slash_exec_config c;
    memset(&c, 0, sizeof c);
    slash_window_init(&c.state.window, SLASH_WINDOW_TUMBLING, 1000, 0);
    c.state.key_type = strings ? SLASH_KEY_BYTES : SLASH_KEY_INT64;
    c.state.partitions = parts;
    c.state.naggs = 3;
    c.state.aggs[0] = SLASH_AGG_COUNT;
    c.state.aggs[1] = SLASH_AGG_SUM_I64;
    c.state.aggs[2] = SLASH_AGG_MIN_I64;
    c.lateness_ms = 100;
    c.epoch_bytes = 16 * 1024;
    c.timeout_ms = 30000;
    c.mode = mode;
    c.own_rows = own;
    return c;
}

/* Appends r's rows; string keys "k<int>" are read back as their integer. */
static size_t append_rows(const slash_ssb_result *r, bool strings, row *out, size_t at, size_t cap)
{
    for (size_t i = 0; i < r->rows && at < cap; i++) {
        int64_t key = 0;
        if (strings) {
            char k[32] = {0};
            int64_t a = r->key_offsets[i], b = r->key_offsets[i + 1];
            if (b - a > 0 && b - a < 31)
                memcpy(k, r->key_data + a, (size_t)(b - a));
            key = k[0] == 'k' ? strtoll(k + 1, NULL, 10) : -1;
        } else {
            key = r->keys[i];
        }
        row x = {r->window_start[i], r->window_end[i], key, ((int64_t *)r->columns[0])[i],
                 ((int64_t *)r->columns[1])[i], ((int64_t *)r->columns[2])[i]};
        out[at++] = x;
    }
    return at;
}

static void fill_batch(slash_ssb_batch *b, bool strings, const int64_t *t, const int64_t *k,
                       const int64_t *v, const int32_t *offs, const uint8_t *data, size_t n)
{
    memset(b, 0, sizeof *b);
    b->n = n;
    b->times = t;
    if (strings) {
        b->key_offsets = offs;
        b->key_data = data;
    } else {
        b->keys = k;
    }
    b->values[1] = v;
    b->values[2] = v;
}

static size_t sequential(bool strings, row *out)
{
    slash_exec_config c = config(1, strings, SLASH_EXEC_SLASH, SLASH_OWN_AUTO);
    slash_ssb *s;
    if (slash_ssb_open(&c.state, &s) != SLASH_OK)
        abort();
    slash_ssb_batch b;
    fill_batch(&b, strings, times, keys, vals, str_off, str_data, NREC);
    if (slash_ssb_update(s, &b) != SLASH_OK)
        abort();
    slash_ssb_result *r;
    if (slash_ssb_emit(s, INT64_MAX, &r) != SLASH_OK)
        abort();
    size_t n = append_rows(r, strings, out, 0, NREC);
    slash_ssb_result_free(r);
    slash_ssb_close(s);
    qsort(out, n, sizeof *out, cmp_row);
    return n;
}

/* ---- a group of executor threads ------------------------------------------- */

typedef struct rank_ctx {
    int rank, n;
    slash_listener *l;
    const char **addrs;
    slash_exec_config cfg;
    row *rows;
    size_t nrows;
    slash_exec_metrics m;
    slash_status st;
    char err[512];
} rank_ctx;

static slash_status rank_fail(rank_ctx *c, const char *what, slash_status st)
{
    snprintf(c->err, sizeof c->err, "rank %d %s: %s (%s)", c->rank, what, slash_strerror(st),
             slash_last_error());
    return c->st = st;
}

static void *rank_main(void *p)
{
    rank_ctx *c = p;
    bool strings = c->cfg.state.key_type == SLASH_KEY_BYTES;
    slash_channel_config cc = {.buffer_size = 8192, .credits = 8};
    slash_group *g;
    slash_status st = slash_group_join(c->l, (uint32_t)c->rank, (uint32_t)c->n, c->addrs, TOKEN,
                                       &cc, 30000, &g);
    if (st != SLASH_OK)
        return (void *)(intptr_t)rank_fail(c, "join", st);
    slash_exec *ex;
    if ((st = slash_exec_open(g, &c->cfg, &ex)) != SLASH_OK)
        return (void *)(intptr_t)rank_fail(c, "open", st);
    /* this rank's share, 500 records a batch, keys re-encoded per batch */
    static _Thread_local int64_t bt[500], bk[500], bv[500];
    static _Thread_local int32_t bo[501];
    static _Thread_local uint8_t bd[500 * 24];
    size_t k = 0;
    for (int i = 0; i <= NREC && st == SLASH_OK; i++) {
        if (i < NREC && owner[i] == c->rank) {
            if (k == 0)
                bo[0] = 0;
            bt[k] = times[i], bk[k] = keys[i], bv[k] = vals[i];
            int32_t len = str_off[i + 1] - str_off[i];
            memcpy(bd + bo[k], str_data + str_off[i], (size_t)len);
            bo[k + 1] = bo[k] + len;
            k++;
        }
        if (k == 500 || (i == NREC && k)) {
            slash_ssb_batch b;
            fill_batch(&b, strings, bt, bk, bv, bo, bd, k);
            size_t late = 0;
            st = slash_exec_push(ex, &b, NULL, &late);
            if (st == SLASH_OK && late)
                st = slash_fail(SLASH_ESTATE, "%zu late records", late);
            k = 0;
        }
    }
    if (st == SLASH_OK)
        st = slash_exec_finish(ex);
    if (st != SLASH_OK) {
        rank_fail(c, "push/finish", st);
    } else {
        slash_ssb_result *r;
        for (slash_exec_take(ex, &r); r; slash_exec_take(ex, &r)) {
            c->nrows = append_rows(r, strings, c->rows, c->nrows, NREC);
            slash_ssb_result_free(r);
        }
    }
    slash_exec_get_metrics(ex, &c->m);
    slash_exec_close(ex);
    return NULL;
}

/* Runs n executor threads over shm and checks their union against the
 * sequential store; returns the summed metrics. */
static slash_exec_metrics run_group(int n, uint32_t parts, bool strings, slash_exec_mode mode,
                                    slash_exec_own own, int64_t nkeys)
{
    make_stream(1000 + (uint64_t)n * 31 + (uint64_t)strings * 7 + (uint64_t)own, n, nkeys);
    static row want[NREC], got[NREC];
    size_t nwant = sequential(strings, want);
    slash_transport *tp;
    slash_exec_metrics sum;
    memset(&sum, 0, sizeof sum);
    if (slash_transport_open("shm", &tp) != SLASH_OK)
        abort();
    rank_ctx ctx[MAXN];
    const char *addrs[MAXN];
    pthread_t th[MAXN];
    for (int r = 0; r < n; r++) {
        memset(&ctx[r], 0, sizeof ctx[r]);
        ctx[r].rank = r, ctx[r].n = n, ctx[r].addrs = addrs;
        ctx[r].cfg = config(parts, strings, mode, own);
        ctx[r].rows = malloc(sizeof(row) * NREC);
        CHECK_OK(slash_listen(tp, NULL, TOKEN, &ctx[r].l));
        addrs[r] = slash_listener_addr(ctx[r].l);
    }
    for (int r = 0; r < n; r++)
        pthread_create(&th[r], NULL, rank_main, &ctx[r]);
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    size_t ngot = 0;
    for (int r = 0; r < n; r++) {
        if (ctx[r].st != SLASH_OK)
            fprintf(stderr, "  %s\n", ctx[r].err);
        CHECK(ctx[r].st == SLASH_OK);
        for (size_t i = 0; i < ctx[r].nrows && ngot < NREC; i++)
            got[ngot++] = ctx[r].rows[i];
        sum.records_shipped += ctx[r].m.records_shipped;
        sum.epochs_routed += ctx[r].m.epochs_routed;
        sum.own_rows_direct += ctx[r].m.own_rows_direct;
        sum.delta_bytes_sent += ctx[r].m.delta_bytes_sent;
        sum.records_in += ctx[r].m.records_in;
        free(ctx[r].rows);
        slash_listener_close(ctx[r].l);
    }
    slash_transport_close(tp);
    qsort(got, ngot, sizeof *got, cmp_row);
    size_t diff = 0;
    for (size_t i = 0; i < ngot && i < nwant; i++)
        diff += memcmp(&got[i], &want[i], sizeof(row)) != 0;
    if (diff || ngot != nwant)
        fprintf(stderr, "  n=%d parts=%u strings=%d mode=%d own=%d: %zu rows, want %zu, %zu differ\n",
                n, parts, strings, mode, own, ngot, nwant, diff);
    CHECK(ngot == nwant && diff == 0);
    CHECK(sum.records_in == NREC);
    return sum;
}

TEST(string_keys_slash_mode_equal_sequential)
{
    slash_exec_metrics m = run_group(3, 7, true, SLASH_EXEC_SLASH, SLASH_OWN_LOCAL, 500);
    CHECK(m.delta_bytes_sent > 0);
}

TEST(string_keys_repartition_mode_equal_sequential)
{
    slash_exec_metrics m = run_group(3, 7, true, SLASH_EXEC_REPARTITION, SLASH_OWN_AUTO, 500);
    CHECK(m.records_shipped > 0);
}

TEST(own_rows_leader_folds_rows_straight_into_leaders)
{
    for (int strings = 0; strings <= 1; strings++) {
        slash_exec_metrics m = run_group(2, 4, strings, SLASH_EXEC_SLASH, SLASH_OWN_LEADER, 500);
        CHECK(m.records_shipped > 0 || m.own_rows_direct > 0);
    }
}

TEST(own_rows_auto_routes_keys_that_hardly_repeat)
{
    for (int strings = 0; strings <= 1; strings++) {
        slash_exec_metrics m = run_group(3, 6, strings, SLASH_EXEC_SLASH, SLASH_OWN_AUTO, 1000000);
        CHECK(m.epochs_routed > 0);
        CHECK(m.records_shipped > 0);
    }
}

/* ---- a join executor pair ---------------------------------------------------- */

#define NJ 3000 /* rows per side */
static int64_t jt[2][NJ], jk[2][NJ], jv[2][NJ];
static int jowner[2][NJ];

typedef struct jrow {
    int64_t ws, key, l, r;
} jrow;

static int cmp_jrow(const void *a, const void *b)
{
    const jrow *x = a, *y = b;
    if (x->ws != y->ws)
        return x->ws < y->ws ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->l != y->l)
        return x->l < y->l ? -1 : 1;
    return x->r < y->r ? -1 : x->r > y->r;
}

static slash_join_config join_config(uint32_t parts)
{
    slash_join_config c;
    memset(&c, 0, sizeof c);
    slash_window_init(&c.window, SLASH_WINDOW_TUMBLING, 1000, 0);
    c.key_type = SLASH_KEY_INT64;
    c.partitions = parts;
    c.ncols[0] = c.ncols[1] = 1;
    c.cols[0][0] = c.cols[1][0] = SLASH_JOIN_I64;
    return c;
}

static size_t append_jrows(const slash_join_result *r, jrow *out, size_t at, size_t cap)
{
    for (size_t i = 0; i < r->rows && at < cap; i++) {
        jrow x = {r->window_start[i], r->keys[i], ((int64_t *)r->columns[0][0])[i],
                  ((int64_t *)r->columns[1][0])[i]};
        out[at++] = x;
    }
    return at;
}

#define JMAX 200000
typedef struct jrank_ctx {
    int rank;
    slash_listener *l;
    const char **addrs;
    jrow *rows;
    size_t nrows;
    slash_status st;
    char err[512];
} jrank_ctx;

static void *jrank_main(void *p)
{
    jrank_ctx *c = p;
    slash_channel_config cc = {.buffer_size = 8192, .credits = 8};
    slash_group *g;
    slash_status st = slash_group_join(c->l, (uint32_t)c->rank, 2, c->addrs, TOKEN, &cc, 30000, &g);
    slash_exec *ex = NULL;
    if (st == SLASH_OK) {
        slash_exec_config ec;
        memset(&ec, 0, sizeof ec);
        ec.kind = SLASH_EXEC_JOIN;
        ec.join = join_config(5);
        ec.lateness_ms = 300; /* a side's batch may run 130 ms ahead of the other's */
        ec.epoch_bytes = 8 * 1024;
        ec.timeout_ms = 30000;
        st = slash_exec_open(g, &ec, &ex);
    }
    static _Thread_local int64_t bt[100], bk[100], bv[100];
    for (int lo = 0; lo < NJ && st == SLASH_OK; lo += 100)
        for (int side = 0; side < 2 && st == SLASH_OK; side++) {
            size_t k = 0;
            for (int i = lo; i < lo + 100 && i < NJ; i++)
                if (jowner[side][i] == c->rank)
                    bt[k] = jt[side][i], bk[k] = jk[side][i], bv[k] = jv[side][i], k++;
            if (!k)
                continue;
            slash_join_batch b;
            memset(&b, 0, sizeof b);
            b.side = side ? SLASH_JOIN_RIGHT : SLASH_JOIN_LEFT;
            b.n = k, b.times = bt, b.keys = bk, b.columns[0] = bv;
            size_t late = 0;
            st = slash_exec_push_join(ex, &b, NULL, &late);
            if (st == SLASH_OK && late)
                st = slash_fail(SLASH_ESTATE, "%zu late rows", late);
        }
    if (st == SLASH_OK)
        st = slash_exec_finish(ex);
    if (st == SLASH_OK) {
        slash_join_result *r;
        for (slash_exec_take_join(ex, &r); r; slash_exec_take_join(ex, &r)) {
            c->nrows = append_jrows(r, c->rows, c->nrows, JMAX);
            slash_join_result_free(r);
        }
    } else {
        snprintf(c->err, sizeof c->err, "join rank %d: %s (%s)", c->rank, slash_strerror(st),
                 slash_last_error());
    }
    c->st = st;
    if (ex)
        slash_exec_close(ex);
    return NULL;
}

TEST(join_executor_pair_equals_one_join_store)
{
    uint64_t s = 77;
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < NJ; i++) {
            jt[side][i] = i + (int64_t)(unit_rng(&s) % 30);
            jk[side][i] = (int64_t)(unit_rng(&s) % 200);
            jv[side][i] = (int64_t)(unit_rng(&s) % 100000) * 2 + side;
            jowner[side][i] = (int)(unit_rng(&s) % 2);
        }
    static jrow want[JMAX], got[JMAX];
    slash_join_config jc = join_config(1);
    slash_join *js;
    CHECK_OK(slash_join_open(&jc, &js));
    for (int side = 0; side < 2; side++) {
        slash_join_batch b;
        memset(&b, 0, sizeof b);
        b.side = side ? SLASH_JOIN_RIGHT : SLASH_JOIN_LEFT;
        b.n = NJ, b.times = jt[side], b.keys = jk[side], b.columns[0] = jv[side];
        CHECK_OK(slash_join_update(js, &b));
    }
    slash_join_result *r;
    size_t nwant = 0;
    CHECK_OK(slash_join_emit(js, INT64_MAX, &r));
    nwant = append_jrows(r, want, 0, JMAX);
    slash_join_result_free(r);
    slash_join_close(js);
    qsort(want, nwant, sizeof *want, cmp_jrow);
    CHECK(nwant > 1000);

    slash_transport *tp;
    CHECK_OK(slash_transport_open("shm", &tp));
    jrank_ctx ctx[2];
    const char *addrs[2];
    pthread_t th[2];
    for (int q = 0; q < 2; q++) {
        memset(&ctx[q], 0, sizeof ctx[q]);
        ctx[q].rank = q, ctx[q].addrs = addrs;
        ctx[q].rows = malloc(sizeof(jrow) * JMAX);
        CHECK_OK(slash_listen(tp, NULL, TOKEN, &ctx[q].l));
        addrs[q] = slash_listener_addr(ctx[q].l);
    }
    for (int q = 0; q < 2; q++)
        pthread_create(&th[q], NULL, jrank_main, &ctx[q]);
    size_t ngot = 0;
    for (int q = 0; q < 2; q++) {
        pthread_join(th[q], NULL);
        if (ctx[q].st != SLASH_OK)
            fprintf(stderr, "  %s\n", ctx[q].err);
        CHECK(ctx[q].st == SLASH_OK);
        for (size_t i = 0; i < ctx[q].nrows && ngot < JMAX; i++)
            got[ngot++] = ctx[q].rows[i];
        free(ctx[q].rows);
        slash_listener_close(ctx[q].l);
    }
    slash_transport_close(tp);
    qsort(got, ngot, sizeof *got, cmp_jrow);
    size_t diff = 0;
    for (size_t i = 0; i < ngot && i < nwant; i++)
        diff += memcmp(&got[i], &want[i], sizeof(jrow)) != 0;
    if (diff || ngot != nwant)
        fprintf(stderr, "  join pair: %zu rows, want %zu, %zu differ\n", ngot, nwant, diff);
    CHECK(ngot == nwant && diff == 0);
}

/* ---- malformed sync messages ------------------------------------------------- */

/* the wire header, as exec.c lays it out (static_assert'ed there at 48 bytes) */
typedef struct wire_msg {
    uint32_t type, part;
    uint64_t epoch, offset, total;
    int64_t watermark;
    uint64_t frag;
} wire_msg;
_Static_assert(sizeof(wire_msg) == 48, "the sync message header is 48 bytes");

enum { T_DELTA = 1, T_EPOCH = 2, T_ROWS = 3, T_ABORT = 4 }; /* as exec.c numbers them */

typedef struct bad_case {
    const char *name;
    wire_msg h;
    size_t send_len;   /* bytes sent (header + payload); 0 = just the header */
    size_t payload;    /* payload bytes filled with a pattern after the header */
    slash_status want; /* EPROTO, or EPEER for an abort */
} bad_case;

typedef struct fake_ctx {
    slash_listener *l;
    const char **addrs;
    const bad_case *bc;
    slash_status st;
    volatile int done; /* set by the executor side when it has seen the error */
} fake_ctx;

/* Rank 1: joins the group and sends one hand-made message, then waits. */
static void *fake_peer(void *p)
{
    fake_ctx *f = p;
    slash_channel_config cc = {.buffer_size = 8192, .credits = 8};
    slash_group *g;
    f->st = slash_group_join(f->l, 1, 2, f->addrs, TOKEN, &cc, 30000, &g);
    if (f->st != SLASH_OK)
        return NULL;
    static _Thread_local uint8_t buf[4096];
    memset(buf, 0, sizeof buf);
    memcpy(buf, &f->bc->h, sizeof f->bc->h);
    for (size_t i = 0; i < f->bc->payload; i++)
        buf[sizeof(wire_msg) + i] = (uint8_t)(i * 37 + 11);
    size_t len = f->bc->send_len ? f->bc->send_len : sizeof(wire_msg) + f->bc->payload;
    f->st = slash_channel_send(slash_group_out(g, 0), buf, len, 10000);
    while (!f->done)
        usleep(1000);
    slash_group_close(g);
    return NULL;
}

static void one_bad_message(const bad_case *bc, uint32_t parts, slash_exec_mode mode)
{
    slash_transport *tp;
    slash_listener *l0, *l1;
    CHECK_OK(slash_transport_open("shm", &tp));
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l0));
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l1));
    const char *addrs[2] = {slash_listener_addr(l0), slash_listener_addr(l1)};
    fake_ctx f = {.l = l1, .addrs = addrs, .bc = bc};
    pthread_t th;
    pthread_create(&th, NULL, fake_peer, &f);
    slash_channel_config cc = {.buffer_size = 8192, .credits = 8};
    slash_group *g;
    slash_status st = slash_group_join(l0, 0, 2, addrs, TOKEN, &cc, 30000, &g);
    CHECK_OK(st);
    if (st == SLASH_OK) {
        slash_exec_config c = config(parts, false, mode, SLASH_OWN_LOCAL);
        c.timeout_ms = 5000;
        slash_exec *ex;
        CHECK_OK(slash_exec_open(g, &c, &ex));
        st = SLASH_OK;
        for (int i = 0; i < 200 && st == SLASH_OK; i++)
            st = slash_exec_poll(ex, 50);
        if (st != bc->want)
            fprintf(stderr, "  case '%s': %s (%s)\n", bc->name, slash_strerror(st),
                    slash_last_error());
        CHECK(st == bc->want);
        CHECK(slash_last_error_status() == st);
        if (!strstr(slash_last_error(), "rank 1"))
            fprintf(stderr, "  case '%s': detail without the rank: %s\n", bc->name, slash_last_error());
        CHECK(strstr(slash_last_error(), "rank 1") != NULL);
        f.done = 1;
        slash_exec_close(ex);
    }
    f.done = 1;
    pthread_join(th, NULL);
    slash_listener_close(l0);
    slash_listener_close(l1);
    slash_transport_close(tp);
}

TEST(malformed_sync_messages_are_clean_errors)
{
    const size_t H = sizeof(wire_msg);
    /* a well-formed delta fragment for partition 0 (led by rank 0 of 2), epoch 1 */
    const wire_msg ok_delta = {.type = T_DELTA, .part = 0, .epoch = 1, .offset = 0, .total = 64,
                               .frag = 64};
    bad_case cases[16];
    int nc = 0;
    cases[nc++] = (bad_case){"short message", ok_delta, H - 8, 0, SLASH_EPROTO};
    cases[nc++] = (bad_case){"unknown type", {.type = 99, .epoch = 1}, 0, 0, SLASH_EPROTO};
    cases[nc++] = (bad_case){"epoch from the future", {.type = T_EPOCH, .epoch = 7}, 0, 0,
                             SLASH_EPROTO};
    cases[nc++] = (bad_case){"epoch zero", {.type = T_EPOCH, .epoch = 0}, 0, 0, SLASH_EPROTO};
    wire_msg h = ok_delta;
    h.part = 1; /* led by rank 1 */
    cases[nc++] = (bad_case){"partition not led here", h, 0, 64, SLASH_EPROTO};
    h = ok_delta;
    h.part = 1000;
    cases[nc++] = (bad_case){"partition out of range", h, 0, 64, SLASH_EPROTO};
    h = ok_delta;
    h.offset = 8;
    cases[nc++] = (bad_case){"fragment at a wrong offset", h, 0, 64, SLASH_EPROTO};
    h = ok_delta;
    h.frag = 4000;
    cases[nc++] = (bad_case){"fragment length beyond the message", h, 0, 64, SLASH_EPROTO};
    h = ok_delta;
    h.total = 16;
    cases[nc++] = (bad_case){"fragment beyond the delta's total", h, 0, 64, SLASH_EPROTO};
    h = ok_delta;
    h.total = 128;
    h.frag = 64;
    /* a first fragment, then end of epoch inside the delta: two messages are
     * not possible here, so send a first fragment whose frag disagrees */
    h.frag = 32;
    cases[nc++] = (bad_case){"truncated fragment", h, H + 16, 16, SLASH_EPROTO};
    cases[nc++] = (bad_case){"abort with a length beyond the message",
                             {.type = T_ABORT, .epoch = 1, .frag = 100000}, 0, 16, SLASH_EPEER};
    cases[nc++] = (bad_case){"rows message with a wrong length",
                             {.type = T_ROWS, .epoch = 1, .frag = 500}, 0, 40, SLASH_EPROTO};
    for (int i = 0; i < nc; i++) {
        fprintf(stderr, "  case: %s\n", cases[i].name);
        one_bad_message(&cases[i], 4, SLASH_EXEC_SLASH);
    }
}

TEST(garbage_delta_and_rows_payloads_are_clean_errors)
{
    /* well-formed headers around payloads of pattern bytes: the store's merge
     * and the row decoder must reject them, not read out of bounds */
    bad_case d = {"garbage delta", {.type = T_DELTA, .part = 0, .epoch = 1, .total = 256,
                                    .frag = 256}, 0, 256, SLASH_EPROTO};
    one_bad_message(&d, 4, SLASH_EXEC_SLASH);
    bad_case r = {"garbage rows", {.type = T_ROWS, .part = 0, .epoch = 1, .frag = 200}, 0, 200,
                  SLASH_EPROTO};
    one_bad_message(&r, 4, SLASH_EXEC_REPARTITION);
}

int main(void)
{
    RUN(string_keys_slash_mode_equal_sequential);
    RUN(string_keys_repartition_mode_equal_sequential);
    RUN(own_rows_leader_folds_rows_straight_into_leaders);
    RUN(own_rows_auto_routes_keys_that_hardly_repeat);
    RUN(join_executor_pair_equals_one_join_store);
    RUN(malformed_sync_messages_are_clean_errors);
    RUN(garbage_delta_and_rows_payloads_are_clean_errors);
    return UNIT_DONE();
}
