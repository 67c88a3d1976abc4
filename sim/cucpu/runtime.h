/* cucpu runtime: the C side of the CUDA-on-CPU layer (sim/cucpu/cucpu.h).
 * It runs one kernel launch given in simcuda's twin form
 * (sim/include/simcuda_twin.h): every block of the grid, every thread of a
 * block as a fiber, barriers, warp shuffles and votes, traps. Kernel code
 * never calls it directly; cucpu.h does, through the functions below.
 *
 * Contract
 * - cucpu_rt_launch() runs the whole grid before returning. body(ctx) is
 *   called once per GPU thread with cucpu_self pointing at that thread; it
 *   runs on a fiber stack of CUCPU_STACK_BYTES (guard page below it).
 * - Blocks run one at a time per OS thread, all threads of a block on the
 *   OS thread that started the block, so per-OS-thread storage is per-block
 *   storage (how cucpu.h implements __shared__). Blocks may run on several
 *   OS threads (SIMCUDA_CPU_THREADS).
 * - The order of blocks, and of the threads inside a block, is a
 *   permutation drawn from launch->nondet_seed (the order in which threads
 *   start, and in which they are resumed after a barrier). A block whose
 *   threads never wait (no barrier, no warp operation) runs them as a plain
 *   loop on one fiber stack; the first wait turns it into one fiber per
 *   thread. Fibers switch only at barriers, warp operations and exit.
 * - Errors (a block of more than 1024 threads, a bad grid, a trap, a
 *   deadlock, a fiber stack overflow): a one-line message on stderr naming
 *   the kernel, and a non-zero return (simcuda then fails the launch with
 *   CUDA_ERROR_LAUNCH_FAILED). A memory fault inside a kernel is left to the
 *   caller's fault guard (simcuda's driver turns it into
 *   CUDA_ERROR_ILLEGAL_ADDRESS); on a helper OS thread it is caught there and
 *   raised again on the launching thread.
 */
#ifndef CUCPU_RUNTIME_H
#define CUCPU_RUNTIME_H

#include "sim/include/simcuda_twin.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUCPU_MAX_BLOCK_THREADS 1024
#define CUCPU_WARP 32

typedef struct cucpu_uint3 {
    unsigned int x, y, z;
} cucpu_uint3;

/* What every thread of a block sees (blockIdx, blockDim, gridDim, dynamic
 * shared memory). */
typedef struct cucpu_block_info {
    cucpu_uint3 idx;        /* blockIdx */
    cucpu_uint3 dim;        /* blockDim */
    cucpu_uint3 grid;       /* gridDim */
    void *dyn_shared;       /* dynamic shared memory, launch->shared_bytes */
    unsigned int nthreads;
} cucpu_block_info;

/* One GPU thread as kernel code sees it (the runtime keeps its own state
 * beside it). */
typedef struct cucpu_thread {
    cucpu_uint3 tid;        /* threadIdx */
    unsigned int lane;      /* linear id % 32 */
    unsigned int lin;       /* linear id in the block */
    const cucpu_block_info *blk;
} cucpu_thread;

/* Thread-local storage of the runtime (a few words): initial-exec, as every
 * access from kernel code goes through cucpu_self and the general-dynamic
 * model would cost a call each time. */
#define CUCPU_TLS __thread __attribute__((tls_model("initial-exec")))

/* The calling fiber's thread (set by the runtime whenever a fiber runs). */
extern CUCPU_TLS cucpu_thread *cucpu_self;

typedef void (*cucpu_body_fn)(void *ctx);

/* Runs a launch. name: the kernel's name (messages only). Returns 0, or 1
 * after a message on stderr. */
int cucpu_rt_launch(const simcuda_launch_t *launch, const char *name, cucpu_body_fn body,
                    void *ctx);

/* The plain-loop phase of a block, run by a loop of the kernel's own
 * (cucpu.h) so that the kernel's code is inlined into it: while next < n
 * and !tracked, start thread order[next++] (cucpu_range_start) and run its
 * body. The threads of this phase are `cur` one after another (cucpu_self
 * points at it); the runtime sets tracked when a thread first waits (it
 * then moves that thread to a place of its own), and the loop returns once
 * that thread's body returned. */
typedef struct cucpu_range {
    const unsigned int *order;    /* the block's thread order, n entries */
    unsigned int next, n;         /* the next position in order[]; threads */
    int tracked;                  /* a thread waited: the runtime keeps books */
    cucpu_thread cur;             /* the running thread (blk set by the runtime) */
} cucpu_range;

typedef void (*cucpu_range_fn)(void *ctx, cucpu_range *r);

/* Makes thread order[r->next++] the calling one (its threadIdx, lane,
 * linear id; cucpu_self). */
static inline __attribute__((always_inline)) void cucpu_range_start(cucpu_range *r)
{
    unsigned int i = r->order[r->next++];
    const cucpu_block_info *b = r->cur.blk;
    if (b->dim.x == b->nthreads) {
        r->cur.tid.x = i;
        r->cur.tid.y = 0;
        r->cur.tid.z = 0;
    } else {
        r->cur.tid.x = i % b->dim.x;
        r->cur.tid.y = (i / b->dim.x) % b->dim.y;
        r->cur.tid.z = i / (b->dim.x * b->dim.y);
    }
    r->cur.lane = i % CUCPU_WARP;
    r->cur.lin = i;
    cucpu_self = &r->cur;
}

/* cucpu_rt_launch with the plain-loop phase in range(ctx, r) (body still
 * runs threads once a block keeps books). */
int cucpu_rt_launch_range(const simcuda_launch_t *launch, const char *name, cucpu_body_fn body,
                          cucpu_range_fn range, void *ctx);

/* A launch whose simcuda_launch_t does not fit (wrong ABI, no params):
 * message, returns 1. */
int cucpu_rt_bad_abi(const char *name);

/* __syncthreads and its counting forms: waits until every thread of the
 * block that has not exited arrived; returns the number of arrived threads
 * with pred != 0 and stores the number of arrived threads in *arrived
 * (when not NULL). */
int cucpu_rt_barrier(int pred, unsigned int *arrived);

/* Warp operations. Each waits until every lane of `mask` that exists in
 * the block arrived at a warp operation of the same kind and mask, then
 * returns the lane's result (a lane of the mask that exited, or mismatched
 * operations, trap). */
enum {
    CUCPU_WOP_SHFL = 1,    /* arg: source lane */
    CUCPU_WOP_SHFL_UP,     /* arg: delta */
    CUCPU_WOP_SHFL_DOWN,   /* arg: delta */
    CUCPU_WOP_SHFL_XOR,    /* arg: lane mask */
    CUCPU_WOP_BALLOT,      /* val: predicate; result: the ballot */
    CUCPU_WOP_ANY,
    CUCPU_WOP_ALL,
    CUCPU_WOP_SYNC,        /* __syncwarp */
};
uint64_t cucpu_rt_warp(int op, unsigned int mask, uint64_t val, int arg, int width);

/* Lanes of the calling thread's warp that exist and have not exited. */
unsigned int cucpu_rt_activemask(void);

/* Stops the block (never returns); the launch fails with `what` in the
 * message. */
__attribute__((noreturn)) void cucpu_rt_trap(const char *what);

/* Nanoseconds from a monotonic clock (clock64()). */
uint64_t cucpu_rt_clock(void);

#ifdef __cplusplus
}
#endif

#endif
