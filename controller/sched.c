/* The intra-job scheduler (controller/sched.h): min-max placement of ESTs
 * over slots by marginal load, then the fewest moves among optimal
 * placements; and the two rules it is compared against. */
#include "controller/sched.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ESTs that fit at once in slot s (INT32_MAX without a memory limit). */
static int64_t fit(const es_sched_in_t *in, int s)
{
    if (!in->est_mem)
        return INT32_MAX;
    uint64_t f = in->slots[s].mem / in->est_mem;
    return f > INT32_MAX ? INT32_MAX : (int64_t)f;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    if (a && b > UINT64_MAX / a)
        return UINT64_MAX - 1;
    return a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - 1 - b ? UINT64_MAX - 1 : a + b;
}

uint64_t es_sched_load(const es_sched_in_t *in, int s, int k)
{
    if (k <= 0)
        return 0;
    int64_t f = fit(in, s);
    if (f == 0 || (k > f && !in->time_slicing))
        return UINT64_MAX;
    uint64_t load = mul_sat((uint64_t)k, in->slots[s].est_ns);
    if (k > f)
        load = add_sat(load, mul_sat((uint64_t)(k - f), in->swap_ns));
    return load;
}

static int check(const es_sched_in_t *in)
{
    if (!in || in->nslots < 1 || in->nslots > ES_SCHED_MAX_SLOTS || !in->slots ||
        in->nests < 1 || in->nests > ES_SCHED_MAX_ESTS)
        return -EINVAL;
    for (int s = 0; s < in->nslots; s++)
        if (in->slots[s].est_ns == 0)
            return -EINVAL;
    if (in->cur)
        for (int i = 0; i < in->nests; i++)
            if (in->cur[i] < -1 || in->cur[i] >= in->nslots)
                return -EINVAL;
    return 0;
}

static double gib(uint64_t b)
{
    return (double)b / (double)(1ull << 30);
}

int es_sched_place(const es_sched_in_t *in, int *place, uint64_t *max_load, int *moves,
                   char *why, size_t whylen)
{
    int counts[ES_SCHED_MAX_SLOTS] = { 0 }, caps[ES_SCHED_MAX_SLOTS], cur[ES_SCHED_MAX_SLOTS] = { 0 };
    int rc = check(in);
    if (rc < 0 || !place) {
        snprintf(why, whylen, "bad scheduler input");
        return -EINVAL;
    }
    int S = in->nslots, N = in->nests;
    if (in->cur)
        for (int i = 0; i < N; i++)
            if (in->cur[i] >= 0)
                cur[in->cur[i]]++;

    /* 1. The optimal maximum load, by marginal load. */
    uint64_t L = 0;
    for (int i = 0; i < N; i++) {
        int best = -1;
        uint64_t bl = UINT64_MAX;
        for (int s = 0; s < S; s++) {
            uint64_t l = es_sched_load(in, s, counts[s] + 1);
            if (l < bl) {
                bl = l;
                best = s;
            }
        }
        if (best < 0) {
            uint64_t biggest = 0;
            int64_t room = 0;
            for (int s = 0; s < S; s++) {
                if (in->slots[s].mem > biggest)
                    biggest = in->slots[s].mem;
                room += fit(in, s);
            }
            if (biggest < in->est_mem)
                snprintf(why, whylen, "not enough GPU memory: one EST needs %.2f GiB, the largest "
                         "GPU has %.2f GiB", gib(in->est_mem), gib(biggest));
            else
                snprintf(why, whylen, "not enough GPU memory without time-slicing: %lld of %d "
                         "ESTs of %.2f GiB fit", (long long)room, N, gib(in->est_mem));
            return -ENOSPC;
        }
        counts[best]++;
        if (bl > L)
            L = bl;
    }

    /* 2. Most ESTs kept in place among the placements of load <= L. */
    int kept = 0;
    for (int s = 0; s < S; s++) {
        int c = 0;
        while (c < N && es_sched_load(in, s, c + 1) <= L)
            c++;
        caps[s] = c;
        counts[s] = cur[s] < c ? cur[s] : c;
        kept += counts[s];
    }
    for (int left = N - kept; left > 0; left--) {
        int best = -1;
        uint64_t bl = UINT64_MAX;
        for (int s = 0; s < S; s++) {
            if (counts[s] >= caps[s])
                continue;
            uint64_t l = es_sched_load(in, s, counts[s] + 1);
            if (best < 0 || l < bl) {
                bl = l;
                best = s;
            }
        }
        if (best < 0) { /* cannot happen: step 1 fits N under L */
            snprintf(why, whylen, "internal scheduler error");
            return -EINVAL;
        }
        counts[best]++;
    }

    /* 3. Which ESTs: the lowest ranks of a slot stay. */
    int stay[ES_SCHED_MAX_SLOTS] = { 0 }, nmoved = 0;
    for (int i = 0; i < N; i++) {
        int c = in->cur ? in->cur[i] : -1;
        if (c >= 0 && stay[c] < counts[c]) {
            stay[c]++;
            place[i] = c;
        } else {
            place[i] = -1;
        }
    }
    int s = 0;
    for (int i = 0; i < N; i++) {
        if (place[i] >= 0)
            continue;
        while (stay[s] >= counts[s])
            s++;
        stay[s]++;
        place[i] = s;
        nmoved++;
    }
    if (max_load)
        *max_load = L;
    if (moves)
        *moves = nmoved;
    if (why && whylen)
        why[0] = '\0';
    return 0;
}

int es_sched_proportional(const es_sched_in_t *in, int *counts)
{
    if (check(in) < 0 || !counts)
        return -EINVAL;
    int S = in->nslots, N = in->nests, given = 0;
    double total = 0, rem[ES_SCHED_MAX_SLOTS];
    for (int s = 0; s < S; s++)
        total += 1.0 / (double)in->slots[s].est_ns;
    for (int s = 0; s < S; s++) {
        double share = (double)N * (1.0 / (double)in->slots[s].est_ns) / total;
        counts[s] = (int)share;
        rem[s] = share - counts[s];
        given += counts[s];
    }
    while (given < N) { /* largest remainder first, ties to the first slot */
        int best = 0;
        for (int s = 1; s < S; s++)
            if (rem[s] > rem[best])
                best = s;
        counts[best]++;
        rem[best] = -1;
        given++;
    }
    return 0;
}

int es_sched_equal(const es_sched_in_t *in, int *counts)
{
    if (check(in) < 0 || !counts)
        return -EINVAL;
    for (int s = 0; s < in->nslots; s++)
        counts[s] = in->nests / in->nslots + (s < in->nests % in->nslots);
    return 0;
}

uint64_t es_sched_max_load(const es_sched_in_t *in, const int *counts)
{
    uint64_t m = 0;
    for (int s = 0; s < in->nslots; s++) {
        uint64_t l = es_sched_load(in, s, counts[s]);
        if (l > m)
            m = l;
    }
    return m;
}
