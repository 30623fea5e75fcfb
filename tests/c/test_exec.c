/* test_exec.c - P2 for executor groups in the C core: N executors as separate
 * processes, each fed an arbitrary split of one stream, give exactly the
 * results of one sequential store over the whole stream, every (window, key)
 * once. Splits include one executor receiving everything and a heavy-hitter
 * key present in every split; transports: shm and (when built) ofi:tcp. A
 * leadership move asked while every source is idle is agreed and handed over
 * by polls alone, and the answer stays the sequential one. */
#define _GNU_SOURCE
#include "slash/exec.h"
#include "slash/backoff.h"
#include "unit.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NREC 200000
#define MAXN 8
static const char *TOKEN = "exec-token";

typedef struct row {
    int64_t ws, we, key, count, sum, min;
} row;

static int64_t times[NREC], keys[NREC], vals[NREC];
static int owner[NREC];

/* A stream with mild disorder (within lateness), 1000 keys, one heavy hitter. */
static void make_stream(uint64_t seed, int n, int split)
{
    uint64_t s = seed;
    for (int i = 0; i < NREC; i++) {
        times[i] = i / 10 + (int64_t)(unit_rng(&s) % 50); /* ~20 s of event time, disorder < 50 ms */
        keys[i] = unit_rng(&s) % 3 == 0 ? 7 : (int64_t)(unit_rng(&s) % 1000);
        vals[i] = (int64_t)(unit_rng(&s) % 1000) - 300;
        switch (split) {
        case 0: owner[i] = (int)(unit_rng(&s) % (uint64_t)n); break; /* random records */
        case 1: owner[i] = 0; break;                             /* one gets all */
        default: owner[i] = (int)((i / 997) % n); break;         /* chunks */
        }
    }
}

static slash_exec_mode MODE = SLASH_EXEC_SLASH;

static slash_exec_config config(uint32_t parts)
{
    slash_exec_config c;
    memset(&c, 0, sizeof c);
    slash_window_init(&c.state.window, SLASH_WINDOW_TUMBLING, 1000, 0);
    c.state.key_type = SLASH_KEY_INT64;
    c.state.partitions = parts;
    c.state.naggs = 3;
    c.state.aggs[0] = SLASH_AGG_COUNT;
    c.state.aggs[1] = SLASH_AGG_SUM_I64;
    c.state.aggs[2] = SLASH_AGG_MIN_I64;
    c.lateness_ms = 100;
    c.epoch_bytes = 64 * 1024;
    c.timeout_ms = 60000;
    c.mode = MODE;
    return c;
}

static size_t append_rows(slash_ssb_result *r, row *out, size_t at)
{
    for (size_t i = 0; i < r->rows; i++) {
        row x = {r->window_start[i], r->window_end[i], r->keys[i], ((int64_t *)r->columns[0])[i],
                 ((int64_t *)r->columns[1])[i], ((int64_t *)r->columns[2])[i]};
        out[at++] = x;
    }
    return at;
}

static int cmp_row(const void *a, const void *b)
{
    const row *x = a, *y = b;
    if (x->ws != y->ws)
        return x->ws < y->ws ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* The reference: one store, every record, emitted at the end. */
static size_t sequential(row *out)
{
    slash_exec_config c = config(1);
    slash_ssb *s;
    if (slash_ssb_open(&c.state, &s) != SLASH_OK)
        abort();
    slash_ssb_batch b = {.n = NREC, .times = times, .keys = keys};
    b.values[1] = vals;
    b.values[2] = vals;
    if (slash_ssb_update(s, &b) != SLASH_OK)
        abort();
    slash_ssb_result *r;
    if (slash_ssb_emit(s, INT64_MAX, &r) != SLASH_OK)
        abort();
    size_t n = append_rows(r, out, 0);
    slash_ssb_result_free(r);
    slash_ssb_close(s);
    qsort(out, n, sizeof *out, cmp_row);
    return n;
}

/* IDLE_MOVE (a group of 2): halfway through the stream both sources go
 * idle; rank 0 hands every partition to the other rank, and each executor
 * only polls (nothing pushed, so no epoch budget fills) until it follows
 * map version 1 with every hand-over in and out done, within IDLE_BOUND_MS;
 * then the rest of the stream goes to the new leaders. */
static int IDLE_MOVE;
#define IDLE_BOUND_MS 10000

static int idle_move(slash_exec *ex, int rank, uint32_t parts, row *rows, size_t *nrows)
{
    uint32_t p[64], to[64];
    if (parts > 64)
        return 20;
    for (uint32_t i = 0; i < parts; i++)
        p[i] = i, to[i] = 1 - i % 2; /* version 0 is partition mod 2 */
    if (rank == 0 && slash_exec_move_partitions(ex, p, to, parts) != SLASH_OK) {
        fprintf(stderr, "rank 0 move: %s\n", slash_last_error());
        return 21;
    }
    uint64_t t0 = slash_now_ns();
    for (;;) {
        slash_exec_metrics m;
        slash_exec_get_metrics(ex, &m);
        if (m.map_version == 1 && m.held_partitions == 0 && m.moves_in == parts / 2 &&
            m.moves_out == parts / 2)
            return 0;
        if (slash_now_ns() - t0 > (uint64_t)IDLE_BOUND_MS * 1000000ull) {
            fprintf(stderr, "rank %d: idle for %d ms and still at map version %llu, %u held, "
                    "%llu in, %llu out\n", rank, IDLE_BOUND_MS, (unsigned long long)m.map_version,
                    m.held_partitions, (unsigned long long)m.moves_in,
                    (unsigned long long)m.moves_out);
            return 22;
        }
        if (slash_exec_poll(ex, 5) != SLASH_OK)
            return 23;
        slash_ssb_result *r;
        for (slash_exec_take(ex, &r); r; slash_exec_take(ex, &r)) {
            *nrows = append_rows(r, rows, *nrows);
            slash_ssb_result_free(r);
        }
    }
}

/* One executor process: listen, report the address, learn everyone's, join,
 * push its share in batches of 1000 (IDLE_MOVE: with an idle stretch and a
 * move halfway), finish, write rows to fd. */
static int executor(const char *spec, int rank, int n, uint32_t parts, int addr_out, int addrs_in,
                    int rows_out)
{
    slash_transport *tp;
    slash_listener *l;
    if (slash_transport_open(spec, &tp) || slash_listen(tp, NULL, TOKEN, &l))
        return 10;
    char buf[SLASH_ADDR_MAX] = {0};
    snprintf(buf, sizeof buf, "%s", slash_listener_addr(l));
    if (write(addr_out, buf, sizeof buf) != sizeof buf)
        return 11;
    static char all[MAXN][SLASH_ADDR_MAX];
    const char *addrs[MAXN];
    for (int r = 0; r < n; r++) {
        size_t got = 0;
        while (got < SLASH_ADDR_MAX) {
            ssize_t k = read(addrs_in, all[r] + got, SLASH_ADDR_MAX - got);
            if (k <= 0)
                return 12;
            got += (size_t)k;
        }
        addrs[r] = all[r];
    }
    slash_channel_config cc = {.buffer_size = 16384, .credits = 8};
    slash_group *g;
    slash_status st = slash_group_join(l, (uint32_t)rank, (uint32_t)n, addrs, TOKEN, &cc, 30000, &g);
    if (st != SLASH_OK) {
        fprintf(stderr, "rank %d join: %s\n", rank, slash_last_error());
        return 13;
    }
    slash_listener_close(l);
    slash_exec_config c = config(parts);
    slash_exec *ex;
    if (slash_exec_open(g, &c, &ex))
        return 14;
    static int64_t bt[1000], bk[1000], bv[1000];
    int k = 0;
    row *rows = malloc(sizeof(row) * NREC);
    size_t nrows = 0;
    for (int i = 0; i <= NREC; i++) {
        if (IDLE_MOVE && i == NREC / 2) {
            int e = idle_move(ex, rank, parts, rows, &nrows);
            if (e)
                return e;
        }
        if (i < NREC && owner[i] != rank)
            continue;
        if (i < NREC) {
            bt[k] = times[i], bk[k] = keys[i], bv[k] = vals[i];
            k++;
        }
        if (k == 1000 || (i == NREC && k)) {
            slash_ssb_batch b = {.n = (size_t)k, .times = bt, .keys = bk};
            b.values[1] = bv;
            b.values[2] = bv;
            size_t late = 0;
            st = slash_exec_push(ex, &b, NULL, &late);
            if (st != SLASH_OK || late != 0) {
                fprintf(stderr, "rank %d push: %s (late %zu)\n", rank, slash_last_error(), late);
                return 15;
            }
            k = 0;
        }
    }
    st = slash_exec_finish(ex);
    if (st != SLASH_OK) {
        fprintf(stderr, "rank %d finish: %s\n", rank, slash_last_error());
        return 16;
    }
    slash_ssb_result *r;
    for (slash_exec_take(ex, &r); r; slash_exec_take(ex, &r)) {
        nrows = append_rows(r, rows, nrows);
        slash_ssb_result_free(r);
    }
    slash_exec_metrics m;
    slash_exec_get_metrics(ex, &m);
    if (m.epochs < 1)
        return 17;
    if (c.mode == SLASH_EXEC_REPARTITION && n > 1 && m.records_shipped == 0 && m.records_in > 1000)
        return 19;
    size_t bytes = nrows * sizeof(row);
    if (write(rows_out, &nrows, sizeof nrows) != sizeof nrows ||
        (bytes && write(rows_out, rows, bytes) != (ssize_t)bytes))
        return 18;
    free(rows);
    slash_exec_close(ex);
    slash_transport_close(tp);
    return 0;
}

static size_t read_all(int fd, void *p, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, (char *)p + got, len - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    return got;
}

static void run_group(const char *spec, int n, int split, uint32_t parts)
{
    make_stream(42 + (uint64_t)n * 10 + (uint64_t)split, n, split);
    static row want[NREC], got[NREC];
    size_t nwant = sequential(want);
    int to_parent[MAXN][2], to_child[MAXN][2], rows_pipe[MAXN][2];
    pid_t pids[MAXN];
    for (int r = 0; r < n; r++) {
        if (pipe(to_parent[r]) || pipe(to_child[r]) || pipe(rows_pipe[r]))
            abort();
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(executor(spec, r, n, parts, to_parent[r][1], to_child[r][0], rows_pipe[r][1]));
        /* the parent keeps only its own ends, so a dead child reads as EOF */
        close(to_parent[r][1]), close(to_child[r][0]), close(rows_pipe[r][1]);
    }
    char addrs[MAXN][SLASH_ADDR_MAX];
    for (int r = 0; r < n; r++)
        CHECK(read_all(to_parent[r][0], addrs[r], SLASH_ADDR_MAX) == SLASH_ADDR_MAX);
    for (int r = 0; r < n; r++)
        for (int q = 0; q < n; q++)
            CHECK(write(to_child[r][1], addrs[q], SLASH_ADDR_MAX) == SLASH_ADDR_MAX);
    size_t ngot = 0;
    for (int r = 0; r < n; r++) {
        size_t k = 0;
        if (read_all(rows_pipe[r][0], &k, sizeof k) == sizeof k && ngot + k <= NREC)
            ngot += read_all(rows_pipe[r][0], got + ngot, k * sizeof(row)) / sizeof(row);
    }
    for (int r = 0; r < n; r++) {
        int status;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fprintf(stderr, "  rank %d exited with %d\n", r, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        close(to_parent[r][0]), close(to_child[r][1]), close(rows_pipe[r][0]);
    }
    qsort(got, ngot, sizeof *got, cmp_row);
    CHECK(ngot == nwant);
    size_t diff = 0;
    for (size_t i = 0; i < ngot && i < nwant; i++)
        diff += memcmp(&got[i], &want[i], sizeof(row)) != 0;
    if (diff || ngot != nwant)
        fprintf(stderr, "  %s n=%d split=%d: %zu rows, want %zu, %zu differ\n", spec, n, split, ngot,
                nwant, diff);
    CHECK(diff == 0);
}

static const char *SPECS[2];
static int nspecs;

TEST(one_executor_equals_sequential) { run_group("shm", 1, 0, 4); }

TEST(groups_equal_sequential_random_split)
{
    for (int s = 0; s < nspecs; s++)
        for (int n = 2; n <= 4; n++)
            run_group(SPECS[s], n, 0, (uint32_t)(2 * n + 1));
}

TEST(groups_equal_sequential_when_one_gets_everything)
{
    for (int s = 0; s < nspecs; s++)
        run_group(SPECS[s], 3, 1, 3);
}

TEST(groups_equal_sequential_chunked_split_eight_executors) { run_group("shm", 8, 2, 16); }

TEST(repartition_baseline_equals_sequential)
{
    MODE = SLASH_EXEC_REPARTITION;
    for (int s = 0; s < nspecs; s++)
        for (int n = 1; n <= 4; n += 3)
            run_group(SPECS[s], n, 0, (uint32_t)(2 * n + 1));
    run_group("shm", 3, 1, 3);
    MODE = SLASH_EXEC_SLASH;
}

TEST(a_move_asked_while_the_sources_are_idle_is_agreed_by_polls_and_keeps_the_answer)
{
    IDLE_MOVE = 1;
    for (int s = 0; s < nspecs; s++)
        run_group(SPECS[s], 2, 0, 8);
    IDLE_MOVE = 0;
}

TEST(partitions_fewer_than_executors_rejected)
{
    slash_exec_config c = config(1);
    slash_exec *ex;
    /* a group of one, but pretend two by asking for 0 partitions */
    slash_transport *tp;
    slash_listener *l;
    CHECK_OK(slash_transport_open("shm", &tp));
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l));
    const char *addrs[1] = {slash_listener_addr(l)};
    slash_channel_config cc = {.buffer_size = 4096, .credits = 4};
    slash_group *g;
    CHECK_OK(slash_group_join(l, 0, 1, addrs, TOKEN, &cc, 1000, &g));
    c.state.partitions = 0;
    CHECK_ST(slash_exec_open(g, &c, &ex), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "partitions") != NULL);
    slash_listener_close(l);
    slash_transport_close(tp);
}

int main(void)
{
    SPECS[nspecs++] = "shm";
    if (slash_transport_have_ofi() && !getenv("SLASH_TEST_NO_OFI"))
        SPECS[nspecs++] = "ofi:tcp";
    RUN(partitions_fewer_than_executors_rejected);
    RUN(one_executor_equals_sequential);
    RUN(groups_equal_sequential_random_split);
    RUN(groups_equal_sequential_when_one_gets_everything);
    RUN(groups_equal_sequential_chunked_split_eight_executors);
    RUN(repartition_baseline_equals_sequential);
    RUN(a_move_asked_while_the_sources_are_idle_is_agreed_by_polls_and_keeps_the_answer);
    return UNIT_DONE();
}
