/* The levels of a communicator across hosts above a host, in host memory:
 * the way of a job whose ESTs are time-sliced (EASYSCALE_TIME_SLICE in the
 * process that made the unique id; every process must have it alike).
 *
 * A time-sliced EST has no context on any GPU while it takes part in its
 * kept collectives (defer.c: it parks first), so it can neither make NCCL
 * calls nor launch the fold kernel. Here an operation across hosts runs
 * whole in the calling thread: the rank's input read from its memory (its
 * host copies while parked, move/swap.h; else from the GPU after its
 * context is synchronised), the steps inside the host on the engine's
 * host transport over host buffers (es_coll_launch_parked, as defer.c's
 * fused all-reduces), and the hosts' leaders' links (xsock.c) between the
 * hosts; the result written back to the rank's memory.
 *
 * The order is the one of xhost.c, element for element: host 0 folds its
 * ranks into P0; host h's leader receives the partial of the hosts before
 * it and contributes P (+) x[hK] in its input's place (one fold step on
 * the CPU, kernels/reduce_kernels.h's arithmetic, as the host transport
 * folds), so host h's fold continues the rank-order fold; the last host
 * has the result (avg: each of its ranks divides once by N), which its
 * leader sends to the others, who broadcast it inside their host.
 * Broadcast and all-gather are data movement, reduce and reduce-scatter
 * the all-reduce with each rank's part written out, PreMulSum each rank's
 * input scaled first (rounded to the datatype, as the engine does): the
 * bits of one host. Host 0's leader relays what goes between two other
 * hosts (the links are a star). Every operation is numbered alike on every
 * rank; every message carries the number, so hosts that issue different
 * collectives fail with the reason instead of mixing them up.
 *
 * Called by defer.c (an operation kept or run now) and xhost.c (the
 * links); calls launch.c (the parked steps), transport/host.c (the CPU
 * fold, es_coll_cpu_fold), tslice.c, xsock.c, move/swap.h. */
#include "coll/xhost_int.h"
#include "kernels/reduce.h"
#include "move/swap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One operation under way. */
typedef struct es_xhm {
    es_comm_t *c;
    es_xhost_t *x;
    const es_qop_t *q;
    int parked;             /* its memory is in its host copies */
    uint64_t tag;           /* its number << 16 */
    char *t, *p;            /* scratch host buffers of the operation's size */
} es_xhm_t;

enum { ES_XHM_PARTIAL = 1, ES_XHM_RESULT, ES_XHM_BCAST, ES_XHM_BLOCK, ES_XHM_ALL };

static uint64_t es_xhm_tag(const es_xhm_t *m, int part, int host)
{
    return m->tag | (uint64_t)part << 8 | (uint64_t)host;
}

/* ---- the rank's memory ------------------------------------------------------------ */

static int es_xhm_read(const es_xhm_t *m, void *dst, const void *src, size_t n)
{
    if (!n)
        return 0;
    if (m->parked)
        return es_swap_park_read(m->c->vdev, dst, (CUdeviceptr)(uintptr_t)src, n);
    int pushed = 0;
    CUresult r = es_comm_ctx_enter(m->c, &pushed);
    if (r == CUDA_SUCCESS)
        r = ES_REAL(cuda, cuMemcpyDtoH_v2)(dst, (CUdeviceptr)(uintptr_t)src, n);
    es_comm_ctx_leave(pushed);
    return r == CUDA_SUCCESS ? 0 : -EIO;
}

static int es_xhm_write(const es_xhm_t *m, void *dst, const void *src, size_t n)
{
    if (!n)
        return 0;
    if (m->parked)
        return es_swap_park_write(m->c->vdev, (CUdeviceptr)(uintptr_t)dst, src, n);
    int pushed = 0;
    CUresult r = es_comm_ctx_enter(m->c, &pushed);
    if (r == CUDA_SUCCESS)
        r = ES_REAL(cuda, cuMemcpyHtoD_v2)((CUdeviceptr)(uintptr_t)dst, src, n);
    es_comm_ctx_leave(pushed);
    return r == CUDA_SUCCESS ? 0 : -EIO;
}

/* A resident rank: what its streams hold before the operation done (its
 * input written, the host's earlier steps run). */
static int es_xhm_settle(const es_xhm_t *m)
{
    int pushed = 0;
    CUresult r = es_comm_ctx_enter(m->c, &pushed);
    if (r == CUDA_SUCCESS)
        r = ES_REAL(cuda, cuCtxSynchronize)();
    es_comm_ctx_leave(pushed);
    return r == CUDA_SUCCESS ? 0 : -EIO;
}

/* ---- the parts ---------------------------------------------------------------------- */

/* One operation of the host's ranks over host buffers, in this thread. */
static ncclResult_t es_xhm_local(const es_xhm_t *m, int kind, const void *send, void *recv,
                                 size_t count, int rop, int root, int done)
{
    es_qop_t q;
    memset(&q, 0, sizeof(q));
    q.op = (es_coll_op_t){ .kind = kind, .comm = m->c, .send = send, .recv = recv,
                           .count = count, .dtype = m->q->op.dtype, .op = rop, .root = root,
                           .stream = m->q->op.stream, .quiet_issue = 1, .quiet_done = !done };
    q.rop = rop;
    es_qop_t *one = &q;
    es_coll_set_parked_host(1);
    ncclResult_t r = es_coll_launch_parked(m->c, &one, 1);
    es_coll_set_parked_host(0);
    return r;
}

/* buf := op(buf) or op(in0, buf), through t (n bytes). */
static void es_xhm_fold(const es_xhm_t *m, char *buf, const char *in0, char *t, size_t count,
                        int op, int divisor, es_u64 scalar)
{
    es_red_args_t a;
    memset(&a, 0, sizeof(a));
    a.in[0] = in0 ? (const void *)in0 : buf;
    a.in[1] = buf;
    a.nin = in0 ? 2 : 1;
    a.out = t;
    a.count = count;
    a.dtype = m->q->op.dtype;
    a.op = op;
    a.divisor = divisor;
    es_coll_cpu_fold(&a, scalar);
    memcpy(buf, t, count * es_coll_type_size(m->q->op.dtype));
}

static ncclResult_t es_xhm_net(int rc)
{
    return rc == 0 ? ncclSuccess : rc == -EPROTO ? ncclInvalidUsage : ncclRemoteError;
}

#define ES_XHM_SEND(m, peer, part, from, buf, n)                                               \
    es_xhm_net(es_xs_send((m)->x->xs, peer, es_xhm_tag(m, part, from), buf, n,                 \
                          (m)->c->timeout_ms))
#define ES_XHM_RECV(m, peer, part, from, buf, n)                                               \
    es_xhm_net(es_xs_recv((m)->x->xs, peer, es_xhm_tag(m, part, from), buf, n,                 \
                          (m)->c->timeout_ms))

/* The leader: the partial of hosts 0..h-1 in (host h > 0), buf's fold
 * continued. */
static ncclResult_t es_xhm_continue(const es_xhm_t *m, char *buf, char *t, char *p, size_t count,
                                    int lop)
{
    size_t n = count * es_coll_type_size(m->q->op.dtype);
    ncclResult_t r = ES_XHM_RECV(m, 0, ES_XHM_PARTIAL, m->x->host - 1, p, n);
    if (r == ncclSuccess)
        es_xhm_fold(m, buf, p, t, count, lop, 1, 0);
    return r;
}

/* The leader: the host's partial on to the next host (host 0 relays the
 * others' on, in order). */
static ncclResult_t es_xhm_onward(const es_xhm_t *m, const char *buf, char *t, size_t n)
{
    es_xhost_t *x = m->x;
    if (x->host > 0)
        return x->host < x->nhosts - 1 ? ES_XHM_SEND(m, 0, ES_XHM_PARTIAL, x->host, buf, n)
                                       : ncclSuccess;
    ncclResult_t r = ES_XHM_SEND(m, 1, ES_XHM_PARTIAL, 0, buf, n);
    for (int h = 1; r == ncclSuccess && h < x->nhosts - 1; h++) {
        r = ES_XHM_RECV(m, h, ES_XHM_PARTIAL, h, t, n);
        if (r == ncclSuccess)
            r = ES_XHM_SEND(m, h + 1, ES_XHM_PARTIAL, h, t, n);
    }
    return r;
}

/* The leader: the result from the last host to every other host. */
static ncclResult_t es_xhm_result(const es_xhm_t *m, char *buf, size_t n)
{
    es_xhost_t *x = m->x;
    int last = x->nhosts - 1;
    if (x->host == last)
        return ES_XHM_SEND(m, 0, ES_XHM_RESULT, last, buf, n);
    if (x->host > 0)
        return ES_XHM_RECV(m, 0, ES_XHM_RESULT, last, buf, n);
    ncclResult_t r = ES_XHM_RECV(m, last, ES_XHM_RESULT, last, buf, n);
    for (int h = 1; r == ncclSuccess && h < last; h++)
        r = ES_XHM_SEND(m, h, ES_XHM_RESULT, last, buf, n);
    return r;
}

/* buf: this rank's input (scaled) in, the all-reduce of every rank's out. */
static ncclResult_t es_xhm_allreduce(const es_xhm_t *m, char *buf, size_t count, int done)
{
    es_xhost_t *x = m->x;
    int rop = m->q->rop, last = x->host == x->nhosts - 1, lead = x->lrank == 0;
    int lop = rop == ES_RO_AVG || rop == ES_RO_PREMUL ? ES_RO_SUM : rop;
    size_t n = count * es_coll_type_size(m->q->op.dtype);
    char *t = m->t, *p = m->p;
    ncclResult_t r = ncclSuccess;
    if (lead && x->host > 0)
        r = es_xhm_continue(m, buf, t, p, count, lop);
    if (r == ncclSuccess)
        r = es_xhm_local(m, ES_OP_ALLREDUCE, buf, buf, count, lop, 0, done);
    if (r == ncclSuccess && lead)
        r = es_xhm_onward(m, buf, t, n);
    if (r == ncclSuccess && last && rop == ES_RO_AVG)
        es_xhm_fold(m, buf, NULL, t, count, ES_RO_AVG, x->nranks, 0);
    if (r == ncclSuccess && lead)
        r = es_xhm_result(m, buf, n);
    if (r == ncclSuccess && !last)
        r = es_xhm_local(m, ES_OP_BROADCAST, buf, buf, count, 0, 0, 0);
    return r;
}

/* buf: the root's input on the root, its bytes everywhere after. */
static ncclResult_t es_xhm_broadcast(const es_xhm_t *m, char *buf, size_t count)
{
    es_xhost_t *x = m->x;
    int hr = m->q->op.root / x->k;
    size_t n = count * es_coll_type_size(m->q->op.dtype);
    ncclResult_t r = ncclSuccess;
    if (x->host == hr)
        r = es_xhm_local(m, ES_OP_BROADCAST, buf, buf, count, 0, m->q->op.root % x->k, 0);
    if (r == ncclSuccess && x->lrank == 0) {
        if (x->host == hr && hr > 0)
            r = ES_XHM_SEND(m, 0, ES_XHM_BCAST, hr, buf, n);
        else if (x->host > 0)
            r = ES_XHM_RECV(m, 0, ES_XHM_BCAST, hr, buf, n);
        else if (hr > 0)
            r = ES_XHM_RECV(m, hr, ES_XHM_BCAST, hr, buf, n);
        for (int h = 1; r == ncclSuccess && x->host == 0 && h < x->nhosts; h++)
            if (h != hr)
                r = ES_XHM_SEND(m, h, ES_XHM_BCAST, hr, buf, n);
    }
    if (r == ncclSuccess && x->host != hr)
        r = es_xhm_local(m, ES_OP_BROADCAST, buf, buf, count, 0, 0, 0);
    return r;
}

/* in: this rank's count elements; buf: every rank's after. */
static ncclResult_t es_xhm_allgather(const es_xhm_t *m, const char *in, char *buf, size_t count)
{
    es_xhost_t *x = m->x;
    size_t blk = (size_t)x->k * count * es_coll_type_size(m->q->op.dtype);
    ncclResult_t r = es_xhm_local(m, ES_OP_ALLGATHER, in, buf + (size_t)x->host * blk, count, 0,
                                  0, 0);
    if (r == ncclSuccess && x->lrank == 0 && x->host > 0) {
        r = ES_XHM_SEND(m, 0, ES_XHM_BLOCK, x->host, buf + (size_t)x->host * blk, blk);
        if (r == ncclSuccess)
            r = ES_XHM_RECV(m, 0, ES_XHM_ALL, 0, buf, blk * (size_t)x->nhosts);
    } else if (r == ncclSuccess && x->lrank == 0) {
        for (int h = 1; r == ncclSuccess && h < x->nhosts; h++)
            r = ES_XHM_RECV(m, h, ES_XHM_BLOCK, h, buf + (size_t)h * blk, blk);
        for (int h = 1; r == ncclSuccess && h < x->nhosts; h++)
            r = ES_XHM_SEND(m, h, ES_XHM_ALL, 0, buf, blk * (size_t)x->nhosts);
    }
    if (r == ncclSuccess)
        r = es_xhm_local(m, ES_OP_BROADCAST, buf, buf, count * (size_t)x->nranks, 0, 0, 0);
    return r;
}

/* ---- an operation ------------------------------------------------------------------- */

/* This rank's input of a reducing operation into buf (all elements),
 * scaled by its PreMulSum scalar when it has one. */
static int es_xhm_input(const es_xhm_t *m, char *buf, char *t, size_t all)
{
    const es_qop_t *q = m->q;
    size_t ts = es_coll_type_size(q->op.dtype);
    int rc = es_xhm_read(m, buf, q->op.send, all * ts);
    if (rc < 0 || q->rop != ES_RO_PREMUL)
        return rc;
    es_u64 s = q->pm.value;
    if (q->pm.on_device) {
        s = 0;
        rc = es_xhm_read(m, &s, q->pm.dev, ts);
    }
    if (rc == 0)
        es_xhm_fold(m, buf, NULL, t, all, ES_RO_PREMUL, 1, s);
    return rc;
}

static ncclResult_t es_xhm_kind(const es_xhm_t *m, char *buf)
{
    char *t = m->t;
    const es_coll_op_t *o = &m->q->op;
    es_xhost_t *x = m->x;
    size_t ts = es_coll_type_size(o->dtype), cnt = o->count;
    int rc = 0;
    ncclResult_t r = ncclSuccess;
    if (o->kind == ES_OP_ALLGATHER) {
        if ((rc = es_xhm_read(m, t, o->send, cnt * ts)) == 0 &&
            (r = es_xhm_allgather(m, t, buf, cnt)) == ncclSuccess)
            rc = es_xhm_write(m, o->recv, buf, cnt * ts * (size_t)x->nranks);
    } else if (o->kind == ES_OP_BROADCAST) {
        if (x->rank == o->root)
            rc = es_xhm_read(m, buf, o->send, cnt * ts);
        if (rc == 0 && (r = es_xhm_broadcast(m, buf, cnt)) == ncclSuccess)
            rc = es_xhm_write(m, o->recv, buf, cnt * ts);
    } else {
        int scatter = o->kind == ES_OP_REDUCESCATTER;
        size_t all = scatter ? cnt * (size_t)x->nranks : cnt;
        int done = o->kind == ES_OP_ALLREDUCE && es_coll_counts_step(o->kind, o->dtype);
        if ((rc = es_xhm_input(m, buf, t, all)) == 0 &&
            (r = es_xhm_allreduce(m, buf, all, done)) == ncclSuccess) {
            if (scatter)
                rc = es_xhm_write(m, o->recv, buf + (size_t)x->rank * cnt * ts, cnt * ts);
            else if (o->kind == ES_OP_ALLREDUCE || x->rank == o->root)
                rc = es_xhm_write(m, o->recv, buf, cnt * ts);
        }
    }
    if (r == ncclSuccess && rc < 0) {
        es_coll_error("collectives across hosts: %s: %s this rank's memory failed (%d)",
                      es_coll_op_name(o->kind), m->parked ? "the host copies of" : "copying",
                      rc);
        r = ncclUnhandledCudaError;
    }
    return r;
}

/* The communicator's three host buffers, of n bytes at least. */
static int es_xhm_buffers(es_xhost_t *x, size_t n)
{
    if (x->hb_bytes >= n && x->hb[0])
        return 0;
    es_xhost_free_buffers(x);
    for (int i = 0; i < 3; i++)
        if (!(x->hb[i] = malloc(n ? n : 1))) {
            es_xhost_free_buffers(x);
            return -ENOMEM;
        }
    x->hb_bytes = n;
    return 0;
}

void es_xhost_free_buffers(es_xhost_t *x)
{
    for (int i = 0; i < 3; i++) {
        free(x->hb[i]);
        x->hb[i] = NULL;
    }
    x->hb_bytes = 0;
}

/* One operation, whole, in this thread (parked: a time-sliced EST at its
 * yield). A failure fails the host's communicator (its ranks wait for
 * this one). */
static ncclResult_t es_xhm_run(es_comm_t *c, const es_qop_t *q, int parked)
{
    es_xhost_t *x = c->x;
    es_xhm_t m = { c, x, q, parked, ++x->nop << 16, NULL, NULL };
    size_t ts = es_coll_type_size(q->op.dtype), n = q->op.count * ts;
    if (q->op.kind == ES_OP_ALLGATHER || q->op.kind == ES_OP_REDUCESCATTER)
        n *= (size_t)x->nranks;
    ncclResult_t r = ncclSuccess;
    if (es_xhm_buffers(x, n) < 0) {
        es_coll_error("collectives across hosts: no host memory for 3 x %zu bytes", n);
        r = ncclSystemError;
    } else if (!parked && es_xhm_settle(&m) < 0) {
        es_coll_error("collectives across hosts: synchronising the context before %s failed",
                      es_coll_op_name(q->op.kind));
        r = ncclUnhandledCudaError;
    }
    m.t = x->hb[1];
    m.p = x->hb[2];
    if (r == ncclSuccess)
        r = es_xhm_kind(&m, x->hb[0]);
    if (r != ncclSuccess && !atomic_load(&c->failed))
        es_comm_fail(c, ES_FAIL_LOCAL, r);
    return r;
}

ncclResult_t es_xhost_run_kept(es_comm_t *c, const es_qop_t *q)
{
    if (!c->x || !c->x->mem)
        return ncclInternalError;
    if (atomic_load(&c->failed))
        return atomic_load(&c->async);
    return es_xhm_run(c, q, 1);
}

ncclResult_t es_xhost_run_now(es_comm_t *c, const es_qop_t *q)
{
    return es_xhm_run(c, q, 0);
}

/* ---- the links ------------------------------------------------------------------------ */

ncclResult_t es_xhm_connect(es_comm_t *c)
{
    es_xhost_t *x = c->x;
    if (x->lrank != 0)
        return ncclSuccess;
    /* the others may wait for their turns; not a collective's start (only
     * the leaders are here: the rotation counts collectives alike on every
     * rank, es_mover_ts_apply) */
    int parked = es_coll_ts_park();
    if (parked < 0)
        return ncclSystemError;
    int rc = es_xs_join(&x->xs, &x->addr, x->host, x->nhosts, x->k, c->timeout_ms);
    if (parked > 0 && es_coll_ts_resume() < 0 && rc == 0)
        rc = -EIO;
    return rc == 0 ? ncclSuccess : rc == -EPROTO || rc == -EINVAL ? ncclInvalidUsage
                                                                   : ncclRemoteError;
}
