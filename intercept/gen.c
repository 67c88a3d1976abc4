/* The pass-through wrappers (kind P in intercept/funcs.h), generated: one
 * predictable branch (library not loaded yet / statistics on) and one
 * indirect call through the real-function table. No lock, no allocation. */
#include "shim/shim.h"

/* The slow variant is out of line so the fast path saves no register:
 * load flag, test, then a tail jump through the table. */
#define ES_GEN_P(lib, sym, ret, params, args)                                  \
    __attribute__((noinline, cold)) static ret es_slow_##sym params            \
    {                                                                          \
        es_slowpath(ES_LIBID_##lib, ES_IDX_##sym);                             \
        return ES_REAL(lib, sym) args;                                         \
    }                                                                          \
    ES_EXPORT ret sym params                                                   \
    {                                                                          \
        if (__builtin_expect(__atomic_load_n(&es_slow[ES_LIBID_##lib], __ATOMIC_ACQUIRE), 0)) \
            return es_slow_##sym args;                                         \
        return ES_REAL(lib, sym) args;                                         \
    }
#define ES_GEN_C(lib, sym, ret, params, args)
#define ES_GEN_I(lib, sym, ret, params, args)

#define ES_GEN_CUDA(kind, sym, gp, ver, fl, ret, params, args, err)            \
    ES_GEN_##kind(cuda, sym, ret, params, args)
#define ES_GEN_CUBLAS(kind, sym, gp, ver, fl, ret, params, args, err)          \
    ES_GEN_##kind(cublas, sym, ret, params, args)
#define ES_GEN_CUDNN(kind, sym, gp, ver, fl, ret, params, args, err)           \
    ES_GEN_##kind(cudnn, sym, ret, params, args)
#define ES_GEN_NCCL(kind, sym, gp, ver, fl, ret, params, args, err)            \
    ES_GEN_##kind(nccl, sym, ret, params, args)

ES_CUDA_FUNCS(ES_GEN_CUDA)
ES_CUBLAS_FUNCS(ES_GEN_CUBLAS)
ES_CUDNN_FUNCS(ES_GEN_CUDNN)
ES_NCCL_FUNCS(ES_GEN_NCCL)
