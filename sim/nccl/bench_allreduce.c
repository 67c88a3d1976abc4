/* Allreduce benchmark for simcuda's NCCL: 2 forked ranks, float sum of
 * 64 MiB (and 4 MiB) per rank; prints the algorithm bandwidth (bytes per
 * rank / time) next to this machine's single-thread memcpy bandwidth.
 * Then 4 ranks, 1 MiB .. 256 MiB: on one host x 4 GPUs (shared memory), and
 * on 2 simulated hosts x 2 GPUs (scripts/simhosts: TCP between the hosts;
 * needs root, else the figures are reported missing). The program runs
 * itself in each host for the latter ("--host-part BYTES").
 * Figures only, never pass/fail on time. Target: algbw >= memcpy / 4. */
#include <cuda.h>
#include <nccl.h>
#include <stdint.h>
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
static int rank_main_n(int nranks, int rank, int gpu, ncclUniqueId id, size_t count,
                       double *times, int iters);

static int rank_main(int rank, ncclUniqueId id, size_t count, double *times)
{
    return rank_main_n(2, rank, rank, id, count, times, ITERS);
}

static int rank_main_n(int nranks, int rank, int gpu, ncclUniqueId id, size_t count,
                       double *times, int iters)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    ncclComm_t comm;
    CUdeviceptr buf;
    if (cuInit(0) || cuDeviceGet(&dev, gpu) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) ||
        cuMemAlloc(&buf, count * sizeof(float)) || cuMemsetD32(buf, 0x3f800000u, count))
        return 2;
    if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess)
        return 3;
    for (int i = -1; i < iters; i++) {   /* one warm-up */
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

/* 4 ranks, `bytes` each, best of `iters`: ranks [first, first + n) of this
 * process's host on its GPUs 0..n-1; rank 0's best time in *best (when it
 * is here). Returns 0 or 1. */
static int run4(size_t bytes, int first, int n, ncclUniqueId id, int iters, double *best)
{
    double *times = mmap(NULL, sizeof(double) * (size_t)iters, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (times == MAP_FAILED)
        return 1;
    pid_t p[4];
    for (int g = 0; g < n; g++) {
        p[g] = fork();
        if (p[g] == 0)
            _exit(rank_main_n(4, first + g, g, id, bytes / sizeof(float), times, iters));
    }
    int bad = 0;
    for (int g = 0; g < n; g++) {
        int ws;
        waitpid(p[g], &ws, 0);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
            fprintf(stderr, "allreduce_bench: rank %d failed (status 0x%x)\n", first + g, ws);
            bad = 1;
        }
    }
    if (!bad && first == 0) {
        qsort(times, (size_t)iters, sizeof(double), cmp_d);
        *best = times[0];
    }
    munmap(times, sizeof(double) * (size_t)iters);
    return bad;
}

static const size_t g_sizes[] = {1u << 20, 16u << 20, 256u << 20};
#define NSIZES (sizeof(g_sizes) / sizeof(g_sizes[0]))

static int iters_for(size_t bytes)
{
    return bytes >= (256u << 20) ? 2 : 4;
}

static void report4(const char *where, const char *what, size_t bytes, double t)
{
    printf("allreduce float sum, 4 ranks (%s), %zu MiB: algbw best %.3f GB/s, time %.1f ms\n",
           what, bytes >> 20, (double)bytes / t / 1e9, t * 1e3);
    char vs[64] = "";
    if (strcmp(where, "1x4") != 0)
        snprintf(vs, sizeof(vs), " vs allreduce.simnccl-1x4-%zuMiB", bytes >> 20);
    printf("BENCH allreduce.simnccl-%s-%zuMiB %.3f GB/s%s # simcuda's NCCL all-reduce, 4 ranks "
           "%s, %zu MiB float sum: best algbw\n", where, bytes >> 20, (double)bytes / t / 1e9,
           vs, what, bytes >> 20);
}

/* In one simulated host (scripts/simhosts): its 2 ranks of 4, id from
 * NCCL_COMM_ID on host 0's address. */
static int host_part(size_t bytes)
{
    const char *hi = getenv("SIMHOST_INDEX"), *addrs = getenv("SIMHOST_ADDRS");
    if (!hi || !addrs)
        return 2;
    int host = atoi(hi);
    char cid[96];
    snprintf(cid, sizeof(cid), "%.*s:29433", (int)strcspn(addrs, ","), addrs);
    setenv("NCCL_COMM_ID", cid, 1);
    if (!getenv("NCCL_SOCKET_IFNAME") && getenv("SIMHOST_IFNAME"))
        setenv("NCCL_SOCKET_IFNAME", getenv("SIMHOST_IFNAME"), 1);
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess)
        return 1;
    double t = 0;
    if (run4(bytes, 2 * host, 2, id, iters_for(bytes), &t))
        return 1;
    if (host == 0)
        report4("2x2", "on 2 simulated hosts x 2 GPUs, TCP between them", bytes, t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--host-part") == 0)
        return host_part(strtoull(argv[2], NULL, 10));
    /* 4 GPUs for the 4-rank figures (before any rank loads the driver). */
    setenv("SIMCUDA_DEVICES", "a100:2G,a100:2G,a100:2G,a100:2G", 1);
    double mc = memcpy_gbs(64u << 20);
    printf("memcpy 64 MiB, one thread: %.2f GB/s\n", mc);
    printf("BENCH allreduce.memcpy-64M %.3f GB/s # memcpy of 64 MiB, one thread\n", mc);
    int bad = run(4u << 20, mc);
    bad |= run(64u << 20, mc);
    printf("target: allreduce algbw at 64 MiB >= memcpy / 4 = %.2f GB/s\n", mc / 4);
    for (size_t k = 0; k < NSIZES; k++) {
        ncclUniqueId id;
        double t = 0;
        if (ncclGetUniqueId(&id) != ncclSuccess || run4(g_sizes[k], 0, 4, id,
                                                        iters_for(g_sizes[k]), &t)) {
            bad = 1;
            continue;
        }
        report4("1x4", "on 1 host x 4 GPUs", g_sizes[k], t);
    }
    const char *root = getenv("ES_ROOT");
    int can = geteuid() == 0 && root;
    for (size_t k = 0; k < NSIZES; k++) {
        if (!can) {
            printf("BENCH-MISSING allreduce.simnccl-2x2-%zuMiB # needs root (scripts/simhosts) "
                   "and ES_ROOT (scripts/simenv)\n", g_sizes[k] >> 20);
            continue;
        }
        char cmd[4096], self[2048];
        ssize_t l = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (l <= 0)
            return 1;
        self[l] = '\0';   /* the hosts have /proc of their own */
        snprintf(cmd, sizeof(cmd), "'%s/scripts/simhosts' --hosts 2 --gpus-per-host 2 "
                 "--gpu a100:2G -- '%s' --host-part %zu", root, self, g_sizes[k]);
        fflush(stdout);
        int rc = system(cmd);
        if (rc != 0) {
            printf("BENCH-MISSING allreduce.simnccl-2x2-%zuMiB # scripts/simhosts run failed "
                   "(status %d)\n", g_sizes[k] >> 20, rc);
        }
    }
    return bad;
}
