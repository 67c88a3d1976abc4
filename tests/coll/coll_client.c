/* A multi-rank NCCL client for the virtual collectives' tests, written only
 * against NVIDIA's nccl.h and cuda.h (it runs on any NCCL; the rank-order
 * checks hold only where reductions are summed in rank order, which is
 * what the tests assert under libeasyscale.so).
 *
 *   coll_client MODE NRANKS
 *
 * Forks NRANKS ranks; rank r uses device r % (device count). Modes:
 *   types    every datatype x every operation (sum, prod, max, min, avg,
 *            PreMulSum with a host and a device scalar) through all-reduce
 *            (in and out of place), reduce and reduce-scatter, compared bit
 *            for bit with a reference folded in rank order here, with this
 *            file's own arithmetic (the documented rule, written
 *            independently of the shim's: _Float16, libm rounding, tables);
 *            prints "digest <hex>" of every result
 *   coll     broadcast, allgather, reduce-scatter in place, groups of
 *            collectives and send/recv pairs (a ring, self, several
 *            streams), all-to-all, gather, scatter, two communicators, split,
 *            non-blocking init, queries and argument errors; prints
 *            "digest <hex>" of every result read back (every rank alike)
 *   initall  one process: ncclCommInitAll over NRANKS devices, a grouped
 *            all-reduce from one thread (forks nothing)
 *   kill     rank 2 dies (SIGKILL) after a first all-reduce; the others'
 *            second all-reduce must fail with ncclRemoteError (polled with
 *            ncclCommGetAsyncError and cuStreamQuery, 30 s at most)
 *   killmid  the same, but rank 2 dies 20 ms after calling a second
 *            all-reduce of 32 MiB (its stream somewhere inside: a carrier
 *            of the nccl transport in an NCCL call); the others synchronize
 *            their stream and then ask ncclCommGetAsyncError once (the
 *            failure must be known when the stream ends)
 *   selfmove 12 all-reduces; rank 1 asks for a move of itself to the next
 *            GPU (easyscale_move) before the 3rd; selfmove-stall: from the
 *            4th on enqueued without waiting, rank 3 stays away 8 s before
 *            the 3rd and the 4th (the hold is given up)
 *   sigmove  after a first all-reduce every rank signals itself a move to
 *            the next GPU (EASYSCALE_MOVE_SIGNAL=SIGUSR1), then a second
 *            all-reduce (moved or refused, the sums are the rank-ordered ones)
 *   abort    rank 1 calls ncclCommAbort instead of the second all-reduce
 *   timeout  rank 1 stays away from the second all-reduce for 5 s; the
 *            others must fail (ncclSystemError) (run with a short
 *            EASYSCALE_COLL_TIMEOUT)
 *   stale    rank 0 starts a communicator of 2 that rank 1 never joins,
 *            then dies (leaves a half-made rendezvous behind)
 *   order    stream order without timing: rank 0 enqueues, on one stream
 *            and without synchronising, a memset of the output, an async
 *            copy of its input from pinned memory, the all-reduce and an
 *            async copy of the result into pinned memory, finds the stream
 *            not yet done (cuStreamQuery: the peers have not called), and
 *            only then lets ranks 1..N-1 make their calls (a flag in
 *            shared memory): if its all-reduce blocked until the peers
 *            arrived, the peers fail after waiting 120 s for the flag.
 *            Every rank then synchronises its stream and compares its
 *            pinned result bit for bit with the sum folded in rank order
 *            here
 *            While its stream waits, rank 0 runs a host function on
 *            another stream of its context and synchronises that stream: it
 *            completes (host callbacks are not held up by the collective)
 *   order-blocking  the same with rank 0 synchronising its stream right
 *            after the all-reduce, as a collective that blocked would
 *            (the test's own negative control: it must fail, the peers
 *            giving up after 5 s; run with an EASYSCALE_COLL_TIMEOUT well
 *            above that, else the communicator's timeout ends rank 0's
 *            wait first)
 *   capture  after a first all-reduce, the stream begins a capture (GLOBAL
 *            mode, as torch.cuda.graph): a memset, an all-reduce (alone, then
 *            in a group), another memset; the all-reduce must fail with
 *            ncclInvalidUsage and a reason (ncclGetLastError), the capture
 *            must end with a graph of the two memsets only, which replays;
 *            then an all-reduce outside the capture still gives the sums
 *
 * Output: "rank R: ok" or "rank R: FAIL ..." lines, "done" at the end; exit
 * 0 when every rank passed (and a rank meant to die did).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <nccl.h>

#include <dlfcn.h>

#include <math.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 16

typedef struct shared {
    ncclUniqueId id[4];
    volatile int ready[4];
    volatile int called;            /* order: rank 0's all-reduce returned */
    volatile int status[MAXR];      /* 0 running, 1 ok, 2 failed */
    char digest[MAXR][32];
} shared_t;

static shared_t *g_sh;
static int g_rank, g_n;
static const char *g_mode;

#define FAILF(...)                                                                              \
    do {                                                                                        \
        printf("rank %d: FAIL line %d: ", g_rank, __LINE__);                                    \
        printf(__VA_ARGS__);                                                                    \
        printf("\n");                                                                           \
        fflush(stdout);                                                                         \
        return 1;                                                                               \
    } while (0)
#define CU(call)                                                                                \
    do {                                                                                        \
        CUresult r_ = (call);                                                                   \
        if (r_ != CUDA_SUCCESS)                                                                 \
            FAILF("%s: CUresult %d", #call, (int)r_);                                           \
    } while (0)
#define NC(call)                                                                                \
    do {                                                                                        \
        ncclResult_t r_ = (call);                                                               \
        if (r_ != ncclSuccess)                                                                  \
            FAILF("%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL));        \
    } while (0)

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

#include "tests/coll/refarith.h"

static uint64_t load(int dt, const void *p, size_t i)
{
    uint64_t v = 0;
    memcpy(&v, (const char *)p + i * tsize[dt], tsize[dt]);
    return v;
}

static void store(int dt, void *p, size_t i, uint64_t v)
{
    memcpy((char *)p + i * tsize[dt], &v, tsize[dt]);
}

/* Input element i of rank r (codes exercising rounding, specials now and
 * then). */
static uint64_t gen(int dt, int r, size_t i, int salt)
{
    uint64_t x = mix(((uint64_t)r << 40) ^ ((uint64_t)dt << 56) ^ ((uint64_t)salt << 48) ^ i);
    int special = (x % 53) == 0;
    switch (dt) {
    case 7: {
        if (special) {
            static const uint32_t sp[] = { 0x7f800000u, 0xff800000u, 0x7fc00001u, 0x00000123u,
                                           0x80000000u, 0x00800000u };
            return sp[(x >> 8) % 6];
        }
        uint32_t e = 127 - 12 + (uint32_t)((x >> 8) % 24);
        return ((x >> 63) << 31) | (e << 23) | ((x >> 20) & 0x7fffff);
    }
    case 8: {
        if (special) {
            static const uint64_t sp[] = { 0x7ff0000000000000ULL, 0xfff0000000000000ULL,
                                           0x7ff8000000000123ULL, 0x0000000000000123ULL };
            return sp[(x >> 8) % 4];
        }
        uint64_t e = 1023 - 12 + ((x >> 8) % 24);
        return ((x >> 63) << 63) | (e << 52) | ((x >> 11) & 0xfffffffffffffULL);
    }
    case 6:
        if (special)
            return (x >> 8) & 0xffff; /* any code: NaN, inf, subnormal */
        return ((x >> 63) << 15) | ((uint64_t)(15 - 5 + (x >> 8) % 10) << 10) | ((x >> 20) & 0x3ff);
    case 9:
        if (special)
            return (x >> 8) & 0xffff;
        return ((x >> 63) << 15) | ((uint64_t)(127 - 6 + (x >> 8) % 12) << 7) | ((x >> 20) & 0x7f);
    case 10: case 11:
        return (x >> 8) & 0xff;
    default:
        return x & int_mask(dt);
    }
}

/* A PreMulSum scalar for rank r, in the type. */
static uint64_t scalar_for(int dt, int r)
{
    float f = 0.75f + 0.125f * (float)r;
    switch (dt) {
    case 7: return f_bits(f);
    case 8: return d_bits((double)f);
    case 6: case 9: case 10: case 11: return ref_enc(dt, f);
    default: return (uint64_t)(r + 3) & int_mask(dt);
    }
}

static uint64_t ref_fold(int dt, int op, size_t i, size_t base, int salt)
{
    uint64_t acc = 0;
    int sop = (op == OP_AVG || op == OP_PREMUL) ? OP_SUM : op;
    for (int r = 0; r < g_n; r++) {
        uint64_t x = gen(dt, r, base + i, salt);
        if (op == OP_PREMUL)
            x = ref_step(dt, OP_PROD, x, scalar_for(dt, r));
        acc = r == 0 ? x : ref_step(dt, sop, acc, x);
    }
    return ref_finish(dt, op, g_n, acc);
}

static uint64_t g_fnv = 0xcbf29ce484222325ULL;
static void digest(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g_fnv = (g_fnv ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
}

/* A result read back and hashed into this rank's digest ("coll": every
 * result is placement-independent, so the digest is too). */
static CUresult get_hashed(void *dst, CUdeviceptr src, size_t bytes)
{
    CUresult r = cuMemcpyDtoH(dst, src, bytes);
    if (r == CUDA_SUCCESS)
        digest(dst, bytes);
    return r;
}

/* ---- mode: types ---------------------------------------------------------------- */

static int check(int dt, const void *got, size_t n, size_t base, int op, int salt,
                 const char *what)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t w = ref_fold(dt, op, i, base, salt), g = load(dt, got, i);
        if (w != g)
            FAILF("%s dtype %d op %d element %zu: got 0x%llx, rank-order reference 0x%llx", what,
                  dt, op, i, (unsigned long long)g, (unsigned long long)w);
    }
    digest(got, n * tsize[dt]);
    return 0;
}

static int mode_types(ncclComm_t comm, CUstream st)
{
    const size_t N = 1237;
    const size_t maxb = N * 8 * (size_t)g_n;
    char *h = malloc(maxb), *o = malloc(maxb);
    CUdeviceptr s, r, sc;
    CU(cuMemAlloc(&s, maxb));
    CU(cuMemAlloc(&r, maxb));
    CU(cuMemAlloc(&sc, 8));
    /* operation-major: plain sums of every type come first */
    for (int op = 0; op <= OP_PREMUL + 1; op++) {
        for (int dt = 0; dt < 12; dt++) {
            size_t es = tsize[dt];
            int rop = op > OP_PREMUL ? OP_PREMUL : op;
            ncclRedOp_t nop = (ncclRedOp_t)op;
            if (rop == OP_PREMUL) {
                uint64_t sv = scalar_for(dt, g_rank);
                if (op == OP_PREMUL) {
                    NC(ncclRedOpCreatePreMulSum(&nop, &sv, (ncclDataType_t)dt,
                                                ncclScalarHostImmediate, comm));
                } else {
                    CU(cuMemcpyHtoD(sc, &sv, es));
                    NC(ncclRedOpCreatePreMulSum(&nop, (void *)sc, (ncclDataType_t)dt,
                                                ncclScalarDevice, comm));
                }
            }
            int salt = op * 3;
            /* all-reduce, out of place */
            for (size_t i = 0; i < N; i++)
                store(dt, h, i, gen(dt, g_rank, i, salt));
            CU(cuMemcpyHtoD(s, h, N * es));
            NC(ncclAllReduce((void *)s, (void *)r, N, (ncclDataType_t)dt, nop, comm, st));
            CU(cuStreamSynchronize(st));
            CU(cuMemcpyDtoH(o, r, N * es));
            if (check(dt, o, N, 0, rop, salt, "allreduce"))
                return 1;
            /* all-reduce, in place */
            NC(ncclAllReduce((void *)s, (void *)s, N, (ncclDataType_t)dt, nop, comm, st));
            CU(cuStreamSynchronize(st));
            CU(cuMemcpyDtoH(o, s, N * es));
            if (check(dt, o, N, 0, rop, salt, "allreduce in place"))
                return 1;
            /* reduce to root 1 */
            salt = op * 3 + 1;
            for (size_t i = 0; i < N; i++)
                store(dt, h, i, gen(dt, g_rank, i, salt));
            CU(cuMemcpyHtoD(s, h, N * es));
            CU(cuMemsetD8(r, 0xa5, N * es));
            NC(ncclReduce((void *)s, (void *)r, N, (ncclDataType_t)dt, nop, 1 % g_n, comm, st));
            CU(cuStreamSynchronize(st));
            if (g_rank == 1 % g_n) {
                CU(cuMemcpyDtoH(o, r, N * es));
                if (check(dt, o, N, 0, rop, salt, "reduce"))
                    return 1;
            }
            /* reduce-scatter: block b of every rank's input */
            salt = op * 3 + 2;
            for (size_t i = 0; i < N * (size_t)g_n; i++)
                store(dt, h, i, gen(dt, g_rank, i, salt));
            CU(cuMemcpyHtoD(s, h, N * (size_t)g_n * es));
            NC(ncclReduceScatter((void *)s, (void *)r, N, (ncclDataType_t)dt, nop, comm, st));
            CU(cuStreamSynchronize(st));
            CU(cuMemcpyDtoH(o, r, N * es));
            if (check(dt, o, N, N * (size_t)g_rank, rop, salt, "reduce-scatter"))
                return 1;
            if (rop == OP_PREMUL)
                NC(ncclRedOpDestroy(nop, comm));
        }
    }
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    CU(cuMemFree(sc));
    free(h);
    free(o);
    return 0;
}

/* ---- mode: coll ------------------------------------------------------------------ */

static float fval(int r, size_t i, int salt)
{
    /* order-sensitive: magnitudes from 2^-12 to 2^12 */
    uint64_t x = mix(((uint64_t)r << 32) ^ ((uint64_t)salt << 50) ^ i);
    return ldexpf((float)((x >> 11) & 0xffffff) / 16777216.0f + 0.5f, (int)((x >> 40) % 25) - 12) *
           ((x & 1) ? -1.0f : 1.0f);
}

static float fsum(size_t i, int salt, const int *order, int n)
{
    float acc = 0;
    for (int k = 0; k < n; k++)
        acc = k == 0 ? fval(order[k], i, salt) : acc + fval(order[k], i, salt);
    return acc;
}

static int feq(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0)
            FAILF("%s: element %zu is %a, expected %a", what, i, got[i], want[i]);
    return 0;
}

static int allreduce_check(ncclComm_t comm, CUstream st, const int *order, int n, int me,
                           size_t cnt, int salt, const char *what)
{
    float *h = malloc(cnt * 4), *w = malloc(cnt * 4);
    CUdeviceptr b;
    CU(cuMemAlloc(&b, cnt * 4));
    for (size_t i = 0; i < cnt; i++)
        h[i] = fval(me, i, salt);
    CU(cuMemcpyHtoD(b, h, cnt * 4));
    NC(ncclAllReduce((void *)b, (void *)b, cnt, ncclFloat, ncclSum, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(h, b, cnt * 4));
    for (size_t i = 0; i < cnt; i++)
        w[i] = fsum(i, salt, order, n);
    int rc = feq(h, w, cnt, what);
    CU(cuMemFree(b));
    free(h);
    free(w);
    return rc;
}

static int mode_coll(ncclComm_t comm, CUstream st, CUdevice dev)
{
    const int n = g_n, me = g_rank;
    const size_t C = 3001;
    int ord[MAXR];
    for (int i = 0; i < n; i++)
        ord[i] = i;
    size_t big = (size_t)n * 80000; /* floats: several staging chunks */
    float *h = malloc(big * 4), *w = malloc(big * 4);
    CUdeviceptr a, b, c2;
    CU(cuMemAlloc(&a, big * 4));
    CU(cuMemAlloc(&b, big * 4));
    CU(cuMemAlloc(&c2, big * 4));

    /* queries */
    int v, cnt, ur, cd;
    NC(ncclGetVersion(&v));
    NC(ncclCommCount(comm, &cnt));
    NC(ncclCommUserRank(comm, &ur));
    NC(ncclCommCuDevice(comm, &cd));
    if (v < 20000 || cnt != n || ur != me || cd != (int)dev)
        FAILF("queries: version %d count %d rank %d device %d (want %d %d %d)", v, cnt, ur, cd, n,
              me, (int)dev);
    if (ncclAllReduce((void *)a, (void *)a, 4, (ncclDataType_t)77, ncclSum, comm, st) !=
            ncclInvalidArgument ||
        !ncclGetLastError(NULL) || !*ncclGetLastError(NULL))
        FAILF("a bogus datatype was not refused with a message");
    if (ncclBroadcast((void *)a, (void *)a, 4, ncclFloat, n, comm, st) != ncclInvalidArgument)
        FAILF("a bogus root was not refused");
    if (ncclAllReduce((void *)a, (void *)a, 4, ncclFloat, (ncclRedOp_t)(ncclNumOps + 40), comm,
                      st) != ncclInvalidArgument)
        FAILF("an unknown operator was not refused");
    void *reg = NULL;
    NC(ncclCommRegister(comm, (void *)a, 4096, &reg));
    NC(ncclCommDeregister(comm, reg));
    void *mem = NULL;
    NC(ncclMemAlloc(&mem, 1 << 20));
    NC(ncclMemFree(mem));

    /* order-sensitive all-reduce, odd count, in place */
    if (allreduce_check(comm, st, ord, n, me, C, 1, "allreduce"))
        return 1;
    /* and large (several chunks) */
    if (allreduce_check(comm, st, ord, n, me, big, 2, "allreduce large"))
        return 1;

    /* broadcast from 2 (non-roots pass no send buffer), ncclBcast in place */
    for (size_t i = 0; i < C; i++)
        h[i] = fval(me, i, 3);
    CU(cuMemcpyHtoD(a, h, C * 4));
    NC(ncclBroadcast(me == 2 % n ? (void *)a : NULL, (void *)b, C, ncclFloat, 2 % n, comm, st));
    NC(ncclBcast((void *)a, C, ncclFloat, 0, comm, st));
    CU(cuStreamSynchronize(st));
    CU(get_hashed(h, b, C * 4));
    for (size_t i = 0; i < C; i++)
        w[i] = fval(2 % n, i, 3);
    if (feq(h, w, C, "broadcast"))
        return 1;
    CU(get_hashed(h, a, C * 4));
    for (size_t i = 0; i < C; i++)
        w[i] = fval(0, i, 3);
    if (feq(h, w, C, "bcast in place"))
        return 1;

    /* all-gather, in place (send is my block of recv) */
    for (size_t i = 0; i < C; i++)
        h[i] = fval(me, i, 4);
    CU(cuMemcpyHtoD(a + (size_t)me * C * 4, h, C * 4));
    NC(ncclAllGather((void *)(a + (size_t)me * C * 4), (void *)a, C, ncclFloat, comm, st));
    CU(cuStreamSynchronize(st));
    CU(get_hashed(h, a, (size_t)n * C * 4));
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < C; i++)
            w[(size_t)q * C + i] = fval(q, i, 4);
    if (feq(h, w, (size_t)n * C, "allgather in place"))
        return 1;

    /* reduce-scatter, in place (recv is my block of send) */
    for (size_t i = 0; i < (size_t)n * C; i++)
        h[i] = fval(me, i, 5);
    CU(cuMemcpyHtoD(a, h, (size_t)n * C * 4));
    NC(ncclReduceScatter((void *)a, (void *)(a + (size_t)me * C * 4), C, ncclFloat, ncclSum, comm,
                         st));
    CU(cuStreamSynchronize(st));
    CU(get_hashed(h, a + (size_t)me * C * 4, C * 4));
    for (size_t i = 0; i < C; i++)
        w[i] = fsum((size_t)me * C + i, 5, ord, n);
    if (feq(h, w, C, "reduce-scatter in place"))
        return 1;

    /* a group: two all-reduces on two streams, a ring of large send/recv,
     * and a send/recv to self */
    CUstream st2;
    CU(cuStreamCreate(&st2, CU_STREAM_NON_BLOCKING));
    size_t P = 70001; /* floats: more than one point-to-point chunk */
    for (size_t i = 0; i < C; i++)
        h[i] = fval(me, i, 6);
    CU(cuMemcpyHtoD(a, h, C * 4));
    CU(cuMemcpyHtoD(a + C * 4, h, C * 4));
    for (size_t i = 0; i < P; i++)
        h[i] = fval(me, i, 7);
    CU(cuMemcpyHtoD(b, h, P * 4));
    NC(ncclGroupStart());
    NC(ncclAllReduce((void *)a, (void *)a, C, ncclFloat, ncclSum, comm, st));
    NC(ncclAllReduce((void *)(a + C * 4), (void *)(a + C * 4), C, ncclFloat, ncclAvg, comm, st2));
    NC(ncclSend((void *)b, P, ncclFloat, (me + 1) % n, comm, st));
    NC(ncclRecv((void *)c2, P, ncclFloat, (me + n - 1) % n, comm, st2));
    NC(ncclSend((void *)b, 17, ncclFloat, me, comm, st));
    NC(ncclRecv((void *)(c2 + P * 4), 17, ncclFloat, me, comm, st));
    NC(ncclGroupEnd());
    CU(cuStreamSynchronize(st));
    CU(cuStreamSynchronize(st2));
    CU(get_hashed(h, a, 2 * C * 4));
    for (size_t i = 0; i < C; i++) {
        w[i] = fsum(i, 6, ord, n);
        w[C + i] = w[i] / (float)n;
    }
    if (feq(h, w, 2 * C, "group allreduce sum and avg"))
        return 1;
    CU(get_hashed(h, c2, (P + 17) * 4));
    for (size_t i = 0; i < P; i++)
        w[i] = fval((me + n - 1) % n, i, 7);
    for (size_t i = 0; i < 17; i++)
        w[P + i] = fval(me, i, 7);
    if (feq(h, w, P + 17, "group send/recv ring and self"))
        return 1;

    /* two sends to the same peer and two receives from the same peer in one
     * group, each several point-to-point chunks: matched in issue order */
    size_t P1 = 30011, P2 = 45007;
    for (size_t i = 0; i < P1 + P2; i++)
        h[i] = fval(me, i, 13);
    CU(cuMemcpyHtoD(b, h, (P1 + P2) * 4));
    NC(ncclGroupStart());
    NC(ncclRecv((void *)c2, P1, ncclFloat, (me + n - 1) % n, comm, st));
    NC(ncclSend((void *)b, P1, ncclFloat, (me + 1) % n, comm, st));
    NC(ncclSend((void *)(b + P1 * 4), P2, ncclFloat, (me + 1) % n, comm, st));
    NC(ncclRecv((void *)(c2 + P1 * 4), P2, ncclFloat, (me + n - 1) % n, comm, st));
    NC(ncclGroupEnd());
    CU(cuStreamSynchronize(st));
    CU(get_hashed(h, c2, (P1 + P2) * 4));
    for (size_t i = 0; i < P1 + P2; i++)
        w[i] = fval((me + n - 1) % n, i, 13);
    if (feq(h, w, P1 + P2, "two sends and receives to one peer"))
        return 1;

    /* all-to-all, gather to 1, scatter from n-1 */
    size_t A = 513;
    for (size_t i = 0; i < (size_t)n * A; i++)
        h[i] = fval(me, i, 8);
    CU(cuMemcpyHtoD(a, h, (size_t)n * A * 4));
    NC(ncclAlltoAll((void *)a, (void *)b, A, ncclFloat, comm, st));
    CU(cuStreamSynchronize(st));
    CU(get_hashed(h, b, (size_t)n * A * 4));
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < A; i++)
            w[(size_t)q * A + i] = fval(q, (size_t)me * A + i, 8);
    if (feq(h, w, (size_t)n * A, "alltoall"))
        return 1;
    NC(ncclGather((void *)a, (void *)b, A, ncclFloat, 1 % n, comm, st));
    NC(ncclScatter((void *)a, (void *)c2, A, ncclFloat, n - 1, comm, st));
    CU(cuStreamSynchronize(st));
    if (me == 1 % n) {
        CU(get_hashed(h, b, (size_t)n * A * 4));
        for (int q = 0; q < n; q++)
            for (size_t i = 0; i < A; i++)
                w[(size_t)q * A + i] = fval(q, i, 8);
        if (feq(h, w, (size_t)n * A, "gather"))
            return 1;
    }
    CU(get_hashed(h, c2, A * 4));
    for (size_t i = 0; i < A; i++)
        w[i] = fval(n - 1, (size_t)me * A + i, 8);
    if (feq(h, w, A, "scatter"))
        return 1;

    /* a second communicator (its id from rank 0), used interleaved */
    if (me == 0) {
        NC(ncclGetUniqueId(&g_sh->id[1]));
        __atomic_store_n(&g_sh->ready[1], 1, __ATOMIC_RELEASE);
    }
    while (!__atomic_load_n(&g_sh->ready[1], __ATOMIC_ACQUIRE))
        usleep(1000);
    ncclComm_t c2c;
    NC(ncclCommInitRank(&c2c, n, g_sh->id[1], me));
    if (allreduce_check(c2c, st2, ord, n, me, C, 9, "second communicator") ||
        allreduce_check(comm, st, ord, n, me, C, 10, "first communicator again"))
        return 1;

    /* split: colors by parity, the last rank out; key reverses the order */
    int color = me == n - 1 ? NCCL_SPLIT_NOCOLOR : me % 2;
    ncclComm_t sub = NULL;
    NC(ncclCommSplit(comm, color, -me, &sub, NULL));
    if (color == NCCL_SPLIT_NOCOLOR) {
        if (sub)
            FAILF("split with NCCL_SPLIT_NOCOLOR returned a communicator");
    } else {
        int so[MAXR], sn = 0;
        for (int q = n - 2; q >= 0; q--) /* keys -q ascending: descending ranks */
            if (q % 2 == color)
                so[sn++] = q;
        int sr = -1, sc = 0;
        NC(ncclCommUserRank(sub, &sr));
        NC(ncclCommCount(sub, &sc));
        int want = -1;
        for (int k = 0; k < sn; k++)
            if (so[k] == me)
                want = k;
        if (sc != sn || sr != want)
            FAILF("split: rank %d of %d, expected %d of %d", sr, sc, want, sn);
        if (allreduce_check(sub, st, so, sn, me, C, 11, "split allreduce"))
            return 1;
        NC(ncclCommDestroy(sub));
    }

    /* non-blocking init */
    if (me == 0) {
        NC(ncclGetUniqueId(&g_sh->id[2]));
        __atomic_store_n(&g_sh->ready[2], 1, __ATOMIC_RELEASE);
    }
    while (!__atomic_load_n(&g_sh->ready[2], __ATOMIC_ACQUIRE))
        usleep(1000);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nb = NULL;
    ncclResult_t ir = ncclCommInitRankConfig(&nb, n, g_sh->id[2], me, &cfg);
    if (ir != ncclSuccess && ir != ncclInProgress)
        FAILF("non-blocking init returned %d", (int)ir);
    ncclResult_t as = ncclInProgress;
    for (int k = 0; k < 30000 && as == ncclInProgress; k++) {
        NC(ncclCommGetAsyncError(nb, &as));
        if (as == ncclInProgress)
            usleep(1000);
    }
    if (as != ncclSuccess)
        FAILF("non-blocking init ended with %d", (int)as);
    if (allreduce_check(nb, st, ord, n, me, C, 12, "non-blocking communicator"))
        return 1;

    NC(ncclCommFinalize(nb));
    NC(ncclCommDestroy(nb));
    NC(ncclCommDestroy(c2c));
    CU(cuStreamDestroy(st2));
    CU(cuMemFree(a));
    CU(cuMemFree(b));
    CU(cuMemFree(c2));
    free(h);
    free(w);
    return 0;
}

/* ---- faults -------------------------------------------------------------------- */

/* Polls the stream and the communicator (30 s at most): returns the async
 * error (ncclSuccess if none came). */
static ncclResult_t poll_error(ncclComm_t comm, CUstream st)
{
    ncclResult_t e = ncclSuccess;
    for (int k = 0; k < 3000; k++) {
        CUresult q = cuStreamQuery(st);
        ncclCommGetAsyncError(comm, &e);
        if (e != ncclSuccess && e != ncclInProgress)
            return e;
        if (q == CUDA_SUCCESS && k > 0) {
            ncclCommGetAsyncError(comm, &e);
            return e;
        }
        usleep(10000);
    }
    return e;
}

static int mode_fault(ncclComm_t comm, CUstream st)
{
    const size_t C = 4099;
    int ord[MAXR];
    for (int i = 0; i < g_n; i++)
        ord[i] = i;
    if (allreduce_check(comm, st, ord, g_n, g_rank, C, 1, "first allreduce"))
        return 1;
    int mid = strcmp(g_mode, "killmid") == 0;
    int victim = strcmp(g_mode, "kill") == 0 || mid ? 2 % g_n : 1 % g_n;
    if (g_rank == victim && !mid) {
        if (strcmp(g_mode, "kill") == 0) {
            fflush(stdout);
            raise(SIGKILL);
        }
        if (strcmp(g_mode, "abort") == 0) {
            NC(ncclCommAbort(comm));
            printf("rank %d: aborted\n", g_rank);
            return 0;
        }
        sleep(5); /* timeout: late, then the communicator is dead for it too */
    }
    const size_t C2 = mid ? (size_t)8 << 20 : C; /* killmid: several chunks and pieces */
    CUdeviceptr b;
    CU(cuMemAlloc(&b, C2 * 4));
    CU(cuMemsetD32(b, 0, C2));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ncclResult_t r = ncclAllReduce((void *)b, (void *)b, C2, ncclFloat, ncclSum, comm, st);
    if (mid && g_rank == victim) { /* dies while its stream is somewhere inside */
        usleep(20000);
        fflush(stdout);
        raise(SIGKILL);
    }
    ncclResult_t e = r;
    if (e == ncclSuccess && mid) {
        /* the stream's end, then one look: its outputs are the operation's
         * only once the communicator knows of no failure */
        CUresult q = cuStreamSynchronize(st);
        ncclCommGetAsyncError(comm, &e);
        if (q != CUDA_SUCCESS)
            FAILF("the stream of the failed all-reduce: CUresult %d", (int)q);
    } else if (e == ncclSuccess) {
        e = poll_error(comm, st);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    ncclResult_t want = strcmp(g_mode, "timeout") == 0 && g_rank != victim ? ncclSystemError
                                                                            : ncclRemoteError;
    printf("rank %d: second allreduce: %s after %.2f s (%s)\n", g_rank, ncclGetErrorString(e), dt,
           ncclGetLastError(NULL));
    if (e != want && !(g_rank == victim && e != ncclSuccess))
        FAILF("expected %s, got %s", ncclGetErrorString(want), ncclGetErrorString(e));
    /* later calls fail at once, the stream drains */
    ncclResult_t again = ncclAllReduce((void *)b, (void *)b, C, ncclFloat, ncclSum, comm, st);
    if (again == ncclSuccess)
        FAILF("a later allreduce on the failed communicator succeeded");
    CU(cuStreamSynchronize(st));
    NC(ncclCommAbort(comm));
    CU(cuMemFree(b));
    return 0;
}

/* sigmove: after a first all-reduce every rank asks for a move of itself
 * to the next GPU with SIGUSR1 (run with EASYSCALE_MOVE_SIGNAL=SIGUSR1: the
 * sigqueue value is the target device), makes a CUDA call (where the move
 * happens, or is refused), and a second all-reduce must give the
 * rank-ordered sums. */
static int mode_sigmove(ncclComm_t comm, CUstream st)
{
    const size_t C = 4099;
    int ord[MAXR], nd = 0;
    for (int i = 0; i < g_n; i++)
        ord[i] = i;
    if (allreduce_check(comm, st, ord, g_n, g_rank, C, 1, "first allreduce"))
        return 1;
    CU(cuDeviceGetCount(&nd));
    union sigval v = { .sival_int = (g_rank + 1) % nd };
    if (sigqueue(getpid(), SIGUSR1, v) != 0)
        FAILF("sigqueue: %s", strerror(errno));
    CU(cuCtxSynchronize());
    return allreduce_check(comm, st, ord, g_n, g_rank, C, 2, "second allreduce");
}

/* selfmove: 12 all-reduces; before the 3rd, rank 1 asks for a move of
 * itself to the next GPU through easyscale_move (0: moved at once; 1: at a
 * hold of every rank, agreed without a controller). The first three wait
 * for their sums, so no rank is past the 3rd then: the hold is at the 3rd
 * or the 4th. selfmove-stall: the same, but from the 4th on every rank
 * enqueues its all-reduces without waiting for them, and rank 3 stays
 * away 8 s before the 3rd and before the 4th (longer than the
 * EASYSCALE_HOLD_TIMEOUT the test sets) while the others reach the hold:
 * it is given up. Every sum must be the rank-ordered one; rank 1 prints
 * where it ends. */
static int mode_selfmove(ncclComm_t comm, CUstream st, int stall)
{
    enum { K = 12 };
    const size_t C = 4099;
    int ord[MAXR], nd = 0, target = -9, got = -99;
    for (int i = 0; i < g_n; i++)
        ord[i] = i;
    CU(cuDeviceGetCount(&nd));
    int (*mv)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "easyscale_move");
    int (*where)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "easyscale_where");
    if (!mv || !where)
        FAILF("easyscale_move / easyscale_where not found: run under libeasyscale.so");
    CUdeviceptr b[K];
    float *h = malloc(C * 4), *w = malloc(C * 4);
    for (int k = 0; k < K; k++) {
        char what[32];
        snprintf(what, sizeof what, "allreduce %d", k);
        if (k == 2 && g_rank == 1) {
            target = (where() + 1) % nd;
            got = mv(target);
            printf("rank 1: easyscale_move(%d) = %d\n", target, got);
        }
        if (stall && g_rank == 3 && (k == 2 || k == 3))
            sleep(8); /* away from the hold, wherever it is */
        if (!stall || k < 3) {
            if (allreduce_check(comm, st, ord, g_n, g_rank, C, 10 + k, what))
                return 1;
            continue;
        }
        for (size_t i = 0; i < C; i++)
            h[i] = fval(g_rank, i, 10 + k);
        CU(cuMemAlloc(&b[k], C * 4));
        CU(cuMemcpyHtoD(b[k], h, C * 4));
        NC(ncclAllReduce((void *)b[k], (void *)b[k], C, ncclFloat, ncclSum, comm, st));
    }
    CU(cuStreamSynchronize(st));
    for (int k = 3; stall && k < K; k++) {
        char what[32];
        snprintf(what, sizeof what, "allreduce %d", k);
        CU(cuMemcpyDtoH(h, b[k], C * 4));
        for (size_t i = 0; i < C; i++)
            w[i] = fsum(i, 10 + k, ord, g_n);
        if (feq(h, w, C, what))
            return 1;
        CU(cuMemFree(b[k]));
    }
    free(h);
    free(w);
    if (g_rank == 1)
        printf("rank 1: where %d (asked %d)\n", where(), target);
    return 0;
}

/* ---- stream order --------------------------------------------------------------- */

static void CUDA_CB host_mark(void *p)
{
    __atomic_store_n((volatile int *)p, 1, __ATOMIC_RELEASE);
}

static int mode_order(ncclComm_t comm, CUstream st, int blocking)
{
    const size_t C = 3 * 65536 + 7; /* floats: several staging chunks */
    const int n = g_n, me = g_rank;
    int ord[MAXR];
    for (int i = 0; i < n; i++)
        ord[i] = i;
    float *in = NULL, *out = NULL;
    CU(cuMemAllocHost((void **)&in, C * 4));
    CU(cuMemAllocHost((void **)&out, C * 4));
    for (size_t i = 0; i < C; i++) {
        in[i] = fval(me, i, 30);
        out[i] = -1.0f;
    }
    CUdeviceptr s, r;
    CU(cuMemAlloc(&s, C * 4));
    CU(cuMemAlloc(&r, C * 4));
    if (me != 0) {
        /* the peers call only after rank 0's call has returned */
        int waited = 0, limit = blocking ? 5000 : 120000;
        while (!__atomic_load_n(&g_sh->called, __ATOMIC_ACQUIRE) && waited < limit) {
            usleep(1000);
            waited++;
        }
        if (!__atomic_load_n(&g_sh->called, __ATOMIC_ACQUIRE))
            FAILF("rank 0's ncclAllReduce did not return before its peers called theirs "
                  "(gave up after %d s)", limit / 1000);
    }
    /* earlier work on the stream (not synchronised), the all-reduce, later
     * work */
    CU(cuMemsetD32Async(r, 0x7fc0dead, C, st));
    CU(cuMemcpyHtoDAsync(s, in, C * 4, st));
    NC(ncclAllReduce((void *)s, (void *)r, C, ncclFloat, ncclSum, comm, st));
    if (me == 0 && blocking)
        cuStreamSynchronize(st); /* what a blocking collective would do */
    CU(cuMemcpyDtoHAsync(out, r, C * 4, st));
    if (me == 0) {
        /* no peer has called: the all-reduce, and the copy after it,
         * cannot be done */
        CUresult q = cuStreamQuery(st);
        /* while it waits for its peers, host functions of the process
         * still run: one on another stream of the context completes */
        CUresult h = CUDA_SUCCESS, q2 = CUDA_SUCCESS;
        volatile int ran = 0;
        CUstream other;
        if (!blocking) {
            h = cuStreamCreate(&other, CU_STREAM_NON_BLOCKING);
            if (h == CUDA_SUCCESS)
                h = cuLaunchHostFunc(other, host_mark, (void *)&ran);
            if (h == CUDA_SUCCESS)
                h = cuStreamSynchronize(other);
            q2 = cuStreamQuery(st);
            if (h == CUDA_SUCCESS)
                h = cuStreamDestroy(other);
        }
        __atomic_store_n(&g_sh->called, 1, __ATOMIC_RELEASE);
        if (q != CUDA_ERROR_NOT_READY)
            FAILF("rank 0's stream is %d, not CUDA_ERROR_NOT_READY, before the peers called",
                  (int)q);
        if (!blocking && (h != CUDA_SUCCESS || !ran))
            FAILF("a host function on another stream did not run while the all-reduce waited "
                  "(CUresult %d)", (int)h);
        if (!blocking && q2 != CUDA_ERROR_NOT_READY)
            FAILF("rank 0's stream is %d, not CUDA_ERROR_NOT_READY, after the other stream's "
                  "host function", (int)q2);
    }
    CU(cuStreamSynchronize(st));
    for (size_t i = 0; i < C; i++) {
        float w = fsum(i, 30, ord, n);
        if (memcmp(&out[i], &w, 4) != 0)
            FAILF("order: element %zu is %a, rank-order reference %a", i, out[i], w);
    }
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    CU(cuMemFreeHost(in));
    CU(cuMemFreeHost(out));
    return 0;
}

/* ---- a stream under capture ------------------------------------------------------- */

static int mode_capture(ncclComm_t comm, CUstream st)
{
    const size_t C = 1031, H = C / 2;
    int ord[MAXR];
    for (int i = 0; i < g_n; i++)
        ord[i] = i;
    CUdeviceptr b, m;
    CU(cuMemAlloc(&b, C * 4));
    CU(cuMemAlloc(&m, C * 4));
    /* the communicator at work before the capture (its sums are checked
     * after it: here any NCCL gets to the capture) */
    CU(cuMemsetD32(b, 0x3f800000u, C));
    NC(ncclAllReduce((void *)b, (void *)b, C, ncclFloat, ncclSum, comm, st));
    CU(cuStreamSynchronize(st));
    CU(cuMemsetD32(m, 0, C));
    CU(cuCtxSynchronize());
    CU(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUresult m1 = cuMemsetD32Async(m, 0x3f800000u, H, st); /* 1.0f */
    ncclResult_t alone = ncclAllReduce((void *)b, (void *)b, C, ncclFloat, ncclSum, comm, st);
    char why[256];
    snprintf(why, sizeof why, "%s", ncclGetLastError(comm) ? ncclGetLastError(comm) : "");
    ncclResult_t gs = ncclGroupStart();
    ncclResult_t grouped = ncclAllReduce((void *)b, (void *)b, C, ncclFloat, ncclSum, comm, st);
    ncclResult_t ge = ncclGroupEnd();
    CUresult m2 = cuMemsetD32Async(m + H * 4, 0x40000000u, C - H, st); /* 2.0f */
    CUgraph g = NULL;
    CUresult end = cuStreamEndCapture(st, &g);
    printf("rank %d: allreduce under capture: %s (%s); in a group: %s, group end %s; "
           "end of capture %d\n",
           g_rank, ncclGetErrorString(alone), why, ncclGetErrorString(grouped),
           ncclGetErrorString(ge), (int)end);
    if (m1 != CUDA_SUCCESS || m2 != CUDA_SUCCESS)
        FAILF("memset under capture: %d, %d", (int)m1, (int)m2);
    if (alone != ncclInvalidUsage)
        FAILF("allreduce under capture: %s, expected ncclInvalidUsage",
              ncclGetErrorString(alone));
    if (!strstr(why, "captur"))
        FAILF("ncclGetLastError names no capture: '%s'", why);
    if (gs != ncclSuccess || grouped != ncclInvalidUsage || ge != ncclInvalidUsage)
        FAILF("grouped allreduce under capture: start %s, call %s, end %s (expected "
              "ncclInvalidUsage from the call and the group end)", ncclGetErrorString(gs),
              ncclGetErrorString(grouped), ncclGetErrorString(ge));
    if (end != CUDA_SUCCESS || !g)
        FAILF("the capture did not survive: cuStreamEndCapture %d", (int)end);
    size_t nn = 0;
    CU(cuGraphGetNodes(g, NULL, &nn));
    if (nn != 2)
        FAILF("the graph has %zu nodes, expected the 2 memsets", nn);
    CUgraphExec x;
    CU(cuGraphInstantiate(&x, g, 0));
    CU(cuGraphLaunch(x, st));
    CU(cuStreamSynchronize(st));
    float *h = malloc(C * 4);
    if (!h)
        FAILF("out of memory");
    CU(cuMemcpyDtoH(h, m, C * 4));
    for (size_t i = 0; i < C; i++)
        if (h[i] != (i < H ? 1.0f : 2.0f)) {
            float v = h[i];
            free(h);
            FAILF("replayed graph: element %zu is %g", i, (double)v);
        }
    free(h);
    CU(cuGraphExecDestroy(x));
    CU(cuGraphDestroy(g));
    CU(cuMemFree(b));
    CU(cuMemFree(m));
    /* the communicator is untouched: the next all-reduce sums as before */
    return allreduce_check(comm, st, ord, g_n, g_rank, C, 41, "allreduce after the capture");
}

/* ---- ranks ------------------------------------------------------------------------- */

static int rank_main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    int ndev = 0;
    CU(cuInit(0));
    CU(cuDeviceGetCount(&ndev));
    CU(cuDeviceGet(&dev, g_rank % ndev));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    if (strcmp(g_mode, "stale") == 0) {
        if (g_rank == 1) {
            printf("rank 1: ok\n");
            return 0; /* never joins */
        }
        ncclComm_t c;
        alarm(2); /* dies (SIGALRM) while it waits for rank 1 */
        ncclCommInitRank(&c, 2, g_sh->id[0], 0);
        FAILF("a communicator of 2 formed with one rank");
    }
    ncclComm_t comm;
    NC(ncclCommInitRank(&comm, g_n, g_sh->id[0], g_rank));
    int rc;
    if (strcmp(g_mode, "types") == 0)
        rc = mode_types(comm, st);
    else if (strcmp(g_mode, "coll") == 0)
        rc = mode_coll(comm, st, dev);
    else if (strcmp(g_mode, "capture") == 0)
        rc = mode_capture(comm, st);
    else if (strcmp(g_mode, "order") == 0 || strcmp(g_mode, "order-blocking") == 0)
        rc = mode_order(comm, st, strcmp(g_mode, "order-blocking") == 0);
    else if (strcmp(g_mode, "sigmove") == 0)
        rc = mode_sigmove(comm, st);
    else if (strcmp(g_mode, "selfmove") == 0 || strcmp(g_mode, "selfmove-stall") == 0)
        rc = mode_selfmove(comm, st, strcmp(g_mode, "selfmove-stall") == 0);
    else
        return mode_fault(comm, st);
    if (rc)
        return rc;
    NC(ncclCommDestroy(comm));
    CU(cuStreamDestroy(st));
    snprintf(g_sh->digest[g_rank], sizeof(g_sh->digest[0]), "%016llx", (unsigned long long)g_fnv);
    return 0;
}

/* One process, every rank: ncclCommInitAll and a grouped all-reduce. */
static int mode_initall(void)
{
    CU(cuInit(0));
    ncclComm_t comms[MAXR];
    int devs[MAXR], ndev = 0;
    CU(cuDeviceGetCount(&ndev));
    for (int r = 0; r < g_n; r++)
        devs[r] = r % ndev; /* several ranks per GPU where there are fewer GPUs */
    NC(ncclCommInitAll(comms, g_n, devs));
    CUstream st[MAXR];
    CUdeviceptr b[MAXR];
    CUcontext ctx[MAXR];
    const size_t C = 2049;
    float *h = malloc(C * 4), *w = malloc(C * 4);
    int ord[MAXR];
    for (int r = 0; r < g_n; r++) {
        ord[r] = r;
        CUdevice d;
        int cd;
        NC(ncclCommCuDevice(comms[r], &cd));
        CU(cuDeviceGet(&d, cd));
        CU(cuDevicePrimaryCtxRetain(&ctx[r], d));
        CU(cuCtxSetCurrent(ctx[r]));
        CU(cuStreamCreate(&st[r], CU_STREAM_NON_BLOCKING));
        CU(cuMemAlloc(&b[r], C * 4));
        for (size_t i = 0; i < C; i++)
            h[i] = fval(r, i, 20);
        CU(cuMemcpyHtoD(b[r], h, C * 4));
    }
    NC(ncclGroupStart());
    for (int r = 0; r < g_n; r++)
        NC(ncclAllReduce((void *)b[r], (void *)b[r], C, ncclFloat, ncclSum, comms[r], st[r]));
    NC(ncclGroupEnd());
    for (size_t i = 0; i < C; i++)
        w[i] = fsum(i, 20, ord, g_n);
    for (int r = 0; r < g_n; r++) {
        g_rank = r;
        CU(cuCtxSetCurrent(ctx[r]));
        CU(cuStreamSynchronize(st[r]));
        CU(cuMemcpyDtoH(h, b[r], C * 4));
        if (feq(h, w, C, "initall allreduce"))
            return 1;
        printf("rank %d: ok\n", r);
    }
    for (int r = 0; r < g_n; r++)
        NC(ncclCommDestroy(comms[r]));
    free(h);
    free(w);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3) {
        fprintf(stderr, "usage: coll_client types|coll|initall|kill|killmid|sigmove|selfmove|selfmove-stall|"
                        "abort|timeout|stale|"
                        "capture|"
                        "order|order-blocking NRANKS\n");
        return 2;
    }
    g_mode = argv[1];
    g_n = atoi(argv[2]);
    if (g_n < 1 || g_n > MAXR) {
        fprintf(stderr, "coll_client: NRANKS must be 1..%d\n", MAXR);
        return 2;
    }
    if (strcmp(g_mode, "initall") == 0) {
        int rc = mode_initall();
        printf("done\n");
        return rc;
    }
    g_sh = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED)
        return 1;
    memset(g_sh, 0, sizeof(*g_sh));
    pid_t pids[MAXR];
    for (int r = 0; r < g_n; r++) {
        pids[r] = fork();
        if (pids[r] < 0)
            return 1;
        if (pids[r] == 0) {
            g_rank = r;
            if (r == 0) {
                if (ncclGetUniqueId(&g_sh->id[0]) != ncclSuccess) {
                    printf("rank 0: FAIL ncclGetUniqueId\n");
                    _exit(1);
                }
                __atomic_store_n(&g_sh->ready[0], 1, __ATOMIC_RELEASE);
            }
            while (!__atomic_load_n(&g_sh->ready[0], __ATOMIC_ACQUIRE))
                usleep(1000);
            int rc = rank_main();
            if (rc == 0 && strcmp(g_mode, "stale") != 0)
                printf("rank %d: ok\n", r);
            fflush(stdout);
            _exit(rc);
        }
    }
    int bad = 0;
    time_t deadline = time(NULL) + 200;
    for (int r = 0; r < g_n; r++) {
        int ws = 0;
        for (;;) {
            pid_t p = waitpid(pids[r], &ws, WNOHANG);
            if (p == pids[r])
                break;
            if (time(NULL) > deadline) {
                printf("rank %d: FAIL hung\n", r);
                for (int q = 0; q < g_n; q++)
                    kill(pids[q], SIGKILL);
                deadline = time(NULL) + 5;
            }
            usleep(5000);
        }
        int killed = WIFSIGNALED(ws) &&
                     WTERMSIG(ws) == (strcmp(g_mode, "stale") == 0 ? SIGALRM : SIGKILL);
        int meant = ((strcmp(g_mode, "kill") == 0 || strcmp(g_mode, "killmid") == 0) &&
                     r == 2 % g_n) ||
                    (strcmp(g_mode, "stale") == 0 && r == 0);
        if (meant ? !killed : !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) {
            printf("rank %d: FAIL exit status 0x%x\n", r, ws);
            bad = 1;
        }
    }
    if (strcmp(g_mode, "types") == 0 || strcmp(g_mode, "coll") == 0) {
        /* every rank's results (each checked against the reference) */
        g_fnv = 0xcbf29ce484222325ULL;
        for (int r = 0; r < g_n; r++)
            digest(g_sh->digest[r], strlen(g_sh->digest[r]));
        printf("digest %016llx\n", (unsigned long long)g_fnv);
    }
    printf("done\n");
    return bad;
}
