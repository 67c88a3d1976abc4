/* The NCCL carrier transport of the virtual collectives: NCCL carries the
 * bytes between GPUs, the shim folds, in the order fixed by N alone
 * (docs/COLLECTIVES.md).
 *
 * Staging and ordering are the device transport's (dev.h): every rank's
 * VMM buffer, mapped by the ranks of the communicator, steps as stream
 * memory operations, the watchdog. On top: one carrier per GPU (the lowest
 * rank on it), and a carrier communicator of the real libnccl.so.2 with
 * one member per GPU (NCCL refuses two ranks on one GPU), made at the
 * set-up: rank 0 takes its unique id and leaves it in the segment. The
 * carrier's library reaches the real driver (intercept/cuda.c answers its
 * cuGetProcAddress with the real functions), so its memory and handles are
 * not the application's (the streams it is given are the real ones behind
 * the application's virtual handles); NVLS is off for it
 * (NCCL_NVLS_ENABLE=0, set by shim/init.c). While ESTs can move, the
 * engine takes the whole transport down at scheduled holds and sets it up
 * again after the moves (init.c), so no staging or carrier outlives a move.
 *
 * The order is the rank-order left fold, computed as a chain: the ranks
 * fall into runs (maximal blocks of consecutive ranks on one GPU); the
 * carrier of run 0's GPU folds its ranks' staged inputs, sends the partial
 * to the carrier of run 1's GPU, which continues the fold with its ranks
 * and passes it on, ...; the last run's carrier holds the result and
 * broadcasts it (all-reduce), sends it to the root's GPU (reduce), or each
 * GPU its ranks' pieces (reduce-scatter). When every GPU holds one run
 * (contiguous blocks: what the controller places) the chain is pipelined
 * in pieces, a send of piece i beside the receive of piece i+1 in one NCCL
 * group; otherwise each hop carries the whole chunk (more hops, the same
 * bits). All-gather and broadcast are NCCL's data movement between the
 * carriers (grouped send/receive, ncclBroadcast), exact by nature. Point to
 * point between two carriers is NCCL's send/receive; between other ranks
 * it stays on the device transport's mapped slots.
 *
 * A chunk, on every rank: stage my input (scaled for PreMulSum); barrier;
 * the carriers' NCCL work (inside a watched stretch: a stuck NCCL call
 * fails the communicator within EASYSCALE_COLL_TIMEOUT, and the failure
 * aborts the carrier communicator); barrier; copy out of my carrier's
 * out[set]. With one rank per GPU an all-reduce skips the staging and
 * the barriers: the carrier folds from its input into its output and the
 * NCCL calls alone order the ranks. Exports es_coll_tp_nccl; calls dev.h, step.c, seg.c, util.c
 * and kernels/reduce.h.
 */
#include "coll/transport/dev.h"
#include "kernels/reduce.h"
#include "move/vhandle.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))
#define VPTR(d) ((void *)(uintptr_t)(d))

/* Pieces of a pipelined chain hop: a quarter of the hop, between 256 KiB
 * and 2 MiB, and at most 32 pieces. Each piece costs an NCCL group and a
 * fold launch (some microseconds on a GPU, where 2 MiB cross NVLink in
 * about 6 us; far more on simcuda), while more pieces let more GPUs work
 * at once: docs/COLLECTIVES.md, section 3. */
#define ES_NC_PIECE_LO (256u << 10)
#define ES_NC_PIECE_HI (2048u << 10)
#define ES_NC_PIECES 32

typedef struct es_nc {
    int ngpu;                             /* P: GPUs, ordered by their lowest rank */
    int gpu_of[ES_COLL_MAX_RANKS];        /* each rank's GPU index */
    int carrier[ES_COLL_MAX_RANKS];       /* GPU g's carrier rank */
    int nruns;
    int run_lo[ES_COLL_MAX_RANKS], run_hi[ES_COLL_MAX_RANKS];
    int aligned;                          /* every GPU holds one run */
    int me_gpu, is_carrier;
    ncclComm_t comm;                      /* the carrier communicator (carriers, P > 1) */
    pthread_mutex_t mu;                   /* held while NCCL calls are enqueued */
    _Atomic int aborted;                  /* comm aborted: no more calls on it */
} es_nc_t;

static es_nc_t *es_nc(es_comm_t *c)
{
    return es_devtp_ext(c);
}

/* ---- the real library ------------------------------------------------------------------ */

static ncclResult_t es_nc_error(es_comm_t *c, const char *what, ncclResult_t res)
{
    const char *s = ES_REAL(nccl, ncclGetErrorString)(res);
    es_coll_error("communicator %016llx: the carriers' %s failed: %s", (unsigned long long)c->nonce,
                  what, s ? s : "unknown NCCL error");
    return res;
}

/* Whether this rank could carry: the real NCCL is there (the staging's
 * part is the device transport's `possible`, which init.c asks first). */
static int es_nc_possible(es_comm_t *c)
{
    (void)c;
    return es_lib_ready(ES_LIB_NCCL) && es_real_present(ES_LIB_NCCL, ES_IDX_ncclCommInitRank) &&
           es_real_present(ES_LIB_NCCL, ES_IDX_ncclSend);
}

/* ---- the topology: GPUs, carriers and runs ------------------------------------------------ */

static void es_nc_topology(es_comm_t *c, es_nc_t *t)
{
    int n = c->nranks;
    t->ngpu = 0;
    for (int r = 0; r < n; r++) {
        int g = -1;
        for (int q = 0; q < r && g < 0; q++)
            if (!memcmp(es_seg_rank(&c->seg, q)->uuid, es_seg_rank(&c->seg, r)->uuid, 16))
                g = t->gpu_of[q];
        if (g < 0) {
            g = t->ngpu++;
            t->carrier[g] = r;
        }
        t->gpu_of[r] = g;
    }
    t->nruns = 0;
    for (int r = 0; r < n; r++) {
        if (r == 0 || t->gpu_of[r] != t->gpu_of[r - 1]) {
            t->run_lo[t->nruns] = r;
            t->nruns++;
        }
        t->run_hi[t->nruns - 1] = r + 1;
    }
    t->aligned = t->nruns == t->ngpu;
    t->me_gpu = t->gpu_of[c->rank];
    t->is_carrier = t->carrier[t->me_gpu] == c->rank;
}

/* ---- set-up ------------------------------------------------------------------------ */

/* Rank 0 takes the carriers' unique id into the segment; then every
 * carrier joins. The outcome is voted (every rank, control barriers). */
static int es_nc_comm(es_comm_t *c, es_nc_t *t)
{
    int ok = 1, rc;
    ncclResult_t res;
    if (c->rank == 0) {
        ncclUniqueId id;
        res = ES_REAL(nccl, ncclGetUniqueId)(&id);
        if (res != ncclSuccess)
            ok = 0, es_nc_error(c, "unique id", res);
        else
            memcpy(c->seg.h->carrier_id, &id, sizeof(id));
    }
    es_seg_rank(&c->seg, c->rank)->setup_ok = ok;
    if ((rc = es_ctrl_barrier(c)) < 0)
        return rc;
    if (!es_seg_rank(&c->seg, 0)->setup_ok)
        ok = 0;
    if (ok && t->is_carrier) {
        ncclUniqueId id;
        memcpy(&id, c->seg.h->carrier_id, sizeof(id));
        res = ES_REAL(nccl, ncclCommInitRank)(&t->comm, t->ngpu, id, t->me_gpu);
        if (res != ncclSuccess) {
            t->comm = NULL;
            ok = 0;
            es_nc_error(c, "communicator", res);
        }
    }
    es_seg_rank(&c->seg, c->rank)->setup_ok = ok;
    if ((rc = es_ctrl_barrier(c)) < 0)
        return rc;
    for (int r = 0; r < c->nranks; r++)
        ok &= es_seg_rank(&c->seg, r)->setup_ok != 0;
    return ok ? 0 : -EAGAIN;
}

/* How long the watchdog waits for an enqueuing thread before it aborts
 * anyway: enqueuing never waits for peers, so a thread still inside NCCL
 * after this is blocked there (connecting to a dead peer), and NCCL's
 * abort is what releases it. */
#define ES_NC_ABORT_WAIT_MS 2000

/* The watchdog saw the communicator fail: NCCL calls waiting on the
 * carriers' streams are released by aborting the carrier communicator,
 * between two enqueuing sections (es_nc_enter), never under one. */
static void es_nc_on_fail(es_comm_t *c)
{
    es_nc_t *t = es_nc(c);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ES_NC_ABORT_WAIT_MS / 1000;
    int locked = pthread_mutex_timedlock(&t->mu, &dl) == 0;
    if (t->comm && !atomic_exchange(&t->aborted, 1)) {
        ES_INFO("collectives: communicator %016llx failed: aborting its carrier communicator%s",
                (unsigned long long)c->nonce, locked ? "" : " (an NCCL call of it is blocked)");
        ES_REAL(nccl, ncclCommAbort)(t->comm);
    }
    if (locked)
        pthread_mutex_unlock(&t->mu);
}

/* The carrier communicator's own error: a carrier peer or the network
 * failed under an operation, which NCCL may end on its stream with an
 * output that means nothing (simcuda's does; NVIDIA's kernels may instead
 * wait until the abort), so the communicator must fail by it even where no
 * wait of the streams is left to see the death. It does not look while an
 * enqueuing section (t->mu) or the abort is under way: the watchdog looks
 * again within milliseconds. */
static ncclResult_t es_nc_async_error(es_comm_t *c)
{
    es_nc_t *t = es_nc(c);
    ncclResult_t e = ncclSuccess;
    if (!t || pthread_mutex_trylock(&t->mu) != 0)
        return ncclSuccess;
    if (t->comm && !atomic_load(&t->aborted) &&
        ES_REAL(nccl, ncclCommGetAsyncError)(t->comm, &e) != ncclSuccess)
        e = ncclSuccess; /* the query itself failed: nothing learnt */
    pthread_mutex_unlock(&t->mu);
    if (e == ncclInProgress)
        return ncclSuccess;
    if (e != ncclSuccess)
        es_nc_error(c, "communicator", e);
    return e;
}

/* Before a section of NCCL calls: 0 with t->mu held, or -ECANCELED when
 * the carrier communicator was aborted (the caller's operation fails and
 * the launch reports the communicator's error). */
static int es_nc_enter(es_nc_t *t)
{
    pthread_mutex_lock(&t->mu);
    if (!atomic_load(&t->aborted))
        return 0;
    pthread_mutex_unlock(&t->mu);
    return -ECANCELED;
}

static void es_nc_leave(es_nc_t *t)
{
    pthread_mutex_unlock(&t->mu);
}

static void es_nc_teardown(es_comm_t *c)
{
    es_nc_t *t = es_nc(c);
    if (t) {
        es_devtp_set_ext(c, NULL, NULL, NULL);
        pthread_mutex_lock(&t->mu);
        if (t->comm && !atomic_exchange(&t->aborted, 1)) {
            if (atomic_load(&c->failed))
                ES_REAL(nccl, ncclCommAbort)(t->comm);
            else
                ES_REAL(nccl, ncclCommDestroy)(t->comm);
        }
        t->comm = NULL;
        pthread_mutex_unlock(&t->mu);
        pthread_mutex_destroy(&t->mu);
        free(t);
    }
    es_devtp_teardown(c);
}

static int es_nc_setup(es_comm_t *c)
{
    /* extra: the partial a carrier receives, and two chunks a direct
     * all-reduce folds into (a chunk's result lives until its broadcast,
     * after the next chunk's fold) */
    int rc = es_devtp_setup(c, 3 * c->chunk);
    if (rc < 0)
        return rc;
    es_nc_t *t = calloc(1, sizeof(*t));
    if (!t) {
        es_devtp_teardown(c);
        return -ENOMEM;
    }
    pthread_mutex_init(&t->mu, NULL);
    es_nc_topology(c, t);
    es_devtp_set_ext(c, t, es_nc_on_fail, es_nc_async_error);
    rc = t->ngpu > 1 ? es_nc_comm(c, t) : 0;
    if (rc < 0) {
        es_nc_teardown(c);
        return rc;
    }
    if (c->rank == 0)
        ES_INFO("collectives: communicator %016llx: carriers over NCCL on GPUs: %d, runs of "
                "ranks: %d (%s)", (unsigned long long)c->nonce, t->ngpu, t->nruns,
                t->aligned ? "one per GPU: pipelined chain" : "not one per GPU: whole hops");
    return 0;
}

/* ---- the carriers' NCCL calls ------------------------------------------------------------- */

static ncclResult_t es_nc_send(es_nc_t *t, CUdeviceptr buf, size_t bytes, int gpu, CUstream s)
{
    return bytes ? ES_REAL(nccl, ncclSend)(VPTR(buf), bytes, ncclInt8, gpu, t->comm,
                                           es_vh_stream(s))
                 : ncclSuccess;
}

static ncclResult_t es_nc_recv(es_nc_t *t, CUdeviceptr buf, size_t bytes, int gpu, CUstream s)
{
    return bytes ? ES_REAL(nccl, ncclRecv)(VPTR(buf), bytes, ncclInt8, gpu, t->comm,
                                           es_vh_stream(s))
                 : ncclSuccess;
}

static ncclResult_t es_nc_group(int start)
{
    return start ? ES_REAL(nccl, ncclGroupStart)() : ES_REAL(nccl, ncclGroupEnd)();
}

/* What a chunk asks of the carriers. */
typedef struct es_nc_job {
    const es_coll_op_t *op;
    int rop, set;
    size_t count;                 /* elements of the fold (staged at in[set] + 0) */
    size_t per, m;                /* reduce-scatter / all-gather: piece pitch and length */
    /* direct (one rank per GPU, all-reduce): the fold reads my input here
     * and writes my output there, no staging; else both 0 */
    CUdeviceptr src, dst;
} es_nc_job_t;

/* Where a carrier's fold writes (and what it sends on): never over its
 * inputs (the kernel's contract), so a direct all-reduce folds into a
 * scratch chunk of its own, then broadcasts into the output. */
static CUdeviceptr es_nc_dst(es_comm_t *c, const es_nc_job_t *J)
{
    return J->dst ? es_devtp_extra(c, c->rank) + (1 + (size_t)J->set) * c->chunk
                  : es_devtp_out(c, c->rank, J->set);
}

/* Where the result ends on every carrier. */
static CUdeviceptr es_nc_final(es_comm_t *c, const es_nc_job_t *J)
{
    return J->dst ? J->dst : es_devtp_out(c, c->rank, J->set);
}

/* Elements [lo, hi) of run j folded into out (with the partial received
 * from the previous run when j > 0). */
static CUresult es_nc_fold(es_comm_t *c, const es_nc_job_t *J, int j, size_t lo, size_t hi,
                           CUstream s)
{
    es_nc_t *t = es_nc(c);
    size_t es = es_coll_type_size(J->op->dtype);
    es_red_args_t a;
    memset(&a, 0, sizeof(a));
    if (j > 0)
        a.in[a.nin++] = VPTR(es_devtp_extra(c, c->rank) + lo * es);
    for (int r = t->run_lo[j]; r < t->run_hi[j]; r++)
        a.in[a.nin++] = VPTR((J->src ? J->src : es_devtp_in(c, r, J->set)) + lo * es);
    a.out = VPTR(es_nc_dst(c, J) + lo * es);
    a.count = hi - lo;
    a.dtype = J->op->dtype;
    a.op = J->rop == ES_RO_PREMUL || (J->rop == ES_RO_AVG && j < t->nruns - 1) ? ES_RO_SUM
                                                                               : J->rop;
    a.divisor = c->nranks;
    return a.count ? es_reduce_launch(&a, s) : CUDA_SUCCESS;
}

/* One run of the chain at this carrier: receive the partial (j > 0), fold,
 * send it on (not the last run); in pieces when pipelined. */
static ncclResult_t es_nc_run(es_comm_t *c, const es_nc_job_t *J, int j, CUresult *cr,
                              CUstream s)
{
    es_nc_t *t = es_nc(c);
    size_t es = es_coll_type_size(J->op->dtype), n = J->count;
    int prev = j > 0 ? t->gpu_of[t->run_lo[j - 1]] : -1;
    int next = j < t->nruns - 1 ? t->gpu_of[t->run_lo[j + 1]] : -1;
    size_t piece = n;
    if (t->aligned) {
        size_t b = n * es / 4;
        b = b < ES_NC_PIECE_LO ? ES_NC_PIECE_LO : b > ES_NC_PIECE_HI ? ES_NC_PIECE_HI : b;
        piece = (b + es - 1) / es;
        if (piece < (n + ES_NC_PIECES - 1) / ES_NC_PIECES)
            piece = (n + ES_NC_PIECES - 1) / ES_NC_PIECES;
    }
    CUdeviceptr part = es_devtp_extra(c, c->rank), out = es_nc_dst(c, J);
    /* the first run of one rank, not the last: its value is sent as it is
     * (the next fold makes a NaN canonical, as this one would) */
    int as_is = j == 0 && t->run_hi[0] == 1 && next >= 0;
    if (as_is)
        out = J->src ? J->src : es_devtp_in(c, 0, J->set);
    ncclResult_t res = ncclSuccess;
    size_t done = 0; /* elements folded, not yet sent */
    for (size_t lo = 0; lo < n && res == ncclSuccess && *cr == CUDA_SUCCESS; lo += piece) {
        size_t hi = n - lo < piece ? n : lo + piece;
        if (prev >= 0 || (next >= 0 && lo > done)) {
            res = es_nc_group(1);
            if (res == ncclSuccess && next >= 0 && lo > done)
                res = es_nc_send(t, out + done * es, (lo - done) * es, next, s);
            if (res == ncclSuccess && prev >= 0)
                res = es_nc_recv(t, part + lo * es, (hi - lo) * es, prev, s);
            ncclResult_t e = es_nc_group(0);
            if (res == ncclSuccess)
                res = e;
        }
        done = lo;
        if (res == ncclSuccess && !as_is)
            *cr = es_nc_fold(c, J, j, lo, hi, s);
    }
    if (res == ncclSuccess && *cr == CUDA_SUCCESS && next >= 0 && n > done)
        res = es_nc_send(t, out + done * es, (n - done) * es, next, s);
    return res;
}

/* Where the fold's result goes after the last run: every carrier
 * (all-reduce), the root's (reduce), each GPU's pieces (reduce-scatter). */
static ncclResult_t es_nc_spread(es_comm_t *c, const es_nc_job_t *J, CUstream s)
{
    es_nc_t *t = es_nc(c);
    size_t es = es_coll_type_size(J->op->dtype);
    int last = t->gpu_of[t->run_lo[t->nruns - 1]];
    CUdeviceptr out = es_nc_dst(c, J);
    ncclResult_t res = ncclSuccess;
    switch (J->op->kind) {
    case ES_OP_ALLREDUCE:
        return ES_REAL(nccl, ncclBroadcast)(VPTR(out), VPTR(es_nc_final(c, J)), J->count * es,
                                            ncclInt8, last, t->comm, es_vh_stream(s));
    case ES_OP_REDUCE: {
        int root = t->gpu_of[J->op->root];
        if (root == last)
            return ncclSuccess;
        if (t->me_gpu == last)
            return es_nc_send(t, out, J->count * es, root, s);
        return t->me_gpu == root ? es_nc_recv(t, out, J->count * es, last, s) : ncclSuccess;
    }
    case ES_OP_REDUCESCATTER:
        res = es_nc_group(1);
        for (int q = 0; q < c->nranks && res == ncclSuccess; q++) {
            int g = t->gpu_of[q];
            if (g == last || (t->me_gpu != last && t->me_gpu != g))
                continue;
            CUdeviceptr p = out + (size_t)q * J->per * es;
            res = t->me_gpu == last ? es_nc_send(t, p, J->m * es, g, s)
                                    : es_nc_recv(t, p, J->m * es, last, s);
        }
        ncclResult_t e = es_nc_group(0);
        return res == ncclSuccess ? e : res;
    default:
        return ncclInvalidArgument;
    }
}

/* All-gather at a carrier: its ranks' pieces into out[set], then grouped
 * send/receive of every piece with every other carrier. */
static ncclResult_t es_nc_gather(es_comm_t *c, const es_nc_job_t *J, CUresult *cr, CUstream s)
{
    es_nc_t *t = es_nc(c);
    size_t es = es_coll_type_size(J->op->dtype), b = J->m * es;
    CUdeviceptr out = es_devtp_out(c, c->rank, J->set);
    for (int q = 0; q < c->nranks && *cr == CUDA_SUCCESS; q++)
        if (t->gpu_of[q] == t->me_gpu)
            *cr = es_devtp_dtod(out + (size_t)q * J->per * es, es_devtp_in(c, q, J->set), b, s);
    if (*cr != CUDA_SUCCESS || t->ngpu == 1)
        return ncclSuccess;
    ncclResult_t res = es_nc_group(1);
    for (int q = 0; q < c->nranks && res == ncclSuccess; q++) {
        CUdeviceptr p = out + (size_t)q * J->per * es;
        if (t->gpu_of[q] != t->me_gpu) {
            res = es_nc_recv(t, p, b, t->gpu_of[q], s);
            continue;
        }
        for (int g = 0; g < t->ngpu && res == ncclSuccess; g++)
            if (g != t->me_gpu)
                res = es_nc_send(t, p, b, g, s);
    }
    ncclResult_t e = es_nc_group(0);
    return res == ncclSuccess ? e : res;
}

enum { ES_NC_FOLD = 1, ES_NC_SPREAD = 2 };

/* The carrier's part of a chunk, between the two barriers (parts: the
 * fold and what follows it; a direct all-reduce spreads a chunk's result
 * after the next chunk's fold, so that the chain's pipeline does not
 * drain between chunks). */
static CUresult es_nc_carry(es_comm_t *c, const es_nc_job_t *J, int parts, CUstream s)
{
    es_nc_t *t = es_nc(c);
    size_t es = es_coll_type_size(J->op->dtype);
    CUresult cr = CUDA_SUCCESS;
    ncclResult_t res = ncclSuccess;
    uint64_t pos;
    if ((cr = es_devtp_wait_begin(c, s, &pos)) != CUDA_SUCCESS)
        return cr;
    switch (J->op->kind) {
    case ES_OP_ALLGATHER:
        res = es_nc_gather(c, J, &cr, s);
        break;
    case ES_OP_BROADCAST: {
        int root = t->gpu_of[J->op->root];
        CUdeviceptr out = es_devtp_out(c, c->rank, J->set);
        if (t->me_gpu == root)
            cr = es_devtp_dtod(out, es_devtp_in(c, J->op->root, J->set), J->count * es, s);
        if (cr == CUDA_SUCCESS && t->ngpu > 1)
            res = ES_REAL(nccl, ncclBroadcast)(VPTR(out), VPTR(out), J->count * es, ncclInt8,
                                               root, t->comm, es_vh_stream(s));
        break;
    }
    default:
        for (int j = 0; j < t->nruns && res == ncclSuccess && cr == CUDA_SUCCESS &&
                        (parts & ES_NC_FOLD); j++)
            if (t->gpu_of[t->run_lo[j]] == t->me_gpu)
                res = es_nc_run(c, J, j, &cr, s);
        if (res != ncclSuccess || cr != CUDA_SUCCESS || !(parts & ES_NC_SPREAD))
            break;
        if (t->ngpu > 1)
            res = es_nc_spread(c, J, s);
        else if (J->dst) /* one GPU, direct: the fold's scratch into the output */
            cr = es_devtp_dtod(J->dst, es_nc_dst(c, J), J->count * es, s);
        break;
    }
    if (res != ncclSuccess) {
        es_nc_error(c, "operation", res);
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    return cr == CUDA_SUCCESS ? es_devtp_wait_end(c, s, pos) : cr;
}

/* ---- a chunk on every rank ------------------------------------------------------------- */

/* Stages my part of a chunk into in[set]. */
static CUresult es_nc_stage(es_comm_t *c, const es_coll_op_t *op, int rop, const es_premul_t *pm,
                            const es_nc_job_t *J, size_t off, size_t total, CUstream s)
{
    size_t es = es_coll_type_size(op->dtype);
    CUdeviceptr in = es_devtp_in(c, c->rank, J->set);
    const char *send = op->send;
    CUresult r = CUDA_SUCCESS;
    switch (op->kind) {
    case ES_OP_BROADCAST:
        return c->rank == op->root ? es_devtp_dtod(in, DPTR(send + off * es), J->count * es, s)
                                   : CUDA_SUCCESS;
    case ES_OP_ALLGATHER:
        return es_devtp_dtod(in, DPTR(send + off * es), J->m * es, s);
    case ES_OP_REDUCESCATTER:
        for (int q = 0; q < c->nranks && r == CUDA_SUCCESS; q++)
            r = es_devtp_stage(in + (size_t)q * J->per * es,
                               send + ((size_t)q * total + off) * es, J->m, op->dtype, rop, pm, s);
        return r;
    default:
        return es_devtp_stage(in, send + off * es, J->count, op->dtype, rop, pm, s);
    }
}

/* Copies my result of a chunk out of my carrier's out[set]. */
static CUresult es_nc_unstage(es_comm_t *c, const es_coll_op_t *op, const es_nc_job_t *J,
                              size_t off, size_t total, CUstream s)
{
    es_nc_t *t = es_nc(c);
    size_t es = es_coll_type_size(op->dtype);
    CUdeviceptr out = es_devtp_out(c, t->carrier[t->me_gpu], J->set);
    char *recv = op->recv;
    CUresult r = CUDA_SUCCESS;
    switch (op->kind) {
    case ES_OP_REDUCE:
        return c->rank == op->root ? es_devtp_dtod(DPTR(recv + off * es), out, J->count * es, s)
                                   : CUDA_SUCCESS;
    case ES_OP_REDUCESCATTER:
        return es_devtp_dtod(DPTR(recv + off * es), out + (size_t)c->rank * J->per * es,
                             J->m * es, s);
    case ES_OP_ALLGATHER:
        for (int q = 0; q < c->nranks && r == CUDA_SUCCESS; q++)
            r = es_devtp_dtod(DPTR(recv + ((size_t)q * total + off) * es),
                              out + (size_t)q * J->per * es, J->m * es, s);
        return r;
    default:
        return es_devtp_dtod(DPTR(recv + off * es), out, J->count * es, s);
    }
}

static CUresult es_nc_coll_held(es_comm_t *c, const es_coll_op_t *op, int rop,
                                const es_premul_t *pm, CUstream s)
{
    es_nc_t *t = es_nc(c);
    const int n = c->nranks;
    const size_t es = es_coll_type_size(op->dtype), total = op->count;
    int pieces = op->kind == ES_OP_REDUCESCATTER || op->kind == ES_OP_ALLGATHER;
    size_t per = (pieces ? c->chunk / (size_t)n : c->chunk) / es;
    CUresult r = CUDA_SUCCESS;
    if (per == 0)
        per = 1;
    /* one rank per GPU: an all-reduce needs no staging and no barrier (the
     * carriers' NCCL calls order them) */
    int direct = op->kind == ES_OP_ALLREDUCE && rop != ES_RO_PREMUL && n == t->ngpu;
    es_nc_job_t prev = { 0 };
    for (size_t off = 0; off < total && r == CUDA_SUCCESS; off += per) {
        size_t m = total - off < per ? total - off : per;
        /* pieces: each rank's m elements at a pitch of m (the last chunk's
         * pieces are shorter: a pitch of per would have the carriers fold
         * and move the unstaged gaps between them, (n - 1) * per elements
         * whatever the count) */
        es_nc_job_t J = { .op = op, .rop = rop, .set = (int)(c->nchunks++ & 1),
                          .per = pieces ? m : per, .m = m,
                          .count = pieces ? (size_t)n * m : m };
        uint64_t b = c->bar;
        int done = off + m >= total && es_coll_op_done_counts(op);
        if (direct) {
            J.src = DPTR((const char *)op->send + off * es);
            J.dst = DPTR((char *)op->recv + off * es);
            r = es_nc_carry(c, &J, ES_NC_FOLD, s);
            if (r == CUDA_SUCCESS && prev.op)
                r = es_nc_carry(c, &prev, ES_NC_SPREAD, s);
            prev = J;
            if (r == CUDA_SUCCESS && off + m >= total)
                r = es_nc_carry(c, &J, ES_NC_SPREAD, s);
            if (r == CUDA_SUCCESS && done)
                r = es_devtp_barrier(c, 0, 1, s);
            continue;
        }
        c->bar += 2;
        r = es_nc_stage(c, op, rop, pm, &J, off, total, s);
        if (r == CUDA_SUCCESS)
            r = es_devtp_barrier(c, b + 1, 0, s);
        if (r == CUDA_SUCCESS && t->is_carrier)
            r = es_nc_carry(c, &J, ES_NC_FOLD | ES_NC_SPREAD, s);
        if (r == CUDA_SUCCESS)
            r = es_devtp_barrier(c, b + 2, done, s);
        if (r == CUDA_SUCCESS)
            r = es_nc_unstage(c, op, &J, off, total, s);
    }
    return r;
}

/* ---- point to point ------------------------------------------------------------------ */

/* Between two carriers (one rank per GPU on both sides): NCCL's own
 * send/receive, one group; any other pair: the device transport's mapped
 * slots, first (those rounds wait only for such pairs, so the two parts
 * never wait for each other). */
static CUresult es_nc_p2p_held(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s)
{
    es_nc_t *t = es_nc(c);
    es_p2p_t *mapped = calloc((size_t)n, sizeof(*mapped));
    int nm = 0, nn = 0;
    if (!mapped)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < n; i++) {
        int g = t->gpu_of[ops[i].peer];
        if (t->comm && t->is_carrier && g != t->me_gpu && t->carrier[g] == ops[i].peer)
            nn++;
        else
            mapped[nm++] = ops[i];
    }
    CUresult cr = nm ? es_devtp_p2p(c, mapped, nm, s) : CUDA_SUCCESS;
    free(mapped);
    if (cr != CUDA_SUCCESS || nn == 0)
        return cr;
    uint64_t pos;
    if ((cr = es_devtp_wait_begin(c, s, &pos)) != CUDA_SUCCESS)
        return cr;
    ncclResult_t res = es_nc_group(1);
    for (int i = 0; i < n && res == ncclSuccess; i++) {
        int g = t->gpu_of[ops[i].peer];
        if (g == t->me_gpu || t->carrier[g] != ops[i].peer)
            continue;
        res = ops[i].send ? es_nc_send(t, DPTR(ops[i].buf), ops[i].bytes, g, s)
                          : es_nc_recv(t, DPTR(ops[i].buf), ops[i].bytes, g, s);
    }
    ncclResult_t e = es_nc_group(0);
    if (res == ncclSuccess)
        res = e;
    if (res != ncclSuccess) {
        es_nc_error(c, "send/receive", res);
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    return es_devtp_wait_end(c, s, pos);
}

/* The transport's entries: their NCCL calls never meet the watchdog's
 * abort of the carrier communicator. */
static CUresult es_nc_coll(es_comm_t *c, const es_coll_op_t *op, int rop, const es_premul_t *pm,
                           CUstream s)
{
    es_nc_t *t = es_nc(c);
    if (es_nc_enter(t) < 0)
        return CUDA_ERROR_LAUNCH_FAILED;
    CUresult r = es_nc_coll_held(c, op, rop, pm, s);
    es_nc_leave(t);
    return r;
}

static CUresult es_nc_p2p(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s)
{
    es_nc_t *t = es_nc(c);
    if (es_nc_enter(t) < 0)
        return CUDA_ERROR_LAUNCH_FAILED;
    CUresult r = es_nc_p2p_held(c, ops, n, s);
    es_nc_leave(t);
    return r;
}

const es_coll_transport_t es_coll_tp_nccl = {
    .name = "nccl",
    .possible = es_nc_possible,
    .setup = es_nc_setup,
    .teardown = es_nc_teardown,
    .coll = es_nc_coll,
    .p2p = es_nc_p2p,
    .order = es_devtp_order,
    .async_error = es_nc_async_error,
};
