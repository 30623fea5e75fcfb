/* test_checkpoint.c - the checkpoint format (checkpoint.h) and restore of an
 * executor (exec.h): a store written and read back emits exactly what the
 * original emits (tumbling, sliding, session; averages with their counts;
 * int and string keys; a partly emitted store keeps its emitted watermark);
 * every truncation, every single bit flip, a foreign fingerprint and a wrong
 * partition are refused with a detail and leave the store unchanged; the
 * bulk restore into an empty partition sizes its index for many keys (later
 * updates find every restored record), refuses a (window, key) given twice
 * or overlapping sessions of a key and leaves the partition empty, and a
 * restore into a partition that holds records merges; the CRC32C instruction
 * path equals the table; an executor checkpointed mid-input and restored
 * into a new one gives the uninterrupted run's results; and in a group of
 * another size, a rank restored after a peer's final epoch reached it still
 * fires the windows of its partitions. */
#define _GNU_SOURCE
#include "slash/checkpoint.h"
#include "slash/exec.h"
#include "blob_faults.h"
#include "unit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define NREC 4000
static int64_t times[NREC], keys[NREC], ivals[NREC], offs[NREC + 1];
static double fvals[NREC];
static uint8_t kdata[NREC * 8];

static void make_input(uint64_t seed)
{
    uint64_t s = seed;
    size_t kd = 0;
    offs[0] = 0;
    for (int i = 0; i < NREC; i++) {
        times[i] = i * 5 + (int64_t)(unit_rng(&s) % 40);
        keys[i] = (int64_t)(unit_rng(&s) % 97);
        ivals[i] = (int64_t)(unit_rng(&s) % 1000) - 400;
        fvals[i] = (double)ivals[i] / 4;
        kd += (size_t)snprintf((char *)kdata + kd, 8, "k%lld", (long long)keys[i]);
        offs[i + 1] = (int64_t)kd;
    }
}

static slash_ssb_config config(slash_window_kind kind, slash_key_type kt, uint32_t parts)
{
    slash_ssb_config c;
    memset(&c, 0, sizeof c);
    slash_window_init(&c.window, kind, 1000, kind == SLASH_WINDOW_SLIDING ? 250 : 0);
    if (kind == SLASH_WINDOW_SESSION)
        slash_window_init(&c.window, kind, 30, 0);
    c.key_type = kt;
    c.partitions = parts;
    c.naggs = 5;
    c.aggs[0] = SLASH_AGG_COUNT;
    c.aggs[1] = SLASH_AGG_SUM_I64;
    c.aggs[2] = SLASH_AGG_AVG_I64;
    c.aggs[3] = SLASH_AGG_MIN_F64;
    c.aggs[4] = SLASH_AGG_AVG_F64;
    c.log_reserve = (size_t)1 << 24;
    return c;
}

static slash_ssb_batch batch(const slash_ssb_config *c, size_t from, size_t n)
{
    slash_ssb_batch b = {.n = n, .times = times + from};
    if (c->key_type == SLASH_KEY_INT64) {
        b.keys = keys + from;
    } else {
        b.key_offsets = offs + from;
        b.key_offsets_64 = 1;
        b.key_data = kdata;
    }
    b.values[1] = ivals + from;
    b.values[2] = ivals + from;
    b.values[3] = fvals + from;
    b.values[4] = fvals + from;
    return b;
}

/* A digest of a result, independent of row order: sums of per-row hashes. */
static uint64_t digest(const slash_ssb_result *r, size_t *rows)
{
    uint64_t d = 0;
    for (size_t i = 0; i < r->rows; i++) {
        uint64_t h = (uint64_t)r->window_start[i] * 31 + (uint64_t)r->window_end[i];
        if (r->keys) {
            h = h * 1000003 + (uint64_t)r->keys[i];
        } else {
            for (int64_t k = r->key_offsets[i]; k < r->key_offsets[i + 1]; k++)
                h = h * 131 + r->key_data[k];
        }
        for (uint32_t j = 0; j < r->naggs; j++) {
            uint64_t v;
            memcpy(&v, (uint8_t *)r->columns[j] + 8 * i, 8);
            h = (h ^ v) * 0x9E3779B97F4A7C15ull;
        }
        d += h ^ (h >> 29);
    }
    *rows += r->rows;
    return d;
}

static uint64_t emit_all(slash_ssb *s, size_t *rows)
{
    slash_ssb_result *r;
    CHECK_OK(slash_ssb_emit(s, INT64_MAX, &r));
    uint64_t d = digest(r, rows);
    slash_ssb_result_free(r);
    return d;
}

/* A store with the input, its windows up to `emitted` fired. */
static slash_ssb *filled(const slash_ssb_config *c, int64_t emitted)
{
    slash_ssb *s;
    CHECK_OK(slash_ssb_open(c, &s));
    slash_ssb_batch b = batch(c, 0, NREC);
    CHECK_OK(slash_ssb_update(s, &b));
    slash_ssb_result *r;
    CHECK_OK(slash_ssb_emit(s, emitted, &r));
    slash_ssb_result_free(r);
    return s;
}

static void round_trip(slash_window_kind kind, slash_key_type kt)
{
    make_input(kind * 7 + kt);
    slash_ssb_config c = config(kind, kt, 4);
    slash_ssb *s = filled(&c, 9000), *t;
    CHECK_OK(slash_ssb_open(&c, &t));
    for (uint32_t p = 0; p < c.partitions; p++) {
        uint8_t *blob;
        size_t len;
        CHECK_OK(slash_ckpt_write_partition(s, p, &blob, &len));
        CHECK_OK(slash_ckpt_read_partition(t, p, blob, len));
        free(blob);
    }
    CHECK(slash_ssb_watermark(t) == slash_ssb_watermark(s));
    slash_ssb_stats a, b;
    slash_ssb_get_stats(s, &a);
    slash_ssb_get_stats(t, &b);
    CHECK(a.records == b.records && a.records > 0);
    size_t ra = 0, rb = 0;
    CHECK(emit_all(s, &ra) == emit_all(t, &rb));
    CHECK(ra == rb && ra > 0);
    slash_ssb_close(s);
    slash_ssb_close(t);
}

TEST(round_trip_tumbling_int_keys) { round_trip(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64); }
TEST(round_trip_sliding_string_keys) { round_trip(SLASH_WINDOW_SLIDING, SLASH_KEY_BYTES); }
TEST(round_trip_sliding_int_keys) { round_trip(SLASH_WINDOW_SLIDING, SLASH_KEY_INT64); }
TEST(round_trip_session_string_keys) { round_trip(SLASH_WINDOW_SESSION, SLASH_KEY_BYTES); }
TEST(round_trip_session_int_keys) { round_trip(SLASH_WINDOW_SESSION, SLASH_KEY_INT64); }

/* The blob of partition 1 of a small sliding store, and an empty store to read into. */
static void small_blob(slash_ssb_config *c, uint8_t **blob, size_t *len)
{
    make_input(5);
    *c = config(SLASH_WINDOW_SLIDING, SLASH_KEY_BYTES, 2);
    slash_ssb *s;
    CHECK_OK(slash_ssb_open(c, &s));
    slash_ssb_batch b = batch(c, 0, 300);
    CHECK_OK(slash_ssb_update(s, &b));
    CHECK_OK(slash_ckpt_write_partition(s, 1, blob, len));
    slash_ssb_close(s);
}

static bool refused_and_unchanged(const slash_ssb_config *c, uint32_t part, const uint8_t *p,
                                  size_t len)
{
    slash_ssb *t;
    if (slash_ssb_open(c, &t) != SLASH_OK)
        return false;
    slash_status st = slash_ckpt_read_partition(t, part, p, len);
    slash_ssb_stats s;
    slash_ssb_get_stats(t, &s);
    bool ok = st == SLASH_EINVAL && s.records == 0 && strstr(slash_last_error(), "checkpoint");
    slash_ssb_close(t);
    return ok;
}

/* blob_faults_check over refused_and_unchanged for partition 1; ctx: the config */
static bool partition_1_refused(const void *ctx, const uint8_t *p, size_t len)
{
    return refused_and_unchanged(ctx, 1, p, len);
}

TEST(every_truncation_is_refused)
{
    slash_ssb_config c;
    uint8_t *blob;
    size_t len;
    small_blob(&c, &blob, &len);
    CHECK(len > 200);
    CHECK(blob_faults_truncations(blob, len, partition_1_refused, &c) == 0);
    free(blob);
}

TEST(every_bit_flip_is_refused)
{
    slash_ssb_config c;
    uint8_t *blob;
    size_t len;
    small_blob(&c, &blob, &len);
    CHECK(blob_faults_bit_flips(blob, len, partition_1_refused, &c) == 0);
    free(blob);
}

TEST(fingerprint_mismatch_and_wrong_partition_are_refused)
{
    slash_ssb_config c;
    uint8_t *blob;
    size_t len;
    small_blob(&c, &blob, &len);
    slash_ssb_config other = c;
    other.aggs[2] = SLASH_AGG_MAX_I64; /* same record size, other meaning */
    CHECK(refused_and_unchanged(&other, 1, blob, len));
    CHECK(strstr(slash_last_error(), "fingerprint") != NULL);
    other = c;
    slash_window_init(&other.window, SLASH_WINDOW_SLIDING, 1000, 500);
    CHECK(refused_and_unchanged(&other, 1, blob, len));
    CHECK(refused_and_unchanged(&c, 0, blob, len));
    CHECK(strstr(slash_last_error(), "partition 1, not 0") != NULL);
    slash_ssb *t;
    CHECK_OK(slash_ssb_open(&c, &t));
    CHECK_OK(slash_ckpt_read_partition(t, 1, blob, len));
    slash_ssb_close(t);
    free(blob);
}

TEST(meta_round_trip_and_refusals)
{
    static slash_ckpt_meta_info m, back;
    m.id = 9, m.pushes = 41, m.rank = 2, m.size = 3, m.partitions = 12;
    m.published = 5000, m.fired = 4000, m.max_seen = 5200, m.advanced = INT64_MIN, m.epoch = 77;
    m.records_in = 123456, m.late_records = 7;
    m.vclock[0] = 4000, m.vclock[1] = 4500, m.vclock[2] = 5000;
    uint8_t *blob;
    size_t len;
    CHECK_OK(slash_ckpt_write_meta(&m, 0xabcdef, &blob, &len));
    CHECK_OK(slash_ckpt_read_meta(blob, len, 0xabcdef, &back));
    CHECK(memcmp(&m, &back, sizeof m) == 0);
    CHECK_ST(slash_ckpt_read_meta(blob, len, 0xabcdee, &back), SLASH_EINVAL);
    CHECK_ST(slash_ckpt_read_meta(blob, len - 1, 0xabcdef, &back), SLASH_EINVAL);
    blob[70] ^= 4;
    CHECK_ST(slash_ckpt_read_meta(blob, len, 0xabcdef, &back), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "checksum") != NULL);
    free(blob);
}

/* ---- bulk restore (an empty partition) and merge (a partition with records) ---- */

#define NBIG 300000
static int64_t big_t[NBIG], big_k[NBIG], big_v[NBIG];

static slash_ssb_batch big_batch(size_t from, size_t n)
{
    slash_ssb_batch b = {.n = n, .times = big_t + from, .keys = big_k + from};
    b.values[1] = big_v + from;
    b.values[2] = big_v + from;
    return b;
}

TEST(bulk_restore_of_many_keys_is_found_by_later_updates)
{
    /* many distinct keys: the restored index must be sized for them, and every
     * restored record must be found by an update (else a second record of its
     * (window, key) would appear and emit a row twice) */
    slash_ssb_config c = config(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64, 3);
    c.naggs = 3;
    c.log_reserve = (size_t)1 << 28;
    uint64_t rs = 99;
    for (size_t i = 0; i < NBIG; i++) {
        big_t[i] = (int64_t)(unit_rng(&rs) % 2000);
        big_k[i] = (int64_t)(unit_rng(&rs) % 150000);
        big_v[i] = (int64_t)(unit_rng(&rs) % 1000);
    }
    slash_ssb *s, *t;
    CHECK_OK(slash_ssb_open(&c, &s));
    CHECK_OK(slash_ssb_open(&c, &t));
    slash_ssb_batch b = big_batch(0, NBIG / 2);
    CHECK_OK(slash_ssb_update(s, &b));
    for (uint32_t p = 0; p < c.partitions; p++) {
        uint8_t *blob;
        size_t len;
        CHECK_OK(slash_ckpt_write_partition(s, p, &blob, &len));
        CHECK_OK(slash_ckpt_read_partition(t, p, blob, len));
        free(blob);
    }
    slash_ssb_stats a, r;
    slash_ssb_get_stats(s, &a);
    slash_ssb_get_stats(t, &r);
    CHECK(a.records == r.records && a.records > 100000);
    b = big_batch(NBIG / 2, NBIG / 2);
    CHECK_OK(slash_ssb_update(s, &b));
    CHECK_OK(slash_ssb_update(t, &b));
    slash_ssb_get_stats(s, &a);
    slash_ssb_get_stats(t, &r);
    CHECK(a.records == r.records);
    size_t ra = 0, rb = 0;
    CHECK(emit_all(s, &ra) == emit_all(t, &rb));
    CHECK(ra == rb && ra == a.records);
    slash_ssb_close(s);
    slash_ssb_close(t);
}

/* The blob with its records given twice (a valid CRC over the doubled payload). */
static uint8_t *doubled(const uint8_t *blob, size_t len, size_t *out_len)
{
    size_t payload = len - SLASH_CKPT_HEADER - 4;
    size_t n = SLASH_CKPT_HEADER + 2 * payload + 4;
    uint8_t *d = malloc(n);
    memcpy(d, blob, SLASH_CKPT_HEADER + payload);
    memcpy(d + SLASH_CKPT_HEADER + payload, blob + SLASH_CKPT_HEADER, payload);
    uint64_t recs = 0, pl = 2 * payload;
    for (int i = 7; i >= 0; i--)
        recs = recs << 8 | blob[24 + i];
    recs *= 2;
    for (int i = 0; i < 8; i++)
        d[24 + i] = (uint8_t)(recs >> (8 * i)), d[32 + i] = (uint8_t)(pl >> (8 * i));
    uint32_t crc = slash_crc32c(0, d, n - 4);
    for (int i = 0; i < 4; i++)
        d[n - 4 + i] = (uint8_t)(crc >> (8 * i));
    *out_len = n;
    return d;
}

static void key_twice(slash_window_kind kind)
{
    make_input(21 + kind);
    slash_ssb_config c = config(kind, SLASH_KEY_INT64, 2);
    slash_ssb *s = filled(&c, INT64_MIN);
    uint8_t *blob;
    size_t len, dlen;
    CHECK_OK(slash_ckpt_write_partition(s, 1, &blob, &len));
    uint8_t *d = doubled(blob, len, &dlen);
    CHECK(refused_and_unchanged(&c, 1, d, dlen));
    CHECK(strstr(slash_last_error(), kind == SLASH_WINDOW_SESSION ? "overlapping sessions"
                                                                   : "(window, key) twice") != NULL);
    /* the refused partition is empty and usable: the blob itself restores */
    slash_ssb *t;
    CHECK_OK(slash_ssb_open(&c, &t));
    CHECK_ST(slash_ckpt_read_partition(t, 1, d, dlen), SLASH_EINVAL);
    CHECK_OK(slash_ckpt_read_partition(t, 1, blob, len));
    slash_ssb_stats a, b;
    slash_ssb_get_stats(s, &a);
    slash_ssb_get_stats(t, &b);
    uint64_t part0 = 0; /* s's records of partition 0 (not restored into t) */
    uint8_t *b0;
    size_t l0;
    CHECK_OK(slash_ckpt_write_partition(s, 0, &b0, &l0));
    for (int i = 7; i >= 0; i--)
        part0 = part0 << 8 | b0[24 + i];
    free(b0);
    CHECK(b.records + part0 == a.records && b.records > 0);
    free(d);
    free(blob);
    slash_ssb_close(s);
    slash_ssb_close(t);
}

TEST(bulk_restore_refuses_a_window_and_key_twice) { key_twice(SLASH_WINDOW_TUMBLING); }
TEST(bulk_restore_refuses_overlapping_sessions) { key_twice(SLASH_WINDOW_SESSION); }

TEST(restore_into_a_partition_with_records_merges)
{
    /* the same blob twice: the second goes through the merge path and adds
     * its partials (counts and sums double; the records stay one each) */
    make_input(31);
    slash_ssb_config c = config(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64, 1);
    c.naggs = 2; /* count, sum */
    slash_ssb *s = filled(&c, INT64_MIN), *t, *twice;
    uint8_t *blob;
    size_t len;
    CHECK_OK(slash_ckpt_write_partition(s, 0, &blob, &len));
    CHECK_OK(slash_ssb_open(&c, &t));
    CHECK_OK(slash_ckpt_read_partition(t, 0, blob, len));
    CHECK_OK(slash_ckpt_read_partition(t, 0, blob, len));
    CHECK_OK(slash_ssb_open(&c, &twice));
    slash_ssb_batch b = batch(&c, 0, NREC);
    CHECK_OK(slash_ssb_update(twice, &b));
    CHECK_OK(slash_ssb_update(twice, &b));
    slash_ssb_stats a, r;
    slash_ssb_get_stats(s, &a);
    slash_ssb_get_stats(t, &r);
    CHECK(a.records == r.records);
    size_t ra = 0, rb = 0;
    CHECK(emit_all(t, &ra) == emit_all(twice, &rb));
    CHECK(ra == rb && ra > 0);
    free(blob);
    slash_ssb_close(s);
    slash_ssb_close(t);
    slash_ssb_close(twice);
}

TEST(crc32c_by_instruction_equals_the_table)
{
    static const char check[] = "123456789";
    CHECK(slash_crc32c(0, check, 9) == 0xE3069283u);
    CHECK(slash_crc32c_sw(0, check, 9) == 0xE3069283u);
    uint8_t buf[1027];
    uint64_t rs = 5;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)unit_rng(&rs);
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 97) {
            uint32_t a = slash_crc32c(7, buf + off, n), b = slash_crc32c_sw(7, buf + off, n);
            CHECK(a == b);
        }
}

/* ---- executor: checkpoint, close, restore, push the rest ---------------------- */

static slash_transport *tp; /* one for every group of the tests, closed by main */

static slash_exec *open_one(const slash_ssb_config *state)
{
    slash_listener *l;
    if (!tp)
        CHECK_OK(slash_transport_open("shm", &tp));
    CHECK_OK(slash_listen(tp, NULL, "ckpt", &l));
    const char *addrs[1] = {slash_listener_addr(l)};
    slash_channel_config cc = {.buffer_size = 4096, .credits = 4};
    slash_group *g;
    CHECK_OK(slash_group_join(l, 0, 1, addrs, "ckpt", &cc, 1000, &g));
    slash_listener_close(l);
    slash_exec_config c;
    memset(&c, 0, sizeof c);
    c.state = *state;
    c.lateness_ms = 100;
    c.epoch_bytes = 16 << 10;
    c.timeout_ms = 10000;
    slash_exec *ex;
    CHECK_OK(slash_exec_open(g, &c, &ex));
    return ex;
}

static uint64_t take_all(slash_exec *ex, size_t *rows)
{
    uint64_t d = 0;
    slash_ssb_result *r;
    for (slash_exec_take(ex, &r); r; slash_exec_take(ex, &r)) {
        d += digest(r, rows);
        slash_ssb_result_free(r);
    }
    return d;
}

/* The windows an uninterrupted executor fires over the input, B records a push. */
static uint64_t uninterrupted(const slash_ssb_config *c, size_t B, size_t *rows)
{
    slash_exec *ex = open_one(c);
    uint64_t d = 0;
    for (size_t i = 0; i < NREC; i += B) {
        slash_ssb_batch b = batch(c, i, B);
        CHECK_OK(slash_exec_push(ex, &b, NULL, NULL));
        d += take_all(ex, rows);
    }
    CHECK_OK(slash_exec_finish(ex));
    d += take_all(ex, rows);
    slash_exec_close(ex);
    return d;
}

/* Checkpoint 1 of an executor cut after the records before `cut` (then the
 * crash: nothing after the cut survives); *d and *rows get the windows fired
 * before it. */
static slash_ckpt *checkpointed_at(const slash_ssb_config *c, size_t B, size_t cut, uint64_t *d,
                                   size_t *rows)
{
    slash_exec *ex = open_one(c);
    for (size_t i = 0; i < cut; i += B) {
        slash_ssb_batch b = batch(c, i, B);
        if (i + B == cut)
            CHECK_OK(slash_exec_request_checkpoint(ex, 1));
        CHECK_OK(slash_exec_push(ex, &b, NULL, NULL));
        *d += take_all(ex, rows);
    }
    slash_ckpt *ck;
    CHECK_OK(slash_exec_take_checkpoint(ex, &ck));
    CHECK(ck && slash_ckpt_id(ck) == 1 && slash_ckpt_pushes(ck) == cut / B);
    slash_exec_close(ex);
    return ck;
}

static void exec_resume(slash_window_kind kind, slash_key_type kt)
{
    make_input(kind * 3 + kt + 100);
    slash_ssb_config c = config(kind, kt, 4);
    const size_t B = 250, cut = NREC / 2;
    size_t rows_a = 0, rows_b = 0;
    uint64_t want = uninterrupted(&c, B, &rows_a), got = 0;
    slash_ckpt *ck = checkpointed_at(&c, B, cut, &got, &rows_b);
    CHECK(slash_ckpt_parts(ck) == 4);
    slash_exec *ex = open_one(&c);
    const void *p;
    size_t len;
    slash_ckpt_meta(ck, &p, &len);
    CHECK_OK(slash_exec_restore_meta(ex, p, len));
    for (uint32_t i = 0; i < slash_ckpt_parts(ck); i++) {
        uint32_t part;
        CHECK_OK(slash_ckpt_part(ck, i, &part, &p, &len));
        CHECK_OK(slash_exec_restore_partition(ex, part, p, len));
    }
    slash_ckpt_free(ck);
    for (size_t i = cut; i < NREC; i += B) {
        slash_ssb_batch b = batch(&c, i, B);
        size_t late = 0;
        CHECK_OK(slash_exec_push(ex, &b, NULL, &late));
        CHECK(late == 0);
        got += take_all(ex, &rows_b);
    }
    CHECK_OK(slash_exec_finish(ex));
    got += take_all(ex, &rows_b);
    slash_exec_close(ex);
    CHECK(rows_a == rows_b && rows_a > 0);
    CHECK(want == got);
}

TEST(executor_resumes_tumbling) { exec_resume(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64); }
TEST(executor_resumes_sliding_string_keys) { exec_resume(SLASH_WINDOW_SLIDING, SLASH_KEY_BYTES); }
TEST(executor_resumes_session) { exec_resume(SLASH_WINDOW_SESSION, SLASH_KEY_INT64); }

TEST(restore_refuses_other_partition_count_and_late_calls)
{
    slash_ssb_config c = config(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64, 4);
    slash_exec *ex = open_one(&c);
    CHECK_OK(slash_exec_request_checkpoint(ex, 5));
    CHECK_OK(slash_exec_end_epoch(ex));
    slash_ckpt *ck;
    CHECK_OK(slash_exec_take_checkpoint(ex, &ck));
    CHECK(ck != NULL);
    CHECK_ST(slash_exec_request_checkpoint(ex, 5), SLASH_EINVAL); /* ids increase */
    slash_exec_close(ex);
    const void *p;
    size_t len;
    slash_ckpt_meta(ck, &p, &len);
    slash_ssb_config c8 = config(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64, 8);
    ex = open_one(&c8);
    CHECK_ST(slash_exec_restore_meta(ex, p, len), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "4 partitions, this executor 8") != NULL);
    slash_exec_close(ex);
    ex = open_one(&c);
    slash_ssb_batch b = batch(&c, 0, 10);
    CHECK_OK(slash_exec_push(ex, &b, NULL, NULL));
    CHECK_ST(slash_exec_restore_meta(ex, p, len), SLASH_ESTATE);
    CHECK_OK(slash_exec_finish(ex));
    CHECK_ST(slash_exec_request_checkpoint(ex, 6), SLASH_ESTATE);
    slash_exec_close(ex);
    slash_ckpt_free(ck);
}

/* ---- a group of another size: a rank restored after its peers finished ------- */

typedef struct late_rank {
    int rank;
    slash_listener *l;
    const char **addrs;
    const slash_ssb_config *cfg;
    const slash_ckpt *ck;
    atomic_int *peer_finishing; /* rank 1 sets it right before its finish */
    uint64_t digest;
    size_t rows;
    slash_status st;
    char err[256];
} late_rank;

static void *late_rank_main(void *arg)
{
    late_rank *c = arg;
    slash_channel_config cc = {.buffer_size = 4096, .credits = 4};
    slash_group *g;
    slash_exec *ex = NULL;
    slash_status st = slash_group_join(c->l, (uint32_t)c->rank, 2, c->addrs, "ckptlate", &cc,
                                       10000, &g);
    if (st == SLASH_OK) {
        slash_exec_config ec;
        memset(&ec, 0, sizeof ec);
        ec.state = *c->cfg;
        ec.lateness_ms = 100;
        ec.epoch_bytes = 16 << 10;
        ec.timeout_ms = 10000;
        st = slash_exec_open(g, &ec, &ex);
    }
    if (st == SLASH_OK && c->rank == 0) {
        /* rank 1 has nothing to read: it restores and finishes at once, and its
         * final epoch reaches this executor's service thread before the restore */
        while (!atomic_load(c->peer_finishing))
            usleep(1000);
        usleep(300 * 1000);
    }
    const void *p;
    size_t len;
    if (st == SLASH_OK) {
        slash_ckpt_meta(c->ck, &p, &len);
        st = slash_exec_restore_meta(ex, p, len);
    }
    for (uint32_t i = 0; i < slash_ckpt_parts(c->ck) && st == SLASH_OK; i++) {
        uint32_t part;
        st = slash_ckpt_part(c->ck, i, &part, &p, &len);
        if (st == SLASH_OK && part % 2 == (uint32_t)c->rank)
            st = slash_exec_restore_partition(ex, part, p, len);
    }
    if (c->rank == 1)
        atomic_store(c->peer_finishing, 1);
    if (st == SLASH_OK)
        st = slash_exec_finish(ex);
    if (st == SLASH_OK)
        c->digest = take_all(ex, &c->rows);
    else
        snprintf(c->err, sizeof c->err, "rank %d: %s (%s)", c->rank, slash_strerror(st),
                 slash_last_error());
    c->st = st;
    slash_exec_close(ex);
    return NULL;
}

TEST(rank_restored_after_its_peers_finished_fires_its_windows)
{
    /* a checkpoint of one executor cut after the whole input, restored into a
     * group of 2 where rank 1 finishes before rank 0 restores: rank 0 fires
     * the windows of its partitions, and the group fires what the
     * uninterrupted run does */
    make_input(77);
    slash_ssb_config c = config(SLASH_WINDOW_TUMBLING, SLASH_KEY_INT64, 4);
    const size_t B = 250;
    size_t rows_want = 0, rows_got = 0;
    uint64_t want = uninterrupted(&c, B, &rows_want), got = 0;
    slash_ckpt *ck = checkpointed_at(&c, B, NREC, &got, &rows_got);
    size_t rows_pre = rows_got;
    atomic_int finishing = 0;
    late_rank ctx[2];
    const char *addrs[2];
    pthread_t th[2];
    if (!tp)
        CHECK_OK(slash_transport_open("shm", &tp));
    for (int q = 0; q < 2; q++) {
        memset(&ctx[q], 0, sizeof ctx[q]);
        ctx[q].rank = q, ctx[q].addrs = addrs, ctx[q].cfg = &c, ctx[q].ck = ck;
        ctx[q].peer_finishing = &finishing;
        CHECK_OK(slash_listen(tp, NULL, "ckptlate", &ctx[q].l));
        addrs[q] = slash_listener_addr(ctx[q].l);
    }
    for (int q = 0; q < 2; q++)
        pthread_create(&th[q], NULL, late_rank_main, &ctx[q]);
    for (int q = 0; q < 2; q++) {
        pthread_join(th[q], NULL);
        if (ctx[q].st != SLASH_OK)
            fprintf(stderr, "  %s\n", ctx[q].err);
        CHECK(ctx[q].st == SLASH_OK);
        slash_listener_close(ctx[q].l);
        got += ctx[q].digest;
        rows_got += ctx[q].rows;
    }
    slash_ckpt_free(ck);
    CHECK(rows_pre < rows_want); /* the checkpoint holds windows still to fire */
    CHECK(ctx[0].rows > 0);
    if (rows_got != rows_want)
        fprintf(stderr, "  %zu rows (rank 0: %zu, rank 1: %zu after the restore), want %zu\n",
                rows_got, ctx[0].rows, ctx[1].rows, rows_want);
    CHECK(rows_got == rows_want && got == want);
}

int main(void)
{
    RUN(round_trip_tumbling_int_keys);
    RUN(round_trip_sliding_string_keys);
    RUN(round_trip_sliding_int_keys);
    RUN(round_trip_session_string_keys);
    RUN(round_trip_session_int_keys);
    RUN(every_truncation_is_refused);
    RUN(every_bit_flip_is_refused);
    RUN(fingerprint_mismatch_and_wrong_partition_are_refused);
    RUN(meta_round_trip_and_refusals);
    RUN(bulk_restore_of_many_keys_is_found_by_later_updates);
    RUN(bulk_restore_refuses_a_window_and_key_twice);
    RUN(bulk_restore_refuses_overlapping_sessions);
    RUN(restore_into_a_partition_with_records_merges);
    RUN(crc32c_by_instruction_equals_the_table);
    RUN(executor_resumes_tumbling);
    RUN(executor_resumes_sliding_string_keys);
    RUN(executor_resumes_session);
    RUN(restore_refuses_other_partition_count_and_late_calls);
    RUN(rank_restored_after_its_peers_finished_fires_its_windows);
    slash_transport_close(tp);
    return UNIT_DONE();
}
