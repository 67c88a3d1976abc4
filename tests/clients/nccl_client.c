/* An NCCL client written only against NVIDIA's nccl.h and cuda.h: four
 * forked ranks, one per GPU, run allreduce (sum, in-place max), broadcast,
 * allgather, grouped allreduces, reduce-scatter and a call with a bogus
 * datatype, and compare with values computed here. It runs unchanged on
 * NVIDIA's libraries with 4 GPUs, and on simcuda.
 *
 * Prints one "[ RUN ]/[ OK ]" pair per check and "[  PASSED  ] N test(s)."
 * at the end; exits non-zero on any failure. */
#include <cuda.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRANKS 4
#define COUNT 4099   /* odd on purpose */

enum { T_ALLREDUCE_SUM, T_ALLREDUCE_MAX_INPLACE, T_BROADCAST, T_ALLGATHER, T_GROUPED,
       T_REDUCE_SCATTER, T_BOGUS_TYPE, T_COUNT };
static const char *const g_names[T_COUNT] = {
    "allreduce_sum", "allreduce_max_inplace", "broadcast", "allgather",
    "grouped_allreduces", "reduce_scatter", "bogus_datatype"};

/* results[rank][test]: 1 passed, 2 failed, 0 not run. */
typedef struct shared {
    int results[NRANKS][T_COUNT];
} shared_t;

#define CU(call)                                                                     \
    do {                                                                             \
        CUresult r_ = (call);                                                        \
        if (r_ != CUDA_SUCCESS) {                                                    \
            fprintf(stderr, "rank %d: %s failed: %d (line %d)\n", rank, #call, (int)r_, \
                    __LINE__);                                                       \
            return 1;                                                                \
        }                                                                            \
    } while (0)
#define NC(call)                                                                    \
    do {                                                                            \
        ncclResult_t r_ = (call);                                                   \
        if (r_ != ncclSuccess) {                                                    \
            fprintf(stderr, "rank %d: %s failed: %s (line %d)\n", rank, #call,      \
                    ncclGetErrorString(r_), __LINE__);                              \
            return 1;                                                               \
        }                                                                           \
    } while (0)

static float val(int rank, int i)
{
    /* Small integers: every summation order gives the same float. */
    return (float)((i * 5 + rank * 3) % 17 - 8);
}

static int check_vals(int rank, const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            fprintf(stderr, "rank %d: %s: element %zu is %g, expected %g\n", rank, what, i,
                    got[i], want[i]);
            return 1;
        }
    return 0;
}

static int t_allreduce_sum(int rank, ncclComm_t comm, CUstream st, float *h, float *w)
{
    CUdeviceptr s, r;
    CU(cuMemAlloc(&s, COUNT * sizeof(float)));
    CU(cuMemAlloc(&r, COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; i++)
        h[i] = val(rank, i);
    CU(cuMemcpyHtoD(s, h, COUNT * sizeof(float)));
    NC(ncclAllReduce((void *)s, (void *)r, COUNT, ncclFloat, ncclSum, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, r, COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; i++) {
        w[i] = 0;
        for (int q = 0; q < NRANKS; q++)
            w[i] += val(q, i);
    }
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    return check_vals(rank, h, w, COUNT, "allreduce sum");
}

static int t_allreduce_max_inplace(int rank, ncclComm_t comm, CUstream st, float *h, float *w)
{
    CUdeviceptr b;
    CU(cuMemAlloc(&b, COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; i++)
        h[i] = val(rank, i);
    CU(cuMemcpyHtoD(b, h, COUNT * sizeof(float)));
    NC(ncclAllReduce((void *)b, (void *)b, COUNT, ncclFloat, ncclMax, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, b, COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; i++) {
        w[i] = val(0, i);
        for (int q = 1; q < NRANKS; q++)
            if (val(q, i) > w[i])
                w[i] = val(q, i);
    }
    CU(cuMemFree(b));
    return check_vals(rank, h, w, COUNT, "allreduce max in place");
}

static int t_broadcast(int rank, ncclComm_t comm, CUstream st, float *h, float *w)
{
    const int root = 2;
    CUdeviceptr b;
    CU(cuMemAlloc(&b, COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; i++)
        h[i] = val(rank, i);
    CU(cuMemcpyHtoD(b, h, COUNT * sizeof(float)));
    NC(ncclBroadcast((void *)b, (void *)b, COUNT, ncclFloat, root, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, b, COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; i++)
        w[i] = val(root, i);
    CU(cuMemFree(b));
    return check_vals(rank, h, w, COUNT, "broadcast");
}

static int t_allgather(int rank, ncclComm_t comm, CUstream st, float *h, float *w)
{
    CUdeviceptr s, r;
    CU(cuMemAlloc(&s, COUNT * sizeof(float)));
    CU(cuMemAlloc(&r, (size_t)NRANKS * COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; i++)
        h[i] = val(rank, i);
    CU(cuMemcpyHtoD(s, h, COUNT * sizeof(float)));
    NC(ncclAllGather((void *)s, (void *)r, COUNT, ncclFloat, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, r, (size_t)NRANKS * COUNT * sizeof(float)));
    for (int q = 0; q < NRANKS; q++)
        for (int i = 0; i < COUNT; i++)
            w[q * COUNT + i] = val(q, i);
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    return check_vals(rank, h, w, (size_t)NRANKS * COUNT, "allgather");
}

static int t_grouped(int rank, ncclComm_t comm, CUstream st, float *h, float *w)
{
    CUdeviceptr b[3];
    for (int k = 0; k < 3; k++) {
        CU(cuMemAlloc(&b[k], COUNT * sizeof(float)));
        for (int i = 0; i < COUNT; i++)
            h[i] = val(rank + k, i);
        CU(cuMemcpyHtoD(b[k], h, COUNT * sizeof(float)));
    }
    NC(ncclGroupStart());
    for (int k = 0; k < 3; k++)
        NC(ncclAllReduce((void *)b[k], (void *)b[k], COUNT, ncclFloat, ncclSum, comm, st));
    NC(ncclGroupEnd());
    CU(cuStreamSynchronize(st));
    for (int k = 0; k < 3; k++) {
        CU(cuMemcpyDtoH(h, b[k], COUNT * sizeof(float)));
        for (int i = 0; i < COUNT; i++) {
            w[i] = 0;
            for (int q = 0; q < NRANKS; q++)
                w[i] += val(q + k, i);
        }
        if (check_vals(rank, h, w, COUNT, "grouped allreduce"))
            return 1;
        CU(cuMemFree(b[k]));
    }
    return 0;
}

static int t_reduce_scatter(int rank, ncclComm_t comm, CUstream st, float *h, float *w)
{
    CUdeviceptr s, r;
    CU(cuMemAlloc(&s, (size_t)NRANKS * COUNT * sizeof(float)));
    CU(cuMemAlloc(&r, COUNT * sizeof(float)));
    for (int i = 0; i < NRANKS * COUNT; i++)
        h[i] = val(rank, i);
    CU(cuMemcpyHtoD(s, h, (size_t)NRANKS * COUNT * sizeof(float)));
    NC(ncclReduceScatter((void *)s, (void *)r, COUNT, ncclFloat, ncclSum, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, r, COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; i++) {
        w[i] = 0;
        for (int q = 0; q < NRANKS; q++)
            w[i] += val(q, rank * COUNT + i);
    }
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    return check_vals(rank, h, w, COUNT, "reduce-scatter");
}

static int t_bogus_type(int rank, ncclComm_t comm, CUstream st, float *h, float *w)
{
    (void)h, (void)w;
    CUdeviceptr b;
    CU(cuMemAlloc(&b, 64));
    ncclResult_t r = ncclAllReduce((void *)b, (void *)b, 4, (ncclDataType_t)1234, ncclSum, comm,
                                   st);
    CU(cuMemFree(b));
    if (r != ncclInvalidArgument) {
        fprintf(stderr, "rank %d: bogus datatype returned %d, expected ncclInvalidArgument\n",
                rank, (int)r);
        return 1;
    }
    return 0;
}

typedef int (*test_fn)(int, ncclComm_t, CUstream, float *, float *);
static const test_fn g_tests[T_COUNT] = {t_allreduce_sum, t_allreduce_max_inplace, t_broadcast,
                                         t_allgather, t_grouped, t_reduce_scatter,
                                         t_bogus_type};

static int rank_main(int rank, ncclUniqueId id, shared_t *sh)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    ncclComm_t comm;
    CU(cuInit(0));
    int ndev = 0;
    CU(cuDeviceGetCount(&ndev));
    if (ndev < NRANKS) {
        fprintf(stderr, "rank %d: needs %d GPUs, %d visible\n", rank, NRANKS, ndev);
        return 1;
    }
    CU(cuDeviceGet(&dev, rank));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    NC(ncclCommInitRank(&comm, NRANKS, id, rank));
    float *h = malloc((size_t)NRANKS * COUNT * sizeof(float));
    float *w = malloc((size_t)NRANKS * COUNT * sizeof(float));
    if (!h || !w)
        return 1;
    for (int t = 0; t < T_COUNT; t++)
        sh->results[rank][t] = g_tests[t](rank, comm, st, h, w) == 0 ? 1 : 2;
    free(h);
    free(w);
    NC(ncclCommFinalize(comm));
    NC(ncclCommDestroy(comm));
    CU(cuStreamDestroy(st));
    return 0;
}

int main(void)
{
    /* On simcuda: device memory kept out of this process, as on a GPU
     * machine (a real driver ignores the variable): the library never
     * touches device memory from the host. */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    /* simcuda's device list: 4 simulated GPUs. NVIDIA's driver ignores this
     * variable, so on real hardware the client simply needs 4 GPUs. */
    setenv("SIMCUDA_DEVICES", "a100:2G,a100:2G,a100:2G,a100:2G", 1);
    shared_t *sh = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    memset(sh, 0, sizeof(*sh));
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        fprintf(stderr, "ncclGetUniqueId failed\n");
        return 1;
    }
    printf("[==========] Running %d test(s).\n", T_COUNT);
    fflush(stdout);
    pid_t pids[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        if (pids[r] < 0)
            return 1;
        if (pids[r] == 0)
            _exit(rank_main(r, id, sh));
    }
    int bad_exit = 0;
    time_t deadline = time(NULL) + 120;
    for (int r = 0; r < NRANKS; r++) {
        int ws = 0;
        for (;;) {
            pid_t p = waitpid(pids[r], &ws, WNOHANG);
            if (p == pids[r])
                break;
            if (time(NULL) > deadline) {
                fprintf(stderr, "rank %d timed out\n", r);
                for (int q = 0; q < NRANKS; q++)
                    kill(pids[q], SIGKILL);
            }
            usleep(10000);
        }
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            fprintf(stderr, "rank %d exited abnormally (status 0x%x)\n", r, ws);
            bad_exit = 1;
        }
    }
    int passed = 0, failed = 0;
    for (int t = 0; t < T_COUNT; t++) {
        int ok = 1;
        for (int r = 0; r < NRANKS; r++)
            ok &= sh->results[r][t] == 1;
        printf("[ RUN      ] %s\n[ %s ] %s\n", g_names[t], ok ? "      OK" : " FAILED ",
               g_names[t]);
        if (ok)
            passed++;
        else
            failed++;
    }
    printf("[==========] %d test(s) run.\n", T_COUNT);
    printf("[  PASSED  ] %d test(s).\n", passed);
    if (failed)
        printf("[  FAILED  ] %d test(s).\n", failed);
    return failed || bad_exit ? 1 : 0;
}
