/* transport_shm.c - the "shm" transport: processes on one host.
 *
 * A listener is an abstract Unix SEQPACKET socket named "slash-<name>"; a
 * connection is one such socket pair. The socket carries the handshake (the
 * connector's token, checked with slash_token_equal, answered by an accept or
 * a refusal so both sides learn the outcome), the control messages, and the
 * region descriptors: a region is a memfd mapping whose fd travels with
 * SCM_RIGHTS, and the peer maps the same pages. It also tells liveness: when
 * a peer process dies the kernel closes its end and poll() reports POLLHUP.
 *
 * A one-sided write is a memcpy of all but the last byte followed by a
 * release store of the last byte, so a reader that loads the last byte with
 * acquire sees the whole write (transport.h's ordering invariant). Writes
 * complete at once: flush has nothing to wait for.
 */
#define _GNU_SOURCE
#include "transport_impl.h"

#include "slash/backoff.h"
#include "slash/mem.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x534c5348u /* "SLSH" */
#define SHM_VERSION 1u
#define INBOX_MAX 32
#define LIVENESS_EVERY 64 /* progress() calls between liveness checks */

enum { FRAME_HELLO = 1, FRAME_WELCOME, FRAME_REFUSED, FRAME_MSG, FRAME_REGION };

typedef struct frame {
    uint32_t type;
    uint32_t len;     /* payload bytes (MSG) */
    uint64_t size;    /* region length (REGION) */
    uint8_t data[SLASH_MSG_MAX > SLASH_TOKEN_MAX ? SLASH_MSG_MAX : SLASH_TOKEN_MAX];
} frame;

typedef struct shm_region {
    struct slash_region base;
    slash_mem mem;
} shm_region;

typedef struct shm_listener {
    struct slash_listener base;
    int fd;
    char token[SLASH_TOKEN_MAX + 1];
} shm_listener;

typedef struct inbox_entry {
    frame f;
    int fd; /* received region fd, or -1 */
} inbox_entry;

typedef struct shm_endpoint {
    struct slash_endpoint base;
    int fd;
    bool dead;
    uint32_t calls;
    int inbox_head, inbox_count;
    inbox_entry inbox[INBOX_MAX];
} shm_endpoint;

typedef struct shm_remote {
    struct slash_remote base;
    slash_mem mem;
} shm_remote;

static const slash_transport_ops shm_ops;

/* ---- helpers ---------------------------------------------------------- */

static int remaining_ms(uint64_t deadline)
{
    if (deadline == UINT64_MAX)
        return -1;
    uint64_t now = slash_now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 60000 ? 60000 : (int)ms;
}

/* Waits for fd to become readable. OK, ETIMEDOUT, or ESYS. */
static slash_status wait_readable(int fd, uint64_t deadline, const char *what)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = remaining_ms(deadline);
        int r = poll(&p, 1, ms);
        if (r > 0)
            return SLASH_OK;
        if (r == 0) {
            if (slash_deadline_passed(deadline))
                return slash_fail(SLASH_ETIMEDOUT, "shm: timed out waiting for %s", what);
            continue;
        }
        if (errno != EINTR)
            return slash_fail(SLASH_ESYS, "shm: poll: %s", strerror(errno));
    }
}

static socklen_t make_addr(const char *name, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    /* abstract namespace: leading NUL, not NUL-terminated */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "slash-%s", name);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static slash_status send_frame(int fd, const frame *f, int pass_fd)
{
    struct iovec iov = {.iov_base = (void *)f, .iov_len = offsetof(frame, data) + f->len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pass_fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    for (;;) {
        ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (r >= 0)
            return SLASH_OK;
        if (errno == EINTR)
            continue;
        if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
            return slash_fail(SLASH_EPEER, "shm: peer disconnected");
        return slash_fail(SLASH_ESYS, "shm: sendmsg: %s", strerror(errno));
    }
}

/* Receives one frame (blocking; call after wait_readable). *got_fd is a
 * passed fd or -1. EPEER on orderly close or reset. */
static slash_status recv_frame(int fd, frame *f, int *got_fd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = f, .iov_len = sizeof *f};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    *got_fd = -1;
    ssize_t r;
    do {
        r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    } while (r < 0 && errno == EINTR);
    if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == ENOTCONN)))
        return slash_fail(SLASH_EPEER, "shm: peer disconnected");
    if (r < 0)
        return slash_fail(SLASH_ESYS, "shm: recvmsg: %s", strerror(errno));
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            memcpy(got_fd, CMSG_DATA(c), sizeof(int));
    if ((size_t)r < offsetof(frame, data) || f->len > sizeof f->data ||
        (size_t)r != offsetof(frame, data) + f->len) {
        if (*got_fd >= 0)
            close(*got_fd);
        return slash_fail(SLASH_EPROTO, "shm: malformed control frame (%zd bytes)", r);
    }
    return SLASH_OK;
}

/* ---- transport and regions -------------------------------------------- */

slash_status slash_shm_open(const char *spec, slash_transport **out)
{
    slash_transport *tp = calloc(1, sizeof *tp);
    if (!tp)
        return slash_fail(SLASH_ENOMEM, "shm: out of memory");
    tp->ops = &shm_ops;
    snprintf(tp->spec, sizeof tp->spec, "%s", spec);
    *out = tp;
    return SLASH_OK;
}

static void shm_close(slash_transport *tp) { free(tp); }

static slash_status shm_region_alloc(slash_transport *tp, size_t len, slash_region **out)
{
    shm_region *r = calloc(1, sizeof *r);
    if (!r)
        return slash_fail(SLASH_ENOMEM, "shm: out of memory");
    slash_status st = slash_mem_map(len, true, &r->mem);
    if (st != SLASH_OK) {
        free(r);
        return st;
    }
    r->base.tp = tp;
    r->base.addr = r->mem.addr;
    r->base.len = len;
    r->base.hugepages = r->mem.hugepages;
    *out = &r->base;
    return SLASH_OK;
}

static void shm_region_free(slash_region *base)
{
    shm_region *r = (shm_region *)base;
    slash_mem_unmap(&r->mem);
    free(r);
}

/* ---- listener ----------------------------------------------------------- */

static slash_status shm_listen(slash_transport *tp, const char *bind_addr, const char *token,
                               slash_listener **out)
{
    static _Atomic uint32_t counter;
    shm_listener *l = calloc(1, sizeof *l);
    if (!l)
        return slash_fail(SLASH_ENOMEM, "shm: out of memory");
    l->base.tp = tp;
    snprintf(l->token, sizeof l->token, "%s", token);
    if (bind_addr && *bind_addr) {
        if (strlen(bind_addr) > 80) {
            free(l);
            return slash_fail(SLASH_EINVAL, "shm: listener name longer than 80 bytes");
        }
        snprintf(l->base.addr, sizeof l->base.addr, "%s", bind_addr);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(l->base.addr, sizeof l->base.addr, "%d-%u-%lx", (int)getpid(),
                 atomic_fetch_add(&counter, 1), (unsigned long)ts.tv_nsec);
    }
    l->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        free(l);
        return slash_fail(SLASH_ESYS, "shm: socket: %s", strerror(errno));
    }
    struct sockaddr_un sa;
    socklen_t sl = make_addr(l->base.addr, &sa);
    if (bind(l->fd, (struct sockaddr *)&sa, sl) != 0 || listen(l->fd, 64) != 0) {
        int e = errno;
        close(l->fd);
        slash_status st = slash_fail(e == EADDRINUSE ? SLASH_EINVAL : SLASH_ESYS,
                                     "shm: cannot listen at \"%s\": %s", l->base.addr, strerror(e));
        free(l);
        return st;
    }
    *out = &l->base;
    return SLASH_OK;
}

static void shm_listener_close(slash_listener *base)
{
    shm_listener *l = (shm_listener *)base;
    close(l->fd);
    free(l);
}

static shm_endpoint *endpoint_new(slash_transport *tp, int fd)
{
    shm_endpoint *ep = calloc(1, sizeof *ep);
    if (!ep)
        return NULL;
    ep->base.tp = tp;
    ep->fd = fd;
    return ep;
}

/* A connector sends its handshake as soon as it is connected: one that sends
 * nothing for this long is not a peer (the listener's name is public in
 * /proc/net/unix, so any local process can connect) and is refused. */
#define SHM_HANDSHAKE_MS 2000

static slash_status shm_accept(slash_listener *base, int timeout_ms, slash_endpoint **out)
{
    shm_listener *l = (shm_listener *)base;
    uint64_t deadline = slash_deadline(timeout_ms);
    slash_status st = wait_readable(l->fd, deadline, "a peer to connect");
    if (st != SLASH_OK)
        return st;
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return slash_fail(SLASH_ESYS, "shm: accept: %s", strerror(errno));
    frame f;
    int junk;
    uint64_t hs = slash_deadline(SHM_HANDSHAKE_MS);
    st = wait_readable(fd, hs < deadline ? hs : deadline, "the peer's handshake");
    if (st == SLASH_ETIMEDOUT)
        st = slash_fail(SLASH_EAUTH, "shm: a connection to \"%s\" presented no token within %d ms",
                        l->base.addr, SHM_HANDSHAKE_MS);
    if (st == SLASH_OK)
        st = recv_frame(fd, &f, &junk);
    if (st == SLASH_OK && junk >= 0)
        close(junk);
    if (st == SLASH_OK) {
        uint32_t magic, version;
        memcpy(&magic, f.data, 4);
        memcpy(&version, f.data + 4, 4);
        if (f.type != FRAME_HELLO || f.len < 8 || magic != SHM_MAGIC || version != SHM_VERSION) {
            st = slash_fail(SLASH_EAUTH, "shm: a connection to \"%s\" sent no valid handshake",
                            l->base.addr);
        } else {
            char tok[SLASH_TOKEN_MAX + 1];
            size_t n = f.len - 8;
            memcpy(tok, f.data + 8, n);
            tok[n] = '\0';
            frame reply = {.type = FRAME_WELCOME};
            if (!slash_token_equal(tok, l->token))
                reply.type = FRAME_REFUSED;
            send_frame(fd, &reply, -1);
            if (reply.type == FRAME_REFUSED)
                st = slash_fail(SLASH_EAUTH,
                                "shm: refused a peer at \"%s\" that presented a wrong auth token",
                                l->base.addr);
        }
    }
    if (st != SLASH_OK && st != SLASH_EAUTH && st != SLASH_ENOMEM) {
        /* whatever went wrong before the token was checked (a short frame, a
         * hang-up) was a connection that is not a peer */
        char why[256];
        snprintf(why, sizeof why, "%s", slash_last_error());
        st = slash_fail(SLASH_EAUTH, "shm: a connection to \"%s\" failed its handshake: %s",
                        l->base.addr, why);
    }
    if (st != SLASH_OK) {
        close(fd);
        return st;
    }
    shm_endpoint *ep = endpoint_new(base->tp, fd);
    if (!ep) {
        close(fd);
        return slash_fail(SLASH_ENOMEM, "shm: out of memory");
    }
    *out = &ep->base;
    return SLASH_OK;
}

static slash_status shm_connect(slash_transport *tp, const char *addr, const char *token,
                                int timeout_ms, slash_endpoint **out)
{
    if (strlen(addr) > 80)
        return slash_fail(SLASH_EINVAL, "shm: address longer than 80 bytes");
    uint64_t deadline = slash_deadline(timeout_ms);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return slash_fail(SLASH_ESYS, "shm: socket: %s", strerror(errno));
    struct sockaddr_un sa;
    socklen_t sl = make_addr(addr, &sa);
    if (connect(fd, (struct sockaddr *)&sa, sl) != 0) {
        int e = errno;
        close(fd);
        if (e == ECONNREFUSED || e == ENOENT)
            return slash_fail(SLASH_EPEER, "shm: nobody listens at \"%s\"", addr);
        return slash_fail(SLASH_ESYS, "shm: connect to \"%s\": %s", addr, strerror(e));
    }
    frame f = {.type = FRAME_HELLO};
    uint32_t magic = SHM_MAGIC, version = SHM_VERSION;
    size_t n = strlen(token);
    memcpy(f.data, &magic, 4);
    memcpy(f.data + 4, &version, 4);
    memcpy(f.data + 8, token, n);
    f.len = (uint32_t)(8 + n);
    int junk;
    slash_status st = send_frame(fd, &f, -1);
    if (st == SLASH_OK)
        st = wait_readable(fd, deadline, "the listener's answer");
    if (st == SLASH_OK)
        st = recv_frame(fd, &f, &junk);
    if (st == SLASH_OK && junk >= 0)
        close(junk);
    if (st == SLASH_OK && f.type == FRAME_REFUSED)
        st = slash_fail(SLASH_EAUTH, "shm: the listener at \"%s\" refused our auth token", addr);
    else if (st == SLASH_OK && f.type != FRAME_WELCOME)
        st = slash_fail(SLASH_EPROTO, "shm: unexpected handshake answer from \"%s\"", addr);
    else if (st == SLASH_EPEER)
        st = slash_fail(SLASH_EPEER, "shm: the listener at \"%s\" closed the connection", addr);
    if (st != SLASH_OK) {
        close(fd);
        return st;
    }
    shm_endpoint *ep = endpoint_new(tp, fd);
    if (!ep) {
        close(fd);
        return slash_fail(SLASH_ENOMEM, "shm: out of memory");
    }
    *out = &ep->base;
    return SLASH_OK;
}

static void shm_endpoint_close(slash_endpoint *base)
{
    shm_endpoint *ep = (shm_endpoint *)base;
    for (int i = 0; i < ep->inbox_count; i++) {
        inbox_entry *e = &ep->inbox[(ep->inbox_head + i) % INBOX_MAX];
        if (e->fd >= 0)
            close(e->fd);
    }
    close(ep->fd);
    free(ep);
}

/* ---- control stream ------------------------------------------------------ */

/* Takes the oldest queued frame of the given type, reading the socket (and
 * queueing frames of the other type) until one arrives or the deadline. */
static slash_status take_frame(shm_endpoint *ep, uint32_t type, uint64_t deadline, inbox_entry *out)
{
    for (;;) {
        for (int i = 0; i < ep->inbox_count; i++) {
            int idx = (ep->inbox_head + i) % INBOX_MAX;
            if (ep->inbox[idx].f.type != type)
                continue;
            *out = ep->inbox[idx];
            /* close the gap, keeping order */
            for (int j = i; j > 0; j--)
                ep->inbox[(ep->inbox_head + j) % INBOX_MAX] =
                    ep->inbox[(ep->inbox_head + j - 1) % INBOX_MAX];
            ep->inbox_head = (ep->inbox_head + 1) % INBOX_MAX;
            ep->inbox_count--;
            return SLASH_OK;
        }
        if (ep->dead)
            return slash_fail(SLASH_EPEER, "shm: peer disconnected");
        if (ep->inbox_count == INBOX_MAX)
            return slash_fail(SLASH_EPROTO, "shm: more than %d unread control frames", INBOX_MAX);
        slash_status st = wait_readable(ep->fd, deadline, "a control message from the peer");
        if (st != SLASH_OK)
            return st;
        inbox_entry *e = &ep->inbox[(ep->inbox_head + ep->inbox_count) % INBOX_MAX];
        st = recv_frame(ep->fd, &e->f, &e->fd);
        if (st == SLASH_EPEER)
            ep->dead = true;
        if (st != SLASH_OK)
            return st;
        if (e->f.type != FRAME_MSG && e->f.type != FRAME_REGION) {
            if (e->fd >= 0)
                close(e->fd);
            return slash_fail(SLASH_EPROTO, "shm: unexpected control frame type %u", e->f.type);
        }
        ep->inbox_count++;
    }
}

static slash_status shm_send_msg(slash_endpoint *base, const void *buf, size_t len)
{
    shm_endpoint *ep = (shm_endpoint *)base;
    frame f = {.type = FRAME_MSG, .len = (uint32_t)len};
    memcpy(f.data, buf, len);
    return send_frame(ep->fd, &f, -1);
}

static slash_status shm_recv_msg(slash_endpoint *base, void *buf, size_t cap, size_t *len,
                                 int timeout_ms)
{
    shm_endpoint *ep = (shm_endpoint *)base;
    inbox_entry e;
    slash_status st = take_frame(ep, FRAME_MSG, slash_deadline(timeout_ms), &e);
    if (st != SLASH_OK)
        return st;
    if (e.f.len > cap)
        return slash_fail(SLASH_ETOOBIG, "shm: control message of %u bytes, buffer holds %zu",
                          e.f.len, cap);
    memcpy(buf, e.f.data, e.f.len);
    *len = e.f.len;
    return SLASH_OK;
}

static slash_status shm_expose(slash_endpoint *base, slash_region *r)
{
    shm_endpoint *ep = (shm_endpoint *)base;
    frame f = {.type = FRAME_REGION, .size = r->len};
    return send_frame(ep->fd, &f, ((shm_region *)r)->mem.fd);
}

static slash_status shm_attach(slash_endpoint *base, int timeout_ms, slash_remote **out)
{
    shm_endpoint *ep = (shm_endpoint *)base;
    inbox_entry e = {.fd = -1}; /* take_frame fills it on success */
    slash_status st = take_frame(ep, FRAME_REGION, slash_deadline(timeout_ms), &e);
    if (st != SLASH_OK)
        return st;
    if (e.fd < 0)
        return slash_fail(SLASH_EPROTO, "shm: region descriptor without a file descriptor");
    shm_remote *rm = calloc(1, sizeof *rm);
    if (!rm) {
        close(e.fd);
        return slash_fail(SLASH_ENOMEM, "shm: out of memory");
    }
    st = slash_mem_attach_fd(e.fd, (size_t)e.f.size, &rm->mem);
    if (st != SLASH_OK) {
        free(rm);
        return st;
    }
    rm->base.ep = base;
    rm->base.len = (size_t)e.f.size;
    rm->base.direct = rm->mem.addr;
    *out = &rm->base;
    return SLASH_OK;
}

static void shm_detach(slash_remote *base)
{
    shm_remote *rm = (shm_remote *)base;
    slash_mem_unmap(&rm->mem);
    free(rm);
}

/* ---- data path ------------------------------------------------------------ */

static slash_status check_alive(shm_endpoint *ep)
{
    if (ep->dead)
        return slash_fail(SLASH_EPEER, "shm: peer disconnected");
    struct pollfd p = {.fd = ep->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
        ep->dead = true;
        return slash_fail(SLASH_EPEER, "shm: peer disconnected (process exited or closed)");
    }
    return SLASH_OK;
}

static slash_status shm_write(slash_endpoint *base, const slash_region *src, size_t src_off,
                              slash_remote *dst, size_t dst_off, size_t len)
{
    shm_endpoint *ep = (shm_endpoint *)base;
    if (ep->dead)
        return slash_fail(SLASH_EPEER, "shm: peer disconnected");
    const uint8_t *s = (const uint8_t *)src->addr + src_off;
    uint8_t *d = (uint8_t *)dst->direct + dst_off;
    if (len > 1)
        memcpy(d, s, len - 1);
    atomic_store_explicit((_Atomic uint8_t *)(d + len - 1), s[len - 1], memory_order_release);
    return SLASH_OK;
}

/* A shm write is visible once it returns (the peer maps the same pages), so
 * a signaled one is a write; the peer learns of it by loading the last byte
 * with acquire, and there is no count of arrivals to read. */
static slash_status shm_write_signal(slash_endpoint *base, const slash_region *src,
                                     size_t src_off, slash_remote *dst, size_t dst_off,
                                     size_t len, uint32_t imm)
{
    (void)imm;
    return shm_write(base, src, src_off, dst, dst_off, len);
}

static slash_status shm_arrivals(slash_endpoint *base, uint64_t *count, uint32_t *last)
{
    (void)base;
    *count = 0;
    *last = 0;
    return slash_fail(SLASH_ENOTSUP, "shm counts no arrivals: a write is visible when it returns "
                                     "(load its last byte with acquire)");
}

static slash_status shm_progress(slash_endpoint *base)
{
    shm_endpoint *ep = (shm_endpoint *)base;
    if (++ep->calls % LIVENESS_EVERY != 0 && !ep->dead)
        return SLASH_OK;
    return check_alive(ep);
}

static slash_status shm_alive(slash_endpoint *base) { return check_alive((shm_endpoint *)base); }

static slash_status shm_flush(slash_endpoint *base, int timeout_ms)
{
    (void)timeout_ms;
    shm_endpoint *ep = (shm_endpoint *)base;
    return ep->dead ? slash_fail(SLASH_EPEER, "shm: peer disconnected") : SLASH_OK;
}

static const slash_transport_ops shm_ops = {
    .name = "shm",
    .close = shm_close,
    .region_alloc = shm_region_alloc,
    .region_free = shm_region_free,
    .listen = shm_listen,
    .accept = shm_accept,
    .listener_close = shm_listener_close,
    .connect = shm_connect,
    .endpoint_close = shm_endpoint_close,
    .send_msg = shm_send_msg,
    .recv_msg = shm_recv_msg,
    .expose = shm_expose,
    .attach = shm_attach,
    .detach = shm_detach,
    .write = shm_write,
    .write_signal = shm_write_signal,
    .arrivals = shm_arrivals,
    .progress = shm_progress,
    .alive = shm_alive,
    .flush = shm_flush,
};
