/* The move orchestrator, "mover" (docs/MOVING.md): what runs at a safe point to move
 * a virtual device (an EST) to another real device or park it in host
 * memory, from the pieces of move/: drain the streams (vhandle), move
 * the memory (swap), tear the real handles down and re-create them
 * (vhandle), re-register pinned host memory (memreg).
 *
 * Outcomes: 0 and the EST where it was asked to be; or a negative errno
 * with a one-line reason, and the EST either where it was or parked (never
 * half-moved). A parked EST keeps its host copies and comes back with a
 * later move to a device.
 *
 * es_mover_run runs a move on the calling thread, which must be at a safe
 * point (the door's mover, a time-slice turn, a test). es_mover_post asks
 * the door (move/door.h) to run one at the next safe point.
 */
#ifndef ES_MOVE_MOVER_H
#define ES_MOVE_MOVER_H

#include <stddef.h>
#include <stdint.h>

#define ES_MOVER_PARK (-1)   /* target device: host memory only */
#define ES_MOVER_TOGGLE (-3) /* park when resident, back where it was when parked */
#define ES_MOVER_PARK_MEM (-4) /* time-slicing's yield: park the memory only, the
                                * handles stay (a later move elsewhere takes them down) */

/* Installs the door's hooks (re-binding after a move, the signal target).
 * Idempotent. */
void es_mover_init(void);

int es_mover_run(int vdev, int dev, char *msg, size_t msglen);

/* A ticket for es_door_result, or a negative errno (-EBUSY: a request is
 * pending; -ENOSYS: moves unavailable). */
long es_mover_post(int vdev, int dev);

/* For a signal handler: the target is taken from an int (a device, or
 * ES_MOVER_PARK) stored before es_door_request_from_signal. */
void es_mover_signal_target(int vdev, int dev);

/* Vetoes on moves from the layers above (the collectives: while a
 * communicator's staging is device memory other processes map, an EST
 * moves only at a scheduled hold, when that staging is down; the
 * interception: once the CUDA runtime holds real handles): each called
 * before every move of a vdev that would change where it is; 0, or a
 * negative errno with a one-line reason in msg (the move fails, nothing
 * touched). Up to ES_MOVER_GATES, each added once (adding one twice is a
 * no-op); safe to call from any thread at any time; 0 or -ENOSPC. */
#define ES_MOVER_GATES 4
int es_mover_add_gate(int (*gate)(char *msg, size_t msglen));
/* What the gates say now about a move of this EST (a rotation it would
 * join: its turns are moves): 0, or the first veto with its reason. */
int es_mover_gates_check(char *msg, size_t msglen);

/* Where vdev is: a real device, or ES_MOVER_PARK. */
int es_mover_where(int vdev);

/* The whole EST: every vdev of the process that holds objects or memory,
 * moved to dev (their common slot) or parked; in vdev order, each whole or
 * not at all. es_mover_post_est / es_mover_signal_est are the door's
 * request and the signal target for it. */
int es_mover_run_est(int dev, char *msg, size_t msglen);
long es_mover_post_est(int dev);

/* A move the process asks for itself (the move signal, easyscale_move),
 * not the controller: posted like es_mover_post_est; when a gate refuses
 * it with -EXDEV, the deferral hook (the collectives: a hold of the whole
 * job agreed without a controller) may take it over: it returns
 * -EINPROGRESS with where the move will happen in msg (the request's
 * result), or its own failure. One hook, set once; any thread. */
long es_mover_post_self(int dev);
void es_mover_set_defer(int (*defer)(int dev, char *msg, size_t msglen));
void es_mover_signal_est(int dev);
/* The figures of the last es_mover_run / es_mover_run_est (summed over the
 * vdevs moved): bytes copied, copy time, drain time, wall time. */
#include "move/swap.h"
void es_mover_last_stats(es_swap_stats_t *st);

/* Called after every es_mover_run_est with its outcome (the shim logs it):
 * rc, the target (ES_MOVER_PARK: host memory), the message, the figures. */
void es_mover_set_report(void (*report)(int rc, int dev, const char *msg,
                                        const es_swap_stats_t *st));

/* Where the EST is (its first vdev in use), ES_MOVER_PARK, or -2 when it
 * holds nothing yet. */
int es_mover_where_est(void);

/* Time-slicing at a collective (docs/MOVING.md, section 6), from a thread
 * inside a call (the collective's): es_mover_yield parks the whole EST
 * through the door (the application's other threads wait at the door while
 * it is parked; this one is in a safe section) and passes t's turn;
 * es_mover_resume waits for the turn to come back and brings the EST back
 * onto dev, then ends the safe section. In between the caller touches the
 * EST's memory only through es_swap_park_read/write (move/swap.h) and
 * makes no driver call. Only the memory is parked (contexts, streams,
 * modules and vendor handles stay on the slot: a move elsewhere takes them
 * down first). On a slot of cap 2 (es_tslice_join_cap, overlap) the yield
 * passes the turn before the memory goes, and the resume brings the memory
 * back as soon as this EST is next and there is room, then waits for the
 * turn. Both return 0 or a negative errno with a reason:
 * a failed yield leaves the EST resident and the turn held; a failed
 * resume leaves it parked (and the safe section open: call it again). */
#include "move/tslice.h"
int es_mover_yield(es_tslice_t *t, char *msg, size_t msglen);
int es_mover_resume(es_tslice_t *t, int dev, char *msg, size_t msglen);

/* This EST's time-slicing figures since it started (lock-free counters,
 * any thread): turns given up (es_mover_yield that parked), the swaps of
 * those turns and the bytes they copied or skipped (unchanged since the
 * previous swap-out), the peak of the slot's memory in use seen right
 * after a swap-in (bytes, cuMemGetInfo; 0 before the first), and whether
 * the EST is resident now. */
typedef struct es_mover_ts_stats {
    uint64_t yields;
    uint64_t swaps_out, swaps_in;
    uint64_t bytes_out, bytes_in;  /* copied device -> host, host -> device */
    uint64_t bytes_skipped;        /* not copied out: unchanged */
    uint64_t bytes_kept;           /* not copied in: kept on the slot and unchanged
                                    * (EASYSCALE_TIME_SLICE_KEEP) */
    uint64_t footprint;            /* the EST's memory at its last swap (bytes) */
    uint64_t slot_peak;            /* the slot's memory in use, peak after a swap-in */
    double ms_moves;               /* wall time of those swaps (ms), of which: */
    double ms_copy, ms_sums, ms_sync; /* copies, checksums, draining the streams */
    int resident;
} es_mover_ts_stats_t;
void es_mover_ts_stats(es_mover_ts_stats_t *out);

/* Time-slicing: this EST keeps nothing on its slot while parked from now
 * on (EASYSCALE_TIME_SLICE_KEEP for this process set to 0) and gives back
 * what it keeps now; call while parked (a swap-in found no room). 1 when
 * it was keeping memory before, else 0. */
int es_mover_keep_none(void);

/* The rotation this EST takes part in (set once it joined its slot's), and
 * its slot; NULL / -1 when it is not time-sliced. Whoever runs a
 * collective asks (the virtual collectives' engine). */
void es_mover_set_tslice(es_tslice_t *t, int slot);
es_tslice_t *es_mover_tslice(int *slot);

/* Objects of the vendor libraries living in a vdev's contexts (cuBLAS,
 * cuBLASLt, cuDNN handles: intercept/virtual/libh.h). A move calls down(vdev)
 * while vdev is still resident where it was (before anything is drained or
 * copied: the objects' old contexts exist), and up(vdev) once vdev is
 * resident again (on the new GPU, or where it was when the move failed),
 * its contexts bound; not while parked. (An EST whose memory only was
 * parked, ES_MOVER_PARK_MEM, keeps its objects: down is called when it
 * moves elsewhere, its contexts still there, its memory in host copies.) Each returns 0 or a negative errno
 * with a reason in msg; a failure of down stops the move (up restores what
 * it took down), one of up fails the move (vdev stays where it is). NULL:
 * none. */
void es_mover_set_lib_hooks(int (*down)(int vdev, char *msg, size_t msglen),
                            int (*up)(int vdev, char *msg, size_t msglen));

/* Rotations a running job enters and leaves (the controller's time-slice
 * command, docs/MOVING.md section 6). A change is applied by the thread
 * that runs the EST's next collective, at its start (es_mover_ts_apply,
 * coll/tslice.c), or, for a LEAVE, by a parked member while it waits for
 * its turn:
 * - JOIN: t, a dynamic rotation joined (es_tslice_join_dynamic, not
 *   entered) for slot; the EST enters it, and the collective yields as in
 *   any rotation: it parks (passing the turn if it holds it), takes part
 *   parked, waits for its turn and comes back onto slot.
 * - LEAVE: be resident on slot and out of the rotation. A running member
 *   (resident on the shared slot, holding the turn) moves there first,
 *   then leaves, passing the turn; a parked one moves there at once unless
 *   slot is the shared one (then in its turn). A failed move leaves the EST
 *   where it was, still in the rotation. An EST in no rotation just moves.
 * es_mover_ts_change posts a change and waits up to timeout_ms for it to
 * be applied: 0 with *rc (0 or a negative errno) and a one-line msg, or
 * -ETIMEDOUT (no collective came: withdrawn, nothing changed), -EBUSY
 * (another change is pending), -EINVAL. */
#define ES_MOVER_TS_JOIN 1
#define ES_MOVER_TS_LEAVE 2
typedef struct es_mover_ts_change {
    int op;
    es_tslice_t *t; /* JOIN */
    int slot;       /* JOIN: the shared slot; LEAVE: where to go */
} es_mover_ts_change_t;
int es_mover_ts_change(const es_mover_ts_change_t *c, int timeout_ms, int *rc, char *msg,
                       size_t msglen);
void es_mover_ts_apply(void);
/* 1 when a change is waiting for es_mover_ts_apply (any thread). */
int es_mover_ts_pending(void);

#endif
