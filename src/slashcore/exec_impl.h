/* exec_impl.h - the executor's internals, private to the core: the wire
 * header of the group's messages and the executor's state, shared by exec.c
 * (epochs, merging, firing), exec_ckpt.c (the checkpoint protocol) and
 * exec_moves.c (leadership moves), plus the few exec.c routines those
 * protocols drive. Invariants: see exec.c and exec_moves.c.
 */
#ifndef SLASH_EXEC_IMPL_H
#define SLASH_EXEC_IMPL_H

#include "slash/checkpoint.h"
#include "slash/exec.h"
#include "slash/leadermap.h"
#include "slash/vclock.h"
#include "exec_store.h"

#include <assert.h>

/* Value columns a repartitioned row may carry (aggregate inputs or a join
 * side's columns), and the longest byte-string key of either kind of store. */
#define EXEC_MAX_COLS (SLASH_SSB_MAX_AGGS > SLASH_JOIN_MAX_COLS ? SLASH_SSB_MAX_AGGS : SLASH_JOIN_MAX_COLS)
#define EXEC_KEY_MAX (SLASH_SSB_KEY_MAX > SLASH_JOIN_KEY_MAX ? SLASH_SSB_KEY_MAX : SLASH_JOIN_KEY_MAX)
#include <pthread.h>
#include <stdatomic.h>

/* Checkpoint protocol state of one executor (exec_ckpt.c). */
typedef struct exec_ckpt {
    uint64_t pending;    /* checkpoint to take at the next safe point (0: none) */
    uint64_t last;       /* last checkpoint completed or abandoned */
    uint64_t *peer_ckpt; /* per rank: highest CKPT id received */
    uint64_t *peer_done; /* per rank: highest CKPT_DONE id received */
    slash_ckpt **done;   /* completed images, oldest first */
    size_t ndone, cap;
    uint64_t abandoned;  /* checkpoints given up because an executor was finishing */
    uint64_t retried;    /* attempts dropped because a cut fell in a hand-over */
    bool peer_moving;    /* a peer's CKPT_DONE of this attempt said it was in a hand-over */
    uint64_t base_pushes; /* push calls of the restored rank before its checkpoint */
    /* restore (before the first push) */
    uint64_t restore_id;
    uint32_t restore_size, restored_metas;
    uint8_t *restore_seen; /* per old rank: its META was restored */
    int64_t restore_min;   /* minimum published watermark over the restored METAs */
    bool restoring;        /* restore began: fire nothing until this executor publishes an
                            * epoch, so no window fires before its partitions are back */
} exec_ckpt;

/* CKPT(id) and CKPT_DONE(id) (exec_ckpt.c) carry the checkpoint id in `total`
 * and are outside the epoch sequence. */
enum { SYNC_DELTA = 1, SYNC_EPOCH = 2, SYNC_ROWS = 3, SYNC_ABORT = 4, SYNC_CKPT = 5,
       SYNC_CKPT_DONE = 6, SYNC_MAP = 7, SYNC_HANDOVER = 8 };

typedef struct sync_msg {
    uint32_t type;
    uint32_t part;     /* DELTA: partition */
    uint64_t epoch;    /* the sender's epoch this message belongs to */
    uint64_t offset;   /* DELTA: offset of the fragment in the partition's delta */
    uint64_t total;    /* DELTA: bytes of the whole partition delta */
    int64_t watermark; /* EPOCH: sender's watermark (INT64_MAX: finished) */
    uint64_t frag;     /* DELTA, ROWS: bytes after the header */
} sync_msg;
static_assert(sizeof(sync_msg) == 48, "sync_msg travels between executors");

/* Repartition mode: records bound for one owner, encoded as rows of
 * [int64 time][key: int64 | uint8 length + bytes][8-byte value per input]. */
typedef struct rowbuf {
    uint8_t *buf;
    size_t len, cap;
    uint64_t rows;
    uint32_t side; /* joins: the side of the rows buffered (one side a message) */
} rowbuf;

/* Repartition mode: decoded columns of received rows (reused). */
typedef struct columns {
    int64_t *times, *keys, *offs;
    uint8_t *data;
    uint64_t *vals[EXEC_MAX_COLS];
    size_t cap, data_cap;
} columns;

/* A partition handed over to this executor, imported fragment by fragment
 * (exec_moves.c): `len` of `total` bytes imported so far. */
typedef struct exec_handin {
    void *im; /* the store's import (exec_store_ops); NULL: none in progress */
    uint64_t len, total;
    uint32_t part;
} exec_handin;

typedef struct assembly {
    uint8_t *buf;
    size_t cap, len, total;
    uint32_t part;
    uint64_t epoch;
} assembly;

/* Leadership moves (exec_moves.c). MAP(v) carries version v in `epoch`, the move
 * count in `offset` and (partition, rank) u32 pairs after the header;
 * HANDOVER carries the version in `epoch`, the partition, its emitted
 * watermark in `watermark`, and a fragment (offset/total/frag as DELTA) of
 * the partition's log, cut at record boundaries. Both are outside the epoch
 * sequence. */
typedef struct exec_moves {
    slash_leadermap map;   /* the version this executor's sends follow */
    /* leaders of versions hist_base .. map.version, parts entries each: a
     * peer whose marker has not arrived yet still sends by an older one */
    uint32_t *hist;
    uint64_t hist_base;
    size_t hist_n, hist_cap; /* versions held; entries allocated (slash_buf_grow) */
    int32_t *pend_to;      /* per partition: its rank in the adopted version (-1: unmoved) */
    uint64_t *peer_ver;    /* per rank: version of its stream (its last MAP marker) */
    bool pending;          /* version map.version + 1 adopted, not yet switched to */
    uint32_t npend;
    uint32_t *pend_parts, *pend_ranks;
    uint8_t *hold;         /* per partition: not fired here (awaited or owed) */
    uint8_t *awaiting;     /* per partition: this new leader awaits its hand-over */
    uint32_t *from;        /* per awaited partition: the old leader */
    int32_t *owe;          /* per partition: rank it is handed over to (-1: none) */
    uint64_t *owe_ver;     /* per owed partition: the version that moved it */
    uint64_t *since_ns;    /* per partition: when this executor began holding it */
    uint32_t *await_from;  /* per rank: hand-overs awaited from it */
    /* per partition: moved by the adopted version while a hand-over of an
     * older one is in flight here; its role (owe/await) is taken at the
     * switch, which waits for that hand-over (one role per partition) */
    uint8_t *defer;
    uint32_t nhold, nowe, nawait, ndefer;
    bool busy;             /* handing over (no re-entry from a nested serve) */
    /* the hand-over being sent, ho_off of its ho_len bytes so far (sliced
     * over exec_moves_progress calls) */
    bool ho_active;
    uint32_t ho_part;
    size_t ho_off, ho_len;
    exec_handin *hin;      /* per rank: the hand-over being received from it */
} exec_moves;

struct slash_exec {
    slash_group *g;
    uint32_t rank, n, parts;
    slash_exec_config cfg;
    const exec_store_ops *ops; /* aggregate or join store */
    void *local, *leader;
    slash_vclock vc;
    int64_t max_seen, published, advanced, fired;
    uint64_t epoch, bytes_since, epoch_start_ns;
    uint64_t *peer_epoch;
    bool *fin;
    uint32_t nfin;
    assembly *asm_;
    rowbuf *out_rows;
    columns dec;
    bool finished, in_epoch;
    bool direct;           /* own partitions' records go straight to the leader store */
    bool routing;          /* and the others' go to their leaders as records (AUTO) */
    uint32_t routed_epochs; /* epochs routed since the aggregation was last measured */
    bool measuring;         /* AUTO: the local store measures the aggregation this epoch */
    uint64_t local_rows;   /* records folded into the local store since the last choice */
    uint64_t local_groups; /* and the (window, key) partials they made, epoch by epoch */
    uint32_t rr;
    void **q; /* fired results: slash_ssb_result or slash_join_result */
    size_t qhead, qlen, qcap;
    slash_exec_metrics m;
    pthread_mutex_t mu;
    pthread_t service;
    bool service_started;
    atomic_bool stop;
    atomic_uint callers; /* callers waiting for mu in enter(): the service thread gives way */
    slash_status sticky; /* error met by the service thread */
    char sticky_detail[512];
    uint64_t pushes; /* push calls completed */
    exec_ckpt ck;    /* checkpoint protocol state (exec_ckpt.c) */
    exec_moves mv;   /* leader map and moves in flight */
    /* standby (slash_exec_set_standby): per rank, 1 for the ranks whose
     * published watermarks this executor's watermark follows (their minimum);
     * NULL: an active executor, whose watermark is its own input's */
    uint8_t *follow;
};

/* True when this executor leads partition p under its current map. */
static inline bool exec_leads(const slash_exec *ex, uint32_t p)
{
    return slash_leadermap_leader(&ex->mv.map, p) == ex->rank;
}

/* exec.c routines the checkpoint and move protocols drive (all with ex->mu
 * held). exec_ship sends a header and `len` bytes of data to rank r, serving
 * the incoming channels while r's ring is full; exec_emit queues the windows
 * closed at w of the partitions with skip[p] == 0 (skip NULL: all). */
slash_status exec_serve(slash_exec *ex, bool *progressed);
slash_status exec_send(slash_exec *ex, uint32_t r, const sync_msg *h);
slash_status exec_ship(slash_exec *ex, uint32_t r, const sync_msg *h, const void *data, size_t len);
slash_status exec_emit(slash_exec *ex, int64_t w, const uint8_t *skip);
slash_status exec_end_epoch(slash_exec *ex);
slash_status exec_enter(slash_exec *ex);
slash_status exec_leave(slash_exec *ex, slash_status st);
int exec_timeout_ms(const slash_exec *ex);

/* exec_repartition.c, called by exec.c (with ex->mu held): the repartition
 * baseline and routing. exec_route_rows marks in skip[] which records of a
 * batch stay (the own partitions' on-time ones, counted in *keep) and
 * buffers the others as rows for their leaders; exec_flush_all_rows sends
 * every buffer; exec_apply_rows folds a ROWS message from rank r into the
 * leader store. exec_row_columns: the value columns a row carries (present[j]:
 * whether column j travels). */
slash_status exec_route_rows(slash_exec *ex, const slash_ssb_batch *kv, const void *const *values,
                             uint32_t side, uint8_t *skip, size_t *keep);
slash_status exec_flush_all_rows(slash_exec *ex);
slash_status exec_apply_rows(slash_exec *ex, uint32_t r, const uint8_t *p, size_t len,
                             uint64_t rows, uint32_t side);
uint32_t exec_row_columns(const slash_exec *ex, uint32_t side, bool present[EXEC_MAX_COLS]);

static inline bool exec_repartitioning(const slash_exec *ex)
{
    return ex->cfg.mode == SLASH_EXEC_REPARTITION;
}

static inline slash_key_type exec_key_type(const slash_exec *ex)
{
    return ex->cfg.kind == SLASH_EXEC_JOIN ? ex->cfg.join.key_type : ex->cfg.state.key_type;
}

/* Byte keys of a batch: record i's length and start in key_data. */
static inline size_t key_bytes_at(const slash_ssb_batch *b, size_t i)
{
    if (b->key_offsets_64) {
        const int64_t *o = b->key_offsets;
        return (size_t)(o[i + 1] - o[i]);
    }
    const int32_t *o = b->key_offsets;
    return (size_t)(o[i + 1] - o[i]);
}

static inline size_t key_start_at(const slash_ssb_batch *b, size_t i)
{
    if (b->key_offsets_64)
        return (size_t)((const int64_t *)b->key_offsets)[i];
    return (size_t)((const int32_t *)b->key_offsets)[i];
}

/* exec_ckpt.c, called by exec.c: a CKPT or CKPT_DONE message from rank r;
 * the protocol at a safe point (only when ex->ck.pending); set-up and
 * teardown of the protocol state. */
slash_status exec_ckpt_on_message(slash_exec *ex, uint32_t r, const sync_msg *h);
slash_status exec_ckpt_safe_point(slash_exec *ex);
slash_status exec_ckpt_init(slash_exec *ex);
void exec_ckpt_free(slash_exec *ex);

/* exec_moves.c, called by exec.c (with ex->mu held): set-up and teardown of
 * the move state (init fails only with SLASH_ENOMEM); the switch to an
 * adopted version at an epoch end (sends MAP; a no-op until no older
 * hand-over of a moved partition is in flight); handing over what is owed
 * and ready (never from inside a nested serve); the leader of p by version
 * `version` of the map; a MAP or HANDOVER message from rank r. */
slash_status exec_moves_init(slash_exec *ex);
void exec_moves_free(slash_exec *ex);
bool exec_moves_switch_ready(const slash_exec *ex);
slash_status exec_moves_switch(slash_exec *ex);
slash_status exec_moves_progress(slash_exec *ex);
uint32_t exec_moves_leader_for(const slash_exec *ex, uint32_t p, uint64_t version);
slash_status exec_moves_on_map(slash_exec *ex, uint32_t r, const sync_msg *h, const uint8_t *body,
                               size_t len);
slash_status exec_moves_on_handover(slash_exec *ex, uint32_t r, const sync_msg *h,
                                    const uint8_t *body, size_t len);

#endif
