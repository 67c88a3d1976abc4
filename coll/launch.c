/* Runs a batch of checked operations of one virtual communicator on the
 * application's stream (a single operation, or a group's operations on
 * that communicator): joins the batch's other streams and the
 * communicator's previous stream with events, hashes the digests
 * (EASYSCALE_DIGEST, digest.c), hands the collectives and the
 * point-to-point batch to the communicator's transport (through its
 * struct; self pairs are copies here); or, for a time-sliced EST that
 * yielded (defer.c), runs the batch parked (no driver call: tslice.c).
 * Called by defer.c; calls init.c, the transport, digest.c, tslice.c,
 * seg.c and util.c. */
#include "coll/coll_int.h"
#include "coll/digest.h"

#include <stdlib.h>
#include <string.h>

/* The batch being run. */
typedef struct es_run {
    es_comm_t *c;
    es_qop_t **ops;
    int n;
    CUstream s;                   /* the first operation's: the batch runs on it */
    int parked;                   /* time-sliced and parked: no driver call */
    CUstream others[ES_STEP_MAX]; /* the other streams, joined by events */
    CUevent evs[ES_STEP_MAX];
    int nothers;
    es_p2p_t *p2p;                /* the point-to-point batch */
    int np2p;
} es_run_t;

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

/* Makes s wait for the batch's other streams. ncclInvalidUsage with too
 * many of them; a failing driver call in *r. */
static ncclResult_t es_run_join(es_run_t *R, CUresult *r)
{
    for (int i = 1; i < R->n && *r == CUDA_SUCCESS && !R->parked; i++) {
        CUstream o = R->ops[i]->op.stream;
        int seen = o == R->s;
        for (int k = 0; k < R->nothers && !seen; k++)
            seen = R->others[k] == o;
        if (seen)
            continue;
        if (R->nothers == ES_STEP_MAX) {
            es_coll_error("a group uses more than %d streams on one communicator", ES_STEP_MAX);
            return ncclInvalidUsage;
        }
        R->others[R->nothers] = o;
        *r = ES_REAL(cuda, cuEventCreate)(&R->evs[R->nothers], CU_EVENT_DISABLE_TIMING);
        if (*r == CUDA_SUCCESS)
            *r = ES_REAL(cuda, cuEventRecord)(R->evs[R->nothers], o);
        if (*r == CUDA_SUCCESS)
            *r = ES_REAL(cuda, cuStreamWaitEvent)(R->s, R->evs[R->nothers], 0);
        R->nothers++;
    }
    return ncclSuccess;
}

/* The receive from self that the send ops[i] to self pairs with (the n-th
 * self send with the n-th self recv), or -1. */
static int es_run_self_recv(es_qop_t **ops, int n, int i, int rank)
{
    int k = -1;
    int nth = 0;
    for (int j = 0; j < i; j++)
        nth += ops[j]->op.kind == ES_OP_SEND && ops[j]->op.root == rank && ops[j]->op.count;
    for (int j = 0, m = 0; j < n && k < 0; j++)
        if (ops[j]->op.kind == ES_OP_RECV && ops[j]->op.root == rank && ops[j]->op.count &&
            m++ == nth)
            k = j;
    return k;
}

/* Point to point: self pairs are copies now; the rest go into R->p2p.
 * ncclInvalidUsage for a send to self without its receive; a failing
 * driver call in *r. */
static ncclResult_t es_run_pairs(es_run_t *R, CUresult *r)
{
    es_comm_t *c = R->c;
    es_qop_t **ops = R->ops;
    int n = R->n;
    if (*r == CUDA_SUCCESS) {
        R->p2p = calloc(n > 0 ? (size_t)n : 1, sizeof(*R->p2p));
        if (!R->p2p)
            *r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < n && *r == CUDA_SUCCESS; i++) {
        es_qop_t *q = ops[i];
        if ((q->op.kind != ES_OP_SEND && q->op.kind != ES_OP_RECV) || q->op.count == 0)
            continue;
        size_t bytes = q->op.count * es_coll_type_size(q->op.dtype);
        if (q->op.root == c->rank) {
            if (q->op.kind == ES_OP_RECV)
                continue; /* matched by the send below */
            int k = es_run_self_recv(ops, n, i, c->rank);
            if (k < 0 || ops[k]->op.count * es_coll_type_size(ops[k]->op.dtype) != bytes) {
                es_coll_error("ncclSend to self without a matching ncclRecv from self in the "
                              "group");
                return ncclInvalidUsage;
            }
            if (R->parked)
                *r = es_coll_parked_copy(c->vdev, ops[k]->op.recv, q->op.send, bytes);
            else
                *r = ES_REAL(cuda, cuMemcpyDtoDAsync_v2)((CUdeviceptr)(uintptr_t)ops[k]->op.recv,
                                                         (CUdeviceptr)(uintptr_t)q->op.send,
                                                         bytes, R->s);
            continue;
        }
        R->p2p[R->np2p++] = (es_p2p_t){ q->op.kind == ES_OP_SEND, q->op.root,
                                        q->op.kind == ES_OP_SEND ? (char *)q->op.send
                                                                 : (char *)q->op.recv,
                                        bytes };
    }
    return ncclSuccess;
}

/* After the batch: the communicator's last event, and the other streams
 * wait for s. */
static CUresult es_run_close(es_run_t *R, CUresult r)
{
    es_comm_t *c = R->c;
    if (r == CUDA_SUCCESS && !R->parked) {
        r = ES_REAL(cuda, cuEventRecord)(c->ev_last, R->s);
        c->last_stream = R->s;
        c->have_ops = 1;
    }
    for (int k = 0; k < R->nothers; k++) {
        if (r == CUDA_SUCCESS) {
            CUresult r2 = ES_REAL(cuda, cuEventRecord)(R->evs[k], R->s);
            if (r2 == CUDA_SUCCESS)
                r2 = ES_REAL(cuda, cuStreamWaitEvent)(R->others[k], R->evs[k], 0);
            if (r2 != CUDA_SUCCESS)
                r = r2;
        }
    }
    return r;
}

/* The batch under c->mu, c's context current (or parked). */
static ncclResult_t es_run_locked(es_run_t *R, CUresult r)
{
    es_comm_t *c = R->c;
    es_qop_t **ops = R->ops;
    int n = R->n, parked = R->parked;
    CUstream s = R->s;
    es_digest_batch_t dg;
    dg.n = 0;
    ncclResult_t res = es_run_join(R, &r);
    if (res != ncclSuccess)
        goto out;
    /* Operations of a communicator run in issue order. */
    if (r == CUDA_SUCCESS && c->have_ops && c->last_stream != s && !parked)
        r = ES_REAL(cuda, cuStreamWaitEvent)(s, c->ev_last, 0);
    /* plain host buffers (an operation across hosts in host memory,
     * xhost_mem.c) are not the application's: not digested */
    if (r == CUDA_SUCCESS && es_digest_enabled() && !(parked && es_coll_parked_host()))
        es_digest_ops(c, ops, n, s, parked, &dg);
    for (int i = 0; i < n && r == CUDA_SUCCESS; i++) {
        es_qop_t *q = ops[i];
        if (q->op.kind == ES_OP_SEND || q->op.kind == ES_OP_RECV)
            continue;
        if (q->op.count == 0)
            continue;
        r = c->tp->coll(c, &q->op, q->rop, &q->pm, s);
    }
    res = es_run_pairs(R, &r);
    if (res != ncclSuccess)
        goto out;
    if (r == CUDA_SUCCESS && R->np2p)
        r = c->tp->p2p(c, R->p2p, R->np2p, s);
    if (r == CUDA_SUCCESS && dg.n) {
        if (parked)
            es_digest_end_parked(&dg);
        else
            es_digest_end(&dg, s);
    }
    r = es_run_close(R, r);
    if (r != CUDA_SUCCESS && atomic_load(&c->failed)) {
        /* The communicator failed while this was enqueued (the watchdog
         * saw a peer die): that is the error, not the enqueue's. */
        res = atomic_load(&c->async);
        es_coll_error("communicator rank %d of %d failed while an operation was enqueued",
                      c->rank, c->nranks);
    } else if (r != CUDA_SUCCESS) {
        /* Part of an operation may be queued: this rank's order is broken;
         * the communicator (and its peers) fail rather than hang. */
        es_coll_error("enqueueing on the stream failed (CUresult %d)", (int)r);
        es_comm_fail(c, ES_FAIL_LOCAL, ncclUnhandledCudaError);
        res = ncclUnhandledCudaError;
    }
out:
    if (dg.n)
        es_digest_cancel(&dg);
    return res;
}

/* The batch under c->mu: on its stream in c's context, or parked. */
static ncclResult_t es_launch_as(es_comm_t *c, es_qop_t **ops, int n, int parked)
{
    pthread_mutex_lock(&c->mu);
    if (!c->tp) { /* aborted meanwhile by another thread */
        pthread_mutex_unlock(&c->mu);
        es_coll_error("the communicator was aborted");
        return ncclInvalidUsage;
    }
    int pushed = 0;
    CUresult r = CUDA_SUCCESS;
    if (parked)
        es_coll_set_parked_vdev(c->vdev);
    else
        r = es_comm_ctx_enter(c, &pushed);
    es_run_t R = { .c = c, .ops = ops, .n = n, .s = ops[0]->op.stream, .parked = parked };
    ncclResult_t res = es_run_locked(&R, r);
    for (int k = 0; k < R.nothers; k++)
        ES_REAL(cuda, cuEventDestroy_v2)(R.evs[k]);
    free(R.p2p);
    es_comm_ctx_leave(pushed);
    es_coll_set_parked_vdev(-1);
    pthread_mutex_unlock(&c->mu);
    return res;
}

ncclResult_t es_coll_launch(es_comm_t *c, es_qop_t **ops, int n)
{
    ncclResult_t res = es_comm_ready(c);
    if (res != ncclSuccess)
        return res;
    if (atomic_load(&c->failed))
        return atomic_load(&c->async);
    return es_launch_as(c, ops, n, 0);
}

ncclResult_t es_coll_launch_parked(es_comm_t *c, es_qop_t **ops, int n)
{
    if (atomic_load(&c->failed))
        return atomic_load(&c->async);
    return es_launch_as(c, ops, n, 1);
}
