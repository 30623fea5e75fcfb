/* test_channel.c - the ring channel's guarantees over every compiled transport:
 * FIFO and exactly-once delivery of many buffers of random sizes between two
 * processes, no torn reads (checksums), back-pressure under a slow consumer,
 * a peer killed with SIGKILL, wrong tokens, and bad arguments. */
#define _GNU_SOURCE
#include "slash/backoff.h"
#include "slash/channel.h"
#include "unit.h"
#include "peer.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static const char *TOKEN = "test-token";
static int timeout_ms = 30000;

/* ---- payloads: seq, length, pattern, checksum ---- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static size_t payload_len(uint64_t seq, size_t max)
{
    size_t min = 24;
    return min + (size_t)(mix(seq * 7919 + 1) % (max - min + 1));
}

static void fill(uint8_t *p, size_t len, uint64_t seq)
{
    memcpy(p, &seq, 8);
    uint64_t x = mix(seq);
    uint64_t sum = 0;
    for (size_t i = 16; i < len; i++) {
        p[i] = (uint8_t)(x >> ((i & 7) * 8)) ^ (uint8_t)i;
        sum = sum * 31 + p[i];
    }
    memcpy(p + 8, &sum, 8);
}

static bool verify(const uint8_t *p, size_t len, uint64_t seq)
{
    uint64_t got_seq, want_sum, sum = 0;
    memcpy(&got_seq, p, 8);
    memcpy(&want_sum, p + 8, 8);
    for (size_t i = 16; i < len; i++)
        sum = sum * 31 + p[i];
    return got_seq == seq && sum == want_sum;
}

/* ---- producer roles (run in the child) ---- */

typedef struct prod_arg {
    uint64_t n;
    size_t payload_max;
    bool use_reserve;
    bool die_after; /* SIGKILL self after n buffers */
    const char *token;
} prod_arg;

static int producer(const char *spec, const char *addr, void *argp)
{
    prod_arg *a = argp;
    slash_transport *tp;
    slash_channel *ch;
    if (slash_transport_open(spec, &tp) != SLASH_OK)
        return 10;
    slash_status st = slash_channel_connect(tp, addr, a->token ? a->token : TOKEN, timeout_ms, &ch);
    if (st == SLASH_EAUTH)
        return 42;
    if (st != SLASH_OK) {
        fprintf(stderr, "producer connect: %s: %s\n", slash_strerror(st), slash_last_error());
        return 11;
    }
    uint8_t *tmp = malloc(a->payload_max);
    for (uint64_t i = 0; i < a->n; i++) {
        size_t len = payload_len(i, a->payload_max);
        if (a->use_reserve && (i & 1)) {
            void *slot;
            size_t cap;
            st = slash_channel_reserve(ch, timeout_ms, &slot, &cap);
            if (st == SLASH_OK) {
                fill(slot, len, i);
                st = slash_channel_commit(ch, len);
            }
        } else {
            fill(tmp, len, i);
            st = slash_channel_send(ch, tmp, len, timeout_ms);
        }
        if (st != SLASH_OK) {
            fprintf(stderr, "producer send %llu: %s: %s\n", (unsigned long long)i,
                    slash_strerror(st), slash_last_error());
            return st == SLASH_EPEER ? 20 : 12;
        }
    }
    free(tmp);
    if (a->die_after) {
        slash_endpoint_flush(slash_channel_endpoint(ch), timeout_ms);
        raise(SIGKILL);
    }
    st = slash_channel_send_eof(ch, timeout_ms);
    slash_channel_close(ch);
    slash_transport_close(tp);
    return st == SLASH_OK ? 0 : 13;
}

/* ---- consumer side (parent) ---- */

typedef struct cons_result {
    uint64_t received;
    uint64_t bad;
    slash_status end;
    slash_channel_stats stats;
    double seconds;
} cons_result;

static void consume(const char *spec, slash_channel_config cfg, prod_arg *pa, int sleep_us,
                    cons_result *res, int *child_rc)
{
    memset(res, 0, sizeof *res);
    peer p;
    peer_start(&p, spec, producer, pa);
    slash_transport *tp;
    slash_listener *l;
    slash_channel *ch = NULL;
    CHECK_OK(slash_transport_open(spec, &tp));
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l));
    peer_send_addr(&p, slash_listener_addr(l));
    uint64_t t0 = slash_now_ns();
    slash_status st = slash_channel_accept(l, &cfg, timeout_ms, &ch);
    res->end = st;
    if (st == SLASH_OK) {
        for (;;) {
            const void *buf;
            size_t len;
            uint64_t seq;
            st = slash_channel_poll(ch, timeout_ms, &buf, &len, &seq);
            if (st != SLASH_OK)
                break;
            if (seq != res->received || len != payload_len(seq, pa->payload_max) ||
                !verify(buf, len, seq))
                res->bad++;
            res->received++;
            if (sleep_us) {
                struct timespec ts = {0, sleep_us * 1000L};
                nanosleep(&ts, NULL);
            }
            CHECK_OK(slash_channel_release(ch));
        }
        res->end = st;
        slash_channel_get_stats(ch, &res->stats);
    }
    res->seconds = (double)(slash_now_ns() - t0) / 1e9;
    *child_rc = peer_wait(&p);
    slash_channel_close(ch);
    slash_listener_close(l);
    slash_transport_close(tp);
}

static const char *SPECS[3];
static int nspecs;
/* 200 000 buffers of at most 4 KiB through 16 credits: 12 500 turns of the ring, each buffer's
 * size random. SLASH_TEST_BUFFERS sets another count (the soft-RoCE guest and ASan fewer; a
 * million or more by hand): a run spins while it waits for its peer, so on a loaded machine a
 * buffer over ofi:tcp can cost a scheduling delay, ~400 us at load 10 (1 M took 381 s there) */
static uint64_t N_MANY = 200000;

TEST(fifo_exactly_once_many_random_sizes)
{
    for (int s = 0; s < nspecs; s++) {
        slash_channel_config cfg = {.buffer_size = 4096, .credits = 16};
        prod_arg pa = {.n = N_MANY, .payload_max = slash_channel_payload_max(cfg.buffer_size),
                       .use_reserve = true};
        cons_result r;
        int rc;
        consume(SPECS[s], cfg, &pa, 0, &r, &rc);
        fprintf(stderr, "  %s: %llu buffers in %.2f s (%.2f M/s)\n", SPECS[s],
                (unsigned long long)r.received, r.seconds, r.received / r.seconds / 1e6);
        CHECK(rc == 0);
        CHECK(r.end == SLASH_EOF);
        CHECK(r.received == N_MANY);
        CHECK(r.bad == 0);
        CHECK(r.stats.buffers == N_MANY);
    }
}

/* 5000 buffers of up to 256 KiB through 4 credits (1250 turns of the ring, ~640 MB); fewer
 * where SLASH_TEST_BUFFERS asks for fewer than that (the soft-RoCE guest's 1000: 250 turns) */
TEST(no_torn_reads_large_buffers)
{
    const uint64_t n = N_MANY < 5000 ? N_MANY : 5000;
    for (int s = 0; s < nspecs; s++) {
        slash_channel_config cfg = {.buffer_size = 256 * 1024, .credits = 4};
        prod_arg pa = {.n = n, .payload_max = slash_channel_payload_max(cfg.buffer_size)};
        cons_result r;
        int rc;
        consume(SPECS[s], cfg, &pa, 0, &r, &rc);
        fprintf(stderr, "  %s: %llu buffers of up to 256 KiB in %.2f s\n", SPECS[s],
                (unsigned long long)r.received, r.seconds);
        CHECK(rc == 0);
        CHECK(r.end == SLASH_EOF);
        CHECK(r.received == n);
        CHECK(r.bad == 0);
    }
}

TEST(slow_consumer_back_pressure_never_overwrites)
{
    for (int s = 0; s < nspecs; s++) {
        slash_channel_config cfg = {.buffer_size = 1024, .credits = 4};
        prod_arg pa = {.n = 400, .payload_max = slash_channel_payload_max(cfg.buffer_size)};
        cons_result r;
        int rc;
        consume(SPECS[s], cfg, &pa, 500, &r, &rc);
        CHECK(rc == 0);
        CHECK(r.end == SLASH_EOF);
        CHECK(r.received == 400);
        CHECK(r.bad == 0); /* an overwritten unread slot would break seq or checksum */
    }
}

TEST(producer_killed_mid_stream_is_reported)
{
    for (int s = 0; s < nspecs; s++) {
        slash_channel_config cfg = {.buffer_size = 4096, .credits = 8};
        prod_arg pa = {.n = 1000, .payload_max = 4000, .die_after = true};
        cons_result r;
        int rc;
        uint64_t t0 = slash_now_ns();
        consume(SPECS[s], cfg, &pa, 0, &r, &rc);
        double secs = (double)(slash_now_ns() - t0) / 1e9;
        CHECK(rc == 128 + SIGKILL);
        CHECK(r.received == 1000); /* everything written before death arrives */
        CHECK(r.bad == 0);
        CHECK(r.end == SLASH_EPEER);
        CHECK(secs < 10.0);
    }
}

TEST(consumer_killed_producer_gets_error)
{
    for (int s = 0; s < nspecs; s++) {
        /* consumer in a child that accepts, reads nothing, then dies */
        int fds[2];
        CHECK(pipe(fds) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            slash_transport *tp;
            slash_listener *l;
            slash_channel *ch;
            if (slash_transport_open(SPECS[s], &tp) || slash_listen(tp, NULL, TOKEN, &l))
                _exit(10);
            const char *a = slash_listener_addr(l);
            if (write(fds[1], a, strlen(a) + 1) < 0)
                _exit(11);
            slash_channel_config cfg = {.buffer_size = 1024, .credits = 4};
            if (slash_channel_accept(l, &cfg, timeout_ms, &ch))
                _exit(12);
            struct timespec ts = {0, 300 * 1000000L};
            nanosleep(&ts, NULL);
            raise(SIGKILL);
        }
        close(fds[1]);
        char addr[SLASH_ADDR_MAX] = {0};
        CHECK(read(fds[0], addr, sizeof addr - 1) > 0);
        close(fds[0]);
        slash_transport *tp;
        slash_channel *ch;
        CHECK_OK(slash_transport_open(SPECS[s], &tp));
        CHECK_OK(slash_channel_connect(tp, addr, TOKEN, timeout_ms, &ch));
        uint8_t buf[100] = {1};
        slash_status st = SLASH_OK;
        uint64_t t0 = slash_now_ns();
        int sent = 0;
        while (st == SLASH_OK && sent < 100) {
            st = slash_channel_send(ch, buf, sizeof buf, 20000);
            sent++;
        }
        double secs = (double)(slash_now_ns() - t0) / 1e9;
        CHECK_ST(st, SLASH_EPEER);
        CHECK(sent <= 5); /* 4 credits, then a wait that ends in EPEER */
        CHECK(secs < 10.0);
        int status;
        waitpid(pid, &status, 0);
        slash_channel_close(ch);
        slash_transport_close(tp);
    }
}

TEST(wrong_token_refused_on_both_sides)
{
    for (int s = 0; s < nspecs; s++) {
        slash_channel_config cfg = {.buffer_size = 1024, .credits = 4};
        prod_arg pa = {.n = 1, .payload_max = 100, .token = "not-the-token"};
        cons_result r;
        int rc;
        consume(SPECS[s], cfg, &pa, 0, &r, &rc);
        CHECK_ST(r.end, SLASH_EAUTH);
        CHECK(rc == 42);
    }
}

TEST(bad_arguments_are_clear_errors)
{
    slash_transport *tp;
    CHECK_ST(slash_transport_open("carrier-pigeon", &tp), SLASH_ENOENT);
    CHECK(strstr(slash_last_error(), "carrier-pigeon") != NULL);
    CHECK_ST(slash_transport_open("", &tp), SLASH_EINVAL);
    slash_channel_config bad1 = {.buffer_size = 100, .credits = 4};
    slash_channel_config bad2 = {.buffer_size = 1024, .credits = 0};
    slash_channel_config bad3 = {.buffer_size = 32, .credits = 4};
    CHECK_ST(slash_channel_config_check(&bad1), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "multiple of 64") != NULL);
    CHECK_ST(slash_channel_config_check(&bad2), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "credits") != NULL);
    CHECK_ST(slash_channel_config_check(&bad3), SLASH_EINVAL);
    CHECK_OK(slash_transport_open("shm", &tp));
    slash_listener *l;
    CHECK_ST(slash_listen(tp, NULL, "", &l), SLASH_EINVAL);
    slash_endpoint *ep;
    CHECK_ST(slash_connect(tp, "no-such-listener-here", TOKEN, 1000, &ep), SLASH_EPEER);
    slash_transport_close(tp);
}

static int zero_and_oversized(const char *spec, const char *addr, void *arg)
{
    (void)arg;
    slash_transport *tp;
    slash_channel *ch;
    if (slash_transport_open(spec, &tp) || slash_channel_connect(tp, addr, TOKEN, timeout_ms, &ch))
        return 10;
    uint8_t big[2048] = {0};
    int rc = 0;
    if (slash_channel_send(ch, big, 0, 1000) != SLASH_EINVAL)
        rc = 1;
    if (slash_channel_send(ch, big, 1024 - 16 + 1, 1000) != SLASH_ETOOBIG)
        rc = 2;
    if (slash_channel_send(ch, big, 1024 - 16, 1000) != SLASH_OK)
        rc = 3;
    const void *b;
    size_t len;
    uint64_t seq;
    if (slash_channel_poll(ch, 0, &b, &len, &seq) != SLASH_ESTATE)
        rc = 4;
    slash_channel_close(ch);
    slash_transport_close(tp);
    return rc;
}

TEST(zero_and_oversized_buffers_rejected)
{
    for (int s = 0; s < nspecs; s++) {
        peer p;
        peer_start(&p, SPECS[s], zero_and_oversized, NULL);
        slash_transport *tp;
        slash_listener *l;
        slash_channel *ch;
        CHECK_OK(slash_transport_open(SPECS[s], &tp));
        CHECK_OK(slash_listen(tp, NULL, TOKEN, &l));
        peer_send_addr(&p, slash_listener_addr(l));
        slash_channel_config cfg = {.buffer_size = 1024, .credits = 4};
        CHECK_OK(slash_channel_accept(l, &cfg, timeout_ms, &ch));
        uint8_t small[10];
        size_t len = 0;
        /* the one good buffer is 1008 bytes: a short destination keeps it queued */
        CHECK_ST(slash_channel_recv(ch, small, sizeof small, &len, timeout_ms), SLASH_ETOOBIG);
        uint8_t big[1008];
        CHECK_OK(slash_channel_recv(ch, big, sizeof big, &len, timeout_ms));
        CHECK(len == 1008);
        CHECK_ST(slash_channel_recv(ch, big, sizeof big, &len, timeout_ms), SLASH_EOF);
        CHECK(peer_wait(&p) == 0);
        slash_channel_close(ch);
        slash_listener_close(l);
        slash_transport_close(tp);
    }
}

int main(void)
{
    const char *n = getenv("SLASH_TEST_BUFFERS");
    if (n)
        N_MANY = strtoull(n, NULL, 10);
    SPECS[nspecs++] = "shm";
    if (slash_transport_have_ofi() && !getenv("SLASH_TEST_NO_OFI"))
        SPECS[nspecs++] = "ofi:tcp";
    /* SLASH_TEST_OFI_SPEC adds another provider ("ofi:verbs", in the soft-RoCE guest) */
    const char *more = getenv("SLASH_TEST_OFI_SPEC");
    if (more && *more && strcmp(more, "ofi:tcp") != 0 && slash_transport_have_ofi())
        SPECS[nspecs++] = more;
    RUN(bad_arguments_are_clear_errors);
    RUN(wrong_token_refused_on_both_sides);
    RUN(zero_and_oversized_buffers_rejected);
    RUN(fifo_exactly_once_many_random_sizes);
    RUN(no_torn_reads_large_buffers);
    RUN(slow_consumer_back_pressure_never_overwrites);
    RUN(producer_killed_mid_stream_is_reported);
    RUN(consumer_killed_producer_gets_error);
    return UNIT_DONE();
}
