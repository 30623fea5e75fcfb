# kafka.pxi - the core's Kafka clients: a reader (kafka_fetch.h), a consumer
# that reads a poll's records into one buffer and a few numpy arrays, with no
# Python object per record (slash.kafka_reader wraps it, and falls back to
# confluent-kafka when the core was built without librdkafka); and a paced
# producer of stamped templates (kafka_produce.h), the benchmark's feed.
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


cdef class _CStrings:
    """Byte strings kept alive with an array of their pointers and lengths,
    as the core's constructors take settings and templates."""
    cdef list keep
    cdef const char **ptrs
    cdef size_t *lens

    def __cinit__(self, items):
        self.keep = [x.encode() if isinstance(x, str) else bytes(x) for x in items]
        cdef size_t n = len(self.keep)
        self.ptrs = <const char **>malloc((n + 1) * sizeof(char *))
        self.lens = <size_t *>malloc((n + 1) * sizeof(size_t))
        if self.ptrs == NULL or self.lens == NULL:
            raise MemoryError()
        for i, b in enumerate(self.keep):
            self.ptrs[i] = PyBytes_AS_STRING(b)
            self.lens[i] = len(b)

    def __dealloc__(self):
        free(self.ptrs)
        free(self.lens)


cdef tuple _kafka_settings(dict config):
    """(keys, values) of a Kafka client's settings, for the core."""
    return (_CStrings([str(k) for k in config]),
            _CStrings([_kafka_setting(k, v) for k, v in config.items()]))


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
        cdef _CStrings keys, vals
        keys, vals = _kafka_settings(config)
        t = topic.encode()
        check(slash_kfetch_new(t, keys.ptrs, vals.ptrs, len(config), &self.f))

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


cdef class KafkaPacer:
    """A producer that feeds ``topic`` at a rate (kafka_produce.h): record k
    is template k % T, ``head + str(wall clock ms) + tail`` (``templates``:
    [(head, tail)], str or bytes), sent to partition k % ``partitions``.

    :meth:`run` blocks without the GIL, producing ``trickle`` records a
    second until :meth:`full` switches to ``rate``, and stops at the wall
    clock :meth:`end` sets (or ``limit`` seconds after it began); call
    :meth:`full` and :meth:`end` from another thread while it runs. It
    returns ``{"events", "first_ms", "last_ms", "full_events",
    "full_from_ms"}``. :meth:`flush` waits for the broker's acknowledgements
    (Timeout names what is missing and the client's last error). One run at
    a time."""
    cdef slash_kprod *p
    cdef bint running
    cdef public str topic

    def __cinit__(self, str topic, int32_t partitions, dict config, templates):
        self.p = NULL
        self.running = False
        self.topic = topic
        cdef _CStrings keys, vals, heads, tails
        keys, vals = _kafka_settings(config)
        heads = _CStrings([h for h, _ in templates])
        tails = _CStrings([t for _, t in templates])
        name = topic.encode()
        check(slash_kprod_new(name, partitions, keys.ptrs, vals.ptrs, len(config), heads.ptrs,
                              heads.lens, tails.ptrs, tails.lens, len(heads.keep), &self.p))

    def __dealloc__(self):
        if self.p != NULL:
            with nogil:
                slash_kprod_free(self.p)
            self.p = NULL

    cdef slash_kprod *_open(self) except NULL:
        if self.p == NULL:
            raise _errors.InvalidState(f"the paced producer of topic {self.topic!r} is closed")
        return self.p

    def close(self):
        """Frees the producer without waiting for its records (idempotent;
        not while :meth:`run` runs)."""
        if self.running:
            raise _errors.InvalidState(f"the paced producer of topic {self.topic!r} is running: "
                                       "end() it and let run() return first")
        if self.p != NULL:
            with nogil:
                slash_kprod_free(self.p)
            self.p = NULL

    def full(self, bint on=True):
        """The full rate from now on (or the trickle again)."""
        slash_kprod_set_full(self._open(), on)

    def end(self, double at):
        """The run stops at wall clock ``at`` (seconds since the epoch)."""
        slash_kprod_set_end(self._open(), <int64_t>(at * 1000))

    def run(self, double rate, double trickle, double tick=0.01, double limit=900.0):
        cdef slash_kprod *p = self._open()
        if self.running:
            raise _errors.InvalidState(f"the paced producer of topic {self.topic!r} runs already")
        cdef slash_kprod_counts c
        cdef int64_t tick_us = <int64_t>(tick * 1e6), limit_ms = <int64_t>(limit * 1000)
        cdef slash_status st
        self.running = True
        try:
            with nogil:
                st = slash_kprod_run(p, rate, trickle, tick_us, limit_ms, &c)
        finally:
            self.running = False
        check(st)
        return {"events": c.events, "first_ms": c.first_ms, "last_ms": c.last_ms,
                "full_events": c.full_events, "full_from_ms": c.full_from_ms}

    def flush(self, timeout):
        """Waits up to ``timeout`` seconds for every record to be acknowledged."""
        cdef slash_kprod *p = self._open()
        cdef int tmo = timeout_ms(timeout)
        cdef slash_status st
        with nogil:
            st = slash_kprod_flush(p, tmo)
        check(st)
