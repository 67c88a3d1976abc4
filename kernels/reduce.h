/* The collectives' reduction kernel on the device (kernels/reduce.cu,
 * embedded in libeasyscale.so as a fatbin: SASS for sm_75, sm_80, sm_86,
 * sm_89, sm_90, sm_100 and compute_100 PTX; on simcuda the same source runs
 * through sim/cucpu; its arithmetic is explicit round-to-nearest operations
 * and integer code, so SASS, JIT or CPU, every model gives the same bits). Loaded with the real cuModuleLoadData
 * once per context; launched with the real cuLaunchKernel (the shim's own
 * launches are not audited). */
#ifndef ES_KERNELS_REDUCE_H
#define ES_KERNELS_REDUCE_H

#include <cuda.h>

#include "kernels/reduce_kernels.h"

/* Loads the kernel in the current context if needed. Returns 0, or -ENXIO
 * when there is no current context or the module does not load there. */
int es_reduce_ready(void);

/* Enqueues the reduction described by *a (a->count elements) on stream s
 * in the current context. Returns the launch's CUresult. */
CUresult es_reduce_launch(const es_red_args_t *a, CUstream s);

#endif
