/* test_status.c - the thread-local error detail tells the truth: it is tagged
 * with the status it was recorded for, cleared on request, private to its
 * thread, and a channel try-poll miss after an unrelated failure carries its
 * own detail rather than the earlier one. */
#define _GNU_SOURCE
#include "slash/channel.h"
#include "unit.h"

#include <pthread.h>

static const char *TOKEN = "status-token";

TEST(detail_is_tagged_with_its_status)
{
    slash_clear_error();
    CHECK(slash_last_error_status() == SLASH_OK);
    CHECK(strcmp(slash_last_error(), "") == 0);
    CHECK(slash_fail(SLASH_EINVAL, "bad %s %d", "width", 7) == SLASH_EINVAL);
    CHECK(slash_last_error_status() == SLASH_EINVAL);
    CHECK(strcmp(slash_last_error(), "bad width 7") == 0);
    slash_clear_error();
    CHECK(slash_last_error_status() == SLASH_OK);
    CHECK(strcmp(slash_last_error(), "") == 0);
}

TEST(static_detail_replaces_a_formatted_one)
{
    slash_fail(SLASH_EINVAL, "buffer_size %d is not a multiple of 64", 1000);
    CHECK(slash_fail_static(SLASH_ETIMEDOUT, "nothing yet") == SLASH_ETIMEDOUT);
    CHECK(slash_last_error_status() == SLASH_ETIMEDOUT);
    CHECK(strcmp(slash_last_error(), "nothing yet") == 0);
    slash_fail(SLASH_EPEER, "peer %s gone", "x");
    CHECK(strcmp(slash_last_error(), "peer x gone") == 0);
}

TEST(retagging_a_callee_detail_keeps_its_text)
{
    /* callers wrap a callee's message: the format reads the buffer it writes */
    slash_fail(SLASH_EPEER, "ring closed");
    slash_fail(SLASH_EPEER, "executor rank 3 disconnected (%s) after %d ms", slash_last_error(), 5);
    CHECK(strcmp(slash_last_error(), "executor rank 3 disconnected (ring closed) after 5 ms") == 0);
}

static void *fail_on_other_thread(void *arg)
{
    (void)arg;
    slash_fail(SLASH_ESYS, "other thread's failure");
    return NULL;
}

TEST(detail_is_private_to_its_thread)
{
    slash_fail(SLASH_EINVAL, "mine");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fail_on_other_thread, NULL) == 0);
    pthread_join(t, NULL);
    CHECK(slash_last_error_status() == SLASH_EINVAL);
    CHECK(strcmp(slash_last_error(), "mine") == 0);
}

typedef struct connect_arg {
    const char *addr;
    slash_transport *tp;
    slash_channel *ch;
    slash_status st;
} connect_arg;

static void *connect_producer(void *p)
{
    connect_arg *a = p;
    a->st = slash_transport_open("shm", &a->tp);
    if (a->st == SLASH_OK)
        a->st = slash_channel_connect(a->tp, a->addr, TOKEN, 10000, &a->ch);
    return NULL;
}

TEST(try_poll_miss_does_not_repeat_an_earlier_bad_buffer_size)
{
    slash_transport *tp;
    slash_listener *l;
    CHECK_OK(slash_transport_open("shm", &tp));
    CHECK_OK(slash_listen(tp, NULL, TOKEN, &l));
    slash_channel_config bad = {.buffer_size = 1000, .credits = 4};
    CHECK_ST(slash_channel_config_check(&bad), SLASH_EINVAL);
    CHECK(strstr(slash_last_error(), "multiple of 64") != NULL);

    connect_arg a = {.addr = slash_listener_addr(l)};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, connect_producer, &a) == 0);
    slash_channel_config cfg = {.buffer_size = 1024, .credits = 4};
    slash_channel *ch = NULL;
    CHECK_OK(slash_channel_accept(l, &cfg, 10000, &ch));
    pthread_join(t, NULL);
    CHECK_OK(a.st);
    if (!ch || a.st != SLASH_OK)
        return;
    slash_fail(SLASH_EINVAL, "buffer_size 1000 is not a multiple of 64 (cache line)");
    const void *buf;
    size_t len;
    uint64_t seq;
    CHECK_ST(slash_channel_poll(ch, 0, &buf, &len, &seq), SLASH_ETIMEDOUT);
    CHECK(slash_last_error_status() == SLASH_ETIMEDOUT);
    CHECK(strstr(slash_last_error(), "multiple of 64") == NULL);
    CHECK(strstr(slash_last_error(), "try-poll") != NULL);
    slash_fail(SLASH_EINVAL, "buffer_size 1000 is not a multiple of 64 (cache line)");
    CHECK_ST(slash_channel_poll(ch, 20, &buf, &len, &seq), SLASH_ETIMEDOUT);
    CHECK(slash_last_error_status() == SLASH_ETIMEDOUT);
    CHECK(strstr(slash_last_error(), "no buffer within 20 ms") != NULL);
    slash_channel_close(a.ch);
    slash_transport_close(a.tp);
    slash_channel_close(ch);
    slash_listener_close(l);
    slash_transport_close(tp);
}

int main(void)
{
    RUN(detail_is_tagged_with_its_status);
    RUN(static_detail_replaces_a_formatted_one);
    RUN(retagging_a_callee_detail_keeps_its_text);
    RUN(detail_is_private_to_its_thread);
    RUN(try_poll_miss_does_not_repeat_an_earlier_bad_buffer_size);
    return UNIT_DONE();
}
