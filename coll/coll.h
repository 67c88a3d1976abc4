/* The virtual collectives: a deterministic replacement for NCCL inside an
 * EST process (intercept/nccl.c is its API; this is the engine).
 *
 * A communicator of N ranks (ESTs on this host) meets in a shared-memory
 * segment named by its unique id. Every reduction folds each element over
 * the ranks in order 0..N-1 with the arithmetic of kernels/reduce_kernels.h,
 * whatever the placement, the transport, the chunking or which rank
 * computes which shard; every rank receives the same bits.
 *
 * Transports (one per communicator, chosen at init, same bits):
 *  - device: staging buffers made with VMM (cuMemCreate), exported as POSIX
 *    file descriptors passed over unix sockets and mapped by every rank (same
 *    GPU, or a peer GPU with peer access); copies and the reduction kernel
 *    run on the application's stream;
 *  - nccl: the device transport's staging between the ranks of one GPU, and
 *    one carrier per GPU in a communicator of the real libnccl.so.2 that
 *    carries the partial fold from GPU to GPU (docs/COLLECTIVES.md);
 *  - host: staging in the shared segment (registered with the driver); the
 *    CPU work is split across the ranks by shard.
 *  Ordering with the application's stream stays on the stream: copies and
 *  kernels are enqueued, never a wait in the calling thread. Waits for the
 *  other ranks: device transport, stream memory operations on words of the
 *  shared segment (on the device: no host function, no host thread held);
 *  host transport, host functions enqueued on the stream (cuLaunchHostFunc,
 *  which also do its CPU reduction). Operations of one communicator run in
 *  issue order (an event joins a stream switch).
 *
 * Faults: a rank that dies, leaves, or aborts makes the others' pending and
 * later operations fail at once (ncclRemoteError from
 * ncclCommGetAsyncError; pending operations complete on their streams
 * without data, later calls return the error); a live rank that does not
 * arrive fails them after EASYSCALE_COLL_TIMEOUT seconds (ncclSystemError).
 * (Device transport: a watchdog thread of the engine notices, and releases
 * the waits on the device by writing the segment's words.)
 * The segment's name is removed once every rank has joined (its memory goes
 * with the last mapping, crash or not); descriptors are closed once passed.
 *
 * Every function returns NCCL's status codes (this is the NCCL boundary)
 * and records a message for ncclGetLastError on failure.
 */
#ifndef ES_COLL_COLL_H
#define ES_COLL_COLL_H

#include <cuda.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

typedef struct es_comm es_comm_t;

/* Whether the virtual collectives serve NCCL calls (configuration). */
int es_coll_enabled(void);

/* ---- communicators --------------------------------------------------------- */

ncclResult_t es_coll_get_unique_id(ncclUniqueId *id);
/* config may be NULL (blocking). With config->blocking == 0 the call
 * returns ncclInProgress and the initialisation goes on in the background
 * (ncclCommGetAsyncError reports ncclInProgress, then ncclSuccess). Inside
 * a group the initialisation runs at ncclGroupEnd. */
ncclResult_t es_coll_init_rank(es_comm_t **comm, int nranks, const ncclUniqueId *id, int rank,
                               const ncclConfig_t *config);
ncclResult_t es_coll_init_all(es_comm_t **comms, int ndev, const int *devlist);
ncclResult_t es_coll_split(es_comm_t *parent, int color, int key, es_comm_t **out,
                           const ncclConfig_t *config);
ncclResult_t es_coll_shrink(es_comm_t *parent, const int *exclude, int nexclude,
                            es_comm_t **out, const ncclConfig_t *config, int flags);
ncclResult_t es_coll_finalize(es_comm_t *c);
ncclResult_t es_coll_destroy(es_comm_t *c);
ncclResult_t es_coll_abort(es_comm_t *c);
ncclResult_t es_coll_revoke(es_comm_t *c);
ncclResult_t es_coll_async_error(es_comm_t *c, ncclResult_t *err);

/* Whether p is a live communicator of this process. */
int es_coll_valid(const void *p);
int es_coll_rank(const es_comm_t *c);
int es_coll_nranks(const es_comm_t *c);
int es_coll_cudev(const es_comm_t *c);   /* the application's (virtual) device */

/* Element size of an ncclDataType_t (0 if invalid). */
size_t es_coll_type_size(int dtype);

/* ---- PreMulSum operators ---------------------------------------------------- */

ncclResult_t es_coll_premul_create(es_comm_t *c, ncclRedOp_t *op, const void *scalar,
                                   int dtype, int on_device);
ncclResult_t es_coll_premul_destroy(es_comm_t *c, ncclRedOp_t op);

/* ---- operations ----------------------------------------------------------- */

enum { ES_OP_ALLREDUCE = 0, ES_OP_BROADCAST, ES_OP_REDUCE, ES_OP_ALLGATHER,
       ES_OP_REDUCESCATTER, ES_OP_SEND, ES_OP_RECV, ES_OP_KINDS };

typedef struct es_coll_op {
    int kind;                 /* ES_OP_* */
    es_comm_t *comm;
    const void *send;
    void *recv;
    size_t count;             /* elements: per rank for allgather (send), reduce-scatter
                                 (recv) and send/recv */
    int dtype;                /* ncclDataType_t */
    int op;                   /* ncclRedOp_t as given (a PreMulSum id included) */
    int root;                 /* broadcast/reduce root, send/recv peer */
    CUstream stream;
    /* xhost.c's operations inside a host: not a step of their own (the
     * operation across hosts counts once when issued), and (quiet_done)
     * not its completion either, but for the last one */
    unsigned quiet_issue : 1, quiet_done : 1;
} es_coll_op_t;

/* Checks an operation (ncclInvalidArgument / ncclInvalidUsage with a
 * message; a stream under capture is refused with ncclInvalidUsage) and
 * runs it, or queues it until ncclGroupEnd inside a group. */
ncclResult_t es_coll_enqueue(const es_coll_op_t *op);

ncclResult_t es_coll_group_start(void);
ncclResult_t es_coll_group_end(void);
/* Ends the group without running its operations (ncclGroupSimulateEnd):
 * estimated time 0. */
ncclResult_t es_coll_group_discard(void);

/* ---- time-slicing: collectives kept until the EST yields (defer.c) ------------------------
 * A time-sliced EST's collectives are not put on its streams when called:
 * they are kept, and run at its next yield (es_coll_ts_flush), so that the
 * EST keeps the GPU while its streams can progress and yields once where
 * they cannot (docs/MOVING.md, section 6). The wrappers ask, before a call,
 * whether it depends on what is kept (intercept/tsdefer.c). */

/* Batches and event records kept now (0: nothing: the wrappers' check is
 * off). */
extern _Atomic int es_coll_ts_kept;
/* Yields once: every kept collective run parked, the results back in
 * memory, the kept event records made. 0, or -1 (message set; the
 * communicators concerned failed). Safe from any thread inside a call. */
int es_coll_ts_flush(void);
/* 1 while this thread flushes (its own calls are not looked at). */
int es_coll_ts_busy(void);
/* Whether stream s (a handle of the application) has kept work; with
 * legacy_too, the legacy and per-thread streams count as having some
 * when a blocking stream does (they synchronise with it). */
int es_coll_ts_stream_kept(CUstream s, int legacy_too);
/* Whether event e's last record is kept. */
int es_coll_ts_event_kept(CUevent e);
/* Keeps a record of e on s (s has kept work); -ENOSPC when full. */
int es_coll_ts_keep_record(CUevent e, CUstream s);
/* e recorded elsewhere, or destroyed: its kept record is dropped. */
void es_coll_ts_forget_event(CUevent e);

/* ---- errors ------------------------------------------------------------------ */

void es_coll_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *es_coll_last_error(void);

/* ---- progress (for the controller's step signal) ------------------------------
 * Completed all-reduce operations of floating-point data (gradients) over
 * every communicator of this process: their number and the CLOCK_MONOTONIC
 * time (ns) of the last one. Counted when the reduced values are final (the
 * last copy into the output may still be in flight); each one also ticks
 * the control channel's step (shim/step.h, es_step_tick). Lock-free,
 * callable from any thread at any time (zeros before the first). */
typedef struct es_coll_progress {
    uint64_t allreduces;
    uint64_t last_ns;
} es_coll_progress_t;
void es_coll_progress(es_coll_progress_t *out);

/* A step-counting collective is about to be enqueued (the engine's
 * all-reduces of floating-point data, or with NCCL's own collectives every
 * ncclAllReduce): takes its index and, when a scheduled hold is due there
 * (shim/step.h), waits for the controller in a safe section of the door
 * (moves are performed meanwhile). in_group: inside ncclGroupStart/End,
 * where it never waits (the group's earlier operations would not run). */
void es_coll_step_start(int in_group);

#endif
