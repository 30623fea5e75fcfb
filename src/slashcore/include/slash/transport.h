/* transport.h - one small interface for one-sided (RDMA-style) writes.
 *
 * A transport is opened by spec: "shm" (same-host processes sharing memfd
 * segments) or "ofi:PROVIDER" (libfabric connected endpoints, e.g. "ofi:tcp",
 * "ofi:verbs"). A listener waits for peers at an address; a peer connects
 * with the same token, and both sides check it (a wrong token fails with
 * SLASH_EAUTH on both sides). On a connected endpoint each side may expose
 * registered regions to the other and attach the regions the other exposed,
 * in the order they were exposed. A one-sided write copies bytes from a local
 * region into an attached remote region; the peer's CPU takes no part.
 *
 * Invariants every implementation keeps:
 *  - every write is checked against both regions' bounds (SLASH_ERANGE);
 *  - when a write is visible to the reader is the transport's to say:
 *    shm: at once, and within a write the LAST byte becomes visible last, so
 *    a reader that sees the last byte (loaded with acquire) sees the whole
 *    write. ofi: only once the peer has counted a signaled write posted
 *    after it (slash_endpoint_arrivals): that is what RDMA promises (a
 *    completion at the target); bytes seen in memory earlier may belong to
 *    a write whose earlier bytes, or whose predecessors, are not yet placed;
 *  - no call waits forever without backing off (see backoff.h), and a dead or
 *    disconnected peer is reported as SLASH_EPEER by progress and write.
 *
 * Ownership: the caller owns every object it opens and closes it; a region
 * must outlive the endpoints that use it; closing the transport requires all
 * of its listeners, endpoints and regions to be closed first.
 */
#ifndef SLASH_TRANSPORT_H
#define SLASH_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_MSG_MAX 256     /* largest control message */
#define SLASH_TOKEN_MAX 128   /* longest auth token */
#define SLASH_ADDR_MAX 256    /* longest listener address string */

typedef struct slash_transport slash_transport;
typedef struct slash_listener slash_listener;
typedef struct slash_endpoint slash_endpoint;
typedef struct slash_region slash_region;
typedef struct slash_remote slash_remote;

/* Opens a transport by spec ("shm", "ofi:tcp", "ofi:verbs", ...). An ofi
 * spec may name the device or its address after '@': "ofi:verbs@rxe0",
 * "ofi:verbs@10.0.2.15" (SLASH_ENOENT when no device matches).
 * Fails with SLASH_ENOENT for an unknown transport or provider, SLASH_ENOTSUP
 * for "ofi:*" in a build without libfabric (the detail names the package to
 * install), SLASH_EPROVIDER if the provider cannot be initialised. */
slash_status slash_transport_open(const char *spec, slash_transport **out);
void slash_transport_close(slash_transport *tp);
/* The spec the transport was opened with (owned by tp). */
const char *slash_transport_spec(const slash_transport *tp);
/* True when the "ofi" transport was compiled in. */
bool slash_transport_have_ofi(void);

/* Allocates len > 0 bytes of zeroed memory registered with tp, huge pages
 * first (see mem.h). The caller owns the region. */
slash_status slash_region_alloc(slash_transport *tp, size_t len, slash_region **out);
void slash_region_free(slash_region *r);
void *slash_region_addr(const slash_region *r);
size_t slash_region_len(const slash_region *r);
bool slash_region_hugepages(const slash_region *r);

/* Starts listening. bind_addr: for shm a name (NULL picks a unique one); for
 * ofi "HOST:PORT" (port 0 picks a free one). NULL for ofi: the address named
 * in the spec ("ofi:verbs@10.0.0.5"); else 127.0.0.1:0 for providers over
 * the host's TCP stack; else the address of the provider's device (the one
 * named, "ofi:verbs@mlx5_0", or the first it lists), which rdma_cm serves:
 * loopback addresses belong to no RDMA device.
 * token: 1..SLASH_TOKEN_MAX bytes, required. */
slash_status slash_listen(slash_transport *tp, const char *bind_addr, const char *token,
                          slash_listener **out);
/* The address peers pass to slash_connect (owned by l). */
const char *slash_listener_addr(const slash_listener *l);
/* Waits for one authenticated peer. A peer with a wrong token is refused
 * (it gets SLASH_EAUTH) and accept returns SLASH_EAUTH too. */
slash_status slash_accept(slash_listener *l, int timeout_ms, slash_endpoint **out);
void slash_listener_close(slash_listener *l);
/* The transport a listener belongs to. */
slash_transport *slash_listener_transport(const slash_listener *l);

/* Connects to a listener; SLASH_EAUTH if the token is refused, SLASH_EPEER
 * if nobody listens there, SLASH_ETIMEDOUT at the deadline. */
slash_status slash_connect(slash_transport *tp, const char *addr, const char *token,
                           int timeout_ms, slash_endpoint **out);
void slash_endpoint_close(slash_endpoint *ep);
/* The transport an endpoint belongs to. */
slash_transport *slash_endpoint_transport(const slash_endpoint *ep);

/* Small two-sided control messages (setup only), delivered in order. */
slash_status slash_endpoint_send_msg(slash_endpoint *ep, const void *buf, size_t len);
slash_status slash_endpoint_recv_msg(slash_endpoint *ep, void *buf, size_t cap, size_t *len,
                                     int timeout_ms);

/* Lets the peer write into r: sends r's descriptor. */
slash_status slash_endpoint_expose(slash_endpoint *ep, slash_region *r);
/* Receives the next region the peer exposed. The caller owns the remote and
 * detaches it before closing ep. */
slash_status slash_endpoint_attach(slash_endpoint *ep, int timeout_ms, slash_remote **out);
size_t slash_remote_len(const slash_remote *rm);
/* A pointer through which this process may write the remote region directly
 * (shm), or NULL when writes must go through slash_endpoint_write (ofi). */
void *slash_remote_direct(const slash_remote *rm);
void slash_remote_detach(slash_remote *rm);

/* Posts a one-sided write of len > 0 bytes from src[src_off..] to
 * dst[dst_off..]. The source bytes may be reused once the peer has
 * acknowledged them at a higher level (a returned credit) or after
 * slash_endpoint_flush(). Blocks with backoff while the send queue is full.
 * SLASH_ERANGE if either range leaves its region, SLASH_EPEER if the peer is
 * gone. */
slash_status slash_endpoint_write(slash_endpoint *ep, const slash_region *src, size_t src_off,
                                  slash_remote *dst, size_t dst_off, size_t len);

/* A write like slash_endpoint_write that the peer also counts: once the
 * peer's slash_endpoint_arrivals() includes it, this write and every write
 * posted before it on ep are visible in the peer's memory. imm travels with
 * it (the peer reads the last one's). shm: a plain write. */
slash_status slash_endpoint_write_signal(slash_endpoint *ep, const slash_region *src,
                                         size_t src_off, slash_remote *dst, size_t dst_off,
                                         size_t len, uint32_t imm);

/* Drives progress, then: how many signaled writes from the peer are visible
 * here (count) and the imm of the last of them. Arrivals before a failure
 * are still counted when SLASH_EPEER is returned. SLASH_ENOTSUP on shm,
 * whose writes are visible at once. */
slash_status slash_endpoint_arrivals(slash_endpoint *ep, uint64_t *count, uint32_t *last);

/* Drives progress (reaps completions, moves bytes for software providers)
 * and checks the peer: SLASH_OK or SLASH_EPEER. Cheap; call while polling. */
slash_status slash_endpoint_progress(slash_endpoint *ep);

/* Checks now whether the peer is still there: SLASH_OK or SLASH_EPEER.
 * Dearer than progress (a system call on shm); for error paths. */
slash_status slash_endpoint_alive(slash_endpoint *ep);

/* Waits until every posted write has completed locally. */
slash_status slash_endpoint_flush(slash_endpoint *ep, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
