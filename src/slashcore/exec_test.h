/* exec_test.h - hooks private to the core's tests and fuzz targets: an
 * executor without a group, and a way to hand it one incoming channel message
 * as if rank `from` had sent it.
 *
 * A detached executor has the stores, vector clock and per-sender receive
 * state (epochs, delta assembly, record decoding) of a real one, and no
 * channels and no service thread: nothing is ever sent, and messages reach it
 * only through slash_exec_handle_message(), which runs exactly the code the
 * service thread runs for a message taken off rank `from`'s channel. Fired
 * results queue up as usual (slash_exec_take). Close with slash_exec_close().
 */
#ifndef SLASH_EXEC_TEST_H
#define SLASH_EXEC_TEST_H

#include "slash/exec.h"

/* Opens an executor of rank `rank` in a group of n (rank < n) with no
 * channels. Fails as slash_exec_open() does on a bad config. */
slash_status slash_exec_open_detached(uint32_t rank, uint32_t n, const slash_exec_config *cfg,
                                      slash_exec **out);

/* Handles one message of len bytes from rank `from` (not the executor's own,
 * not one that finished): SLASH_OK, or the error the executor would have
 * stopped with (SLASH_EPROTO for a malformed message, SLASH_EPEER for ABORT). */
slash_status slash_exec_handle_message(slash_exec *ex, uint32_t from, const void *buf, size_t len);

#endif
