/* gen_ysb.c - the YSB ad-event generator (see slash/gen_ysb.h for the layout).
 *
 * Invariants: each column is filled by its own loop over a stream of its own,
 * so skipping a column changes no other column, and the value of event i in
 * any column depends only on (seed, i). The ad of an event is
 * key * ads_per_campaign + j, so the ad -> campaign map is exact by
 * construction.
 */
#include "slash/gen_ysb.h"

#include <string.h>

static_assert(8 /* key */ + 8 /* event_time */ + 3 * SLASH_GEN_YSB_UUID_BYTES + 8 /* ad_index */ +
                      1 /* ad_type */ +
                      1 /* event_type */ + 4 /* ip_address */ ==
                  SLASH_GEN_YSB_RECORD_BYTES,
              "YSB record is 78 bytes, as in the Slash paper");

enum { F_KEY = 1, F_AD, F_USER, F_PAGE, F_AD_TYPE, F_EVENT_TYPE, F_IP, F_AD_UUID };

slash_status slash_gen_ysb_init(slash_gen_ysb *g, const slash_gen_ysb_config *cfg) {
    if (!g || !cfg) return slash_fail(SLASH_EINVAL, "ysb: NULL generator or config");
    if (cfg->campaigns == 0) return slash_fail(SLASH_EINVAL, "ysb: campaigns (keys) must be >= 1");
    if (cfg->ads_per_campaign == 0)
        return slash_fail(SLASH_EINVAL, "ysb: ads_per_campaign must be >= 1");
    if (cfg->campaigns > (UINT64_C(1) << 62) / cfg->ads_per_campaign)
        return slash_fail(SLASH_EINVAL, "ysb: campaigns * ads_per_campaign must be <= 2^62");
    slash_status st = slash_gen_keys_init(&g->keys, cfg->campaigns, cfg->dist, cfg->exponent);
    if (st != SLASH_OK) return st;
    st = slash_gen_times_check(cfg->base_ms, cfg->rate, 0);
    if (st != SLASH_OK) return st;
    g->cfg = *cfg;
    g->s_key = slash_gen_stream(cfg->seed, F_KEY);
    g->s_ad = slash_gen_stream(cfg->seed, F_AD);
    g->s_user = slash_gen_stream(cfg->seed, F_USER);
    g->s_page = slash_gen_stream(cfg->seed, F_PAGE);
    g->s_ad_type = slash_gen_stream(cfg->seed, F_AD_TYPE);
    g->s_event_type = slash_gen_stream(cfg->seed, F_EVENT_TYPE);
    g->s_ip = slash_gen_stream(cfg->seed, F_IP);
    g->s_ad_uuid = slash_gen_stream(cfg->seed, F_AD_UUID);
    return SLASH_OK;
}

/* Writes a version-4 UUID made of words a and b (big-endian byte order). */
static void put_uuid(uint8_t *dst, uint64_t a, uint64_t b) {
    for (int j = 0; j < 8; j++) {
        dst[j] = (uint8_t)(a >> (56 - 8 * j));
        dst[8 + j] = (uint8_t)(b >> (56 - 8 * j));
    }
    dst[6] = (uint8_t)((dst[6] & 0x0f) | 0x40); /* version 4 */
    dst[8] = (uint8_t)((dst[8] & 0x3f) | 0x80); /* RFC 4122 variant */
}

/* The 16 bytes of event i's UUID in the stream keyed by s: two words of the
 * stream at 2i and 2i + 1. */
static void uuid_fill(uint64_t s, uint64_t start, size_t n, uint8_t *out) {
    for (size_t j = 0; j < n; j++) {
        uint64_t i = start + j;
        put_uuid(out + 16 * j, slash_gen_at(s, 2 * i), slash_gen_at(s, 2 * i + 1));
    }
}

static void ad_uuid(const slash_gen_ysb *g, uint64_t ad, uint8_t *dst) {
    put_uuid(dst, slash_gen_at(g->s_ad_uuid, 2 * ad), slash_gen_at(g->s_ad_uuid, 2 * ad + 1));
}

slash_status slash_gen_ysb_fill(const slash_gen_ysb *g, uint64_t start, size_t n,
                                const slash_gen_ysb_columns *out) {
    if (!g || !out) return slash_fail(SLASH_EINVAL, "ysb: NULL generator or columns");
    slash_status st = slash_gen_range_check("ysb", start, n, g->cfg.base_ms, g->cfg.rate);
    if (st != SLASH_OK) return st;
    if (out->key) slash_gen_keys_fill(&g->keys, g->s_key, start, n, out->key);
    if (out->event_time) slash_gen_times_fill(g->cfg.base_ms, g->cfg.rate, start, n, out->event_time);
    if (out->user_id) uuid_fill(g->s_user, start, n, out->user_id);
    if (out->page_id) uuid_fill(g->s_page, start, n, out->page_id);
    if (out->ad_id || out->ad_index) {
        const uint64_t ads = g->cfg.ads_per_campaign;
        for (size_t j = 0; j < n; j++) {
            uint64_t i = start + j;
            uint64_t campaign = out->key ? (uint64_t)out->key[j]
                                         : slash_gen_keys_draw(&g->keys, slash_gen_at(g->s_key, i));
            uint64_t ad = campaign * ads + slash_gen_below(slash_gen_at(g->s_ad, i), ads);
            if (out->ad_id) ad_uuid(g, ad, out->ad_id + 16 * j);
            if (out->ad_index) out->ad_index[j] = (int64_t)ad;
        }
    }
    if (out->ad_type)
        for (size_t j = 0; j < n; j++)
            out->ad_type[j] = (int8_t)slash_gen_below(slash_gen_at(g->s_ad_type, start + j),
                                                      SLASH_GEN_YSB_AD_TYPES);
    if (out->event_type)
        for (size_t j = 0; j < n; j++)
            out->event_type[j] = (int8_t)slash_gen_below(
                slash_gen_at(g->s_event_type, start + j), SLASH_GEN_YSB_EVENT_TYPES);
    if (out->ip_address)
        for (size_t j = 0; j < n; j++)
            out->ip_address[j] = (uint32_t)(slash_gen_at(g->s_ip, start + j) >> 32);
    return SLASH_OK;
}

slash_status slash_gen_ysb_ads(const slash_gen_ysb *g, uint64_t first, size_t n, uint8_t *ad_id,
                               int64_t *ad_index, int64_t *campaign_id) {
    if (!g) return slash_fail(SLASH_EINVAL, "ysb: NULL generator");
    uint64_t total = g->cfg.campaigns * g->cfg.ads_per_campaign;
    if (first > total || n > total - first)
        return slash_fail(SLASH_EINVAL, "ysb ads: range [%llu, +%zu) passes the %llu ads",
                          (unsigned long long)first, n, (unsigned long long)total);
    for (size_t j = 0; j < n; j++) {
        uint64_t ad = first + j;
        if (ad_id) ad_uuid(g, ad, ad_id + 16 * j);
        if (ad_index) ad_index[j] = (int64_t)ad;
        if (campaign_id) campaign_id[j] = (int64_t)(ad / g->cfg.ads_per_campaign);
    }
    return SLASH_OK;
}
