/* gen_ysb.h - the Yahoo Streaming Benchmark event generator (after Slash
 * paper section 8.1.2): 78-byte ad events, 8-byte key, 8-byte event time.
 *
 * Record layout, one column each (widths sum to SLASH_GEN_YSB_RECORD_BYTES):
 *   key          int64   the campaign id, drawn from [0, campaigns)
 *   event_time   int64   ms, base_ms + floor(i * 1000 / rate)
 *   user_id      16 B    a random UUID (version 4 bits set)
 *   page_id      16 B    a random UUID
 *   ad_id        16 B    the UUID of ad a = key * ads_per_campaign + j
 *   ad_index     int64   a itself (an integer join key for the ad map)
 *   ad_type      int8    0..4: banner, modal, sponsored-search, mail, mobile
 *   event_type   int8    0..2: view, click, purchase (uniform)
 *   ip_address   uint32  random
 * The original benchmark's shape is 100 campaigns x 10 ads; the paper's
 * variant draws the key from a range of 10 million. The ad -> campaign map is
 * a pure function too (slash_gen_ysb_ads), so a join through it gives back
 * the key column.
 */
#ifndef SLASH_GEN_YSB_H
#define SLASH_GEN_YSB_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "slash/gen.h"
#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    SLASH_GEN_YSB_RECORD_BYTES = 78,
    SLASH_GEN_YSB_UUID_BYTES = 16,
    SLASH_GEN_YSB_EVENT_TYPES = 3,
    SLASH_GEN_YSB_AD_TYPES = 5,
};

typedef struct slash_gen_ysb_config {
    uint64_t seed;
    uint64_t campaigns;         /* key range; 100 in the original benchmark */
    uint32_t ads_per_campaign;  /* 10 in the original benchmark */
    slash_gen_dist dist;        /* campaign (key) distribution */
    double exponent;            /* zipf exponent when dist == SLASH_GEN_ZIPF */
    uint64_t rate;              /* events per second of event time */
    int64_t base_ms;            /* time of event 0 */
} slash_gen_ysb_config;

/* A configured generator: plain data, no cleanup. */
typedef struct slash_gen_ysb {
    slash_gen_ysb_config cfg;
    slash_gen_keys keys;
    uint64_t s_key, s_ad, s_user, s_page, s_ad_type, s_event_type, s_ip, s_ad_uuid;
} slash_gen_ysb;

/* Output columns for events [start, start + n); any pointer may be NULL to
 * skip that column. Byte columns hold 16 * n bytes. Caller-owned. */
typedef struct slash_gen_ysb_columns {
    int64_t *key;
    int64_t *event_time;
    uint8_t *user_id;
    uint8_t *page_id;
    uint8_t *ad_id;
    int64_t *ad_index;
    int8_t *ad_type;
    int8_t *event_type;
    uint32_t *ip_address;
} slash_gen_ysb_columns;

/* Validates cfg and fills g. SLASH_EINVAL names the bad field. */
slash_status slash_gen_ysb_init(slash_gen_ysb *g, const slash_gen_ysb_config *cfg);

/* Generates events [start, start + n) into the non-NULL columns.
 * SLASH_EINVAL if the range overflows event time; nothing else fails. */
slash_status slash_gen_ysb_fill(const slash_gen_ysb *g, uint64_t start, size_t n,
                                const slash_gen_ysb_columns *out);

/* Writes the ad -> campaign map for ads [first, first + n) (ad index a belongs
 * to campaign a / ads_per_campaign): ad_id (16 * n bytes), ad_index and
 * campaign_id. Any may be NULL. SLASH_EINVAL if the range passes the last ad. */
slash_status slash_gen_ysb_ads(const slash_gen_ysb *g, uint64_t first, size_t n, uint8_t *ad_id,
                               int64_t *ad_index, int64_t *campaign_id);

#ifdef __cplusplus
}
#endif
#endif
