/* A communicator across hosts: the levels of the order above a host.
 *
 * When the job spans hosts (GROUP_WORLD_SIZE > 1, as torchrun and
 * `easyscale-ctl run --nnodes` set it; host h holds ranks h*K .. h*K+K-1,
 * K = LOCAL_WORLD_SIZE), a communicator is the engine's communicator of
 * the host's K ranks (every transport, inside the host) plus, on each
 * local rank s, a real NCCL communicator of the local ranks s of every
 * host (stripe s; stripe 0 is the hosts' leaders'). The unique id rank 0
 * makes carries the leaders' real NCCL id (its first 104 bytes; NCCL's and
 * simcuda's ids use fewer); the other stripes' ids go from host 0 over the
 * leaders' communicator when the communicator is made.
 *
 * The order stays the rank-order left fold over all N ranks. The fold goes
 * on across hosts because it goes on from a partial: host 0's ranks fold
 * into P0 (the engine's all-reduce of the host); host 1's leader gets P0
 * and contributes P0 (+) x[K] (one fold step, kernels/reduce.h) in place
 * of its own input, so the engine's fold of host 1 is
 * ((P0 + x[K]) + x[K+1]) + ... = the fold of ranks 0 .. 2K-1; and so on to
 * the last host, whose ranks have the result; it goes back to the other
 * hosts (NCCL, data movement) and is broadcast inside them. avg sums, and
 * the last host divides once by N. The all-reduce goes in chunks,
 * pipelined between the hosts, chunk i carried between the hosts by local
 * rank i mod K (its GPU's NIC), and on the receiving host handed to the
 * leader inside the host (es_xh_allreduce). Broadcast and all-gather are
 * data movement: inside the root's host, between leaders, inside each
 * host. Everything is enqueued on the caller's stream (NCCL's calls on the
 * real stream behind it), so nothing here waits on the host.
 *
 * Reduce and reduce-scatter are the all-reduce into scratch, each rank's
 * part copied out. Inside a group, the operations on communicators across
 * hosts are kept until the group ends, then run one after another in
 * issue order (every rank issues the same collectives in the same order).
 * PreMulSum: each rank's input scaled into scratch first (each product
 * rounded to the datatype, as the engine stages it), then their sum.
 * Moves: only at a hold of the whole job, where the stripes'
 * communicators are made again (es_xhost_hold_down/up). Point-to-point:
 * inside the host, or between ranks of the same local rank on two hosts
 * (their stripe). Split: every rank's color and key over the communicator
 * (es_xhost_split). With EASYSCALE_XHOST=host (what time-slicing takes) in
 * the process that made the unique id, and alike in every other: the same
 * levels in host memory instead (xhost_mem.c, reached through defer.c; no NCCL, no
 * stripes; no point-to-point between hosts, no split). Not yet: other
 * pairs across hosts, shrink, non-blocking communicators.
 * Calls comm.c (the local communicator), enqueue.c, defer.c, xsock.c (the
 * listener of a new id), xhost_mem.c (the links), kernels/reduce.h. */
#include "coll/xhost_int.h"
#include "kernels/reduce.h"
#include "move/mover.h"
#include "move/vhandle.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Communicators across hosts alive in this process: while there is one,
 * the EST moves only at a hold of the whole job (every EST of every host
 * held at the same collective: the controller's, es_coll_step_start),
 * where its stripe's NCCL communicator, bound to its GPU, is taken down
 * before the moves and made again after them
 * (es_xhost_hold_down/up); a mover gate says so (-EXDEV: the controller
 * then sets such a hold and asks again). */
static _Atomic int es_xh_live, es_xh_held;
static pthread_once_t es_xh_once = PTHREAD_ONCE_INIT;

static int es_xh_move_gate(char *msg, size_t msglen)
{
    if (atomic_load(&es_xh_live) == 0 || atomic_load(&es_xh_held))
        return 0;
    if (msg && msglen)
        snprintf(msg, msglen, "this EST has a communicator across hosts: it moves only at a "
                              "hold of the whole job (easyscale-ctl sets one by itself; a "
                              "scheduled step of run --schedule is one), where its NCCL "
                              "communicator with the other hosts is made again");
    return -EXDEV;
}

static void es_xh_gate_init(void)
{
    if (es_vh_on)
        (void)es_mover_add_gate(es_xh_move_gate);
}

/* A use the levels across hosts do not serve: said on stderr (a warning:
 * the application may print only NCCL's status) and kept for
 * ncclGetLastError. */
#define ES_XH_REFUSE(...)                                                                      \
    do {                                                                                       \
        ES_WARN("collectives: " __VA_ARGS__);                                                  \
        es_coll_error(__VA_ARGS__);                                                            \
    } while (0)

/* ---- the environment ------------------------------------------------------------ */

/* A decimal variable in [lo, hi]: 0 with *out, -ENOENT unset, -EINVAL bad. */
static int es_xh_env(const char *name, long lo, long hi, int *out)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v)
        return -ENOENT;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end || errno || x < lo || x > hi || *v == '+' || *v == ' ') {
        es_coll_error("%s=\"%s\" is not a number in [%ld, %ld]", name, v, lo, hi);
        return -EINVAL;
    }
    *out = (int)x;
    return 0;
}

int es_xhost_wanted(void)
{
    int n = 1;
    return es_xh_env("GROUP_WORLD_SIZE", 1, ES_COLL_MAX_RANKS, &n) == 0 && n > 1;
}

ncclResult_t es_xhost_make_id(es_coll_id_t *e)
{
    ncclUniqueId rid;
    if (es_cfg.xhost_host) { /* the levels above a host in host memory (time-slicing) */
        es_xw_addr_t a;
        if (es_xs_listen(&a) < 0)
            return ncclSystemError;
        e->magic = ES_COLL_ID_MAGIC_XM;
        memcpy(e->pad, &a, sizeof(a));
        return ncclSuccess;
    }
    if (!es_lib_ready(ES_LIB_NCCL) || !es_real_present(ES_LIB_NCCL, ES_IDX_ncclGetUniqueId)) {
        es_coll_error("ncclGetUniqueId: a job across hosts (GROUP_WORLD_SIZE > 1) needs the real "
                      "libnccl.so.2 between the hosts");
        return ncclSystemError;
    }
    ncclResult_t res = ES_REAL(nccl, ncclGetUniqueId)(&rid);
    if (res != ncclSuccess) {
        es_coll_error("ncclGetUniqueId: the hosts' leaders' id: NCCL error %d", (int)res);
        return res;
    }
    for (size_t i = ES_XH_REAL_ID_BYTES; i < sizeof(rid.internal); i++)
        if (rid.internal[i]) {
            es_coll_error("ncclGetUniqueId: this libnccl's unique id uses more than %d bytes; "
                          "the virtual collectives cannot span hosts with it",
                          ES_XH_REAL_ID_BYTES);
            return ncclInternalError;
        }
    e->magic = ES_COLL_ID_MAGIC_X;
    memcpy(e->pad, rid.internal, ES_XH_REAL_ID_BYTES);
    return ncclSuccess;
}

ncclResult_t es_xhost_plan(es_coll_id_t *e, int *nranks_io, int *rank_io,
                           const ncclConfig_t *config, es_xhost_t **out)
{
    int nh, h, k, lr, nranks = *nranks_io, rank = *rank_io;
    *out = NULL;
    if (es_xh_env("GROUP_WORLD_SIZE", 1, ES_COLL_MAX_RANKS, &nh) < 0 ||
        es_xh_env("GROUP_RANK", 0, ES_COLL_MAX_RANKS - 1, &h) < 0 ||
        es_xh_env("LOCAL_WORLD_SIZE", 1, ES_COLL_MAX_RANKS, &k) < 0 ||
        es_xh_env("LOCAL_RANK", 0, ES_COLL_MAX_RANKS - 1, &lr) < 0) {
        es_coll_error("ncclCommInitRank: a unique id across hosts needs GROUP_WORLD_SIZE, "
                      "GROUP_RANK, LOCAL_WORLD_SIZE and LOCAL_RANK (torchrun's, or "
                      "easyscale-ctl run --nnodes)");
        return ncclInvalidUsage;
    }
    if (nh < 2 || h >= nh || lr >= k || nranks != nh * k || rank != h * k + lr) {
        es_coll_error("ncclCommInitRank: rank %d of %d is not rank %d of host %d of %d hosts of "
                      "%d ranks each (the virtual collectives across hosts take ranks in blocks "
                      "per host)", rank, nranks, lr, h, nh, k);
        return ncclInvalidUsage;
    }
    if (config && config->blocking == 0) {
        ES_XH_REFUSE("ncclCommInitRank: a non-blocking communicator across hosts is not "
                      "served yet");
        return ncclInvalidUsage;
    }
    if (es_group_depth() > 0) {
        ES_XH_REFUSE("ncclCommInitRank: a communicator across hosts inside a group is not "
                      "served yet");
        return ncclInvalidUsage;
    }
    int mem = e->magic == ES_COLL_ID_MAGIC_XM;
    if (mem != es_cfg.xhost_host) {
        ES_XH_REFUSE("ncclCommInitRank: the unique id was made with EASYSCALE_XHOST=%s and "
                      "this process has %s: set EASYSCALE_XHOST and EASYSCALE_TIME_SLICE (which "
                      "takes host) alike on every host", mem ? "host" : "nccl",
                      mem ? "nccl" : "host");
        return ncclInvalidUsage;
    }
    es_xhost_t *x = calloc(1, sizeof(*x));
    if (!x)
        return ncclSystemError;
    *x = (es_xhost_t){ .rank = rank, .nranks = nranks, .host = h, .nhosts = nh, .k = k,
                       .lrank = lr, .mem = mem };
    if (mem)
        memcpy(&x->addr, e->pad, sizeof(x->addr));
    else
        memcpy(x->cc_id.internal, e->pad, ES_XH_REAL_ID_BYTES);
    /* the host's own communicator: an id of its own (hosts may share a
     * /dev/shm, as two nodes on one machine do) */
    e->magic = ES_COLL_ID_MAGIC;
    e->nonce = (e->nonce ^ 0x9e3779b97f4a7c15ULL * (uint64_t)(h + 1)) * 0xbf58476d1ce4e5b9ULL;
    memset(e->pad, 0, sizeof(e->pad));
    *nranks_io = k;
    *rank_io = lr;
    *out = x;
    return ncclSuccess;
}

static ncclResult_t es_xh_tmp(es_xhost_t *x, size_t bytes);

static ncclResult_t es_xh_exchange(es_comm_t *c, es_xhost_t *x, const void *mine, void *all,
                                   size_t bytes);

/* The stripes' ids: host 0's rank s makes stripe s's, every rank's goes to
 * every rank (es_xh_exchange: the leaders' communicator is up), and rank s
 * of every host keeps host 0's rank s's in cc_id. */
static ncclResult_t es_xh_stripe_ids(es_comm_t *c, es_xhost_t *x)
{
    ncclUniqueId mine, *all = malloc(sizeof(ncclUniqueId) * (size_t)x->nranks);
    memset(&mine, 0, sizeof(mine));
    int pushed = 0;
    ncclResult_t r = all ? ncclSuccess : ncclSystemError;
    es_comm_ctx_enter(c, &pushed);
    if (r == ncclSuccess && x->host == 0 && x->lrank > 0)
        r = ES_REAL(nccl, ncclGetUniqueId)(&mine);
    es_comm_ctx_leave(pushed);
    if (r == ncclSuccess)
        r = es_xh_exchange(c, x, &mine, all, sizeof(mine));
    if (r == ncclSuccess && x->lrank > 0)
        x->cc_id = all[x->lrank]; /* host 0's rank s is rank s */
    free(all);
    return r;
}

ncclResult_t es_xhost_connect(es_comm_t *c)
{
    es_xhost_t *x = c->x;
    if (x->mem)
        return es_xhm_connect(c);
    pthread_once(&es_xh_once, es_xh_gate_init);
    atomic_fetch_add(&es_xh_live, 1);
    x->live = 1;
    int pushed = 0;
    ncclResult_t res = ncclSuccess;
    if (es_coll_ts_keeps(c)) { /* its stripes' ids would wait for its turns */
        ES_XH_REFUSE("ncclCommInitRank: a communicator across hosts: this EST is time-sliced, "
                     "but the job's levels between the hosts are NCCL's (the unique id was made "
                     "with EASYSCALE_XHOST=nccl): set EASYSCALE_TIME_SLICE on every host");
        return ncclInvalidUsage;
    }
    if (x->lrank == 0) { /* the leaders' id came with the unique id */
        es_comm_ctx_enter(c, &pushed);
        res = ES_REAL(nccl, ncclCommInitRank)(&x->cc, x->nhosts, x->cc_id, x->host);
        es_comm_ctx_leave(pushed);
    }
    if (res == ncclSuccess && x->k > 1 && (res = es_xh_stripe_ids(c, x)) == ncclSuccess &&
        x->lrank > 0) {
        es_comm_ctx_enter(c, &pushed);
        res = ES_REAL(nccl, ncclCommInitRank)(&x->cc, x->nhosts, x->cc_id, x->host);
        es_comm_ctx_leave(pushed);
    }
    if (res != ncclSuccess) {
        x->cc = NULL;
        es_coll_error("ncclCommInitRank: the communicator across hosts of the hosts' local rank "
                      "%d (stripe %d; host %d of %d): NCCL error %d", x->lrank, x->lrank,
                      x->host, x->nhosts, (int)res);
    }
    return res;
}

void es_xhost_free(es_comm_t *c, int abort)
{
    es_xhost_t *x = c->x;
    if (!x)
        return;
    int pushed = 0;
    es_comm_ctx_enter(c, &pushed);
    if (x->cc)
        (abort ? ES_REAL(nccl, ncclCommAbort) : ES_REAL(nccl, ncclCommDestroy))(x->cc);
    if (x->tmp || x->out || x->pre)
        ES_REAL(cuda, cuCtxSynchronize)();
    if (x->tmp)
        ES_REAL(cuda, cuMemFree_v2)(x->tmp);
    if (x->out)
        ES_REAL(cuda, cuMemFree_v2)(x->out);
    if (x->pre)
        ES_REAL(cuda, cuMemFree_v2)(x->pre);
    es_comm_ctx_leave(pushed);
    es_xs_close(x->xs);
    es_xhost_free_buffers(x);
    c->x = NULL;
    if (x->live)
        atomic_fetch_sub(&es_xh_live, 1);
    free(x);
}

/* ---- holds of the whole job --------------------------------------------------- */

/* This rank's carrier across hosts: the successor's id (host 0's rank
 * makes it) to the other hosts' ranks over it, then it destroyed. In the
 * communicator's context; 0 or -EIO. */
static int es_xh_cc_down(es_xhost_t *x)
{
    ncclUniqueId nid;
    memset(&nid, 0, sizeof(nid));
    /* what the collectives before the hold enqueued on the leaders'
     * communicator (on the application's streams) done first */
    CUresult cr = ES_REAL(cuda, cuCtxSynchronize)();
    ncclResult_t r = cr != CUDA_SUCCESS ? ncclUnhandledCudaError
                     : x->host == 0  ? ES_REAL(nccl, ncclGetUniqueId)(&nid)
                                     : ncclSuccess;
    if (r == ncclSuccess)
        r = es_xh_tmp(x, sizeof(nid));
    if (r == ncclSuccess && x->host == 0)
        cr = ES_REAL(cuda, cuMemcpyHtoD_v2)(x->tmp, &nid, sizeof(nid));
    if (r == ncclSuccess && cr == CUDA_SUCCESS)
        r = ES_REAL(nccl, ncclBroadcast)((const void *)x->tmp, (void *)x->tmp, sizeof(nid),
                                         ncclInt8, 0, x->cc, NULL);
    if (r == ncclSuccess && cr == CUDA_SUCCESS)
        cr = ES_REAL(cuda, cuCtxSynchronize)();
    if (r == ncclSuccess && cr == CUDA_SUCCESS)
        cr = ES_REAL(cuda, cuMemcpyDtoH_v2)(&nid, x->tmp, sizeof(nid));
    if (r != ncclSuccess || cr != CUDA_SUCCESS) {
        es_coll_error("collectives across hosts: the communicator of stripe %d could not hand "
                      "on its successor's id at a hold (NCCL %d, CUDA %d)", x->lrank, (int)r,
                      (int)cr);
        return -EIO;
    }
    ES_REAL(nccl, ncclCommDestroy)(x->cc);
    x->cc = NULL;
    x->cc_id = nid;
    return 0;
}

int es_xhost_hold_down(es_comm_t *c)
{
    es_xhost_t *x = c->x;
    int rc = 0, pushed = 0;
    atomic_store(&es_xh_held, 1);
    if (!x || !x->cc || x->mem) /* host memory: nothing on a GPU */
        return 0;
    es_comm_ctx_enter(c, &pushed);
    rc = es_xh_cc_down(x);
    es_comm_ctx_leave(pushed);
    return rc;
}

int es_xhost_hold_up(es_comm_t *c)
{
    es_xhost_t *x = c->x;
    int pushed = 0;
    atomic_store(&es_xh_held, 0);
    if (!x || x->cc || x->mem) /* not taken down */
        return 0;
    es_comm_ctx_enter(c, &pushed); /* where the EST is now */
    ncclResult_t r = ES_REAL(nccl, ncclCommInitRank)(&x->cc, x->nhosts, x->cc_id, x->host);
    es_comm_ctx_leave(pushed);
    if (r != ncclSuccess) {
        x->cc = NULL;
        es_coll_error("collectives across hosts: the communicator of stripe %d could not be "
                      "made again after a hold (host %d of %d): NCCL error %d", x->lrank, x->host,
                      x->nhosts, (int)r);
        return -EIO;
    }
    return 0;
}

ncclResult_t es_xhost_async_error(es_comm_t *c)
{
    es_xhost_t *x = c->x;
    ncclResult_t e = ncclSuccess;
    if (x->cc && ES_REAL(nccl, ncclCommGetAsyncError)(x->cc, &e) == ncclSuccess &&
        e != ncclSuccess && e != ncclInProgress) {
        es_coll_error("communicator across hosts: the NCCL communicator with the other hosts "
                      "failed: %s (another host gone?)", ES_REAL(nccl, ncclGetErrorString)(e));
        return e;
    }
    return ncclSuccess;
}

int es_xhost_in_memory(const es_xhost_t *x) { return x->mem; }
int es_xhost_rank(const es_comm_t *c) { return c->x->rank; }
int es_xhost_nranks(const es_comm_t *c) { return c->x->nranks; }

/* ---- operations ----------------------------------------------------------------- */

/* An operation of the host's own communicator on the same stream: not a
 * step of its own (the operation across hosts counted when issued), its
 * completion counted only when done (the last of a counting all-reduce). */
static ncclResult_t es_xh_local(es_comm_t *c, int kind, const void *send, void *recv,
                                size_t count, int dtype, int op, int root, CUstream s, int done)
{
    es_coll_op_t o = { kind, c, send, recv, count, dtype, op, root, s, 1, !done };
    return es_coll_enqueue_valid(&o);
}

/* Scratch device memory of at least bytes in *p (*have: its size; the
 * work queued before it done when it grows). In the communicator's
 * context. */
static ncclResult_t es_xh_grow(CUdeviceptr *p, size_t *have, size_t bytes)
{
    if (*have >= bytes)
        return ncclSuccess;
    if (*p) {
        ES_REAL(cuda, cuCtxSynchronize)();
        ES_REAL(cuda, cuMemFree_v2)(*p);
        *p = 0;
        *have = 0;
    }
    if (ES_REAL(cuda, cuMemAlloc_v2)(p, bytes) != CUDA_SUCCESS) {
        es_coll_error("collectives across hosts: no device memory for %zu bytes of scratch",
                      bytes);
        *p = 0;
        return ncclUnhandledCudaError;
    }
    *have = bytes;
    return ncclSuccess;
}

static ncclResult_t es_xh_tmp(es_xhost_t *x, size_t bytes)
{
    return es_xh_grow(&x->tmp, &x->tmp_bytes, bytes);
}

static ncclResult_t es_xh_nccl(ncclResult_t r, const char *what)
{
    if (r != ncclSuccess)
        es_coll_error("collectives across hosts: NCCL's %s between the hosts: NCCL error %d", what,
                      (int)r);
    return r;
}

/* The fold kernel loaded in the current context (ncclSuccess), else the
 * reason kept. */
static ncclResult_t es_xh_kernel_ready(void)
{
    if (es_reduce_ready() == 0)
        return ncclSuccess;
    es_coll_error("collectives across hosts: the fold kernel does not load here");
    return ncclUnhandledCudaError;
}

static ncclResult_t es_xh_kernel(CUresult r)
{
    if (r != CUDA_SUCCESS)
        es_coll_error("collectives across hosts: the fold kernel: CUDA error %d", (int)r);
    return r == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
}

/* The all-reduce goes across the hosts in chunks of at most this many
 * bytes, pipelined: host h folds chunk c while host h + 1 folds chunk
 * c - 1, and the result of chunk c - 1 comes back while chunk c goes on.
 * Every element's fold is the same, so the bits do not depend on it. */
#define ES_XH_CHUNK_BYTES (4u << 20)

/* One chunk of an all-reduce: count elements from element off, carried
 * between the hosts by local rank s (its stripe's communicator). */
typedef struct es_xh_chunk {
    const es_coll_op_t *o;
    size_t off, count, bytes;
    int s;                  /* the stripe: chunk i goes by local rank i mod K */
    int lop;                /* the engine's operation (avg: sum) */
    int done;               /* its fold completes a counting all-reduce (the last chunk) */
    CUstream rs;            /* the real stream */
} es_xh_chunk_t;

static const void *es_xh_at(const void *p, const es_xh_chunk_t *k)
{
    return (const char *)p + k->off * es_coll_type_size(k->o->dtype);
}

/* Host h > 0: the partial of hosts 0..h-1 of the chunk arrives at local
 * rank s (NCCL, its stripe), goes to local rank 0 inside the host when s
 * is not 0, and the fold goes on there with rank 0's input into *in
 * (scratch: the partial, then the folded input, one chunk each). */
static ncclResult_t es_xh_continue(es_comm_t *c, es_xhost_t *x, const es_xh_chunk_t *k,
                                   const void **in)
{
    CUdeviceptr part = x->tmp, mine = x->tmp + k->bytes;
    int pushed = 0, dt = k->o->dtype;
    ncclResult_t r = ncclSuccess;
    if (x->lrank == k->s) {
        es_comm_ctx_enter(c, &pushed);
        r = es_xh_nccl(ES_REAL(nccl, ncclRecv)((void *)part, k->count, dt, x->host - 1, x->cc,
                                               k->rs), "receive");
        es_comm_ctx_leave(pushed);
    }
    if (r == ncclSuccess && k->s != 0 && (x->lrank == k->s || x->lrank == 0))
        r = es_xh_local(c, x->lrank ? ES_OP_SEND : ES_OP_RECV, (const void *)part, (void *)part,
                        k->count, dt, 0, x->lrank ? 0 : k->s, k->o->stream, 0);
    if (r != ncclSuccess || x->lrank != 0)
        return r;
    es_comm_ctx_enter(c, &pushed);
    es_red_args_t a = { .in = { (const void *)part, es_xh_at(k->o->send, k) },
                        .out = (void *)mine, .count = k->count, .nin = 2, .dtype = dt,
                        .op = k->lop };
    r = es_xh_kernel(es_reduce_launch(&a, k->rs));
    es_comm_ctx_leave(pushed);
    *in = (const void *)mine;
    return r;
}

/* A chunk's way forward: the partial from the host before, this host's
 * fold of the chunk (every rank), the partial to the host after (by the
 * chunk's stripe: every rank holds the fold's result). */
static ncclResult_t es_xh_forward(es_comm_t *c, es_xhost_t *x, const es_xh_chunk_t *k)
{
    int pushed = 0;
    const void *in = es_xh_at(k->o->send, k);
    void *out = (void *)es_xh_at(k->o->recv, k);
    ncclResult_t r = ncclSuccess;
    if (x->host > 0 && (r = es_xh_continue(c, x, k, &in)) != ncclSuccess)
        return r;
    if ((r = es_xh_local(c, ES_OP_ALLREDUCE, in, out, k->count, k->o->dtype, k->lop, 0,
                         k->o->stream, k->done)) != ncclSuccess)
        return r;
    if (x->lrank == k->s && x->host < x->nhosts - 1) {
        es_comm_ctx_enter(c, &pushed);
        r = es_xh_nccl(ES_REAL(nccl, ncclSend)(out, k->count, k->o->dtype, x->host + 1, x->cc,
                                               k->rs), "send");
        es_comm_ctx_leave(pushed);
    }
    return r;
}

/* A chunk's result from the last host to the others' local rank s (avg:
 * the sum divided once by N on the last host first, into scratch after
 * the two chunks of the way forward), which broadcasts it inside its host
 * (the last host's ranks hold the sum already). */
static ncclResult_t es_xh_back(es_comm_t *c, es_xhost_t *x, const es_xh_chunk_t *k)
{
    int last = x->host == x->nhosts - 1, avg = k->o->op == ncclAvg, pushed = 0;
    void *out = (void *)es_xh_at(k->o->recv, k);
    const void *res = out;
    ncclResult_t r = ncclSuccess;
    if (x->lrank == k->s) {
        es_comm_ctx_enter(c, &pushed);
        if (last && avg) {
            es_red_args_t a = { .in = { out }, .out = (void *)(x->tmp + 2 * k->bytes),
                                .count = k->count, .nin = 1, .dtype = k->o->dtype,
                                .op = ncclAvg, .divisor = x->nranks };
            r = es_xh_kernel(es_reduce_launch(&a, k->rs));
            res = (const void *)(x->tmp + 2 * k->bytes);
        }
        if (r == ncclSuccess)
            r = es_xh_nccl(ES_REAL(nccl, ncclBroadcast)(res, out, k->count, k->o->dtype,
                                                        x->nhosts - 1, x->cc, k->rs),
                           "broadcast");
        es_comm_ctx_leave(pushed);
    }
    if (r != ncclSuccess || (last && !avg))
        return r;
    return es_xh_local(c, ES_OP_BROADCAST, out, out, k->count, k->o->dtype, 0, k->s,
                       k->o->stream, 0);
}

/* Chunk i of o (of ES_XH_CHUNK_BYTES, the last one shorter), of stripe
 * i mod nstripes; counts: o is a counting all-reduce. */
static void es_xh_chunk(const es_coll_op_t *o, size_t i, int nstripes, int counts,
                        es_xh_chunk_t *k)
{
    size_t ts = es_coll_type_size(o->dtype), per = ES_XH_CHUNK_BYTES / ts;
    k->o = o;
    k->off = i * per;
    k->count = o->count - k->off < per ? o->count - k->off : per;
    k->s = (int)(i % (size_t)nstripes);
    k->done = counts && k->off + k->count == o->count;
    k->bytes = k->count * ts;
    k->lop = o->op == ncclAvg ? ncclSum : o->op;
    k->rs = es_vh_stream(o->stream);
}

/* Every rank issues the same sequence: forward 0, then forward c and back
 * c - 1, then back of the last chunk. On each stripe's communicator a
 * send and its receive, and each broadcast, come at the same place on
 * every host; inside a host every rank issues the same collectives in the
 * same order, and a chunk's hop from its stripe to rank 0 between them.
 * The chunks of stripe s cross between the hosts on local rank s's GPU
 * (and NIC): the order of every element's fold is the one of one
 * carrier, so the stripes, and how many GPUs a host has, leave the bits
 * alone. counts: the application's operation is a counting all-reduce
 * (its last chunk's fold completes it). */
static ncclResult_t es_xh_allreduce(es_comm_t *c, es_xhost_t *x, const es_coll_op_t *o,
                                    int counts)
{
    size_t ts = es_coll_type_size(o->dtype), per = ES_XH_CHUNK_BYTES / ts;
    size_t n = (o->count + per - 1) / per, chunk = (o->count < per ? o->count : per) * ts;
    int pushed = 0;
    ncclResult_t r = ncclSuccess;
    es_comm_ctx_enter(c, &pushed);
    if ((r = es_xh_kernel_ready()) == ncclSuccess)
        r = es_xh_tmp(x, 3 * chunk);
    es_comm_ctx_leave(pushed);
    es_xh_chunk_t k, prev;
    for (size_t i = 0; r == ncclSuccess && i < n; i++) {
        es_xh_chunk(o, i, x->k, counts, &k);
        r = es_xh_forward(c, x, &k);
        if (r == ncclSuccess && i > 0)
            r = es_xh_back(c, x, &prev);
        prev = k;
    }
    if (r == ncclSuccess)
        r = es_xh_back(c, x, &prev);
    return r;
}

static ncclResult_t es_xh_broadcast(es_comm_t *c, es_xhost_t *x, const es_coll_op_t *o)
{
    int hr = o->root / x->k, pushed = 0;
    ncclResult_t r;
    if (x->host == hr &&
        (r = es_xh_local(c, ES_OP_BROADCAST, o->send, o->recv, o->count, o->dtype, 0,
                         o->root % x->k, o->stream, 0)) != ncclSuccess)
        return r;
    if (x->lrank == 0) {
        es_comm_ctx_enter(c, &pushed);
        r = es_xh_nccl(ES_REAL(nccl, ncclBroadcast)(o->recv, o->recv, o->count, o->dtype, hr,
                                                    x->cc, es_vh_stream(o->stream)),
                       "broadcast");
        es_comm_ctx_leave(pushed);
        if (r != ncclSuccess)
            return r;
    }
    if (x->host == hr)
        return ncclSuccess;
    return es_xh_local(c, ES_OP_BROADCAST, o->recv, o->recv, o->count, o->dtype, 0, 0, o->stream,
                       0);
}

static ncclResult_t es_xh_allgather(es_comm_t *c, es_xhost_t *x, const es_coll_op_t *o)
{
    size_t ts = es_coll_type_size(o->dtype), blk = (size_t)x->k * o->count;
    char *mine = (char *)o->recv + (size_t)x->host * blk * ts;
    int pushed = 0;
    ncclResult_t r = es_xh_local(c, ES_OP_ALLGATHER, o->send, mine, o->count, o->dtype, 0, 0,
                                 o->stream, 0);
    if (r != ncclSuccess)
        return r;
    if (x->lrank == 0) {
        es_comm_ctx_enter(c, &pushed);
        r = es_xh_nccl(ES_REAL(nccl, ncclAllGather)(mine, o->recv, blk, o->dtype, x->cc,
                                                    es_vh_stream(o->stream)), "all-gather");
        es_comm_ctx_leave(pushed);
        if (r != ncclSuccess)
            return r;
    }
    return es_xh_local(c, ES_OP_BROADCAST, o->recv, o->recv, blk * (size_t)x->nhosts, o->dtype,
                       0, 0, o->stream, 0);
}

/* Reduce and reduce-scatter: the all-reduce of the whole buffer into
 * scratch (the root's reduce: into its buffer), then each rank's part
 * (reduce-scatter) copied out: the same fold, so the same bits. */
static ncclResult_t es_xh_reduce(es_comm_t *c, es_xhost_t *x, const es_coll_op_t *o)
{
    size_t ts = es_coll_type_size(o->dtype), all = o->count;
    int scatter = o->kind == ES_OP_REDUCESCATTER, pushed = 0;
    if (scatter)
        all = o->count * (size_t)x->nranks;
    es_coll_op_t a = *o;
    a.kind = ES_OP_ALLREDUCE;
    a.count = all;
    ncclResult_t r = ncclSuccess;
    if (scatter || x->rank != o->root) {
        es_comm_ctx_enter(c, &pushed);
        r = es_xh_grow(&x->out, &x->out_bytes, all * ts);
        es_comm_ctx_leave(pushed);
        a.recv = (void *)x->out;
    }
    if (r != ncclSuccess || (r = es_xh_allreduce(c, x, &a, 0)) != ncclSuccess || !scatter)
        return r;
    es_comm_ctx_enter(c, &pushed);
    CUresult cr = ES_REAL(cuda, cuMemcpyDtoDAsync_v2)(
        (CUdeviceptr)(uintptr_t)o->recv, x->out + (size_t)x->rank * o->count * ts,
        o->count * ts, es_vh_stream(o->stream));
    es_comm_ctx_leave(pushed);
    return es_xh_kernel(cr);
}

/* ---- ncclCommSplit across hosts ------------------------------------------------ */

/* Every rank's `bytes` at mine into all (in rank order), over the
 * communicator across hosts c: the all-gather above on its own scratch,
 * then waited for (the stripes' ids, a split's exchanges: not steps of the
 * job). Needs the leaders' communicator only. */
static ncclResult_t es_xh_exchange(es_comm_t *c, es_xhost_t *x, const void *mine, void *all,
                                   size_t bytes)
{
    size_t n = (size_t)x->nranks;
    CUdeviceptr d = 0;
    int pushed = 0;
    ncclResult_t r = ncclSuccess;
    es_comm_ctx_enter(c, &pushed);
    if (ES_REAL(cuda, cuCtxSynchronize)() != CUDA_SUCCESS ||
        ES_REAL(cuda, cuMemAlloc_v2)(&d, bytes * (n + 1)) != CUDA_SUCCESS ||
        ES_REAL(cuda, cuMemcpyHtoD_v2)(d + bytes * n, mine, bytes) != CUDA_SUCCESS)
        r = ncclUnhandledCudaError;
    es_comm_ctx_leave(pushed);
    if (r == ncclSuccess) {
        es_coll_op_t o = { .kind = ES_OP_ALLGATHER, .comm = c, .recv = (void *)d,
                           .send = (const void *)(d + bytes * n), .count = bytes,
                           .dtype = ncclInt8 };
        r = es_xh_allgather(c, x, &o);
    }
    es_comm_ctx_enter(c, &pushed);
    if (r == ncclSuccess && (ES_REAL(cuda, cuStreamSynchronize)(NULL) != CUDA_SUCCESS ||
                             ES_REAL(cuda, cuMemcpyDtoH_v2)(all, d, bytes * n) != CUDA_SUCCESS))
        r = ncclUnhandledCudaError;
    if (d)
        ES_REAL(cuda, cuMemFree_v2)(d);
    es_comm_ctx_leave(pushed);
    if (r != ncclSuccess)
        es_coll_error("collectives across hosts: an exchange between every rank (the stripes' "
                      "ids, a split's colors) failed");
    return r;
}

/* The ranks of p's color `color` in the new order (by key, then p's
 * rank) into m; returns how many. ck: every rank's (color, key). */
static int es_xh_members(const int32_t *ck, int n, int color, int *m)
{
    int k = 0;
    for (int r = 0; r < n; r++) {
        if (ck[2 * r] != color)
            continue;
        int i = k++;
        for (; i > 0 && ck[2 * m[i - 1] + 1] > ck[2 * r + 1]; i--)
            m[i] = m[i - 1];
        m[i] = r;
    }
    return k;
}

/* The blocks per host of the members m[0..n) (p's ranks, host = rank / k):
 * 0 with their size *per (one host: n), or -1 when a host's ranks are not
 * one block or the blocks differ in size. */
static int es_xh_blocks(const int *m, int n, int k, int *per)
{
    int blk = 1;
    while (blk < n && m[blk] / k == m[0] / k)
        blk++;
    if (n % blk)
        return -1;
    for (int b = 0; b < n; b += blk) {
        for (int i = b + 1; i < b + blk; i++) /* one host a block */
            if (m[i] / k != m[b] / k)
                return -1;
        for (int a = 0; a < b; a += blk) /* one block a host */
            if (m[a] / k == m[b] / k)
                return -1;
    }
    *per = blk;
    return 0;
}

ncclResult_t es_xhost_split(es_comm_t *p, int color, int key, es_xhost_t **x, int *nlocal,
                            int *lrank)
{
    es_xhost_t *px = p->x;
    if (px->mem) {
        ES_XH_REFUSE("ncclCommSplit of a communicator across hosts is not served with the "
                     "levels between the hosts in host memory (EASYSCALE_XHOST=host, which "
                     "time-slicing takes)");
        *x = NULL;
        *nlocal = *lrank = 0;
        return ncclInvalidUsage;
    }
    int n = px->nranks, nm = 0, me = -1, per = 0, bad = 0;
    int32_t mine[2] = { color, key };
    int32_t *ck = malloc(sizeof(int32_t) * 2 * (size_t)n);
    int *m = malloc(sizeof(int) * (size_t)n);
    ncclUniqueId *ids = malloc(sizeof(ncclUniqueId) * (size_t)n), rid;
    ncclResult_t r = ck && m && ids ? ncclSuccess : ncclSystemError;
    *x = NULL;
    *nlocal = *lrank = 0;
    if (r == ncclSuccess)
        r = es_xh_exchange(p, px, mine, ck, sizeof(mine));
    if (r != ncclSuccess)
        goto out;
    if (color != NCCL_SPLIT_NOCOLOR) {
        nm = es_xh_members(ck, n, color, m);
        for (int i = 0; i < nm; i++)
            if (m[i] == px->rank)
                me = i;
        bad = es_xh_blocks(m, nm, px->k, &per) < 0;
    }
    /* the leaders' NCCL id of each communicator across hosts: its rank 0's */
    memset(&rid, 0, sizeof(rid));
    if (me == 0 && !bad && per < nm && (r = ES_REAL(nccl, ncclGetUniqueId)(&rid)) != ncclSuccess)
        es_coll_error("ncclCommSplit: the new communicator's NCCL id: NCCL error %d", (int)r);
    if (r == ncclSuccess)
        r = es_xh_exchange(p, px, &rid, ids, sizeof(rid)); /* every rank takes part */
    if (r != ncclSuccess || color == NCCL_SPLIT_NOCOLOR)
        goto out;
    if (bad) {
        ES_XH_REFUSE("ncclCommSplit: color %d's ranks (by key, then rank) do not come in blocks "
                     "of the same size per host (a communicator across hosts takes ranks in "
                     "blocks per host)", color);
        r = ncclInvalidUsage;
        goto out;
    }
    *nlocal = per;
    *lrank = me % per;
    if (per == nm) /* one host: the engine's communicator alone */
        goto out;
    if (!(*x = calloc(1, sizeof(**x)))) {
        r = ncclSystemError;
        goto out;
    }
    **x = (es_xhost_t){ .rank = me, .nranks = nm, .host = me / per, .nhosts = nm / per,
                        .k = per, .lrank = me % per, .cc_id = ids[m[0]] };
out:
    free(ck);
    free(m);
    free(ids);
    return r;
}

/* The thread's group: operations on communicators across hosts, kept
 * until its end. */
static __thread es_xh_op_t *es_xh_q;
static __thread int es_xh_nq, es_xh_capq;

static int es_xh_keep(const es_xh_op_t *o)
{
    if (es_xh_nq == es_xh_capq) {
        int cap = es_xh_capq ? 2 * es_xh_capq : 16;
        es_xh_op_t *q = realloc(es_xh_q, (size_t)cap * sizeof(*q));
        if (!q)
            return -ENOMEM;
        es_xh_q = q;
        es_xh_capq = cap;
    }
    es_xh_q[es_xh_nq++] = *o;
    return 0;
}

/* PreMulSum: this rank's input scaled by its scalar into scratch (the
 * kernel with one input, as the engine stages it inside a host: each
 * product rounded to the datatype), then the sum of those: the fold of the
 * products in rank order, the bits of one host. *o then reads the scratch
 * and sums. */
static ncclResult_t es_xh_premul(es_comm_t *c, es_xhost_t *x, const es_xh_op_t *q,
                                 es_coll_op_t *o)
{
    size_t all = q->o.count * (q->o.kind == ES_OP_REDUCESCATTER ? (size_t)x->nranks : 1);
    int pushed = 0;
    es_comm_ctx_enter(c, &pushed);
    ncclResult_t r = es_xh_kernel_ready();
    if (r == ncclSuccess)
        r = es_xh_grow(&x->pre, &x->pre_bytes, all * es_coll_type_size(q->o.dtype));
    if (r == ncclSuccess) {
        es_red_args_t a = { .in = { q->o.send }, .out = (void *)x->pre, .count = all, .nin = 1,
                            .dtype = q->o.dtype, .op = ES_RO_PREMUL, .divisor = 1,
                            .scalar = q->pm.value,
                            .scalar_dev = q->pm.on_device ? q->pm.dev : NULL };
        r = es_xh_kernel(es_reduce_launch(&a, es_vh_stream(q->o.stream)));
    }
    es_comm_ctx_leave(pushed);
    *o = q->o;
    o->send = (const void *)x->pre;
    o->op = ncclSum;
    return r;
}

static int es_xh_is_p2p(const es_coll_op_t *o)
{
    return o->kind == ES_OP_SEND || o->kind == ES_OP_RECV;
}

/* A send or receive between ranks of the same local rank on two hosts:
 * on their stripe's NCCL communicator, whose rank is the host. */
static ncclResult_t es_xh_p2p_run(es_comm_t *c, es_xhost_t *x, const es_coll_op_t *o)
{
    int pushed = 0, peer = o->root / x->k;
    CUstream rs = es_vh_stream(o->stream);
    ncclResult_t r;
    es_comm_ctx_enter(c, &pushed);
    if (o->kind == ES_OP_SEND)
        r = es_xh_nccl(ES_REAL(nccl, ncclSend)(o->send, o->count, o->dtype, peer, x->cc, rs),
                       "send");
    else
        r = es_xh_nccl(ES_REAL(nccl, ncclRecv)(o->recv, o->count, o->dtype, peer, x->cc, rs),
                       "receive");
    es_comm_ctx_leave(pushed);
    return r;
}

static ncclResult_t es_xh_run(const es_xh_op_t *q)
{
    if (q->o.comm->x->mem) { /* in host memory: kept or run now (defer.c, xhost_mem.c) */
        es_qop_t m = { .op = q->o, .rop = q->premul ? ES_RO_PREMUL : q->o.op, .pm = q->pm };
        return es_coll_submit_xhost(q->o.comm, &m);
    }
    if (es_xh_is_p2p(&q->o))
        return es_xh_p2p_run(q->o.comm, q->o.comm->x, &q->o);

    es_coll_op_t scaled;
    const es_coll_op_t *o = &q->o;
    es_xhost_t *x = o->comm->x;
    if (q->premul) {
        ncclResult_t r = es_xh_premul(o->comm, x, q, &scaled);
        if (r != ncclSuccess)
            return r;
        o = &scaled;
    }
    if (o->kind == ES_OP_ALLREDUCE)
        return es_xh_allreduce(o->comm, x, o, es_coll_counts_step(o->kind, o->dtype));
    if (o->kind == ES_OP_BROADCAST)
        return es_xh_broadcast(o->comm, x, o);
    if (o->kind == ES_OP_REDUCE || o->kind == ES_OP_REDUCESCATTER)
        return es_xh_reduce(o->comm, x, o);
    return es_xh_allgather(o->comm, x, o);
}

ncclResult_t es_coll_group_end(void)
{
    int outer = es_group_depth() == 1;
    ncclResult_t res = es_group_end_local();
    if (!outer)
        return res;
    for (int i = 0; i < es_xh_nq; i++) {
        /* a run of sends and receives between hosts goes in one NCCL group
         * (each may wait for the other's: a ring exchange) */
        int p2p = es_xh_is_p2p(&es_xh_q[i].o);
        if (p2p && (i == 0 || !es_xh_is_p2p(&es_xh_q[i - 1].o)))
            (void)ES_REAL(nccl, ncclGroupStart)();
        /* a communicator destroyed inside the group is not run */
        es_comm_t *qc = es_xh_q[i].o.comm;
        ncclResult_t r = es_coll_valid(qc) && qc->x ? es_xh_run(&es_xh_q[i])
                                                    : ncclInvalidArgument;
        if (r != ncclSuccess && (res == ncclSuccess || res == ncclInProgress))
            res = r;
        if (p2p && (i + 1 == es_xh_nq || !es_xh_is_p2p(&es_xh_q[i + 1].o)))
            r = es_xh_nccl(ES_REAL(nccl, ncclGroupEnd)(), "group of sends and receives");
        if (r != ncclSuccess && (res == ncclSuccess || res == ncclInProgress))
            res = r;
    }
    es_xh_nq = 0;
    return res;
}

ncclResult_t es_coll_group_discard(void)
{
    int outer = es_group_depth() == 1;
    ncclResult_t res = es_group_discard_local();
    if (outer)
        es_xh_nq = 0; /* simulated: nothing runs */
    return res;
}

/* Point-to-point on a communicator across hosts: a peer of this host is
 * the engine's (its local rank); a peer of another host of the same local
 * rank is reached over their stripe's NCCL communicator (pipeline stages
 * one per host: rank s of a stage sends to rank s of the next); any other
 * pair is refused, with the reason. */
static ncclResult_t es_xh_p2p(es_comm_t *c, es_xhost_t *x, const es_coll_op_t *o)
{
    const char *nm = es_coll_op_name(o->kind);
    ncclResult_t r = ncclSuccess;
    if (!es_coll_type_size(o->dtype) || o->root < 0 || o->root >= x->nranks) {
        es_coll_error("%s: invalid datatype or peer %d (%d ranks)", nm, o->root, x->nranks);
        r = ncclInvalidArgument;
    } else if (o->root / x->k == x->host) {
        es_coll_op_t l = *o;
        l.root = o->root % x->k;
        return es_coll_enqueue_valid(&l); /* notes its own errors in the group */
    } else if (x->mem) {
        ES_XH_REFUSE("%s on a communicator across hosts: rank %d (host %d) and rank %d (host "
                     "%d): point-to-point between hosts is not served with the levels between "
                     "the hosts in host memory (EASYSCALE_XHOST=host, which time-slicing "
                     "takes)", nm, x->rank, x->host, o->root, o->root / x->k);
        r = ncclInvalidUsage;
    } else if (o->root % x->k != x->lrank) {
        ES_XH_REFUSE("%s on a communicator across hosts: rank %d (host %d, local rank %d) and "
                     "rank %d (host %d, local rank %d): between hosts, point-to-point goes "
                     "only between ranks of the same local rank (over their NCCL communicator "
                     "with the other hosts)", nm, x->rank, x->host, x->lrank, o->root,
                     o->root / x->k, o->root % x->k);
        r = ncclInvalidUsage;
    } else if (es_coll_ts_keeps(c)) {
        ES_XH_REFUSE("%s on a communicator across hosts: this EST is time-sliced, but the "
                     "job's levels between the hosts are NCCL's (EASYSCALE_XHOST=nccl): set "
                     "EASYSCALE_TIME_SLICE on every host", nm);
        r = ncclInvalidUsage;
    } else if (!x->cc) {
        es_coll_error("%s on a communicator across hosts: this rank's NCCL communicator with "
                      "the other hosts was not made again after a hold", nm);
        r = ncclSystemError;
    } else if (o->count && ((o->kind == ES_OP_SEND && !o->send) ||
                            (o->kind == ES_OP_RECV && !o->recv))) {
        es_coll_error("%s: NULL buffer", nm);
        r = ncclInvalidArgument;
    }
    if (r != ncclSuccess || !o->count) {
        es_group_note_error(r);
        return r;
    }
    if (es_group_depth() > 0) {
        es_xh_op_t q = { .o = *o };
        return es_xh_keep(&q) < 0 ? ncclSystemError : ncclSuccess;
    }
    return es_xh_p2p_run(c, x, o);
}

ncclResult_t es_coll_enqueue(const es_coll_op_t *o)
{
    es_comm_t *c = o->comm;
    if (!es_coll_valid(c))
        return es_coll_enqueue_local(o); /* the engine's message */
    if (!c->x)
        return es_coll_enqueue_valid(o); /* one host */
    es_xhost_t *x = c->x;
    const char *nm = es_coll_op_name(o->kind);
    int reducing = o->kind == ES_OP_ALLREDUCE || o->kind == ES_OP_REDUCE ||
                   o->kind == ES_OP_REDUCESCATTER;
    if (es_xh_is_p2p(o))
        return es_xh_p2p(c, x, o);
    int rooted = o->kind == ES_OP_BROADCAST || o->kind == ES_OP_REDUCE;
    if (!es_coll_type_size(o->dtype) || (reducing && o->op < 0) ||
        (rooted && (o->root < 0 || o->root >= x->nranks))) {
        es_coll_error("%s: invalid datatype, operator or root", nm);
        return ncclInvalidArgument;
    }
    es_xh_op_t q = { .o = *o, .premul = reducing && o->op >= (int)ncclNumOps };
    ncclResult_t r;
    if (q.premul && (r = es_coll_premul_get(c, o->op, o->dtype, nm, &q.pm)) != ncclSuccess)
        return r;
    if (!x->mem && !x->cc) {
        es_coll_error("%s on a communicator across hosts: this rank's NCCL communicator with "
                      "the other hosts was not made again after a hold", nm);
        return ncclSystemError;
    }
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (x->mem && ES_REAL(cuda, cuStreamIsCapturing)(o->stream, &cs) == CUDA_SUCCESS &&
        cs != CU_STREAM_CAPTURE_STATUS_NONE) { /* it runs in this thread, not on the stream */
        ES_XH_REFUSE("%s on a stream under capture (CUDA graph): the levels between the hosts "
                     "in host memory cannot be captured", nm);
        return ncclInvalidUsage;
    }
    if (!x->mem && es_coll_ts_keeps(c)) {
        ES_XH_REFUSE("%s on a communicator across hosts: this EST is time-sliced, but the "
                     "job's levels between the hosts are NCCL's (the unique id was made "
                     "with EASYSCALE_XHOST=nccl): set EASYSCALE_TIME_SLICE on every host",
                     nm);
        return ncclInvalidUsage;
    }
    if (!o->count)
        return ncclSuccess;
    /* a step when issued, once, before any of its parts (a hold of the
     * whole job comes between two operations across hosts, never inside
     * one: every host's leader has issued the same on their communicator) */
    if (es_coll_counts_step(o->kind, o->dtype))
        es_coll_step_start(es_group_depth() > 0);
    if (es_group_depth() > 0)
        return es_xh_keep(&q) < 0 ? ncclSystemError : ncclSuccess;
    return es_xh_run(&q);
}
