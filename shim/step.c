/* The step source of shim/step.h, and the ncclAllReduce wrapper that feeds
 * it until the collective engine does (kind C in intercept/funcs.h). The
 * count is one relaxed atomic increment, the only thing the control channel
 * adds to a training call.
 *
 * The wrapper is weak: when the collective engine's ncclAllReduce is linked
 * in, that one is exported instead, and must call es_step_tick itself
 * (tests/controller checks that the step advances, so a forgotten call
 * shows). */
#include "shim/shim.h"
#include "shim/step.h"

static uint64_t es_steps;

void es_step_tick(void)
{
    __atomic_fetch_add(&es_steps, 1, __ATOMIC_RELAXED);
}

uint64_t es_step_now(void)
{
    return __atomic_load_n(&es_steps, __ATOMIC_RELAXED);
}

__attribute__((weak)) ES_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff,
                                                           size_t count, ncclDataType_t datatype,
                                                           ncclRedOp_t op, ncclComm_t comm,
                                                           cudaStream_t stream)
{
    ES_ENTER(nccl, ncclAllReduce);
    es_step_tick();
    return ES_REAL(nccl, ncclAllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
