/* exec_ckpt.c - the checkpoint protocol of an executor (exec.h): aligned
 * checkpoints at an epoch boundary, two all-to-all rounds (CKPT, CKPT_DONE),
 * and restoring an executor from a checkpoint's blobs (checkpoint.h).
 *
 * Why the cut is consistent: an executor sends CKPT(id) after the deltas,
 * rows and EPOCH of the epoch it just ended, on FIFO channels, and sends
 * nothing else until the DONE round is over. So once it holds CKPT(id) from
 * every peer, its leader stores hold every pre-cut update of the partitions
 * it leads, its vector clock holds every peer's pre-cut watermark (equal on
 * every executor), every window closed by it has fired, and its local store
 * is empty (the epoch end shipped and reset it). No post-cut delta can reach
 * a leader before that leader snapshotted, because no executor returns to
 * its caller before it has CKPT_DONE(id) from all.
 *
 * Both kinds of executor take checkpoints: an aggregate's partitions are
 * written by slash_ckpt_write_partition, a join's (both sides' buffered rows
 * per window and key) by slash_ckpt_write_join_partition, and the META blob
 * carries the fingerprint of the kind's config (exec_fingerprint).
 *
 * A cut must not fall inside a partition move's hand-over (exec.c): a
 * partition held by its new leader, or still owed by its old one, has closed
 * windows that have not fired, and the checkpoint would count them as fired.
 * So CKPT_DONE carries whether its sender was in a hand-over at its
 * snapshot; when any was, every executor drops its image and the protocol
 * runs again for the same id at the next safe point (a new attempt: the
 * hand-over goes on between attempts, and only moves make one).
 *
 * Invariants: the protocol's rounds are named by a key, (id << KEY_BITS) |
 * attempt; per peer, CKPT keys strictly increase and CKPT_DONE(key) follows
 * CKPT(key); an attempt completes (or is retried) on every executor or on
 * none: it is given up only when some executor finished without sending
 * CKPT(key), and then no executor can gather CKPT(key) from all.
 */
#include "buf.h"
#include "exec_impl.h"

#include "join_impl.h"
#include "slash/backoff.h"
#include "ssb_impl.h"

#include <stdlib.h>

/* c->pending, c->last and the peer counters hold keys: id and attempt */
#define KEY_BITS 20
#define KEY(id, attempt) (((uint64_t)(id) << KEY_BITS) | (uint64_t)(attempt))
#define KEY_ID(k) ((k) >> KEY_BITS)
#define KEY_ATTEMPT(k) ((k) & ((1u << KEY_BITS) - 1))
#define MAX_CKPT_ID ((UINT64_MAX >> KEY_BITS) - 1)

/* The fingerprint of this executor's store config, for its blobs. */
static uint64_t exec_fingerprint(const slash_exec *ex)
{
    return ex->cfg.kind == SLASH_EXEC_JOIN ? slash_ckpt_join_fingerprint(&ex->cfg.join)
                                           : slash_ckpt_fingerprint(&ex->cfg.state);
}

slash_status exec_ckpt_init(slash_exec *ex)
{
    exec_ckpt *c = &ex->ck;
    c->peer_ckpt = calloc(ex->n, sizeof *c->peer_ckpt);
    c->peer_done = calloc(ex->n, sizeof *c->peer_done);
    c->restore_min = INT64_MAX;
    if (!c->peer_ckpt || !c->peer_done)
        return slash_fail(SLASH_ENOMEM, "exec: out of memory");
    return SLASH_OK;
}

void exec_ckpt_free(slash_exec *ex)
{
    exec_ckpt *c = &ex->ck;
    free(c->peer_ckpt);
    free(c->peer_done);
    for (size_t i = 0; i < c->ndone; i++)
        slash_ckpt_free(c->done[i]);
    free(c->done);
    free(c->restore_seen);
    memset(c, 0, sizeof *c);
}

/* The next checkpoint a peer already asked for, or 0. */
static uint64_t next_pending(const slash_exec *ex)
{
    uint64_t next = 0;
    for (uint32_t r = 0; r < ex->n; r++)
        if (ex->ck.peer_ckpt[r] > ex->ck.last && (!next || ex->ck.peer_ckpt[r] < next))
            next = ex->ck.peer_ckpt[r];
    return next;
}

static bool any_finishing(const slash_exec *ex)
{
    if (ex->finished)
        return true;
    for (uint32_t r = 0; r < ex->n; r++)
        if (ex->fin[r])
            return true;
    return false;
}

slash_status exec_ckpt_on_message(slash_exec *ex, uint32_t r, const sync_msg *h)
{
    exec_ckpt *c = &ex->ck;
    if (h->total > MAX_CKPT_ID || h->part >> KEY_BITS)
        return slash_fail(SLASH_EPROTO, "exec: rank %u sent checkpoint %llu attempt %u", r,
                          (unsigned long long)h->total, h->part);
    uint64_t key = KEY(h->total, h->part);
    if (h->type == SYNC_CKPT) {
        if (key <= c->peer_ckpt[r] || key <= c->last)
            return slash_fail(SLASH_EPROTO, "exec: rank %u sent checkpoint %llu after %llu", r,
                              (unsigned long long)h->total,
                              (unsigned long long)KEY_ID(c->peer_ckpt[r] > c->last ? c->peer_ckpt[r]
                                                                                      : c->last));
        c->peer_ckpt[r] = key;
        if (!c->pending && !ex->finished)
            c->pending = key;
        return SLASH_OK;
    }
    if (key != c->peer_ckpt[r] || key <= c->peer_done[r])
        return slash_fail(SLASH_EPROTO, "exec: rank %u ended checkpoint %llu it did not begin", r,
                          (unsigned long long)h->total);
    c->peer_done[r] = key;
    if (h->offset)
        c->peer_moving = true; /* its snapshot fell in a hand-over: this attempt is dropped */
    return SLASH_OK;
}

/* Sends a CKPT or CKPT_DONE of key to every peer (offset: CKPT_DONE's "my
 * snapshot fell in a hand-over"). */
static slash_status send_all(slash_exec *ex, uint32_t type, uint64_t key, bool moving)
{
    sync_msg h = {.type = type, .part = (uint32_t)KEY_ATTEMPT(key), .epoch = ex->epoch,
                  .total = KEY_ID(key), .offset = moving};
    for (uint32_t r = 0; r < ex->n; r++) {
        if (r == ex->rank)
            continue;
        slash_status st = exec_send(ex, r, &h);
        if (st != SLASH_OK)
            return st;
    }
    return SLASH_OK;
}

/* Serves the channels until every peer's counter (peer_ckpt or peer_done)
 * reached id. *given_up (round 1 only) is set when a peer finished without
 * sending CKPT(id). */
static slash_status wait_all(slash_exec *ex, const uint64_t *have, uint64_t id, bool *given_up)
{
    uint64_t deadline = slash_deadline(exec_timeout_ms(ex));
    slash_backoff b;
    slash_backoff_reset(&b);
    for (;;) {
        uint32_t missing = ex->n;
        bool all = true;
        for (uint32_t r = 0; r < ex->n; r++) {
            if (r == ex->rank || have[r] >= id)
                continue;
            if (given_up && ex->fin[r]) {
                *given_up = true;
                return SLASH_OK;
            }
            all = false;
            missing = r;
        }
        if (all)
            return SLASH_OK;
        bool progressed = false;
        slash_status st = exec_serve(ex, &progressed);
        if (st != SLASH_OK)
            return st;
        if (progressed) {
            slash_backoff_reset(&b);
            continue;
        }
        if (slash_deadline_passed(deadline))
            return slash_fail(SLASH_ETIMEDOUT, "checkpoint %llu: executor rank %u did not reach a "
                              "safe point within %d ms", (unsigned long long)id, missing,
                              exec_timeout_ms(ex));
        slash_backoff_wait(&b);
    }
}

/* Push calls before the cut, counted from the start of the stream when the
 * executor was restored by the same rank of a group of the same size. */
static uint64_t c_pushes(const slash_exec *ex) { return ex->ck.base_pushes + ex->pushes; }

/* The image of this executor: its META and the partitions it leads. */
static slash_status snapshot(slash_exec *ex, uint64_t id, slash_ckpt **out)
{
    slash_ckpt_meta_info *m = calloc(1, sizeof *m);
    if (!m)
        return slash_fail(SLASH_ENOMEM, "checkpoint meta");
    m->id = id;
    m->pushes = c_pushes(ex);
    m->rank = ex->rank;
    m->size = ex->n;
    m->partitions = ex->parts;
    m->published = ex->published;
    m->fired = ex->fired;
    m->max_seen = ex->max_seen;
    m->advanced = ex->advanced;
    m->epoch = ex->epoch;
    m->records_in = ex->m.records_in;
    m->late_records = ex->m.late_records;
    for (uint32_t r = 0; r < ex->n; r++)
        m->vclock[r] = ex->vc.wm[r];
    uint8_t *meta;
    size_t meta_len;
    slash_status st = slash_ckpt_write_meta(m, exec_fingerprint(ex), &meta, &meta_len);
    free(m);
    if (st != SLASH_OK)
        return st;
    uint32_t led = 0; /* led by the map, or still held for a hand-over (leadermap.h) */
    for (uint32_t p = 0; p < ex->parts; p++)
        led += exec_leads(ex, p) || ex->mv.owe[p] >= 0;
    slash_ckpt *ck;
    if ((st = slash_ckpt_new(id, c_pushes(ex), ex->rank, meta, meta_len, led, &ck)) != SLASH_OK)
        return st;
    for (uint32_t p = 0; p < ex->parts; p++) {
        if (!exec_leads(ex, p) && ex->mv.owe[p] < 0)
            continue;
        uint8_t *blob;
        size_t len;
        st = ex->cfg.kind == SLASH_EXEC_JOIN
                 ? slash_ckpt_write_join_partition(ex->leader, p, &blob, &len)
                 : slash_ckpt_write_partition(ex->leader, p, &blob, &len);
        if (st != SLASH_OK) {
            slash_ckpt_free(ck);
            return st;
        }
        slash_ckpt_add_part(ck, p, blob, len);
    }
    *out = ck;
    return SLASH_OK;
}

static slash_status queue_image(exec_ckpt *c, slash_ckpt *ck)
{
    slash_status st = slash_buf_grow((void **)&c->done, &c->cap, c->ndone + 1, sizeof *c->done, 4,
                                     "checkpoint queue");
    if (st != SLASH_OK) {
        slash_ckpt_free(ck);
        return st;
    }
    c->done[c->ndone++] = ck;
    return SLASH_OK;
}

slash_status exec_ckpt_safe_point(slash_exec *ex)
{
    exec_ckpt *c = &ex->ck;
    uint64_t id = c->pending;
    if (!id)
        return SLASH_OK;
    if (any_finishing(ex)) { /* some executor will never send CKPT(id): give up */
        c->last = id, c->pending = 0, c->abandoned++;
        c->pending = next_pending(ex);
        return SLASH_OK;
    }
    slash_status st = exec_end_epoch(ex);
    c->peer_moving = false; /* DONE(id) can only come after our CKPT(id) */
    if (st == SLASH_OK)
        st = send_all(ex, SYNC_CKPT, id, false);
    bool given_up = false;
    if (st == SLASH_OK)
        st = wait_all(ex, c->peer_ckpt, id, &given_up);
    if (st != SLASH_OK)
        return st;
    if (given_up) {
        c->last = id, c->pending = 0, c->abandoned++;
        return SLASH_OK; /* the group is finishing: no later checkpoint can complete */
    }
    bool moving = ex->mv.nhold || ex->mv.nowe || ex->mv.nawait;
    slash_ckpt *ck = NULL;
    if (!moving && (st = snapshot(ex, KEY_ID(id), &ck)) != SLASH_OK)
        return st;
    if ((st = send_all(ex, SYNC_CKPT_DONE, id, moving)) != SLASH_OK ||
        (st = wait_all(ex, c->peer_done, id, NULL)) != SLASH_OK) {
        slash_ckpt_free(ck);
        return st;
    }
    c->last = id;
    if (moving || c->peer_moving) { /* every executor drops this attempt and runs another */
        slash_ckpt_free(ck);
        c->retried++;
        c->pending = KEY_ATTEMPT(id) + 1 < (1u << KEY_BITS) ? id + 1 : next_pending(ex);
        if (!c->pending || KEY_ID(c->pending) == KEY_ID(id))
            return SLASH_OK;
        c->abandoned++; /* attempts exhausted (never in practice): the id is given up */
        return SLASH_OK;
    }
    if ((st = queue_image(c, ck)) != SLASH_OK)
        return st;
    c->pending = next_pending(ex);
    return SLASH_OK;
}

/* ---- public -------------------------------------------------------------------- */

slash_status slash_exec_request_checkpoint(slash_exec *ex, uint64_t id)
{
    slash_status st = exec_enter(ex);
    if (st != SLASH_OK)
        return st;
    exec_ckpt *c = &ex->ck;
    if (!ex->g && ex->n > 1)
        st = slash_fail(SLASH_ESTATE, "checkpoint: a detached executor cannot take part in one");
    else if (ex->finished)
        st = slash_fail(SLASH_ESTATE, "checkpoint %llu: the executor has finished",
                        (unsigned long long)id);
    else if (id == 0 || id > MAX_CKPT_ID)
        st = slash_fail(SLASH_EINVAL, "checkpoint id %llu is outside 1..%llu", (unsigned long long)id,
                        (unsigned long long)MAX_CKPT_ID);
    else if (KEY(id, 0) <= c->last || (c->pending && KEY(id, 0) <= c->pending))
        st = slash_fail(SLASH_EINVAL, "checkpoint ids must increase: %llu after %llu",
                        (unsigned long long)id,
                        (unsigned long long)KEY_ID(c->pending > c->last ? c->pending : c->last));
    else if (c->pending)
        st = slash_fail(SLASH_ESTATE, "checkpoint %llu: checkpoint %llu is still pending",
                        (unsigned long long)id, (unsigned long long)KEY_ID(c->pending));
    else
        c->pending = KEY(id, 0);
    return exec_leave(ex, st);
}

slash_status slash_exec_take_checkpoint(slash_exec *ex, slash_ckpt **out)
{
    *out = NULL;
    pthread_mutex_lock(&ex->mu);
    exec_ckpt *c = &ex->ck;
    if (c->ndone) {
        *out = c->done[0];
        memmove(c->done, c->done + 1, (c->ndone - 1) * sizeof *c->done);
        c->ndone--;
    }
    pthread_mutex_unlock(&ex->mu);
    return SLASH_OK;
}

static slash_status restore_check(slash_exec *ex)
{
    if (ex->pushes || ex->epoch || ex->finished)
        return slash_fail(SLASH_ESTATE, "restore: only right after open, before any push or epoch");
    return SLASH_OK;
}

static slash_status restore_meta(slash_exec *ex, const void *meta, size_t len)
{
    slash_status st = restore_check(ex);
    if (st != SLASH_OK)
        return st;
    const uint8_t *p = meta;
    if (p && len >= SLASH_CKPT_HEADER && memcmp(p, "SLCK", 4) == 0) {
        uint32_t parts = (uint32_t)p[20] | (uint32_t)p[21] << 8 | (uint32_t)p[22] << 16 |
                         (uint32_t)p[23] << 24;
        if (parts != ex->parts)
            return slash_fail(SLASH_EINVAL, "restore: the checkpoint has %u partitions, this "
                              "executor %u (the partition count must stay the same)", parts, ex->parts);
    }
    slash_ckpt_meta_info *m = malloc(sizeof *m);
    if (!m)
        return slash_fail(SLASH_ENOMEM, "restore meta");
    st = slash_ckpt_read_meta(meta, len, exec_fingerprint(ex), m);
    exec_ckpt *c = &ex->ck;
    if (st == SLASH_OK && c->restored_metas &&
        (m->id != c->restore_id || m->size != c->restore_size))
        st = slash_fail(SLASH_EINVAL, "restore: META of checkpoint %llu of %u executors mixed with "
                        "checkpoint %llu of %u", (unsigned long long)m->id, m->size,
                        (unsigned long long)c->restore_id, c->restore_size);
    if (st == SLASH_OK && !c->restore_seen && !(c->restore_seen = calloc(m->size, 1)))
        st = slash_fail(SLASH_ENOMEM, "restore meta");
    if (st == SLASH_OK && c->restore_seen[m->rank])
        st = slash_fail(SLASH_EINVAL, "restore: the META of rank %u was given twice", m->rank);
    if (st != SLASH_OK) {
        free(m);
        return st;
    }
    c->restore_seen[m->rank] = 1;
    c->restoring = true;
    c->restore_id = m->id, c->restore_size = m->size, c->restored_metas++;
    c->last = KEY(m->id, 0); /* later checkpoints must have larger ids */
    if (m->published < c->restore_min)
        c->restore_min = m->published;
    if (m->fired > ex->fired)
        ex->fired = m->fired;
    /* windows closed at the cut were fired */
    if (ex->cfg.kind == SLASH_EXEC_JOIN) {
        slash_join *leader = ex->leader;
        if (m->fired > leader->watermark)
            leader->watermark = m->fired;
    } else {
        slash_ssb *leader = ex->leader;
        if (m->fired > leader->watermark)
            leader->watermark = m->fired;
    }
    if (m->size == ex->n) { /* the same group: each rank resumes where it was */
        slash_vclock_update(&ex->vc, m->rank, m->published);
        if (m->rank == ex->rank) {
            ex->published = m->published;
            ex->max_seen = m->max_seen;
            ex->advanced = m->advanced;
            c->base_pushes = m->pushes;
            ex->m.records_in = m->records_in;
            ex->m.late_records = m->late_records;
        }
    } else { /* another size: every executor starts at the group watermark of the cut */
        /* assigned, not raised: restore_min falls as METAs come in. A peer
         * whose epoch already arrived (the service thread runs from open on;
         * a peer with nothing to read may have sent its final epoch before
         * this restore) keeps the watermark it published: that epoch never
         * comes again, and a peer lowered to the cut's would hold the group
         * watermark there and this executor would never fire its windows. */
        for (uint32_t r = 0; r < ex->n; r++)
            if (r == ex->rank || !ex->peer_epoch[r])
                ex->vc.wm[r] = c->restore_min;
        ex->published = ex->advanced = c->restore_min;
        ex->max_seen = INT64_MIN;
    }
    free(m);
    return SLASH_OK;
}

slash_status slash_exec_restore_meta(slash_exec *ex, const void *meta, size_t len)
{
    slash_status st = exec_enter(ex);
    if (st != SLASH_OK)
        return st;
    return exec_leave(ex, restore_meta(ex, meta, len));
}

static slash_status restore_partition(slash_exec *ex, uint32_t part, const void *data, size_t len)
{
    slash_status st = restore_check(ex);
    if (st != SLASH_OK)
        return st;
    if (part >= ex->parts)
        return slash_fail(SLASH_EINVAL, "restore: partition %u of %u", part, ex->parts);
    if (!exec_leads(ex, part))
        return slash_fail(SLASH_EINVAL, "restore: partition %u is led by rank %u, not %u", part,
                          slash_leadermap_leader(&ex->mv.map, part), ex->rank);
    return ex->cfg.kind == SLASH_EXEC_JOIN ? slash_ckpt_read_join_partition(ex->leader, part, data, len)
                                           : slash_ckpt_read_partition(ex->leader, part, data, len);
}

slash_status slash_exec_restore_partition(slash_exec *ex, uint32_t partition, const void *data,
                                          size_t len)
{
    slash_status st = exec_enter(ex);
    if (st != SLASH_OK)
        return st;
    return exec_leave(ex, restore_partition(ex, partition, data, len));
}
