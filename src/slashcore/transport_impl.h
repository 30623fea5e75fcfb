/* transport_impl.h - the vtable behind transport.h, private to the core.
 *
 * Each implementation (transport_shm.c, transport_ofi.c) defines its own
 * structs whose first member is the generic one below, so a generic pointer
 * can be cast to the implementation's. Bounds checks on writes are done once,
 * in transport.c, before the implementation's write is called.
 */
#ifndef SLASH_TRANSPORT_IMPL_H
#define SLASH_TRANSPORT_IMPL_H

#include "slash/transport.h"

typedef struct slash_transport_ops {
    const char *name;
    void (*close)(slash_transport *tp);
    slash_status (*region_alloc)(slash_transport *tp, size_t len, slash_region **out);
    void (*region_free)(slash_region *r);
    slash_status (*listen)(slash_transport *tp, const char *bind_addr, const char *token,
                           slash_listener **out);
    slash_status (*accept)(slash_listener *l, int timeout_ms, slash_endpoint **out);
    void (*listener_close)(slash_listener *l);
    slash_status (*connect)(slash_transport *tp, const char *addr, const char *token,
                            int timeout_ms, slash_endpoint **out);
    void (*endpoint_close)(slash_endpoint *ep);
    slash_status (*send_msg)(slash_endpoint *ep, const void *buf, size_t len);
    slash_status (*recv_msg)(slash_endpoint *ep, void *buf, size_t cap, size_t *len,
                             int timeout_ms);
    slash_status (*expose)(slash_endpoint *ep, slash_region *r);
    slash_status (*attach)(slash_endpoint *ep, int timeout_ms, slash_remote **out);
    void (*detach)(slash_remote *rm);
    /* bounds already checked by transport.c */
    slash_status (*write)(slash_endpoint *ep, const slash_region *src, size_t src_off,
                          slash_remote *dst, size_t dst_off, size_t len);
    slash_status (*write_signal)(slash_endpoint *ep, const slash_region *src, size_t src_off,
                                 slash_remote *dst, size_t dst_off, size_t len, uint32_t imm);
    slash_status (*arrivals)(slash_endpoint *ep, uint64_t *count, uint32_t *last);
    slash_status (*progress)(slash_endpoint *ep);
    slash_status (*alive)(slash_endpoint *ep); /* checks the peer now */
    slash_status (*flush)(slash_endpoint *ep, int timeout_ms);
} slash_transport_ops;

struct slash_transport {
    const slash_transport_ops *ops;
    char spec[64];
};

struct slash_region {
    slash_transport *tp;
    void *addr;
    size_t len;
    bool hugepages;
};

struct slash_listener {
    slash_transport *tp;
    char addr[SLASH_ADDR_MAX];
};

struct slash_endpoint {
    slash_transport *tp;
};

struct slash_remote {
    slash_endpoint *ep;
    size_t len;
    void *direct; /* non-NULL for shm */
};

/* Implementation entry points, called by slash_transport_open(). */
slash_status slash_shm_open(const char *spec, slash_transport **out);
slash_status slash_ofi_open(const char *spec, const char *provider, slash_transport **out);

/* Constant-time token comparison shared by both implementations. */
bool slash_token_equal(const char *a, const char *b);
/* Validates a token argument: non-NULL, 1..SLASH_TOKEN_MAX bytes. */
slash_status slash_token_check(const char *token);

#endif
