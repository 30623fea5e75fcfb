/* transport_ofi.c - the "ofi:PROVIDER" transport: libfabric connected
 * endpoints (FI_EP_MSG) with RMA writes, e.g. "ofi:tcp" here and "ofi:verbs"
 * on RDMA hardware.
 *
 * Objects: one fabric + one domain per transport (the first domain the
 * provider lists, or $SLASH_OFI_DOMAIN), so every region registered on the
 * transport can be used by every endpoint. A listener is a passive endpoint
 * with its own EQ; an endpoint has its own EQ (connection events) and one CQ
 * for its sends, receives and writes.
 *
 * Control stream: fixed-size frames {tag, len, body} sent with fi_send into
 * OFI_NRECV pre-posted receive slots, all in one registered block. Frames are
 * queued in arrival order and taken by tag: AUTH (connector's token), AUTH_OK /
 * AUTH_DENIED (listener's verdict), USER (send_msg/recv_msg) and REGION
 * (expose/attach), so exposures and user messages share one ordered stream.
 * Authentication is the first frame after FI_CONNECTED (not fi_connect param
 * data, which verbs caps at ~56 bytes): the listener compares the token with
 * slash_token_equal, answers AUTH_DENIED and closes on a mismatch, so connect
 * and accept both return SLASH_EAUTH.
 *
 * What we rely on from libfabric (checked at open, see ofi_hints()):
 *  - FI_ORDER_WAW in tx and rx msg_order: RMA writes on one endpoint are
 *    executed at the target in the order posted, for writes up to
 *    ep_attr->max_order_waw_size bytes (a longer write fails with
 *    SLASH_ETOOBIG rather than lose ordering).
 *  - Visibility: placement order in memory is NOT promised (verbs places a
 *    message's packets, and so successive writes, in no promised order; over
 *    soft-RoCE a reader polling memory saw write N+1 before write N). What
 *    is promised is a completion at the target: a signaled write
 *    (fi_writedata, FI_REMOTE_CQ_DATA) completes in the target's CQ only
 *    once it and every write before it on the endpoint are placed. Readers
 *    therefore wait for slash_endpoint_arrivals() to count a signaled write,
 *    never for bytes. On verbs (FI_RX_CQ_DATA) each signaled write consumes
 *    one posted receive, which is posted again at once; with all OFI_NRECV
 *    in use the sender is told to retry (RNR) as the provider configures.
 *  - Progress: the tcp provider of libfabric 1.17 reports FI_PROGRESS_AUTO,
 *    yet measured here (see the test "target_progress") bytes of incoming
 *    writes are only placed while the target process calls into the provider
 *    (fi_cq_read): it behaves as manual progress. So progress() reads the CQ
 *    on every call, and a consumer that polls a flag must call
 *    slash_endpoint_progress() in its loop. Senders drive progress too.
 *  - A peer whose process dies has its sockets closed by the kernel; the tcp
 *    provider then reports FI_SHUTDOWN on the EQ and/or error completions,
 *    which progress() and write() turn into a sticky SLASH_EPEER. (A host
 *    that vanishes without closing its sockets needs TCP keepalive or a
 *    higher-level heartbeat; that is not handled here.)
 *
 * Invariants: an endpoint is used by one thread at a time (the domain is
 * FI_THREAD_SAFE so different endpoints may run on different threads); every
 * posted write holds one context from a free list of nwctx entries, so at most
 * nwctx writes are outstanding and posted - completed counts them; once an
 * endpoint fails (peer gone, CQ error) the failure is sticky and every later
 * call reports it; nothing waits without slash_backoff_wait and a deadline
 * (a write whose send queue stays full for OFI_STALL_MS returns
 * SLASH_ETIMEDOUT).
 * Objects are closed in the reverse order of opening.
 */
#ifdef SLASH_HAVE_OFI

#define _GNU_SOURCE
#include "transport_impl.h"

#include <arpa/inet.h>
#include <assert.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "slash/backoff.h"
#include "slash/mem.h"

#include <dlfcn.h>
#include <pthread.h>

/* ---- libfabric, loaded at first use -------------------------------------
 * libfabric and what it pulls in (verbs, psm, efa, libnl, ...) cost ~0.2 s
 * to load, so the library is not linked: the first slash_ofi_open() loads
 * it with dlopen and takes the functions this file calls; everything else it
 * uses is an inline wrapper over the objects' own ops tables. A process that
 * only uses shm never loads it. Below, fi_getinfo & co. name these pointers,
 * which are set before any object exists (every other call needs an object).
 *
 * fork(): the verbs rule is that a child must not use verbs or rdma_cm state
 * it inherited, and the libraries keep such state in globals (librdmacm's
 * device list holds the parent's open verbs contexts, whose device files the
 * child shares): a child that opened verbs through the inherited copy could
 * not move data. So a process that did not load the library itself (a child
 * of one that did) loads a fresh copy of it and of everything it pulls in,
 * in a link-map namespace of its own (dlmopen LM_ID_NEWLM): its own globals,
 * its own device files. Objects the parent opened stay the parent's: in the
 * child they are refused, and closing them frees only this process's memory
 * (a destroy through the shared device file would destroy the parent's).
 * Nothing this file allocates is handed to the library to free, nor the
 * reverse: the library copies what it keeps (fi_dupinfo), so whichever
 * allocator it was linked to in its namespace is used consistently. */
static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
} ofi_lib;
static pthread_mutex_t ofi_lib_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t ofi_lib_pid;       /* the process the loaded copy belongs to, 0 = none */
static char ofi_lib_error[256]; /* empty once loaded */

#define OFI_LIB_NAME "libfabric.so.1"
#define OFI_NFNS 5

static void ofi_lib_load(void)
{
    bool inherited = ofi_lib_pid != 0;
    ofi_lib_pid = getpid();
    /* No registration cache: every registration here lives as long as its
     * mapping, so a cache saves nothing, and a cached one outliving its
     * munmap (the cache's memory monitor missed it) would be handed to the
     * next mapping at the same address: the device then writes the old
     * pages and the reader sees zeros (a control frame "with tag 0" over
     * verbs). The user's own setting wins. */
    setenv("FI_MR_CACHE_MAX_COUNT", "0", 0);
    ofi_lib_error[0] = '\0';
    void *h = inherited ? dlmopen(LM_ID_NEWLM, OFI_LIB_NAME, RTLD_NOW | RTLD_LOCAL)
                        : dlopen(OFI_LIB_NAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(ofi_lib_error, sizeof ofi_lib_error, "%s%s", inherited ? "a fresh copy after "
                 "fork(): " : "", e ? e : "dlopen failed");
        return;
    }
    static const char *const names[OFI_NFNS] = {"fi_getinfo", "fi_freeinfo", "fi_dupinfo",
                                                "fi_fabric", "fi_strerror"};
    void *fns[OFI_NFNS];
    for (int i = 0; i < OFI_NFNS; i++) {
        fns[i] = dlsym(h, names[i]);
        if (!fns[i]) {
            snprintf(ofi_lib_error, sizeof ofi_lib_error, "%s has no symbol %s", OFI_LIB_NAME,
                     names[i]);
            return;
        }
    }
    /* function pointers from dlsym's void *, as POSIX allows */
    memcpy(&ofi_lib.getinfo, &fns[0], sizeof fns[0]);
    memcpy(&ofi_lib.freeinfo, &fns[1], sizeof fns[1]);
    memcpy(&ofi_lib.dupinfo, &fns[2], sizeof fns[2]);
    memcpy(&ofi_lib.fabric, &fns[3], sizeof fns[3]);
    memcpy(&ofi_lib.strerror, &fns[4], sizeof fns[4]);
}

/* Loads libfabric once per process; fails with SLASH_EPROVIDER naming the reason. */
static slash_status ofi_lib_ready(void)
{
    pthread_mutex_lock(&ofi_lib_mu);
    if (ofi_lib_pid != getpid())
        ofi_lib_load();
    pthread_mutex_unlock(&ofi_lib_mu);
    if (ofi_lib_error[0])
        return slash_fail(SLASH_EPROVIDER, "the ofi transport needs libfabric: cannot load %s (%s); "
                          "install it (apt-get install libfabric1) or use --transport shm",
                          OFI_LIB_NAME, ofi_lib_error);
    return SLASH_OK;
}

#define fi_getinfo ofi_lib.getinfo
#define fi_freeinfo ofi_lib.freeinfo
#define fi_dupinfo ofi_lib.dupinfo
#define fi_fabric ofi_lib.fabric
#define fi_strerror ofi_lib.strerror

#define OFI_API_VERSION FI_VERSION(1, 17)
#define OFI_NRECV 64          /* pre-posted receives per endpoint (control frames; on
                                 * providers with FI_RX_CQ_DATA also signaled writes) */
#define OFI_NSEND 16          /* control sends in flight per endpoint */
#define OFI_MAX_WRITES 1024   /* cap on outstanding writes per endpoint */
#define OFI_STALL_MS 60000    /* a full send queue that does not move for this long */
#define OFI_CLOSE_LINGER_MS 2000 /* close waits this long for control sends to leave */

/* mr_mode bits this file handles (FI_MR_ENDPOINT and FI_MR_RAW are not). */
#define OFI_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)

enum {
    TAG_AUTH = 1,    /* connector -> listener: the token */
    TAG_AUTH_OK,     /* listener -> connector: token accepted */
    TAG_AUTH_DENIED, /* listener -> connector: token refused, closing */
    TAG_USER,        /* slash_endpoint_send_msg payload */
    TAG_REGION,      /* an ofi_region_desc from expose */
    TAG_LAST = TAG_REGION
};
#define TAG_BIT(t) (1u << (t))
#define TAG_ANY 0xffffffffu

/* One control frame on the wire (little-endian header). */
typedef struct ofi_frame {
    uint32_t tag;
    uint32_t len;
    uint8_t body[SLASH_MSG_MAX];
} ofi_frame;
static_assert(sizeof(ofi_frame) == 8 + SLASH_MSG_MAX, "ofi_frame is sent to the peer");
#define FRAME_HDR 8u

/* Body of a TAG_REGION frame (little-endian). addr is the region's virtual
 * address under FI_MR_VIRT_ADDR, else 0 (writes then address by offset). */
typedef struct ofi_region_desc {
    uint64_t addr;
    uint64_t len;
    uint64_t key;
} ofi_region_desc;
static_assert(sizeof(ofi_region_desc) == 24, "ofi_region_desc is sent to the peer");

typedef struct ofi_slot {
    struct fi_context2 ctx; /* first: completions hand back &slot->ctx */
    ofi_frame frame;
    bool busy; /* send slot posted and not yet completed */
} ofi_slot;

typedef struct ofi_transport {
    slash_transport base;
    struct fi_info *info; /* the provider entry endpoints are made from */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    uint64_t mr_mode;
    size_t max_waw; /* longest write still ordered with the others */
    uint64_t next_key; /* requested MR keys when the provider does not pick them */
    char listen_host[INET6_ADDRSTRLEN + 2]; /* where listen(NULL) binds, "[v6]" or "v4" */
    pid_t pid; /* the process that opened it (see ofi_lib_ready) */
} ofi_transport;

typedef struct ofi_region {
    slash_region base;
    slash_mem mem;
    struct fid_mr *mr;
    void *desc;
} ofi_region;

typedef struct ofi_listener {
    slash_listener base;
    struct fid_eq *eq;
    struct fid_pep *pep;
    char token[SLASH_TOKEN_MAX + 1];
} ofi_listener;

typedef struct ofi_pending {
    struct ofi_pending *next;
    uint32_t tag, len;
    uint8_t body[SLASH_MSG_MAX];
} ofi_pending;

typedef struct ofi_endpoint {
    slash_endpoint base;
    struct fid_eq *eq;
    struct fid_cq *cq;
    struct fid_ep *ep;
    slash_mem slot_mem; /* OFI_NRECV receive slots, then OFI_NSEND send slots */
    ofi_slot *slots;
    struct fid_mr *slot_mr;
    void *slot_desc;
    struct fi_context2 *wctx; /* nwctx write contexts */
    uint32_t *wfree;          /* stack of free indexes into wctx */
    uint32_t nwctx, nwfree;
    uint64_t posted, completed; /* writes */
    uint64_t arrivals;          /* signaled writes from the peer, completed here */
    uint32_t last_imm;          /* the immediate value of the last of them */
    ofi_pending *head, *tail;   /* received frames not yet taken */
    slash_status dead;          /* sticky failure, SLASH_OK while usable */
    char dead_detail[320];
    char peer[SLASH_ADDR_MAX];
} ofi_endpoint;

typedef struct ofi_remote {
    slash_remote base;
    uint64_t addr, key;
} ofi_remote;

static const slash_transport_ops ofi_ops;

/* True when tp was opened by another process: this one is a fork() child of
 * it (see "fork()" above). */
static bool foreign(const slash_transport *tp)
{
    return ((const ofi_transport *)tp)->pid != getpid();
}

static slash_status foreign_fail(const slash_transport *tp, const char *what)
{
    return slash_fail(SLASH_ESTATE, "%s: this ofi transport was opened by process %d, of which "
                      "this one is a fork() child; open a transport in this process (RDMA state "
                      "is not shared with a child)", what, (int)((const ofi_transport *)tp)->pid);
}

static const char *ferr(ssize_t rc) { return fi_strerror((int)(rc < 0 ? -rc : rc)); }

/* ---- addresses ------------------------------------------------------- */

/* Parses "HOST:PORT" or "[V6HOST]:PORT" into a socket address. */
static slash_status parse_addr(const char *s, bool passive, struct sockaddr_storage *ss,
                               size_t *sslen)
{
    char host[SLASH_ADDR_MAX];
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1] || (size_t)(colon - s) >= sizeof host)
        return slash_fail(SLASH_EINVAL, "bad address \"%s\" (expected HOST:PORT)", s);
    size_t hl = (size_t)(colon - s);
    const char *h = s;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']')
        h++, hl -= 2;
    memcpy(host, h, hl);
    host[hl] = '\0';
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0)
        return slash_fail(SLASH_EINVAL, "bad address \"%s\": %s", s, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sslen = res->ai_addrlen;
    freeaddrinfo(res);
    return SLASH_OK;
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        snprintf(out, cap, "[%s]:%u", host, ntohs(a->sin6_port));
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        snprintf(out, cap, "%s:%u", host, ntohs(a->sin_port));
    }
}

/* A copy of the transport's fi_info for one address: the source of a
 * listener, or the destination of a connection (verbs resolves the route from
 * info->dest_addr when the endpoint is created; tcp takes it in fi_connect). */
static slash_status info_for(ofi_transport *t, const struct sockaddr_storage *ss, size_t sslen,
                             bool is_src, struct fi_info **out)
{
    /* a shallow copy with the address swapped in, deep-copied by the library
     * (so it allocates what it will free: see "fork()" above) */
    struct fi_info tmpl = *t->info;
    tmpl.next = NULL;
    tmpl.src_addr = is_src ? (void *)ss : NULL;
    tmpl.src_addrlen = is_src ? sslen : 0;
    tmpl.dest_addr = is_src ? NULL : (void *)ss;
    tmpl.dest_addrlen = is_src ? 0 : sslen;
    tmpl.addr_format = ss->ss_family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
    struct fi_info *fi = fi_dupinfo(&tmpl);
    if (!fi)
        return slash_fail(SLASH_ENOMEM, "fi_dupinfo failed");
    *out = fi;
    return SLASH_OK;
}

/* ---- transport --------------------------------------------------------- */

static struct fi_info *ofi_hints(const char *provider, const char *domain)
{
    struct fi_info *h = fi_dupinfo(NULL); /* fi_allocinfo(), through the loaded library */
    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE;
    /* we give every operation a fi_context2, and keep receives posted for
     * the signaled writes that consume one (verbs) */
    h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    h->domain_attr->cq_data_size = 4; /* the immediate of a signaled write */
    h->domain_attr->mr_mode = OFI_MR_MODES;
    h->domain_attr->threading = FI_THREAD_SAFE;
    h->tx_attr->msg_order = FI_ORDER_WAW;
    h->rx_attr->msg_order = FI_ORDER_WAW;
    /* the names are copied by the library (fi_dupinfo of a shallow copy
     * pointing at ours), so it allocates what fi_freeinfo frees */
    struct fi_fabric_attr fa = *h->fabric_attr;
    struct fi_domain_attr da = *h->domain_attr;
    struct fi_info tmpl = *h;
    fa.prov_name = (char *)provider;
    const char *dom = domain && *domain ? domain : getenv("SLASH_OFI_DOMAIN");
    if (dom && *dom)
        da.name = (char *)dom;
    tmpl.fabric_attr = &fa;
    tmpl.domain_attr = &da;
    struct fi_info *named = fi_dupinfo(&tmpl);
    fi_freeinfo(h);
    return named;
}

/* Explains why no usable entry exists: unknown provider, or one that lacks
 * what we need. Lists the providers libfabric knows. */
static slash_status explain_no_provider(const char *provider)
{
    struct fi_info *all = NULL;
    char names[320] = "";
    bool known = false;
    if (fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, NULL, &all) == 0) {
        for (struct fi_info *p = all; p; p = p->next) {
            const char *n = p->fabric_attr->prov_name;
            if (!n)
                continue;
            if (strcmp(n, provider) == 0)
                known = true;
            char quoted[80];
            snprintf(quoted, sizeof quoted, "\"%s\"", n);
            if (strstr(names, quoted))
                continue;
            size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", quoted);
        }
        fi_freeinfo(all);
    }
    if (known)
        return slash_fail(SLASH_EPROVIDER,
                          "libfabric provider \"%s\" offers no connected endpoint (FI_EP_MSG) with "
                          "messages and ordered RMA writes (FI_ORDER_WAW) in a supported mr_mode",
                          provider);
    return slash_fail(SLASH_ENOENT, "libfabric provider \"%s\" not found (available: %s)", provider,
                      *names ? names : "none");
}

/* Splits "PROV@WHERE" (the spec after "ofi:"): WHERE is an IP address of a
 * device (the entry serving it is picked, listeners bind to it) or a domain
 * (device) name such as "rxe0" or "mlx5_0". */
typedef struct ofi_place {
    char prov[32];
    char domain[64];                  /* "" = any */
    struct sockaddr_storage ip;       /* ss_family 0 = any */
} ofi_place;

static slash_status parse_place(const char *provider, ofi_place *p)
{
    memset(p, 0, sizeof *p);
    const char *at = strchr(provider, '@');
    size_t pl = at ? (size_t)(at - provider) : strlen(provider);
    if (pl == 0 || pl >= sizeof p->prov)
        return slash_fail(SLASH_EINVAL, "bad provider in \"ofi:%s\" (expected ofi:PROVIDER or "
                                        "ofi:PROVIDER@DEVICE-OR-ADDRESS)", provider);
    memcpy(p->prov, provider, pl);
    if (!at)
        return SLASH_OK;
    const char *w = at + 1;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&p->ip;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&p->ip;
    char host[INET6_ADDRSTRLEN + 2];
    snprintf(host, sizeof host, "%s", w);
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']')
        memmove(host, host + 1, hl - 2), host[hl - 2] = '\0';
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1)
        v4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1)
        v6->sin6_family = AF_INET6;
    else if (*w && strlen(w) < sizeof p->domain && !strpbrk(w, ":@/ "))
        snprintf(p->domain, sizeof p->domain, "%s", w);
    else
        return slash_fail(SLASH_EINVAL, "bad device or address \"%s\" in \"ofi:%s\" (expected a "
                                        "device name such as rxe0 or an IP address)", w, provider);
    return SLASH_OK;
}

/* True when sockaddr a carries the IP of b (ports ignored). */
static bool same_ip(const void *a, size_t alen, const struct sockaddr_storage *b)
{
    const struct sockaddr *sa = a;
    if (!a || alen < sizeof(struct sockaddr_in) || sa->sa_family != b->ss_family)
        return false;
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return alen >= sizeof(struct sockaddr_in6) &&
           memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* The host listen(NULL) binds to: the address given in the spec; else for a
 * provider over the host's TCP stack the loopback (nothing is exposed beyond
 * the host unless asked); else the address of the picked device, since a
 * device-bound provider (verbs: rdma_cm) serves only its devices' addresses,
 * and loopback is none of them. */
static void pick_listen_host(ofi_transport *t, const ofi_place *pl)
{
    const struct sockaddr_storage *ip = pl->ip.ss_family ? &pl->ip : NULL;
    struct sockaddr_storage src;
    if (!ip && t->info->ep_attr->protocol != FI_PROTO_SOCK_TCP && t->info->src_addr &&
        t->info->src_addrlen <= sizeof src) {
        memset(&src, 0, sizeof src);
        memcpy(&src, t->info->src_addr, t->info->src_addrlen);
        if (src.ss_family == AF_INET || src.ss_family == AF_INET6)
            ip = &src;
    }
    if (!ip) {
        snprintf(t->listen_host, sizeof t->listen_host, "127.0.0.1");
        return;
    }
    char h[INET6_ADDRSTRLEN] = "?";
    if (ip->ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ip)->sin6_addr, h, sizeof h);
        snprintf(t->listen_host, sizeof t->listen_host, "[%s]", h);
    } else {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ip)->sin_addr, h, sizeof h);
        snprintf(t->listen_host, sizeof t->listen_host, "%s", h);
    }
}

slash_status slash_ofi_open(const char *spec, const char *provider_spec, slash_transport **out)
{
    *out = NULL;
    slash_status lib = ofi_lib_ready();
    if (lib != SLASH_OK)
        return lib;
    ofi_place place;
    slash_status pst = parse_place(provider_spec, &place);
    if (pst != SLASH_OK)
        return pst;
    const char *provider = place.prov;
    struct fi_info *hints = ofi_hints(provider, place.domain), *list = NULL;
    if (!hints)
        return slash_fail(SLASH_ENOMEM, "fi_allocinfo failed");
    int rc = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
    fi_freeinfo(hints);
    if (rc != 0 && rc != -FI_ENODATA)
        return slash_fail(SLASH_EPROVIDER, "fi_getinfo(provider \"%s\"): %s", provider, ferr(rc));
    struct fi_info *pick = NULL;
    bool prov_ok = false;
    for (struct fi_info *p = list; p && !pick; p = p->next) /* plain "tcp", not "tcp;ofi_rxm" */
        if (p->fabric_attr->prov_name && strcmp(p->fabric_attr->prov_name, provider) == 0 &&
            p->ep_attr->type == FI_EP_MSG) {
            prov_ok = true;
            bool dom_ok = !place.domain[0] || (p->domain_attr->name &&
                                               strcmp(p->domain_attr->name, place.domain) == 0);
            bool ip_ok = !place.ip.ss_family || same_ip(p->src_addr, p->src_addrlen, &place.ip);
            if (dom_ok && ip_ok)
                pick = p;
        }
    if (!pick) {
        fi_freeinfo(list);
        if (prov_ok && !place.domain[0])
            return slash_fail(SLASH_ENOENT, "libfabric provider \"%s\" serves no device with the "
                                            "address in \"%s\" (see 'slash doctor' or fi_info -p %s)",
                              provider, spec, provider);
        if (place.domain[0])
            return slash_fail(SLASH_ENOENT, "libfabric provider \"%s\" has no device \"%s\" (see "
                                            "'slash doctor' or fi_info -p %s)", provider,
                              place.domain, provider);
        return explain_no_provider(provider);
    }
    ofi_transport *t = calloc(1, sizeof *t);
    if (!t) {
        fi_freeinfo(list);
        return slash_fail(SLASH_ENOMEM, "out of memory for a transport");
    }
    t->base.ops = &ofi_ops;
    snprintf(t->base.spec, sizeof t->base.spec, "%s", spec);
    t->info = fi_dupinfo(pick);
    fi_freeinfo(list);
    if (!t->info) {
        free(t);
        return slash_fail(SLASH_ENOMEM, "fi_dupinfo failed");
    }
    t->mr_mode = t->info->domain_attr->mr_mode;
    t->max_waw = t->info->ep_attr->max_order_waw_size;
    t->next_key = 1;
    t->pid = getpid();
    pick_listen_host(t, &place);
    rc = fi_fabric(t->info->fabric_attr, &t->fabric, NULL);
    if (rc != 0) {
        slash_status st = slash_fail(SLASH_EPROVIDER, "fi_fabric(provider \"%s\"): %s", provider,
                                     ferr(rc));
        fi_freeinfo(t->info);
        free(t);
        return st;
    }
    rc = fi_domain(t->fabric, t->info, &t->domain, NULL);
    if (rc != 0) {
        slash_status st = slash_fail(SLASH_EPROVIDER, "fi_domain(provider \"%s\", domain %s): %s",
                                     provider, t->info->domain_attr->name, ferr(rc));
        fi_close(&t->fabric->fid);
        fi_freeinfo(t->info);
        free(t);
        return st;
    }
    *out = &t->base;
    return SLASH_OK;
}

static void ofi_close(slash_transport *tp)
{
    ofi_transport *t = (ofi_transport *)tp;
    if (!foreign(tp)) {
        fi_close(&t->domain->fid);
        fi_close(&t->fabric->fid);
        fi_freeinfo(t->info);
    }
    free(t);
}

/* Registers [addr, addr+len) with the domain for the given access. */
static slash_status mr_register(ofi_transport *t, void *addr, size_t len, uint64_t access,
                                struct fid_mr **mr, void **desc)
{
    uint64_t key = (t->mr_mode & FI_MR_PROV_KEY) ? 0 : __atomic_fetch_add(&t->next_key, 1, __ATOMIC_RELAXED);
    if (t->mr_mode & FI_MR_ALLOCATED) { /* pages must exist before registration */
        long pg = sysconf(_SC_PAGESIZE);
        for (size_t o = 0; o < len; o += (size_t)pg)
            ((volatile char *)addr)[o] = 0;
    }
    int rc = fi_mr_reg(t->domain, addr, len, access, 0, key, 0, mr, NULL);
    if (rc != 0) {
        *mr = NULL;
        return slash_fail(SLASH_EPROVIDER, "fi_mr_reg(%zu bytes): %s", len, ferr(rc));
    }
    *desc = fi_mr_desc(*mr);
    return SLASH_OK;
}

static slash_status ofi_region_alloc(slash_transport *tp, size_t len, slash_region **out)
{
    ofi_transport *t = (ofi_transport *)tp;
    if (foreign(tp))
        return foreign_fail(tp, "region_alloc");
    ofi_region *r = calloc(1, sizeof *r);
    if (!r)
        return slash_fail(SLASH_ENOMEM, "out of memory for a region");
    slash_status st = slash_mem_map(len, false, &r->mem);
    if (st == SLASH_OK)
        st = mr_register(t, r->mem.addr, r->mem.len, FI_WRITE | FI_REMOTE_WRITE, &r->mr, &r->desc);
    if (st != SLASH_OK) {
        slash_mem_unmap(&r->mem);
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

static void ofi_region_free(slash_region *rg)
{
    ofi_region *r = (ofi_region *)rg;
    if (!foreign(rg->tp))
        fi_close(&r->mr->fid);
    slash_mem_unmap(&r->mem);
    free(r);
}

/* ---- endpoint: failure, completions, events ------------------------------ */

/* Records the endpoint's first failure (sticky) and reports it. */
__attribute__((format(printf, 3, 4))) static slash_status ep_fail(ofi_endpoint *e,
                                                                  slash_status st,
                                                                  const char *fmt, ...)
{
    if (e->dead == SLASH_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->dead_detail, sizeof e->dead_detail, fmt, ap);
        va_end(ap);
        e->dead = st;
    }
    return slash_fail(e->dead, "%s", e->dead_detail);
}

static slash_status ep_dead(ofi_endpoint *e) { return slash_fail(e->dead, "%s", e->dead_detail); }

static slash_status post_recv(ofi_endpoint *e, ofi_slot *s)
{
    ssize_t rc = fi_recv(e->ep, &s->frame, sizeof s->frame, e->slot_desc, 0, &s->ctx);
    if (rc != 0)
        return ep_fail(e, SLASH_EPROVIDER, "fi_recv (control receive to %s): %s", e->peer, ferr(rc));
    return SLASH_OK;
}

static slash_status on_frame(ofi_endpoint *e, ofi_slot *s, size_t got)
{
    uint32_t tag = le32toh(s->frame.tag), len = le32toh(s->frame.len);
    if (got < FRAME_HDR || tag == 0 || tag > TAG_LAST || len > SLASH_MSG_MAX ||
        FRAME_HDR + len > got)
        return ep_fail(e, SLASH_EPROTO, "malformed control frame from %s (%zu bytes, tag %u)",
                       e->peer, got, tag);
    ofi_pending *p = malloc(sizeof *p);
    if (!p)
        return ep_fail(e, SLASH_ENOMEM, "out of memory for a control frame");
    p->next = NULL;
    p->tag = tag;
    p->len = len;
    memcpy(p->body, s->frame.body, len);
    if (e->tail)
        e->tail->next = p;
    else
        e->head = p;
    e->tail = p;
    return post_recv(e, s);
}

static slash_status on_completion(ofi_endpoint *e, const struct fi_cq_data_entry *c)
{
    char *ctx = c->op_context;
    char *slots = (char *)e->slots;
    bool in_slots = ctx >= slots && ctx < slots + (OFI_NRECV + OFI_NSEND) * sizeof(ofi_slot);
    if (c->flags & FI_REMOTE_CQ_DATA) {
        /* a signaled write from the peer has completed here: it and every
         * write the peer posted before it are placed. On verbs it consumed a
         * receive (FI_RX_CQ_DATA): post that slot again. */
        e->arrivals++;
        e->last_imm = (uint32_t)c->data;
        if (in_slots && (size_t)(ctx - slots) / sizeof(ofi_slot) < OFI_NRECV)
            return post_recv(e, &e->slots[(size_t)(ctx - slots) / sizeof(ofi_slot)]);
        return SLASH_OK;
    }
    if (in_slots) {
        size_t i = (size_t)(ctx - slots) / sizeof(ofi_slot);
        if (i < OFI_NRECV)
            return on_frame(e, &e->slots[i], c->len);
        e->slots[i].busy = false;
        return SLASH_OK;
    }
    char *w = (char *)e->wctx;
    if (ctx >= w && ctx < w + e->nwctx * sizeof *e->wctx) {
        e->wfree[e->nwfree++] = (uint32_t)((size_t)(ctx - w) / sizeof *e->wctx);
        e->completed++;
        return SLASH_OK;
    }
    return ep_fail(e, SLASH_EPROVIDER, "completion with an unknown context %p", c->op_context);
}

static slash_status cq_error(ofi_endpoint *e)
{
    struct fi_cq_err_entry err;
    memset(&err, 0, sizeof err);
    ssize_t rc = fi_cq_readerr(e->cq, &err, 0);
    if (rc < 0)
        return ep_fail(e, SLASH_EPROVIDER, "fi_cq_readerr: %s", ferr(rc));
    const char *what = (err.flags & FI_RMA)    ? "write to"
                       : (err.flags & FI_RECV) ? "receive from"
                                               : "send to";
    const char *prov = fi_cq_strerror(e->cq, err.prov_errno, err.err_data, NULL, 0);
    return ep_fail(e, SLASH_EPEER, "%s %s failed, peer gone: %s (%s)", what, e->peer,
                   fi_strerror(err.err), prov ? prov : "");
}

/* Reaps completions; on tcp this is also what moves bytes. */
static slash_status poll_cq(ofi_endpoint *e)
{
    struct fi_cq_data_entry ent[16];
    for (int round = 0; round < 8; round++) {
        ssize_t n = fi_cq_read(e->cq, ent, 16);
        if (n == -FI_EAGAIN)
            return SLASH_OK;
        if (n == -FI_EAVAIL)
            return cq_error(e);
        if (n < 0)
            return ep_fail(e, SLASH_EPROVIDER, "fi_cq_read: %s", ferr(n));
        for (ssize_t i = 0; i < n; i++) {
            slash_status st = on_completion(e, &ent[i]);
            if (st != SLASH_OK)
                return st;
        }
        if (n < 16)
            return SLASH_OK;
    }
    return SLASH_OK;
}

static slash_status eq_error(struct fid_eq *eq, slash_status st, const char *what,
                             const char *peer, int *err_out)
{
    struct fi_eq_err_entry err;
    memset(&err, 0, sizeof err);
    ssize_t rc = fi_eq_readerr(eq, &err, 0);
    if (rc < 0)
        return slash_fail(SLASH_EPROVIDER, "%s: fi_eq_readerr: %s", what, ferr(rc));
    if (err_out)
        *err_out = err.err;
    const char *prov = fi_eq_strerror(eq, err.prov_errno, err.err_data, NULL, 0);
    return slash_fail(st, "%s %s: %s (%s)", what, peer, fi_strerror(err.err), prov ? prov : "");
}

/* Checks the connection: FI_SHUTDOWN or an EQ error makes the endpoint dead. */
static slash_status poll_eq(ofi_endpoint *e)
{
    struct fi_eq_cm_entry cm;
    uint32_t event;
    for (;;) {
        ssize_t rc = fi_eq_read(e->eq, &event, &cm, sizeof cm, 0);
        if (rc == -FI_EAGAIN)
            return SLASH_OK;
        if (rc == -FI_EAVAIL) {
            eq_error(e->eq, SLASH_EPEER, "connection to", e->peer, NULL);
            return ep_fail(e, SLASH_EPEER, "%s", slash_last_error());
        }
        if (rc < 0)
            return ep_fail(e, SLASH_EPROVIDER, "fi_eq_read: %s", ferr(rc));
        if (event == FI_SHUTDOWN)
            return ep_fail(e, SLASH_EPEER,
                           "peer %s closed the connection or died (FI_SHUTDOWN)", e->peer);
    }
}

static slash_status ep_progress(ofi_endpoint *e)
{
    if (e->dead != SLASH_OK)
        return ep_dead(e);
    slash_status st = poll_cq(e);
    if (st == SLASH_OK)
        st = poll_eq(e);
    return st;
}

/* One round of a wait on an endpoint: drives progress, checks the deadline
 * (SLASH_ETIMEDOUT naming what waited), backs off. */
static slash_status ep_wait(ofi_endpoint *e, slash_backoff *b, uint64_t deadline, const char *what)
{
    slash_status st = ep_progress(e);
    if (st != SLASH_OK)
        return st;
    if (slash_deadline_passed(deadline))
        return slash_fail(SLASH_ETIMEDOUT, "%s %s: not done before the deadline", what, e->peer);
    slash_backoff_wait(b);
    return SLASH_OK;
}

static bool sends_busy(const ofi_endpoint *e)
{
    for (int i = 0; i < OFI_NSEND; i++)
        if (e->slots[OFI_NRECV + i].busy)
            return true;
    return false;
}

/* Takes the first queued frame whose tag is in mask, or NULL. */
static ofi_pending *take_frame(ofi_endpoint *e, uint32_t mask)
{
    for (ofi_pending **pp = &e->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        ofi_pending *p = *pp;
        if (!(mask & TAG_BIT(p->tag)))
            continue;
        *pp = p->next;
        if (e->tail == p)
            e->tail = prev;
        return p;
    }
    return NULL;
}

/* Waits for a frame with a tag in mask. Frames that arrived before the peer
 * went away are still delivered; after them the failure is reported. The
 * caller frees the frame. */
static slash_status wait_frame(ofi_endpoint *e, uint32_t mask, uint64_t deadline,
                               const char *what, ofi_pending **out)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    for (;;) {
        if ((*out = take_frame(e, mask)))
            return SLASH_OK;
        if (e->dead != SLASH_OK)
            return ep_dead(e);
        slash_status st = poll_cq(e);
        if ((*out = take_frame(e, mask)))
            return SLASH_OK;
        if (st == SLASH_OK)
            st = poll_eq(e);
        if (st != SLASH_OK) {
            poll_cq(e); /* frames that raced with the shutdown event */
            if ((*out = take_frame(e, mask)))
                return SLASH_OK;
            return ep_dead(e);
        }
        if (slash_deadline_passed(deadline))
            return slash_fail(SLASH_ETIMEDOUT, "%s: nothing from %s before the deadline", what,
                              e->peer);
        slash_backoff_wait(&b);
    }
}

static slash_status send_frame(ofi_endpoint *e, uint32_t tag, const void *body, size_t len,
                               uint64_t deadline)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    ofi_slot *s = NULL;
    for (;;) {
        if (e->dead != SLASH_OK)
            return ep_dead(e);
        for (int i = 0; i < OFI_NSEND && !s; i++)
            if (!e->slots[OFI_NRECV + i].busy)
                s = &e->slots[OFI_NRECV + i];
        if (s)
            break;
        slash_status st = ep_wait(e, &b, deadline, "control send to");
        if (st != SLASH_OK)
            return st;
    }
    s->frame.tag = htole32(tag);
    s->frame.len = htole32((uint32_t)len);
    memcpy(s->frame.body, body, len);
    s->busy = true;
    for (;;) {
        ssize_t rc = fi_send(e->ep, &s->frame, FRAME_HDR + len, e->slot_desc, 0, &s->ctx);
        if (rc == 0)
            return SLASH_OK;
        if (rc != -FI_EAGAIN) {
            s->busy = false;
            return ep_fail(e, SLASH_EPEER, "fi_send to %s: %s", e->peer, ferr(rc));
        }
        slash_status st = ep_wait(e, &b, deadline, "fi_send to");
        if (st != SLASH_OK) {
            s->busy = false;
            return st;
        }
    }
}

/* ---- endpoint lifetime --------------------------------------------------- */

static void ofi_endpoint_close(slash_endpoint *ep)
{
    ofi_endpoint *e = (ofi_endpoint *)ep;
    bool mine = !foreign(ep->tp);
    if (mine && e->slots && e->dead == SLASH_OK && sends_busy(e)) { /* let the last frames leave */
        char saved[512]; /* keep the caller's error detail (close runs on failure paths) */
        snprintf(saved, sizeof saved, "%s", slash_last_error());
        slash_backoff b;
        slash_backoff_reset(&b);
        uint64_t deadline = slash_deadline(OFI_CLOSE_LINGER_MS);
        while (sends_busy(e) && ep_wait(e, &b, deadline, "close") == SLASH_OK)
            ;
        slash_fail(SLASH_OK, "%s", saved);
    }
    if (mine && e->ep)
        fi_close(&e->ep->fid);
    if (mine && e->slot_mr)
        fi_close(&e->slot_mr->fid);
    if (mine && e->cq)
        fi_close(&e->cq->fid);
    if (mine && e->eq)
        fi_close(&e->eq->fid);
    slash_mem_unmap(&e->slot_mem);
    while (e->head) {
        ofi_pending *p = e->head;
        e->head = p->next;
        free(p);
    }
    free(e->wfree);
    free(e->wctx);
    free(e);
}

/* Opens an active endpoint from info (bound, enabled, receives posted). */
static slash_status endpoint_open(ofi_transport *t, struct fi_info *info, const char *peer,
                                  ofi_endpoint **out)
{
    *out = NULL;
    ofi_endpoint *e = calloc(1, sizeof *e);
    if (!e)
        return slash_fail(SLASH_ENOMEM, "out of memory for an endpoint");
    e->base.tp = &t->base;
    e->slot_mem.fd = -1;
    snprintf(e->peer, sizeof e->peer, "%s", peer);
    size_t txsz = info->tx_attr->size ? info->tx_attr->size : 256;
    e->nwctx = (uint32_t)(txsz > 2 * OFI_NSEND ? txsz - OFI_NSEND : OFI_NSEND);
    if (e->nwctx > OFI_MAX_WRITES)
        e->nwctx = OFI_MAX_WRITES;
    e->wctx = calloc(e->nwctx, sizeof *e->wctx);
    e->wfree = calloc(e->nwctx, sizeof *e->wfree);
    slash_status st = SLASH_OK;
    int rc;
    if (!e->wctx || !e->wfree) {
        st = slash_fail(SLASH_ENOMEM, "out of memory for write contexts");
        goto fail;
    }
    for (uint32_t i = 0; i < e->nwctx; i++)
        e->wfree[i] = e->nwctx - 1 - i;
    e->nwfree = e->nwctx;

    struct fi_eq_attr eqa = {.size = 16, .wait_obj = FI_WAIT_NONE};
    if ((rc = fi_eq_open(t->fabric, &eqa, &e->eq, NULL)) != 0) {
        st = slash_fail(SLASH_EPROVIDER, "fi_eq_open: %s", ferr(rc));
        goto fail;
    }
    struct fi_cq_attr cqa = {.size = txsz + OFI_NRECV + 64,
                             .format = FI_CQ_FORMAT_DATA,
                             .wait_obj = FI_WAIT_NONE};
    if ((rc = fi_cq_open(t->domain, &cqa, &e->cq, NULL)) != 0) {
        st = slash_fail(SLASH_EPROVIDER, "fi_cq_open: %s", ferr(rc));
        goto fail;
    }
    if ((rc = fi_endpoint(t->domain, info, &e->ep, NULL)) != 0) {
        st = slash_fail(SLASH_EPROVIDER, "fi_endpoint: %s", ferr(rc));
        goto fail;
    }
    if ((rc = fi_ep_bind(e->ep, &e->eq->fid, 0)) != 0 ||
        (rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV)) != 0) {
        st = slash_fail(SLASH_EPROVIDER, "fi_ep_bind: %s", ferr(rc));
        goto fail;
    }
    if ((rc = fi_enable(e->ep)) != 0) {
        st = slash_fail(SLASH_EPROVIDER, "fi_enable: %s", ferr(rc));
        goto fail;
    }
    st = slash_mem_map((OFI_NRECV + OFI_NSEND) * sizeof(ofi_slot), false, &e->slot_mem);
    if (st != SLASH_OK)
        goto fail;
    e->slots = e->slot_mem.addr;
    if (t->mr_mode & FI_MR_LOCAL) {
        st = mr_register(t, e->slot_mem.addr, e->slot_mem.len, FI_SEND | FI_RECV, &e->slot_mr,
                         &e->slot_desc);
        if (st != SLASH_OK)
            goto fail;
    }
    for (int i = 0; i < OFI_NRECV; i++)
        if ((st = post_recv(e, &e->slots[i])) != SLASH_OK)
            goto fail;
    *out = e;
    return SLASH_OK;
fail:
    ofi_endpoint_close(&e->base);
    return st;
}

/* Waits for FI_CONNECTED on a fresh endpoint. */
static slash_status wait_connected(ofi_endpoint *e, uint64_t deadline, const char *what)
{
    slash_backoff b;
    slash_backoff_reset(&b);
    struct fi_eq_cm_entry cm;
    uint32_t event;
    for (;;) {
        ssize_t rc = fi_eq_read(e->eq, &event, &cm, sizeof cm, 0);
        if (rc >= 0 && event == FI_CONNECTED)
            return SLASH_OK;
        if (rc >= 0 && event == FI_SHUTDOWN)
            return slash_fail(SLASH_EPEER, "%s %s: peer closed the connection", what, e->peer);
        if (rc == -FI_EAVAIL) {
            int err = 0;
            slash_status st = eq_error(e->eq, SLASH_EPEER, what, e->peer, &err);
            if (err == FI_ECONNREFUSED)
                return slash_fail(SLASH_EPEER, "%s %s: connection refused (nobody listens there)",
                                  what, e->peer);
            if (err == FI_ETIMEDOUT)
                return slash_fail(SLASH_ETIMEDOUT, "%s %s: %s", what, e->peer, slash_last_error());
            return st;
        }
        if (rc < 0 && rc != -FI_EAGAIN)
            return slash_fail(SLASH_EPROVIDER, "%s %s: fi_eq_read: %s", what, e->peer, ferr(rc));
        if (slash_deadline_passed(deadline))
            return slash_fail(SLASH_ETIMEDOUT, "%s %s: not connected before the deadline", what,
                              e->peer);
        slash_backoff_wait(&b);
    }
}

/* ---- listen / accept / connect ------------------------------------------- */

static void ofi_listener_close(slash_listener *lg)
{
    ofi_listener *l = (ofi_listener *)lg;
    if (l->pep && !foreign(lg->tp))
        fi_close(&l->pep->fid);
    if (l->eq && !foreign(lg->tp))
        fi_close(&l->eq->fid);
    free(l);
}

static slash_status ofi_listen(slash_transport *tp, const char *bind_addr, const char *token,
                               slash_listener **out)
{
    ofi_transport *t = (ofi_transport *)tp;
    if (foreign(tp))
        return foreign_fail(tp, "listen");
    char dflt[sizeof t->listen_host + 4];
    snprintf(dflt, sizeof dflt, "%s:0", t->listen_host);
    const char *where = bind_addr ? bind_addr : dflt;
    struct sockaddr_storage ss;
    size_t sslen = 0;
    slash_status st = parse_addr(where, true, &ss, &sslen);
    if (st != SLASH_OK)
        return st;
    struct fi_info *info = NULL;
    if ((st = info_for(t, &ss, sslen, true, &info)) != SLASH_OK)
        return st;
    ofi_listener *l = calloc(1, sizeof *l);
    if (!l) {
        fi_freeinfo(info);
        return slash_fail(SLASH_ENOMEM, "out of memory for a listener");
    }
    l->base.tp = tp;
    snprintf(l->token, sizeof l->token, "%s", token);
    struct fi_eq_attr eqa = {.size = 64, .wait_obj = FI_WAIT_NONE};
    int rc;
    if ((rc = fi_eq_open(t->fabric, &eqa, &l->eq, NULL)) != 0)
        st = slash_fail(SLASH_EPROVIDER, "listen on %s: fi_eq_open: %s", where, ferr(rc));
    else if ((rc = fi_passive_ep(t->fabric, info, &l->pep, NULL)) != 0)
        st = slash_fail(SLASH_EPROVIDER, "listen on %s: fi_passive_ep: %s", where, ferr(rc));
    else if ((rc = fi_pep_bind(l->pep, &l->eq->fid, 0)) != 0)
        st = slash_fail(SLASH_EPROVIDER, "listen on %s: fi_pep_bind: %s", where, ferr(rc));
    else if ((rc = fi_listen(l->pep)) != 0)
        st = slash_fail(SLASH_EPROVIDER, "listen on %s: fi_listen: %s", where, ferr(rc));
    fi_freeinfo(info);
    if (st == SLASH_OK) {
        size_t len = sizeof ss;
        memset(&ss, 0, sizeof ss);
        if ((rc = fi_getname(&l->pep->fid, &ss, &len)) != 0)
            st = slash_fail(SLASH_EPROVIDER, "listen on %s: fi_getname: %s", where, ferr(rc));
        else
            format_addr(&ss, l->base.addr, sizeof l->base.addr);
    }
    if (st != SLASH_OK) {
        ofi_listener_close(&l->base);
        return st;
    }
    *out = &l->base;
    return SLASH_OK;
}

/* Refuses a connected peer: tells it why, closes (close lets the frame leave). */
static void deny(ofi_endpoint *e)
{
    static const char why[] = "wrong auth token";
    send_frame(e, TAG_AUTH_DENIED, why, sizeof why - 1, slash_deadline(OFI_CLOSE_LINGER_MS));
    ofi_endpoint_close(&e->base);
}

#define OFI_HANDSHAKE_MS 5000

static slash_status ofi_accept(slash_listener *lg, int timeout_ms, slash_endpoint **out)
{
    ofi_listener *l = (ofi_listener *)lg;
    ofi_transport *t = (ofi_transport *)lg->tp;
    if (foreign(lg->tp))
        return foreign_fail(lg->tp, "accept");
    uint64_t deadline = slash_deadline(timeout_ms);
    slash_backoff b;
    slash_backoff_reset(&b);
    struct fi_eq_cm_entry cm;
    uint32_t event;
    for (;;) {
        ssize_t rc = fi_eq_read(l->eq, &event, &cm, sizeof cm, 0);
        if (rc >= 0 && event == FI_CONNREQ)
            break;
        if (rc == -FI_EAVAIL)
            return eq_error(l->eq, SLASH_EPEER, "accept on", l->base.addr, NULL);
        if (rc < 0 && rc != -FI_EAGAIN)
            return slash_fail(SLASH_EPROVIDER, "accept on %s: fi_eq_read: %s", l->base.addr,
                              ferr(rc));
        if (slash_deadline_passed(deadline))
            return slash_fail(SLASH_ETIMEDOUT, "accept on %s: no peer within %d ms", l->base.addr,
                              timeout_ms);
        slash_backoff_wait(&b);
    }
    char peer[SLASH_ADDR_MAX] = "peer";
    if (cm.info->dest_addr && cm.info->dest_addrlen <= sizeof(struct sockaddr_storage)) {
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        memcpy(&ss, cm.info->dest_addr, cm.info->dest_addrlen);
        format_addr(&ss, peer, sizeof peer);
    }
    ofi_endpoint *e;
    slash_status st = endpoint_open(t, cm.info, peer, &e);
    if (st != SLASH_OK) {
        fi_reject(l->pep, cm.info->handle, NULL, 0);
        fi_freeinfo(cm.info);
        return st;
    }
    fi_freeinfo(cm.info);
    int rc = fi_accept(e->ep, NULL, 0);
    if (rc != 0) {
        ofi_endpoint_close(&e->base);
        return slash_fail(SLASH_EPEER, "accept from %s: fi_accept: %s", peer, ferr(rc));
    }
    /* a connector presents its token at once: one that does not within
     * OFI_HANDSHAKE_MS (or hangs up first) is not a peer, and is refused as
     * one with a wrong token is, so the caller may go on accepting */
    uint64_t hs = slash_deadline(OFI_HANDSHAKE_MS);
    hs = hs < deadline ? hs : deadline;
    ofi_pending *f = NULL;
    if ((st = wait_connected(e, hs, "accept from")) == SLASH_OK)
        st = wait_frame(e, TAG_ANY, hs, "accept: waiting for the token", &f);
    if (st != SLASH_OK) {
        ofi_endpoint_close(&e->base);
        if (st == SLASH_ENOMEM)
            return st;
        char why[256];
        snprintf(why, sizeof why, "%s", slash_last_error());
        return slash_fail(SLASH_EAUTH, "accept from %s: the connection did not authenticate "
                          "within %d ms: %s", peer, OFI_HANDSHAKE_MS, why);
    }
    char tok[SLASH_TOKEN_MAX + 1];
    bool ok = f->tag == TAG_AUTH && f->len >= 1 && f->len <= SLASH_TOKEN_MAX &&
              !memchr(f->body, 0, f->len);
    if (ok) {
        memcpy(tok, f->body, f->len);
        tok[f->len] = '\0';
        ok = slash_token_equal(l->token, tok);
    }
    uint32_t tag = f->tag;
    free(f);
    if (!ok) {
        deny(e);
        if (tag != TAG_AUTH)
            return slash_fail(SLASH_EAUTH, "accept from %s: peer sent no auth token (frame tag %u)",
                              peer, tag);
        return slash_fail(SLASH_EAUTH, "accept from %s: peer presented a wrong auth token; "
                                       "connection refused", peer);
    }
    if ((st = send_frame(e, TAG_AUTH_OK, "", 0, deadline)) != SLASH_OK) {
        ofi_endpoint_close(&e->base);
        return st;
    }
    *out = &e->base;
    return SLASH_OK;
}

static slash_status ofi_connect(slash_transport *tp, const char *addr, const char *token,
                                int timeout_ms, slash_endpoint **out)
{
    ofi_transport *t = (ofi_transport *)tp;
    if (foreign(tp))
        return foreign_fail(tp, "connect");
    uint64_t deadline = slash_deadline(timeout_ms);
    struct sockaddr_storage ss;
    size_t sslen = 0;
    slash_status st = parse_addr(addr, false, &ss, &sslen);
    if (st != SLASH_OK)
        return st;
    struct fi_info *info = NULL;
    if ((st = info_for(t, &ss, sslen, false, &info)) != SLASH_OK)
        return st;
    ofi_endpoint *e;
    st = endpoint_open(t, info, addr, &e);
    fi_freeinfo(info);
    if (st != SLASH_OK)
        return st;
    int rc = fi_connect(e->ep, &ss, NULL, 0);
    if (rc != 0) {
        ofi_endpoint_close(&e->base);
        return slash_fail(rc == -FI_ECONNREFUSED ? SLASH_EPEER : SLASH_EPROVIDER,
                          "connect to %s: fi_connect: %s", addr, ferr(rc));
    }
    if ((st = wait_connected(e, deadline, "connect to")) == SLASH_OK &&
        (st = send_frame(e, TAG_AUTH, token, strlen(token), deadline)) == SLASH_OK) {
        ofi_pending *f;
        st = wait_frame(e, TAG_BIT(TAG_AUTH_OK) | TAG_BIT(TAG_AUTH_DENIED), deadline,
                        "connect: waiting for the token check", &f);
        if (st == SLASH_EPEER)
            st = slash_fail(SLASH_EPEER, "connect to %s: peer closed the connection before "
                                         "answering the auth token (%s)", addr, e->dead_detail);
        if (st == SLASH_OK) {
            if (f->tag == TAG_AUTH_DENIED)
                st = slash_fail(SLASH_EAUTH, "connect to %s: the listener refused our auth token",
                                addr);
            free(f);
        }
    }
    if (st != SLASH_OK) {
        ofi_endpoint_close(&e->base);
        return st;
    }
    *out = &e->base;
    return SLASH_OK;
}

/* ---- messages, regions, writes ------------------------------------------- */

static slash_status ofi_send_msg(slash_endpoint *ep, const void *buf, size_t len)
{
    return send_frame((ofi_endpoint *)ep, TAG_USER, buf, len, slash_deadline(OFI_STALL_MS));
}

static slash_status ofi_recv_msg(slash_endpoint *ep, void *buf, size_t cap, size_t *len,
                                 int timeout_ms)
{
    ofi_endpoint *e = (ofi_endpoint *)ep;
    ofi_pending *f;
    slash_status st = wait_frame(e, TAG_BIT(TAG_USER), slash_deadline(timeout_ms), "recv_msg", &f);
    if (st != SLASH_OK)
        return st;
    if (f->len > cap) {
        /* keep it for a retry with a larger buffer */
        f->next = e->head;
        e->head = f;
        if (!e->tail)
            e->tail = f;
        return slash_fail(SLASH_ETOOBIG, "recv_msg: message of %u bytes, buffer holds %zu", f->len,
                          cap);
    }
    memcpy(buf, f->body, f->len);
    *len = f->len;
    free(f);
    return SLASH_OK;
}

static slash_status ofi_expose(slash_endpoint *ep, slash_region *rg)
{
    ofi_endpoint *e = (ofi_endpoint *)ep;
    ofi_transport *t = (ofi_transport *)ep->tp;
    ofi_region *r = (ofi_region *)rg;
    ofi_region_desc d;
    d.addr = htole64((t->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)r->base.addr : 0);
    d.len = htole64((uint64_t)r->base.len);
    d.key = htole64(fi_mr_key(r->mr));
    return send_frame(e, TAG_REGION, &d, sizeof d, slash_deadline(OFI_STALL_MS));
}

static slash_status ofi_attach(slash_endpoint *ep, int timeout_ms, slash_remote **out)
{
    ofi_endpoint *e = (ofi_endpoint *)ep;
    ofi_pending *f;
    slash_status st = wait_frame(e, TAG_BIT(TAG_REGION), slash_deadline(timeout_ms), "attach", &f);
    if (st != SLASH_OK)
        return st;
    ofi_region_desc d;
    bool ok = f->len == sizeof d;
    if (ok)
        memcpy(&d, f->body, sizeof d);
    free(f);
    if (!ok || le64toh(d.len) == 0 || le64toh(d.len) > SIZE_MAX)
        return ep_fail(e, SLASH_EPROTO, "attach: malformed region descriptor from %s", e->peer);
    ofi_remote *rm = calloc(1, sizeof *rm);
    if (!rm)
        return slash_fail(SLASH_ENOMEM, "out of memory for a remote region");
    rm->base.ep = ep;
    rm->base.len = (size_t)le64toh(d.len);
    rm->base.direct = NULL;
    rm->addr = le64toh(d.addr);
    rm->key = le64toh(d.key);
    *out = &rm->base;
    return SLASH_OK;
}

static void ofi_detach(slash_remote *rm) { free(rm); }

/* Posts a write; a signaled one (fi_writedata, the immediate imm) also
 * completes at the peer, which counts it in its arrivals. */
static slash_status post_write(ofi_endpoint *e, const ofi_region *r, size_t src_off,
                               const ofi_remote *rm, size_t dst_off, size_t len, bool signal,
                               uint32_t imm)
{
    if (e->dead != SLASH_OK)
        return ep_dead(e);
    size_t max_waw = ((const ofi_transport *)e->base.tp)->max_waw;
    if (len > max_waw)
        return slash_fail(SLASH_ETOOBIG, "write of %zu bytes: the provider orders writes only up "
                                         "to %zu bytes", len, max_waw);
    slash_status st;
    /* With more than a few writes queued, drive progress now: on tcp the
     * provider moves queued bytes only inside its calls, and reaping only
     * when half the contexts were in use left megabytes idle in its queue
     * (an occasional 3x slower mode in bench_ofi_write). */
    if (e->nwfree < e->nwctx - 4 && (st = poll_cq(e)) != SLASH_OK)
        return st;
    slash_backoff b;
    slash_backoff_reset(&b);
    uint64_t deadline = 0;
    for (;;) {
        ssize_t rc = -FI_EAGAIN;
        if (e->nwfree > 0) {
            struct fi_context2 *ctx = &e->wctx[e->wfree[e->nwfree - 1]];
            void *buf = (char *)r->base.addr + src_off;
            rc = signal ? fi_writedata(e->ep, buf, len, r->desc, imm, 0, rm->addr + dst_off,
                                       rm->key, ctx)
                        : fi_write(e->ep, buf, len, r->desc, 0, rm->addr + dst_off, rm->key, ctx);
            if (rc == 0) {
                e->nwfree--;
                e->posted++;
                return SLASH_OK;
            }
            if (rc != -FI_EAGAIN)
                return ep_fail(e, SLASH_EPEER, "fi_write(%zu bytes) to %s: %s", len, e->peer,
                               ferr(rc));
        }
        if (!deadline)
            deadline = slash_deadline(OFI_STALL_MS);
        if ((st = ep_wait(e, &b, deadline, "write (send queue full) to")) != SLASH_OK)
            return st;
    }
}

static slash_status ofi_write(slash_endpoint *ep, const slash_region *src, size_t src_off,
                              slash_remote *dst, size_t dst_off, size_t len)
{
    return post_write((ofi_endpoint *)ep, (const ofi_region *)src, src_off,
                      (const ofi_remote *)dst, dst_off, len, false, 0);
}

static slash_status ofi_write_signal(slash_endpoint *ep, const slash_region *src, size_t src_off,
                                     slash_remote *dst, size_t dst_off, size_t len, uint32_t imm)
{
    return post_write((ofi_endpoint *)ep, (const ofi_region *)src, src_off,
                      (const ofi_remote *)dst, dst_off, len, true, imm);
}

static slash_status ofi_arrivals(slash_endpoint *ep, uint64_t *count, uint32_t *last)
{
    ofi_endpoint *e = (ofi_endpoint *)ep;
    slash_status st = e->dead == SLASH_OK ? poll_cq(e) : SLASH_OK; /* what came before a failure counts */
    *count = e->arrivals;
    *last = e->last_imm;
    if (st == SLASH_OK)
        st = ep_progress(e);
    return st;
}

static slash_status ofi_progress(slash_endpoint *ep) { return ep_progress((ofi_endpoint *)ep); }

static slash_status ofi_flush(slash_endpoint *ep, int timeout_ms)
{
    ofi_endpoint *e = (ofi_endpoint *)ep;
    uint64_t deadline = slash_deadline(timeout_ms);
    slash_backoff b;
    slash_backoff_reset(&b);
    slash_status st = ep_progress(e);
    while (st == SLASH_OK && e->completed != e->posted)
        st = ep_wait(e, &b, deadline, "flush of all writes to");
    return st;
}

static const slash_transport_ops ofi_ops = {
    .name = "ofi",
    .close = ofi_close,
    .region_alloc = ofi_region_alloc,
    .region_free = ofi_region_free,
    .listen = ofi_listen,
    .accept = ofi_accept,
    .listener_close = ofi_listener_close,
    .connect = ofi_connect,
    .endpoint_close = ofi_endpoint_close,
    .send_msg = ofi_send_msg,
    .recv_msg = ofi_recv_msg,
    .expose = ofi_expose,
    .attach = ofi_attach,
    .detach = ofi_detach,
    .write = ofi_write,
    .write_signal = ofi_write_signal,
    .arrivals = ofi_arrivals,
    .progress = ofi_progress,
    .alive = ofi_progress,
    .flush = ofi_flush,
};

#endif /* SLASH_HAVE_OFI */
