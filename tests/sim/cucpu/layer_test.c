/* Tests of the CUDA-on-CPU layer (sim/cucpu): the kernels of
 * tests/sim/cucpu/test_kernels.cu, compiled by the host compiler, called through
 * their twin entry points (simcuda_twin_<name>) on host memory, and the same
 * source's nvcc fatbin run through simcuda's driver in a child process.
 *
 * Each test compares with an independent plain-C reference of the kernel's
 * arithmetic (compiled with -ffp-contract=off), so a wrong index, barrier,
 * shuffle or vote fails; the nondeterminism test shows that float atomics
 * change bits across launches while integer atomics stay exact and a
 * barrier-tree kernel stays bitwise identical (its negative control).
 * Errors (block too big, trap, deadlock, stack overflow, a fault on a helper
 * thread) must be reported, never hang or pass silently. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sim/cucpu/mma.h"
#include "sim/cucpu/runtime.h"
#include "sim/include/simcuda_twin.h"
#include "tests/harness.h"

#include <cuda.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define TWIN(name) int simcuda_twin_##name(const simcuda_launch_t *L)
TWIN(cucpu_t_index);
TWIN(cucpu_t_tree);
TWIN(cucpu_t_syncount);
TWIN(cucpu_t_dyn);
TWIN(cucpu_t_shfl);
TWIN(cucpu_t_shfl64);
TWIN(cucpu_t_vote);
TWIN(cucpu_t_warpsum);
TWIN(cucpu_t_atomics);
TWIN(cucpu_t_math);
TWIN(cucpu_t_trap);
TWIN(cucpu_t_deadlock);
TWIN(cucpu_t_stack);
TWIN(cucpu_t_store);
TWIN(cucpu_t_axpb);
TWIN(cucpu_t_wmma);

static char g_self[4096];

static simcuda_launch_t cfg3(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, void **params)
{
    simcuda_launch_t L;
    memset(&L, 0, sizeof(L));
    L.abi = SIMCUDA_TWIN_ABI;
    L.grid[0] = gx;
    L.grid[1] = gy;
    L.grid[2] = gz;
    L.block[0] = bx;
    L.block[1] = by;
    L.block[2] = bz;
    L.params = params;
    L.sm_count = 108;
    L.cc_major = 8;
    L.nondet_seed = 12345;
    return L;
}

static simcuda_launch_t cfg(unsigned gx, unsigned bx, void **params)
{
    return cfg3(gx, 1, 1, bx, 1, 1, params);
}

static uint64_t g_rs = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    g_rs ^= g_rs << 13;
    g_rs ^= g_rs >> 7;
    g_rs ^= g_rs << 17;
    return (uint32_t)(g_rs >> 32);
}
static float frand(void)
{
    return (float)(rnd32() >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

/* ---- the runtime's own loop (cucpu_rt_launch: a body per thread, no kernel loop) ---- */

typedef struct rt_body_arg {
    int *slot;       /* [block][thread] */
    int *after;      /* [block][thread]: the right neighbour's slot after a barrier */
    int *arrived;    /* [block]: __syncthreads_count of odd threads */
    unsigned int nt;
} rt_body_arg_t;

/* Even threads exit at once; odd ones write their slot, wait at a barrier
 * (the block turns into fibers after some threads ran as a plain loop),
 * read their right odd neighbour's slot, count at a second barrier. */
static void rt_body(void *p)
{
    rt_body_arg_t *a = p;
    unsigned int t = cucpu_self->lin, b = cucpu_self->blk->idx.x, nt = a->nt;
    if (t % 2 == 0)
        return;
    a->slot[b * nt + t] = (int)(b * 1000 + t);
    cucpu_rt_barrier(1, NULL);
    unsigned int r = t + 2 < nt ? t + 2 : 1;
    a->after[b * nt + t] = a->slot[b * nt + r];
    unsigned int arrived = 0;
    int c = cucpu_rt_barrier(1, &arrived);
    if (t == 1)
        a->arrived[b] = c * 10000 + (int)arrived;
}

static void test_runtime_body_loop(void **state)
{
    (void)state;
    enum { G = 6, B = 96 };
    static int slot[G * B], after[G * B], arrived[G];
    rt_body_arg_t a = {slot, after, arrived, B};
    for (uint64_t seed = 1; seed <= 20; seed++) {
        memset(slot, 0xff, sizeof(slot));
        memset(after, 0xff, sizeof(after));
        memset(arrived, 0xff, sizeof(arrived));
        simcuda_launch_t L = cfg(G, B, NULL);
        L.nondet_seed = seed;
        assert_int_equal(cucpu_rt_launch(&L, "rt_body", rt_body, &a), 0);
        for (unsigned int b = 0; b < G; b++) {
            assert_int_equal(arrived[b], (B / 2) * 10000 + B / 2);
            for (unsigned int t = 1; t < B; t += 2) {
                unsigned int r = t + 2 < B ? t + 2 : 1;
                assert_int_equal(after[b * B + t], (int)(b * 1000 + r));
            }
        }
    }
}

/* ---- indices, barriers, shared memory ------------------------------------------------ */

static void test_index_3d(void **state)
{
    (void)state;
    enum { GX = 3, GY = 2, GZ = 2, BX = 4, BY = 3, BZ = 2 };
    size_t n = (size_t)GX * GY * GZ * BX * BY * BZ;
    unsigned *out = malloc(6 * n * sizeof(unsigned));
    assert_non_null(out);
    memset(out, 0xff, 6 * n * sizeof(unsigned));
    void *p[] = {&out};
    simcuda_launch_t L = cfg3(GX, GY, GZ, BX, BY, BZ, p);
    assert_int_equal(simcuda_twin_cucpu_t_index(&L), 0);
    size_t g = 0;
    for (unsigned bz = 0; bz < GZ; bz++)
        for (unsigned by = 0; by < GY; by++)
            for (unsigned bx = 0; bx < GX; bx++)
                for (unsigned tz = 0; tz < BZ; tz++)
                    for (unsigned ty = 0; ty < BY; ty++)
                        for (unsigned tx = 0; tx < BX; tx++, g++) {
                            unsigned want[6] = {tx, ty, tz, bx, by, bz};
                            assert_memory_equal(&out[6 * g], want, sizeof(want));
                        }
    free(out);
}

/* The tree of cucpu_t_tree in plain C. */
static float tree_ref(const float *x, unsigned n)
{
    float sh[1024];
    memcpy(sh, x, n * sizeof(float));
    for (unsigned s = n / 2; s > 0; s >>= 1)
        for (unsigned t = 0; t < s; t++)
            sh[t] = sh[t] + sh[t + s];
    return sh[0];
}

static void test_tree_bitwise_any_order(void **state)
{
    (void)state;
    enum { B = 256, G = 37 };
    static float x[B * G];
    float out[G], again[G];
    for (int i = 0; i < B * G; i++)
        x[i] = frand() * (i % 5 ? 1.0f : 1e4f);
    float *xp = x, *op = out;
    void *p[] = {&xp, &op};
    simcuda_launch_t L = cfg(G, B, p);
    assert_int_equal(simcuda_twin_cucpu_t_tree(&L), 0);
    for (int b = 0; b < G; b++) {
        float r = tree_ref(x + b * B, B);
        assert_memory_equal(&out[b], &r, sizeof(float));
    }
    /* Another block and thread order (seed): the same bits, the kernel has
     * no atomics. */
    op = again;
    L.nondet_seed = 987654321;
    assert_int_equal(simcuda_twin_cucpu_t_tree(&L), 0);
    assert_memory_equal(out, again, sizeof(out));
    /* 1024 threads and a block of 1: limits of the block size. */
    static float big[1024];
    for (int i = 0; i < 1024; i++)
        big[i] = frand();
    xp = big;
    op = out;
    L = cfg(1, 1024, p);
    assert_int_equal(simcuda_twin_cucpu_t_tree(&L), 0);
    float r = tree_ref(big, 1024);
    assert_memory_equal(&out[0], &r, sizeof(float));
    L = cfg(1, 1, p);
    assert_int_equal(simcuda_twin_cucpu_t_tree(&L), 0);
    assert_memory_equal(&out[0], &big[0], sizeof(float));
}

static void test_syncthreads_count_and_or(void **state)
{
    (void)state;
    enum { B = 256, G = 4 };
    int pred[B * G], out[3 * G];
    for (int i = 0; i < B * G; i++)
        pred[i] = (rnd32() % 3) == 0;
    for (int i = 0; i < 200; i++)
        pred[B + i] = 1; /* block 1: all live threads true */
    for (int i = 0; i < 200; i++)
        pred[2 * B + i] = 0; /* block 2: all live false */
    int *pp = pred, *op = out;
    unsigned live = 200; /* threads 200.. exit before the barriers */
    void *p[] = {&pp, &op, &live};
    simcuda_launch_t L = cfg(G, B, p);
    assert_int_equal(simcuda_twin_cucpu_t_syncount(&L), 0);
    for (int b = 0; b < G; b++) {
        int c = 0;
        for (unsigned t = 0; t < live; t++)
            c += pred[b * B + (int)t] != 0;
        assert_int_equal(out[3 * b], c);
        assert_int_equal(out[3 * b + 1], c == (int)live);
        assert_int_equal(out[3 * b + 2], c > 0);
    }
    assert_int_equal(out[3 * 1 + 1], 1);
    assert_int_equal(out[3 * 2 + 2], 0);
}

static void test_dynamic_shared(void **state)
{
    (void)state;
    enum { B = 96, G = 5 };
    float x[B * G], out[B * G];
    for (int i = 0; i < B * G; i++)
        x[i] = (float)i;
    float *xp = x, *op = out;
    void *p[] = {&xp, &op};
    simcuda_launch_t L = cfg(G, B, p);
    L.shared_bytes = B * sizeof(float);
    assert_int_equal(simcuda_twin_cucpu_t_dyn(&L), 0);
    for (int b = 0; b < G; b++)
        for (int t = 0; t < B; t++)
            assert_true(out[b * B + t] == x[b * B + (B - 1 - t)]);
}

/* ---- warp operations ------------------------------------------------------------------ */

static void test_shuffles(void **state)
{
    (void)state;
    enum { B = 64 };
    int x[B], out[4 * B];
    for (int i = 0; i < B; i++)
        x[i] = 1000 + i;
    int widths[] = {32, 16, 8, 1};
    unsigned deltas[] = {1, 3, 5, 0};
    int masks[] = {1, 5, 7, 0};
    for (int k = 0; k < 4; k++) {
        int *xp = x, *op = out, w = widths[k], lm = masks[k];
        unsigned d = deltas[k];
        void *p[] = {&xp, &op, &w, &d, &lm};
        simcuda_launch_t L = cfg(1, B, p);
        assert_int_equal(simcuda_twin_cucpu_t_shfl(&L), 0);
        for (int t = 0; t < B; t++) {
            int lane = t % 32, warp0 = t - lane, seg = lane & ~(w - 1);
            int src = seg + ((lane * 7 + 3) & (w - 1));
            int up = (lane & (w - 1)) < (int)d ? lane : lane - (int)d;
            int down = (lane & (w - 1)) + (int)d >= w ? lane : lane + (int)d;
            int xr = lane ^ lm;
            if (xr / w > lane / w)
                xr = lane;
            assert_int_equal(out[4 * t + 0], x[warp0 + src]);
            assert_int_equal(out[4 * t + 1], x[warp0 + up]);
            assert_int_equal(out[4 * t + 2], x[warp0 + down]);
            assert_int_equal(out[4 * t + 3], x[warp0 + xr]);
        }
    }
    double dx[32], dout[32];
    for (int i = 0; i < 32; i++)
        dx[i] = 1.0 / (i + 3);
    double *dxp = dx, *dop = dout;
    void *p64[] = {&dxp, &dop};
    simcuda_launch_t L = cfg(1, 32, p64);
    assert_int_equal(simcuda_twin_cucpu_t_shfl64(&L), 0);
    for (int i = 0; i < 32; i++)
        assert_memory_equal(&dout[i], &dx[i ^ 1], sizeof(double));
}

/* One lane's int8 MMA share (sim/cucpu/mma.h) on both paths against the
 * sums computed here in 64 bits and taken modulo 2^32: random values over
 * the whole int8 range, every value -128 (the largest products), sums that
 * wrap, and d the same array as c. The AVX2 path is skipped, and said, on
 * a CPU without AVX2. */
static void mma_case(int path, const signed char *a, const signed char *b, const int *c)
{
    int d[8], dc[8], want[8];
    for (int j = 0; j < 8; j++) {
        long long s = c[j];
        for (int k = 0; k < 16; k++)
            s += (long long)a[k] * b[16 * j + k];
        want[j] = (int)(unsigned)(unsigned long long)s;
    }
    assert_int_equal(cucpu_mma_s8_path(path, d, a, b, c), 0);
    assert_memory_equal(d, want, sizeof(want));
    memcpy(dc, c, sizeof(dc));
    assert_int_equal(cucpu_mma_s8_path(path, dc, a, b, dc), 0);
    assert_memory_equal(dc, want, sizeof(want));
}

static void mma_random(signed char a[16], signed char b[128], int c[8])
{
    for (int k = 0; k < 16; k++)
        a[k] = (signed char)(rnd32() & 0xff);
    for (int k = 0; k < 128; k++)
        b[k] = (signed char)(rnd32() & 0xff);
    for (int j = 0; j < 8; j++)
        c[j] = (int)rnd32();
}

static void test_mma_paths(void **state)
{
    (void)state;
    signed char a[16], b[128];
    int c[8], d[8];
    int avx2 = 1;
    for (int path = 0; path < 2; path++) {
        memset(a, 0, sizeof(a)), memset(b, 0, sizeof(b)), memset(c, 0, sizeof(c));
        if (cucpu_mma_s8_path(path, d, a, b, c) == -ENOTSUP) {
            assert_int_equal(path, 1);
            avx2 = 0;
            continue;
        }
        for (int rep = 0; rep < 200; rep++) {
            mma_random(a, b, c);
            mma_case(path, a, b, c);
        }
        memset(a, -128, sizeof(a)), memset(b, -128, sizeof(b));
        for (int j = 0; j < 8; j++)
            c[j] = j % 2 ? 0x7fffffff - j : 0; /* odd columns wrap */
        mma_case(path, a, b, c);
    }
    /* the exported entry point picks one of the two: same bits */
    mma_random(a, b, c);
    int p0[8];
    cucpu_mma_s8(d, a, b, c);
    assert_int_equal(cucpu_mma_s8_path(0, p0, a, b, c), 0);
    assert_memory_equal(d, p0, sizeof(p0));
    if (!avx2)
        es_test_skip("this CPU has no AVX2: only the plain-C path of cucpu_mma_s8 was checked");
}

/* The integer warp MMA twin (sim/cucpu/wmma.h) against a plain-C matrix
 * product: both layouts of A and B, the accumulator loaded row-major and
 * stored column-major, int8 values over their whole range (-128..127), in
 * blocks of 2 warps whose threads run in a seeded order. */
static void test_wmma(void **state)
{
    (void)state;
    static _Alignas(32) signed char a[1024], b[1024];
    static _Alignas(32) int c[1024], d[1024];
    for (int i = 0; i < 1024; i++) {
        a[i] = (signed char)(rnd32() & 0xff);
        b[i] = (signed char)(rnd32() & 0xff);
        c[i] = (int)(rnd32() % 2000001) - 1000000;
        d[i] = 0x7eadbeef;
    }
    const signed char *ap = a, *bp = b;
    const int *cp = c;
    int *dp = d;
    void *p[] = {&ap, &bp, &cp, &dp};
    simcuda_launch_t L = cfg(1, 64, p);
    assert_int_equal(simcuda_twin_cucpu_t_wmma(&L), 0);
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                int want = c[512 * w + i * 32 + j]; /* C row-major */
                for (int k = 0; k < 16; k++) {
                    /* warp 0: A(i,k) = a[i*32+k], B(k,j) = b[k+j*32];
                     * warp 1: A(i,k) = a[512+i+k*32], B(k,j) = b[512+k*32+j] */
                    int x = w ? a[512 + i + k * 32] : a[i * 32 + k];
                    int y = w ? b[512 + k * 32 + j] : b[k + j * 32];
                    want += x * y;
                }
                assert_int_equal(d[512 * w + i + j * 32], want); /* D column-major */
            }
}

static void test_votes(void **state)
{
    (void)state;
    enum { B = 96 };
    int pred[B];
    unsigned out[9];
    for (int i = 0; i < B; i++)
        pred[i] = (i % 3) != 1;
    for (int i = 32; i < 64; i++)
        pred[i] = 1;
    int *pp = pred;
    unsigned *op = out, live = 72; /* warp 2 keeps lanes 0..7 */
    void *p[] = {&pp, &op, &live};
    simcuda_launch_t L = cfg(1, B, p);
    assert_int_equal(simcuda_twin_cucpu_t_vote(&L), 0);
    for (int w = 0; w < 3; w++) {
        unsigned want = 0, lanes = 0;
        for (int l = 0; l < 32; l++) {
            int t = w * 32 + l;
            if (t >= (int)live)
                continue;
            lanes |= 1u << l;
            if (pred[t])
                want |= 1u << l;
        }
        assert_int_equal(out[3 * w], want);
        assert_int_equal(out[3 * w + 1], want != 0);
        assert_int_equal(out[3 * w + 2], want == lanes);
    }
    assert_int_equal(out[3 * 1 + 2], 1); /* warp 1: all true */
    assert_int_equal(out[3 * 0 + 2], 0);
}

static void test_warp_butterfly_bitwise(void **state)
{
    (void)state;
    enum { B = 128, G = 3 };
    float x[B * G], out[B * G / 32];
    for (int i = 0; i < B * G; i++)
        x[i] = frand() * (float)(1 << (i % 13));
    float *xp = x, *op = out;
    void *p[] = {&xp, &op};
    simcuda_launch_t L = cfg(G, B, p);
    assert_int_equal(simcuda_twin_cucpu_t_warpsum(&L), 0);
    for (int w = 0; w < B * G / 32; w++) {
        float v[32], nv[32];
        memcpy(v, x + 32 * w, sizeof(v));
        for (int m = 16; m > 0; m >>= 1) {
            for (int l = 0; l < 32; l++)
                nv[l] = v[l] + v[l ^ m];
            memcpy(v, nv, sizeof(v));
        }
        assert_memory_equal(&out[w], &v[0], sizeof(float));
    }
}

/* ---- atomics ---------------------------------------------------------------------------- */

typedef struct atom_out {
    float fsum;
    double dsum;
    int isum[4];
    unsigned usum;
    unsigned long long llsum;
    int mx, mn;
    int cas[8];
} atom_out_t;

static void run_atomics(const float *x, int n, uint64_t seed, atom_out_t *o)
{
    memset(o, 0, sizeof(*o));
    o->mx = -1;
    o->mn = 1 << 30;
    for (int i = 0; i < 8; i++)
        o->cas[i] = -1;
    const float *xp = x;
    float *f = &o->fsum;
    double *d = &o->dsum;
    int *is = o->isum, *mx = &o->mx, *mn = &o->mn, *cas = o->cas;
    unsigned *us = &o->usum;
    unsigned long long *ll = &o->llsum;
    void *p[] = {&xp, &f, &d, &is, &us, &ll, &mx, &mn, &cas, &n};
    simcuda_launch_t L = cfg(8, 256, p);
    L.nondet_seed = seed;
    assert_int_equal(simcuda_twin_cucpu_t_atomics(&L), 0);
}

static void test_atomics_exact_and_float_order_varies(void **state)
{
    (void)state;
    enum { N = 2000 };
    static float x[N];
    for (int i = 0; i < N; i++)
        x[i] = frand() * (float)(1 << (i % 17)) * 1e-3f;
    atom_out_t first, o;
    run_atomics(x, N, 1, &first);
    int float_differs = 0;
    for (uint64_t s = 2; s < 22; s++) {
        run_atomics(x, N, s, &o);
        /* integer atomics: exact whatever the order */
        assert_int_equal(o.isum[0], N * (N + 1) / 2);
        assert_int_equal(o.isum[1], -N);
        assert_int_equal(o.isum[2], 8); /* one CAS winner per block */
        assert_int_equal(o.isum[3], 7);
        assert_int_equal(o.usum, (unsigned)(N * (N + 1) / 2));
        assert_int_equal(o.llsum, (unsigned long long)N * (N + 1) / 2);
        assert_int_equal(o.mx, N - 1);
        assert_int_equal(o.mn, 0);
        for (int b = 0; b < 8; b++)
            assert_true(o.cas[b] >= b * 256 && o.cas[b] < (b + 1) * 256);
        float_differs += memcmp(&o.fsum, &first.fsum, sizeof(float)) != 0;
        double ref = 0;
        for (int i = 0; i < N; i++)
            ref += x[i];
        assert_true(fabs(o.fsum - ref) < 1e-2 * (fabs(ref) + 1));
    }
    /* float atomics: the accumulation order follows the launch's seed, as
     * thread scheduling does on a GPU */
    assert_true(float_differs > 0);
    /* one OS thread: a launch is a pure function of its seed */
    run_atomics(x, N, 1, &o);
    assert_memory_equal(&o.fsum, &first.fsum, sizeof(float));
}

/* ---- arithmetic against plain C -------------------------------------------------------------- */

static void test_math_matches_plain_c(void **state)
{
    (void)state;
    enum { N = 1000, B = 128 };
    static float x[N], y[N];
    float bs[(N + B - 1) / B];
    for (int i = 0; i < N; i++)
        x[i] = frand() * (float)(1 << (i % 9)) + (i % 7 == 0 ? 1e-40f : 0.0f);
    float *xp = x, *yp = y, *bp = bs;
    int n = N;
    void *p[] = {&xp, &yp, &bp, &n};
    simcuda_launch_t L = cfg((N + B - 1) / B, B, p);
    assert_int_equal(simcuda_twin_cucpu_t_math(&L), 0);
    for (int b = 0; b < (N + B - 1) / B; b++) {
        float s = 0.0f;
        for (int i = b * B; i < (b + 1) * B && i < N; i++) {
            float v = x[i];
            float q = 0.1234567f;
            q = fmaf(q, v, -0.5f);
            q = fmaf(q, v, 0.333333343f);
            q = fmaf(q, v, 1.0f);
            float r = (q * v) / (v * v + 1.0f);
            r = r + sqrtf(v * v);
            assert_memory_equal(&y[i], &r, sizeof(float));
            s = s + r;
        }
        assert_memory_equal(&bs[b], &s, sizeof(float));
    }
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_bad_launches_refused(void **state)
{
    (void)state;
    int out[4];
    int *op = out, who = -1;
    void *p[] = {&who, &op};
    simcuda_launch_t L = cfg(1, 1025, p);
    assert_int_not_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    L = cfg3(1, 1, 1, 32, 32, 2, p);
    assert_int_not_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    L = cfg3(1, 1, 1, 1, 1, 65, p);
    assert_int_not_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    L = cfg(0, 1, p);
    assert_int_not_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    L = cfg3(1, 65536, 1, 1, 1, 1, p);
    assert_int_not_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    L = cfg(1, 4, p);
    L.abi = SIMCUDA_TWIN_ABI + 1;
    assert_int_not_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    L = cfg(1, 4, NULL);
    assert_int_not_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    /* and a good launch of the same kernel works */
    L = cfg(1, 4, p);
    assert_int_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(out[i], 1);
}

static void test_trap_and_deadlock_fail_the_launch(void **state)
{
    (void)state;
    int out[256];
    int *op = out, who = 5;
    void *p[] = {&who, &op};
    simcuda_launch_t L = cfg(4, 64, p);
    assert_int_not_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    void *pd[] = {&op};
    L = cfg(1, 32, pd);
    assert_int_not_equal(simcuda_twin_cucpu_t_deadlock(&L), 0);
    /* the OS thread recovers: the next launch runs */
    memset(out, 0, sizeof(out));
    who = -1;
    L = cfg(4, 64, p);
    assert_int_equal(simcuda_twin_cucpu_t_trap(&L), 0);
    for (int i = 0; i < 256; i++)
        assert_int_equal(out[i], 1);
}

/* Runs this program as a child in `mode`; returns its result. */
static void run_child(const char *mode, char *const *env, es_proc_result_t *r)
{
    char *argv[] = {g_self, (char *)mode, NULL};
    assert_int_equal(es_run(argv, env, 60, r), 0);
}

static void test_stack_overflow_faults(void **state)
{
    (void)state;
    es_proc_result_t r;
    run_child("--stack", NULL, &r);
    /* the guard page below the fiber stack stops it: SIGSEGV (or, in an
     * AddressSanitizer build, its stack-overflow report), never a silent
     * corruption or a hang */
    int segv = r.status == 128 + SIGSEGV, asan = strstr(r.out, "stack-overflow") != NULL;
    int timed_out = r.timed_out, returned = strstr(r.out, "returned") != NULL;
    es_proc_result_free(&r);
    assert_false(timed_out);
    assert_false(returned);
    assert_true(segv || asan);
}

static void test_pool_results_and_helper_fault(void **state)
{
    (void)state;
    es_proc_result_t r;
    char *env[] = {"SIMCUDA_CPU_THREADS=2", NULL};
    run_child("--pool", env, &r);
    if (r.status != 0)
        fprintf(stderr, "%s", r.out);
    int status = r.status, ok = strstr(r.out, "pool ok") != NULL;
    /* a fault of a kernel running on a helper thread reaches the launching
     * thread's guard */
    int caught = strstr(r.out, "fault caught on the launching thread") != NULL;
    es_proc_result_free(&r);
    assert_int_equal(status, 0);
    assert_true(ok);
    assert_true(caught);
    char *bad[] = {"SIMCUDA_CPU_THREADS=two", NULL};
    run_child("--pool", bad, &r);
    status = r.status;
    int said = strstr(r.out, "SIMCUDA_CPU_THREADS") != NULL;
    es_proc_result_free(&r);
    assert_int_not_equal(status, 0);
    assert_true(said);
}

static void test_through_simcuda_driver(void **state)
{
    (void)state;
    es_proc_result_t r;
    char kern[4200];
    snprintf(kern, sizeof(kern), "SIMCUDA_KERNELS=%s", es_build_path(CUCPU_TEST_TWIN));
    char *env[] = {kern, "SIMCUDA_DEVICES=a100:1G", NULL};
    run_child("--driver", env, &r);
    if (r.status != 0)
        fprintf(stderr, "%s", r.out);
    int status = r.status, ok = strstr(r.out, "driver ok") != NULL;
    es_proc_result_free(&r);
    assert_int_equal(status, 0);
    assert_true(ok);
}

/* ---- child modes ------------------------------------------------------------------------------ */

static int child_stack(void)
{
    int out[4];
    int *op = out, depth = 4096; /* about 4 MiB: beyond any fiber stack */
    void *p[] = {&depth, &op};
    simcuda_launch_t L = cfg(1, 4, p);
    simcuda_twin_cucpu_t_stack(&L);
    printf("returned\n");
    return 0;
}

static sigjmp_buf g_jb;
static void on_segv(int sig)
{
    (void)sig;
    siglongjmp(g_jb, 1);
}

static int child_pool(void)
{
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float));
    if (!x)
        return 2;
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 100);
    float a = 2.0f;
    int n = N;
    void *p[] = {&x, &a, &n};
    simcuda_launch_t L = cfg(N / 256, 256, p);
    if (simcuda_twin_cucpu_t_axpb(&L) != 0)
        return 3;
    for (int i = 0; i < N; i++)
        if (x[i] != (float)(i % 100) * 2.0f + 1.0f) {
            printf("element %d wrong\n", i);
            free(x);
            return 4;
        }
    free(x);
    printf("pool ok\n");
    /* A store into a PROT_NONE range, on the helpers. The guard of this
     * thread (as simcuda's driver has one) must see the fault. */
    size_t len = (size_t)N * sizeof(float);
    float *bad = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (bad == MAP_FAILED)
        return 5;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_segv;
    sa.sa_flags = SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    float v = 1.0f;
    void *q[] = {&bad, &v};
    L = cfg(N / 256, 256, q);
    if (sigsetjmp(g_jb, 1)) {
        printf("fault caught on the launching thread\n");
        return 0;
    }
    int rc = simcuda_twin_cucpu_t_store(&L);
    printf("store returned %d without a fault\n", rc);
    return 6;
}

static int child_driver(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    size_t len;
    void *img = es_read_file(es_build_path(CUCPU_TEST_FATBIN), &len);
    CUresult lr = !img ? CUDA_ERROR_FILE_NOT_FOUND : cuInit(0);
    if (lr == CUDA_SUCCESS)
        lr = cuDeviceGet(&dev, 0);
    if (lr == CUDA_SUCCESS)
        lr = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (lr == CUDA_SUCCESS)
        lr = cuCtxSetCurrent(ctx);
    if (lr == CUDA_SUCCESS)
        lr = cuModuleLoadData(&mod, img);
    free(img);
    if (lr == CUDA_SUCCESS)
        lr = cuModuleGetFunction(&fn, mod, "cucpu_t_tree");
    if (lr != CUDA_SUCCESS) {
        printf("setup failed: %d\n", (int)lr);
        return 2;
    }
    enum { B = 128, G = 20 };
    static float x[B * G], out[G];
    for (int i = 0; i < B * G; i++)
        x[i] = frand();
    CUdeviceptr dx, dout;
    if (cuMemAlloc(&dx, sizeof(x)) || cuMemAlloc(&dout, sizeof(out)) ||
        cuMemcpyHtoD(dx, x, sizeof(x)))
        return 3;
    void *args[] = {&dx, &dout};
    if (cuLaunchKernel(fn, G, 1, 1, B, 1, 1, 0, NULL, args, NULL) ||
        cuMemcpyDtoH(out, dout, sizeof(out)))
        return 4;
    for (int b = 0; b < G; b++) {
        float r = tree_ref(x + b * B, B);
        if (memcmp(&r, &out[b], sizeof(float)) != 0) {
            printf("block %d differs\n", b);
            return 5;
        }
    }
    /* A trap fails the launch (an error the context keeps). */
    CUfunction ft;
    int who = 0;
    if (cuModuleGetFunction(&ft, mod, "cucpu_t_trap"))
        return 6;
    void *targs[] = {&who, &dout};
    lr = cuLaunchKernel(ft, 1, 1, 1, 4, 1, 1, 0, NULL, targs, NULL);
    CUresult sr = cuCtxSynchronize();
    if (lr == CUDA_SUCCESS && sr == CUDA_SUCCESS) {
        printf("trap not reported\n");
        return 7;
    }
    printf("driver ok (trap: launch %d, synchronize %d)\n", (int)lr, (int)sr);
    return 0;
}

int main(int argc, char **argv)
{
    ssize_t k = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
    if (k <= 0)
        return 2;
    g_self[k] = 0;
    if (argc > 1 && strcmp(argv[1], "--stack") == 0)
        return child_stack();
    if (argc > 1 && strcmp(argv[1], "--pool") == 0)
        return child_pool();
    if (argc > 1 && strcmp(argv[1], "--driver") == 0)
        return child_driver();
    /* This process: one OS thread per launch, so a launch is a pure
     * function of its seed (test_atomics_exact_and_float_order_varies). */
    setenv("SIMCUDA_CPU_THREADS", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_3d),
        cmocka_unit_test(test_runtime_body_loop),
        cmocka_unit_test(test_tree_bitwise_any_order),
        cmocka_unit_test(test_syncthreads_count_and_or),
        cmocka_unit_test(test_dynamic_shared),
        cmocka_unit_test(test_shuffles),
        cmocka_unit_test(test_mma_paths),
        cmocka_unit_test(test_wmma),
        cmocka_unit_test(test_votes),
        cmocka_unit_test(test_warp_butterfly_bitwise),
        cmocka_unit_test(test_atomics_exact_and_float_order_varies),
        cmocka_unit_test(test_math_matches_plain_c),
        cmocka_unit_test(test_bad_launches_refused),
        cmocka_unit_test(test_trap_and_deadlock_fail_the_launch),
        cmocka_unit_test(test_stack_overflow_faults),
        cmocka_unit_test(test_pool_results_and_helper_fault),
        cmocka_unit_test(test_through_simcuda_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
