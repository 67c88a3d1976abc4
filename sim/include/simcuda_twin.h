/* simcuda kernel twins: the contract between simcuda's driver and the C
 * bodies that stand in for device kernels on the CPU.
 *
 * A kernel named NAME (the exact symbol in the cubin's `.text.NAME`, mangled
 * if the kernel is C++) runs on simcuda as the function `simcuda_twin_NAME`
 * exported by one of the shared objects listed in SIMCUDA_KERNELS
 * (colon-separated paths; unset or empty: every libsimtwin_*.so in the
 * twins/ directory beside simcuda's libcuda.so.1). cuLaunchKernel enqueues the launch on its stream;
 * the stream's worker calls the twin once per launch with the whole launch
 * configuration, so the twin can reproduce the kernel's exact arithmetic
 * order for that grid and block (a reduction sized from the SM count, a
 * block-level tree, float atomics whose order varies per launch).
 */
#ifndef SIMCUDA_TWIN_H
#define SIMCUDA_TWIN_H

#include <stdint.h>

#define SIMCUDA_TWIN_PREFIX "simcuda_twin_"
#define SIMCUDA_TWIN_ABI 1

typedef struct simcuda_launch {
    uint32_t abi;            /* SIMCUDA_TWIN_ABI */
    uint32_t grid[3];        /* gridDim x, y, z */
    uint32_t block[3];       /* blockDim x, y, z */
    uint32_t shared_bytes;   /* dynamic shared memory requested */
    void **params;           /* kernelParams exactly as given to cuLaunchKernel */
    int device;              /* physical simulated device ordinal */
    int sm_count;            /* that device's multiprocessor count */
    int cc_major, cc_minor;  /* its compute capability */
    /* Varies from launch to launch and from process to process, like the
     * scheduling of thread blocks on a real GPU: twins of kernels with
     * float atomics derive their accumulation order from it. Deterministic
     * kernels must not read it. */
    uint64_t nondet_seed;
} simcuda_launch_t;

/* Returns 0 on success; non-zero makes the launch fail with
 * CUDA_ERROR_LAUNCH_FAILED (a sticky error, as on a GPU). */
typedef int (*simcuda_twin_fn)(const simcuda_launch_t *launch);

#endif
