/* An NCCL client written only against NVIDIA's nccl.h and cuda.h, the way a
 * torchrun-style job places its ranks: it forks NRANKS ranks (default 4)
 * and rank r uses device r % cuDeviceGetCount(), so on fewer GPUs than
 * ranks several ranks share a GPU (NVIDIA's NCCL refuses that: "Duplicate
 * GPU detected"; libeasyscale.so's virtual collectives serve it).
 *
 *   nccl_vclient [--ranks N] [--loose]
 *
 * Checks: all-reduce sum, average and half-precision sum of values whose
 * float sum depends on the order, broadcast, all-gather, reduce-scatter, a
 * ring of send/recv in a group, and a split communicator. Sums are compared
 * bit for bit with a reference folded in rank order 0..N-1 on the host
 * (half: each addition in float, rounded to half); --loose accepts any
 * summation order (a relative tolerance), for plain NCCL on N GPUs.
 *
 * Prints "[ RUN ]/[ OK ]" per check, "checksum <hex>" over the results every
 * rank receives alike (the same on every placement when the sums are in
 * rank order), and
 * "[  PASSED  ] N test(s)."; exits non-zero on any failure.
 */
#include <cuda.h>
#include <nccl.h>

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/clients/orderval.h"

#define MAXR 16
#define COUNT 10007

enum { T_SUM, T_AVG, T_HALF, T_BCAST, T_ALLGATHER, T_RSCATTER, T_RING, T_SPLIT, T_COUNT };
static const char *const g_names[T_COUNT] = { "allreduce_sum", "allreduce_avg",
                                              "allreduce_half_sum", "broadcast", "allgather",
                                              "reduce_scatter", "send_recv_ring", "split" };

typedef struct shared {
    ncclUniqueId id;
    volatile int ready;
    int results[MAXR][T_COUNT];     /* 1 passed, 2 failed */
    unsigned long long sum[MAXR];   /* checksum of the results */
} shared_t;

static int g_rank, g_n, g_loose;
static int g_private; /* results that differ per rank: not in the checksum */
static float g_tol = 1e-6f; /* --loose: relative to the largest partial sum (|x| < 2^11) */

#define CU(call)                                                                               \
    do {                                                                                       \
        CUresult r_ = (call);                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                              \
            fprintf(stderr, "rank %d: %s failed: %d (line %d)\n", g_rank, #call, (int)r_,       \
                    __LINE__);                                                                 \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)
#define NC(call)                                                                               \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        if (r_ != ncclSuccess) {                                                               \
            fprintf(stderr, "rank %d: %s failed: %s (line %d)\n", g_rank, #call,                \
                    ncclGetErrorString(r_), __LINE__);                                         \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

static unsigned long long g_fnv = 0xcbf29ce484222325ULL;
static void fold(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g_fnv = (g_fnv ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
}


static float sum_in_order(const int *ranks, int n, size_t i, int salt)
{
    float acc = val(ranks[0], i, salt);
    for (int k = 1; k < n; k++)
        acc = acc + val(ranks[k], i, salt);
    return acc;
}

static int same(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        int ok = g_loose ? fabsf(got[i] - want[i]) <= g_tol * (fabsf(want[i]) + 2048.0f * g_n)
                         : memcmp(&got[i], &want[i], sizeof(float)) == 0;
        if (!ok) {
            fprintf(stderr, "rank %d: %s: element %zu is %.9g, rank-order reference %.9g\n",
                    g_rank, what, i, got[i], want[i]);
            return 1;
        }
    }
    if (!g_private)
        fold(got, n * sizeof(float));
    return 0;
}

static int allreduce_float(ncclComm_t comm, CUstream st, const int *ranks, int n, int me,
                           ncclRedOp_t op, int salt, float *h, float *w)
{
    CUdeviceptr b;
    CU(cuMemAlloc(&b, COUNT * sizeof(float)));
    for (size_t i = 0; i < COUNT; i++)
        h[i] = val(me, i, salt);
    CU(cuMemcpyHtoD(b, h, COUNT * sizeof(float)));
    NC(ncclAllReduce((void *)b, (void *)b, COUNT, ncclFloat, op, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, b, COUNT * sizeof(float)));
    CU(cuMemFree(b));
    for (size_t i = 0; i < COUNT; i++) {
        w[i] = sum_in_order(ranks, n, i, salt);
        if (op == ncclAvg)
            w[i] = w[i] / (float)n;
    }
    return same(h, w, COUNT, op == ncclAvg ? "allreduce avg" : "allreduce sum");
}

static int t_half(ncclComm_t comm, CUstream st, const int *ranks, float *h, float *w)
{
    _Float16 *hh = malloc(COUNT * sizeof(_Float16));
    if (!hh)
        return 1;
    CUdeviceptr b;
    CU(cuMemAlloc(&b, COUNT * 2));
    for (size_t i = 0; i < COUNT; i++)
        hh[i] = (_Float16)val(g_rank, i, 3);
    CU(cuMemcpyHtoD(b, hh, COUNT * 2));
    NC(ncclAllReduce((void *)b, (void *)b, COUNT, ncclHalf, ncclSum, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(hh, b, COUNT * 2));
    CU(cuMemFree(b));
    for (size_t i = 0; i < COUNT; i++) {
        /* each addition in float, rounded to half */
        _Float16 acc = (_Float16)val(ranks[0], i, 3);
        for (int k = 1; k < g_n; k++)
            acc = (_Float16)((float)acc + (float)(_Float16)val(ranks[k], i, 3));
        w[i] = (float)acc;
        h[i] = (float)hh[i];
    }
    free(hh);
    g_tol = 2e-3f; /* a few half ulps */
    int rc = same(h, w, COUNT, "allreduce half sum");
    g_tol = 1e-6f;
    return rc;
}

static int t_bcast(ncclComm_t comm, CUstream st, float *h, float *w)
{
    const int root = g_n - 1;
    CUdeviceptr b;
    CU(cuMemAlloc(&b, COUNT * sizeof(float)));
    for (size_t i = 0; i < COUNT; i++)
        h[i] = val(g_rank, i, 4);
    CU(cuMemcpyHtoD(b, h, COUNT * sizeof(float)));
    NC(ncclBroadcast((void *)b, (void *)b, COUNT, ncclFloat, root, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, b, COUNT * sizeof(float)));
    CU(cuMemFree(b));
    for (size_t i = 0; i < COUNT; i++)
        w[i] = val(root, i, 4);
    return same(h, w, COUNT, "broadcast");
}

static int t_allgather(ncclComm_t comm, CUstream st, float *h, float *w)
{
    CUdeviceptr s, r;
    size_t c = COUNT / 4;
    CU(cuMemAlloc(&s, c * sizeof(float)));
    CU(cuMemAlloc(&r, (size_t)g_n * c * sizeof(float)));
    for (size_t i = 0; i < c; i++)
        h[i] = val(g_rank, i, 5);
    CU(cuMemcpyHtoD(s, h, c * sizeof(float)));
    NC(ncclAllGather((void *)s, (void *)r, c, ncclFloat, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, r, (size_t)g_n * c * sizeof(float)));
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    for (int q = 0; q < g_n; q++)
        for (size_t i = 0; i < c; i++)
            w[(size_t)q * c + i] = val(q, i, 5);
    return same(h, w, (size_t)g_n * c, "allgather");
}

static int t_rscatter(ncclComm_t comm, CUstream st, const int *ranks, float *h, float *w)
{
    size_t c = COUNT / 4;
    CUdeviceptr s, r;
    CU(cuMemAlloc(&s, (size_t)g_n * c * sizeof(float)));
    CU(cuMemAlloc(&r, c * sizeof(float)));
    for (size_t i = 0; i < (size_t)g_n * c; i++)
        h[i] = val(g_rank, i, 6);
    CU(cuMemcpyHtoD(s, h, (size_t)g_n * c * sizeof(float)));
    NC(ncclReduceScatter((void *)s, (void *)r, c, ncclFloat, ncclSum, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, r, c * sizeof(float)));
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    for (size_t i = 0; i < c; i++)
        w[i] = sum_in_order(ranks, g_n, (size_t)g_rank * c + i, 6);
    return same(h, w, c, "reduce-scatter");
}

static int t_ring(ncclComm_t comm, CUstream st, float *h, float *w)
{
    CUdeviceptr s, r;
    CU(cuMemAlloc(&s, COUNT * sizeof(float)));
    CU(cuMemAlloc(&r, COUNT * sizeof(float)));
    for (size_t i = 0; i < COUNT; i++)
        h[i] = val(g_rank, i, 7);
    CU(cuMemcpyHtoD(s, h, COUNT * sizeof(float)));
    NC(ncclGroupStart());
    NC(ncclSend((void *)s, COUNT, ncclFloat, (g_rank + 1) % g_n, comm, st));
    NC(ncclRecv((void *)r, COUNT, ncclFloat, (g_rank + g_n - 1) % g_n, comm, st));
    NC(ncclGroupEnd());
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, r, COUNT * sizeof(float)));
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    for (size_t i = 0; i < COUNT; i++)
        w[i] = val((g_rank + g_n - 1) % g_n, i, 7);
    return same(h, w, COUNT, "send/recv ring");
}

/* Even and odd ranks apart; the sub-communicator's rank order is the key's
 * (ascending parent rank here). */
static int t_split(ncclComm_t comm, CUstream st, float *h, float *w)
{
    ncclComm_t sub;
    NC(ncclCommSplit(comm, g_rank % 2, g_rank, &sub, NULL));
    int sr[MAXR], sn = 0;
    for (int q = g_rank % 2; q < g_n; q += 2)
        sr[sn++] = q;
    int cnt;
    NC(ncclCommCount(sub, &cnt));
    if (cnt != sn) {
        fprintf(stderr, "rank %d: split count %d, expected %d\n", g_rank, cnt, sn);
        return 1;
    }
    int rc = allreduce_float(sub, st, sr, sn, g_rank, ncclSum, 8, h, w);
    NC(ncclCommDestroy(sub));
    return rc;
}

static int rank_main(shared_t *sh)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    ncclComm_t comm;
    int ndev = 0;
    CU(cuInit(0));
    CU(cuDeviceGetCount(&ndev));
    CU(cuDeviceGet(&dev, g_rank % ndev));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    if (g_rank == 0) {
        NC(ncclGetUniqueId(&sh->id));
        __atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
    }
    while (!__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE))
        usleep(1000);
    NC(ncclCommInitRank(&comm, g_n, sh->id, g_rank));
    float *h = malloc(COUNT * sizeof(float) * MAXR), *w = malloc(COUNT * sizeof(float) * MAXR);
    if (!h || !w)
        return 1;
    int all[MAXR];
    for (int q = 0; q < g_n; q++)
        all[q] = q;
    int res[T_COUNT];
    res[T_SUM] = allreduce_float(comm, st, all, g_n, g_rank, ncclSum, 1, h, w);
    res[T_AVG] = allreduce_float(comm, st, all, g_n, g_rank, ncclAvg, 2, h, w);
    res[T_HALF] = t_half(comm, st, all, h, w);
    res[T_BCAST] = t_bcast(comm, st, h, w);
    res[T_ALLGATHER] = t_allgather(comm, st, h, w);
    g_private = 1;
    res[T_RSCATTER] = t_rscatter(comm, st, all, h, w);
    res[T_RING] = t_ring(comm, st, h, w);
    res[T_SPLIT] = g_n >= 2 ? t_split(comm, st, h, w) : 0;
    g_private = 0;
    for (int t = 0; t < T_COUNT; t++)
        sh->results[g_rank][t] = res[t] == 0 ? 1 : 2;
    sh->sum[g_rank] = g_fnv;
    free(h);
    free(w);
    NC(ncclCommFinalize(comm));
    NC(ncclCommDestroy(comm));
    CU(cuStreamDestroy(st));
    return 0;
}

int main(int argc, char **argv)
{
    int n = 4;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
            n = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--loose") == 0) {
            g_loose = 1;
        } else {
            fprintf(stderr, "usage: nccl_vclient [--ranks N] [--loose]\n");
            return 2;
        }
    }
    if (n < 1 || n > MAXR) {
        fprintf(stderr, "nccl_vclient: --ranks must be 1..%d\n", MAXR);
        return 2;
    }
    g_n = n;
    shared_t *sh = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    memset(sh, 0, sizeof(*sh));
    printf("[==========] Running %d test(s) on %d ranks.\n", T_COUNT, n);
    fflush(stdout);
    pid_t pids[MAXR];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] < 0)
            return 1;
        if (pids[r] == 0) {
            g_rank = r;
            _exit(rank_main(sh));
        }
    }
    int bad_exit = 0;
    time_t deadline = time(NULL) + 120;
    for (int r = 0; r < n; r++) {
        int ws = 0;
        for (;;) {
            pid_t p = waitpid(pids[r], &ws, WNOHANG);
            if (p == pids[r])
                break;
            if (time(NULL) > deadline) {
                fprintf(stderr, "rank %d timed out\n", r);
                for (int q = 0; q < n; q++)
                    kill(pids[q], SIGKILL);
                deadline = time(NULL) + 5;
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
        for (int r = 0; r < n; r++)
            ok &= sh->results[r][t] == 1;
        printf("[ RUN      ] %s\n[ %s ] %s\n", g_names[t], ok ? "      OK" : " FAILED ",
               g_names[t]);
        passed += ok;
        failed += !ok;
    }
    /* every rank received the same bits from the collectives whose results
     * are everyone's */
    int agree = 1;
    for (int r = 1; r < n; r++)
        agree &= sh->sum[r] == sh->sum[0];
    printf("checksum %016llx\n", sh->sum[0]);
    printf("[==========] %d test(s) run.\n", T_COUNT);
    printf("[  PASSED  ] %d test(s).\n", passed);
    if (failed)
        printf("[  FAILED  ] %d test(s).\n", failed);
    if (!agree)
        printf("ranks received different bits\n");
    return failed || bad_exit || !agree ? 1 : 0;
}
