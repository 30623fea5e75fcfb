# ssb.pxi - StateStore: the Python face of slash_ssb (one state backend with
# its key partitions), and DeltaView, a zero-copy buffer over a sealed delta.
# Column checks (dtypes, nulls, lengths) happen in slash.state before these
# calls; here every column is already a C-contiguous NumPy array of the right
# dtype, and the whole batch is folded in C without the GIL.
from cpython.buffer cimport PyBuffer_FillInfo
from libc.string cimport memcpy, memset
from libc.stdint cimport int32_t
import numpy as _np

_AGG_KINDS = {
    ("count", None): SLASH_AGG_COUNT,
    ("sum", "int64"): SLASH_AGG_SUM_I64, ("sum", "float64"): SLASH_AGG_SUM_F64,
    ("min", "int64"): SLASH_AGG_MIN_I64, ("min", "float64"): SLASH_AGG_MIN_F64,
    ("max", "int64"): SLASH_AGG_MAX_I64, ("max", "float64"): SLASH_AGG_MAX_F64,
    ("avg", "int64"): SLASH_AGG_AVG_I64, ("avg", "float64"): SLASH_AGG_AVG_F64,
    ("first", "int64"): SLASH_AGG_FIRST_I64, ("first", "float64"): SLASH_AGG_FIRST_F64,
    ("last", "int64"): SLASH_AGG_LAST_I64, ("last", "float64"): SLASH_AGG_LAST_F64,
    ("count_distinct", "int64"): SLASH_AGG_COUNT_DISTINCT,  # over value hashes (sketch.pxi)
}
_WINDOW_KINDS = {"tumbling": SLASH_WINDOW_TUMBLING, "sliding": SLASH_WINDOW_SLIDING,
                 "session": SLASH_WINDOW_SESSION}


cdef list fill_ssb_config(slash_ssb_config *cfg, str window_kind, int64_t size, int64_t slide,
                           str key_type, int partitions, list aggregates):
    """Fills a slash_ssb_config; returns, per aggregate, whether its result is float64."""
    memset(cfg, 0, sizeof(cfg[0]))
    if window_kind not in _WINDOW_KINDS:
        raise _errors.InvalidArgument(f"window kind must be one of {sorted(_WINDOW_KINDS)}, "
                                      f"got {window_kind!r}")
    check(slash_window_init(&cfg.window, _WINDOW_KINDS[window_kind], size, slide))
    if key_type not in ("int64", "bytes"):
        raise _errors.InvalidArgument(f"key_type must be 'int64' or 'bytes', got {key_type!r}")
    cfg.key_type = SLASH_KEY_INT64 if key_type == "int64" else SLASH_KEY_BYTES
    if partitions < 1:
        raise _errors.InvalidArgument(f"partitions must be >= 1, got {partitions}")
    cfg.partitions = partitions
    if len(aggregates) > SLASH_SSB_MAX_AGGS:
        raise _errors.InvalidArgument(f"at most {SLASH_SSB_MAX_AGGS} aggregates, "
                                      f"got {len(aggregates)}")
    result_f64 = []
    for j, a in enumerate(aggregates):
        if a[0] == "hll":  # ("hll", precision): a sketch kind (sketch.pxi)
            cfg.aggs[j] = hll_kind(a[1])
        elif a[0] == "quantile":  # ("quantile", q in 1/10000)
            cfg.aggs[j] = quantile_kind(a[1])
        elif a not in _AGG_KINDS:
            raise _errors.InvalidArgument(f"unknown aggregate {a!r}")
        else:
            cfg.aggs[j] = _AGG_KINDS[a]
        result_f64.append(bool(slash_crdt_result_is_f64(cfg.aggs[j])))
    cfg.naggs = len(aggregates)
    return result_f64


# The columns of ones ones(n) hands out are views of this read-only array: a
# value column the fold finds inside it is all ones (slash_ssb_batch.ones)
_ONES = _np.ones(0, _np.int64)
_ONES.flags.writeable = False


def ones(size_t n):
    """A read-only int64 column of n ones: the validity of a value column
    without nulls. fill_batch tells the fold such a column is all ones, so
    it costs a count nothing more a record (slash_ssb_batch.ones)."""
    global _ONES
    if n > <size_t>_ONES.shape[0]:
        _ONES = _np.ones(max(n, 2 * <size_t>_ONES.shape[0], 1 << 16), _np.int64)
        _ONES.flags.writeable = False
    return _ONES[:n]


cdef bint is_ones(const int64_t *p, size_t n):
    """Whether the n values at p lie inside the current _ONES."""
    cdef const int64_t[::1] o = _ONES
    if o.shape[0] == 0:
        return False
    return &o[0] <= p and p + n <= &o[0] + o.shape[0]


cdef list fill_batch(slash_ssb_batch *b, times, keys, list values, key_offsets, key_data,
                     skip=None):
    """Points a slash_ssb_batch at C-contiguous NumPy columns (int64 times and
    keys, or int32/int64 offsets + uint8 data; int64/float64 values; an
    optional uint8 selection, nonzero = row not selected). Returns the
    memoryviews that must stay alive while b is used."""
    memset(b, 0, sizeof(b[0]))
    cdef const uint8_t[::1] sk
    cdef const int64_t[::1] t = times
    cdef const int64_t[::1] k
    cdef const int32_t[::1] o32
    cdef const int64_t[::1] o64
    cdef const uint8_t[::1] kd
    cdef const int64_t[::1] vi
    cdef const double[::1] vf
    keep = [t]
    b.n = t.shape[0]
    if b.n == 0:
        return keep
    b.times = &t[0]
    if skip is not None:
        sk = skip
        if <size_t>sk.shape[0] != b.n:
            raise _errors.InvalidArgument(f"selection has {sk.shape[0]} rows, the batch {b.n}")
        b.skip = &sk[0]
        keep.append(sk)
    # every column is checked against the batch's length here, where C
    # pointers are taken: the core reads n rows of each without knowing more
    if keys is not None:
        k = keys
        if <size_t>k.shape[0] != b.n:
            raise _errors.InvalidArgument(f"keys have {k.shape[0]} values, the batch {b.n}")
        b.keys = &k[0]
        keep.append(k)
    else:
        if key_offsets is None or key_data is None:
            raise _errors.InvalidArgument("byte-string keys need key_offsets and key_data")
        if <size_t>len(key_offsets) != b.n + 1:
            raise _errors.InvalidArgument(f"key_offsets have {len(key_offsets)} values, a batch of "
                                          f"{b.n} needs {b.n + 1}")
        if key_offsets.dtype == _np.int64:
            o64 = key_offsets
            if o64[0] < 0 or o64[b.n] > <int64_t>len(key_data) or o64[b.n] < o64[0]:
                raise _errors.InvalidArgument("key_offsets point outside key_data")
            b.key_offsets = &o64[0]
            b.key_offsets_64 = 1
            keep.append(o64)
        else:
            o32 = key_offsets
            if o32[0] < 0 or o32[b.n] > <int64_t>len(key_data) or o32[b.n] < o32[0]:
                raise _errors.InvalidArgument("key_offsets point outside key_data")
            b.key_offsets = &o32[0]
            keep.append(o32)
        kd = key_data if len(key_data) else _np.zeros(1, _np.uint8)
        b.key_data = &kd[0]
        keep.append(kd)
    for j, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, RawValues):  # hashed in the fold (sketch.pxi)
            v = v.values
            b.hash_raw |= (<uint32_t>1) << j
            if v.dtype == _np.float64:
                b.raw_f64 |= (<uint32_t>1) << j
        if <size_t>v.shape[0] != b.n:
            raise _errors.InvalidArgument(f"value column {j} has {v.shape[0]} values, the batch {b.n}")
        if v.dtype == _np.float64:
            vf = v
            b.values[j] = &vf[0]
            keep.append(vf)
        else:
            vi = v
            b.values[j] = &vi[0]
            if is_ones(&vi[0], b.n):
                b.ones |= (<uint32_t>1) << j
            keep.append(vi)
    return keep


cdef object result_arrays(slash_ssb_result *r, bint string_keys, list result_f64):
    """Takes ownership of r and returns (window_start, window_end, keys,
    [columns]) as NumPy arrays viewing it without a copy; keys is int64 or an
    (offsets int64, data uint8) pair. r is freed with the last view."""
    cdef _EmitResult res = _EmitResult.__new__(_EmitResult)
    res.r = r
    cdef size_t n = r.rows
    ws = res.column(r.window_start, n * 8, _np.int64)
    we = res.column(r.window_end, n * 8, _np.int64)
    if string_keys:
        keys = (res.column(r.key_offsets, (n + 1) * 8, _np.int64),
                res.column(r.key_data, r.key_data_len, _np.uint8))
    else:
        keys = res.column(r.keys, n * 8, _np.int64)
    cols = [res.column(r.columns[j], n * 8, _np.float64 if result_f64[j] else _np.int64)
            for j in range(len(result_f64))]
    return ws, we, keys, cols


cdef class DeltaView:
    """Read-only buffer over one partition's sealed delta, without a copy.

    Valid until the store's ``reset_delta()``; the store refuses to reset or
    close while a view (or a memoryview of it) is alive.
    """
    cdef StateStore store
    cdef const char *addr
    cdef Py_ssize_t length
    cdef int views

    def __getbuffer__(self, Py_buffer *buf, int flags):
        PyBuffer_FillInfo(buf, self, <void *>self.addr, self.length, 1, flags)
        self.views += 1

    def __releasebuffer__(self, Py_buffer *buf):
        self.views -= 1

    def __len__(self):
        return self.length

    def __dealloc__(self):
        if self.store is not None:
            self.store.exports -= 1


cdef class StateStore(_Closeable):
    """Low-level state backend; use :class:`slash.StateBackend` instead."""
    cdef slash_ssb *s
    cdef int exports
    cdef readonly int naggs
    cdef readonly bint string_keys
    cdef list _result_f64

    def __init__(self, str window_kind, int64_t size, int64_t slide, str key_type,
                 int partitions, list aggregates, size_t log_reserve=0):
        cdef slash_ssb_config cfg
        self._result_f64 = fill_ssb_config(&cfg, window_kind, size, slide, key_type, partitions,
                                           aggregates)
        self.string_keys = cfg.key_type == SLASH_KEY_BYTES
        self.naggs = cfg.naggs
        cfg.log_reserve = log_reserve
        cdef slash_status st
        with nogil:
            st = slash_ssb_open(&cfg, &self.s)
        check(st)

    cdef bint _is_open(self):
        return self.s != NULL

    cdef void _close_native(self):
        if self.s != NULL and self.exports == 0:
            slash_ssb_close(self.s)
            self.s = NULL

    def close(self):
        """Frees the store. Fails while a delta view is still alive."""
        if self.exports:
            raise _errors.InvalidState("close: a delta view of this store is still alive")
        _Closeable.close(self)

    cdef slash_ssb *ptr(self) except NULL:
        if self.s == NULL:
            raise _errors.InvalidState("state backend is closed")
        return self.s

    def update(self, times, keys, list values, key_offsets=None, key_data=None):
        """Folds one batch; arrays are C-contiguous int64/float64 (checked by the caller)."""
        cdef slash_ssb *s = self.ptr()
        cdef slash_ssb_batch b
        keep = fill_batch(&b, times, keys, values, key_offsets, key_data)
        if b.n == 0:
            return
        cdef slash_status st
        with nogil:
            st = slash_ssb_update(s, &b)
        check(st)

    def begin_epoch(self):
        check(slash_ssb_begin_epoch(self.ptr()))

    def delta(self, uint32_t partition):
        cdef const void *addr
        cdef size_t length
        check(slash_ssb_delta(self.ptr(), partition, &addr, &length))
        cdef DeltaView v = DeltaView.__new__(DeltaView)
        v.store = self
        v.addr = <const char *>addr
        v.length = length
        self.exports += 1
        return v

    def merge_delta(self, region):
        cdef const uint8_t[::1] r = region
        cdef slash_ssb *s = self.ptr()
        cdef slash_status st
        cdef size_t n = r.shape[0]
        if n == 0:
            return
        with nogil:
            st = slash_ssb_merge_delta(s, &r[0], n)
        check(st)

    def reset_delta(self):
        if self.exports:
            raise _errors.InvalidState("reset_delta: release the delta views first "
                                       "(their memory is given back)")
        check(slash_ssb_reset_delta(self.ptr()))

    def emit(self, int64_t up_to):
        """Returns (window_start, window_end, keys, [columns]) as NumPy arrays
        viewing the core's result without a copy; keys is int64 or a
        (offsets int64, data uint8) pair."""
        cdef slash_ssb *s = self.ptr()
        cdef slash_ssb_result *r = NULL
        cdef slash_status st
        with nogil:
            st = slash_ssb_emit(s, up_to, &r)
        check(st)
        return result_arrays(r, self.string_keys, self._result_f64)

    def stats(self):
        cdef slash_ssb_stats st
        slash_ssb_get_stats(self.ptr(), &st)
        return {"records": st.records, "late": st.late, "epoch": st.epoch,
                "memory_bytes": st.memory_bytes, "log_bytes": st.log_bytes,
                "index_bytes": st.index_bytes, "record_bytes": st.record_bytes,
                "sealed": bool(st.sealed), "watermark": slash_ssb_watermark(self.s)}


cdef class _EmitResult:
    """Owns one slash_ssb_result; its columns are exported as NumPy views
    that keep it alive."""
    cdef slash_ssb_result *r

    cdef object column(self, void *addr, size_t length, dtype):
        cdef _ResultColumn c = _ResultColumn.__new__(_ResultColumn)
        c.owner = self
        c.addr = <char *>addr
        c.length = length if addr != NULL else 0
        return _np.frombuffer(c, dtype=dtype)

    def __dealloc__(self):
        slash_ssb_result_free(self.r)


cdef class _ResultColumn:
    cdef _EmitResult owner
    cdef char *addr
    cdef Py_ssize_t length

    def __getbuffer__(self, Py_buffer *buf, int flags):
        PyBuffer_FillInfo(buf, self, <void *>self.addr, self.length, 1, flags)

    def __releasebuffer__(self, Py_buffer *buf):
        pass
