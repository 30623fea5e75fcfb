# pq.pxi - the core's reader of Parquet integer column chunks (pq_read.h):
# one reader (its scratch) per reading thread, decoding without the GIL into
# buffers the caller owns.

PQ_INT32 = SLASH_PQ_INT32
PQ_INT64 = SLASH_PQ_INT64
PQ_UNCOMPRESSED = SLASH_PQ_UNCOMPRESSED
PQ_SNAPPY = SLASH_PQ_SNAPPY


cdef class ParquetChunkReader:
    """Decodes one column chunk of integers into caller-owned memory.

    :meth:`read_fd` and :meth:`decode` return the chunk's null count, or -1
    when the chunk holds a page the core does not decode or bytes that are
    not a valid chunk (``reason`` then says which): the caller reads that
    chunk with a full Parquet reader instead. Not for use by two threads at
    once (its scratch is reused from call to call)."""
    cdef slash_pq_reader *r
    cdef public str reason

    def __cinit__(self):
        cdef slash_status st = slash_pq_reader_new(&self.r)
        if st != SLASH_OK:
            raise convert_error(st)
        self.reason = ""

    def __dealloc__(self):
        slash_pq_reader_free(self.r)
        self.r = NULL

    cdef int64_t _finish(self, slash_status st, int64_t nulls) except -2:
        if st == SLASH_OK:
            return nulls
        if st == SLASH_ENOTSUP or st == SLASH_EPROTO or st == SLASH_ESYS:
            self.reason = f"{slash_strerror(st).decode()}: {slash_last_error().decode()}"
            slash_clear_error()
            return -1
        raise convert_error(st)

    cdef int _chunk(self, slash_pq_chunk *c, int physical, int codec, int max_def,
                    int64_t rows, uint8_t[::1] out, int width, valid) except -1:
        c.physical, c.codec, c.max_def, c.num_values = physical, codec, max_def, rows
        if width not in (4, 8) or <size_t>out.shape[0] < <size_t>(rows * width):
            raise _errors.InvalidArgument(f"output of {out.shape[0]} bytes for {rows} values "
                                          f"of {width} bytes")
        if valid is not None and len(valid) < (rows + 7) // 8:
            raise _errors.InvalidArgument(f"validity of {len(valid)} bytes for {rows} values")
        return 0

    def read_fd(self, int fd, int64_t offset, int64_t length, int physical, int codec,
                int max_def, int64_t rows, uint8_t[::1] out, int width, valid=None):
        """Reads the chunk at [offset, offset + length) of open file ``fd``
        (pread) and decodes its ``rows`` values into ``out`` (``width`` bytes
        each), presence bits into ``valid`` (writable bytes, or None)."""
        cdef slash_pq_chunk c
        self._chunk(&c, physical, codec, max_def, rows, out, width, valid)
        cdef uint8_t[::1] v
        cdef uint8_t *vp = NULL
        if valid is not None and rows > 0:
            v = valid
            vp = &v[0]
        cdef int64_t nulls = 0
        cdef void *op = &out[0] if out.shape[0] else NULL
        cdef slash_status st
        with nogil:
            st = slash_pq_read_fd(self.r, fd, offset, length, &c, op, width, vp, &nulls)
        return self._finish(st, nulls)

    def decode(self, const uint8_t[::1] data, int physical, int codec, int max_def,
               int64_t rows, uint8_t[::1] out, int width, valid=None):
        """:meth:`read_fd` of a chunk already in memory (``data``)."""
        cdef slash_pq_chunk c
        self._chunk(&c, physical, codec, max_def, rows, out, width, valid)
        cdef uint8_t[::1] v
        cdef uint8_t *vp = NULL
        if valid is not None and rows > 0:
            v = valid
            vp = &v[0]
        cdef int64_t nulls = 0
        cdef void *op = &out[0] if out.shape[0] else NULL
        cdef const uint8_t *dp = &data[0] if data.shape[0] else NULL
        cdef slash_status st
        with nogil:
            st = slash_pq_decode(self.r, dp, <size_t>data.shape[0], &c, op, width, vp, &nulls)
        return self._finish(st, nulls)
