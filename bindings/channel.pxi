# channel.pxi - Channel (either end of a slash_channel) and Message (a received
# buffer lent in place from the ring until released).
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE,
                             PyBUF_ANY_CONTIGUOUS, PyBUF_FORMAT, PyBUF_ND)
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memcpy


cdef char *_FORMAT_B = "B"


@cython.no_gc_clear  # its parent must outlive it, even in a GC cycle
cdef class Message:
    """A buffer received in place: a read-only, zero-copy view of a ring slot.

    It supports the buffer protocol (``memoryview(msg)``, ``bytes(msg)``,
    ``pyarrow.py_buffer(msg)``) and stays valid until :meth:`release`, which
    returns the slot's credit to the producer. Use it as a context manager.
    """
    cdef const char *data
    cdef readonly size_t nbytes
    cdef readonly uint64_t seq
    cdef Py_ssize_t shape0
    cdef Channel channel
    cdef int exports
    cdef bint released

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self.released:
            raise _errors.InvalidState("message already released")
        if flags & PyBUF_WRITABLE:
            raise BufferError("a received message is read-only")
        view.buf = <void *>self.data
        view.obj = self
        view.len = self.nbytes
        view.readonly = 1
        view.itemsize = 1
        self.shape0 = <Py_ssize_t>self.nbytes
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = _FORMAT_B
        view.ndim = 1
        view.shape = NULL
        if flags & PyBUF_ND:
            view.shape = &self.shape0
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    def __len__(self):
        return self.nbytes

    def tobytes(self):
        """A copy of the payload as bytes."""
        if self.released:
            raise _errors.InvalidState("message already released")
        return PyBytes_FromStringAndSize(self.data, self.nbytes)

    def release(self):
        """Returns the slot to the producer. Views of it must be released first."""
        if self.released:
            return
        if self.exports:
            raise BufferError(f"{self.exports} view(s) of this message are still in use; "
                              "release them (or copy the data) before releasing the message")
        self.released = True
        self.channel._release_current(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return f"<Message seq={self.seq} nbytes={self.nbytes}{' released' if self.released else ''}>"


@cython.no_gc_clear  # its parent must outlive it, even in a GC cycle
cdef class Channel(_Closeable):
    """One end of a credit-flow-controlled ring channel (Slash §6).

    The consumer end comes from :meth:`Listener.accept`, the producer end from
    :meth:`Channel.connect`. The producer ``send()``\\ s bytes-like objects (bytes,
    memoryview, NumPy arrays, ``pyarrow.Buffer``); the consumer ``recv()``\\ s
    copies or ``poll()``\\ s zero-copy :class:`Message` views. Buffers arrive in
    order, each exactly once; a full ring blocks the producer.

    >>> import slash
    >>> lst = slash.Listener("shm", token="secret")
    >>> # in another process: ch = slash.Channel.connect("shm", lst.address, token="secret")
    """
    cdef slash_channel *ch
    cdef readonly Transport transport
    cdef readonly bint is_producer
    cdef Message current
    cdef size_t reserved_cap
    cdef bint has_reserved

    @staticmethod
    def connect(transport, str address, *, str token, timeout=10.0):
        """Connects to a listener and returns the producer end."""
        cdef Channel self = Channel.__new__(Channel)
        self.transport = as_transport(transport)
        cdef bytes a = to_bytes(address, "address")
        cdef bytes t = to_bytes(token, "token")
        cdef const char *ca = a
        cdef const char *ct = t
        cdef int tmo = timeout_ms(timeout)
        cdef slash_status st
        cdef slash_transport *tp = self.transport.ptr()
        with nogil:
            st = slash_channel_connect(tp, ca, ct, tmo, &self.ch)
        check(st)
        self.is_producer = True
        self.transport._children.add(self)
        return self

    @staticmethod
    def _accept(Listener listener, buffer_size, credits, timeout):
        cdef Channel self = Channel.__new__(Channel)
        self.transport = listener.transport
        cdef slash_channel_config cfg
        if int(buffer_size) <= 0 or int(credits) <= 0:
            raise _errors.InvalidArgument(
                f"buffer_size and credits must be positive (got {buffer_size}, {credits})")
        cfg.buffer_size = <size_t>int(buffer_size)
        cfg.credits = <uint32_t>min(int(credits), 2**32 - 1)
        check(slash_channel_config_check(&cfg))
        cdef int tmo = timeout_ms(timeout)
        cdef slash_status st
        cdef slash_listener *l = listener.ptr()
        with nogil:
            st = slash_channel_accept(l, &cfg, tmo, &self.ch)
        check(st)
        self.is_producer = False
        listener._children.add(self)
        return self

    cdef bint _is_open(self):
        return self.ch != NULL

    cdef void _close_native(self):
        if self.ch != NULL:
            if self.current is not None and self.current.exports == 0:
                self.current.released = True
                self.current = None
            if self.current is not None:
                # a view still points into the ring: keep the memory mapped
                return
            with nogil:
                slash_channel_close(self.ch)
            self.ch = NULL

    def close(self):
        """Closes this end (the producer first sends end-of-stream)."""
        if self.current is not None and self.current.exports:
            raise BufferError("a received message is still in use; release it before closing")
        _Closeable.close(self)

    def __dealloc__(self):
        self._finalize()

    cdef slash_channel *ptr(self) except NULL:
        if self.ch == NULL:
            raise _errors.InvalidState("channel is closed")
        return self.ch

    cdef int _need(self, bint producer) except -1:
        self.ptr()
        if producer and not self.is_producer:
            raise _errors.InvalidState("this is the consumer end; send on the producer end")
        if not producer and self.is_producer:
            raise _errors.InvalidState("this is the producer end; receive on the consumer end")
        return 0

    @property
    def payload_max(self):
        """Largest payload one buffer holds (buffer_size minus the footer)."""
        cdef slash_channel_stats s
        slash_channel_get_stats(self.ptr(), &s)
        return slash_channel_payload_max(s.buffer_size)

    # --- producer -------------------------------------------------------
    def send(self, data, timeout=None):
        """Sends one buffer (any contiguous bytes-like object, 1..payload_max bytes).

        Blocks while the ring is full (back-pressure), up to ``timeout`` seconds.
        """
        self._need(True)
        cdef Py_buffer view
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE | PyBUF_ANY_CONTIGUOUS)
        cdef int tmo
        cdef slash_status st
        try:
            tmo = timeout_ms(timeout)
            with nogil:
                st = slash_channel_send(self.ch, view.buf, <size_t>view.len, tmo)
        finally:
            PyBuffer_Release(&view)
        check(st)

    def reserve(self, timeout=None):
        """Waits for a credit and returns a writable memoryview of the next slot.

        Fill it, then call :meth:`commit` with the number of bytes written.
        This writes straight into the slot (shm) or its staging copy (ofi).
        """
        self._need(True)
        cdef void *buf
        cdef size_t cap
        cdef int tmo = timeout_ms(timeout)
        cdef slash_status st
        with nogil:
            st = slash_channel_reserve(self.ch, tmo, &buf, &cap)
        check(st)
        self.has_reserved = True
        self.reserved_cap = cap
        return <char[:cap]>(<char *>buf)

    def commit(self, size_t nbytes):
        """Publishes the reserved slot with ``nbytes`` bytes of payload."""
        self._need(True)
        check(slash_channel_commit(self.ch, nbytes))
        self.has_reserved = False

    def send_eof(self, timeout=None):
        """Tells the consumer that no more buffers will come."""
        self._need(True)
        cdef int tmo = timeout_ms(timeout)
        cdef slash_status st
        with nogil:
            st = slash_channel_send_eof(self.ch, tmo)
        check(st)

    # --- consumer -------------------------------------------------------
    def poll(self, timeout=None):
        """Waits for the next buffer and lends it in place as a :class:`Message`.

        Returns None at end of stream. The previous message, if still held, is
        released first (so a simple loop never leaks credits).
        """
        self._need(False)
        if self.current is not None:
            self.current.release()
        cdef const void *buf
        cdef size_t n
        cdef uint64_t seq
        cdef int tmo = timeout_ms(timeout)
        cdef slash_status st
        with nogil:
            st = slash_channel_poll(self.ch, tmo, &buf, &n, &seq)
        if st == SLASH_EOF:
            return None
        check(st)
        cdef Message m = Message.__new__(Message)
        m.data = <const char *>buf
        m.nbytes = n
        m.seq = seq
        m.channel = self
        self.current = m
        return m

    cdef _release_current(self, Message m):
        if m is not self.current:
            return
        self.current = None
        check(slash_channel_release(self.ptr()))

    def recv(self, timeout=None):
        """Receives the next buffer as bytes (one copy); None at end of stream."""
        m = self.poll(timeout)
        if m is None:
            return None
        try:
            return m.tobytes()
        finally:
            m.release()

    def recv_into(self, buffer, timeout=None):
        """Copies the next buffer into a writable bytes-like object.

        Returns the number of bytes, or 0 at end of stream. If ``buffer`` is
        too small, raises BufferTooLarge and the message stays queued.
        """
        self._need(False)
        if self.current is not None:
            self.current.release()
        cdef Py_buffer view
        PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE | PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
        cdef size_t n = 0
        cdef int tmo
        cdef slash_status st
        try:
            tmo = timeout_ms(timeout)
            with nogil:
                st = slash_channel_recv(self.ch, view.buf, <size_t>view.len, &n, tmo)
        finally:
            PyBuffer_Release(&view)
        if st == SLASH_EOF:
            return 0
        check(st)
        return n

    def __iter__(self):
        """Iterates over received buffers (as bytes) until end of stream."""
        while True:
            b = self.recv()
            if b is None:
                return
            yield b

    @property
    def stats(self):
        """Counters: buffers, bytes, credit_stalls, polls, empty_polls, hugepages."""
        cdef slash_channel_stats s
        slash_channel_get_stats(self.ptr(), &s)
        return {
            "buffers": s.buffers, "bytes": s.bytes, "credit_stalls": s.credit_stalls,
            "polls": s.polls, "empty_polls": s.empty_polls, "buffer_size": s.buffer_size,
            "credits": s.credits, "hugepages": bool(s.hugepages),
        }

    def __repr__(self):
        end = "producer" if self.is_producer else "consumer"
        return f"<Channel {end} {'closed' if self.ch == NULL else 'open'}>"
