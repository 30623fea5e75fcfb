/* status.h - the one error convention of the Slash core.
 *
 * Every public function that can fail returns a slash_status. SLASH_OK is 0,
 * every error is a small positive code, and slash_strerror() names it. The
 * function that failed also records a human-readable detail (which call, which
 * file, which peer) in a thread-local buffer read by slash_last_error(); the
 * bindings put that detail into the Python exception. Internal retry states
 * (would-block, interrupted) never reach callers.
 */
#ifndef SLASH_STATUS_H
#define SLASH_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum slash_status {
    SLASH_OK = 0,
    /* errors the caller caused */
    SLASH_EINVAL = 1,     /* bad argument (zero length, bad config value) */
    SLASH_ETOOBIG = 2,    /* buffer larger than the slot / record limit */
    SLASH_ERANGE = 3,     /* offset or length outside a registered region */
    SLASH_ENOTSUP = 4,    /* feature not compiled in (e.g. ofi without libfabric) */
    SLASH_ENOENT = 5,     /* unknown transport, provider, or name not found */
    SLASH_ESTATE = 6,     /* call not valid in the object's current state */
    /* errors of the system or the peer */
    SLASH_ENOMEM = 16,    /* out of memory */
    SLASH_ESYS = 17,      /* a system call failed (detail has errno text) */
    SLASH_EPROVIDER = 18, /* the fabric provider failed (detail has fi_strerror) */
    SLASH_EAUTH = 19,     /* peer presented a wrong token, or refused ours */
    SLASH_EPEER = 20,     /* peer disconnected or died */
    SLASH_ETIMEDOUT = 21, /* deadline passed before the operation could finish */
    SLASH_EPROTO = 22,    /* peer violated the protocol (bad sequence, bad footer) */
    /* not an error: orderly end of a stream */
    SLASH_EOF = 32
} slash_status;

/* Returns a static string naming the status; never NULL. */
const char *slash_strerror(slash_status st);

/* Returns the detail message recorded by the last failing call on this thread
 * (empty string if none). The pointer stays valid until the next failing call
 * on the same thread. A detail may be left over from an earlier failure: check
 * slash_last_error_status() equals the status at hand before trusting it. */
const char *slash_last_error(void);

/* Returns the status the current detail was recorded with (SLASH_OK if there
 * is none, e.g. after slash_clear_error()). Cannot fail. */
slash_status slash_last_error_status(void);

/* Records a printf-style detail for the current thread and returns st, so a
 * failing path can be written `return slash_fail(SLASH_EINVAL, "...", ...)`. */
slash_status slash_fail(slash_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Like slash_fail() with a fixed message: records a pointer to msg, which must
 * be a string literal (or otherwise outlive the thread); no formatting, so hot
 * paths (a try-poll that finds nothing) can afford it. Returns st. */
slash_status slash_fail_static(slash_status st, const char *msg);

/* Clears the thread-local detail (and its status). Cannot fail. */
void slash_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
