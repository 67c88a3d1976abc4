/* make bench: the virtual collectives' all-reduce (float sum, in place)
 * through the host and device transports (the device one with
 * EASYSCALE_MOVE=off) for 2, 4 and 8 ranks (one simulated GPU, so
 * every rank shares it), 4 KiB to 256 MiB per rank, beside Open MPI's
 * MPI_Allreduce over shared memory (tests/coll/bench_mpi.c, run with mpirun
 * when Open MPI is installed) and this machine's memcpy bandwidth; one
 * table. Figures only, never pass/fail on time.
 *
 *   coll_bench                   the whole table (run under scripts/simenv)
 *   coll_bench --worker N        one configuration (the table's children)
 *
 * Then the carriers' table (4 simulated GPUs): simcuda NCCL's own
 * all-reduce beside the virtual collectives over the nccl, device and
 * host transports with 1 and 2 ranks per GPU, 1 to 256 MiB, as ratios.
 *
 *   coll_bench --carriers        the carriers' table only
 *   coll_bench --d2d             device 0's copy time for 256 MiB
 *   coll_bench --fold            the fold kernel alone: 2 inputs, each size
 *   coll_bench --worker N K      N ranks, K per GPU (blocks); K = -1: one per
 *                                GPU, the carriers' chain through NCCL's own
 *                                send/recv and broadcast instead; K = -2: the
 *                                same chain in 2 MiB pieces (pipelined)
 *
 * algbw = bytes per rank / time; busbw = algbw * 2 (N - 1) / N (NCCL's
 * convention: what each rank's link carries in a ring all-reduce). Time:
 * the slowest rank's, per operation, over a back-to-back batch after a
 * warm-up; the best of REPS runs of each configuration.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <nccl.h>

#include "kernels/reduce_kernels.h"

/* the fold kernel's fatbin (kernels/reduce_blob.c) */
extern const unsigned char es_reduce_fatbin[];

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 8
#define NSIZES 9
static const size_t g_sizes[NSIZES] = { 4u << 10, 16u << 10, 64u << 10, 256u << 10, 1u << 20,
                                        4u << 20, 16u << 20, 64u << 20, 256u << 20 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct shared {
    ncclUniqueId id;
    volatile int ready;
    double t[MAXR][NSIZES];
    volatile int fail;
} shared_t;

static int iters_for(size_t bytes)
{
    /* about 64 MiB of traffic per measurement, 3..200 operations */
    size_t k = (64u << 20) / bytes;
    return k < 3 ? 3 : k > 200 ? 200 : (int)k;
}

#define CK(x)                                                                                  \
    do {                                                                                       \
        if ((x) != 0) {                                                                        \
            fprintf(stderr, "coll_bench rank %d: %s failed (line %d)\n", rank, #x, __LINE__);  \
            sh->fail = 1;                                                                      \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

/* Ranks per GPU (0: rank r on device r % count; k: on device r / k, so
 * that each GPU holds a block of k consecutive ranks). */
static int g_per_gpu;
/* Instead of ncclAllReduce: the bytes of the carriers' chain through
 * NCCL's own calls (receive from rank - 1, send to rank + 1, then a
 * broadcast from the last rank), no folding: what simcuda's NCCL itself
 * takes to carry what the nccl transport carries. 1: whole messages; 2:
 * in pieces of CHAIN_PIECE bytes, each hop's receive of a piece grouped
 * with its send of the one before (the nccl transport's pipeline). */
static int g_chain;
#define CHAIN_PIECE (2u << 20)

static int pipe_chain(CUdeviceptr b, size_t cnt, ncclComm_t comm, CUstream st, int rank, int n)
{
    const size_t pc = CHAIN_PIECE / 4;
    int rc = 0, prev = rank - 1, next = rank < n - 1 ? rank + 1 : -1;
    size_t done = 0;
    for (size_t lo = 0; lo < cnt && !rc; lo += pc) {
        size_t hi = cnt - lo < pc ? cnt : lo + pc;
        if (prev >= 0 || (next >= 0 && lo > done)) {
            rc |= ncclGroupStart() != ncclSuccess;
            if (next >= 0 && lo > done)
                rc |= ncclSend((void *)(b + done * 4), lo - done, ncclFloat, next, comm, st) !=
                      ncclSuccess;
            if (prev >= 0)
                rc |= ncclRecv((void *)(b + lo * 4), hi - lo, ncclFloat, prev, comm, st) !=
                      ncclSuccess;
            rc |= ncclGroupEnd() != ncclSuccess;
        }
        done = lo;
    }
    if (!rc && next >= 0)
        rc |= ncclSend((void *)(b + done * 4), cnt - done, ncclFloat, next, comm, st) !=
              ncclSuccess;
    return rc;
}

static int one_op(CUdeviceptr b, size_t cnt, ncclComm_t comm, CUstream st, int rank, int n)
{
    if (!g_chain)
        return ncclAllReduce((void *)b, (void *)b, cnt, ncclFloat, ncclSum, comm, st) !=
               ncclSuccess;
    int rc = 0;
    if (g_chain == 2) {
        rc = pipe_chain(b, cnt, comm, st, rank, n);
        return rc | (ncclBroadcast((void *)b, (void *)b, cnt, ncclFloat, n - 1, comm, st) !=
                     ncclSuccess);
    }
    if (rank > 0)
        rc |= ncclRecv((void *)b, cnt, ncclFloat, rank - 1, comm, st) != ncclSuccess;
    if (rank < n - 1)
        rc |= ncclSend((void *)b, cnt, ncclFloat, rank + 1, comm, st) != ncclSuccess;
    rc |= ncclBroadcast((void *)b, (void *)b, cnt, ncclFloat, n - 1, comm, st) != ncclSuccess;
    return rc;
}

static int worker_rank(int rank, int n, shared_t *sh)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    int nd = 0;
    CK(cuInit(0));
    CK(cuDeviceGetCount(&nd));
    CK(cuDeviceGet(&dev, g_per_gpu ? (rank / g_per_gpu) % nd : rank % nd));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    if (rank == 0) {
        CK(ncclGetUniqueId(&sh->id));
        __atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
    }
    while (!__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE))
        usleep(1000);
    ncclComm_t comm;
    CK(ncclCommInitRank(&comm, n, sh->id, rank));
    size_t maxb = g_sizes[NSIZES - 1];
    CUdeviceptr b, one;
    CK(cuMemAlloc(&b, maxb));
    CK(cuMemAlloc(&one, 4));
    CK(cuMemsetD32(b, 0x3f800000u, maxb / 4));
    for (int k = 0; k < NSIZES; k++) {
        size_t cnt = g_sizes[k] / 4;
        int it = iters_for(g_sizes[k]);
        CK(one_op(b, cnt, comm, st, rank, n)); /* warm-up */
        CK(ncclAllReduce((void *)one, (void *)one, 1, ncclFloat, ncclSum, comm, st));
        CK(cuStreamSynchronize(st)); /* everyone here */
        double t0 = now_s();
        for (int i = 0; i < it; i++)
            CK(one_op(b, cnt, comm, st, rank, n));
        CK(cuStreamSynchronize(st));
        sh->t[rank][k] = (now_s() - t0) / it;
    }
    CK(ncclCommDestroy(comm));
    return 0;
}

static int worker(int n)
{
    shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    memset(sh, 0, sizeof(*sh));
    pid_t pids[MAXR];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(worker_rank(r, n, sh));
    }
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int ws;
        waitpid(pids[r], &ws, 0);
        bad |= !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    }
    if (bad || sh->fail)
        return 1;
    for (int k = 0; k < NSIZES; k++) {
        double t = 0;
        for (int r = 0; r < n; r++)
            if (sh->t[r][k] > t)
                t = sh->t[r][k];
        printf("result %zu %.9f\n", g_sizes[k], t);
    }
    return 0;
}

/* ---- the table ------------------------------------------------------------------ */

/* Runs of each configuration: the table keeps each size's best (the
 * machine's scheduling noise is large against one run). */
#define REPS 3

static int collect_once(const char *cmd, double t[NSIZES]);

/* Runs cmd REPS times; t[] gets each size's shortest time. -1 when a run
 * failed. */
static int collect(const char *cmd, double t[NSIZES])
{
    double one[NSIZES];
    for (int rep = 0; rep < REPS; rep++) {
        if (collect_once(cmd, one) < 0)
            return -1;
        for (int k = 0; k < NSIZES; k++)
            if (rep == 0 || one[k] < t[k])
                t[k] = one[k];
    }
    return 0;
}

/* Runs cmd (a shell line), parses "result BYTES SECONDS" lines into t[]. */
static int collect_once(const char *cmd, double t[NSIZES])
{
    for (int k = 0; k < NSIZES; k++)
        t[k] = 0;
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[256];
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        size_t bytes;
        double s;
        if (sscanf(line, "result %zu %lf", &bytes, &s) == 2)
            for (int k = 0; k < NSIZES; k++)
                if (g_sizes[k] == bytes) {
                    t[k] = s;
                    got++;
                }
    }
    int rc = pclose(p);
    return got == NSIZES && rc == 0 ? 0 : -1;
}

static double memcpy_gbs(void)
{
    size_t n = 256u << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b)
        return 0;
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 1e30;
    for (int i = 0; i < 3; i++) {
        double t0 = now_s();
        memcpy(b, a, n);
        double t = now_s() - t0;
        best = t < best ? t : best;
        a[i] = b[n - 1 - (size_t)i];
    }
    free(a);
    free(b);
    return (double)n / best / 1e9;
}

/* Figures of this run for the machine-readable lines (scripts/bench-table):
 * Open MPI's when it ran, else memcpy's, is what the virtual rows are
 * compared with. */
static int g_have_mpi;

/* BENCH lines for 64 KiB and 64 MiB: algorithm bandwidth, GB/s. */
static void bench_lines(const char *what, int n, const double t[NSIZES])
{
    static const size_t pick[2] = { 64u << 10, 64u << 20 };
    const char *id = strcmp(what, "openmpi-shm") == 0 ? "mpi" : what;
    for (int k = 0; k < NSIZES; k++)
        for (int j = 0; j < 2; j++) {
            if (g_sizes[k] != pick[j] || t[k] <= 0)
                continue;
            char sz[16];
            snprintf(sz, sizeof sz, "%zu%s", pick[j] >= (1u << 20) ? pick[j] >> 20 : pick[j] >> 10,
                     pick[j] >= (1u << 20) ? "M" : "K");
            printf("BENCH allreduce.%s-%dr-%s %.3f GB/s vs ", id, n, sz,
                   (double)g_sizes[k] / t[k] / 1e9);
            if (strcmp(id, "mpi") != 0 && g_have_mpi)
                printf("allreduce.mpi-%dr-%s", n, sz);
            else
                printf("allreduce.memcpy-256M");
            printf(" # %s all-reduce, %d ranks on one simulated GPU, %s float sum in place: "
                   "algorithm bandwidth\n", what, n, sz);
        }
}

static void row(const char *what, int n, const double t[NSIZES])
{
    bench_lines(what, n, t);
    for (int k = 0; k < NSIZES; k++) {
        double alg = t[k] > 0 ? (double)g_sizes[k] / t[k] / 1e9 : 0;
        double bus = alg * 2.0 * (n - 1) / n;
        char sz[16];
        if (g_sizes[k] >= (1u << 20))
            snprintf(sz, sizeof sz, "%zuM", g_sizes[k] >> 20);
        else
            snprintf(sz, sizeof sz, "%zuK", g_sizes[k] >> 10);
        if (t[k] > 0)
            printf("%-14s %2d %6s %12.1f %9.3f %9.3f\n", what, n, sz, t[k] * 1e6, alg, bus);
        else
            printf("%-14s %2d %6s %12s %9s %9s\n", what, n, sz, "-", "-", "-");
    }
}

/* ---- the carriers' table: 4 GPUs, NCCL's own all-reduce beside ours ---------------
 * simcuda's NCCL alone (4 ranks, one per GPU: its ring), and the virtual
 * collectives with k = 1 and 2 ranks per GPU (blocks of consecutive ranks)
 * over the nccl, device and host transports (moves off: the device
 * memory transports need it). Ratio: our algorithm bandwidth over NCCL's
 * at the same bytes per rank; the chain's target is 0.8 x (P - 1) / P
 * from 4 MiB (docs/COLLECTIVES.md). Beside them, NCCL's own chain
 * (send/recv and broadcast, no folding), the fold kernel alone, and
 * "chain+folds": NCCL's chain plus P - 1 folds one after the other, what
 * the nccl transport with one rank per GPU would take if nothing of its
 * own cost more and nothing overlapped. */
#define CARRIER_GPUS 4

static void carrier_row(const char *what, int k, const double t[NSIZES], const double ref[NSIZES])
{
    for (int i = 0; i < NSIZES; i++) {
        if (g_sizes[i] < (1u << 20))
            continue;
        double alg = t[i] > 0 ? (double)g_sizes[i] / t[i] / 1e9 : 0;
        double ratio = t[i] > 0 && ref[i] > 0 ? ref[i] / t[i] : 0;
        printf("%-14s %d %6zuM %12.1f %9.3f %9.2f\n", what, k, g_sizes[i] >> 20, t[i] * 1e6, alg,
               ratio);
        if ((g_sizes[i] == (4u << 20) || g_sizes[i] == (64u << 20)) && what[0] == 'f')
            printf("BENCH allreduce.%s-%zuM %.3f x # one fold of %zu MiB (2 float inputs) on "
                   "one simulated GPU: its speed over simcuda NCCL's own all-reduce's\n", what,
                   g_sizes[i] >> 20, ratio, g_sizes[i] >> 20);
        else if (g_sizes[i] == (4u << 20) || g_sizes[i] == (64u << 20))
            printf("BENCH allreduce.%s-4g-k%d-%zuM %.3f x # all-reduce on 4 simulated GPUs, %d "
                   "rank(s) per GPU, %zu MiB float sum in place: algorithm bandwidth over "
                   "simcuda NCCL's own (4 ranks)%s; chain target 0.6 from 4 MiB\n", what, k,
                   g_sizes[i] >> 20, ratio, k, g_sizes[i] >> 20,
                   strcmp(what, "chain+folds") == 0 ? " (estimate: NCCL's chain plus 3 folds "
                                                      "one after the other)" : "");
    }
}

static void carriers_table(const char *b, const char *self, const char *pre)
{
    static const char *const tps[3] = { "nccl", "device", "host" };
    double ref[NSIZES], t[NSIZES];
    char cmd[9000], what[32];
    const char *gpus = "a100:8G,a100:8G,a100:8G,a100:8G";
    printf("\nall-reduce on %d simulated GPUs: simcuda NCCL's own ring (no shim) and the "
           "virtual collectives, k ranks per GPU; ratio: algbw over NCCL's\n", CARRIER_GPUS);
    printf("%-14s %s %7s %12s %9s %9s\n", "what", "k", "bytes", "time_us", "algbw", "ratio");
    snprintf(cmd, sizeof cmd,
             "env -u CUDA_VISIBLE_DEVICES -u LOCAL_WORLD_SIZE SIMCUDA_DEVICES=%s "
             "LD_PRELOAD=%s %s --worker %d 1", gpus, pre && *pre ? pre : "", self, CARRIER_GPUS);
    if (collect(cmd, ref) < 0) {
        printf("simcuda NCCL on %d GPUs: failed\n", CARRIER_GPUS);
        return;
    }
    carrier_row("nccl-own", 1, ref, ref);
    double chain[NSIZES], fo[NSIZES];
    int have_chain = 0;
    snprintf(cmd, sizeof cmd,
             "env -u CUDA_VISIBLE_DEVICES -u LOCAL_WORLD_SIZE SIMCUDA_DEVICES=%s "
             "LD_PRELOAD=%s %s --worker %d -1", gpus, pre && *pre ? pre : "", self, CARRIER_GPUS);
    if (collect(cmd, t) < 0) {
        printf("simcuda NCCL's chain on %d GPUs: failed\n", CARRIER_GPUS);
    } else {
        carrier_row("nccl-own-chain", 1, t, ref);
        memcpy(chain, t, sizeof(chain));
        have_chain = 1;
    }
    snprintf(cmd, sizeof cmd,
             "env -u CUDA_VISIBLE_DEVICES -u LOCAL_WORLD_SIZE SIMCUDA_DEVICES=%s "
             "LD_PRELOAD=%s %s --worker %d -2", gpus, pre && *pre ? pre : "", self, CARRIER_GPUS);
    if (collect(cmd, t) < 0)
        printf("simcuda NCCL's pipelined chain on %d GPUs: failed\n", CARRIER_GPUS);
    else
        carrier_row("nccl-own-pipe", 1, t, ref);
    /* the fold alone, and the chain's estimate without any overlap: NCCL's
     * chain plus the P - 1 carriers' folds one after the other (on simcuda
     * moving a byte and folding an element are work of the same CPUs) */
    snprintf(cmd, sizeof cmd, "env -u CUDA_VISIBLE_DEVICES SIMCUDA_DEVICES=a100:8G %s --fold", self);
    if (collect(cmd, fo) < 0) {
        printf("the fold kernel alone: failed\n");
    } else {
        carrier_row("fold-alone", 1, fo, ref);
        if (have_chain) {
            for (int i = 0; i < NSIZES; i++)
                t[i] = chain[i] + (CARRIER_GPUS - 1) * fo[i];
            carrier_row("chain+folds", 1, t, ref);
        }
    }
    for (int k = 1; k <= 2; k++)
        for (int j = 0; j < 3; j++) {
            snprintf(cmd, sizeof cmd,
                     "env -u CUDA_VISIBLE_DEVICES -u LOCAL_WORLD_SIZE SIMCUDA_DEVICES=%s "
                     "EASYSCALE_COLL_TRANSPORT=%s EASYSCALE_MOVE=off "
                     "LD_PRELOAD=%s%s%s/lib/libeasyscale.so %s --worker %d %d",
                     gpus, tps[j], pre && *pre ? pre : "", pre && *pre ? ":" : "", b, self,
                     CARRIER_GPUS * k, k);
            snprintf(what, sizeof what, "virtual-%s", tps[j]);
            if (collect(cmd, t) < 0)
                printf("%s k=%d: failed\n", what, k);
            else
                carrier_row(what, k, t, ref);
            fflush(stdout);
        }
}

/* The fold kernel alone (kernels/reduce.cu, what a carrier of the chain
 * runs at each hop): 2 float inputs (the partial received, the carrier's
 * own) into an output on device 0, each size the best of 3, as "result
 * BYTES SECONDS" lines. */
static int fold(void)
{
    const int rank = 0;
    shared_t dummy, *sh = &dummy;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr p[3];
    size_t max = g_sizes[NSIZES - 1];
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, es_reduce_fatbin));
    CK(cuModuleGetFunction(&fn, mod, "es_coll_reduce"));
    for (int i = 0; i < 3; i++) {
        CK(cuMemAlloc(&p[i], max));
        CK(cuMemsetD32(p[i], 0x3f800000u + (unsigned)i, max / 4));
    }
    for (int k = 0; k < NSIZES; k++) {
        es_red_args_t a;
        memset(&a, 0, sizeof(a));
        a.in[0] = (const void *)(uintptr_t)p[0];
        a.in[1] = (const void *)(uintptr_t)p[1];
        a.out = (void *)(uintptr_t)p[2];
        a.count = g_sizes[k] / 4;
        a.nin = 2;
        a.dtype = ES_RT_F32;
        a.op = ES_RO_SUM;
        a.divisor = 2;
        /* the launch geometry of kernels/reduce.c */
        unsigned long long tile = (unsigned long long)ES_RED_BLOCK * ES_RED_PER_THREAD * ES_RED_VEC;
        unsigned long long blocks = (a.count + tile - 1) / tile;
        unsigned grid = blocks > 1024 ? 1024 : (unsigned)blocks;
        void *params[] = { &a };
        double best = 1e30;
        for (int i = 0; i < 3; i++) {
            CK(cuCtxSynchronize());
            double t0 = now_s();
            CK(cuLaunchKernel(fn, grid, 1, 1, ES_RED_BLOCK, 1, 1, 0, NULL, params, NULL));
            CK(cuCtxSynchronize());
            double t = now_s() - t0;
            best = t < best ? t : best;
        }
        printf("result %zu %.9f\n", g_sizes[k], best);
    }
    return 0;
}

/* The GPU's device-to-device copy time for 256 MiB (best of 5), the
 * yardstick of scripts/gpu-check's carriers step: "d2d BYTES SECONDS". */
static int d2d(void)
{
    const int rank = 0;
    shared_t dummy, *sh = &dummy;
    size_t n = 256u << 20;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr a, b;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&a, n));
    CK(cuMemAlloc(&b, n));
    CK(cuMemsetD8(a, 1, n));
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        CK(cuCtxSynchronize());
        double t0 = now_s();
        CK(cuMemcpyDtoD(b, a, n));
        CK(cuCtxSynchronize());
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    printf("d2d %zu %.9f\n", n, best);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--d2d") == 0)
        return d2d();
    if (argc == 2 && strcmp(argv[1], "--fold") == 0)
        return fold();
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "--worker") == 0) {
        g_per_gpu = argc == 4 ? atoi(argv[3]) : 0;
        g_chain = g_per_gpu < 0 ? -g_per_gpu : 0;
        if (g_chain)
            g_per_gpu = 1;
        return worker(atoi(argv[2]));
    }
    if (argc > 1 && strcmp(argv[1], "--carriers") != 0) {
        fprintf(stderr, "coll_bench: unknown arguments (see the header of tests/coll/bench_coll.c: "
                        "--carriers, --d2d, --fold, --worker N [K])\n");
        return 2;
    }
    const char *b = getenv("ES_BUILD");
    if (!b) {
        fprintf(stderr, "coll_bench: run under scripts/simenv (ES_BUILD)\n");
        return 2;
    }
    char self[4096], mpi[4096];
    snprintf(self, sizeof self, "%s/bench/coll_bench", b);
    snprintf(mpi, sizeof mpi, "%s/bench/coll_mpi_bench", b);
    int have_mpi = access(mpi, X_OK) == 0 && system("command -v mpirun >/dev/null 2>&1") == 0;
    const char *pre = getenv("LD_PRELOAD");
    if (argc == 2 && strcmp(argv[1], "--carriers") == 0) {
        carriers_table(b, self, pre);
        return 0;
    }
    printf("all-reduce, float sum in place; time per operation (slowest rank, best of %d runs); "
           "GB/s\n", REPS);
    double mc = memcpy_gbs();
    g_have_mpi = have_mpi;
    printf("memcpy bandwidth (one thread, 256 MiB): %.2f GB/s\n", mc);
    printf("BENCH allreduce.memcpy-256M %.3f GB/s # memcpy of 256 MiB, one thread\n", mc);
    if (!have_mpi)
        printf("BENCH-MISSING allreduce.mpi # Open MPI not installed here (openmpi-bin, "
               "libopenmpi-dev)\n");
    printf("%-14s %2s %6s %12s %9s %9s\n", "what", "N", "bytes", "time_us", "algbw", "busbw");
    static const int ns[3] = { 2, 4, 8 };
    double t[NSIZES];
    for (int i = 0; i < 3; i++) {
        static const char *const tps[2] = { "host", "device" };
        for (int j = 0; j < 2; j++) {
            char cmd[9000], what[32];
            snprintf(cmd, sizeof cmd,
                     "env -u CUDA_VISIBLE_DEVICES -u LOCAL_WORLD_SIZE SIMCUDA_DEVICES=a100:80G "
                     "EASYSCALE_COLL_TRANSPORT=%s EASYSCALE_MOVE=%s "
                     "LD_PRELOAD=%s%s%s/lib/libeasyscale.so %s --worker %d",
                     tps[j], j == 1 ? "off" : "on", pre && *pre ? pre : "",
                     pre && *pre ? ":" : "", b, self, ns[i]);
            snprintf(what, sizeof what, "virtual-%s", tps[j]);
            if (collect(cmd, t) < 0)
                printf("%s %d: failed\n", what, ns[i]);
            row(what, ns[i], t);
            fflush(stdout);
        }
        if (have_mpi) {
            char cmd[9000];
            snprintf(cmd, sizeof cmd,
                     "LD_PRELOAD= mpirun --allow-run-as-root --oversubscribe --bind-to none "
                     "--mca btl self,vader -np %d %s 2>/dev/null",
                     ns[i], mpi);
            if (collect(cmd, t) < 0)
                printf("openmpi %d: failed\n", ns[i]);
            row("openmpi-shm", ns[i], t);
        } else if (i == 0) {
            printf("(Open MPI not installed: install openmpi-bin and libopenmpi-dev for its "
                   "figures)\n");
        }
        fflush(stdout);
    }
    carriers_table(b, self, pre);
    return 0;
}
