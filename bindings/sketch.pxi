# sketch.pxi - the sketches' inputs: stable 64-bit hashes of value columns
# (hll.h), computed in C without the GIL; 0 stands for a null.
import numpy as _np

HLL_P_MIN = SLASH_HLL_P_MIN
HLL_P_MAX = SLASH_HLL_P_MAX
COUNT_DISTINCT_MAX = SLASH_DISTINCT_MAX


cdef slash_agg_kind hll_kind(object p) except *:
    if not isinstance(p, int) or not SLASH_HLL_P_MIN <= p <= SLASH_HLL_P_MAX:
        raise _errors.InvalidArgument(f"HyperLogLog precision must be in {SLASH_HLL_P_MIN}.."
                                      f"{SLASH_HLL_P_MAX}, got {p!r}")
    return <slash_agg_kind>(<int>SLASH_AGG_HLL + <int>p)


cdef slash_agg_kind quantile_kind(object q) except *:
    if not isinstance(q, int) or not 0 <= q <= SLASH_QS_Q_SCALE:
        raise _errors.InvalidArgument(f"a quantile must be in 0..{SLASH_QS_Q_SCALE} "
                                      f"(1/{SLASH_QS_Q_SCALE}), got {q!r}")
    return <slash_agg_kind>(<int>SLASH_AGG_QUANTILE + <int>q)


def hll_precision(double rsd):
    """Spark's precision for a relative standard deviation: ceil(2 log2(1.106 / rsd)), 0 if rsd is not in (0, 1)."""
    return slash_hll_precision(rsd)


class RawValues:
    """A sketch's input column as its own values (a C-contiguous int64 or
    float64 array without nulls), which the fold hashes as it adds them
    (slash_ssb_batch.hash_raw) instead of reading a column of hashes made
    in a pass of its own. Rows select as an array's do."""

    __slots__ = ("values",)

    def __init__(self, values):
        if values.dtype != _np.int64 and values.dtype != _np.float64:
            raise _errors.InvalidArgument(f"raw sketch values must be int64 or float64, got "
                                          f"{values.dtype}")
        self.values = _np.ascontiguousarray(values)

    def __len__(self):
        return len(self.values)

    def __getitem__(self, rows):
        return RawValues(self.values[rows])


def hll_hash_values(values, valid=None):
    """int64 hashes (as int64) of a C-contiguous int64 or float64 array;
    valid: None or one uint8 a row (0: null, hashed to 0)."""
    cdef size_t n = values.shape[0]
    out = _np.empty(n, _np.int64)
    if n == 0:
        return out
    cdef int64_t[::1] o = out
    cdef const int64_t[::1] vi
    cdef const double[::1] vf
    cdef const uint8_t[::1] ok
    cdef const uint8_t *okp = NULL
    cdef const void *vp
    cdef int is_f64 = values.dtype == _np.float64
    if valid is not None:
        ok = valid
        if <size_t>ok.shape[0] != n:
            raise _errors.InvalidArgument(f"validity has {ok.shape[0]} rows, the values {n}")
        okp = &ok[0]
    if is_f64:
        vf = values
        vp = &vf[0]
    else:
        vi = values
        vp = &vi[0]
    with nogil:
        slash_hll_hash_column(vp, is_f64, okp, n, <uint64_t *>&o[0])
    return out


def hll_hash_strings(offsets, data, valid=None):
    """int64 hashes of byte strings given as n + 1 int64 offsets into uint8
    data; valid as for hll_hash_values."""
    cdef const int64_t[::1] off = offsets
    cdef size_t n = off.shape[0] - 1
    out = _np.empty(n, _np.int64)
    if n == 0:
        return out
    if off[0] < 0 or off[n] > <int64_t>len(data) or off[n] < off[0]:
        raise _errors.InvalidArgument("string offsets point outside their data")
    cdef int64_t[::1] o = out
    cdef const uint8_t[::1] d = data if len(data) else _np.zeros(1, _np.uint8)
    cdef const uint8_t[::1] ok
    cdef const uint8_t *okp = NULL
    if valid is not None:
        ok = valid
        okp = &ok[0]
    with nogil:
        slash_hll_hash_strings(&off[0], &d[0], okp, n, <uint64_t *>&o[0])
    return out
