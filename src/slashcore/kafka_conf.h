/* kafka_conf.h - a librdkafka configuration from the (key, value) settings the
 * bindings pass, shared by the core's consumer (kafka_fetch.c) and paced
 * producer (kafka_produce.c). Internal; included only where librdkafka is. */
#ifndef SLASH_KAFKA_CONF_H
#define SLASH_KAFKA_CONF_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "slash/status.h"

/* *out: a new configuration holding the n settings, the caller's to hand to
 * rd_kafka_new or destroy. A setting librdkafka refuses fails with
 * SLASH_EINVAL naming it and librdkafka's reason; nothing is left then. */
static inline slash_status kafka_conf_new(const char *const *keys, const char *const *values,
                                          size_t n, rd_kafka_conf_t **out)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        if (rd_kafka_conf_set(conf, keys[i], values[i], err, sizeof err) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            return slash_fail(SLASH_EINVAL, "Kafka setting %s=%s: %s", keys[i], values[i], err);
        }
    }
    *out = conf;
    return SLASH_OK;
}

#endif
