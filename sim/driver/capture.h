/* simcuda stream capture and graphs (sim/driver/capture.c): what the rest
 * of the driver calls, and the entry points it adds to the proc table.
 *
 * The driver calls the hooks below at the few places where it enqueues
 * stream work or waits for it; with no capture in progress each is one
 * atomic load. */
#ifndef SIM_DRIVER_CAPTURE_H
#define SIM_DRIVER_CAPTURE_H

#include "sim/driver/internal.h"

/* Where every stream operation is enqueued (sim_enqueue): returns 1 when
 * the capture took the operation (it became a graph node, or an event
 * record/wait of the capture) or refused it, with *err the CUresult the
 * API returns (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED on an invalidated
 * capture, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream while a
 * blocking stream of its context captures); op then belongs to the
 * capture. Returns 0 when op is to be enqueued as usual. */
int sim_capture_enqueue(sim_stream_t *s, sim_op_t *op, CUresult *err);

/* cuStreamWaitEvent(s, e) before anything else: a wait on an event
 * recorded in a capture joins s to that capture (returns 1 with *err). */
int sim_capture_wait_event(sim_stream_t *s, sim_event_t *e, CUresult *err);

/* A synchronisation of stream s (cuStreamSynchronize, cuStreamQuery, a
 * synchronous copy or memset: sync_call 1 for those last ones, which are
 * also "potentially unsafe" calls): CUDA_SUCCESS, or the error NVIDIA's
 * driver gives (the capture concerned is invalidated). */
CUresult sim_capture_sync(sim_stream_t *s, int sync_call);

/* cuCtxSynchronize (and the waits cuMemFree makes) while a stream of c
 * captures: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidation. */
CUresult sim_capture_sync_ctx(sim_ctx_t *c);

/* A potentially unsafe call (cuMemAlloc, cuMemFree, host allocation)
 * under the calling thread's capture interaction mode: CUDA_SUCCESS or
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the captures that forbid it are
 * invalidated). */
CUresult sim_capture_unsafe(void);

/* Releases what an operation that will never run holds (module reference,
 * parameter block, staging buffer, event reference) and frees it. */
void sim_op_discard(sim_op_t *op);

/* The capture and graph entry points, for the proc table (procs.c):
 * X(base name, version introduced, symbol, per-thread variant). */
#define SIM_CAPTURE_PROCS(X)                                                                   \
    X(cuStreamBeginCapture, 10000, cuStreamBeginCapture, cuStreamBeginCapture_ptsz)            \
    X(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz)      \
    X(cuStreamEndCapture, 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz)                  \
    X(cuStreamIsCapturing, 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz)               \
    X(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz)      \
    X(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz) \
    X(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz) \
    X(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode, NOPT)       \
    X(cuGraphInstantiate, 10000, cuGraphInstantiate, NOPT)                                     \
    X(cuGraphInstantiate, 11000, cuGraphInstantiate_v2, NOPT)                                  \
    X(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags, NOPT)                   \
    X(cuGraphLaunch, 10000, cuGraphLaunch, cuGraphLaunch_ptsz)                                 \
    X(cuGraphExecDestroy, 10000, cuGraphExecDestroy, NOPT)                                     \
    X(cuGraphDestroy, 10000, cuGraphDestroy, NOPT)                                             \
    X(cuGraphGetNodes, 10000, cuGraphGetNodes, NOPT)

#endif
