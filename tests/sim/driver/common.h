/* Helpers shared by simcuda's driver tests. */
#ifndef SIM_DRIVER_TEST_COMMON_H
#define SIM_DRIVER_TEST_COMMON_H

#include <cuda.h>
#include <stddef.h>

/* Gives the process its own capacity table (SIMCUDA_SHM_NAME) so tests run
 * concurrently with other people's; removed at exit. Call before cuInit. */
void st_private_shm(const char *tag);
const char *st_shm_name(void);

/* cuInit + primary context of device dev made current; returns it. */
CUcontext st_primary(int dev);

/* A gate: a host function enqueued with st_gate_block() holds its stream
 * until st_gate_open(). Makes "work not done yet" deterministic. */
typedef struct st_gate st_gate_t;
st_gate_t *st_gate_new(void);
void st_gate_block(st_gate_t *g, CUstream s);
void st_gate_open(st_gate_t *g);
void st_gate_wait(st_gate_t *g); /* on the calling thread, until opened */
void st_gate_free(st_gate_t *g);

/* Forks a child running fn(arg) (the child's return is its exit status);
 * returns the child's pid. st_wait returns the exit status, or 128+signal. */
int st_fork(int (*fn)(void *), void *arg);
int st_wait(int pid);

/* Exported names cuda.h declares only for per-thread-stream or legacy builds. */
CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s);
CUresult cuStreamQuery_ptsz(CUstream s);
CUresult cuStreamSynchronize_ptsz(CUstream s);
CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                             void **extra);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#define CK(x) assert_int_equal((x), CUDA_SUCCESS)

#endif
