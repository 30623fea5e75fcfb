/* test_kafka_produce.c - the paced producer (kafka_produce.c) without a
 * broker: a record's stamp laid between its template's head and tail byte
 * for byte as printf writes the number; the producer's refusals; its
 * pacing counts (records handed to the client at the rate, the trickle
 * before the full rate: what was due up to the stop, at any speed of the
 * machine, as a paused run sends what it owes when it stops); and an unreachable broker named by a flush that
 * times out, not a hang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "slash/kafka_produce.h"
#include "unit.h"

static void check_format(const char *head, const char *tail, int64_t ms)
{
    char want[256], got[256];
    int n = snprintf(want, sizeof want, "%s%lld%s", head, (long long)ms, tail);
    size_t len = slash_kprod_format(head, strlen(head), tail, strlen(tail), ms, got);
    CHECK(len == (size_t)n);
    CHECK(memcmp(got, want, len) == 0);
}

TEST(a_record_is_its_head_then_the_stamp_in_decimal_then_its_tail)
{
    const char *head = "{\"user_id\":\"ab\",\"event_time\":", *tail = ",\"campaign\":7}";
    int64_t stamps[] = {0, 7, 10, 1700000000123LL, -1, -1234567, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof stamps / sizeof *stamps; i++)
        check_format(head, tail, stamps[i]);
    check_format("", "", 42);
    uint64_t s = 7;
    for (int i = 0; i < 1000; i++)
        check_format("h", "t", (int64_t)unit_rng(&s));
}

static const char *const HEADS[2] = {"{\"t\":", "{\"u\":"}, *const TAILS[2] = {"}", ",\"x\":1}"};
static const size_t HEAD_LENS[2] = {5, 5}, TAIL_LENS[2] = {1, 7};

static slash_status producer(const char *bootstrap, int32_t partitions, slash_kprod **out)
{
    const char *keys[2] = {"bootstrap.servers", "linger.ms"}, *vals[2] = {bootstrap, "5"};
    return slash_kprod_new("t", partitions, keys, vals, 2, HEADS, HEAD_LENS, TAILS, TAIL_LENS, 2,
                           out);
}

TEST(the_producer_refuses_a_bad_setting_no_partition_or_says_it_is_not_compiled_in)
{
    const char *keys[1] = {"no.such.setting"}, *vals[1] = {"1"};
    slash_kprod *p = NULL;
    if (producer("127.0.0.1:1", 1, &p) == SLASH_ENOTSUP) {
        CHECK(p == NULL);
        return;
    }
    slash_kprod_free(p);
    p = NULL;
    CHECK_ST(slash_kprod_new("t", 1, keys, vals, 1, HEADS, HEAD_LENS, TAILS, TAIL_LENS, 2, &p),
             SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "no.such.setting") != NULL);
    CHECK(p == NULL);
    CHECK_ST(producer("127.0.0.1:1", 0, &p), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "0 partition(s)") != NULL);
    CHECK(p == NULL);
}

TEST(a_run_hands_the_client_rate_records_a_second_and_counts_them_at_full_rate)
{
    slash_kprod *p = NULL;
    if (producer("127.0.0.1:1", 4, &p) == SLASH_ENOTSUP)
        return;
    slash_kprod_counts c;
    slash_kprod_set_full(p, 1);
    CHECK_OK(slash_kprod_run(p, 20000.0, 100.0, 2000, 500, &c));
    int64_t span = c.last_ms - c.first_ms;
    CHECK(span == 500); /* the limit: the stop is 500 ms after the start, however late seen */
    /* due = rate x time elapsed up to the stop, all sent (a sum of floats: one short at most) */
    CHECK(c.events <= 20 * span && c.events >= 20 * span - 1);
    CHECK(c.full_events == c.events);
    CHECK(c.full_from_ms == c.first_ms);
    slash_kprod_free(p);
}

TEST(a_run_trickles_until_switched_and_stops_at_its_end)
{
    slash_kprod *p = NULL;
    if (producer("127.0.0.1:1", 2, &p) == SLASH_ENOTSUP)
        return;
    slash_kprod_counts c;
    CHECK_OK(slash_kprod_run(p, 1e6, 1000.0, 1000, 300, &c));
    int64_t span = c.last_ms - c.first_ms;
    CHECK(span == 300);
    CHECK(c.events >= span - 1 && c.events <= span); /* the trickle: 1 a ms */
    CHECK(c.full_events == 0 && c.full_from_ms == c.last_ms);
    slash_kprod_set_end(p, c.last_ms - 1); /* an end already past: nothing more */
    CHECK_OK(slash_kprod_run(p, 1e6, 1000.0, 1000, 300, &c));
    CHECK(c.events == 0);
    slash_kprod_free(p);
}

TEST(an_unreachable_broker_is_a_flush_that_times_out_naming_it)
{
    slash_kprod *p = NULL;
    if (producer("127.0.0.1:1", 2, &p) == SLASH_ENOTSUP)
        return;
    slash_kprod_counts c;
    slash_kprod_set_full(p, 1);
    CHECK_OK(slash_kprod_run(p, 1000.0, 0.0, 1000, 200, &c));
    CHECK(c.events > 0);
    CHECK_ST(slash_kprod_flush(p, 1000), SLASH_ETIMEDOUT);
    const char *why = slash_last_error();
    CHECK(strstr(why, "not acknowledged within 1000 ms") != NULL);
    CHECK(strstr(why, "127.0.0.1:1") != NULL || strstr(why, "brokers are down") != NULL);
    slash_kprod_free(p);
}

int main(void)
{
    RUN(a_record_is_its_head_then_the_stamp_in_decimal_then_its_tail);
    RUN(the_producer_refuses_a_bad_setting_no_partition_or_says_it_is_not_compiled_in);
    RUN(a_run_hands_the_client_rate_records_a_second_and_counts_them_at_full_rate);
    RUN(a_run_trickles_until_switched_and_stops_at_its_end);
    RUN(an_unreachable_broker_is_a_flush_that_times_out_naming_it);
    return UNIT_DONE();
}
