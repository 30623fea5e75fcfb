/* group.h - N executors connected all-to-all by ring channels (Slash §7.2.2).
 *
 * Every executor listens, the listeners' addresses are gathered by whoever
 * starts the group (Spark's allGather, a test, a launcher), and then each
 * executor joins: it connects one producer channel to every other executor
 * and accepts one consumer channel from each, N x (N - 1) channels in all.
 * The first buffer on each channel names the sender's rank, so channels are
 * filed by rank whatever order the connections arrive in.
 *
 * Joining runs one short-lived thread (accepting while the caller connects,
 * so N executors joining at once cannot deadlock); it ends before join
 * returns. The group owns its channels.
 */
#ifndef SLASH_GROUP_H
#define SLASH_GROUP_H

#include <stdint.h>

#include "slash/channel.h"
#include "slash/status.h"
#include "slash/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SLASH_GROUP_MAX 1024

typedef struct slash_group slash_group;

/* Joins the group as `rank` of `n` (1..SLASH_GROUP_MAX). addrs[i] is the
 * listener address of rank i (addrs[rank] is l's own). Every channel this
 * executor consumes gets the geometry cfg. Fails with SLASH_EINVAL for bad
 * arguments, SLASH_ETIMEDOUT when a peer does not show up in time (the
 * detail names it and the last refused connection), SLASH_EAUTH when a peer
 * refuses our token (an inbound connection with a wrong token, or none in
 * time, is refused and counted: slash_group_refused), SLASH_EPROTO when two
 * peers claim one rank. The caller owns the group; l must stay open until
 * join returns and may be closed afterwards. */
slash_status slash_group_join(slash_listener *l, uint32_t rank, uint32_t n,
                              const char *const *addrs, const char *token,
                              const slash_channel_config *cfg, int timeout_ms,
                              slash_group **out);

uint32_t slash_group_rank(const slash_group *g);
uint32_t slash_group_size(const slash_group *g);

/* Connections the join refused and closed (a wrong token or no handshake in
 * time) while it went on accepting its peers; *detail (if given) says why the
 * last one was, owned by g. Cannot fail. */
uint32_t slash_group_refused(const slash_group *g, const char **detail);
/* The producer channel to peer, or NULL for the own rank. */
slash_channel *slash_group_out(slash_group *g, uint32_t peer);
/* The consumer channel from peer, or NULL for the own rank. */
slash_channel *slash_group_in(slash_group *g, uint32_t peer);

/* Closes every channel (producers send end-of-stream first). NULL is fine. */
void slash_group_close(slash_group *g);

#ifdef __cplusplus
}
#endif
#endif
