# join.pxi - JoinStore: the Python face of slash_join (windowed join state of
# one executor: append-sets of left and right rows per (window, key)). Column
# checks happen in slash.join before these calls; here every column is a
# C-contiguous NumPy array of the right dtype, and a whole batch is appended
# in C without the GIL. Key columns are pointed at by the state backend's
# fill_batch, delta views and emit results reuse its buffer classes.

cdef class _JoinDeltaView(DeltaView):
    """A DeltaView over a join store's sealed delta (keeps the store's count
    of live views)."""
    cdef JoinStore jstore

    def __dealloc__(self):
        if self.jstore is not None:
            self.jstore.exports -= 1


cdef class _JoinEmitResult(_EmitResult):
    """Owns one slash_join_result; its columns are NumPy views keeping it alive."""
    cdef slash_join_result *jr

    def __dealloc__(self):
        slash_join_result_free(self.jr)


cdef list fill_join_config(slash_join_config *cfg, str window_kind, int64_t size, str key_type,
                           int partitions, list left_types, list right_types, band=None):
    """Fills a slash_join_config; returns [left types, right types]. ``band``:
    None, or (left column, right column, lo, hi): an emit gives only the
    pairs whose two int64 columns differ by lo..hi."""
    memset(cfg, 0, sizeof(cfg[0]))
    if window_kind not in ("tumbling", "session"):
        raise _errors.InvalidArgument(f"a join window must be tumbling or session, "
                                      f"got {window_kind!r}")
    check(slash_window_init(&cfg.window, _WINDOW_KINDS[window_kind], size, size))
    if key_type not in ("int64", "bytes"):
        raise _errors.InvalidArgument(f"key_type must be 'int64' or 'bytes', got {key_type!r}")
    cfg.key_type = SLASH_KEY_INT64 if key_type == "int64" else SLASH_KEY_BYTES
    if partitions < 1:
        raise _errors.InvalidArgument(f"partitions must be >= 1, got {partitions}")
    cfg.partitions = partitions
    types = [list(left_types), list(right_types)]
    for side in range(2):
        if len(types[side]) > SLASH_JOIN_MAX_COLS:
            raise _errors.InvalidArgument(f"at most {SLASH_JOIN_MAX_COLS} columns per side, "
                                          f"got {len(types[side])}")
        cfg.ncols[side] = len(types[side])
        for c, t in enumerate(types[side]):
            if t not in ("int64", "float64"):
                raise _errors.InvalidArgument(f"column type must be 'int64' or 'float64', got {t!r}")
            cfg.cols[side][c] = SLASH_JOIN_I64 if t == "int64" else SLASH_JOIN_F64
    if band is not None:
        cfg.band = 1
        cfg.band_col[0], cfg.band_col[1], cfg.band_lo, cfg.band_hi = band
    return types


cdef object join_result_arrays(slash_join_result *r, bint string_keys, list types):
    """Takes ownership of r: (window_start, window_end, keys, [left columns],
    [right columns]) as NumPy views that keep r alive."""
    cdef _JoinEmitResult res = _JoinEmitResult.__new__(_JoinEmitResult)
    res.jr = r
    cdef size_t n = r.rows
    ws = res.column(r.window_start, n * 8, _np.int64)
    we = res.column(r.window_end, n * 8, _np.int64)
    if string_keys:
        keys = (res.column(r.key_offsets, (n + 1) * 8, _np.int64),
                res.column(r.key_data, r.key_data_len, _np.uint8))
    else:
        keys = res.column(r.keys, n * 8, _np.int64)
    sides = []
    for side in range(2):
        sides.append([res.column(r.columns[side][c], n * 8,
                                 _np.float64 if t == "float64" else _np.int64)
                      for c, t in enumerate(types[side])])
    return ws, we, keys, sides[0], sides[1]


cdef list fill_join_batch(slash_join_batch *b, int side, list types, times, keys, list columns,
                          key_offsets, key_data):
    """Points a slash_join_batch at one side's C-contiguous NumPy columns;
    returns the memoryviews that must stay alive while b is used."""
    cdef slash_ssb_batch kb
    keep = fill_batch(&kb, times, keys, [], key_offsets, key_data)
    memset(b, 0, sizeof(b[0]))
    b.side = <slash_join_side>side
    b.n = kb.n
    if b.n == 0:
        return keep
    b.times = kb.times
    b.keys = kb.keys
    b.key_offsets = kb.key_offsets
    b.key_offsets_64 = kb.key_offsets_64
    b.key_data = kb.key_data
    cdef const int64_t[::1] vi
    cdef const double[::1] vf
    for c, col in enumerate(columns):
        if col.shape[0] != b.n:
            raise _errors.InvalidArgument(f"column {c} has {col.shape[0]} values, "
                                          f"the batch has {b.n}")
        if types[c] == "float64":
            vf = col
            b.columns[c] = &vf[0]
            keep.append(vf)
        else:
            vi = col
            b.columns[c] = &vi[0]
            keep.append(vi)
    return keep


cdef class JoinStore(_Closeable):
    """Low-level join state; use :class:`slash.JoinBackend` instead.

    ``left_types``/``right_types`` list each side's column types, ``"int64"``
    or ``"float64"``.
    """
    cdef slash_join *s
    cdef int exports
    cdef readonly bint string_keys
    cdef list _types

    def __init__(self, str window_kind, int64_t size, str key_type, int partitions,
                 list left_types, list right_types, band=None, size_t log_reserve=0):
        cdef slash_join_config cfg
        self._types = fill_join_config(&cfg, window_kind, size, key_type, partitions,
                                       left_types, right_types, band)
        cfg.log_reserve = log_reserve
        self.string_keys = cfg.key_type == SLASH_KEY_BYTES
        cdef slash_status st
        with nogil:
            st = slash_join_open(&cfg, &self.s)
        check(st)

    cdef bint _is_open(self):
        return self.s != NULL

    cdef void _close_native(self):
        if self.s != NULL and self.exports == 0:
            slash_join_close(self.s)
            self.s = NULL

    def close(self):
        """Frees the store. Fails while a delta view is still alive."""
        if self.exports:
            raise _errors.InvalidState("close: a delta view of this join store is still alive")
        _Closeable.close(self)

    cdef slash_join *ptr(self) except NULL:
        if self.s == NULL:
            raise _errors.InvalidState("join store is closed")
        return self.s

    def update(self, int side, times, keys, list columns, key_offsets=None, key_data=None):
        """Appends one side's batch (0 left, 1 right); arrays are C-contiguous
        int64/float64 of one length, checked by the caller."""
        cdef slash_join *s = self.ptr()
        if side != 0 and side != 1:
            raise _errors.InvalidArgument(f"side must be 0 (left) or 1 (right), got {side}")
        if len(columns) != len(self._types[side]):
            raise _errors.InvalidArgument(f"expected {len(self._types[side])} columns, "
                                          f"got {len(columns)}")
        cdef slash_join_batch b
        keep = fill_join_batch(&b, side, self._types[side], times, keys, columns, key_offsets,
                               key_data)
        if b.n == 0:
            return
        cdef slash_status st
        with nogil:
            st = slash_join_update(s, &b)
        check(st)

    def begin_epoch(self):
        check(slash_join_begin_epoch(self.ptr()))

    def delta(self, uint32_t partition):
        cdef const void *addr
        cdef size_t length
        check(slash_join_delta(self.ptr(), partition, &addr, &length))
        cdef _JoinDeltaView v = _JoinDeltaView.__new__(_JoinDeltaView)
        v.jstore = self
        v.addr = <const char *>addr
        v.length = length
        self.exports += 1
        return v

    def merge_delta(self, region):
        cdef const uint8_t[::1] r = region
        cdef slash_join *s = self.ptr()
        cdef slash_status st
        cdef size_t n = r.shape[0]
        if n == 0:
            return
        with nogil:
            st = slash_join_merge_delta(s, &r[0], n)
        check(st)

    def reset_delta(self):
        if self.exports:
            raise _errors.InvalidState("reset_delta: release the delta views first "
                                       "(their memory is given back)")
        check(slash_join_reset_delta(self.ptr()))

    def emit(self, int64_t up_to):
        """Returns (window_start, window_end, keys, [left columns], [right
        columns]) as NumPy arrays viewing the core's result without a copy;
        keys is int64 or an (offsets int64, data uint8) pair."""
        cdef slash_join *s = self.ptr()
        cdef slash_join_result *r = NULL
        cdef slash_status st
        with nogil:
            st = slash_join_emit(s, up_to, &r)
        check(st)
        return join_result_arrays(r, self.string_keys, self._types)

    def stats(self):
        cdef slash_join_stats st
        slash_join_get_stats(self.ptr(), &st)
        return {"groups": st.groups, "left_rows": st.rows[0], "right_rows": st.rows[1],
                "chunks": st.chunks, "late": st.late, "epoch": st.epoch,
                "memory_bytes": st.memory_bytes, "log_bytes": st.log_bytes,
                "index_bytes": st.index_bytes, "sealed": bool(st.sealed),
                "watermark": slash_join_watermark(self.s)}


# -- string/binary payload words ---------------------------------------------------------
# A join carries a string or binary payload value as `words` int64 columns:
# per row the value's length (2 bytes, little-endian) then its bytes,
# zero-padded to 8 * words bytes (slash.query packs and unpacks with these).

def pack_payload_bytes(const int64_t[::1] offsets, const uint8_t[::1] data, int words):
    """Packs the n values data[offsets[i]:offsets[i+1]] (each at most
    8 * words - 2 bytes, else InvalidArgument) into a (words, n) int64
    array: row j is the j-th word column."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    out = _np.zeros((words, n), _np.int64)
    cdef int64_t[:, ::1] w = out
    cdef uint8_t row[8 * 64]
    cdef Py_ssize_t i, lo, ln
    cdef int j, width = 8 * words
    if words < 1 or words > 64:
        raise _errors.InvalidArgument(f"words must be in 1..64, got {words}")
    if n <= 0:
        return out
    if offsets[0] < 0 or offsets[n] > data.shape[0]:
        raise _errors.InvalidArgument("offsets reach beyond the data")
    for i in range(n):
        ln = offsets[i + 1] - offsets[i]
        if ln < 0 or ln > width - 2:
            raise _errors.InvalidArgument(f"value {i} is {ln} bytes: not in 0..{width - 2}")
    with nogil:
        for i in range(n):
            lo = offsets[i]
            ln = offsets[i + 1] - lo
            memset(row, 0, width)
            row[0] = <uint8_t>(ln & 0xFF)
            row[1] = <uint8_t>(ln >> 8)
            if ln:
                memcpy(row + 2, &data[lo], ln)
            for j in range(words):
                memcpy(&w[j, i], row + 8 * j, 8)
    return out


def unpack_payload_bytes(list columns):
    """The inverse of pack_payload_bytes: (int64 offsets of n + 1, uint8
    data) from the word columns (C-contiguous int64 arrays of one length)."""
    cdef int words = len(columns), j
    if words < 1 or words > 64:
        raise _errors.InvalidArgument(f"expected 1..64 word columns, got {words}")
    cdef const int64_t *cols[64]
    keep = [_np.ascontiguousarray(c, _np.int64) for c in columns]
    cdef const int64_t[::1] v
    cdef Py_ssize_t n = keep[0].shape[0], i, total = 0, ln
    for j in range(words):
        if keep[j].shape[0] != n:
            raise _errors.InvalidArgument("word columns differ in length")
        v = keep[j]
        cols[j] = &v[0] if n else NULL
    offs = _np.empty(n + 1, _np.int64)
    cdef int64_t[::1] o = offs
    cdef int width = 8 * words
    cdef uint8_t row[8 * 64]
    o[0] = 0
    for i in range(n):
        ln = cols[0][i] & 0xFFFF
        if ln > width - 2:
            raise _errors.ProtocolError(f"a joined value claims {ln} bytes in {width - 2} bytes "
                                        "of room: the payload words are corrupt")
        total += ln
        o[i + 1] = total
    data = _np.empty(total, _np.uint8)
    cdef uint8_t[::1] d = data
    with nogil:
        for i in range(n):
            ln = o[i + 1] - o[i]
            if not ln:
                continue
            for j in range((ln + 2 + 7) // 8):
                memcpy(row + 8 * j, &cols[j][i], 8)
            memcpy(&d[o[i]], row + 2, ln)
    return offs, data
