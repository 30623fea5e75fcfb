/* fuzz_sync_msg.c - libFuzzer target: an executor's handling of incoming
 * channel messages (the 48-byte sync header, delta fragment assembly and
 * merge, the repartition row codec, epochs, the vector clock and firing, and
 * ABORT), through the very code the service thread runs (exec_test.h).
 *
 * Input: [config byte (fuzz_common.h)][group byte: bit 0 a group of 3 (else
 * 2)], then messages, each [u8 sender][u16 little-endian length][bytes]
 * handed to a detached rank-0 executor in order until one fails (a real
 * executor stops there too). Senders are taken modulo the group size, rank 0
 * meaning rank 1. Errors are fine; a crash, a leak, a hang or an ASan/UBSan
 * report is a finding.
 */
#include <stdint.h>
#include <stdlib.h>

#include "exec_test.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    slash_exec_config c = fuzz_config(data[0]);
    uint32_t n = (data[1] & 1) ? 3 : 2;
    if (c.kind == SLASH_EXEC_JOIN && c.join.partitions < n)
        c.join.partitions = n;
    if (c.kind == SLASH_EXEC_AGGREGATE && c.state.partitions < n)
        c.state.partitions = n;
    slash_exec *ex;
    if (slash_exec_open_detached(0, n, &c, &ex) != SLASH_OK)
        abort();
    size_t i = 2;
    slash_status st = SLASH_OK;
    while (st == SLASH_OK && size - i >= 3) {
        uint32_t from = data[i] % n;
        if (from == 0)
            from = 1;
        size_t len = (size_t)data[i + 1] | (size_t)data[i + 2] << 8;
        i += 3;
        if (len > size - i)
            len = size - i;
        /* a copy of exactly len bytes, so ASan sees any read past the message */
        uint8_t *msg = malloc(len ? len : 1);
        if (!msg)
            abort();
        memcpy(msg, data + i, len);
        i += len;
        st = slash_exec_handle_message(ex, from, msg, len);
        free(msg);
        for (;;) {
            if (c.kind == SLASH_EXEC_JOIN) {
                slash_join_result *r;
                slash_exec_take_join(ex, &r);
                if (!r)
                    break;
                slash_join_result_free(r);
            } else {
                slash_ssb_result *r;
                slash_exec_take(ex, &r);
                if (!r)
                    break;
                slash_ssb_result_free(r);
            }
        }
    }
    slash_exec_close(ex);
    return 0;
}
