/* fuzz_pq_decode.c - libFuzzer target: the Parquet column chunk reader
 * (pq_read.h) on arbitrary bytes.
 *
 * Input: [config byte: bit 0 INT64 (else INT32), bit 1 SNAPPY (else
 * UNCOMPRESSED), bit 2 an optional column (max definition level 1), bit 3
 * 4-byte output (INT32 only)][u16 little-endian value count][the chunk]. The
 * seeds (tests/fuzz/corpus/fuzz_pq_decode/) are chunks pyarrow wrote, one per
 * writer option. The output buffers are exactly as large as the values need,
 * so ASan sees any write past them. Errors are fine; a crash, a leak, a hang
 * or an ASan/UBSan report is a finding. A chunk that decodes must decode the
 * same way twice (the reader's reused scratch carries nothing over).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "slash/pq_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint8_t cfg = data[0];
    slash_pq_chunk c = {(cfg & 1) ? SLASH_PQ_INT64 : SLASH_PQ_INT32,
                        (cfg & 2) ? SLASH_PQ_SNAPPY : SLASH_PQ_UNCOMPRESSED, (cfg >> 2) & 1,
                        (int64_t)data[1] | (int64_t)data[2] << 8};
    int w = (cfg & 8) && c.physical == SLASH_PQ_INT32 ? 4 : 8;
    size_t n = (size_t)c.num_values;
    uint8_t *out = malloc(n * (size_t)w + 1), *again = malloc(n * (size_t)w + 1);
    uint8_t *valid = malloc((n + 7) / 8 + 1), *valid2 = malloc((n + 7) / 8 + 1);
    slash_pq_reader *r;
    if (!out || !again || !valid || !valid2 || slash_pq_reader_new(&r) != SLASH_OK)
        abort();
    int64_t nulls = -1, nulls2 = -1;
    slash_status st = slash_pq_decode(r, data + 3, size - 3, &c, out, w, valid, &nulls);
    if (st == SLASH_OK) {
        if (nulls < 0 || nulls > c.num_values)
            abort();
        if (slash_pq_decode(r, data + 3, size - 3, &c, again, w, valid2, &nulls2) != SLASH_OK ||
            nulls2 != nulls || memcmp(out, again, n * (size_t)w) != 0 ||
            (c.max_def && memcmp(valid, valid2, (n + 7) / 8) != 0))
            abort();
    } else if (st != SLASH_EPROTO && st != SLASH_ENOTSUP) {
        abort();
    }
    slash_pq_reader_free(r);
    free(out);
    free(again);
    free(valid);
    free(valid2);
    return 0;
}
