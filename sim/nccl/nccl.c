/* simcuda's libnccl.so.2: NCCL's host API (nccl.h, NCCL 2.28) on the CPU.
 * Ranks are processes (or threads, ncclCommInitAll) of this host meeting
 * in one shared-memory segment per communicator (transport.c: control
 * only); the data moves through staging buffers in device memory that
 * every rank maps (staging.c). Collectives are enqueued on the caller's
 * CUDA stream as kernels of the library's own module (kernels.cu) ordered
 * by host functions; the element order of every reduction
 * follows NCCL's ring/tree, channel and protocol choice (reduce.c), so the
 * bits depend on rank count, GPU placement and message size as NCCL's do.
 *
 * Every public function is defined as pncclX and exported, with ncclX a weak
 * alias, as in NVIDIA's library. */
#include "sim/common/kmod.h"
#include "sim/common/live.h"
#include "sim/common/simdrv.h"
#include "sim/nccl/nkern.h"
#include "sim/nccl/net.h"
#include "sim/nccl/simnccl.h"
#include "sim/nccl/staging.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define API_FN(ret, name, params)                                                   \
    ret name params __attribute__((weak, alias("p" #name), visibility("default"))); \
    __attribute__((visibility("default"))) ret p##name params

#define COMM_MAGIC 0x636f6d6d53494d4eULL
#define CONFIG_MAGIC 0xcafebeef
enum { OP_SEND = 100, OP_RECV = 101 };

/* ---- logging and last error ------------------------------------------------ */

static __thread char t_last_error[1024];
__attribute__((format(printf, 2, 3))) static void warn(int dev, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_last_error, sizeof(t_last_error), fmt, ap);
    va_end(ap);
    if (sim_nccl_debug_level() >= 2) {
        char host[64] = "localhost";
        gethostname(host, sizeof(host) - 1);
        fprintf(stderr, "%s:%d:%d [%d] NCCL WARN %s\n", host, (int)getpid(),
                (int)syscall(SYS_gettid), dev, t_last_error);
    }
}

__attribute__((format(printf, 1, 2))) static void info(const char *fmt, ...)
{
    if (sim_nccl_debug_level() < 3)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%d NCCL INFO ", (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- communicator ------------------------------------------------------------ */

/* What a rank brings to the rendezvous (kept until init_join). */
typedef struct pending_init {
    sim_nccl_id_t id;
    sim_nccl_rank_t me;
    int tuning[4];
    size_t buffsize, p2p;
    int init_timeout_ms, timeout_ms;
} pending_init_t;

struct ncclComm {
    uint64_t magic;
    pending_init_t *pend;         /* non-NULL until the rendezvous is done */
    int rank, nranks, dev;
    CUcontext ctx;
    sim_nccl_seg_t seg;
    _Atomic int abort_flag;
    _Atomic int refs;
    _Atomic int async_err;
    /* Hosts (net.h): host_of[r] is rank r's host index (hosts numbered in
     * the order of their first rank), lidx[r] its index in this host's
     * segment (-1: another host). net is NULL when all ranks share a host. */
    int nhosts, nlocal;
    int host_of[SIM_NCCL_MAX_RANKS], lidx[SIM_NCCL_MAX_RANKS];
    int local_rank[SIM_NCCL_MAX_RANKS];   /* segment index -> rank */
    sim_nccl_peer_t info[SIM_NCCL_MAX_RANKS];
    sim_nccl_net_t *net;
    void *pin_send[SIM_NCCL_MAX_RANKS], *pin_recv[SIM_NCCL_MAX_RANKS];   /* host-pinned */
    char fail_msg[256];             /* why the communicator failed (ncclGetLastError) */
    int ring[SIM_NCCL_MAX_RANKS];   /* ring position -> rank */
    int pos[SIM_NCCL_MAX_RANKS];    /* rank -> ring position */
    sim_nccl_tuning_t tun;
    int cfg_min_ctas, cfg_max_ctas;
    uint64_t nonce;
    /* Data path: staging buffers and the module of the context. */
    sim_nccl_staging_t st;
    const sim_kmod_t *km;
    /* Handed out at enqueue, under launch_mu, in the same order on every
     * rank: barrier numbers, staging sets, point-to-point ring positions. */
    uint64_t bar_enq, step_enq;
    uint64_t p2p_sent[SIM_NCCL_MAX_RANKS], p2p_recvd[SIM_NCCL_MAX_RANKS];
    struct ncclComm *grave_next;
    /* Host-side control (split). */
    uint64_t ctrl_bar;
    int split_seq;
    pthread_mutex_t launch_mu;   /* enqueue order (enq_seq) */
    pthread_mutex_t mu;          /* exec_seq, inflight */
    pthread_cond_t cv;
    uint64_t enq_seq, exec_seq;
    int inflight;
};

typedef struct sim_op {
    int kind;
    const void *send;
    void *recv;
    size_t count;
    int dtype, redop, root, peer;
    CUstream stream;
} sim_op_t;

/* Group state, per thread (ncclGroupStart/End nest). */
typedef struct group_item {
    ncclComm_t comm;
    sim_op_t op;
} group_item_t;

static __thread int t_depth;
static __thread group_item_t *t_items;
static __thread int t_nitems, t_capitems;
static __thread ncclComm_t *t_inits;   /* communicators whose rendezvous waits for GroupEnd */
static __thread int t_ninits;
static __thread ncclResult_t t_group_err;

/* Communicators the application may use: created, not yet destroyed or
 * aborted. comm_ok() finds a pointer here before reading through it, so a
 * destroyed or foreign comm is refused, never dereferenced. */
static sim_live_t g_comms = SIM_LIVE_INIT;

/* Communicators whose last reference went in a host function of a stream,
 * where no CUDA call may be made: their staging is released by the next
 * API call of the application (reap_graveyard). */
static pthread_mutex_t g_grave_mu = PTHREAD_MUTEX_INITIALIZER;
static ncclComm_t g_grave;

/* Driver entry points the socket transport needs beyond simdrv's table:
 * host-pinned buffers and copies into device memory, found the same way
 * (dlopen + cuGetProcAddress). */
typedef struct xdrv {
    CUresult (*cuMemAllocHost)(void **p, size_t bytes);
    CUresult (*cuMemFreeHost)(void *p);
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
} xdrv_t;
static xdrv_t g_xdrv;
static int g_xdrv_ok;
static pthread_once_t g_xdrv_once = PTHREAD_ONCE_INIT;

static void xdrv_load(void)
{
    typedef CUresult (*gp_t)(const char *, void **, int, cuuint64_t,
                             CUdriverProcAddressQueryResult *);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    gp_t gp = h ? (gp_t)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!gp)
        return;
    const char *names[3] = {"cuMemAllocHost", "cuMemFreeHost", "cuMemcpyHtoDAsync"};
    int vers[3] = {3020, 2000, 3020};
    void *fns[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        CUdriverProcAddressQueryResult st;
        if (gp(names[i], &fns[i], vers[i], CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS ||
            !fns[i])
            return;
    }
    memcpy(&g_xdrv.cuMemAllocHost, &fns[0], sizeof(void *));
    memcpy(&g_xdrv.cuMemFreeHost, &fns[1], sizeof(void *));
    memcpy(&g_xdrv.cuMemcpyHtoDAsync, &fns[2], sizeof(void *));
    g_xdrv_ok = 1;
}

static const xdrv_t *xdrv(void)
{
    pthread_once(&g_xdrv_once, xdrv_load);
    return g_xdrv_ok ? &g_xdrv : NULL;
}

static void comm_free(ncclComm_t c)
{
    /* The proxy first: nothing may touch the segment or the buffers after. */
    sim_nccl_net_stop(c->net, !atomic_load(&c->abort_flag));
    c->net = NULL;
    if (c->st.va || c->st.nranks) {
        const simdrv_t *d = simdrv_get();
        CUcontext prev = NULL;
        if (d) {
            d->cuCtxGetCurrent(&prev);
            if (prev != c->ctx)
                d->cuCtxSetCurrent(c->ctx);
        }
        sim_nccl_staging_free(&c->st);
        const xdrv_t *x = xdrv();
        for (int r = 0; r < SIM_NCCL_MAX_RANKS && x; r++) {
            if (c->pin_send[r])
                x->cuMemFreeHost(c->pin_send[r]);
            if (c->pin_recv[r])
                x->cuMemFreeHost(c->pin_recv[r]);
            c->pin_send[r] = c->pin_recv[r] = NULL;
        }
        if (d && prev != c->ctx)
            d->cuCtxSetCurrent(prev);
    }
    sim_nccl_seg_leave(&c->seg);
    free(c->pend);
    c->magic = 0;
    pthread_mutex_destroy(&c->launch_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static void reap_graveyard(void)
{
    if (!__atomic_load_n(&g_grave, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&g_grave_mu);
    ncclComm_t list = g_grave;
    g_grave = NULL;
    pthread_mutex_unlock(&g_grave_mu);
    while (list) {
        ncclComm_t next = list->grave_next;
        comm_free(list);
        list = next;
    }
}

/* Drops a reference; in_hostfn: called from a stream's host function. */
static void comm_unref(ncclComm_t c, int in_hostfn)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    sim_live_remove(&g_comms, c);
    if (in_hostfn && (c->st.va || c->st.nranks)) {
        pthread_mutex_lock(&g_grave_mu);
        c->grave_next = g_grave;
        __atomic_store_n(&g_grave, c, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&g_grave_mu);
        return;
    }
    comm_free(c);
}

static int comm_ok(ncclComm_t c)
{
    return sim_live_has(&g_comms, c) && c->magic == COMM_MAGIC;
}

static ncclResult_t err_from_wait(int rc, int why)
{
    if (why == SIM_FAIL_NET)
        return ncclRemoteError;
    if (rc == -ETIMEDOUT || why == SIM_FAIL_TIMEOUT)
        return ncclSystemError;
    if (rc == -ECANCELED)
        return ncclSystemError;
    return ncclRemoteError;
}

/* ---- driver ------------------------------------------------------------------- */

static const simdrv_t *drv(int dev)
{
    const simdrv_t *d = simdrv_get();
    if (!d)
        warn(dev, "Cuda failure: %s", simdrv_error());
    return d;
}

/* Makes sure a context is current (device 0's primary context if none, as
 * the CUDA runtime does) and reads the device facts. */
static ncclResult_t current_device(simdrv_devinfo_t *info, CUcontext *pctx)
{
    const simdrv_t *d = drv(-1);
    if (!d)
        return ncclUnhandledCudaError;
    CUresult r = d->cuInit(0);
    CUcontext ctx = NULL;
    if (r == CUDA_SUCCESS)
        r = d->cuCtxGetCurrent(&ctx);
    if (r == CUDA_SUCCESS && !ctx) {
        CUdevice dev;
        r = d->cuDeviceGet(&dev, 0);
        if (r == CUDA_SUCCESS)
            r = d->cuDevicePrimaryCtxRetain(&ctx, dev);
        if (r == CUDA_SUCCESS)
            r = d->cuCtxSetCurrent(ctx);
    }
    if (r != CUDA_SUCCESS) {
        warn(-1, "Cuda failure %d while getting the current device", (int)r);
        return ncclUnhandledCudaError;
    }
    if (simdrv_current_device(info) < 0) {
        warn(-1, "Cuda failure: cannot read the current device's attributes");
        return ncclUnhandledCudaError;
    }
    *pctx = ctx;
    return ncclSuccess;
}

/* ---- version, ids, errors ---------------------------------------------------------- */

API_FN(ncclResult_t, ncclGetVersion, (int *version))
{
    if (!version) {
        warn(-1, "ncclGetVersion : version is NULL");
        return ncclInvalidArgument;
    }
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

API_FN(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *uniqueId))
{
    if (!uniqueId) {
        warn(-1, "ncclGetUniqueId : uniqueId is NULL");
        return ncclInvalidArgument;
    }
    sim_nccl_id_t id;
    memset(&id, 0, sizeof(id));
    id.magic = SIM_NCCL_ID_MAGIC;
    if (getrandom(&id.nonce, sizeof(id.nonce), 0) != (ssize_t)sizeof(id.nonce)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id.nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                   ((uint64_t)getpid() << 40);
    }
    snprintf(id.name, sizeof(id.name), "/simnccl-%d-%016llx", (int)getpid(),
             (unsigned long long)id.nonce);
    /* The bootstrap: NCCL_COMM_ID, or a root listening on the interface
     * NCCL_SOCKET_IFNAME selects (net.h). */
    long init_ms;
    if (sim_nccl_env_int("NCCL_SIM_INIT_TIMEOUT_MS", 1, 86400000L, 120000, &init_ms) < 0) {
        warn(-1, "ncclGetUniqueId : bad NCCL_SIM_INIT_TIMEOUT_MS");
        return ncclInvalidArgument;
    }
    char err[256] = "";
    int rc = sim_nccl_net_make_id(&id, (int)init_ms, err, sizeof(err));
    if (rc == -ENODEV && !getenv("NCCL_SOCKET_IFNAME")) {
        info("Bootstrap : no socket interface found: ranks of this host only");
    } else if (rc < 0) {
        warn(-1, "Bootstrap : %s", err);
        return rc == -EINVAL ? ncclInvalidArgument : ncclSystemError;
    }
    memcpy(uniqueId, &id, sizeof(id));
    return ncclSuccess;
}

/* An id without bootstrap: ranks of this process (ncclCommInitAll) meet by
 * name. */
static void local_id(ncclUniqueId *uid)
{
    sim_nccl_id_t id;
    memset(&id, 0, sizeof(id));
    id.magic = SIM_NCCL_ID_MAGIC;
    if (getrandom(&id.nonce, sizeof(id.nonce), 0) != (ssize_t)sizeof(id.nonce))
        id.nonce = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)uid;
    snprintf(id.name, sizeof(id.name), "/simnccl-%d-%016llx", (int)getpid(),
             (unsigned long long)id.nonce);
    memcpy(uid, &id, sizeof(id));
}

API_FN(const char *, ncclGetErrorString, (ncclResult_t code))
{
    switch (code) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

static int comm_ok(ncclComm_t c);
static const char *net_reason(ncclComm_t c);

API_FN(const char *, ncclGetLastError, (ncclComm_t comm))
{
    /* A failed communicator's reason may have been found on a stream's
     * thread: that one. */
    if (comm && comm_ok(comm) && comm->fail_msg[0])
        return comm->fail_msg;
    return t_last_error;
}

API_FN(void, ncclResetDebugInit, (void))
{
    sim_nccl_debug_reset();
}

/* ---- init ------------------------------------------------------------------------ */

typedef struct env_tuning {
    int algo_mask, proto_mask, min_ch, max_ch;
} env_tuning_t;

static ncclResult_t read_tuning(env_tuning_t *t, int cfg_min, int cfg_max)
{
    t->algo_mask = (1 << SIM_NALGOS) - 1;
    t->proto_mask = (1 << SIM_NPROTOS) - 1;
    const char *v = getenv("NCCL_ALGO");
    if (v && *v) {
        t->algo_mask = sim_nccl_parse_algo(v);
        if (t->algo_mask < 0) {
            warn(-1, "NCCL_ALGO=\"%s\": unknown name, or neither Ring nor Tree allowed "
                 "(the only algorithms of one node without NVLink SHARP)", v);
            return ncclInvalidArgument;
        }
    }
    v = getenv("NCCL_PROTO");
    if (v && *v) {
        t->proto_mask = sim_nccl_parse_proto(v);
        if (t->proto_mask < 0) {
            warn(-1, "NCCL_PROTO=\"%s\": simcuda knows LL, LL128 and Simple", v);
            return ncclInvalidArgument;
        }
    }
    long mn = cfg_min != NCCL_CONFIG_UNDEF_INT ? cfg_min : 1;
    long mx = cfg_max != NCCL_CONFIG_UNDEF_INT ? cfg_max : 64;
    long x;
    if (sim_nccl_env_int("NCCL_MIN_CTAS", 1, 64, mn, &x) < 0)
        return ncclInvalidArgument;
    mn = x;
    if (sim_nccl_env_int("NCCL_MIN_NCHANNELS", 1, 64, mn, &x) < 0)
        return ncclInvalidArgument;
    mn = x;
    if (sim_nccl_env_int("NCCL_MAX_CTAS", 1, 64, mx, &x) < 0)
        return ncclInvalidArgument;
    mx = x;
    if (sim_nccl_env_int("NCCL_MAX_NCHANNELS", 1, 64, mx, &x) < 0)
        return ncclInvalidArgument;
    mx = x;
    if (mn < 1 || mn > 64 || mx < 1 || mx > 64 || mn > mx) {
        warn(-1, "channel limits: min %ld, max %ld (must be 1 <= min <= max <= 64)", mn, mx);
        return ncclInvalidArgument;
    }
    t->min_ch = (int)mn;
    t->max_ch = (int)mx;
    return ncclSuccess;
}

static ncclResult_t check_config(const ncclConfig_t *config)
{
    if (!config)
        return ncclSuccess;
    if (config->magic != CONFIG_MAGIC || config->size < offsetof(ncclConfig_t, cgaClusterSize)) {
        warn(-1, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

/* The ring: hosts in the order of their first rank, within a host the
 * devices by (PCI bus id, ordinal, rank), as NCCL's rings run through the
 * GPUs of a node in topology order and from node to node. */
static int ring_before(const ncclComm_t c, int x, int y)
{
    const sim_nccl_peer_t *rx = &c->info[x], *ry = &c->info[y];
    int d = c->host_of[x] - c->host_of[y];
    if (d == 0)
        d = strncmp(rx->bus_id, ry->bus_id, sizeof(rx->bus_id));
    if (d == 0)
        d = rx->dev_ordinal - ry->dev_ordinal;
    if (d == 0)
        d = x - y;
    return d < 0;
}

static void sort_ring(ncclComm_t c)
{
    int n = c->nranks;
    for (int i = 0; i < n; i++)
        c->ring[i] = i;
    for (int i = 1; i < n; i++) {
        int x = c->ring[i], j = i - 1;
        for (; j >= 0 && ring_before(c, x, c->ring[j]); j--)
            c->ring[j + 1] = c->ring[j];
        c->ring[j + 1] = x;
    }
    for (int p = 0; p < n; p++)
        c->pos[c->ring[p]] = p;
}

static sim_kmods_t g_kmods;

/* Validates the arguments and the environment, reads the current device,
 * loads the library's module in its context and allocates the
 * communicator; the rendezvous is init_join's. */
static ncclResult_t init_prepare(ncclComm_t *out, int nranks, const ncclUniqueId *uid, int rank,
                                 const ncclConfig_t *config)
{
    ncclResult_t res = ncclSuccess;
    ncclComm_t c = NULL;
    sim_nccl_id_t id;
    if (!out) {
        warn(-1, "CommInitRank : comm is NULL");
        return ncclInvalidArgument;
    }
    *out = NULL;
    if (nranks < 1 || nranks > SIM_NCCL_MAX_RANKS) {
        warn(-1, "Invalid comm size %d (simcuda supports 1..%d ranks)", nranks,
             SIM_NCCL_MAX_RANKS);
        return ncclInvalidArgument;
    }
    if (rank < 0 || rank >= nranks) {
        warn(-1, "Invalid rank requested : %d/%d", rank, nranks);
        return ncclInvalidArgument;
    }
    memcpy(&id, uid, sizeof(id));
    if (id.magic != SIM_NCCL_ID_MAGIC || id.name[0] != '/' ||
        memchr(id.name, '\0', sizeof(id.name)) == NULL) {
        warn(-1, "CommInitRank : invalid ncclUniqueId (not from ncclGetUniqueId)");
        return ncclInvalidArgument;
    }
    if ((res = check_config(config)) != ncclSuccess)
        return res;
    /* An older, smaller ncclConfig_t may end before minCTAs/maxCTAs. */
    int has_ctas = config && config->size >= offsetof(ncclConfig_t, maxCTAs) + sizeof(int);
    int cfg_min = has_ctas ? config->minCTAs : NCCL_CONFIG_UNDEF_INT;
    int cfg_max = has_ctas ? config->maxCTAs : NCCL_CONFIG_UNDEF_INT;
    env_tuning_t et;
    if ((res = read_tuning(&et, cfg_min, cfg_max)) != ncclSuccess)
        return res;
    long timeout_ms, init_timeout_ms, buffsize;
    if (sim_nccl_env_int("NCCL_SIM_TIMEOUT_MS", 1, 86400000L, 60000, &timeout_ms) < 0 ||
        sim_nccl_env_int("NCCL_SIM_INIT_TIMEOUT_MS", 1, 86400000L, 120000, &init_timeout_ms) < 0 ||
        sim_nccl_env_int("NCCL_SIM_BUFFSIZE", 4096, 1L << 30, 1L << 20, &buffsize) < 0) {
        warn(-1, "bad NCCL_SIM_TIMEOUT_MS, NCCL_SIM_INIT_TIMEOUT_MS or NCCL_SIM_BUFFSIZE");
        return ncclInvalidArgument;
    }
    buffsize &= ~63L;
    simdrv_devinfo_t di;
    CUcontext ctx;
    const sim_kmod_t *km = NULL;
    reap_graveyard();
    if ((res = current_device(&di, &ctx)) != ncclSuccess)
        return res;
    CUresult cr = sim_kmod_get(&g_kmods, ctx, &km);
    if (cr != CUDA_SUCCESS) {
        warn(di.ordinal, "Cuda failure %d loading the library's kernels", (int)cr);
        return ncclUnhandledCudaError;
    }

    c = calloc(1, sizeof(*c));
    if (!c) {
        warn(di.ordinal, "out of memory");
        return ncclSystemError;
    }
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->dev = di.ordinal;
    c->ctx = ctx;
    c->km = km;
    c->refs = 1;
    c->nonce = id.nonce;
    c->cfg_min_ctas = cfg_min;
    c->cfg_max_ctas = cfg_max;
    pthread_mutex_init(&c->launch_mu, NULL);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->seg.local_abort = &c->abort_flag;
    if (sim_live_add(&g_comms, c) != 0) {
        comm_unref(c, 0);
        warn(di.ordinal, "out of memory");
        return ncclSystemError;
    }

    pending_init_t *pi = calloc(1, sizeof(*pi));
    if (!pi) {
        comm_unref(c, 0);
        warn(di.ordinal, "out of memory");
        return ncclSystemError;
    }
    c->pend = pi;
    pi->id = id;
    sim_nccl_rank_t *me = &pi->me;
    me->dev_ordinal = di.ordinal;
    me->sm_count = di.sm_count;
    me->cc_major = di.cc_major;
    me->cc_minor = di.cc_minor;
    snprintf(me->bus_id, sizeof(me->bus_id), "%s", di.bus_id);
    for (char *p = me->bus_id; *p; p++)
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    memcpy(me->uuid, di.uuid.bytes, sizeof(me->uuid));
    snprintf(me->model, sizeof(me->model), "%s", di.model);
    pi->tuning[0] = et.algo_mask;
    pi->tuning[1] = et.proto_mask;
    pi->tuning[2] = et.min_ch;
    pi->tuning[3] = et.max_ch;
    pi->buffsize = (size_t)buffsize;
    pi->p2p = (size_t)buffsize;
    pi->init_timeout_ms = (int)init_timeout_ms;
    pi->timeout_ms = (int)timeout_ms;
    *out = c;
    return ncclSuccess;
}

/* The rendezvous: joins the segment, checks for duplicate GPUs, takes rank
 * 0's tuning and builds the ring. On failure the communicator stays
 * allocated (the caller releases it). */
static void peer_from_rank(sim_nccl_peer_t *p, const sim_nccl_rank_t *r, int rank)
{
    memset(p, 0, sizeof(*p));
    p->rank = rank;
    p->dev_ordinal = r->dev_ordinal;
    p->sm_count = r->sm_count;
    p->cc_major = r->cc_major;
    p->cc_minor = r->cc_minor;
    memcpy(p->bus_id, r->bus_id, sizeof(p->bus_id));
    memcpy(p->uuid, r->uuid, sizeof(p->uuid));
    memcpy(p->model, r->model, sizeof(p->model));
}

/* The rendezvous over the bootstrap (ids of ncclGetUniqueId): the table of
 * every rank from the root, then this host's segment among its ranks and,
 * when the ranks span hosts, the mesh of sockets to the others. Fills
 * host_of, lidx, info, nhosts, nlocal and *tuning (rank 0's). */
static ncclResult_t boot_join(ncclComm_t c, int tuning[4], size_t *slot, size_t *p2p)
{
    pending_init_t *pi = c->pend;
    int nranks = c->nranks, rank = c->rank, rc, lfd = -1;
    char err[256] = "", ifname[32];
    uint32_t addr = 0;
    sim_nccl_peer_t me;
    sim_nccl_boot_t *b = calloc(1, sizeof(*b));
    ncclResult_t res = ncclSuccess;
    if (!b) {
        warn(c->dev, "out of memory");
        return ncclSystemError;
    }
    peer_from_rank(&me, &pi->me, rank);
    sim_nccl_host_identity(me.host, sizeof(me.host));
    /* This rank's own listener, for ranks of other hosts (made before the
     * rendezvous, so it exists once anyone has the table). */
    rc = sim_nccl_net_ifaddr(&addr, ifname, sizeof(ifname), err, sizeof(err));
    if (rc == -ENODEV && !getenv("NCCL_SOCKET_IFNAME"))
    {
        addr = htonl(INADDR_LOOPBACK);
        rc = 0;
    }
    if (rc == 0)
        rc = sim_nccl_net_listen(addr, 0, &lfd, &me.port);
    if (rc < 0) {
        warn(c->dev, "CommInitRank : cannot listen for peers: %s", err[0] ? err : strerror(-rc));
        res = rc == -EINVAL ? ncclInvalidArgument : ncclSystemError;
        goto out;
    }
    me.addr = addr;
    rc = sim_nccl_net_bootstrap(&pi->id, rank, nranks, &me, pi->tuning, pi->buffsize, pi->p2p,
                                pi->init_timeout_ms, b, err, sizeof(err));
    if (rc < 0) {
        warn(c->dev, "CommInitRank : rank %d: %s", rank, err);
        res = rc == -EEXIST || rc == -EINVAL ? ncclInvalidUsage : ncclSystemError;
        goto out;
    }
    c->nhosts = 0;
    for (int r = 0; r < nranks; r++) {
        c->info[r] = b->peer[r];
        int h = -1;
        for (int q = 0; q < r && h < 0; q++)
            if (strncmp(b->peer[q].host, b->peer[r].host, sizeof(b->peer[r].host)) == 0)
                h = c->host_of[q];
        c->host_of[r] = h >= 0 ? h : c->nhosts++;
    }
    c->nlocal = 0;
    for (int r = 0; r < nranks; r++) {
        c->lidx[r] = c->host_of[r] == c->host_of[rank] ? c->nlocal++ : -1;
        if (c->lidx[r] >= 0)
            c->local_rank[c->lidx[r]] = r;
    }
    c->seg.comm_rank = c->local_rank;
    memcpy(tuning, b->tuning, sizeof(b->tuning));
    *slot = (size_t)b->slot;
    *p2p = (size_t)b->p2p;
    c->nonce = b->nonce ^ (uint64_t)c->host_of[rank] * 0x9e3779b97f4a7c15ULL;
    {
        sim_nccl_id_t sid;
        memset(&sid, 0, sizeof(sid));
        sid.magic = SIM_NCCL_ID_MAGIC;
        sid.nonce = c->nonce;
        snprintf(sid.name, sizeof(sid.name), "/simnccl-%016llx-h%d",
                 (unsigned long long)b->nonce, c->host_of[rank]);
        rc = sim_nccl_seg_join(&c->seg, &sid, c->nlocal, c->lidx[rank], *slot, *p2p, &pi->me,
                               tuning, pi->init_timeout_ms);
    }
    if (rc < 0) {
        warn(c->dev, "CommInitRank : rank %d: this host's ranks could not meet: %s", rank,
             strerror(-rc));
        res = rc == -ETIMEDOUT ? ncclSystemError : rc == -EPIPE || rc == -ECONNABORTED
                                                       ? ncclRemoteError : ncclSystemError;
        goto out;
    }
    if (c->nhosts > 1) {
        rc = sim_nccl_net_start(&c->net, b, rank, c->host_of, lfd, pi->timeout_ms, &c->seg, err,
                                sizeof(err));
        lfd = -1;
        if (rc < 0) {
            sim_nccl_fail(&c->seg, SIM_FAIL_ABORT);
            warn(c->dev, "CommInitRank : rank %d: %s", rank, err);
            res = ncclSystemError;
            goto out;
        }
        info("comm %p rank %d: %d hosts, %d ranks on this one, sockets to the others on %s",
             (void *)c, rank, c->nhosts, c->nlocal, ifname);
    }
out:
    if (lfd >= 0)
        close(lfd);
    free(b);
    return res;
}

/* The rendezvous: joins the segment (or the bootstrap), checks for
 * duplicate GPUs, takes rank 0's tuning and builds the ring. On failure the
 * communicator stays allocated (the caller releases it). */
static ncclResult_t init_join(ncclComm_t c)
{
    ncclResult_t res = ncclSuccess;
    pending_init_t *pi = c->pend;
    int nranks = c->nranks, rank = c->rank, rc = 0;
    sim_nccl_rank_t *mep = &pi->me;
    int tuning[4];
    size_t slot = pi->buffsize, p2p = pi->p2p;
    if (pi->id.boot_addr) {
        res = boot_join(c, tuning, &slot, &p2p);
        /* from now on: waits inside operations (across hosts the sockets
         * time out first, so that the error names the peer) */
        c->seg.timeout_ms = pi->timeout_ms + (c->net ? 2000 : 0);
        if (res != ncclSuccess)
            goto out;
    } else {
        rc = sim_nccl_seg_join(&c->seg, &pi->id, nranks, rank, pi->buffsize, pi->p2p, mep,
                               pi->tuning, pi->init_timeout_ms);
        c->seg.timeout_ms = pi->timeout_ms;   /* from now on: waits inside operations */
        c->nhosts = 1;
        c->nlocal = nranks;
        for (int r = 0; r < nranks && rc == 0; r++) {
            c->host_of[r] = 0;
            c->lidx[r] = r;
            peer_from_rank(&c->info[r], sim_nccl_rank(&c->seg, r), r);
        }
        if (rc == 0) {
            tuning[0] = c->seg.h->algo_mask;
            tuning[1] = c->seg.h->proto_mask;
            tuning[2] = c->seg.h->min_ch;
            tuning[3] = c->seg.h->max_ch;
            slot = c->seg.h->slot_bytes;
            p2p = c->seg.h->p2p_bytes;
        }
        if (rc < 0) {
            if (rc == -EEXIST) {
                warn(c->dev, "CommInitRank : rank %d already joined this communicator", rank);
                res = ncclInvalidUsage;
            } else if (rc == -EINVAL) {
                warn(c->dev, "CommInitRank : ranks disagree on the communicator (nranks %d)",
                     nranks);
                res = ncclInvalidUsage;
            } else if (rc == -ETIMEDOUT) {
                warn(c->dev, "CommInitRank : timed out waiting for the other ranks");
                res = ncclSystemError;
            } else if (rc == -EPIPE || rc == -ECONNABORTED) {
                warn(c->dev, "CommInitRank : a peer rank failed during initialization");
                res = ncclRemoteError;
            } else {
                warn(c->dev, "CommInitRank : shared memory setup failed: %s", strerror(-rc));
                res = ncclSystemError;
            }
            goto out;
        }
    }
    /* NCCL refuses two ranks on one GPU (of one host: another host's GPUs
     * are other GPUs, whatever their ids). */
    for (int i = 0; i < nranks; i++)
        for (int j = i + 1; j < nranks; j++) {
            sim_nccl_peer_t *a = &c->info[i], *b = &c->info[j];
            if (c->host_of[i] == c->host_of[j] && memcmp(a->uuid, b->uuid, sizeof(a->uuid)) == 0) {
                warn(c->dev, "Duplicate GPU detected : rank %d and rank %d both on CUDA "
                     "device %s", i, j, a->bus_id);
                res = ncclInvalidUsage;
                goto out;
            }
        }
    {
        c->tun.algo_mask = tuning[0];
        c->tun.proto_mask = tuning[1];
        c->tun.min_ch = tuning[2];
        c->tun.max_ch = tuning[3];
        int base = 32;
        for (int r = 0; r < nranks; r++) {
            int ch = c->info[r].sm_count / 16;
            ch = ch < 1 ? 1 : ch > 32 ? 32 : ch;
            if (ch < base)
                base = ch;
        }
        c->tun.base_ch = base;
    }
    sort_ring(c);
    {
        /* Staging buffers on this rank's GPU, mapped by every rank. The
         * rendezvous may run on a thread of its own (ncclGroupEnd): the
         * communicator's context is made current. */
        const simdrv_t *d = drv(c->dev);
        CUcontext prev = NULL;
        CUdevice dv = 0;
        char why_s[256] = "";
        int why = 0;
        if (!d) {
            sim_nccl_fail(&c->seg, SIM_FAIL_ABORT);
            res = ncclUnhandledCudaError;
            goto out;
        }
        d->cuCtxGetCurrent(&prev);
        if (prev != c->ctx)
            d->cuCtxSetCurrent(c->ctx);
        if (d->cuCtxGetDevice(&dv) != CUDA_SUCCESS)
            dv = c->dev;
        rc = sim_nccl_staging_setup(&c->st, &c->seg, c->nonce, &c->ctrl_bar, dv, slot, p2p,
                                    nranks, rank, c->lidx, &why, why_s, sizeof(why_s));
        /* Across hosts: one host-pinned buffer each way per rank of another
         * host, what the stream copies staged data to and from (as NCCL's
         * proxy's buffers). */
        const xdrv_t *x = c->net ? xdrv() : NULL;
        if (rc == 0 && c->net && !x) {
            snprintf(why_s, sizeof(why_s), "the driver lacks cuMemAllocHost, cuMemFreeHost or "
                     "cuMemcpyHtoDAsync");
            rc = -ENOSYS;
        }
        for (int r = 0; r < nranks && rc == 0 && c->net; r++) {
            if (c->lidx[r] >= 0)
                continue;
            if (x->cuMemAllocHost(&c->pin_send[r], slot) != CUDA_SUCCESS ||
                x->cuMemAllocHost(&c->pin_recv[r], slot) != CUDA_SUCCESS) {
                snprintf(why_s, sizeof(why_s), "cannot allocate %zu bytes of pinned host memory",
                         slot);
                rc = -ENOMEM;
            }
        }
        if (rc < 0 && c->net)
            sim_nccl_fail(&c->seg, SIM_FAIL_ABORT);
        if (prev != c->ctx)
            d->cuCtxSetCurrent(prev);
        if (rc < 0) {
            warn(c->dev, "CommInitRank : %s", why_s);
            res = rc == -ETIMEDOUT || why == SIM_FAIL_TIMEOUT ? ncclSystemError
                  : why ? ncclRemoteError : ncclSystemError;
            goto out;
        }
    }
    info("comm %p rank %d nranks %d cudaDev %d busId %s - Init COMPLETE", (void *)c, rank,
         nranks, c->dev, mep->bus_id);
out:
    free(c->pend);
    c->pend = NULL;
    return res;
}

static ncclResult_t group_defer_init(ncclComm_t c);

static ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *uid, int rank,
                              const ncclConfig_t *config)
{
    ncclComm_t c = NULL;
    if (!out) {
        warn(-1, "CommInitRank : comm is NULL");
        return ncclInvalidArgument;
    }
    *out = NULL;
    ncclResult_t res = init_prepare(&c, nranks, uid, rank, config);
    if (res != ncclSuccess)
        return res;
    if (t_depth > 0) {
        /* Inside ncclGroupStart/End: the rendezvous happens at GroupEnd, so
         * one thread can initialise several ranks. */
        res = group_defer_init(c);
        if (res != ncclSuccess) {
            comm_unref(c, 0);
            return res;
        }
        *out = c;
        return ncclSuccess;
    }
    res = init_join(c);
    if (res != ncclSuccess) {
        comm_unref(c, 0);
        return res;
    }
    *out = c;
    return ncclSuccess;
}

static ncclResult_t group_defer_init(ncclComm_t c)
{
    ncclComm_t *ni = realloc(t_inits, (size_t)(t_ninits + 1) * sizeof(*ni));
    if (!ni) {
        warn(c->dev, "out of memory");
        return ncclSystemError;
    }
    t_inits = ni;
    t_inits[t_ninits++] = c;
    return ncclSuccess;
}

typedef struct join_arg {
    ncclComm_t c;
    ncclResult_t res;
} join_arg_t;

static void *join_thread(void *p)
{
    join_arg_t *a = p;
    a->res = init_join(a->c);
    return NULL;
}

/* GroupEnd: all deferred rendezvous at once (one thread each). A failed one
 * leaves its communicator with that error (ncclCommGetAsyncError); the user
 * aborts or destroys it. */
static ncclResult_t run_pending_inits(void)
{
    ncclResult_t res = ncclSuccess;
    int n = t_ninits;
    join_arg_t *args = calloc((size_t)(n > 0 ? n : 1), sizeof(*args));
    pthread_t *th = calloc((size_t)(n > 0 ? n : 1), sizeof(*th));
    char *started = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!args || !th || !started) {
        res = ncclSystemError;
        for (int i = 0; i < n; i++)
            atomic_store(&t_inits[i]->async_err, (int)ncclSystemError);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        args[i].c = t_inits[i];
        if (n == 1 || pthread_create(&th[i], NULL, join_thread, &args[i]) != 0)
            join_thread(&args[i]);
        else
            started[i] = 1;
    }
    for (int i = 0; i < n; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        if (args[i].res != ncclSuccess) {
            atomic_store(&args[i].c->async_err, (int)args[i].res);
            if (res == ncclSuccess)
                res = args[i].res;
        }
    }
out:
    free(args);
    free(th);
    free(started);
    free(t_inits);
    t_inits = NULL;
    t_ninits = 0;
    return res;
}

API_FN(ncclResult_t, ncclCommInitRank, (ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                        int rank))
{
    return init_rank(comm, nranks, &commId, rank, NULL);
}

API_FN(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t *comm, int nranks,
                                              ncclUniqueId commId, int rank,
                                              ncclConfig_t *config))
{
    return init_rank(comm, nranks, &commId, rank, config);
}

API_FN(ncclResult_t, ncclCommInitRankScalable, (ncclComm_t *newcomm, int nranks, int myrank,
                                                int nId, ncclUniqueId *commIds,
                                                ncclConfig_t *config))
{
    if (nId < 1 || !commIds) {
        warn(-1, "CommInitRankScalable : invalid nId %d or commIds NULL", nId);
        return ncclInvalidArgument;
    }
    return init_rank(newcomm, nranks, &commIds[0], myrank, config);
}

typedef struct initall_arg {
    ncclComm_t *comm;
    int ndev, rank, dev;
    ncclUniqueId id;
    ncclResult_t res;
} initall_arg_t;

static void *initall_thread(void *p)
{
    initall_arg_t *a = p;
    const simdrv_t *d = simdrv_get();
    CUdevice dev;
    CUcontext ctx;
    if (d->cuDeviceGet(&dev, a->dev) != CUDA_SUCCESS ||
        d->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        d->cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        warn(a->dev, "CommInitAll : cannot make device %d current", a->dev);
        a->res = ncclUnhandledCudaError;
        return NULL;
    }
    a->res = init_rank(a->comm, a->ndev, &a->id, a->rank, NULL);
    return NULL;
}

API_FN(ncclResult_t, ncclCommInitAll, (ncclComm_t *comms, int ndev, const int *devlist))
{
    ncclResult_t res = ncclSuccess;
    initall_arg_t *args = NULL;
    pthread_t *th = NULL;
    int started = 0;
    if (!comms) {
        warn(-1, "CommInitAll : comms is NULL");
        return ncclInvalidArgument;
    }
    if (ndev < 1 || ndev > SIM_NCCL_MAX_RANKS) {
        warn(-1, "CommInitAll : invalid ndev %d", ndev);
        return ncclInvalidArgument;
    }
    const simdrv_t *d = drv(-1);
    int count = 0;
    if (!d || d->cuInit(0) != CUDA_SUCCESS || d->cuDeviceGetCount(&count) != CUDA_SUCCESS)
        return ncclUnhandledCudaError;
    for (int i = 0; i < ndev; i++) {
        int dv = devlist ? devlist[i] : i;
        if (dv < 0 || dv >= count) {
            warn(-1, "CommInitAll : invalid device %d (%d visible)", dv, count);
            return ncclInvalidArgument;
        }
        for (int j = 0; j < i; j++)
            if ((devlist ? devlist[j] : j) == dv) {
                warn(dv, "CommInitAll : duplicate device %d in the device list", dv);
                return ncclInvalidUsage;
            }
    }
    ncclUniqueId id;
    local_id(&id);
    args = calloc((size_t)ndev, sizeof(*args));
    th = calloc((size_t)ndev, sizeof(*th));
    if (!args || !th) {
        res = ncclSystemError;
        goto out;
    }
    for (int i = 0; i < ndev; i++) {
        args[i] = (initall_arg_t){&comms[i], ndev, i, devlist ? devlist[i] : i, id, ncclSuccess};
        if (pthread_create(&th[i], NULL, initall_thread, &args[i]) != 0) {
            res = ncclSystemError;
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < started && res == ncclSuccess; i++)
        if (args[i].res != ncclSuccess)
            res = args[i].res;
    if (res != ncclSuccess)
        for (int i = 0; i < started; i++)
            if (args[i].res == ncclSuccess && comms[i]) {
                pncclCommAbort(comms[i]);
                comms[i] = NULL;
            }
out:
    free(args);
    free(th);
    return res;
}

/* ---- communicator queries ---------------------------------------------------------- */

#define CHECK_COMM(c, fn)                                      \
    do {                                                       \
        if (!comm_ok(c)) {                                     \
            warn(-1, "%s : comm argument is NULL or invalid", fn); \
            return ncclInvalidArgument;                        \
        }                                                      \
    } while (0)

/* The communicator getters: a live comm's field into *out (NULL out:
 * ncclInvalidArgument). */
#define COMM_GETTER(name, shortname, what, field)                                            \
    API_FN(ncclResult_t, name, (const ncclComm_t comm, int *out))                           \
    {                                                                                       \
        CHECK_COMM(comm, shortname);                                                        \
        if (!out) {                                                                         \
            warn(comm->dev, shortname " : " what " is NULL");                               \
            return ncclInvalidArgument;                                                     \
        }                                                                                   \
        *out = comm->field;                                                                 \
        return ncclSuccess;                                                                 \
    }

COMM_GETTER(ncclCommCount, "CommCount", "count", nranks)
COMM_GETTER(ncclCommCuDevice, "CommCuDevice", "device", dev)
COMM_GETTER(ncclCommUserRank, "CommUserRank", "rank", rank)

API_FN(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError))
{
    CHECK_COMM(comm, "ncclCommGetAsyncError");
    if (!asyncError) {
        warn(comm->dev, "ncclCommGetAsyncError : asyncError is NULL");
        return ncclInvalidArgument;
    }
    ncclResult_t e = (ncclResult_t)atomic_load(&comm->async_err);
    if (e == ncclSuccess && comm->pend)
        e = ncclInProgress;   /* rendezvous deferred to ncclGroupEnd */
    if (e == ncclSuccess && comm->seg.h) {
        uint32_t f = atomic_load(&comm->seg.h->fail);
        if (f)
            e = f == SIM_FAIL_TIMEOUT ? ncclSystemError : ncclRemoteError;
        /* found by a peer or the proxy before any operation of this rank
         * failed: the reason for ncclGetLastError(comm) */
        const char *nr = f ? net_reason(comm) : NULL;
        int want = ncclSuccess;
        if (nr && atomic_compare_exchange_strong(&comm->async_err, &want, (int)e))
            snprintf(comm->fail_msg, sizeof(comm->fail_msg), "rank %d: communicator failed: %s",
                     comm->rank, nr);
    }
    *asyncError = e;
    return ncclSuccess;
}

/* Waits (bounded by the operations' own bounds) until no operation of the
 * communicator is pending on a stream. */
static void wait_idle(ncclComm_t c)
{
    pthread_mutex_lock(&c->mu);
    while (c->inflight > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
}

API_FN(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
{
    CHECK_COMM(comm, "ncclCommFinalize");
    wait_idle(comm);
    return (ncclResult_t)atomic_load(&comm->async_err);
}

API_FN(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
{
    if (!comm)
        return ncclSuccess;
    CHECK_COMM(comm, "ncclCommDestroy");
    reap_graveyard();
    wait_idle(comm);
    sim_live_remove(&g_comms, comm);
    comm_unref(comm, 0);
    return ncclSuccess;
}

API_FN(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
{
    if (!comm)
        return ncclSuccess;
    CHECK_COMM(comm, "ncclCommAbort");
    reap_graveyard();
    atomic_store(&comm->abort_flag, 1);
    if (comm->seg.h)
        sim_nccl_fail(&comm->seg, SIM_FAIL_ABORT);
    pthread_mutex_lock(&comm->mu);
    pthread_cond_broadcast(&comm->cv);
    pthread_mutex_unlock(&comm->mu);
    sim_live_remove(&g_comms, comm);  /* the application's handle is gone now */
    comm_unref(comm, 0);   /* pending operations hold their own references */
    return ncclSuccess;
}

API_FN(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
{
    CHECK_COMM(comm, "ncclCommRevoke");
    if (revokeFlags != 0) {
        warn(comm->dev, "ncclCommRevoke : revokeFlags must be 0");
        return ncclInvalidArgument;
    }
    atomic_store(&comm->abort_flag, 1);
    sim_nccl_fail(&comm->seg, SIM_FAIL_ABORT);
    return ncclSuccess;
}

typedef struct member {
    int key, rank;
} member_t;

static int member_cmp(const void *a, const void *b)
{
    const member_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank - y->rank;
}

API_FN(ncclResult_t, ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                     ncclConfig_t *config))
{
    CHECK_COMM(comm, "CommSplit");
    if (!newcomm) {
        warn(comm->dev, "CommSplit : newcomm is NULL");
        return ncclInvalidArgument;
    }
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
        warn(comm->dev, "CommSplit : invalid color %d", color);
        return ncclInvalidArgument;
    }
    ncclResult_t res = check_config(config);
    if (res != ncclSuccess)
        return res;
    *newcomm = NULL;
    if (comm->nhosts > 1) {
        warn(comm->dev, "CommSplit : not supported by simcuda for a communicator across hosts");
        return ncclInvalidUsage;
    }
    int seq = comm->split_seq++, set = seq & 1;
    sim_nccl_rank_t *me = sim_nccl_rank(&comm->seg, comm->rank);
    me->split_color[set] = color;
    me->split_key[set] = key;
    int why = 0;
    int rc = sim_nccl_barrier(&comm->seg, ++comm->ctrl_bar, 1, &why);
    if (rc < 0) {
        warn(comm->dev, "CommSplit : peers failed during the split");
        return err_from_wait(rc, why);
    }
    if (color == NCCL_SPLIT_NOCOLOR)
        return ncclSuccess;
    member_t m[SIM_NCCL_MAX_RANKS];
    int n = 0, newrank = -1;
    for (int r = 0; r < comm->nranks; r++) {
        sim_nccl_rank_t *ri = sim_nccl_rank(&comm->seg, r);
        if (ri->split_color[set] == color)
            m[n++] = (member_t){ri->split_key[set], r};
    }
    qsort(m, (size_t)n, sizeof(m[0]), member_cmp);
    for (int i = 0; i < n; i++)
        if (m[i].rank == comm->rank)
            newrank = i;
    sim_nccl_id_t id;
    memset(&id, 0, sizeof(id));
    id.magic = SIM_NCCL_ID_MAGIC;
    id.nonce = comm->nonce * 0x9e3779b97f4a7c15ULL + (uint64_t)seq * 1000003u + (uint64_t)color;
    snprintf(id.name, sizeof(id.name), "/simnccl-%016llx-s%d-c%d",
             (unsigned long long)comm->nonce, seq, color);
    ncclUniqueId uid;
    memcpy(&uid, &id, sizeof(uid));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    if (!config) {
        cfg.minCTAs = comm->cfg_min_ctas;
        cfg.maxCTAs = comm->cfg_max_ctas;
        config = &cfg;
    }
    const simdrv_t *d = simdrv_get();
    CUcontext prev = NULL;
    d->cuCtxGetCurrent(&prev);
    if (prev != comm->ctx)
        d->cuCtxSetCurrent(comm->ctx);
    res = init_rank(newcomm, n, &uid, newrank, config);
    if (prev != comm->ctx)
        d->cuCtxSetCurrent(prev);
    return res;
}

API_FN(ncclResult_t, ncclCommShrink, (ncclComm_t comm, int *excludeRanksList,
                                      int excludeRanksCount, ncclComm_t *newcomm,
                                      ncclConfig_t *config, int shrinkFlags))
{
    CHECK_COMM(comm, "CommShrink");
    (void)shrinkFlags, (void)config;
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList)) {
        warn(comm->dev, "CommShrink : invalid exclude list");
        return ncclInvalidArgument;
    }
    int excluded = 0;
    for (int i = 0; i < excludeRanksCount; i++)
        if (excludeRanksList[i] == comm->rank)
            excluded = 1;
    if (excluded) {
        if (newcomm)
            *newcomm = NULL;
        warn(comm->dev, "CommShrink : called by an excluded rank");
        return ncclInvalidArgument;
    }
    /* Excluded ranks do not take part: only a split among survivors would
     * need them, so simcuda does not offer shrink. */
    warn(comm->dev, "CommShrink is not supported by simcuda");
    return ncclInvalidUsage;
}

/* ---- execution: kernels of the library's module, host functions for order -------- */

/* sim/nccl/kernels.cu built by nvcc, in this library's .nv_fatbin section
 * (fatbin_blob.c). */
extern const unsigned char simnccl_fatbin[];

static const char *const g_kname[SIMNCCL_K_COUNT] = {
#define SIMNCCL_K_NAME(id, name) name,
    SIMNCCL_KERNELS(SIMNCCL_K_NAME)
#undef SIMNCCL_K_NAME
};

/* The module of each context (sim/common/kmod.h). */
static sim_kmods_t g_kmods = SIM_KMODS_INIT(simnccl_fatbin, g_kname, SIMNCCL_K_COUNT);

/* What a host function of the chain does: only ordering and flow control,
 * on the communicator's host segment; the data moves in kernels. */
enum { HF_BEGIN, HF_BARRIER, HF_SEND_SPACE, HF_SEND_POST, HF_RECV_WAIT, HF_RECV_DONE, HF_END,
       HF_NET_SEND, HF_NET_RECV };

typedef struct hf {
    ncclComm_t c;
    int kind, peer;
    uint64_t v;       /* barrier number, byte count or sequence number */
} hf_t;

static int comm_failed(ncclComm_t c)
{
    return atomic_load(&c->async_err) != ncclSuccess || atomic_load(&c->abort_flag);
}

/* Which rank of another host is unreachable, if that is what failed:
 * this rank's own finding, else its host's (a local peer's, in the
 * segment). */
static const char *net_reason(ncclComm_t c)
{
    const char *m = sim_nccl_net_failure(c->net);
    if (m)
        return m;
    if (c->net && c->seg.h && atomic_load(&c->seg.h->net_set) == 2)
        return c->seg.h->net_msg;
    return NULL;
}

static void op_failed(ncclComm_t c, int rc, int why)
{
    if (rc == -EPIPE)
        sim_nccl_fail(&c->seg, SIM_FAIL_DEAD);
    int want = ncclSuccess;
    ncclResult_t e = err_from_wait(rc, why);
    const char *nr = net_reason(c);
    /* the network's reason also when the abort is another rank's of this
     * host that gave up on the network first (not this rank's own) */
    int use_net = nr && ((why != SIM_FAIL_ABORT && rc != -ECANCELED) ||
                         (why == SIM_FAIL_ABORT && !atomic_load(&c->abort_flag)));
    if (use_net)
        e = ncclRemoteError;
    if (atomic_compare_exchange_strong(&c->async_err, &want, (int)e)) {
        snprintf(c->fail_msg, sizeof(c->fail_msg), "rank %d: collective failed: %s", c->rank,
                 use_net ? nr
                 : rc == -ETIMEDOUT || why == SIM_FAIL_TIMEOUT   ? "timeout waiting for peers"
                 : why == SIM_FAIL_ABORT || rc == -ECANCELED     ? "communicator aborted"
                 : rc == -EPROTO ? "a peer of another host sent an unexpected message"
                                 : "a peer process is gone");
        warn(c->dev, "%s", c->fail_msg);
    }
}

typedef struct pcond {
    sim_nccl_seg_t *s;
    int from, to;
    uint64_t v;
    int head; /* wait for head >= v (data), else tail >= v (space) */
} pcond_t;

static int pair_cond(void *arg)
{
    pcond_t *a = arg;
    sim_nccl_pair_t *pr = sim_nccl_pair(a->s, a->from, a->to);
    uint64_t x = a->head ? atomic_load(&pr->head) : atomic_load(&pr->tail);
    if (x >= a->v)
        return 1;
    int peer = a->head ? a->from : a->to;
    return atomic_load(&sim_nccl_rank(a->s, peer)->departed) ? -EPIPE : 0;
}

static void CUDA_CB hf_run(void *arg)
{
    hf_t *h = arg;
    ncclComm_t c = h->c;
    sim_nccl_seg_t *s = &c->seg;
    int rc = 0, why = 0;
    switch (h->kind) {
    case HF_BEGIN:
        /* the turn of this operation among the communicator's */
        pthread_mutex_lock(&c->mu);
        while (c->exec_seq != h->v && !atomic_load(&c->abort_flag)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
        pthread_mutex_unlock(&c->mu);
        if (atomic_load(&c->abort_flag))
            rc = -ECANCELED;
        break;
    case HF_BARRIER:
        if (!comm_failed(c))
            rc = sim_nccl_barrier(s, h->v, 0, &why);
        break;
    case HF_SEND_SPACE:
    case HF_RECV_WAIT:
        if (!comm_failed(c)) {
            /* the segment's pairs are indexed by this host's ranks */
            int me = c->lidx[c->rank], peer = c->lidx[h->peer];
            pcond_t a = {s, h->kind == HF_RECV_WAIT ? peer : me,
                         h->kind == HF_RECV_WAIT ? me : peer, h->v,
                         h->kind == HF_RECV_WAIT};
            rc = sim_nccl_wait(s, pair_cond, &a, &why);
        }
        break;
    case HF_SEND_POST:
        atomic_store(&sim_nccl_pair(s, c->lidx[c->rank], c->lidx[h->peer])->head, h->v);
        sim_nccl_ring_bell(s);
        break;
    case HF_RECV_DONE:
        atomic_store(&sim_nccl_pair(s, c->lidx[h->peer], c->lidx[c->rank])->tail, h->v);
        sim_nccl_ring_bell(s);
        break;
    case HF_NET_SEND:
        /* the stream copied the bytes to the pinned buffer before this */
        if (!comm_failed(c)) {
            rc = sim_nccl_net_send(c->net, h->peer, c->pin_send[h->peer], (size_t)h->v);
            why = SIM_FAIL_NET;
        }
        break;
    case HF_NET_RECV:
        /* into the pinned buffer; the stream copies it to device memory next */
        if (!comm_failed(c))
            rc = sim_nccl_net_recv(c->net, h->peer, c->pin_recv[h->peer], (size_t)h->v, &why);
        break;
    case HF_END:
        pthread_mutex_lock(&c->mu);
        if (c->exec_seq == h->v)
            c->exec_seq++;
        c->inflight--;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        free(h);
        comm_unref(c, 1);
        return;
    }
    if (rc < 0)
        op_failed(c, rc, why);
    free(h);
}

/* Enqueues one operation's chain on stream s: kernels and host functions.
 * err: the first enqueue error (nothing more is enqueued after it but the
 * end of the chain). */
/* Copies not launched yet: consecutive copies of a chain (nothing else
 * between them) go in one simnccl_copy launch. */
typedef struct copies {
    simnccl_copy_kp_t kp;
    uint64_t chunks;
} copies_t;

typedef struct chain {
    ncclComm_t c;
    const simdrv_t *d;
    CUstream s;
    CUresult err;
    copies_t cp;
} chain_t;

static void ch_kernel(chain_t *ch, int k, uint64_t threads, void *kp);

/* Launches the pending copies (before anything else joins the chain). */
static void cp_flush(chain_t *ch)
{
    if (ch->cp.kp.n)
        ch_kernel(ch, SIMNCCL_K_COPY, ch->cp.chunks, &ch->cp.kp);
    ch->cp.kp.n = 0;
    ch->cp.chunks = 0;
}

static void cp_add(chain_t *ch, CUdeviceptr src, CUdeviceptr dst, size_t bytes)
{
    if (!bytes || src == dst)
        return;
    if (ch->cp.kp.n == SIMNCCL_MAX_SEGS)
        cp_flush(ch);
    simnccl_seg_t *g = &ch->cp.kp.seg[ch->cp.kp.n++];
    g->src = (const void *)(uintptr_t)src;
    g->dst = (void *)(uintptr_t)dst;
    g->bytes = bytes;
    ch->cp.chunks += (bytes + SIMNCCL_COPY_CHUNK - 1) / SIMNCCL_COPY_CHUNK;
}

static void ch_hf(chain_t *ch, int kind, int peer, uint64_t v)
{
    cp_flush(ch);
    if (ch->err)
        return;
    hf_t *h = malloc(sizeof(*h));
    if (!h) {
        ch->err = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    *h = (hf_t){ch->c, kind, peer, v};
    ch->err = ch->d->cuLaunchHostFunc(ch->s, hf_run, h);
    if (ch->err)
        free(h);
}

/* Whether rank r is on another host. */
static int remote(const ncclComm_t c, int r)
{
    return c->lidx[r] < 0;
}

/* Bytes of device memory to rank `peer` of another host: the stream copies
 * them to this rank's pinned buffer, then a host function hands them to the
 * proxy (net.h). */
static void ch_net_send(chain_t *ch, int peer, CUdeviceptr src, size_t bytes)
{
    if (!bytes)
        return;
    cp_flush(ch);
    if (ch->err)
        return;
    ch->err = ch->d->cuMemcpyDtoHAsync(ch->c->pin_send[peer], src, bytes, ch->s);
    ch_hf(ch, HF_NET_SEND, peer, bytes);
}

/* The next message of `peer` (bytes long) into device memory: a host
 * function takes it into the pinned buffer, the stream copies it on. */
static void ch_net_recv(chain_t *ch, int peer, CUdeviceptr dst, size_t bytes)
{
    if (!bytes)
        return;
    ch_hf(ch, HF_NET_RECV, peer, bytes);
    if (ch->err)
        return;
    ch->err = xdrv()->cuMemcpyHtoDAsync(dst, ch->c->pin_recv[peer], bytes, ch->s);
}

static unsigned int grid_for(uint64_t n)
{
    uint64_t g = n > 0 ? (n + SIMNCCL_THREADS - 1) / SIMNCCL_THREADS : 1;
    return g > (1u << 20) ? 1u << 20 : (unsigned int)g;
}

static void ch_kernel(chain_t *ch, int k, uint64_t threads, void *kp)
{
    if (k != SIMNCCL_K_COPY)
        cp_flush(ch);
    if (ch->err)
        return;
    void *args[] = {kp};
    ch->err = ch->d->cuLaunchKernel(ch->c->km->fn[k], grid_for(threads), 1, 1, SIMNCCL_THREADS, 1,
                                    1, 0, ch->s, args, NULL);
}


/* Elements [e0, e1) reduced with the plan's order into out (and out2). */
static void ch_reduce(chain_t *ch, const sim_nccl_plan_t *p, const sim_op_t *op,
                      const CUdeviceptr *base, size_t base_e, size_t e0, size_t e1,
                      CUdeviceptr out, CUdeviceptr out2)
{
    if (e1 <= e0)
        return;
    ncclComm_t c = ch->c;
    simnccl_red_kp_t kp;
    memset(&kp, 0, sizeof(kp));
    for (int r = 0; r < c->nranks; r++) {
        kp.in[r] = (const void *)(uintptr_t)base[r];
        kp.ring[r] = c->ring[r];
        kp.pos[r] = c->pos[r];
    }
    kp.out = (void *)(uintptr_t)out;
    kp.out2 = (void *)(uintptr_t)out2;
    kp.e0 = e0;
    kp.e1 = e1;
    kp.base_e = base_e;
    kp.count = p->count;
    kp.chunk = p->chunk;
    kp.align = p->align;
    kp.chan_elems = p->chan_elems;
    kp.block = p->block;
    kp.kind = p->kind;
    kp.nranks = c->nranks;
    kp.algo = p->algo;
    kp.root_pos = p->root_pos;
    kp.dtype = op->dtype;
    kp.op = op->redop;
    ch_kernel(ch, SIMNCCL_K_REDUCE, (e1 - e0 + SIMNCCL_RED_TILE - 1) / SIMNCCL_RED_TILE, &kp);
}

/* The part [*a, *b) of a piece of m elements that rank q reduces. */
static void share_of(size_t m, int n, int q, size_t *a, size_t *b)
{
    size_t share = (m + (size_t)n - 1) / (size_t)n;
    *a = (size_t)q * share < m ? (size_t)q * share : m;
    *b = *a + share < m ? *a + share : m;
}

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* One collective, piece by piece through the staging sets (alternating, so
 * a set is rewritten only after every rank passed the barrier that follows
 * its last read). A rank publishes the parts of its input the others
 * reduce, reduces its own share from its own input and the peers' slots
 * straight into its output (and its result area), then copies the other
 * shares from the peers' result areas. */
static void ch_coll(chain_t *ch, const sim_op_t *op)
{
    ncclComm_t c = ch->c;
    const sim_nccl_staging_t *st = &c->st;
    int n = c->nranks, me = c->rank;
    size_t es = sim_nccl_type_size(op->dtype), S = st->slot, count = op->count;
    CUdeviceptr send = DP(op->send), recv = DP(op->recv);
    CUdeviceptr base[SIM_NCCL_MAX_RANKS];
    sim_nccl_plan_t p;

    switch (op->kind) {
    case SIM_COLL_ALLREDUCE:
    case SIM_COLL_REDUCE: {
        int all = op->kind == SIM_COLL_ALLREDUCE, root = all ? -1 : op->root;
        sim_nccl_plan(&p, &c->tun, op->kind, n, count, op->dtype, all ? 0 : c->pos[root]);
        size_t pe = S / es;
        for (size_t lo = 0; lo < count && !ch->err; lo += pe) {
            size_t m = count - lo < pe ? count - lo : pe, a, b;
            int set = (int)(c->step_enq++ & 1);
            CUdeviceptr mine = sim_nccl_st_slot(st, me, set), res = sim_nccl_st_result(st, me, set);
            share_of(m, n, me, &a, &b);
            cp_add(ch, send + lo * es, mine, a * es);
            cp_add(ch, send + (lo + b) * es, mine + b * es, (m - b) * es);
            /* ranks of other hosts get their shares of my input over the
             * sockets, and I theirs of mine into their mirrors here */
            for (int q = 0; q < n && c->net; q++)
                if (remote(c, q)) {
                    size_t aq, bq;
                    share_of(m, n, q, &aq, &bq);
                    ch_net_send(ch, q, send + (lo + aq) * es, (bq - aq) * es);
                }
            ch_hf(ch, HF_BARRIER, 0, ++c->bar_enq);
            for (int r = 0; r < n && c->net; r++)
                if (remote(c, r))
                    ch_net_recv(ch, r, sim_nccl_st_slot(st, r, set) + a * es, (b - a) * es);
            for (int r = 0; r < n; r++)
                base[r] = r == me ? send + lo * es : sim_nccl_st_slot(st, r, set);
            int to_recv = all || me == root, to_res = all || me != root;
            CUdeviceptr mine_out = to_recv ? recv + (lo + a) * es : res + a * es;
            ch_reduce(ch, &p, op, base, lo, lo + a, lo + b, mine_out,
                      to_recv && to_res ? res + a * es : 0);
            for (int q = 0; q < n && c->net; q++)
                if (remote(c, q) && (all || q == root))
                    ch_net_send(ch, q, mine_out, (b - a) * es);
            ch_hf(ch, HF_BARRIER, 0, ++c->bar_enq);
            if (to_recv) {
                for (int q = 0; q < n; q++) {
                    size_t aq, bq;
                    share_of(m, n, q, &aq, &bq);
                    if (q != me && remote(c, q))
                        ch_net_recv(ch, q, recv + (lo + aq) * es, (bq - aq) * es);
                    else if (q != me)
                        cp_add(ch, sim_nccl_st_result(st, q, set) + aq * es,
                               recv + (lo + aq) * es, (bq - aq) * es);
                }
            }
        }
        return;
    }
    case SIM_COLL_BROADCAST: {
        size_t pe = S / es;
        for (size_t lo = 0; lo < count && !ch->err; lo += pe) {
            size_t m = count - lo < pe ? count - lo : pe;
            int set = (int)(c->step_enq++ & 1);
            if (me == op->root) {
                cp_add(ch, send + lo * es, sim_nccl_st_slot(st, me, set), m * es);
                for (int q = 0; q < n && c->net; q++)
                    if (remote(c, q))
                        ch_net_send(ch, q, send + lo * es, m * es);
            }
            ch_hf(ch, HF_BARRIER, 0, ++c->bar_enq);
            if (me != op->root && remote(c, op->root))
                ch_net_recv(ch, op->root, recv + lo * es, m * es);
            else if (me != op->root)
                cp_add(ch, sim_nccl_st_slot(st, op->root, set), recv + lo * es, m * es);
            else
                cp_add(ch, send + lo * es, recv + lo * es, m * es);
        }
        return;
    }
    case SIM_COLL_ALLGATHER: {
        size_t pe = S / es;
        for (size_t lo = 0; lo < count && !ch->err; lo += pe) {
            size_t m = count - lo < pe ? count - lo : pe;
            int set = (int)(c->step_enq++ & 1);
            cp_add(ch, send + lo * es, sim_nccl_st_slot(st, me, set), m * es);
            for (int q = 0; q < n && c->net; q++)
                if (remote(c, q))
                    ch_net_send(ch, q, send + lo * es, m * es);
            ch_hf(ch, HF_BARRIER, 0, ++c->bar_enq);
            for (int r = 0; r < n; r++) {
                CUdeviceptr dst = recv + ((size_t)r * count + lo) * es;
                if (r != me && remote(c, r))
                    ch_net_recv(ch, r, dst, m * es);
                else
                    cp_add(ch, r == me ? send + lo * es : sim_nccl_st_slot(st, r, set), dst,
                           m * es);
            }
        }
        return;
    }
    case SIM_COLL_REDUCESCATTER: {
        sim_nccl_plan(&p, &c->tun, op->kind, n, count, op->dtype, 0);
        size_t pe = S / (es * (size_t)n);
        for (size_t lo = 0; lo < count && !ch->err; lo += pe) {
            size_t m = count - lo < pe ? count - lo : pe;
            int set = (int)(c->step_enq++ & 1);
            CUdeviceptr slot = sim_nccl_st_slot(st, me, set);
            /* block d of this piece goes to slot offset d*m (not my own) */
            for (int d = 0; d < n; d++)
                if (d != me && remote(c, d))
                    ch_net_send(ch, d, send + ((size_t)d * count + lo) * es, m * es);
                else if (d != me)
                    cp_add(ch, send + ((size_t)d * count + lo) * es, slot + (size_t)d * m * es,
                           m * es);
            ch_hf(ch, HF_BARRIER, 0, ++c->bar_enq);
            for (int r = 0; r < n && c->net; r++)
                if (remote(c, r))
                    ch_net_recv(ch, r, sim_nccl_st_slot(st, r, set) + (size_t)me * m * es,
                                m * es);
            size_t e0 = (size_t)me * count + lo;
            for (int r = 0; r < n; r++)
                base[r] = r == me ? send + e0 * es
                                  : sim_nccl_st_slot(st, r, set) + (size_t)me * m * es;
            ch_reduce(ch, &p, op, base, e0, e0, e0 + m, recv + lo * es, 0);
        }
        return;
    }
    default:
        ch->err = CUDA_ERROR_INVALID_VALUE;
    }
}

/* The sends and receives of one group through the rings in the senders'
 * staging, in rounds: round r moves piece r of every send, then piece r of
 * every receive; a piece waits for ring space (send) or data (receive) in a
 * host function first. Pieces are small enough that one round's sends to a
 * peer take half a ring, so a round's sends never wait for the same round's
 * receives: every rank completes round r once all completed the rounds
 * before. */
static void ch_p2p(chain_t *ch, const sim_op_t **ops, int n)
{
    ncclComm_t c = ch->c;
    const sim_nccl_staging_t *st = &c->st;
    size_t P = st->p2p;
    int nsend[SIM_NCCL_MAX_RANKS] = {0}, nrecv[SIM_NCCL_MAX_RANKS] = {0}, kmax = 1;
    for (int i = 0; i < n; i++) {
        int *k = ops[i]->kind == OP_SEND ? &nsend[ops[i]->peer] : &nrecv[ops[i]->peer];
        if (++*k > kmax)
            kmax = *k;
    }
    size_t piece = P / (2 * (size_t)kmax) & ~(size_t)15;
    if (piece < 16)
        piece = 16;
    size_t rounds = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = ops[i]->count * sim_nccl_type_size(ops[i]->dtype);
        size_t pr = (bytes + piece - 1) / piece;
        if (pr > rounds)
            rounds = pr;
    }
    for (size_t r = 0; r < rounds && !ch->err; r++)
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n; i++) {
                const sim_op_t *op = ops[i];
                int is_send = op->kind == OP_SEND, peer = op->peer;
                if (is_send != (pass == 0))
                    continue;
                size_t bytes = op->count * sim_nccl_type_size(op->dtype), off = r * piece;
                if (off >= bytes)
                    continue;
                size_t len = bytes - off < piece ? bytes - off : piece;
                if (peer != c->rank && remote(c, peer)) {
                    /* another host: over the socket, no ring to wait for */
                    if (is_send)
                        ch_net_send(ch, peer, DP(op->send) + off, len);
                    else
                        ch_net_recv(ch, peer, DP(op->recv) + off, len);
                    continue;
                }
                uint64_t *done = is_send ? &c->p2p_sent[peer] : &c->p2p_recvd[peer];
                uint64_t pos = *done;
                CUdeviceptr ring = is_send ? sim_nccl_st_ring(st, c->rank, peer)
                                           : sim_nccl_st_ring(st, peer, c->rank);
                size_t at = (size_t)(pos % P), first = P - at < len ? P - at : len;
                if (is_send) {
                    if (pos + len > P)
                        ch_hf(ch, HF_SEND_SPACE, peer, pos + len - P);
                    cp_add(ch, DP(op->send) + off, ring + at, first);
                    cp_add(ch, DP(op->send) + off + first, ring, len - first);
                } else {
                    ch_hf(ch, HF_RECV_WAIT, peer, pos + len);
                    cp_add(ch, ring + at, DP(op->recv) + off, first);
                    cp_add(ch, ring, DP(op->recv) + off + first, len - first);
                }
                *done = pos + len;
                ch_hf(ch, is_send ? HF_SEND_POST : HF_RECV_DONE, peer, *done);
            }
}

/* ---- enqueue and groups --------------------------------------------------------- */

/* Enqueues the operations of one group on one communicator: a chain on the
 * first operation's stream (the others' streams joined with events, as
 * NCCL does), which starts by waiting for the communicator's previous
 * operations (in enqueue order) and ends by letting the next one go. */
static ncclResult_t launch(ncclComm_t c, const sim_op_t *ops, int n)
{
    const simdrv_t *d = drv(c->dev);
    if (!d)
        return ncclUnhandledCudaError;
    reap_graveyard();
    CUstream s0 = ops[0].stream;
    CUcontext cur = NULL;
    d->cuCtxGetCurrent(&cur);
    if (cur != c->ctx)
        d->cuCtxSetCurrent(c->ctx);
    /* Operations of one group on several streams: the launch stream waits
     * for the others, and they for it. */
    CUresult r = CUDA_SUCCESS;
    for (int i = 1; i < n && r == CUDA_SUCCESS; i++) {
        int seen = ops[i].stream == s0;
        for (int j = 1; j < i && !seen; j++)
            seen = ops[j].stream == ops[i].stream;
        if (seen)
            continue;
        CUevent ev;
        r = d->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS) {
            r = d->cuEventRecord(ev, ops[i].stream);
            if (r == CUDA_SUCCESS)
                r = d->cuStreamWaitEvent(s0, ev, 0);
            d->cuEventDestroy(ev);
        }
    }
    ncclResult_t res = ncclSuccess;
    if (r == CUDA_SUCCESS) {
        /* Sequence numbers, barrier numbers, staging sets and ring
         * positions are handed out under launch_mu, in enqueue order, the
         * same on every rank. */
        pthread_mutex_lock(&c->launch_mu);
        uint64_t seq = c->enq_seq++;
        atomic_fetch_add(&c->refs, 1);
        pthread_mutex_lock(&c->mu);
        c->inflight++;
        pthread_mutex_unlock(&c->mu);
        chain_t ch;
        memset(&ch, 0, sizeof(ch));
        ch.c = c;
        ch.d = d;
        ch.s = s0;
        ch_hf(&ch, HF_BEGIN, 0, seq);
        const sim_op_t *p2p[n > 0 ? n : 1];
        int np = 0;
        for (int i = 0; i < n && !ch.err; i++) {
            if (ops[i].kind == OP_SEND || ops[i].kind == OP_RECV)
                p2p[np++] = &ops[i];
            else
                ch_coll(&ch, &ops[i]);
        }
        if (np > 0)
            ch_p2p(&ch, p2p, np);
        cp_flush(&ch);
        CUresult failed = ch.err;
        ch.err = CUDA_SUCCESS;
        ch_hf(&ch, HF_END, 0, seq);
        if (ch.err) {
            /* not even the end is queued: its bookkeeping now */
            pthread_mutex_lock(&c->mu);
            if (c->exec_seq == seq)
                c->exec_seq++;
            c->inflight--;
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
            atomic_fetch_sub(&c->refs, 1);
            failed = ch.err;
        }
        pthread_mutex_unlock(&c->launch_mu);
        if (failed) {
            /* this rank's sequence is broken: the peers must not wait for it */
            int want = ncclSuccess;
            atomic_compare_exchange_strong(&c->async_err, &want, (int)ncclUnhandledCudaError);
            sim_nccl_fail(&c->seg, SIM_FAIL_ABORT);
            warn(c->dev, "Cuda failure %d enqueueing a collective", (int)failed);
            res = ncclUnhandledCudaError;
        }
    } else {
        warn(c->dev, "Cuda failure %d joining the group's streams", (int)r);
        res = ncclUnhandledCudaError;
    }
    if (res == ncclSuccess)
        for (int i = 1; i < n; i++) {
            int seen = ops[i].stream == s0;
            for (int j = 1; j < i && !seen; j++)
                seen = ops[j].stream == ops[i].stream;
            if (seen)
                continue;
            CUevent ev;
            if (d->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
                d->cuEventRecord(ev, s0);
                d->cuStreamWaitEvent(ops[i].stream, ev, 0);
                d->cuEventDestroy(ev);
            }
        }
    if (cur != c->ctx)
        d->cuCtxSetCurrent(cur);
    return res;
}


API_FN(ncclResult_t, ncclGroupStart, (void))
{
    t_depth++;
    return ncclSuccess;
}

static void group_clear(void)
{
    free(t_items);
    t_items = NULL;
    t_nitems = t_capitems = 0;
    t_group_err = ncclSuccess;
}

API_FN(ncclResult_t, ncclGroupEnd, (void))
{
    if (t_depth <= 0) {
        warn(-1, "ncclGroupEnd: not in a group call.");
        return ncclInvalidUsage;
    }
    if (--t_depth > 0)
        return ncclSuccess;
    ncclResult_t res = t_ninits > 0 ? run_pending_inits() : ncclSuccess;
    if (res == ncclSuccess)
        res = t_group_err;
    if (res != ncclSuccess) {
        group_clear();
        return res;
    }
    sim_op_t *ops = malloc((size_t)(t_nitems > 0 ? t_nitems : 1) * sizeof(sim_op_t));
    char *used = calloc((size_t)(t_nitems > 0 ? t_nitems : 1), 1);
    if (!ops || !used) {
        free(ops);
        free(used);
        group_clear();
        return ncclSystemError;
    }
    for (int i = 0; i < t_nitems; i++) {
        if (used[i])
            continue;
        ncclComm_t c = t_items[i].comm;
        int n = 0;
        for (int j = i; j < t_nitems; j++)
            if (!used[j] && t_items[j].comm == c) {
                used[j] = 1;
                ops[n++] = t_items[j].op;
            }
        ncclResult_t r = launch(c, ops, n);
        if (r != ncclSuccess && res == ncclSuccess)
            res = r;
    }
    free(ops);
    free(used);
    group_clear();
    return res;
}

API_FN(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t *simInfo))
{
    (void)simInfo;
    warn(-1, "ncclGroupSimulateEnd is not supported by simcuda");
    return ncclInvalidUsage;
}

static ncclResult_t enqueue(ncclComm_t c, const sim_op_t *op, ncclResult_t check)
{
    if (check != ncclSuccess) {
        if (t_depth > 0 && t_group_err == ncclSuccess)
            t_group_err = check;
        return check;
    }
    if (c->pend && t_depth == 0) {
        warn(c->dev, "communicator used before its initialization completed (GroupEnd)");
        return ncclInvalidUsage;
    }
    ncclResult_t ae = (ncclResult_t)atomic_load(&c->async_err);
    if (ae != ncclSuccess || atomic_load(&c->abort_flag)) {
        warn(c->dev, "communicator has failed (%s): abort it", pncclGetErrorString(ae));
        return ae != ncclSuccess ? ae : ncclInvalidUsage;
    }
    if (op->count == 0)
        return ncclSuccess;
    if (t_depth > 0) {
        if (t_nitems == t_capitems) {
            int cap = t_capitems ? 2 * t_capitems : 16;
            group_item_t *ni = realloc(t_items, (size_t)cap * sizeof(*ni));
            if (!ni)
                return ncclSystemError;
            t_items = ni;
            t_capitems = cap;
        }
        t_items[t_nitems++] = (group_item_t){c, *op};
        return ncclSuccess;
    }
    return launch(c, op, 1);
}

static const char *coll_name(int kind)
{
    switch (kind) {
    case SIM_COLL_ALLREDUCE: return "AllReduce";
    case SIM_COLL_BROADCAST: return "Broadcast";
    case SIM_COLL_REDUCE: return "Reduce";
    case SIM_COLL_ALLGATHER: return "AllGather";
    case SIM_COLL_REDUCESCATTER: return "ReduceScatter";
    case OP_SEND: return "Send";
    default: return "Recv";
    }
}

/* NCCL's argument checks, in its order. */
static ncclResult_t check_args(ncclComm_t c, const sim_op_t *op)
{
    const char *nm = coll_name(op->kind);
    if (!comm_ok(c)) {
        warn(-1, "%s : comm argument is NULL or invalid", nm);
        return ncclInvalidArgument;
    }
    int reduces = op->kind == SIM_COLL_ALLREDUCE || op->kind == SIM_COLL_REDUCE ||
                  op->kind == SIM_COLL_REDUCESCATTER;
    int rooted = op->kind == SIM_COLL_REDUCE || op->kind == SIM_COLL_BROADCAST;
    if (rooted && (op->root < 0 || op->root >= c->nranks)) {
        warn(c->dev, "%s : invalid root %d (root should be in the 0..%d range)", nm, op->root,
             c->nranks);
        return ncclInvalidArgument;
    }
    if ((op->kind == OP_SEND || op->kind == OP_RECV) && (op->peer < 0 || op->peer >= c->nranks)) {
        warn(c->dev, "%s : invalid peer %d (peer should be in the 0..%d range)", nm, op->peer,
             c->nranks);
        return ncclInvalidArgument;
    }
    if (op->dtype < 0 || op->dtype >= ncclNumTypes) {
        warn(c->dev, "%s : invalid type %d", nm, op->dtype);
        return ncclInvalidArgument;
    }
    if (reduces && (op->redop < 0 || op->redop >= ncclNumOps)) {
        warn(c->dev, "%s : invalid Reduce op %d", nm, op->redop);
        return ncclInvalidArgument;
    }
    if (reduces && !sim_nccl_type_reducible(op->dtype)) {
        warn(c->dev, "%s : FP8 reduction support begins with sm90 capable devices "
             "(not simulated)", nm);
        return ncclInvalidArgument;
    }
    size_t es = sim_nccl_type_size(op->dtype);
    size_t mult = (op->kind == SIM_COLL_ALLGATHER || op->kind == SIM_COLL_REDUCESCATTER)
                      ? (size_t)c->nranks : 1;
    if (op->count > (SIZE_MAX / 2) / es / mult) {
        warn(c->dev, "%s : invalid count %zu", nm, op->count);
        return ncclInvalidArgument;
    }
    if (op->count > 0) {
        int need_send = op->kind != OP_RECV && !(op->kind == SIM_COLL_BROADCAST &&
                                                 c->rank != op->root);
        int need_recv = op->kind != OP_SEND && !(op->kind == SIM_COLL_REDUCE &&
                                                 c->rank != op->root);
        if (need_send && !op->send) {
            warn(c->dev, "%s : sendbuff is NULL", nm);
            return ncclInvalidArgument;
        }
        if (need_recv && !op->recv) {
            warn(c->dev, "%s : recvbuff is NULL", nm);
            return ncclInvalidArgument;
        }
    }
    return ncclSuccess;
}

static ncclResult_t submit(ncclComm_t comm, sim_op_t op)
{
    ncclResult_t chk = check_args(comm, &op);
    if (chk != ncclSuccess && !comm_ok(comm)) {
        if (t_depth > 0 && t_group_err == ncclSuccess)
            t_group_err = chk;
        return chk;
    }
    return enqueue(comm, &op, chk);
}

API_FN(ncclResult_t, ncclAllReduce, (const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream))
{
    return submit(comm, (sim_op_t){SIM_COLL_ALLREDUCE, sendbuff, recvbuff, count, (int)datatype,
                                   (int)op, 0, 0, (CUstream)stream});
}

API_FN(ncclResult_t, ncclBroadcast, (const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream))
{
    return submit(comm, (sim_op_t){SIM_COLL_BROADCAST, sendbuff, recvbuff, count, (int)datatype,
                                   0, root, 0, (CUstream)stream});
}

API_FN(ncclResult_t, ncclBcast, (void *buff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream))
{
    return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

API_FN(ncclResult_t, ncclReduce, (const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, int root,
                                  ncclComm_t comm, cudaStream_t stream))
{
    return submit(comm, (sim_op_t){SIM_COLL_REDUCE, sendbuff, recvbuff, count, (int)datatype,
                                   (int)op, root, 0, (CUstream)stream});
}

API_FN(ncclResult_t, ncclAllGather, (const void *sendbuff, void *recvbuff, size_t sendcount,
                                     ncclDataType_t datatype, ncclComm_t comm,
                                     cudaStream_t stream))
{
    return submit(comm, (sim_op_t){SIM_COLL_ALLGATHER, sendbuff, recvbuff, sendcount,
                                   (int)datatype, 0, 0, 0, (CUstream)stream});
}

API_FN(ncclResult_t, ncclReduceScatter, (const void *sendbuff, void *recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op,
                                         ncclComm_t comm, cudaStream_t stream))
{
    return submit(comm, (sim_op_t){SIM_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount,
                                   (int)datatype, (int)op, 0, 0, (CUstream)stream});
}

API_FN(ncclResult_t, ncclSend, (const void *sendbuff, size_t count, ncclDataType_t datatype,
                                int peer, ncclComm_t comm, cudaStream_t stream))
{
    return submit(comm, (sim_op_t){OP_SEND, sendbuff, NULL, count, (int)datatype, 0, 0, peer,
                                   (CUstream)stream});
}

API_FN(ncclResult_t, ncclRecv, (void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream))
{
    return submit(comm, (sim_op_t){OP_RECV, NULL, recvbuff, count, (int)datatype, 0, 0, peer,
                                   (CUstream)stream});
}

/* Gather, scatter and all-to-all are groups of sends and receives, as in
 * NCCL: they only move bytes. p2p_blocks() posts them in one group: with
 * send_blocks, block p of sendbuff goes to rank p, else all of sendbuff to
 * root; with recv_blocks, block p of recvbuff comes from rank p, else all of
 * recvbuff from root (when send_blocks/recv_blocks is -1 that side posts
 * nothing). Returns the first error. */
static ncclResult_t p2p_blocks(const char *what, const void *sendbuff, void *recvbuff,
                               size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream, int send_blocks, int recv_blocks)
{
    size_t es = sim_nccl_type_size(datatype);
    if (es == 0 || root < 0 || root >= comm->nranks) {
        warn(comm->dev, "%s : invalid type %d or root %d", what, (int)datatype, root);
        return ncclInvalidArgument;
    }
    ncclResult_t res = ncclSuccess, r;
#define KEEP(call)                   \
    do {                             \
        r = (call);                  \
        if (res == ncclSuccess)      \
            res = r;                 \
    } while (0)
    pncclGroupStart();
    for (int p = 0; p < comm->nranks; p++) {
        if (send_blocks > 0)
            KEEP(pncclSend((const char *)sendbuff + (size_t)p * count * es, count, datatype, p,
                           comm, stream));
        if (recv_blocks > 0)
            KEEP(pncclRecv((char *)recvbuff + (size_t)p * count * es, count, datatype, p, comm,
                           stream));
    }
    if (send_blocks == 0)
        KEEP(pncclSend(sendbuff, count, datatype, root, comm, stream));
    if (recv_blocks == 0)
        KEEP(pncclRecv(recvbuff, count, datatype, root, comm, stream));
#undef KEEP
    r = pncclGroupEnd();
    return res != ncclSuccess ? res : r;
}

API_FN(ncclResult_t, ncclAlltoAll, (const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclComm_t comm,
                                    cudaStream_t stream))
{
    CHECK_COMM(comm, "AlltoAll");
    return p2p_blocks("AlltoAll", sendbuff, recvbuff, count, datatype, 0, comm, stream, 1, 1);
}

API_FN(ncclResult_t, ncclGather, (const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream))
{
    CHECK_COMM(comm, "Gather");
    /* everyone sends to root; root receives every block */
    return p2p_blocks("Gather", sendbuff, recvbuff, count, datatype, root, comm, stream, 0,
                      comm->rank == root ? 1 : -1);
}

API_FN(ncclResult_t, ncclScatter, (const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream))
{
    CHECK_COMM(comm, "Scatter");
    /* root sends every block; everyone receives from root */
    return p2p_blocks("Scatter", sendbuff, recvbuff, count, datatype, root, comm, stream,
                      comm->rank == root ? 1 : -1, 0);
}

/* ---- memory and registration ----------------------------------------------------- */

API_FN(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size))
{
    if (!ptr) {
        warn(-1, "ncclMemAlloc : ptr is NULL");
        return ncclInvalidArgument;
    }
    const simdrv_t *d = drv(-1);
    CUdeviceptr p = 0;
    if (!d || d->cuMemAlloc(&p, size) != CUDA_SUCCESS)
        return ncclUnhandledCudaError;
    *ptr = (void *)(uintptr_t)p;
    return ncclSuccess;
}

API_FN(ncclResult_t, ncclMemFree, (void *ptr))
{
    const simdrv_t *d = drv(-1);
    if (!d || (ptr && d->cuMemFree((CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS))
        return ncclUnhandledCudaError;
    return ncclSuccess;
}

static char g_reg_token;

API_FN(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void *buff, size_t size,
                                        void **handle))
{
    CHECK_COMM(comm, "CommRegister");
    (void)buff;
    (void)size;
    if (!handle)
        return ncclInvalidArgument;
    *handle = &g_reg_token;   /* nothing to register: buffers are staged */
    return ncclSuccess;
}

API_FN(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle))
{
    CHECK_COMM(comm, "CommDeregister");
    return handle == &g_reg_token ? ncclSuccess : ncclInvalidArgument;
}

API_FN(ncclResult_t, ncclCommWindowRegister, (ncclComm_t comm, void *buff, size_t size,
                                              ncclWindow_t *win, int winFlags))
{
    CHECK_COMM(comm, "CommWindowRegister");
    (void)buff, (void)size, (void)win, (void)winFlags;
    warn(comm->dev, "ncclCommWindowRegister is not supported by simcuda");
    return ncclInvalidUsage;
}

API_FN(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
{
    CHECK_COMM(comm, "CommWindowDeregister");
    (void)win;
    return ncclInvalidUsage;
}

API_FN(ncclResult_t, ncclRedOpCreatePreMulSum, (ncclRedOp_t *op, void *scalar,
                                                ncclDataType_t datatype,
                                                ncclScalarResidence_t residence,
                                                ncclComm_t comm))
{
    (void)op, (void)scalar, (void)datatype, (void)residence;
    CHECK_COMM(comm, "ncclRedOpCreatePreMulSum");
    warn(comm->dev, "ncclRedOpCreatePreMulSum is not supported by simcuda");
    return ncclInvalidUsage;
}

API_FN(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
{
    CHECK_COMM(comm, "ncclRedOpDestroy");
    warn(comm->dev, "ncclRedOpDestroy : op %d is not a user-created op", (int)op);
    return ncclInvalidArgument;
}
