/* status.c - names of slash_status codes and the thread-local error detail.
 * Invariant: slash_last_error() always returns a NUL-terminated string. */
#include "slash/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

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

const char *slash_last_error(void) { return last_error; }

void slash_clear_error(void) { last_error[0] = '\0'; }

slash_status slash_fail(slash_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}
