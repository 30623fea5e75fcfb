/* test_join.c - the join state store against a brute-force reference:
 * tumbling and session windows, int64 and byte-string keys, one store and
 * many stores merged through epoch deltas in any order and grouping (the
 * append-set union is commutative and associative as a multiset), session
 * bridging (also across stores), emit freeing state, compaction, late rows,
 * malformed deltas (SLASH_EPROTO, nothing changed) and bad input.
 * Results are multisets: both sides are sorted before comparing. */
#include <stdio.h>
#include <stdlib.h>

#include "slash/join.h"
#include "unit.h"

/* left rows carry (id int64, value float64), right rows (id int64) */
typedef struct in_row {
    int side;
    int64_t key, time, id;
    double value;
} in_row;

typedef struct out_row {
    int64_t ws, we, key, lid, lval_bits, rid;
} out_row;

typedef struct rows {
    size_t n, cap;
    out_row *v;
} rows;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static in_row *gen(size_t n, int64_t nkeys, int64_t tspan)
{
    in_row *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) {
        d[i].side = (int)(next_rand() & 1);
        d[i].key = (int64_t)(next_rand() % (uint64_t)nkeys) - nkeys / 3;
        d[i].time = (int64_t)(next_rand() % (uint64_t)(2 * tspan)) - tspan;
        d[i].id = (int64_t)i;
        d[i].value = (double)(int64_t)(next_rand() % 2001 - 1000) / 4;
    }
    return d;
}

static void push(rows *r, out_row o)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 1024;
        r->v = realloc(r->v, r->cap * sizeof *r->v);
    }
    r->v[r->n++] = o;
}

static int cmp_out(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    for (int i = 0; i < 6; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

static bool same_rows(rows *a, rows *b)
{
    qsort(a->v, a->n, sizeof *a->v, cmp_out);
    qsort(b->v, b->n, sizeof *b->v, cmp_out);
    if (a->n != b->n) {
        fprintf(stderr, "  %zu rows, expected %zu\n", a->n, b->n);
        return false;
    }
    for (size_t i = 0; i < a->n; i++)
        if (cmp_out(&a->v[i], &b->v[i])) {
            fprintf(stderr, "  row %zu differs: window %lld key %lld lid %lld rid %lld vs "
                    "window %lld key %lld lid %lld rid %lld\n", i, (long long)a->v[i].ws,
                    (long long)a->v[i].key, (long long)a->v[i].lid, (long long)a->v[i].rid,
                    (long long)b->v[i].ws, (long long)b->v[i].key, (long long)b->v[i].lid,
                    (long long)b->v[i].rid);
            return false;
        }
    return true;
}

static int64_t fdiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) & (a < 0)); }

static int cmp_key_time(const void *a, const void *b)
{
    const in_row *x = *(in_row *const *)a, *y = *(in_row *const *)b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->time > y->time) - (x->time < y->time);
}

typedef struct ref_ent {
    int64_t key, ws, we;
    const in_row *r;
} ref_ent;

static int cmp_ent(const void *a, const void *b)
{
    const ref_ent *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->ws > y->ws) - (x->ws < y->ws);
}

/* The reference: every left x right pair of one key in one window. Sessions
 * are computed per key over both sides' rows sorted by time; rows at most
 * `size` apart share one (Spark's and Flink's rule). */
static rows reference(const in_row *d, size_t n, slash_window_kind kind, int64_t size)
{
    ref_ent *e = malloc((n + 1) * sizeof *e);
    if (kind == SLASH_WINDOW_TUMBLING) {
        for (size_t i = 0; i < n; i++) {
            int64_t ws = fdiv(d[i].time, size) * size;
            e[i] = (ref_ent){d[i].key, ws, ws + size, &d[i]};
        }
    } else {
        const in_row **o = malloc((n + 1) * sizeof *o);
        for (size_t i = 0; i < n; i++)
            o[i] = &d[i];
        qsort(o, n, sizeof *o, cmp_key_time);
        for (size_t i = 0; i < n;) {
            size_t j = i + 1;
            while (j < n && o[j]->key == o[i]->key && o[j]->time <= o[j - 1]->time + size)
                j++;
            for (size_t k = i; k < j; k++)
                e[k] = (ref_ent){o[k]->key, o[i]->time, o[j - 1]->time + size, o[k]};
            i = j;
        }
        free(o);
    }
    qsort(e, n, sizeof *e, cmp_ent);
    rows r = {0};
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && e[j].key == e[i].key && e[j].ws == e[i].ws)
            j++;
        for (size_t a = i; a < j; a++)
            for (size_t b = i; b < j; b++)
                if (e[a].r->side == 0 && e[b].r->side == 1) {
                    out_row x = {e[a].ws, e[a].we, e[a].key, e[a].r->id, 0, e[b].r->id};
                    memcpy(&x.lval_bits, &e[a].r->value, 8);
                    push(&r, x);
                }
        i = j;
    }
    free(e);
    return r;
}

static slash_join *open_join(slash_window_kind kind, int64_t size, slash_key_type kt, uint32_t parts)
{
    slash_join_config cfg = {0};
    if (slash_window_init(&cfg.window, kind, size, 0) != SLASH_OK)
        return NULL;
    cfg.key_type = kt;
    cfg.partitions = parts;
    cfg.ncols[0] = 2;
    cfg.cols[0][0] = SLASH_JOIN_I64;
    cfg.cols[0][1] = SLASH_JOIN_F64;
    cfg.ncols[1] = 1;
    cfg.cols[1][0] = SLASH_JOIN_I64;
    cfg.log_reserve = (size_t)1 << 30;
    slash_join *s = NULL;
    if (slash_join_open(&cfg, &s) != SLASH_OK)
        fprintf(stderr, "open: %s\n", slash_last_error());
    return s;
}

/* Applies rows[idx[0..m)] as one batch per side. */
static slash_status apply(slash_join *s, slash_key_type kt, const in_row *d, const size_t *idx,
                          size_t m)
{
    int64_t *times = malloc((m + 1) * 8), *keys = malloc((m + 1) * 8), *ids = malloc((m + 1) * 8);
    int64_t *offs = malloc((m + 1) * 8);
    double *vals = malloc((m + 1) * 8);
    char *kd = malloc(m * 24 + 1);
    slash_status st = SLASH_OK;
    for (int side = 0; side < 2 && st == SLASH_OK; side++) {
        size_t k = 0, kb = 0;
        offs[0] = 0;
        for (size_t i = 0; i < m; i++) {
            const in_row *r = &d[idx[i]];
            if (r->side != side)
                continue;
            times[k] = r->time, keys[k] = r->key, ids[k] = r->id, vals[k] = r->value;
            kb += (size_t)sprintf(kd + kb, "k%lld", (long long)r->key);
            offs[++k] = (int64_t)kb;
        }
        slash_join_batch b = {.side = side, .n = k, .times = times};
        if (kt == SLASH_KEY_INT64)
            b.keys = keys;
        else
            b.key_offsets = offs, b.key_offsets_64 = 1, b.key_data = (const uint8_t *)kd;
        b.columns[0] = ids;
        b.columns[1] = vals;
        st = slash_join_update(s, &b);
    }
    free(times), free(keys), free(ids), free(offs), free(vals), free(kd);
    return st;
}

static slash_status apply_all(slash_join *s, slash_key_type kt, const in_row *d, size_t n)
{
    size_t *idx = malloc(n * sizeof *idx + 1);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    slash_status st = apply(s, kt, d, idx, n);
    free(idx);
    return st;
}

/* Appends the result's rows to out and frees it. */
static void collect(slash_join_result *r, slash_key_type kt, rows *out)
{
    for (size_t i = 0; i < r->rows; i++) {
        out_row x = {r->window_start[i], r->window_end[i], 0, 0, 0, 0};
        if (kt == SLASH_KEY_INT64) {
            x.key = r->keys[i];
        } else {
            char buf[80];
            size_t len = (size_t)(r->key_offsets[i + 1] - r->key_offsets[i]);
            memcpy(buf, r->key_data + r->key_offsets[i], len);
            buf[len] = 0;
            x.key = strtoll(buf + 1, NULL, 10);
        }
        x.lid = ((int64_t *)r->columns[0][0])[i];
        memcpy(&x.lval_bits, (uint8_t *)r->columns[0][1] + i * 8, 8);
        x.rid = ((int64_t *)r->columns[1][0])[i];
        push(out, x);
    }
    slash_join_result_free(r);
}

/* Appends to *out the pairs of the windows `s` emits up to `up_to`. */
static void emit_into(rows *out, slash_join *s, slash_key_type kt, int64_t up_to)
{
    slash_join_result *r = NULL;
    CHECK_OK(slash_join_emit(s, up_to, &r));
    if (r)
        collect(r, kt, out);
}

static rows emit_all(slash_join *s, slash_key_type kt, int64_t up_to)
{
    rows out = {0};
    emit_into(&out, s, kt, up_to);
    return out;
}

/* Ships every partition's sealed delta of `from` into `to` and resets. */
static void ship(slash_join *from, slash_join *to, uint32_t parts)
{
    CHECK_OK(slash_join_begin_epoch(from));
    for (uint32_t p = 0; p < parts; p++) {
        const void *addr;
        size_t len;
        CHECK_OK(slash_join_delta(from, p, &addr, &len));
        CHECK_OK(slash_join_merge_delta(to, addr, len));
    }
    CHECK_OK(slash_join_reset_delta(from));
}

/* ---- one store -------------------------------------------------------------- */

static void check_single(slash_window_kind kind, int64_t size, slash_key_type kt, uint32_t parts)
{
    const size_t n = 3000;
    in_row *d = gen(n, 40, 400);
    slash_join *s = open_join(kind, size, kt, parts);
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK_OK(apply_all(s, kt, d, n));
    rows got = emit_all(s, kt, 0); /* windows ending by 0, then the rest */
    for (size_t i = 0; i < got.n; i++) /* a session ending at 0 may still grow */
        CHECK(kind == SLASH_WINDOW_SESSION ? got.v[i].we < 0 : got.v[i].we <= 0);
    emit_into(&got, s, kt, INT64_MAX);
    rows want = reference(d, n, kind, size);
    CHECK(want.n > 1000);
    CHECK(same_rows(&got, &want));
    slash_join_stats st;
    slash_join_get_stats(s, &st);
    CHECK(st.groups == 0 && st.chunks == 0 && st.rows[0] == 0 && st.rows[1] == 0 && st.late == 0);
    slash_join_close(s);
    free(got.v), free(want.v), free(d);
}

TEST(tumbling_int64) { check_single(SLASH_WINDOW_TUMBLING, 30, SLASH_KEY_INT64, 1); }
TEST(tumbling_bytes_partitioned) { check_single(SLASH_WINDOW_TUMBLING, 25, SLASH_KEY_BYTES, 3); }
TEST(session_int64_partitioned) { check_single(SLASH_WINDOW_SESSION, 15, SLASH_KEY_INT64, 2); }
TEST(session_bytes) { check_single(SLASH_WINDOW_SESSION, 9, SLASH_KEY_BYTES, 1); }

/* ---- many stores, any split, any epochs -------------------------------------- */

/* Splits the rows over `helpers` stores and the leader itself in random
 * batches; after each round every helper ships its delta to the leader
 * (some helpers update while their delta is sealed). */
static void check_split(slash_window_kind kind, int64_t size, slash_key_type kt, uint32_t parts,
                        int helpers, int rounds)
{
    const size_t n = 2500;
    in_row *d = gen(n, 25, 300);
    slash_join *leader = open_join(kind, size, kt, parts);
    slash_join *h[8];
    for (int i = 0; i < helpers; i++)
        h[i] = open_join(kind, size, kt, parts);
    size_t *idx = malloc(n * sizeof *idx);
    size_t pos = 0;
    for (int round = 0; round < rounds; round++) {
        size_t end = round == rounds - 1 ? n : pos + (size_t)(next_rand() % (2 * n / (size_t)rounds));
        if (end > n)
            end = n;
        for (int i = -1; i < helpers; i++) { /* -1: the leader */
            size_t m = 0;
            for (size_t r = pos; r < end; r++)
                if ((int)(d[r].id * 7919 % (helpers + 1)) - 1 == i)
                    idx[m++] = r;
            slash_join *s = i < 0 ? leader : h[i];
            size_t half = m / 2;
            CHECK_OK(apply(s, kt, d, idx, half));
            if (i >= 0 && (round & 1)) { /* update while sealed, then ship */
                CHECK_OK(slash_join_begin_epoch(s));
                CHECK_OK(apply(s, kt, d, idx + half, m - half));
                for (uint32_t p = 0; p < parts; p++) {
                    const void *addr;
                    size_t len;
                    CHECK_OK(slash_join_delta(s, p, &addr, &len));
                    CHECK_OK(slash_join_merge_delta(leader, addr, len));
                }
                CHECK_OK(slash_join_reset_delta(s));
            } else {
                CHECK_OK(apply(s, kt, d, idx + half, m - half));
            }
        }
        for (int i = 0; i < helpers; i++)
            if (!(round & 1) || next_rand() % 2)
                ship(h[i], leader, parts);
        pos = end;
    }
    for (int i = 0; i < helpers; i++)
        ship(h[i], leader, parts); /* what was left */
    rows got = emit_all(leader, kt, INT64_MAX);
    rows want = reference(d, n, kind, size);
    CHECK(same_rows(&got, &want));
    for (int i = 0; i < helpers; i++) {
        slash_join_stats st;
        slash_join_get_stats(h[i], &st);
        CHECK(st.groups == 0 && st.chunks == 0);
        slash_join_close(h[i]);
    }
    slash_join_close(leader);
    free(got.v), free(want.v), free(idx), free(d);
}

TEST(split_tumbling) { check_split(SLASH_WINDOW_TUMBLING, 20, SLASH_KEY_INT64, 1, 3, 5); }
TEST(split_tumbling_bytes) { check_split(SLASH_WINDOW_TUMBLING, 40, SLASH_KEY_BYTES, 4, 2, 4); }
TEST(split_session) { check_split(SLASH_WINDOW_SESSION, 12, SLASH_KEY_INT64, 2, 4, 6); }
TEST(split_session_bytes) { check_split(SLASH_WINDOW_SESSION, 7, SLASH_KEY_BYTES, 1, 2, 3); }

/* Commutative and associative as multisets: three partial stores A, B, C
 * merged as (A+B)+C and C+(B+A) give the same pairs. */
static void check_union_laws(slash_window_kind kind, int64_t size)
{
    const size_t n = 1500;
    in_row *d = gen(n, 15, 200);
    slash_join *part[3], *ab, *abc, *cba;
    for (size_t r = 0; r < n; r++)
        d[r].id = d[r].id * 4 + (int64_t)(next_rand() % 3); /* id % 4: the owning store */
    for (int i = 0; i < 3; i++) {
        part[i] = open_join(kind, size, SLASH_KEY_INT64, 2);
        size_t *idx = malloc(n * sizeof *idx), m = 0;
        for (size_t r = 0; r < n; r++)
            if (d[r].id % 4 == i)
                idx[m++] = r;
        CHECK_OK(apply(part[i], SLASH_KEY_INT64, d, idx, m));
        free(idx);
        CHECK_OK(slash_join_begin_epoch(part[i]));
    }
    ab = open_join(kind, size, SLASH_KEY_INT64, 2);
    abc = open_join(kind, size, SLASH_KEY_INT64, 2);
    cba = open_join(kind, size, SLASH_KEY_INT64, 2);
    const int order1[3] = {0, 1, 2}, order2[3] = {2, 1, 0};
    for (uint32_t p = 0; p < 2; p++) {
        const void *addr[3];
        size_t len[3];
        for (int i = 0; i < 3; i++)
            CHECK_OK(slash_join_delta(part[i], p, &addr[i], &len[i]));
        CHECK_OK(slash_join_merge_delta(ab, addr[order1[0]], len[order1[0]]));
        CHECK_OK(slash_join_merge_delta(ab, addr[order1[1]], len[order1[1]]));
        for (int i = 0; i < 3; i++)
            CHECK_OK(slash_join_merge_delta(cba, addr[order2[i]], len[order2[i]]));
    }
    ship(ab, abc, 2); /* (A+B) shipped as one delta, then C */
    for (uint32_t p = 0; p < 2; p++) {
        const void *addr;
        size_t len;
        CHECK_OK(slash_join_delta(part[2], p, &addr, &len));
        CHECK_OK(slash_join_merge_delta(abc, addr, len));
    }
    rows x = emit_all(abc, SLASH_KEY_INT64, INT64_MAX);
    rows y = emit_all(cba, SLASH_KEY_INT64, INT64_MAX);
    rows want = reference(d, n, kind, size);
    CHECK(same_rows(&x, &y));
    CHECK(same_rows(&x, &want));
    for (int i = 0; i < 3; i++)
        slash_join_close(part[i]);
    slash_join_close(ab), slash_join_close(abc), slash_join_close(cba);
    free(x.v), free(y.v), free(want.v), free(d);
}

TEST(union_laws_tumbling) { check_union_laws(SLASH_WINDOW_TUMBLING, 25); }
TEST(union_laws_session) { check_union_laws(SLASH_WINDOW_SESSION, 10); }

/* ---- sessions bridge ------------------------------------------------------------ */

static void put(slash_join *s, int side, int64_t key, int64_t t, int64_t id)
{
    double v = (double)id / 2;
    slash_join_batch b = {.side = side, .n = 1, .times = &t, .keys = &key};
    b.columns[0] = &id;
    b.columns[1] = &v;
    CHECK_OK(slash_join_update(s, &b));
}

TEST(session_bridging)
{
    /* gap 10: left@0 covers [0,10), right@15 covers [15,25): apart; left@8
     * covers [8,18) and fuses both into [0,25): 2 pairs */
    slash_join *s = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 1);
    put(s, 0, 1, 0, 100);
    put(s, 1, 1, 15, 200);
    put(s, 0, 2, 8, 300); /* another key does not bridge */
    slash_join_stats st;
    slash_join_get_stats(s, &st);
    CHECK(st.groups == 3);
    put(s, 0, 1, 8, 101);
    slash_join_get_stats(s, &st);
    CHECK(st.groups == 2 && st.rows[0] == 3 && st.rows[1] == 1);
    rows got = emit_all(s, SLASH_KEY_INT64, 100);
    CHECK(got.n == 2);
    for (size_t i = 0; i < got.n; i++)
        CHECK(got.v[i].ws == 0 && got.v[i].we == 25 && got.v[i].key == 1 && got.v[i].rid == 200 &&
              (got.v[i].lid == 100 || got.v[i].lid == 101));
    free(got.v);

    /* the same across stores: the bridging row is elsewhere, and fuses on merge */
    slash_join *a = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 1);
    slash_join *b = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 1);
    put(a, 0, 1, 0, 100);
    put(a, 1, 1, 15, 200);
    put(a, 1, 1, 40, 201); /* a later session of key 1, not bridged */
    put(b, 0, 1, 8, 101);
    put(b, 0, 1, 33, 102); /* [33,43) overlaps [40,50) only once merged */
    ship(b, a, 1);
    got = emit_all(a, SLASH_KEY_INT64, 100);
    CHECK(got.n == 3);
    int first = 0, second = 0;
    for (size_t i = 0; i < got.n; i++) {
        first += got.v[i].ws == 0 && got.v[i].we == 25 && got.v[i].rid == 200;
        second += got.v[i].ws == 33 && got.v[i].we == 50 && got.v[i].rid == 201 &&
                  got.v[i].lid == 102;
    }
    CHECK(first == 2 && second == 1);
    free(got.v);
    slash_join_close(s), slash_join_close(a), slash_join_close(b);
}

TEST(session_chain_of_bridges)
{
    /* rows arriving out of order link ever larger sessions: 0, 20, 40, ...
     * then 10, 30, ... bridge them all into one session of 21 rows */
    slash_join *s = open_join(SLASH_WINDOW_SESSION, 11, SLASH_KEY_INT64, 1);
    for (int64_t t = 0; t <= 200; t += 20)
        put(s, (int)(t / 20 % 2), 5, t, t);
    for (int64_t t = 10; t < 200; t += 20)
        put(s, (int)(t / 10 % 3 == 0), 5, t, t);
    slash_join_stats st;
    slash_join_get_stats(s, &st);
    CHECK(st.groups == 1 && st.rows[0] + st.rows[1] == 21);
    rows got = emit_all(s, SLASH_KEY_INT64, 1000);
    CHECK(got.n == st.rows[0] * st.rows[1]);
    for (size_t i = 0; i < got.n; i++)
        CHECK(got.v[i].ws == 0 && got.v[i].we == 211);
    free(got.v);
    slash_join_close(s);
}

/* ---- state is freed; chunks chain; compaction ------------------------------------- */

TEST(emit_frees_state_and_late_rows)
{
    slash_join *s = open_join(SLASH_WINDOW_TUMBLING, 1000, SLASH_KEY_INT64, 2);
    slash_join_stats empty, full, after;
    slash_join_get_stats(s, &empty);
    /* one hot key: 60000 left rows and 3 right rows in window [0, 1000) */
    const size_t n = 60000;
    int64_t *t = calloc(n, 8), *k = calloc(n, 8), *id = malloc(n * 8);
    double *v = calloc(n, 8);
    for (size_t i = 0; i < n; i++)
        t[i] = (int64_t)(i % 1000), id[i] = (int64_t)i;
    slash_join_batch b = {.side = 0, .n = n, .times = t, .keys = k, .columns = {id, v}};
    CHECK_OK(slash_join_update(s, &b));
    b.side = 1, b.n = 3;
    CHECK_OK(slash_join_update(s, &b));
    slash_join_get_stats(s, &full);
    CHECK(full.groups == 1 && full.rows[0] == n && full.rows[1] == 3);
    CHECK(full.chunks < 40); /* chunks double: far fewer than rows */
    CHECK(full.log_bytes < 2 * n * 16 + 4096);
    CHECK(full.memory_bytes > full.log_bytes);
    rows got = emit_all(s, SLASH_KEY_INT64, 999); /* the window ends at 1000 */
    CHECK(got.n == 0);
    free(got.v);
    got = emit_all(s, SLASH_KEY_INT64, 1000);
    CHECK(got.n == 3 * n);
    free(got.v);
    slash_join_get_stats(s, &after);
    CHECK(after.groups == 0 && after.chunks == 0 && after.rows[0] == 0 && after.rows[1] == 0);
    CHECK(after.log_bytes == 0);
    CHECK(after.memory_bytes <= empty.memory_bytes + 4096 * 2);
    /* late: rows for [0, 1000) now are dropped and counted */
    b.side = 0, b.n = 5;
    CHECK_OK(slash_join_update(s, &b));
    slash_join_get_stats(s, &after);
    CHECK(after.late == 5 && after.groups == 0);
    CHECK(slash_join_watermark(s) == 1000);
    slash_join_close(s);
    free(t), free(k), free(id), free(v);
}

TEST(compaction_keeps_sets)
{
    /* rows arrive in random time order, so emitting 60% of the windows
     * frees records all over the log: the log compacts, and what is left
     * still joins right (also after more rows arrive) */
    const size_t n = 300000;
    const int64_t cut = 9600;
    in_row *d = gen(n, 500, 8000);
    for (size_t i = 0; i < n; i++)
        d[i].time += 8000; /* [0, 16000) */
    slash_join *s = open_join(SLASH_WINDOW_TUMBLING, 100, SLASH_KEY_INT64, 1);
    CHECK_OK(apply_all(s, SLASH_KEY_INT64, d, n / 2));
    slash_join_stats before, after;
    slash_join_get_stats(s, &before);
    CHECK(before.log_bytes > ((size_t)4 << 20));
    rows got = emit_all(s, SLASH_KEY_INT64, cut);
    slash_join_get_stats(s, &after);
    CHECK(after.log_bytes < before.log_bytes / 2); /* compacted, not only trimmed */
    CHECK(after.rows[0] + after.rows[1] < n / 2 * 45 / 100);
    CHECK_OK(apply_all(s, SLASH_KEY_INT64, d + n / 2, n / 2));
    rows r = emit_all(s, SLASH_KEY_INT64, INT64_MAX);
    for (size_t i = 0; i < r.n; i++)
        push(&got, r.v[i]);
    free(r.v);
    /* the reference: rows of the second half landing in emitted windows are late */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (i < n / 2 || d[i].time >= cut)
            d[m++] = d[i];
    slash_join_get_stats(s, &after);
    CHECK(after.late == n - m);
    rows want = reference(d, m, SLASH_WINDOW_TUMBLING, 100);
    CHECK(same_rows(&got, &want));
    slash_join_close(s);
    free(got.v), free(want.v), free(d);
}

/* ---- malformed deltas --------------------------------------------------------- */

static void stats_eq(const slash_join_stats *a, const slash_join_stats *b)
{
    CHECK(a->groups == b->groups && a->chunks == b->chunks && a->rows[0] == b->rows[0] &&
          a->rows[1] == b->rows[1] && a->log_bytes == b->log_bytes && a->late == b->late);
}

TEST(malformed_delta_rejected)
{
    in_row *d = gen(400, 10, 100);
    slash_join *src = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_BYTES, 1);
    slash_join *dst = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_BYTES, 1);
    slash_join *other = open_join(SLASH_WINDOW_TUMBLING, 10, SLASH_KEY_BYTES, 1);
    CHECK_OK(apply_all(src, SLASH_KEY_BYTES, d, 200));
    CHECK_OK(apply_all(dst, SLASH_KEY_BYTES, d + 200, 200));
    CHECK_OK(apply_all(other, SLASH_KEY_BYTES, d, 200));
    CHECK_OK(slash_join_begin_epoch(src));
    CHECK_OK(slash_join_begin_epoch(other));
    const void *addr, *oaddr;
    size_t len, olen;
    CHECK_OK(slash_join_delta(src, 0, &addr, &len));
    CHECK_OK(slash_join_delta(other, 0, &oaddr, &olen));
    CHECK(len > 1000);
    slash_join_stats before, now;
    slash_join_get_stats(dst, &before);
    uint8_t *buf = malloc(len + 1);

    CHECK_ST(slash_join_merge_delta(dst, oaddr, olen), SLASH_EPROTO); /* another config */
    CHECK_ST(slash_join_merge_delta(dst, addr, len - 8), SLASH_EPROTO); /* truncated */
    CHECK_ST(slash_join_merge_delta(dst, addr, 8), SLASH_EPROTO);
    /* bad magic in the middle: find the second record */
    uint32_t first;
    memcpy(&first, (const uint8_t *)addr + 8, 4);
    memcpy(buf, addr, len);
    buf[first + 15] ^= 0xff;
    CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    memcpy(buf, addr, len);
    buf[first + 12] = 9; /* unknown kind */
    CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    memcpy(buf, addr, len);
    buf[first + 13] = 0x80; /* unknown flag */
    CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    memcpy(buf, addr, len);
    buf[8] ^= 4; /* size of the first record, not a multiple of 8 */
    CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    /* a chunk naming no group: walk to the first chunk, shift its group */
    size_t off = 0;
    for (;;) {
        uint32_t size;
        memcpy(&size, (const uint8_t *)addr + off + 8, 4);
        if (((const uint8_t *)addr)[off + 12] != 1)
            break;
        off += size;
    }
    CHECK(off < len);
    const int64_t shifts[] = {-8, 4, 8}; /* onto another record, between records */
    for (size_t k = 0; k < sizeof shifts / sizeof shifts[0]; k++) {
        int64_t delta = shifts[k];
        memcpy(buf, addr, len);
        int64_t g;
        memcpy(&g, buf + off + 16, 8);
        g += delta;
        memcpy(buf + off + 16, &g, 8);
        CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    }
    memcpy(buf, addr, len);
    int64_t g = INT64_MIN;
    memcpy(buf + off + 16, &g, 8);
    CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    memcpy(buf, addr, len);
    uint32_t rows_cap[2];
    memcpy(rows_cap, buf + off + 24, 8);
    rows_cap[0] = rows_cap[1] + 1; /* more rows than room */
    memcpy(buf + off + 24, rows_cap, 8);
    CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    memcpy(buf, addr, len);
    int64_t bounds[2] = {50, 50}; /* an empty session */
    memcpy(buf + 16, bounds, 16);
    CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    memcpy(buf, addr, len);
    buf[13] = 1; /* the first group freed while its chunks are live */
    CHECK_ST(slash_join_merge_delta(dst, buf, len), SLASH_EPROTO);
    slash_join_get_stats(dst, &now);
    stats_eq(&before, &now);

    /* every single-byte corruption is rejected whole or merges as a delta */
    int rejected = 0;
    for (size_t i = 0; i < len; i += 3) {
        slash_join *probe = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_BYTES, 1);
        memcpy(buf, addr, len);
        buf[i] ^= (uint8_t)(1u << (i % 8));
        slash_status st = slash_join_merge_delta(probe, buf, len);
        CHECK(st == SLASH_OK || st == SLASH_EPROTO);
        if (st == SLASH_EPROTO) {
            slash_join_stats z;
            slash_join_get_stats(probe, &z);
            CHECK(z.groups == 0 && z.rows[0] == 0 && z.rows[1] == 0 && z.log_bytes == 0);
            rejected++;
        }
        slash_join_result *r = NULL;
        CHECK_OK(slash_join_emit(probe, INT64_MAX, &r));
        slash_join_result_free(r);
        slash_join_close(probe);
    }
    CHECK(rejected > 0);

    /* the intact region, at an odd address, merges */
    memcpy(buf + 1, addr, len);
    CHECK_OK(slash_join_merge_delta(dst, buf + 1, len));
    slash_join_get_stats(dst, &now);
    CHECK(now.rows[0] + now.rows[1] == 400);
    free(buf);
    CHECK_OK(slash_join_reset_delta(src));
    CHECK_OK(slash_join_reset_delta(other));
    slash_join_close(src), slash_join_close(dst), slash_join_close(other);
    free(d);
}

/* ---- bad input and states ------------------------------------------------------ */

TEST(bad_config_and_input)
{
    slash_join_config cfg = {0};
    slash_join *s = NULL;
    CHECK_OK(slash_window_init(&cfg.window, SLASH_WINDOW_SLIDING, 20, 10));
    cfg.key_type = SLASH_KEY_INT64;
    cfg.partitions = 1;
    CHECK_ST(slash_join_open(&cfg, &s), SLASH_EINVAL); /* sliding */
    CHECK(strstr(slash_last_error(), "window") != NULL);
    CHECK_OK(slash_window_init(&cfg.window, SLASH_WINDOW_TUMBLING, 20, 0));
    cfg.ncols[1] = SLASH_JOIN_MAX_COLS + 1;
    CHECK_ST(slash_join_open(&cfg, &s), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "right") != NULL);
    cfg.ncols[1] = 1;
    cfg.cols[1][0] = 7;
    CHECK_ST(slash_join_open(&cfg, &s), SLASH_EINVAL);
    cfg.cols[1][0] = SLASH_JOIN_F64;
    cfg.partitions = 0;
    CHECK_ST(slash_join_open(&cfg, &s), SLASH_EINVAL);
    cfg.partitions = 1;
    cfg.key_type = 9;
    CHECK_ST(slash_join_open(&cfg, &s), SLASH_EINVAL);
    CHECK(s == NULL);

    s = open_join(SLASH_WINDOW_TUMBLING, 10, SLASH_KEY_BYTES, 1);
    int64_t t[2] = {1, 2}, id[2] = {1, 2}, offs[3] = {0, 3, 3 + SLASH_JOIN_KEY_MAX + 1};
    double v[2] = {0, 0};
    uint8_t kd[4 + SLASH_JOIN_KEY_MAX] = {0};
    slash_join_batch b = {.side = 2, .n = 2, .times = t, .key_offsets = offs,
                          .key_offsets_64 = 1, .key_data = kd, .columns = {id, v}};
    CHECK_ST(slash_join_update(s, &b), SLASH_EINVAL); /* side */
    b.side = SLASH_JOIN_LEFT;
    CHECK_ST(slash_join_update(s, &b), SLASH_EINVAL); /* a key of SLASH_JOIN_KEY_MAX + 1 bytes */
    CHECK(strstr(slash_last_error(), "row 1") != NULL);
    offs[2] = 5;
    b.columns[1] = NULL;
    CHECK_ST(slash_join_update(s, &b), SLASH_EINVAL); /* a missing column */
    b.columns[1] = v;
    b.times = NULL;
    CHECK_ST(slash_join_update(s, &b), SLASH_EINVAL);
    b.times = t;
    t[0] = INT64_MIN;
    CHECK_ST(slash_join_update(s, &b), SLASH_EINVAL); /* before the first window */
    t[0] = 1;
    slash_join_stats st;
    slash_join_get_stats(s, &st);
    CHECK(st.groups == 0); /* nothing of the bad batches was applied */
    CHECK_OK(slash_join_update(s, &b));
    b.side = SLASH_JOIN_RIGHT; /* the right side reads only column 0 */
    b.columns[1] = NULL;
    CHECK_OK(slash_join_update(s, &b));

    /* states */
    const void *addr;
    size_t len;
    slash_join_result *r = NULL;
    CHECK_ST(slash_join_delta(s, 0, &addr, &len), SLASH_ESTATE);
    CHECK_ST(slash_join_reset_delta(s), SLASH_ESTATE);
    CHECK_OK(slash_join_begin_epoch(s));
    CHECK_ST(slash_join_begin_epoch(s), SLASH_ESTATE);
    CHECK_ST(slash_join_delta(s, 1, &addr, &len), SLASH_ERANGE);
    CHECK_ST(slash_join_emit(s, 100, &r), SLASH_ESTATE);
    CHECK(r == NULL);
    CHECK_OK(slash_join_reset_delta(s));
    CHECK_OK(slash_join_emit(s, 100, &r));
    CHECK(r && r->rows == 0 && r->key_offsets && r->key_offsets[0] == 0);
    slash_join_result_free(r);
    CHECK_ST(slash_join_merge_delta(s, NULL, 16), SLASH_EINVAL);
    CHECK_OK(slash_join_merge_delta(s, NULL, 0));
    slash_join_close(s);
    slash_join_close(NULL);
    slash_join_result_free(NULL);
}

/* ---- sessions that touch merge (Spark's and Flink's rule) ---------------------- */

TEST(session_rows_exactly_one_gap_apart_share_a_session)
{
    slash_join *s = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 1);
    put(s, 0, 1, 0, 100);
    put(s, 1, 1, 10, 200); /* [0,10) and [10,20) touch */
    put(s, 1, 2, 11, 201); /* key 2: gap + 1 apart, no pair */
    put(s, 0, 2, 0, 101);
    rows got = emit_all(s, SLASH_KEY_INT64, INT64_MAX);
    CHECK(got.n == 1);
    for (size_t i = 0; i < got.n; i++)
        CHECK(got.v[i].ws == 0 && got.v[i].we == 20 && got.v[i].key == 1 && got.v[i].lid == 100 &&
              got.v[i].rid == 200);
    free(got.v);
    slash_join_close(s);
}

TEST(session_row_touching_two_sessions_bridges_them)
{
    /* [0,10) and [20,30); a row at 10 covers [10,20), touching both */
    slash_join *s = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 1);
    put(s, 0, 1, 0, 100);
    put(s, 0, 1, 20, 101);
    slash_join_stats st;
    slash_join_get_stats(s, &st);
    CHECK(st.groups == 2);
    put(s, 1, 1, 10, 200);
    slash_join_get_stats(s, &st);
    CHECK(st.groups == 1);
    rows got = emit_all(s, SLASH_KEY_INT64, INT64_MAX);
    CHECK(got.n == 2);
    for (size_t i = 0; i < got.n; i++)
        CHECK(got.v[i].ws == 0 && got.v[i].we == 30 && got.v[i].rid == 200);
    free(got.v);
    slash_join_close(s);
}

TEST(session_ties_fuse_across_deltas_and_epochs)
{
    slash_join *a = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 2);
    slash_join *b = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 2);
    slash_join *leader = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 2);
    put(a, 0, 1, 0, 100); /* key 1: b's right row bridges a's two sessions */
    put(a, 0, 1, 20, 101);
    put(b, 1, 1, 10, 200);
    put(a, 0, 2, 0, 102); /* key 2: the tie arrives while a's delta is sealed */
    CHECK_OK(slash_join_begin_epoch(a));
    put(a, 1, 2, 10, 202);
    for (uint32_t p = 0; p < 2; p++) {
        const void *addr;
        size_t len;
        CHECK_OK(slash_join_delta(a, p, &addr, &len));
        CHECK_OK(slash_join_merge_delta(leader, addr, len));
    }
    CHECK_OK(slash_join_reset_delta(a));
    ship(b, leader, 2);
    ship(a, leader, 2);
    rows got = emit_all(leader, SLASH_KEY_INT64, INT64_MAX);
    CHECK(got.n == 3);
    int one = 0, two = 0;
    for (size_t i = 0; i < got.n; i++) {
        one += got.v[i].key == 1 && got.v[i].ws == 0 && got.v[i].we == 30 && got.v[i].rid == 200;
        two += got.v[i].key == 2 && got.v[i].ws == 0 && got.v[i].we == 20 && got.v[i].lid == 102 &&
               got.v[i].rid == 202;
    }
    CHECK(one == 2 && two == 1);
    free(got.v);
    slash_join_close(a), slash_join_close(b), slash_join_close(leader);
}

TEST(session_pairs_emitted_only_once_the_watermark_is_past_the_end)
{
    slash_join *s = open_join(SLASH_WINDOW_SESSION, 10, SLASH_KEY_INT64, 1);
    put(s, 0, 1, 0, 100);
    put(s, 1, 1, 5, 200); /* [0,15) */
    rows got = emit_all(s, SLASH_KEY_INT64, 15); /* a row at 15 may still come */
    CHECK(got.n == 0);
    free(got.v);
    put(s, 1, 1, 15, 201); /* it does, on time: [0,25) */
    got = emit_all(s, SLASH_KEY_INT64, 25);
    CHECK(got.n == 0);
    free(got.v);
    got = emit_all(s, SLASH_KEY_INT64, 26);
    CHECK(got.n == 2);
    for (size_t i = 0; i < got.n; i++)
        CHECK(got.v[i].ws == 0 && got.v[i].we == 25 && got.v[i].lid == 100);
    free(got.v);
    put(s, 0, 1, 15, 101); /* its cover [15,25) ends before the watermark: late */
    slash_join_stats st;
    slash_join_get_stats(s, &st);
    CHECK(st.late == 1 && st.groups == 0);
    slash_join_close(s);
}

/* A byte-string key of SLASH_JOIN_KEY_MAX bytes (longer than the state
 * backend's SLASH_SSB_KEY_MAX) is joined after travelling in a delta. */
TEST(longest_key_joins_across_a_delta)
{
    slash_join *helper = open_join(SLASH_WINDOW_TUMBLING, 10, SLASH_KEY_BYTES, 4);
    slash_join *leader = open_join(SLASH_WINDOW_TUMBLING, 10, SLASH_KEY_BYTES, 4);
    uint8_t kd[SLASH_JOIN_KEY_MAX];
    for (size_t i = 0; i < sizeof kd; i++)
        kd[i] = (uint8_t)('a' + i % 26);
    int64_t t[1] = {3}, id[1] = {7}, offs[2] = {0, SLASH_JOIN_KEY_MAX};
    double v[1] = {1.5};
    slash_join_batch b = {.side = SLASH_JOIN_LEFT, .n = 1, .times = t, .key_offsets = offs,
                          .key_offsets_64 = 1, .key_data = kd, .columns = {id, v}};
    CHECK_OK(slash_join_update(helper, &b));
    b.side = SLASH_JOIN_RIGHT;
    CHECK_OK(slash_join_update(leader, &b));
    ship(helper, leader, 4);
    slash_join_result *r = NULL;
    CHECK_OK(slash_join_emit(leader, 10, &r));
    CHECK(r->rows == 1);
    CHECK(r->key_offsets[1] - r->key_offsets[0] == SLASH_JOIN_KEY_MAX);
    CHECK(memcmp(r->key_data, kd, SLASH_JOIN_KEY_MAX) == 0);
    slash_join_result_free(r);
    slash_join_close(helper);
    slash_join_close(leader);
}

/* A tumbling store finds the groups an emit closes in its window lists
 * (join_dir.c): emits at a rising watermark, between updates of the leader
 * and deltas merged from a helper (whose shipped groups leave stale entries),
 * give every pair once, as the reference, and leave no group behind; the
 * helper, which never emits, keeps no lists of what it shipped. */
TEST(tumbling_emits_at_a_rising_watermark_between_deltas)
{
    const uint32_t parts = 4;
    const int64_t size = 25;
    const size_t rounds = 40, per = 200;
    in_row *d = malloc(rounds * per * sizeof *d);
    slash_join *leader = open_join(SLASH_WINDOW_TUMBLING, size, SLASH_KEY_INT64, parts);
    slash_join *helper = open_join(SLASH_WINDOW_TUMBLING, size, SLASH_KEY_INT64, parts);
    CHECK(leader && helper);
    if (!leader || !helper)
        return;
    rows got = {0};
    size_t n = 0;
    for (size_t round = 0; round < rounds; round++) {
        size_t first = n;
        for (size_t i = 0; i < per; i++, n++) { /* times in [10 * round, 10 * round + 40) */
            d[n].side = (int)(next_rand() & 1);
            d[n].key = (int64_t)(next_rand() % 30);
            d[n].time = (int64_t)(10 * round + next_rand() % 40);
            d[n].id = (int64_t)n;
            d[n].value = (double)(n % 7);
        }
        size_t *idx = malloc(per * sizeof *idx);
        size_t h = 0, l = 0;
        for (size_t i = first; i < n; i++) /* half to the helper, half to the leader */
            idx[(i & 1) ? per / 2 + l++ : h++] = i;
        CHECK_OK(apply(helper, SLASH_KEY_INT64, d, idx, h));
        CHECK_OK(apply(leader, SLASH_KEY_INT64, d, idx + per / 2, l));
        free(idx);
        ship(helper, leader, parts);
        rows out = emit_all(leader, SLASH_KEY_INT64, (int64_t)(10 * (round + 1)));
        for (size_t i = 0; i < out.n; i++) {
            CHECK(out.v[i].we <= (int64_t)(10 * (round + 1)));
            push(&got, out.v[i]);
        }
        free(out.v);
    }
    emit_into(&got, leader, SLASH_KEY_INT64, INT64_MAX);
    rows want = reference(d, n, SLASH_WINDOW_TUMBLING, size);
    CHECK(want.n > 1000);
    CHECK(same_rows(&got, &want));
    slash_join_stats st;
    slash_join_get_stats(leader, &st);
    CHECK(st.groups == 0 && st.rows[0] == 0 && st.rows[1] == 0 && st.late == 0);
    /* the helper never emits: its lists went with its shipped deltas */
    slash_join *fresh = open_join(SLASH_WINDOW_TUMBLING, size, SLASH_KEY_INT64, parts);
    slash_join_stats hs, fs;
    slash_join_get_stats(helper, &hs);
    slash_join_get_stats(fresh, &fs);
    CHECK(hs.groups == 0 && hs.index_bytes <= fs.index_bytes + 1024);
    slash_join_close(fresh);
    slash_join_close(helper);
    slash_join_close(leader);
    free(got.v), free(want.v), free(d);
}

int main(void)
{
    RUN(tumbling_int64);
    RUN(tumbling_bytes_partitioned);
    RUN(session_int64_partitioned);
    RUN(session_bytes);
    RUN(split_tumbling);
    RUN(split_tumbling_bytes);
    RUN(split_session);
    RUN(split_session_bytes);
    RUN(union_laws_tumbling);
    RUN(union_laws_session);
    RUN(session_bridging);
    RUN(session_chain_of_bridges);
    RUN(session_rows_exactly_one_gap_apart_share_a_session);
    RUN(session_row_touching_two_sessions_bridges_them);
    RUN(session_ties_fuse_across_deltas_and_epochs);
    RUN(session_pairs_emitted_only_once_the_watermark_is_past_the_end);
    RUN(emit_frees_state_and_late_rows);
    RUN(compaction_keeps_sets);
    RUN(tumbling_emits_at_a_rising_watermark_between_deltas);
    RUN(malformed_delta_rejected);
    RUN(bad_config_and_input);
    RUN(longest_key_joins_across_a_delta);
    return UNIT_DONE();
}
