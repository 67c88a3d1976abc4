/* The real functions of the intercepted libraries (libcuda.so.1,
 * libcublas.so.13, libcudnn.so.9, libnccl.so.2, libcublasLt.so.13), loaded
 * lazily by soname with dlopen + dlsym (shim/resolve.c), in tables generated
 * from the X-macro list shim/funcs.h.
 *
 * Contract:
 * - ES_REAL(lib, sym) is the real function of a wrapped symbol. A wrapper
 *   enters first (ES_ENTER, intercept/enter.h: loads the library on first
 *   use, counts the call when statistics are on); the shim's own callers
 *   use es_lib_ready() first. A real function that could not be found is a
 *   stub returning the library's "not initialized" status, so ES_REAL(...)
 *   is never NULL.
 * - Everything here is safe to call from any thread; nothing on the
 *   pass-through path takes a lock or allocates.
 */
#ifndef ES_SHIM_REAL_H
#define ES_SHIM_REAL_H

#include <pthread.h>
#include <stddef.h>

#include "shim/funcs.h"

#include "shim/export.h"

enum es_lib_id { ES_LIB_CUDA = 0, ES_LIB_CUBLAS, ES_LIB_CUDNN, ES_LIB_NCCL, ES_LIB_CUBLASLT,
                 ES_NLIBS };

/* Index of every wrapped symbol in its library's table. */
#define ES_IDX_ENUM(kind, sym, gp, ver, fl, ret, params, args, err) ES_IDX_##sym,
enum { ES_CUDA_FUNCS(ES_IDX_ENUM) ES_CUDA_N };
enum { ES_CUBLAS_FUNCS(ES_IDX_ENUM) ES_CUBLAS_N };
enum { ES_CUDNN_FUNCS(ES_IDX_ENUM) ES_CUDNN_N };
enum { ES_NCCL_FUNCS(ES_IDX_ENUM) ES_NCCL_N };
enum { ES_CUBLASLT_FUNCS(ES_IDX_ENUM) ES_CUBLASLT_N };
#undef ES_IDX_ENUM

/* The real-function tables: one typed member per wrapped symbol. */
#define ES_REAL_MEMBER(kind, sym, gp, ver, fl, ret, params, args, err) ret (*sym) params;
typedef struct { ES_CUDA_FUNCS(ES_REAL_MEMBER) } es_real_cuda_t;
typedef struct { ES_CUBLAS_FUNCS(ES_REAL_MEMBER) } es_real_cublas_t;
typedef struct { ES_CUDNN_FUNCS(ES_REAL_MEMBER) } es_real_cudnn_t;
typedef struct { ES_NCCL_FUNCS(ES_REAL_MEMBER) } es_real_nccl_t;
typedef struct { ES_CUBLASLT_FUNCS(ES_REAL_MEMBER) } es_real_cublaslt_t;
#undef ES_REAL_MEMBER

extern es_real_cuda_t es_real_cuda;
extern es_real_cublas_t es_real_cublas;
extern es_real_cudnn_t es_real_cudnn;
extern es_real_nccl_t es_real_nccl;
extern es_real_cublaslt_t es_real_cublaslt;

/* The libraries' own functions. While handles are virtual (move/
 * vhandle.h) the es_real_* entries that ES_REAL() calls are translating
 * thunks over these (intercept/virtual/thunks.c); otherwise both tables agree. */
extern es_real_cuda_t es_raw_cuda;
extern es_real_cublas_t es_raw_cublas;
extern es_real_cudnn_t es_raw_cudnn;
extern es_real_nccl_t es_raw_nccl;
extern es_real_cublaslt_t es_raw_cublaslt;

/* Non-zero while a library is not loaded yet or statistics are on: the one
 * branch of a pass-through wrapper. */
extern int es_slow[ES_NLIBS];

/* The launch wrappers' one flag (intercept/cuda.c): non-zero while libcuda
 * is not loaded yet or statistics are on (1), plus one per live handle of a
 * flagged kernel (audit/modaudit.c). A counter, changed only by atomic
 * add/sub, so the two sources never race. */
extern unsigned es_launch_gate;

/* Forces every wrapper onto its slow path (on) or gives the flags back
 * their own value (off): while a time-sliced EST keeps collectives
 * (coll/defer.c), every call is looked at before it runs
 * (intercept/tsdefer.c). Calls nest: each on needs its off. */
void es_slow_force(int on);

/* Loads the library (once; thread-safe; re-entrant calls from inside the
 * loading return at once) and counts the call of function idx. */
void es_slowpath(int lib, int idx);

#define ES_LIBID_cuda ES_LIB_CUDA
#define ES_LIBID_cublas ES_LIB_CUBLAS
#define ES_LIBID_cudnn ES_LIB_CUDNN
#define ES_LIBID_nccl ES_LIB_NCCL
#define ES_LIBID_cublaslt ES_LIB_CUBLASLT

#define ES_REAL(lib, sym) (es_real_##lib.sym)
#define ES_RAW(lib, sym) (es_raw_##lib.sym)

/* Makes sure the library is loaded (for the shim's own use of real
 * functions). Returns 1 when the library was found, 0 otherwise. */
int es_lib_ready(int lib);
/* A function of library lib by name, looked up in the library itself
 * (loaded first if needed); NULL when it lacks it. */
void *es_lib_sym(int lib, const char *name);
/* The real dlsym (the shim's own lookups). */
void *es_dlsym_real(void *handle, const char *name);

/* The wrapper a real function pointer of library lib stands for (the
 * pointer map built when the library was loaded), or NULL. Sets *idx. */
void *es_wrapper_for_real(int lib, const void *real, int *idx);

/* The real function of wrapped function idx of lib (or its stub): what
 * ES_REAL calls (while handles are virtual, a translating thunk). */
void *es_real_ptr(int lib, int idx);
/* The library's own function, never a thunk (or the stub). */
void *es_raw_ptr(int lib, int idx);
/* The stub standing for function idx of lib when the library lacks it. */
void *es_real_missing_ptr(int lib, int idx);

/* Whether the real library (loaded) has wrapped function idx of lib. */
int es_real_present(int lib, int idx);

/* Whether wrapped function idx of lib reveals the device identity (kind I). */
int es_fn_is_identity(int lib, int idx);

/* Which of NVIDIA's libraries an address lies in, by the file name of the
 * loaded object (one dladdr): ES_OBJ_OTHER for anything else (the
 * application, the shim). */
enum es_obj_kind { ES_OBJ_OTHER = 0, ES_OBJ_CUDART, ES_OBJ_CUBLAS, ES_OBJ_CUDNN, ES_OBJ_NCCL };
int es_addr_kind(const void *addr);
/* Whether an address lies inside one of the vendor libraries (cuBLAS,
 * cuDNN, NCCL, cuBLASLt): they keep the true device identity in d2. */
int es_addr_in_vendor_lib(const void *addr);
static inline int es_obj_is_vendor(int kind)
{
    return kind == ES_OBJ_CUBLAS || kind == ES_OBJ_CUDNN || kind == ES_OBJ_NCCL;
}

/* Per-function counters (statistics on): by_getproc is counted by
 * intercept/cuda.c's cuGetProcAddress wrappers. */
void es_stat_getproc(int lib, int idx);

/* Per-thread re-entrancy guard: bit (1 << lib) is set while this thread
 * loads that library; a wrapper or dlsym reached from inside the loading
 * (the library's constructors) does not wait for the load in progress. */
extern __thread int es_in_shim;

/* One lock for the shim's registries (handles, workspaces, modules); never
 * taken on a pass-through path. Reset across fork. */
extern pthread_mutex_t es_state_lock;

#endif
