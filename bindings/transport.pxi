# transport.pxi - Transport and Listener: the Python faces of slash_transport
# and slash_listener. Parents keep their children in a WeakSet and close them
# first; close() is idempotent; an object collected while open warns.
import weakref as _weakref
import warnings as _warnings


cdef class _Closeable:
    """Base: close() safe twice, context manager, ResourceWarning if leaked."""
    cdef object _children
    cdef object __weakref__

    def __cinit__(self):
        self._children = _weakref.WeakSet()

    cdef bint _is_open(self):
        return False

    cdef void _close_native(self):
        pass

    def close(self):
        """Closes this object and every object opened from it. Safe to call twice."""
        for child in list(self._children):
            child.close()
        self._children.clear()
        self._close_native()

    @property
    def closed(self):
        return not self._is_open()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    cdef void _finalize(self):
        if self._is_open():
            try:
                _warnings.warn(f"unclosed {type(self).__name__}", ResourceWarning)
            except BaseException:
                pass
            self._close_native()

    def __dealloc__(self):
        # Subclasses holding a parent (a Transport) define their own
        # __dealloc__ calling _finalize(): Cython clears a subclass's object
        # fields before the base's __dealloc__ runs, and closing needs them.
        self._finalize()


def have_ofi():
    """True when this build includes the libfabric (``ofi``) transport."""
    return bool(slash_transport_have_ofi())


cdef class Transport(_Closeable):
    """A transport for one-sided writes, opened by spec.

    ``"shm"`` shares memory between processes on this host (the default);
    ``"ofi:tcp"`` and ``"ofi:verbs"`` use libfabric endpoints.

    >>> with Transport("shm") as tp:
    ...     tp.spec
    'shm'
    """
    cdef slash_transport *tp

    def __init__(self, spec="shm"):
        cdef bytes b = to_bytes(spec, "transport spec")
        cdef const char *c = b
        cdef slash_status st
        with nogil:
            st = slash_transport_open(c, &self.tp)
        check(st)

    cdef bint _is_open(self):
        return self.tp != NULL

    cdef void _close_native(self):
        if self.tp != NULL:
            slash_transport_close(self.tp)
            self.tp = NULL

    cdef slash_transport *ptr(self) except NULL:
        if self.tp == NULL:
            raise _errors.InvalidState("transport is closed")
        return self.tp

    @property
    def spec(self):
        return slash_transport_spec(self.ptr()).decode()

    def __repr__(self):
        return f"Transport({self.spec!r})" if self.tp != NULL else "Transport(<closed>)"


cdef Transport as_transport(object t):
    if isinstance(t, Transport):
        return <Transport>t
    return Transport(t)


@cython.no_gc_clear  # its parent must outlive it, even in a GC cycle
cdef class Listener(_Closeable):
    """Waits for producers to connect; each accepted connection is a channel.

    ``address`` is what producers pass to :meth:`Channel.connect`.
    ``bind``: for shm a name (None picks a unique one); for ofi ``"HOST:PORT"``
    (port 0 picks a free port). None for ofi: the address named in the spec
    (``"ofi:verbs@10.0.0.5"``); else 127.0.0.1:0 for providers over the host's
    TCP stack; else the address of the provider's device (RDMA devices serve
    no loopback address).
    """
    cdef slash_listener *l
    cdef readonly Transport transport

    def __init__(self, transport="shm", *, str token, bind=None):
        self.transport = as_transport(transport)
        cdef bytes tok = to_bytes(token, "token")
        cdef bytes addr = to_bytes(bind, "bind address")
        cdef const char *a = NULL
        cdef const char *t = tok
        if addr is not None:
            a = addr
        cdef slash_status st
        cdef slash_transport *tp = self.transport.ptr()
        with nogil:
            st = slash_listen(tp, a, t, &self.l)
        check(st)
        self.transport._children.add(self)

    cdef bint _is_open(self):
        return self.l != NULL

    cdef void _close_native(self):
        if self.l != NULL:
            slash_listener_close(self.l)
            self.l = NULL

    def __dealloc__(self):
        self._finalize()

    cdef slash_listener *ptr(self) except NULL:
        if self.l == NULL:
            raise _errors.InvalidState("listener is closed")
        return self.l

    @property
    def address(self):
        return slash_listener_addr(self.ptr()).decode()

    def accept(self, *, buffer_size=65536, credits=8, timeout=None):
        """Accepts one producer and returns the consumer end of a new channel.

        The consumer decides the ring's geometry: ``credits`` slots of
        ``buffer_size`` bytes (footer of 16 bytes included).
        """
        return Channel._accept(self, buffer_size, credits, timeout)

    def __repr__(self):
        return f"Listener({self.address!r})" if self.l != NULL else "Listener(<closed>)"
