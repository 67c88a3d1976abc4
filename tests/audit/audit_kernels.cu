// Kernels for tests/audit/library_test.c and for deriving the per-architecture
// SASS opcode tables in audit/sass_tables.c: each kernel differs from its
// neighbours only in the atomic's type, scope, space or use of the result.
// Compiled at build time by audit/module.mk for sm_80/86/89/90/100/120.
// Name prefix says the expected verdict: fa_ float-atomic, cas_ cas-loop,
// ok_ clean.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define K extern "C" __global__ void

// float atomics, result unused (RED) and used (ATOM)
K fa_red_f32(float *p, float v) { atomicAdd(p + threadIdx.x, v); }
K fa_atom_f32(float *p, float v, float *o) { o[threadIdx.x] = atomicAdd(p + threadIdx.x, v); }
K fa_red_f64(double *p, double v) { atomicAdd(p + threadIdx.x, v); }
K fa_atom_f64(double *p, double v, double *o) { o[threadIdx.x] = atomicAdd(p + threadIdx.x, v); }
K fa_red_f16x2(__half2 *p, __half2 v) { atomicAdd(p + threadIdx.x, v); }
K fa_atom_f16x2(__half2 *p, __half2 v, __half2 *o) { o[threadIdx.x] = atomicAdd(p + threadIdx.x, v); }
K fa_red_bf16x2(__nv_bfloat162 *p, __nv_bfloat162 v) { atomicAdd(p + threadIdx.x, v); }
K fa_atom_bf16x2(__nv_bfloat162 *p, __nv_bfloat162 v, __nv_bfloat162 *o) { o[threadIdx.x] = atomicAdd(p + threadIdx.x, v); }
K fa_red_f16(__half *p, __half v) { atomicAdd(p + threadIdx.x, v); }
K fa_red_bf16(__nv_bfloat16 *p, __nv_bfloat16 v) { atomicAdd(p + threadIdx.x, v); }
K fa_red_sys_f32(float *p, float v) { atomicAdd_system(p + threadIdx.x, v); }
K fa_atom_sys_f32(float *p, float v, float *o) { o[threadIdx.x] = atomicAdd_system(p + threadIdx.x, v); }
K fa_red_block_f32(float *p, float v) { atomicAdd_block(p + threadIdx.x, v); }
K fa_shared_f32(float *o, float v)
{
    __shared__ float s[64];
    s[threadIdx.x & 63] = 0;
    __syncthreads();
    atomicAdd(&s[(threadIdx.x * 7) & 63], v);
    __syncthreads();
    o[threadIdx.x] = s[threadIdx.x & 63];
}
K fa_shared_f64(double *o, double v)
{
    __shared__ double s[64];
    s[threadIdx.x & 63] = 0;
    __syncthreads();
    atomicAdd(&s[(threadIdx.x * 7) & 63], v);
    __syncthreads();
    o[threadIdx.x] = s[threadIdx.x & 63];
}
K fa_generic_f32(float *p, float v, int sel)
{
    __shared__ float s[64];
    s[threadIdx.x & 63] = 0;
    float *q = sel ? p : s;   // generic address: global or shared at run time
    atomicAdd(q + (threadIdx.x & 63), v);
    __syncthreads();
    p[threadIdx.x + 64] = s[threadIdx.x & 63];
}
K fa_generic_f64(double *p, double v, int sel)
{
    __shared__ double s[64];
    s[threadIdx.x & 63] = 0;
    double *q = sel ? p : s;
    atomicAdd(q + (threadIdx.x & 63), v);
    __syncthreads();
    p[threadIdx.x + 64] = s[threadIdx.x & 63];
}
K ok_generic_s32(int *p, int v, int sel)
{
    __shared__ int s[64];
    s[threadIdx.x & 63] = 0;
    int *q = sel ? p : s;
    atomicAdd(q + (threadIdx.x & 63), v);
    __syncthreads();
    p[threadIdx.x + 64] = s[threadIdx.x & 63];
}
K ok_generic_u64(unsigned long long *p, unsigned long long v, int sel, unsigned long long *o)
{
    __shared__ unsigned long long s[64];
    s[threadIdx.x & 63] = 0;
    unsigned long long *q = sel ? p : s;
    o[threadIdx.x] = atomicAdd(q + (threadIdx.x & 63), v);
    __syncthreads();
    p[threadIdx.x + 64] = s[threadIdx.x & 63];
}
K ok_generic_exch_f32(float *p, float v, int sel, float *o)
{
    __shared__ float s[64];
    s[threadIdx.x & 63] = 0;
    float *q = sel ? p : s;
    o[threadIdx.x] = atomicExch(q + (threadIdx.x & 63), v);
    __syncthreads();
    p[threadIdx.x + 64] = s[threadIdx.x & 63];
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
K fa_red_v2f32(float2 *p, float2 v) { atomicAdd(p + threadIdx.x, v); }
K fa_red_v4f32(float4 *p, float4 v) { atomicAdd(p + threadIdx.x, v); }
K fa_atom_v4f32(float4 *p, float4 v, float4 *o) { o[threadIdx.x] = atomicAdd(p + threadIdx.x, v); }
K fa_bulk_f32(float *g, int n)
{
    __shared__ __align__(128) float s[256];
    s[threadIdx.x] = 1.0f;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned sa = (unsigned)__cvta_generic_to_shared(s);
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                     :: "l"(g), "r"(sa), "r"(n * 4) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}
K fa_multimem_f32(float *mc, float v)
{
    asm volatile("multimem.red.relaxed.sys.global.add.f32 [%0], %1;" :: "l"(mc + threadIdx.x), "f"(v) : "memory");
}
K ok_bulk_s32(int *g, int n)
{
    __shared__ __align__(128) int s[256];
    s[threadIdx.x] = 1;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned sa = (unsigned)__cvta_generic_to_shared(s);
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.s32 [%0], [%1], %2;"
                     :: "l"(g), "r"(sa), "r"(n * 4) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}
#define BULK(NAME, T, PTXT)                                                            \
    K NAME(T *g, int n)                                                                \
    {                                                                                  \
        __shared__ __align__(128) T s[256];                                            \
        s[threadIdx.x] = (T)1;                                                         \
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");                  \
        __syncthreads();                                                               \
        if (threadIdx.x == 0) {                                                        \
            unsigned sa = (unsigned)__cvta_generic_to_shared(s);                       \
            asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group." PTXT    \
                         " [%0], [%1], %2;" :: "l"(g), "r"(sa), "r"(n * 4) : "memory"); \
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");                 \
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");                 \
        }                                                                              \
    }
BULK(fa_bulk_f64, double, "add.f64")
BULK(fa_bulk_f16, __half, "add.noftz.f16")
BULK(fa_bulk_bf16, __nv_bfloat16, "add.noftz.bf16")
BULK(ok_bulk_u64, unsigned long long, "add.u64")
BULK(ok_bulk_u32, unsigned, "add.u32")
BULK(ok_bulk_min_s32, int, "min.s32")
K fa_ldreduce_f32(float *mc, float *o)
{
    float r;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" : "=f"(r) : "l"(mc + threadIdx.x) : "memory");
    o[threadIdx.x] = r;
}
K ok_ldreduce_s32(int *mc, int *o)
{
    int r;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.s32 %0, [%1];" : "=r"(r) : "l"(mc + threadIdx.x) : "memory");
    o[threadIdx.x] = r;
}
K fa_multimem_v4f32(float *mc, float4 v)
{
    asm volatile("multimem.red.relaxed.sys.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(mc + 4 * threadIdx.x), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
K fa_red_native_bf16x2(__nv_bfloat162 *p, __nv_bfloat162 v)
{
    asm volatile("red.global.add.noftz.bf16x2 [%0], %1;" :: "l"(p + threadIdx.x), "r"(*(unsigned *)&v) : "memory");
}
K fa_red_native_f16(__half *p, __half v)
{
    asm volatile("red.global.add.noftz.f16 [%0], %1;" :: "l"(p + threadIdx.x), "h"(*(unsigned short *)&v) : "memory");
}
K ok_multimem_s32(int *mc, int v)
{
    asm volatile("multimem.red.relaxed.sys.global.add.u32 [%0], %1;" :: "l"(mc + threadIdx.x), "r"(v) : "memory");
}
#endif

// compare-and-swap loops: a float add emulated by CAS, and a plain CAS
K cas_loop_f32(float *p, float v)
{
    unsigned *a = (unsigned *)(p + threadIdx.x);
    unsigned old = *a, assumed;
    do {
        assumed = old;
        old = atomicCAS(a, assumed, __float_as_uint(__uint_as_float(assumed) + v));
    } while (assumed != old);
}
K cas_loop_f64(double *p, double v)
{
    unsigned long long *a = (unsigned long long *)(p + threadIdx.x);
    unsigned long long old = *a, assumed;
    do {
        assumed = old;
        old = atomicCAS(a, assumed, __double_as_longlong(__longlong_as_double(assumed) + v));
    } while (assumed != old);
}
K cas_shared_f32(float *o, float v)
{
    __shared__ unsigned s[64];
    s[threadIdx.x & 63] = 0;
    __syncthreads();
    unsigned *a = &s[(threadIdx.x * 7) & 63];
    unsigned old = *a, assumed;
    do {
        assumed = old;
        old = atomicCAS(a, assumed, __float_as_uint(__uint_as_float(assumed) + v));
    } while (assumed != old);
    __syncthreads();
    o[threadIdx.x] = __uint_as_float(s[threadIdx.x & 63]);
}

// integer and non-additive atomics: never float atomics
K ok_red_s32(int *p, int v) { atomicAdd(p + threadIdx.x, v); }
K ok_atom_s32(int *p, int v, int *o) { o[threadIdx.x] = atomicAdd(p + threadIdx.x, v); }
K ok_red_u64(unsigned long long *p, unsigned long long v) { atomicAdd(p + threadIdx.x, v); }
K ok_atom_u64(unsigned long long *p, unsigned long long v, unsigned long long *o) { o[threadIdx.x] = atomicAdd(p + threadIdx.x, v); }
K ok_red_sys_s32(int *p, int v) { atomicAdd_system(p + threadIdx.x, v); }
K ok_red_max_s32(int *p, int v) { atomicMax(p + threadIdx.x, v); }
K ok_red_min_u32(unsigned *p, unsigned v) { atomicMin(p + threadIdx.x, v); }
K ok_red_and_s32(int *p, int v) { atomicAnd(p + threadIdx.x, v); }
K ok_red_or_u64(unsigned long long *p, unsigned long long v) { atomicOr(p + threadIdx.x, v); }
K ok_red_inc_u32(unsigned *p, unsigned v) { atomicInc(p + threadIdx.x, v); }
K ok_red_max_s64(long long *p, long long v) { atomicMax(p + threadIdx.x, v); }
K ok_atom_max_s64(long long *p, long long v, long long *o) { o[threadIdx.x] = atomicMax(p + threadIdx.x, v); }
K ok_red_xor_u64(unsigned long long *p, unsigned long long v) { atomicXor(p + threadIdx.x, v); }
K ok_red_dec_u32(unsigned *p, unsigned v) { atomicDec(p + threadIdx.x, v); }
K ok_exch_f32(float *p, float v, float *o) { o[threadIdx.x] = atomicExch(p + threadIdx.x, v); }
K ok_exch_f32_unused(float *p, float v) { atomicExch(p + threadIdx.x, v); }
K ok_exch_u64(unsigned long long *p, unsigned long long v, unsigned long long *o) { o[threadIdx.x] = atomicExch(p + threadIdx.x, v); }
K ok_shared_s32(int *o, int v)
{
    __shared__ int s[64];
    s[threadIdx.x & 63] = 0;
    __syncthreads();
    atomicAdd(&s[(threadIdx.x * 7) & 63], v);
    __syncthreads();
    o[threadIdx.x] = s[threadIdx.x & 63];
}
K ok_shared_ops_u32(unsigned *o, unsigned v)
{
    __shared__ unsigned s[64];
    s[threadIdx.x & 63] = 0;
    __syncthreads();
    unsigned i = (threadIdx.x * 7) & 63;
    atomicInc(&s[i], v);
    atomicDec(&s[i], v);
    atomicMax(&s[i], v);
    atomicMin((int *)&s[i], (int)v);
    atomicAnd(&s[i], v);
    atomicOr(&s[i], v);
    atomicXor(&s[i], v);
    unsigned x = atomicExch(&s[i], v);
    __syncthreads();
    o[threadIdx.x] = s[threadIdx.x & 63] + x;
}
K ok_shared_exch_f32(float *o, float v)
{
    __shared__ float s[64];
    s[threadIdx.x & 63] = 0;
    __syncthreads();
    float x = atomicExch(&s[(threadIdx.x * 7) & 63], v);
    __syncthreads();
    o[threadIdx.x] = s[threadIdx.x & 63] + x;
}
K ok_sub_s32(int *p, int v, int *o) { o[threadIdx.x] = atomicSub(p + threadIdx.x, v); }
K ok_plain_f32(float *p, float v) { p[threadIdx.x] = p[threadIdx.x] * v + 1.0f; }
K ok_plain_f64(double *p, double v) { p[threadIdx.x] = p[threadIdx.x] * v + 1.0; }
K ok_plain_h2(__half2 *p, __half2 v) { p[threadIdx.x] = __hfma2(p[threadIdx.x], v, v); }
K ok_store_shared(float *o, float v)
{
    __shared__ float s[64];
    s[threadIdx.x & 63] = v;
    __syncthreads();
    o[threadIdx.x] = s[(threadIdx.x * 7) & 63];
}

// calls to functions that are not inlined: whole-program cubins keep them in
// the kernel's section; relocatable ones (-rdc) in their own sections, linked
// by .nv.callgraph; PTX keeps them as .func with call instructions
__device__ __noinline__ void es_noinline_add(float *p, float v) { atomicAdd(p, v); }
__device__ __noinline__ void es_noinline_mid(float *p, float v) { es_noinline_add(p + 1, v); p[0] = v; }
__device__ __noinline__ void es_noinline_iadd(int *p, int v) { atomicAdd(p, v); }
K fa_via_call(float *p, float v) { es_noinline_mid(p + threadIdx.x, v); }
K ok_via_call(int *p, int v) { es_noinline_iadd(p + threadIdx.x, v); }

// a C++ kernel with a mangled name (for demangling)
namespace es_ns {
template <typename T> __global__ void fa_templ(T *p, T v) { atomicAdd(p, v); }
template __global__ void fa_templ<float>(float *, float);
}
