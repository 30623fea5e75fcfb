/* group.c - forming the all-to-all channel mesh of an executor group.
 *
 * Invariants: after a successful join, out[r] and in[r] are non-NULL for
 * every r != rank and NULL for r == rank; each in[r] really comes from rank r
 * (its first buffer said so, and no rank is claimed twice).
 */
#define _GNU_SOURCE
#include "slash/group.h"

#include "slash/backoff.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_MAGIC 0x47525031u /* "GRP1" */

typedef struct group_hello {
    uint32_t magic;
    uint32_t rank;
    uint32_t n;
    uint32_t pad;
} group_hello;

struct slash_group {
    uint32_t refused;         /* connections refused while joining (see accept_all) */
    char refused_detail[256]; /* why the last one was */
    uint32_t rank, n;
    slash_channel **out;
    slash_channel **in;
};

typedef struct acceptor {
    slash_group *g;
    slash_listener *l;
    const slash_channel_config *cfg;
    int timeout_ms;
    slash_status st;
    char detail[512];
} acceptor;

static slash_status accept_one(acceptor *a)
{
    slash_channel *ch;
    slash_status st = slash_channel_accept(a->l, a->cfg, a->timeout_ms, &ch);
    if (st != SLASH_OK)
        return st;
    group_hello h;
    size_t len = 0;
    st = slash_channel_recv(ch, &h, sizeof h, &len, a->timeout_ms);
    if (st == SLASH_OK && (len != sizeof h || h.magic != GROUP_MAGIC))
        st = slash_fail(SLASH_EPROTO, "group: a peer that is not a group member connected");
    else if (st == SLASH_OK && h.n != a->g->n)
        st = slash_fail(SLASH_EPROTO, "group: peer rank %u believes the group has %u members, not %u",
                        h.rank, h.n, a->g->n);
    else if (st == SLASH_OK && (h.rank >= a->g->n || h.rank == a->g->rank))
        st = slash_fail(SLASH_EPROTO, "group: peer claims rank %u (own rank %u, size %u)", h.rank,
                        a->g->rank, a->g->n);
    else if (st == SLASH_OK && a->g->in[h.rank])
        st = slash_fail(SLASH_EPROTO, "group: two peers claim rank %u", h.rank);
    if (st != SLASH_OK) {
        slash_channel_close(ch);
        return st;
    }
    a->g->in[h.rank] = ch;
    return SLASH_OK;
}

/* Accepts the n - 1 peers within the join's deadline. A connection that fails
 * authentication (a wrong token, no handshake in time: anyone on the host can
 * reach an shm listener) is closed, counted in g->refused, and the listener
 * goes on accepting; the join fails only when a real peer does not come in
 * time or a member breaks the protocol. */
static void *accept_all(void *arg)
{
    acceptor *a = arg;
    a->st = SLASH_OK;
    const int total = a->timeout_ms;
    uint64_t deadline = slash_deadline(total);
    for (uint32_t k = 0; k + 1 < a->g->n && a->st == SLASH_OK;) {
        if (total >= 0) {
            uint64_t now = slash_now_ns();
            a->timeout_ms = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
        }
        a->st = accept_one(a);
        if (a->st == SLASH_OK) {
            k++;
        } else if (a->st == SLASH_EAUTH) {
            a->g->refused++;
            snprintf(a->g->refused_detail, sizeof a->g->refused_detail, "%s", slash_last_error());
            a->st = SLASH_OK;
        } else if (a->st == SLASH_ETIMEDOUT) {
            slash_fail(SLASH_ETIMEDOUT, "group: rank %u heard from only %u of %u peers in time%s%s",
                       a->g->rank, k, a->g->n - 1, a->g->refused ? "; refused: " : "",
                       a->g->refused ? a->g->refused_detail : "");
        }
    }
    a->timeout_ms = total;
    if (a->st != SLASH_OK)
        snprintf(a->detail, sizeof a->detail, "%s", slash_last_error());
    return NULL;
}

slash_status slash_group_join(slash_listener *l, uint32_t rank, uint32_t n,
                              const char *const *addrs, const char *token,
                              const slash_channel_config *cfg, int timeout_ms,
                              slash_group **out)
{
    *out = NULL;
    if (n < 1 || n > SLASH_GROUP_MAX)
        return slash_fail(SLASH_EINVAL, "group size %u outside [1, %d]", n, SLASH_GROUP_MAX);
    if (rank >= n)
        return slash_fail(SLASH_EINVAL, "rank %u outside a group of %u", rank, n);
    for (uint32_t r = 0; r < n; r++)
        if (r != rank && (!addrs || !addrs[r] || !*addrs[r]))
            return slash_fail(SLASH_EINVAL, "no address for rank %u", r);
    slash_status st = slash_channel_config_check(cfg);
    if (st != SLASH_OK)
        return st;
    slash_group *g = calloc(1, sizeof *g);
    if (!g)
        return slash_fail(SLASH_ENOMEM, "group: out of memory");
    g->rank = rank;
    g->n = n;
    g->out = calloc(n, sizeof *g->out);
    g->in = calloc(n, sizeof *g->in);
    if (!g->out || !g->in) {
        slash_group_close(g);
        return slash_fail(SLASH_ENOMEM, "group: out of memory");
    }
    if (n == 1) {
        *out = g;
        return SLASH_OK;
    }
    acceptor a = {.g = g, .l = l, .cfg = cfg, .timeout_ms = timeout_ms};
    pthread_t th;
    if (pthread_create(&th, NULL, accept_all, &a) != 0) {
        slash_group_close(g);
        return slash_fail(SLASH_ESYS, "group: cannot start the accepting thread");
    }
    slash_transport *tp = slash_listener_transport(l);
    group_hello h = {.magic = GROUP_MAGIC, .rank = rank, .n = n};
    for (uint32_t r = 0; r < n && st == SLASH_OK; r++) {
        if (r == rank)
            continue;
        st = slash_channel_connect(tp, addrs[r], token, timeout_ms, &g->out[r]);
        if (st == SLASH_OK)
            st = slash_channel_send(g->out[r], &h, sizeof h, timeout_ms);
        if (st != SLASH_OK)
            st = slash_fail(st, "group: rank %u cannot reach rank %u at \"%s\": %s", rank, r,
                            addrs[r], slash_last_error());
    }
    pthread_join(th, NULL);
    if (st == SLASH_OK && a.st != SLASH_OK)
        st = slash_fail(a.st, "%s", a.detail);
    if (st != SLASH_OK) {
        slash_group_close(g);
        return st;
    }
    *out = g;
    return SLASH_OK;
}

uint32_t slash_group_rank(const slash_group *g) { return g->rank; }

uint32_t slash_group_refused(const slash_group *g, const char **detail)
{
    if (detail)
        *detail = g->refused_detail;
    return g->refused;
}
uint32_t slash_group_size(const slash_group *g) { return g->n; }

slash_channel *slash_group_out(slash_group *g, uint32_t peer)
{
    return peer < g->n ? g->out[peer] : NULL;
}

slash_channel *slash_group_in(slash_group *g, uint32_t peer)
{
    return peer < g->n ? g->in[peer] : NULL;
}

void slash_group_close(slash_group *g)
{
    if (!g)
        return;
    /* Inbound channels first: a consumer that closes returns its credits and
     * drops its end, which is what a peer's outbound close waits for. Closing
     * out[r] first made every executor wait on a peer that was itself waiting
     * in its own close, until the drain timeout (2 s per remote channel).
     * An executor never polls for end-of-stream (its peers' final epochs end
     * the stream), so an outbound close waits only for the data buffers to be
     * released: executors of one process closed one after another by one
     * thread no longer wait out the timeout on a peer that cannot run. */
    for (uint32_t r = 0; g->in && r < g->n; r++)
        slash_channel_close_ended(g->in[r]);
    for (uint32_t r = 0; g->out && r < g->n; r++)
        slash_channel_close_ended(g->out[r]);
    free(g->out);
    free(g->in);
    free(g);
}
