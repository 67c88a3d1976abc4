/* Time-slicing (docs/MOVING.md, section 6): the ESTs placed on one slot
 * whose memory does not hold them all take turns on it, in a fixed order
 * (ascending logical rank), through a segment of shared memory per slot.
 *
 * An EST waits for its turn before it first touches the slot, runs until it
 * has to wait for the others (a collective), parks (move/mover.h), passes
 * the turn to the next EST of the slot, and waits for its next turn, when it
 * comes back. So the slot holds one EST's memory at a time plus the engine's
 * staging, never the sum.
 *
 * The segment ("/easyscale-ts-<uid>-<job>-<slot>") starts with magic,
 * version and size; the first member creates it, the last one to leave
 * removes it; a join removes the segments of the user's rotations whose
 * members all died (a killed job). A member that dies while it holds the
 * turn is skipped by the next waiter (its pid is recorded). Functions
 * return 0 or a negative errno.
 *
 * Two kinds of rotation:
 * - fixed (es_tslice_join): every member joins before it first touches the
 *   slot, so a member that has not joined yet is waited for;
 * - dynamic (es_tslice_join_dynamic: a running job the controller
 *   time-slices, docs/MOVING.md section 6): members join one by one, each at
 *   its next collective, after it has parked and before it waits. A member
 *   that has not joined yet holds no turn: a pass skips it, and a waiter
 *   whose turn sits with one takes it. A member that joined and does not
 *   hold the turn is parked, so the slot never holds two of them.
 */
#ifndef ES_MOVE_TSLICE_H
#define ES_MOVE_TSLICE_H

#include <stdint.h>

#define ES_TSLICE_MAX 64
#define ES_TSLICE_MAGIC 0x45535453u /* "ESTS" */
#define ES_TSLICE_VERSION 4
#define ES_TSLICE_DYNAMIC 1u /* es_tslice_shm_t.flags */

typedef struct es_tslice_shm {
    uint32_t magic, version, size, nmembers;
    int32_t ranks[ES_TSLICE_MAX]; /* the slot's ESTs, ascending */
    int32_t pids[ES_TSLICE_MAX];  /* 0: not joined yet, -1: left */
    uint32_t turn;                /* index into ranks: whose turn it is (a futex) */
    uint32_t joined;
    uint64_t passes;              /* turns passed so far */
    uint32_t flags;               /* ES_TSLICE_DYNAMIC */
    uint32_t cap;                 /* footprints the slot holds at once: 1, or 2 (overlap) */
    uint64_t resident;            /* cap 2: the members (bit = index) whose memory is on
                                   * the slot */
    uint32_t keep_off;            /* 1: a member found no room: no member keeps memory on
                                   * the slot while parked any more (EASYSCALE_TIME_SLICE_KEEP) */
    uint32_t pad;
    uint64_t at[ES_TSLICE_MAX];   /* dynamic: the collective each member can switch at, + 1
                                   * (0: not said yet) */
} es_tslice_shm_t;

_Static_assert(sizeof(es_tslice_shm_t) == 16 + 4 * ES_TSLICE_MAX * 2 + 8 + 8 + 8 + 8 + 8 +
                                              8 * ES_TSLICE_MAX,
               "es_tslice_shm_t layout");

typedef struct es_tslice es_tslice_t;

/* Joins the slot's rotation as rank (one of ranks[0..n-1], every member
 * gives the same set). job: a name shared by the job's ESTs ([A-Za-z0-9_-],
 * at most 64 characters). */
int es_tslice_join(es_tslice_t **out, const char *job, int slot, int rank, const int *ranks,
                   int n);
/* The same for a slot that holds cap footprints at once (1 or 2; every
 * member must give the same: -EPROTO otherwise). With 2 (overlap), the
 * member next in turn may bring its memory back while the holder runs
 * (es_tslice_wait_room), and a member that yields passes the turn before
 * its memory goes (es_tslice_room_release after). */
int es_tslice_join_cap(es_tslice_t **out, const char *job, int slot, int rank,
                       const int *ranks, int n, int cap);
/* The slot's cap (1 or 2). */
int es_tslice_cap(es_tslice_t *t);
/* Cap 2: waits until this member holds the turn or is the next to take
 * it, and the slot has room for its memory; takes the room. 0 or
 * -ETIMEDOUT. es_tslice_room_release gives it back. */
int es_tslice_wait_room(es_tslice_t *t, int timeout_ms);
void es_tslice_room_release(es_tslice_t *t);
/* The same for a dynamic rotation (see above); every member must join it
 * with this call (a fixed and a dynamic rotation of one name are
 * -EPROTO). It maps the segment only: the member takes turns from
 * es_tslice_enter on (-EALREADY when it entered or left already). A member
 * that never enters still calls es_tslice_leave. */
int es_tslice_join_dynamic(es_tslice_t **out, const char *job, int slot, int rank,
                           const int *ranks, int n);
int es_tslice_enter(es_tslice_t *t);
/* Dynamic rotations switch at one collective for all members (each
 * counts its collectives the same way): a member says the first one it can
 * switch at (es_tslice_offer, before its app thread runs that one); the
 * switch point is the latest offered. es_tslice_switch_at: 0 and *at once
 * every member offered, -EAGAIN before. */
int es_tslice_offer(es_tslice_t *t, uint64_t first);
int es_tslice_switch_at(es_tslice_t *t, uint64_t *at);
/* 1 for a dynamic rotation. */
int es_tslice_dynamic(es_tslice_t *t);
/* Waits until it is this member's turn: 0, or -ETIMEDOUT (timeout_ms >= 0). */
int es_tslice_wait(es_tslice_t *t, int timeout_ms);
/* Whether it is this member's turn now. */
int es_tslice_mine(es_tslice_t *t);
/* Passes the turn to the next member in rank order (the holder only:
 * -EPERM otherwise). */
int es_tslice_pass(es_tslice_t *t);
/* Memory kept on the slot by parked members (EASYSCALE_TIME_SLICE_KEEP):
 * es_tslice_keep_off says a member found no room beside it, for good;
 * es_tslice_keeping is 0 from then on (each member then keeps none). */
void es_tslice_keep_off(es_tslice_t *t);
int es_tslice_keeping(es_tslice_t *t);
/* Turns passed on the slot so far. */
uint64_t es_tslice_passes(es_tslice_t *t);
/* Leaves (passing the turn on if held); the last member removes the
 * segment. */
void es_tslice_leave(es_tslice_t *t);

#endif
