/* kafka_fetch.c - a Kafka consumer that reads a batch of records into one
 * buffer (kafka_fetch.h), on librdkafka's C API. Compiled in with
 * SLASH_HAVE_RDKAFKA; without it every call says SLASH_ENOTSUP. */
#include <stdlib.h>
#include <string.h>

#include "slash/kafka_fetch.h"

#ifndef SLASH_HAVE_RDKAFKA

int slash_kfetch_available(void) { return 0; }
const char *slash_kfetch_version(void) { return ""; }

static slash_status absent(void) {
    return slash_fail_static(SLASH_ENOTSUP, "the core was built without librdkafka "
                                            "(apt-get install librdkafka-dev, then rebuild)");
}

slash_status slash_kfetch_new(const char *topic, const char *const *keys,
                              const char *const *values, size_t n, slash_kfetch **out) {
    (void)topic, (void)keys, (void)values, (void)n;
    *out = NULL;
    return absent();
}
void slash_kfetch_free(slash_kfetch *f) { (void)f; }
slash_status slash_kfetch_assign(slash_kfetch *f, const int32_t *partitions,
                                 const int64_t *offsets, size_t n, int incremental) {
    (void)f, (void)partitions, (void)offsets, (void)n, (void)incremental;
    return absent();
}
slash_status slash_kfetch_unassign(slash_kfetch *f) { (void)f; return absent(); }
slash_status slash_kfetch_poll(slash_kfetch *f, size_t max, int timeout_ms, int sep,
                               size_t *records, size_t *value_bytes, size_t *key_bytes) {
    (void)f, (void)max, (void)timeout_ms, (void)sep;
    *records = *value_bytes = 0;
    if (key_bytes)
        *key_bytes = 0;
    return absent();
}
size_t slash_kfetch_events(const slash_kfetch *f) { (void)f; return 0; }
const slash_kevent *slash_kfetch_event(const slash_kfetch *f, size_t i) {
    (void)f, (void)i;
    return NULL;
}
size_t slash_kfetch_fill(slash_kfetch *f, int sep, char *values, int64_t *starts,
                         int32_t *partition, int64_t *offset, int64_t *timestamp,
                         uint8_t *nulls, char *keys, int64_t *key_starts, uint8_t *key_nulls) {
    (void)f, (void)sep, (void)values, (void)starts, (void)partition, (void)offset;
    (void)timestamp, (void)nulls, (void)keys, (void)key_starts, (void)key_nulls;
    return 0;
}
slash_status slash_kfetch_watermarks(slash_kfetch *f, int32_t partition, int timeout_ms,
                                     int64_t *low, int64_t *high) {
    (void)f, (void)partition, (void)timeout_ms, (void)low, (void)high;
    return absent();
}
slash_status slash_kfetch_position(slash_kfetch *f, int32_t partition, int64_t *offset) {
    (void)f, (void)partition, (void)offset;
    return absent();
}
slash_status slash_kfetch_partitions(slash_kfetch *f, int timeout_ms, int32_t *out, size_t cap,
                                     size_t *n) {
    (void)f, (void)timeout_ms, (void)out, (void)cap;
    *n = 0;
    return absent();
}

#else /* SLASH_HAVE_RDKAFKA */

#include <stdio.h>

#include <librdkafka/rdkafka.h>

#include "kafka_conf.h"

struct slash_kfetch {
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue; /* the consumer queue */
    rd_kafka_topic_t *rkt;   /* for metadata requests */
    char *topic;
    rd_kafka_message_t **msgs; /* the last poll's records (held until fill) */
    slash_krec *recs;
    size_t held, cap;
    slash_kevent *events;
    size_t n_events, events_cap;
};

int slash_kfetch_available(void) { return 1; }
const char *slash_kfetch_version(void) { return rd_kafka_version_str(); }

static void release(slash_kfetch *f) {
    for (size_t i = 0; i < f->held; i++)
        rd_kafka_message_destroy(f->msgs[i]);
    f->held = 0;
}

slash_status slash_kfetch_new(const char *topic, const char *const *keys,
                              const char *const *values, size_t n, slash_kfetch **out) {
    *out = NULL;
    char err[512];
    rd_kafka_conf_t *conf;
    slash_status cst = kafka_conf_new(keys, values, n, &conf);
    if (cst != SLASH_OK)
        return cst;
    slash_kfetch *f = calloc(1, sizeof *f);
    if (!f || !(f->topic = strdup(topic))) {
        free(f);
        rd_kafka_conf_destroy(conf);
        return slash_fail_static(SLASH_ENOMEM, "Kafka fetcher");
    }
    f->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err); /* owns conf if made */
    if (!f->rk) {
        rd_kafka_conf_destroy(conf);
        free(f->topic);
        free(f);
        return slash_fail(SLASH_EINVAL, "Kafka consumer: %s", err);
    }
    rd_kafka_poll_set_consumer(f->rk);
    f->queue = rd_kafka_queue_get_consumer(f->rk);
    f->rkt = rd_kafka_topic_new(f->rk, topic, NULL);
    if (!f->queue || !f->rkt) {
        slash_kfetch_free(f);
        return slash_fail(SLASH_EINVAL, "Kafka consumer of topic %s: no consumer queue (the "
                          "settings need a group.id, even if no group is joined)", topic);
    }
    *out = f;
    return SLASH_OK;
}

void slash_kfetch_free(slash_kfetch *f) {
    if (!f)
        return;
    release(f);
    if (f->rkt)
        rd_kafka_topic_destroy(f->rkt);
    if (f->queue)
        rd_kafka_queue_destroy(f->queue);
    rd_kafka_consumer_close(f->rk);
    rd_kafka_destroy(f->rk);
    free(f->msgs);
    free(f->recs);
    free(f->events);
    free(f->topic);
    free(f);
}

static slash_status kafka_fail(rd_kafka_resp_err_t e, const char *what, const char *topic) {
    slash_status st = e == RD_KAFKA_RESP_ERR__TIMED_OUT || e == RD_KAFKA_RESP_ERR__TRANSPORT ||
                              e == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN
                          ? SLASH_ETIMEDOUT
                          : e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
                                    e == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
                                    e == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
                              ? SLASH_ENOENT
                              : SLASH_EPEER;
    return slash_fail(st, "Kafka topic %s: %s: %s", topic, what, rd_kafka_err2str(e));
}

slash_status slash_kfetch_assign(slash_kfetch *f, const int32_t *partitions,
                                 const int64_t *offsets, size_t n, int incremental) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)(n ? n : 1));
    for (size_t i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, f->topic, partitions[i])->offset = offsets[i];
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (incremental) {
        rd_kafka_error_t *err = rd_kafka_incremental_assign(f->rk, l);
        if (err) {
            slash_status st = slash_fail(SLASH_EPEER, "Kafka topic %s: assign: %s", f->topic,
                                         rd_kafka_error_string(err));
            rd_kafka_error_destroy(err);
            rd_kafka_topic_partition_list_destroy(l);
            return st;
        }
    } else {
        e = rd_kafka_assign(f->rk, l);
    }
    rd_kafka_topic_partition_list_destroy(l);
    return e ? kafka_fail(e, "assign", f->topic) : SLASH_OK;
}

slash_status slash_kfetch_unassign(slash_kfetch *f) {
    release(f);
    rd_kafka_resp_err_t e = rd_kafka_assign(f->rk, NULL);
    return e ? kafka_fail(e, "unassign", f->topic) : SLASH_OK;
}

static slash_status reserve(slash_kfetch *f, size_t max) {
    if (max <= f->cap)
        return SLASH_OK;
    rd_kafka_message_t **m = realloc(f->msgs, max * sizeof *m);
    if (m)
        f->msgs = m;
    slash_krec *r = m ? realloc(f->recs, max * sizeof *r) : NULL;
    if (r)
        f->recs = r;
    if (!m || !r)
        return slash_fail_static(SLASH_ENOMEM, "Kafka fetch: record array");
    f->cap = max;
    return SLASH_OK;
}

static slash_status add_event(slash_kfetch *f, const rd_kafka_message_t *m) {
    if (f->n_events == f->events_cap) {
        size_t cap = f->events_cap ? 2 * f->events_cap : 8;
        slash_kevent *ev = realloc(f->events, cap * sizeof *ev);
        if (!ev)
            return slash_fail_static(SLASH_ENOMEM, "Kafka fetch: events");
        f->events = ev;
        f->events_cap = cap;
    }
    slash_kevent *ev = &f->events[f->n_events++];
    memset(ev, 0, sizeof *ev);
    ev->partition = m->partition;
    ev->offset = m->offset;
    ev->code = (int)m->err;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        ev->kind = SLASH_KEVENT_EOF;
        return SLASH_OK;
    }
    ev->kind = SLASH_KEVENT_ERROR;
    if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[200];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(f->rk, why, sizeof why);
        ev->fatal = 1;
        snprintf(ev->message, sizeof ev->message, "%s: %s", rd_kafka_err2str(orig), why);
    } else {
        snprintf(ev->message, sizeof ev->message, "%s", rd_kafka_message_errstr(m));
    }
    return SLASH_OK;
}

slash_status slash_kfetch_poll(slash_kfetch *f, size_t max, int timeout_ms, int sep,
                               size_t *records, size_t *value_bytes, size_t *key_bytes) {
    *records = *value_bytes = 0;
    if (key_bytes)
        *key_bytes = 0;
    release(f);
    f->n_events = 0;
    slash_status st = reserve(f, max ? max : 1);
    if (st != SLASH_OK)
        return st;
    ssize_t got = rd_kafka_consume_batch_queue(f->queue, timeout_ms, f->msgs, max);
    if (got < 0)
        return kafka_fail(rd_kafka_last_error(), "poll", f->topic);
    size_t n = 0;
    for (ssize_t i = 0; i < got; i++) {
        rd_kafka_message_t *m = f->msgs[i];
        if (m->err) {
            st = add_event(f, m);
            rd_kafka_message_destroy(m);
            if (st != SLASH_OK) {
                for (ssize_t j = i + 1; j < got; j++)
                    rd_kafka_message_destroy(f->msgs[j]);
                f->held = n;
                release(f);
                return st;
            }
            continue;
        }
        f->msgs[n] = m;
        slash_krec *r = &f->recs[n++];
        r->value = m->payload;
        r->value_len = m->len;
        r->key = m->key;
        r->key_len = m->key_len;
        r->offset = m->offset;
        r->partition = m->partition;
        r->timestamp = rd_kafka_message_timestamp(m, NULL);
    }
    f->held = n;
    slash_kbatch_order(f->recs, n);
    *records = n;
    *value_bytes = slash_kbatch_bytes(f->recs, n, 0, sep);
    if (key_bytes) /* keys read */
        *key_bytes = slash_kbatch_bytes(f->recs, n, 1, 0);
    return SLASH_OK;
}

size_t slash_kfetch_events(const slash_kfetch *f) { return f->n_events; }

const slash_kevent *slash_kfetch_event(const slash_kfetch *f, size_t i) {
    return i < f->n_events ? &f->events[i] : NULL;
}

size_t slash_kfetch_fill(slash_kfetch *f, int sep, char *values, int64_t *starts,
                         int32_t *partition, int64_t *offset, int64_t *timestamp,
                         uint8_t *nulls, char *keys, int64_t *key_starts, uint8_t *key_nulls) {
    size_t nulls_n = slash_kbatch_fill(f->recs, f->held, sep, values, starts, partition, offset,
                                       timestamp, nulls, keys, key_starts, key_nulls);
    release(f);
    return nulls_n;
}

slash_status slash_kfetch_watermarks(slash_kfetch *f, int32_t partition, int timeout_ms,
                                     int64_t *low, int64_t *high) {
    rd_kafka_resp_err_t e =
        rd_kafka_query_watermark_offsets(f->rk, f->topic, partition, low, high, timeout_ms);
    return e ? kafka_fail(e, "watermark offsets", f->topic) : SLASH_OK;
}

slash_status slash_kfetch_position(slash_kfetch *f, int32_t partition, int64_t *offset) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, f->topic, partition);
    rd_kafka_resp_err_t e = rd_kafka_position(f->rk, l);
    *offset = l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    return e ? kafka_fail(e, "position", f->topic) : SLASH_OK;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

slash_status slash_kfetch_partitions(slash_kfetch *f, int timeout_ms, int32_t *out, size_t cap,
                                     size_t *n) {
    *n = 0;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(f->rk, 0, f->rkt, &md, timeout_ms);
    if (e)
        return kafka_fail(e, "metadata", f->topic);
    slash_status st = SLASH_OK;
    if (md->topic_cnt < 1 || md->topics[0].err) {
        st = kafka_fail(md->topic_cnt < 1 ? RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC : md->topics[0].err,
                        "metadata", f->topic);
    } else {
        const rd_kafka_metadata_topic_t *t = &md->topics[0];
        *n = (size_t)t->partition_cnt;
        for (int i = 0; i < t->partition_cnt && (size_t)i < cap; i++)
            out[i] = t->partitions[i].id;
        qsort(out, *n < cap ? *n : cap, sizeof *out, cmp_i32);
    }
    rd_kafka_metadata_destroy(md);
    return st;
}

#endif /* SLASH_HAVE_RDKAFKA */
