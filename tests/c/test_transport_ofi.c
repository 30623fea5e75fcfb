/* test_transport_ofi.c - the "ofi:tcp" transport between two processes.
 *
 * Every two-process test forks before it opens anything: the child listens
 * and sends its address up a pipe, the parent connects. Children report
 * through their exit code (0 = all checks passed) and print what failed.
 * Without libfabric in the build, only the SLASH_ENOTSUP answer is checked.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "slash/backoff.h"
#include "slash/transport.h"
#include "unit.h"

#ifndef SLASH_HAVE_OFI

TEST(ofi_not_compiled)
{
    slash_transport *tp = (slash_transport *)1;
    CHECK(!slash_transport_have_ofi());
    CHECK_ST(slash_transport_open("ofi:tcp", &tp), SLASH_ENOTSUP);
    CHECK(tp == NULL);
    CHECK(strstr(slash_last_error(), "libfabric") != NULL);
}

int main(void)
{
    RUN(ofi_not_compiled);
    fprintf(stderr, "skip: the ofi transport is not compiled in (libfabric-dev missing)\n");
    return UNIT_DONE();
}

#else /* SLASH_HAVE_OFI */

/* SLASH_TEST_OFI_SPEC runs the same tests on another provider ("ofi:verbs"). */
static const char *SPEC = "ofi:tcp";
#define TOKEN "s3cret-token"
#define TMO 10000 /* ms, generous for ASan builds */

/* ---- child processes ------------------------------------------------------ */

#define C_OK(expr)                                                                       \
    do {                                                                                 \
        slash_status s_ = (expr);                                                        \
        if (s_ != SLASH_OK) {                                                            \
            fprintf(stderr, "  child %s:%d: %s returned %s (%s)\n", __FILE__, __LINE__,  \
                    #expr, slash_strerror(s_), slash_last_error());                      \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

#define C_CHECK(cond)                                                                    \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "  child %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

static bool put_line(int fd, const char *s)
{
    char buf[SLASH_ADDR_MAX + 2];
    int n = snprintf(buf, sizeof buf, "%s\n", s);
    return write(fd, buf, (size_t)n) == n;
}

static bool get_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0)
            return false;
        if (read(fd, buf + n, 1) != 1)
            return false;
        if (buf[n] == '\n') {
            buf[n] = '\0';
            return true;
        }
        n++;
    }
    return false;
}

/* What one side of a test opened; session_end closes it in reverse order. */
typedef struct session {
    slash_transport *tp;
    slash_listener *l;
    slash_endpoint *ep;
    slash_region *r[3];
    slash_remote *rm[2];
} session;

static void session_end(session *s)
{
    for (int i = 0; i < 2; i++)
        slash_remote_detach(s->rm[i]);
    slash_endpoint_close(s->ep);
    for (int i = 0; i < 3; i++)
        slash_region_free(s->r[i]);
    slash_listener_close(s->l);
    slash_transport_close(s->tp);
    memset(s, 0, sizeof *s);
}

/* Child side: open, listen, tell the parent where. */
static int child_listen(int up, session *s)
{
    C_OK(slash_transport_open(SPEC, &s->tp));
    C_OK(slash_listen(s->tp, NULL, TOKEN, &s->l));
    C_CHECK(put_line(up, slash_listener_addr(s->l)));
    return 0;
}

static int child_accept(session *s)
{
    C_OK(slash_accept(s->l, TMO, &s->ep));
    return 0;
}

typedef struct child {
    pid_t pid;
    int up; /* child -> parent: the listener address */
} child;

/* The child's part of a test, run on its session; returns 0 when all passed. */
typedef int (*child_fn)(session *s);

/* Forks a child that listens (and accepts one peer when accept is set), runs
 * fn, closes its session and exits with fn's result. */
static child spawn(child_fn fn, bool accept)
{
    int a[2];
    child c = {-1, -1};
    if (pipe(a) != 0)
        return c;
    fflush(NULL);
    c.pid = fork();
    if (c.pid == 0) {
        close(a[0]);
        session s = {0};
        int rc = child_listen(a[1], &s);
        if (rc == 0 && accept)
            rc = child_accept(&s);
        if (rc == 0)
            rc = fn(&s);
        if (rc == 0)
            session_end(&s);
        _exit(rc);
    }
    close(a[1]);
    c.up = a[0];
    return c;
}

/* Waits for the child: its exit code, 128+signal, or -1 after killing it at
 * the deadline. Closes the pipes. */
static int reap(child *c, int timeout_ms)
{
    uint64_t deadline = slash_deadline(timeout_ms);
    int status = 0, rc = -1;
    for (;;) {
        pid_t p = waitpid(c->pid, &status, WNOHANG);
        if (p == c->pid) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            break;
        }
        if (slash_deadline_passed(deadline)) {
            fprintf(stderr, "  child %d did not finish in %d ms: killing it\n", (int)c->pid,
                    timeout_ms);
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &status, 0);
            break;
        }
        usleep(2000);
    }
    close(c->up);
    return rc;
}

/* Parent side: the child's listener address. */
static bool child_addr(child *c, char *addr)
{
    return get_line(c->up, addr, SLASH_ADDR_MAX, TMO);
}

static slash_status parent_connect(child *c, session *s)
{
    char addr[SLASH_ADDR_MAX];
    slash_status st = slash_transport_open(SPEC, &s->tp);
    if (st != SLASH_OK)
        return st;
    if (!child_addr(c, addr))
        return slash_fail(SLASH_ETIMEDOUT, "no address from the child");
    return slash_connect(s->tp, addr, TOKEN, TMO, &s->ep);
}

static uint8_t load_acq(const volatile uint8_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static uint64_t load64_acq(const void *p)
{
    return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}

/* ---- single-process checks ----------------------------------------------- */

TEST(unknown_provider)
{
    slash_transport *tp = (slash_transport *)1;
    CHECK(slash_transport_have_ofi());
    CHECK_ST(slash_transport_open("ofi:nosuchprov", &tp), SLASH_ENOENT);
    CHECK(tp == NULL);
    CHECK(strstr(slash_last_error(), "nosuchprov") != NULL);
    CHECK(strstr(slash_last_error(), "\"tcp\"") != NULL); /* lists what exists */
}

TEST(listen_addresses)
{
    slash_transport *tp;
    slash_listener *l = NULL, *l2 = NULL;
    CHECK_OK(slash_transport_open(SPEC, &tp));
    if (!tp)
        return;
    CHECK(strcmp(slash_transport_spec(tp), SPEC) == 0);
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l));
    if (l) {
        const char *a = slash_listener_addr(l);
        const char *colon = strrchr(a, ':');
        if (strcmp(SPEC, "ofi:tcp") == 0) /* over the host's TCP stack: loopback only */
            CHECK(strncmp(a, "127.0.0.1:", 10) == 0);
        else /* a device's address: rdma_cm serves no loopback address */
            CHECK(strncmp(a, "127.", 4) != 0 && strncmp(a, "[::1]", 5) != 0);
        CHECK(colon && atoi(colon + 1) > 0); /* the real port, not 0 */
        /* the same port again is taken */
        CHECK_ST(slash_listen(tp, a, TOKEN, &l2), SLASH_EPROVIDER);
        CHECK(l2 == NULL);
    }
    CHECK_ST(slash_listen(tp, "no-port-here", TOKEN, &l2), SLASH_EINVAL);
    CHECK_ST(slash_listen(tp, NULL, "", &l2), SLASH_EINVAL);
    slash_listener_close(l);
    slash_transport_close(tp);
}

/* "ofi:PROV@ADDRESS" listens on that address when none is given; a device
 * or address the provider does not serve is refused at open, naming it. */
TEST(spec_names_device_or_address)
{
    slash_transport *tp = NULL, *tp2 = NULL;
    slash_listener *l = NULL, *l2 = NULL;
    CHECK_OK(slash_transport_open(SPEC, &tp));
    if (tp)
        CHECK_OK(slash_listen(tp, NULL, TOKEN, &l));
    if (l) {
        char host[SLASH_ADDR_MAX], spec[SLASH_ADDR_MAX + 16];
        snprintf(host, sizeof host, "%s", slash_listener_addr(l));
        *strrchr(host, ':') = '\0';
        snprintf(spec, sizeof spec, "%s@%s", SPEC, host);
        CHECK_OK(slash_transport_open(spec, &tp2));
        if (tp2)
            CHECK_OK(slash_listen(tp2, NULL, TOKEN, &l2));
        if (l2) {
            const char *a = slash_listener_addr(l2);
            CHECK(strncmp(a, host, strlen(host)) == 0 && a[strlen(host)] == ':');
        }
        slash_listener_close(l2);
        slash_transport_close(tp2);
    }
    char bad[64];
    snprintf(bad, sizeof bad, "%s@no-such-device", SPEC);
    CHECK_ST(slash_transport_open(bad, &tp2), SLASH_ENOENT);
    CHECK(strstr(slash_last_error(), "no-such-device") != NULL);
    snprintf(bad, sizeof bad, "%s@192.0.2.77", SPEC); /* TEST-NET-1: nobody's address */
    CHECK_ST(slash_transport_open(bad, &tp2), SLASH_ENOENT);
    snprintf(bad, sizeof bad, "%s@", SPEC);
    CHECK_ST(slash_transport_open(bad, &tp2), SLASH_EINVAL);
    slash_listener_close(l);
    slash_transport_close(tp);
}

TEST(connect_nobody_listens)
{
    slash_transport *tp;
    slash_listener *l = NULL;
    slash_endpoint *ep = NULL;
    char addr[SLASH_ADDR_MAX];
    CHECK_OK(slash_transport_open(SPEC, &tp));
    if (!tp)
        return;
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l)); /* find a free port, then free it */
    if (!l) {
        slash_transport_close(tp);
        return;
    }
    snprintf(addr, sizeof addr, "%s", slash_listener_addr(l));
    slash_listener_close(l);
    uint64_t t0 = slash_now_ns();
    slash_status st = slash_connect(tp, addr, TOKEN, 3000, &ep);
    double s = (double)(slash_now_ns() - t0) / 1e9;
    CHECK(st == SLASH_EPEER || st == SLASH_ETIMEDOUT);
    CHECK(ep == NULL);
    CHECK(s < 5.0);
    fprintf(stderr, "  connect to a closed port: %s after %.3f s (%s)\n", slash_strerror(st), s,
            slash_last_error());
    slash_transport_close(tp);
}


TEST(timeouts)
{
    slash_transport *tp;
    slash_listener *l = NULL;
    slash_endpoint *ep = NULL;
    CHECK_OK(slash_transport_open(SPEC, &tp));
    if (!tp)
        return;
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l));
    if (l) {
        uint64_t t0 = slash_now_ns();
        CHECK_ST(slash_accept(l, 200, &ep), SLASH_ETIMEDOUT); /* nobody connects */
        CHECK(strstr(slash_last_error(), "no peer within 200 ms") != NULL);
        /* a listener that never accepts: connect gives up at its deadline */
        CHECK_ST(slash_connect(tp, slash_listener_addr(l), TOKEN, 300, &ep), SLASH_ETIMEDOUT);
        CHECK(ep == NULL);
        double s = (double)(slash_now_ns() - t0) / 1e9;
        CHECK(s >= 0.45 && s < 3.0);
    }
    CHECK_ST(slash_connect(tp, "256.1.1.1:1", TOKEN, 300, &ep), SLASH_EINVAL);
    slash_listener_close(l);
    slash_transport_close(tp);
}

/* ---- authentication ------------------------------------------------------- */

/* Refuses one peer with a wrong token, then takes one with the right one. */
static int child_auth(session *s)
{
    slash_status st = slash_accept(s->l, TMO, &s->ep);
    if (st != SLASH_EAUTH || s->ep != NULL) {
        fprintf(stderr, "  child: accept of a wrong token gave %s (%s)\n", slash_strerror(st),
                slash_last_error());
        return 1;
    }
    C_CHECK(strstr(slash_last_error(), "wrong auth token") != NULL);
    C_OK(slash_accept(s->l, TMO, &s->ep));
    char buf[16];
    size_t n;
    C_OK(slash_endpoint_recv_msg(s->ep, buf, sizeof buf, &n, TMO));
    C_CHECK(n == 2 && memcmp(buf, "hi", 2) == 0);
    C_OK(slash_endpoint_send_msg(s->ep, "bye", 3));
    return 0;
}

TEST(auth_wrong_token_refused_on_both_sides)
{
    child c = spawn(child_auth, false);
    session s = {0};
    char addr[SLASH_ADDR_MAX], buf[16];
    size_t n;
    CHECK(child_addr(&c, addr));
    CHECK_OK(slash_transport_open(SPEC, &s.tp));
    if (s.tp) {
        CHECK_ST(slash_connect(s.tp, addr, "wrong-token", TMO, &s.ep), SLASH_EAUTH);
        CHECK(s.ep == NULL);
        CHECK(strstr(slash_last_error(), "refused our auth token") != NULL);
        /* the listener still takes a peer with the right token */
        CHECK_OK(slash_connect(s.tp, addr, TOKEN, TMO, &s.ep));
    }
    if (s.ep) {
        CHECK_OK(slash_endpoint_send_msg(s.ep, "hi", 2));
        CHECK_OK(slash_endpoint_recv_msg(s.ep, buf, sizeof buf, &n, TMO));
        CHECK(n == 3 && memcmp(buf, "bye", 3) == 0);
    }
    CHECK(reap(&c, TMO) == 0);
    session_end(&s);
}

/* ---- messages, regions, one write ----------------------------------------- */

#define R1_LEN 8192
#define R2_LEN 100000

/* Receives 40 messages, sends "a", exposes R1, sends "b", exposes R2, then
 * waits for the parent's write into R1 at [100, 1100) ending in 0xAB. */
static int child_msgs(session *s)
{
    char buf[SLASH_MSG_MAX];
    size_t n;
    for (int i = 0; i < 40; i++) { /* more than the pre-posted receives */
        C_OK(slash_endpoint_recv_msg(s->ep, buf, sizeof buf, &n, TMO));
        C_CHECK(n == (size_t)(i % SLASH_MSG_MAX) + 1);
        C_CHECK(buf[0] == (char)i && buf[n - 1] == (char)i);
    }
    C_OK(slash_region_alloc(s->tp, R1_LEN, &s->r[0]));
    C_OK(slash_region_alloc(s->tp, R2_LEN, &s->r[1]));
    C_OK(slash_endpoint_send_msg(s->ep, "a", 1));
    C_OK(slash_endpoint_expose(s->ep, s->r[0]));
    C_OK(slash_endpoint_send_msg(s->ep, "b", 1));
    C_OK(slash_endpoint_expose(s->ep, s->r[1]));
    volatile uint8_t *p = slash_region_addr(s->r[0]);
    slash_backoff b;
    slash_backoff_reset(&b);
    uint64_t deadline = slash_deadline(TMO);
    while (load_acq(&p[1099]) != 0xAB) {
        C_OK(slash_endpoint_progress(s->ep));
        C_CHECK(!slash_deadline_passed(deadline));
        slash_backoff_wait(&b);
    }
    for (int i = 100; i < 1099; i++)
        C_CHECK(p[i] == (uint8_t)(i * 7));
    C_CHECK(p[99] == 0 && p[1100] == 0);
    C_OK(slash_endpoint_send_msg(s->ep, "seen", 4));
    C_OK(slash_endpoint_recv_msg(s->ep, buf, sizeof buf, &n, TMO)); /* "bye" */
    return 0;
}

/* ---- fork() after the parent opened the transport ---------------------------- */

static slash_transport *inherited; /* the parent's, seen by its fork() children */

/* Child: the parent's transport is refused, its own works: a message there
 * and back, and a write the parent sees. */
static int child_of_opened_parent(session *s)
{
    slash_listener *l = NULL;
    C_CHECK(slash_listen(inherited, NULL, TOKEN, &l) == SLASH_ESTATE);
    C_CHECK(strstr(slash_last_error(), "fork") != NULL);
    char buf[16];
    size_t n = 0;
    C_OK(slash_endpoint_recv_msg(s->ep, buf, sizeof buf, &n, TMO));
    C_OK(slash_endpoint_send_msg(s->ep, buf, n));
    C_OK(slash_region_alloc(s->tp, 4096, &s->r[0]));
    C_OK(slash_endpoint_attach(s->ep, TMO, &s->rm[0]));
    memset(slash_region_addr(s->r[0]), 0x6B, 4096);
    C_OK(slash_endpoint_write_signal(s->ep, s->r[0], 0, s->rm[0], 0, 4096, 1));
    C_OK(slash_endpoint_flush(s->ep, TMO));
    C_OK(slash_endpoint_recv_msg(s->ep, buf, sizeof buf, &n, TMO)); /* "bye" */
    slash_transport_close(inherited); /* frees this process's copy, leaves the parent's */
    return 0;
}

/* The verbs rule (a child must not use RDMA state it inherited) met by
 * opening in the child: the parent opened a transport, a listener and a
 * region, then forks; the child opens its own and they talk. Twice, so the
 * second child is forked from a parent that has already talked. */
TEST(fork_after_open)
{
    slash_listener *pl = NULL;
    slash_region *pr = NULL;
    CHECK_OK(slash_transport_open(SPEC, &inherited));
    if (!inherited)
        return;
    CHECK_OK(slash_listen(inherited, NULL, TOKEN, &pl));
    CHECK_OK(slash_region_alloc(inherited, 1 << 16, &pr));
    for (int round = 0; round < 2; round++) {
        child c = spawn(child_of_opened_parent, true);
        session s = {0};
        char addr[SLASH_ADDR_MAX], buf[16];
        size_t n = 0;
        CHECK(child_addr(&c, addr));
        CHECK_OK(slash_connect(inherited, addr, TOKEN, TMO, &s.ep));
        if (s.ep) {
            CHECK_OK(slash_endpoint_send_msg(s.ep, "ping", 4));
            CHECK_OK(slash_endpoint_recv_msg(s.ep, buf, sizeof buf, &n, TMO));
            CHECK(n == 4 && memcmp(buf, "ping", 4) == 0);
            CHECK_OK(slash_region_alloc(inherited, 4096, &s.r[0]));
            CHECK_OK(slash_endpoint_expose(s.ep, s.r[0]));
            uint64_t got = 0;
            uint32_t last = 0;
            slash_backoff b;
            slash_backoff_reset(&b);
            uint64_t deadline = slash_deadline(TMO);
            while (got == 0 && !slash_deadline_passed(deadline)) {
                CHECK_OK(slash_endpoint_arrivals(s.ep, &got, &last));
                slash_backoff_wait(&b);
            }
            CHECK(got == 1 && last == 1);
            const uint8_t *p = s.r[0] ? slash_region_addr(s.r[0]) : NULL;
            CHECK(p && p[0] == 0x6B && p[4095] == 0x6B);
            CHECK_OK(slash_endpoint_send_msg(s.ep, "bye", 3));
        }
        CHECK(reap(&c, TMO) == 0);
        s.tp = NULL; /* the parent's transport, closed below */
        session_end(&s);
    }
    slash_region_free(pr);
    slash_listener_close(pl);
    slash_transport_close(inherited);
    inherited = NULL;
}

TEST(messages_expose_attach_write_bounds)
{
    child c = spawn(child_msgs, true);
    session s = {0};
    char buf[SLASH_MSG_MAX];
    size_t n = 0;
    CHECK_OK(parent_connect(&c, &s));
    if (!s.ep)
        goto out;
    for (int i = 0; i < 40; i++) {
        size_t len = (size_t)(i % SLASH_MSG_MAX) + 1;
        memset(buf, i, len);
        CHECK_OK(slash_endpoint_send_msg(s.ep, buf, len));
    }
    CHECK_ST(slash_endpoint_send_msg(s.ep, buf, SLASH_MSG_MAX + 1), SLASH_EINVAL);
    /* exposures come in order, messages in order, each kind by its own call */
    CHECK_OK(slash_endpoint_attach(s.ep, TMO, &s.rm[0]));
    CHECK_OK(slash_endpoint_recv_msg(s.ep, buf, sizeof buf, &n, TMO));
    CHECK(n == 1 && buf[0] == 'a');
    CHECK_OK(slash_endpoint_attach(s.ep, TMO, &s.rm[1]));
    CHECK_OK(slash_endpoint_recv_msg(s.ep, buf, sizeof buf, &n, TMO));
    CHECK(n == 1 && buf[0] == 'b');
    CHECK_OK(slash_region_alloc(s.tp, 4096, &s.r[0]));
    if (!s.rm[0] || !s.rm[1] || !s.r[0])
        goto out;
    slash_remote *rm = s.rm[0];
    slash_region *src = s.r[0];
    CHECK(slash_remote_len(rm) == R1_LEN && slash_remote_len(s.rm[1]) == R2_LEN);
    CHECK(slash_remote_direct(rm) == NULL);
    CHECK_ST(slash_endpoint_recv_msg(s.ep, buf, sizeof buf, &n, 0), SLASH_ETIMEDOUT);

    uint8_t *p = slash_region_addr(src);
    for (int i = 0; i < 1000; i++)
        p[i] = (uint8_t)((i + 100) * 7);
    p[999] = 0xAB;
    /* out of range and zero-length writes are refused before anything moves */
    CHECK_ST(slash_endpoint_write(s.ep, src, 0, rm, R1_LEN - 10, 20), SLASH_ERANGE);
    CHECK_ST(slash_endpoint_write(s.ep, src, 0, rm, R1_LEN + 1, 1), SLASH_ERANGE);
    CHECK_ST(slash_endpoint_write(s.ep, src, 4000, rm, 0, 200), SLASH_ERANGE);
    CHECK_ST(slash_endpoint_write(s.ep, src, 0, rm, SIZE_MAX, 2), SLASH_ERANGE);
    CHECK_ST(slash_endpoint_write(s.ep, src, 0, rm, 0, 0), SLASH_EINVAL);
    CHECK_OK(slash_endpoint_write(s.ep, src, 0, rm, R1_LEN - 1, 1)); /* the last byte is fine */
    CHECK_OK(slash_endpoint_write(s.ep, src, 0, rm, 100, 1000));
    CHECK_OK(slash_endpoint_flush(s.ep, TMO));
    CHECK_OK(slash_endpoint_recv_msg(s.ep, buf, sizeof buf, &n, TMO));
    CHECK(n == 4 && memcmp(buf, "seen", 4) == 0);
    CHECK_OK(slash_endpoint_send_msg(s.ep, "bye", 3));
out:
    CHECK(reap(&c, TMO) == 0);
    session_end(&s);
}

/* ---- does the target have to drive progress? -------------------------------- */

/* Attaches the parent's region, writes 64 bytes ending in 0xCD, waits. */
static int child_one_write(session *s)
{
    C_OK(slash_endpoint_attach(s->ep, TMO, &s->rm[0]));
    C_OK(slash_region_alloc(s->tp, 4096, &s->r[0]));
    uint8_t *p = slash_region_addr(s->r[0]);
    memset(p, 0x11, 63);
    p[63] = 0xCD;
    C_OK(slash_endpoint_write(s->ep, s->r[0], 0, s->rm[0], 0, 64));
    C_OK(slash_endpoint_flush(s->ep, TMO));
    char buf[8];
    size_t n;
    C_OK(slash_endpoint_recv_msg(s->ep, buf, sizeof buf, &n, TMO)); /* "done" */
    return 0;
}

TEST(target_progress)
{
    child c = spawn(child_one_write, true);
    session s = {0};
    CHECK_OK(parent_connect(&c, &s));
    if (s.ep) {
        CHECK_OK(slash_region_alloc(s.tp, 4096, &s.r[0]));
        CHECK_OK(slash_endpoint_expose(s.ep, s.r[0]));
    }
    if (s.r[0]) {
        volatile uint8_t *p = slash_region_addr(s.r[0]);
        /* one second without calling into libfabric */
        uint64_t t0 = slash_now_ns();
        bool landed = false;
        while (!landed && slash_now_ns() - t0 < 1000000000ull) {
            landed = load_acq(&p[63]) == 0xCD;
            usleep(1000);
        }
        fprintf(stderr, "  %s: an incoming write is %s without target progress\n", SPEC,
                landed ? "placed" : "NOT placed");
        slash_backoff b;
        slash_backoff_reset(&b);
        uint64_t t1 = slash_now_ns(), deadline = slash_deadline(TMO);
        while (load_acq(&p[63]) != 0xCD && !slash_deadline_passed(deadline)) {
            CHECK_OK(slash_endpoint_progress(s.ep));
            slash_backoff_wait(&b);
        }
        CHECK(p[63] == 0xCD && p[0] == 0x11 && p[62] == 0x11 && p[64] == 0);
        fprintf(stderr, "  %s: placed %.2f ms after the target began to drive progress\n", SPEC,
                (double)(slash_now_ns() - t1) / 1e6);
        CHECK_OK(slash_endpoint_send_msg(s.ep, "done", 4));
    }
    CHECK(reap(&c, TMO) == 0);
    session_end(&s);
}

/* ---- many ordered writes ----------------------------------------------------- */

/* The reader (child) exposes a ring of NSLOT slots of SLOT bytes. Write k
 * (seq = k + 1) fills the tail of slot k % NSLOT: payload bytes, then a
 * footer {len, seq}; it is a signaled write whose immediate is seq. The
 * reader waits until its endpoint has counted write k's arrival, checks
 * that the arrivals came in order (the last one's immediate is the count),
 * then checks every byte of write k: what the transport promises once the
 * arrival is counted (transport.h), and nothing before. Credits (writes
 * consumed) go back as signaled writes into the writer's credit region, the
 * count in the immediate. */
static uint64_t NWRITES = 100000; /* SLASH_TEST_WRITES overrides (software RDMA is slow) */
#define NSLOT 64
#define SLOT 16384

static uint8_t pattern(uint64_t seq, size_t i) { return (uint8_t)(seq * 7 + i * 13); }
static uint64_t slot_seq(const uint8_t *ring, uint64_t k)
{
    return load64_acq(ring + (k % NSLOT + 1) * SLOT - 8);
}

/* Waits until the endpoint has counted more than `past` signaled writes
 * from the peer, checking they came in order; returns the count, 0 on
 * failure (reported). */
static uint64_t wait_arrival(session *s, uint64_t past)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    uint64_t deadline = slash_deadline(TMO), n = 0;
    uint32_t last = 0;
    for (;;) {
        slash_status st = slash_endpoint_arrivals(s->ep, &n, &last);
        if (n > 0 && last != (uint32_t)n) {
            fprintf(stderr, "  arrival %llu carried immediate %u: out of order\n",
                    (unsigned long long)n, last);
            return 0;
        }
        if (n > past)
            return n;
        if (st != SLASH_OK || slash_deadline_passed(deadline)) {
            fprintf(stderr, "  no arrival past %llu: %s\n", (unsigned long long)past,
                    st != SLASH_OK ? slash_last_error() : "deadline passed");
            return 0;
        }
        slash_backoff_wait(&b);
    }
}

/* Waits until write k has arrived; its footer must then hold its seq. */
static int wait_write(session *s, const uint8_t *ring, uint64_t k, uint64_t *arrived)
{
    if (*arrived <= k && (*arrived = wait_arrival(s, k)) == 0)
        return 1;
    if (slot_seq(ring, k) != k + 1) {
        fprintf(stderr, "  child: write %llu arrived but its slot holds seq %llu\n",
                (unsigned long long)k, (unsigned long long)slot_seq(ring, k));
        return 1;
    }
    return 0;
}

static int child_reader(session *s)
{
    C_OK(slash_region_alloc(s->tp, NSLOT * SLOT, &s->r[0]));
    C_OK(slash_region_alloc(s->tp, 64, &s->r[1]));
    C_OK(slash_endpoint_expose(s->ep, s->r[0]));
    C_OK(slash_endpoint_attach(s->ep, TMO, &s->rm[0]));
    const uint8_t *ring = slash_region_addr(s->r[0]);
    uint64_t *credit = slash_region_addr(s->r[1]);
    uint64_t arrived = 0;
    for (uint64_t k = 0; k < NWRITES; k++) {
        if (wait_write(s, ring, k, &arrived))
            return 1;
        const uint8_t *end = ring + (k % NSLOT + 1) * SLOT;
        uint64_t len;
        memcpy(&len, end - 16, 8);
        C_CHECK(len >= 16 && len <= SLOT);
        const uint8_t *start = end - len;
        for (size_t i = 0; i < len - 16; i++)
            if (start[i] != pattern(k + 1, i)) {
                fprintf(stderr, "  child: write %llu byte %zu of %llu is wrong\n",
                        (unsigned long long)k, i, (unsigned long long)len);
                return 1;
            }
        if ((k + 1) % 8 == 0 || k + 1 == NWRITES) {
            *credit = k + 1; /* monotonic, so one source word is safe to reuse */
            C_OK(slash_endpoint_write_signal(s->ep, s->r[1], 0, s->rm[0], 0, 8, (uint32_t)(k + 1)));
        }
    }
    C_OK(slash_endpoint_flush(s->ep, TMO));
    char buf[8];
    size_t n;
    C_OK(slash_endpoint_recv_msg(s->ep, buf, sizeof buf, &n, TMO)); /* "done" */
    return 0;
}

/* Waits until fewer than NSLOT writes are unconsumed (the credit count is
 * the last arrival's immediate); false on failure. */
static bool wait_credit(session *s, const uint64_t *cw, uint64_t k, uint64_t *credits)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    uint64_t deadline = slash_deadline(TMO), n;
    uint32_t last;
    while (k - *credits >= NSLOT) {
        slash_status st = slash_endpoint_arrivals(s->ep, &n, &last);
        if (n > 0 && last > *credits) {
            CHECK(last <= NWRITES && load64_acq(cw) >= last); /* and the word was placed */
            *credits = last;
            continue;
        }
        if (st != SLASH_OK || slash_deadline_passed(deadline)) {
            CHECK_OK(st);
            CHECK(!"credit wait timed out");
            return false;
        }
        slash_backoff_wait(&b);
    }
    return true;
}

TEST(many_ordered_writes)
{
    child c = spawn(child_reader, true);
    session s = {0};
    CHECK_OK(parent_connect(&c, &s));
    if (s.ep) {
        CHECK_OK(slash_endpoint_attach(s.ep, TMO, &s.rm[0]));
        CHECK_OK(slash_region_alloc(s.tp, NSLOT * SLOT, &s.r[0]));
        CHECK_OK(slash_region_alloc(s.tp, 64, &s.r[1]));
    }
    if (!s.rm[0] || !s.r[0] || !s.r[1])
        goto out;
    CHECK(slash_remote_len(s.rm[0]) == NSLOT * SLOT);
    CHECK_OK(slash_endpoint_expose(s.ep, s.r[1]));
    uint8_t *src = slash_region_addr(s.r[0]);
    const uint64_t *cw = slash_region_addr(s.r[1]);
    uint64_t credits = 0, bytes = 0;
    unsigned rnd = 12345;
    uint64_t t0 = slash_now_ns();
    for (uint64_t k = 0; k < NWRITES; k++) {
        if (!wait_credit(&s, cw, k, &credits))
            goto out;
        rnd = rnd * 1103515245u + 12345u;
        uint64_t r = rnd >> 8;
        size_t len = 16 + ((k % 16 == 0) ? r % (SLOT - 15) : r % 2048);
        size_t end = (k % NSLOT + 1) * SLOT;
        for (size_t i = 0; i < len - 16; i++)
            src[end - len + i] = pattern(k + 1, i);
        uint64_t seq = k + 1;
        memcpy(src + end - 16, &len, 8);
        memcpy(src + end - 8, &seq, 8);
        slash_status st = slash_endpoint_write_signal(s.ep, s.r[0], end - len, s.rm[0], end - len,
                                                      len, (uint32_t)seq);
        if (st != SLASH_OK) {
            CHECK_OK(st);
            goto out;
        }
        bytes += len;
    }
    CHECK_OK(slash_endpoint_flush(s.ep, TMO));
    double secs = (double)(slash_now_ns() - t0) / 1e9;
    fprintf(stderr, "  %llu ordered writes, %.1f MB, in %.2f s (%.0f writes/s)\n",
            (unsigned long long)NWRITES,
            (double)bytes / 1e6, secs, NWRITES / secs);
    CHECK_OK(slash_endpoint_send_msg(s.ep, "done", 4));
out:
    CHECK(reap(&c, 120000) == 0);
    session_end(&s);
}

/* ---- a peer killed with SIGKILL ------------------------------------------------ */

#define KILL_REGION (1 << 20)
#define KILL_WRITE 65536

/* Target: exposes a region, then only drives progress until killed. */
static int child_target(session *s)
{
    C_OK(slash_region_alloc(s->tp, KILL_REGION, &s->r[0]));
    C_OK(slash_endpoint_expose(s->ep, s->r[0]));
    slash_backoff b;
    slash_backoff_reset(&b);
    for (;;) {
        C_OK(slash_endpoint_progress(s->ep));
        slash_backoff_wait(&b);
    }
}

/* Writer: attaches the parent's region and writes into it until killed. */
static int child_writer(session *s)
{
    C_OK(slash_endpoint_attach(s->ep, TMO, &s->rm[0]));
    C_OK(slash_region_alloc(s->tp, KILL_WRITE, &s->r[0]));
    memset(slash_region_addr(s->r[0]), 0xEE, KILL_WRITE);
    for (;;)
        C_OK(slash_endpoint_write(s->ep, s->r[0], 0, s->rm[0], 0, KILL_WRITE));
}

/* Kills the child, then runs step until it fails; checks it is SLASH_EPEER
 * within 10 s. */
static void kill_and_expect_epeer(child *c, session *s, bool writer, const char *who)
{
    kill(c->pid, SIGKILL);
    CHECK(reap(c, TMO) == 128 + SIGKILL);
    slash_backoff b;
    slash_backoff_reset(&b);
    uint64_t t0 = slash_now_ns();
    slash_status st = SLASH_OK;
    for (size_t i = 0; st == SLASH_OK && slash_now_ns() - t0 < 20000000000ull; i++) {
        if (writer)
            st = slash_endpoint_write(s->ep, s->r[0], 0, s->rm[0],
                                      i % (KILL_REGION / KILL_WRITE) * KILL_WRITE, KILL_WRITE);
        if (st == SLASH_OK)
            st = slash_endpoint_progress(s->ep);
        if (!writer)
            slash_backoff_wait(&b);
    }
    double secs = (double)(slash_now_ns() - t0) / 1e9;
    CHECK_ST(st, SLASH_EPEER);
    CHECK(secs < 10.0);
    fprintf(stderr, "  %s saw \"%s\" %.3f s after the kill: %s\n", who, slash_strerror(st), secs,
            slash_last_error());
    CHECK_ST(slash_endpoint_progress(s->ep), SLASH_EPEER); /* sticky */
    CHECK_ST(slash_endpoint_flush(s->ep, 1000), SLASH_EPEER);
}

TEST(target_killed_writer_sees_epeer)
{
    child c = spawn(child_target, true);
    session s = {0};
    CHECK_OK(parent_connect(&c, &s));
    if (s.ep) {
        CHECK_OK(slash_endpoint_attach(s.ep, TMO, &s.rm[0]));
        CHECK_OK(slash_region_alloc(s.tp, KILL_WRITE, &s.r[0]));
    }
    slash_status st = s.rm[0] && s.r[0] ? SLASH_OK : SLASH_ESTATE;
    for (size_t i = 0; i < 200 && st == SLASH_OK; i++) /* the stream is flowing */
        st = slash_endpoint_write(s.ep, s.r[0], 0, s.rm[0],
                                  i % (KILL_REGION / KILL_WRITE) * KILL_WRITE, KILL_WRITE);
    CHECK_OK(st);
    if (st == SLASH_OK)
        kill_and_expect_epeer(&c, &s, true, "writer");
    else
        reap(&c, 0);
    session_end(&s);
}

TEST(writer_killed_target_sees_epeer)
{
    child c = spawn(child_writer, true);
    session s = {0};
    CHECK_OK(parent_connect(&c, &s));
    if (s.ep) {
        CHECK_OK(slash_region_alloc(s.tp, KILL_REGION, &s.r[0]));
        CHECK_OK(slash_endpoint_expose(s.ep, s.r[0]));
    }
    volatile uint8_t *p = s.r[0] ? slash_region_addr(s.r[0]) : NULL;
    slash_backoff b;
    slash_backoff_reset(&b);
    uint64_t deadline = slash_deadline(TMO);
    while (p && load_acq(&p[KILL_WRITE - 1]) != 0xEE && !slash_deadline_passed(deadline)) {
        CHECK_OK(slash_endpoint_progress(s.ep));
        slash_backoff_wait(&b);
    }
    CHECK(p && p[KILL_WRITE - 1] == 0xEE); /* the stream is flowing */
    if (p)
        kill_and_expect_epeer(&c, &s, false, "target");
    else
        reap(&c, 0);
    session_end(&s);
}

/* argv[1], when given, runs only the tests whose name contains it. */
static const char *only;
#define RUN_SOME(name)                             \
    do {                                           \
        if (!only || strstr(#name, only) != NULL) \
            RUN(name);                             \
    } while (0)

int main(int argc, char **argv)
{
    const char *spec = getenv("SLASH_TEST_OFI_SPEC");
    if (spec && *spec)
        SPEC = spec;
    only = argc > 1 ? argv[1] : NULL;
    const char *nw = getenv("SLASH_TEST_WRITES");
    if (nw && atoll(nw) > 0)
        NWRITES = (uint64_t)atoll(nw);
    fprintf(stderr, "transport %s\n", SPEC);
    RUN_SOME(unknown_provider);
    RUN_SOME(listen_addresses);
    RUN_SOME(spec_names_device_or_address);
    RUN_SOME(fork_after_open);
    RUN_SOME(connect_nobody_listens);
    RUN_SOME(timeouts);
    RUN_SOME(auth_wrong_token_refused_on_both_sides);
    RUN_SOME(messages_expose_attach_write_bounds);
    RUN_SOME(target_progress);
    RUN_SOME(many_ordered_writes);
    RUN_SOME(target_killed_writer_sees_epeer);
    RUN_SOME(writer_killed_target_sees_epeer);
    return UNIT_DONE();
}

#endif /* SLASH_HAVE_OFI */
