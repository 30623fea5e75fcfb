/* exec.h - one Slash executor of a group: eager local partial state, epochs,
 * lazy merging at partition leaders, and window firing by vector clock
 * (Slash §5.1, §7.2.2).
 *
 * Records pushed into an executor update its *local* store at once, whatever
 * their key (no repartitioning). The key space is split into P partitions;
 * partition p is led by rank p mod N. At each epoch end the executor seals
 * its local store, ships each partition's changed span to that partition's
 * leader (by the group's leader map, leadermap.h) over the group's channels (its own partitions are merged in place),
 * resets the shipped records to zero, and publishes its low watermark. A
 * leader merges the deltas it receives into its *leader* store and fires a
 * window once every executor's published watermark has passed the window's
 * end (P1); fired results wait in a queue for slash_exec_take().
 *
 * An epoch ends after epoch_bytes of input, after epoch_ms, when the
 * executor's watermark passes a window end, when a leader-map version it
 * adopted can be switched to (slash_exec_move_partitions), on request, and
 * at finish.
 * A record older than the watermark the executor already published is late:
 * it is counted, flagged for a side output, and not applied.
 *
 * The worker loop is the caller's thread: push(), poll() and finish() each
 * serve the incoming channels while they work, and a send that waits for a
 * credit keeps serving them, so executors never deadlock on full rings and an
 * idle channel never blocks ready work. One thread at a time per executor.
 */
#ifndef SLASH_EXEC_H
#define SLASH_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "slash/checkpoint.h"
#include "slash/group.h"
#include "slash/join.h"
#include "slash/ssb.h"
#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How records reach the state. SLASH: eager local partial state merged at
 * leaders (the product). REPARTITION: the baseline the paper calls UpPar:
 * every record is hash-partitioned by key and sent to its owner executor over
 * the same channels, and owners aggregate alone (no state sync). */
typedef enum slash_exec_mode { SLASH_EXEC_SLASH = 0, SLASH_EXEC_REPARTITION = 1 } slash_exec_mode;

/* What the executor computes: windowed aggregates (state) or a windowed
 * equi-join of two inputs (join). */
typedef enum slash_exec_kind { SLASH_EXEC_AGGREGATE = 0, SLASH_EXEC_JOIN = 1 } slash_exec_kind;

/* Slash mode (aggregates and joins): where an executor folds the records of
 * the partitions it leads itself. LOCAL: into its local store like every other
 * record, merged into its leader store at the epoch's end (cheap when each
 * (window, key) gets many records per epoch); LEADER: straight into the
 * leader store (saves that second upsert when most keys get one record per
 * epoch, at the price of hashing every record once more); AUTO: a short
 * first epoch (64 Ki records) folds LOCAL and measures how many records the
 * local store folded per (window, key) partial (for a join: rows per (window
 * or session, key) group); then, re-measured every epoch it folds locally:
 * 3 or more, LOCAL; under 3, LEADER; under 1.5 (a local partial reduces
 * nothing), LEADER and the other partitions' records go to their leaders as
 * rows too, as in the repartition mode ("routing": metrics.epochs_routed),
 * with one measuring epoch after every 8 routed ones. */
typedef enum slash_exec_own {
    SLASH_OWN_AUTO = 0,
    SLASH_OWN_LOCAL = 1,
    SLASH_OWN_LEADER = 2
} slash_exec_own;

/* lateness_ms of a bounded input (files, tables): nothing is late by
 * arrival order; the source promises its watermark through
 * slash_exec_advance, and finish fires the rest. */
#define SLASH_LATENESS_BOUNDED INT64_MAX

typedef struct slash_exec_config {
    slash_exec_kind kind;
    slash_ssb_config state; /* AGGREGATE: window, key type, partitions (P >= N), aggregates */
    slash_join_config join; /* JOIN: window, key type, partitions (P >= N), columns per side */
    slash_exec_mode mode;
    int64_t lateness_ms;    /* allowed out-of-orderness, >= 0, in the state's time unit;
                             * SLASH_LATENESS_BOUNDED: a bounded input, whose watermark
                             * moves only by slash_exec_advance (what the source has left
                             * to read), never by the times it has seen */
    uint64_t epoch_bytes;   /* end an epoch after this much input (0: no limit) */
    uint32_t epoch_ms;      /* end an epoch after this long (0: no limit) */
    int timeout_ms;         /* longest wait for a peer before failing (< 0: 120 s) */
    slash_exec_own own_rows; /* slash mode: see slash_exec_own */
} slash_exec_config;

typedef struct slash_exec_metrics {
    uint64_t records_in;
    uint64_t bytes_in;
    uint64_t late_records;
    uint64_t epochs;
    uint64_t delta_bytes_sent;     /* bytes shipped: deltas (or records, repartition mode) */
    uint64_t delta_bytes_received;
    uint64_t records_shipped;      /* records sent to their owners (repartition, or routing) */
    uint64_t deltas_merged;
    uint64_t merge_ns;
    uint64_t sync_ns;        /* time spent in epoch ends (ship + merge + reset) */
    uint64_t credit_stalls;
    uint64_t rows_emitted;
    int64_t watermark;       /* this executor's published watermark */
    int64_t group_watermark; /* minimum over the vector clock */
    uint32_t slowest_rank;   /* the rank holding the minimum */
    uint32_t rank, size, partitions, led_partitions;
    uint64_t own_rows_direct; /* records folded straight into the leader store */
    uint64_t epochs_routed;   /* slash mode: epochs whose records went to their leaders as rows */
    uint64_t map_version;     /* version of the leader map this executor follows */
    uint64_t moves_in;        /* partitions handed over to this executor */
    uint64_t moves_out;       /* partitions this executor handed over */
    uint64_t moved_bytes_in, moved_bytes_out; /* their state's bytes */
    uint64_t move_pause_ns;   /* sum over moves_in: from holding the partition to its hand-over */
    uint32_t held_partitions; /* partitions not fired here right now (moving) */
} slash_exec_metrics;

typedef struct slash_exec slash_exec;

/* Starts an executor over a joined group, taking ownership of g (also on
 * failure). Fails with SLASH_EINVAL naming a bad setting (partitions < N,
 * negative lateness), SLASH_ENOMEM. */
slash_status slash_exec_open(slash_group *g, const slash_exec_config *cfg, slash_exec **out);

/* Applies a batch to the local store and serves the channels; ends an epoch
 * when one is due. late (optional, b->n bytes) gets 1 for each late record,
 * 0 otherwise; *n_late (optional) their number. Errors of the batch are
 * SLASH_EINVAL (nothing applied); errors of peers are SLASH_EPEER naming the
 * rank. */
slash_status slash_exec_push(slash_exec *ex, const slash_ssb_batch *b, uint8_t *late,
                             size_t *n_late);

/* JOIN executors: applies one side's batch, as slash_exec_push does. */
slash_status slash_exec_push_join(slash_exec *ex, const slash_join_batch *b, uint8_t *late,
                                  size_t *n_late);

/* Raises this executor's watermark to wm (a source's promise that nothing
 * older follows, e.g. an idle input); takes effect at the next epoch end. */
slash_status slash_exec_advance(slash_exec *ex, int64_t wm);

/* Sets the allowed out-of-orderness (state time unit, 0 <= lateness <
 * SLASH_LATENESS_BOUNDED) of an unbounded executor's input from now on: the
 * next epoch end publishes max seen - lateness, unless the published
 * watermark is already later (it never moves back). SLASH_EINVAL for a
 * bounded executor (it has no lateness) or a lateness out of range. */
slash_status slash_exec_set_lateness(slash_exec *ex, int64_t lateness);

/* Standby (a pre-provisioned rank that reads no input, docs/elastic.md):
 * with follow (n entries, follow[rank] == 0), this executor's watermark is
 * from now on the minimum of the watermarks the ranks with follow[r] != 0
 * published (never moving back, capped below INT64_MAX: it finishes only by
 * slash_exec_finish); its own input's times and advance() no longer count.
 * Call it before any push to start as standby. NULL: active again, its
 * watermark its own input's from what it published. The caller keeps the
 * followed set free of cycles (standbys follow active ranks only).
 * SLASH_EINVAL if follow[rank] is set, SLASH_ESTATE after finish. */
slash_status slash_exec_set_standby(slash_exec *ex, const uint8_t *follow);

/* Sets the epoch length from now on: an epoch ends after epoch_ms or after
 * epoch_bytes of input (0 leaves that limit as it is; both 0: SLASH_EINVAL).
 * The epoch in progress ends by the new limits (epoch_due reads them under
 * the executor's lock), so the change shows by the next epoch end. Epoch
 * length changes only when deltas ship, never what the windows hold. */
slash_status slash_exec_set_epoch(slash_exec *ex, uint32_t epoch_ms, uint64_t epoch_bytes);

/* Ends an epoch now. */
slash_status slash_exec_end_epoch(slash_exec *ex);

/* Serves the channels for up to timeout_ms (0: once), ending an epoch if one
 * is due by time. Returns early when a result is ready or the group
 * watermark moved, and takes a pending checkpoint at once (see
 * slash_exec_request_checkpoint). */
slash_status slash_exec_poll(slash_exec *ex, int timeout_ms);

/* End of input: a final epoch with watermark +infinity, then serves the
 * channels until every executor has finished, and fires every remaining
 * window of the partitions this executor leads. */
slash_status slash_exec_finish(slash_exec *ex);

/* True once finish() has completed. */
bool slash_exec_finished(const slash_exec *ex);

/* Pops the oldest fired result (caller owns it, free with
 * slash_ssb_result_free), or sets *out = NULL when none is waiting. */
void slash_exec_take(slash_exec *ex, slash_ssb_result **out);
/* JOIN executors: pops the oldest fired join result (free with
 * slash_join_result_free), or NULL. */
void slash_exec_take_join(slash_exec *ex, slash_join_result **out);

void slash_exec_get_metrics(const slash_exec *ex, slash_exec_metrics *out);

/* ---- checkpoints (exec_ckpt.c) ----------------------------------------------
 * An aligned checkpoint at an epoch boundary. slash_exec_request_checkpoint
 * (normally on rank 0; ids strictly increase) makes `id` pending; a CKPT(id)
 * marker from a peer does the same. At its next SAFE POINT - the end of a
 * push, push_join, poll, advance or end_epoch call - an executor with a
 * pending id ends an epoch, sends CKPT(id) to every peer after its deltas,
 * serves its channels until it has CKPT(id) from every peer (every pre-cut
 * delta is then merged), snapshots the partitions it leads and its META
 * (slash_ckpt), sends CKPT_DONE(id) and serves until it has CKPT_DONE(id)
 * from every peer; only then does the call return. So the cut is "after the
 * k-th push call" on every executor. Callers must reach a safe point within
 * the group's timeout once a peer asked (poll while the source is idle).
 * Finishing: a checkpoint pending when any executor has begun finishing is
 * given up cleanly on every executor (no image; no deadlock): an executor
 * that finishes never sends CKPT, and the others stop waiting once its final
 * epoch arrives. AGGREGATE and JOIN executors alike (a join's partition
 * blobs hold both sides' buffered rows per window and key). */
slash_status slash_exec_request_checkpoint(slash_exec *ex, uint64_t id);

/* Pops the oldest completed checkpoint image (free with slash_ckpt_free), or
 * sets *out = NULL. */
slash_status slash_exec_take_checkpoint(slash_exec *ex, slash_ckpt **out);

/* Restore, right after open and before any push: the META of EVERY rank of
 * the checkpoint (any order), then the blob of every partition this executor
 * now leads (partition mod N). The group may have another size than the
 * checkpoint's; the partition count must be equal. Restoring with the same
 * size resumes each rank's watermarks and counters; with another size every
 * executor starts at the group watermark of the cut. SLASH_EINVAL naming
 * what is wrong for a bad, truncated or foreign blob (nothing changes; a
 * join blob restored into an aggregate executor, or the reverse, is foreign);
 * SLASH_ESTATE after a push. */
slash_status slash_exec_restore_meta(slash_exec *ex, const void *meta, size_t len);
slash_status slash_exec_restore_partition(slash_exec *ex, uint32_t partition, const void *data,
                                          size_t len);

/* ---- leadership moves (see docs/elastic.md) ----------------------------------
 * Moves leadership of k partitions (parts[i] to ranks[i]). Call on rank 0
 * only (SLASH_ESTATE elsewhere); it makes the next map version, which rank 0
 * switches to at its next epoch end and announces with a MAP marker on every
 * channel; each executor adopts it at the first marker it receives and
 * switches at its own next epoch end, sending its own marker (the adopted
 * version ends that epoch at the next push or poll, so an executor whose
 * source is idle switches too). Everything an
 * executor sends after its marker follows the new map. The old leader stops
 * firing a moved partition at once; when it has every peer's marker (all its
 * old-map deltas are merged) it ships the partition's state to the new
 * leader and drops it. The new leader fires no window of the partition until
 * that hand-over has arrived; every other partition keeps firing. Moves to
 * the current leader are dropped. One version at a time: SLASH_ESTATE while
 * rank 0 still lacks a peer's marker of the previous one, and once any
 * executor has sent its final epoch; SLASH_EINVAL for a
 * bad partition or rank, a partition named twice, or a JOIN executor (its
 * store cannot be handed over yet). */
slash_status slash_exec_move_partitions(slash_exec *ex, const uint32_t *parts,
                                        const uint32_t *ranks, uint32_t k);

/* Copies the leader map this executor follows: *version, and leaders[p] for
 * every partition (the caller's array of metrics.partitions entries). */
void slash_exec_leader_map(slash_exec *ex, uint64_t *version, uint32_t *leaders);

/* Restore, right after open and before any push or restore_partition, on
 * every executor with the same array: sets the leader map (leaders[p] <
 * group size for every p), e.g. the map recorded by the checkpoint's images
 * (each image holds the partitions its rank led). SLASH_EINVAL naming a bad
 * entry, SLASH_ESTATE after a push. */
slash_status slash_exec_restore_map(slash_exec *ex, const uint32_t *leaders);

/* Closes the executor and its group. NULL is fine. */
void slash_exec_close(slash_exec *ex);

#ifdef __cplusplus
}
#endif
#endif
