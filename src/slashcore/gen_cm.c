/* gen_cm.c - the synthetic cluster-monitoring generator (model in
 * slash/gen_cm.h).
 *
 * The frequency tables below were counted from the 16,385 rows of
 * google-cluster-task-events-sample.txt (Google's public cluster trace): per-job
 * attributes counted once per job (240 jobs), event types once per row.
 * cpu/ram/disk are in thousandths, as printed in the sample.
 *
 * Invariants: a job's attributes depend only on (seed, job rank), so every
 * event of a job agrees on them; event i depends only on (seed, i).
 */
#include "slash/gen_cm.h"

#include <assert.h>
#include <math.h>

static_assert(4 * 8 /* timestamp, job, task, machine */ + 4 * 4 /* event, user, category,
                                                                    priority */
                      + 3 * 4 /* cpu, ram, disk */ + 4 /* constraints */ ==
                  SLASH_GEN_CM_RECORD_BYTES,
              "CM record is 64 bytes, as in the Slash paper");

typedef struct freq {
    int32_t value;
    uint32_t count;
} freq;

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const freq EVENT_TYPES[] = {{0, 5349}, {1, 5306}, {2, 191}, {3, 80}, {4, 4478}, {5, 981}};
static const freq USERS[] = {
    {6, 1},   {12, 3},  {24, 2},  {30, 1},  {32, 1},  {33, 2},  {34, 1},  {37, 1},  {41, 2},
    {44, 1},  {45, 2},  {53, 1},  {74, 1},  {82, 6},  {106, 13}, {110, 1}, {112, 2}, {113, 1},
    {116, 1}, {118, 2}, {119, 4}, {125, 1}, {152, 6}, {153, 2}, {156, 4}, {165, 4}, {175, 1},
    {203, 2}, {219, 5}, {225, 1}, {227, 1}, {228, 2}, {231, 4}, {238, 5}, {239, 25}, {242, 1},
    {243, 1}, {249, 21}, {254, 1}, {256, 4}, {268, 1}, {271, 7}, {280, 1}, {301, 1}, {314, 1},
    {324, 1}, {328, 27}, {329, 1}, {340, 1}, {342, 1}, {356, 2}, {364, 5}, {383, 1}, {391, 1},
    {401, 1}, {407, 1}, {429, 2}, {436, 5}, {456, 1}, {457, 1}, {468, 4}, {472, 1}, {477, 1},
    {490, 1}, {500, 1}, {501, 1}, {502, 1}, {503, 9}, {506, 5}, {507, 2}, {508, 2}, {509, 1},
    {510, 8}, {511, 1}};
static const freq CATEGORIES[] = {{0, 78}, {1, 95}, {2, 58}, {3, 9}};
static const freq PRIORITIES[] = {{0, 59}, {1, 40}, {2, 68}, {8, 32}, {9, 38}, {10, 3}};
static const freq CPU_MILLI[] = {
    {0, 14},  {1, 2},  {6, 53}, {7, 3},   {8, 1},  {9, 13},  {11, 2},  {13, 19}, {16, 2},
    {19, 4},  {23, 1}, {25, 15}, {31, 29}, {36, 1}, {37, 1},  {41, 1},  {47, 2},  {50, 2},
    {51, 1},  {56, 3}, {62, 1}, {63, 49}, {69, 1}, {73, 1},  {75, 1},  {84, 1},  {100, 4},
    {116, 1}, {125, 8}, {151, 1}, {188, 1}, {250, 1}, {406, 1}};
static const freq RAM_MILLI[] = {
    {0, 15},  {1, 1},  {2, 20},  {3, 21},  {4, 8},   {5, 20},  {6, 9},   {7, 3},   {8, 6},
    {9, 5},   {10, 1}, {11, 4},  {12, 16}, {13, 1},  {14, 2},  {15, 1},  {16, 25}, {20, 1},
    {21, 8},  {24, 1}, {25, 2},  {27, 1},  {28, 2},  {29, 1},  {31, 1},  {32, 7},  {33, 13},
    {38, 2},  {39, 1}, {40, 2},  {48, 13}, {59, 1},  {62, 2},  {63, 1},  {64, 6},  {67, 1},
    {76, 2},  {80, 6}, {87, 1},  {95, 1},  {103, 1}, {118, 1}, {127, 2}, {159, 1}, {350, 1}};
static const freq DISK_MILLI[] = {{0, 232}, {1, 4}, {2, 3}, {6, 1}};
static const freq CONSTRAINTS[] = {{0, 209}, {1, 31}};

/* Range of job and machine ids in the sample; ids are spread over it. */
#define JOB_ID_MIN INT64_C(515042954)
#define JOB_ID_MAX INT64_C(6251707408)
#define MACHINE_ID_MIN INT64_C(5)
#define MACHINE_ID_MAX INT64_C(6240379586)
/* Half the jobs in the sample have a single task; the rest up to ~20,000. */
#define MAX_TASKS 20000.0
/* Share of KILL (5) events without a machine in the sample: 702 / 981. */
#define KILL_NO_MACHINE 0.7156

enum { F_KEY = 1, F_JOB, F_EVENT, F_TASK, F_MACHINE, F_MACHINE_ID };

/* Returns the value of the table entry chosen by the random word x with
 * probability count / total. */
static int32_t pick(const freq *t, size_t n, uint64_t x) {
    uint64_t total = 0;
    for (size_t j = 0; j < n; j++) total += t[j].count;
    uint64_t u = slash_gen_below(x, total);
    for (size_t j = 0; j < n; j++) {
        if (u < t[j].count) return t[j].value;
        u -= t[j].count;
    }
    return t[n - 1].value; /* unreachable: u < total */
}

#define PICK(table, x) pick((table), NELEM(table), (x))

typedef struct job {
    int64_t id;
    uint64_t tasks;
    int32_t user, category, priority, constraints;
    float cpu, ram, disk;
} job;

static void job_of(const slash_gen_cm *g, uint64_t rank, job *j) {
    slash_gen_rng r = {slash_gen_at(g->s_job, rank)};
    uint64_t span = (uint64_t)(JOB_ID_MAX - JOB_ID_MIN);
    uint64_t stride = span / g->cfg.jobs;
    if (stride == 0) stride = 1;
    /* unique ids: rank r owns [min + r * stride, min + (r + 1) * stride) */
    j->id = JOB_ID_MIN + (int64_t)(rank * stride + slash_gen_below(slash_gen_next(&r), stride));
    j->user = PICK(USERS, slash_gen_next(&r));
    j->category = PICK(CATEGORIES, slash_gen_next(&r));
    j->priority = PICK(PRIORITIES, slash_gen_next(&r));
    j->cpu = (float)PICK(CPU_MILLI, slash_gen_next(&r)) / 1000.0f;
    j->ram = (float)PICK(RAM_MILLI, slash_gen_next(&r)) / 1000.0f;
    j->disk = (float)PICK(DISK_MILLI, slash_gen_next(&r)) / 1000.0f;
    j->constraints = PICK(CONSTRAINTS, slash_gen_next(&r));
    uint64_t w = slash_gen_next(&r);
    if (w >> 63) {
        j->tasks = 1;
    } else {
        double u = slash_gen_unit(slash_gen_next(&r));
        j->tasks = (uint64_t)exp(u * log(MAX_TASKS)) + 1;
    }
}

slash_status slash_gen_cm_init(slash_gen_cm *g, const slash_gen_cm_config *cfg) {
    if (!g || !cfg) return slash_fail(SLASH_EINVAL, "cm: NULL generator or config");
    if (cfg->jobs == 0) return slash_fail(SLASH_EINVAL, "cm: jobs (keys) must be >= 1");
    if (cfg->machines == 0) return slash_fail(SLASH_EINVAL, "cm: machines must be >= 1");
    slash_status st = slash_gen_keys_init(&g->keys, cfg->jobs, cfg->dist, cfg->exponent);
    if (st != SLASH_OK) return st;
    st = slash_gen_times_check(cfg->base_ms, cfg->rate, 0);
    if (st != SLASH_OK) return st;
    g->cfg = *cfg;
    g->s_key = slash_gen_stream(cfg->seed, F_KEY);
    g->s_job = slash_gen_stream(cfg->seed, F_JOB);
    g->s_event = slash_gen_stream(cfg->seed, F_EVENT);
    g->s_task = slash_gen_stream(cfg->seed, F_TASK);
    g->s_machine = slash_gen_stream(cfg->seed, F_MACHINE);
    g->s_machine_id = slash_gen_stream(cfg->seed, F_MACHINE_ID);
    return SLASH_OK;
}

static int64_t machine_id(const slash_gen_cm *g, uint64_t m) {
    uint64_t span = (uint64_t)(MACHINE_ID_MAX - MACHINE_ID_MIN);
    uint64_t stride = span / g->cfg.machines;
    if (stride == 0) stride = 1;
    return MACHINE_ID_MIN +
           (int64_t)(m * stride + slash_gen_below(slash_gen_at(g->s_machine_id, m), stride));
}

slash_status slash_gen_cm_fill(const slash_gen_cm *g, uint64_t start, size_t n,
                               const slash_gen_cm_columns *out) {
    if (!g || !out) return slash_fail(SLASH_EINVAL, "cm: NULL generator or columns");
    slash_status st = slash_gen_range_check("cm", start, n, g->cfg.base_ms, g->cfg.rate);
    if (st != SLASH_OK) return st;
    if (out->timestamp) slash_gen_times_fill(g->cfg.base_ms, g->cfg.rate, start, n, out->timestamp);
    const int need_job = out->job_id || out->task_id || out->user_id || out->category ||
                         out->priority || out->cpu || out->ram || out->disk || out->constraints;
    const int need_event = out->event_type || out->machine_id;
    for (size_t k = 0; k < n; k++) {
        uint64_t i = start + k;
        if (need_job) {
            job j;
            job_of(g, slash_gen_keys_draw(&g->keys, slash_gen_at(g->s_key, i)), &j);
            if (out->job_id) out->job_id[k] = j.id;
            if (out->task_id)
                out->task_id[k] = (int64_t)slash_gen_below(slash_gen_at(g->s_task, i), j.tasks);
            if (out->user_id) out->user_id[k] = j.user;
            if (out->category) out->category[k] = j.category;
            if (out->priority) out->priority[k] = j.priority;
            if (out->cpu) out->cpu[k] = j.cpu;
            if (out->ram) out->ram[k] = j.ram;
            if (out->disk) out->disk[k] = j.disk;
            if (out->constraints) out->constraints[k] = j.constraints;
        }
        if (need_event) {
            slash_gen_rng r = {slash_gen_at(g->s_event, i)};
            int32_t ev = PICK(EVENT_TYPES, slash_gen_next(&r));
            if (out->event_type) out->event_type[k] = ev;
            if (out->machine_id) {
                int none = ev == 0 || (ev == 5 && slash_gen_unit(slash_gen_next(&r)) < KILL_NO_MACHINE);
                out->machine_id[k] =
                    none ? -1
                         : machine_id(g, slash_gen_below(slash_gen_at(g->s_machine, i),
                                                         g->cfg.machines));
            }
        }
    }
    return SLASH_OK;
}
