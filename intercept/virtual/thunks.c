/* The translating real table (docs/MOVING.md, section 4): once a library is
 * loaded, while handles are virtual, every entry of es_real_<lib> (what
 * ES_REAL calls, in every hand-written wrapper of the shim) becomes a
 * thunk generated from the entry's annotated argument list: the
 * time-slicing check (intercept/tsdefer.h), the handles translated, the library's own function (es_raw_<lib>) called, the output
 * handles mapped back. The library's own functions stay in es_raw_<lib>.
 * Also loads the moving machinery's driver table (move/drv.h) from the
 * driver the shim opened. */
#include "shim/config.h"
#include "shim/hooks.h"
#include "shim/log.h"
#include "shim/real.h"
#include "intercept/virtual/thunks.h"
#include "intercept/tsdefer.h"
#include "move/drv.h"

#define ES_THUNK(lib, sym, ret, params, args)                                  \
    static ret es_thunk_##sym params                                           \
    {                                                                          \
        ES_TS_PRE(lib, sym, ret, args)                                         \
        ret r_ = ES_RAW(lib, sym) ES_VA_CALL args;                             \
        ES_VA_POST(r_, args);                                                  \
        return r_;                                                             \
    }
#define ES_THUNK_CUDA(kind, sym, gp, ver, fl, ret, params, args, err) ES_THUNK(cuda, sym, ret, params, args)
#define ES_THUNK_CUBLAS(kind, sym, gp, ver, fl, ret, params, args, err) ES_THUNK(cublas, sym, ret, params, args)
#define ES_THUNK_CUDNN(kind, sym, gp, ver, fl, ret, params, args, err) ES_THUNK(cudnn, sym, ret, params, args)
#define ES_THUNK_CUBLASLT(kind, sym, gp, ver, fl, ret, params, args, err) ES_THUNK(cublaslt, sym, ret, params, args)
ES_CUDA_FUNCS(ES_THUNK_CUDA)
ES_CUBLAS_FUNCS(ES_THUNK_CUBLAS)
ES_CUDNN_FUNCS(ES_THUNK_CUDNN)
ES_CUBLASLT_FUNCS(ES_THUNK_CUBLASLT)

/* Only entries with annotated handles get a thunk: the others call the
 * library's function directly. */
#define ES_INSTALL(lib, sym, args)                                             \
    if (ES_VA_COUNT args && es_raw_##lib.sym != es_missing_thunk_target(ES_LIBID_##lib, ES_IDX_##sym)) \
        es_real_##lib.sym = es_thunk_##sym;
#define ES_INSTALL_CUDA(kind, sym, gp, ver, fl, ret, params, args, err) ES_INSTALL(cuda, sym, args)
#define ES_INSTALL_CUBLAS(kind, sym, gp, ver, fl, ret, params, args, err) ES_INSTALL(cublas, sym, args)
#define ES_INSTALL_CUDNN(kind, sym, gp, ver, fl, ret, params, args, err) ES_INSTALL(cudnn, sym, args)
#define ES_INSTALL_CUBLASLT(kind, sym, gp, ver, fl, ret, params, args, err) ES_INSTALL(cublaslt, sym, args)

/* A function the library lacks keeps its stub (no thunk over a stub). */
static void *es_missing_thunk_target(int lib, int idx)
{
    return es_real_missing_ptr(lib, idx);
}

void es_handles_install(void); /* intercept/virtual/cuda_handles.c */
void es_mem_install(void);     /* intercept/virtual/cuda_mem.c */

/* A kind-T entry must have its hand-written thunk: a generated one would
 * hand the application real handles. */
#define ES_CHECK_T_T(lib, sym)                                                 \
    if ((es_real_##lib.sym == es_thunk_##sym || es_real_##lib.sym == es_raw_##lib.sym) && \
        es_cfg.move != ES_MOVE_NOMEM) {                                        \
        ES_ERROR("no thunk for %s: moving ESTs is not safe in this build", #sym); \
        bad++;                                                                 \
    }
#define ES_CHECK_T_P(lib, sym)
#define ES_CHECK_T_C(lib, sym)
#define ES_CHECK_T_I(lib, sym)
#define ES_CHECK_T_H(lib, sym)
#define ES_CHECK_T_A(lib, sym)
#define ES_CHECK_CUDA(kind, sym, gp, ver, fl, ret, params, args, err) ES_CHECK_T_##kind(cuda, sym)

void es_lib_loaded(int lib, void *handle, void *(*lookup)(void *, const char *))
{
    if (lib == ES_LIB_CUDA && es_drv_load(handle, lookup) != 0)
        ES_DEBUG("the driver lacks some functions moving an EST uses: moves will fail");
    if (!es_vh_on)
        return;
    switch (lib) {
    case ES_LIB_CUDA: {
        int bad = 0;
        ES_CUDA_FUNCS(ES_INSTALL_CUDA)
        es_handles_install();
        /* EASYSCALE_MOVE=nomem (negative controls): memory stays the
         * driver's, and does not survive a move */
        if (es_cfg.move != ES_MOVE_NOMEM)
            es_mem_install();
        ES_CUDA_FUNCS(ES_CHECK_CUDA)
        (void)bad;
        break;
    }
    case ES_LIB_CUBLAS:
        ES_CUBLAS_FUNCS(ES_INSTALL_CUBLAS)
        es_libh_install(lib);
        break;
    case ES_LIB_CUDNN:
        ES_CUDNN_FUNCS(ES_INSTALL_CUDNN)
        es_libh_install(lib);
        break;
    case ES_LIB_CUBLASLT:
        ES_CUBLASLT_FUNCS(ES_INSTALL_CUBLASLT)
        es_libh_install(lib);
        break;
    default:
        break;
    }
}
