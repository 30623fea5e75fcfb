/* fuzz_merge_delta.c - libFuzzer target: slash_ssb_merge_delta and
 * slash_join_merge_delta on arbitrary bytes.
 *
 * Input: [config byte (fuzz_common.h)][region]. A store of that config gets a
 * few records of its own (so merged records meet existing ones), merges the
 * region, and, when the merge succeeded, seals an epoch and merges every
 * partition's delta into a second store of the same config (a merged region
 * must ship again as a valid delta), then both emit everything. Errors are
 * fine; a crash, a leak or an ASan/UBSan report is a finding.
 */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "slash/join.h"
#include "slash/ssb.h"

static const int64_t T[4] = {5, 130, 131, 260}, K[4] = {1, 2, 1, 7}, V[4] = {3, -4, 5, 6};
static const int32_t OFF[5] = {0, 1, 3, 4, 6};
static const uint8_t KD[6] = {'a', 'b', 'c', 'a', 'd', 'e'};
static const fuzz_rows ROWS = {.n = 4, .t = T, .k = K, .v = V, .off = OFF, .kd = KD};

static void run_ssb(const slash_ssb_config *cfg, const uint8_t *d, size_t n)
{
    slash_ssb *s = fuzz_filled_ssb(cfg, &ROWS), *t = NULL;
    if (slash_ssb_merge_delta(s, d, n) == SLASH_OK && slash_ssb_begin_epoch(s) == SLASH_OK) {
        if (slash_ssb_open(cfg, &t) != SLASH_OK)
            abort();
        for (uint32_t p = 0; p < cfg->partitions; p++) {
            const void *a;
            size_t len;
            if (slash_ssb_delta(s, p, &a, &len) != SLASH_OK)
                abort();
            if (slash_ssb_merge_delta(t, a, len) != SLASH_OK)
                abort(); /* a delta the store made itself must merge */
        }
        if (slash_ssb_reset_delta(s) != SLASH_OK)
            abort();
    }
    slash_ssb_result *r = NULL;
    (void)slash_ssb_emit(s, 150, &r);
    slash_ssb_result_free(r);
    r = NULL;
    (void)slash_ssb_emit(s, INT64_MAX, &r);
    slash_ssb_result_free(r);
    if (t) {
        r = NULL;
        if (slash_ssb_emit(t, INT64_MAX, &r) != SLASH_OK)
            abort();
        slash_ssb_result_free(r);
    }
    slash_ssb_close(s);
    slash_ssb_close(t);
}

static void run_join(const slash_join_config *cfg, const uint8_t *d, size_t n)
{
    slash_join *s = fuzz_filled_join(cfg, &ROWS), *t = NULL;
    if (slash_join_merge_delta(s, d, n) == SLASH_OK && slash_join_begin_epoch(s) == SLASH_OK) {
        if (slash_join_open(cfg, &t) != SLASH_OK)
            abort();
        for (uint32_t p = 0; p < cfg->partitions; p++) {
            const void *a;
            size_t len;
            if (slash_join_delta(s, p, &a, &len) != SLASH_OK)
                abort();
            slash_status st = slash_join_merge_delta(t, a, len);
            if (st != SLASH_OK && st != SLASH_ENOMEM)
                abort();
        }
        if (slash_join_reset_delta(s) != SLASH_OK)
            abort();
    }
    slash_join_result *r = NULL;
    (void)slash_join_emit(s, 150, &r);
    slash_join_result_free(r);
    r = NULL;
    (void)slash_join_emit(s, INT64_MAX, &r); /* ETOOBIG is fine: a fuzzed set may be huge */
    slash_join_result_free(r);
    if (t) {
        r = NULL;
        (void)slash_join_emit(t, INT64_MAX, &r);
        slash_join_result_free(r);
    }
    slash_join_close(s);
    slash_join_close(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    slash_exec_config c = fuzz_config(data[0]);
    if (c.kind == SLASH_EXEC_JOIN)
        run_join(&c.join, data + 1, size - 1);
    else
        run_ssb(&c.state, data + 1, size - 1);
    return 0;
}
