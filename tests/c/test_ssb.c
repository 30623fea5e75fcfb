/* test_ssb.c - the state backend against a brute-force reference: tumbling,
 * sliding and session windows, int64 and byte-string keys, one store and
 * several stores merged through epoch deltas (also updating while a delta is
 * sealed), growth without a preset size, late records and bad input; and
 * session bounds case by case: records exactly one gap apart share a session
 * (Spark's and Flink's rule), in one store and across deltas and epochs;
 * and emits in small steps over many partitions (most skip their scan: nothing
 * due) fire every window at exactly the first emit that closes it; a large
 * imported partition (its index faulted in at once) matches its origin; a
 * count and int64 sums per int64 key (their own path) match a brute-force
 * count and sum. */
#include <stdio.h>
#include <stdlib.h>

#include "slash/ssb.h"
#include "unit.h"

enum { A_COUNT, A_SUM, A_MIN, A_MAX, A_AVG, NAGGS };

typedef struct row {
    int64_t ws, we, key, count, sum, min, max;
    double avg;
} row;

typedef struct data {
    size_t n;
    int64_t *keys, *times, *vals;
} data;

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static data gen(size_t n, int64_t nkeys, int64_t tspan)
{
    data d = {n, malloc(n * 8), malloc(n * 8), malloc(n * 8)};
    for (size_t i = 0; i < n; i++) {
        d.keys[i] = (int64_t)(next_rand() % (uint64_t)nkeys) - nkeys / 3;
        d.times[i] = (int64_t)(next_rand() % (uint64_t)(2 * tspan)) - tspan;
        d.vals[i] = (int64_t)(next_rand() % 2001) - 1000;
    }
    return d;
}

static void data_free(data *d) { free(d->keys), free(d->times), free(d->vals); }

static slash_ssb *open_store(const slash_window *w, slash_key_type kt, uint32_t parts)
{
    slash_ssb_config cfg = {0};
    cfg.window = *w;
    cfg.key_type = kt;
    cfg.partitions = parts;
    cfg.naggs = NAGGS;
    cfg.aggs[A_COUNT] = SLASH_AGG_COUNT;
    cfg.aggs[A_SUM] = SLASH_AGG_SUM_I64;
    cfg.aggs[A_MIN] = SLASH_AGG_MIN_I64;
    cfg.aggs[A_MAX] = SLASH_AGG_MAX_I64;
    cfg.aggs[A_AVG] = SLASH_AGG_AVG_I64;
    cfg.log_reserve = (size_t)1 << 30;
    slash_ssb *s = NULL;
    slash_status st = slash_ssb_open(&cfg, &s);
    if (st != SLASH_OK)
        fprintf(stderr, "open: %s\n", slash_last_error());
    return s;
}

/* updates s with records [lo, hi) of d; byte keys are decimal strings */
static slash_status update(slash_ssb *s, slash_key_type kt, const data *d, size_t lo, size_t hi)
{
    slash_ssb_batch b = {0};
    b.n = hi - lo;
    b.times = d->times + lo;
    for (int j = 0; j < NAGGS; j++)
        b.values[j] = j == A_COUNT ? NULL : d->vals + lo;
    char *buf = NULL;
    int32_t *offs = NULL;
    if (kt == SLASH_KEY_INT64) {
        b.keys = d->keys + lo;
    } else {
        buf = malloc(b.n * 24 + 1);
        offs = malloc((b.n + 1) * 4);
        int32_t o = 0;
        for (size_t i = 0; i < b.n; i++) {
            offs[i] = o;
            o += sprintf(buf + o, "k%lld", (long long)d->keys[lo + i]);
        }
        offs[b.n] = o;
        b.key_offsets = offs;
        b.key_data = (const uint8_t *)buf;
    }
    slash_status st = slash_ssb_update(s, &b);
    free(buf), free(offs);
    return st;
}

static int row_cmp(const void *a, const void *b)
{
    const row *x = a, *y = b;
    if (x->ws != y->ws) return x->ws < y->ws ? -1 : 1;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return 0;
}

/* appends the rows of r to *rows */
static void collect(slash_ssb_result *r, slash_key_type kt, row **rows, size_t *n)
{
    *rows = realloc(*rows, (*n + r->rows + 1) * sizeof(row));
    for (size_t i = 0; i < r->rows; i++) {
        row *o = &(*rows)[(*n)++];
        o->ws = r->window_start[i];
        o->we = r->window_end[i];
        if (kt == SLASH_KEY_INT64) {
            o->key = r->keys[i];
        } else {
            char k[80] = {0};
            memcpy(k, r->key_data + r->key_offsets[i], (size_t)(r->key_offsets[i + 1] - r->key_offsets[i]));
            o->key = atoll(k + 1);
        }
        o->count = ((int64_t *)r->columns[A_COUNT])[i];
        o->sum = ((int64_t *)r->columns[A_SUM])[i];
        o->min = ((int64_t *)r->columns[A_MIN])[i];
        o->max = ((int64_t *)r->columns[A_MAX])[i];
        o->avg = ((double *)r->columns[A_AVG])[i];
    }
}

static void ref_add(row **rows, size_t *n, int64_t ws, int64_t we, int64_t key, int64_t v)
{
    for (size_t i = 0; i < *n; i++) {
        row *r = &(*rows)[i];
        if (r->ws == ws && r->key == key) {
            r->count++, r->sum += v;
            if (v < r->min) r->min = v;
            if (v > r->max) r->max = v;
            return;
        }
    }
    *rows = realloc(*rows, (*n + 1) * sizeof(row));
    (*rows)[(*n)++] = (row){ws, we, key, 1, v, v, v, 0};
}

static int cmp_kt(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* brute force: every window of every record */
static row *reference(const slash_window *w, const data *d, size_t *n)
{
    row *rows = NULL;
    *n = 0;
    if (w->kind != SLASH_WINDOW_SESSION) {
        for (size_t i = 0; i < d->n; i++) {
            int64_t t = d->times[i];
            for (int64_t s = slash_floor_div(t, w->slide) * w->slide; s > t - w->size; s -= w->slide)
                ref_add(&rows, n, s, s + w->size, d->keys[i], d->vals[i]);
        }
    } else {
        /* sort (key, time, value) triples; a gap > size starts a new session
         * (events exactly `size` apart share one, as in Spark and Flink) */
        int64_t *kt = malloc(d->n * 3 * 8);
        for (size_t i = 0; i < d->n; i++)
            kt[3 * i] = d->keys[i], kt[3 * i + 1] = d->times[i], kt[3 * i + 2] = d->vals[i];
        qsort(kt, d->n, 24, cmp_kt);
        size_t start = 0;
        for (size_t i = 1; i <= d->n; i++) {
            if (i == d->n || kt[3 * i] != kt[3 * start] || kt[3 * i + 1] - kt[3 * (i - 1) + 1] > w->size) {
                for (size_t j = start; j < i; j++)
                    ref_add(&rows, n, kt[3 * start + 1], kt[3 * (i - 1) + 1] + w->size, kt[3 * start], kt[3 * j + 2]);
                start = i;
            }
        }
        free(kt);
    }
    for (size_t i = 0; i < *n; i++)
        rows[i].avg = (double)rows[i].sum / (double)rows[i].count;
    qsort(rows, *n, sizeof(row), row_cmp);
    return rows;
}

static int same_rows(row *got, size_t ngot, row *want, size_t nwant)
{
    qsort(got, ngot, sizeof(row), row_cmp);
    if (ngot != nwant) {
        fprintf(stderr, "  got %zu rows, want %zu\n", ngot, nwant);
        return 0;
    }
    for (size_t i = 0; i < ngot; i++) {
        row *a = &got[i], *b = &want[i];
        if (a->ws != b->ws || a->we != b->we || a->key != b->key || a->count != b->count ||
            a->sum != b->sum || a->min != b->min || a->max != b->max || a->avg != b->avg) {
            fprintf(stderr, "  row %zu: got [%lld,%lld) k=%lld n=%lld s=%lld, want [%lld,%lld) k=%lld n=%lld s=%lld\n",
                    i, (long long)a->ws, (long long)a->we, (long long)a->key, (long long)a->count,
                    (long long)a->sum, (long long)b->ws, (long long)b->we, (long long)b->key,
                    (long long)b->count, (long long)b->sum);
            return 0;
        }
    }
    return 1;
}

/* one store: update in batches, emit twice, compare with the reference */
static void check_single(slash_window_kind kind, int64_t size, int64_t slide, slash_key_type kt,
                         uint32_t parts)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, kind, size, slide));
    data d = gen(3000, 40, 200);
    slash_ssb *s = open_store(&w, kt, parts);
    CHECK(s != NULL);
    if (!s)
        return;
    for (size_t lo = 0; lo < d.n; lo += 700)
        CHECK_OK(update(s, kt, &d, lo, lo + 700 < d.n ? lo + 700 : d.n));
    row *got = NULL;
    size_t ngot = 0;
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(s, 0, &r));
    for (size_t i = 0; r && i < r->rows; i++) /* a session ending at 0 may still grow */
        CHECK(kind == SLASH_WINDOW_SESSION ? r->window_end[i] < 0 : r->window_end[i] <= 0);
    if (r)
        collect(r, kt, &got, &ngot);
    slash_ssb_result_free(r);
    CHECK_OK(slash_ssb_emit(s, INT64_MAX, &r));
    if (r)
        collect(r, kt, &got, &ngot);
    slash_ssb_result_free(r);
    slash_ssb_stats stats;
    slash_ssb_get_stats(s, &stats);
    CHECK(stats.records == 0 && stats.late == 0);
    size_t nwant;
    row *want = reference(&w, &d, &nwant);
    CHECK(same_rows(got, ngot, want, nwant));
    free(got), free(want);
    slash_ssb_close(s);
    data_free(&d);
}

/* Emits up to up_to; returns the rows (keys of type kt) sorted by (start,
 * key), *n of them. */
static row *emit_keyed_rows(slash_ssb *s, slash_key_type kt, int64_t up_to, size_t *n)
{
    row *rows = NULL;
    *n = 0;
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(s, up_to, &r));
    if (r)
        collect(r, kt, &rows, n);
    slash_ssb_result_free(r);
    if (*n)
        qsort(rows, *n, sizeof(row), row_cmp);
    return rows;
}

/* The same for int64 keys. */
static row *emit_rows(slash_ssb *s, int64_t up_to, size_t *n)
{
    return emit_keyed_rows(s, SLASH_KEY_INT64, up_to, n);
}

/* a selection (skip[i] != 0: not part of the batch) gives exactly the
 * result of the selected rows alone, for every window kind */
static void check_selection(slash_window_kind kind, int64_t size, int64_t slide)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, kind, size, slide));
    data d = gen(3000, 40, 200);
    uint8_t *skip = malloc(d.n);
    data sel = {0, malloc(d.n * 8), malloc(d.n * 8), malloc(d.n * 8)};
    for (size_t i = 0; i < d.n; i++) {
        skip[i] = (next_rand() % 3) != 0;
        if (!skip[i])
            sel.keys[sel.n] = d.keys[i], sel.times[sel.n] = d.times[i], sel.vals[sel.n++] = d.vals[i];
    }
    slash_ssb *s = open_store(&w, SLASH_KEY_INT64, 2);
    CHECK(s != NULL);
    if (s) {
        for (size_t lo = 0; lo < d.n; lo += 700) {
            size_t hi = lo + 700 < d.n ? lo + 700 : d.n;
            slash_ssb_batch b = {.n = hi - lo, .times = d.times + lo, .keys = d.keys + lo,
                                 .skip = skip + lo};
            for (int j = 0; j < NAGGS; j++)
                b.values[j] = j == A_COUNT ? NULL : d.vals + lo;
            CHECK_OK(slash_ssb_update(s, &b));
        }
        size_t ngot;
        row *got = emit_rows(s, INT64_MAX, &ngot);
        slash_ssb_stats stats;
        slash_ssb_get_stats(s, &stats);
        CHECK(stats.late == 0); /* rows not selected are not late */
        size_t nwant;
        row *want = reference(&w, &sel, &nwant);
        CHECK(nwant > 0 && same_rows(got, ngot, want, nwant));
        free(got), free(want);
        slash_ssb_close(s);
    }
    free(skip);
    data_free(&sel);
    data_free(&d);
}

/* (window start, key, value) of the selected rows of d, tumbling windows of
 * `size`, sorted and summed up: the reference at many keys (ref_add is
 * quadratic) */
static row *reference_tumbling(const data *d, const uint8_t *skip, int64_t size, size_t *n)
{
    int64_t *t = malloc((d->n + 1) * 24);
    size_t m = 0;
    for (size_t i = 0; i < d->n; i++)
        if (!skip[i])
            t[3 * m] = slash_floor_div(d->times[i], size) * size, t[3 * m + 1] = d->keys[i],
            t[3 * m + 2] = d->vals[i], m++;
    qsort(t, m, 24, cmp_kt);
    row *rows = malloc((m + 1) * sizeof(row));
    *n = 0;
    for (size_t i = 0; i < m; i++) {
        row *r = &rows[*n];
        if (i == 0 || t[3 * i] != t[3 * (i - 1)] || t[3 * i + 1] != t[3 * (i - 1) + 1]) {
            *r = (row){t[3 * i], t[3 * i] + size, t[3 * i + 1], 0, 0, INT64_MAX, INT64_MIN, 0};
            (*n)++;
        } else {
            r = &rows[*n - 1];
        }
        const int64_t v = t[3 * i + 2];
        r->count++, r->sum += v;
        if (v < r->min) r->min = v;
        if (v > r->max) r->max = v;
    }
    for (size_t i = 0; i < *n; i++)
        rows[i].avg = (double)rows[i].sum / (double)rows[i].count;
    free(t);
    return rows;
}

/* Byte-string keys by the hundred thousand over several partitions, each
 * far below the size at which one partition alone turns prefetching on but
 * all together past it (the fold then hashes and prefetches every row and
 * the record each cache miss flushes), a third of the rows not selected:
 * every window's aggregates equal those of the selected rows alone. */
TEST(selection_bytes_many_keys_over_partitions)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 500, 0));
    data d = gen(300000, 100000, 1000);
    uint8_t *skip = malloc(d.n);
    for (size_t i = 0; i < d.n; i++)
        skip[i] = (next_rand() % 3) == 0;
    slash_ssb *s = open_store(&w, SLASH_KEY_BYTES, 16);
    CHECK(s != NULL);
    if (s) {
        char *buf = malloc(d.n * 24 + 1);
        int32_t *offs = malloc((d.n + 1) * 4);
        for (size_t lo = 0; lo < d.n; lo += 50000) {
            const size_t hi = lo + 50000 < d.n ? lo + 50000 : d.n;
            int32_t o = 0;
            for (size_t i = lo; i < hi; i++) {
                offs[i - lo] = o;
                o += sprintf(buf + o, "k%lld", (long long)d.keys[i]);
            }
            offs[hi - lo] = o;
            slash_ssb_batch b = {.n = hi - lo, .times = d.times + lo, .key_offsets = offs,
                                 .key_data = (const uint8_t *)buf, .skip = skip + lo};
            for (int j = 0; j < NAGGS; j++)
                b.values[j] = j == A_COUNT ? NULL : d.vals + lo;
            CHECK_OK(slash_ssb_update(s, &b));
        }
        free(buf), free(offs);
        size_t ngot;
        row *got = emit_keyed_rows(s, SLASH_KEY_BYTES, INT64_MAX, &ngot);
        size_t nwant;
        row *want = reference_tumbling(&d, skip, 500, &nwant);
        CHECK(nwant > 300000 / 3 && same_rows(got, ngot, want, nwant));
        free(got), free(want);
        slash_ssb_close(s);
    }
    free(skip);
    data_free(&d);
}

TEST(selection_tumbling) { check_selection(SLASH_WINDOW_TUMBLING, 30, 0); }
TEST(selection_sliding) { check_selection(SLASH_WINDOW_SLIDING, 60, 20); }
TEST(selection_session) { check_selection(SLASH_WINDOW_SESSION, 15, 0); }

TEST(tumbling_int64) { check_single(SLASH_WINDOW_TUMBLING, 30, 0, SLASH_KEY_INT64, 1); }
TEST(tumbling_bytes_partitioned) { check_single(SLASH_WINDOW_TUMBLING, 25, 0, SLASH_KEY_BYTES, 3); }
TEST(sliding_int64) { check_single(SLASH_WINDOW_SLIDING, 60, 20, SLASH_KEY_INT64, 1); }
TEST(sliding_uneven_bytes) { check_single(SLASH_WINDOW_SLIDING, 50, 20, SLASH_KEY_BYTES, 2); }
TEST(session_int64) { check_single(SLASH_WINDOW_SESSION, 15, 0, SLASH_KEY_INT64, 1); }
TEST(session_bytes) { check_single(SLASH_WINDOW_SESSION, 9, 0, SLASH_KEY_BYTES, 2); }

/* helpers update splits of the input over several epochs (also while their
 * delta is sealed) and ship deltas to a leader, which must then equal the
 * reference */
static void check_deltas(slash_window_kind kind, int64_t size, int64_t slide, slash_key_type kt)
{
    enum { H = 3, CHUNKS = 4 };
    slash_window w;
    CHECK_OK(slash_window_init(&w, kind, size, slide));
    data d = gen(2400, 30, 150);
    slash_ssb *leader = open_store(&w, kt, 2), *helper[H];
    for (int h = 0; h < H; h++)
        helper[h] = open_store(&w, kt, 2);
    /* helper h gets records i with i % H == h, in CHUNKS chunks; build its data */
    data part[H];
    for (int h = 0; h < H; h++) {
        size_t n = 0;
        part[h] = (data){0, malloc(d.n * 8), malloc(d.n * 8), malloc(d.n * 8)};
        for (size_t i = (size_t)h; i < d.n; i += H)
            part[h].keys[n] = d.keys[i], part[h].times[n] = d.times[i], part[h].vals[n++] = d.vals[i];
        part[h].n = n;
    }
    for (int c = 0; c <= CHUNKS; c++) {
        for (int h = 0; h < H; h++) {
            size_t n = part[h].n, lo = n * (size_t)c / CHUNKS, hi = n * (size_t)(c + 1) / CHUNKS;
            if (c > 0) {
                /* a sealed delta is outstanding: update, then ship and reset */
                if (c < CHUNKS)
                    CHECK_OK(update(helper[h], kt, &part[h], lo, (lo + hi) / 2));
                for (uint32_t q = 0; q < 2; q++) {
                    const void *a;
                    size_t len;
                    CHECK_OK(slash_ssb_delta(helper[h], q, &a, &len));
                    CHECK_OK(slash_ssb_merge_delta(leader, a, len));
                }
                CHECK_OK(slash_ssb_reset_delta(helper[h]));
                if (c < CHUNKS)
                    CHECK_OK(update(helper[h], kt, &part[h], (lo + hi) / 2, hi));
            } else {
                CHECK_OK(update(helper[h], kt, &part[h], lo, hi));
            }
            if (c < CHUNKS || h < 0)
                CHECK_OK(slash_ssb_begin_epoch(helper[h]));
        }
    }
    for (int h = 0; h < H; h++) {
        slash_ssb_stats st;
        slash_ssb_get_stats(helper[h], &st);
        CHECK(st.records == 0); /* everything was shipped */
    }
    row *got = NULL;
    size_t ngot = 0, nwant;
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(leader, INT64_MAX, &r));
    if (r)
        collect(r, kt, &got, &ngot);
    slash_ssb_result_free(r);
    row *want = reference(&w, &d, &nwant);
    CHECK(same_rows(got, ngot, want, nwant));
    free(got), free(want);
    for (int h = 0; h < H; h++)
        slash_ssb_close(helper[h]), data_free(&part[h]);
    slash_ssb_close(leader);
    data_free(&d);
}

TEST(deltas_tumbling) { check_deltas(SLASH_WINDOW_TUMBLING, 20, 0, SLASH_KEY_INT64); }
TEST(deltas_sliding_bytes) { check_deltas(SLASH_WINDOW_SLIDING, 40, 10, SLASH_KEY_BYTES); }
TEST(deltas_session) { check_deltas(SLASH_WINDOW_SESSION, 12, 0, SLASH_KEY_INT64); }

TEST(growth_without_preset_size)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 1000, 0));
    slash_ssb *s = open_store(&w, SLASH_KEY_INT64, 1);
    const size_t n = 300000;
    data d = {n, malloc(n * 8), malloc(n * 8), malloc(n * 8)};
    for (size_t i = 0; i < n; i++)
        d.keys[i] = (int64_t)(i * 2654435761u), d.times[i] = 5, d.vals[i] = 1;
    CHECK_OK(update(s, SLASH_KEY_INT64, &d, 0, n));
    CHECK_OK(update(s, SLASH_KEY_INT64, &d, 0, n)); /* every key twice */
    slash_ssb_stats st;
    slash_ssb_get_stats(s, &st);
    CHECK(st.records == n);
    CHECK(st.memory_bytes < 2 * n * st.record_bytes);
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(s, 1000, &r));
    CHECK(r && r->rows == n);
    for (size_t i = 0; r && i < r->rows; i++)
        CHECK(((int64_t *)r->columns[A_COUNT])[i] == 2);
    slash_ssb_result_free(r);
    slash_ssb_get_stats(s, &st);
    CHECK(st.records == 0 && st.memory_bytes < ((size_t)1 << 20) + st.index_bytes);
    slash_ssb_close(s);
    data_free(&d);
}

TEST(late_records_and_states)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 10, 0));
    slash_ssb *s = open_store(&w, SLASH_KEY_INT64, 1);
    data d = {3, (int64_t[]){1, 1, 1}, (int64_t[]){3, 12, 25}, (int64_t[]){1, 2, 3}};
    CHECK_OK(update(s, SLASH_KEY_INT64, &d, 0, 3));
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(s, 20, &r));
    CHECK(r && r->rows == 2);
    slash_ssb_result_free(r);
    CHECK(slash_ssb_watermark(s) == 20);
    CHECK_OK(update(s, SLASH_KEY_INT64, &d, 0, 3)); /* 3 and 12 are late now */
    slash_ssb_stats st;
    slash_ssb_get_stats(s, &st);
    CHECK(st.late == 2 && st.records == 1);
    const void *a;
    size_t len;
    CHECK_ST(slash_ssb_delta(s, 0, &a, &len), SLASH_ESTATE);
    CHECK_ST(slash_ssb_reset_delta(s), SLASH_ESTATE);
    CHECK_OK(slash_ssb_begin_epoch(s));
    CHECK_ST(slash_ssb_begin_epoch(s), SLASH_ESTATE);
    CHECK_ST(slash_ssb_emit(s, 100, &r), SLASH_ESTATE);
    CHECK_ST(slash_ssb_delta(s, 1, &a, &len), SLASH_ERANGE);
    CHECK_OK(slash_ssb_delta(s, 0, &a, &len));
    CHECK(len == st.record_bytes);
    CHECK_OK(slash_ssb_reset_delta(s));
    slash_ssb_close(s);
}

TEST(bad_input)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 10, 0));
    slash_ssb *s = open_store(&w, SLASH_KEY_BYTES, 1);
    slash_ssb_batch b = {0};
    int64_t t[2] = {1, 2}, v[2] = {1, 2};
    int32_t offs[3] = {0, 3, 70};
    uint8_t keys[70] = {0};
    b.n = 2, b.times = t, b.key_offsets = offs, b.key_data = keys;
    for (int j = 1; j < NAGGS; j++)
        b.values[j] = v;
    CHECK_ST(slash_ssb_update(s, &b), SLASH_EINVAL); /* second key is 67 bytes */
    CHECK(strstr(slash_last_error(), "row 1") != NULL);
    offs[2] = 5;
    b.values[A_MIN] = NULL;
    CHECK_ST(slash_ssb_update(s, &b), SLASH_EINVAL);
    b.values[A_MIN] = v;
    b.times = NULL;
    CHECK_ST(slash_ssb_update(s, &b), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "times") != NULL);
    b.times = t;
    CHECK_OK(slash_ssb_update(s, &b));
    /* a region from a store with another config, and garbage */
    slash_ssb *other = open_store(&w, SLASH_KEY_INT64, 1);
    data d = {1, (int64_t[]){7}, (int64_t[]){3}, (int64_t[]){1}};
    CHECK_OK(update(other, SLASH_KEY_INT64, &d, 0, 1));
    CHECK_OK(slash_ssb_begin_epoch(other));
    const void *a;
    size_t len;
    CHECK_OK(slash_ssb_delta(other, 0, &a, &len));
    CHECK_ST(slash_ssb_merge_delta(s, a, len), SLASH_EPROTO);
    CHECK_ST(slash_ssb_merge_delta(other, a, len - 8), SLASH_EPROTO); /* truncated */
    uint8_t junk[64];
    memset(junk, 0x5a, sizeof junk);
    CHECK_ST(slash_ssb_merge_delta(other, junk, sizeof junk), SLASH_EPROTO);
    /* unaligned copy of a good region merges */
    uint8_t *copy = malloc(len + 1);
    memcpy(copy + 1, a, len);
    CHECK_OK(slash_ssb_merge_delta(other, copy + 1, len));
    free(copy);
    slash_ssb_close(other);
    slash_ssb_config cfg = {0};
    CHECK_ST(slash_ssb_open(&cfg, &other), SLASH_EINVAL);
    cfg.window = w, cfg.key_type = SLASH_KEY_INT64, cfg.partitions = 0;
    CHECK_ST(slash_ssb_open(&cfg, &other), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "partitions") != NULL);
    slash_ssb_close(s);
}

/* ---- emits that skip partitions with nothing due ---------------------------- */

/* Many partitions, and an emit every few time units: most emits find
 * nothing closed in most partitions and skip their scan (ssb_part.due).
 * `active` of the `nkeys` keys get records, a set that moves on every 10
 * emits, so partitions also fall quiet while their last windows close. Records keep arriving at or after the last emit time (so
 * none is late), and a partition is exported, dropped and imported back
 * halfway (its due rebuilt by the bulk link). Every row must come out at
 * exactly the first emit that closes its window, and all rows together must
 * equal the brute-force reference. */
static void check_emit_steps(slash_window_kind kind, int64_t size, int64_t slide, slash_key_type kt,
                             uint64_t nkeys, uint64_t active)
{
    enum { STEPS = 120, PER = 20, PARTS = 8 };
    slash_window w;
    CHECK_OK(slash_window_init(&w, kind, size, slide));
    slash_ssb *s = open_store(&w, kt, PARTS);
    CHECK(s != NULL);
    if (!s)
        return;
    data d = {STEPS * PER, malloc(STEPS * PER * 8), malloc(STEPS * PER * 8), malloc(STEPS * PER * 8)};
    int64_t wms[STEPS + 1];
    int64_t wm = -200;
    row *got = NULL;
    size_t ngot = 0;
    int *step_of = NULL;
    for (int i = 0; i < STEPS; i++) {
        for (size_t j = (size_t)i * PER; j < (size_t)(i + 1) * PER; j++) {
            d.keys[j] = (int64_t)(((uint64_t)i / 10 * active + next_rand() % active) % nkeys);
            d.times[j] = wm + (int64_t)(next_rand() % 40);
            d.vals[j] = (int64_t)(next_rand() % 2001) - 1000;
        }
        CHECK_OK(update(s, kt, &d, (size_t)i * PER, (size_t)(i + 1) * PER));
        if (i == STEPS / 2) { /* a hand-over to itself of a partition holding records */
            bool moved = false;
            for (uint32_t q = 0; q < PARTS && !moved; q++) {
                uint8_t *buf = NULL;
                size_t len = 0;
                int64_t emitted = 0;
                CHECK_OK(slash_ssb_export_partition(s, q, &buf, &len, &emitted));
                if (len) {
                    CHECK_OK(slash_ssb_drop_partition(s, q));
                    CHECK_OK(slash_ssb_import_partition(s, q, emitted, buf, len));
                    moved = true;
                }
                free(buf);
            }
            CHECK(moved);
        }
        wm += 1 + (int64_t)(next_rand() % 6);
        wms[i] = i == STEPS - 1 ? INT64_MAX : wm;
        slash_ssb_result *r = NULL;
        CHECK_OK(slash_ssb_emit(s, wms[i], &r));
        size_t before = ngot;
        if (r)
            collect(r, kt, &got, &ngot);
        slash_ssb_result_free(r);
        step_of = realloc(step_of, (ngot + 1) * sizeof *step_of);
        for (size_t j = before; j < ngot; j++)
            step_of[j] = i;
    }
    slash_ssb_stats stats;
    slash_ssb_get_stats(s, &stats);
    CHECK(stats.records == 0 && stats.late == 0);
    size_t nwant;
    row *want = reference(&w, &d, &nwant);
    uint8_t *seen = calloc(nwant + 1, 1);
    size_t matched = 0, on_time = 0;
    for (size_t j = 0; j < ngot; j++) {
        const row *a = &got[j];
        for (size_t k = 0; k < nwant; k++) {
            const row *b = &want[k];
            if (seen[k] || a->ws != b->ws || a->key != b->key)
                continue;
            if (a->we == b->we && a->count == b->count && a->sum == b->sum && a->min == b->min &&
                a->max == b->max && a->avg == b->avg)
                matched++;
            seen[k] = 1;
            int first = 0; /* the first emit that closes the window */
            while (first < STEPS - 1 && !slash_window_closed(&w, b->we, wms[first]))
                first++;
            if (step_of[j] == first)
                on_time++;
            else
                fprintf(stderr, "  [%lld,%lld) key %lld emitted at step %d, due at step %d\n",
                        (long long)b->ws, (long long)b->we, (long long)b->key, step_of[j], first);
            break;
        }
    }
    CHECK(nwant > 60);
    CHECK(ngot == nwant && matched == nwant && on_time == nwant);
    free(seen), free(got), free(want), free(step_of);
    slash_ssb_close(s);
    data_free(&d);
}

TEST(emit_steps_tumbling_fire_each_window_on_time) { check_emit_steps(SLASH_WINDOW_TUMBLING, 30, 0, SLASH_KEY_INT64, 48, 4); }
TEST(emit_steps_sliding_fire_each_window_on_time) { check_emit_steps(SLASH_WINDOW_SLIDING, 60, 20, SLASH_KEY_INT64, 48, 4); }
TEST(emit_steps_sliding_uneven_bytes_fire_each_window_on_time) { check_emit_steps(SLASH_WINDOW_SLIDING, 50, 20, SLASH_KEY_BYTES, 48, 4); }
TEST(emit_steps_session_fire_each_session_on_time) { check_emit_steps(SLASH_WINDOW_SESSION, 5, 0, SLASH_KEY_INT64, 400, 40); }

/* ---- sessions that touch merge (Spark's and Flink's rule) -------------------- */

/* Updates s with one record of int64 key k at time t with value v. */
static void put1(slash_ssb *s, int64_t k, int64_t t, int64_t v)
{
    data d = {1, &k, &t, &v};
    CHECK_OK(update(s, SLASH_KEY_INT64, &d, 0, 1));
}

/* A partition large enough that its import reserves an index of more than
 * 4 MiB (faulted in at once, small pages: slash_hidx_init_prefaulted), then
 * updated again through that index: emits exactly what the store it was
 * exported from emits after the same updates. */
TEST(large_import_with_a_prefaulted_index_matches_its_origin)
{
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 100, 0));
    slash_ssb *a = open_store(&w, SLASH_KEY_INT64, 1), *b = open_store(&w, SLASH_KEY_INT64, 1);
    CHECK(a && b);
    if (!a || !b)
        return;
    enum { N = 300000 };
    data d = {N, malloc(N * 8), malloc(N * 8), malloc(N * 8)};
    for (size_t i = 0; i < N; i++)
        d.keys[i] = (int64_t)i, d.times[i] = (int64_t)(i % 3) * 100, d.vals[i] = (int64_t)(i % 1000);
    CHECK_OK(update(a, SLASH_KEY_INT64, &d, 0, N));
    uint8_t *buf = NULL;
    size_t len = 0;
    int64_t emitted = 0;
    CHECK_OK(slash_ssb_export_partition(a, 0, &buf, &len, &emitted));
    CHECK(len > ((size_t)8 << 20)); /* > 131,072 records: an index of > 4 MiB */
    CHECK_OK(slash_ssb_import_partition(b, 0, emitted, buf, len));
    free(buf);
    for (size_t i = 0; i < N; i++) /* the same keys and windows again, and new windows */
        d.vals[i] = -(int64_t)i, d.times[i] = (int64_t)(i % 4) * 100;
    CHECK_OK(update(a, SLASH_KEY_INT64, &d, 0, N));
    CHECK_OK(update(b, SLASH_KEY_INT64, &d, 0, N));
    size_t na = 0, nb = 0;
    row *ra = emit_rows(a, INT64_MAX, &na), *rb = emit_rows(b, INT64_MAX, &nb);
    CHECK(na > N && same_rows(rb, nb, ra, na));
    free(ra), free(rb);
    data_free(&d);
    slash_ssb_close(a);
    slash_ssb_close(b);
}

static int is_row(const row *r, int64_t ws, int64_t we, int64_t key, int64_t count, int64_t sum)
{
    return r->ws == ws && r->we == we && r->key == key && r->count == count && r->sum == sum;
}

/* Seals from's epoch, merges every partition's delta into to, resets. */
static void ship_ssb(slash_ssb *from, slash_ssb *to, uint32_t parts)
{
    CHECK_OK(slash_ssb_begin_epoch(from));
    for (uint32_t q = 0; q < parts; q++) {
        const void *a;
        size_t len;
        CHECK_OK(slash_ssb_delta(from, q, &a, &len));
        CHECK_OK(slash_ssb_merge_delta(to, a, len));
    }
    CHECK_OK(slash_ssb_reset_delta(from));
}

static slash_ssb *open_session(int64_t gap, uint32_t parts)
{
    slash_window w;
    if (slash_window_init(&w, SLASH_WINDOW_SESSION, gap, 0) != SLASH_OK)
        return NULL;
    return open_store(&w, SLASH_KEY_INT64, parts);
}

TEST(session_records_exactly_one_gap_apart_merge)
{
    slash_ssb *s = open_session(10, 1);
    put1(s, 1, 0, 1);
    put1(s, 1, 10, 2); /* [0,10) and [10,20) touch */
    put1(s, 1, 20, 4);
    put1(s, 2, 30, 1); /* and in the other order */
    put1(s, 2, 20, 2);
    size_t n;
    row *got = emit_rows(s, INT64_MAX, &n);
    CHECK(n == 2 && is_row(&got[0], 0, 30, 1, 3, 7) && is_row(&got[1], 20, 40, 2, 2, 3));
    free(got);
    slash_ssb_close(s);
}

TEST(session_records_gap_plus_one_apart_stay_apart)
{
    slash_ssb *s = open_session(10, 1);
    put1(s, 1, 0, 1);
    put1(s, 1, 11, 2);
    put1(s, 1, -11, 4);
    size_t n;
    row *got = emit_rows(s, INT64_MAX, &n);
    CHECK(n == 3 && is_row(&got[0], -11, -1, 1, 1, 4) && is_row(&got[1], 0, 10, 1, 1, 1) &&
          is_row(&got[2], 11, 21, 1, 1, 2));
    free(got);
    slash_ssb_close(s);
}

TEST(session_record_touching_two_sessions_bridges_them)
{
    /* [0,10) and [20,30); a record at 10 covers [10,20), touching both */
    slash_ssb *s = open_session(10, 1);
    put1(s, 1, 0, 1);
    put1(s, 1, 20, 2);
    slash_ssb_stats st;
    slash_ssb_get_stats(s, &st);
    CHECK(st.records == 2);
    put1(s, 1, 10, 4);
    slash_ssb_get_stats(s, &st);
    CHECK(st.records == 1);
    size_t n;
    row *got = emit_rows(s, INT64_MAX, &n);
    CHECK(n == 1 && is_row(&got[0], 0, 30, 1, 3, 7));
    free(got);
    slash_ssb_close(s);
}

TEST(session_ties_merge_across_deltas)
{
    slash_ssb *a = open_session(10, 2), *b = open_session(10, 2), *leader = open_session(10, 2);
    put1(a, 1, 0, 1);   /* key 1: the tie is split over two helpers */
    put1(b, 1, 10, 2);
    put1(a, 5, 0, 1);   /* key 5: b's record bridges a's two sessions, touching both */
    put1(a, 5, 20, 4);
    put1(b, 5, 10, 2);
    put1(a, 7, 0, 1);   /* key 7: gap + 1 apart stays two sessions */
    put1(b, 7, 11, 2);
    ship_ssb(b, leader, 2);
    ship_ssb(a, leader, 2);
    size_t n;
    row *got = emit_rows(leader, INT64_MAX, &n);
    CHECK(n == 4 && is_row(&got[0], 0, 20, 1, 2, 3) && is_row(&got[1], 0, 30, 5, 3, 7) &&
          is_row(&got[2], 0, 10, 7, 1, 1) && is_row(&got[3], 11, 21, 7, 1, 2));
    free(got);
    slash_ssb_close(a), slash_ssb_close(b), slash_ssb_close(leader);
}

TEST(session_ties_merge_across_epochs)
{
    /* the second record comes while the first one's delta is sealed: it
     * starts a record of its own, and the two fuse at the leader */
    slash_ssb *h = open_session(10, 1), *leader = open_session(10, 1);
    put1(h, 1, 0, 1);
    CHECK_OK(slash_ssb_begin_epoch(h));
    put1(h, 1, 10, 2);
    const void *a;
    size_t len;
    CHECK_OK(slash_ssb_delta(h, 0, &a, &len));
    CHECK_OK(slash_ssb_merge_delta(leader, a, len));
    CHECK_OK(slash_ssb_reset_delta(h));
    ship_ssb(h, leader, 1);
    size_t n;
    row *got = emit_rows(leader, INT64_MAX, &n);
    CHECK(n == 1 && is_row(&got[0], 0, 20, 1, 2, 3));
    free(got);
    slash_ssb_close(h), slash_ssb_close(leader);
}

TEST(session_emitted_only_once_the_watermark_is_past_its_end)
{
    slash_ssb *s = open_session(10, 1);
    put1(s, 1, 0, 1);
    size_t n;
    row *got = emit_rows(s, 10, &n); /* a record at 10 may still come */
    CHECK(n == 0);
    free(got);
    put1(s, 1, 10, 2); /* it does, on time, and extends the session */
    got = emit_rows(s, 20, &n);
    CHECK(n == 0);
    free(got);
    got = emit_rows(s, 21, &n);
    CHECK(n == 1 && is_row(&got[0], 0, 20, 1, 2, 3));
    free(got);
    put1(s, 1, 10, 4); /* its cover [10,20) ends before the watermark: late */
    slash_ssb_stats st;
    slash_ssb_get_stats(s, &st);
    CHECK(st.late == 1 && st.records == 0);
    slash_ssb_close(s);
}

TEST(session_end_saturating_at_int64_max_closes_at_the_end)
{
    const int64_t t = INT64_MAX - 15;
    slash_ssb *h = open_session(10, 1), *leader = open_session(10, 1);
    put1(h, 1, t, 1);
    put1(h, 1, t + 10, 2); /* its cover saturates: [t + 10, INT64_MAX) */
    ship_ssb(h, leader, 1);
    size_t n;
    row *got = emit_rows(leader, INT64_MAX - 1, &n);
    CHECK(n == 0);
    free(got);
    got = emit_rows(leader, INT64_MAX, &n);
    CHECK(n == 1 && is_row(&got[0], t, INT64_MAX, 1, 2, 3));
    free(got);
    slash_ssb_close(h), slash_ssb_close(leader);
}

/* Found by tests/fuzz/fuzz_merge_delta: a region whose record window lies near
 * INT64_MIN made the slice-start check overflow (floor division times the
 * slice) before it could refuse the record. Sliding 100/25, int64 keys, 2
 * partitions, count/sum/min/max: the region must be refused or merged cleanly
 * (run under SLASH_SANITIZE for the overflow to show). */
static const uint8_t fuzz_window_near_int64_min[] = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x07, 0xa5, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80,
    0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x40, 0x00, 0x00, 0x00, 0x08, 0x00, 0x07, 0xa5, 0x2c, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x32, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x32, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x32, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x08, 0x00, 0x07, 0xa5, 0x2c, 0x01,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x32, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x32, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x32, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x08, 0x00,
    0x07, 0xa5, 0x2c, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x3c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3c, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00,
    0x00, 0x00, 0x08, 0x00, 0x07, 0xa5, 0x2c, 0x01, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3c, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x3c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3c, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

TEST(merge_of_window_near_int64_min_is_clean)
{
    slash_ssb_config c;
    memset(&c, 0, sizeof c);
    CHECK_OK(slash_window_init(&c.window, SLASH_WINDOW_SLIDING, 100, 25));
    c.key_type = SLASH_KEY_INT64;
    c.partitions = 2;
    c.naggs = 4;
    c.aggs[0] = SLASH_AGG_COUNT;
    c.aggs[1] = SLASH_AGG_SUM_I64;
    c.aggs[2] = SLASH_AGG_MIN_I64;
    c.aggs[3] = SLASH_AGG_MAX_I64;
    c.log_reserve = (size_t)1 << 24;
    slash_ssb *s;
    CHECK_OK(slash_ssb_open(&c, &s));
    CHECK_ST(slash_ssb_merge_delta(s, fuzz_window_near_int64_min, sizeof fuzz_window_near_int64_min),
             SLASH_EPROTO);
    slash_ssb_stats st;
    slash_ssb_get_stats(s, &st);
    CHECK(st.records == 0); /* a refused region changes nothing */
    slash_ssb_close(s);
}

/* Counts and int64 sums per int64 key take a path of their own (runs of one
 * slice, no chunk arrays) that hands over to the general loop when a
 * partition outgrows the cache: they equal a brute-force count and sum
 * whether the times come sorted, shuffled or partly late, and across that
 * hand-over. */
static int cmp_i64(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

static int cmp_pair(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static void check_additive(size_t n, int64_t nkeys, int sorted, int64_t late_before, int with_sum)
{
    slash_ssb_config cfg = {0};
    CHECK_OK(slash_window_init(&cfg.window, SLASH_WINDOW_TUMBLING, 1000, 0));
    cfg.key_type = SLASH_KEY_INT64;
    cfg.partitions = 1;
    cfg.naggs = with_sum ? 2 : 1;
    cfg.aggs[A_COUNT] = SLASH_AGG_COUNT;
    cfg.aggs[A_SUM] = SLASH_AGG_SUM_I64;
    cfg.log_reserve = (size_t)1 << 30;
    slash_ssb *s = NULL;
    CHECK_OK(slash_ssb_open(&cfg, &s));
    if (late_before > 0) { /* the watermark past [0, late_before): those records are late */
        slash_ssb_result *r0 = NULL;
        CHECK_OK(slash_ssb_emit(s, late_before, &r0));
        slash_ssb_result_free(r0);
    }
    data d = gen(n, nkeys, 20000);
    if (sorted)
        qsort(d.times, n, 8, cmp_i64);
    CHECK_OK(update(s, SLASH_KEY_INT64, &d, 0, n / 2));
    CHECK_OK(update(s, SLASH_KEY_INT64, &d, n / 2, n));
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(s, INT64_MAX, &r));
    /* the reference: (window, key, value) of the records on time, sorted, summed up */
    int64_t *want = malloc(n * 24);
    size_t m = 0, late = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t ws = slash_floor_div(d.times[i], 1000) * 1000;
        if (late_before > 0 && ws + 1000 <= late_before) {
            late++;
            continue;
        }
        want[3 * m] = ws, want[3 * m + 1] = d.keys[i], want[3 * m + 2] = d.vals[i], m++;
    }
    qsort(want, m, 24, cmp_pair);
    int64_t *got = malloc((r->rows + 1) * 32);
    for (size_t i = 0; i < r->rows; i++) {
        got[4 * i] = r->window_start[i], got[4 * i + 1] = r->keys[i];
        got[4 * i + 2] = ((int64_t *)r->columns[A_COUNT])[i];
        got[4 * i + 3] = with_sum ? ((int64_t *)r->columns[A_SUM])[i] : 0;
    }
    qsort(got, r->rows, 32, cmp_pair);
    size_t rows = 0;
    int ok = 1;
    for (size_t i = 0; i < m && ok; rows++) {
        size_t j = i;
        int64_t sum = 0;
        for (; j < m && want[3 * j] == want[3 * i] && want[3 * j + 1] == want[3 * i + 1]; j++)
            sum += want[3 * j + 2];
        ok = rows < r->rows && got[4 * rows] == want[3 * i] && got[4 * rows + 1] == want[3 * i + 1] &&
             got[4 * rows + 2] == (int64_t)(j - i) && (!with_sum || got[4 * rows + 3] == sum);
        i = j;
    }
    CHECK(ok);
    CHECK(rows == r->rows);
    slash_ssb_stats st;
    slash_ssb_get_stats(s, &st);
    CHECK(st.late == late);
    free(want), free(got);
    slash_ssb_result_free(r);
    slash_ssb_close(s);
    data_free(&d);
}

/* A store of int64 keys with a count alone (the count's own path), one partition. */
static slash_ssb *open_count_store(const slash_window *w)
{
    slash_ssb_config cfg = {0};
    cfg.window = *w;
    cfg.key_type = SLASH_KEY_INT64;
    cfg.partitions = 1;
    cfg.naggs = 1;
    cfg.aggs[A_COUNT] = SLASH_AGG_COUNT;
    cfg.log_reserve = (size_t)1 << 24;
    slash_ssb *s = NULL;
    CHECK_OK(slash_ssb_open(&cfg, &s));
    return s;
}

/* Times at both ends of int64 land in their clipped windows on the count's
 * own path as on the general one (a time of INT64_MAX is in the window
 * clipped to end there), and nothing loops there. */
TEST(count_only_at_the_ends_of_time)
{
    int64_t times[] = {INT64_MIN, INT64_MIN + 1, INT64_MIN + 5, -1, 0, INT64_MAX - 3, INT64_MAX,
                       INT64_MAX};
    int64_t keys[] = {1, 1, 1, 1, 1, 1, 1, 1}, vals[] = {1, 2, 3, 4, 5, 6, 7, 8};
    data d = {8, keys, times, vals};
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 10000, 0));
    slash_ssb *counts = open_count_store(&w), *general = open_store(&w, SLASH_KEY_INT64, 1);
    CHECK_OK(update(counts, SLASH_KEY_INT64, &d, 0, 8));
    CHECK_OK(update(general, SLASH_KEY_INT64, &d, 0, 8));
    slash_ssb_result *a = NULL, *b = NULL;
    CHECK_OK(slash_ssb_emit(counts, INT64_MAX, &a));
    CHECK_OK(slash_ssb_emit(general, INT64_MAX, &b));
    CHECK(a->rows == b->rows && a->rows == 4);
    int64_t total = 0;
    for (size_t i = 0; i < a->rows && i < b->rows; i++) {
        size_t j = 0;
        while (j < b->rows && b->window_start[j] != a->window_start[i])
            j++;
        CHECK(j < b->rows && a->window_end[i] == b->window_end[j] &&
              ((int64_t *)a->columns[A_COUNT])[i] == ((int64_t *)b->columns[A_COUNT])[j]);
        total += ((int64_t *)a->columns[A_COUNT])[i];
    }
    CHECK(total == 8);
    slash_ssb_result_free(a), slash_ssb_result_free(b);
    slash_ssb_close(counts), slash_ssb_close(general);
}

/* A batch whose first row is at INT64_MAX with a key not in the cache (a
 * miss as the run's first row, where t - lo is the slice's whole width) is
 * folded, not looped on. */
TEST(count_only_a_miss_at_the_last_time)
{
    int64_t times[] = {INT64_MAX, INT64_MAX}, keys[] = {7, 8}, vals[] = {1, 2};
    data d = {2, keys, times, vals};
    slash_window w;
    CHECK_OK(slash_window_init(&w, SLASH_WINDOW_TUMBLING, 10000, 0));
    slash_ssb *s = open_count_store(&w);
    CHECK_OK(update(s, SLASH_KEY_INT64, &d, 0, 2));
    slash_ssb_result *r = NULL;
    CHECK_OK(slash_ssb_emit(s, INT64_MAX, &r));
    CHECK(r->rows == 2);
    for (size_t i = 0; i < r->rows; i++)
        CHECK(r->window_end[i] == INT64_MAX && ((int64_t *)r->columns[A_COUNT])[i] == 1);
    slash_ssb_result_free(r);
    slash_ssb_close(s);
}

TEST(count_only_sorted_times) { check_additive(200000, 100, 1, 0, 0); }
TEST(count_only_shuffled_times) { check_additive(200000, 100, 0, 0, 0); }
TEST(count_only_with_late_records) { check_additive(200000, 100, 1, 3000, 0); }
TEST(count_only_past_the_cache_hands_over) { check_additive(400000, 1 << 20, 1, 0, 0); }
TEST(count_and_sum_sorted_times) { check_additive(200000, 100, 1, 0, 1); }
TEST(count_and_sum_shuffled_with_late_records) { check_additive(200000, 100, 0, 3000, 1); }
TEST(count_and_sum_past_the_cache_hands_over) { check_additive(400000, 1 << 20, 1, 0, 1); }

int main(void)
{
    RUN(tumbling_int64);
    RUN(tumbling_bytes_partitioned);
    RUN(sliding_int64);
    RUN(sliding_uneven_bytes);
    RUN(session_int64);
    RUN(session_bytes);
    RUN(selection_tumbling);
    RUN(selection_sliding);
    RUN(selection_session);
    RUN(selection_bytes_many_keys_over_partitions);
    RUN(deltas_tumbling);
    RUN(deltas_sliding_bytes);
    RUN(deltas_session);
    RUN(session_records_exactly_one_gap_apart_merge);
    RUN(session_records_gap_plus_one_apart_stay_apart);
    RUN(session_record_touching_two_sessions_bridges_them);
    RUN(session_ties_merge_across_deltas);
    RUN(session_ties_merge_across_epochs);
    RUN(session_emitted_only_once_the_watermark_is_past_its_end);
    RUN(session_end_saturating_at_int64_max_closes_at_the_end);
    RUN(growth_without_preset_size);
    RUN(count_only_at_the_ends_of_time);
    RUN(count_only_a_miss_at_the_last_time);
    RUN(count_only_sorted_times);
    RUN(count_only_shuffled_times);
    RUN(count_only_with_late_records);
    RUN(count_only_past_the_cache_hands_over);
    RUN(count_and_sum_sorted_times);
    RUN(count_and_sum_shuffled_with_late_records);
    RUN(count_and_sum_past_the_cache_hands_over);
    RUN(late_records_and_states);
    RUN(bad_input);
    RUN(merge_of_window_near_int64_min_is_clean);
    RUN(emit_steps_tumbling_fire_each_window_on_time);
    RUN(emit_steps_sliding_fire_each_window_on_time);
    RUN(emit_steps_sliding_uneven_bytes_fire_each_window_on_time);
    RUN(emit_steps_session_fire_each_session_on_time);
    RUN(large_import_with_a_prefaulted_index_matches_its_origin);
    return UNIT_DONE();
}
