/* Allreduce benchmark for simcuda's NCCL: 2 forked ranks, float sum of
 * 64 MiB (and 4 MiB) per rank; prints the algorithm bandwidth (bytes per
 * rank / time) next to this machine's single-thread memcpy bandwidth.
 * Figures only, never pass/fail on time. Target: algbw >= memcpy / 4. */
#include <cuda.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ITERS 5

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double memcpy_gbs(size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b)
        return 0;
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 1e30;
    for (int i = 0; i < ITERS; i++) {
        double t0 = now_s();
        memcpy(b, a, bytes);
        double t = now_s() - t0;
        if (t < best)
            best = t;
        a[i] = b[bytes - 1 - (size_t)i];   /* keep the copies observable */
    }
    free(a);
    free(b);
    return (double)bytes / best / 1e9;
}

/* Rank body: times[] (rank 0) gets per-iteration seconds. */
static int rank_main(int rank, ncclUniqueId id, size_t count, double *times)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    ncclComm_t comm;
    CUdeviceptr buf;
    if (cuInit(0) || cuDeviceGet(&dev, rank) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) ||
        cuMemAlloc(&buf, count * sizeof(float)) || cuMemsetD32(buf, 0x3f800000u, count))
        return 2;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess)
        return 3;
    for (int i = -1; i < ITERS; i++) {   /* one warm-up */
        double t0 = now_s();
        if (ncclAllReduce((void *)buf, (void *)buf, count, ncclFloat, ncclSum, comm, st) !=
            ncclSuccess || cuStreamSynchronize(st))
            return 4;
        if (i >= 0 && rank == 0)
            times[i] = now_s() - t0;
    }
    ncclCommDestroy(comm);
    return 0;
}

static int run(size_t bytes, double mc)
{
    size_t count = bytes / sizeof(float);
    double *times = mmap(NULL, sizeof(double) * ITERS, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (times == MAP_FAILED)
        return 1;
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess)
        return 1;
    pid_t p[2];
    for (int r = 0; r < 2; r++) {
        p[r] = fork();
        if (p[r] == 0)
            _exit(rank_main(r, id, count, times));
    }
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        int ws;
        waitpid(p[r], &ws, 0);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
            fprintf(stderr, "allreduce_bench: rank %d failed (status 0x%x)\n", r, ws);
            bad = 1;
        }
    }
    if (!bad) {
        qsort(times, ITERS, sizeof(double), cmp_d);
        double best = (double)bytes / times[0] / 1e9, med = (double)bytes / times[ITERS / 2] / 1e9;
        printf("allreduce float sum, 2 ranks, %zu MiB: algbw best %.2f GB/s, median %.2f GB/s "
               "(%.2f x memcpy), time best %.1f ms\n",
               bytes >> 20, best, med, mc > 0 ? best / mc : 0, times[0] * 1e3);
        printf("BENCH allreduce.simnccl-2r-%zuMiB %.3f GB/s vs allreduce.memcpy-64M # simcuda's NCCL "
               "all-reduce, 2 ranks, %zu MiB float sum: best algbw\n",
               bytes >> 20, best, bytes >> 20);
    }
    munmap(times, sizeof(double) * ITERS);
    return bad;
}

int main(void)
{
    double mc = memcpy_gbs(64u << 20);
    printf("memcpy 64 MiB, one thread: %.2f GB/s\n", mc);
    printf("BENCH allreduce.memcpy-64M %.3f GB/s # memcpy of 64 MiB, one thread\n", mc);
    int bad = run(4u << 20, mc);
    bad |= run(64u << 20, mc);
    printf("target: allreduce algbw at 64 MiB >= memcpy / 4 = %.2f GB/s\n", mc / 4);
    return bad;
}
