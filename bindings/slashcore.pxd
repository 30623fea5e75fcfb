# slashcore.pxd - trimmed mirror of the C core's public headers
# (src/slashcore/include/slash/*.h), listing only what the bindings use.
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stddef cimport size_t

cdef extern from "slash/status.h" nogil:
    ctypedef enum slash_status:
        SLASH_OK
        SLASH_EINVAL
        SLASH_ETOOBIG
        SLASH_ERANGE
        SLASH_ENOTSUP
        SLASH_ENOENT
        SLASH_ESTATE
        SLASH_ENOMEM
        SLASH_ESYS
        SLASH_EPROVIDER
        SLASH_EAUTH
        SLASH_EPEER
        SLASH_ETIMEDOUT
        SLASH_EPROTO
        SLASH_EOF
    const char *slash_strerror(slash_status st)
    const char *slash_last_error()
    void slash_clear_error()

cdef extern from "slash/mem.h" nogil:
    bint slash_mem_hugepages_enabled()

cdef extern from "slash/transport.h" nogil:
    ctypedef struct slash_transport
    ctypedef struct slash_listener
    ctypedef struct slash_endpoint
    ctypedef struct slash_region
    ctypedef struct slash_remote
    enum:
        SLASH_MSG_MAX
        SLASH_TOKEN_MAX
    slash_status slash_transport_open(const char *spec, slash_transport **out)
    void slash_transport_close(slash_transport *tp)
    const char *slash_transport_spec(const slash_transport *tp)
    bint slash_transport_have_ofi()
    slash_status slash_listen(slash_transport *tp, const char *bind_addr, const char *token,
                              slash_listener **out)
    const char *slash_listener_addr(const slash_listener *l)
    void slash_listener_close(slash_listener *l)

cdef extern from "slash/channel.h" nogil:
    ctypedef struct slash_channel
    ctypedef struct slash_channel_config:
        size_t buffer_size
        uint32_t credits
    ctypedef struct slash_channel_stats:
        uint64_t buffers
        uint64_t bytes
        uint64_t credit_stalls
        uint64_t polls
        uint64_t empty_polls
        size_t buffer_size
        uint32_t credits
        bint hugepages
    size_t slash_channel_payload_max(size_t buffer_size)
    slash_status slash_channel_config_check(const slash_channel_config *cfg)
    slash_status slash_channel_accept(slash_listener *l, const slash_channel_config *cfg,
                                      int timeout_ms, slash_channel **out)
    slash_status slash_channel_connect(slash_transport *tp, const char *addr, const char *token,
                                       int timeout_ms, slash_channel **out)
    void slash_channel_close(slash_channel *ch)
    slash_status slash_channel_reserve(slash_channel *ch, int timeout_ms, void **buf, size_t *cap)
    slash_status slash_channel_commit(slash_channel *ch, size_t len)
    slash_status slash_channel_send(slash_channel *ch, const void *data, size_t len, int timeout_ms)
    slash_status slash_channel_send_eof(slash_channel *ch, int timeout_ms)
    slash_status slash_channel_poll(slash_channel *ch, int timeout_ms, const void **buf,
                                    size_t *len, uint64_t *seq)
    slash_status slash_channel_release(slash_channel *ch)
    slash_status slash_channel_recv(slash_channel *ch, void *dst, size_t cap, size_t *len,
                                    int timeout_ms)
    bint slash_channel_is_producer(const slash_channel *ch)
    void slash_channel_get_stats(const slash_channel *ch, slash_channel_stats *out)
