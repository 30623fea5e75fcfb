/* exec.c - a Slash executor: local eager state, epoch deltas shipped to
 * partition leaders, lazy merging, and firing by vector clock (see exec.h).
 *
 * Wire format on the group's channels, one message per buffer: a 48-byte
 * sync_msg header, then for DELTA a fragment of one partition's delta. A
 * sender's messages arrive in order (channels are FIFO); per sender the
 * leader checks that epochs are consecutive and that fragments of a delta
 * arrive contiguously, so no update is applied twice, out of order or with a
 * gap. Deltas of epoch e precede EPOCH(e) from the same sender, so when a
 * leader learns watermark w from a sender it already holds every update that
 * sender made below w.
 *
 * Invariants: published watermarks only grow; a record older than the
 * executor's published watermark is never applied; a leader never emits a
 * window ending after the minimum of the vector clock (P1). A standby
 * (slash_exec_set_standby) publishes the minimum its followed ranks
 * published instead of its input's: still only growing, never "finished".
 *
 * Leadership: partition p is led by the leader map's rank (leadermap.h);
 * moving it (the MAP marker and the hand-over) is exec_moves.c's protocol.
 *
 * Rows: the repartition baseline, and routing of records whose local
 * aggregation does not pay, send records as rows to their leaders
 * (exec_repartition.c).
 *
 * Failure: an executor that fails sends ABORT with its reason to every peer
 * whose ring has room before it closes, so the others name the root cause
 * (the rank that died first) rather than the executor that noticed it.
 *
 * Threads: a service thread, started with the executor, serves the incoming
 * channels whenever the caller is not inside the executor (a caller waiting
 * on its source must not stall its peers' epoch ends). One mutex guards the
 * whole executor; the caller's calls take it, and serve the channels
 * themselves while they hold it; the service thread gives way while a
 * caller waits for it. An error met by the service thread sticks
 * and is returned by the caller's next call.
 */
#define _GNU_SOURCE
#include "slash/exec.h"

#include "slash/backoff.h"
#include "slash/leadermap.h"
#include "buf.h"
#include "exec_impl.h"
#include "exec_test.h"
#include "ssb_impl.h" /* the key hash, so repartitioning spreads keys like the store */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int timeout_of(const slash_exec *ex)
{
    return ex->cfg.timeout_ms < 0 ? 120000 : ex->cfg.timeout_ms;
}

/* ---- results queue --------------------------------------------------------- */

static slash_status queue_push(slash_exec *ex, void *r)
{
    if (ex->qlen == ex->qcap) {
        size_t nc = ex->qcap ? ex->qcap * 2 : 16;
        void **nq = malloc(nc * sizeof *nq);
        if (!nq)
            return slash_fail(SLASH_ENOMEM, "exec: out of memory for results");
        for (size_t i = 0; i < ex->qlen; i++)
            nq[i] = ex->q[(ex->qhead + i) % ex->qcap];
        free(ex->q);
        ex->q = nq, ex->qcap = nc, ex->qhead = 0;
    }
    ex->q[(ex->qhead + ex->qlen++) % ex->qcap] = r;
    return SLASH_OK;
}

static void *take(slash_exec *ex)
{
    void *out = NULL;
    pthread_mutex_lock(&ex->mu);
    if (ex->qlen) {
        out = ex->q[ex->qhead];
        ex->qhead = (ex->qhead + 1) % ex->qcap;
        ex->qlen--;
    }
    pthread_mutex_unlock(&ex->mu);
    return out;
}

void slash_exec_take(slash_exec *ex, slash_ssb_result **out)
{
    *out = ex->cfg.kind == SLASH_EXEC_AGGREGATE ? take(ex) : NULL;
}

void slash_exec_take_join(slash_exec *ex, slash_join_result **out)
{
    *out = ex->cfg.kind == SLASH_EXEC_JOIN ? take(ex) : NULL;
}

/* ---- firing ---------------------------------------------------------------- */

/* Emits the windows closed at w of every partition not held (skip: NULL,
 * or per partition 1 to leave it out) into the results queue. */
static slash_status emit_into_queue(slash_exec *ex, int64_t w, const uint8_t *skip)
{
    void *r = NULL;
    size_t rows = 0;
    slash_status st = ex->ops->emit(ex->leader, w, skip, &r, &rows);
    if (r && rows) {
        ex->m.rows_emitted += rows;
        st = queue_push(ex, r);
        if (st != SLASH_OK)
            ex->ops->result_free(r);
        return st;
    }
    ex->ops->result_free(r);
    return SLASH_OK;
}

static slash_status fire(slash_exec *ex)
{
    int64_t w = slash_vclock_min(&ex->vc);
    if (w == INT64_MIN || w <= ex->fired || ex->ck.restoring)
        return SLASH_OK;
    slash_status st = emit_into_queue(ex, w, ex->mv.nhold ? ex->mv.hold : NULL);
    if (st == SLASH_OK)
        ex->fired = w;
    return st;
}

/* ---- receiving ------------------------------------------------------------- */

static slash_status merge_timed(slash_exec *ex, const void *addr, size_t len)
{
    uint64_t t0 = slash_now_ns();
    slash_status st = ex->ops->merge_delta(ex->leader, addr, len);
    ex->m.merge_ns += slash_now_ns() - t0;
    ex->m.deltas_merged++;
    return st;
}

static slash_status handle(slash_exec *ex, uint32_t r, const uint8_t *buf, size_t len)
{
    sync_msg h;
    if (len < sizeof h)
        return slash_fail(SLASH_EPROTO, "exec: short message (%zu bytes) from rank %u", len, r);
    memcpy(&h, buf, sizeof h);
    if (h.type == SYNC_ABORT) {
        size_t n = len - sizeof h < h.frag ? len - sizeof h : h.frag;
        return slash_fail(SLASH_EPEER, "executor rank %u failed: %.*s", r, (int)n,
                          (const char *)buf + sizeof h);
    }
    if (h.type == SYNC_CKPT || h.type == SYNC_CKPT_DONE)
        return exec_ckpt_on_message(ex, r, &h);
    if (h.type == SYNC_MAP || h.type == SYNC_HANDOVER) {
        if (h.frag != len - sizeof h)
            return slash_fail(SLASH_EPROTO, "exec: rank %u sent a truncated %s message", r,
                              h.type == SYNC_MAP ? "MAP" : "HANDOVER");
        return h.type == SYNC_MAP ? exec_moves_on_map(ex, r, &h, buf + sizeof h, h.frag)
                                  : exec_moves_on_handover(ex, r, &h, buf + sizeof h, h.frag);
    }
    if (ex->fin[r])
        return slash_fail(SLASH_EPROTO, "exec: rank %u sent a message after its final epoch", r);
    if (h.epoch != ex->peer_epoch[r] + 1)
        return slash_fail(SLASH_EPROTO, "exec: rank %u sent epoch %llu after %llu", r,
                          (unsigned long long)h.epoch, (unsigned long long)ex->peer_epoch[r]);
    if (h.type == SYNC_EPOCH) {
        ex->peer_epoch[r] = h.epoch;
        if (ex->asm_[r].len != ex->asm_[r].total)
            return slash_fail(SLASH_EPROTO, "exec: rank %u ended epoch %llu inside a delta", r,
                              (unsigned long long)h.epoch);
        slash_vclock_update(&ex->vc, r, h.watermark);
        if (h.watermark == INT64_MAX && !ex->fin[r]) {
            ex->fin[r] = true;
            ex->nfin++;
        }
        return fire(ex);
    }
    if (h.type == SYNC_ROWS) {
        if (h.frag != len - sizeof h)
            return slash_fail(SLASH_EPROTO, "exec: rank %u sent a truncated record message", r);
        ex->m.delta_bytes_received += h.frag;
        return exec_apply_rows(ex, r, buf + sizeof h, h.frag, h.offset, h.part);
    }
    if (h.type != SYNC_DELTA)
        return slash_fail(SLASH_EPROTO, "exec: unknown message type %u from rank %u", h.type, r);
    if (h.part >= ex->parts || exec_moves_leader_for(ex, h.part, ex->mv.peer_ver[r]) != ex->rank)
        return slash_fail(SLASH_EPROTO, "exec: rank %u sent partition %u, which rank %u does not lead",
                          r, h.part, ex->rank);
    assembly *a = &ex->asm_[r];
    if (h.offset == 0) {
        if (a->len != a->total)
            return slash_fail(SLASH_EPROTO, "exec: rank %u started a delta inside another", r);
        a->len = 0, a->total = h.total, a->part = h.part, a->epoch = h.epoch;
    }
    if (h.offset != a->len || h.part != a->part || h.epoch != a->epoch ||
        h.frag != len - sizeof h || h.offset + h.frag > a->total)
        return slash_fail(SLASH_EPROTO, "exec: rank %u sent a delta fragment out of order", r);
    if (a->len + h.frag > a->cap) { /* grow with what arrived, not with what the header claims */
        static const char what[] = "exec: a delta's fragments";
        size_t cap;
        slash_status st = slash_buf_next_cap(a->cap, a->len + h.frag, h.frag, 1, what, &cap);
        if (st != SLASH_OK)
            return st;
        cap = cap < a->total ? cap : a->total; /* >= len + frag, checked above */
        if ((st = slash_buf_resize((void **)&a->buf, cap, 1, what)) != SLASH_OK)
            return st;
        a->cap = cap;
    }
    if (h.frag) /* an empty fragment may meet a buffer not yet allocated */
        memcpy(a->buf + a->len, buf + sizeof h, h.frag);
    a->len += h.frag;
    ex->m.delta_bytes_received += h.frag;
    if (a->len < a->total)
        return SLASH_OK;
    slash_status st = merge_timed(ex, a->buf, a->total);
    if (st == SLASH_EPROTO || st == SLASH_EINVAL) /* a bad delta: say whose */
        return slash_fail(SLASH_EPROTO, "exec: rank %u sent a bad delta for partition %u: %s", r,
                          a->part, slash_last_error());
    return st;
}

/* Names the other peers already gone, for an error about rank r: the rank
 * that died first may not be the one whose channel reported first. */
static const char *also_gone(slash_exec *ex, uint32_t r, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = 0;
    for (uint32_t k = 0; k < ex->n && used + 32 < cap; k++) {
        if (k == ex->rank || k == r || ex->fin[k])
            continue;
        slash_endpoint *ep = slash_channel_endpoint(slash_group_in(ex->g, k));
        if (ep && slash_endpoint_alive(ep) == SLASH_EPEER)
            used += (size_t)snprintf(out + used, cap - used, "%s rank %u", used ? "," : "; gone too:", k);
    }
    return out;
}

#define EXEC_HANDOVER_SERVE 16 /* hand-over fragments a round imports from a peer at most (4 MiB
                                * with 256 KiB buffers): bounds what a caller's call waits for
                                * while a large partition comes in (`slash bench elastic`) */

/* Drains what the incoming channels hold right now (never sends), but at
 * most EXEC_HANDOVER_SERVE hand-over fragments of a peer: the rest wait in
 * its ring for the next round. */
static slash_status serve(slash_exec *ex, bool *progressed)
{
    for (uint32_t k = 0; k < ex->n; k++) {
        uint32_t r = (ex->rr + k) % ex->n;
        /* a finished peer may still owe this executor a hand-over */
        if (r == ex->rank || (ex->fin[r] && !ex->mv.await_from[r]))
            continue;
        slash_channel *ch = slash_group_in(ex->g, r);
        uint32_t fragments = 0;
        for (int i = 0; i < 64 && (!ex->fin[r] || ex->mv.await_from[r]) &&
                        fragments < EXEC_HANDOVER_SERVE; i++) {
            const void *buf;
            size_t len;
            uint64_t seq;
            slash_status st = slash_channel_poll(ch, 0, &buf, &len, &seq);
            if (st == SLASH_ETIMEDOUT)
                break;
            char gone[256];
            if (st == SLASH_EOF)
                return slash_fail(SLASH_EPEER, "executor rank %u closed its channel before finishing%s",
                                  r, also_gone(ex, r, gone, sizeof gone));
            if (st == SLASH_EPEER) {
                char why[256];
                snprintf(why, sizeof why, "%s", slash_last_error());
                return slash_fail(SLASH_EPEER, "executor rank %u disconnected (%s)%s", r, why,
                                  also_gone(ex, r, gone, sizeof gone));
            }
            if (st != SLASH_OK)
                return st;
            uint32_t type = 0;
            if (len >= sizeof(sync_msg))
                memcpy(&type, buf, sizeof type);
            fragments += type == SYNC_HANDOVER;
            st = handle(ex, r, buf, len);
            slash_status st2 = slash_channel_release(ch);
            if (st != SLASH_OK)
                return st;
            if (st2 != SLASH_OK && st2 != SLASH_EPEER)
                return st2;
            if (progressed)
                *progressed = true;
        }
    }
    ex->rr++;
    return SLASH_OK;
}

/* ---- sending ---------------------------------------------------------------- */

/* Sends one message to rank r; while r's ring is full, keeps serving the
 * incoming channels (so two executors sending to each other both progress). */
static slash_status ship(slash_exec *ex, uint32_t r, const sync_msg *h, const void *data,
                         size_t len)
{
    slash_channel *ch = slash_group_out(ex->g, r);
    uint64_t deadline = slash_deadline(timeout_of(ex));
    slash_backoff b;
    slash_backoff_reset(&b);
    for (;;) {
        void *slot;
        size_t cap;
        slash_status st = slash_channel_reserve(ch, 0, &slot, &cap);
        if (st == SLASH_OK) {
            memcpy(slot, h, sizeof *h);
            if (len)
                memcpy((uint8_t *)slot + sizeof *h, data, len);
            return slash_channel_commit(ch, sizeof *h + len);
        }
        if (st == SLASH_EPEER)
            return slash_fail(SLASH_EPEER, "executor rank %u disconnected (%s)", r,
                              slash_last_error());
        if (st != SLASH_ETIMEDOUT)
            return st;
        bool progressed = false;
        st = serve(ex, &progressed);
        if (st != SLASH_OK)
            return st;
        if (progressed) {
            slash_backoff_reset(&b);
            continue;
        }
        if (slash_deadline_passed(deadline))
            return slash_fail(SLASH_ETIMEDOUT, "executor rank %u took no data for %d ms", r,
                              timeout_of(ex));
        slash_backoff_wait(&b);
    }
}

static slash_status ship_delta(slash_exec *ex, uint32_t r, uint32_t part, const uint8_t *addr,
                               size_t len)
{
    slash_channel_stats cs;
    slash_channel_get_stats(slash_group_out(ex->g, r), &cs);
    size_t room = slash_channel_payload_max(cs.buffer_size) - sizeof(sync_msg);
    for (size_t off = 0; off < len; off += room) {
        size_t frag = len - off < room ? len - off : room;
        sync_msg h = {.type = SYNC_DELTA, .part = part, .epoch = ex->epoch + 1, .offset = off,
                      .total = len, .frag = frag};
        slash_status st = ship(ex, r, &h, addr + off, frag);
        if (st != SLASH_OK)
            return st;
        ex->m.delta_bytes_sent += frag;
    }
    return SLASH_OK;
}

/* ---- epochs ------------------------------------------------------------------ */

/* A standby's watermark: the minimum its followed peers published (it reads
 * nothing, so any watermark is a sound promise; following the lowest active
 * one never holds the group back and never runs ahead of a record an active
 * rank may still hand it at a re-deal). Capped below INT64_MAX, which on the
 * wire means "finished": a standby finishes only by slash_exec_finish. */
static int64_t standby_watermark(const slash_exec *ex)
{
    int64_t w = INT64_MAX;
    bool any = false;
    for (uint32_t r = 0; r < ex->n; r++)
        if (ex->follow[r]) {
            any = true;
            w = ex->vc.wm[r] < w ? ex->vc.wm[r] : w;
        }
    if (!any)
        return ex->published;
    w = w == INT64_MAX ? INT64_MAX - 1 : w;
    return w > ex->published ? w : ex->published;
}

static int64_t current_watermark(const slash_exec *ex)
{
    if (ex->follow)
        return standby_watermark(ex);
    int64_t w = INT64_MIN;
    /* SLASH_LATENESS_BOUNDED: only the source moves the watermark (advance) */
    if (ex->max_seen != INT64_MIN && ex->cfg.lateness_ms != SLASH_LATENESS_BOUNDED)
        w = ex->max_seen < INT64_MIN + ex->cfg.lateness_ms ? INT64_MIN
                                                           : ex->max_seen - ex->cfg.lateness_ms;
    if (ex->advanced > w)
        w = ex->advanced;
    return w > ex->published ? w : ex->published;
}

static slash_status publish_epoch(slash_exec *ex, int64_t wm, uint64_t t0);
/* the move protocol (exec_moves.c), by the names the epoch loop uses */
static inline slash_status switch_map(slash_exec *ex) { return exec_moves_switch(ex); }
static inline slash_status move_progress(slash_exec *ex) { return exec_moves_progress(ex); }

#define EXEC_ROUTE_PROBE 8 /* routed epochs before the local store measures again */
#define EXEC_MEASURE_ROWS 65536 /* a measuring epoch ends after this many local records */

/* At an epoch's end, before sealing: picks where the next epoch folds the
 * records of the partitions this executor leads (slash_exec_own). AUTO goes
 * by this epoch's aggregation in the local store: fewer than 3 records per
 * live (window, key) means the merge would redo most upserts, so own records
 * go straight to the leader store; fewer than 1.5 means a local partial
 * hardly reduces anything, so the others' records also go straight to their
 * leaders, as rows (as the repartition mode sends them). While routing
 * nothing reaches the local store, so every EXEC_ROUTE_PROBE epochs one
 * epoch folds locally again to measure. */
static void choose_own_path(slash_exec *ex)
{
    if (ex->n == 1 || ex->cfg.own_rows != SLASH_OWN_AUTO)
        return;
    if (ex->routing) {
        if (++ex->routed_epochs >= EXEC_ROUTE_PROBE)
            ex->routing = ex->direct = false, ex->routed_epochs = 0, ex->measuring = true;
        return;
    }
    uint64_t groups; /* this epoch's live (window, key) partials in the local store */
    if (ex->cfg.kind == SLASH_EXEC_JOIN) {
        slash_join_stats s;
        slash_join_get_stats(ex->local, &s);
        groups = s.groups;
    } else {
        slash_ssb_stats s;
        slash_ssb_get_stats(ex->local, &s);
        groups = s.records;
    }
    ex->local_groups += groups;
    if (ex->local_rows < 1024) /* too few to tell yet: keep the path, keep counting */
        return;
    ex->direct = ex->local_groups * 3 > ex->local_rows;
    ex->routing = ex->direct && ex->local_groups * 3 > ex->local_rows * 2;
    ex->routed_epochs = 0;
    ex->measuring = false;
    ex->local_rows = ex->local_groups = 0;
}

static slash_status end_epoch(slash_exec *ex, bool final)
{
    uint64_t t0 = slash_now_ns();
    int64_t wm = final ? INT64_MAX : current_watermark(ex);
    if (exec_repartitioning(ex)) {
        /* records went out as they came; only the watermark is left to send */
        slash_status st = exec_flush_all_rows(ex);
        if (st == SLASH_OK && ex->mv.pending)
            st = switch_map(ex);
        if (st != SLASH_OK)
            return st;
        return publish_epoch(ex, wm, t0);
    }
    slash_status st = exec_flush_all_rows(ex); /* records routed this epoch go first */
    if (st == SLASH_OK && ex->mv.pending) /* then the marker, then new-map deltas */
        st = switch_map(ex);
    if (st != SLASH_OK)
        return st;
    ex->m.epochs_routed += ex->routing;
    choose_own_path(ex);
    st = ex->ops->begin_epoch(ex->local);
    for (uint32_t p = 0; p < ex->parts && st == SLASH_OK; p++) {
        const void *addr;
        size_t len;
        st = ex->ops->delta(ex->local, p, &addr, &len);
        if (st != SLASH_OK || len == 0)
            continue;
        uint32_t lead = slash_leadermap_leader(&ex->mv.map, p);
        st = lead == ex->rank ? merge_timed(ex, addr, len) : ship_delta(ex, lead, p, addr, len);
    }
    if (st == SLASH_OK)
        st = ex->ops->reset_delta(ex->local);
    if (st != SLASH_OK)
        return st;
    return publish_epoch(ex, wm, t0);
}

/* Tells every peer that this executor's epoch ended at watermark wm. */
static slash_status publish_epoch(slash_exec *ex, int64_t wm, uint64_t t0)
{
    slash_status st = SLASH_OK;
    ex->epoch++;
    sync_msg h = {.type = SYNC_EPOCH, .epoch = ex->epoch, .watermark = wm};
    for (uint32_t r = 0; r < ex->n && st == SLASH_OK; r++)
        if (r != ex->rank)
            st = ship(ex, r, &h, NULL, 0);
    if (st != SLASH_OK)
        return st;
    ex->published = wm;
    ex->ck.restoring = false;
    slash_vclock_update(&ex->vc, ex->rank, wm);
    ex->bytes_since = 0;
    ex->epoch_start_ns = slash_now_ns();
    ex->m.epochs++;
    ex->m.sync_ns += ex->epoch_start_ns - t0;
    slash_status st2 = fire(ex);
    return st2 == SLASH_OK ? move_progress(ex) : st2;
}

/* True when a window can close: the watermark passed a window end that the
 * published watermark had not. */
static bool window_can_close(const slash_exec *ex)
{
    int64_t w = current_watermark(ex);
    if (w == INT64_MIN || w <= ex->published)
        return false;
    if (ex->published == INT64_MIN)
        return true;
    const slash_window *win = ex->cfg.kind == SLASH_EXEC_JOIN ? &ex->cfg.join.window
                                                               : &ex->cfg.state.window;
    if (win->kind == SLASH_WINDOW_SESSION)
        return (slash_i128)w - ex->published >= win->size;
    slash_i128 k_pub = slash_floor_div128((slash_i128)ex->published - win->size, win->slide);
    slash_i128 k_now = slash_floor_div128((slash_i128)w - win->size, win->slide);
    return k_now > k_pub;
}

/* Why an epoch ends now: its byte or time budget with something to publish,
 * a measuring epoch that has enough rows, a window that can close, or an
 * adopted leader-map version this executor can switch to (no older hand-over
 * of a partition it moves still in flight here, exec_moves_switch_ready): the
 * switch, and with it the MAP marker every peer's agreement and every
 * hand-over wait for, happens only at an epoch end, and an executor whose
 * source is idle (it only polls) would otherwise hold the move until records
 * arrive. Ending an epoch is safe at any point of the caller's thread (it is
 * what slash_exec_end_epoch and a checkpoint's safe point do); an idle one
 * ships no deltas, only its marker and watermark. */
static bool epoch_due(const slash_exec *ex)
{
    if (ex->mv.pending && exec_moves_switch_ready(ex))
        return true;
    if (ex->cfg.epoch_bytes && ex->bytes_since >= ex->cfg.epoch_bytes)
        return true;
    if (ex->measuring && ex->local_rows >= EXEC_MEASURE_ROWS)
        return true; /* enough to choose the path: do not fold more locally than that */
    if (ex->cfg.epoch_ms && slash_now_ns() - ex->epoch_start_ns >= (uint64_t)ex->cfg.epoch_ms * 1000000ull)
        return ex->bytes_since > 0 || current_watermark(ex) > ex->published;
    return window_can_close(ex);
}

/* ---- service thread and locking ------------------------------------------------ */

static void *service_main(void *arg)
{
    slash_exec *ex = arg;
    uint32_t idle = 0;
    while (!atomic_load_explicit(&ex->stop, memory_order_acquire)) {
        bool progressed = false;
        if (atomic_load_explicit(&ex->callers, memory_order_relaxed)) {
            /* a caller waits for the lock: let it in (a mutex is not fair,
             * and rounds that import a large hand-over follow each other
             * without a sleep: the caller's push or poll waited for all of
             * them in `slash bench elastic`); it serves the channels too */
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        pthread_mutex_lock(&ex->mu);
        if (ex->sticky == SLASH_OK && !ex->finished) {
            slash_status st = serve(ex, &progressed);
            if (st == SLASH_OK)
                st = move_progress(ex);
            if (st != SLASH_OK) {
                ex->sticky = st;
                snprintf(ex->sticky_detail, sizeof ex->sticky_detail, "%s", slash_last_error());
            }
        }
        pthread_mutex_unlock(&ex->mu);
        idle = progressed ? 0 : idle + 1;
        /* 20 us while busy, growing to 1 ms while idle */
        long us = progressed ? 0 : (idle < 6 ? 20L << idle : 1000);
        if (us > 1000)
            us = 1000;
        if (us) {
            struct timespec ts = {0, us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* Takes the executor for a caller's call; fails with the sticky error. */
static slash_status enter(slash_exec *ex)
{
    atomic_fetch_add_explicit(&ex->callers, 1, memory_order_relaxed);
    pthread_mutex_lock(&ex->mu);
    atomic_fetch_sub_explicit(&ex->callers, 1, memory_order_relaxed);
    if (ex->sticky != SLASH_OK) {
        slash_status st = ex->sticky;
        pthread_mutex_unlock(&ex->mu);
        return slash_fail(st, "%s", ex->sticky_detail);
    }
    return SLASH_OK;
}

static slash_status leave(slash_exec *ex, slash_status st)
{
    if (st != SLASH_OK && st != SLASH_EINVAL && st != SLASH_ESTATE && ex->sticky == SLASH_OK) {
        ex->sticky = st; /* a peer or protocol failure ends the executor */
        snprintf(ex->sticky_detail, sizeof ex->sticky_detail, "%s", slash_last_error());
    }
    pthread_mutex_unlock(&ex->mu);
    return st;
}

/* ---- public ------------------------------------------------------------------- */

/* Opens an executor of rank `rank` in a group of n; g is the group (its size
 * and rank are used then), or NULL for a detached executor (exec_test.h). */
static slash_status exec_open(slash_group *g, uint32_t rank, uint32_t n,
                              const slash_exec_config *cfg, slash_exec **out)
{
    *out = NULL;
    if (g) {
        n = slash_group_size(g);
        rank = slash_group_rank(g);
    }
    uint32_t parts = cfg->kind == SLASH_EXEC_JOIN ? cfg->join.partitions : cfg->state.partitions;
    if (parts < n) {
        slash_group_close(g);
        return slash_fail(SLASH_EINVAL, "partitions (%u) must be at least the number of executors (%u)",
                          parts, n);
    }
    if (cfg->own_rows < SLASH_OWN_AUTO || cfg->own_rows > SLASH_OWN_LEADER) {
        slash_group_close(g);
        return slash_fail(SLASH_EINVAL, "own_rows must be AUTO, LOCAL or LEADER, got %d",
                          (int)cfg->own_rows);
    }
    if (cfg->lateness_ms < 0) {
        slash_group_close(g);
        return slash_fail(SLASH_EINVAL, "lateness must be >= 0 ms, got %lld",
                          (long long)cfg->lateness_ms);
    }
    slash_exec *ex = calloc(1, sizeof *ex);
    if (!ex) {
        slash_group_close(g);
        return slash_fail(SLASH_ENOMEM, "exec: out of memory");
    }
    ex->g = g;
    ex->rank = rank;
    ex->n = n;
    ex->parts = parts;
    ex->ops = cfg->kind == SLASH_EXEC_JOIN ? &exec_store_join : &exec_store_aggregate;
    ex->cfg = *cfg;
    ex->max_seen = ex->published = ex->advanced = ex->fired = INT64_MIN;
    ex->direct = n > 1 && cfg->own_rows == SLASH_OWN_LEADER;
    ex->measuring = n > 1 && cfg->own_rows == SLASH_OWN_AUTO && cfg->mode == SLASH_EXEC_SLASH;
    ex->epoch_start_ns = slash_now_ns();
    pthread_mutex_init(&ex->mu, NULL);
    slash_status st = ex->ops->open(cfg, &ex->local);
    if (st == SLASH_OK)
        st = ex->ops->open(cfg, &ex->leader);
    if (st == SLASH_OK)
        st = slash_vclock_init(&ex->vc, n);
    if (st == SLASH_OK) {
        ex->peer_epoch = calloc(n, sizeof *ex->peer_epoch);
        ex->fin = calloc(n, sizeof *ex->fin);
        ex->asm_ = calloc(n, sizeof *ex->asm_);
        ex->out_rows = calloc(n, sizeof *ex->out_rows);
        if (!ex->peer_epoch || !ex->fin || !ex->asm_ || !ex->out_rows)
            st = slash_fail(SLASH_ENOMEM, "exec: out of memory");
    }
    if (st == SLASH_OK)
        st = exec_ckpt_init(ex);
    if (st == SLASH_OK)
        st = exec_moves_init(ex);
    for (uint32_t r = 0; r < n && st == SLASH_OK; r++) { /* row buffers: repartition, or routing */
        slash_channel *ch = g ? slash_group_out(g, r) : NULL;
        if (!ch)
            continue;
        slash_channel_stats cs;
        slash_channel_get_stats(ch, &cs);
        ex->out_rows[r].cap = slash_channel_payload_max(cs.buffer_size) - sizeof(sync_msg);
        if (ex->out_rows[r].cap < 8 + 1 + EXEC_KEY_MAX + 8 * EXEC_MAX_COLS ||
            !(ex->out_rows[r].buf = malloc(ex->out_rows[r].cap)))
            st = slash_fail(SLASH_EINVAL, "exec: channel buffers too small for repartitioned records");
    }
    if (st != SLASH_OK) {
        slash_exec_close(ex);
        return st;
    }
    ex->m.rank = ex->rank;
    ex->m.size = n;
    ex->m.partitions = ex->parts;
    ex->m.led_partitions = slash_leadermap_count(&ex->mv.map, ex->rank);
    if (g && n > 1) {
        if (pthread_create(&ex->service, NULL, service_main, ex) != 0) {
            slash_exec_close(ex);
            return slash_fail(SLASH_ESYS, "exec: cannot start the service thread");
        }
        ex->service_started = true;
    }
    *out = ex;
    return SLASH_OK;
}

slash_status slash_exec_open(slash_group *g, const slash_exec_config *cfg, slash_exec **out)
{
    return exec_open(g, 0, 0, cfg, out);
}

slash_status slash_exec_open_detached(uint32_t rank, uint32_t n, const slash_exec_config *cfg,
                                      slash_exec **out)
{
    *out = NULL;
    if (n == 0 || rank >= n)
        return slash_fail(SLASH_EINVAL, "exec: rank %u outside a group of %u", rank, n);
    return exec_open(NULL, rank, n, cfg, out);
}

slash_status slash_exec_handle_message(slash_exec *ex, uint32_t from, const void *buf, size_t len)
{
    if (from >= ex->n || from == ex->rank)
        return slash_fail(SLASH_EINVAL, "exec: no peer rank %u to receive from", from);
    if (ex->fin[from])
        return slash_fail(SLASH_ESTATE, "exec: rank %u already finished", from);
    return handle(ex, from, buf, len);
}

/* Records kept out of a batch (the on-time ones, or the own ones), copied
 * into columns of their own. */
typedef struct compacted {
    int64_t *times, *keys, *offs;
    uint8_t *data;
    uint64_t *vals[EXEC_MAX_COLS];
} compacted;

static void compacted_free(compacted *c)
{
    free(c->times);
    free(c->keys);
    free(c->offs);
    free(c->data);
    for (uint32_t j = 0; j < EXEC_MAX_COLS; j++)
        free(c->vals[j]);
}

/* Copies the records with skip[i] == 0 (keep of them): times and keys as in
 * kv, and the nvals 8-byte value columns (NULL columns stay NULL). */
static slash_status compact(const slash_ssb_batch *kv, slash_key_type kt, const void *const *values,
                            uint32_t nvals, const uint8_t *skip, size_t keep, compacted *c)
{
    memset(c, 0, sizeof *c);
    size_t rows = keep ? keep : 1;
    bool ok = (c->times = malloc(rows * sizeof *c->times)) != NULL;
    if (kt == SLASH_KEY_INT64) {
        ok = ok && (c->keys = malloc(rows * sizeof *c->keys));
    } else {
        size_t total = 0;
        for (size_t i = 0; i < kv->n; i++)
            if (!skip[i])
                total += key_bytes_at(kv, i);
        ok = ok && (c->offs = malloc((keep + 1) * sizeof *c->offs)) && (c->data = malloc(total ? total : 1));
    }
    for (uint32_t j = 0; j < nvals && ok; j++)
        if (values[j])
            ok = (c->vals[j] = malloc(rows * sizeof(uint64_t))) != NULL;
    if (!ok) {
        compacted_free(c);
        return slash_fail(SLASH_ENOMEM, "exec: out of memory filtering records");
    }
    size_t k = 0, kd = 0;
    if (c->offs)
        c->offs[0] = 0;
    for (size_t i = 0; i < kv->n; i++) {
        if (skip[i])
            continue;
        c->times[k] = kv->times[i];
        if (c->keys) {
            c->keys[k] = kv->keys[i];
        } else {
            size_t kl = key_bytes_at(kv, i);
            if (kl) /* all-empty keys may come with no key data at all */
                memcpy(c->data + kd, kv->key_data + key_start_at(kv, i), kl);
            kd += kl;
            c->offs[k + 1] = (int64_t)kd;
        }
        for (uint32_t j = 0; j < nvals; j++)
            if (c->vals[j])
                memcpy(&c->vals[j][k], (const uint8_t *)values[j] + i * 8, 8);
        k++;
    }
    return SLASH_OK;
}

/* Applies to an aggregate store the records of b whose skip[i] == 0. */
static slash_status update_subset(slash_exec *ex, void *store, const slash_ssb_batch *b,
                                  const uint8_t *skip, size_t keep)
{
    const slash_ssb_config *cfg = &ex->cfg.state;
    compacted c;
    slash_status st = compact(b, cfg->key_type, b->values, cfg->naggs, skip, keep, &c);
    if (st != SLASH_OK)
        return st;
    slash_ssb_batch nb = {.n = keep, .times = c.times, .keys = c.keys, .key_offsets = c.offs,
                          .key_offsets_64 = 1, .key_data = c.data, .ones = b->ones,
                          .hash_raw = b->hash_raw, .raw_f64 = b->raw_f64};
    for (uint32_t j = 0; j < cfg->naggs; j++)
        nb.values[j] = c.vals[j];
    st = slash_ssb_update(store, &nb);
    compacted_free(&c);
    return st;
}

/* The key and time columns of a join batch, seen as an aggregate batch. */
static slash_ssb_batch key_view(const slash_join_batch *b)
{
    slash_ssb_batch kv = {.n = b->n, .times = b->times, .keys = b->keys, .key_offsets = b->key_offsets,
                          .key_offsets_64 = b->key_offsets_64, .key_data = b->key_data};
    return kv;
}

/* Applies to the local join store the records of b whose skip[i] == 0. */
static slash_status join_subset(slash_exec *ex, void *store, const slash_join_batch *b,
                                const uint8_t *skip,
                                size_t keep)
{
    slash_ssb_batch kv = key_view(b);
    uint32_t ncols = b->side == SLASH_JOIN_RIGHT ? ex->cfg.join.ncols[1] : ex->cfg.join.ncols[0];
    compacted c;
    slash_status st = compact(&kv, ex->cfg.join.key_type, b->columns, ncols, skip, keep, &c);
    if (st != SLASH_OK)
        return st;
    slash_join_batch nb = {.side = b->side, .n = keep, .times = c.times, .keys = c.keys,
                           .key_offsets = c.offs, .key_offsets_64 = 1, .key_data = c.data};
    for (uint32_t j = 0; j < ncols; j++)
        nb.columns[j] = c.vals[j];
    st = slash_join_update(store, &nb);
    compacted_free(&c);
    return st;
}

/* The late scan's common case (no late mask wanted): selected, late and
 * the latest on-time event time, with masks instead of branches (a random
 * selection mispredicts) so that it vectorises. Baseline x86-64 has no
 * 64-bit vector compare, so on x86-64 GCC also builds an AVX2 clone, picked
 * at load time where the CPU has it. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
static void scan_counts(const int64_t *times, const uint8_t *skip, size_t n, int64_t pub,
                        size_t *ns, size_t *nl, int64_t *mx)
{
    size_t o = 0, l = 0;
    int64_t m = INT64_MIN;
    if (skip) {
        for (size_t i = 0; i < n; i++) {
            int64_t t = times[i];
            uint64_t out = (uint64_t)(skip[i] != 0);
            uint64_t is_late = (out ^ 1) & (uint64_t)(t < pub);
            uint64_t drop = (uint64_t)0 - (out | is_late); /* all ones: not in the max */
            int64_t v = (int64_t)(((uint64_t)t & ~drop) | ((uint64_t)INT64_MIN & drop));
            o += out;
            l += is_late;
            m = v > m ? v : m;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            int64_t t = times[i];
            uint64_t is_late = (uint64_t)(t < pub);
            int64_t v = is_late ? INT64_MIN : t;
            l += is_late;
            m = v > m ? v : m;
        }
    }
    *ns = o, *nl = l, *mx = m;
}

/* Marks the selected records older than the published watermark (late[i] =
 * 1 when late is given), counts them into *nl, the rows not selected into
 * *ns, and finds the newest on-time time. */
static void scan_late(const slash_exec *ex, const slash_ssb_batch *kv, uint8_t *late, size_t *nl,
                      size_t *ns, int64_t *mx)
{
    /* locals, not kv-> and ex-> fields: a store to late (uint8_t, which may
     * alias anything) would make the compiler reload them every row */
    const size_t n = kv->n;
    const int64_t *times = kv->times;
    const uint8_t *skip = kv->skip;
    const int64_t pub = ex->published;
    size_t l = 0, o = 0;
    int64_t m = INT64_MIN;
    if (!late) {
        scan_counts(times, skip, n, pub, &o, &l, &m);
    } else {
        for (size_t i = 0; i < n; i++) {
            int64_t t = times[i];
            int out = skip ? skip[i] != 0 : 0;
            int is_late = !out & (t < pub);
            o += (size_t)out;
            l += (size_t)is_late;
            late[i] = (uint8_t)is_late;
            t = (out | is_late) ? INT64_MIN : t;
            m = t > m ? t : m;
        }
    }
    *nl = l, *ns = o, *mx = m;
}

/* A skip mask of the late and the unselected records: late itself when
 * every row is selected, else a new one (freed by the caller when it differs
 * from late). */
static uint8_t *late_mask(const slash_exec *ex, const slash_ssb_batch *kv, uint8_t *late)
{
    if (late && !kv->skip)
        return late;
    uint8_t *mask = calloc(kv->n ? kv->n : 1, 1);
    if (mask)
        for (size_t i = 0; i < kv->n; i++)
            mask[i] = (kv->skip && kv->skip[i]) || kv->times[i] < ex->published;
    return mask;
}

/* Counts a pushed batch, then serves the channels and ends an epoch if due. */
static slash_status account(slash_exec *ex, size_t n, size_t nl, int64_t mx, uint64_t bytes)
{
    if (mx > ex->max_seen)
        ex->max_seen = mx;
    ex->m.records_in += n - nl;
    ex->m.late_records += nl;
    ex->m.bytes_in += bytes;
    ex->bytes_since += bytes;
    slash_status st = serve(ex, NULL);
    if (st == SLASH_OK && epoch_due(ex))
        st = end_epoch(ex, false);
    if (st == SLASH_OK && ex->mv.nowe)
        st = move_progress(ex);
    return st;
}

static slash_status push_check(slash_exec *ex, slash_exec_kind kind, size_t n, const int64_t *times)
{
    if (ex->cfg.kind != kind)
        return slash_fail(SLASH_EINVAL, "exec: this executor computes %s; push %s",
                          ex->cfg.kind == SLASH_EXEC_JOIN ? "a join" : "aggregates",
                          ex->cfg.kind == SLASH_EXEC_JOIN ? "join sides" : "aggregate batches");
    if (ex->finished)
        return slash_fail(SLASH_ESTATE, "exec: push after finish");
    if (n && !times)
        return slash_fail(SLASH_EINVAL, "exec: batch has no event-time column");
    return SLASH_OK;
}




/* The two kinds of input batch, seen alike: its key and time columns, its
 * value columns and side, and how a store takes all or some of its records. */
typedef struct batch_kind {
    slash_exec_kind kind;
    slash_ssb_batch (*keys)(const void *b);
    const void *const *(*values)(const void *b);
    uint32_t (*side)(const void *b);
    slash_status (*whole)(void *store, const void *b);
    slash_status (*subset)(slash_exec *ex, void *store, const void *b, const uint8_t *skip,
                           size_t keep);
} batch_kind;

static slash_ssb_batch agg_keys(const void *b) { return *(const slash_ssb_batch *)b; }
static const void *const *agg_values(const void *b) { return ((const slash_ssb_batch *)b)->values; }
static uint32_t agg_side(const void *b) { (void)b; return 0; }
static slash_status agg_whole(void *store, const void *b) { return slash_ssb_update(store, b); }
static slash_status agg_subset(slash_exec *ex, void *store, const void *b, const uint8_t *skip,
                               size_t keep)
{
    return update_subset(ex, store, b, skip, keep);
}

static slash_ssb_batch join_keys(const void *b) { return key_view(b); }
static const void *const *join_values(const void *b) { return ((const slash_join_batch *)b)->columns; }
static uint32_t join_side(const void *b) { return ((const slash_join_batch *)b)->side == SLASH_JOIN_RIGHT; }
static slash_status join_whole(void *store, const void *b) { return slash_join_update(store, b); }
static slash_status join_some(slash_exec *ex, void *store, const void *b, const uint8_t *skip,
                              size_t keep)
{
    return join_subset(ex, store, b, skip, keep);
}

static const batch_kind AGG_BATCH = {SLASH_EXEC_AGGREGATE, agg_keys, agg_values, agg_side,
                                     agg_whole, agg_subset};
static const batch_kind JOIN_BATCH = {SLASH_EXEC_JOIN, join_keys, join_values, join_side,
                                      join_whole, join_some};

/* Repartition mode, and slash mode while routing: sends every on-time record
 * to its owner; applies the own ones to the leader store. */
static slash_status route(slash_exec *ex, const batch_kind *k, const void *b)
{
    slash_ssb_batch kv = k->keys(b);
    uint8_t *skip = malloc(kv.n ? kv.n : 1);
    if (!skip)
        return slash_fail(SLASH_ENOMEM, "exec: out of memory");
    size_t keep = 0;
    slash_status st = exec_route_rows(ex, &kv, k->values(b), k->side(b), skip, &keep);
    if (st == SLASH_OK && keep)
        st = keep == kv.n ? k->whole(ex->leader, b) : k->subset(ex, ex->leader, b, skip, keep);
    if (st == SLASH_OK && !exec_repartitioning(ex))
        ex->m.own_rows_direct += keep;
    free(skip);
    if (st == SLASH_OK)
        st = exec_flush_all_rows(ex);
    return st;
}

/* Input bytes of a batch: times, keys and the value columns it carries. */
/* Input bytes of the `rows` selected records of a batch (byte-string keys:
 * their share of the key data). */
static uint64_t batch_bytes(const slash_exec *ex, const slash_ssb_batch *kv, uint32_t side,
                            size_t rows)
{
    bool present[EXEC_MAX_COLS];
    uint32_t n = exec_row_columns(ex, side, present);
    size_t width = 8 + (exec_key_type(ex) == SLASH_KEY_INT64 ? 8 : 0);
    for (uint32_t j = 0; j < n; j++)
        width += present[j] ? 8 : 0;
    uint64_t bytes = (uint64_t)rows * width;
    if (exec_key_type(ex) == SLASH_KEY_BYTES && kv->n) {
        uint64_t keys = (uint64_t)(key_start_at(kv, kv->n) - key_start_at(kv, 0));
        bytes += rows == kv->n ? keys : (uint64_t)((double)keys * (double)rows / (double)kv->n);
    }
    return bytes;
}

/* Slash mode: the selected on-time rows of b whose partitions
 * this executor leads go straight into the leader store, the others into
 * the local store (shipped at the epoch's end). Folding own rows locally
 * first would cost a second upsert per (window, key) when the epoch's delta
 * is merged, which at high key cardinality is a second upsert per record. */
static slash_status apply_split(slash_exec *ex, const batch_kind *k, const void *b)
{
    const slash_ssb_batch kv = k->keys(b);
    size_t n = kv.n;
    uint8_t *m = malloc(2 * (n ? n : 1)); /* [0, n): local's skip; [n, 2n): leader's */
    if (!m)
        return slash_fail(SLASH_ENOMEM, "exec: out of memory");
    const bool bytes = exec_key_type(ex) == SLASH_KEY_BYTES;
    const uint32_t *lead = ex->mv.map.leader;
    size_t own = 0, other = 0;
    for (size_t i = 0; i < n; i++) { /* branch-free: the split is random */
        int out = (kv.skip ? kv.skip[i] != 0 : 0) | (kv.times[i] < ex->published);
        uint64_t kh = bytes ? ssb_hash_bytes(kv.key_data + key_start_at(&kv, i), key_bytes_at(&kv, i))
                            : ssb_hash_i64(kv.keys[i]);
        int mine = lead[ssb_part_of_n(ex->parts, kh)] == ex->rank;
        m[i] = (uint8_t)(out | mine);
        m[n + i] = (uint8_t)(out | (mine ^ 1));
        own += (size_t)((out ^ 1) & mine);
        other += (size_t)((out ^ 1) & (mine ^ 1));
    }
    slash_status st = SLASH_OK;
    if (k->kind == SLASH_EXEC_AGGREGATE) { /* the aggregate store honours a skip mask itself */
        slash_ssb_batch nb = kv;
        nb.skip = m;
        if (other)
            st = slash_ssb_update(ex->local, &nb);
        nb.skip = m + n;
        if (st == SLASH_OK && own)
            st = slash_ssb_update(ex->leader, &nb);
    } else {
        if (other)
            st = k->subset(ex, ex->local, b, m, other);
        if (st == SLASH_OK && own)
            st = k->subset(ex, ex->leader, b, m + n, own);
    }
    free(m);
    if (st == SLASH_OK) {
        ex->local_rows += other;
        ex->m.own_rows_direct += own;
    }
    return st;
}

static slash_status push_any(slash_exec *ex, const batch_kind *k, const void *b, uint8_t *late,
                             size_t *n_late)
{
    slash_ssb_batch kv = k->keys(b);
    slash_status st = push_check(ex, k->kind, kv.n, kv.times);
    if (st != SLASH_OK)
        return st;
    size_t nl, ns;
    int64_t mx;
    scan_late(ex, &kv, late, &nl, &ns, &mx);
    if (exec_repartitioning(ex) || ex->routing) {
        st = route(ex, k, b);
    } else if (ex->direct) {
        st = apply_split(ex, k, b);
    } else if (nl == 0) {
        st = k->whole(ex->local, b); /* the store honours kv.skip itself */
    } else {
        uint8_t *mask = late_mask(ex, &kv, late);
        st = mask ? k->subset(ex, ex->local, b, mask, kv.n - nl - ns)
                  : slash_fail(SLASH_ENOMEM, "exec: out of memory");
        if (mask != late)
            free(mask);
    }
    if (st != SLASH_OK)
        return st;
    if (!ex->direct)
        ex->local_rows += kv.n - nl - ns;
    if (n_late)
        *n_late = nl;
    return account(ex, kv.n - ns, nl, mx, batch_bytes(ex, &kv, k->side(b), kv.n - ns));
}

slash_status slash_exec_push(slash_exec *ex, const slash_ssb_batch *b, uint8_t *late,
                             size_t *n_late)
{
    if (n_late)
        *n_late = 0;
    slash_status st = enter(ex);
    if (st != SLASH_OK)
        return st;
    /* a sketch's column as its values is hashed in the local store's fold;
     * rows shipped to a peer or split over stores carry the hashes */
    slash_ssb_batch hb;
    uint64_t *hashes = NULL;
    if (b->hash_raw && (exec_repartitioning(ex) || ex->routing || ex->direct)) {
        st = slash_ssb_batch_hash_raw(b, ex->cfg.state.naggs, &hb, &hashes);
        if (st != SLASH_OK)
            return leave(ex, st);
        b = &hb;
    }
    st = push_any(ex, &AGG_BATCH, b, late, n_late);
    free(hashes);
    if (st == SLASH_OK)
        ex->pushes++;
    if (st == SLASH_OK && ex->ck.pending)
        st = exec_ckpt_safe_point(ex);
    return leave(ex, st);
}

slash_status slash_exec_push_join(slash_exec *ex, const slash_join_batch *b, uint8_t *late,
                                  size_t *n_late)
{
    if (n_late)
        *n_late = 0;
    slash_status st = enter(ex);
    if (st != SLASH_OK)
        return st;
    st = push_any(ex, &JOIN_BATCH, b, late, n_late);
    if (st == SLASH_OK)
        ex->pushes++;
    if (st == SLASH_OK && ex->ck.pending)
        st = exec_ckpt_safe_point(ex);
    return leave(ex, st);
}

slash_status slash_exec_advance(slash_exec *ex, int64_t wm)
{
    pthread_mutex_lock(&ex->mu);
    if (wm > ex->advanced)
        ex->advanced = wm;
    if (ex->ck.pending && ex->sticky == SLASH_OK) /* a safe point */
        return leave(ex, exec_ckpt_safe_point(ex));
    pthread_mutex_unlock(&ex->mu);
    return SLASH_OK;
}

slash_status slash_exec_set_epoch(slash_exec *ex, uint32_t epoch_ms, uint64_t epoch_bytes)
{
    if (epoch_ms == 0 && epoch_bytes == 0)
        return slash_fail(SLASH_EINVAL, "set_epoch: give epoch_ms or epoch_bytes (0 keeps one)");
    pthread_mutex_lock(&ex->mu);
    if (epoch_ms)
        ex->cfg.epoch_ms = epoch_ms;
    if (epoch_bytes)
        ex->cfg.epoch_bytes = epoch_bytes;
    pthread_mutex_unlock(&ex->mu);
    return SLASH_OK;
}

slash_status slash_exec_set_standby(slash_exec *ex, const uint8_t *follow)
{
    if (follow && follow[ex->rank])
        return slash_fail(SLASH_EINVAL, "set_standby: rank %u cannot follow its own watermark",
                          ex->rank);
    pthread_mutex_lock(&ex->mu);
    if (ex->finished) {
        pthread_mutex_unlock(&ex->mu);
        return slash_fail(SLASH_ESTATE, "set_standby after finish");
    }
    slash_status st = SLASH_OK;
    if (!follow) {
        free(ex->follow);
        ex->follow = NULL;
    } else if (!ex->follow && !(ex->follow = malloc(ex->n))) {
        st = slash_fail(SLASH_ENOMEM, "exec: out of memory");
    } else {
        memcpy(ex->follow, follow, ex->n);
    }
    pthread_mutex_unlock(&ex->mu);
    return st;
}

slash_status slash_exec_set_lateness(slash_exec *ex, int64_t lateness)
{
    if (lateness < 0 || lateness >= SLASH_LATENESS_BOUNDED)
        return slash_fail(SLASH_EINVAL, "lateness must be in 0..%lld, got %lld",
                          (long long)(SLASH_LATENESS_BOUNDED - 1), (long long)lateness);
    pthread_mutex_lock(&ex->mu);
    if (ex->cfg.lateness_ms == SLASH_LATENESS_BOUNDED) {
        pthread_mutex_unlock(&ex->mu);
        return slash_fail(SLASH_EINVAL, "a bounded input has no lateness: its watermark moves "
                                        "only by what the source has left to read");
    }
    ex->cfg.lateness_ms = lateness;
    pthread_mutex_unlock(&ex->mu);
    return SLASH_OK;
}

static slash_status end_epoch_locked(slash_exec *ex)
{
    if (ex->finished)
        return slash_fail(SLASH_ESTATE, "exec: end_epoch after finish");
    return end_epoch(ex, false);
}


slash_status slash_exec_end_epoch(slash_exec *ex)
{
    slash_status st = enter(ex);
    if (st != SLASH_OK)
        return st;
    st = end_epoch_locked(ex);
    if (st == SLASH_OK && ex->ck.pending)
        st = exec_ckpt_safe_point(ex);
    return leave(ex, st);
}

/* When an idle poll must next act: its deadline, or sooner the time its
 * epoch falls due (epoch_ms) if it has something to publish then. A due time
 * already past is not returned (the epoch it stood for was not ended, e.g.
 * after finish): the poll then backs off as usual rather than spin. */
static uint64_t poll_wake(const slash_exec *ex, uint64_t deadline)
{
    if (ex->cfg.epoch_ms && !ex->finished &&
        (ex->bytes_since > 0 || current_watermark(ex) > ex->published)) {
        uint64_t due = ex->epoch_start_ns + (uint64_t)ex->cfg.epoch_ms * 1000000ull;
        if (due < deadline && due > slash_now_ns())
            return due;
    }
    return deadline;
}

/* Serves until a result is ready, the group watermark moved (a caller that
 * reports it to a driver learns at once that windows it leads no rows of
 * have fired), a checkpoint is pending, or the deadline. Idle, it sleeps at
 * most SLASH_BACKOFF_MAX_SLEEP_US a round and never past poll_wake(). */
static slash_status poll_locked(slash_exec *ex, int timeout_ms)
{
    uint64_t deadline = slash_deadline(timeout_ms);
    int64_t gw = slash_vclock_min(&ex->vc);
    slash_backoff b;
    slash_backoff_reset(&b);
    for (;;) {
        bool progressed = false;
        slash_status st = serve(ex, &progressed);
        if (st == SLASH_OK && !ex->finished && epoch_due(ex))
            st = end_epoch(ex, false);
        if (st == SLASH_OK)
            st = move_progress(ex);
        if (st != SLASH_OK || ex->qlen || ex->ck.pending || timeout_ms == 0 ||
            slash_vclock_min(&ex->vc) != gw || slash_deadline_passed(deadline))
            return st; /* a pending checkpoint: at once, to the safe point at poll's end */
        if (progressed)
            slash_backoff_reset(&b);
        else
            slash_backoff_wait_until(&b, poll_wake(ex, deadline));
    }
}


slash_status slash_exec_poll(slash_exec *ex, int timeout_ms)
{
    slash_status st = enter(ex);
    if (st != SLASH_OK)
        return st;
    st = poll_locked(ex, timeout_ms);
    if (st == SLASH_OK && ex->ck.pending && !ex->finished)
        st = exec_ckpt_safe_point(ex);
    return leave(ex, st);
}

/* A version adopted but not yet switched to (its switch waits for an older
 * hand-over, see adopt() in exec_moves.c): finish switches to it before the
 * final epoch, since after that no MAP marker goes out and peers would never
 * learn of it (the originator's roles in it would wait for peers that
 * finished). */
static bool switch_due(const slash_exec *ex)
{
    return ex->mv.pending && !exec_moves_switch_ready(ex);
}

/* Peers still to finish, hand-overs owed, awaited or deferred, or a version
 * adopted after the final epoch and not yet switched to. A MAP met in a
 * nested serve (a send waiting for credit while the final epoch's deltas,
 * its EPOCH or a hand-over go out) adopts a version after this executor's
 * switch point; its hand-overs can all be done in those same nested serves
 * (a finished executor hands over at once), and the last peer's final epoch
 * can come with them: without `pending` here the loop below would not run
 * once more, and this executor would end one version behind its peers. */
static bool finish_owed(const slash_exec *ex)
{
    return ex->nfin < ex->n - 1 || ex->mv.nowe || ex->mv.nawait || ex->mv.ndefer ||
           ex->mv.pending;
}

/* Serves the channels and moves hand-overs on while busy(ex); bounded by the
 * group timeout without progress: a stuck hand-over is an error, never a hang. */
static slash_status finish_serve(slash_exec *ex, bool (*busy)(const slash_exec *))
{
    slash_status st = SLASH_OK;
    slash_backoff b;
    slash_backoff_reset(&b);
    uint64_t deadline = slash_deadline(exec_timeout_ms(ex));
    while (st == SLASH_OK && busy(ex)) {
        bool progressed = false;
        st = serve(ex, &progressed);
        if (st == SLASH_OK && ex->mv.pending && ex->published == INT64_MAX)
            st = switch_map(ex); /* adopted after the final epoch */
        if (st == SLASH_OK)
            st = move_progress(ex);
        if (progressed) {
            slash_backoff_reset(&b);
            deadline = slash_deadline(exec_timeout_ms(ex));
        } else if (st == SLASH_OK && slash_deadline_passed(deadline))
            st = slash_fail(SLASH_ETIMEDOUT, "finish: executor rank %u made no progress for %d ms "
                            "(%u of %u peers finished, %u hand-over(s) owed, %u awaited)", ex->rank,
                            exec_timeout_ms(ex), ex->nfin, ex->n - 1, ex->mv.nowe, ex->mv.nawait);
        else
            slash_backoff_wait(&b);
    }
    return st;
}

static slash_status finish_locked(slash_exec *ex)
{
    if (ex->finished)
        return SLASH_OK;
    ex->ck.pending = 0; /* a checkpoint asked for now is given up: see exec_ckpt.c */
    slash_status st = finish_serve(ex, switch_due);
    if (st == SLASH_OK)
        st = end_epoch(ex, true);
    /* then until this executor has handed over what it owes and received
     * what it awaits (old leaders hand over after their final epoch too) */
    if (st == SLASH_OK)
        st = finish_serve(ex, finish_owed);
    if (st == SLASH_OK)
        st = fire(ex);
    if (st == SLASH_OK)
        ex->finished = true, ex->ck.pending = 0; /* a marker met while finishing: given up */
    return st;
}

slash_status slash_exec_finish(slash_exec *ex)
{
    slash_status st = enter(ex);
    if (st != SLASH_OK)
        return st;
    return leave(ex, finish_locked(ex));
}

bool slash_exec_finished(const slash_exec *ex) { return ex->finished; }

void slash_exec_get_metrics(const slash_exec *cex, slash_exec_metrics *out)
{
    slash_exec *ex = (slash_exec *)cex; /* locks; the counters stay unchanged */
    pthread_mutex_lock(&ex->mu);
    *out = ex->m;
    out->watermark = ex->published;
    out->group_watermark = slash_vclock_min(&ex->vc);
    out->slowest_rank = slash_vclock_argmin(&ex->vc);
    out->map_version = ex->mv.map.version;
    out->led_partitions = slash_leadermap_count(&ex->mv.map, ex->rank);
    out->held_partitions = ex->mv.nhold;
    out->credit_stalls = 0;
    for (uint32_t r = 0; r < ex->n; r++) {
        slash_channel *ch = slash_group_out(ex->g, r);
        if (ch) {
            slash_channel_stats cs;
            slash_channel_get_stats(ch, &cs);
            out->credit_stalls += cs.credit_stalls;
        }
    }
    pthread_mutex_unlock(&ex->mu);
}

/* Tells every peer whose ring has room right now why this executor failed
 * (best effort: a full ring or a dead peer is skipped, never waited for). */
static void send_abort(slash_exec *ex)
{
    size_t n = strnlen(ex->sticky_detail, sizeof ex->sticky_detail);
    for (uint32_t r = 0; r < ex->n; r++) {
        slash_channel *ch = r == ex->rank ? NULL : slash_group_out(ex->g, r);
        void *slot;
        size_t cap;
        if (!ch || slash_channel_reserve(ch, 0, &slot, &cap) != SLASH_OK)
            continue;
        size_t m = cap - sizeof(sync_msg) < n ? cap - sizeof(sync_msg) : n;
        sync_msg h = {.type = SYNC_ABORT, .frag = m};
        memcpy(slot, &h, sizeof h);
        memcpy((uint8_t *)slot + sizeof h, ex->sticky_detail, m);
        (void)slash_channel_commit(ch, sizeof h + m);
    }
}

void slash_exec_close(slash_exec *ex)
{
    if (!ex)
        return;
    if (ex->service_started) {
        atomic_store_explicit(&ex->stop, true, memory_order_release);
        pthread_join(ex->service, NULL);
    }
    pthread_mutex_destroy(&ex->mu);
    if (ex->sticky != SLASH_OK && ex->g)
        send_abort(ex);
    slash_group_close(ex->g);
    if (ex->ops) {
        ex->ops->close(ex->local);
        ex->ops->close(ex->leader);
    }
    slash_vclock_free(&ex->vc);
    free(ex->follow);
    if (ex->asm_)
        for (uint32_t r = 0; r < ex->n; r++)
            free(ex->asm_[r].buf);
    free(ex->asm_);
    if (ex->out_rows)
        for (uint32_t r = 0; r < ex->n; r++)
            free(ex->out_rows[r].buf);
    free(ex->out_rows);
    free(ex->dec.times);
    free(ex->dec.keys);
    free(ex->dec.offs);
    free(ex->dec.data);
    for (uint32_t j = 0; j < EXEC_MAX_COLS; j++)
        free(ex->dec.vals[j]);
    exec_ckpt_free(ex);
    exec_moves_free(ex);
    free(ex->peer_epoch);
    free(ex->fin);
    for (size_t i = 0; i < ex->qlen; i++)
        ex->ops->result_free(ex->q[(ex->qhead + i) % ex->qcap]);
    free(ex->q);
    free(ex);
}

/* ---- for the checkpoint and move protocols (exec_impl.h) ------------------------------ */

slash_status exec_serve(slash_exec *ex, bool *progressed) { return serve(ex, progressed); }
slash_status exec_send(slash_exec *ex, uint32_t r, const sync_msg *h) { return ship(ex, r, h, NULL, 0); }
slash_status exec_ship(slash_exec *ex, uint32_t r, const sync_msg *h, const void *data, size_t len)
{
    return ship(ex, r, h, data, len);
}
slash_status exec_emit(slash_exec *ex, int64_t w, const uint8_t *skip) { return emit_into_queue(ex, w, skip); }
slash_status exec_end_epoch(slash_exec *ex) { return end_epoch(ex, false); }
slash_status exec_enter(slash_exec *ex) { return enter(ex); }
slash_status exec_leave(slash_exec *ex, slash_status st) { return leave(ex, st); }
int exec_timeout_ms(const slash_exec *ex) { return timeout_of(ex); }
