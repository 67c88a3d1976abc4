/* Kernels of the cucpu layer's tests and bench (tests/sim/cucpu/layer_test.c,
 * tests/sim/cucpu/bench_cucpu.c). The same source is built by nvcc into a
 * fatbin and by the host compiler into a twin library (sim/cucpu/module.mk),
 * so the tests also check that every construct compiles for the GPU. */
#include "sim/cucpu/cucpu.h"
#include "sim/cucpu/wmma.h"

/* Every thread writes its coordinates: out[6 * global linear id + ...]. */
extern "C" __global__ void cucpu_t_index(unsigned int *out)
{
    unsigned long long b = blockIdx.x + (unsigned long long)gridDim.x *
                                            (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    unsigned int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned long long g = b * (blockDim.x * blockDim.y * blockDim.z) + t;
    unsigned int *o = out + 6 * g;
    o[0] = threadIdx.x;
    o[1] = threadIdx.y;
    o[2] = threadIdx.z;
    o[3] = blockIdx.x;
    o[4] = blockIdx.y;
    o[5] = blockIdx.z;
}
CUCPU_EXPORT(cucpu_t_index)

/* Shared-memory tree per block (blockDim.x a power of two <= 1024):
 * out[block] = the tree sum of x[block * bd .. + bd). */
extern "C" __global__ void cucpu_t_tree(const float *x, float *out)
{
    __shared__ float sh[1024];
    unsigned int t = threadIdx.x;
    sh[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] = __fadd_rn(sh[t], sh[t + s]);
        __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = sh[0];
}
CUCPU_EXPORT(cucpu_t_tree)

/* Threads with threadIdx.x >= live exit at once; the others count, and-,
 * or-reduce pred[] over barriers: out[block*3 + 0..2]. */
extern "C" __global__ void cucpu_t_syncount(const int *pred, int *out, unsigned int live)
{
    if (threadIdx.x >= live)
        return;
    int p = pred[blockIdx.x * blockDim.x + threadIdx.x];
    int c = __syncthreads_count(p);
    int a = __syncthreads_and(p);
    int o = __syncthreads_or(p);
    if (threadIdx.x == 0) {
        out[blockIdx.x * 3 + 0] = c;
        out[blockIdx.x * 3 + 1] = a;
        out[blockIdx.x * 3 + 2] = o;
    }
}
CUCPU_EXPORT(cucpu_t_syncount)

/* Reverses each block's slice through dynamic shared memory. */
extern "C" __global__ void cucpu_t_dyn(const float *x, float *out)
{
    CUCPU_DYNAMIC_SHARED(float, sh);
    unsigned int t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
    sh[t] = x[base + t];
    __syncthreads();
    out[base + t] = sh[n - 1 - t];
}
CUCPU_EXPORT(cucpu_t_dyn)

/* Per thread: shfl(src = (lane*7+3)), up(delta), down(delta), xor(lanemask)
 * of its value x (all with `width`); out[4 * tid + k]. */
extern "C" __global__ void cucpu_t_shfl(const int *x, int *out, int width, unsigned int delta,
                                        int lanemask)
{
    unsigned int t = threadIdx.x;
    int v = x[t];
    int lane = (int)(t % 32u);
    out[4 * t + 0] = __shfl_sync(0xffffffffu, v, lane * 7 + 3, width);
    out[4 * t + 1] = __shfl_up_sync(0xffffffffu, v, delta, width);
    out[4 * t + 2] = __shfl_down_sync(0xffffffffu, v, delta, width);
    out[4 * t + 3] = __shfl_xor_sync(0xffffffffu, v, lanemask, width);
}
CUCPU_EXPORT(cucpu_t_shfl)

/* 64-bit values through a shuffle. */
extern "C" __global__ void cucpu_t_shfl64(const double *x, double *out)
{
    unsigned int t = threadIdx.x;
    out[t] = __shfl_xor_sync(0xffffffffu, x[t], 1);
}
CUCPU_EXPORT(cucpu_t_shfl64)

/* Votes of each warp over pred[]: out[3 * warp + 0..2] = ballot, any, all
 * (written by lane 0); lanes with threadIdx.x >= live exit first. */
extern "C" __global__ void cucpu_t_vote(const int *pred, unsigned int *out, unsigned int live)
{
    unsigned int t = threadIdx.x;
    if (t >= live)
        return;
    int p = pred[t];
    unsigned int b = __ballot_sync(0xffffffffu, p);
    int any = __any_sync(0xffffffffu, p);
    int all = __all_sync(0xffffffffu, p);
    __syncwarp();
    if (t % 32u == 0) {
        out[3 * (t / 32u) + 0] = b;
        out[3 * (t / 32u) + 1] = (unsigned int)any;
        out[3 * (t / 32u) + 2] = (unsigned int)all;
    }
}
CUCPU_EXPORT(cucpu_t_vote)

/* Butterfly sum of each warp (shfl_xor 16, 8, 4, 2, 1): every lane gets the
 * same value; lane 0 writes out[warp]. */
extern "C" __global__ void cucpu_t_warpsum(const float *x, float *out)
{
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[t];
    for (int m = 16; m > 0; m >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
    if (threadIdx.x % 32u == 0)
        out[t / 32u] = v;
}
CUCPU_EXPORT(cucpu_t_warpsum)

/* Atomics: every thread adds x[i] to fsum[0] (float) and dsum[0] (double),
 * i+1 to isum[0..3] as int, unsigned, unsigned long long; max/min of i; one
 * CAS winner per block; exchanges. */
extern "C" __global__ void cucpu_t_atomics(const float *x, float *fsum, double *dsum,
                                           int *isum, unsigned int *usum,
                                           unsigned long long *llsum, int *mx, int *mn,
                                           int *cas_winner, int n)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n)
        return;
    atomicAdd(fsum, x[i]);
    atomicAdd(dsum, (double)x[i]);
    atomicAdd(isum, i + 1);
    atomicAdd(usum, (unsigned int)(i + 1));
    atomicAdd(llsum, (unsigned long long)(i + 1));
    atomicSub(isum + 1, 1);
    atomicMax(mx, i);
    atomicMin(mn, i);
    if (atomicCAS(cas_winner + blockIdx.x, -1, i) == -1)
        atomicAdd(isum + 2, 1);
    atomicExch(isum + 3, 7);
}
CUCPU_EXPORT(cucpu_t_atomics)

/* Explicit-intrinsic arithmetic with a fixed order: per element a Horner
 * polynomial with __fmaf_rn, a product and a quotient, then a per-block
 * sequential sum by thread 0 (a plain C reference reproduces it bit for
 * bit). */
extern "C" __global__ void cucpu_t_math(const float *x, float *y, float *blocksum, int n)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) {
        float v = x[i];
        float p = 0.1234567f;
        p = __fmaf_rn(p, v, -0.5f);
        p = __fmaf_rn(p, v, 0.333333343f);
        p = __fmaf_rn(p, v, 1.0f);
        float q = __fdiv_rn(__fmul_rn(p, v), __fadd_rn(__fmul_rn(v, v), 1.0f));
        y[i] = __fadd_rn(q, __fsqrt_rn(__fmul_rn(v, v)));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        int lo = (int)(blockIdx.x * blockDim.x);
        for (int j = lo; j < lo + (int)blockDim.x && j < n; j++)
            s = __fadd_rn(s, y[j]);
        blocksum[blockIdx.x] = s;
    }
}
CUCPU_EXPORT(cucpu_t_math)

/* Thread `who` of block 0 traps. */
extern "C" __global__ void cucpu_t_trap(int who, int *out)
{
    if (blockIdx.x == 0 && (int)threadIdx.x == who)
        __trap();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}
CUCPU_EXPORT(cucpu_t_trap)

/* Lanes 0..15 of warp 0 shuffle with the full mask while lanes 16..31 wait
 * at __syncthreads: neither can finish (a hang on a GPU). */
extern "C" __global__ void cucpu_t_deadlock(int *out)
{
    unsigned int t = threadIdx.x;
    if (t < 16)
        out[t] = __shfl_sync(0xffffffffu, (int)t, 0);
    else
        __syncthreads();
}
CUCPU_EXPORT(cucpu_t_deadlock)

/* Recursion that needs about depth KiB of stack. */
static __device__ __noinline__ int cucpu_t_deep(int depth, volatile char *sink)
{
    volatile char buf[1024];
    buf[0] = (char)depth;
    buf[1023] = (char)depth;
    if (depth <= 0)
        return buf[0];
    int r = cucpu_t_deep(depth - 1, sink) + buf[1023];
    *sink = buf[512];
    return r;
}

extern "C" __global__ void cucpu_t_stack(int depth, int *out)
{
    volatile char sink;
    out[threadIdx.x] = cucpu_t_deep(depth, &sink);
}
CUCPU_EXPORT(cucpu_t_stack)

/* Writes p[i] for every thread: a fault when p is not mapped. */
extern "C" __global__ void cucpu_t_store(float *p, float v)
{
    p[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
CUCPU_EXPORT(cucpu_t_store)

/* Elementwise x = x * a + 1 (bench and pool tests). */
extern "C" __global__ void cucpu_t_axpb(float *x, float a, int n)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n)
        x[i] = __fadd_rn(__fmul_rn(x[i], a), 1.0f);
}
CUCPU_EXPORT(cucpu_t_axpb)

/* One barrier per round, `rounds` rounds (bench: barrier cost). */
extern "C" __global__ void cucpu_t_barriers(int rounds, int *out)
{
    __shared__ int sh[1024];
    unsigned int t = threadIdx.x;
    sh[t] = 0;
    for (int r = 0; r < rounds; r++) {
        __syncthreads();
        sh[t] += 1;
    }
    out[blockIdx.x * blockDim.x + t] = sh[t];
}
CUCPU_EXPORT(cucpu_t_barriers)

/* Integer warp MMA (sim/cucpu/wmma.h): warp w of the block computes
 * d_w = a_w b_w + c_w, 16 x 16 x 16 int8 -> int32, every matrix with a
 * leading dimension of 32 at offset 512 w: warp 0 with A row-major and B
 * column-major, warp 1 with A column-major and B row-major; C loaded
 * row-major, D stored column-major. */
extern "C" __global__ void cucpu_t_wmma(const signed char *a, const signed char *b, const int *c,
                                        int *d)
{
    namespace wm = nvcuda::wmma;
    int w = (int)(threadIdx.x / 32);
    wm::fragment<wm::accumulator, 16, 16, 16, int> acc;
    wm::load_matrix_sync(acc, c + 512 * w, 32, wm::mem_row_major);
    if (w == 0) {
        wm::fragment<wm::matrix_a, 16, 16, 16, signed char, wm::row_major> fa;
        wm::fragment<wm::matrix_b, 16, 16, 16, signed char, wm::col_major> fb;
        wm::load_matrix_sync(fa, a, 32);
        wm::load_matrix_sync(fb, b, 32);
        wm::mma_sync(acc, fa, fb, acc);
    } else {
        wm::fragment<wm::matrix_a, 16, 16, 16, signed char, wm::col_major> fa;
        wm::fragment<wm::matrix_b, 16, 16, 16, signed char, wm::row_major> fb;
        wm::load_matrix_sync(fa, a + 512, 32);
        wm::load_matrix_sync(fb, b + 512, 32);
        wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync(d + 512 * w, acc, 32, wm::mem_col_major);
}
CUCPU_EXPORT(cucpu_t_wmma)
