/* Virtual handles of cuBLAS, cuBLASLt and cuDNN (see libh.h): the registry,
 * the recording thunks put over the creators, destroyers and setters of
 * the translating real table (so the hand-written wrappers of cublas.c,
 * cublaslt.c, cudnn.c and cudnn_backend.c reach them unchanged through
 * ES_REAL), the move hooks, and the compile-time check that every handle
 * parameter of shim/funcs.h is annotated.
 *
 * The registry lock is taken by creators, destroyers and the move hooks,
 * never by a translation or a setter. */
#include "intercept/virtual/libh.h"
#include "intercept/virtual/cudnn_vdesc.h"
#include "intercept/virtual/thunks.h"
#include "move/mover.h"
#include "move/vhandle.h"
#include "device/vdev.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

int es_libh_on;

enum { ES_LH_BLAS = 1, ES_LH_LT, ES_LH_DNN };

typedef struct es_libh {
    void *real;    /* first member: the library's handle now (NULL: destroyed, or
                      torn down by a move that could not re-create it) */
    uint32_t magic;
    int kind;
    int dead;      /* destroyed by the application */
    int vdev;      /* of ctx (-1: none known) */
    CUcontext ctx; /* the virtual context current at its creation */
    struct es_libh *next;
    /* recorded settings */
    void *stream;
    int has_stream;
    void *ws;
    size_t ws_size;
    int has_ws;
    int math, has_math;
    int pmode, has_pmode;
    int amode, has_amode;
    int sms, has_sms;
} es_libh_t;
_Static_assert(offsetof(es_libh_t, real) == offsetof(es_libh_head_t, real) &&
                   offsetof(es_libh_t, magic) == offsetof(es_libh_head_t, magic),
               "a virtual vendor handle starts with es_libh_head_t");

static pthread_mutex_t es_lh_mu = PTHREAD_MUTEX_INITIALIZER;
static es_libh_t *es_lh_list;

/* ---- every handle parameter is annotated (compile time) ------------------------------- */

#define ES_LH_IS_HANDLE(x) _Generic((x), cublasHandle_t: 1, cublasLtHandle_t: 1, cudnnHandle_t: 1, default: 0)
/* an empty argument list (a function without parameters) */
#define ES_LH_EMPTY ~, 1
#define ES_LH_EMPTY_CAT(x) ES_LH_EMPTY##x
#define ES_LH_IS_EMPTY(x) ES_PP_SECOND(ES_LH_EMPTY_CAT(x), 0)
#define ES_LH_CHK_PLAIN(x)                                                                   \
    ES_PP_IF(ES_LH_IS_EMPTY(x))(, _Static_assert(!ES_LH_IS_HANDLE(x),                        \
                                                 "a library handle parameter without its "   \
                                                 "V_ annotation (intercept/vargs.h)");)
#define ES_LH_CHK_V_BLAS(x) _Static_assert(_Generic((x), cublasHandle_t: 1, default: 0), "V_BLAS: not a cublasHandle_t");
#define ES_LH_CHK_V_LT(x) _Static_assert(_Generic((x), cublasLtHandle_t: 1, default: 0), "V_LT: not a cublasLtHandle_t");
#define ES_LH_CHK_V_DNN(x) _Static_assert(_Generic((x), cudnnHandle_t: 1, default: 0), "V_DNN: not a cudnnHandle_t");
#define ES_LH_CHK_ONE(x) ES_PP_IF(ES_PP_IS_ANN(x))(ES_PP_CAT(ES_LH_CHK_, x), ES_LH_CHK_PLAIN(x))
#define ES_LH_CHECK(kind, sym, gp, ver, fl, ret, params, args, err)                           \
    __attribute__((unused)) static void es_lh_chk_##sym params                              \
    {                                                                                        \
        ES_PP_EACH(ES_LH_CHK_ONE, ES_PP_NOTHING, ES_VA_UNPAREN args)                          \
    }
ES_CUBLAS_FUNCS(ES_LH_CHECK)
ES_CUBLASLT_FUNCS(ES_LH_CHECK)
ES_CUDNN_FUNCS(ES_LH_CHECK)

/* ---- registry ------------------------------------------------------------------------- */

/* A live object of kind (lock held), or NULL: h is only compared, never
 * read, before it is found. */
static es_libh_t *es_lh_find(const void *h, int kind)
{
    for (es_libh_t *o = es_lh_list; o; o = o->next)
        if (o == h)
            return o->kind == kind && !o->dead ? o : NULL;
    return NULL;
}

static int es_lh_new(void **out, void *real, int kind)
{
    es_libh_t *o = es_harena_alloc(sizeof(*o)); /* never given back (see libh.h) */
    if (!o)
        return -ENOMEM;
    o->real = real;
    o->magic = ES_LIBH_MAGIC;
    o->kind = kind;
    CUcontext c = NULL;
    if (!es_lib_ready(ES_LIB_CUDA) || ES_REAL(cuda, cuCtxGetCurrent)(&c) != CUDA_SUCCESS)
        c = NULL;
    o->ctx = c;
    o->vdev = c ? es_vh_vdev_of(c) : -1;
    pthread_mutex_lock(&es_lh_mu);
    o->next = es_lh_list;
    es_lh_list = o;
    pthread_mutex_unlock(&es_lh_mu);
    *out = o;
    return 0;
}

void *es_libh_from_real(const void *real)
{
    void *v = NULL;
    if (!real)
        return NULL;
    pthread_mutex_lock(&es_lh_mu);
    for (es_libh_t *o = es_lh_list; o && !v; o = o->next)
        if (!o->dead && o->real == real)
            v = o;
    pthread_mutex_unlock(&es_lh_mu);
    return v;
}

/* Forgets a destroyed handle's real object (the object itself stays, see
 * libh.h). Returns the real handle to destroy: NULL for one of the shim's
 * handles already destroyed, h itself for a handle that is not the shim's
 * (a library's own), like a translation. */
static void *es_lh_kill(const void *h, int kind)
{
    pthread_mutex_lock(&es_lh_mu);
    es_libh_t *o = es_lh_find(h, kind);
    void *r = es_libh_real(h);
    if (o) {
        o->real = NULL;
        o->dead = 1;
    }
    pthread_mutex_unlock(&es_lh_mu);
    return r;
}

/* The live object behind h (the setters' path: no lock, no walk; the
 * application does not set a handle while a move runs, moves happen with
 * every application thread outside the libraries). */
static es_libh_t *es_lh_obj(const void *h, int kind)
{
    es_libh_t *o = (es_libh_t *)h;
    return es_libh_on && o && o->magic == ES_LIBH_MAGIC && o->kind == kind && !o->dead ? o
                                                                                         : NULL;
}

/* Records a setting the library accepted on the live object h of kind. */
#define ES_LH_RECORD(h, kind, stmt)                                                          \
    do {                                                                                     \
        es_libh_t *o_ = es_lh_obj((h), (kind));                                              \
        if (o_) {                                                                            \
            stmt;                                                                            \
        }                                                                                    \
    } while (0)

/* The creators: the library's handle made, then wrapped (the library's
 * own status for a NULL output; out of memory: the real handle destroyed
 * and the library's allocation status). */
#define ES_LH_CREATOR(name, lib, create, destroy, htype, stype, ok, nomem, kind)              \
    static stype name(htype *handle)                                                         \
    {                                                                                        \
        htype real = NULL;                                                                   \
        if (!handle)                                                                         \
            return ES_RAW(lib, create)(handle);                                              \
        stype st = ES_RAW(lib, create)(&real);                                               \
        if (st != ok)                                                                        \
            return st;                                                                       \
        void *v;                                                                             \
        if (es_lh_new(&v, real, kind) != 0) {                                                \
            ES_RAW(lib, destroy)(real);                                                      \
            return nomem;                                                                    \
        }                                                                                    \
        *handle = v;                                                                         \
        return st;                                                                           \
    }

/* ---- cuBLAS --------------------------------------------------------------------------- */

ES_LH_CREATOR(es_lh_cublasCreate, cublas, cublasCreate_v2, cublasDestroy_v2, cublasHandle_t,
              cublasStatus_t, CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_ALLOC_FAILED, ES_LH_BLAS)

static cublasStatus_t es_lh_cublasDestroy(cublasHandle_t handle)
{
    return ES_RAW(cublas, cublasDestroy_v2)(es_lh_kill(handle, ES_LH_BLAS));
}

static cublasStatus_t es_lh_cublasSetStream(cublasHandle_t handle, cudaStream_t s)
{
    cublasStatus_t st = ES_RAW(cublas, cublasSetStream_v2)(es_libh_real(handle), s);
    if (st == CUBLAS_STATUS_SUCCESS) /* cuBLAS resets the workspace here */
        ES_LH_RECORD(handle, ES_LH_BLAS, (o_->stream = s, o_->has_stream = 1, o_->has_ws = 0));
    return st;
}

static cublasStatus_t es_lh_cublasSetWorkspace(cublasHandle_t handle, void *ws, size_t size)
{
    cublasStatus_t st =
        ES_RAW(cublas, cublasSetWorkspace_v2)(es_libh_real(handle), ws, size);
    if (st == CUBLAS_STATUS_SUCCESS)
        ES_LH_RECORD(handle, ES_LH_BLAS, (o_->ws = ws, o_->ws_size = size, o_->has_ws = 1));
    return st;
}

static cublasStatus_t es_lh_cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    cublasStatus_t st = ES_RAW(cublas, cublasSetMathMode)(es_libh_real(handle), mode);
    if (st == CUBLAS_STATUS_SUCCESS)
        ES_LH_RECORD(handle, ES_LH_BLAS, (o_->math = (int)mode, o_->has_math = 1));
    return st;
}

static cublasStatus_t es_lh_cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode)
{
    cublasStatus_t st =
        ES_RAW(cublas, cublasSetPointerMode_v2)(es_libh_real(handle), mode);
    if (st == CUBLAS_STATUS_SUCCESS)
        ES_LH_RECORD(handle, ES_LH_BLAS, (o_->pmode = (int)mode, o_->has_pmode = 1));
    return st;
}

static cublasStatus_t es_lh_cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode)
{
    cublasStatus_t st =
        ES_RAW(cublas, cublasSetAtomicsMode)(es_libh_real(handle), mode);
    if (st == CUBLAS_STATUS_SUCCESS)
        ES_LH_RECORD(handle, ES_LH_BLAS, (o_->amode = (int)mode, o_->has_amode = 1));
    return st;
}

static cublasStatus_t es_lh_cublasSetSmCountTarget(cublasHandle_t handle, int sms)
{
    cublasStatus_t st =
        ES_RAW(cublas, cublasSetSmCountTarget)(es_libh_real(handle), sms);
    if (st == CUBLAS_STATUS_SUCCESS)
        ES_LH_RECORD(handle, ES_LH_BLAS, (o_->sms = sms, o_->has_sms = 1));
    return st;
}

/* ---- cuBLASLt ------------------------------------------------------------------------- */

ES_LH_CREATOR(es_lh_cublasLtCreate, cublaslt, cublasLtCreate, cublasLtDestroy, cublasLtHandle_t,
              cublasStatus_t, CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_ALLOC_FAILED, ES_LH_LT)

static cublasStatus_t es_lh_cublasLtDestroy(cublasLtHandle_t handle)
{
    return ES_RAW(cublaslt, cublasLtDestroy)(es_lh_kill(handle, ES_LH_LT));
}

/* ---- cuDNN ------------------------------------------------------------------------------ */

ES_LH_CREATOR(es_lh_cudnnCreate, cudnn, cudnnCreate, cudnnDestroy, cudnnHandle_t, cudnnStatus_t,
              CUDNN_STATUS_SUCCESS, CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, ES_LH_DNN)

static cudnnStatus_t es_lh_cudnnDestroy(cudnnHandle_t handle)
{
    return ES_RAW(cudnn, cudnnDestroy)(es_lh_kill(handle, ES_LH_DNN));
}

static cudnnStatus_t es_lh_cudnnSetStream(cudnnHandle_t handle, cudaStream_t s)
{
    cudnnStatus_t st = ES_RAW(cudnn, cudnnSetStream)(es_libh_real(handle), s);
    if (st == CUDNN_STATUS_SUCCESS)
        ES_LH_RECORD(handle, ES_LH_DNN, (o_->stream = s, o_->has_stream = 1));
    return st;
}

/* Handles inside backend descriptors (CUDNN_TYPE_HANDLE attributes, e.g.
 * an execution plan's CUDNN_ATTR_EXECUTION_PLAN_HANDLE): the library gets
 * the real ones, the application reads back its own. */
#define ES_LH_MAX_ELEMS 8

static cudnnStatus_t es_lh_cudnnBackendSetAttribute(cudnnBackendDescriptor_t d,
                                                    cudnnBackendAttributeName_t name,
                                                    cudnnBackendAttributeType_t type,
                                                    int64_t count, const void *elems)
{
    if (type != CUDNN_TYPE_HANDLE || !elems || count < 1 || count > ES_LH_MAX_ELEMS)
        return ES_RAW(cudnn, cudnnBackendSetAttribute)(d, name, type, count, elems);
    cudnnHandle_t real[ES_LH_MAX_ELEMS];
    for (int64_t i = 0; i < count; i++)
        real[i] = es_libh_real(((const cudnnHandle_t *)elems)[i]);
    return ES_RAW(cudnn, cudnnBackendSetAttribute)(d, name, type, count, real);
}

static cudnnStatus_t es_lh_cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d,
                                                    cudnnBackendAttributeName_t name,
                                                    cudnnBackendAttributeType_t type,
                                                    int64_t requested, int64_t *count,
                                                    void *elems)
{
    cudnnStatus_t st =
        ES_RAW(cudnn, cudnnBackendGetAttribute)(d, name, type, requested, count, elems);
    if (st != CUDNN_STATUS_SUCCESS || type != CUDNN_TYPE_HANDLE || !elems || !count)
        return st;
    int64_t n = *count < requested ? *count : requested;
    for (int64_t i = 0; i < n; i++) {
        void *v = es_libh_from_real(((cudnnHandle_t *)elems)[i]);
        if (v)
            ((cudnnHandle_t *)elems)[i] = v;
    }
    return st;
}

/* ---- moves --------------------------------------------------------------------------------- */

static void es_lh_msg(char *msg, size_t len, const char *what, const es_libh_t *o, int st)
{
    static const char *const kn[] = { "?", "cuBLAS", "cuBLASLt", "cuDNN" };
    if (msg && len)
        snprintf(msg, len, "%s a %s handle of vdev %d: status %d", what, kn[o->kind], o->vdev,
                 st);
}

/* Whether o goes with vdev: made in one of its contexts, or with no
 * context current (it goes with whichever vdev moves). */
static int es_lh_of(const es_libh_t *o, int vdev)
{
    return !o->dead && (o->vdev == vdev || o->vdev < 0);
}

int es_libh_down(int vdev, char *msg, size_t msglen)
{
    /* cuDNN's backend descriptors first: they name the handles */
    es_dnnd_down(vdev, msg, msglen);
    pthread_mutex_lock(&es_lh_mu);
    for (es_libh_t *o = es_lh_list; o; o = o->next) {
        if (!es_lh_of(o, vdev) || !o->real)
            continue;
        /* cuBLAS waits for the handle's work in its own context; the
         * others hold nothing a queued kernel needs. A handle that cannot
         * be destroyed (its context destroyed by the application) is
         * dropped: it could not be used anyway */
        int st = o->kind == ES_LH_BLAS  ? (int)ES_RAW(cublas, cublasDestroy_v2)(o->real)
                 : o->kind == ES_LH_LT ? (int)ES_RAW(cublaslt, cublasLtDestroy)(o->real)
                                       : (int)ES_RAW(cudnn, cudnnDestroy)(o->real);
        o->real = NULL;
        if (st != 0) {
            char why[160];
            es_lh_msg(why, sizeof(why), "destroying", o, st);
            ES_WARN("%s (dropped)", why);
        }
    }
    pthread_mutex_unlock(&es_lh_mu);
    return 0;
}

/* Makes o's real handle in the current context and gives it o's
 * settings (lock held). Returns the library's status. */
static int es_lh_remake(es_libh_t *o)
{
    int st;
    switch (o->kind) {
    case ES_LH_BLAS: {
        cublasHandle_t h = NULL;
        st = (int)ES_RAW(cublas, cublasCreate_v2)(&h);
        if (st == 0 && o->has_stream)
            st = (int)ES_RAW(cublas, cublasSetStream_v2)(h, (cudaStream_t)o->stream);
        if (st == 0 && o->has_ws)
            st = (int)ES_RAW(cublas, cublasSetWorkspace_v2)(h, o->ws, o->ws_size);
        if (st == 0 && o->has_math)
            st = (int)ES_RAW(cublas, cublasSetMathMode)(h, (cublasMath_t)o->math);
        if (st == 0 && o->has_pmode)
            st = (int)ES_RAW(cublas, cublasSetPointerMode_v2)(h, (cublasPointerMode_t)o->pmode);
        if (st == 0 && o->has_amode)
            st = (int)ES_RAW(cublas, cublasSetAtomicsMode)(h, (cublasAtomicsMode_t)o->amode);
        if (st == 0 && o->has_sms)
            st = (int)ES_RAW(cublas, cublasSetSmCountTarget)(h, o->sms);
        if (st != 0 && h)
            ES_RAW(cublas, cublasDestroy_v2)(h);
        else
            o->real = h;
        break;
    }
    case ES_LH_LT: {
        cublasLtHandle_t h = NULL;
        st = (int)ES_RAW(cublaslt, cublasLtCreate)(&h);
        if (st == 0)
            o->real = h;
        break;
    }
    default: {
        cudnnHandle_t h = NULL;
        st = (int)ES_RAW(cudnn, cudnnCreate)(&h);
        if (st == 0 && o->has_stream)
            st = (int)ES_RAW(cudnn, cudnnSetStream)(h, (cudaStream_t)o->stream);
        if (st != 0 && h)
            ES_RAW(cudnn, cudnnDestroy)(h);
        else
            o->real = h;
        break;
    }
    }
    return st;
}

int es_libh_up(int vdev, char *msg, size_t msglen)
{
    int rc = 0;
    /* the libraries read the device they are created on through the
     * virtual devices: those answer for where vdev is now (the report of
     * a whole EST's move would tell them only after every vdev moved) */
    int dev = es_vh_device(vdev);
    if (dev >= 0)
        es_vdev_set_slot(dev);
    pthread_mutex_lock(&es_lh_mu);
    for (es_libh_t *o = es_lh_list; o; o = o->next) {
        if (!es_lh_of(o, vdev) || o->real)
            continue;
        /* in the context it was made in (virtual: the same one, now on the
         * new GPU); one the application destroyed leaves the handle
         * without a real one (the library's status on every call) */
        if (o->ctx && ES_REAL(cuda, cuCtxPushCurrent_v2)(o->ctx) != CUDA_SUCCESS) {
            char why[160];
            es_lh_msg(why, sizeof(why), "no context for", o, 0);
            ES_WARN("%s: not re-made", why);
            continue;
        }
        int st = es_lh_remake(o);
        CUcontext junk;
        if (o->ctx)
            ES_REAL(cuda, cuCtxPopCurrent_v2)(&junk);
        if (st != 0 && !rc) {
            es_lh_msg(msg, msglen, "re-creating", o, st);
            rc = -EIO;
        }
    }
    pthread_mutex_unlock(&es_lh_mu);
    /* then the backend descriptors, given the new handles */
    es_dnnd_up(vdev, NULL, 0);
    return rc;
}

/* ---- installation ----------------------------------------------------------------------- */

void es_libh_install(int lib)
{
    static int once;
    if (!__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL)) {
        es_libh_on = es_vh_on && es_cfg.move != ES_MOVE_NOLIB;
        es_dnnd_setup(es_libh_on);
        if (es_libh_on)
            es_mover_set_lib_hooks(es_libh_down, es_libh_up);
    }
    if (!es_libh_on)
        return;
/* only over a function the library has (a missing one keeps its stub) */
#define ES_LH_PUT(l, sym, fn)                                                                \
    if (es_raw_##l.sym != es_real_missing_ptr(ES_LIB_##l, ES_IDX_##sym))                     \
        es_real_##l.sym = fn;
#define ES_LIB_cublas ES_LIB_CUBLAS
#define ES_LIB_cublaslt ES_LIB_CUBLASLT
#define ES_LIB_cudnn ES_LIB_CUDNN
    switch (lib) {
    case ES_LIB_CUBLAS:
        ES_LH_PUT(cublas, cublasCreate_v2, es_lh_cublasCreate)
        ES_LH_PUT(cublas, cublasDestroy_v2, es_lh_cublasDestroy)
        ES_LH_PUT(cublas, cublasSetStream_v2, es_lh_cublasSetStream)
        ES_LH_PUT(cublas, cublasSetWorkspace_v2, es_lh_cublasSetWorkspace)
        ES_LH_PUT(cublas, cublasSetMathMode, es_lh_cublasSetMathMode)
        ES_LH_PUT(cublas, cublasSetPointerMode_v2, es_lh_cublasSetPointerMode)
        ES_LH_PUT(cublas, cublasSetAtomicsMode, es_lh_cublasSetAtomicsMode)
        ES_LH_PUT(cublas, cublasSetSmCountTarget, es_lh_cublasSetSmCountTarget)
        break;
    case ES_LIB_CUBLASLT:
        ES_LH_PUT(cublaslt, cublasLtCreate, es_lh_cublasLtCreate)
        ES_LH_PUT(cublaslt, cublasLtDestroy, es_lh_cublasLtDestroy)
        break;
    case ES_LIB_CUDNN:
        ES_LH_PUT(cudnn, cudnnCreate, es_lh_cudnnCreate)
        ES_LH_PUT(cudnn, cudnnDestroy, es_lh_cudnnDestroy)
        ES_LH_PUT(cudnn, cudnnSetStream, es_lh_cudnnSetStream)
        ES_LH_PUT(cudnn, cudnnBackendSetAttribute, es_lh_cudnnBackendSetAttribute)
        ES_LH_PUT(cudnn, cudnnBackendGetAttribute, es_lh_cudnnBackendGetAttribute)
        break;
    default:
        break;
    }
}

int es_libh_stream(const void *h, void **stream)
{
    const es_libh_head_t *hd = h;
    if (!es_libh_on || !h || !es_harena_has(hd) || hd->magic != ES_LIBH_MAGIC)
        return 0;
    const es_libh_t *o = h;
    if (o->dead || o->kind == ES_LH_LT)
        return 0;
    *stream = o->has_stream ? o->stream : NULL;
    return 1;
}
