/* exec_moves.c - leadership moves of an executor (exec.h): the versioned
 * leader map (leadermap.h) agreed by the group, and the hand-over of a moved
 * partition's state from its old leader to its new one, while every other
 * partition keeps being merged and fired (a partial pause).
 *
 * Protocol. Rank 0 adopts version v = map.version + 1
 * (slash_exec_move_partitions) only once every executor switched to v - 1;
 * an executor adopts v at its first MAP(v) (exec_moves_on_map) and switches
 * at its next epoch end (exec_moves_switch). MAP(v) on a sender's channel is
 * the marker that separates what it sent under version v - 1 from what it
 * sends under v: every peer sees exactly one MAP(v) per sender, sent at the
 * sender's epoch end right after its routed rows and before its deltas, so a
 * leader knows by which version each incoming delta was routed
 * (exec_moves_leader_for).
 * The old leader of a moved partition stops firing it when it adopts the
 * move (before that, every watermark it had came from old-map senders, so
 * its windows were whole), and hands its state over once it switched and has
 * every sender's MAP(v) (or final epoch): then no old-map update of the
 * partition is still on its way (exec_moves_progress). The new leader
 * merges new-map deltas meanwhile and fires the partition only once the
 * hand-over, with the watermark the old leader emitted it to, has been
 * merged (a CRDT merge: order does not matter).
 *
 * Hand-over: the old leader ships the partition's log in place (no export
 * copy), in fragments of whole records, a slice of them per call
 * (EXEC_HANDOVER_SLICE), serving everything else between slices; the new
 * leader imports each fragment when it arrives (the store's import,
 * exec_store_ops: an aggregate's fragments are appended and linked in bulk
 * into a partition built apart; a join's are reassembled, as a chunk may
 * name a group of another fragment), so a large hand-over is spread over
 * both executors' rounds, and swaps it in at the last fragment, merging
 * what new-map deltas put into the partition meanwhile (a join's sets
 * become the union of both).
 *
 * Invariants: a partition is held (not fired) here while this executor owes
 * or awaits its hand-over, or a newer move of it waits for one (defer); one
 * role (owe or await) per partition at a time; one hand-over in flight per
 * sender, its fragments in order; no fragment of another multi-fragment
 * message (a DELTA) ever comes between them, and none of theirs between a
 * DELTA's (a hand-over is never sent from inside a nested serve: `busy`),
 * while whole messages (EPOCH, MAP, CKPT, ROWS) may; a checkpoint cut never
 * falls inside a hand-over (exec_ckpt.c retries it).
 */
#include "slash/exec.h"

#include "slash/backoff.h" /* slash_now_ns */
#include "slash/leadermap.h"
#include "buf.h"
#include "exec_impl.h"

#include <stdlib.h>
#include <string.h>

slash_status exec_moves_init(slash_exec *ex)
{
    exec_moves *mv = &ex->mv;
    slash_status st = slash_leadermap_init(&mv->map, ex->parts, ex->n);
    if (st != SLASH_OK)
        return st;
    uint32_t P = ex->parts, n = ex->n;
    mv->peer_ver = calloc(n, sizeof *mv->peer_ver);
    mv->await_from = calloc(n, sizeof *mv->await_from);
    mv->hin = calloc(n, sizeof *mv->hin);
    mv->pend_parts = calloc(P, sizeof *mv->pend_parts);
    mv->pend_ranks = calloc(P, sizeof *mv->pend_ranks);
    mv->hold = calloc(P, 1);
    mv->defer = calloc(P, 1);
    mv->awaiting = calloc(P, 1);
    mv->from = calloc(P, sizeof *mv->from);
    mv->owe = malloc(P * sizeof *mv->owe);
    mv->pend_to = malloc(P * sizeof *mv->pend_to);
    mv->hist = malloc(P * sizeof *mv->hist);
    if (mv->hist)
        memcpy(mv->hist, mv->map.leader, P * sizeof *mv->hist);
    mv->hist_n = 1, mv->hist_cap = mv->hist ? P : 0;
    mv->owe_ver = calloc(P, sizeof *mv->owe_ver);
    mv->since_ns = calloc(P, sizeof *mv->since_ns);
    if (!mv->peer_ver || !mv->await_from || !mv->hin || !mv->pend_parts || !mv->pend_ranks ||
        !mv->hold || !mv->defer || !mv->awaiting || !mv->from || !mv->owe || !mv->owe_ver || !mv->since_ns || !mv->pend_to || !mv->hist)
        return slash_fail(SLASH_ENOMEM, "exec: out of memory for the leader map");
    for (uint32_t p = 0; p < P; p++)
        mv->owe[p] = mv->pend_to[p] = -1;
    return SLASH_OK;
}

void exec_moves_free(slash_exec *ex)
{
    exec_moves *mv = &ex->mv;
    slash_leadermap_free(&mv->map);
    free(mv->hist);
    free(mv->pend_to);
    if (mv->hin && ex->ops)
        for (uint32_t r = 0; r < ex->n; r++)
            ex->ops->import_abort(mv->hin[r].im);
    free(mv->hin);
    free(mv->peer_ver);
    free(mv->await_from);
    free(mv->pend_parts);
    free(mv->pend_ranks);
    free(mv->hold);
    free(mv->defer);
    free(mv->awaiting);
    free(mv->from);
    free(mv->owe);
    free(mv->owe_ver);
    free(mv->since_ns);
}

static void hold_set(slash_exec *ex, uint32_t p)
{
    if (!ex->mv.hold[p]) {
        ex->mv.hold[p] = 1;
        ex->mv.nhold++;
        ex->mv.since_ns[p] = slash_now_ns();
    }
}

static void hold_clear(slash_exec *ex, uint32_t p)
{
    if (ex->mv.hold[p] && !ex->mv.awaiting[p] && ex->mv.owe[p] < 0 && !ex->mv.defer[p]) {
        ex->mv.hold[p] = 0;
        ex->mv.nhold--;
    }
}

/* This executor's role in moving p from old to to in version v: the old
 * leader owes the hand-over, the new one awaits it; both hold p meanwhile. */
static void take_role(slash_exec *ex, uint32_t p, uint32_t old, uint32_t to, uint64_t v)
{
    exec_moves *mv = &ex->mv;
    if (old == ex->rank) {
        mv->owe[p] = (int32_t)to, mv->owe_ver[p] = v, mv->nowe++;
        hold_set(ex, p);
    } else if (to == ex->rank) {
        mv->awaiting[p] = 1, mv->from[p] = old, mv->await_from[old]++, mv->nawait++;
        hold_set(ex, p);
    }
}

/* Adopts version map.version + 1 (moves checked by the caller): what this
 * executor gives away stops firing now, what it gets is held until its
 * hand-over. Switching (sending by the new map) waits for the epoch end.
 * A partition whose hand-over of an older version is still in flight here
 * (versions can follow each other faster than hand-overs: rank 0 waits only
 * for every executor to switch) takes its new role at the switch, which
 * waits for that hand-over: an executor owing p to a peer while awaiting p
 * back from it would otherwise wait for the peer, which waits for it. */
static void adopt(slash_exec *ex, const uint32_t *parts, const uint32_t *ranks, uint32_t k)
{
    exec_moves *mv = &ex->mv;
    uint64_t v = mv->map.version + 1;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t p = parts[i], old = slash_leadermap_leader(&mv->map, p);
        mv->pend_parts[i] = p, mv->pend_ranks[i] = ranks[i], mv->pend_to[p] = (int32_t)ranks[i];
        bool involved = old == ex->rank || ranks[i] == ex->rank;
        if (involved && (mv->owe[p] >= 0 || mv->awaiting[p])) {
            mv->defer[p] = 1, mv->ndefer++;
            hold_set(ex, p);
        } else {
            take_role(ex, p, old, ranks[i], v);
        }
    }
    mv->npend = k;
    mv->pending = true;
}

/* Whether the adopted version can be switched to: no partition it moves
 * still has an older hand-over in flight here. */
bool exec_moves_switch_ready(const slash_exec *ex)
{
    const exec_moves *mv = &ex->mv;
    for (uint32_t i = 0; i < mv->npend && mv->ndefer; i++) {
        uint32_t p = mv->pend_parts[i];
        if (mv->defer[p] && (mv->owe[p] >= 0 || mv->awaiting[p]))
            return false;
    }
    return true;
}

/* At an epoch end: follows the adopted version from now on and tells every
 * peer so (the MAP marker), before anything sent by the new map. */
slash_status exec_moves_switch(slash_exec *ex)
{
    exec_moves *mv = &ex->mv;
    uint64_t v = mv->map.version + 1;
    if (!exec_moves_switch_ready(ex))
        return SLASH_OK; /* at a later epoch end: see adopt() */
    for (uint32_t i = 0; i < mv->npend && mv->ndefer; i++) {
        uint32_t p = mv->pend_parts[i];
        if (mv->defer[p]) {
            mv->defer[p] = 0, mv->ndefer--;
            take_role(ex, p, slash_leadermap_leader(&mv->map, p), mv->pend_ranks[i], v);
        }
    }
    slash_status st = slash_leadermap_apply(&mv->map, v, mv->pend_parts, mv->pend_ranks, mv->npend);
    if (st != SLASH_OK)
        return st;
    /* keep the versions some peer may still send by (its marker not yet here) */
    uint64_t oldest = v;
    for (uint32_t r = 0; r < ex->n; r++)
        if (r != ex->rank && !ex->fin[r] && mv->peer_ver[r] < oldest)
            oldest = mv->peer_ver[r];
    size_t P = ex->parts, drop = (size_t)(oldest - mv->hist_base);
    if (drop) {
        memmove(mv->hist, mv->hist + drop * P, (mv->hist_n - drop) * P * sizeof *mv->hist);
        mv->hist_base = oldest, mv->hist_n -= drop;
    }
    st = slash_buf_grow((void **)&mv->hist, &mv->hist_cap, (mv->hist_n + 1) * P, sizeof *mv->hist, P,
                        "exec: the leader map's history");
    if (st != SLASH_OK)
        return st;
    memcpy(mv->hist + mv->hist_n * P, mv->map.leader, P * sizeof *mv->hist);
    mv->hist_n++;
    mv->pending = false;
    for (uint32_t i = 0; i < mv->npend; i++)
        mv->pend_to[mv->pend_parts[i]] = -1;
    size_t bytes = (size_t)mv->npend * 8;
    uint32_t *body = malloc(bytes ? bytes : 8);
    if (!body)
        return slash_fail(SLASH_ENOMEM, "exec: out of memory for a MAP message");
    for (uint32_t i = 0; i < mv->npend; i++)
        body[2 * i] = mv->pend_parts[i], body[2 * i + 1] = mv->pend_ranks[i];
    sync_msg h = {.type = SYNC_MAP, .epoch = v, .offset = mv->npend, .frag = bytes};
    /* after its final epoch an executor sends nothing by any map: peers
     * count it as switched, so it only follows the version itself. A
     * finished peer gets the marker: it still merges what is sent to it */
    for (uint32_t r = 0; r < ex->n && st == SLASH_OK && ex->published != INT64_MAX; r++)
        if (r != ex->rank)
            st = exec_ship(ex, r, &h, body, bytes);
    free(body);
    ex->m.led_partitions = slash_leadermap_count(&mv->map, ex->rank);
    return st;
}

/* The leader of p in version `version` as this executor knows it: its own,
 * the one before (a peer not yet switched), or the adopted one. */
uint32_t exec_moves_leader_for(const slash_exec *ex, uint32_t p, uint64_t version)
{
    const exec_moves *mv = &ex->mv;
    if (version < mv->map.version && version >= mv->hist_base)
        return mv->hist[(size_t)(version - mv->hist_base) * ex->parts + p];
    if (version > mv->map.version && mv->pend_to[p] >= 0)
        return (uint32_t)mv->pend_to[p];
    return slash_leadermap_leader(&mv->map, p);
}

/* MAP(v) from rank r: r follows version v from here on. The first MAP(v)
 * this executor meets adopts v (rank 0 starts a version only after every
 * executor switched to the one before, so v is always map.version + 1). */
slash_status exec_moves_on_map(slash_exec *ex, uint32_t r, const sync_msg *h, const uint8_t *body,
                               size_t len)
{
    exec_moves *mv = &ex->mv;
    uint64_t v = h->epoch;
    /* v: the version this executor adopted, or already switched to */
    if ((v != mv->map.version + 1 && v != mv->map.version) || h->offset > ex->parts ||
        len != h->offset * 8)
        return slash_fail(SLASH_EPROTO, "exec: rank %u sent MAP version %llu (%llu moves, %zu "
                          "bytes) while this executor follows version %llu", r,
                          (unsigned long long)v, (unsigned long long)h->offset, len,
                          (unsigned long long)mv->map.version);
    if (v == mv->map.version + 1 && !mv->pending) {
        uint32_t k = (uint32_t)h->offset;
        uint32_t *parts = malloc((k ? k : 1) * sizeof *parts), *ranks = malloc((k ? k : 1) * sizeof *ranks);
        slash_status st = parts && ranks ? SLASH_OK : slash_fail(SLASH_ENOMEM, "exec: out of memory");
        for (uint32_t i = 0; i < k && st == SLASH_OK; i++)
            memcpy(&parts[i], body + 8 * i, 4), memcpy(&ranks[i], body + 8 * i + 4, 4);
        if (st == SLASH_OK && slash_leadermap_check(&mv->map, parts, ranks, k) != SLASH_OK)
            st = slash_fail(SLASH_EPROTO, "exec: rank %u sent a bad MAP: %s", r, slash_last_error());
        if (st == SLASH_OK)
            adopt(ex, parts, ranks, k);
        free(parts);
        free(ranks);
        if (st != SLASH_OK)
            return st;
    }
    mv->peer_ver[r] = v;
    return SLASH_OK;
}

/* A HANDOVER fragment from old leader r, imported at once (fragments hold
 * whole records), so a large hand-over is spread over serve rounds with no
 * copy assembled (a join's import keeps the fragments until the last: its
 * records may refer across them); the last one puts the partition in place
 * with the watermark r emitted it to, ends the hold and fires what is due. */
slash_status exec_moves_on_handover(slash_exec *ex, uint32_t r, const sync_msg *h,
                                    const uint8_t *body, size_t len)
{
    exec_moves *mv = &ex->mv;
    uint32_t p = h->part;
    if (p >= ex->parts || !mv->awaiting[p] || mv->from[p] != r)
        return slash_fail(SLASH_EPROTO, "exec: rank %u handed over partition %u, which this "
                          "executor does not await from it", r, p);
    exec_handin *in = &mv->hin[r];
    slash_status st;
    if (h->offset == 0 && !in->im) {
        st = ex->ops->import_begin(ex->leader, p, h->watermark, h->total, &in->im);
        if (st != SLASH_OK)
            return st;
        in->len = 0, in->total = h->total, in->part = p;
    }
    if (!in->im || h->offset != in->len || in->part != p || h->total != in->total ||
        h->offset + len > in->total)
        return slash_fail(SLASH_EPROTO, "exec: rank %u sent a hand-over fragment out of order", r);
    st = ex->ops->import_add(ex->leader, in->im, body, len);
    if (st == SLASH_OK && (in->len += len) == in->total)
        st = ex->ops->import_end(ex->leader, in->im);
    if (st != SLASH_OK) {
        ex->ops->import_abort(in->im);
        in->im = NULL;
        return slash_fail(SLASH_EPROTO, "exec: rank %u handed over a bad partition %u: %s", r, p,
                          slash_last_error());
    }
    if (in->len < in->total)
        return SLASH_OK;
    in->im = NULL;
    ex->m.moves_in++;
    ex->m.moved_bytes_in += in->total;
    ex->m.move_pause_ns += slash_now_ns() - mv->since_ns[p];
    mv->awaiting[p] = 0, mv->await_from[r]--, mv->nawait--;
    hold_clear(ex, p);
    if (mv->hold[p] || ex->fired == INT64_MIN || ex->ck.restoring)
        return SLASH_OK;
    /* fire what the group watermark already closed, of this partition only */
    uint8_t *skip = malloc(ex->parts);
    if (!skip)
        return slash_fail(SLASH_ENOMEM, "exec: out of memory");
    memset(skip, 1, ex->parts);
    skip[p] = 0;
    st = exec_emit(ex, ex->fired, skip);
    free(skip);
    return st;
}

#define EXEC_HANDOVER_SLICE 16 /* fragments a call ships of a hand-over at most (4 MiB with
                                * 256 KiB channel buffers) */

/* Whether owed partition p can be handed over now: its old-map updates have
 * all arrived (this executor switched, or sent its final epoch, and every
 * peer sent its MAP marker or finished). */
static bool handover_ready(const slash_exec *ex, uint32_t p)
{
    const exec_moves *mv = &ex->mv;
    if (mv->owe[p] < 0 || mv->awaiting[p] ||
        (mv->map.version < mv->owe_ver[p] && ex->published != INT64_MAX))
        return false;
    for (uint32_t r = 0; r < ex->n; r++)
        if (r != ex->rank && !ex->fin[r] && mv->peer_ver[r] < mv->owe_ver[p])
            return false;
    return true;
}

/* Ships the next fragments of the hand-over in flight (mv->ho_part from
 * mv->ho_off), *budget of them at most (counted down); the last one drops the partition here
 * and ends the hand-over (*done). The fragments go straight from the
 * partition's log, which nothing changes meanwhile: p is held (not
 * emitted), and no peer sends updates of it any more. */
static slash_status handover_slice(slash_exec *ex, uint32_t *budget, bool *done)
{
    exec_moves *mv = &ex->mv;
    uint32_t p = mv->ho_part, to = (uint32_t)mv->owe[p];
    const void *span;
    size_t len;
    int64_t emitted;
    *done = false;
    slash_status st = ex->ops->span(ex->leader, p, &span, &len, &emitted);
    if (st != SLASH_OK)
        return st;
    if (mv->ho_off > len || (mv->ho_off && len != mv->ho_len))
        return slash_fail(SLASH_ESTATE, "exec: partition %u changed while it was handed over", p);
    mv->ho_len = len;
    const uint8_t *buf = span;
    slash_channel_stats cs;
    slash_channel_get_stats(slash_group_out(ex->g, to), &cs);
    size_t room = slash_channel_payload_max(cs.buffer_size) - sizeof(sync_msg);
    do { /* whole records a fragment; an empty partition goes as one empty fragment */
        size_t off = mv->ho_off, frag = ex->ops->span_prefix(buf + off, len - off, room);
        if (frag == 0 && off < len)
            return slash_fail(SLASH_EINVAL, "exec: a record of partition %u does not fit a "
                              "%zu-byte channel buffer", p, (size_t)cs.buffer_size);
        sync_msg h = {.type = SYNC_HANDOVER, .part = p, .epoch = mv->owe_ver[p], .offset = off,
                      .total = len, .watermark = emitted, .frag = frag};
        if ((st = exec_ship(ex, to, &h, buf + off, frag)) != SLASH_OK)
            return st;
        mv->ho_off += frag;
        --*budget;
    } while (mv->ho_off < len && *budget);
    if (mv->ho_off < len)
        return SLASH_OK; /* the rest at a later call */
    if ((st = ex->ops->drop(ex->leader, p)) != SLASH_OK)
        return st;
    ex->m.moves_out++;
    ex->m.moved_bytes_out += len;
    mv->owe[p] = -1, mv->nowe--;
    mv->ho_active = false;
    hold_clear(ex, p);
    *done = true;
    return SLASH_OK;
}

/* Hands over owed partitions whose old-map updates have all arrived, one at
 * a time and at most EXEC_HANDOVER_SLICE fragments a call, so a large hand-over
 * is spread over the calls (the service thread's rounds, pushes, polls)
 * and the executor serves everything else in between; the partition stays
 * owed and held until its last fragment is sent. Fragments of one hand-over
 * are sent in order, whole messages of other kinds may come between them
 * (the receiver reassembles nothing across them: each fragment is whole
 * records). Never from inside a send (a nested serve): a DELTA's fragments
 * must not be interleaved. */
slash_status exec_moves_progress(slash_exec *ex)
{
    exec_moves *mv = &ex->mv;
    if (!mv->nowe || mv->busy)
        return SLASH_OK;
    slash_status st = SLASH_OK;
    uint32_t budget = EXEC_HANDOVER_SLICE;
    mv->busy = true;
    uint32_t p = 0;
    while (st == SLASH_OK && mv->nowe && budget) {
        if (!mv->ho_active) {
            while (p < ex->parts && !handover_ready(ex, p))
                p++;
            if (p == ex->parts)
                break;
            mv->ho_active = true, mv->ho_part = p, mv->ho_off = mv->ho_len = 0;
        }
        bool done;
        st = handover_slice(ex, &budget, &done);
    }
    mv->busy = false;
    return st;
}

slash_status slash_exec_move_partitions(slash_exec *ex, const uint32_t *parts,
                                        const uint32_t *ranks, uint32_t k)
{
    slash_status st = exec_enter(ex);
    if (st != SLASH_OK)
        return st;
    exec_moves *mv = &ex->mv;
    if (ex->rank != 0)
        return exec_leave(ex, slash_fail(SLASH_ESTATE, "move partitions on rank 0, not rank %u", ex->rank));
    if (ex->finished)
        return exec_leave(ex, slash_fail(SLASH_ESTATE, "exec: move after finish"));
    if ((st = slash_leadermap_check(&mv->map, parts, ranks, k)) != SLASH_OK)
        return exec_leave(ex, st);
    /* a finished executor sends no marker: it could not agree to a version */
    for (uint32_t r = 0; r < ex->n; r++)
        if (ex->fin[r] || ex->published == INT64_MAX)
            return exec_leave(ex, slash_fail(SLASH_ESTATE, "executor rank %u has finished: leadership "
                                        "no longer moves", ex->fin[r] ? r : ex->rank));
    bool agreed = !mv->pending;
    for (uint32_t r = 0; r < ex->n && agreed; r++)
        agreed = r == ex->rank || mv->peer_ver[r] >= mv->map.version;
    if (!agreed)
        return exec_leave(ex, slash_fail(SLASH_ESTATE, "a move (leader map version %llu) is still "
                                    "being agreed; retry after the next epochs",
                                    (unsigned long long)(mv->map.version + mv->pending)));
    uint32_t *p2 = malloc((k ? k : 1) * sizeof *p2), *r2 = malloc((k ? k : 1) * sizeof *r2);
    if (!p2 || !r2) {
        free(p2);
        free(r2);
        return exec_leave(ex, slash_fail(SLASH_ENOMEM, "exec: out of memory"));
    }
    uint32_t m = 0;
    for (uint32_t i = 0; i < k; i++)
        if (slash_leadermap_leader(&mv->map, parts[i]) != ranks[i])
            p2[m] = parts[i], r2[m++] = ranks[i];
    slash_channel_stats cs;
    if (ex->g && ex->n > 1) {
        slash_channel_get_stats(slash_group_out(ex->g, ex->rank ? 0 : 1), &cs);
        if (sizeof(sync_msg) + (size_t)m * 8 > slash_channel_payload_max(cs.buffer_size))
            st = slash_fail(SLASH_EINVAL, "%u moves do not fit one %zu-byte channel buffer; move "
                            "fewer at a time", m, (size_t)cs.buffer_size);
    }
    if (st == SLASH_OK && m)
        adopt(ex, p2, r2, m);
    free(p2);
    free(r2);
    return exec_leave(ex, st);
}

void slash_exec_leader_map(slash_exec *ex, uint64_t *version, uint32_t *leaders)
{
    pthread_mutex_lock(&ex->mu);
    *version = ex->mv.map.version;
    memcpy(leaders, ex->mv.map.leader, (size_t)ex->parts * sizeof *leaders);
    pthread_mutex_unlock(&ex->mu);
}

slash_status slash_exec_restore_map(slash_exec *ex, const uint32_t *leaders)
{
    slash_status st = exec_enter(ex);
    if (st != SLASH_OK)
        return st;
    if (ex->pushes || ex->epoch || ex->mv.map.version || ex->mv.pending)
        return exec_leave(ex, slash_fail(SLASH_ESTATE, "restore the leader map before any push or move"));
    st = slash_leadermap_set(&ex->mv.map, 0, leaders);
    if (st == SLASH_OK)
        memcpy(ex->mv.hist, leaders, (size_t)ex->parts * sizeof *leaders);
    if (st == SLASH_OK)
        ex->m.led_partitions = slash_leadermap_count(&ex->mv.map, ex->rank);
    return exec_leave(ex, st);
}

