# kafka.pxi - the core's Kafka reader (kafka_fetch.h): a consumer that reads a
# poll's records into one buffer and a few numpy arrays, with no Python object
# per record. slash.kafka_client wraps it (and falls back to confluent-kafka
# when the core was built without librdkafka).
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from libc.stdlib cimport malloc, free

KAFKA_EVENT_EOF = SLASH_KEVENT_EOF
KAFKA_EVENT_ERROR = SLASH_KEVENT_ERROR


def kafka_fetch_available():
    """Whether the core was built with librdkafka (its version, or None)."""
    return slash_kfetch_version().decode() if slash_kfetch_available() else None


def _kafka_setting(key, value):
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, (str, int, float)):
        return str(value).encode()
    raise _errors.InvalidArgument(f"Kafka setting {key!r} must be a string, number or bool for "
                                  f"the core's reader, got {type(value).__name__}")


cdef class KafkaFetcher:
    """A consumer of one topic, assigned partitions directly (no group, no
    commits), that reads a poll's records into one buffer.

    :meth:`fetch` returns ``(values, starts, partition, offset, timestamp,
    nulls, keys, key_starts, key_nulls, events)``: ``values`` one bytes object, the
    values ordered by partition (each partition's in offset order) and joined
    by ``sep`` (``b"\\n"`` for JSON lines, a newline inside a value made a
    space; ``b""``: back to back); value i is ``values[starts[i]:starts[i+1]
    - len(sep)]``; ``nulls`` (uint8) marks null values, None when there is
    none; ``keys``/``key_starts``/``key_nulls`` likewise (back to back) if asked, else
    None; ``events`` a list of ``(kind, partition, offset, code, fatal,
    message)`` for end-of-log (KAFKA_EVENT_EOF) and error events. Not for two
    threads at once."""
    cdef slash_kfetch *f
    cdef public str topic

    def __cinit__(self, str topic, dict config):
        self.f = NULL
        self.topic = topic
        items = [(str(k).encode(), _kafka_setting(k, v)) for k, v in config.items()]
        cdef size_t n = len(items)
        cdef const char **keys = <const char **>malloc((n + 1) * sizeof(char *))
        cdef const char **vals = <const char **>malloc((n + 1) * sizeof(char *))
        cdef slash_status st
        if keys == NULL or vals == NULL:
            free(keys)
            free(vals)
            raise MemoryError()
        try:
            for i, (k, v) in enumerate(items):
                keys[i] = <const char *>k
                vals[i] = <const char *>v
            t = topic.encode()
            st = slash_kfetch_new(t, keys, vals, n, &self.f)
        finally:
            free(keys)
            free(vals)
        check(st)

    def __dealloc__(self):
        if self.f != NULL:
            with nogil:
                slash_kfetch_free(self.f)
            self.f = NULL

    cdef slash_kfetch *_open(self) except NULL:
        if self.f == NULL:
            raise _errors.InvalidState(f"the Kafka reader of topic {self.topic!r} is closed")
        return self.f

    def close(self):
        """Closes the consumer (idempotent)."""
        if self.f != NULL:
            with nogil:
                slash_kfetch_free(self.f)
            self.f = NULL

    def assign(self, positions, bint incremental=False):
        """Reads ``positions`` ([(partition, offset)]) from now on (incremental:
        besides those assigned, else instead of them)."""
        cdef slash_kfetch *f = self._open()
        cdef int32_t[::1] parts = _np.array([p for p, _ in positions] or [0], _np.int32)
        cdef int64_t[::1] offs = _np.array([o for _, o in positions] or [0], _np.int64)
        cdef size_t n = len(positions)
        cdef int inc = incremental
        cdef slash_status st
        with nogil:
            st = slash_kfetch_assign(f, &parts[0], &offs[0], n, inc)
        check(st)

    def unassign(self):
        cdef slash_kfetch *f = self._open()
        cdef slash_status st
        with nogil:
            st = slash_kfetch_unassign(f)
        check(st)

    def fetch(self, size_t max_records, double timeout, bytes sep=b"\n", bint keys=False):
        cdef slash_kfetch *f = self._open()
        cdef int csep = sep[0] if sep else 0
        cdef int tmo = <int>(timeout * 1000)
        cdef size_t n = 0, vbytes = 0, kbytes = 0, i, nulls_n
        cdef slash_status st
        with nogil:
            st = slash_kfetch_poll(f, max_records, tmo, csep, &n, &vbytes,
                                   &kbytes if keys else NULL)
        check(st)
        cdef const slash_kevent *ev
        events = []
        for i in range(slash_kfetch_events(f)):
            ev = slash_kfetch_event(f, i)
            events.append((ev.kind, ev.partition, ev.offset, ev.code, bool(ev.fatal),
                           ev.message.decode("utf-8", "replace")))
        values = PyBytes_FromStringAndSize(NULL, vbytes)
        kbuf = PyBytes_FromStringAndSize(NULL, kbytes) if keys else None
        starts_a = _np.empty(n + 1, _np.int64)
        part_a = _np.empty(max(n, 1), _np.int32)
        off_a = _np.empty(max(n, 1), _np.int64)
        ts_a = _np.empty(max(n, 1), _np.int64)
        nulls_a = _np.empty(max(n, 1), _np.uint8)
        kst_a = _np.empty(n + 1, _np.int64) if keys else None
        knulls_a = _np.empty(max(n, 1), _np.uint8) if keys else None
        cdef int64_t[::1] starts = starts_a, off = off_a, ts = ts_a
        cdef int32_t[::1] part = part_a
        cdef uint8_t[::1] nl = nulls_a
        cdef int64_t[::1] kst
        cdef char *kp = NULL
        cdef int64_t *kstp = NULL
        cdef uint8_t[::1] knl
        cdef uint8_t *knlp = NULL
        if keys:
            kst = kst_a
            kstp = &kst[0]
            knl = knulls_a
            knlp = &knl[0]
            kp = PyBytes_AS_STRING(kbuf)
        cdef char *vp = PyBytes_AS_STRING(values)
        with nogil:
            nulls_n = slash_kfetch_fill(f, csep, vp, &starts[0], &part[0], &off[0], &ts[0],
                                        &nl[0], kp, kstp, knlp)
        return (values, starts_a, part_a[:n], off_a[:n], ts_a[:n],
                nulls_a[:n] if nulls_n else None, kbuf, kst_a,
                knulls_a[:n] if keys else None, events)

    def watermarks(self, int32_t partition, double timeout):
        """(low, high) offsets of a partition, asked of the broker."""
        cdef slash_kfetch *f = self._open()
        cdef int64_t lo = 0, hi = 0
        cdef int tmo = <int>(timeout * 1000)
        cdef slash_status st
        with nogil:
            st = slash_kfetch_watermarks(f, partition, tmo, &lo, &hi)
        check(st)
        return lo, hi

    def position(self, int32_t partition):
        """The next offset the consumer reads in a partition (negative: none yet)."""
        cdef slash_kfetch *f = self._open()
        cdef int64_t off = 0
        check(slash_kfetch_position(f, partition, &off))
        return off

    def partitions(self, double timeout):
        """The topic's partitions now, sorted."""
        cdef slash_kfetch *f = self._open()
        cdef size_t n = 0, cap = 64
        cdef int tmo = <int>(timeout * 1000)
        cdef int32_t[::1] out
        cdef slash_status st
        while True:
            arr = _np.empty(cap, _np.int32)
            out = arr
            with nogil:
                st = slash_kfetch_partitions(f, tmo, &out[0], cap, &n)
            check(st)
            if n <= cap:
                return [int(p) for p in arr[:n]]
            cap = n
