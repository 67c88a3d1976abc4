/* Handle translation for the shim's wrappers (docs/MOVING.md, section 4):
 * the es_va_in_* / es_va_out_* functions the argument annotations of
 * shim/funcs.h expand to (intercept/vargs.h), over the virtual handles
 * of move/vhandle.h and the stand-in allocation handles of
 * move/memreg.h. Each is a load and a branch on the hot path; while
 * handles are not virtual (es_vh_on 0) each is the identity. es_va_range
 * asks the registry's span index (nothing allocated through it: one load). */
#ifndef ES_INTERCEPT_VIRTUAL_THUNKS_H
#define ES_INTERCEPT_VIRTUAL_THUNKS_H

#include <cuda.h>
#include <stdint.h>

#include "move/memreg.h"
#include "move/vhandle.h"
#include "intercept/vargs.h"
#include "intercept/virtual/libh.h"

#define es_va_in_CTX(x) ((CUcontext)es_vh_real(x))
#define es_va_in_STREAM(x) es_vh_stream(x)
#define es_va_in_EVENT(x) ((CUevent)es_vh_real(x))
#define es_va_in_MOD(x) ((CUmodule)es_vh_real(x))
#define es_va_in_FN(x) ((CUfunction)es_vh_real(x))
#define es_va_in_LIB(x) ((CUlibrary)es_vh_real(x))
#define es_va_in_KERN(x) ((CUkernel)es_vh_real(x))
#define es_va_in_BLAS(x) ((__typeof__(x))es_libh_real(x))
#define es_va_in_LT(x) ((__typeof__(x))es_libh_real(x))
#define es_va_in_DNN(x) ((__typeof__(x))es_libh_real(x))
/* A stand-in allocation handle: its first member is the real handle. */
static inline CUmemGenericAllocationHandle es_va_in_MEMH(CUmemGenericAllocationHandle h)
{
    return (__builtin_expect(es_vh_on, 1) && h)
               ? *(const CUmemGenericAllocationHandle *)(uintptr_t)h
               : h;
}

/* Output handles: the virtual object of a real handle the driver returned
 * (kept as is when the shim did not hand it out). */
static inline void es_va_out_any(void *p)
{
    void **pp = p;
    if (es_vh_on && pp && *pp) {
        void *v = es_vh_from_real(*pp);
        if (v)
            *pp = v;
    }
}
#define es_va_out_CTX(p) es_va_out_any(p)
#define es_va_out_STREAM(p) es_va_out_any(p)
#define es_va_out_EVENT(p) es_va_out_any(p)
#define es_va_out_MOD(p) es_va_out_any(p)
#define es_va_out_FN(p) es_va_out_any(p)
#define es_va_out_LIB(p) es_va_out_any(p)
#define es_va_out_KERN(p) es_va_out_any(p)
/* vendor handles: the shim's own registry (intercept/virtual/libh.h) */
static inline void es_va_out_lib(void *p)
{
    void **pp = p;
    if (es_libh_on && pp && *pp) {
        void *v = es_libh_from_real(*pp);
        if (v)
            *pp = v;
    }
}
#define es_va_out_BLAS(p) es_va_out_lib(p)
#define es_va_out_LT(p) es_va_out_lib(p)
#define es_va_out_DNN(p) es_va_out_lib(p)
#define es_va_out_MEMH(p) ((void)(p)) /* the registry answers these itself */

/* A device range past the end of one of the registry's allocations. */
#define es_va_range(x, n) es_memreg_range_bad((CUdeviceptr)(x), (size_t)(n))

#endif
