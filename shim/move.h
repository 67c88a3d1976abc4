/* Moving an EST: the interface the control thread (shim/control.c) calls
 * for each MOVE command of the controller (wire/proto.h): place,
 * migrate, swap-out, swap-in. This file is the seam between the control
 * channel and the code that actually moves an EST's device state
 * (implemented in move/est.c with move/mover.h). The spine declares it
 * here and calls nothing else of move/ (scripts/check-deps).
 *
 * Contract of es_move_request (for whoever implements it):
 * - Called on the control thread only, one request at a time, never on a
 *   thread of the application. It may block that thread for as long as the
 *   move takes (the controller knows a move is in flight and does not count
 *   the missing heartbeats against the EST); it must make the application's
 *   threads wait only for the move itself, at a safe point.
 * - r arrives with r->slot set to where the EST is now (EASYSCALE_SLOT at
 *   start, "host" when swapped out) and the rest zeroed. On return r->slot
 *   says where the EST is (the target on success, unchanged on a failure
 *   that moved nothing), and on failure r->reason holds one line saying why
 *   (the controller prints it to the user).
 * - Timings in nanoseconds (0 when not measured): total, of which
 *   synchronising the EST's streams, of which copying; bytes copied.
 * - Returns 0, or a negative errno: -ENOTSUP (this build cannot move
 *   ESTs), -EINVAL (bad op or slot), -ENOMEM (the target slot has no room),
 *   -EBUSY (inside stream capture or another move), -EXDEV (the
 *   collectives' staging is device memory the other ESTs map: the move can
 *   happen only at a hold of every EST of the job, which the controller then
 *   sets with HOLD_OFFER / HOLD_AT, wire/proto.h), -EIO (the move failed
 *   half-way: r->slot says where the EST is). HOLD_OFFER and HOLD_AT are
 *   not moves: the control thread answers them itself (shim/step.h).
 * - The epoch is the controller's placement epoch: a request whose epoch
 *   is lower than the last one applied may be refused with -ESTALE.
 * - _TS_JOIN / _TS_LEAVE (time-slicing, docs/MOVING.md section 6) are
 *   applied at the EST's next collective; the call returns once the EST
 *   joined (it then parks and takes turns on r->slot) or left (resident on
 *   r->slot), or -EBUSY when no collective came within the move timeout
 *   (nothing changed). While the EST is time-sliced, the other ops are
 *   refused with -EBUSY.
 */
#ifndef ES_SHIM_MOVE_H
#define ES_SHIM_MOVE_H

#include <stdint.h>

#define ES_MOVE_SLOT_LEN 64
#define ES_MOVE_REASON_LEN 256

#define ES_MOVE_TS_MAX 64

typedef struct es_move {
    int op;         /* enum es_proto_move_op: ES_MOVE_PLACE, _MIGRATE, _SWAP_OUT, _SWAP_IN,
                     * _TS_JOIN, _TS_LEAVE */
    uint64_t epoch; /* the controller's placement epoch */
    char slot[ES_MOVE_SLOT_LEN]; /* target: a GPU ordinal or UUID ("" for swap-out) */
    int nranks;                  /* _TS_JOIN: the rotation's ranks, ascending */
    int ranks[ES_MOVE_TS_MAX];
} es_move_t;

typedef struct es_move_result {
    uint64_t total_ns, sync_ns, copy_ns; /* time taken (0: not measured) */
    uint64_t bytes;                      /* device bytes copied */
    char slot[ES_MOVE_SLOT_LEN];         /* where the EST is after the call */
    char reason[ES_MOVE_REASON_LEN];     /* one line when it failed */
} es_move_result_t;

int es_move_request(const es_move_t *m, es_move_result_t *r);

/* Start-up, from the constructor after the configuration is parsed:
 * applies EASYSCALE_MOVE (virtual handles, the memory registry) and
 * installs EASYSCALE_MOVE_SIGNAL's handler. Loads no library. */
void es_move_setup(void);

/* Device memory the EST holds, in bytes, as the allocation registry knows
 * it (0: not known). Reported in heartbeats; the controller's placement
 * uses it for memory limits. Safe from any thread, takes no lock the
 * application's threads take. */
uint64_t es_move_footprint(void);

/* 1 while the EST is a member of a rotation the controller started
 * (ES_MOVE_TS_JOIN; its slot is the rotation's), else 0. Any thread. */
int es_move_time_sliced(void);

/* The EST's time-slicing figures since it started (move/mover.h counts
 * them when a time-sliced EST yields its GPU and comes back), reported in
 * heartbeats. where: 1 its device memory is on a GPU now, 0 parked in
 * host memory, -1 not known (it holds nothing on a GPU yet). Any thread;
 * where is looked up under the move registry's locks (briefly, but it
 * waits for a swap under way), the counters are atomics. */
typedef struct es_move_ts_figures {
    uint64_t yields;              /* turns given up */
    uint64_t swaps_out, swaps_in; /* parks, and returns onto the GPU */
    uint64_t bytes_out, bytes_in; /* copied device -> host, host -> device */
    int where;
} es_move_ts_figures_t;
void es_move_ts_figures(es_move_ts_figures_t *out);

#endif
