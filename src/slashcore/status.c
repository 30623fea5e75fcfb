/* status.c - names of slash_status codes and the thread-local error detail.
 *
 * Invariants: slash_last_error() always returns a NUL-terminated string, and
 * the detail is tagged with the status it was recorded for
 * (slash_last_error_status()), so a reader can tell a detail that belongs to
 * the failure at hand from one left over by an earlier, unrelated failure.
 * slash_fail() formats into a per-thread buffer; slash_fail_static() only
 * points at a string literal (two stores: cheap enough for try-poll misses). */
#include "slash/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512];
static _Thread_local const char *detail;       /* last_error, a literal, or NULL (none) */
static _Thread_local slash_status detail_status; /* SLASH_OK when there is no detail */

const char *slash_strerror(slash_status st)
{
    switch (st) {
    case SLASH_OK: return "ok";
    case SLASH_EINVAL: return "invalid argument";
    case SLASH_ETOOBIG: return "buffer too large";
    case SLASH_ERANGE: return "offset or length outside registered region";
    case SLASH_ENOTSUP: return "not supported in this build";
    case SLASH_ENOENT: return "not found";
    case SLASH_ESTATE: return "invalid in current state";
    case SLASH_ENOMEM: return "out of memory";
    case SLASH_ESYS: return "system call failed";
    case SLASH_EPROVIDER: return "fabric provider error";
    case SLASH_EAUTH: return "authentication failed";
    case SLASH_EPEER: return "peer disconnected";
    case SLASH_ETIMEDOUT: return "timed out";
    case SLASH_EPROTO: return "protocol violation";
    case SLASH_EOF: return "end of stream";
    }
    return "unknown status";
}

const char *slash_last_error(void) { return detail ? detail : ""; }

slash_status slash_last_error_status(void) { return detail ? detail_status : SLASH_OK; }

void slash_clear_error(void)
{
    detail = NULL;
    detail_status = SLASH_OK;
}

slash_status slash_fail(slash_status st, const char *fmt, ...)
{
    /* the format may read the old detail (re-tagging a callee's message):
     * vsnprintf into a copy-safe temporary first */
    char tmp[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(last_error, tmp, sizeof last_error);
    detail = last_error;
    detail_status = st;
    return st;
}

slash_status slash_fail_static(slash_status st, const char *msg)
{
    detail = msg;
    detail_status = st;
    return st;
}
