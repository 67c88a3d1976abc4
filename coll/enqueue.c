/* The operations of the virtual collectives (coll.h, es_coll_enqueue):
 * argument checks (datatype, operator, root or peer, count, buffers, a
 * stream under capture), the scheduled hold of a step-counting
 * all-reduce, then the operation is queued in the thread's group or run
 * at once (defer.c). Calls group.c, defer.c, init.c (the registry) and
 * util.c. */
#include "coll/coll_int.h"
#include "move/door.h"
#include "move/mover.h"
#include "shim/step.h"

#include <string.h>

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
    uint64_t step, idx = es_step_issue();
    es_jobhold_issue(idx, in_group);
    if (!es_step_hold_due(idx, &step) || in_group)
        return; /* inside a group: the group's operations would not run; the next one waits */
    /* a time-sliced EST's step settles at the hold only once what it kept
     * has run (the others wait for its part too) */
    es_coll_ts_flush();
    /* the controller's holds are of every EST of every host: the leaders'
     * communicators across hosts go down too, and come back after */
    es_comm_xhost_down();
    int down = es_comm_hold_begin();
    es_door_safe_begin();
    int rc = es_step_hold_wait(step, es_hold_poll, NULL);
    es_door_safe_end();
    /* A rotation change ended the wait while device staging is down: it
     * is made here, before the staging is set up again, since that needs
     * every EST, and the ESTs the change leaves out wait for its outcome
     * (the controller releases the hold after it). */
    if (rc == 1 && down > 0)
        es_coll_ts_apply_early();
    es_comm_hold_end();
    es_comm_xhost_up();
}

/* ---- operations ------------------------------------------------------------------- */


static ncclResult_t es_check_op(const es_coll_op_t *o, es_qop_t *q)
{
    const char *nm = es_coll_op_name(o->kind);
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
            ncclResult_t r = es_coll_premul_get(c, o->op, o->dtype, nm, &q->pm);
            if (r != ncclSuccess)
                return r;
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

ncclResult_t es_coll_enqueue_local(const es_coll_op_t *o)
{
    if (!es_coll_valid(o->comm)) {
        es_coll_error("%s: invalid communicator",
                      es_coll_op_name(o->kind));
        es_group_note_error(ncclInvalidArgument);
        return ncclInvalidArgument;
    }
    return es_coll_enqueue_valid(o);
}

ncclResult_t es_coll_enqueue_valid(const es_coll_op_t *o)
{
    es_qop_t q;
    ncclResult_t res = es_check_op(o, &q);
    if (res != ncclSuccess) {
        es_group_note_error(res);
        return res;
    }
    if (q.op.count && !q.op.quiet_issue && es_coll_counts_step(q.op.kind, q.op.dtype))
        es_coll_step_start(es_group_depth() > 0);
    if (es_group_depth() > 0)
        return es_group_queue_op(&q) < 0 ? ncclSystemError : ncclSuccess;
    es_qop_t *one = &q;
    return es_coll_submit(o->comm, &one, 1);
}
