/* A virtual communicator's life in this process (see coll_int.h): the
 * registry of live communicators, allocation, its context, and its
 * initialisation: rendezvous in the shared segment, the choice and set-up
 * of its transport, the background thread of a non-blocking one. Called
 * by comm.c, group.c and launch.c; calls the transports (through their
 * struct), seg.c, tslice.c and util.c. */
#include "coll/coll_int.h"
#include "device/vdev.h"
#include "move/door.h"
#include "move/mover.h"
#include "move/vhandle.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- registry ---------------------------------------------------------------------- */

static pthread_mutex_t es_coll_mu = PTHREAD_MUTEX_INITIALIZER;
static es_comm_t *es_comms;
static pthread_once_t es_coll_once = PTHREAD_ONCE_INIT;

/* Communicators of this process whose transport's staging is device
 * memory other processes map (device, nccl). */
static _Atomic int es_devmem_live;
static pthread_mutex_t es_devmem_mu = PTHREAD_MUTEX_INITIALIZER;

static void es_coll_atfork_child(void)
{
    pthread_mutex_init(&es_coll_mu, NULL);
    pthread_mutex_init(&es_devmem_mu, NULL);
}

/* One more or one less of them. With scheduled steps, moves are put off
 * (the door's hold) while any is up: a move the controller asks for as the
 * ESTs reach a step then happens in the step's wait, once the staging came
 * down (es_comm_hold_begin), not at the entry of the call that waits. */
static void es_devmem_add(int d)
{
    pthread_mutex_lock(&es_devmem_mu);
    int before = atomic_fetch_add(&es_devmem_live, d);
    if (es_vh_on && es_cfg.nhold > 0) {
        if (before == 0 && d > 0)
            es_door_hold_begin();
        else if (before + d == 0 && d < 0)
            es_door_hold_end();
    }
    pthread_mutex_unlock(&es_devmem_mu);
}

/* The mover's gate (move/mover.h): such staging must not be left on the
 * old GPU, nor the carriers' communicator in a context that goes; it is
 * taken down only at a hold (es_comm_hold_begin): a scheduled step, or one
 * the controller sets at run time when a move is refused with -EXDEV
 * (shim/step.h, es_step_offer). */
static int es_comm_move_gate(char *msg, size_t msglen)
{
    if (atomic_load(&es_devmem_live) == 0)
        return 0;
    if (msg && msglen)
        snprintf(msg, msglen, "the collectives' staging is device memory the other ESTs map "
                              "(EASYSCALE_COLL_TRANSPORT=nccl or device): this EST moves only at "
                              "a hold of the whole job (easyscale-ctl sets one by itself; a "
                              "scheduled step of run --schedule is one), or use "
                              "EASYSCALE_COLL_TRANSPORT=host");
    return -EXDEV;
}

static void es_coll_global_init(void)
{
    pthread_atfork(NULL, NULL, es_coll_atfork_child);
    if (es_vh_on)
        (void)es_mover_add_gate(es_comm_move_gate);
}

void es_comm_global_init(void)
{
    pthread_once(&es_coll_once, es_coll_global_init);
}

void es_comm_register(es_comm_t *c)
{
    pthread_mutex_lock(&es_coll_mu);
    c->next = es_comms;
    es_comms = c;
    pthread_mutex_unlock(&es_coll_mu);
}

void es_comm_unregister(es_comm_t *c)
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

/* ---- context ---------------------------------------------------------------------- */

CUresult es_comm_ctx_enter(const es_comm_t *c, int *pushed)
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

void es_comm_ctx_leave(int pushed)
{
    if (pushed) {
        CUcontext dummy;
        ES_REAL(cuda, cuCtxPopCurrent_v2)(&dummy);
    }
}

/* ---- allocation -------------------------------------------------------------------- */

es_comm_t *es_comm_alloc(int nranks, int rank, const es_coll_id_t *id, int blocking)
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

void es_comm_free(es_comm_t *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->init_mu);
    free(c->p2p_sent);
    free(c->p2p_recv);
    free(c);
}

/* The context a new communicator works in: the caller's current one, else
 * the primary context of the (virtual) device 0. */
CUresult es_comm_bind(es_comm_t *c, CUcontext ctx)
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
    r = es_comm_ctx_enter(c, &pushed);
    if (r == CUDA_SUCCESS)
        r = ES_REAL(cuda, cuCtxGetDevice)(&c->dev);
    es_comm_ctx_leave(pushed);
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

ncclResult_t es_comm_status_of(int err)
{
    switch (err) {
    case -EINVAL: return ncclInvalidArgument;
    case -EEXIST: return ncclInvalidUsage;
    case -EPIPE: case -ECONNABORTED: return ncclRemoteError;
    default: return ncclSystemError;
    }
}

/* ---- initialisation ------------------------------------------------------------------ */

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

/* Joins the segment (publishing this rank's transport preference, device
 * chunk and GPU) and waits until every rank joined. */
static ncclResult_t es_comm_rendezvous(es_comm_t *c, int pref, const CUuuid *uu)
{
    int rc;
    size_t host_chunk = es_chunk_for(ES_COLL_TP_HOST, c->nranks);
    rc = es_seg_join(&c->seg, &c->id, c->nranks, c->rank, host_chunk,
                     es_p2p_chunk_for(host_chunk, c->nranks), pref,
                     es_chunk_for(ES_COLL_TP_DEVICE, c->nranks), (const uint8_t *)uu->bytes,
                     c->timeout_ms * 10);
    if (rc < 0)
        return es_comm_status_of(rc);
    if ((rc = es_seg_wait_joined(c, c->timeout_ms * 10)) < 0) {
        es_coll_error("communicator %016llx: not every rank joined (%d of %d)",
                      (unsigned long long)c->nonce, (int)atomic_load(&c->seg.h->joined),
                      c->nranks);
        return es_comm_status_of(rc);
    }
    return ncclSuccess;
}

/* Sets up transport tp (id) with its chunk; -EAGAIN when some rank could
 * not (the same answer everywhere). */
static int es_comm_try(es_comm_t *c, const es_coll_transport_t *tp, int id)
{
    c->tp = tp;
    c->tp_id = id;
    if (id == ES_COLL_TP_HOST) {
        c->chunk = c->seg.h->chunk;
        c->p2p_chunk = c->seg.h->p2p_chunk;
    } else {
        c->chunk = es_seg_rank(&c->seg, 0)->dev_chunk; /* rank 0's: the same for all */
        c->p2p_chunk = es_p2p_chunk_for(c->chunk, c->nranks);
    }
    int rc = tp->setup(c);
    if (rc < 0)
        c->tp = NULL;
    else if (id != ES_COLL_TP_HOST)
        es_devmem_add(1);
    return rc;
}

void es_comm_tp_down(es_comm_t *c)
{
    if (!c->tp)
        return;
    c->tp->teardown(c);
    if (c->tp_id != ES_COLL_TP_HOST)
        es_devmem_add(-1);
    c->tp = NULL;
}

/* Transport: rank 0's preference (auto: nccl, else device, else host);
 * nccl and device only when every rank can use them and their set-up
 * succeeds everywhere; otherwise the next one. */
static ncclResult_t es_comm_pick_transport(es_comm_t *c)
{
    int rc;
    int pref = es_seg_rank(&c->seg, 0)->tp_pref;
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    /* an EST in a rotation (its turns are moves) cannot hold device staging */
    me->can_device = pref != ES_COLL_TP_HOST && es_mover_tslice(NULL) == NULL &&
                     es_coll_tp_dev.possible(c);
    me->can_nccl = (pref == ES_COLL_TP_NCCL || pref == ES_COLL_TP_AUTO) && me->can_device &&
                   es_coll_tp_nccl.possible(c);
    me->fixed_ts = es_coll_ts_fixed();
    if ((rc = es_ctrl_barrier(c)) < 0)
        return es_comm_status_of(rc);
    int dev = 1, nccl = 1, fixed = 1;
    for (int r = 0; r < c->nranks; r++) {
        dev &= es_seg_rank(&c->seg, r)->can_device != 0;
        nccl &= es_seg_rank(&c->seg, r)->can_nccl != 0;
        fixed &= es_seg_rank(&c->seg, r)->fixed_ts != 0;
    }
    c->ts_fuse = fixed;
    rc = -EAGAIN;
    if (nccl)
        rc = es_comm_try(c, &es_coll_tp_nccl, ES_COLL_TP_NCCL);
    if (rc == -EAGAIN && dev && pref != ES_COLL_TP_NCCL)
        rc = es_comm_try(c, &es_coll_tp_dev, ES_COLL_TP_DEVICE);
    if (rc == -EAGAIN)
        rc = es_comm_try(c, &es_coll_tp_host, ES_COLL_TP_HOST);
    if (rc < 0)
        return es_comm_status_of(rc);
    if (c->rank == 0 && (pref == ES_COLL_TP_DEVICE || pref == ES_COLL_TP_NCCL) &&
        c->tp_id != pref)
        ES_WARN("collectives: EASYSCALE_COLL_TRANSPORT=%s is not possible for communicator "
                "%016llx (%s): %s transport", pref == ES_COLL_TP_NCCL ? "nccl" : "device",
                (unsigned long long)c->nonce,
                pref == ES_COLL_TP_NCCL ? "libnccl.so.2 missing, a GPU cannot map another's "
                                          "memory, or the set-up failed"
                                        : "a GPU cannot map another's memory, or the set-up "
                                          "failed",
                c->tp->name);
    return ncclSuccess;
}

/* The event recorded after every operation of c. */
static ncclResult_t es_comm_event(es_comm_t *c)
{
    CUresult cr = ES_REAL(cuda, cuEventCreate)(&c->ev_last, CU_EVENT_DISABLE_TIMING);
    if (cr != CUDA_SUCCESS) {
        es_coll_error("cuEventCreate failed (CUresult %d)", (int)cr);
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

ncclResult_t es_comm_setup(es_comm_t *c)
{
    ncclResult_t res = ncclSuccess;
    int pushed = 0, rc, parked = 0;
    CUresult cr = es_comm_ctx_enter(c, &pushed);
    if (cr != CUDA_SUCCESS) {
        es_coll_error("cannot make the communicator's context current (CUresult %d)", (int)cr);
        res = ncclUnhandledCudaError;
        goto out;
    }
    CUuuid uu;
    memset(&uu, 0, sizeof(uu));
    ES_REAL(cuda, cuDeviceGetUuid_v2)(&uu, c->dev);
    /* time-sliced: the others reach the rendezvous only in their turns */
    parked = es_coll_ts_yield();
    if (parked < 0) {
        res = ncclUnhandledCudaError;
        goto out;
    }
    int pref = es_cfg.coll_transport;
    /* While ESTs can move (docs/MOVING.md) device staging (the device and
     * nccl transports: buffers the other ranks map from file descriptors
     * of this GPU's memory, the carriers' NCCL communicator) must not be
     * left behind: it is taken down at holds of the whole job only
     * (es_comm_hold_begin: scheduled, set by the controller, or agreed by
     * the ranks for a move a process asks for: coll/jobhold.c), and a move
     * anywhere else is refused (the mover's gate). Time-sliced ESTs (the
     * shim's rotation: every turn is a move) use the host transport. */
    /* the levels above the host in host memory run its steps over host
     * buffers (xhost_mem.c): the host transport too */
    const char *why = c->host_tp ? "with the levels between the hosts in host memory "
                                   "(EASYSCALE_XHOST=host)"
                      : es_vh_on && es_cfg.time_slice ? "for time-sliced ESTs "
                                                        "(EASYSCALE_TIME_SLICE)"
                                                      : NULL;
    if (why && pref != ES_COLL_TP_HOST) {
        if (pref != ES_COLL_TP_AUTO && c->rank == 0)
            ES_WARN("collectives: EASYSCALE_COLL_TRANSPORT=%s is not possible %s: host "
                    "transport", pref == ES_COLL_TP_NCCL ? "nccl" : "device", why);
        pref = ES_COLL_TP_HOST;
    }
    res = es_comm_rendezvous(c, pref, &uu);
    if (res == ncclSuccess)
        res = es_comm_pick_transport(c);
    if (res == ncclSuccess && !parked)
        res = es_comm_event(c);
    if (res != ncclSuccess)
        goto out;
    if ((rc = es_ctrl_barrier(c)) < 0) {
        res = es_comm_status_of(rc);
        goto out;
    }
    if (parked) { /* back in its turn, then what needs the GPU */
        parked = 0;
        if (es_coll_ts_resume() < 0) {
            res = ncclUnhandledCudaError;
            goto out;
        }
        if ((res = es_comm_event(c)) != ncclSuccess)
            goto out;
    }
    ES_INFO("collectives: communicator %016llx rank %d/%d on device %d (virtual %d): %s "
            "transport, chunk %zu bytes", (unsigned long long)c->nonce, c->rank, c->nranks,
            (int)c->dev, c->vdev, c->tp->name, c->chunk);
out:
    if (parked > 0 && es_coll_ts_resume() < 0 && res == ncclSuccess)
        res = ncclUnhandledCudaError;
    es_comm_ctx_leave(pushed);
    if (res != ncclSuccess && c->seg.h) {
        es_comm_tp_down(c);
        es_seg_leave(&c->seg);
    }
    atomic_store(&c->async, res);
    return res;
}

/* ---- holds (scheduled, or set at run time): device staging down and up again around
 * the moves ---- */

/* The live communicators of this process in creation order (the registry
 * keeps the newest first), at most max. */
static int es_comm_snapshot(es_comm_t **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&es_coll_mu);
    for (es_comm_t *c = es_comms; c && n < max; c = c->next)
        out[n++] = c;
    pthread_mutex_unlock(&es_coll_mu);
    for (int i = 0; i < n / 2; i++) {
        es_comm_t *t = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = t;
    }
    return n;
}

/* Drains c (its operations done on every rank) and takes its device
 * staging down: 1 when it did. */
static int es_comm_hold_down(es_comm_t *c)
{
    int down = 0;
    pthread_mutex_lock(&c->mu);
    if (c->tp && c->tp_id != ES_COLL_TP_HOST && !atomic_load(&c->failed)) {
        int pushed, rc = 0;
        CUresult cr = es_comm_ctx_enter(c, &pushed);
        if (cr == CUDA_SUCCESS && c->have_ops)
            cr = ES_REAL(cuda, cuEventSynchronize)(c->ev_last);
        if (cr == CUDA_SUCCESS)
            rc = es_ctrl_barrier(c);
        if (cr == CUDA_SUCCESS && rc == 0) {
            c->hold_tp = c->tp_id;
            es_comm_tp_down(c);
            down = 1;
        } else {
            es_coll_error("communicator %016llx: draining it at a hold failed "
                          "(CUresult %d, %d)", (unsigned long long)c->nonce, (int)cr, rc);
            es_comm_fail(c, ES_FAIL_LOCAL, ncclUnhandledCudaError);
        }
        es_comm_ctx_leave(pushed);
    }
    pthread_mutex_unlock(&c->mu);
    return down;
}

/* Sets c's transport up again where this EST is now (after the moves):
 * its transport before the hold, unless an EST of the job is time-sliced
 * now (its turns are moves, which device staging would forbid): then, and
 * for the rest of the job, the host transport. */
static void es_comm_hold_up(es_comm_t *c)
{
    pthread_mutex_lock(&c->mu);
    int id = c->hold_tp, pushed, rc;
    c->hold_tp = 0;
    if (!id || atomic_load(&c->failed)) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    CUresult cr = es_comm_ctx_enter(c, &pushed);
    CUuuid uu;
    memset(&uu, 0, sizeof(uu));
    c->dev = es_vdev_phys(c->vdev);
    if (cr == CUDA_SUCCESS)
        cr = ES_REAL(cuda, cuDeviceGetUuid_v2)(&uu, c->dev);
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    memcpy(me->uuid, uu.bytes, 16);
    me->can_device = es_mover_tslice(NULL) == NULL;
    rc = cr == CUDA_SUCCESS ? es_ctrl_barrier(c) : -EIO;
    int sliced = 0;
    for (int r = 0; r < c->nranks; r++)
        sliced |= !es_seg_rank(&c->seg, r)->can_device;
    if (rc == 0 && sliced && c->rank == 0)
        ES_INFO("collectives: communicator %016llx: an EST is time-sliced: host transport from "
                "here on", (unsigned long long)c->nonce);
    if (rc == 0 && !sliced)
        rc = es_comm_try(c, id == ES_COLL_TP_NCCL ? &es_coll_tp_nccl : &es_coll_tp_dev, id);
    else if (rc == 0)
        rc = -EAGAIN;
    if (rc == -EAGAIN)
        rc = es_comm_try(c, &es_coll_tp_host, ES_COLL_TP_HOST);
    if (rc < 0) {
        es_coll_error("communicator %016llx: its transport could not be set up again after a "
                      "hold (%d)", (unsigned long long)c->nonce, rc);
        es_comm_fail(c, ES_FAIL_LOCAL, es_comm_status_of(rc));
    } else if (c->rank == 0) {
        ES_INFO("collectives: communicator %016llx: %s transport set up again after a hold",
                (unsigned long long)c->nonce, c->tp->name);
    }
    es_comm_ctx_leave(pushed);
    pthread_mutex_unlock(&c->mu);
}

int es_comm_devmem_live(void)
{
    return atomic_load(&es_devmem_live) > 0;
}

es_comm_t *es_comm_board(void)
{
    es_comm_t *best = NULL;
    pthread_mutex_lock(&es_coll_mu);
    for (es_comm_t *c = es_comms; c; c = c->next)
        if (c->tp && c->tp_id != ES_COLL_TP_HOST && c->seg.h && !atomic_load(&c->failed) &&
            (!best || c->nranks > best->nranks ||
             (c->nranks == best->nranks && c->nonce < best->nonce)))
            best = c;
    pthread_mutex_unlock(&es_coll_mu);
    return best;
}

int es_comm_hold_begin(void)
{
    es_comm_t *cs[64];
    if (!es_vh_on || atomic_load(&es_devmem_live) == 0)
        return 0; /* nothing can move, or nothing to take down */
    int n = es_comm_snapshot(cs, 64), down = 0;
    for (int i = 0; i < n; i++)
        down += es_comm_hold_down(cs[i]);
    return down;
}

void es_comm_hold_end(void)
{
    es_comm_t *cs[64];
    int n = es_comm_snapshot(cs, 64);
    for (int i = 0; i < n; i++)
        es_comm_hold_up(cs[i]);
}

/* fn (es_xhost_hold_down or _up) on every live communicator across hosts;
 * one that fails it fails. */
static void es_comm_xhost_each(int (*fn)(es_comm_t *))
{
    es_comm_t *cs[64];
    int n = es_comm_snapshot(cs, 64);
    for (int i = 0; i < n; i++)
        if (cs[i]->x && !atomic_load(&cs[i]->failed) && fn(cs[i]) < 0)
            es_comm_fail(cs[i], ES_FAIL_LOCAL, ncclSystemError);
}

void es_comm_xhost_down(void)
{
    es_comm_xhost_each(es_xhost_hold_down);
}

void es_comm_xhost_up(void)
{
    es_comm_xhost_each(es_xhost_hold_up);
}

void *es_comm_init_thread(void *arg)
{
    es_comm_t *c = arg;
    if (c->ctx)
        ES_REAL(cuda, cuCtxSetCurrent)(c->ctx);
    es_comm_setup(c);
    return NULL;
}

void es_comm_join_init(es_comm_t *c)
{
    pthread_mutex_lock(&c->init_mu);
    if (c->init_threaded) {
        pthread_join(c->init_thread, NULL);
        c->init_threaded = 0;
    }
    pthread_mutex_unlock(&c->init_mu);
}

ncclResult_t es_comm_ready(es_comm_t *c)
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
