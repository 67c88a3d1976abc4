/* The host transport of the virtual collectives: staging in the
 * communicator's shared segment, registered with the driver so that the
 * copies between the device and it are asynchronous on the application's
 * stream; the CPU reduction (kernels/reduce_kernels.h's arithmetic and its
 * CPU loop es_red_cpu_range, built with -ffp-contract=off) split across the
 * ranks by shard, each rank's share done in a host function on its
 * stream.
 *
 * The staging must be registered (page-locked): the copies from it are
 * enqueued before the steps that fill it have run; without the
 * registration the set-up fails (the communicator reports an error).
 *
 * Staging per set s (two sets): in[r] (C bytes per rank), out (C bytes),
 * scal[r] (a PreMulSum scalar per rank); p2p[from][to][2] slots.
 */
#include "coll/coll_int.h"
#include "move/swap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

typedef struct es_host_tp {
    char *data;
    size_t set_bytes;
    int registered;
} es_host_tp_t;

static es_host_tp_t *es_htp(es_comm_t *c)
{
    return c->tpd;
}

static char *es_h_in(es_comm_t *c, int r, int set)
{
    return es_htp(c)->data + (size_t)set * es_htp(c)->set_bytes + (size_t)r * c->chunk;
}

static char *es_h_out(es_comm_t *c, int set)
{
    return es_htp(c)->data + (size_t)set * es_htp(c)->set_bytes + (size_t)c->nranks * c->chunk;
}

static char *es_h_scal(es_comm_t *c, int r, int set)
{
    return es_htp(c)->data + (size_t)set * es_htp(c)->set_bytes +
           (size_t)(c->nranks + 1) * c->chunk + (size_t)r * 64;
}

static char *es_h_p2p(es_comm_t *c, int from, int to, uint64_t k)
{
    return es_htp(c)->data + 2 * es_htp(c)->set_bytes +
           (((size_t)from * c->nranks + to) * 2 + (k & 1)) * c->p2p_chunk;
}

/* ---- the CPU reduction ------------------------------------------------------------- */

#define ES_HBLK 512

/* PreMulSum: each rank's input scaled by that rank's scalar (read from
 * the staging), then the sum; in blocks, the kernel's element arithmetic. */
static void es_host_reduce_premul(const es_host_red_t *r)
{
    es_u64 acc[ES_HBLK];
    int dt = r->dtype;
    for (size_t b = 0; b < r->count; b += ES_HBLK) {
        size_t m = r->count - b < ES_HBLK ? r->count - b : ES_HBLK;
        for (int k = 0; k < r->nin; k++) {
            es_u64 sk = es_red_load(dt, r->scal[k], 0);
            for (size_t j = 0; j < m; j++) {
                es_u64 v = es_red_scale(dt, es_red_load(dt, r->in[k], b + j), sk);
                acc[j] = k == 0 ? v : es_red_step(dt, ES_RO_SUM, acc[j], v);
            }
        }
        for (size_t j = 0; j < m; j++)
            es_red_store(dt, r->out, b + j, es_red_finish(dt, ES_RO_PREMUL, r->divisor, acc[j]));
    }
}

void es_host_reduce(const es_host_red_t *r)
{
#if defined(__x86_64__)
    /* IEEE behaviour whatever the thread inherited (SSE does all float and
     * double arithmetic here): round to nearest, no flush-to-zero, no
     * denormals-are-zero, exceptions masked. */
    unsigned csr = _mm_getcsr();
    _mm_setcsr((csr & ~(0x8040u | 0x6000u)) | 0x1f80u);
#endif
    if (r->op == ES_RO_PREMUL) {
        es_host_reduce_premul(r);
    } else {
        es_red_args_t a;
        memset(&a, 0, sizeof(a));
        for (int k = 0; k < r->nin; k++)
            a.in[k] = r->in[k];
        a.out = r->out;
        a.count = r->count;
        a.nin = r->nin;
        a.dtype = r->dtype;
        a.op = r->op;
        a.divisor = r->divisor;
        es_red_cpu_range(&a, 0, 0, r->count);
    }
#if defined(__x86_64__)
    _mm_setcsr(csr);
#endif
}

/* ---- set-up ------------------------------------------------------------------------ */

static int es_host_setup(es_comm_t *c)
{
    es_host_tp_t *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->data = es_seg_data(&c->seg);
    t->set_bytes = (size_t)(c->nranks + 1) * c->chunk + (size_t)c->nranks * 64;
    c->tpd = t;
    /* The staging must be registered: every copy from it to the device is
     * enqueued before the step that fills it has run, which only holds for
     * page-locked memory. From pageable memory the driver may read the
     * source when the call is made (NVIDIA's API synchronisation rules:
     * the copy may be staged at once), which would copy stale data: a
     * wrong sum, silently. So no registration, no communicator. */
    CUresult r = ES_REAL(cuda, cuMemHostRegister_v2)(t->data, c->seg.h->data_size,
                                                    CU_MEMHOSTREGISTER_PORTABLE);
    if (r != CUDA_SUCCESS) {
        ES_WARN("collectives: cannot register the host staging with the driver (CUresult %d): "
                "communicator %016llx fails", (int)r, (unsigned long long)c->nonce);
        es_coll_error("cannot register the host staging (%zu bytes) with the driver "
                      "(CUresult %d): the host transport needs page-locked staging",
                      c->seg.h->data_size, (int)r);
        return -EIO;
    }
    t->registered = 1;
    return 0;
}

static void es_host_teardown(es_comm_t *c)
{
    es_host_tp_t *t = c->tpd;
    if (!t)
        return;
    if (t->registered)
        ES_REAL(cuda, cuMemHostUnregister)(t->data);
    free(t);
    c->tpd = NULL;
}

/* ---- collectives --------------------------------------------------------------------- */

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

/* The copies between the application's device memory (always a CUdeviceptr
 * here: never dereferenced on the host) and the staging:
 * on the stream, or, for a parked EST (time-slicing), at once from and to
 * its host copies. */
static CUresult es_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    int pv = es_coll_parked_vdev();
    if (n && pv >= 0)
        return es_swap_park_read(pv, dst, src, n) == 0 ? CUDA_SUCCESS
                                                              : CUDA_ERROR_INVALID_VALUE;
    return n ? ES_REAL(cuda, cuMemcpyDtoHAsync_v2)(dst, src, n, s) : CUDA_SUCCESS;
}

static CUresult es_htod(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    int pv = es_coll_parked_vdev();
    if (n && pv >= 0)
        return es_swap_park_write(pv, dst, src, n) == 0 ? CUDA_SUCCESS
                                                               : CUDA_ERROR_INVALID_VALUE;
    return n ? ES_REAL(cuda, cuMemcpyHtoDAsync_v2)(dst, src, n, s) : CUDA_SUCCESS;
}

/* A 2D copy from the device (rows of width bytes, pitches as given). */
static CUresult es_dtoh_2d(const CUDA_MEMCPY2D *cp, CUstream s)
{
    if (es_coll_parked_vdev() < 0)
        return ES_REAL(cuda, cuMemcpy2DAsync_v2)(cp, s);
    CUresult r = CUDA_SUCCESS;
    for (size_t y = 0; y < cp->Height && r == CUDA_SUCCESS; y++)
        r = es_dtoh((char *)cp->dstHost + y * cp->dstPitch,
                    cp->srcDevice + y * cp->srcPitch, cp->WidthInBytes, s);
    return r;
}

/* A reduction action over the ranks' staging (shard [lo, hi) of a chunk
 * whose elements start at byte offset base in every rank's area). */
static int es_add_reduce(es_step_t *st, es_comm_t *c, int set, size_t base, size_t lo,
                         size_t hi, char *out, int dtype, int rop)
{
    if (hi <= lo)
        return 0;
    size_t es = es_coll_type_size(dtype);
    es_host_red_t *red = calloc(1, sizeof(*red));
    if (!red)
        return -ENOMEM;
    for (int r = 0; r < c->nranks; r++) {
        red->in[r] = es_h_in(c, r, set) + base + lo * es;
        red->scal[r] = rop == ES_RO_PREMUL ? es_h_scal(c, r, set) : NULL;
    }
    red->out = out;
    red->count = hi - lo;
    red->nin = c->nranks;
    red->dtype = dtype;
    red->op = rop;
    red->divisor = c->nranks;
    es_action_t a = { .kind = ES_A_HOST_REDUCE, .red = red };
    if (es_step_add(st, &a) < 0) {
        free(red);
        return -ENOSPC;
    }
    return 0;
}

/* This rank's PreMulSum scalar for a chunk: a device scalar is copied into
 * scal[me] on the stream; an immediate one is written by the step. */
static CUresult es_host_scalar(es_comm_t *c, es_step_t *st, int set, const es_premul_t *pm,
                               int dtype, CUstream s)
{
    if (pm->on_device)
        return es_dtoh(es_h_scal(c, c->rank, set), DPTR(pm->dev), es_coll_type_size(dtype), s);
    es_host_red_t *box = calloc(1, sizeof(*box));
    if (!box)
        return CUDA_ERROR_OUT_OF_MEMORY;
    box->out = es_h_scal(c, c->rank, set);
    es_action_t a = { .kind = ES_A_PUBLISH_SCALAR, .a = pm->value, .red = box };
    if (es_step_add(st, &a) < 0) {
        free(box);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult es_host_coll(es_comm_t *c, const es_coll_op_t *op, int rop, const es_premul_t *pm,
                             CUstream s)
{
    const int n = c->nranks, me = c->rank;
    const size_t es = es_coll_type_size(op->dtype);
    const char *send = op->send;
    char *recv = op->recv;
    size_t total = op->count, per;
    CUresult r = CUDA_SUCCESS;
    int kind = op->kind;

    if (kind == ES_OP_REDUCESCATTER)
        per = c->chunk / (size_t)n / es;
    else
        per = c->chunk / es;
    if (per == 0)
        per = 1;
    for (size_t off = 0; off < total && r == CUDA_SUCCESS; off += per) {
        size_t m = total - off < per ? total - off : per;
        size_t bytes = m * es;
        /* The staging set: an all-reduce or reduce chunk reads its set's
         * inputs only between its two barriers, and its outputs are read
         * (copied out) before the next chunk's first barrier, so the chunk
         * after it may use the same set (fewer bytes in the caches); after
         * a broadcast, all-gather or reduce-scatter chunk, whose readers
         * may still be reading when their rank passed its one barrier,
         * the next chunk takes the other set. */
        int set = (int)(c->nchunks & 1);
        if (kind != ES_OP_ALLREDUCE && kind != ES_OP_REDUCE)
            c->nchunks++;
        uint64_t b = c->bar;
        int last = off + m >= total;
        es_step_t *st = es_step_new(c);
        if (!st)
            return CUDA_ERROR_OUT_OF_MEMORY;
        switch (kind) {
        case ES_OP_ALLREDUCE:
        case ES_OP_REDUCE: {
            r = es_dtoh(es_h_in(c, me, set), DPTR(send) + off * es, bytes, s);
            if (r == CUDA_SUCCESS && rop == ES_RO_PREMUL)
                r = es_host_scalar(c, st, set, pm, op->dtype, s);
            size_t lo, hi;
            es_coll_shard(m, es, me, n, &lo, &hi);
            es_action_t b1 = { .kind = ES_A_BARRIER, .a = b + 1 };
            es_action_t b2 = { .kind = ES_A_BARRIER, .a = b + 2 };
            es_step_add(st, &b1);
            if (es_add_reduce(st, c, set, 0, lo, hi, es_h_out(c, set) + lo * es, op->dtype, rop) < 0)
                r = CUDA_ERROR_OUT_OF_MEMORY;
            es_step_add(st, &b2);
            c->bar += 2;
            if (last && es_coll_counts_step(kind, op->dtype)) {
                es_action_t d = { .kind = ES_A_DONE_ALLREDUCE };
                es_step_add(st, &d);
            }
            if (r == CUDA_SUCCESS)
                r = es_step_launch(st, s);
            else
                es_step_launch(st, s);
            st = NULL;
            if (r == CUDA_SUCCESS && (kind == ES_OP_ALLREDUCE || me == op->root))
                r = es_htod(DPTR(recv) + off * es, es_h_out(c, set), bytes, s);
            break;
        }
        case ES_OP_BROADCAST: {
            if (me == op->root)
                r = es_dtoh(es_h_in(c, op->root, set), DPTR(send) + off * es, bytes, s);
            es_action_t b1 = { .kind = ES_A_BARRIER, .a = b + 1 };
            es_step_add(st, &b1);
            c->bar += 1;
            CUresult r2 = es_step_launch(st, s);
            st = NULL;
            if (r == CUDA_SUCCESS)
                r = r2;
            if (r == CUDA_SUCCESS)
                r = es_htod(DPTR(recv) + off * es, es_h_in(c, op->root, set), bytes, s);
            break;
        }
        case ES_OP_ALLGATHER: {
            r = es_dtoh(es_h_in(c, me, set), DPTR(send) + off * es, bytes, s);
            es_action_t b1 = { .kind = ES_A_BARRIER, .a = b + 1 };
            es_step_add(st, &b1);
            c->bar += 1;
            CUresult r2 = es_step_launch(st, s);
            st = NULL;
            if (r == CUDA_SUCCESS)
                r = r2;
            for (int q = 0; q < n && r == CUDA_SUCCESS; q++)
                r = es_htod(DPTR(recv) + ((size_t)q * total + off) * es, es_h_in(c, q, set), bytes, s);
            break;
        }
        case ES_OP_REDUCESCATTER: {
            /* piece q of my staging: block q's chunk of my input */
            CUDA_MEMCPY2D cp;
            memset(&cp, 0, sizeof(cp));
            cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
            cp.srcDevice = DPTR(send) + off * es;
            cp.srcPitch = total * es;
            cp.dstMemoryType = CU_MEMORYTYPE_HOST;
            cp.dstHost = es_h_in(c, me, set);
            cp.dstPitch = per * es;
            cp.WidthInBytes = bytes;
            cp.Height = (size_t)n;
            r = es_dtoh_2d(&cp, s);
            if (r == CUDA_SUCCESS && rop == ES_RO_PREMUL)
                r = es_host_scalar(c, st, set, pm, op->dtype, s);
            es_action_t b1 = { .kind = ES_A_BARRIER, .a = b + 1 };
            es_step_add(st, &b1);
            c->bar += 1;
            char *mine = es_h_out(c, set) + (size_t)me * per * es;
            if (es_add_reduce(st, c, set, (size_t)me * per * es, 0, m, mine, op->dtype, rop) < 0)
                r = CUDA_ERROR_OUT_OF_MEMORY;
            CUresult r2 = es_step_launch(st, s);
            st = NULL;
            if (r == CUDA_SUCCESS)
                r = r2;
            if (r == CUDA_SUCCESS)
                r = es_htod(DPTR(recv) + off * es, mine, bytes, s);
            break;
        }
        default:
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if (st)
            es_step_launch(st, s);
    }
    return r;
}

/* ---- point to point ---------------------------------------------------------------- */

static CUresult es_host_p2p_in(es_comm_t *c, const es_p2p_t *o, uint64_t k, size_t off,
                               size_t bytes, CUstream s)
{
    return es_dtoh(es_h_p2p(c, c->rank, o->peer, k), DPTR(o->buf) + off, bytes, s);
}

static CUresult es_host_p2p_out(es_comm_t *c, const es_p2p_t *o, uint64_t k, size_t off,
                                size_t bytes, CUstream s)
{
    return es_htod(DPTR(o->buf) + off, es_h_p2p(c, o->peer, c->rank, k), bytes, s);
}

static CUresult es_host_p2p(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s)
{
    return es_p2p_rounds(c, ops, n, s, es_host_p2p_in, es_host_p2p_out);
}

const es_tp_t es_tp_host = {
    .name = "host",
    .setup = es_host_setup,
    .teardown = es_host_teardown,
    .coll = es_host_coll,
    .p2p = es_host_p2p,
};
