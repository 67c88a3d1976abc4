/* NCCL wrappers: with the virtual collectives on (EASYSCALE_COLLECTIVES,
 * default at d1/d2) every call is served by the engine (coll/coll.h) and
 * the real libnccl is never asked to reduce (nor to do anything else with a
 * communicator); otherwise each call is passed through to the real library.
 *
 * Generated from shim/funcs.h: ES_NCCL_FUNCS lists every function of
 * nccl.h that touches a communicator; each dispatches to es_v_<name> below.
 * The control channel's step (shim/step.h): the engine ticks it when a
 * gradient all-reduce completes; on plain NCCL, this file's ncclAllReduce
 * ticks it per call (this strong definition replaces shim/step.c's weak
 * one).
 *
 * A function the real libnccl.so.2 lacks (or no libnccl at all) stays
 * missing as without the shim (the stub's ncclSystemError): the virtual
 * collectives stand in for the library the application has, they add no
 * API to it.
 */
#include "intercept/enter.h"
#include "intercept/tsdefer.h"
#include "shim/config.h"
#include "shim/real.h"
#include "shim/step.h"
#include "coll/coll.h"
#include "coll/digest.h"
#include "device/vdev.h"
#include "kernels/reduce_kernels.h"

#include <stdio.h>
#include <string.h>

/* The virtual implementations, one per entry of the list. */
#define ES_V_PROTO(kind, sym, gp, ver, fl, ret, params, args, err) static ret es_v_##sym params;
ES_NCCL_FUNCS(ES_V_PROTO)
#undef ES_V_PROTO

/* NCCL's own collectives with their digests (EASYSCALE_DIGEST): the list
 * entry's index, then its arguments (a variadic call, so that every
 * wrapper of the list compiles the branch; only the digested ones take it). */
#define ES_DIGEST_ARGS(...) , ##__VA_ARGS__

#define ES_NCCL_WRAP(kind, sym, gp, ver, fl, ret, params, args, err)                            \
    ES_EXPORT ret sym params                                                                     \
    {                                                                                            \
        ES_ENTER(nccl, sym);                                                                     \
        __attribute__((cleanup(es_ts_nccl_leave))) int es_ts_g_ = es_ts_nccl_enter();            \
        if (__builtin_expect(es_cfg.collectives == ES_COLL_VIRTUAL, 1) &&                        \
            es_real_present(ES_LIB_NCCL, ES_IDX_##sym))                                          \
            return es_v_##sym args;                                                              \
        if (ES_IDX_##sym == ES_IDX_ncclAllReduce) { /* NCCL's own: counts when enqueued */     \
            es_coll_step_start(0);                                                               \
            es_step_tick();                                                                      \
        }                                                                                        \
        if (__builtin_expect(es_digest_enabled(), 0)) {                                          \
            if (es_digest_nccl_digested(ES_IDX_##sym))                                           \
                return (ret)(intptr_t)es_digest_nccl_pass(ES_IDX_##sym ES_DIGEST_ARGS args);      \
            if (ES_IDX_##sym == ES_IDX_ncclGroupStart || ES_IDX_##sym == ES_IDX_ncclGroupEnd)      \
                es_digest_nccl_group(ES_IDX_##sym == ES_IDX_ncclGroupStart ? 1 : -1);            \
        }                                                                                        \
        return ES_REAL(nccl, sym) args;                                                          \
    }
ES_NCCL_FUNCS(ES_NCCL_WRAP)
#undef ES_NCCL_WRAP

/* A communicator argument: one of ours, alive. */
#define ES_COMM_OR(comm, what)                                                                   \
    do {                                                                                         \
        if (!es_coll_valid(comm)) {                                                              \
            es_coll_error("%s: invalid communicator %p", what, (const void *)(comm));            \
            return ncclInvalidArgument;                                                          \
        }                                                                                        \
    } while (0)
#define ES_C(comm) ((es_comm_t *)(comm))

static ncclResult_t es_v_ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE; /* the API these functions implement */
    return ncclSuccess;
}

static const char *es_v_ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

static const char *es_v_ncclGetLastError(ncclComm_t comm)
{
    (void)comm; /* as in NCCL: the last error of the process */
    return es_coll_last_error();
}

static ncclResult_t es_v_ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    return es_coll_get_unique_id(uniqueId);
}

static ncclResult_t es_v_ncclMemAlloc(void **ptr, size_t size)
{
    if (!ptr || !size) {
        es_coll_error("ncclMemAlloc: bad arguments");
        return ncclInvalidArgument;
    }
    CUdeviceptr p = 0;
    CUresult r = es_lib_ready(ES_LIB_CUDA) ? ES_REAL(cuda, cuMemAlloc_v2)(&p, size)
                                           : CUDA_ERROR_NOT_INITIALIZED;
    if (r != CUDA_SUCCESS) {
        es_coll_error("ncclMemAlloc: cuMemAlloc of %zu bytes failed (CUresult %d)", size, (int)r);
        return ncclUnhandledCudaError;
    }
    *ptr = (void *)(uintptr_t)p;
    return ncclSuccess;
}

static ncclResult_t es_v_ncclMemFree(void *ptr)
{
    if (!ptr)
        return ncclSuccess;
    CUresult r = es_lib_ready(ES_LIB_CUDA) ? ES_REAL(cuda, cuMemFree_v2)((CUdeviceptr)(uintptr_t)ptr)
                                           : CUDA_ERROR_NOT_INITIALIZED;
    if (r != CUDA_SUCCESS) {
        es_coll_error("ncclMemFree: cuMemFree failed (CUresult %d)", (int)r);
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

static ncclResult_t es_v_ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                          int rank)
{
    return es_coll_init_rank((es_comm_t **)comm, nranks, &commId, rank, NULL);
}

static ncclResult_t es_v_ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                                ncclUniqueId commId, int rank,
                                                ncclConfig_t *config)
{
    return es_coll_init_rank((es_comm_t **)comm, nranks, &commId, rank, config);
}

static ncclResult_t es_v_ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                                  int nId, ncclUniqueId *commIds,
                                                  ncclConfig_t *config)
{
    if (nId < 1 || !commIds) {
        es_coll_error("ncclCommInitRankScalable: no unique id");
        return ncclInvalidArgument;
    }
    /* One id is enough here: every id names the same rendezvous only if
     * they are equal, so all ranks use the first. */
    return es_coll_init_rank((es_comm_t **)newcomm, nranks, &commIds[0], myrank, config);
}

static ncclResult_t es_v_ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    return es_coll_init_all((es_comm_t **)comm, ndev, devlist);
}

static ncclResult_t es_v_ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config)
{
    ES_COMM_OR(comm, "ncclCommSplit");
    return es_coll_split(ES_C(comm), color, key, (es_comm_t **)newcomm, config);
}

static ncclResult_t es_v_ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                                        int excludeRanksCount, ncclComm_t *newcomm,
                                        ncclConfig_t *config, int shrinkFlags)
{
    ES_COMM_OR(comm, "ncclCommShrink");
    return es_coll_shrink(ES_C(comm), excludeRanksList, excludeRanksCount,
                          (es_comm_t **)newcomm, config, shrinkFlags);
}

static ncclResult_t es_v_ncclCommFinalize(ncclComm_t comm)
{
    ES_COMM_OR(comm, "ncclCommFinalize");
    return es_coll_finalize(ES_C(comm));
}

static ncclResult_t es_v_ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess; /* NCCL accepts NULL */
    ES_COMM_OR(comm, "ncclCommDestroy");
    return es_coll_destroy(ES_C(comm));
}

static ncclResult_t es_v_ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    ES_COMM_OR(comm, "ncclCommAbort");
    return es_coll_abort(ES_C(comm));
}

/* NCCL 2.28's nccl.h defines it; older headers (the CUDA images' NCCL)
 * do not, and the value is part of the ABI. */
#ifndef NCCL_REVOKE_DEFAULT
#define NCCL_REVOKE_DEFAULT 0x00
#endif

static ncclResult_t es_v_ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    ES_COMM_OR(comm, "ncclCommRevoke");
    if (revokeFlags != NCCL_REVOKE_DEFAULT) {
        es_coll_error("ncclCommRevoke: flags must be NCCL_REVOKE_DEFAULT");
        return ncclInvalidArgument;
    }
    return es_coll_revoke(ES_C(comm));
}

static ncclResult_t es_v_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    ES_COMM_OR(comm, "ncclCommGetAsyncError");
    return es_coll_async_error(ES_C(comm), asyncError);
}

static ncclResult_t es_v_ncclCommCount(const ncclComm_t comm, int *count)
{
    ES_COMM_OR(comm, "ncclCommCount");
    if (!count)
        return ncclInvalidArgument;
    *count = es_coll_nranks(ES_C(comm));
    return ncclSuccess;
}

static ncclResult_t es_v_ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    ES_COMM_OR(comm, "ncclCommCuDevice");
    if (!device)
        return ncclInvalidArgument;
    *device = es_coll_cudev(ES_C(comm));
    return ncclSuccess;
}

static ncclResult_t es_v_ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    ES_COMM_OR(comm, "ncclCommUserRank");
    if (!rank)
        return ncclInvalidArgument;
    *rank = es_coll_rank(ES_C(comm));
    return ncclSuccess;
}

/* Buffer registration: the virtual collectives always stage, so a
 * registration is a token (accepted and released). */
static char es_reg_token;

static ncclResult_t es_v_ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                          void **handle)
{
    ES_COMM_OR(comm, "ncclCommRegister");
    if (!handle || (!buff && size)) {
        es_coll_error("ncclCommRegister: bad arguments");
        return ncclInvalidArgument;
    }
    *handle = &es_reg_token;
    return ncclSuccess;
}

static ncclResult_t es_v_ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    ES_COMM_OR(comm, "ncclCommDeregister");
    if (handle != &es_reg_token) {
        es_coll_error("ncclCommDeregister: unknown handle");
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

static ncclResult_t es_v_ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                                ncclWindow_t *win, int winFlags)
{
    (void)winFlags;
    ES_COMM_OR(comm, "ncclCommWindowRegister");
    if (!win || (!buff && size)) {
        es_coll_error("ncclCommWindowRegister: bad arguments");
        return ncclInvalidArgument;
    }
    *win = (ncclWindow_t)(void *)&es_reg_token;
    return ncclSuccess;
}

static ncclResult_t es_v_ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    ES_COMM_OR(comm, "ncclCommWindowDeregister");
    if ((void *)win != (void *)&es_reg_token) {
        es_coll_error("ncclCommWindowDeregister: unknown window");
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

static ncclResult_t es_v_ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                  ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence,
                                                  ncclComm_t comm)
{
    ES_COMM_OR(comm, "ncclRedOpCreatePreMulSum");
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
        es_coll_error("ncclRedOpCreatePreMulSum: bad residence %d", (int)residence);
        return ncclInvalidArgument;
    }
    return es_coll_premul_create(ES_C(comm), op, scalar, (int)datatype,
                                 residence == ncclScalarDevice);
}

static ncclResult_t es_v_ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    ES_COMM_OR(comm, "ncclRedOpDestroy");
    return es_coll_premul_destroy(ES_C(comm), op);
}

static ncclResult_t es_op(int kind, const void *send, void *recv, size_t count, int dtype, int op,
                          int root, ncclComm_t comm, cudaStream_t stream)
{
    es_coll_op_t o = { kind, ES_C(comm), send, recv, count, dtype, op, root, (CUstream)stream, 0, 0 };
    return es_coll_enqueue(&o);
}

static ncclResult_t es_v_ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return es_op(ES_OP_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

static ncclResult_t es_v_ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream)
{
    return es_op(ES_OP_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

static ncclResult_t es_v_ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return es_op(ES_OP_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

static ncclResult_t es_v_ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream)
{
    return es_op(ES_OP_BROADCAST, buff, buff, count, datatype, ncclSum, root, comm, stream);
}

static ncclResult_t es_v_ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return es_op(ES_OP_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm,
                 stream);
}

static ncclResult_t es_v_ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op,
                                           ncclComm_t comm, cudaStream_t stream)
{
    return es_op(ES_OP_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm,
                 stream);
}

static ncclResult_t es_v_ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    return es_op(ES_OP_SEND, sendbuff, NULL, count, datatype, ncclSum, peer, comm, stream);
}

static ncclResult_t es_v_ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    return es_op(ES_OP_RECV, NULL, recvbuff, count, datatype, ncclSum, peer, comm, stream);
}

/* All-to-all, gather and scatter are groups of sends and receives, as NCCL
 * builds them. */
static ncclResult_t es_p2p_group(int what, const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream)
{
    static const char *const names[3] = { "ncclAlltoAll", "ncclGather", "ncclScatter" };
    ES_COMM_OR(comm, names[what]);
    int n = es_coll_nranks(ES_C(comm)), me = es_coll_rank(ES_C(comm));
    size_t es = es_coll_type_size((int)datatype);
    if (!es) {
        es_coll_error("%s: invalid datatype %d", names[what], (int)datatype);
        return ncclInvalidArgument;
    }
    if (what != 0 && (root < 0 || root >= n)) {
        es_coll_error("%s: root %d is not valid", names[what], root);
        return ncclInvalidArgument;
    }
    size_t bytes = count * es;
    ncclResult_t res = es_coll_group_start(), r2;
    for (int p = 0; p < n && res == ncclSuccess; p++) {
        /* all-to-all: block p to p, block p from p; gather: mine to the
         * root, the root's block p from p; scatter: the root's block p to
         * p, mine from the root */
        int sends = what == 0 || (what == 1 && p == root) || (what == 2 && me == root);
        int recvs = what == 0 || (what == 1 && me == root) || (what == 2 && p == root);
        if (sends) {
            const char *src = (const char *)sendbuff + (what == 1 ? 0 : (size_t)p * bytes);
            res = es_op(ES_OP_SEND, src, NULL, count, datatype, ncclSum, p, comm, stream);
        }
        if (res == ncclSuccess && recvs) {
            char *dst = (char *)recvbuff + (what == 2 ? 0 : (size_t)p * bytes);
            res = es_op(ES_OP_RECV, NULL, dst, count, datatype, ncclSum, p, comm, stream);
        }
    }
    r2 = es_coll_group_end();
    return res != ncclSuccess ? res : r2;
}

static ncclResult_t es_v_ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream)
{
    return es_p2p_group(0, sendbuff, recvbuff, count, datatype, 0, comm, stream);
}

static ncclResult_t es_v_ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream)
{
    return es_p2p_group(1, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

static ncclResult_t es_v_ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream)
{
    return es_p2p_group(2, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

static ncclResult_t es_v_ncclGroupStart(void)
{
    return es_coll_group_start();
}

static ncclResult_t es_v_ncclGroupEnd(void)
{
    return es_coll_group_end();
}

static ncclResult_t es_v_ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
    if (simInfo)
        simInfo->estimatedTime = 0.0f;
    return es_coll_group_discard();
}
