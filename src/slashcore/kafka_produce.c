/* kafka_produce.c - a paced Kafka producer of stamped templates
 * (kafka_produce.h), on librdkafka's C API. The stamp's formatting is pure
 * C; the producer is compiled in with SLASH_HAVE_RDKAFKA, and without it
 * every call says SLASH_ENOTSUP.
 *
 * Invariants: record k is template k % T sent to partition k % P; every
 * record of one tick carries the same stamp, the wall clock (ms) at the
 * tick's start, so stamps never decrease within a partition; the records
 * due are rate x the monotonic time elapsed, whatever the ticks' jitter,
 * and one tick sends for at most a tick's time (the rest stays due). */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "slash/kafka_produce.h"

/* ms in decimal into out (SLASH_KPROD_STAMP_MAX bytes); returns the length. */
static size_t stamp_digits(int64_t ms, char *out) {
    char rev[SLASH_KPROD_STAMP_MAX];
    size_t n = 0, at = 0;
    uint64_t u = ms < 0 ? (uint64_t)0 - (uint64_t)ms : (uint64_t)ms;
    do {
        rev[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (ms < 0)
        out[at++] = '-';
    while (n)
        out[at++] = rev[--n];
    return at;
}

static size_t assemble(const char *head, size_t head_len, const char *digits, size_t n_digits,
                       const char *tail, size_t tail_len, char *out) {
    memcpy(out, head, head_len);
    memcpy(out + head_len, digits, n_digits);
    memcpy(out + head_len + n_digits, tail, tail_len);
    return head_len + n_digits + tail_len;
}

size_t slash_kprod_format(const char *head, size_t head_len, const char *tail, size_t tail_len,
                          int64_t ms, char *out) {
    char digits[SLASH_KPROD_STAMP_MAX];
    size_t n = stamp_digits(ms, digits);
    return assemble(head, head_len, digits, n, tail, tail_len, out);
}

#ifndef SLASH_HAVE_RDKAFKA

static slash_status absent(void) {
    return slash_fail_static(SLASH_ENOTSUP, "the core was built without librdkafka "
                                            "(apt-get install librdkafka-dev, then rebuild)");
}

slash_status slash_kprod_new(const char *topic, int32_t partitions, const char *const *keys,
                             const char *const *values, size_t n, const char *const *heads,
                             const size_t *head_lens, const char *const *tails,
                             const size_t *tail_lens, size_t n_templates, slash_kprod **out) {
    (void)topic, (void)partitions, (void)keys, (void)values, (void)n, (void)heads;
    (void)head_lens, (void)tails, (void)tail_lens, (void)n_templates;
    *out = NULL;
    return absent();
}
void slash_kprod_free(slash_kprod *p) { (void)p; }
void slash_kprod_set_full(slash_kprod *p, int full) { (void)p, (void)full; }
void slash_kprod_set_end(slash_kprod *p, int64_t end_ms) { (void)p, (void)end_ms; }
slash_status slash_kprod_run(slash_kprod *p, double rate, double trickle, int64_t tick_us,
                             int64_t limit_ms, slash_kprod_counts *out) {
    (void)p, (void)rate, (void)trickle, (void)tick_us, (void)limit_ms;
    memset(out, 0, sizeof *out);
    return absent();
}
slash_status slash_kprod_flush(slash_kprod *p, int timeout_ms) {
    (void)p, (void)timeout_ms;
    return absent();
}

#else /* SLASH_HAVE_RDKAFKA */

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "kafka_conf.h"

struct slash_kprod {
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    char *topic;
    int32_t partitions;
    char *text;       /* every template's head and tail, back to back */
    size_t *at;       /* template i: head at text + at[2i], tail at text + at[2i+1] */
    size_t *len;      /* and their lengths, likewise */
    size_t templates;
    char *scratch;    /* one record being made */
    _Atomic int full;
    _Atomic int64_t end_ms;
    /* set by librdkafka's callbacks, served by rd_kafka_poll/flush on the
     * thread of slash_kprod_run or slash_kprod_flush (never both at once) */
    int64_t undelivered;
    int fatal;
    char delivery_error[256];
    char last_error[256];
};

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    slash_kprod *p = opaque;
    if (!m->err)
        return;
    if (p->undelivered++ == 0)
        snprintf(p->delivery_error, sizeof p->delivery_error, "partition %d: %s",
                 (int)m->partition, rd_kafka_err2str(m->err));
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    slash_kprod *p = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[200];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof why);
        p->fatal = 1;
        snprintf(p->last_error, sizeof p->last_error, "fatal: %s: %s", rd_kafka_err2str(orig),
                 why);
        return;
    }
    snprintf(p->last_error, sizeof p->last_error, "%s", reason);
}

void slash_kprod_free(slash_kprod *p) {
    if (!p)
        return;
    if (p->rkt)
        rd_kafka_topic_destroy(p->rkt);
    if (p->rk)
        rd_kafka_destroy(p->rk);
    free(p->topic);
    free(p->text);
    free(p->at);
    free(p->len);
    free(p->scratch);
    free(p);
}

/* Copies the templates into p (one buffer) and sizes the scratch record. */
static slash_status keep_templates(slash_kprod *p, const char *const *heads,
                                   const size_t *head_lens, const char *const *tails,
                                   const size_t *tail_lens, size_t n) {
    size_t total = 0, longest = 0;
    for (size_t i = 0; i < n; i++) {
        total += head_lens[i] + tail_lens[i];
        if (head_lens[i] + tail_lens[i] > longest)
            longest = head_lens[i] + tail_lens[i];
    }
    p->text = malloc(total ? total : 1);
    p->at = malloc(2 * n * sizeof *p->at);
    p->len = malloc(2 * n * sizeof *p->len);
    p->scratch = malloc(longest + SLASH_KPROD_STAMP_MAX);
    if (!p->text || !p->at || !p->len || !p->scratch)
        return slash_fail_static(SLASH_ENOMEM, "Kafka producer: templates");
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const char *part[2] = {heads[i], tails[i]};
        size_t lens[2] = {head_lens[i], tail_lens[i]};
        for (int j = 0; j < 2; j++) {
            p->at[2 * i + j] = off;
            p->len[2 * i + j] = lens[j];
            if (lens[j])
                memcpy(p->text + off, part[j], lens[j]);
            off += lens[j];
        }
    }
    p->templates = n;
    return SLASH_OK;
}

slash_status slash_kprod_new(const char *topic, int32_t partitions, const char *const *keys,
                             const char *const *values, size_t n, const char *const *heads,
                             const size_t *head_lens, const char *const *tails,
                             const size_t *tail_lens, size_t n_templates, slash_kprod **out) {
    *out = NULL;
    if (partitions < 1 || n_templates < 1)
        return slash_fail(SLASH_EINVAL, "Kafka producer of topic %s: %d partition(s) and %zu "
                          "template(s): at least one of each is needed", topic, (int)partitions,
                          n_templates);
    slash_kprod *p = calloc(1, sizeof *p);
    if (!p || !(p->topic = strdup(topic))) {
        free(p);
        return slash_fail_static(SLASH_ENOMEM, "Kafka producer");
    }
    p->partitions = partitions;
    atomic_init(&p->full, 0);
    atomic_init(&p->end_ms, INT64_MAX);
    slash_status st = keep_templates(p, heads, head_lens, tails, tail_lens, n_templates);
    if (st != SLASH_OK) {
        slash_kprod_free(p);
        return st;
    }
    char err[512];
    rd_kafka_conf_t *conf;
    st = kafka_conf_new(keys, values, n, &conf);
    if (st != SLASH_OK) {
        slash_kprod_free(p);
        return st;
    }
    /* only failed deliveries are reported (one callback per record costs), unless the
     * settings say otherwise */
    bool asked = false;
    for (size_t i = 0; i < n; i++)
        asked = asked || strcmp(keys[i], "delivery.report.only.error") == 0;
    if (!asked)
        (void)rd_kafka_conf_set(conf, "delivery.report.only.error", "true", err, sizeof err);
    rd_kafka_conf_set_opaque(conf, p);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err); /* owns conf if made */
    if (!p->rk) {
        rd_kafka_conf_destroy(conf);
        slash_kprod_free(p);
        return slash_fail(SLASH_EINVAL, "Kafka producer: %s", err);
    }
    p->rkt = rd_kafka_topic_new(p->rk, topic, NULL);
    if (!p->rkt) {
        st = slash_fail(SLASH_EINVAL, "Kafka producer of topic %s: %s", topic,
                        rd_kafka_err2str(rd_kafka_last_error()));
        slash_kprod_free(p);
        return st;
    }
    *out = p;
    return SLASH_OK;
}

void slash_kprod_set_full(slash_kprod *p, int full) { atomic_store(&p->full, full != 0); }

void slash_kprod_set_end(slash_kprod *p, int64_t end_ms) { atomic_store(&p->end_ms, end_ms); }

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_until(int64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

/* Sends record k stamped with digits; a full local queue is waited out, or
 * (wait 0) ends the sending: SLASH_ETIMEDOUT, and the record is not sent. */
static slash_status send_one(slash_kprod *p, int64_t k, const char *digits, size_t n_digits,
                             int wait) {
    size_t t = (size_t)(k % (int64_t)p->templates);
    size_t len = assemble(p->text + p->at[2 * t], p->len[2 * t], digits, n_digits,
                          p->text + p->at[2 * t + 1], p->len[2 * t + 1], p->scratch);
    int32_t part = (int32_t)(k % p->partitions);
    while (rd_kafka_produce(p->rkt, part, RD_KAFKA_MSG_F_COPY, p->scratch, len, NULL, 0, NULL)) {
        rd_kafka_resp_err_t e = rd_kafka_last_error();
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return slash_fail(SLASH_EPEER, "Kafka topic %s partition %d: produce: %s", p->topic,
                              (int)part, rd_kafka_err2str(e));
        if (!wait)
            return SLASH_ETIMEDOUT;
        rd_kafka_poll(p->rk, 10); /* the queue drains as the broker acknowledges */
    }
    return SLASH_OK;
}

static slash_status failed_delivery(const slash_kprod *p) {
    if (p->fatal)
        return slash_fail(SLASH_EPEER, "Kafka producer of topic %s: %s", p->topic, p->last_error);
    return slash_fail(SLASH_EPEER, "Kafka topic %s: %lld record(s) not delivered, the first: %s",
                      p->topic, (long long)p->undelivered, p->delivery_error);
}

slash_status slash_kprod_run(slash_kprod *p, double rate, double trickle, int64_t tick_us,
                             int64_t limit_ms, slash_kprod_counts *out) {
    memset(out, 0, sizeof *out);
    if (!(rate >= 0) || !(trickle >= 0) || tick_us < 1)
        return slash_fail(SLASH_EINVAL, "Kafka producer: rate %g, trickle %g and tick %lld us: "
                          "rates must be >= 0 and the tick >= 1 us", rate, trickle,
                          (long long)tick_us);
    const int64_t tick_ns = tick_us * 1000, t0 = mono_ns();
    int64_t n = 0, full_n = 0, full_from = -1, last = t0, next = t0;
    double due = 0.0;
    slash_status st = SLASH_OK;
    out->first_ms = wall_ms();
    for (int stop = 0; !stop;) {
        /* the stop (the end set, or the limit) is a point on the monotonic clock: what was due up
         * to it is sent however late the run sees it (a paused process owes no records) */
        int64_t now = mono_ns(), wall = wall_ms(), end_ms = atomic_load(&p->end_ms);
        if (now - t0 >= limit_ms * 1000000) {
            stop = 1;
            now = t0 + limit_ms * 1000000;
        }
        if (wall >= end_ms) {
            int64_t end = end_ms <= out->first_ms ? t0 : t0 + (end_ms - out->first_ms) * 1000000;
            now = stop && now < end ? now : end;
            stop = 1;
        }
        if (now < last)
            now = last;
        if (stop)
            wall = out->first_ms + (now - t0) / 1000000;
        int full = atomic_load(&p->full);
        if (full && full_from < 0) {
            full_from = last; /* the span since the last tick is counted at the full rate */
            full_n = n;
        }
        due += (double)(now - last) * 1e-9 * (full ? rate : trickle);
        last = now;
        char digits[SLASH_KPROD_STAMP_MAX];
        size_t n_digits = stamp_digits(wall, digits);
        /* what is due, but no longer than a tick: a rate above what the client takes leaves
         * records owed (the run reports what it fed) and the end is still seen on time; at the
         * stop, all that is due unless the client's queue is full */
        int64_t began = mono_ns();
        for (int64_t k = 0; n < (int64_t)due && st == SLASH_OK; n++, k++) {
            if (!stop && (k & 255) == 255 && mono_ns() - began >= tick_ns)
                break;
            st = send_one(p, n, digits, n_digits, !stop);
        }
        if (st == SLASH_ETIMEDOUT) { /* a full queue at the stop: the rest is owed */
            st = SLASH_OK;
            n--; /* (the loop's n++ ran after the record not sent) */
        }
        rd_kafka_poll(p->rk, 0); /* delivery reports and errors */
        if (st == SLASH_OK && (p->undelivered || p->fatal))
            st = failed_delivery(p);
        if (st != SLASH_OK)
            break;
        next += tick_ns;
        if (next < now) /* behind (a full queue, a busy machine): no burst of catch-up ticks */
            next = now;
        if (!stop)
            sleep_until(next);
    }
    out->events = n;
    out->last_ms = out->first_ms + (last - t0) / 1000000;
    out->full_events = full_from < 0 ? 0 : n - full_n;
    out->full_from_ms = full_from < 0 ? out->last_ms : out->first_ms + (full_from - t0) / 1000000;
    return st;
}

slash_status slash_kprod_flush(slash_kprod *p, int timeout_ms) {
    rd_kafka_resp_err_t e = rd_kafka_flush(p->rk, timeout_ms);
    if (p->undelivered || p->fatal)
        return failed_delivery(p);
    if (e == RD_KAFKA_RESP_ERR__TIMED_OUT)
        return slash_fail(SLASH_ETIMEDOUT, "Kafka topic %s: %d record(s) not acknowledged "
                          "within %d ms (the client's last error: %s)", p->topic,
                          rd_kafka_outq_len(p->rk), timeout_ms,
                          p->last_error[0] ? p->last_error : "none");
    if (e)
        return slash_fail(SLASH_EPEER, "Kafka topic %s: flush: %s", p->topic,
                          rd_kafka_err2str(e));
    return SLASH_OK;
}

#endif /* SLASH_HAVE_RDKAFKA */
