/* pq_read.h - a reader of one Parquet column chunk of integers into a
 * caller's buffer.
 *
 * It decodes the page kinds common files hold: data pages v1 and v2, PLAIN
 * and RLE_DICTIONARY / PLAIN_DICTIONARY values, INT32 and INT64 physical
 * types, UNCOMPRESSED and SNAPPY codecs, top-level columns (no repetition)
 * with a maximum definition level of 0 or 1. The caller takes the chunk's
 * place, codec and type from the file's footer (which it has parsed); this
 * reader parses the page headers (Thrift compact protocol) itself.
 *
 * Anything else returns SLASH_ENOTSUP (an encoding, codec or level layout
 * this reader does not decode) or SLASH_EPROTO (bytes that are not a valid
 * chunk): the caller then reads the chunk with a full Parquet reader, which
 * decodes it or reports the file as malformed. Neither status ever leaves a
 * partial answer that looks complete: a caller must discard the output of a
 * call that did not return SLASH_OK. No input, however malformed, makes the
 * reader read or write outside the buffers it is given.
 */
#ifndef SLASH_PQ_READ_H
#define SLASH_PQ_READ_H

#include <stddef.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parquet's Type and CompressionCodec numbers for what this reader decodes. */
enum { SLASH_PQ_INT32 = 1, SLASH_PQ_INT64 = 2 };
enum { SLASH_PQ_UNCOMPRESSED = 0, SLASH_PQ_SNAPPY = 1 };

/* One column chunk as the footer describes it. */
typedef struct slash_pq_chunk {
    int physical;       /* SLASH_PQ_INT32 or SLASH_PQ_INT64 */
    int codec;          /* SLASH_PQ_UNCOMPRESSED or SLASH_PQ_SNAPPY */
    int max_def;        /* 0 (required column) or 1 (optional, top level) */
    int64_t num_values; /* values in the chunk, nulls included (the row group's rows) */
} slash_pq_chunk;

/* Reusable scratch (decompressed pages, the dictionary, the chunk's bytes
 * read from a file): one per reading thread, grown as pages need and kept. */
typedef struct slash_pq_reader slash_pq_reader;

/* Makes a reader. Returns SLASH_OK and *out, or SLASH_ENOMEM. Free it with
 * slash_pq_reader_free. */
slash_status slash_pq_reader_new(slash_pq_reader **out);

/* Frees a reader and its scratch; NULL is a no-op. */
void slash_pq_reader_free(slash_pq_reader *r);

/* Decodes the column chunk in data[0, len) (its first page header at data[0])
 * into out: chunk->num_values values, each out_width bytes (4 or 8; an INT64
 * column needs 8; INT32 values are sign-extended to 8). With chunk->max_def 1
 * and valid not NULL, bit i of valid (Arrow's order: LSB first) says whether
 * value i is present; valid needs (num_values + 7) / 8 bytes, and the bits
 * past num_values in its last byte are cleared. A null's value is 0.
 * *null_count gets the nulls. Does not take ownership of any buffer.
 * Returns SLASH_OK, SLASH_EINVAL (bad arguments), SLASH_ENOTSUP (a page this
 * reader does not decode), SLASH_EPROTO (malformed bytes) or SLASH_ENOMEM;
 * after an error the contents of out and valid are unspecified. */
slash_status slash_pq_decode(slash_pq_reader *r, const uint8_t *data, size_t len,
                             const slash_pq_chunk *chunk, void *out, int out_width,
                             uint8_t *valid, int64_t *null_count);

/* slash_pq_decode of the chunk at [offset, offset + len) of open file fd, read
 * with pread into the reader's scratch. Also returns SLASH_ESYS when the read
 * fails and SLASH_EPROTO when the file ends before offset + len. */
slash_status slash_pq_read_fd(slash_pq_reader *r, int fd, int64_t offset, int64_t len,
                              const slash_pq_chunk *chunk, void *out, int out_width,
                              uint8_t *valid, int64_t *null_count);

/* Snappy's raw format: decompresses src[0, n) into dst, which holds dst_cap
 * bytes; *out_len gets the decompressed length. Returns SLASH_OK, or
 * SLASH_EPROTO when src is not a valid stream or decompresses to more than
 * dst_cap bytes. Exposed for the reader's tests. */
slash_status slash_pq_snappy(const uint8_t *src, size_t n, uint8_t *dst, size_t dst_cap,
                             size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
