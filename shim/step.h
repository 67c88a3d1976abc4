/* The EST's training progress as the shim sees it without the
 * application's help: the "step" of the control channel's heartbeats.
 *
 * Today: the number of ncclAllReduce calls this process has made through
 * the shim (one per gradient bucket, so several per optimizer step; a call
 * counts when it is enqueued, not when the device has finished it), counted
 * by the weak ncclAllReduce wrapper of shim/step.c. The deterministic
 * collective engine's own ncclAllReduce replaces that wrapper when it is
 * linked in; it then calls es_step_tick once per gradient allreduce it
 * completes, and the step keeps its meaning.
 */
#ifndef ES_SHIM_STEP_H
#define ES_SHIM_STEP_H

#include <stdint.h>

/* One more step. Any thread; one relaxed atomic increment, no lock. */
void es_step_tick(void);

/* The current count. Any thread; no lock. */
uint64_t es_step_now(void);

#endif
