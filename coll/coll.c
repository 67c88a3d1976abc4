/* The virtual collectives' engine (see coll.h): communicators (unique ids,
 * rendezvous, transport choice, split, shrink, finalize, destroy, abort),
 * groups, the checks and dispatch of operations, the steps that order the
 * ranks on their streams (host functions, or the transport's stream memory
 * operations), errors and progress. */
#include "coll/coll_int.h"
#include "coll/digest.h"
#include "move/door.h"
#include "device/vdev.h"
#include "move/vhandle.h"
#include "move/mover.h"
#include "move/swap.h"
#include "kernels/reduce.h"
#include "shim/step.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ---- globals: registry, last error, progress ----------------------------------- */

static pthread_mutex_t es_coll_mu = PTHREAD_MUTEX_INITIALIZER;
static es_comm_t *es_comms;
static char es_coll_errbuf[512];
static uint64_t es_prog_count, es_prog_ns;
static pthread_once_t es_coll_once = PTHREAD_ONCE_INIT;

static void es_coll_atfork_child(void)
{
    pthread_mutex_init(&es_coll_mu, NULL);
}

static void es_coll_global_init(void)
{
    pthread_atfork(NULL, NULL, es_coll_atfork_child);
}

int es_coll_enabled(void)
{
    return es_cfg.collectives == ES_COLL_VIRTUAL;
}

void es_coll_error(const char *fmt, ...)
{
    char buf[sizeof(es_coll_errbuf)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&es_coll_mu);
    memcpy(es_coll_errbuf, buf, sizeof(buf));
    pthread_mutex_unlock(&es_coll_mu);
    ES_INFO("collectives: %s", buf);
}

const char *es_coll_last_error(void)
{
    /* NCCL's contract: the string stays valid (it may be overwritten). */
    return es_coll_errbuf;
}

void es_coll_progress(es_coll_progress_t *out)
{
    if (!out)
        return;
    out->allreduces = __atomic_load_n(&es_prog_count, __ATOMIC_ACQUIRE);
    out->last_ns = __atomic_load_n(&es_prog_ns, __ATOMIC_ACQUIRE);
}

/* A gradient all-reduce completed: the progress counters here and the
 * control channel's step (shim/step.h). */
void es_coll_progress_add(void)
{
    es_step_tick();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    __atomic_store_n(&es_prog_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
                     __ATOMIC_RELEASE);
    __atomic_fetch_add(&es_prog_count, 1, __ATOMIC_ACQ_REL);
}

/* ---- scheduled holds (shim/step.h) ---------------------------------------------- */

/* While held: a safe point for moves (the controller's event is one); a
 * time-slicing change for this EST ends the wait, since it is applied at
 * the start of this very collective (es_mover_ts_apply), where every member
 * of the rotation is held too. */
static int es_hold_poll(void *arg)
{
    (void)arg;
    es_door_safe_point();
    return es_mover_ts_pending();
}

void es_coll_step_start(int in_group)
{
    uint64_t step;
    if (!es_step_hold_due(es_step_issue(), &step) || in_group)
        return; /* inside a group: the group's operations would not run; the next one waits */
    es_door_safe_begin();
    es_step_hold_wait(step, es_hold_poll, NULL);
    es_door_safe_end();
}

int es_coll_valid(const void *p)
{
    int ok = 0;
    if (!p)
        return 0;
    pthread_mutex_lock(&es_coll_mu);
    for (es_comm_t *c = es_comms; c; c = c->next)
        if (c == p) {
            ok = c->magic == ES_COMM_MAGIC;
            break;
        }
    pthread_mutex_unlock(&es_coll_mu);
    return ok;
}

int es_coll_rank(const es_comm_t *c) { return c->rank; }
int es_coll_nranks(const es_comm_t *c) { return c->nranks; }
int es_coll_cudev(const es_comm_t *c) { return c->vdev; }

size_t es_coll_type_size(int dtype)
{
    static const unsigned char sz[ES_RT_COUNT] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };
    return dtype >= 0 && dtype < ES_RT_COUNT ? sz[dtype] : 0;
}

void es_coll_shard(size_t n, size_t esize, int r, int nr, size_t *lo, size_t *hi)
{
    size_t unit = esize >= 64 ? 1 : 64 / esize;
    size_t units = (n + unit - 1) / unit;
    size_t q = units / (size_t)nr, rem = units % (size_t)nr;
    size_t a = (size_t)r * q + ((size_t)r < rem ? (size_t)r : rem);
    size_t b = a + q + ((size_t)r < rem ? 1 : 0);
    *lo = a * unit < n ? a * unit : n;
    *hi = b * unit < n ? b * unit : n;
}

/* ---- context ---------------------------------------------------------------------- */

/* Makes c's context current for the engine's calls; *pushed says whether
 * es_ctx_leave must pop it. */
static CUresult es_ctx_enter(const es_comm_t *c, int *pushed)
{
    CUcontext cur = NULL;
    *pushed = 0;
    ES_REAL(cuda, cuCtxGetCurrent)(&cur);
    if (cur == c->ctx)
        return CUDA_SUCCESS;
    CUresult r = ES_REAL(cuda, cuCtxPushCurrent_v2)(c->ctx);
    *pushed = r == CUDA_SUCCESS;
    return r;
}

static void es_ctx_leave(int pushed)
{
    if (pushed) {
        CUcontext dummy;
        ES_REAL(cuda, cuCtxPopCurrent_v2)(&dummy);
    }
}

/* ---- steps --------------------------------------------------------------------------- */

es_step_t *es_step_new(es_comm_t *c)
{
    es_step_t *st = calloc(1, sizeof(*st));
    if (st)
        st->c = c;
    return st;
}

int es_step_add(es_step_t *st, const es_action_t *a)
{
    if (st->n >= ES_STEP_MAX)
        return -ENOSPC;
    st->act[st->n++] = *a;
    return 0;
}

static void es_step_free(es_step_t *st)
{
    for (int i = 0; i < st->n; i++)
        free(st->act[i].red);
    free(st);
}

/* Runs on the stream (no CUDA call here). After a fault the waits are
 * skipped: the stream goes on, the outputs are not written meaningfully,
 * and the error is the communicator's. */
static void CUDA_CB es_step_run(void *p)
{
    es_step_t *st = p;
    es_comm_t *c = st->c;
    int ok = !atomic_load(&c->failed);
    for (int i = 0; i < st->n && ok; i++) {
        es_action_t *a = &st->act[i];
        switch (a->kind) {
        case ES_A_BARRIER:
            ok = es_seg_barrier(c, a->a, 1) == 0;
            break;
        case ES_A_HOST_REDUCE:
            es_host_reduce(a->red);
            break;
        case ES_A_PUBLISH_SCALAR:
            memcpy(a->red->out, &a->a, sizeof(a->a));
            break;
        case ES_A_PAIR_WAIT:
            ok = es_seg_pair_wait(c, a->from, a->peer, a->field, a->a) == 0;
            break;
        case ES_A_PAIR_SET:
            es_seg_pair_set(c, a->from, a->peer, a->field, a->a);
            break;
        case ES_A_DONE_ALLREDUCE:
            es_coll_progress_add();
            break;
        default:
            break;
        }
    }
    es_step_free(st);
}

CUresult es_step_launch(es_step_t *st, CUstream s)
{
    if (st->n == 0) {
        es_step_free(st);
        return CUDA_SUCCESS;
    }
    if (st->c->tp && st->c->tp->order) { /* ordered on the device: no host function */
        CUresult r = st->c->tp->order(st->c, st, s);
        es_step_free(st);
        return r;
    }
    if (es_coll_parked_vdev() >= 0) { /* time-sliced, parked: run it here */
        es_comm_t *c = st->c;
        es_step_run(st);
        return atomic_load(&c->failed) ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
    }
    CUresult r = ES_REAL(cuda, cuLaunchHostFunc)(s, es_step_run, st);
    if (r != CUDA_SUCCESS)
        es_step_free(st);
    return r;
}

/* ---- point-to-point rounds (both transports) --------------------------------------------
 * Each send/recv is cut into chunks of p2p_chunk bytes. The operations
 * between this rank and one peer in one direction form a lane, their chunks
 * in issue order (as NCCL matches sends with receives); chunk k of the pair
 * (me -> peer) overall uses staging slot k % 2. Round j moves chunk j of
 * every lane: wait until the receiver consumed the chunk two back, copy in,
 * post; wait for the sender's post, copy out, mark consumed (merged into the
 * next round's first step). */
typedef struct es_lane_chunk {
    const es_p2p_t *op;
    size_t off, len;
} es_lane_chunk_t;

typedef struct es_lane {
    int send, peer;
    int n;                        /* chunks */
    es_lane_chunk_t *c;
} es_lane_t;

static int es_lanes_build(es_comm_t *c, const es_p2p_t *ops, int n, es_lane_t **out, int *nl)
{
    size_t cp = c->p2p_chunk;
    es_lane_t *L = calloc((size_t)(2 * c->nranks), sizeof(*L));
    if (!L)
        return -ENOMEM;
    /* count, then fill */
    for (int i = 0; i < n; i++) {
        es_lane_t *l = &L[ops[i].send * c->nranks + ops[i].peer];
        l->send = ops[i].send;
        l->peer = ops[i].peer;
        l->n += (int)((ops[i].bytes + cp - 1) / cp);
    }
    for (int k = 0; k < 2 * c->nranks; k++) {
        if (L[k].n && !(L[k].c = calloc((size_t)L[k].n, sizeof(es_lane_chunk_t)))) {
            for (int q = 0; q < k; q++)
                free(L[q].c);
            free(L);
            return -ENOMEM;
        }
        L[k].n = 0;
    }
    for (int i = 0; i < n; i++) {
        es_lane_t *l = &L[ops[i].send * c->nranks + ops[i].peer];
        for (size_t off = 0; off < ops[i].bytes; off += cp)
            l->c[l->n++] = (es_lane_chunk_t){ &ops[i], off,
                                              ops[i].bytes - off < cp ? ops[i].bytes - off : cp };
    }
    *out = L;
    *nl = 2 * c->nranks;
    return 0;
}

/* Appends a to *st, launching a full step first. */
static CUresult es_step_push(es_comm_t *c, es_step_t **st, const es_action_t *a, CUstream s)
{
    if (es_step_add(*st, a) == 0)
        return CUDA_SUCCESS;
    CUresult r = es_step_launch(*st, s);
    *st = es_step_new(c);
    if (!*st)
        return CUDA_ERROR_OUT_OF_MEMORY;
    es_step_add(*st, a);
    return r;
}

CUresult es_p2p_rounds(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s,
                       es_p2p_copy_fn copy_in, es_p2p_copy_fn copy_out)
{
    es_lane_t *L = NULL;
    int nl = 0, rounds = 0;
    if (es_lanes_build(c, ops, n, &L, &nl) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int k = 0; k < nl; k++)
        if (L[k].n > rounds)
            rounds = L[k].n;
    CUresult r = CUDA_SUCCESS;
    es_step_t *pending = NULL; /* the previous round's "consumed" marks */
    for (int j = 0; j < rounds && r == CUDA_SUCCESS; j++) {
        es_step_t *st = pending ? pending : es_step_new(c);
        pending = NULL;
        if (!st) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        /* 1: room in the receivers' slots */
        for (int k = 0; k < nl && r == CUDA_SUCCESS; k++) {
            es_lane_t *l = &L[k];
            uint64_t idx = c->p2p_sent[l->peer] + (uint64_t)j;
            if (!l->send || j >= l->n || idx < 2)
                continue;
            es_action_t a = { .kind = ES_A_PAIR_WAIT, .from = c->rank, .peer = l->peer,
                              .field = 1, .a = idx - 1 };
            r = es_step_push(c, &st, &a, s);
        }
        if (!st)
            break;
        CUresult r2 = es_step_launch(st, s);
        if (r == CUDA_SUCCESS)
            r = r2;
        for (int k = 0; k < nl && r == CUDA_SUCCESS; k++) {
            es_lane_t *l = &L[k];
            if (l->send && j < l->n)
                r = copy_in(c, l->c[j].op, c->p2p_sent[l->peer] + (uint64_t)j, l->c[j].off,
                            l->c[j].len, s);
        }
        if (r != CUDA_SUCCESS)
            break;
        /* 2: post my chunks, then wait for the senders' */
        st = es_step_new(c);
        for (int pass = 0; pass < 2 && st && r == CUDA_SUCCESS; pass++)
            for (int k = 0; k < nl && r == CUDA_SUCCESS; k++) {
                es_lane_t *l = &L[k];
                if (l->send != (pass == 0) || j >= l->n)
                    continue;
                es_action_t a;
                if (l->send)
                    a = (es_action_t){ .kind = ES_A_PAIR_SET, .from = c->rank, .peer = l->peer,
                                       .field = 0, .a = c->p2p_sent[l->peer] + (uint64_t)j + 1 };
                else
                    a = (es_action_t){ .kind = ES_A_PAIR_WAIT, .from = l->peer, .peer = c->rank,
                                       .field = 0, .a = c->p2p_recv[l->peer] + (uint64_t)j + 1 };
                r = es_step_push(c, &st, &a, s);
            }
        if (!st) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        r2 = es_step_launch(st, s);
        if (r == CUDA_SUCCESS)
            r = r2;
        for (int k = 0; k < nl && r == CUDA_SUCCESS; k++) {
            es_lane_t *l = &L[k];
            if (!l->send && j < l->n)
                r = copy_out(c, l->c[j].op, c->p2p_recv[l->peer] + (uint64_t)j, l->c[j].off,
                             l->c[j].len, s);
        }
        if (r != CUDA_SUCCESS)
            break;
        /* 3: consumed (run at the start of the next round's first step) */
        pending = es_step_new(c);
        for (int k = 0; k < nl && pending && r == CUDA_SUCCESS; k++) {
            es_lane_t *l = &L[k];
            if (l->send || j >= l->n)
                continue;
            es_action_t a = { .kind = ES_A_PAIR_SET, .from = l->peer, .peer = c->rank,
                              .field = 1, .a = c->p2p_recv[l->peer] + (uint64_t)j + 1 };
            r = es_step_push(c, &pending, &a, s);
        }
        if (!pending)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (pending) {
        CUresult r2 = es_step_launch(pending, s);
        if (r == CUDA_SUCCESS)
            r = r2;
    }
    /* The pair counters move on by this batch's chunks. */
    for (int k = 0; k < nl; k++) {
        if (L[k].send)
            c->p2p_sent[L[k].peer] += (uint64_t)L[k].n;
        else
            c->p2p_recv[L[k].peer] += (uint64_t)L[k].n;
        free(L[k].c);
    }
    free(L);
    return r;
}

/* ---- communicators ------------------------------------------------------------------- */

/* Staging sizes: EASYSCALE_COLL_CHUNK, else per transport and rank count. */
static size_t es_chunk_for(int tp, int n)
{
    if (es_cfg.coll_chunk)
        return es_cfg.coll_chunk;
    size_t budget = tp == ES_COLL_TP_HOST ? (16u << 20) : (64u << 20);
    size_t c = budget / (size_t)n;
    size_t hi = tp == ES_COLL_TP_HOST ? (4u << 20) : (16u << 20);
    if (c > hi)
        c = hi;
    if (c < (256u << 10))
        c = 256u << 10;
    return c & ~(size_t)63;
}

static size_t es_p2p_chunk_for(size_t chunk, int n)
{
    size_t p = chunk / (size_t)n;
    if (p < (64u << 10))
        p = 64u << 10;
    return p & ~(size_t)63;
}

ncclResult_t es_coll_get_unique_id(ncclUniqueId *id)
{
    if (!id) {
        es_coll_error("ncclGetUniqueId: NULL id");
        return ncclInvalidArgument;
    }
    pthread_once(&es_coll_once, es_coll_global_init);
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
    memcpy(id, &e, sizeof(e));
    return ncclSuccess;
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

static void es_comm_register(es_comm_t *c)
{
    pthread_mutex_lock(&es_coll_mu);
    c->next = es_comms;
    es_comms = c;
    pthread_mutex_unlock(&es_coll_mu);
}

static void es_comm_unregister(es_comm_t *c)
{
    pthread_mutex_lock(&es_coll_mu);
    for (es_comm_t **pp = &es_comms; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    c->magic = 0;
    pthread_mutex_unlock(&es_coll_mu);
}

static es_comm_t *es_comm_alloc(int nranks, int rank, const es_coll_id_t *id, int blocking)
{
    es_comm_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->p2p_sent = calloc((size_t)nranks, sizeof(uint64_t));
    c->p2p_recv = calloc((size_t)nranks, sizeof(uint64_t));
    if (!c->p2p_sent || !c->p2p_recv) {
        free(c->p2p_sent);
        free(c->p2p_recv);
        free(c);
        return NULL;
    }
    c->magic = ES_COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->id = *id;
    c->nonce = id->nonce;
    c->blocking = blocking;
    c->timeout_ms = es_cfg.coll_timeout_s * 1000;
    atomic_store(&c->async, ncclInProgress);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->init_mu, NULL);
    return c;
}

static void es_comm_free(es_comm_t *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->init_mu);
    free(c->p2p_sent);
    free(c->p2p_recv);
    free(c);
}

/* The context a new communicator works in: the caller's current one, else
 * the primary context of the (virtual) device 0. */
static CUresult es_comm_bind(es_comm_t *c, CUcontext ctx)
{
    CUresult r = CUDA_SUCCESS;
    if (!ctx) {
        CUdevice d0;
        r = ES_REAL(cuda, cuDeviceGet)(&d0, es_vdev_phys(0));
        if (r == CUDA_SUCCESS)
            r = ES_REAL(cuda, cuDevicePrimaryCtxRetain)(&ctx, d0);
        if (r == CUDA_SUCCESS)
            es_vdev_select(0);
    }
    if (r != CUDA_SUCCESS) {
        es_coll_error("no CUDA context for the communicator (CUresult %d)", (int)r);
        return r;
    }
    c->ctx = ctx;
    int pushed;
    r = es_ctx_enter(c, &pushed);
    if (r == CUDA_SUCCESS)
        r = ES_REAL(cuda, cuCtxGetDevice)(&c->dev);
    es_ctx_leave(pushed);
    if (r != CUDA_SUCCESS)
        es_coll_error("cannot read the communicator's device (CUresult %d)", (int)r);
    if (es_vh_on) {
        /* handles are virtual (docs/MOVING.md): the answer is already the
         * application's ordinal, which a move does not change */
        c->vdev = c->dev;
        c->dev = es_vdev_phys(c->vdev);
    } else {
        c->vdev = es_vdev_virt(c->dev);
    }
    return r;
}

static ncclResult_t es_status_of(int err)
{
    switch (err) {
    case -EINVAL: return ncclInvalidArgument;
    case -EEXIST: return ncclInvalidUsage;
    case -EPIPE: case -ECONNABORTED: return ncclRemoteError;
    default: return ncclSystemError;
    }
}

/* Both ranks' views of a control barrier: the next control number. */
static int es_ctrl_barrier(es_comm_t *c)
{
    return es_seg_barrier(c, ++c->ctrl, 0);
}

int es_tp_device_possible(es_comm_t *c)
{
    if (es_reduce_ready() < 0)
        return 0;
    int n = 0, ok = 1;
    int attr = 0;
    if (ES_REAL(cuda, cuDeviceGetAttribute)(&attr,
            CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, c->dev) != CUDA_SUCCESS ||
        !attr)
        return 0;
    if (ES_REAL(cuda, cuDeviceGetCount)(&n) != CUDA_SUCCESS)
        return 0;
    for (int r = 0; r < c->nranks && ok; r++) {
        const uint8_t *u = es_seg_rank(&c->seg, r)->uuid;
        int found = -1;
        for (int d = 0; d < n && found < 0; d++) {
            CUdevice dev;
            CUuuid uu;
            if (ES_REAL(cuda, cuDeviceGet)(&dev, d) == CUDA_SUCCESS &&
                ES_REAL(cuda, cuDeviceGetUuid_v2)(&uu, dev) == CUDA_SUCCESS &&
                memcmp(uu.bytes, u, 16) == 0)
                found = dev;
        }
        if (found < 0) {
            ok = 0; /* that GPU is not visible here */
        } else if (found != c->dev) {
            int can = 0;
            ok = ES_REAL(cuda, cuDeviceCanAccessPeer)(&can, c->dev, found) == CUDA_SUCCESS && can;
        }
    }
    return ok;
}

/* ---- time-slicing (docs/MOVING.md, section 6) -----------------------------------------
 * An EST that takes turns on its GPU with others (es_mover_tslice) cannot
 * wait for them while it holds the GPU: at a collective (and at the
 * rendezvous of a new communicator) it yields -- parks and passes the turn
 * -- takes part while parked, and comes back at its next turn. While
 * parked its thread makes no driver call: the host transport's copies go
 * to and from the EST's host copies (es_swap_park_read/write) and the
 * steps run in the calling thread. */
static __thread int es_parked_vdev = -1;

int es_coll_parked_vdev(void)
{
    return es_parked_vdev;
}

/* 1 yielded (parked), 0 not time-sliced, -1 failed (message set). */
static int es_ts_yield(void)
{
    es_mover_ts_apply(); /* a rotation the controller started or ended, from here */
    es_tslice_t *t = es_mover_tslice(NULL);
    if (!t)
        return 0;
    char msg[256] = "";
    if (es_mover_yield(t, msg, sizeof(msg)) != 0) {
        es_coll_error("time-slicing: cannot yield the GPU: %s", msg);
        return -1;
    }
    return 1;
}

static int es_ts_resume(void)
{
    int slot;
    es_tslice_t *t = es_mover_tslice(&slot);
    char msg[256] = "";
    for (;;) {
        int rc = es_mover_resume(t, slot, msg, sizeof(msg));
        if (rc == 0)
            return 0;
        if (rc != -ENOMEM) {
            es_coll_error("time-slicing: cannot come back onto GPU %d: %s", slot, msg);
            return -1;
        }
        /* the previous EST's memory is not gone yet: its turn again later */
        ES_WARN("time-slicing: no room on GPU %d yet (%s): waiting for the next turn", slot, msg);
        char m2[256];
        if (es_mover_yield(t, m2, sizeof(m2)) != 0 && es_mover_where_est() != -1) {
            es_coll_error("time-slicing: %s", m2);
            return -1;
        }
    }
}

/* A device-to-device copy of a parked EST, through the host. */
static CUresult es_parked_copy(int vdev, void *dst, const void *src, size_t n)
{
    void *tmp = malloc(n ? n : 1);
    if (!tmp)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int rc = es_swap_park_read(vdev, tmp, (CUdeviceptr)(uintptr_t)src, n);
    if (rc == 0)
        rc = es_swap_park_write(vdev, (CUdeviceptr)(uintptr_t)dst, tmp, n);
    free(tmp);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Rendezvous and transport: runs in the caller's thread (blocking), a
 * background thread (non-blocking) or a group's thread. */
static ncclResult_t es_comm_setup(es_comm_t *c)
{
    ncclResult_t res = ncclSuccess;
    int pushed = 0, rc, parked = 0;
    CUresult cr = es_ctx_enter(c, &pushed);
    if (cr != CUDA_SUCCESS) {
        es_coll_error("cannot make the communicator's context current (CUresult %d)", (int)cr);
        res = ncclUnhandledCudaError;
        goto out;
    }
    CUuuid uu;
    memset(&uu, 0, sizeof(uu));
    ES_REAL(cuda, cuDeviceGetUuid_v2)(&uu, c->dev);
    /* time-sliced: the others reach the rendezvous only in their turns */
    parked = es_ts_yield();
    if (parked < 0) {
        res = ncclUnhandledCudaError;
        goto out;
    }
    int pref = es_cfg.coll_transport;
    /* While ESTs can move (docs/MOVING.md) the staging must not be device
     * memory: the device transport's buffers are mapped by the other ranks
     * from file descriptors of this GPU's memory, which a move would leave
     * behind. The host transport's staging is host memory. */
    if (es_vh_on && pref != ES_COLL_TP_HOST) {
        if (pref == ES_COLL_TP_DEVICE && c->rank == 0)
            ES_WARN("collectives: EASYSCALE_COLL_TRANSPORT=device is not possible while ESTs "
                    "can move (EASYSCALE_MOVE=off allows it): host transport");
        pref = ES_COLL_TP_HOST;
    }
    size_t host_chunk = es_chunk_for(ES_COLL_TP_HOST, c->nranks);
    rc = es_seg_join(&c->seg, &c->id, c->nranks, c->rank, host_chunk,
                     es_p2p_chunk_for(host_chunk, c->nranks), pref,
                     es_chunk_for(ES_COLL_TP_DEVICE, c->nranks), (const uint8_t *)uu.bytes,
                     c->timeout_ms * 10);
    if (rc < 0) {
        res = es_status_of(rc);
        goto out;
    }
    if ((rc = es_seg_wait_joined(c, c->timeout_ms * 10)) < 0) {
        es_coll_error("communicator %016llx: not every rank joined (%d of %d)",
                      (unsigned long long)c->nonce, (int)atomic_load(&c->seg.h->joined),
                      c->nranks);
        res = es_status_of(rc);
        goto out;
    }
    /* Transport: rank 0's preference; device only when every rank can map
     * every other's memory and the set-up succeeds everywhere. */
    pref = es_seg_rank(&c->seg, 0)->tp_pref;
    es_seg_rank(&c->seg, c->rank)->can_device =
        pref != ES_COLL_TP_HOST && es_tp_device_possible(c);
    if ((rc = es_ctrl_barrier(c)) < 0) {
        res = es_status_of(rc);
        goto out;
    }
    int all = 1;
    for (int r = 0; r < c->nranks; r++)
        all &= es_seg_rank(&c->seg, r)->can_device != 0;
    c->tp = &es_tp_host;
    c->tp_id = ES_COLL_TP_HOST;
    if (pref != ES_COLL_TP_HOST && all) {
        c->tp = &es_tp_device;
        c->tp_id = ES_COLL_TP_DEVICE;
        c->chunk = es_seg_rank(&c->seg, 0)->dev_chunk; /* rank 0's: the same for all */
        c->p2p_chunk = es_p2p_chunk_for(c->chunk, c->nranks);
        rc = c->tp->setup(c);
        if (rc == -EAGAIN) { /* some rank could not set it up: all fall back */
            c->tp = &es_tp_host;
            c->tp_id = ES_COLL_TP_HOST;
            rc = 0;
        }
        if (rc < 0) {
            res = es_status_of(rc);
            goto out;
        }
    }
    if (c->tp_id == ES_COLL_TP_HOST) {
        if (pref == ES_COLL_TP_DEVICE && c->rank == 0)
            ES_WARN("collectives: EASYSCALE_COLL_TRANSPORT=device is not possible for "
                    "communicator %016llx (a GPU cannot map another's memory, or the set-up "
                    "failed): host transport", (unsigned long long)c->nonce);
        c->chunk = c->seg.h->chunk;
        c->p2p_chunk = c->seg.h->p2p_chunk;
        if ((rc = c->tp->setup(c)) < 0) {
            res = es_status_of(rc);
            goto out;
        }
    }
    if (!parked) {
        cr = ES_REAL(cuda, cuEventCreate)(&c->ev_last, CU_EVENT_DISABLE_TIMING);
        if (cr != CUDA_SUCCESS) {
            es_coll_error("cuEventCreate failed (CUresult %d)", (int)cr);
            res = ncclUnhandledCudaError;
            goto out;
        }
    }
    if ((rc = es_ctrl_barrier(c)) < 0) {
        res = es_status_of(rc);
        goto out;
    }
    if (parked) { /* back in its turn, then what needs the GPU */
        parked = 0;
        if (es_ts_resume() < 0) {
            res = ncclUnhandledCudaError;
            goto out;
        }
        cr = ES_REAL(cuda, cuEventCreate)(&c->ev_last, CU_EVENT_DISABLE_TIMING);
        if (cr != CUDA_SUCCESS) {
            es_coll_error("cuEventCreate failed (CUresult %d)", (int)cr);
            res = ncclUnhandledCudaError;
            goto out;
        }
    }
    ES_INFO("collectives: communicator %016llx rank %d/%d on device %d (virtual %d): %s "
            "transport, chunk %zu bytes", (unsigned long long)c->nonce, c->rank, c->nranks,
            (int)c->dev, c->vdev, c->tp->name, c->chunk);
out:
    if (parked > 0 && es_ts_resume() < 0 && res == ncclSuccess)
        res = ncclUnhandledCudaError;
    es_ctx_leave(pushed);
    if (res != ncclSuccess && c->seg.h) {
        if (c->tp)
            c->tp->teardown(c);
        c->tp = NULL;
        es_seg_leave(&c->seg);
    }
    atomic_store(&c->async, res);
    return res;
}

static void *es_init_thread(void *arg)
{
    es_comm_t *c = arg;
    if (c->ctx)
        ES_REAL(cuda, cuCtxSetCurrent)(c->ctx);
    es_comm_setup(c);
    return NULL;
}

/* ---- groups (per thread) ------------------------------------------------------------- */

typedef struct es_qop {
    es_coll_op_t op;
    int rop;                      /* ES_RO_* */
    es_premul_t pm;
} es_qop_t;

typedef struct es_group {
    int depth;
    es_qop_t *ops;
    int nops, capops;
    es_comm_t **inits;
    int ninits, capinits;
    ncclResult_t err;             /* first error inside the group */
} es_group_t;

static __thread es_group_t es_grp;

static int es_grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, (size_t)n * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = n;
    return 0;
}

/* Starts the initialisation of c: now, in a thread, or at ncclGroupEnd. */
static ncclResult_t es_comm_start(es_comm_t *c)
{
    if (es_grp.depth > 0) {
        if (es_grow((void **)&es_grp.inits, &es_grp.capinits, es_grp.ninits + 1,
                    sizeof(es_comm_t *)) < 0)
            return ncclSystemError;
        es_grp.inits[es_grp.ninits++] = c;
        return ncclSuccess;
    }
    if (c->blocking)
        return es_comm_setup(c);
    if (pthread_create(&c->init_thread, NULL, es_init_thread, c) != 0) {
        es_coll_error("cannot start the initialisation thread");
        atomic_store(&c->async, ncclSystemError);
        return ncclSystemError;
    }
    c->init_threaded = 1;
    return ncclInProgress;
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

ncclResult_t es_coll_init_rank(es_comm_t **comm, int nranks, const ncclUniqueId *id, int rank,
                               const ncclConfig_t *config)
{
    pthread_once(&es_coll_once, es_coll_global_init);
    es_coll_id_t e;
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
    if (e.magic != ES_COLL_ID_MAGIC || e.version != ES_SEG_VERSION) {
        es_coll_error("ncclCommInitRank: the unique id was not made by the virtual collectives "
                      "(every rank needs EASYSCALE_COLLECTIVES=virtual and the same shim)");
        return ncclInvalidArgument;
    }
    if (e.uid != (uint32_t)getuid()) {
        es_coll_error("ncclCommInitRank: the unique id belongs to another user");
        return ncclInvalidUsage;
    }
    CUcontext ctx = NULL;
    if (!es_lib_ready(ES_LIB_CUDA)) {
        es_coll_error("ncclCommInitRank: libcuda.so.1 is not available");
        return ncclUnhandledCudaError;
    }
    ES_REAL(cuda, cuCtxGetCurrent)(&ctx);
    es_comm_t *c = es_comm_alloc(nranks, rank, &e, es_config_blocking(config));
    if (!c)
        return ncclSystemError;
    if (es_comm_bind(c, ctx) != CUDA_SUCCESS) {
        es_comm_free(c);
        return ncclUnhandledCudaError;
    }
    es_comm_register(c);
    res = es_comm_start(c);
    if (res != ncclSuccess && res != ncclInProgress) {
        es_comm_unregister(c);
        es_comm_free(c);
        return res;
    }
    *comm = c;
    return res;
}

ncclResult_t es_coll_init_all(es_comm_t **comms, int ndev, const int *devlist)
{
    if (!comms || ndev < 1 || ndev > ES_COLL_MAX_RANKS) {
        es_coll_error("ncclCommInitAll: bad arguments (ndev %d)", ndev);
        return ncclInvalidArgument;
    }
    ncclUniqueId id;
    ncclResult_t res = es_coll_get_unique_id(&id);
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
    es_group_t saved = es_grp;
    memset(&es_grp, 0, sizeof(es_grp));
    es_grp.depth = 1;
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
        es_comm_start(c);
    }
    ncclResult_t r2 = es_coll_group_end();
    es_grp = saved;
    return res != ncclSuccess ? res : r2;
}

static void es_comm_join_init(es_comm_t *c)
{
    pthread_mutex_lock(&c->init_mu);
    if (c->init_threaded) {
        pthread_join(c->init_thread, NULL);
        c->init_threaded = 0;
    }
    pthread_mutex_unlock(&c->init_mu);
}

/* The wait of an operation on a communicator still initialising. */
static ncclResult_t es_comm_ready(es_comm_t *c)
{
    ncclResult_t a = atomic_load(&c->async);
    if (a == ncclInProgress) {
        es_comm_join_init(c);
        a = atomic_load(&c->async);
    }
    if (a == ncclInProgress) {
        es_coll_error("the communicator is not initialised yet (inside a group?)");
        return ncclInvalidUsage;
    }
    return a;
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
        return es_status_of(rc);
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
    int rank, n;
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

ncclResult_t es_coll_split(es_comm_t *parent, int color, int key, es_comm_t **out,
                           const ncclConfig_t *config)
{
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
    if (!out || nexclude < 0 || (nexclude > 0 && !exclude)) {
        es_coll_error("ncclCommShrink: bad arguments");
        return ncclInvalidArgument;
    }
    *out = NULL;
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
    res = es_comm_start(c);
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
    es_ctx_enter(c, &pushed);
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
    es_ctx_leave(pushed);
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
    es_ctx_enter(c, &pushed);
    if (c->tp)
        c->tp->teardown(c);
    c->tp = NULL;
    if (c->ev_last)
        ES_REAL(cuda, cuEventDestroy_v2)(c->ev_last);
    c->ev_last = NULL;
    c->have_ops = 0;
    es_ctx_leave(pushed);
    es_seg_leave(&c->seg);
    pthread_mutex_unlock(&c->mu);
    if (!keep)
        es_comm_free(c);
}

ncclResult_t es_coll_finalize(es_comm_t *c)
{
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
    es_comm_join_init(c);
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
    if (c->seg.h)
        es_comm_fail(c, ES_FAIL_ABORT, ncclRemoteError);
    /* The pending host functions see the abort at once; the streams may
     * still hold application work before them. */
    int drained = es_comm_drain(c, (uint64_t)c->timeout_ms + 1000);
    es_comm_release(c, drained, 1);
    return ncclSuccess;
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
    if (a != ncclInProgress && c->init_threaded)
        es_comm_join_init(c); /* finished in the background: collect the thread */
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

/* ---- operations ------------------------------------------------------------------- */

static const char *const es_op_names[ES_OP_KINDS] = {
    "ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
    "ncclSend", "ncclRecv",
};

static ncclResult_t es_check_op(const es_coll_op_t *o, es_qop_t *q)
{
    const char *nm = o->kind >= 0 && o->kind < ES_OP_KINDS ? es_op_names[o->kind] : "?";
    es_comm_t *c = o->comm;
    size_t es = es_coll_type_size(o->dtype);
    memset(q, 0, sizeof(*q));
    q->op = *o;
    if (!es) {
        es_coll_error("%s: invalid datatype %d", nm, o->dtype);
        return ncclInvalidArgument;
    }
    int reducing = o->kind == ES_OP_ALLREDUCE || o->kind == ES_OP_REDUCE ||
                   o->kind == ES_OP_REDUCESCATTER;
    if (reducing) {
        if (o->op >= 0 && o->op < (int)ncclNumOps) {
            q->rop = o->op;
        } else {
            int i = o->op - (int)ncclNumOps;
            pthread_mutex_lock(&c->mu);
            int ok = i >= 0 && i < ES_COLL_MAX_PREMUL && c->premul[i].used;
            if (ok)
                q->pm = c->premul[i];
            pthread_mutex_unlock(&c->mu);
            if (!ok) {
                es_coll_error("%s: invalid reduction operator %d", nm, o->op);
                return ncclInvalidArgument;
            }
            if (q->pm.dtype != o->dtype) {
                es_coll_error("%s: PreMulSum operator made for datatype %d used with %d", nm,
                              q->pm.dtype, o->dtype);
                return ncclInvalidArgument;
            }
            q->rop = ES_RO_PREMUL;
        }
    }
    int rooted = o->kind == ES_OP_BROADCAST || o->kind == ES_OP_REDUCE ||
                 o->kind == ES_OP_SEND || o->kind == ES_OP_RECV;
    if (rooted && (o->root < 0 || o->root >= c->nranks)) {
        es_coll_error("%s: %s %d is not valid (%d ranks)", nm,
                      o->kind >= ES_OP_SEND ? "peer" : "root", o->root, c->nranks);
        return ncclInvalidArgument;
    }
    size_t mult = (o->kind == ES_OP_ALLGATHER || o->kind == ES_OP_REDUCESCATTER)
                      ? (size_t)c->nranks : 1;
    if (o->count && (o->count > SIZE_MAX / es / mult)) {
        es_coll_error("%s: count %zu is too large", nm, o->count);
        return ncclInvalidArgument;
    }
    if (o->count) {
        int need_send = o->kind != ES_OP_RECV &&
                        !(o->kind == ES_OP_BROADCAST && o->root != c->rank);
        int need_recv = o->kind != ES_OP_SEND && !(o->kind == ES_OP_REDUCE && o->root != c->rank);
        if ((need_send && !o->send) || (need_recv && !o->recv)) {
            es_coll_error("%s: NULL buffer", nm);
            return ncclInvalidArgument;
        }
    }
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (ES_REAL(cuda, cuStreamIsCapturing)(o->stream, &cs) == CUDA_SUCCESS &&
        cs != CU_STREAM_CAPTURE_STATUS_NONE) {
        ES_WARN("collectives: %s on a stream under capture (CUDA graph) is not supported by the "
                "virtual collectives: ncclInvalidUsage", nm);
        es_coll_error("%s: the stream is being captured into a CUDA graph; the virtual "
                      "collectives cannot be captured", nm);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

/* Runs the queued operations of one communicator (issue order; collectives
 * first, then the point-to-point batch) on the first operation's stream,
 * joined with the other streams by events. */
/* The collective digests (EASYSCALE_DIGEST, coll/digest.h) of a run's
 * operations: their inputs hashed on s before the run, outputs after. */
static void es_digest_ops(es_comm_t *c, es_qop_t **ops, int n, CUstream s, int parked,
                          es_digest_batch_t *b)
{
    es_digest_op_t d[ES_DIGEST_BATCH_MAX];
    int m = 0;
    for (int i = 0; i < n && m < ES_DIGEST_BATCH_MAX; i++) {
        const es_coll_op_t *o = &ops[i]->op;
        m += es_digest_op_init(&d[m], (uint32_t)o->kind + 1, o->send, o->recv, o->count,
                               o->dtype, o->op, o->root, c->rank, c->nranks) == 0;
    }
    if (parked)
        es_digest_begin_parked(b, c->vdev, c, c->rank, c->nranks, d, m);
    else
        es_digest_begin(b, c, c->rank, c->nranks, d, m, 1, s);
}

static ncclResult_t es_run_comm(es_comm_t *c, es_qop_t **ops, int n)
{
    es_digest_batch_t dg;
    dg.n = 0;
    ncclResult_t res = es_comm_ready(c);
    if (res != ncclSuccess)
        return res;
    if (atomic_load(&c->failed))
        return atomic_load(&c->async);
    /* time-sliced: yield the GPU, take part while parked (host transport) */
    int parked = c->tp_id == ES_COLL_TP_HOST ? es_ts_yield() : 0;
    if (parked < 0)
        return ncclUnhandledCudaError;
    pthread_mutex_lock(&c->mu);
    if (!c->tp) { /* aborted meanwhile by another thread */
        pthread_mutex_unlock(&c->mu);
        es_coll_error("the communicator was aborted");
        if (parked)
            es_ts_resume();
        return ncclInvalidUsage;
    }
    int pushed = 0;
    CUresult r = CUDA_SUCCESS;
    if (parked)
        es_parked_vdev = c->vdev;
    else
        r = es_ctx_enter(c, &pushed);
    CUstream s = ops[0]->op.stream;
    CUstream others[ES_STEP_MAX];
    CUevent evs[ES_STEP_MAX];
    int nothers = 0;
    es_p2p_t *p2p = NULL;
    int np2p = 0;
    for (int i = 1; i < n && r == CUDA_SUCCESS && !parked; i++) {
        CUstream o = ops[i]->op.stream;
        int seen = o == s;
        for (int k = 0; k < nothers && !seen; k++)
            seen = others[k] == o;
        if (seen)
            continue;
        if (nothers == ES_STEP_MAX) {
            es_coll_error("a group uses more than %d streams on one communicator", ES_STEP_MAX);
            res = ncclInvalidUsage;
            goto out;
        }
        others[nothers] = o;
        r = ES_REAL(cuda, cuEventCreate)(&evs[nothers], CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS)
            r = ES_REAL(cuda, cuEventRecord)(evs[nothers], o);
        if (r == CUDA_SUCCESS)
            r = ES_REAL(cuda, cuStreamWaitEvent)(s, evs[nothers], 0);
        nothers++;
    }
    /* Operations of a communicator run in issue order. */
    if (r == CUDA_SUCCESS && c->have_ops && c->last_stream != s && !parked)
        r = ES_REAL(cuda, cuStreamWaitEvent)(s, c->ev_last, 0);
    if (r == CUDA_SUCCESS && es_digest_enabled())
        es_digest_ops(c, ops, n, s, parked, &dg);
    for (int i = 0; i < n && r == CUDA_SUCCESS; i++) {
        es_qop_t *q = ops[i];
        if (q->op.kind == ES_OP_SEND || q->op.kind == ES_OP_RECV)
            continue;
        if (q->op.count == 0)
            continue;
        r = c->tp->coll(c, &q->op, q->rop, &q->pm, s);
    }
    /* Point to point: self pairs are copies; the rest one batch. */
    if (r == CUDA_SUCCESS) {
        p2p = calloc(n > 0 ? (size_t)n : 1, sizeof(*p2p));
        if (!p2p)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < n && r == CUDA_SUCCESS; i++) {
        es_qop_t *q = ops[i];
        if ((q->op.kind != ES_OP_SEND && q->op.kind != ES_OP_RECV) || q->op.count == 0)
            continue;
        size_t bytes = q->op.count * es_coll_type_size(q->op.dtype);
        if (q->op.root == c->rank) {
            if (q->op.kind == ES_OP_RECV)
                continue; /* matched by the send below */
            int k = -1; /* the n-th self send pairs with the n-th self recv */
            int nth = 0;
            for (int j = 0; j < i; j++)
                nth += ops[j]->op.kind == ES_OP_SEND && ops[j]->op.root == c->rank &&
                       ops[j]->op.count;
            for (int j = 0, m = 0; j < n && k < 0; j++)
                if (ops[j]->op.kind == ES_OP_RECV && ops[j]->op.root == c->rank &&
                    ops[j]->op.count && m++ == nth)
                    k = j;
            if (k < 0 || ops[k]->op.count * es_coll_type_size(ops[k]->op.dtype) != bytes) {
                es_coll_error("ncclSend to self without a matching ncclRecv from self in the "
                              "group");
                res = ncclInvalidUsage;
                goto out;
            }
            if (parked)
                r = es_parked_copy(c->vdev, ops[k]->op.recv, q->op.send, bytes);
            else
                r = ES_REAL(cuda, cuMemcpyDtoDAsync_v2)((CUdeviceptr)(uintptr_t)ops[k]->op.recv,
                                                        (CUdeviceptr)(uintptr_t)q->op.send, bytes,
                                                        s);
            continue;
        }
        p2p[np2p++] = (es_p2p_t){ q->op.kind == ES_OP_SEND, q->op.root,
                                  q->op.kind == ES_OP_SEND ? (char *)q->op.send
                                                           : (char *)q->op.recv,
                                  bytes };
    }
    if (r == CUDA_SUCCESS && np2p)
        r = c->tp->p2p(c, p2p, np2p, s);
    if (r == CUDA_SUCCESS && dg.n) {
        if (parked)
            es_digest_end_parked(&dg);
        else
            es_digest_end(&dg, s);
    }
    if (r == CUDA_SUCCESS && !parked) {
        r = ES_REAL(cuda, cuEventRecord)(c->ev_last, s);
        c->last_stream = s;
        c->have_ops = 1;
    }
    for (int k = 0; k < nothers; k++) {
        if (r == CUDA_SUCCESS) {
            CUresult r2 = ES_REAL(cuda, cuEventRecord)(evs[k], s);
            if (r2 == CUDA_SUCCESS)
                r2 = ES_REAL(cuda, cuStreamWaitEvent)(others[k], evs[k], 0);
            if (r2 != CUDA_SUCCESS)
                r = r2;
        }
    }
    if (r != CUDA_SUCCESS) {
        /* Part of an operation may be queued: this rank's order is broken;
         * the communicator (and its peers) fail rather than hang. */
        es_coll_error("enqueueing on the stream failed (CUresult %d)", (int)r);
        es_comm_fail(c, ES_FAIL_LOCAL, ncclUnhandledCudaError);
        res = ncclUnhandledCudaError;
    }
out:
    if (dg.n)
        es_digest_cancel(&dg);
    for (int k = 0; k < nothers; k++)
        ES_REAL(cuda, cuEventDestroy_v2)(evs[k]);
    free(p2p);
    es_ctx_leave(pushed);
    es_parked_vdev = -1;
    pthread_mutex_unlock(&c->mu);
    if (parked && es_ts_resume() < 0 && res == ncclSuccess)
        res = ncclUnhandledCudaError;
    return res;
}

ncclResult_t es_coll_enqueue(const es_coll_op_t *o)
{
    if (!es_coll_valid(o->comm)) {
        es_coll_error("%s: invalid communicator",
                      o->kind >= 0 && o->kind < ES_OP_KINDS ? es_op_names[o->kind] : "?");
        if (es_grp.depth > 0 && es_grp.err == ncclSuccess)
            es_grp.err = ncclInvalidArgument;
        return ncclInvalidArgument;
    }
    es_qop_t q;
    ncclResult_t res = es_check_op(o, &q);
    if (res != ncclSuccess) {
        if (es_grp.depth > 0 && es_grp.err == ncclSuccess)
            es_grp.err = res;
        return res;
    }
    if (q.op.count && es_coll_counts_step(q.op.kind, q.op.dtype))
        es_coll_step_start(es_grp.depth > 0);
    if (es_grp.depth > 0) {
        if (es_grow((void **)&es_grp.ops, &es_grp.capops, es_grp.nops + 1, sizeof(es_qop_t)) < 0)
            return ncclSystemError;
        es_grp.ops[es_grp.nops++] = q;
        return ncclSuccess;
    }
    es_qop_t *one = &q;
    return es_run_comm(o->comm, &one, 1);
}

ncclResult_t es_coll_group_start(void)
{
    pthread_once(&es_coll_once, es_coll_global_init);
    es_grp.depth++;
    return ncclSuccess;
}

static void es_group_reset(void)
{
    es_grp.nops = 0;
    es_grp.ninits = 0;
    es_grp.err = ncclSuccess;
}

ncclResult_t es_coll_group_end(void)
{
    if (es_grp.depth <= 0) {
        es_coll_error("ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--es_grp.depth > 0)
        return ncclSuccess;
    ncclResult_t res = es_grp.err;
    /* Initialisations: concurrently (ranks of one process meet each other). */
    int ninit = es_grp.ninits, inprogress = 0;
    for (int i = 0; i < ninit; i++) {
        es_comm_t *c = es_grp.inits[i];
        if (pthread_create(&c->init_thread, NULL, es_init_thread, c) != 0) {
            atomic_store(&c->async, ncclSystemError);
            if (res == ncclSuccess)
                res = ncclSystemError;
            continue;
        }
        c->init_threaded = 1;
    }
    for (int i = 0; i < ninit; i++) {
        es_comm_t *c = es_grp.inits[i];
        if (!c->blocking) {
            inprogress = 1;
            continue;
        }
        es_comm_join_init(c);
        ncclResult_t a = atomic_load(&c->async);
        if (a != ncclSuccess && res == ncclSuccess)
            res = a;
    }
    if (res == ncclSuccess && es_grp.nops) {
        /* One run per communicator, in the order communicators first appear. */
        es_qop_t **list = calloc((size_t)es_grp.nops, sizeof(*list));
        char *done = calloc((size_t)es_grp.nops, 1);
        if (!list || !done) {
            res = ncclSystemError;
        } else {
            for (int i = 0; i < es_grp.nops && res == ncclSuccess; i++) {
                if (done[i])
                    continue;
                int m = 0;
                for (int j = i; j < es_grp.nops; j++)
                    if (!done[j] && es_grp.ops[j].op.comm == es_grp.ops[i].op.comm) {
                        list[m++] = &es_grp.ops[j];
                        done[j] = 1;
                    }
                res = es_run_comm(es_grp.ops[i].op.comm, list, m);
            }
        }
        free(list);
        free(done);
    }
    es_group_reset();
    if (res == ncclSuccess && inprogress)
        res = ncclInProgress;
    return res;
}

ncclResult_t es_coll_group_discard(void)
{
    if (es_grp.depth <= 0) {
        es_coll_error("ncclGroupSimulateEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--es_grp.depth > 0)
        return ncclSuccess;
    for (int i = 0; i < es_grp.ninits; i++) /* nothing simulated: run them */
        es_comm_setup(es_grp.inits[i]);
    es_group_reset();
    return ncclSuccess;
}
