/* test_transport.c - the transport contract on every compiled transport:
 * control messages in order, region exposure, one-sided writes that land in
 * the peer's memory, and bounds checks on every write. */
#define _GNU_SOURCE
#include "slash/backoff.h"
#include "slash/transport.h"
#include "unit.h"
#include "peer.h"

#include <stdatomic.h>
#include <stdint.h>

static const char *TOKEN = "transport-token";

/* child: exposes a 4096-byte region, tells the parent, waits until the last
 * byte becomes 0xEE, checks the bytes, answers "ok" or "bad". */
static int target(const char *spec, const char *addr, void *arg)
{
    (void)arg;
    slash_transport *tp;
    slash_endpoint *ep;
    slash_region *r;
    if (slash_transport_open(spec, &tp) || slash_connect(tp, addr, TOKEN, 10000, &ep) ||
        slash_region_alloc(tp, 4096, &r))
        return 10;
    if (slash_endpoint_send_msg(ep, "first", 5) || slash_endpoint_send_msg(ep, "second", 6))
        return 11;
    if (slash_endpoint_expose(ep, r))
        return 12;
    volatile uint8_t *mem = slash_region_addr(r);
    slash_backoff b;
    slash_backoff_reset(&b);
    uint64_t deadline = slash_deadline(20000);
    while (atomic_load_explicit((_Atomic uint8_t *)&mem[4095], memory_order_acquire) != 0xEE) {
        if (slash_endpoint_progress(ep) != SLASH_OK || slash_deadline_passed(deadline))
            return 13;
        slash_backoff_wait(&b);
    }
    int ok = 1;
    for (int i = 0; i < 4095; i++)
        ok &= mem[i] == (uint8_t)(i * 7);
    if (slash_endpoint_send_msg(ep, ok ? "ok" : "bad", ok ? 2 : 3))
        return 14;
    char buf[8];
    size_t n;
    slash_endpoint_recv_msg(ep, buf, sizeof buf, &n, 10000); /* wait for "bye" */
    slash_region_free(r);
    slash_endpoint_close(ep);
    slash_transport_close(tp);
    return ok ? 0 : 15;
}

static void run_contract(const char *spec)
{
    peer p;
    peer_start(&p, spec, target, NULL);
    slash_transport *tp;
    slash_listener *l;
    slash_endpoint *ep;
    slash_remote *rm;
    slash_region *src;
    CHECK_OK(slash_transport_open(spec, &tp));
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l));
    peer_send_addr(&p, slash_listener_addr(l));
    CHECK_OK(slash_accept(l, 10000, &ep));
    char buf[SLASH_MSG_MAX];
    size_t n = 0;
    /* attach first: the region descriptor arrives after two messages, and the
     * messages must still come out in order */
    CHECK_OK(slash_endpoint_attach(ep, 10000, &rm));
    CHECK(slash_remote_len(rm) == 4096);
    CHECK_OK(slash_endpoint_recv_msg(ep, buf, sizeof buf, &n, 10000));
    CHECK(n == 5 && memcmp(buf, "first", 5) == 0);
    CHECK_OK(slash_endpoint_recv_msg(ep, buf, sizeof buf, &n, 10000));
    CHECK(n == 6 && memcmp(buf, "second", 6) == 0);
    CHECK_OK(slash_region_alloc(tp, 8192, &src));
    uint8_t *s = slash_region_addr(src);
    for (int i = 0; i < 4095; i++)
        s[i] = (uint8_t)(i * 7);
    s[4095] = 0xEE;
    /* bounds: every range is checked against both regions */
    CHECK_ST(slash_endpoint_write(ep, src, 0, rm, 4000, 200), SLASH_ERANGE);
    CHECK_ST(slash_endpoint_write(ep, src, 0, rm, 5000, 1), SLASH_ERANGE);
    CHECK_ST(slash_endpoint_write(ep, src, 0, rm, SIZE_MAX - 2, 8), SLASH_ERANGE);
    CHECK_ST(slash_endpoint_write(ep, src, 8190, rm, 0, 8), SLASH_ERANGE);
    CHECK_ST(slash_endpoint_write(ep, src, 0, rm, 0, 0), SLASH_EINVAL);
    CHECK_ST(slash_endpoint_send_msg(ep, buf, SLASH_MSG_MAX + 1), SLASH_EINVAL);
    /* a real write in two parts: body, then the flag byte last */
    CHECK_OK(slash_endpoint_write(ep, src, 0, rm, 0, 4095));
    CHECK_OK(slash_endpoint_write(ep, src, 4095, rm, 4095, 1));
    CHECK_OK(slash_endpoint_flush(ep, 10000));
    CHECK_OK(slash_endpoint_recv_msg(ep, buf, sizeof buf, &n, 20000));
    CHECK(n == 2 && memcmp(buf, "ok", 2) == 0);
    CHECK_OK(slash_endpoint_send_msg(ep, "bye", 3));
    CHECK(peer_wait(&p) == 0);
    slash_remote_detach(rm);
    slash_region_free(src);
    slash_endpoint_close(ep);
    slash_listener_close(l);
    slash_transport_close(tp);
}

TEST(shm_contract) { run_contract("shm"); }

TEST(ofi_tcp_contract)
{
    if (slash_transport_have_ofi())
        run_contract("ofi:tcp");
}

TEST(ofi_absent_is_a_clear_error)
{
    slash_transport *tp;
    if (slash_transport_have_ofi())
        return;
    CHECK_ST(slash_transport_open("ofi:tcp", &tp), SLASH_ENOTSUP);
    CHECK(strstr(slash_last_error(), "libfabric-dev") != NULL);
}

TEST(region_reports_its_size)
{
    slash_transport *tp;
    slash_region *r;
    CHECK_OK(slash_transport_open("shm", &tp));
    CHECK_ST(slash_region_alloc(tp, 0, &r), SLASH_EINVAL);
    CHECK_OK(slash_region_alloc(tp, 100, &r));
    CHECK(slash_region_len(r) == 100);
    memset(slash_region_addr(r), 1, 100);
    slash_region_free(r);
    slash_transport_close(tp);
}

int main(void)
{
    RUN(region_reports_its_size);
    RUN(ofi_absent_is_a_clear_error);
    RUN(shm_contract);
    RUN(ofi_tcp_contract);
    return UNIT_DONE();
}
