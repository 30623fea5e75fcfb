# status.pxi - one mapping from core statuses to slash.errors exceptions.
from slashcore cimport *
from slash import errors as _errors

_STATUS_EXC = {
    SLASH_EINVAL: _errors.InvalidArgument,
    SLASH_ETOOBIG: _errors.BufferTooLarge,
    SLASH_ERANGE: _errors.OutOfRange,
    SLASH_ENOTSUP: _errors.NotSupported,
    SLASH_ENOENT: _errors.UnknownName,
    SLASH_ESTATE: _errors.InvalidState,
    SLASH_ENOMEM: _errors.OutOfMemory,
    SLASH_ESYS: _errors.SystemCallError,
    SLASH_EPROVIDER: _errors.ProviderError,
    SLASH_EAUTH: _errors.AuthenticationError,
    SLASH_EPEER: _errors.PeerDisconnected,
    SLASH_ETIMEDOUT: _errors.Timeout,
    SLASH_EPROTO: _errors.ProtocolError,
    SLASH_EOF: _errors.EndOfStream,
}


cdef object convert_error(slash_status st):
    """Builds the exception for a failed core call, with the core's detail.

    The detail is used only if the core recorded it for this very status, and
    it is consumed (cleared) here, so a failure that recorded no detail of its
    own reads "<status name> (no detail)" instead of an earlier, unrelated
    failure's message."""
    name = slash_strerror(st).decode()
    detail = ""
    if slash_last_error_status() == st:
        detail = slash_last_error().decode("utf-8", "replace")
    slash_clear_error()
    exc = _STATUS_EXC.get(st, _errors.SlashError)
    return exc(detail if detail else f"{name} (no detail)")


cdef inline int check(slash_status st) except -1:
    if st != SLASH_OK:
        raise convert_error(st)
    return 0


cdef int timeout_ms(object timeout) except? -2:
    """Seconds (float or None = forever) to the core's milliseconds."""
    if timeout is None:
        return -1
    t = float(timeout)
    if t < 0:
        raise _errors.InvalidArgument(f"timeout must be >= 0 seconds or None, got {timeout!r}")
    if t * 1000 > 2**31 - 2:
        return -1
    return <int>(t * 1000)


cdef bytes to_bytes(object s, str what):
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    if isinstance(s, str):
        return (<str>s).encode("utf-8")
    raise _errors.InvalidArgument(f"{what} must be str or bytes, got {type(s).__name__}")
