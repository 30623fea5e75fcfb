# exec.pxi - ExecutorCore: the Python face of slash_exec (one executor of a
# group) and of joining its group. Column checks happen in slash.executor;
# here batches go to C without the GIL, and fired results come back as NumPy
# views of the core's result buffers.
from libc.stdlib cimport malloc, free


@cython.no_gc_clear  # its parent must outlive it, even in a GC cycle
cdef class ExecutorCore(_Closeable):
    """Low-level executor; use :class:`slash.Executor` instead."""
    cdef slash_exec *ex
    cdef bint string_keys
    cdef bint is_join
    cdef list result_f64   # aggregates: per aggregate, float64 result?
    cdef list join_types   # joins: [left types, right types]
    cdef readonly Transport transport  # the group's channels live on it: keep it open

    def __init__(self, Listener listener, uint32_t rank, list addresses, str token,
                 tuple state_args, int64_t lateness_ms, uint64_t epoch_bytes, uint32_t epoch_ms,
                 size_t buffer_size, uint32_t credits, timeout, str mode="slash",
                 str kind="aggregate", str own_rows="auto"):
        cdef slash_exec_config cfg
        memset(&cfg, 0, sizeof(cfg))
        if kind == "aggregate":
            wkind, size, slide, key_type, partitions, aggs = state_args
            self.result_f64 = fill_ssb_config(&cfg.state, wkind, size, slide, key_type, partitions,
                                              aggs)
            self.string_keys = cfg.state.key_type == SLASH_KEY_BYTES
        elif kind == "join":
            wkind, size, key_type, partitions, left_types, right_types, band = state_args
            self.join_types = fill_join_config(&cfg.join, wkind, size, key_type, partitions,
                                               left_types, right_types, band)
            self.string_keys = cfg.join.key_type == SLASH_KEY_BYTES
            self.is_join = True
            cfg.kind = SLASH_EXEC_JOIN
        else:
            raise _errors.InvalidArgument(f"kind must be 'aggregate' or 'join', got {kind!r}")
        cfg.lateness_ms = lateness_ms
        cfg.epoch_bytes = epoch_bytes
        cfg.epoch_ms = epoch_ms
        cfg.timeout_ms = timeout_ms(timeout)
        if mode not in ("slash", "repartition"):
            raise _errors.InvalidArgument(f"mode must be 'slash' or 'repartition', got {mode!r}")
        cfg.mode = SLASH_EXEC_SLASH if mode == "slash" else SLASH_EXEC_REPARTITION
        own = {"auto": SLASH_OWN_AUTO, "local": SLASH_OWN_LOCAL, "leader": SLASH_OWN_LEADER}
        if own_rows not in own:
            raise _errors.InvalidArgument(f"own_rows must be 'auto', 'local' or 'leader', got {own_rows!r}")
        cfg.own_rows = own[own_rows]
        cdef slash_channel_config cc
        cc.buffer_size = buffer_size
        cc.credits = credits
        check(slash_channel_config_check(&cc))
        cdef uint32_t n = len(addresses)
        encoded = [to_bytes(a, "address") for a in addresses]
        tok = to_bytes(token, "token")
        cdef const char **addrs = <const char **>malloc(max(n, 1) * sizeof(char *))
        if addrs == NULL:
            raise MemoryError()
        cdef slash_group *g = NULL
        cdef slash_status st
        cdef slash_listener *l = listener.ptr()
        cdef const char *t = tok
        cdef int tmo = cfg.timeout_ms
        try:
            for i in range(n):
                addrs[i] = <const char *>encoded[i]
            with nogil:
                st = slash_group_join(l, rank, n, addrs, t, &cc, tmo, &g)
        finally:
            free(addrs)
        check(st)
        cdef const char *why = NULL
        cdef uint32_t refused = slash_group_refused(g, &why)
        if refused:
            import logging
            logging.getLogger("slash.executor").warning(
                "rank %d: refused and closed %d connection(s) that were not group members "
                "(last: %s)", rank, refused, why.decode(errors="replace"))
        with nogil:
            st = slash_exec_open(g, &cfg, &self.ex)
        check(st)
        self.transport = listener.transport
        self.transport._children.add(self)

    cdef bint _is_open(self):
        return self.ex != NULL

    cdef void _close_native(self):
        if self.ex != NULL:
            with nogil:
                slash_exec_close(self.ex)
            self.ex = NULL

    def __dealloc__(self):
        self._finalize()

    cdef slash_exec *ptr(self) except NULL:
        if self.ex == NULL:
            raise _errors.InvalidState("executor is closed")
        return self.ex

    def push(self, times, keys, list values, key_offsets=None, key_data=None, bint want_late=False,
             skip=None):
        """Applies one batch (only the rows where ``skip`` is 0, if given);
        returns (number of late records, uint8 mask or None)."""
        cdef slash_exec *ex = self.ptr()
        cdef slash_ssb_batch b
        keep = fill_batch(&b, times, keys, values, key_offsets, key_data, skip)
        cdef size_t n_late = 0
        cdef uint8_t[::1] m
        cdef uint8_t *mp = NULL
        mask = None
        if want_late and b.n:
            mask = _np.zeros(b.n, _np.uint8)
            m = mask
            mp = &m[0]
        cdef slash_status st
        with nogil:
            st = slash_exec_push(ex, &b, mp, &n_late)
        check(st)
        return n_late, mask

    def push_join(self, int side, times, keys, list columns, key_offsets=None, key_data=None,
                  bint want_late=False):
        """Applies one side's batch (0 left, 1 right); returns (late count, mask or None)."""
        cdef slash_exec *ex = self.ptr()
        if side != 0 and side != 1:
            raise _errors.InvalidArgument(f"side must be 0 (left) or 1 (right), got {side}")
        cdef slash_join_batch b
        keep = fill_join_batch(&b, side, self.join_types[side], times, keys, columns, key_offsets,
                               key_data)
        cdef size_t n_late = 0
        cdef uint8_t[::1] m
        cdef uint8_t *mp = NULL
        mask = None
        if want_late and b.n:
            mask = _np.zeros(b.n, _np.uint8)
            m = mask
            mp = &m[0]
        cdef slash_status st
        with nogil:
            st = slash_exec_push_join(ex, &b, mp, &n_late)
        check(st)
        return n_late, mask

    def advance(self, int64_t watermark):
        check(slash_exec_advance(self.ptr(), watermark))

    def set_lateness(self, int64_t lateness):
        check(slash_exec_set_lateness(self.ptr(), lateness))

    def set_standby(self, follow):
        """None: active; else a bytes of one 0/1 per rank (exec.h)."""
        cdef const uint8_t *fp = NULL
        cdef bytes fb
        cdef slash_exec_metrics m
        if follow is not None:
            slash_exec_get_metrics(self.ptr(), &m)
            fb = bytes(follow)
            if len(fb) != m.size:
                raise _errors.InvalidArgument(f"standby: follow needs {m.size} entries, got {len(fb)}")
            fp = <const uint8_t *>fb
        check(slash_exec_set_standby(self.ptr(), fp))

    def set_epoch(self, uint32_t epoch_ms, uint64_t epoch_bytes):
        check(slash_exec_set_epoch(self.ptr(), epoch_ms, epoch_bytes))

    def end_epoch(self):
        cdef slash_exec *ex = self.ptr()
        cdef slash_status st
        with nogil:
            st = slash_exec_end_epoch(ex)
        check(st)

    def poll(self, timeout):
        cdef slash_exec *ex = self.ptr()
        cdef int tmo = timeout_ms(timeout)
        cdef slash_status st
        with nogil:
            st = slash_exec_poll(ex, tmo)
        check(st)

    def finish(self):
        cdef slash_exec *ex = self.ptr()
        cdef slash_status st
        with nogil:
            st = slash_exec_finish(ex)
        check(st)

    @property
    def finished(self):
        return bool(slash_exec_finished(self.ptr()))

    def take(self):
        """Every fired result not yet taken, as (ws, we, keys, [columns]) tuples."""
        cdef slash_exec *ex = self.ptr()
        cdef slash_ssb_result *r
        cdef slash_join_result *jr
        out = []
        while True:
            if self.is_join:
                slash_exec_take_join(ex, &jr)
                if jr == NULL:
                    return out
                out.append(join_result_arrays(jr, self.string_keys, self.join_types))
            else:
                slash_exec_take(ex, &r)
                if r == NULL:
                    return out
                out.append(result_arrays(r, self.string_keys, self.result_f64))

    def request_checkpoint(self, uint64_t ckpt_id):
        """Asks for checkpoint ``ckpt_id``; it is taken at the next safe point."""
        cdef slash_exec *ex = self.ptr()
        cdef slash_status st
        with nogil:
            st = slash_exec_request_checkpoint(ex, ckpt_id)
        check(st)

    def take_checkpoint(self):
        """The oldest completed checkpoint as (id, pushes, rank, meta, {partition: blob}),
        or None."""
        cdef slash_exec *ex = self.ptr()
        cdef slash_ckpt *ck = NULL
        cdef const void *p
        cdef size_t n
        cdef uint32_t part
        check(slash_exec_take_checkpoint(ex, &ck))
        if ck == NULL:
            return None
        try:
            slash_ckpt_meta(ck, &p, &n)
            meta = (<const char *>p)[:n]
            parts = {}
            for i in range(slash_ckpt_parts(ck)):
                check(slash_ckpt_part(ck, i, &part, &p, &n))
                parts[part] = (<const char *>p)[:n]
            return (slash_ckpt_id(ck), slash_ckpt_pushes(ck), slash_ckpt_rank(ck), meta, parts)
        finally:
            slash_ckpt_free(ck)

    def restore_meta(self, bytes meta):
        """Restores one rank's META blob of a checkpoint (before any push)."""
        cdef slash_exec *ex = self.ptr()
        cdef const char *p = meta
        cdef size_t n = len(meta)
        cdef slash_status st
        with nogil:
            st = slash_exec_restore_meta(ex, p, n)
        check(st)

    def restore_partition(self, uint32_t partition, bytes blob):
        """Restores one partition blob this executor leads (before any push)."""
        cdef slash_exec *ex = self.ptr()
        cdef const char *p = blob
        cdef size_t n = len(blob)
        cdef slash_status st
        with nogil:
            st = slash_exec_restore_partition(ex, partition, p, n)
        check(st)

    def move_partitions(self, list parts, list ranks):
        """Moves leadership of parts[i] to ranks[i] (rank 0 only; exec.h)."""
        cdef slash_exec *ex = self.ptr()
        cdef uint32_t k = len(parts)
        cdef uint32_t *pp = <uint32_t *>malloc(max(k, 1) * sizeof(uint32_t))
        cdef uint32_t *rr = <uint32_t *>malloc(max(k, 1) * sizeof(uint32_t))
        cdef slash_status st
        if pp == NULL or rr == NULL:
            free(pp)
            free(rr)
            raise MemoryError()
        try:
            for i in range(k):
                pp[i] = parts[i]
                rr[i] = ranks[i]
            with nogil:
                st = slash_exec_move_partitions(ex, pp, rr, k)
        finally:
            free(pp)
            free(rr)
        check(st)

    def leader_map(self):
        """(version, leaders): the leader map this executor follows."""
        cdef slash_exec *ex = self.ptr()
        cdef slash_exec_metrics m
        cdef uint64_t version = 0
        slash_exec_get_metrics(ex, &m)
        cdef uint32_t *out = <uint32_t *>malloc(max(m.partitions, 1) * sizeof(uint32_t))
        if out == NULL:
            raise MemoryError()
        try:
            slash_exec_leader_map(ex, &version, out)
            return version, [out[i] for i in range(m.partitions)]
        finally:
            free(out)

    def restore_map(self, list leaders):
        """Sets the leader map before any push (a restore; exec.h)."""
        cdef slash_exec *ex = self.ptr()
        cdef slash_exec_metrics m
        slash_exec_get_metrics(ex, &m)
        if len(leaders) != m.partitions:
            raise _errors.InvalidArgument(f"the leader map needs {m.partitions} entries, got {len(leaders)}")
        cdef uint32_t *lp = <uint32_t *>malloc(max(m.partitions, 1) * sizeof(uint32_t))
        cdef slash_status st
        if lp == NULL:
            raise MemoryError()
        try:
            for i in range(m.partitions):
                lp[i] = leaders[i]
            st = slash_exec_restore_map(ex, lp)
        finally:
            free(lp)
        check(st)

    def metrics(self):
        cdef slash_exec_metrics m
        slash_exec_get_metrics(self.ptr(), &m)
        return {
            "rank": m.rank, "size": m.size, "partitions": m.partitions,
            "led_partitions": m.led_partitions, "records_in": m.records_in,
            "bytes_in": m.bytes_in, "late_records": m.late_records, "epochs": m.epochs,
            "delta_bytes_sent": m.delta_bytes_sent,
            "delta_bytes_received": m.delta_bytes_received, "deltas_merged": m.deltas_merged,
            "records_shipped": m.records_shipped, "own_rows_direct": m.own_rows_direct,
            "epochs_routed": m.epochs_routed,
            "merge_seconds": m.merge_ns / 1e9, "sync_seconds": m.sync_ns / 1e9,
            "credit_stalls": m.credit_stalls, "rows_emitted": m.rows_emitted,
            "watermark": m.watermark, "group_watermark": m.group_watermark,
            "slowest_rank": m.slowest_rank, "map_version": m.map_version,
            "moves": m.moves_in, "moves_out": m.moves_out, "moved_bytes": m.moved_bytes_in,
            "moved_bytes_out": m.moved_bytes_out, "move_pause_ns": m.move_pause_ns,
            "held_partitions": m.held_partitions,
        }
