/* simcuda driver internals: the objects behind the CUDA handles and the
 * helpers the driver's source files share. Not a public API: only
 * sim/driver/ sources include it. See sim/driver/driver.c for the design. */
#ifndef SIM_DRIVER_INTERNAL_H
#define SIM_DRIVER_INTERNAL_H

/* As when NVIDIA builds its driver: cuda.h then declares every exported
 * name, the _ptsz/_ptds variants in its body and the legacy unversioned ones
 * at its end, and #undefs its renaming macros, so we define exact names. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/include/simcuda_twin.h"

#define SIM_DRIVER_VERSION 13000
#define SIM_MAX_DEVICES 64
#define SIM_VMM_GRANULARITY (2u << 20)
#define SIM_MAX_PEERS 8 /* peer contexts one context may access (as on GPUs) */

/* ---- handle registry: every live handle, so a stale one is refused -------- */
enum sim_htype {
    SIM_H_CTX = 1,
    SIM_H_STREAM,
    SIM_H_EVENT,
    SIM_H_MODULE,
    SIM_H_FUNC,
    SIM_H_LIBRARY,
    SIM_H_KERNEL,
    SIM_H_PHYS,
    SIM_H_GRAPH,      /* sim/driver/capture.c */
    SIM_H_GRAPH_EXEC,
};
void sim_reg_add(const void *h, int type);
void sim_reg_del(const void *h);
int sim_reg_has(const void *h, int type);

/* ---- devices ----------------------------------------------------------------- */
typedef struct sim_model {
    const char *key;          /* "a100" */
    const char *name;         /* marketing name */
    const char *name_big;     /* name for the large-memory variant, or NULL */
    unsigned long long big_from; /* capacity from which name_big applies */
    int cc_major, cc_minor;
    int sms;
    int max_threads_per_sm;
    int max_blocks_per_sm;
    int smem_per_sm, smem_optin;
    int clock_khz, mem_clock_khz, bus_width;
    int l2_bytes;
    int async_engines;
    double slowness;
} sim_model_t;

struct sim_ctx;
typedef struct sim_device {
    const sim_model_t *model;
    unsigned long long capacity; /* bytes */
    int phys;                    /* index in SIMCUDA_DEVICES */
    unsigned char uuid[16];
    char name[96];
    int pci_bus;
    struct sim_ctx *primary;     /* permanent object; active flag inside */
    unsigned primary_flags;
} sim_device_t;

extern sim_device_t sim_devices[SIM_MAX_DEVICES]; /* visible, in CUDA order */
extern int sim_ndevices;
extern double sim_time_scale;

int sim_devices_init(void);  /* returns CUresult */
sim_device_t *sim_dev(CUdevice d); /* NULL if invalid */

/* ---- initialisation ---------------------------------------------------------- */
extern atomic_int sim_inited;
#define SIM_CHECK_INIT()                                                    \
    do {                                                                    \
        if (!atomic_load_explicit(&sim_inited, memory_order_acquire))       \
            return CUDA_ERROR_NOT_INITIALIZED;                              \
    } while (0)
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* SIMCUDA_TRACE=1: sim_trace logs a line to stderr ("simcuda trace: ..."). */
int sim_trace_on(void);
void sim_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- contexts ------------------------------------------------------------------ */
struct sim_stream;
typedef struct sim_ctx {
    int dev;                  /* visible ordinal */
    int is_primary;
    int active;
    int refs;                 /* primary: retain count */
    unsigned flags;
    unsigned long long id;
    pthread_mutex_t mu;       /* protects the stream list */
    struct sim_stream *streams; /* user streams and per-thread streams */
    struct sim_stream *legacy;
    size_t limits[16];
    /* contexts this one may access (cuCtxEnablePeerAccess), under mu; a
     * peer that was destroyed since has another id */
    struct { struct sim_ctx *c; unsigned long long id; } peers[SIM_MAX_PEERS];
    int npeers;
    struct sim_ctx *next_free; /* a destroyed created context, to reuse */
} sim_ctx_t;

/* current context of the calling thread (NULL if none) */
sim_ctx_t *sim_ctx_current(void);
/* Makes c current on the calling thread (stream workers). */
void sim_ctx_bind(sim_ctx_t *c);
/* Resolves the current context; returns CUDA_SUCCESS or an error. */
CUresult sim_ctx_get(sim_ctx_t **out);
int sim_ctx_valid(sim_ctx_t *c);
void sim_ctx_teardown(sim_ctx_t *c);
void sim_ctx_fork_reset(void);

/* ---- streams ------------------------------------------------------------------- */
enum sim_op_type {
    SIM_OP_HOST = 1,
    SIM_OP_CALLBACK,
    SIM_OP_COPY,
    SIM_OP_COPY2D,
    SIM_OP_SET,
    SIM_OP_KERNEL,
    SIM_OP_RECORD,
    SIM_OP_WAIT_EVENT,
    SIM_OP_WAIT_STREAM,
    SIM_OP_FREE,
    SIM_OP_NOP,
    SIM_OP_MEMOP, /* a stream memory operation (sim/driver/memop.c) */
};

struct sim_event;
struct sim_func;

/* A stream memory operation: kind is a CUstreamBatchMemOpType, flags its
 * flags; host: the word is host memory the process reaches. */
typedef struct sim_memop {
    uint64_t addr, value;
    unsigned flags;
    int kind;
    int host;
} sim_memop_t;

#define SIM_INLINE_PARAMS 512
#define SIM_INLINE_NPARAMS 32

typedef struct sim_op {
    struct sim_op *next;
    int type;
    uint64_t ticket;   /* process-wide enqueue order (SIMCUDA_CHAOS) */
    union {
        struct { CUhostFn fn; void *data; } host;
        struct { CUstreamCallback fn; void *data; } cb;
        struct { void *dst; const void *src; size_t n; void *stage; int peer; } copy;
        struct { char *dst; const char *src; size_t dpitch, spitch, width, height; } copy2d;
        struct { char *dst; size_t pitch, width, height; uint32_t val; int elem; } set;
        struct {
            struct sim_func *fn;
            simcuda_launch_t l;
            void **params;  /* points into pbuf/pptr or a malloc'd block */
            void *heap;     /* malloc'd when the inline buffers are too small */
        } k;
        struct { struct sim_event *ev; uint64_t gen; } ev;
        struct { struct sim_stream *s; uint64_t seq; } ws;
        struct { CUdeviceptr p; } fr;
        sim_memop_t mo;
    } u;
    void *pptr[SIM_INLINE_NPARAMS];
    _Alignas(16) unsigned char pbuf[SIM_INLINE_PARAMS];
} sim_op_t;

enum sim_stream_kind { SIM_STREAM_USER, SIM_STREAM_LEGACY, SIM_STREAM_PTDS };

typedef struct sim_stream {
    sim_ctx_t *ctx;
    int kind;
    unsigned flags;
    int priority;
    unsigned long long id;
    struct sim_stream *next;     /* in ctx->streams */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;      /* worker waits for work */
    pthread_cond_t cv_done;      /* others wait for progress */
    sim_op_t *head, *tail;
    sim_op_t *pool;              /* free nodes */
    _Atomic uint64_t enq, done;
    int stop;
    int worker_running;
    pthread_t thread;
    struct sim_dchan **chans;    /* per device: channel to its server (isolation) */
    sim_op_t *posted_head, *posted_tail; /* posted to the server, not yet done (worker only) */
} sim_stream_t;

/* Resolves a CUstream handle (NULL, LEGACY, PER_THREAD or a created one)
 * in the current context. */
CUresult sim_stream_resolve(CUstream h, sim_stream_t **out);
/* Allocates an op node of the stream (never NULL: falls back to malloc). */
sim_op_t *sim_op_alloc(sim_stream_t *s);
/* Enqueues (adds implicit legacy-stream dependencies first); on a
 * capturing stream the capture takes the operation (sim/driver/capture.h).
 * Returns CUDA_SUCCESS or the capture's error (op then belongs to it). */
CUresult sim_enqueue(sim_stream_t *s, sim_op_t *op);
CUresult sim_stream_sync(sim_stream_t *s);
sim_stream_t *sim_stream_new(sim_ctx_t *c, int kind, unsigned flags, int prio);
/* Destroys: the worker drains the queue and exits; the object stays, and
 * is reused by a later sim_stream_new. */
void sim_stream_release(sim_stream_t *s);
void sim_stream_fork_reset(void);
CUresult sim_ctx_sync(sim_ctx_t *c);
/* Runs a SIM_OP_MEMOP on the stream's worker (sim/driver/memop.c): its
 * CUresult (a fault: CUDA_ERROR_ILLEGAL_ADDRESS). */
CUresult sim_memop_run(sim_stream_t *s, sim_op_t *op);
/* Runs op synchronously via stream s: enqueue then wait for it. */
CUresult sim_run_sync(sim_stream_t *s, sim_op_t *op);

/* ---- events -------------------------------------------------------------------- */
typedef struct sim_event {
    sim_ctx_t *ctx;
    unsigned flags;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t rec_gen;    /* generation of the last record (0: never) */
    uint64_t done_gen;   /* last completed generation */
    struct timespec ts;  /* when done_gen completed */
    const void *rec_stream; /* the stream of the last record, for SIMCUDA_CHAOS */
    _Atomic int refs;
} sim_event_t;
void sim_event_unref(sim_event_t *e);

/* ---- memory -------------------------------------------------------------------- */
enum sim_range_kind {
    SIM_R_DEVICE = 1, /* cuMemAlloc */
    SIM_R_HOST,       /* cuMemAllocHost / cuMemHostAlloc */
    SIM_R_REGISTERED, /* cuMemHostRegister */
    SIM_R_RESERVE,    /* cuMemAddressReserve */
};
typedef struct sim_range {
    uintptr_t base;
    size_t size;      /* requested size */
    size_t span;      /* mapped/accounted size */
    int kind;
    int dev;          /* visible ordinal (-1 for host memory) */
    sim_ctx_t *ctx;
    unsigned flags;
    unsigned long long id;
    int sync_memops;  /* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as set */
    int backing;      /* backing file id (sim_file_alloc), -1 none */
    uint64_t off;     /* offset in it */
    void *segs;       /* registered memory: how each part is backed */
} sim_range_t;
/* Looks up the range containing p; copies it to *out. Returns 1 if found. */
int sim_range_find(uintptr_t p, sim_range_t *out);
/* Device ordinal (visible) of device memory at p (SIM_MEM_HOST_VMM for a
 * VMM mapping of memory located on the host), or -1 when p is not in a
 * device allocation or a VMM mapping; base and size of the allocation. */
#define SIM_MEM_HOST_VMM SIM_MAX_DEVICES
int sim_mem_lookup(uintptr_t p, int *kind, uintptr_t *base, size_t *size, sim_ctx_t **ctx);
CUresult sim_mem_free_now(CUdeviceptr p);
void sim_mem_ctx_destroyed(sim_ctx_t *c);
void sim_mem_fork_reset(void);

/* shared capacity (sim/driver/capacity.c) */
int sim_cap_attach(void);                   /* 0 or -errno (then local only) */
int sim_cap_take(int phys, unsigned long long cap, unsigned long long bytes);
void sim_cap_give(int phys, unsigned long long bytes);
unsigned long long sim_cap_used(int phys);
void sim_cap_fork_reset(void);

/* ---- kernels ------------------------------------------------------------------- */
typedef struct sim_func {
    struct sim_module *mod;
    char *name;
    simcuda_twin_fn twin;
    int nparams;          /* -1 unknown */
    uint32_t psize;       /* total parameter bytes */
    uint32_t *poff, *plen; /* per parameter offset and size */
    int max_dyn_smem;
    int num_regs;
    int preferred_carveout;
} sim_func_t;
typedef struct sim_module {
    sim_ctx_t *ctx;
    int nfuncs;
    sim_func_t *funcs;
    int is_library;
    _Atomic int refs;     /* the handle's, plus one per launch not yet run */
} sim_module_t;
/* Does the module (or library) hold code device dev can run? */
int sim_module_runs_on(const sim_module_t *m, int dev);
/* Drops a reference; the last one frees the module. */
void sim_module_unref(sim_module_t *m);
void sim_kernel_fork_reset(void);
/* The twin libraries, colon-separated: SIMCUDA_KERNELS when set and not
 * empty, else every libsimtwin_*.so in twins/ beside libcuda.so.1. Resolved
 * once; NULL when out of memory. */
const char *sim_twin_list(void);

/* fault guard for device work on workers: returns CUDA_SUCCESS, or
 * CUDA_ERROR_ILLEGAL_ADDRESS if fn faulted. */
CUresult sim_guarded(void (*fn)(void *), void *arg);
void sim_fault_install(void);
uint64_t sim_nondet_seed(void);
double sim_now_ms(const struct timespec *ts);

/* ---- sticky errors (driver.c) ---------------------------------------------------- */
/* As cuda.h documents for CUDA_ERROR_ILLEGAL_ADDRESS, LAUNCH_FAILED and the
 * other "inconsistent state" errors: once one happened (in asynchronous
 * work), every later call of the process that needs a context returns it.
 * A lost device (its server died) is CUDA_ERROR_DEVICE_UNAVAILABLE, sticky
 * the same way. */
extern _Atomic int sim_sticky;
void sim_set_sticky(CUresult r);
#define SIM_STICKY() ((CUresult)atomic_load_explicit(&sim_sticky, memory_order_relaxed))

/* ---- isolation and memory placement (devclient.c) -------------------------------- */
extern int sim_isolation;      /* SIMCUDA_ISOLATION: 1 device memory lives in servers */
extern uintptr_t sim_win_base; /* the address window (devproto.h) */
int sim_win_init(void);
/* The directory of the running libcuda.so.1 (dladdr). 0 or -ENOENT. */
int sim_lib_dir(char *out, size_t len);
int sim_win_contains(uintptr_t p, size_t n);
/* Addresses in the window; hint taken when free and aligned. 0 or -ENOMEM. */
int sim_va_alloc(size_t len, size_t align, uintptr_t hint, uintptr_t *out);
void sim_va_free(uintptr_t va, size_t len);
/* Space in a backing file: device dev's, or the host file (dev -1). */
int sim_file_alloc(int dev, size_t len, int *backing, uint64_t *off);
void sim_file_free(int dev, uint64_t off, size_t len);
/* SIMCUDA_PHYS_POOL_MIB (memory.c): 0, or -1 after logging a bad value. */
int sim_phys_pool_parse(void);
int sim_backing_fd(int id);
/* Another file a server may map (a VMM allocation, a registered file):
 * its id (the fd is duplicated), or -errno; dropped with put. */
int sim_dc_backing_add(int fd);
void sim_dc_backing_put(int id);
enum sim_dc_kind {
    SIM_DC_DEVICE = 1, /* cuMemAlloc memory: its device and devices with peer access */
    SIM_DC_HOST,       /* pinned/registered host memory, staging: every device, prot */
    SIM_DC_VMM,        /* a cuMemMap mapping: devices as cuMemSetAccess says */
};
/* Records [va, va+len) backed by (backing, off) and maps it in the servers
 * that reach it. Returns 0, -ENODEV (the owner's server is lost) or -errno. */
int sim_dc_add(uintptr_t va, size_t len, int backing, uint64_t off, int kind, int owner, int prot);
void sim_dc_remove(uintptr_t va, size_t len);
int sim_dc_set_access(uintptr_t va, size_t len, int dev, int prot);
void sim_dc_set_host_prot(uintptr_t va, size_t len, int prot);
void sim_dc_peers_changed(void);
/* Does device dev (-1: the host) reach all of [va, va+len)? */
int sim_dc_can(int dev, uintptr_t va, size_t len, int write);
CUresult sim_dc_start(int dev);   /* the device's server (isolation only) */
typedef struct sim_dchan sim_dchan_t;
/* Device work of a stream worker (isolation): CUresult of the operation. */
CUresult sim_dc_copy(sim_stream_t *s, void *dst, const void *src, size_t n, int peer);
CUresult sim_dc_copy2d(sim_stream_t *s, char *dst, const char *src, size_t dpitch, size_t spitch,
                       size_t width, size_t height);
CUresult sim_dc_set(sim_stream_t *s, char *dst, size_t pitch, size_t width, size_t height,
                    uint32_t val, int elem);
CUresult sim_dc_kernel(sim_stream_t *s, const sim_func_t *f, const simcuda_launch_t *l);
/* Pipelining: posts op (a kernel, or a copy/memset the stream's device does
 * by itself) without waiting: 1, or 0 when it must run otherwise. */
int sim_dc_post(sim_stream_t *s, sim_op_t *op);
int sim_dc_posted(sim_stream_t *s); /* posted, results not collected */
/* Waits for the oldest posted operation (every one when all) and stores
 * the results of those done, in order, in res: returns their number. */
int sim_dc_collect(sim_stream_t *s, int all, CUresult *res, int max);
void sim_dc_fork_reset(void);
/* Which devices reach which (peer access of live contexts): m[x][y]. */
void sim_ctx_peer_matrix(unsigned char m[SIM_MAX_DEVICES][SIM_MAX_DEVICES]);

/* ---- adversarial scheduling (chaos.c) ---------------------------------------------- */
int sim_chaos_init(void);          /* parses SIMCUDA_CHAOS; 0 or -EINVAL */
extern int sim_chaos_on;
/* Called by a stream worker before it runs a unit of work (seq: the
 * operation's process-wide enqueue number); returns when the schedule lets
 * it run. sim_chaos_done after it ran. */
void sim_chaos_hold(uint64_t seq);
void sim_chaos_done(uint64_t seq);
uint64_t sim_chaos_ticket(void);
/* Work with ticket seq was enqueued on stream (at enqueue time). */
void sim_chaos_enqueued(uint64_t seq, const void *stream);
/* stream's worker starts (on 1) or ends (0) waiting for an event or stream,
 * that is for work of stream target (NULL: unknown, or a memory word). */
void sim_chaos_waiting(const void *stream, const void *target, int on);
/* A host thread starts (on 1) or ends (0) blocking until work of stream is
 * done (stream, context or event synchronisation, a synchronous call). */
void sim_chaos_awaited(const void *stream, int on);
void sim_chaos_fork_reset(void);

/* ---- architectures (arch.c) ---------------------------------------------------------- */
/* Can a device of compute capability major.minor run this image entry?
 * kind: ES_ENTRY_CUBIN (SASS) or ES_ENTRY_PTX; arch: the sm number;
 * arch_specific ("a") / family_specific ("f") as the entry says. */
int sim_arch_runs(int kind, unsigned arch, int arch_specific, int family_specific, int major,
                  int minor);

#endif
