/* libeasyscale.so's spine: configuration, logging, and the real functions of
 * the intercepted libraries (libcuda.so.1, libcublas.so.13, libcudnn.so.9,
 * libnccl.so.2, libcublasLt.so.13), loaded lazily by soname with dlopen + dlsym.
 *
 * Contract for code in intercept/ and context/:
 * - es_cfg is filled by the constructor before main() and never changes
 *   afterwards (read it without locks).
 * - ES_LOG(level, fmt, ...) evaluates nothing (not even its arguments) when
 *   the level is off.
 * - ES_REAL(lib, sym) is the real function of a wrapped symbol; call
 *   ES_ENTER(lib, sym) first (it loads the library on first use and counts
 *   the call when statistics are on). A real function that could not be
 *   found is a stub returning the library's "not initialized" status, so
 *   ES_REAL(...) is never NULL.
 * - Everything here is safe to call from any thread; nothing on the
 *   pass-through path takes a lock or allocates.
 */
#ifndef ES_SHIM_H
#define ES_SHIM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "intercept/funcs.h"
#include "context/door.h"

#define ES_EXPORT __attribute__((visibility("default")))

/* ---- configuration ------------------------------------------------------ */

enum es_determinism { ES_DET_OFF = 0, ES_DET_D1 = 1, ES_DET_D2 = 2 };
enum es_log_level { ES_LOG_ERROR = 0, ES_LOG_WARN = 1, ES_LOG_INFO = 2, ES_LOG_DEBUG = 3 };
enum es_audit_mode { ES_AUDIT_MODE_OFF = 0, ES_AUDIT_MODE_WARN = 1, ES_AUDIT_MODE_STRICT = 2 };
/* EASYSCALE_COLLECTIVES: plain NCCL, or the shim's virtual collectives
 * (context/coll.h) and virtual devices (context/vdev.h). */
enum es_coll_mode { ES_COLL_NCCL = 0, ES_COLL_VIRTUAL = 1 };
/* EASYSCALE_COLL_TRANSPORT: how the ESTs of a communicator move data. */
enum es_coll_transport { ES_COLL_TP_AUTO = 0, ES_COLL_TP_DEVICE = 1, ES_COLL_TP_HOST = 2 };

#define ES_CFG_HOLD_MAX 256 /* steps in EASYSCALE_HOLD_STEPS */

typedef struct es_config {
    int determinism;         /* enum es_determinism */
    int log_level;           /* enum es_log_level */
    int log_fd;              /* 2 or EASYSCALE_LOG_FILE opened for append */
    int stats;               /* count calls per wrapped function (log=debug) */
    int audit;               /* enum es_audit_mode (EASYSCALE_AUDIT) */
    char canonical[128];     /* EASYSCALE_CANONICAL_DEVICE as given ("" unset) */
    /* moving ESTs (docs/MOVING.md) */
    int move;                /* enum es_move_mode (EASYSCALE_MOVE) */
    int move_timeout_s;      /* EASYSCALE_MOVE_TIMEOUT */
    int move_signal;         /* EASYSCALE_MOVE_SIGNAL (0: none) */
    int swap_streams;        /* EASYSCALE_SWAP_STREAMS */
    int swap_sums;           /* EASYSCALE_SWAP_CHECKSUMS */
    int time_slice;          /* EASYSCALE_TIME_SLICE */
    int collectives;         /* enum es_coll_mode (EASYSCALE_COLLECTIVES; default: virtual
                                at d1/d2, nccl at off) */
    int coll_transport;      /* enum es_coll_transport (EASYSCALE_COLL_TRANSPORT) */
    int coll_timeout_s;      /* EASYSCALE_COLL_TIMEOUT, seconds (default 30) */
    size_t coll_chunk;       /* EASYSCALE_COLL_CHUNK, bytes (0: the engine's default) */
    char slot[64];           /* EASYSCALE_SLOT as given ("" unset): syntax checked here,
                                the device itself by context/vdev.c after cuInit */
    /* Control channel (shim/control.c); all unset unless EASYSCALE_CONTROL
     * is set. */
    char control[128];       /* unix socket path, or "tcp:HOST:PORT" ("" off) */
    char token[72];          /* EASYSCALE_TOKEN (required with tcp) */
    int heartbeat_ms;        /* EASYSCALE_HEARTBEAT_MS */
    int rank, world;         /* RANK, WORLD_SIZE (required with a control channel) */
    /* Scheduled holds (shim/step.h): the steps at which the ESTs wait for
     * the controller's scheduled events (easyscale-ctl run sets them). */
    uint64_t hold[ES_CFG_HOLD_MAX]; /* EASYSCALE_HOLD_STEPS, strictly ascending */
    int nhold;
    int hold_timeout_s;      /* EASYSCALE_HOLD_TIMEOUT (default 600) */
    char digest[512];        /* EASYSCALE_DIGEST: collective digests' directory ("" off) */
} es_config_t;

/* off: handles real, no moves; on: virtual handles, memory registry, moves;
 * nomem: for negative controls only, moves that leave device memory behind
 * (a run that is moved then breaks); nolib: likewise, moves that leave the
 * cuBLAS, cuBLASLt and cuDNN handles on the old GPU (intercept/libh.h). */
enum es_move_mode { ES_MOVE_OFF = 0, ES_MOVE_ON = 1, ES_MOVE_NOMEM = 2, ES_MOVE_NOLIB = 3 };

extern es_config_t es_cfg;

/* Parses the EASYSCALE_* variables into *cfg. Returns 0, or -EINVAL with a
 * one-line explanation in msg. Pure: reads only the environment. */
int es_config_parse(es_config_t *cfg, char *msg, size_t msglen);

/* ---- logging ------------------------------------------------------------- */

void es_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ES_LOG(level, ...)                                                     \
    do {                                                                       \
        if (__builtin_expect(es_cfg.log_level >= (level), 0))                  \
            es_log_write((level), __VA_ARGS__);                                \
    } while (0)
#define ES_ERROR(...) ES_LOG(ES_LOG_ERROR, __VA_ARGS__)
#define ES_WARN(...) ES_LOG(ES_LOG_WARN, __VA_ARGS__)
#define ES_INFO(...) ES_LOG(ES_LOG_INFO, __VA_ARGS__)
#define ES_DEBUG(...) ES_LOG(ES_LOG_DEBUG, __VA_ARGS__)

/* ---- real functions ------------------------------------------------------ */

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

/* The libraries' own functions. While handles are virtual (context/
 * vhandle.h) the es_real_* entries that ES_REAL() calls are translating
 * thunks over these (intercept/thunks.c); otherwise both tables agree. */
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

/* Loads the library (once; thread-safe; re-entrant calls from inside the
 * loading return at once) and counts the call of function idx. */
void es_slowpath(int lib, int idx);

#define ES_LIBID_cuda ES_LIB_CUDA
#define ES_LIBID_cublas ES_LIB_CUBLAS
#define ES_LIBID_cudnn ES_LIB_CUDNN
#define ES_LIBID_nccl ES_LIB_NCCL
#define ES_LIBID_cublaslt ES_LIB_CUBLASLT

/* Every wrapper enters through the door (context/door.h): ES_ENTER declares
 * a guard whose cleanup leaves it when the wrapper returns. Use it once, at
 * the top of a wrapper's body. */
static inline void es_door_guard_leave(int *g)
{
    (void)g;
    es_door_leave();
}
/* The slow path of an entry: load the library / count the call (slow),
 * then the door's (door: a move is pending or the thread is new). */
void es_enter_slow(int lib, int idx, int door);

#define ES_ENTER(lib, sym)                                                     \
    __attribute__((cleanup(es_door_guard_leave))) int es_door_g_ = es_door_enter(); \
    if (__builtin_expect(es_door_g_ |                                          \
                         __atomic_load_n(&es_slow[ES_LIBID_##lib], __ATOMIC_ACQUIRE), 0)) \
        es_enter_slow(ES_LIBID_##lib, ES_IDX_##sym, es_door_g_)
#define ES_REAL(lib, sym) (es_real_##lib.sym)
#define ES_RAW(lib, sym) (es_raw_##lib.sym)

/* While handles are virtual, the refusing stub for a driver function that
 * takes one and is not wrapped (intercept/refuse.c), by exported symbol
 * (dlsym) or by the name cuGetProcAddress is asked for; NULL otherwise. */
void *es_refusal_by_symbol(const char *name);
/* While the vendors' handles are virtual (intercept/libh.h): the shim's
 * translating wrapper of a cuBLAS / cuBLASLt / cuDNN function that takes
 * one of their handles and that funcs.h does not list (intercept/libh_gen.c),
 * when the library has it (handle: dlsym's; a specific one only when it
 * answers with the very function the shim calls); NULL otherwise. */
void *es_libh_wrapper_by_symbol(void *handle, const char *name);
void *es_refusal_by_base(const char *base);

/* Called once a library is loaded, its tables filled (intercept/thunks.c):
 * the engine's driver table, the translating thunks. */
void es_lib_loaded(int lib, void *handle, void *(*lookup)(void *, const char *));

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

/* The real function of wrapped function idx of lib (or its stub). */
void *es_real_ptr(int lib, int idx);
/* The stub standing for function idx of lib when the library lacks it. */
void *es_real_missing_ptr(int lib, int idx);

/* Whether the real library (loaded) has wrapped function idx of lib. */
int es_real_present(int lib, int idx);

/* Whether wrapped function idx of lib reveals the device identity (kind I). */
int es_fn_is_identity(int lib, int idx);

/* Whether an address lies inside one of the vendor libraries (cuBLAS,
 * cuDNN, NCCL, cuBLASLt): they keep the true device identity in d2. */
int es_addr_in_vendor_lib(const void *addr);

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

/* Constructor pieces. */
void es_env_defaults(void);          /* CUBLAS_WORKSPACE_CONFIG, NCCL_* */
void es_resolve_atfork(int phase);   /* 0 prepare, 1 parent, 2 child */
void es_log_atfork(int phase);

#endif
