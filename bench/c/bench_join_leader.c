/* bench_join_leader.c - the interval join's leader store alone, per stored
 * row: `slash bench interval-join`'s shape (persons x the auctions they open
 * within 10 s) as the leader's join store takes it, with no executor,
 * channel or Python around it, for callgrind (instructions per stored row,
 * per function) and for timing variants side by side.
 *
 * Persons at 200/s with new ids; auctions at 600/s whose seller is one of
 * the last 1,000 persons (or, with HOT > 0, HOT % of each side on one id).
 * Interval [-10 s, 0]: buckets of W = 10 s shifted by X = 10 s
 * (slash.interval), so a person is stored once at t + X and an auction twice,
 * at t and t + W. Each round pushes BATCH persons and their time's auctions,
 * then emits up to the round's first time (the lateness); the band emits
 * only the pairs in the interval. Prints stored rows, pairs, seconds, ns per
 * stored row, and the peak index, log and memory bytes between emits.
 *
 * Usage: bench_join_leader [persons (400000)] [batch (1300)] [hot % (0)]
 *        valgrind --tool=callgrind bench_join_leader 100000
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "slash/join.h"

#define W 10000 /* ms: the bucket, the interval's width */
#define X 10000 /* ms: the shift, -LO */
#define LO (-10000)
#define HI 0
#define SELLERS 1000 /* an auction's seller is one of the last SELLERS persons */

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_join_leader: %s: %s\n", what, slash_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    size_t persons = argc > 1 ? strtoull(argv[1], NULL, 10) : 400000;
    size_t batch = argc > 2 ? strtoull(argv[2], NULL, 10) : 1300;
    unsigned hot = argc > 3 ? (unsigned)atoi(argv[3]) : 0;
    if (!persons || !batch || hot > 100) {
        fprintf(stderr, "usage: bench_join_leader [persons > 0] [batch > 0] [hot %% 0..100]\n");
        return 2;
    }
    slash_join_config cfg = {0};
    if (slash_window_init(&cfg.window, SLASH_WINDOW_TUMBLING, W, 0) != SLASH_OK)
        return fail("window");
    cfg.key_type = SLASH_KEY_INT64;
    cfg.partitions = 1;
    cfg.log_reserve = (size_t)1 << 30; /* callgrind refuses the default 64 GiB reservation */
    cfg.ncols[0] = 3; /* person: date_time, __valid, __ts */
    cfg.ncols[1] = 4; /* auction: date_time, auction, __valid, __ts */
    for (int c = 0; c < 4; c++)
        cfg.cols[0][c] = cfg.cols[1][c] = SLASH_JOIN_I64;
    cfg.band = 1, cfg.band_col[0] = 2, cfg.band_col[1] = 3, cfg.band_lo = LO, cfg.band_hi = HI;
    slash_join *s = NULL;
    if (slash_join_open(&cfg, &s) != SLASH_OK)
        return fail("open");
    const size_t nl = batch, nr = 3 * batch * 2;
    int64_t *lt = malloc(nl * 8), *lk = malloc(nl * 8), *rt = malloc(nr * 8), *rk = malloc(nr * 8);
    int64_t *lc[3], *rc[4];
    for (int c = 0; c < 3; c++)
        lc[c] = malloc(nl * 8);
    for (int c = 0; c < 4; c++)
        rc[c] = malloc(nr * 8);
    uint64_t seed = 88172645463325252ull;
    size_t pairs = 0, rows = 0, peak_index = 0, peak_log = 0, peak_mem = 0;
    int64_t next_id = 1000;
    int rc_main = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t done = 0; done < persons && !rc_main; done += batch) {
        const int64_t first = (int64_t)done * 5; /* 200 persons/s */
        for (size_t i = 0; i < nl; i++) {
            int64_t t = first + (int64_t)i * 5;
            lk[i] = hot && rng(&seed) % 100 < hot ? 1000 : next_id++;
            lt[i] = t + X, lc[0][i] = t, lc[1][i] = 1, lc[2][i] = t;
        }
        size_t m = 0;
        for (size_t i = 0; i < 3 * batch; i++) { /* 600 auctions/s */
            int64_t t = first + (int64_t)i * 5 / 3;
            int64_t k = hot && rng(&seed) % 100 < hot
                            ? 1000 : next_id - 1 - (int64_t)(rng(&seed) % SELLERS);
            for (int copy = 0; copy < 2; copy++, m++) {
                rk[m] = k, rt[m] = t + (copy ? HI + X : LO + X);
                rc[0][m] = t, rc[1][m] = (int64_t)i, rc[2][m] = 1, rc[3][m] = t;
            }
        }
        slash_join_batch lb = {.side = SLASH_JOIN_LEFT, .n = nl, .times = lt, .keys = lk};
        slash_join_batch rb = {.side = SLASH_JOIN_RIGHT, .n = m, .times = rt, .keys = rk};
        for (int c = 0; c < 3; c++)
            lb.columns[c] = lc[c];
        for (int c = 0; c < 4; c++)
            rb.columns[c] = rc[c];
        if (slash_join_update(s, &lb) != SLASH_OK || slash_join_update(s, &rb) != SLASH_OK) {
            rc_main = fail("update");
            break;
        }
        rows += nl + m;
        slash_join_stats st;
        slash_join_get_stats(s, &st);
        peak_index = st.index_bytes > peak_index ? st.index_bytes : peak_index;
        peak_log = st.log_bytes > peak_log ? st.log_bytes : peak_log;
        peak_mem = st.memory_bytes > peak_mem ? st.memory_bytes : peak_mem;
        slash_join_result *r = NULL;
        if (slash_join_emit(s, first, &r) != SLASH_OK) {
            rc_main = fail("emit");
            break;
        }
        pairs += r->rows;
        slash_join_result_free(r);
    }
    slash_join_result *r = NULL;
    if (!rc_main && slash_join_emit(s, INT64_MAX, &r) != SLASH_OK)
        rc_main = fail("emit");
    if (r)
        pairs += r->rows;
    slash_join_result_free(r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (!rc_main)
        printf("stored rows %zu, pairs %zu: %.3f s, %.1f ns per stored row; peak index %zu B, "
               "log %zu B, memory %zu B\n", rows, pairs, sec, sec * 1e9 / (double)rows, peak_index,
               peak_log, peak_mem);
    slash_join_close(s);
    free(lt), free(lk), free(rt), free(rk);
    for (int c = 0; c < 3; c++)
        free(lc[c]);
    for (int c = 0; c < 4; c++)
        free(rc[c]);
    return rc_main;
}
