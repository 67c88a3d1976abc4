/* Groups of the virtual collectives (ncclGroupStart / ncclGroupEnd, per
 * thread): inside a group, communicator initialisations and operations are
 * queued; at the end the initialisations run together (ranks of one
 * process meet each other), then the operations, one run per
 * communicator. Called by comm.c and enqueue.c; calls init.c and
 * defer.c. */
#include "coll/coll_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
ncclResult_t es_group_start_init(es_comm_t *c)
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
    if (pthread_create(&c->init_thread, NULL, es_comm_init_thread, c) != 0) {
        es_coll_error("cannot start the initialisation thread");
        atomic_store(&c->async, ncclSystemError);
        return ncclSystemError;
    }
    c->init_threaded = 1;
    return ncclInProgress;
}

int es_group_depth(void)
{
    return es_grp.depth;
}

void es_group_note_error(ncclResult_t res)
{
    if (es_grp.depth > 0 && es_grp.err == ncclSuccess)
        es_grp.err = res;
}

int es_group_queue_op(const es_qop_t *q)
{
    if (es_grow((void **)&es_grp.ops, &es_grp.capops, es_grp.nops + 1, sizeof(es_qop_t)) < 0)
        return -ENOMEM;
    es_grp.ops[es_grp.nops++] = *q;
    return 0;
}

void es_group_isolate(es_group_t *saved)
{
    *saved = es_grp;
    memset(&es_grp, 0, sizeof(es_grp));
    es_grp.depth = 1;
}

ncclResult_t es_group_end_isolated(const es_group_t *saved)
{
    ncclResult_t r = es_coll_group_end();
    es_grp = *saved;
    return r;
}

ncclResult_t es_coll_group_start(void)
{
    es_comm_global_init();
    es_jobhold_global_init();
    es_grp.depth++;
    return ncclSuccess;
}

static void es_group_reset(void)
{
    es_grp.nops = 0;
    es_grp.ninits = 0;
    es_grp.err = ncclSuccess;
}

/* Initialisations: concurrently (ranks of one process meet each other).
 * *inprogress: a non-blocking one goes on in the background. */
static ncclResult_t es_group_run_inits(ncclResult_t res, int *inprogress)
{
    int ninit = es_grp.ninits;
    for (int i = 0; i < ninit; i++) {
        es_comm_t *c = es_grp.inits[i];
        if (pthread_create(&c->init_thread, NULL, es_comm_init_thread, c) != 0) {
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
            *inprogress = 1;
            continue;
        }
        es_comm_join_init(c);
        ncclResult_t a = atomic_load(&c->async);
        if (a != ncclSuccess && res == ncclSuccess)
            res = a;
    }
    return res;
}

/* Operations: one run per communicator, in the order communicators first
 * appear. */
static ncclResult_t es_group_run_ops(void)
{
    ncclResult_t res = ncclSuccess;
    es_qop_t **list = calloc((size_t)es_grp.nops, sizeof(*list));
    char *done = calloc((size_t)es_grp.nops, 1);
    if (!list || !done) {
        res = ncclSystemError;
        goto out;
    }
    for (int i = 0; i < es_grp.nops && res == ncclSuccess; i++) {
        if (done[i])
            continue;
        int m = 0;
        for (int j = i; j < es_grp.nops; j++)
            if (!done[j] && es_grp.ops[j].op.comm == es_grp.ops[i].op.comm) {
                list[m++] = &es_grp.ops[j];
                done[j] = 1;
            }
        res = es_coll_submit(es_grp.ops[i].op.comm, list, m);
    }
out:
    free(list);
    free(done);
    return res;
}

ncclResult_t es_group_end_local(void)
{
    if (es_grp.depth <= 0) {
        es_coll_error("ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--es_grp.depth > 0)
        return ncclSuccess;
    int inprogress = 0;
    ncclResult_t res = es_group_run_inits(es_grp.err, &inprogress);
    if (res == ncclSuccess && es_grp.nops)
        res = es_group_run_ops();
    es_group_reset();
    if (res == ncclSuccess && inprogress)
        res = ncclInProgress;
    return res;
}

ncclResult_t es_group_discard_local(void)
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
