/* The EST's training progress as the shim sees it without the
 * application's help: the "step" of the control channel's heartbeats, and
 * the scheduled holds that make a controller's schedule exact.
 *
 * Step: the number of gradient all-reduces this process has made through
 * the shim (several per optimizer step: one per gradient bucket). With
 * NCCL's own collectives (EASYSCALE_COLLECTIVES=nccl) the pass-through
 * wrapper counts every ncclAllReduce when it is enqueued; the virtual
 * collectives count each floating-point all-reduce of a non-zero count when
 * it completes (es_step_tick from the engine).
 *
 * Holds (EASYSCALE_HOLD_STEPS, set by `easyscale-ctl run --schedule`): the
 * counting collective with index S (0-based: the one whose completion makes
 * the step S + 1), or the first one after it that is not inside a group,
 * waits before it starts until the controller says that the scheduled
 * events of step S are done (es_step_release, from a RELEASE message), or
 * EASYSCALE_HOLD_TIMEOUT passes (a warning; the EST goes on). While one
 * waits, every earlier collective of every EST has been started, so the
 * step every EST reports settles at S: the controller's "least step >= S"
 * is then exact, whatever the machine's speed.
 *
 * Holds set at run time (es_step_offer, es_step_hold_at below): the same
 * wait at a collective the controller and the ESTs agree on while the job
 * runs, for moves that need every EST held (docs/COLLECTIVES.md section 4).
 */
#ifndef ES_SHIM_STEP_H
#define ES_SHIM_STEP_H

#include <stdint.h>

/* One more step. Any thread; one relaxed atomic increment, no lock. */
void es_step_tick(void);

/* The current count. Any thread; no lock. */
uint64_t es_step_now(void);

/* A counting collective is about to start: returns its index (0-based).
 * Any thread; one relaxed atomic increment. */
uint64_t es_step_issue(void);

/* 1 with *step when the collective of index idx must wait for the
 * controller first (a hold at or before idx not yet released or given up);
 * 0 otherwise (one load when no hold is set). */
int es_step_hold_due(uint64_t idx, uint64_t *step);

/* Waits at the hold of step (from es_step_hold_due) until the controller
 * releases it, the hold's timeout passes, or poll(arg) (called about every
 * 10 ms, without a lock of the shim's; NULL: none) returns non-zero.
 * Returns 0 released, 1 ended by poll, -ETIMEDOUT (logged as a warning).
 * Either way the hold is over for this process. */
int es_step_hold_wait(uint64_t step, int (*poll)(void *), void *arg);

/* Control thread: the controller did the scheduled events through step. */
void es_step_release(uint64_t step);

/* A hold the controller sets at run time (a move of a job whose
 * collectives' staging is device memory, docs/COLLECTIVES.md section 4),
 * agreed in two rounds because the ESTs run at their own pace:
 * - es_step_offer (HOLD_OFFER): the next counting collective this EST
 *   issues (*idx, the same answer until the hold is set) will wait before
 *   it starts, until es_step_hold_at; -EBUSY when a hold is set already;
 * - es_step_hold_at (HOLD_AT, the greatest offer of the job's ESTs): the
 *   collective of index idx holds as a scheduled one does (until a RELEASE
 *   of step >= idx); -ERANGE when it started already; idx UINT64_MAX: no
 *   hold (the offer withdrawn).
 * Control thread; the application threads' side is es_step_hold_due. */
int es_step_offer(uint64_t *idx);
int es_step_hold_at(uint64_t idx);
/* The controller is gone: the offer and the hold are dropped (a waiter at
 * the hold goes on). */
void es_step_hold_drop(void);

/* The step + 1 an application thread waits at now; 0 when none does. */
uint64_t es_step_held(void);

/* Called when a hold starts, to report it at once (shim/control.c). */
void es_control_kick(void);

#endif
