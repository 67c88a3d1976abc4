/* The EST's training progress as the shim sees it without the
 * application's help: the "step" of the control channel's heartbeats.
 *
 * Today: the number of ncclAllReduce calls this process has made through
 * the shim (one per gradient bucket, so several per optimizer step; a call
 * counts when it is enqueued, not when the device has finished it). The
 * deterministic collective engine will provide the count of completed
 * gradient allreduces instead; es_step_now is the one place to switch.
 */
#ifndef ES_SHIM_STEP_H
#define ES_SHIM_STEP_H

#include <stdint.h>

/* The current count. Any thread; no lock. */
uint64_t es_step_now(void);

#endif
