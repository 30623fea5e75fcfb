/* channel.c - the credit-flow-controlled ring channel (see channel.h).
 *
 * Memory: the consumer's ring region holds `credits` slots of `buffer_size`
 * bytes; a slot is payload from offset 0 and a footer in its last 16 bytes.
 * The producer's credit region holds one 64-bit word, the consumer's
 * cumulative release count. For transports without direct access (ofi) the
 * producer fills a staging copy of the ring and posts one-sided writes from
 * it; the consumer writes credit words from a small region of its own, using
 * a fresh 8-byte cell per write so a write in flight never has its source
 * changed under it.
 *
 * Ordering: buffer n lives in slot n % credits. The producer may write buffer
 * n only when n - released < credits. Payload is written before the footer,
 * and the footer's last byte, the flag, is written last; the flag's value
 * alternates with the lap (n / credits), so a slot that still holds the
 * previous lap's buffer never looks ready. The consumer loads the flag with
 * acquire, then checks the footer's sequence number equals n.
 *
 * Over a remote transport (ofi) memory alone proves nothing: RDMA does not
 * promise that bytes are placed in order, so a flag may be seen before the
 * payload, or buffer n+1 before buffer n. There the last write of a buffer
 * is signaled (immediate = its sequence number), and the consumer looks at
 * slot n only once the endpoint has counted n+1 signaled writes
 * (slash_endpoint_arrivals), which promises every earlier write is placed.
 * Likewise each credit write is signaled with the release count (its low 32
 * bits) as immediate, and the producer takes its credits from that, never
 * from a word that may be half placed; the consumer is never more than
 * `credits` ahead of what the producer knows, so 32 bits widen exactly.
 */
#define _GNU_SOURCE
#include "slash/channel.h"

#include "slash/backoff.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CHANNEL_MAGIC 0x43485331u /* "CHS1" */
#define KIND_DATA 1
#define KIND_EOF 2
#define CREDIT_CELLS 64
#define DEFAULT_SETUP_MS 10000
#define CHANNEL_DRAIN_MS 2000 /* a remote producer's close waits this long for the consumer */

typedef struct footer {
    uint64_t seq;
    uint32_t len;
    uint8_t kind;
    uint8_t pad[2];
    uint8_t flag; /* last byte of the slot, written last */
} footer;
static_assert(sizeof(footer) == SLASH_CHANNEL_FOOTER, "footer is 16 bytes");

typedef struct hello {
    uint32_t magic;
    uint32_t credits;
    uint64_t buffer_size;
} hello;
static_assert(sizeof(hello) == 16, "hello is 16 bytes");

struct slash_channel {
    bool producer;
    slash_endpoint *ep;
    size_t m;   /* buffer_size */
    uint32_t c; /* credits */
    slash_channel_stats stats;

    /* producer */
    slash_region *credit_word; /* consumer writes its release count here */
    slash_region *staging;     /* ofi: local copy of the ring; NULL for shm */
    slash_remote *ring_remote; /* the consumer's ring */
    uint8_t *ring_out;         /* where reserve() hands out slots */
    uint64_t next_seq;
    bool reserved;
    bool eof_sent;
    uint64_t credits_seen;     /* ofi: release count from the last signaled credit */

    /* consumer */
    slash_region *ring;
    slash_region *credit_src;      /* ofi: cells the credit writes come from */
    slash_remote *credit_remote;   /* the producer's credit word */
    uint64_t expect_seq;           /* next buffer to poll */
    uint64_t released;             /* buffers released */
    uint64_t released_sent;        /* release count last written to the producer */
    bool holding;                  /* a polled buffer is not yet released */
    bool counted;                  /* ofi: slots are ready once arrivals count them */
    uint64_t arrived;              /* ofi: signaled slot writes visible here */
    bool eof_seen;
};

static inline uint8_t lap_flag(uint64_t seq, uint32_t c)
{
    return ((seq / c) & 1) ? 0xB5 : 0x5A;
}

slash_status slash_channel_config_check(const slash_channel_config *cfg)
{
    if (cfg->buffer_size < SLASH_CHANNEL_MIN_BUFFER || cfg->buffer_size > SLASH_CHANNEL_MAX_BUFFER)
        return slash_fail(SLASH_EINVAL, "buffer_size %zu outside [%u, %u]", cfg->buffer_size,
                          SLASH_CHANNEL_MIN_BUFFER, SLASH_CHANNEL_MAX_BUFFER);
    if (cfg->buffer_size % 64 != 0)
        return slash_fail(SLASH_EINVAL, "buffer_size %zu is not a multiple of 64 (cache line)",
                          cfg->buffer_size);
    if (cfg->credits < 1 || cfg->credits > SLASH_CHANNEL_MAX_CREDITS)
        return slash_fail(SLASH_EINVAL, "credits %u outside [1, %u]", cfg->credits,
                          SLASH_CHANNEL_MAX_CREDITS);
    return SLASH_OK;
}

static slash_channel *channel_new(bool producer)
{
    slash_channel *ch = calloc(1, sizeof *ch);
    if (ch)
        ch->producer = producer;
    return ch;
}

static void channel_free(slash_channel *ch)
{
    slash_remote_detach(ch->ring_remote);
    slash_remote_detach(ch->credit_remote);
    slash_endpoint_close(ch->ep);
    slash_region_free(ch->credit_word);
    slash_region_free(ch->staging);
    slash_region_free(ch->ring);
    slash_region_free(ch->credit_src);
    free(ch);
}

slash_status slash_channel_accept(slash_listener *l, const slash_channel_config *cfg,
                                  int timeout_ms, slash_channel **out)
{
    *out = NULL;
    slash_status st = slash_channel_config_check(cfg);
    if (st != SLASH_OK)
        return st;
    if ((uint64_t)cfg->buffer_size * cfg->credits > (1ull << 36))
        return slash_fail(SLASH_EINVAL, "ring of %u x %zu bytes exceeds 64 GiB", cfg->credits,
                          cfg->buffer_size);
    slash_channel *ch = channel_new(false);
    if (!ch)
        return slash_fail(SLASH_ENOMEM, "channel: out of memory");
    ch->m = cfg->buffer_size;
    ch->c = cfg->credits;
    slash_transport *tp = NULL;
    st = slash_accept(l, timeout_ms, &ch->ep);
    if (st == SLASH_OK) {
        tp = slash_endpoint_transport(ch->ep);
        st = slash_region_alloc(tp, ch->m * ch->c, &ch->ring);
    }
    if (st == SLASH_OK)
        st = slash_region_alloc(tp, CREDIT_CELLS * sizeof(uint64_t), &ch->credit_src);
    if (st == SLASH_OK) {
        hello h = {.magic = CHANNEL_MAGIC, .credits = ch->c, .buffer_size = ch->m};
        st = slash_endpoint_send_msg(ch->ep, &h, sizeof h);
    }
    if (st == SLASH_OK)
        st = slash_endpoint_expose(ch->ep, ch->ring);
    if (st == SLASH_OK)
        st = slash_endpoint_attach(ch->ep, timeout_ms < 0 ? DEFAULT_SETUP_MS : timeout_ms,
                                   &ch->credit_remote);
    if (st == SLASH_OK && slash_remote_len(ch->credit_remote) < sizeof(uint64_t))
        st = slash_fail(SLASH_EPROTO, "channel: producer's credit region is too small");
    if (st != SLASH_OK) {
        channel_free(ch);
        return st;
    }
    ch->stats.buffer_size = ch->m;
    ch->stats.credits = ch->c;
    ch->stats.hugepages = slash_region_hugepages(ch->ring);
    ch->counted = !slash_remote_direct(ch->credit_remote);
    *out = ch;
    return SLASH_OK;
}

slash_status slash_channel_connect(slash_transport *tp, const char *addr, const char *token,
                                   int timeout_ms, slash_channel **out)
{
    *out = NULL;
    slash_channel *ch = channel_new(true);
    if (!ch)
        return slash_fail(SLASH_ENOMEM, "channel: out of memory");
    int setup_ms = timeout_ms < 0 ? DEFAULT_SETUP_MS : timeout_ms;
    hello h;
    size_t n = 0;
    slash_status st = slash_connect(tp, addr, token, timeout_ms, &ch->ep);
    if (st == SLASH_OK)
        st = slash_endpoint_recv_msg(ch->ep, &h, sizeof h, &n, setup_ms);
    if (st == SLASH_OK && (n != sizeof h || h.magic != CHANNEL_MAGIC))
        st = slash_fail(SLASH_EPROTO, "channel: the listener at \"%s\" is not a channel", addr);
    if (st == SLASH_OK) {
        slash_channel_config cfg = {.buffer_size = (size_t)h.buffer_size, .credits = h.credits};
        st = slash_channel_config_check(&cfg);
        ch->m = cfg.buffer_size;
        ch->c = cfg.credits;
    }
    if (st == SLASH_OK)
        st = slash_endpoint_attach(ch->ep, setup_ms, &ch->ring_remote);
    if (st == SLASH_OK && slash_remote_len(ch->ring_remote) < ch->m * ch->c)
        st = slash_fail(SLASH_EPROTO, "channel: consumer's ring is smaller than announced");
    if (st == SLASH_OK)
        st = slash_region_alloc(tp, sizeof(uint64_t), &ch->credit_word);
    if (st == SLASH_OK && !slash_remote_direct(ch->ring_remote))
        st = slash_region_alloc(tp, ch->m * ch->c, &ch->staging);
    if (st == SLASH_OK)
        st = slash_endpoint_expose(ch->ep, ch->credit_word);
    if (st != SLASH_OK) {
        channel_free(ch);
        return st;
    }
    ch->ring_out = ch->staging ? (uint8_t *)slash_region_addr(ch->staging)
                               : (uint8_t *)slash_remote_direct(ch->ring_remote);
    ch->stats.buffer_size = ch->m;
    ch->stats.credits = ch->c;
    ch->stats.hugepages = ch->staging ? slash_region_hugepages(ch->staging) : false;
    *out = ch;
    return SLASH_OK;
}

/* ---- producer ------------------------------------------------------------- */

static inline uint64_t credits_returned(const slash_channel *ch)
{
    if (ch->staging)
        return ch->credits_seen;
    return atomic_load_explicit((_Atomic uint64_t *)slash_region_addr(ch->credit_word),
                                memory_order_acquire);
}

/* Drives the endpoint; over ofi also takes the credits the consumer's
 * signaled writes carried (the low 32 bits of its release count). */
static slash_status producer_progress(slash_channel *ch)
{
    if (!ch->staging)
        return slash_endpoint_progress(ch->ep);
    uint64_t n;
    uint32_t low;
    slash_status st = slash_endpoint_arrivals(ch->ep, &n, &low);
    if (n > 0)
        ch->credits_seen += (uint32_t)(low - (uint32_t)ch->credits_seen);
    return st;
}

/* Waits until slot for next_seq is free. */
static slash_status wait_credit(slash_channel *ch, int timeout_ms)
{
    if (ch->next_seq - credits_returned(ch) < ch->c)
        return SLASH_OK;
    ch->stats.credit_stalls++;
    uint64_t deadline = slash_deadline(timeout_ms);
    slash_backoff b;
    slash_backoff_reset(&b);
    for (;;) {
        slash_status st = producer_progress(ch);
        if (ch->next_seq - credits_returned(ch) < ch->c)
            return SLASH_OK;
        if (st != SLASH_OK)
            return slash_fail(st, "channel: consumer gone while waiting for a credit (%s)",
                              slash_last_error());
        if (timeout_ms == 0)
            return slash_fail_static(SLASH_ETIMEDOUT, "channel: no credit free (try-reserve, timeout 0)");
        if (slash_deadline_passed(deadline))
            return slash_fail(SLASH_ETIMEDOUT,
                              "channel: no credit within %d ms (consumer is not releasing buffers)",
                              timeout_ms);
        slash_backoff_wait(&b);
    }
}

/* Producer over a remote transport: waits (bounded) until the consumer has
 * released the first `upto` buffers or is gone, so closing the endpoint
 * cannot cut off bytes still in flight that it reads (a socket closed with
 * unread input resets). The consumer's process must make progress for that:
 * one whose process waits on this close (executors closed one after another
 * by one thread) returns nothing before the timeout. */
static void wait_drained(slash_channel *ch, uint64_t upto, int timeout_ms)
{
    uint64_t deadline = slash_deadline(timeout_ms);
    slash_backoff b;
    slash_backoff_reset(&b);
    while (credits_returned(ch) < upto && !slash_deadline_passed(deadline)) {
        if (producer_progress(ch) != SLASH_OK)
            return;
        slash_backoff_wait(&b);
    }
}

slash_status slash_channel_reserve(slash_channel *ch, int timeout_ms, void **buf, size_t *cap)
{
    if (!ch->producer)
        return slash_fail(SLASH_ESTATE, "channel: reserve on the consumer end");
    if (ch->eof_sent)
        return slash_fail(SLASH_ESTATE, "channel: already closed for sending (end-of-stream sent)");
    if (!ch->reserved) {
        slash_status st = wait_credit(ch, timeout_ms);
        if (st != SLASH_OK)
            return st;
        ch->reserved = true;
    }
    *buf = ch->ring_out + (ch->next_seq % ch->c) * ch->m;
    *cap = ch->m - SLASH_CHANNEL_FOOTER;
    return SLASH_OK;
}

/* Writes the footer of the reserved slot and posts the slot to the consumer. */
static slash_status publish(slash_channel *ch, size_t len, uint8_t kind)
{
    size_t slot_off = (ch->next_seq % ch->c) * ch->m;
    uint8_t *slot = ch->ring_out + slot_off;
    footer *f = (footer *)(slot + ch->m - SLASH_CHANNEL_FOOTER);
    f->seq = ch->next_seq;
    f->len = (uint32_t)len;
    f->kind = kind;
    f->pad[0] = f->pad[1] = 0;
    uint8_t flag = lap_flag(ch->next_seq, ch->c);
    slash_status st = SLASH_OK;
    if (!ch->staging) {
        /* shm: payload is already in place; publish the flag with release */
        atomic_store_explicit((_Atomic uint8_t *)&f->flag, flag, memory_order_release);
        st = slash_endpoint_progress(ch->ep);
    } else {
        f->flag = flag;
        /* one write when the unused gap is small, else payload then footer;
         * the last is signaled, and its arrival at the consumer promises both */
        size_t foot_off = slot_off + ch->m - SLASH_CHANNEL_FOOTER;
        size_t gap = ch->m - SLASH_CHANNEL_FOOTER - len;
        uint32_t imm = (uint32_t)ch->next_seq;
        if (len > 0 && gap <= 256) {
            st = slash_endpoint_write_signal(ch->ep, ch->staging, slot_off, ch->ring_remote,
                                             slot_off, ch->m, imm);
        } else {
            if (len > 0)
                st = slash_endpoint_write(ch->ep, ch->staging, slot_off, ch->ring_remote, slot_off, len);
            if (st == SLASH_OK)
                st = slash_endpoint_write_signal(ch->ep, ch->staging, foot_off, ch->ring_remote,
                                                 foot_off, SLASH_CHANNEL_FOOTER, imm);
        }
    }
    if (st != SLASH_OK)
        return st;
    ch->next_seq++;
    ch->reserved = false;
    if (kind == KIND_DATA) {
        ch->stats.buffers++;
        ch->stats.bytes += len;
    }
    return SLASH_OK;
}

slash_status slash_channel_commit(slash_channel *ch, size_t len)
{
    if (!ch->producer)
        return slash_fail(SLASH_ESTATE, "channel: commit on the consumer end");
    if (!ch->reserved)
        return slash_fail(SLASH_ESTATE, "channel: commit without a reserved slot");
    if (len == 0)
        return slash_fail(SLASH_EINVAL, "channel: cannot send a zero-length buffer");
    if (len > ch->m - SLASH_CHANNEL_FOOTER)
        return slash_fail(SLASH_ETOOBIG, "channel: buffer of %zu bytes exceeds the slot payload of %zu",
                          len, ch->m - SLASH_CHANNEL_FOOTER);
    return publish(ch, len, KIND_DATA);
}

slash_status slash_channel_send(slash_channel *ch, const void *data, size_t len, int timeout_ms)
{
    if (!ch->producer)
        return slash_fail(SLASH_ESTATE, "channel: send on the consumer end");
    if (len == 0)
        return slash_fail(SLASH_EINVAL, "channel: cannot send a zero-length buffer");
    if (len > ch->m - SLASH_CHANNEL_FOOTER)
        return slash_fail(SLASH_ETOOBIG, "channel: buffer of %zu bytes exceeds the slot payload of %zu",
                          len, ch->m - SLASH_CHANNEL_FOOTER);
    void *slot;
    size_t cap;
    slash_status st = slash_channel_reserve(ch, timeout_ms, &slot, &cap);
    if (st != SLASH_OK)
        return st;
    memcpy(slot, data, len);
    return publish(ch, len, KIND_DATA);
}

slash_status slash_channel_send_eof(slash_channel *ch, int timeout_ms)
{
    if (!ch->producer)
        return slash_fail(SLASH_ESTATE, "channel: send_eof on the consumer end");
    if (ch->eof_sent)
        return SLASH_OK;
    void *slot;
    size_t cap;
    slash_status st = slash_channel_reserve(ch, timeout_ms, &slot, &cap);
    if (st != SLASH_OK)
        return st;
    st = publish(ch, 0, KIND_EOF);
    if (st == SLASH_OK)
        ch->eof_sent = true;
    if (st == SLASH_OK && ch->staging)
        st = slash_endpoint_flush(ch->ep, timeout_ms);
    return st;
}

/* ---- consumer ------------------------------------------------------------- */

static slash_status return_credits(slash_channel *ch)
{
    if (ch->released == ch->released_sent)
        return SLASH_OK;
    void *direct = slash_remote_direct(ch->credit_remote);
    if (direct) {
        atomic_store_explicit((_Atomic uint64_t *)direct, ch->released, memory_order_release);
    } else {
        size_t cell = (size_t)(ch->released % CREDIT_CELLS) * sizeof(uint64_t);
        memcpy((uint8_t *)slash_region_addr(ch->credit_src) + cell, &ch->released, sizeof(uint64_t));
        slash_status st = slash_endpoint_write_signal(ch->ep, ch->credit_src, cell,
                                                      ch->credit_remote, 0, sizeof(uint64_t),
                                                      (uint32_t)ch->released);
        if (st != SLASH_OK)
            return st;
    }
    ch->released_sent = ch->released;
    return SLASH_OK;
}

/* Drives the endpoint; over ofi also counts the slots that arrived. */
static slash_status consumer_progress(slash_channel *ch)
{
    if (!ch->counted)
        return slash_endpoint_progress(ch->ep);
    uint32_t last;
    return slash_endpoint_arrivals(ch->ep, &ch->arrived, &last);
}

/* Returns the footer of the next slot if it is ready, else NULL. */
static inline const footer *ready_footer(slash_channel *ch)
{
    if (ch->counted && ch->arrived <= ch->expect_seq)
        return NULL;
    uint8_t *slot = (uint8_t *)slash_region_addr(ch->ring) + (ch->expect_seq % ch->c) * ch->m;
    const footer *f = (const footer *)(slot + ch->m - SLASH_CHANNEL_FOOTER);
    uint8_t flag = atomic_load_explicit((_Atomic uint8_t *)&f->flag, memory_order_acquire);
    return flag == lap_flag(ch->expect_seq, ch->c) ? f : NULL;
}

/* ready_footer, and over ofi once more after counting what arrived since
 * (so a consumer keeps batching credits while buffers keep coming; a
 * failure is left for the caller's wait to report). */
static const footer *next_footer(slash_channel *ch)
{
    const footer *f = ready_footer(ch);
    if (!f && ch->counted && consumer_progress(ch) == SLASH_OK)
        f = ready_footer(ch);
    return f;
}

slash_status slash_channel_poll(slash_channel *ch, int timeout_ms, const void **buf, size_t *len,
                                uint64_t *seq)
{
    if (ch->producer)
        return slash_fail(SLASH_ESTATE, "channel: poll on the producer end");
    if (ch->holding)
        return slash_fail(SLASH_ESTATE, "channel: release the previous buffer before polling again");
    if (ch->eof_seen)
        return SLASH_EOF;
    ch->stats.polls++;
    const footer *f = next_footer(ch);
    if (!f) {
        ch->stats.empty_polls++;
        /* credits held back for batching go out before we wait */
        slash_status st = return_credits(ch);
        if (st != SLASH_OK && st != SLASH_EPEER)
            return st;
        uint64_t deadline = slash_deadline(timeout_ms);
        slash_backoff b;
        slash_backoff_reset(&b);
        for (;;) {
            st = consumer_progress(ch);
            if ((f = ready_footer(ch)))
                break;
            if (st != SLASH_OK)
                return slash_fail(st, "channel: producer gone before end-of-stream (%s)",
                                  slash_last_error());
            if (timeout_ms == 0)
                return slash_fail_static(SLASH_ETIMEDOUT,
                                         "channel: no buffer ready (try-poll, timeout 0)");
            if (slash_deadline_passed(deadline))
                return slash_fail(SLASH_ETIMEDOUT, "channel: no buffer within %d ms", timeout_ms);
            slash_backoff_wait(&b);
        }
    }
    if (f->seq != ch->expect_seq)
        return slash_fail(SLASH_EPROTO, "channel: expected buffer %llu, slot holds %llu",
                          (unsigned long long)ch->expect_seq, (unsigned long long)f->seq);
    if (f->kind == KIND_EOF) {
        ch->eof_seen = true;
        ch->expect_seq++;
        ch->released++;
        return_credits(ch);
        return SLASH_EOF;
    }
    if (f->kind != KIND_DATA || f->len == 0 || f->len > ch->m - SLASH_CHANNEL_FOOTER)
        return slash_fail(SLASH_EPROTO, "channel: corrupt footer (kind %u, length %u)", f->kind,
                          f->len);
    *buf = (const uint8_t *)f + SLASH_CHANNEL_FOOTER - ch->m;
    *len = f->len;
    *seq = f->seq;
    ch->holding = true;
    ch->stats.buffers++;
    ch->stats.bytes += f->len;
    return SLASH_OK;
}

slash_status slash_channel_release(slash_channel *ch)
{
    if (ch->producer)
        return slash_fail(SLASH_ESTATE, "channel: release on the producer end");
    if (!ch->holding)
        return slash_fail(SLASH_ESTATE, "channel: nothing to release");
    ch->holding = false;
    ch->expect_seq++;
    ch->released++;
    /* direct credit words are a plain store: return at once. Remote writes
     * are batched to a quarter of the ring while more buffers are ready, and
     * flushed when the ring runs dry, so the producer never waits on a
     * held-back credit. */
    uint32_t batch = ch->c / 4 ? ch->c / 4 : 1;
    if (!slash_remote_direct(ch->credit_remote) && ch->released - ch->released_sent < batch &&
        next_footer(ch))
        return SLASH_OK; /* more is ready: the next poll takes it without waiting */
    /* the ring ran dry: what was released goes back now, not at the next
     * poll, which may never come (a consumer whose protocol ended reads no
     * further; its producer's close waits for these credits) */
    /* A producer that already left needs no credit: what it wrote is still
     * here, and the next poll reports end-of-stream or its disappearance. */
    slash_status st = return_credits(ch);
    return st == SLASH_EPEER ? SLASH_OK : st;
}

slash_status slash_channel_recv(slash_channel *ch, void *dst, size_t cap, size_t *len,
                                int timeout_ms)
{
    const void *buf;
    uint64_t seq;
    slash_status st = slash_channel_poll(ch, timeout_ms, &buf, len, &seq);
    if (st != SLASH_OK)
        return st;
    if (*len > cap) {
        /* keep the buffer: un-poll it so nothing is lost */
        ch->holding = false;
        ch->stats.buffers--;
        ch->stats.bytes -= *len;
        return slash_fail(SLASH_ETOOBIG, "channel: received buffer of %zu bytes, destination holds %zu",
                          *len, cap);
    }
    memcpy(dst, buf, *len);
    return slash_channel_release(ch);
}

/* ---- both ----------------------------------------------------------------- */

static void channel_close(slash_channel *ch, bool eof_read)
{
    if (!ch)
        return;
    uint64_t data = ch->producer && ch->eof_sent ? ch->next_seq - 1 : ch->next_seq;
    if (ch->producer && !ch->eof_sent && ch->ep)
        slash_channel_send_eof(ch, 1000);
    if (ch->producer && ch->staging && ch->eof_sent)
        wait_drained(ch, eof_read ? ch->next_seq : data, CHANNEL_DRAIN_MS);
    if (!ch->producer && ch->ep)
        return_credits(ch);
    channel_free(ch);
}

void slash_channel_close(slash_channel *ch) { channel_close(ch, true); }

void slash_channel_close_ended(slash_channel *ch) { channel_close(ch, false); }

bool slash_channel_is_producer(const slash_channel *ch) { return ch->producer; }

void slash_channel_get_stats(const slash_channel *ch, slash_channel_stats *out) { *out = ch->stats; }

slash_endpoint *slash_channel_endpoint(slash_channel *ch) { return ch->ep; }
