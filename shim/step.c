/* The step source of shim/step.h: counts ncclAllReduce calls in the
 * wrapper (kind C in intercept/funcs.h). The count is one relaxed atomic
 * increment, the only thing the control channel adds to a training call.
 *
 * The wrapper is weak: when the collective engine's own ncclAllReduce is
 * linked in, it takes precedence, and es_step_now must then read the
 * engine's count of completed allreduces (tests/controller checks that the
 * step advances, so a forgotten switch shows). */
#include "shim/shim.h"
#include "shim/step.h"

static uint64_t es_allreduce_calls;

uint64_t es_step_now(void)
{
    return __atomic_load_n(&es_allreduce_calls, __ATOMIC_RELAXED);
}

__attribute__((weak)) ES_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff,
                                                           size_t count, ncclDataType_t datatype,
                                                           ncclRedOp_t op, ncclComm_t comm,
                                                           cudaStream_t stream)
{
    ES_ENTER(nccl, ncclAllReduce);
    __atomic_fetch_add(&es_allreduce_calls, 1, __ATOMIC_RELAXED);
    return ES_REAL(nccl, ncclAllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
