/* A simcuda library's module of kernels (its own fatbin, built from a
 * single-source .cu by sim/cucpu's cucpu_cu), loaded once per context with
 * cuModuleLoadData and kept, as NVIDIA's libraries load their kernels: the
 * module and its functions for a context, reached through
 * sim/common/simdrv (cuGetProcAddress). A context destroyed and its handle
 * value reused shows as a module that no longer answers: loaded again. */
#ifndef SIM_KMOD_H
#define SIM_KMOD_H

#include <cuda.h>
#include <pthread.h>

#define SIM_KMOD_MAX_FN 24
#define SIM_KMOD_MAX_CTX 64

typedef struct sim_kmod {
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn[SIM_KMOD_MAX_FN];
} sim_kmod_t;

/* A library's modules: the image, its kernels' names (count <=
 * SIM_KMOD_MAX_FN; fn[i] is names[i]) and one slot per context. */
typedef struct sim_kmods {
    pthread_mutex_t mu;
    const void *image;
    const char *const *names;
    int count;
    sim_kmod_t slot[SIM_KMOD_MAX_CTX];
} sim_kmods_t;

#define SIM_KMODS_INIT(image, names, count) {PTHREAD_MUTEX_INITIALIZER, image, names, count, {{0}}}

/* The module of ctx, which must be current; loaded at the first call.
 * Returns CUDA_SUCCESS and *out, or the driver's error (load: e.g.
 * CUDA_ERROR_NO_BINARY_FOR_GPU; CUDA_ERROR_NOT_INITIALIZED without a
 * driver; CUDA_ERROR_OUT_OF_MEMORY when every slot is taken). */
CUresult sim_kmod_get(sim_kmods_t *t, CUcontext ctx, const sim_kmod_t **out);

#endif
