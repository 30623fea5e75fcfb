/* transport.c - dispatch from the public transport API to an implementation.
 *
 * The one place where arguments are validated (NULLs, zero lengths, token
 * size) and every write is bounds-checked against the local and the remote
 * region, so implementations need not repeat those checks.
 */
#include "transport_impl.h"

#include <string.h>

bool slash_transport_have_ofi(void)
{
#ifdef SLASH_HAVE_OFI
    return true;
#else
    return false;
#endif
}

slash_status slash_transport_open(const char *spec, slash_transport **out)
{
    *out = NULL;
    if (!spec || !*spec)
        return slash_fail(SLASH_EINVAL, "transport spec is empty (expected \"shm\" or \"ofi:PROVIDER\")");
    if (strlen(spec) >= sizeof(((slash_transport *)0)->spec))
        return slash_fail(SLASH_EINVAL, "transport spec too long: \"%.40s...\"", spec);
    if (strcmp(spec, "shm") == 0)
        return slash_shm_open(spec, out);
    if (strncmp(spec, "ofi:", 4) == 0 || strcmp(spec, "ofi") == 0) {
        const char *prov = spec[3] == ':' ? spec + 4 : "tcp";
        if (!*prov)
            return slash_fail(SLASH_EINVAL, "transport \"%s\" names no provider (try \"ofi:tcp\")", spec);
#ifdef SLASH_HAVE_OFI
        return slash_ofi_open(spec, prov, out);
#else
        return slash_fail(SLASH_ENOTSUP,
                          "transport \"%s\" needs libfabric, which this build lacks: "
                          "install it (apt-get install libfabric-dev) and reinstall slash",
                          spec);
#endif
    }
    return slash_fail(SLASH_ENOENT, "unknown transport \"%s\" (known: \"shm\", \"ofi:tcp\", \"ofi:verbs\")",
                      spec);
}

void slash_transport_close(slash_transport *tp)
{
    if (tp)
        tp->ops->close(tp);
}

const char *slash_transport_spec(const slash_transport *tp) { return tp->spec; }

slash_status slash_region_alloc(slash_transport *tp, size_t len, slash_region **out)
{
    *out = NULL;
    if (len == 0)
        return slash_fail(SLASH_EINVAL, "cannot register a region of 0 bytes");
    return tp->ops->region_alloc(tp, len, out);
}

void slash_region_free(slash_region *r)
{
    if (r)
        r->tp->ops->region_free(r);
}

void *slash_region_addr(const slash_region *r) { return r->addr; }
size_t slash_region_len(const slash_region *r) { return r->len; }
bool slash_region_hugepages(const slash_region *r) { return r->hugepages; }

bool slash_token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    size_t n = la < lb ? la : lb;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

slash_status slash_token_check(const char *token)
{
    if (!token || !*token)
        return slash_fail(SLASH_EINVAL, "an auth token is required (1..%d bytes)", SLASH_TOKEN_MAX);
    if (strlen(token) > SLASH_TOKEN_MAX)
        return slash_fail(SLASH_EINVAL, "auth token longer than %d bytes", SLASH_TOKEN_MAX);
    return SLASH_OK;
}

slash_status slash_listen(slash_transport *tp, const char *bind_addr, const char *token,
                          slash_listener **out)
{
    *out = NULL;
    slash_status st = slash_token_check(token);
    if (st != SLASH_OK)
        return st;
    return tp->ops->listen(tp, bind_addr, token, out);
}

const char *slash_listener_addr(const slash_listener *l) { return l->addr; }

slash_transport *slash_listener_transport(const slash_listener *l) { return l->tp; }

slash_status slash_accept(slash_listener *l, int timeout_ms, slash_endpoint **out)
{
    *out = NULL;
    return l->tp->ops->accept(l, timeout_ms, out);
}

void slash_listener_close(slash_listener *l)
{
    if (l)
        l->tp->ops->listener_close(l);
}

slash_status slash_connect(slash_transport *tp, const char *addr, const char *token,
                           int timeout_ms, slash_endpoint **out)
{
    *out = NULL;
    if (!addr || !*addr)
        return slash_fail(SLASH_EINVAL, "connect: empty address");
    slash_status st = slash_token_check(token);
    if (st != SLASH_OK)
        return st;
    return tp->ops->connect(tp, addr, token, timeout_ms, out);
}

void slash_endpoint_close(slash_endpoint *ep)
{
    if (ep)
        ep->tp->ops->endpoint_close(ep);
}

slash_transport *slash_endpoint_transport(const slash_endpoint *ep) { return ep->tp; }

slash_status slash_endpoint_send_msg(slash_endpoint *ep, const void *buf, size_t len)
{
    if (len == 0 || len > SLASH_MSG_MAX)
        return slash_fail(SLASH_EINVAL, "control message of %zu bytes (allowed 1..%d)", len,
                          SLASH_MSG_MAX);
    return ep->tp->ops->send_msg(ep, buf, len);
}

slash_status slash_endpoint_recv_msg(slash_endpoint *ep, void *buf, size_t cap, size_t *len,
                                     int timeout_ms)
{
    return ep->tp->ops->recv_msg(ep, buf, cap, len, timeout_ms);
}

slash_status slash_endpoint_expose(slash_endpoint *ep, slash_region *r)
{
    if (r->tp != ep->tp)
        return slash_fail(SLASH_EINVAL, "region belongs to another transport");
    return ep->tp->ops->expose(ep, r);
}

slash_status slash_endpoint_attach(slash_endpoint *ep, int timeout_ms, slash_remote **out)
{
    *out = NULL;
    return ep->tp->ops->attach(ep, timeout_ms, out);
}

size_t slash_remote_len(const slash_remote *rm) { return rm->len; }
void *slash_remote_direct(const slash_remote *rm) { return rm->direct; }

void slash_remote_detach(slash_remote *rm)
{
    if (rm)
        rm->ep->tp->ops->detach(rm);
}

static slash_status write_check(slash_endpoint *ep, const slash_region *src, size_t src_off,
                                slash_remote *dst, size_t dst_off, size_t len)
{
    if (len == 0)
        return slash_fail(SLASH_EINVAL, "write of 0 bytes");
    if (src->tp != ep->tp || dst->ep != ep)
        return slash_fail(SLASH_EINVAL, "write: region or remote belongs to another endpoint");
    if (src_off > src->len || len > src->len - src_off)
        return slash_fail(SLASH_ERANGE, "write source [%zu, +%zu) outside local region of %zu bytes",
                          src_off, len, src->len);
    if (dst_off > dst->len || len > dst->len - dst_off)
        return slash_fail(SLASH_ERANGE,
                          "write target [%zu, +%zu) outside remote region of %zu bytes", dst_off,
                          len, dst->len);
    return SLASH_OK;
}

slash_status slash_endpoint_write(slash_endpoint *ep, const slash_region *src, size_t src_off,
                                  slash_remote *dst, size_t dst_off, size_t len)
{
    slash_status st = write_check(ep, src, src_off, dst, dst_off, len);
    return st != SLASH_OK ? st : ep->tp->ops->write(ep, src, src_off, dst, dst_off, len);
}

slash_status slash_endpoint_write_signal(slash_endpoint *ep, const slash_region *src,
                                         size_t src_off, slash_remote *dst, size_t dst_off,
                                         size_t len, uint32_t imm)
{
    slash_status st = write_check(ep, src, src_off, dst, dst_off, len);
    return st != SLASH_OK ? st : ep->tp->ops->write_signal(ep, src, src_off, dst, dst_off, len, imm);
}

slash_status slash_endpoint_arrivals(slash_endpoint *ep, uint64_t *count, uint32_t *last)
{
    return ep->tp->ops->arrivals(ep, count, last);
}

slash_status slash_endpoint_progress(slash_endpoint *ep) { return ep->tp->ops->progress(ep); }

slash_status slash_endpoint_alive(slash_endpoint *ep) { return ep->tp->ops->alive(ep); }

slash_status slash_endpoint_flush(slash_endpoint *ep, int timeout_ms)
{
    return ep->tp->ops->flush(ep, timeout_ms);
}
