/* Placement of a job's ESTs on its GPU slots (the intra-job scheduler): a
 * pure module, no I/O, no globals.
 *
 * Model: every EST does the same work per step. On slot s one EST takes
 * est_ns[s] per step (measured per GPU model, or a prior), and the ESTs of a
 * slot run one after the other, so k ESTs on s cost
 *
 *     load_s(k) = k * est_ns + max(0, k - fit_s) * swap_ns
 *
 * where fit_s = mem / est_mem ESTs fit in the slot's memory at once and
 * each EST beyond that is swapped in and out every step (time-slicing,
 * swap_ns each). Without time-slicing k may not exceed fit_s; a slot where
 * not even one EST fits takes none. A synchronous step lasts as long as the
 * slowest slot: the objective is the smallest max_s load_s(k_s), then the
 * fewest ESTs moved from their current slots.
 *
 * Algorithm: since every load_s is nondecreasing in k, giving ESTs one by
 * one to the slot whose load after taking it is smallest reaches the
 * optimal maximum L (when the last of them pushes the max to L, every slot
 * already would reach L or more with one EST more, so any placement under L
 * holds fewer than N). Then every slot may take up to cap_s = max{k :
 * load_s(k) <= L}; keeping min(current_s, cap_s) ESTs where they are and
 * filling the rest by smallest next load keeps the most ESTs in place among
 * all optimal placements. Which ESTs move: the highest ranks of an
 * overfull slot, to the slots with room, in slot order.
 */
#ifndef ES_CONTROLLER_SCHED_H
#define ES_CONTROLLER_SCHED_H

#include <stddef.h>
#include <stdint.h>

typedef struct es_sched_slot {
    uint64_t est_ns; /* one EST's step time on this slot (> 0) */
    uint64_t mem;    /* device memory of the slot, bytes */
} es_sched_slot_t;

typedef struct es_sched_in {
    int nslots;                   /* 1..ES_SCHED_MAX_SLOTS */
    const es_sched_slot_t *slots;
    int nests;                    /* 1..ES_SCHED_MAX_ESTS */
    const int *cur;               /* current slot per EST (-1: none); NULL: all -1 */
    uint64_t est_mem;             /* device bytes one EST needs (0: no memory limit) */
    int time_slicing;             /* more ESTs on a slot than fit, taking turns */
    uint64_t swap_ns;             /* time-slicing cost per extra EST per step */
} es_sched_in_t;

#define ES_SCHED_MAX_SLOTS 64
#define ES_SCHED_MAX_ESTS 4096

/* The load of k ESTs on slot s; UINT64_MAX when they cannot be placed
 * there (memory, without time-slicing, or not even one fits). */
uint64_t es_sched_load(const es_sched_in_t *in, int s, int k);

/* The optimal placement: place[i] = slot of EST i (caller's array of
 * nests). Sets *max_load and *moves (ESTs whose slot differs from cur).
 * Returns 0, -EINVAL (bad input) or -ENOSPC (cannot be placed: not
 * enough memory even with time-slicing), with a one-line reason in why. */
int es_sched_place(const es_sched_in_t *in, int *place, uint64_t *max_load, int *moves,
                   char *why, size_t whylen);

/* Per-slot counts of two rules to compare against (benchmark): the one
 * EasyScale describes, ESTs in proportion to slot speed (1/est_ns), rounded
 * by largest remainder; VirtualFlow's equal split, N/S each and the
 * remainder to the first slots. Memory is not considered. Return 0 or
 * -EINVAL. */
int es_sched_proportional(const es_sched_in_t *in, int *counts);
int es_sched_equal(const es_sched_in_t *in, int *counts);

/* max_s load_s(counts[s]) (UINT64_MAX if a count is not placeable). */
uint64_t es_sched_max_load(const es_sched_in_t *in, const int *counts);

#endif
