# slashcore.pxd - trimmed mirror of the C core's public headers
# (src/slashcore/include/slash/*.h), listing only what the bindings use.
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stddef cimport size_t

cdef extern from "slash/status.h" nogil:
    ctypedef enum slash_status:
        SLASH_OK
        SLASH_EINVAL
        SLASH_ETOOBIG
        SLASH_ERANGE
        SLASH_ENOTSUP
        SLASH_ENOENT
        SLASH_ESTATE
        SLASH_ENOMEM
        SLASH_ESYS
        SLASH_EPROVIDER
        SLASH_EAUTH
        SLASH_EPEER
        SLASH_ETIMEDOUT
        SLASH_EPROTO
        SLASH_EOF
    const char *slash_strerror(slash_status st)
    const char *slash_last_error()
    slash_status slash_last_error_status()
    void slash_clear_error()

cdef extern from "slash/mem.h" nogil:
    bint slash_mem_hugepages_enabled()

cdef extern from "slash/transport.h" nogil:
    ctypedef struct slash_transport
    ctypedef struct slash_listener
    ctypedef struct slash_endpoint
    ctypedef struct slash_region
    ctypedef struct slash_remote
    enum:
        SLASH_MSG_MAX
        SLASH_TOKEN_MAX
    slash_status slash_transport_open(const char *spec, slash_transport **out)
    void slash_transport_close(slash_transport *tp)
    const char *slash_transport_spec(const slash_transport *tp)
    bint slash_transport_have_ofi()
    slash_status slash_listen(slash_transport *tp, const char *bind_addr, const char *token,
                              slash_listener **out)
    const char *slash_listener_addr(const slash_listener *l)
    void slash_listener_close(slash_listener *l)

cdef extern from "slash/channel.h" nogil:
    ctypedef struct slash_channel
    ctypedef struct slash_channel_config:
        size_t buffer_size
        uint32_t credits
    ctypedef struct slash_channel_stats:
        uint64_t buffers
        uint64_t bytes
        uint64_t credit_stalls
        uint64_t polls
        uint64_t empty_polls
        size_t buffer_size
        uint32_t credits
        bint hugepages
    size_t slash_channel_payload_max(size_t buffer_size)
    slash_status slash_channel_config_check(const slash_channel_config *cfg)
    slash_status slash_channel_accept(slash_listener *l, const slash_channel_config *cfg,
                                      int timeout_ms, slash_channel **out)
    slash_status slash_channel_connect(slash_transport *tp, const char *addr, const char *token,
                                       int timeout_ms, slash_channel **out)
    void slash_channel_close(slash_channel *ch)
    slash_status slash_channel_reserve(slash_channel *ch, int timeout_ms, void **buf, size_t *cap)
    slash_status slash_channel_commit(slash_channel *ch, size_t len)
    slash_status slash_channel_send(slash_channel *ch, const void *data, size_t len, int timeout_ms)
    slash_status slash_channel_send_eof(slash_channel *ch, int timeout_ms)
    slash_status slash_channel_poll(slash_channel *ch, int timeout_ms, const void **buf,
                                    size_t *len, uint64_t *seq)
    slash_status slash_channel_release(slash_channel *ch)
    slash_status slash_channel_recv(slash_channel *ch, void *dst, size_t cap, size_t *len,
                                    int timeout_ms)
    bint slash_channel_is_producer(const slash_channel *ch)
    void slash_channel_get_stats(const slash_channel *ch, slash_channel_stats *out)

cdef extern from "slash/window.h" nogil:
    ctypedef enum slash_window_kind:
        SLASH_WINDOW_TUMBLING
        SLASH_WINDOW_SLIDING
        SLASH_WINDOW_SESSION
    ctypedef struct slash_window:
        slash_window_kind kind
        int64_t size
        int64_t slide
        int64_t slice
    slash_status slash_window_init(slash_window *w, slash_window_kind kind, int64_t size,
                                   int64_t slide)

cdef extern from "slash/crdt.h" nogil:
    ctypedef enum slash_agg_kind:
        SLASH_AGG_COUNT
        SLASH_AGG_SUM_I64
        SLASH_AGG_SUM_F64
        SLASH_AGG_MIN_I64
        SLASH_AGG_MIN_F64
        SLASH_AGG_MAX_I64
        SLASH_AGG_MAX_F64
        SLASH_AGG_AVG_I64
        SLASH_AGG_AVG_F64
        SLASH_AGG_FIRST_I64
        SLASH_AGG_FIRST_F64
        SLASH_AGG_LAST_I64
        SLASH_AGG_LAST_F64
        SLASH_AGG_COUNT_DISTINCT
        SLASH_AGG_HLL
        SLASH_AGG_QUANTILE
    bint slash_crdt_result_is_f64(slash_agg_kind k)
    bint slash_crdt_input_is_f64(slash_agg_kind k)
    bint slash_crdt_needs_input(slash_agg_kind k)

cdef extern from "slash/ssb.h" nogil:
    enum:
        SLASH_SSB_MAX_AGGS
        SLASH_SSB_KEY_MAX
        SLASH_MAX_PARTITIONS
    ctypedef enum slash_key_type:
        SLASH_KEY_INT64
        SLASH_KEY_BYTES
    ctypedef struct slash_ssb
    ctypedef struct slash_ssb_config:
        slash_window window
        slash_key_type key_type
        uint32_t partitions
        uint32_t naggs
        slash_agg_kind aggs[16]
        size_t log_reserve
    ctypedef struct slash_ssb_batch:
        size_t n
        const int64_t *times
        const int64_t *keys
        const void *key_offsets
        int key_offsets_64
        const uint8_t *key_data
        const void *values[16]
        const uint8_t *skip
        uint32_t ones
        uint32_t hash_raw
        uint32_t raw_f64
    ctypedef struct slash_ssb_result:
        size_t rows
        int64_t *window_start
        int64_t *window_end
        int64_t *keys
        int64_t *key_offsets
        uint8_t *key_data
        size_t key_data_len
        void *columns[16]
    ctypedef struct slash_ssb_stats:
        uint64_t records
        uint64_t late
        uint64_t epoch
        size_t memory_bytes
        size_t log_bytes
        size_t index_bytes
        size_t record_bytes
        int sealed
    slash_status slash_ssb_open(const slash_ssb_config *cfg, slash_ssb **out)
    void slash_ssb_close(slash_ssb *s)
    slash_status slash_ssb_update(slash_ssb *s, const slash_ssb_batch *b)
    slash_status slash_ssb_begin_epoch(slash_ssb *s)
    slash_status slash_ssb_delta(const slash_ssb *s, uint32_t part, const void **addr, size_t *len)
    slash_status slash_ssb_merge_delta(slash_ssb *s, const void *region, size_t len)
    slash_status slash_ssb_reset_delta(slash_ssb *s)
    slash_status slash_ssb_emit(slash_ssb *s, int64_t up_to, slash_ssb_result **out)
    void slash_ssb_result_free(slash_ssb_result *r)
    void slash_ssb_get_stats(const slash_ssb *s, slash_ssb_stats *out)
    int64_t slash_ssb_watermark(const slash_ssb *s)

cdef extern from "slash/join.h" nogil:
    enum:
        SLASH_JOIN_MAX_COLS
        SLASH_JOIN_KEY_MAX
    ctypedef enum slash_join_side:
        SLASH_JOIN_LEFT
        SLASH_JOIN_RIGHT
    ctypedef enum slash_join_col_type:
        SLASH_JOIN_I64
        SLASH_JOIN_F64
    ctypedef struct slash_join
    ctypedef struct slash_join_config:
        slash_window window
        slash_key_type key_type
        uint32_t partitions
        uint32_t ncols[2]
        slash_join_col_type cols[2][16]
        size_t log_reserve
        int band
        uint32_t band_col[2]
        int64_t band_lo, band_hi
    ctypedef struct slash_join_batch:
        slash_join_side side
        size_t n
        const int64_t *times
        const int64_t *keys
        const void *key_offsets
        int key_offsets_64
        const uint8_t *key_data
        const void *columns[16]
    ctypedef struct slash_join_result:
        size_t rows
        int64_t *window_start
        int64_t *window_end
        int64_t *keys
        int64_t *key_offsets
        uint8_t *key_data
        size_t key_data_len
        void *columns[2][16]
        uint32_t ncols[2]
    ctypedef struct slash_join_stats:
        uint64_t groups
        uint64_t rows[2]
        uint64_t chunks
        uint64_t late
        uint64_t epoch
        size_t memory_bytes
        size_t log_bytes
        size_t index_bytes
        int sealed
    slash_status slash_join_open(const slash_join_config *cfg, slash_join **out)
    void slash_join_close(slash_join *s)
    slash_status slash_join_update(slash_join *s, const slash_join_batch *b)
    slash_status slash_join_begin_epoch(slash_join *s)
    slash_status slash_join_delta(const slash_join *s, uint32_t part, const void **addr,
                                  size_t *len)
    slash_status slash_join_merge_delta(slash_join *s, const void *region, size_t len)
    slash_status slash_join_reset_delta(slash_join *s)
    slash_status slash_join_emit(slash_join *s, int64_t up_to, slash_join_result **out)
    void slash_join_result_free(slash_join_result *r)
    void slash_join_get_stats(const slash_join *s, slash_join_stats *out)
    int64_t slash_join_watermark(const slash_join *s)

cdef extern from "slash/group.h" nogil:
    enum:
        SLASH_GROUP_MAX
    ctypedef struct slash_group
    slash_status slash_group_join(slash_listener *l, uint32_t rank, uint32_t n,
                                  const char *const *addrs, const char *token,
                                  const slash_channel_config *cfg, int timeout_ms,
                                  slash_group **out)
    void slash_group_close(slash_group *g)
    uint32_t slash_group_refused(const slash_group *g, const char **detail)

cdef extern from "slash/checkpoint.h" nogil:
    ctypedef struct slash_ckpt
    uint64_t slash_ckpt_id(const slash_ckpt *ck)
    uint64_t slash_ckpt_pushes(const slash_ckpt *ck)
    uint32_t slash_ckpt_rank(const slash_ckpt *ck)
    void slash_ckpt_meta(const slash_ckpt *ck, const void **ptr, size_t *len)
    uint32_t slash_ckpt_parts(const slash_ckpt *ck)
    slash_status slash_ckpt_part(const slash_ckpt *ck, uint32_t i, uint32_t *partition,
                                 const void **ptr, size_t *len)
    void slash_ckpt_free(slash_ckpt *ck)

cdef extern from "slash/exec.h" nogil:
    ctypedef struct slash_exec
    ctypedef enum slash_exec_mode:
        SLASH_EXEC_SLASH
        SLASH_EXEC_REPARTITION
    ctypedef enum slash_exec_kind:
        SLASH_EXEC_AGGREGATE
        SLASH_EXEC_JOIN
    ctypedef enum slash_exec_own:
        SLASH_OWN_AUTO
        SLASH_OWN_LOCAL
        SLASH_OWN_LEADER
    ctypedef struct slash_exec_config:
        slash_exec_kind kind
        slash_ssb_config state
        slash_join_config join
        slash_exec_mode mode
        int64_t lateness_ms
        uint64_t epoch_bytes
        uint32_t epoch_ms
        int timeout_ms
        slash_exec_own own_rows
    ctypedef struct slash_exec_metrics:
        uint64_t records_in
        uint64_t bytes_in
        uint64_t late_records
        uint64_t epochs
        uint64_t delta_bytes_sent
        uint64_t delta_bytes_received
        uint64_t records_shipped
        uint64_t deltas_merged
        uint64_t merge_ns
        uint64_t sync_ns
        uint64_t credit_stalls
        uint64_t rows_emitted
        int64_t watermark
        int64_t group_watermark
        uint32_t slowest_rank
        uint32_t rank
        uint32_t size
        uint32_t partitions
        uint32_t led_partitions
        uint64_t own_rows_direct
        uint64_t epochs_routed
        uint64_t map_version
        uint64_t moves_in
        uint64_t moves_out
        uint64_t moved_bytes_in
        uint64_t moved_bytes_out
        uint64_t move_pause_ns
        uint32_t held_partitions
    slash_status slash_exec_open(slash_group *g, const slash_exec_config *cfg, slash_exec **out)
    slash_status slash_exec_push(slash_exec *ex, const slash_ssb_batch *b, uint8_t *late,
                                 size_t *n_late)
    slash_status slash_exec_push_join(slash_exec *ex, const slash_join_batch *b, uint8_t *late,
                                      size_t *n_late)
    void slash_exec_take_join(slash_exec *ex, slash_join_result **out)
    slash_status slash_exec_advance(slash_exec *ex, int64_t wm)
    slash_status slash_exec_set_lateness(slash_exec *ex, int64_t lateness)
    slash_status slash_exec_set_standby(slash_exec *ex, const uint8_t *follow)
    slash_status slash_exec_set_epoch(slash_exec *ex, uint32_t epoch_ms, uint64_t epoch_bytes)
    slash_status slash_exec_end_epoch(slash_exec *ex)
    slash_status slash_exec_poll(slash_exec *ex, int timeout_ms)
    slash_status slash_exec_finish(slash_exec *ex)
    bint slash_exec_finished(const slash_exec *ex)
    void slash_exec_take(slash_exec *ex, slash_ssb_result **out)
    void slash_exec_get_metrics(const slash_exec *ex, slash_exec_metrics *out)
    void slash_exec_close(slash_exec *ex)
    slash_status slash_exec_request_checkpoint(slash_exec *ex, uint64_t id)
    slash_status slash_exec_take_checkpoint(slash_exec *ex, slash_ckpt **out)
    slash_status slash_exec_restore_meta(slash_exec *ex, const void *meta, size_t len)
    slash_status slash_exec_restore_partition(slash_exec *ex, uint32_t partition,
                                              const void *data, size_t len)
    slash_status slash_exec_move_partitions(slash_exec *ex, const uint32_t *parts,
                                            const uint32_t *ranks, uint32_t k)
    void slash_exec_leader_map(slash_exec *ex, uint64_t *version, uint32_t *leaders)
    slash_status slash_exec_restore_map(slash_exec *ex, const uint32_t *leaders)

from libc.stdint cimport int8_t, int32_t

cdef extern from "slash/gen.h" nogil:
    ctypedef enum slash_gen_dist:
        SLASH_GEN_UNIFORM
        SLASH_GEN_ZIPF
    ctypedef struct slash_gen_keys:
        uint64_t n
        slash_gen_dist dist
        double exponent
    uint64_t slash_gen_stream(uint64_t seed, uint64_t field)
    slash_status slash_gen_keys_init(slash_gen_keys *k, uint64_t n, slash_gen_dist dist,
                                     double exponent)
    void slash_gen_keys_fill(const slash_gen_keys *k, uint64_t stream, uint64_t start, size_t n,
                             int64_t *out)
    double slash_gen_keys_pmf(const slash_gen_keys *k, uint64_t key)
    slash_status slash_gen_range_check(const char *what, uint64_t start, size_t n, int64_t base_ms,
                                       uint64_t rate)
    void slash_gen_times_fill(int64_t base_ms, uint64_t rate, uint64_t start, size_t n,
                              int64_t *out)

cdef extern from "slash/gen_ysb.h" nogil:
    enum:
        SLASH_GEN_YSB_RECORD_BYTES
    ctypedef struct slash_gen_ysb_config:
        uint64_t seed
        uint64_t campaigns
        uint32_t ads_per_campaign
        slash_gen_dist dist
        double exponent
        uint64_t rate
        int64_t base_ms
    ctypedef struct slash_gen_ysb:
        slash_gen_ysb_config cfg
    ctypedef struct slash_gen_ysb_columns:
        int64_t *key
        int64_t *event_time
        uint8_t *user_id
        uint8_t *page_id
        uint8_t *ad_id
        int64_t *ad_index
        int8_t *ad_type
        int8_t *event_type
        uint32_t *ip_address
    slash_status slash_gen_ysb_init(slash_gen_ysb *g, const slash_gen_ysb_config *cfg)
    slash_status slash_gen_ysb_fill(const slash_gen_ysb *g, uint64_t start, size_t n,
                                    const slash_gen_ysb_columns *out)
    slash_status slash_gen_ysb_ads(const slash_gen_ysb *g, uint64_t first, size_t n,
                                   uint8_t *ad_id, int64_t *ad_index, int64_t *campaign_id)

cdef extern from "slash/gen_cm.h" nogil:
    enum:
        SLASH_GEN_CM_RECORD_BYTES
    ctypedef struct slash_gen_cm_config:
        uint64_t seed
        uint64_t jobs
        slash_gen_dist dist
        double exponent
        uint64_t machines
        uint64_t rate
        int64_t base_ms
    ctypedef struct slash_gen_cm:
        slash_gen_cm_config cfg
    ctypedef struct slash_gen_cm_columns:
        int64_t *timestamp
        int64_t *job_id
        int64_t *task_id
        int64_t *machine_id
        int32_t *event_type
        int32_t *user_id
        int32_t *category
        int32_t *priority
        float *cpu
        float *ram
        float *disk
        int32_t *constraints
    slash_status slash_gen_cm_init(slash_gen_cm *g, const slash_gen_cm_config *cfg)
    slash_status slash_gen_cm_fill(const slash_gen_cm *g, uint64_t start, size_t n,
                                   const slash_gen_cm_columns *out)

cdef extern from "slash/gen_nexmark.h" nogil:
    enum:
        SLASH_GEN_NEXMARK_PERSON_BYTES
        SLASH_GEN_NEXMARK_AUCTION_BYTES
        SLASH_GEN_NEXMARK_BID_BYTES
        SLASH_GEN_NEXMARK_NAME_MAX
        SLASH_GEN_NEXMARK_EMAIL_MAX
        SLASH_GEN_NEXMARK_CARD_MAX
        SLASH_GEN_NEXMARK_CITY_MAX
        SLASH_GEN_NEXMARK_STATE_MAX
        SLASH_GEN_NEXMARK_ITEM_MAX
        SLASH_GEN_NEXMARK_DESC_MAX
        SLASH_GEN_NEXMARK_CHANNEL_MAX
        SLASH_GEN_NEXMARK_URL_MAX
        SLASH_GEN_NEXMARK_PERSON
        SLASH_GEN_NEXMARK_AUCTION
        SLASH_GEN_NEXMARK_BID
    ctypedef struct slash_gen_nexmark_config:
        uint64_t seed
        int beam_seeds
        uint64_t rate
        int64_t base_ms
        uint32_t hot_auction_ratio
        uint32_t hot_bidders_ratio
        uint32_t hot_sellers_ratio
        uint32_t num_active_people
        uint32_t num_in_flight_auctions
    ctypedef struct slash_gen_nexmark:
        slash_gen_nexmark_config cfg
    ctypedef struct slash_gen_strcol:
        int32_t *offsets
        char *data
    ctypedef struct slash_gen_nexmark_persons:
        int64_t *id
        slash_gen_strcol name, email, credit_card, city, state
        int64_t *date_time
    ctypedef struct slash_gen_nexmark_auctions:
        int64_t *id
        slash_gen_strcol item_name, description
        int64_t *initial_bid, *reserve, *date_time, *expires, *seller, *category
    ctypedef struct slash_gen_nexmark_bids:
        int64_t *auction, *bidder, *price
        slash_gen_strcol channel, url
        int64_t *date_time
    slash_status slash_gen_nexmark_init(slash_gen_nexmark *g, const slash_gen_nexmark_config *cfg)
    slash_status slash_gen_nexmark_persons_fill(const slash_gen_nexmark *g, uint64_t first,
                                                size_t n, const slash_gen_nexmark_persons *out)
    slash_status slash_gen_nexmark_auctions_fill(const slash_gen_nexmark *g, uint64_t first,
                                                 size_t n, const slash_gen_nexmark_auctions *out)
    slash_status slash_gen_nexmark_bids_fill(const slash_gen_nexmark *g, uint64_t first, size_t n,
                                             const slash_gen_nexmark_bids *out)
    uint64_t slash_gen_nexmark_event_of(int kind, uint64_t k)
    uint64_t slash_gen_nexmark_count(int kind, uint64_t events)

# ---- sketches (hll.h) ------------------------------------------------------------
cdef extern from "slash/hll.h" nogil:
    enum:
        SLASH_HLL_P_MIN
        SLASH_HLL_P_MAX
    void slash_hll_hash_column(const void *values, int is_f64, const uint8_t *valid, size_t n,
                               uint64_t *out)
    void slash_hll_hash_strings(const int64_t *offsets, const uint8_t *data, const uint8_t *valid,
                                size_t n, uint64_t *out)
    unsigned slash_hll_precision(double rsd)

cdef extern from "slash/distinct.h" nogil:
    enum:
        SLASH_DISTINCT_MAX

cdef extern from "slash/quantile.h" nogil:
    enum:
        SLASH_QS_Q_SCALE

cdef extern from "slash/pq_read.h" nogil:
    enum:
        SLASH_PQ_INT32
        SLASH_PQ_INT64
        SLASH_PQ_UNCOMPRESSED
        SLASH_PQ_SNAPPY
    ctypedef struct slash_pq_chunk:
        int physical
        int codec
        int max_def
        int64_t num_values
    ctypedef struct slash_pq_reader
    slash_status slash_pq_reader_new(slash_pq_reader **out)
    void slash_pq_reader_free(slash_pq_reader *r)
    slash_status slash_pq_decode(slash_pq_reader *r, const uint8_t *data, size_t len,
                                 const slash_pq_chunk *chunk, void *out, int out_width,
                                 uint8_t *valid, int64_t *null_count)
    slash_status slash_pq_read_fd(slash_pq_reader *r, int fd, int64_t offset, int64_t len,
                                  const slash_pq_chunk *chunk, void *out, int out_width,
                                  uint8_t *valid, int64_t *null_count)

cdef extern from "slash/kafka_fetch.h" nogil:
    ctypedef struct slash_kfetch
    ctypedef struct slash_kevent:
        int kind
        int32_t partition
        int64_t offset
        int code
        int fatal
        char message[256]
    int SLASH_KEVENT_EOF
    int SLASH_KEVENT_ERROR
    int slash_kfetch_available()
    const char *slash_kfetch_version()
    slash_status slash_kfetch_new(const char *topic, const char *const *keys,
                                  const char *const *values, size_t n, slash_kfetch **out)
    void slash_kfetch_free(slash_kfetch *f)
    slash_status slash_kfetch_assign(slash_kfetch *f, const int32_t *partitions,
                                     const int64_t *offsets, size_t n, int incremental)
    slash_status slash_kfetch_unassign(slash_kfetch *f)
    slash_status slash_kfetch_poll(slash_kfetch *f, size_t max, int timeout_ms, int sep,
                                   size_t *records, size_t *value_bytes, size_t *key_bytes)
    size_t slash_kfetch_events(const slash_kfetch *f)
    const slash_kevent *slash_kfetch_event(const slash_kfetch *f, size_t i)
    size_t slash_kfetch_fill(slash_kfetch *f, int sep, char *values, int64_t *starts,
                             int32_t *partition, int64_t *offset, int64_t *timestamp,
                             uint8_t *nulls, char *keys, int64_t *key_starts, uint8_t *key_nulls)
    slash_status slash_kfetch_watermarks(slash_kfetch *f, int32_t partition, int timeout_ms,
                                         int64_t *low, int64_t *high)
    slash_status slash_kfetch_position(slash_kfetch *f, int32_t partition, int64_t *offset)
    slash_status slash_kfetch_partitions(slash_kfetch *f, int timeout_ms, int32_t *out,
                                         size_t cap, size_t *n)

cdef extern from "slash/kafka_produce.h" nogil:
    ctypedef struct slash_kprod
    ctypedef struct slash_kprod_counts:
        int64_t events
        int64_t first_ms
        int64_t last_ms
        int64_t full_events
        int64_t full_from_ms
    slash_status slash_kprod_new(const char *topic, int32_t partitions, const char *const *keys,
                                 const char *const *values, size_t n, const char *const *heads,
                                 const size_t *head_lens, const char *const *tails,
                                 const size_t *tail_lens, size_t n_templates, slash_kprod **out)
    void slash_kprod_free(slash_kprod *p)
    void slash_kprod_set_full(slash_kprod *p, int full)
    void slash_kprod_set_end(slash_kprod *p, int64_t end_ms)
    slash_status slash_kprod_run(slash_kprod *p, double rate, double trickle, int64_t tick_us,
                                 int64_t limit_ms, slash_kprod_counts *out)
    slash_status slash_kprod_flush(slash_kprod *p, int timeout_ms)
