/* kafka_batch.c - the layout of a poll's Kafka records into one buffer
 * (kafka_fetch.h): pure C, no librdkafka, so ctest checks it without a broker. */
#include <stdlib.h>
#include <string.h>

#include "slash/kafka_fetch.h"

static int by_partition(const void *a, const void *b) {
    const slash_krec *x = a, *y = b;
    if (x->partition != y->partition)
        return x->partition < y->partition ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

void slash_kbatch_order(slash_krec *recs, size_t n) {
    /* qsort by (partition, place in the poll): stable */
    int sorted = 1;
    for (size_t i = 0; i < n; i++) {
        recs[i].index = (uint32_t)i;
        if (i && recs[i].partition < recs[i - 1].partition)
            sorted = 0;
    }
    if (!sorted)
        qsort(recs, n, sizeof *recs, by_partition);
}

size_t slash_kbatch_bytes(const slash_krec *recs, size_t n, int keys, int sep) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (keys)
            total += recs[i].key ? recs[i].key_len : 0;
        else
            total += recs[i].value ? recs[i].value_len : 0;
    }
    if (sep && !keys && n)
        total += n - 1;
    return total;
}

/* Copies a value as one line: its '\n' and '\r' (JSON whitespace, or a string the
 * parser refuses either way) become ' '. */
static void copy_line(char *dst, const char *src, size_t len) {
    memcpy(dst, src, len);
    if (!memchr(src, '\n', len) && !memchr(src, '\r', len))
        return;
    for (size_t i = 0; i < len; i++)
        if (dst[i] == '\n' || dst[i] == '\r')
            dst[i] = ' ';
}

size_t slash_kbatch_fill(const slash_krec *recs, size_t n, int sep, char *values,
                         int64_t *starts, int32_t *partition, int64_t *offset,
                         int64_t *timestamp, uint8_t *nulls, char *keys, int64_t *key_starts,
                         uint8_t *key_nulls) {
    size_t at = 0, kat = 0, null_count = 0;
    for (size_t i = 0; i < n; i++) {
        const slash_krec *r = &recs[i];
        starts[i] = (int64_t)at;
        if (r->value) {
            if (sep)
                copy_line(values + at, r->value, r->value_len);
            else if (r->value_len)
                memcpy(values + at, r->value, r->value_len);
            at += r->value_len;
            nulls[i] = 0;
        } else {
            nulls[i] = 1;
            null_count++;
        }
        if (sep && i + 1 < n)
            values[at++] = (char)sep;
        partition[i] = r->partition;
        offset[i] = r->offset;
        timestamp[i] = r->timestamp;
        if (keys) {
            key_starts[i] = (int64_t)kat;
            key_nulls[i] = r->key == NULL;
            if (r->key && r->key_len) {
                memcpy(keys + kat, r->key, r->key_len);
                kat += r->key_len;
            }
        }
    }
    starts[n] = (int64_t)at + (sep && n ? 1 : 0);
    if (keys)
        key_starts[n] = (int64_t)kat;
    return null_count;
}
