/* An NCCL client written only against NVIDIA's nccl.h and cuda.h, one rank
 * per process, placed as torchrun places ranks on several hosts: RANK,
 * WORLD_SIZE and LOCAL_RANK from the environment, device LOCAL_RANK %
 * cuDeviceGetCount(); rank 0 writes the unique id to a file the other ranks
 * read (a directory every host sees).
 *
 *   nccl_xclient ID_FILE [--loose | --bench]
 *
 * Checks, on values whose float sum depends on the order: all-reduce sum,
 * average and max (float; sum and average also of 9 MiB: three chunks
 * across hosts, on two stripes with 2 ranks a host), sum (half), reduce to
 * the last rank and
 * reduce-scatter (their results, which differ per rank, are checked but not
 * in the digest), broadcast from the last rank, all-gather, an all-reduce
 * and a broadcast in one group (ncclGroupStart/End), and PreMulSum
 * (all-reduce with a host scalar, reduce-scatter with a device one, a
 * scalar per rank; not with --loose: simcuda's NCCL has none);
 * point-to-point (exact words, in a group and outside one) with rank
 * r + N/2 (across 2 hosts: the same local rank) and r ^ 1, and across
 * hosts a send to another local rank refused with the reason;
 * ncclCommSplit (one rank a host across the hosts, inside each host, every
 * rank in reverse order: a sum on each new communicator bit for bit
 * against the fold of its ranks in its order; across hosts, ranks not in
 * blocks per host refused), then a sum on the parent. Sums are
 * compared bit for bit with a reference folded in rank
 * order 0..N-1 on the host (half: each addition in float, rounded to half);
 * with --loose (NCCL's own order) only within a tolerance. Prints
 * "rank R digest HEX" over every result (the same on every rank and every
 * placement when the sums are in rank order); exits non-zero on a failure.
 * With the levels between the hosts in host memory (EASYSCALE_XHOST=host,
 * or EASYSCALE_TIME_SLICE set, and GROUP_WORLD_SIZE > 1), point-to-point runs
 * inside the host only (with rank r ^ 1, 16 KiB and 5 MiB in a group) and a
 * send to the other host, a split, and an all-reduce on a stream under
 * capture must be refused with the reason;
 * split and point-to-point results are not in the digest, so it is the
 * same.
 * --bench: instead, times in-place float all-reduces of 1, 4, 16 and 64 MiB
 * (one to warm up, then the median of 9) and rank 0 prints "bench
 * allreduce BYTES SECONDS" for each (scripts/bench-hosts).
 */
#include <cuda.h>
#include <nccl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/clients/orderval.h"

#define COUNT 4099

static int g_rank, g_n, g_loose;
/* the levels between the hosts in host memory (EASYSCALE_XHOST=host, or
 * EASYSCALE_TIME_SLICE on; GROUP_WORLD_SIZE > 1), which serve no
 * point-to-point between hosts and no split */
static int g_mem;
static unsigned long long g_fnv = 0xcbf29ce484222325ULL;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "rank %d: ", g_rank);                                              \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, " (line %d)\n", __LINE__);                                         \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)
#define CU(call) CHECK((call) == CUDA_SUCCESS, "%s failed", #call)
#define NC(call)                                                                               \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        CHECK(r_ == ncclSuccess, "%s failed: %s", #call, ncclGetErrorString(r_));              \
    } while (0)

static void digest(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g_fnv = (g_fnv ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
}


static uint16_t f2h(float f) /* round to nearest even, finite range only */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000, e = (u >> 23) & 0xff, m = u & 0x7fffff;
    int he = (int)e - 127 + 15;
    if (he <= 0) { /* subnormal */
        if (he < -10)
            return (uint16_t)s;
        m |= 0x800000;
        uint32_t sh = (uint32_t)(14 - he), q = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(s | q);
    }
    uint32_t q = ((uint32_t)he << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
        q++;
    return (uint16_t)(s | (q >= 0x7c00 ? 0x7c00 : q));
}

static float h2f(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return s ? -f : f;
    }
    u = s | ((e == 31 ? 255 : e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int g_private; /* results that differ per rank: checked, not digested */

/* Element i of the salt's values summed in rank order 0..N-1 (float). */
static float ref_sum(size_t i, int salt)
{
    float acc = val(0, i, salt);
    for (int r = 1; r < g_n; r++)
        acc = acc + val(r, i, salt);
    return acc;
}

static void compare(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        int ok = g_loose ? fabsf(got[i] - want[i]) <= 1e-5f * (fabsf(want[i]) + 2048.0f * g_n)
                         : memcmp(&got[i], &want[i], 4) == 0;
        CHECK(ok, "%s: element %zu is %.9g, rank-order reference %.9g", what, i, got[i], want[i]);
    }
    if (!g_private)
        digest(got, n * 4);
}

/* Data movement: exact on every placement, also with --loose. */
static void compare_exact(const float *got, const float *want, size_t n, const char *what)
{
    int was = g_loose;
    g_loose = 0;
    compare(got, want, n, what);
    g_loose = was;
}

/* n floats all-reduced in place (BIG: several of the chunks the virtual
 * collectives pipeline between hosts, the last one short). */
#define BIG (9 * (1 << 18) + 5)

static void allreduce_float(ncclComm_t c, CUstream st, ncclRedOp_t op, int salt, const char *what,
                            size_t n)
{
    float *h = malloc(n * 4), *w = malloc(n * 4);
    CUdeviceptr b;
    CHECK(h && w, "out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = val(g_rank, i, salt);
    CU(cuMemAlloc(&b, n * 4));
    CU(cuMemcpyHtoD(b, h, n * 4));
    NC(ncclAllReduce((void *)b, (void *)b, n, ncclFloat, op, c, (cudaStream_t)st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, b, n * 4));
    for (size_t i = 0; i < n; i++) {
        float acc = val(0, i, salt);
        for (int r = 1; r < g_n; r++)
            acc = op == ncclMax ? (val(r, i, salt) > acc ? val(r, i, salt) : acc)
                                : acc + val(r, i, salt);
        w[i] = op == ncclAvg ? acc / (float)g_n : acc;
    }
    compare(h, w, n, what);
    CU(cuMemFree(b));
    free(h);
    free(w);
}

static void allreduce_half(ncclComm_t c, CUstream st)
{
    uint16_t *h = malloc(COUNT * 2);
    float *got = malloc(COUNT * 4), *w = malloc(COUNT * 4);
    CUdeviceptr b;
    CHECK(h && got && w, "out of memory");
    for (size_t i = 0; i < COUNT; i++)
        h[i] = f2h(val(g_rank, i, 3) / 64.0f);
    CU(cuMemAlloc(&b, COUNT * 2));
    CU(cuMemcpyHtoD(b, h, COUNT * 2));
    NC(ncclAllReduce((void *)b, (void *)b, COUNT, ncclHalf, ncclSum, c, (cudaStream_t)st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, b, COUNT * 2));
    for (size_t i = 0; i < COUNT; i++) {
        float acc = h2f(f2h(val(0, i, 3) / 64.0f));
        for (int r = 1; r < g_n; r++)
            acc = h2f(f2h(acc + h2f(f2h(val(r, i, 3) / 64.0f))));
        w[i] = acc;
        got[i] = h2f(h[i]);
    }
    compare(got, w, COUNT, "allreduce_half_sum");
    CU(cuMemFree(b));
    free(h);
    free(got);
    free(w);
}

/* Reduce to the last rank and reduce-scatter, float sums. */
static void reduce_parts(ncclComm_t c, CUstream st)
{
    size_t all = (size_t)COUNT * (size_t)g_n;
    float *h = malloc(all * 4), *w = malloc(all * 4);
    CUdeviceptr s, r;
    CHECK(h && w, "out of memory");
    for (size_t i = 0; i < all; i++)
        h[i] = val(g_rank, i, 6);
    CU(cuMemAlloc(&s, all * 4));
    CU(cuMemAlloc(&r, all * 4));
    CU(cuMemcpyHtoD(s, h, all * 4));
    NC(ncclReduceScatter((void *)s, (void *)r, COUNT, ncclFloat, ncclSum, c, (cudaStream_t)st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, r, COUNT * 4));
    for (size_t j = 0; j < COUNT; j++)
        w[j] = ref_sum((size_t)g_rank * COUNT + j, 6);
    g_private = 1;
    compare(h, w, COUNT, "reduce_scatter");
    for (size_t i = 0; i < all; i++)
        h[i] = val(g_rank, i, 7);
    CU(cuMemcpyHtoD(s, h, all * 4));
    NC(ncclReduce((void *)s, (void *)r, all, ncclFloat, ncclSum, g_n - 1, c, (cudaStream_t)st));
    CU(cuStreamSynchronize(st));
    if (g_rank == g_n - 1) {
        CU(cuMemcpyDtoH(h, r, all * 4));
        for (size_t i = 0; i < all; i++)
            w[i] = ref_sum(i, 7);
        compare(h, w, all, "reduce");
    }
    g_private = 0;
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    free(h);
    free(w);
}

static void bcast_gather(ncclComm_t c, CUstream st)
{
    size_t all = (size_t)COUNT * (size_t)g_n;
    float *h = malloc(all * 4), *w = malloc(all * 4);
    CUdeviceptr b, g;
    CHECK(h && w, "out of memory");
    for (size_t i = 0; i < COUNT; i++)
        h[i] = val(g_rank, i, 4);
    CU(cuMemAlloc(&b, COUNT * 4));
    CU(cuMemAlloc(&g, all * 4));
    CU(cuMemcpyHtoD(b, h, COUNT * 4));
    NC(ncclBroadcast((void *)b, (void *)b, COUNT, ncclFloat, g_n - 1, c, (cudaStream_t)st));
    NC(ncclAllGather((void *)b, (void *)g, COUNT, ncclFloat, c, (cudaStream_t)st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, g, all * 4));
    for (size_t i = 0; i < all; i++)
        w[i] = val(g_n - 1, i % COUNT, 4);
    compare_exact(h, w, all, "broadcast_allgather");
    CU(cuMemFree(b));
    CU(cuMemFree(g));
    free(h);
    free(w);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench(ncclComm_t c, CUstream st)
{
    static const size_t mib[] = { 1, 4, 16, 64 };
    for (size_t k = 0; k < sizeof(mib) / sizeof(mib[0]); k++) {
        size_t n = mib[k] << 18; /* floats */
        CUdeviceptr b;
        double t[10];
        CU(cuMemAlloc(&b, n * 4));
        CU(cuMemsetD32(b, 0x3f800000u, n));
        for (int i = 0; i < 10; i++) {
            double t0 = now_s();
            NC(ncclAllReduce((void *)b, (void *)b, n, ncclFloat, ncclSum, c, (cudaStream_t)st));
            CU(cuStreamSynchronize(st));
            t[i] = now_s() - t0;
        }
        qsort(t + 1, 9, sizeof(double), cmp_d);
        if (g_rank == 0)
            printf("bench allreduce %zu %.6f\n", n * 4, t[5]);
        fflush(stdout);
        CU(cuMemFree(b));
    }
}

/* An all-reduce and a broadcast from rank 1 in one group. */
static void grouped(ncclComm_t c, CUstream st)
{
    float *h = malloc(COUNT * 4), *w = malloc(COUNT * 4);
    CUdeviceptr a, b;
    CHECK(h && w, "out of memory");
    CU(cuMemAlloc(&a, COUNT * 4));
    CU(cuMemAlloc(&b, COUNT * 4));
    for (size_t i = 0; i < COUNT; i++)
        h[i] = val(g_rank, i, 8);
    CU(cuMemcpyHtoD(a, h, COUNT * 4));
    for (size_t i = 0; i < COUNT; i++)
        h[i] = val(g_rank, i, 9);
    CU(cuMemcpyHtoD(b, h, COUNT * 4));
    NC(ncclGroupStart());
    NC(ncclAllReduce((void *)a, (void *)a, COUNT, ncclFloat, ncclSum, c, (cudaStream_t)st));
    NC(ncclBroadcast((void *)b, (void *)b, COUNT, ncclFloat, 1, c, (cudaStream_t)st));
    NC(ncclGroupEnd());
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, a, COUNT * 4));
    for (size_t i = 0; i < COUNT; i++)
        w[i] = ref_sum(i, 8);
    compare(h, w, COUNT, "grouped_allreduce");
    CU(cuMemcpyDtoH(h, b, COUNT * 4));
    for (size_t i = 0; i < COUNT; i++)
        w[i] = val(1, i, 9);
    compare_exact(h, w, COUNT, "grouped_broadcast");
    CU(cuMemFree(a));
    CU(cuMemFree(b));
    free(h);
    free(w);
}

/* PreMulSum: rank r's scalar (0.1 (r + 1), inexact: the products round)
 * times its values, the products summed in rank order. */
static float scal(int r)
{
    return 0.1f * (float)(r + 1);
}

static float premul_ref(size_t i, int salt)
{
    float acc = scal(0) * val(0, i, salt);
    for (int r = 1; r < g_n; r++) {
        float p = scal(r) * val(r, i, salt);
        acc = acc + p;
    }
    return acc;
}

/* The same products summed in reverse rank order: the reference must
 * differ from it somewhere, or the exact comparison could not tell the
 * rank order from another. */
static void premul_order_matters(size_t n, int salt)
{
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        float acc = scal(g_n - 1) * val(g_n - 1, i, salt);
        for (int r = g_n - 2; r >= 0; r--) {
            float p = scal(r) * val(r, i, salt);
            acc = acc + p;
        }
        float w = premul_ref(i, salt);
        differ += memcmp(&acc, &w, 4) != 0;
    }
    CHECK(g_n < 3 || differ > 0, "PreMulSum salt %d: no element depends on the order", salt);
}

/* An all-reduce with the scalar on the host (ncclScalarHostImmediate), a
 * reduce-scatter with it in device memory (ncclScalarDevice); each operator
 * destroyed right after its call returned, as NCCL allows. */
static void premulsum(ncclComm_t c, CUstream st)
{
    if (g_loose) {
        /* NCCL's own order: simcuda's NCCL has no PreMulSum operators */
        printf("rank %d premulsum: not with --loose\n", g_rank);
        return;
    }
    premul_order_matters(COUNT, 10);
    premul_order_matters((size_t)COUNT * (size_t)g_n, 11);
    size_t all = (size_t)COUNT * (size_t)g_n;
    float *h = malloc(all * 4), *w = malloc(all * 4), s = scal(g_rank);
    CUdeviceptr a, r, ds;
    ncclRedOp_t op;
    CHECK(h && w, "out of memory");
    CU(cuMemAlloc(&a, all * 4));
    CU(cuMemAlloc(&r, all * 4));
    CU(cuMemAlloc(&ds, 4));
    for (size_t i = 0; i < COUNT; i++)
        h[i] = val(g_rank, i, 10);
    CU(cuMemcpyHtoD(a, h, COUNT * 4));
    NC(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, c));
    NC(ncclAllReduce((void *)a, (void *)a, COUNT, ncclFloat, op, c, (cudaStream_t)st));
    NC(ncclRedOpDestroy(op, c));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, a, COUNT * 4));
    for (size_t i = 0; i < COUNT; i++)
        w[i] = premul_ref(i, 10);
    compare(h, w, COUNT, "allreduce_premulsum");
    for (size_t i = 0; i < all; i++)
        h[i] = val(g_rank, i, 11);
    CU(cuMemcpyHtoD(a, h, all * 4));
    CU(cuMemcpyHtoD(ds, &s, 4));
    NC(ncclRedOpCreatePreMulSum(&op, (void *)ds, ncclFloat, ncclScalarDevice, c));
    NC(ncclReduceScatter((void *)a, (void *)r, COUNT, ncclFloat, op, c, (cudaStream_t)st));
    NC(ncclRedOpDestroy(op, c));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, r, COUNT * 4));
    for (size_t j = 0; j < COUNT; j++)
        w[j] = premul_ref((size_t)g_rank * COUNT + j, 11);
    g_private = 1;
    compare(h, w, COUNT, "reduce_scatter_premulsum");
    g_private = 0;
    CU(cuMemFree(a));
    CU(cuMemFree(r));
    CU(cuMemFree(ds));
    free(h);
    free(w);
}

/* Colors and keys of rank r for the splits below (N = 4: 2 hosts of 2). */
static void ck_parity(int r, int *c, int *k) /* one rank a host, across the hosts */
{
    *c = r % 2;
    *k = r;
}

static void ck_half(int r, int *c, int *k) /* inside each host */
{
    *c = r / (g_n / 2);
    *k = r;
}

static void ck_reverse(int r, int *c, int *k) /* every rank, in reverse: host 1's block first */
{
    *c = 0;
    *k = g_n - r;
}

static void ck_scattered(int r, int *c, int *k) /* 0, 2, 3, 1: host 0's ranks not one block */
{
    *c = 0;
    *k = r == 1 ? g_n : r;
}

/* ncclCommSplit by ck, then a float sum on the new communicator checked
 * bit for bit against the fold of its ranks in its order (by key, then
 * rank) on the CPU; it differs per communicator: not in the digest. */
static void split_sum(ncclComm_t c, CUstream st, void (*ck)(int, int *, int *), int salt,
                      const char *what)
{
    int color, key, m[64], nm = 0, sr = -1, sn = 0;
    ck(g_rank, &color, &key);
    for (int r = 0; r < g_n && r < 64; r++) { /* the members, by key then rank */
        int cr, kr, i;
        ck(r, &cr, &kr);
        if (cr != color)
            continue;
        for (i = nm++; i > 0; i--) {
            int cj, kj;
            ck(m[i - 1], &cj, &kj);
            if (kj <= kr)
                break;
            m[i] = m[i - 1];
        }
        m[i] = r;
    }
    ncclComm_t s;
    NC(ncclCommSplit(c, color, key, &s, NULL));
    NC(ncclCommUserRank(s, &sr));
    NC(ncclCommCount(s, &sn));
    CHECK(sn == nm && sr >= 0 && sr < nm && m[sr] == g_rank, "%s: rank %d of %d, wanted %d",
          what, sr, sn, nm);
    size_t n = COUNT;
    float *h = malloc(n * 4), *w = malloc(n * 4);
    CUdeviceptr b;
    CHECK(h && w, "out of memory");
    for (size_t i = 0; i < n; i++) {
        h[i] = val(g_rank, i, salt);
        w[i] = val(m[0], i, salt);
        for (int j = 1; j < nm; j++)
            w[i] = w[i] + val(m[j], i, salt);
    }
    CU(cuMemAlloc(&b, n * 4));
    CU(cuMemcpyHtoD(b, h, n * 4));
    NC(ncclAllReduce((void *)b, (void *)b, n, ncclFloat, ncclSum, s, (cudaStream_t)st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, b, n * 4));
    g_private = 1;
    compare(h, w, n, what);
    g_private = 0;
    CU(cuMemFree(b));
    NC(ncclCommDestroy(s));
    free(h);
    free(w);
}

/* Splits: one rank a host across the hosts, inside each host, every rank
 * in reverse; across hosts (2 ranks a host or more) a color whose ranks
 * are not blocks per host is refused with the reason (the parent goes
 * on). */
static void splits(ncclComm_t c, CUstream st)
{
    const char *g = getenv("GROUP_WORLD_SIZE"), *k = getenv("LOCAL_WORLD_SIZE");
    if (g_mem) {
        ncclComm_t s = NULL;
        ncclResult_t r = ncclCommSplit(c, g_rank % 2, g_rank, &s, NULL);
        const char *why = ncclGetLastError(c);
        CHECK(r == ncclInvalidUsage && !s && why &&
                  strstr(why, "is not served with the levels between the hosts in host memory"),
              "a split time-sliced across hosts: %d (%s), wanted a refusal", (int)r,
              why ? why : "");
        printf("rank %d splits: refused time-sliced across hosts\n", g_rank);
        return;
    }
    if (g_loose && g && atoi(g) > 1) {
        printf("rank %d splits: not with --loose across hosts (simcuda's NCCL has none)\n",
               g_rank);
        return;
    }
    split_sum(c, st, ck_parity, 21, "split_parity");
    split_sum(c, st, ck_half, 22, "split_half");
    split_sum(c, st, ck_reverse, 23, "split_reverse");
    if (g_loose || !g || atoi(g) < 2 || !k || atoi(k) < 2)
        return;
    int color, key;
    ncclComm_t s = NULL;
    ck_scattered(g_rank, &color, &key);
    ncclResult_t r = ncclCommSplit(c, color, key, &s, NULL);
    const char *why = ncclGetLastError(c);
    CHECK(r == ncclInvalidUsage && !s && why &&
              strstr(why, "do not come in blocks of the same size per host"),
          "a split whose ranks are not blocks per host: %d (%s), wanted a refusal", (int)r,
          why ? why : "");
}

static void splits_then_sum(ncclComm_t c, CUstream st)
{
    splits(c, st);
    allreduce_float(c, st, ncclSum, 24, "allreduce_after_splits", COUNT);
}

/* Rank r's words for a transfer (salt: which one): exact bytes to check. */
static int32_t p2p_word(int r, size_t i, int salt)
{
    return (int32_t)((uint32_t)(r + 1) * 2654435761u ^ (uint32_t)(i * 40503u + (size_t)salt));
}

/* Checks n words received from rank `from` at device buffer rb. */
static void p2p_check(CUdeviceptr rb, size_t n, int from, int salt)
{
    int32_t *got = malloc(n * sizeof(*got));
    CHECK(got, "out of memory");
    CU(cuMemcpyDtoH(got, rb, n * sizeof(*got)));
    for (size_t i = 0; i < n; i++)
        CHECK(got[i] == p2p_word(from, i, salt), "p2p %d: word %zu from rank %d: %d, wanted %d",
              salt, i, from, got[i], p2p_word(from, i, salt));
    free(got);
}

/* Sends n words to `to` and receives n from `from` (grouped: in one
 * ncclGroupStart/End; else the first half of the ranks sends first),
 * checks them exactly (they differ per rank: not in the digest). */
static void p2p_pair(ncclComm_t c, CUstream st, int to, int from, size_t n, int grouped, int salt)
{
    int32_t *h = malloc(n * sizeof(*h));
    CHECK(h, "out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = p2p_word(g_rank, i, salt);
    CUdeviceptr sb, rb;
    CU(cuMemAlloc(&sb, n * sizeof(*h)));
    CU(cuMemAlloc(&rb, n * sizeof(*h)));
    CU(cuMemcpyHtoD(sb, h, n * sizeof(*h)));
    CU(cuMemsetD32(rb, 0, n));
    if (grouped)
        NC(ncclGroupStart());
    if (grouped || g_rank < g_n / 2)
        NC(ncclSend((void *)sb, n, ncclInt32, to, c, (cudaStream_t)st));
    NC(ncclRecv((void *)rb, n, ncclInt32, from, c, (cudaStream_t)st));
    if (!grouped && g_rank >= g_n / 2)
        NC(ncclSend((void *)sb, n, ncclInt32, to, c, (cudaStream_t)st));
    if (grouped)
        NC(ncclGroupEnd());
    CU(cuStreamSynchronize(st));
    p2p_check(rb, n, from, salt);
    CU(cuMemFree(sb));
    CU(cuMemFree(rb));
    free(h);
}

/* One group with both exchanges: with rank r + N/2 (on 2 hosts: the other
 * host's, NCCL between the hosts) and with rank r ^ 1 (this host's: the
 * engine's), so that the two kinds of sends wait in one group. */
static void p2p_mixed(ncclComm_t c, CUstream st, size_t n, int salt)
{
    int half = g_n / 2, to = (g_rank + half) % g_n, from = (g_rank + g_n - half) % g_n;
    int32_t *h = malloc(n * sizeof(*h));
    CHECK(h, "out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = p2p_word(g_rank, i, salt);
    CUdeviceptr sb, rf, rn;
    CU(cuMemAlloc(&sb, n * sizeof(*h)));
    CU(cuMemAlloc(&rf, n * sizeof(*h)));
    CU(cuMemAlloc(&rn, n * sizeof(*h)));
    CU(cuMemcpyHtoD(sb, h, n * sizeof(*h)));
    NC(ncclGroupStart());
    NC(ncclSend((void *)sb, n, ncclInt32, to, c, (cudaStream_t)st));
    NC(ncclRecv((void *)rf, n, ncclInt32, from, c, (cudaStream_t)st));
    NC(ncclSend((void *)sb, n, ncclInt32, g_rank ^ 1, c, (cudaStream_t)st));
    NC(ncclRecv((void *)rn, n, ncclInt32, g_rank ^ 1, c, (cudaStream_t)st));
    NC(ncclGroupEnd());
    CU(cuStreamSynchronize(st));
    p2p_check(rf, n, from, salt);
    p2p_check(rn, n, g_rank ^ 1, salt);
    CU(cuMemFree(sb));
    CU(cuMemFree(rf));
    CU(cuMemFree(rn));
    free(h);
}

/* Point-to-point, data movement: the same bytes on every placement. With
 * rank r + N/2 (on 2 hosts of N/2 ranks: the same local rank on the other
 * host, their NCCL communicator between the hosts; on one host, the
 * engine's), in a group (a ring exchange) and outside one (the first half
 * sends first), 5 MiB; with rank r ^ 1 (the same host either way); with
 * both in one group. Across
 * hosts, a send to another local rank of the other host is refused with
 * the reason (with 2 ranks a host or more), and nothing is left pending
 * (the communicator goes on). */
static void p2p(ncclComm_t c, CUstream st)
{
    int half = g_n / 2;
    if (g_mem) { /* inside the host only; between the hosts refused */
        p2p_pair(c, st, g_rank ^ 1, g_rank ^ 1, 4099, 1, 3);
        p2p_pair(c, st, g_rank ^ 1, g_rank ^ 1, 5u << 18, 1, 5);
        CUdeviceptr b;
        CU(cuMemAlloc(&b, 64));
        ncclResult_t r = ncclSend((void *)b, 16, ncclFloat, (g_rank + half) % g_n, c,
                                  (cudaStream_t)st);
        const char *why = ncclGetLastError(c);
        CHECK(r == ncclInvalidUsage && why &&
                  strstr(why, "point-to-point between hosts is not served with the levels between "
                                      "the hosts in host memory"),
              "ncclSend between hosts time-sliced: %d (%s), wanted a refusal", (int)r,
              why ? why : "");
        CU(cuMemFree(b));
        return;
    }
    p2p_pair(c, st, (g_rank + half) % g_n, (g_rank + g_n - half) % g_n, 5u << 18, 1, 1);
    p2p_pair(c, st, (g_rank + half) % g_n, (g_rank + g_n - half) % g_n, 4099, 0, 2);
    p2p_pair(c, st, g_rank ^ 1, g_rank ^ 1, 4099, 1, 3);
    p2p_mixed(c, st, 1u << 18, 4);
    const char *g = getenv("GROUP_WORLD_SIZE"), *k = getenv("LOCAL_WORLD_SIZE");
    if (g_loose || !g || atoi(g) < 2 || !k || atoi(k) < 2)
        return;
    CUdeviceptr b;
    CU(cuMemAlloc(&b, 64));
    ncclResult_t r = ncclSend((void *)b, 16, ncclFloat, ((g_rank + half) % g_n) ^ 1, c,
                              (cudaStream_t)st);
    const char *why = ncclGetLastError(c);
    CHECK(r == ncclInvalidUsage && why &&
              strstr(why, "between hosts, point-to-point goes only between ranks of the same "
                          "local rank"),
          "ncclSend to another local rank across hosts: %d (%s), wanted a refusal", (int)r,
          why ? why : "");
    CU(cuMemFree(b));
}

/* With the levels between the hosts in host memory an operation runs in
 * the calling thread, so one on a stream under capture is refused with the
 * reason (nothing captured, nothing counted: the communicator goes on). */
static void capture_refused(ncclComm_t c)
{
    CUstream cs;
    CUdeviceptr b;
    CUgraph g;
    CU(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CU(cuMemAlloc(&b, 64));
    CU(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
    ncclResult_t r = ncclAllReduce((void *)b, (void *)b, 16, ncclFloat, ncclSum, c,
                                   (cudaStream_t)cs);
    const char *why = ncclGetLastError(c);
    CU(cuStreamEndCapture(cs, &g));
    CHECK(r == ncclInvalidUsage && why && strstr(why, "cannot be captured"),
          "an all-reduce under capture across hosts in host memory: %d (%s), wanted a refusal",
          (int)r, why ? why : "");
    if (g)
        CU(cuGraphDestroy(g));
    CU(cuMemFree(b));
    CU(cuStreamDestroy(cs));
}

/* Rank 0 writes the id (temporary file, renamed); the others wait for it. */
static void share_id(const char *path, ncclUniqueId *id)
{
    char tmp[4200];
    if (g_rank == 0) {
        NC(ncclGetUniqueId(id));
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        CHECK(f && fwrite(id, sizeof(*id), 1, f) == 1 && fclose(f) == 0, "cannot write %s", tmp);
        CHECK(rename(tmp, path) == 0, "cannot rename %s", tmp);
        return;
    }
    for (int i = 0; i < 1200; i++) { /* 120 s */
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t k = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (k == 1)
                return;
        }
        struct timespec ts = { 0, 100000000 };
        nanosleep(&ts, NULL);
    }
    CHECK(0, "no unique id in %s after 120 s", path);
}

static int env_int(const char *name)
{
    const char *v = getenv(name);
    char *end;
    long x = v ? strtol(v, &end, 10) : -1;
    CHECK(v && *v && !*end && x >= 0 && x < 4096, "%s must be set (a small integer)", name);
    return (int)x;
}

int main(int argc, char **argv)
{
    int timing = 0;
    if (argc == 3 && strcmp(argv[2], "--loose") == 0)
        g_loose = 1;
    else if (argc == 3 && strcmp(argv[2], "--bench") == 0)
        timing = 1;
    else if (argc != 2) {
        fprintf(stderr, "usage: nccl_xclient ID_FILE [--loose | --bench]\n");
        return 2;
    }
    g_rank = env_int("RANK");
    const char *ts = getenv("EASYSCALE_TIME_SLICE"), *gw = getenv("GROUP_WORLD_SIZE");
    const char *xh = getenv("EASYSCALE_XHOST");
    g_mem = ((ts && *ts && strcmp(ts, "off") != 0) || (xh && strcmp(xh, "host") == 0)) && gw &&
            atoi(gw) > 1;
    g_n = env_int("WORLD_SIZE");
    int local = env_int("LOCAL_RANK"), ndev;
    CHECK(g_rank < g_n, "RANK %d of WORLD_SIZE %d", g_rank, g_n);
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    CU(cuInit(0));
    CU(cuDeviceGetCount(&ndev));
    CU(cuDeviceGet(&dev, local % ndev));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    ncclUniqueId id;
    ncclComm_t c;
    share_id(argv[1], &id);
    NC(ncclCommInitRank(&c, g_n, id, g_rank));
    if (timing) {
        bench(c, st);
        NC(ncclCommDestroy(c));
        return 0;
    }
    allreduce_float(c, st, ncclSum, 1, "allreduce_sum", COUNT);
    allreduce_float(c, st, ncclAvg, 2, "allreduce_avg", COUNT);
    allreduce_float(c, st, ncclMax, 5, "allreduce_max", COUNT);
    allreduce_float(c, st, ncclSum, 12, "allreduce_sum_big", BIG);
    allreduce_float(c, st, ncclAvg, 13, "allreduce_avg_big", BIG);
    allreduce_half(c, st);
    reduce_parts(c, st);
    bcast_gather(c, st);
    grouped(c, st);
    premulsum(c, st);
    p2p(c, st);
    if (g_mem)
        capture_refused(c);
    splits_then_sum(c, st);
    NC(ncclCommDestroy(c));
    printf("rank %d digest %016llx\n", g_rank, g_fnv);
    return 0;
}
