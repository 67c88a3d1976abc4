/* A time-sliced EST's collectives, split (docs/MOVING.md, section 6): a
 * collective of an EST that takes turns on its GPU is a contribution and a
 * completion, and neither is put on the stream when the application calls
 * it. The batch is kept here, in issue order, and the EST keeps the GPU:
 * its streams go on with everything that does not depend on a kept
 * collective. When the application asks for something that does (work on
 * a stream a kept collective is on, an event recorded after one, a
 * synchronisation: intercept/tsdefer.c decides), the EST yields once
 * (es_coll_ts_flush): it parks -- its streams drain, so every kept
 * collective's input is in its host copy exactly as its stream would have
 * read it -- contributes every kept batch from there and takes part while
 * parked (the host transport's steps in this thread), waits for its turn,
 * comes back with the results in its memory (the completions, applied at
 * its next turn, in stream order), records the events it kept, and lets
 * the application's call go on. The bits are those of the collectives run
 * one by one: same inputs, same order, same arithmetic.
 *
 * Event records on a stream with kept collectives are kept too (an event
 * recorded after a collective completes after it): cuEventQuery answers
 * not-ready, a wait on one yields. Consecutive kept all-reduces run as one
 * where every rank of their communicator agrees (es_dq_agree). Calls
 * downward only: launch.c (the parked runs), xhost_mem.c (an operation
 * across hosts in host memory, run whole), tslice.c, seg.c, util.c;
 * comm.c, enqueue.c, group.c, xhost_mem.c call here. */
#include "coll/coll_int.h"
#include "coll/digest.h"
#include "move/door.h"
#include "move/mover.h"
#include "move/swap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ES_DQ_MAX_STREAMS 64
#define ES_DQ_MAX_EVENTS 256

typedef struct es_dq_ev {
    CUevent ev;
    CUstream s;
} es_dq_ev_t;

typedef struct es_dq_batch {
    es_comm_t *c;
    int n;
    es_qop_t *ops;
    uint64_t seq;                 /* c's kept operations before this batch */
    int xhost;                    /* one operation across hosts (xhost_mem.c) */
} es_dq_batch_t;

static struct {
    pthread_mutex_t flush_mu;     /* one flush at a time (held through it) */
    pthread_mutex_t mu;           /* the lists below: held briefly, never across a wait */
    es_dq_batch_t *b;
    int nb, capb;
    struct {
        CUstream s;
        int blocking;             /* synchronises with the legacy stream */
    } st[ES_DQ_MAX_STREAMS];
    int nst;
    es_dq_ev_t ev[ES_DQ_MAX_EVENTS];
    int nev;
} es_dq = { .flush_mu = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER };

_Atomic int es_coll_ts_kept;      /* batches + events kept now (coll.h) */
static __thread int es_dq_flushing;

static void es_dq_count(void)
{
    int n = es_dq.nb + es_dq.nev;
    int was = atomic_exchange(&es_coll_ts_kept, n);
    if (!was != !n)
        es_slow_force(n != 0); /* the wrappers' checks on (shim/real.h) */
}

static int es_dq_stream_index(CUstream s)
{
    for (int i = 0; i < es_dq.nst; i++)
        if (es_dq.st[i].s == s)
            return i;
    return -1;
}

static int es_dq_event_index(CUevent e)
{
    for (int i = 0; i < es_dq.nev; i++)
        if (es_dq.ev[i].ev == e)
            return i;
    return -1;
}

/* Drops kept record i (the others keep their order). */
static void es_dq_event_drop(int i)
{
    memmove(&es_dq.ev[i], &es_dq.ev[i + 1], (size_t)(es_dq.nev - i - 1) * sizeof(es_dq.ev[0]));
    es_dq.nev--;
}

/* Marks s as holding kept work. -ENOSPC when too many streams. */
static int es_dq_mark_stream(CUstream s)
{
    if (es_dq_stream_index(s) >= 0)
        return 0;
    if (es_dq.nst == ES_DQ_MAX_STREAMS)
        return -ENOSPC;
    unsigned flags = 0;
    int legacy = s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
    if (!legacy && ES_REAL(cuda, cuStreamGetFlags)(s, &flags) != CUDA_SUCCESS)
        flags = 0;
    es_dq.st[es_dq.nst].s = s;
    es_dq.st[es_dq.nst].blocking = legacy || !(flags & CU_STREAM_NON_BLOCKING);
    es_dq.nst++;
    return 0;
}

/* Whether c's collectives are kept: its EST takes turns (a fixed rotation,
 * or a dynamic one it has entered) and c uses the host transport. */
int es_coll_ts_keeps(es_comm_t *c)
{
    return c->tp_id == ES_COLL_TP_HOST && es_mover_tslice(NULL) != NULL;
}

/* At exit, what is still kept runs (the peers wait for it). */
static void es_dq_atexit(void)
{
    if (atomic_load(&es_coll_ts_kept) && es_coll_ts_flush() < 0)
        ES_WARN("time-slicing: the collectives kept at exit could not run: %s",
                es_coll_last_error());
}

/* Keeps a checked batch (copied; xhost: one operation across hosts).
 * ncclSystemError when it cannot. */
static ncclResult_t es_dq_add(es_comm_t *c, es_qop_t **ops, int n, int xhost)
{
    ncclResult_t res = ncclSuccess;
    pthread_mutex_lock(&es_dq.mu);
    es_qop_t *copy = calloc((size_t)n, sizeof(*copy));
    es_dq_batch_t *nb = es_dq.nb == es_dq.capb
                            ? realloc(es_dq.b, (size_t)(es_dq.capb * 2 + 8) * sizeof(*nb))
                            : es_dq.b;
    if (!copy || !nb) {
        free(copy);
        es_coll_error("time-slicing: out of host memory keeping a collective");
        res = ncclSystemError;
        goto out;
    }
    if (nb != es_dq.b) {
        es_dq.b = nb;
        es_dq.capb = es_dq.capb * 2 + 8;
    }
    for (int i = 0; i < n; i++) {
        copy[i] = *ops[i];
        if (es_dq_mark_stream(ops[i]->op.stream) < 0) {
            free(copy);
            es_coll_error("time-slicing: more than %d streams with kept collectives",
                          ES_DQ_MAX_STREAMS);
            res = ncclInvalidUsage;
            goto out;
        }
    }
    static int exit_hook;
    if (!exit_hook++)
        atexit(es_dq_atexit);
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->ts_seq;
    c->ts_seq += (uint64_t)n;
    pthread_mutex_unlock(&c->mu);
    es_dq.b[es_dq.nb++] = (es_dq_batch_t){ c, n, copy, seq, xhost };
    es_dq_count();
out:
    pthread_mutex_unlock(&es_dq.mu);
    return res;
}

/* Batch a is one all-reduce that may start a fused group: something to
 * reduce, not a PreMulSum (its scalar may differ), on a communicator whose
 * every rank keeps its collectives (a fixed rotation). Every rank decides
 * this alike: the same operations, the same communicator. */
static int es_dq_fuse_head(const es_dq_batch_t *a)
{
    const es_qop_t *x = &a->ops[0];
    return a->n == 1 && !a->xhost && a->c->ts_fuse && x->op.kind == ES_OP_ALLREDUCE &&
           x->op.count && x->rop != ES_RO_PREMUL && !es_digest_enabled();
}

/* Batch b can join a's group: the same communicator, datatype, operator. */
static int es_dq_fusable(const es_dq_batch_t *a, const es_dq_batch_t *b)
{
    const es_qop_t *x = &a->ops[0], *y = &b->ops[0];
    return es_dq_fuse_head(a) && es_dq_fuse_head(b) && a->c == b->c &&
           x->op.dtype == y->op.dtype && x->rop == y->rop;
}

/* How many kept all-reduces from seq every rank fuses: each proposes how
 * many it could (consecutive in what it kept, disjoint in its memory), the
 * least wins; one control barrier. Every rank agrees for every group head,
 * so all run the same operations the same way whatever their flushes
 * hold. 0 and *n, or a negative errno (the communicator failed). */
static int es_dq_agree(es_comm_t *c, uint64_t seq, int local, int *n)
{
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    atomic_store(&me->prop_n, (uint64_t)local);
    atomic_store(&me->prop_seq, seq + 1);
    pthread_mutex_lock(&c->mu);
    int rc = es_ctrl_barrier(c);
    pthread_mutex_unlock(&c->mu);
    if (rc < 0)
        return rc;
    uint64_t m = (uint64_t)local;
    for (int r = 0; r < c->nranks; r++) {
        es_seg_rank_t *o = es_seg_rank(&c->seg, r);
        if (atomic_load(&o->prop_seq) != seq + 1) {
            es_coll_error("time-slicing: rank %d fuses another all-reduce than %llu", r,
                          (unsigned long long)seq);
            es_comm_fail(c, ES_FAIL_LOCAL, ncclInternalError);
            return -EPROTO;
        }
        uint64_t v = atomic_load(&o->prop_n);
        if (v < m)
            m = v;
    }
    *n = m ? (int)m : 1;
    return 0;
}

static int es_overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + nb && y < x + na;
}

/* Whether the all-reduces of b[0..n) touch disjoint memory (each may be
 * in place): then reading every input first and writing every output
 * after gives the bits of running them one by one. */
static int es_dq_disjoint(const es_dq_batch_t *b, int n, size_t esize)
{
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++) {
            const es_coll_op_t *x = &b[i].ops[0].op, *y = &b[k].ops[0].op;
            size_t nx = x->count * esize, ny = y->count * esize;
            if (es_overlap(x->recv, nx, y->send, ny) || es_overlap(x->recv, nx, y->recv, ny) ||
                es_overlap(x->send, nx, y->recv, ny))
                return 0;
        }
    return 1;
}

/* n fusable all-reduces as one over a host buffer: their inputs read from
 * the EST's host copies, one parked all-reduce (one round of the ranks'
 * steps instead of n), the outputs written back. Every element is folded
 * over the ranks as before: the same bits. The progress counters still
 * count n all-reduces. */
static ncclResult_t es_dq_run_fused(es_dq_batch_t *b, int n)
{
    es_comm_t *c = b[0].c;
    es_qop_t q = b[0].ops[0];
    size_t es = es_coll_type_size(q.op.dtype), total = 0;
    for (int i = 0; i < n; i++)
        total += b[i].ops[0].op.count;
    char *tmp = malloc(total * es);
    if (!tmp) {
        es_coll_error("time-slicing: out of host memory fusing %d all-reduces", n);
        return ncclSystemError;
    }
    int rc = 0;
    for (size_t i = 0, off = 0; i < (size_t)n && rc == 0; off += b[i].ops[0].op.count * es, i++)
        rc = es_swap_park_read(c->vdev, tmp + off, (CUdeviceptr)(uintptr_t)b[i].ops[0].op.send,
                               b[i].ops[0].op.count * es);
    ncclResult_t res = ncclSystemError;
    if (rc == 0) {
        q.op.send = tmp;
        q.op.recv = tmp;
        q.op.count = total;
        es_qop_t *one = &q;
        es_coll_set_parked_host(1);
        res = es_coll_launch_parked(c, &one, 1);
        es_coll_set_parked_host(0);
    } else {
        es_coll_error("time-slicing: reading a kept all-reduce's input failed (%d)", rc);
    }
    for (size_t i = 0, off = 0; i < (size_t)n && res == ncclSuccess && rc == 0;
         off += b[i].ops[0].op.count * es, i++)
        rc = es_swap_park_write(c->vdev, (CUdeviceptr)(uintptr_t)b[i].ops[0].op.recv, tmp + off,
                                b[i].ops[0].op.count * es);
    if (res == ncclSuccess && rc != 0) {
        es_coll_error("time-slicing: writing a kept all-reduce's result failed (%d)", rc);
        es_comm_fail(c, ES_FAIL_LOCAL, ncclSystemError);
        res = ncclSystemError;
    }
    if (res == ncclSuccess && es_coll_op_done_counts(&q.op))
        for (int i = 1; i < n; i++)
            es_coll_progress_add();
    free(tmp);
    return res;
}

/* One kept batch as it was called, parked. */
static ncclResult_t es_dq_run_one(es_dq_batch_t *b)
{
    if (b->xhost)
        return es_xhost_run_kept(b->c, &b->ops[0]);
    es_qop_t *list[ES_STEP_MAX * 4];
    es_qop_t **ptrs = b->n <= (int)(sizeof(list) / sizeof(list[0]))
                          ? list : calloc((size_t)b->n, sizeof(*ptrs));
    if (!ptrs)
        return ncclSystemError;
    for (int k = 0; k < b->n; k++)
        ptrs[k] = &b->ops[k];
    ncclResult_t r = es_coll_launch_parked(b->c, ptrs, b->n);
    if (ptrs != list)
        free(ptrs);
    return r;
}

/* Runs the kept batches parked, in issue order; consecutive all-reduces
 * as one where every rank agrees (es_dq_agree; not while collective
 * digests are on: they hash each operation); the first failure's status. */
static ncclResult_t es_dq_run(es_dq_batch_t *b, int nb)
{
    ncclResult_t res = ncclSuccess;
    for (int i = 0; i < nb;) {
        int j = i + 1;
        if (es_dq_fuse_head(&b[i])) {
            while (j < nb && es_dq_fusable(&b[i], &b[j]) &&
                   es_dq_disjoint(b + i, j + 1 - i, es_coll_type_size(b[i].ops[0].op.dtype)))
                j++;
            int n = 1;
            if (es_dq_agree(b[i].c, b[i].seq, j - i, &n) < 0) {
                if (res == ncclSuccess)
                    res = ncclInternalError;
                i = j; /* the communicator failed: its operations end at once */
                continue;
            }
            j = i + n;
        }
        ncclResult_t r = j - i > 1 ? es_dq_run_fused(b + i, j - i) : es_dq_run_one(&b[i]);
        if (r != ncclSuccess && res == ncclSuccess)
            res = r;
        i = j;
    }
    return res;
}

/* The kept event records, on their streams, now that the results are in. */
static int es_dq_record_events(const es_dq_ev_t *ev, int nev)
{
    int rc = 0;
    for (int i = 0; i < nev; i++) {
        CUresult r = ES_REAL(cuda, cuEventRecord)(ev[i].ev, ev[i].s);
        if (r != CUDA_SUCCESS && rc == 0) {
            es_coll_error("time-slicing: recording a kept event failed (CUresult %d)", (int)r);
            rc = -EIO;
        }
    }
    return rc;
}

/* Drops the first nb batches (only appends happen meanwhile) and the
 * events recorded (those still kept as they were), and marks again the
 * streams of what was kept meanwhile. Under mu. */
static void es_dq_drop(int nb, const es_dq_ev_t *ev, int nev)
{
    for (int i = 0; i < nb; i++)
        free(es_dq.b[i].ops);
    memmove(es_dq.b, es_dq.b + nb, (size_t)(es_dq.nb - nb) * sizeof(*es_dq.b));
    es_dq.nb -= nb;
    for (int k = 0; k < nev; k++) {
        int i = es_dq_event_index(ev[k].ev);
        if (i >= 0 && es_dq.ev[i].s == ev[k].s)
            es_dq_event_drop(i);
    }
    es_dq.nst = 0;
    for (int i = 0; i < es_dq.nb; i++)
        for (int k = 0; k < es_dq.b[i].n; k++)
            es_dq_mark_stream(es_dq.b[i].ops[k].op.stream);
    es_dq_count();
}

/* The flush lock, waited for as a safe point of the door (a thread
 * blocked here is inside a call: a park must not wait for it). */
static void es_dq_lock_flush(void)
{
    if (pthread_mutex_trylock(&es_dq.flush_mu) == 0)
        return;
    es_door_safe_begin();
    while (pthread_mutex_trylock(&es_dq.flush_mu) != 0)
        if (!es_door_safe_point())
            usleep(200);
    es_door_safe_end();
}

int es_coll_ts_flush(void)
{
    if (atomic_load(&es_coll_ts_kept) == 0 || es_dq_flushing)
        return 0;
    int rc = 0;
    es_dq_lock_flush();
    es_dq_flushing = 1;
    /* a snapshot: other threads may keep more meanwhile (appended) */
    pthread_mutex_lock(&es_dq.mu);
    int nb = es_dq.nb, nev = es_dq.nev;
    es_dq_batch_t *b = malloc((size_t)(nb ? nb : 1) * sizeof(*b));
    es_dq_ev_t ev[ES_DQ_MAX_EVENTS];
    if (b)
        memcpy(b, es_dq.b, (size_t)nb * sizeof(*b));
    memcpy(ev, es_dq.ev, (size_t)nev * sizeof(ev[0]));
    pthread_mutex_unlock(&es_dq.mu);
    if (!b) {
        es_coll_error("time-slicing: out of host memory");
        rc = -1;
        nb = 0;
    }
    if (nb) {
        int parked = es_coll_ts_park();
        if (parked <= 0) {
            /* not time-sliced any more (changes flush first), or the
             * yield failed: the kept collectives cannot run */
            if (parked == 0)
                es_coll_error("time-slicing: collectives kept, but the EST takes no turns");
            rc = -1;
            for (int i = 0; i < nb; i++)
                es_comm_fail(b[i].c, ES_FAIL_LOCAL, ncclSystemError);
        } else {
            es_dq_run(b, nb); /* failures are the communicators' */
            if (es_coll_ts_resume() < 0)
                rc = -1;
        }
    }
    if (rc == 0 && es_dq_record_events(ev, nev) < 0)
        rc = -1;
    pthread_mutex_lock(&es_dq.mu);
    es_dq_drop(nb, ev, nev);
    pthread_mutex_unlock(&es_dq.mu);
    free(b);
    es_dq_flushing = 0;
    pthread_mutex_unlock(&es_dq.flush_mu);
    return rc;
}

/* ---- what the wrappers ask (coll.h) --------------------------------------------------- */

int es_coll_ts_busy(void)
{
    return es_dq_flushing;
}

int es_coll_ts_stream_kept(CUstream s, int legacy_too)
{
    int yes = 0;
    pthread_mutex_lock(&es_dq.mu);
    int legacy = s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
    for (int i = 0; i < es_dq.nst && !yes; i++)
        yes = es_dq.st[i].s == s || (legacy && legacy_too && es_dq.st[i].blocking);
    for (int i = 0; i < es_dq.nev && !yes; i++) /* a kept record only (no collective) */
        yes = es_dq.ev[i].s == s;
    pthread_mutex_unlock(&es_dq.mu);
    return yes;
}

int es_coll_ts_event_kept(CUevent e)
{
    pthread_mutex_lock(&es_dq.mu);
    int yes = es_dq_event_index(e) >= 0;
    pthread_mutex_unlock(&es_dq.mu);
    return yes;
}

int es_coll_ts_keep_record(CUevent e, CUstream s)
{
    int rc = 0;
    pthread_mutex_lock(&es_dq.mu);
    int i = es_dq_event_index(e);
    if (i >= 0) /* recorded again: the last record counts */
        es_dq_event_drop(i);
    if (es_dq.nev == ES_DQ_MAX_EVENTS)
        rc = -ENOSPC;
    else
        es_dq.ev[es_dq.nev++] = (es_dq_ev_t){ e, s };
    es_dq_count();
    pthread_mutex_unlock(&es_dq.mu);
    return rc;
}

void es_coll_ts_forget_event(CUevent e)
{
    pthread_mutex_lock(&es_dq.mu);
    int i = es_dq_event_index(e);
    if (i >= 0) {
        es_dq_event_drop(i);
        es_dq_count();
    }
    pthread_mutex_unlock(&es_dq.mu);
}

/* ---- the operations' way in ------------------------------------------------------------ */

/* The start of a collective on c: ncclSuccess when it may go on. */
static ncclResult_t es_dq_begin(es_comm_t *c)
{
    /* a rotation change is applied at the start of a collective, after
     * what was kept before it ran (a member that leaves takes nothing
     * along) */
    if (es_mover_ts_pending() && es_coll_ts_flush() < 0)
        return ncclUnhandledCudaError;
    es_coll_ts_apply();
    ncclResult_t res = es_comm_ready(c);
    if (res != ncclSuccess)
        return res;
    if (atomic_load(&c->failed))
        return atomic_load(&c->async);
    return ncclSuccess;
}

/* Kept (a time-sliced EST), or run now after what is kept: a batch of the
 * engine, or (xhost) one operation across hosts in host memory. */
static ncclResult_t es_dq_submit(es_comm_t *c, es_qop_t **ops, int n, int xhost)
{
    ncclResult_t res = es_dq_begin(c);
    if (res != ncclSuccess)
        return res;
    if (es_coll_ts_keeps(c))
        return es_dq_add(c, ops, n, xhost);
    if (es_coll_ts_flush() < 0) /* kept ones first, in issue order */
        return ncclUnhandledCudaError;
    return xhost ? es_xhost_run_now(c, ops[0]) : es_coll_launch(c, ops, n);
}

ncclResult_t es_coll_submit(es_comm_t *c, es_qop_t **ops, int n)
{
    return es_dq_submit(c, ops, n, 0);
}

ncclResult_t es_coll_submit_xhost(es_comm_t *c, es_qop_t *q)
{
    return es_dq_submit(c, &q, 1, 1);
}
