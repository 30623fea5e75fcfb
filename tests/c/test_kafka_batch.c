/* test_kafka_batch.c - the layout of a poll's Kafka records into one buffer
 * (kafka_batch.c): ordered by partition keeping each partition's offset
 * order, values joined as lines (a newline inside a value made a space),
 * raw values and keys back to back, null values marked and taking no bytes;
 * and the fetcher's refusals that need no broker. Checked against a plain
 * rebuild of the expected bytes, record by record. */
#include <stdlib.h>

#include "slash/kafka_fetch.h"
#include "unit.h"

static slash_krec rec(int32_t p, int64_t off, const char *value, const char *key)
{
    slash_krec r = {0};
    r.partition = p;
    r.offset = off;
    r.timestamp = 1000 + off;
    r.value = value;
    r.value_len = value ? strlen(value) : 0;
    r.key = key;
    r.key_len = key ? strlen(key) : 0;
    return r;
}

TEST(records_are_ordered_by_partition_keeping_each_partitions_order)
{
    /* a poll gives runs of partitions interleaved: 2, 0, 2, 1, 0 */
    slash_krec r[7] = {rec(2, 10, "a", 0), rec(2, 11, "b", 0), rec(0, 5, "c", 0),
                       rec(2, 12, "d", 0), rec(1, 7, "e", 0), rec(0, 6, "f", 0),
                       rec(0, 7, "g", 0)};
    slash_kbatch_order(r, 7);
    int32_t want_p[7] = {0, 0, 0, 1, 2, 2, 2};
    int64_t want_o[7] = {5, 6, 7, 7, 10, 11, 12};
    for (int i = 0; i < 7; i++) {
        CHECK(r[i].partition == want_p[i]);
        CHECK(r[i].offset == want_o[i]);
    }
}

TEST(values_are_joined_as_lines_with_their_newlines_made_spaces)
{
    slash_krec r[3] = {rec(0, 0, "{\"a\":1}", 0), rec(0, 1, "{\"a\":\n2}", 0),
                       rec(0, 2, "{\r\"a\":3}", 0)};
    size_t bytes = slash_kbatch_bytes(r, 3, 0, '\n');
    const char *want = "{\"a\":1}\n{\"a\": 2}\n{ \"a\":3}";
    CHECK(bytes == strlen(want));
    char values[64];
    int64_t starts[4], off[3], ts[3];
    int32_t part[3];
    uint8_t nulls[3];
    CHECK(slash_kbatch_fill(r, 3, '\n', values, starts, part, off, ts, nulls, NULL, NULL, NULL) == 0);
    CHECK(memcmp(values, want, bytes) == 0);
    for (int i = 0; i < 3; i++) {
        /* value i spans starts[i] .. starts[i+1] - 1 (its separator excluded) */
        CHECK((size_t)(starts[i + 1] - 1 - starts[i]) == r[i].value_len);
        CHECK(off[i] == i && ts[i] == 1000 + i && part[i] == 0 && nulls[i] == 0);
    }
    CHECK(starts[3] == (int64_t)bytes + 1);
}

TEST(raw_values_and_keys_are_laid_back_to_back_with_nulls_marked)
{
    slash_krec r[4] = {rec(3, 0, "xy", "k1"), rec(3, 1, NULL, "k2"), rec(3, 2, "", NULL),
                       rec(3, 3, "z\nw", "k4")};
    size_t vb = slash_kbatch_bytes(r, 4, 0, 0), kb = slash_kbatch_bytes(r, 4, 1, 0);
    CHECK(vb == 5 && kb == 6);
    char values[8], keys[8];
    int64_t starts[5], kstarts[5], off[4], ts[4];
    int32_t part[4];
    uint8_t nulls[4], knulls[4];
    CHECK(slash_kbatch_fill(r, 4, 0, values, starts, part, off, ts, nulls, keys, kstarts,
                            knulls) == 1);
    CHECK(knulls[0] == 0 && knulls[1] == 0 && knulls[2] == 1 && knulls[3] == 0);
    CHECK(memcmp(values, "xyz\nw", 5) == 0); /* raw bytes stay as they are */
    CHECK(memcmp(keys, "k1k2k4", 6) == 0);
    int64_t want_s[5] = {0, 2, 2, 2, 5}, want_k[5] = {0, 2, 4, 4, 6};
    for (int i = 0; i < 5; i++) {
        CHECK(starts[i] == want_s[i]);
        CHECK(kstarts[i] == want_k[i]);
    }
    CHECK(nulls[0] == 0 && nulls[1] == 1 && nulls[2] == 0 && nulls[3] == 0);
}

TEST(a_null_value_among_lines_is_an_empty_line_marked_null)
{
    slash_krec r[3] = {rec(1, 0, "{}", 0), rec(1, 1, NULL, 0), rec(1, 2, "{}", 0)};
    size_t bytes = slash_kbatch_bytes(r, 3, 0, '\n');
    CHECK(bytes == 6);
    char values[8];
    int64_t starts[4], off[3], ts[3];
    int32_t part[3];
    uint8_t nulls[3];
    CHECK(slash_kbatch_fill(r, 3, '\n', values, starts, part, off, ts, nulls, NULL, NULL, NULL) == 1);
    CHECK(memcmp(values, "{}\n\n{}", 6) == 0);
    CHECK(nulls[1] == 1 && starts[2] - 1 - starts[1] == 0);
}

TEST(many_random_records_keep_every_byte_and_every_partitions_order)
{
    enum { N = 5000 };
    slash_krec *r = calloc(N, sizeof *r);
    char (*text)[24] = calloc(N, sizeof *text);
    uint64_t s = 42;
    int64_t next[8] = {0};
    for (int i = 0; i < N; i++) {
        int32_t p = (int32_t)(unit_rng(&s) % 8);
        snprintf(text[i], sizeof text[i], "{\"p\":%d,\"o\":%lld}", (int)p, (long long)next[p]);
        r[i] = rec(p, next[p]++, text[i], 0);
    }
    size_t bytes = slash_kbatch_bytes(r, N, 0, '\n');
    slash_kbatch_order(r, N);
    char *values = malloc(bytes);
    int64_t *starts = malloc((N + 1) * sizeof *starts), *off = malloc(N * sizeof *off);
    int64_t *ts = malloc(N * sizeof *ts);
    int32_t *part = malloc(N * sizeof *part);
    uint8_t *nulls = malloc(N);
    slash_kbatch_fill(r, N, '\n', values, starts, part, off, ts, nulls, NULL, NULL, NULL);
    for (int i = 0; i < N; i++) {
        char want[24];
        snprintf(want, sizeof want, "{\"p\":%d,\"o\":%lld}", (int)part[i], (long long)off[i]);
        CHECK((size_t)(starts[i + 1] - 1 - starts[i]) == strlen(want));
        CHECK(memcmp(values + starts[i], want, strlen(want)) == 0);
        if (i)
            CHECK(part[i] > part[i - 1] || (part[i] == part[i - 1] && off[i] == off[i - 1] + 1));
    }
    free(r), free(text), free(values), free(starts), free(off), free(ts), free(part), free(nulls);
}

TEST(the_fetcher_refuses_a_bad_setting_or_says_it_is_not_compiled_in)
{
    const char *keys[1] = {"no.such.setting"}, *vals[1] = {"1"};
    slash_kfetch *f = NULL;
    if (slash_kfetch_available()) {
        CHECK_ST(slash_kfetch_new("t", keys, vals, 1, &f), SLASH_EINVAL);
        CHECK(strstr(slash_last_error(), "no.such.setting") != NULL);
        CHECK(strlen(slash_kfetch_version()) > 0);
    } else {
        CHECK_ST(slash_kfetch_new("t", keys, vals, 1, &f), SLASH_ENOTSUP);
    }
    CHECK(f == NULL);
}

int main(void)
{
    RUN(records_are_ordered_by_partition_keeping_each_partitions_order);
    RUN(values_are_joined_as_lines_with_their_newlines_made_spaces);
    RUN(raw_values_and_keys_are_laid_back_to_back_with_nulls_marked);
    RUN(a_null_value_among_lines_is_an_empty_line_marked_null);
    RUN(many_random_records_keep_every_byte_and_every_partitions_order);
    RUN(the_fetcher_refuses_a_bad_setting_or_says_it_is_not_compiled_in);
    return UNIT_DONE();
}
