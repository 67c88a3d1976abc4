/* Benchmark of the intra-job scheduler (controller/sched.h): the slowest
 * slot's load (the step time of a synchronous job) of its placement beside
 * the rule EasyScale describes (ESTs in proportion to GPU speed, rounded by
 * largest remainder) and VirtualFlow's equal split, on the same tables;
 * then the time one placement takes. Figures only, never pass/fail.
 *
 * Speeds: one EST's step time per model relative to an A100, as simcuda
 * models them (sim/driver/device.c: b200 0.35, h200 0.5, h100 0.6, a100
 * 1.0, l4 1.8, a10 2.0, t4 4.0). Loads are printed in A100 EST steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/sched.h"

typedef struct model {
    const char *name;
    double rel; /* one EST's step time, A100 = 1 */
} model_t;

static const model_t models[] = { { "b200", 0.35 }, { "h200", 0.5 }, { "h100", 0.6 },
                                  { "a100", 1.0 },  { "l4", 1.8 },   { "a10", 2.0 },
                                  { "t4", 4.0 } };
#define NMODELS (int)(sizeof(models) / sizeof(models[0]))
#define UNIT 1000000ull /* ns per A100 EST step */

static const model_t *model(const char *n)
{
    for (int i = 0; i < NMODELS; i++)
        if (strcmp(models[i].name, n) == 0)
            return &models[i];
    return &models[3];
}

/* Max loads of the three rules for one table; 0 from ours on error. */
static void three(const es_sched_in_t *in, uint64_t *ours, uint64_t *prop, uint64_t *eq)
{
    int place[ES_SCHED_MAX_ESTS], c[ES_SCHED_MAX_SLOTS], moves;
    char why[128];
    if (es_sched_place(in, place, ours, &moves, why, sizeof(why)) < 0)
        *ours = 0;
    es_sched_proportional(in, c);
    *prop = es_sched_max_load(in, c);
    es_sched_equal(in, c);
    *eq = es_sched_max_load(in, c);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    static const struct {
        const char *gpus;
        int n;
    } tables[] = {
        { "a100 a100 a100 a100", 4 },   { "a100 a100 a100 a100", 6 },
        { "a100 t4", 3 },               { "a100 t4", 5 },
        { "a100 t4", 8 },               { "a100 a100 l4 t4", 4 },
        { "a100 a100 l4 t4", 8 },       { "a100 a100 l4 t4", 16 },
        { "h100 a100 a10", 6 },         { "h100 a100 a10", 8 },
        { "h100 a100 a10", 12 },        { "h100 t4 t4", 4 },
        { "h100 t4 t4", 8 },            { "b200 h200 a100 l4 a10 t4", 8 },
        { "b200 h200 a100 l4 a10 t4", 16 }, { "h100 h100 a100 a100 l4 l4 t4 t4", 32 },
    };
    printf("slowest GPU's load per step, in A100 EST steps (lower is better)\n");
    printf("%-38s %4s %8s %13s %8s\n", "GPUs", "ESTs", "ours", "proportional", "equal");
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        es_sched_slot_t s[ES_SCHED_MAX_SLOTS];
        char buf[128], *save = NULL;
        int ns = 0;
        snprintf(buf, sizeof(buf), "%s", tables[t].gpus);
        for (char *g = strtok_r(buf, " ", &save); g; g = strtok_r(NULL, " ", &save)) {
            s[ns].est_ns = (uint64_t)(model(g)->rel * UNIT);
            s[ns].mem = 0;
            ns++;
        }
        es_sched_in_t in = { .nslots = ns, .slots = s, .nests = tables[t].n };
        uint64_t o, p, e;
        three(&in, &o, &p, &e);
        printf("%-38s %4d %8.2f %13.2f %8.2f\n", tables[t].gpus, tables[t].n, (double)o / UNIT,
               (double)p / UNIT, (double)e / UNIT);
    }

    /* random tables: how far from the optimum each rule lands */
    unsigned seed = 2024;
    const int ntab = 5000;
    double sum_p = 0, sum_e = 0, worst_p = 1, worst_e = 1;
    int opt_p = 0, opt_e = 0;
    for (int t = 0; t < ntab; t++) {
        es_sched_slot_t s[8];
        int ns = 2 + rand_r(&seed) % 7;
        for (int i = 0; i < ns; i++)
            s[i] = (es_sched_slot_t){ (uint64_t)(models[rand_r(&seed) % NMODELS].rel * UNIT), 0 };
        es_sched_in_t in = { .nslots = ns, .slots = s, .nests = 4 + rand_r(&seed) % 61 };
        uint64_t o, p, e;
        three(&in, &o, &p, &e);
        double rp = (double)p / (double)o, re = (double)e / (double)o;
        sum_p += rp;
        sum_e += re;
        worst_p = rp > worst_p ? rp : worst_p;
        worst_e = re > worst_e ? re : worst_e;
        opt_p += p == o;
        opt_e += e == o;
    }
    printf("\n%d random tables (2-8 GPUs of the models above, 4-64 ESTs): load / ours\n", ntab);
    printf("%-14s %8s %8s %12s\n", "rule", "mean", "worst", "optimal in");
    printf("%-14s %8.3f %8.3f %11.1f%%\n", "proportional", sum_p / ntab, worst_p,
           100.0 * opt_p / ntab);
    printf("%-14s %8.3f %8.3f %11.1f%%\n", "equal", sum_e / ntab, worst_e, 100.0 * opt_e / ntab);
    printf("BENCH sched.random.ours 1 x # slowest-GPU load of our placement (%d random tables)\n",
           ntab);
    printf("BENCH sched.random.proportional %.4f x vs sched.random.ours # EasyScale's proportional "
           "rule, mean load relative to ours\n", sum_p / ntab);
    printf("BENCH sched.random.equal %.4f x vs sched.random.ours # equal split (VirtualFlow), mean "
           "load relative to ours\n", sum_e / ntab);

    /* what one placement costs */
    static int cur[ES_SCHED_MAX_ESTS], place[ES_SCHED_MAX_ESTS];
    es_sched_slot_t s[ES_SCHED_MAX_SLOTS];
    for (int i = 0; i < 64; i++)
        s[i] = (es_sched_slot_t){ (uint64_t)(models[i % NMODELS].rel * UNIT), 80ull << 30 };
    for (int i = 0; i < 1024; i++)
        cur[i] = i % 48;
    es_sched_in_t in = { .nslots = 64, .slots = s, .nests = 1024, .cur = cur,
                         .est_mem = 10ull << 30, .time_slicing = 1, .swap_ns = UNIT };
    uint64_t l;
    int moves, reps = 50;
    char why[128];
    double t0 = now_s();
    for (int r = 0; r < reps; r++)
        es_sched_place(&in, place, &l, &moves, why, sizeof(why));
    double dt = (now_s() - t0) / reps;
    printf("\none placement of 1024 ESTs on 64 GPUs (48 before): %.3f ms, %d moves\n", dt * 1e3,
           moves);
    printf("BENCH sched.place-1024on64 %.3f ms # one placement of 1024 ESTs on 64 GPUs\n",
           dt * 1e3);
    return 0;
}
