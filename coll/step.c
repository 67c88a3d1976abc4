/* The steps of the virtual collectives (see coll_int.h): short programs
 * of ordering actions (barriers, point-to-point waits and posts, host
 * work, progress) that a transport enqueues on the application's stream:
 * run by one host function, in the calling thread for a parked EST
 * (tslice.c), or handed to the transport's order hook (the device
 * transport's stream memory operations). Also the rounds of a
 * point-to-point batch, which both transports share. Calls seg.c,
 * tslice.c and util.c; the transports call it, never the other way
 * (the order hook is called through the transport struct). */
#include "coll/coll_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
        free(st->act[i].arg);
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
        case ES_A_HOST_FN:
            a->fn(a->arg);
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

/* Round j, first half: room in the receivers' slots (st may already hold
 * the previous round's consumed marks), then my chunks copied in. */
static CUresult es_round_in(es_comm_t *c, es_lane_t *L, int nl, int j, es_step_t *st, CUstream s,
                            es_p2p_copy_fn copy_in)
{
    CUresult r = CUDA_SUCCESS;
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
        return r;
    CUresult r2 = es_step_launch(st, s);
    if (r == CUDA_SUCCESS)
        r = r2;
    for (int k = 0; k < nl && r == CUDA_SUCCESS; k++) {
        es_lane_t *l = &L[k];
        if (l->send && j < l->n)
            r = copy_in(c, l->c[j].op, c->p2p_sent[l->peer] + (uint64_t)j, l->c[j].off,
                        l->c[j].len, s);
    }
    return r;
}

/* Round j, second half: post my chunks, wait for the senders', copy out. */
static CUresult es_round_out(es_comm_t *c, es_lane_t *L, int nl, int j, CUstream s,
                             es_p2p_copy_fn copy_out)
{
    CUresult r = CUDA_SUCCESS;
    es_step_t *st = es_step_new(c);
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
    if (!st)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r2 = es_step_launch(st, s);
    if (r == CUDA_SUCCESS)
        r = r2;
    for (int k = 0; k < nl && r == CUDA_SUCCESS; k++) {
        es_lane_t *l = &L[k];
        if (!l->send && j < l->n)
            r = copy_out(c, l->c[j].op, c->p2p_recv[l->peer] + (uint64_t)j, l->c[j].off,
                         l->c[j].len, s);
    }
    return r;
}

/* Round j's consumed marks: a step left pending, run at the start of the
 * next round's first step (or after the last round). *r: CUDA_SUCCESS on
 * entry. */
static es_step_t *es_round_consumed(es_comm_t *c, es_lane_t *L, int nl, int j, CUstream s,
                                    CUresult *r)
{
    es_step_t *pending = es_step_new(c);
    for (int k = 0; k < nl && pending && *r == CUDA_SUCCESS; k++) {
        es_lane_t *l = &L[k];
        if (l->send || j >= l->n)
            continue;
        es_action_t a = { .kind = ES_A_PAIR_SET, .from = l->peer, .peer = c->rank,
                          .field = 1, .a = c->p2p_recv[l->peer] + (uint64_t)j + 1 };
        *r = es_step_push(c, &pending, &a, s);
    }
    if (!pending)
        *r = CUDA_ERROR_OUT_OF_MEMORY;
    return pending;
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
        r = es_round_in(c, L, nl, j, st, s, copy_in);
        if (r != CUDA_SUCCESS)
            break;
        r = es_round_out(c, L, nl, j, s, copy_out);
        if (r != CUDA_SUCCESS)
            break;
        pending = es_round_consumed(c, L, nl, j, s, &r);
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
