/* gen_cm.h - the synthetic cluster-monitoring (CM) generator: 64-byte task
 * events shaped like the Google cluster trace sample (2011 task events, as
 * used by LightSaber and the Slash paper section 8.1.2).
 *
 * Columns (widths sum to SLASH_GEN_CM_RECORD_BYTES):
 *   timestamp int64 (ms), job_id int64, task_id int64, machine_id int64,
 *   event_type int32, user_id int32, category int32, priority int32,
 *   cpu float32, ram float32, disk float32, constraints int32.
 * Model (fitted from the sample): a job is chosen per event by rank from a
 * key distribution over `jobs` (the maximum-likelihood zipf for the sample
 * is s = 1.42 over 240 jobs); user, category, priority, cpu, ram, disk,
 * constraints and the task count are per-job constants drawn from the
 * sample's per-job frequencies;
 * the event type follows the sample's frequencies; SUBMIT events (type 0)
 * have no machine (-1), KILL events (5) lack one with the sample's ratio.
 */
#ifndef SLASH_GEN_CM_H
#define SLASH_GEN_CM_H

#include <stddef.h>
#include <stdint.h>

#include "slash/gen.h"
#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { SLASH_GEN_CM_RECORD_BYTES = 64 };

typedef struct slash_gen_cm_config {
    uint64_t seed;
    uint64_t jobs;          /* distinct jobs (the key range); 240 in the sample */
    slash_gen_dist dist;    /* job popularity */
    double exponent;        /* zipf exponent when dist == SLASH_GEN_ZIPF */
    uint64_t machines;      /* distinct machines; 12,500 in the trace's cluster */
    uint64_t rate;          /* events per second of event time; ~25 in the sample */
    int64_t base_ms;
} slash_gen_cm_config;

typedef struct slash_gen_cm {
    slash_gen_cm_config cfg;
    slash_gen_keys keys;
    uint64_t s_key, s_job, s_event, s_task, s_machine, s_machine_id;
} slash_gen_cm;

/* Output columns; any pointer may be NULL to skip it. Caller-owned. */
typedef struct slash_gen_cm_columns {
    int64_t *timestamp;
    int64_t *job_id;
    int64_t *task_id;
    int64_t *machine_id;
    int32_t *event_type;
    int32_t *user_id;
    int32_t *category;
    int32_t *priority;
    float *cpu;
    float *ram;
    float *disk;
    int32_t *constraints;
} slash_gen_cm_columns;

/* Validates cfg and fills g. SLASH_EINVAL names the bad field. */
slash_status slash_gen_cm_init(slash_gen_cm *g, const slash_gen_cm_config *cfg);

/* Generates events [start, start + n). SLASH_EINVAL if the range overflows
 * event time; nothing else fails. */
slash_status slash_gen_cm_fill(const slash_gen_cm *g, uint64_t start, size_t n,
                               const slash_gen_cm_columns *out);

#ifdef __cplusplus
}
#endif
#endif
