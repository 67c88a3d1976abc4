/* The communicators of the virtual collectives (coll.h): unique ids,
 * ncclCommInitRank / InitAll, split, shrink, finalize, destroy, revoke,
 * abort, the asynchronous error and the PreMulSum operators. A
 * communicator's own set-up is init.c's; inside a group its
 * initialisation waits for ncclGroupEnd (group.c). */
#include "coll/coll_int.h"
#include "device/vdev.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

int es_coll_enabled(void)
{
    return es_cfg.collectives == ES_COLL_VIRTUAL;
}

int es_coll_rank(const es_comm_t *c) { return c->x ? es_xhost_rank(c) : c->rank; }
int es_coll_nranks(const es_comm_t *c) { return c->x ? es_xhost_nranks(c) : c->nranks; }
int es_coll_cudev(const es_comm_t *c) { return c->vdev; }

/* ---- communicators ------------------------------------------------------------------- */

/* An id of one host's ranks, or (across: the job spans hosts) one that
 * also carries the hosts' leaders' real NCCL id (xhost.c). */
static ncclResult_t es_unique_id(ncclUniqueId *id, int across)
{
    if (!id) {
        es_coll_error("ncclGetUniqueId: NULL id");
        return ncclInvalidArgument;
    }
    es_comm_global_init();
    es_jobhold_global_init();
    es_seg_sweep();
    es_coll_id_t e;
    memset(&e, 0, sizeof(e));
    e.magic = ES_COLL_ID_MAGIC;
    e.uid = (uint32_t)getuid();
    e.version = ES_SEG_VERSION;
    if (getrandom(&e.nonce, sizeof(e.nonce), 0) != (ssize_t)sizeof(e.nonce)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        e.nonce = ((uint64_t)getpid() << 40) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    if (across) {
        ncclResult_t res = es_xhost_make_id(&e);
        if (res != ncclSuccess)
            return res;
    }
    memcpy(id, &e, sizeof(e));
    return ncclSuccess;
}

ncclResult_t es_coll_get_unique_id(ncclUniqueId *id)
{
    return es_unique_id(id, es_xhost_wanted());
}

/* A child id every member derives alike (split, shrink). */
static void es_id_derive(es_coll_id_t *out, const es_comm_t *parent, uint64_t kind, uint64_t a,
                         uint64_t b)
{
    *out = parent->id;
    uint64_t h = parent->nonce ^ 0x9e3779b97f4a7c15ULL;
    uint64_t v[3] = { kind, a, b };
    for (int i = 0; i < 3; i++) {
        h ^= v[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    out->nonce = h;
}

static int es_config_blocking(const ncclConfig_t *config)
{
    return !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
}

static ncclResult_t es_check_config(const ncclConfig_t *config)
{
    if (!config)
        return ncclSuccess;
    if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, cgaClusterSize)) {
        es_coll_error("ncclConfig_t not initialised with NCCL_CONFIG_INITIALIZER");
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

/* This host's communicator of the id e (checked): made, registered, its
 * initialisation started; host_tp: on the host transport whatever the
 * preference (the levels above it in host memory run its steps over host
 * buffers, xhost_mem.c). */
static ncclResult_t es_init_local(es_comm_t **comm, int nranks, const es_coll_id_t *e, int rank,
                                  const ncclConfig_t *config, int host_tp)
{
    if (e->magic != ES_COLL_ID_MAGIC || e->version != ES_SEG_VERSION) {
        es_coll_error("ncclCommInitRank: the unique id was not made by the virtual collectives "
                      "(every rank needs EASYSCALE_COLLECTIVES=virtual and the same shim)");
        return ncclInvalidArgument;
    }
    if (e->uid != (uint32_t)getuid()) {
        es_coll_error("ncclCommInitRank: the unique id belongs to another user");
        return ncclInvalidUsage;
    }
    CUcontext ctx = NULL;
    if (!es_lib_ready(ES_LIB_CUDA)) {
        es_coll_error("ncclCommInitRank: libcuda.so.1 is not available");
        return ncclUnhandledCudaError;
    }
    ES_REAL(cuda, cuCtxGetCurrent)(&ctx);
    es_comm_t *c = es_comm_alloc(nranks, rank, e, es_config_blocking(config));
    if (!c)
        return ncclSystemError;
    if (es_comm_bind(c, ctx) != CUDA_SUCCESS) {
        es_comm_free(c);
        return ncclUnhandledCudaError;
    }
    c->host_tp = host_tp;
    es_comm_register(c);
    ncclResult_t res = es_group_start_init(c);
    if (res != ncclSuccess && res != ncclInProgress) {
        es_comm_unregister(c);
        es_comm_free(c);
        return res;
    }
    *comm = c;
    return res;
}

/* This host's communicator (es_init_local) and, when x is not NULL (the
 * levels above the host, taken over: freed on failure), those connected. */
static ncclResult_t es_init_host(es_comm_t **comm, int nranks, const es_coll_id_t *e, int rank,
                                 const ncclConfig_t *config, es_xhost_t *x)
{
    ncclResult_t res = es_init_local(comm, nranks, e, rank, config, x && es_xhost_in_memory(x));
    if (res != ncclSuccess || !x) {
        free(x);
        return res;
    }
    (*comm)->x = x;
    if ((res = es_xhost_connect(*comm)) != ncclSuccess) {
        es_coll_destroy(*comm);
        *comm = NULL;
    }
    return res;
}

ncclResult_t es_coll_init_rank(es_comm_t **comm, int nranks, const ncclUniqueId *id, int rank,
                               const ncclConfig_t *config)
{
    es_comm_global_init();
    es_jobhold_global_init();
    if (es_coll_ts_flush() < 0) /* a time-sliced EST's kept collectives first */
        return ncclUnhandledCudaError;
    es_coll_id_t e;
    es_xhost_t *x = NULL;
    if (!comm || !id) {
        es_coll_error("ncclCommInitRank: NULL argument");
        return ncclInvalidArgument;
    }
    *comm = NULL;
    if (nranks < 1 || nranks > ES_COLL_MAX_RANKS || rank < 0 || rank >= nranks) {
        es_coll_error("ncclCommInitRank: rank %d of %d ranks is not valid (the virtual "
                      "collectives serve 1..%d ranks)", rank, nranks, ES_COLL_MAX_RANKS);
        return ncclInvalidArgument;
    }
    ncclResult_t res = es_check_config(config);
    if (res != ncclSuccess)
        return res;
    memcpy(&e, id, sizeof(e));
    /* across hosts: the engine makes this host's communicator, xhost.c
     * the levels above it */
    if ((e.magic == ES_COLL_ID_MAGIC_X || e.magic == ES_COLL_ID_MAGIC_XM) &&
        e.version == ES_SEG_VERSION &&
        (res = es_xhost_plan(&e, &nranks, &rank, config, &x)) != ncclSuccess)
        return res;
    return es_init_host(comm, nranks, &e, rank, config, x);
}

ncclResult_t es_coll_init_all(es_comm_t **comms, int ndev, const int *devlist)
{
    if (!comms || ndev < 1 || ndev > ES_COLL_MAX_RANKS) {
        es_coll_error("ncclCommInitAll: bad arguments (ndev %d)", ndev);
        return ncclInvalidArgument;
    }
    ncclUniqueId id;
    ncclResult_t res = es_unique_id(&id, 0); /* one process: one host */
    if (res != ncclSuccess)
        return res;
    int n = 0;
    if (!es_lib_ready(ES_LIB_CUDA) || ES_REAL(cuda, cuDeviceGetCount)(&n) != CUDA_SUCCESS)
        return ncclUnhandledCudaError;
    int vcount = es_vdev_count(n);
    for (int i = 0; i < ndev; i++) {
        int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= vcount) {
            es_coll_error("ncclCommInitAll: device %d is not valid (%d devices)", d, vcount);
            return ncclInvalidArgument;
        }
    }
    es_group_t saved;
    es_group_isolate(&saved);
    for (int i = 0; i < ndev && res == ncclSuccess; i++) {
        int d = devlist ? devlist[i] : i;
        CUcontext ctx = NULL;
        CUdevice dev;
        if (ES_REAL(cuda, cuDeviceGet)(&dev, es_vdev_phys(d)) != CUDA_SUCCESS ||
            ES_REAL(cuda, cuDevicePrimaryCtxRetain)(&ctx, dev) != CUDA_SUCCESS) {
            res = ncclUnhandledCudaError;
            break;
        }
        es_vdev_select(d);
        es_coll_id_t e;
        memcpy(&e, &id, sizeof(e));
        es_comm_t *c = es_comm_alloc(ndev, i, &e, 1);
        if (!c) {
            res = ncclSystemError;
            break;
        }
        if (es_comm_bind(c, ctx) != CUDA_SUCCESS) {
            es_comm_free(c);
            res = ncclUnhandledCudaError;
            break;
        }
        c->vdev = d;
        es_comm_register(c);
        comms[i] = c;
        es_group_start_init(c);
    }
    ncclResult_t r2 = es_group_end_isolated(&saved);
    return res != ncclSuccess ? res : r2;
}

/* Exchanges (color, key) over the parent; returns my rank and the size of
 * my color's communicator, or nranks 0 for NCCL_SPLIT_NOCOLOR. */
static ncclResult_t es_split_exchange(es_comm_t *p, int color, int key, uint64_t idx,
                                      int *rank, int *nranks)
{
    int par = (int)(idx & 1);
    es_seg_rank_t *me = es_seg_rank(&p->seg, p->rank);
    me->split_color[par] = color;
    me->split_key[par] = key;
    int rc = es_ctrl_barrier(p);
    if (rc < 0)
        return es_comm_status_of(rc);
    *rank = 0;
    *nranks = 0;
    if (color == NCCL_SPLIT_NOCOLOR)
        return ncclSuccess;
    for (int r = 0; r < p->nranks; r++) {
        es_seg_rank_t *o = es_seg_rank(&p->seg, r);
        if (o->split_color[par] != color)
            continue;
        (*nranks)++;
        /* ordered by key, then parent rank */
        if (o->split_key[par] < key || (o->split_key[par] == key && r < p->rank))
            (*rank)++;
    }
    return ncclSuccess;
}

typedef struct es_split_job {
    es_comm_t *parent, *child;
    int color, key;
    uint64_t idx;
} es_split_job_t;

static ncclResult_t es_split_run(es_split_job_t *j)
{
    int rank = 0, n = 0;
    ncclResult_t res = es_split_exchange(j->parent, j->color, j->key, j->idx, &rank, &n);
    if (res != ncclSuccess || !j->child)
        goto out;
    es_coll_id_t e;
    es_id_derive(&e, j->parent, 1, j->idx, (uint64_t)(uint32_t)j->color);
    j->child->rank = rank;
    j->child->nranks = n;
    j->child->id = e;
    j->child->nonce = e.nonce;
    res = es_comm_setup(j->child);
out:
    if (res != ncclSuccess && j->child)
        atomic_store(&j->child->async, res);
    return res;
}

static void *es_split_thread(void *arg)
{
    es_split_job_t *j = arg;
    if (j->parent->ctx)
        ES_REAL(cuda, cuCtxSetCurrent)(j->parent->ctx);
    es_split_run(j);
    free(j);
    return NULL;
}

/* The split of a communicator across hosts (blocking, outside groups):
 * the ranks' colors over it (xhost.c), then this host's communicator of
 * the color (its id derived from the parent's, as on one host) and, when
 * the color spans hosts, the levels above it. */
static ncclResult_t es_split_across(es_comm_t *parent, int color, int key, es_comm_t **out,
                                    const ncclConfig_t *config)
{
    if ((config && !es_config_blocking(config)) || es_group_depth() > 0) {
        ES_WARN("collectives: ncclCommSplit: a communicator across hosts is split only "
                "blocking and outside a group");
        es_coll_error("ncclCommSplit: a communicator across hosts is split only blocking and "
                      "outside a group (ncclGroupStart/End)");
        return ncclInvalidUsage;
    }
    pthread_mutex_lock(&parent->mu);
    uint64_t idx = parent->splits++;
    pthread_mutex_unlock(&parent->mu);
    es_xhost_t *x = NULL;
    int n = 0, rank = 0, pushed = 0;
    ncclResult_t res = es_xhost_split(parent, color, key, &x, &n, &rank);
    if (res != ncclSuccess || n == 0)
        return res;
    es_coll_id_t e;
    es_id_derive(&e, parent, 1, idx, (uint64_t)(uint32_t)color);
    es_comm_ctx_enter(parent, &pushed);
    res = es_init_host(out, n, &e, rank, NULL, x);
    es_comm_ctx_leave(pushed);
    return res;
}

ncclResult_t es_coll_split(es_comm_t *parent, int color, int key, es_comm_t **out,
                           const ncclConfig_t *config)
{
    if (es_coll_ts_flush() < 0) /* a time-sliced EST's kept collectives first */
        return ncclUnhandledCudaError;
    if (!out) {
        es_coll_error("ncclCommSplit: NULL newcomm");
        return ncclInvalidArgument;
    }
    *out = NULL;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
        es_coll_error("ncclCommSplit: color %d is not valid (>= 0 or NCCL_SPLIT_NOCOLOR)", color);
        return ncclInvalidArgument;
    }
    ncclResult_t res = es_check_config(config);
    if (res == ncclSuccess)
        res = es_comm_ready(parent);
    if (res != ncclSuccess)
        return res;
    if (parent->x)
        return es_split_across(parent, color, key, out, config);
    /* A child config given: its own blocking; else the parent's. */
    int blocking = config ? es_config_blocking(config) : parent->blocking;
    pthread_mutex_lock(&parent->mu);
    uint64_t idx = parent->splits++;
    pthread_mutex_unlock(&parent->mu);
    es_comm_t *child = NULL;
    if (color != NCCL_SPLIT_NOCOLOR) {
        es_coll_id_t tmp = parent->id;
        child = es_comm_alloc(parent->nranks, 0, &tmp, blocking);
        if (!child)
            return ncclSystemError;
        child->ctx = parent->ctx;
        child->dev = parent->dev;
        child->vdev = parent->vdev;
        /* p2p counters are sized for the parent's ranks: enough */
        es_comm_register(child);
    }
    es_split_job_t *j = calloc(1, sizeof(*j));
    if (!j) {
        if (child) {
            es_comm_unregister(child);
            es_comm_free(child);
        }
        return ncclSystemError;
    }
    *j = (es_split_job_t){ parent, child, color, key, idx };
    if (blocking) {
        res = es_split_run(j);
        free(j);
        if (res != ncclSuccess && child) {
            es_comm_unregister(child);
            es_comm_free(child);
            child = NULL;
        }
        *out = child;
        return res;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, es_split_thread, j) != 0) {
        free(j);
        if (child) {
            es_comm_unregister(child);
            es_comm_free(child);
        }
        return ncclSystemError;
    }
    if (child) {
        child->init_thread = t;
        child->init_threaded = 1;
    } else {
        pthread_detach(t);
    }
    *out = child;
    return ncclInProgress;
}

ncclResult_t es_coll_shrink(es_comm_t *parent, const int *exclude, int nexclude,
                            es_comm_t **out, const ncclConfig_t *config, int flags)
{
    if (es_coll_ts_flush() < 0) /* a time-sliced EST's kept collectives first */
        return ncclUnhandledCudaError;
    if (!out || nexclude < 0 || (nexclude > 0 && !exclude)) {
        es_coll_error("ncclCommShrink: bad arguments");
        return ncclInvalidArgument;
    }
    *out = NULL;
    if (parent && es_coll_valid(parent) && parent->x) {
        ES_WARN("collectives: ncclCommShrink: a communicator across hosts is not shrunk yet");
        es_coll_error("ncclCommShrink: a communicator across hosts is not shrunk yet");
        return ncclInvalidUsage;
    }
    ncclResult_t res = es_check_config(config);
    if (res != ncclSuccess)
        return res;
    uint64_t mask[ES_COLL_MAX_RANKS / 64 + 1] = { 0 };
    for (int i = 0; i < nexclude; i++) {
        if (exclude[i] < 0 || exclude[i] >= parent->nranks) {
            es_coll_error("ncclCommShrink: rank %d to exclude is not valid", exclude[i]);
            return ncclInvalidArgument;
        }
        mask[exclude[i] / 64] |= 1ULL << (exclude[i] % 64);
    }
    if (mask[parent->rank / 64] & (1ULL << (parent->rank % 64))) {
        es_coll_error("ncclCommShrink: the calling rank is in the exclusion list");
        return ncclInvalidArgument;
    }
    if (flags & NCCL_SHRINK_ABORT) {
        atomic_store(&parent->aborted, 1);
        if (parent->seg.h)
            es_seg_ring(&parent->seg);
    }
    int rank = 0, n = 0;
    uint64_t h = 0;
    for (int r = 0; r < parent->nranks; r++) {
        if (mask[r / 64] & (1ULL << (r % 64)))
            continue;
        if (r < parent->rank)
            rank++;
        n++;
        h = h * 1000003u + (uint64_t)r + 1;
    }
    pthread_mutex_lock(&parent->mu);
    uint64_t idx = parent->shrinks++;
    pthread_mutex_unlock(&parent->mu);
    es_coll_id_t e;
    es_id_derive(&e, parent, 2, idx, h);
    es_comm_t *c = es_comm_alloc(n, rank, &e, config ? es_config_blocking(config)
                                                      : parent->blocking);
    if (!c)
        return ncclSystemError;
    c->ctx = parent->ctx;
    c->dev = parent->dev;
    c->vdev = parent->vdev;
    es_comm_register(c);
    res = es_group_start_init(c);
    if (res != ncclSuccess && res != ncclInProgress) {
        es_comm_unregister(c);
        es_comm_free(c);
        return res;
    }
    *out = c;
    return res;
}

/* Waits until every operation issued on c finished (bounded by max_ms when
 * > 0). Returns 1 when drained. */
static int es_comm_drain(es_comm_t *c, uint64_t max_ms)
{
    if (!c->have_ops || !c->ev_last)
        return 1;
    int pushed;
    es_comm_ctx_enter(c, &pushed);
    int done = 0;
    if (max_ms == 0) {
        done = ES_REAL(cuda, cuEventSynchronize)(c->ev_last) == CUDA_SUCCESS;
    } else {
        uint64_t t0 = es_coll_now_ms();
        for (;;) {
            CUresult r = ES_REAL(cuda, cuEventQuery)(c->ev_last);
            if (r != CUDA_ERROR_NOT_READY) {
                done = 1;
                break;
            }
            if (es_coll_now_ms() - t0 > max_ms)
                break;
            usleep(1000);
        }
    }
    es_comm_ctx_leave(pushed);
    return done;
}

/* Frees what the communicator holds. keep: the structure itself stays
 * allocated (abort: another thread of the application may still be
 * inside a call on it; NCCL allows aborting from a watchdog thread). */
static void es_comm_release(es_comm_t *c, int drained, int keep)
{
    es_comm_unregister(c);
    if (!drained) {
        /* Operations still queued on some stream would touch the staging:
         * leave the memory mapped (the process is about to go, usually). */
        ES_WARN("collectives: communicator %016llx rank %d: operations still queued after "
                "abort; its staging stays mapped", (unsigned long long)c->nonce, c->rank);
        return;
    }
    pthread_mutex_lock(&c->mu);
    int pushed;
    es_comm_ctx_enter(c, &pushed);
    es_comm_tp_down(c);
    if (c->ev_last)
        ES_REAL(cuda, cuEventDestroy_v2)(c->ev_last);
    c->ev_last = NULL;
    c->have_ops = 0;
    es_comm_ctx_leave(pushed);
    es_seg_leave(&c->seg);
    pthread_mutex_unlock(&c->mu);
    if (!keep)
        es_comm_free(c);
}

ncclResult_t es_coll_finalize(es_comm_t *c)
{
    if (es_coll_ts_flush() < 0) /* a time-sliced EST's kept collectives first */
        return ncclUnhandledCudaError;
    es_comm_join_init(c);
    ncclResult_t a = atomic_load(&c->async);
    if (a != ncclSuccess)
        return a;
    pthread_mutex_lock(&c->mu);
    es_comm_drain(c, 0);
    pthread_mutex_unlock(&c->mu);
    return atomic_load(&c->async);
}

ncclResult_t es_coll_destroy(es_comm_t *c)
{
    es_coll_ts_flush(); /* a failure is the communicator's: it goes anyway */
    es_comm_join_init(c);
    es_xhost_free(c, 0);
    pthread_mutex_lock(&c->mu);
    int drained = es_comm_drain(c, 0);
    pthread_mutex_unlock(&c->mu);
    es_comm_release(c, drained, 0);
    return ncclSuccess;
}

ncclResult_t es_coll_revoke(es_comm_t *c)
{
    atomic_store(&c->aborted, 1);
    if (c->seg.h)
        es_comm_fail(c, ES_FAIL_ABORT, ncclRemoteError);
    return ncclSuccess;
}

ncclResult_t es_coll_abort(es_comm_t *c)
{
    atomic_store(&c->aborted, 1);
    es_comm_join_init(c); /* its waits see the abort */
    es_xhost_free(c, 1);
    if (c->seg.h)
        es_comm_fail(c, ES_FAIL_ABORT, ncclRemoteError);
    es_coll_ts_flush(); /* kept collectives: they fail at once now */
    /* The pending host functions see the abort at once; the streams may
     * still hold application work before them. */
    int drained = es_comm_drain(c, (uint64_t)c->timeout_ms + 1000);
    es_comm_release(c, drained, 1);
    return ncclSuccess;
}

/* The transport's own failure (its carriers' NCCL communicator's), which
 * no wait may have seen: -EPIPE when it failed c. It does not look while
 * an enqueue or a hold holds c->mu (the watchdog looks within
 * milliseconds). */
static int es_comm_carrier_check(es_comm_t *c)
{
    int rc = 0;
    if (atomic_load(&c->failed) || pthread_mutex_trylock(&c->mu) != 0)
        return 0;
    ncclResult_t e = c->tp && c->tp->async_error ? c->tp->async_error(c) : ncclSuccess;
    if (e != ncclSuccess) {
        es_comm_fail_carrier(c, e);
        rc = -EPIPE;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

ncclResult_t es_coll_async_error(es_comm_t *c, ncclResult_t *err)
{
    if (!err) {
        es_coll_error("ncclCommGetAsyncError: NULL asyncError");
        return ncclInvalidArgument;
    }
    ncclResult_t a = atomic_load(&c->async);
    if (a == ncclSuccess && c->seg.h && !atomic_load(&c->failed)) {
        /* A fault seen by another rank, not yet by this one's waits. */
        int fr;
        int why = es_seg_failed(&c->seg, &fr);
        if (why != ES_FAIL_NONE) {
            es_comm_fail(c, why, why == ES_FAIL_TIMEOUT ? ncclSystemError : ncclRemoteError);
            a = atomic_load(&c->async);
        }
    }
    if (a == ncclSuccess && es_comm_carrier_check(c) < 0)
        a = atomic_load(&c->async);
    if (a != ncclInProgress && c->init_threaded)
        es_comm_join_init(c); /* finished in the background: collect the thread */
    if (a == ncclSuccess && c->x) /* between hosts: the leaders' communicator */
        a = es_xhost_async_error(c);
    *err = a;
    return ncclSuccess;
}

/* ---- PreMulSum -------------------------------------------------------------------- */

ncclResult_t es_coll_premul_create(es_comm_t *c, ncclRedOp_t *op, const void *scalar, int dtype,
                                   int on_device)
{
    size_t es = es_coll_type_size(dtype);
    if (!op || !scalar || !es) {
        es_coll_error("ncclRedOpCreatePreMulSum: bad arguments");
        return ncclInvalidArgument;
    }
    ncclResult_t res = ncclInvalidUsage;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < ES_COLL_MAX_PREMUL; i++) {
        es_premul_t *p = &c->premul[i];
        if (p->used)
            continue;
        memset(p, 0, sizeof(*p));
        p->used = 1;
        p->dtype = dtype;
        p->on_device = on_device;
        if (on_device)
            p->dev = scalar;
        else
            memcpy(&p->value, scalar, es); /* read now (ncclScalarHostImmediate) */
        *op = (ncclRedOp_t)(ncclNumOps + i);
        res = ncclSuccess;
        break;
    }
    pthread_mutex_unlock(&c->mu);
    if (res != ncclSuccess)
        es_coll_error("ncclRedOpCreatePreMulSum: more than %d operators", ES_COLL_MAX_PREMUL);
    return res;
}

ncclResult_t es_coll_premul_get(es_comm_t *c, int op, int dtype, const char *nm,
                                es_premul_t *out)
{
    int i = op - (int)ncclNumOps;
    pthread_mutex_lock(&c->mu);
    int ok = i >= 0 && i < ES_COLL_MAX_PREMUL && c->premul[i].used;
    if (ok)
        *out = c->premul[i];
    pthread_mutex_unlock(&c->mu);
    if (!ok) {
        es_coll_error("%s: invalid reduction operator %d", nm, op);
        return ncclInvalidArgument;
    }
    if (out->dtype != dtype) {
        es_coll_error("%s: PreMulSum operator made for datatype %d used with %d", nm, out->dtype,
                      dtype);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

ncclResult_t es_coll_premul_destroy(es_comm_t *c, ncclRedOp_t op)
{
    int i = (int)op - (int)ncclNumOps;
    ncclResult_t res = ncclSuccess;
    pthread_mutex_lock(&c->mu);
    if (i < 0 || i >= ES_COLL_MAX_PREMUL || !c->premul[i].used)
        res = ncclInvalidArgument;
    else
        c->premul[i].used = 0;
    pthread_mutex_unlock(&c->mu);
    if (res != ncclSuccess)
        es_coll_error("ncclRedOpDestroy: operator %d was not created on this communicator",
                      (int)op);
    return res;
}
